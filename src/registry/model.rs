//! The registry's reference model, written from the contract rather than
//! from the registry: every lease ever issued in a Vec, found by linear
//! scans. The property tests and the `registry_model` fuzz target run
//! the same ops through both and compare. Compiled for tests and with the
//! `fuzzing` feature only.

use bytes::Bytes;

use std::collections::BTreeMap;

use super::{
    DEFAULT_HISTORY_LEN, Lease, MAX_TOKEN, Op, Outcome, Registry, RunData, Tenure, TenureEnd,
};

#[derive(Clone, Debug)]
pub struct ModelLease {
    pub run: Vec<u8>,
    pub worker: Vec<u8>,
    pub token: u64,
    pub expires_at: f64,
    pub ttl: f64,
    /// After it expires, the run stays closed this long.
    pub lock_delay: f64,
    /// Neither released nor taken over.
    pub current: bool,
    pub acquired_at: f64,
    pub heartbeats: u32,
    /// How and when it ended: released, or taken over after it expired.
    pub ended: Option<(TenureEnd, f64)>,
}

impl ModelLease {
    pub fn id(&self) -> Vec<u8> {
        [
            &self.run[..],
            b":",
            &self.worker[..],
            b":",
            self.token.to_string().as_bytes(),
        ]
        .concat()
    }

    pub fn lease(&self) -> Lease {
        Lease {
            run_id: Bytes::copy_from_slice(&self.run),
            worker_id: Bytes::copy_from_slice(&self.worker),
            fencing_token: self.token,
            expires_at: self.expires_at,
        }
    }
}

/// Every lease ever issued, oldest first, lease ids built whole and
/// compared whole, time as a plain max.
#[derive(Clone, Debug)]
pub struct Model {
    /// Every lease ever issued, oldest first.
    pub issued: Vec<ModelLease>,
    pub last_token: u64,
    pub time: f64,
    pub default_ttl: f64,
    pub default_lock_delay: f64,
    /// Seconds an expired lease stays; infinite keeps it forever.
    pub retention: f64,
    /// Heartbeats refused: expired, taken over, unknown.
    pub refused: [u64; 3],
    /// Run data by run, and when the run's last lease was released while
    /// it has none.
    pub data: BTreeMap<Vec<u8>, (RunData, Option<f64>)>,
    /// Tenures `LEASE.HISTORY` shows per run (0: none).
    pub history_len: usize,
    /// Per run, the first token its history still has: those before went
    /// with a lease past retention or a release `retention` ago.
    pub history_from: BTreeMap<Vec<u8>, u64>,
    /// When each run's last lease was released, while it has none.
    pub released_at: BTreeMap<Vec<u8>, f64>,
}

impl Model {
    pub fn new(default_ttl: f64, last_token: u64) -> Model {
        Model {
            issued: Vec::new(),
            last_token,
            time: f64::NEG_INFINITY,
            default_ttl,
            default_lock_delay: 0.0,
            retention: f64::INFINITY,
            refused: [0; 3],
            data: BTreeMap::new(),
            history_len: DEFAULT_HISTORY_LEN,
            history_from: BTreeMap::new(),
            released_at: BTreeMap::new(),
        }
    }

    pub fn current_count(&self) -> usize {
        self.issued.iter().filter(|l| l.current).count()
    }

    /// Moves time on; a lease whose retention has run out is gone, and
    /// its run's data with it; data released `retention` ago is gone.
    pub fn see(&mut self, now: f64) -> f64 {
        self.time = self.time.max(now);
        let time = self.time;
        let retention = self.retention;
        for lease in &mut self.issued {
            if lease.current && lease.expires_at + retention <= time {
                lease.current = false;
                self.data.remove(&lease.run);
                self.history_from.insert(lease.run.clone(), lease.token + 1);
            }
        }
        self.data
            .retain(|_, (_, released)| released.is_none_or(|released| released + retention > time));
        let next = self.last_token + 1;
        self.released_at.retain(|run, released| {
            let kept = *released + retention > time;
            if !kept {
                self.history_from.insert(run.clone(), next);
            }
            kept
        });
        self.time
    }

    /// The run's data as a read at `at` sees it.
    fn data_at(&self, run: &[u8], at: f64) -> Option<RunData> {
        let (data, released) = self.data.get(run)?;
        let gone = match released {
            Some(released) => released + self.retention <= at,
            None => self
                .current_of(run)
                .is_none_or(|i| self.issued[i].expires_at + self.retention <= at),
        };
        (!gone).then(|| data.clone())
    }

