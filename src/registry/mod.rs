//! The lease registry: a pure state machine.
//!
//! No I/O and no clock: every operation that needs the time takes `now` (in
//! seconds) as an argument, so the rules of the contract can be tested in
//! microseconds. The core owns one `Registry` and feeds it commands.
//!
//! The leases themselves are kept in a `table::LeaseTable`, which finds
//! them by run, by fencing token and by expiry. `HEARTBEAT` and `RELEASE`
//! name a lease by its id and token only, and a lease id cannot be split
//! back into run and worker (both may contain `:`): tokens are unique, so
//! the token finds the lease and the whole id is then compared.
//!
//! Commands reach it as an [`Op`] through [`Registry::apply`], with the
//! server's clock passed in: the one deterministic entry point that the
//! single node's core task calls, and that a replicated state machine can
//! call with a leader's time. The same ops at the same clocks give the
//! same replies, the same state and the same [`Change`]s, however they
//! are batched.
//!
//! Retention: an expired lease that nobody took over stays releasable while
//! `time < expires_at + retention`; after that it is gone. Lookups treat
//! such a lease as absent without touching it (a read never writes), and
//! [`Op::Reclaim`] removes them a bounded number at a time, earliest
//! first, so memory follows the live working set.
//!
//! Every change of state, registry time included, is also recorded as a
//! [`Change`] (when recording is on), for the append-only log.
//!
//! Tokens are issued one after another up to [`MAX_TOKEN`]; keeping them
//! durable (the ceiling reserved on disk) is the caller's job.

mod arena;
mod change;
mod data;
mod events;
mod health;
mod history;
mod index;
mod op;
mod runs;
mod seconds;
mod table;

pub use change::{Change, LeaseRecord};
pub use data::RunData;
pub use events::{Event, EventKind};
pub use health::{Health, Refused, SLACK_BOUNDS, TenureEnd};
pub use history::{PastTenure, Tenure};
pub use index::Retired;
pub use op::{IdKind, Op, Outcome};
pub use runs::RunRecord;
pub use seconds::Seconds;

use bytes::Bytes;

use table::{LeaseTable, NewLease, Slot};

/// A lease as the registry reports it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Lease {
    pub run_id: Bytes,
    pub worker_id: Bytes,
    pub fencing_token: u64,
    pub expires_at: f64,
}

impl Lease {
    /// `"{run_id}:{worker_id}:{fencing_token}"`, built on demand: the
    /// registry never stores it.
    pub fn lease_id(&self) -> Vec<u8> {
        let mut token = itoa::Buffer::new();
        let token = token.format(self.fencing_token).as_bytes();
        let mut id = Vec::with_capacity(self.run_id.len() + self.worker_id.len() + token.len() + 2);
        id.extend_from_slice(&self.run_id);
        id.push(b':');
        id.extend_from_slice(&self.worker_id);
        id.push(b':');
        id.extend_from_slice(token);
        id
    }
}

/// A run's lease as the keyspace view reads it ([`Op::Inspect`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KeyState {
    pub lease: Lease,
    /// Whether it has expired at `at`.
    pub expired: bool,
    /// The time it was read at: the server's clock, or registry time if
    /// that is later.
    pub at: f64,
    /// The bytes the registry keeps for it: its slot, its ids' heap block
    /// when they do not fit in the slot, and its entries in the run and
    /// token indexes.
    pub memory: usize,
}

/// An acquire found the run free but every token up to [`MAX_TOKEN`] has
/// been issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokensExhausted;

/// Tenures kept per run unless told otherwise (`lease-history-len`).
pub const DEFAULT_HISTORY_LEN: usize = 8;

/// The largest fencing token: tokens travel as RESP integers (i64).
pub const MAX_TOKEN: u64 = i64::MAX as u64;

