//! The lease registry: a pure state machine.
//!
//! No I/O and no clock: every operation that needs the time takes `now` (in
//! seconds) as an argument, so the rules of the contract can be tested in
//! microseconds. The core task owns one `Registry` and feeds it commands.
//!
//! Two maps hold the state: leases by run (one current lease per run), and
//! runs by fencing token, because `HEARTBEAT` and `RELEASE` name a lease by
//! its id and token only, and a lease id cannot be split back into run and
//! worker (both may contain `:`). Tokens are unique, so the token finds the
//! lease and the whole id is then compared.

use std::collections::HashMap;

use bytes::Bytes;

/// A lease as the registry reports it.
#[derive(Clone, Debug, PartialEq)]
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

/// Why an acquire could not issue a token although the run was free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenError {
    /// The next token is above the durable ceiling: the caller must raise
    /// the ceiling (see [`Registry::set_token_ceiling`]) and try again.
    CeilingReached,
    /// Every token up to 2^63-1 has been issued.
    Exhausted,
}

/// The largest fencing token: tokens travel as RESP integers (i64).
pub const MAX_TOKEN: u64 = i64::MAX as u64;

/// What the registry keeps per run. The run id is the map key and the
/// lease id is derived, so neither is stored twice.
#[derive(Clone, Debug)]
struct Entry {
    worker_id: Bytes,
    fencing_token: u64,
    expires_at: f64,
    /// Seconds each heartbeat extends this lease by.
    ttl: f64,
}

#[derive(Debug)]
pub struct Registry {
    /// The current lease of each run.
    leases: HashMap<Bytes, Entry>,
    /// Run id by fencing token, for the current leases only.
    runs_by_token: HashMap<u64, Bytes>,
    /// The last fencing token issued (0 before the first).
    last_token: u64,
    /// Tokens above this are not yet durably reserved and may not be issued.
    token_ceiling: u64,
    /// Registry time: the latest `now` seen. Starts below every finite time.
    time: f64,
    /// TTL in seconds of leases acquired without a `TTL` option.
    default_ttl: f64,
}

impl Registry {
    /// An empty registry whose next token is `last_token + 1`, and which may
    /// issue tokens up to `token_ceiling`.
    pub fn new(default_ttl: f64, last_token: u64, token_ceiling: u64) -> Registry {
        Registry {
            leases: HashMap::new(),
            runs_by_token: HashMap::new(),
            last_token,
            token_ceiling,
            time: f64::NEG_INFINITY,
            default_ttl,
        }
    }

    /// Advances registry time to `now` if it is later, and returns the time
    /// to evaluate at: a lagging clock is read as the latest time seen.
    pub fn advance_time(&mut self, now: f64) -> f64 {
        if now > self.time {
            self.time = now;
        }
        self.time
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

    pub fn token_ceiling(&self) -> u64 {
        self.token_ceiling
    }

    /// Allows tokens up to `ceiling` once it is durable. It never lowers.
    pub fn set_token_ceiling(&mut self, ceiling: u64) {
        self.token_ceiling = self.token_ceiling.max(ceiling);
    }

    /// The number of leases held, active or expired.
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Takes a lease on `run_id` if it has none or its lease has expired.
    /// `Ok(None)` when the run is held; a failed acquire issues no token.
    pub fn acquire(
        &mut self,
        run_id: &[u8],
        worker_id: &[u8],
        now: f64,
        ttl: Option<f64>,
    ) -> Result<Option<Lease>, TokenError> {
        let now = self.advance_time(now);
        let previous = self.leases.get(run_id);
        if previous.is_some_and(|entry| entry.expires_at > now) {
            return Ok(None);
        }
        let fencing_token = self.next_token()?;
        let ttl = ttl.unwrap_or(self.default_ttl);
        let entry = Entry {
            worker_id: Bytes::copy_from_slice(worker_id),
            fencing_token,
            expires_at: now + ttl,
            ttl,
        };
        let run_id = Bytes::copy_from_slice(run_id);
        if let Some(old) = self.leases.insert(run_id.clone(), entry.clone()) {
            self.runs_by_token.remove(&old.fencing_token);
        }
        self.runs_by_token.insert(fencing_token, run_id.clone());
        Ok(Some(to_lease(run_id, &entry)))
    }

    /// Extends the current, unexpired lease with this id and token by its
    /// TTL from `now`. Never revives an expired lease.
    pub fn heartbeat(&mut self, lease_id: &[u8], fencing_token: u64, now: f64) -> bool {
        let now = self.advance_time(now);
        let Some(run_id) = self.runs_by_token.get(&fencing_token) else {
            return false;
        };
        let Some(entry) = self.leases.get_mut(run_id) else {
            return false;
        };
        if !id_matches(lease_id, run_id, entry) || entry.expires_at <= now {
            return false;
        }
        entry.expires_at = now + entry.ttl;
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
        self.leases.get(run_id).is_some_and(|entry| {
            entry.fencing_token == fencing_token
                && id_matches(lease_id, run_id, entry)
                && entry.expires_at > now
        })
    }

    /// Removes the lease if it is still its run's current lease, expired or
    /// not. Carries no `now`, so registry time does not move.
    pub fn release(&mut self, lease_id: &[u8], fencing_token: u64) -> bool {
        let Some(run_id) = self.runs_by_token.get(&fencing_token) else {
            return false;
        };
        let matches = self
            .leases
            .get(run_id)
            .is_some_and(|entry| id_matches(lease_id, run_id, entry));
        if matches {
            let run_id = self
                .runs_by_token
                .remove(&fencing_token)
                .expect("looked up above");
            self.leases.remove(&run_id);
        }
        matches
    }

    /// The run's current lease and whether it has expired at `now`.
    pub fn get(&mut self, run_id: &[u8], now: f64) -> Option<(Lease, bool)> {
        let now = self.advance_time(now);
        let (run_id, entry) = self.leases.get_key_value(run_id)?;
        Some((to_lease(run_id.clone(), entry), entry.expires_at <= now))
    }

    fn next_token(&mut self) -> Result<u64, TokenError> {
        if self.last_token >= MAX_TOKEN {
            return Err(TokenError::Exhausted);
        }
        if self.last_token >= self.token_ceiling {
            return Err(TokenError::CeilingReached);
        }
        self.last_token += 1;
        Ok(self.last_token)
    }
}

fn to_lease(run_id: Bytes, entry: &Entry) -> Lease {
    Lease {
        run_id,
        worker_id: entry.worker_id.clone(),
        fencing_token: entry.fencing_token,
        expires_at: entry.expires_at,
    }
}

/// Whether `lease_id` is exactly `run_id:worker_id:token` of this entry,
/// compared piece by piece without building the id.
fn id_matches(lease_id: &[u8], run_id: &[u8], entry: &Entry) -> bool {
    let mut token = itoa::Buffer::new();
    let token = token.format(entry.fencing_token).as_bytes();
    let worker_id = &entry.worker_id[..];
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
