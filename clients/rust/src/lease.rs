//! A held lease: its token, deadline and `lost`, its background
//! heartbeat, its checkpoints and its release.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::reply::Acquired;
use crate::rules::Beat;
use crate::{Error, Registry};

/// What the lease and its heartbeat task share.
struct Shared {
    run: String,
    worker: String,
    lease_id: String,
    token: i64,
    ttl: Duration,
    /// The latest moment a write is still safe.
    deadline: Mutex<Instant>,
    lost: CancellationToken,
    reason: Mutex<Option<String>>,
    /// Held by a checkpoint from its check until its reply, and by whoever
    /// sets `lost`: no write is sent once `lost` is set.
    writes: tokio::sync::Mutex<()>,
}

impl Shared {
    fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap()
    }

    fn extend(&self, to: Instant) {
        let mut deadline = self.deadline.lock().unwrap();
        *deadline = (*deadline).max(to);
    }

    /// Sets `lost` (the first reason stays); the caller holds `writes`, or
    /// no write can follow.
    fn set_lost(&self, reason: &str) {
        self.reason
            .lock()
            .unwrap()
            .get_or_insert_with(|| reason.to_owned());
        self.lost.cancel();
    }

    fn lost_error(&self) -> Error {
        let reason = self.reason.lock().unwrap().clone();
        Error::LeaseLost {
            reason: reason.unwrap_or_else(|| "lost".into()),
        }
    }

    /// [`Lease::check`], for a caller that holds `writes` (`locked`) or
    /// not (then `lost` is set only if no write is under way; the heartbeat
    /// task sets it at the deadline anyway).
    fn check(&self, locked: bool) -> Result<(), Error> {
        if self.lost.is_cancelled() {
            return Err(self.lost_error());
        }
        if Instant::now() >= self.deadline() {
            const PASSED: &str = "its deadline passed without a successful heartbeat";
            if locked {
                self.set_lost(PASSED);
            } else if let Ok(_writes) = self.writes.try_lock() {
                self.set_lost(PASSED);
            }
            return Err(Error::LeaseLost {
                reason: PASSED.into(),
            });
        }
        Ok(())
    }
}

/// A lease on a run, held by this process: see [`Registry::lease`] and the
/// crate's rules. It heartbeats in a background task until it is released
/// ([`Lease::release`]) or dropped (a best-effort release).
pub struct Lease {
    shared: Arc<Shared>,
    registry: Registry,
    heartbeat: Option<JoinHandle<()>>,
    data: Option<Vec<u8>>,
    data_token: Option<i64>,
    released: bool,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("lease_id", &self.shared.lease_id)
            .field("token", &self.shared.token)
            .field("deadline", &self.shared.deadline())
            .field("lost", &self.shared.lost.is_cancelled())
            .finish()
    }
}

impl Lease {
    pub(crate) fn start(
        registry: Registry,
        acquired: Acquired,
        ttl: Duration,
        deadline: Instant,
    ) -> Lease {
        let info = acquired.info;
        let shared = Arc::new(Shared {
            run: info.run_id,
            worker: info.worker_id,
            lease_id: info.lease_id,
            token: info.fencing_token,
            ttl,
            deadline: Mutex::new(deadline),
            lost: CancellationToken::new(),
            reason: Mutex::new(None),
            writes: tokio::sync::Mutex::new(()),
        });
        let heartbeat = tokio::spawn(heartbeat(registry.clone(), shared.clone()));
        Lease {
            shared,
            registry,
            heartbeat: Some(heartbeat),
            data: acquired.data,
            data_token: acquired.data_token,
            released: false,
        }
    }

    pub fn run(&self) -> &str {
        &self.shared.run
    }

    pub fn worker(&self) -> &str {
        &self.shared.worker
    }

    /// `{run}:{worker}:{token}`.
    pub fn lease_id(&self) -> &str {
        &self.shared.lease_id
    }

    /// The fencing token: stamp every write with it, for the storage to
    /// reject the writes of a holder that was taken over.
    pub fn token(&self) -> i64 {
        self.shared.token
    }

    pub fn ttl(&self) -> Duration {
        self.shared.ttl
    }

    /// Cancelled when the lease is lost (a heartbeat or `LEASE.SETDATA`
    /// refused, or its deadline passed), released or dropped: await
    /// `lost().cancelled()` to stop work at once.
    pub fn lost(&self) -> CancellationToken {
        self.shared.lost.clone()
    }

    pub fn is_lost(&self) -> bool {
        self.shared.lost.is_cancelled()
    }

    /// Why the lease was lost, once it was.
    pub fn lost_reason(&self) -> Option<String> {
        self.shared.reason.lock().unwrap().clone()
    }

    /// The latest moment a write is still safe, on the local monotonic
    /// clock: when the last successful acquire or heartbeat was sent, plus
    /// the TTL.
    pub fn deadline(&self) -> Instant {
        self.shared.deadline()
    }