#[derive(Debug)]
pub struct Registry {
    leases: LeaseTable,
    /// What runs keep beyond their current lease, with its own lifetime:
    /// data and past tenures (see `runs`).
    runs: runs::RunStore,
    /// Tenures kept per run for `LEASE.HISTORY` (0: none).
    history_len: usize,
    /// The last fencing token issued (0 before the first).
    last_token: u64,
    /// Registry time: the latest `now` seen. Starts below every finite time.
    time: f64,
    /// TTL in seconds of leases acquired without a `TTL` option.
    default_ttl: f64,
    /// Lock delay in seconds of leases acquired without a `LOCKDELAY`
    /// option.
    default_lock_delay: f64,
    /// Seconds an expired lease stays releasable; infinite keeps it forever.
    retention: f64,
    /// Changes since the last [`Registry::take_changes`], if recording.
    changes: Vec<Change>,
    recording: bool,
    /// Events since the last [`Registry::take_events`], while emitting.
    events: Vec<Event>,
    emitting: bool,
    /// Every expiry up to this time has been announced as an event.
    announced: f64,
    /// How heartbeats and tenures fared: figures, not state.
    health: Health,
}

impl Registry {
    /// An empty registry whose next token is `last_token + 1`. It keeps
    /// expired leases forever (see [`Registry::set_retention`]) and does not
    /// record changes.
    pub fn new(default_ttl: f64, last_token: u64) -> Registry {
        Registry {
            leases: LeaseTable::default(),
            runs: runs::RunStore::default(),
            history_len: DEFAULT_HISTORY_LEN,
            last_token,
            time: f64::NEG_INFINITY,
            default_ttl,
            default_lock_delay: 0.0,
            retention: f64::INFINITY,
            changes: Vec::new(),
            recording: false,
            events: Vec::new(),
            emitting: false,
            announced: f64::NEG_INFINITY,
            health: Health::default(),
        }
    }

    /// The lock delay of later acquires without a `LOCKDELAY` option.
    pub fn set_default_lock_delay(&mut self, seconds: f64) {
        self.default_lock_delay = seconds;
    }

    /// The TTL of later acquires without a `TTL` option; leases already
    /// held keep theirs.
    pub fn set_default_ttl(&mut self, seconds: f64) {
        self.default_ttl = seconds;
    }

    /// How long expired leases stay releasable, in seconds; 0 or infinity
    /// keeps them forever (the `lease-retention` directive's meaning of 0).
    pub fn set_retention(&mut self, seconds: f64) {
        self.retention = if seconds > 0.0 {
            seconds
        } else {
            f64::INFINITY
        };
    }

    /// Whether changes are recorded for [`Registry::take_changes`].
    pub fn set_recording(&mut self, recording: bool) {
        self.recording = recording;
        if !recording {
            self.changes.clear();
        }
    }