    /// The run's tenures as `LEASE.HISTORY` reads them at `at`.
    fn history_at(&self, run: &[u8], count: usize, at: f64) -> Vec<Tenure> {
        let retention = self.retention;
        let gone = match self.current_of(run) {
            Some(i) => self.issued[i].expires_at + retention <= at,
            None => self
                .released_at
                .get(run)
                .is_none_or(|released| released + retention <= at),
        };
        if gone {
            return Vec::new();
        }
        let from = self.history_from.get(run).copied().unwrap_or(0);
        self.issued
            .iter()
            .rev()
            .filter(|l| l.run == run && l.token >= from && (l.current || l.ended.is_some()))
            .take(count.min(self.history_len))
            .map(|l| {
                let ended = l
                    .ended
                    .or((l.expires_at <= at).then_some((TenureEnd::Expired, l.expires_at)));
                Tenure {
                    lease_id: Bytes::from(l.id()),
                    worker_id: Bytes::copy_from_slice(&l.worker),
                    fencing_token: l.token,
                    acquired_at: l.acquired_at,
                    expires_at: l.expires_at,
                    ended_at: ended.map(|(_, at)| at),
                    end: ended.map(|(end, _)| end),
                    heartbeats: l.heartbeats,
                }
            })
            .collect()
    }

    /// The time a read evaluates at: an explicit `now` is seen as any
    /// command's; otherwise the clock or registry time, whichever is later,
    /// and nothing changes.
    fn read_at(&mut self, now: Option<f64>, clock: f64) -> f64 {
        match now {
            Some(now) => self.see(now),
            None => clock.max(self.time),
        }
    }

    /// The run's current lease.
    pub fn current_of(&self, run: &[u8]) -> Option<usize> {
        let found: Vec<usize> = (0..self.issued.len())
            .filter(|&i| self.issued[i].current && self.issued[i].run == run)
            .collect();
        assert!(found.len() <= 1, "model bug: two current leases");
        found.first().copied()
    }

    /// The current lease whose whole id and token are these.
    pub fn named(&self, lease_id: &[u8], token: u64) -> Option<usize> {
        (0..self.issued.len()).find(|&i| {
            let l = &self.issued[i];
            l.current && l.token == token && l.id() == lease_id
        })
    }

    /// Whether `lease_id` reads as `run:<anything>:token` for a run whose
    /// current lease is newer than `token`.
    fn taken_over(&self, lease_id: &[u8], token: u64) -> bool {
        let tail = format!(":{token}").into_bytes();
        self.issued.iter().any(|l| {
            let head = [&l.run[..], b":"].concat();
            l.current
                && l.token > token
                && lease_id.len() >= head.len() + tail.len()
                && lease_id.starts_with(&head)
                && lease_id.ends_with(&tail)
        })
    }

