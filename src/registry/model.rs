//! The registry's reference model, written from the contract rather than
//! from the registry: every lease ever issued in a Vec, found by linear
//! scans. The property tests and the `registry_model` fuzz target run
//! the same commands through both and compare. Compiled for tests and
//! with the `fuzzing` feature only.

use bytes::Bytes;

use super::{Lease, MAX_TOKEN, Registry, TokenError};

// ---------------------------------------------------------------
// Shared vocabulary: a command with every argument resolved, and the
// registry's answer to it.
// ---------------------------------------------------------------

#[derive(Clone, Debug)]
pub enum Cmd {
    Acquire {
        run: Vec<u8>,
        worker: Vec<u8>,
        now: f64,
        ttl: Option<f64>,
    },
    Heartbeat {
        lease_id: Vec<u8>,
        token: u64,
        now: f64,
    },
    Validate {
        run: Vec<u8>,
        lease_id: Vec<u8>,
        token: u64,
        now: f64,
    },
    Release {
        lease_id: Vec<u8>,
        token: u64,
    },
    Get {
        run: Vec<u8>,
        now: f64,
    },
    SetCeiling(u64),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Acquired(Result<Option<Lease>, TokenError>),
    Flag(bool),
    Got(Option<(Lease, bool)>),
    Done,
}

impl Reply {
    /// The lease this reply carries, if any.
    pub fn lease(&self) -> Option<&Lease> {
        match self {
            Reply::Acquired(Ok(Some(lease))) | Reply::Got(Some((lease, _))) => Some(lease),
            _ => None,
        }
    }
}

pub fn apply(registry: &mut Registry, cmd: &Cmd) -> Reply {
    match cmd {
        Cmd::Acquire {
            run,
            worker,
            now,
            ttl,
        } => Reply::Acquired(registry.acquire(run, worker, *now, *ttl)),
        Cmd::Heartbeat {
            lease_id,
            token,
            now,
        } => Reply::Flag(registry.heartbeat(lease_id, *token, *now)),
        Cmd::Validate {
            run,
            lease_id,
            token,
            now,
        } => Reply::Flag(registry.validate(run, lease_id, *token, *now)),
        Cmd::Release { lease_id, token } => Reply::Flag(registry.release(lease_id, *token)),
        Cmd::Get { run, now } => Reply::Got(registry.get(run, *now)),
        Cmd::SetCeiling(ceiling) => {
            registry.set_token_ceiling(*ceiling);
            Reply::Done
        }
    }
}

// ---------------------------------------------------------------
// The reference model: every lease ever issued in a Vec, found by
// linear scans, lease ids built whole and compared whole, time as a
// plain max. Written from the contract, not from the code above.
// ---------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct ModelLease {
    pub run: Vec<u8>,
    pub worker: Vec<u8>,
    pub token: u64,
    pub expires_at: f64,
    pub ttl: f64,
    /// Neither released nor taken over.
    pub current: bool,
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

#[derive(Debug)]
pub struct Model {
    /// Every lease ever issued, oldest first.
    pub issued: Vec<ModelLease>,
    pub last_token: u64,
    pub ceiling: u64,
    pub time: f64,
    pub default_ttl: f64,
    /// Seconds an expired lease stays; infinite keeps it forever.
    pub retention: f64,
}

impl Model {
    pub fn new(default_ttl: f64, last_token: u64, ceiling: u64) -> Model {
        Model {
            issued: Vec::new(),
            last_token,
            ceiling,
            time: f64::NEG_INFINITY,
            default_ttl,
            retention: f64::INFINITY,
        }
    }

    pub fn current_count(&self) -> usize {
        self.issued.iter().filter(|l| l.current).count()
    }