    /// The changes made since the last call, oldest first.
    pub fn take_changes(&mut self) -> std::vec::Drain<'_, Change> {
        self.changes.drain(..)
    }

    /// Advances registry time to `now` if it is later (a recorded change),
    /// and returns the time to evaluate at: a lagging clock is read as the
    /// latest time seen.
    pub fn advance_time(&mut self, now: f64) -> f64 {
        if now > self.time {
            self.time = now;
            self.record(|| Change::Time(now));
            // Registry time passing an expiry announces it, as the clock does.
            self.announce_expired(now);
        }
        self.time
    }

    /// The time a read evaluates at: an explicit `now` moves registry time
    /// as any command's does; without one the server's `clock` is read, as
    /// `max(clock, registry time)`, and nothing changes.
    fn read_time(&mut self, now: Option<f64>, clock: f64) -> f64 {
        match now {
            Some(now) => self.advance_time(now),
            None => clock.max(self.time),
        }
    }

    /// Registry time, or negative infinity before any `now` was seen.
    pub fn time(&self) -> f64 {
        self.time
    }

    /// The TTL of leases acquired without a `TTL` option.
    pub fn default_ttl(&self) -> f64 {
        self.default_ttl
    }

    pub fn last_token(&self) -> u64 {
        self.last_token
    }

    /// Seconds an expired lease stays releasable (infinite: forever).
    pub fn retention(&self) -> f64 {
        self.retention
    }

    /// The number of leases held, active or expired (those past retention
    /// count until they are reclaimed).
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Leases held whose `expires_at` has passed.
    pub fn expired_count(&self) -> usize {
        self.leases.count_expired(self.time)
    }

    /// Index tables the lease table has outgrown or shrunk out of, for the
    /// caller to free where it likes (see [`Retired`]).
    pub fn take_retired(&mut self) -> Retired {
        self.leases.take_retired()
    }

    /// Takes a lease on `run_id` if it has none or its lease has expired
    /// (and its lock delay has passed), with the default lock delay.
    /// `Ok(None)` when the run is held; a failed acquire issues no token.
    pub fn acquire(
        &mut self,
        run_id: &[u8],
        worker_id: &[u8],
        now: f64,
        ttl: Option<f64>,
    ) -> Result<Option<Lease>, TokensExhausted> {
        self.acquire_with(run_id, worker_id, now, ttl, None)
    }

    /// [`Registry::acquire`] with a lock delay of its own (`None`: the
    /// default): after the new lease *expires*, the run stays closed until
    /// `expires_at + lock_delay`; a release frees it at once.
    pub fn acquire_with(
        &mut self,
        run_id: &[u8],
        worker_id: &[u8],
        now: f64,
        ttl: Option<f64>,
        lock_delay: Option<f64>,
    ) -> Result<Option<Lease>, TokensExhausted> {
        let now = self.advance_time(now);
        let previous = self.leases.find_run(run_id);
        if let Some(slot) = previous
            && self.closed(slot, now)
        {
            if self.leases.get(slot).expires_at <= now {
                self.health.lock_delayed += 1;
            }
            return Ok(None);
        }
        let fencing_token = self.next_token()?;
        if let Some(slot) = previous {
            self.health.end(TenureEnd::Expired);
            self.emit_if_expired(slot, now);
        }
        // The run's data and history stay with the run, unless its last
        // lease or the release of it is past retention: then they went
        // with the lease.
        match previous {
            Some(slot) if self.past_retention(slot) => {
                self.forget_run(run_id);
                // Gone before the new lease comes, as replay must see it:
                // no tenure of it joins the history.
                let old = self.leases.get(slot).fencing_token;
                self.record(|| Change::Remove { fencing_token: old });
            }
            Some(slot) => {
                let expired_at = self.leases.get(slot).expires_at;
                self.end_tenure(slot, TenureEnd::Expired, expired_at);
            }
            None => self.adopt_run(run_id),
        }
        let lease = NewLease {
            worker_id,
            fencing_token,
            expires_at: now + ttl.unwrap_or(self.default_ttl),
            ttl: ttl.unwrap_or(self.default_ttl),
            lock_delay: lock_delay.unwrap_or(self.default_lock_delay),
            acquired_at: now,
        };
        let slot = match previous {
            Some(slot) => {
                self.leases.replace(slot, &lease);
                slot
            }
            None => self.leases.insert(run_id, &lease),
        };
        self.record_put(run_id, &lease);
        self.emit(EventKind::Acquired, slot);
        if lease.expires_at <= self.announced {
            // Taken on a clock behind the server's: already expired there.
            self.emit(EventKind::Expired, slot);
        }
        Ok(Some(Lease {
            run_id: Bytes::copy_from_slice(run_id),
            worker_id: Bytes::copy_from_slice(worker_id),
            fencing_token,
            expires_at: lease.expires_at,
        }))
    }

    /// Whether the lease in `slot` keeps its run from being acquired at
    /// `now`: it has not expired, or its lock delay has not passed since
    /// (a lease past retention is gone, lock delay or not).
    fn closed(&self, slot: u32, now: f64) -> bool {
        let expires_at = self.leases.get(slot).expires_at;
        let lock_delay = self.leases.lock_delay(slot);
        expires_at > now || (now < expires_at + lock_delay && !self.past_retention(slot))
    }

    fn record_put(&mut self, run_id: &[u8], lease: &NewLease) {
        if !self.recording {
            return;
        }
        self.changes.push(Change::Put {
            run_id: Bytes::copy_from_slice(run_id),
            worker_id: Bytes::copy_from_slice(lease.worker_id),
            fencing_token: lease.fencing_token,
            expires_at: lease.expires_at,
            ttl: lease.ttl,
            acquired_at: Some(lease.acquired_at),
            heartbeats: 0,
        });
        if lease.lock_delay > 0.0 {
            self.changes.push(Change::LockDelay {
                fencing_token: lease.fencing_token,
                lock_delay: lease.lock_delay,
            });
        }
    }

    /// When the run's current lease stops keeping it closed: its
    /// `expires_at` plus its lock delay; `None` when the run is free.
    pub fn free_at(&self, run_id: &[u8]) -> Option<f64> {
        let slot = self.current_by_run(run_id)?;
        Some(self.leases.get(slot).expires_at + self.leases.lock_delay(slot))
    }

    /// Whether an acquire of `run_id` would need memory the registry has
    /// not yet allocated: the run has no slot (a takeover reuses its
    /// run's) and every allocated slot is taken (after releases and
    /// reclaims, new runs reuse the slots they left).
    pub fn would_grow(&self, run_id: &[u8]) -> bool {
        !self.leases.has_room() && self.leases.find_run(run_id).is_none()
    }

    /// Extends the current, unexpired lease with this id and token by its
    /// TTL from `now`. Never revives an expired lease.
    pub fn heartbeat(&mut self, lease_id: &[u8], fencing_token: u64, now: f64) -> bool {
        let now = self.advance_time(now);
        let named = self
            .current_by_token(fencing_token)
            .filter(|&slot| id_matches(lease_id, self.leases.get(slot)));
        let Some(slot) = named else {
            let why = if self.taken_over(lease_id, fencing_token) {
                Refused::TakenOver
            } else {
                Refused::Unknown
            };
            self.health.refuse(why);
            return false;
        };
        let entry = self.leases.get(slot);
        if entry.expires_at <= now {
            self.health.refuse(Refused::Expired);
            return false;
        }
        let slack = (entry.expires_at - now) / entry.ttl;
        self.health.slack.observe(slack);
        let expires_at = now + entry.ttl;
        let (acquired_at, heartbeats) = (entry.acquired_at, entry.heartbeats.saturating_add(1));
        self.leases.set_expiry(slot, expires_at);
        self.leases.set_tenure(slot, acquired_at, heartbeats);
        self.record(|| Change::Beat {
            fencing_token,
            expires_at,
            heartbeats,
        });
        true
    }

    /// Whether this lease is the run's current lease and has not expired.
    pub fn validate(
        &mut self,
        run_id: &[u8],
        lease_id: &[u8],
        fencing_token: u64,
        now: f64,
    ) -> bool {
        let now = self.advance_time(now);
        self.validate_at(run_id, lease_id, fencing_token, now)
    }

    /// [`Registry::validate`] at `now`, which must not be before registry
    /// time; time does not move.
    fn validate_at(&self, run_id: &[u8], lease_id: &[u8], fencing_token: u64, now: f64) -> bool {
        self.current_by_run(run_id).is_some_and(|slot| {
            let entry = self.leases.get(slot);
            entry.fencing_token == fencing_token
                && id_matches(lease_id, entry)
                && entry.expires_at > now
        })
    }

    /// Removes the lease if it is still its run's current lease, expired or
    /// not (within retention). Carries no `now`, so time does not move.
    pub fn release(&mut self, lease_id: &[u8], fencing_token: u64) -> bool {
        self.release_at(lease_id, fencing_token, self.time)
    }

    /// [`Registry::release`] at the server's `clock`, which only decides
    /// whether an `expired` event is due first.
    pub(super) fn release_at(&mut self, lease_id: &[u8], fencing_token: u64, clock: f64) -> bool {
        let Some(slot) = self.current_by_token(fencing_token) else {
            return false;
        };
        if !id_matches(lease_id, self.leases.get(slot)) {
            return false;
        }
        let at = clock.max(self.time);
        self.health.end(self.release_end(slot, at));
        self.emit_if_expired(slot, at);
        self.emit(EventKind::Released, slot);
        self.end_release(slot, at);
        self.record(|| Change::Release { fencing_token, at });
        true
    }

    /// The lease in `slot` is released at `at`: its tenure ends, its run's
    /// data and history stay until `retention` after `at` (unless the run
    /// is acquired again), and the lease is gone. Live and in replay.
    fn end_release(&mut self, slot: u32, at: f64) {
        self.end_tenure(slot, self.release_end(slot, at), at);
        let run_id = Bytes::copy_from_slice(self.leases.get(slot).run_id());
        self.runs.orphan(&run_id, at);
        self.leases.remove(slot);
    }

    /// How a release at `at` ends the tenure of the lease in `slot`: late
    /// once its `expires_at` has passed.
    fn release_end(&self, slot: u32, at: f64) -> TenureEnd {
        if self.leases.get(slot).expires_at <= at {
            TenureEnd::ReleasedLate
        } else {
            TenureEnd::Released
        }
    }

    /// The run's current lease and whether it has expired at `now`.
    pub fn get(&mut self, run_id: &[u8], now: f64) -> Option<(Lease, bool)> {
        let now = self.advance_time(now);
        self.get_at(run_id, now)
    }

    /// [`Registry::get`] at `now`, which must not be before registry time;
    /// time does not move.
    fn get_at(&self, run_id: &[u8], now: f64) -> Option<(Lease, bool)> {
        let slot = self.current_by_run(run_id)?;
        let entry = self.leases.get(slot);
        Some((to_lease(entry), entry.expires_at <= now))
    }

    /// The run's lease as the keyspace view reads it at `at`.
    fn key_state(&self, run_id: &[u8], at: f64) -> Option<KeyState> {
        let slot = self.current_by_run(run_id)?;
        let entry = self.leases.get(slot);
        Some(KeyState {
            lease: to_lease(entry),
            expired: entry.expires_at <= at,
            at,
            memory: entry.footprint(),
        })
    }

    /// A run that holds a lease: the first from slot `seed % bound` on,
    /// wrapping round; `None` when no lease is held.
    fn random_run(&self, seed: u64) -> Option<Bytes> {
        let bound = self.leases.bound();
        if bound == 0 {
            return None;
        }
        let start = (seed % bound as u64) as usize;
        (start..bound).chain(0..start).find_map(|slot| {
            let entry = self.leases.at(slot)?;
            (!self.past_retention(slot as u32)).then(|| Bytes::copy_from_slice(entry.run_id()))
        })
    }

    /// Whether some lease's retention has run out, so [`Registry::reclaim`]
    /// has work.
    pub fn reclaim_due(&self) -> bool {
        self.leases
            .earliest()
            .is_some_and(|(second, _)| self.second_due(second))
            || self.orphan_due()
    }

    /// Removes up to `max` leases whose retention has run out, earliest
    /// first, each a logged change, then, in what is left of `max`, run
    /// data orphaned `retention` ago; returns how many leases (INFO's
    /// `leases_reclaimed` and `expired_keys` count leases, not data).
    pub fn reclaim(&mut self, max: usize) -> usize {
        let mut done = 0;
        while done < max {
            let Some((second, slot)) = self.leases.earliest() else {
                break;
            };
            // A whole second at a time: every lease expiring in it is due
            // once the second plus retention has passed. Until then the
            // lookups treat those already past retention as gone.
            if !self.second_due(second) {
                break;
            }
            self.reclaim_slot(slot);
            done += 1;
        }
        let leases = done;
        while done < max && self.sweep_orphan() {
            done += 1;
        }
        leases
    }

    fn second_due(&self, second: i64) -> bool {
        self.leases.second_end(second) + self.retention <= self.time
    }

    /// Whether the lease in `slot` is past retention at registry time.
    fn past_retention(&self, slot: u32) -> bool {
        self.leases.get(slot).expires_at + self.retention <= self.time
    }

    fn reclaim_slot(&mut self, slot: u32) {
        let fencing_token = self.leases.get(slot).fencing_token;
        self.health.end(TenureEnd::Expired);
        self.emit_if_expired(slot, self.time);
        self.emit(EventKind::Reclaimed, slot);
        // An expired lease takes its run's data and history with it; their
        // record goes first, so that a log cut between the two leaves no
        // data without a lease.
        let run_id = Bytes::copy_from_slice(self.leases.get(slot).run_id());
        self.forget_run(&run_id);
        self.leases.remove(slot);
        self.record(|| Change::Remove { fencing_token });
    }

    /// The run's lease, unless its retention has run out: such a lease is
    /// gone, whether or not [`Registry::reclaim`] has reached it yet.
    fn current_by_run(&self, run_id: &[u8]) -> Option<u32> {
        let slot = self.leases.find_run(run_id)?;
        (!self.past_retention(slot)).then_some(slot)
    }

    fn current_by_token(&self, fencing_token: u64) -> Option<u32> {
        let slot = self.leases.find_token(fencing_token)?;
        (!self.past_retention(slot)).then_some(slot)
    }

    /// The leases in slots `from..`, visiting at most `max` slots; returns
    /// where to continue, or `None` after the last slot. Slots keep their
    /// leases while they live, so a walk spread over many calls sees every
    /// lease that was there throughout it.
    pub fn snapshot(
        &self,
        from: usize,
        max: usize,
        mut visit: impl FnMut(LeaseRecord<'_>),
    ) -> Option<usize> {
        let end = from.saturating_add(max).min(self.leases.bound());
        for slot in from..end {
            if let Some(entry) = self.leases.at(slot) {
                visit(LeaseRecord {
                    run_id: entry.run_id(),
                    worker_id: entry.worker_id(),
                    fencing_token: entry.fencing_token,
                    expires_at: entry.expires_at,
                    ttl: entry.ttl,
                    lock_delay: self.leases.lock_delay(slot as u32),
                    acquired_at: entry.acquired_at,
                    heartbeats: entry.heartbeats,
                });
            }
        }
        (end < self.leases.bound()).then_some(end)
    }

    /// `LEASE.SCAN`'s walk: the run ids of the leases in slots `from..`,
    /// until `count` leases were seen or `10 * count` slots visited (so a
    /// call on a sparse table stays short); returns where to continue, or
    /// `None` after the last slot. Leases past retention are gone, reclaimed
    /// yet or not, and are skipped. A lease keeps its slot while it lives,
    /// so a walk spread over many calls sees every lease that was there
    /// throughout it, exactly once.
    pub fn scan(&self, from: usize, count: usize, mut visit: impl FnMut(&[u8])) -> Option<usize> {
        let bound = self.leases.bound();
        let last = from.saturating_add(count.saturating_mul(10)).min(bound);
        let mut seen = 0;
        let mut slot = from;
        while slot < last && seen < count {
            if let Some(entry) = self.leases.at(slot)
                && !self.past_retention(slot as u32)
            {
                visit(entry.run_id());
                seen += 1;
            }
            slot += 1;
        }
        (slot < bound).then_some(slot)
    }

    fn next_token(&mut self) -> Result<u64, TokensExhausted> {
        if self.last_token >= MAX_TOKEN {
            return Err(TokensExhausted);
        }
        self.last_token += 1;
        Ok(self.last_token)
    }

    fn record(&mut self, change: impl FnOnce() -> Change) {
        if self.recording {
            self.changes.push(change());
        }
    }
}

fn to_lease(entry: &Slot) -> Lease {
    Lease {
        run_id: Bytes::copy_from_slice(entry.run_id()),
        worker_id: Bytes::copy_from_slice(entry.worker_id()),
        fencing_token: entry.fencing_token,
        expires_at: entry.expires_at,
    }
}

/// Whether `lease_id` is exactly `run_id:worker_id:token` of this lease,
/// compared piece by piece without building the id.
fn id_matches(lease_id: &[u8], entry: &Slot) -> bool {
    let mut token = itoa::Buffer::new();
    let token = token.format(entry.fencing_token).as_bytes();
    let (run_id, worker_id) = (entry.run_id(), entry.worker_id());
    let expected_len = run_id.len() + worker_id.len() + token.len() + 2;
    if lease_id.len() != expected_len {
        return false;
    }
    let (run_part, rest) = lease_id.split_at(run_id.len());
    let (worker_part, token_part) = rest[1..].split_at(worker_id.len());
    run_part == run_id
        && rest[0] == b':'
        && worker_part == worker_id
        && token_part[0] == b':'
        && &token_part[1..] == token
}

#[cfg(any(test, feature = "fuzzing"))]
pub mod model;
#[cfg(test)]
mod tests;