    /// The outcome of `op` at `clock`; `None` for the ops whose outcome
    /// depends on how the registry lays its leases out (scan, size,
    /// reclaim), which the model does not know.
    pub fn apply(&mut self, op: &Op, clock: f64) -> Option<Outcome> {
        Some(match op {
            Op::Acquire {
                run_id,
                worker_id,
                now,
                ttl,
                lock_delay,
                with_data,
            } => {
                let t = self.see(now.unwrap_or(clock));
                match self.acquire(run_id, worker_id, t, *ttl, *lock_delay) {
                    Outcome::Acquired(Some(lease)) if *with_data => {
                        let data = self.data_at(run_id, t);
                        Outcome::AcquiredData(Box::new((lease, data)))
                    }
                    outcome => outcome,
                }
            }
            Op::Heartbeat {
                lease_id,
                token,
                now,
            } => {
                let t = self.see(now.unwrap_or(clock));
                match self.named(lease_id, *token) {
                    Some(i) if self.issued[i].expires_at > t => {
                        self.issued[i].expires_at = t + self.issued[i].ttl;
                        self.issued[i].heartbeats += 1;
                        Outcome::Flag(true)
                    }
                    Some(_) => {
                        self.refused[0] += 1;
                        Outcome::Flag(false)
                    }
                    None => {
                        let why = if self.taken_over(lease_id, *token) {
                            1
                        } else {
                            2
                        };
                        self.refused[why] += 1;
                        Outcome::Flag(false)
                    }
                }
            }
            Op::Validate {
                run_id,
                lease_id,
                token,
                now,
            } => {
                let t = self.read_at(*now, clock);
                Outcome::Flag(self.issued.iter().any(|l| {
                    l.current
                        && l.run == run_id[..]
                        && l.token == *token
                        && l.id() == lease_id[..]
                        && l.expires_at > t
                }))
            }
            Op::Release { lease_id, token } => match self.named(lease_id, *token) {
                Some(i) => {
                    self.issued[i].current = false;
                    let released_at = clock.max(self.time);
                    let end = if self.issued[i].expires_at <= released_at {
                        TenureEnd::ReleasedLate
                    } else {
                        TenureEnd::Released
                    };
                    self.issued[i].ended = Some((end, released_at));
                    self.released_at
                        .insert(self.issued[i].run.clone(), released_at);
                    if let Some((_, released)) = self.data.get_mut(&self.issued[i].run) {
                        *released = Some(released_at);
                    }
                    Outcome::Flag(true)
                }
                _ => Outcome::Flag(false),
            },
            Op::SetData {
                lease_id,
                token,
                value,
                now,
            } => {
                let t = self.see(now.unwrap_or(clock));
                match self.named(lease_id, *token) {
                    Some(i) if self.issued[i].expires_at > t => {
                        let data = RunData {
                            value: value.clone(),
                            fencing_token: *token,
                            written_at: t,
                        };
                        self.data.insert(self.issued[i].run.clone(), (data, None));
                        Outcome::Flag(true)
                    }
                    _ => Outcome::Flag(false),
                }
            }
            Op::GetData { run_id } => Outcome::Data(self.data_at(run_id, clock.max(self.time))),
            Op::DelData { lease_id, token } => {
                let at = clock.max(self.time);
                match self.named(lease_id, *token) {
                    Some(i) if self.issued[i].expires_at > at => {
                        let run = self.issued[i].run.clone();
                        Outcome::Flag(self.data.remove(&run).is_some())
                    }
                    _ => Outcome::Flag(false),
                }
            }
            Op::Get { run_id, now } => {
                let t = self.read_at(*now, clock);
                Outcome::Got(self.current_of(run_id).map(|i| {
                    let l = &self.issued[i];
                    (l.lease(), l.expires_at <= t)
                }))
            }
            Op::History { run_id, count } => {
                Outcome::History(self.history_at(run_id, *count, clock.max(self.time)))
            }
            Op::Scan { .. }
            | Op::DbSize
            | Op::Inspect { .. }
            | Op::RandomRun { .. }
            | Op::Reclaim { .. }
            | Op::AnnounceExpired => {
                return None;
            }
        })
    }

    fn acquire(
        &mut self,
        run: &[u8],
        worker: &[u8],
        t: f64,
        ttl: Option<f64>,
        lock_delay: Option<f64>,
    ) -> Outcome {
        // A current lease keeps its run until it expires, and after an
        // expiry for its lock delay (a lease past retention is not current).
        let previous = self.current_of(run);
        if let Some(i) = previous
            && self.issued[i].expires_at + self.issued[i].lock_delay > t
        {
            return Outcome::Acquired(None);
        }
        if self.last_token >= MAX_TOKEN {
            return Outcome::TokensExhausted;
        }
        self.last_token += 1;
        if let Some(i) = previous {
            self.issued[i].current = false;
            self.issued[i].ended = Some((TenureEnd::Expired, self.issued[i].expires_at));
        }
        self.released_at.remove(run);
        // The run's data, if it is still there, is the new lease's.
        if let Some((_, released)) = self.data.get_mut(run) {
            *released = None;
        }
        let ttl = ttl.unwrap_or(self.default_ttl);
        let new = ModelLease {
            run: run.to_vec(),
            worker: worker.to_vec(),
            token: self.last_token,
            expires_at: t + ttl,
            ttl,
            lock_delay: lock_delay.unwrap_or(self.default_lock_delay),
            current: true,
            acquired_at: t,
            heartbeats: 0,
            ended: None,
        };
        let outcome = Outcome::Acquired(Some(new.lease()));
        self.issued.push(new);
        outcome
    }
}

/// How many leases the registry still holds past their retention.
pub fn past_retention(registry: &Registry) -> usize {
    let mut count = 0;
    let mut from = Some(0);
    while let Some(at) = from {
        from = registry.snapshot(at, 100, |e| {
            count += usize::from(e.expires_at + registry.retention <= registry.time());
        });
    }
    count
}