    /// Moves time on; a lease whose retention has run out is gone.
    pub fn see(&mut self, now: f64) -> f64 {
        self.time = self.time.max(now);
        let time = self.time;
        let retention = self.retention;
        for lease in &mut self.issued {
            if lease.expires_at + retention <= time {
                lease.current = false;
            }
        }
        self.time
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

    pub fn apply(&mut self, cmd: &Cmd) -> Reply {
        match cmd {
            Cmd::Acquire {
                run,
                worker,
                now,
                ttl,
            } => {
                let t = self.see(*now);
                let previous = self.current_of(run);
                if let Some(i) = previous
                    && self.issued[i].expires_at > t
                {
                    return Reply::Acquired(Ok(None));
                }
                // last_token <= MAX_TOKEN < u64::MAX, so this cannot overflow.
                let next = self.last_token + 1;
                if next > MAX_TOKEN {
                    return Reply::Acquired(Err(TokenError::Exhausted));
                }
                if next > self.ceiling {
                    return Reply::Acquired(Err(TokenError::CeilingReached));
                }
                self.last_token = next;
                if let Some(i) = previous {
                    self.issued[i].current = false;
                }
                let ttl = ttl.unwrap_or(self.default_ttl);
                let new = ModelLease {
                    run: run.clone(),
                    worker: worker.clone(),
                    token: next,
                    expires_at: t + ttl,
                    ttl,
                    current: true,
                };
                let reply = Reply::Acquired(Ok(Some(new.lease())));
                self.issued.push(new);
                reply
            }
            Cmd::Heartbeat {
                lease_id,
                token,
                now,
            } => {
                let t = self.see(*now);
                match self.named(lease_id, *token) {
                    Some(i) if self.issued[i].expires_at > t => {
                        self.issued[i].expires_at = t + self.issued[i].ttl;
                        Reply::Flag(true)
                    }
                    _ => Reply::Flag(false),
                }
            }
            Cmd::Validate {
                run,
                lease_id,
                token,
                now,
            } => {
                let t = self.see(*now);
                Reply::Flag(self.issued.iter().any(|l| {
                    l.current
                        && l.run == *run
                        && l.token == *token
                        && l.id() == *lease_id
                        && l.expires_at > t
                }))
            }
            Cmd::Release { lease_id, token } => match self.named(lease_id, *token) {
                Some(i) => {
                    self.issued[i].current = false;
                    Reply::Flag(true)
                }
                None => Reply::Flag(false),
            },
            Cmd::Get { run, now } => {
                let t = self.see(*now);
                Reply::Got(self.current_of(run).map(|i| {
                    let l = &self.issued[i];
                    (l.lease(), l.expires_at <= t)
                }))
            }
            Cmd::SetCeiling(ceiling) => {
                self.ceiling = self.ceiling.max(*ceiling);
                Reply::Done
            }
        }
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
/// the number of leases and of expired ones, the last token, the ceiling
/// and registry time. Leases past retention count in the registry until a
/// sweep reaches them, so they are left out of its figures.
pub fn check_state(registry: &Registry, model: &Model) -> Result<(), String> {
    let unswept = past_retention(registry);
    let expired = model
        .issued
        .iter()
        .filter(|l| l.current && l.expires_at <= model.time)
        .count();
    let counts = [
        ("leases", registry.len() - unswept, model.current_count()),
        (
            "expired leases",
            registry.expired_count() - unswept,
            expired,
        ),
    ];
    let tokens = [
        ("last token", registry.last_token(), model.last_token),
        ("ceiling", registry.token_ceiling(), model.ceiling),
    ];
    let mismatch = counts
        .iter()
        .map(|&(what, got, want)| (what, got as u64, want as u64))
        .chain(tokens)
        .find(|(_, got, want)| got != want);
    if let Some((what, got, want)) = mismatch {
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

/// Applies `cmd` to both; their replies must be equal, and a lease's id
/// must be exactly `run:worker:token`.
pub fn step_both(registry: &mut Registry, model: &mut Model, cmd: &Cmd) -> Result<(), String> {
    let want = model.apply(cmd);
    let got = apply(registry, cmd);
    if got != want {
        return Err(format!("{cmd:?}: registry {got:?}, model {want:?}"));
    }
    if let Some(lease) = got.lease() {
        let id = [
            &lease.run_id[..],
            b":",
            &lease.worker_id[..],
            b":",
            lease.fencing_token.to_string().as_bytes(),
        ]
        .concat();
        if lease.lease_id() != id {
            return Err(format!("{cmd:?}: lease id {:?}", lease.lease_id()));
        }
    }
    Ok(())
}

/// At the end: every run of [`RUNS`] has the same lease in both.
pub fn check_runs(registry: &mut Registry, model: &mut Model) -> Result<(), String> {
    let t = model.time;
    for run in RUNS {
        let want = model.apply(&Cmd::Get {
            run: run.to_vec(),
            now: t,
        });
        let got = Reply::Got(registry.get(run, t));
        if got != want {
            return Err(format!("run {run:?}: registry {got:?}, model {want:?}"));
        }
    }
    Ok(())
}