    /// The time left until the deadline (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.shared
            .deadline()
            .saturating_duration_since(Instant::now())
    }

    /// Ok while the lease is held and its deadline has not passed;
    /// [`Error::LeaseLost`] otherwise (and then `lost` is set). Call it
    /// before each write.
    pub fn check(&self) -> Result<(), Error> {
        self.shared.check(false)
    }

    /// The run's data: as acquired (`WITHDATA`), then the last checkpoint.
    pub fn data(&self) -> Option<&[u8]> {
        self.data.as_deref()
    }

    /// The token of the lease that wrote [`Lease::data`].
    pub fn data_token(&self) -> Option<i64> {
        self.data_token
    }

    /// Stores `value` as the run's data (`LEASE.SETDATA`), for the next
    /// holder to resume from: checked first, and never sent once the lease
    /// is lost. A refusal sets `lost` and errors with
    /// [`Error::LeaseLost`], as does a reply still awaited when the
    /// deadline passes; [`Error::Unavailable`] when no node answered (the
    /// lease may still be held).
    pub async fn checkpoint(&mut self, value: impl Into<Vec<u8>>) -> Result<(), Error> {
        const UNANSWERED: &str = "its deadline passed while LEASE.SETDATA was unanswered";
        let value = value.into();
        let shared = &self.shared;
        let _writes = shared.writes.lock().await;
        for _ in 0..crate::UNCERTAIN_SENDS {
            shared.check(true)?;
            let stored = {
                let (run, lease_id) = (&shared.run, &shared.lease_id);
                let set = self.registry.set_data(run, lease_id, shared.token, &value);
                tokio::pin!(set);
                // Not waited for past the deadline (which heartbeats may move
                // meanwhile): the lease is lost then, whatever the reply.
                loop {
                    match tokio::time::timeout_at(shared.deadline(), &mut set).await {
                        Ok(stored) => break stored?,
                        Err(_) if Instant::now() >= shared.deadline() => {
                            shared.set_lost(UNANSWERED);
                            return Err(shared.lost_error());
                        }
                        Err(_) => {}
                    }
                }
            };
            match stored {
                Some(true) => {
                    self.data = Some(value);
                    self.data_token = Some(shared.token);
                    return Ok(());
                }
                Some(false) => {
                    shared.set_lost("LEASE.SETDATA was refused: the lease is no longer the run's");
                    return Err(shared.lost_error());
                }
                None => {}
            }
        }
        Err(Error::Unavailable {
            reason: "the checkpoint's LEASE.SETDATA stayed uncertain".into(),
        })
    }

    /// Releases the lease (`LEASE.RELEASE`): whether the server removed it
    /// (false when it was no longer the run's). The heartbeat stops first,
    /// and `lost` is set.
    pub async fn release(mut self) -> Result<bool, Error> {
        self.released = true;
        if let Some(heartbeat) = self.heartbeat.take() {
            heartbeat.abort();
        }
        self.shared.set_lost("released");
        let shared = &self.shared;
        self.registry
            .release(&shared.run, &shared.lease_id, shared.token)
            .await
    }
}

impl Drop for Lease {
    /// A lease dropped unreleased is released in a task spawned on the
    /// current runtime, if any: best effort (the runtime may shut down
    /// first, or the server be unreachable; the lease then expires at the
    /// end of its TTL).
    fn drop(&mut self) {
        if let Some(heartbeat) = self.heartbeat.take() {
            heartbeat.abort();
        }
        if self.released {
            return;
        }
        self.shared.set_lost("dropped without a release");
        let registry = self.registry.clone();
        registry.unhold(self.shared.token);
        let shared = self.shared.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let timeout = registry.options().response_timeout;
                let release = registry.release(&shared.run, &shared.lease_id, shared.token);
                let _ = tokio::time::timeout(timeout, release).await;
            });
        }
    }
}

/// Heartbeats every TTL/3 until the lease is lost: 1 moves the deadline to
/// the send time + TTL; 0 sets `lost`; a failure or a timeout (half a
/// period) is retried every TTL/12, and when none has succeeded for a
/// whole period since the first that failed (or the deadline passes
/// first), `lost` is set. Nothing is sent past the deadline.
async fn heartbeat(registry: Registry, shared: Arc<Shared>) {
    let period = shared.ttl / 3;
    let retry = shared.ttl / 12;
    let timeout = period / 2;
    let mut next = shared.deadline() - shared.ttl + period;
    let mut failing_since: Option<Instant> = None;
    loop {
        let deadline = shared.deadline();
        tokio::select! {
            _ = shared.lost.cancelled() => return,
            _ = tokio::time::sleep_until(next.min(deadline)) => {}
        }
        if Instant::now() >= shared.deadline() {
            let _writes = shared.writes.lock().await;
            shared.set_lost("its deadline passed without a successful heartbeat");
            return;
        }
        let sent = Instant::now();
        let beat = registry.heartbeat(&shared.run, &shared.lease_id, shared.token);
        match tokio::time::timeout(timeout, beat).await {
            Ok(Ok(Beat::Extended)) => {
                shared.extend(sent + shared.ttl);
                next = sent + period;
                failing_since = None;
            }
            Ok(Ok(Beat::Refused)) => {
                let _writes = shared.writes.lock().await;
                shared.set_lost(
                    "a heartbeat was refused: the lease expired, was released or taken over",
                );
                return;
            }
            Ok(Ok(Beat::Unknown)) | Ok(Err(_)) | Err(_) => {
                // A server out of reach for a whole period loses the lease
                // then, not only at the deadline.
                let since = *failing_since.get_or_insert(sent);
                if Instant::now() - since >= period {
                    let _writes = shared.writes.lock().await;
                    shared.set_lost("heartbeats failed for a whole heartbeat period");
                    return;
                }
                next = Instant::now() + retry;
            }
        }
    }
}