/// Compares what can be seen of a registry with the model after a step:
/// the number of leases and of expired ones, the last token and registry
/// time. Leases past retention count in the registry until a reclaim
/// reaches them, so they are left out of its figures.
pub fn check_state(registry: &Registry, model: &Model) -> Result<(), String> {
    let unswept = past_retention(registry);
    let expired = model
        .issued
        .iter()
        .filter(|l| l.current && l.expires_at <= model.time)
        .count();
    let figures = [
        (
            "leases",
            (registry.len() - unswept) as u64,
            model.current_count() as u64,
        ),
        (
            "expired leases",
            (registry.expired_count() - unswept) as u64,
            expired as u64,
        ),
        ("last token", registry.last_token(), model.last_token),
        (
            "heartbeats refused as expired",
            registry.health().refused[0],
            model.refused[0],
        ),
        (
            "heartbeats refused as taken over",
            registry.health().refused[1],
            model.refused[1],
        ),
        (
            "heartbeats refused as unknown",
            registry.health().refused[2],
            model.refused[2],
        ),
    ];
    if let Some((what, got, want)) = figures.iter().find(|(_, got, want)| got != want) {
        return Err(format!("{what}: registry {got}, model {want}"));
    }
    if registry.time() != model.time {
        return Err(format!(
            "time: registry {}, model {}",
            registry.time(),
            model.time
        ));
    }
    Ok(())
}

/// Runs and workers whose lease ids collide in interesting ways:
/// ("a:b", "c") and ("a", "b:c") both give "a:b:c:N", ("", ":") and
/// (":", "") both give ":::N", and ("a:b:c", "") gives "a:b:c::N".
pub const RUNS: [&[u8]; 6] = [b"a", b"a:b", b"", b":", b"a:b:c", b"run-1"];
pub const WORKERS: [&[u8]; 5] = [b"c", b"b:c", b"", b":", b"w"];

/// Applies `op` to both at `clock`; their outcomes must be equal (where the
/// model knows one), and a lease's id must be exactly `run:worker:token`.
pub fn step_both(
    registry: &mut Registry,
    model: &mut Model,
    op: &Op,
    clock: f64,
) -> Result<(), String> {
    let want = model.apply(op, clock);
    let got = registry.apply(op, clock);
    if want.as_ref().is_some_and(|want| *want != got) {
        return Err(format!(
            "{op:?} at {clock}: registry {got:?}, model {want:?}"
        ));
    }
    let lease = match &got {
        Outcome::Acquired(Some(lease)) | Outcome::Got(Some((lease, _))) => lease,
        Outcome::AcquiredData(acquired) => &acquired.0,
        _ => return Ok(()),
    };
    let id = [
        &lease.run_id[..],
        b":",
        &lease.worker_id[..],
        b":",
        lease.fencing_token.to_string().as_bytes(),
    ]
    .concat();
    if lease.lease_id() != id {
        return Err(format!("{op:?}: lease id {:?}", lease.lease_id()));
    }
    Ok(())
}

/// At the end: every run of [`RUNS`] has the same lease, data and history
/// in both, read at registry time without moving it.
pub fn check_runs(registry: &mut Registry, model: &mut Model) -> Result<(), String> {
    let clock = model.time;
    for run in RUNS {
        let history = Op::History {
            run_id: Bytes::from_static(run),
            count: usize::MAX,
        };
        let want = model.apply(&history, clock);
        let got = registry.apply(&history, clock);
        if Some(&got) != want.as_ref() {
            return Err(format!(
                "run {run:?} history: registry {got:?}, model {want:?}"
            ));
        }
        let get = Op::GetData {
            run_id: Bytes::from_static(run),
        };
        let want = model.apply(&get, clock);
        let got = registry.apply(&get, clock);
        if Some(&got) != want.as_ref() {
            return Err(format!(
                "run {run:?} data: registry {got:?}, model {want:?}"
            ));
        }
        let get = Op::Get {
            run_id: Bytes::from_static(run),
            now: None,
        };
        let want = model.apply(&get, clock);
        let got = registry.apply(&get, clock);
        if Some(&got) != want.as_ref() {
            return Err(format!("run {run:?}: registry {got:?}, model {want:?}"));
        }
    }
    Ok(())
}
