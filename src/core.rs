//! The core task: the single owner of the registry.
//!
//! Connections send it one [`Batch`] per socket read (all the lease
//! commands of that read), so a pipelining client costs one wake-up per
//! read, not one per command. The core drains every queued batch, applies
//! them in order, and only then answers them all; the append-only log will
//! write and fsync between the two, once per drain (group commit).
//!
//! The core also keeps fencing tokens durable: it never lets the registry
//! issue a token above the ceiling stored on disk, and raises that ceiling
//! a block at a time on a blocking thread, ahead of need.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{error, info};

use crate::ceiling::CeilingWriter;
use crate::command::LeaseCommand;
use crate::info;
use crate::registry::{Lease, Registry, TokenError};
use crate::reply::Reply;
use crate::server::{Shared, wall_clock};

/// Tokens reserved on disk per write of the ceiling. A crash skips at most
/// this many; a clean shutdown skips none.
pub const TOKEN_BLOCK: u64 = 100_000;
/// A new block is reserved in the background when fewer remain.
const LOW_WATER: u64 = TOKEN_BLOCK / 2;
/// After a failed ceiling write, acquires fail fast this long before the
/// next attempt, instead of each trying the disk again.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Batches queued before connections wait for the core.
const QUEUE_DEPTH: usize = 1024;
/// The most batches applied between two rounds of replies.
const MAX_DRAIN: usize = 512;

/// The lease commands of one read, and where to send their replies.
struct Batch {
    commands: Vec<LeaseCommand>,
    reply: oneshot::Sender<Vec<Reply>>,
}

/// How connections reach the core. When the last handle is dropped the
/// core stores the ceiling and ends.
#[derive(Clone, Debug)]
pub struct CoreHandle {
    queue: mpsc::Sender<Batch>,
}

impl CoreHandle {
    /// Applies `commands` in order and returns one reply for each.
    pub async fn call(&self, commands: Vec<LeaseCommand>) -> Vec<Reply> {
        let count = commands.len();
        let (reply, answer) = oneshot::channel();
        if self.queue.send(Batch { commands, reply }).await.is_ok()
            && let Ok(replies) = answer.await
        {
            return replies;
        }
        vec![Reply::error("ERR the server is shutting down"); count]
    }
}

pub struct Core {
    registry: Registry,
    ceiling: CeilingWriter,
    /// A ceiling write under way, and the ceiling it stores.
    reservation: Option<JoinHandle<io::Result<u64>>>,
    /// The last failed ceiling write: when, and the error reply it gave.
    failure: Option<(Instant, String)>,
    shared: Arc<Shared>,
}

impl Core {
    /// Reserves the first block of tokens (so a data directory that cannot
    /// be written stops the start) and spawns the core task.
    pub async fn start(
        registry: Registry,
        ceiling: CeilingWriter,
        shared: Arc<Shared>,
    ) -> io::Result<(CoreHandle, JoinHandle<()>)> {
        let mut core = Core {
            registry,
            ceiling,
            reservation: None,
            failure: None,
            shared,
        };
        let first = core.registry.last_token() + TOKEN_BLOCK;
        let writer = core.ceiling.clone();
        tokio::task::spawn_blocking(move || writer.store(first))
            .await
            .map_err(io::Error::other)??;
        core.registry.set_token_ceiling(first);
        let (queue, batches) = mpsc::channel(QUEUE_DEPTH);
        let task = tokio::spawn(core.run(batches));
        Ok((CoreHandle { queue }, task))
    }

    async fn run(mut self, mut queue: mpsc::Receiver<Batch>) {
        let mut batches = Vec::with_capacity(MAX_DRAIN);
        loop {
            tokio::select! {
                biased;
                Some(done) = wait(&mut self.reservation) => self.reserved(done),
                count = queue.recv_many(&mut batches, MAX_DRAIN) => {
                    if count == 0 {
                        break;
                    }
                    self.serve(&mut batches).await;
                }
            }
        }
        self.finish().await;
    }

    /// Applies every drained batch, then answers them all.
    async fn serve(&mut self, batches: &mut Vec<Batch>) {
        let clock = wall_clock();
        let mut answers = Vec::with_capacity(batches.len());
        for batch in batches.drain(..) {
            let mut replies = Vec::with_capacity(batch.commands.len());
            for command in batch.commands {
                replies.push(self.apply(command, clock).await);
            }
            answers.push((batch.reply, replies));
        }
        for (reply, replies) in answers {
            // A client that went away no longer needs its replies.
            let _ = reply.send(replies);
        }
        self.reserve_ahead();
    }

    async fn apply(&mut self, command: LeaseCommand, clock: f64) -> Reply {
        let registry = &mut self.registry;
        match command {
            LeaseCommand::Acquire {
                run_id,
                worker_id,
                now,
                ttl,
            } => {
                let now = now.unwrap_or(clock);
                loop {
                    match self.registry.acquire(&run_id, &worker_id, now, ttl) {
                        Ok(Some(lease)) => return lease_reply(&lease, None),
                        Ok(None) => return Reply::Null,
                        Err(TokenError::Exhausted) => {
                            return Reply::error(
                                "ERR every fencing token up to 2^63-1 has been issued",
                            );
                        }
                        Err(TokenError::CeilingReached) => {
                            if let Err(reply) = self.raise_ceiling().await {
                                return reply;
                            }
                        }
                    }
                }
            }
            LeaseCommand::Heartbeat {
                lease_id,
                token,
                now,
            } => flag(registry.heartbeat(&lease_id, token, now.unwrap_or(clock))),
            LeaseCommand::Validate {
                run_id,
                lease_id,
                token,
                now,
            } => flag(registry.validate(&run_id, &lease_id, token, now.unwrap_or(clock))),
            LeaseCommand::Release { lease_id, token } => flag(registry.release(&lease_id, token)),
            LeaseCommand::Get { run_id, now } => {
                match registry.get(&run_id, now.unwrap_or(clock)) {
                    Some((lease, expired)) => lease_reply(&lease, Some(expired)),
                    None => Reply::Null,
                }
            }
            LeaseCommand::DbSize => Reply::Int(registry.len() as i64),
            LeaseCommand::Info { sections } => {
                Reply::Verbatim(info::render(&sections, &self.shared, registry).into())
            }
        }
    }

    /// Waits until the ceiling allows at least one more token.
    async fn raise_ceiling(&mut self) -> Result<(), Reply> {
        if let Some((when, reply)) = &self.failure
            && when.elapsed() < RETRY_AFTER
        {
            return Err(Reply::error(reply.clone()));
        }
        if self.reservation.is_none() {
            self.start_reservation();
        }
        if let Some(done) = wait(&mut self.reservation).await {
            self.reserved(done);
        }
        match &self.failure {
            Some((_, reply)) if self.registry.last_token() >= self.registry.token_ceiling() => {
                Err(Reply::error(reply.clone()))
            }
            _ => Ok(()),
        }
    }

    /// Starts writing a new block in the background when few tokens remain.
    fn reserve_ahead(&mut self) {
        let remaining = self.registry.token_ceiling() - self.registry.last_token();
        let failed_recently = self
            .failure
            .as_ref()
            .is_some_and(|(when, _)| when.elapsed() < RETRY_AFTER);
        if remaining < LOW_WATER && self.reservation.is_none() && !failed_recently {
            self.start_reservation();
        }
    }

    fn start_reservation(&mut self) {
        let target = self.registry.last_token().saturating_add(TOKEN_BLOCK);
        let writer = self.ceiling.clone();
        self.reservation = Some(tokio::task::spawn_blocking(move || {
            writer.store(target).map(|()| target)
        }));
    }

    fn reserved(&mut self, done: io::Result<u64>) {
        match done {
            Ok(ceiling) => {
                self.registry.set_token_ceiling(ceiling);
                self.failure = None;
            }
            Err(error) => {
                error!("Writing the token ceiling failed: {error}");
                let reply = format!(
                    "MISCONF Errors writing the fencing-token ceiling to disk ({error}); \
                     acquires are refused until it can be written"
                );
                self.failure = Some((Instant::now(), reply));
            }
        }
    }

    /// Lowers the stored ceiling to the last token issued, so a restart
    /// continues right after it.
    async fn finish(mut self) {
        if let Some(done) = wait(&mut self.reservation).await {
            self.reserved(done);
        }
        let last = self.registry.last_token();
        let writer = self.ceiling.clone();
        match tokio::task::spawn_blocking(move || writer.store(last)).await {
            Ok(Ok(())) => info!("Token ceiling saved: the last fencing token issued is {last}"),
            Ok(Err(error)) => error!("Saving the token ceiling failed: {error}"),
            Err(error) => error!("Saving the token ceiling failed: {error}"),
        }
    }
}

/// Completes with the outcome of the ceiling write under way, or never if
/// there is none (so it can sit in a `select!`).
async fn wait(reservation: &mut Option<JoinHandle<io::Result<u64>>>) -> Option<io::Result<u64>> {
    let handle = reservation.as_mut()?;
    let outcome = handle.await.unwrap_or_else(|e| Err(io::Error::other(e)));
    *reservation = None;
    Some(outcome)
}

fn flag(value: bool) -> Reply {
    Reply::Int(i64::from(value))
}

/// The lease map: `run_id`, `worker_id`, `lease_id`, `fencing_token`,
/// `expires_at`, and for `LEASE.GET` also `expired`.
pub fn lease_reply(lease: &Lease, expired: Option<bool>) -> Reply {
    let mut fields = Vec::with_capacity(6);
    fields.push((Reply::text("run_id"), Reply::Bulk(lease.run_id.clone())));
    fields.push((
        Reply::text("worker_id"),
        Reply::Bulk(lease.worker_id.clone()),
    ));
    fields.push((Reply::text("lease_id"), Reply::bulk(lease.lease_id())));
    fields.push((
        Reply::text("fencing_token"),
        Reply::Int(lease.fencing_token as i64),
    ));
    fields.push((Reply::text("expires_at"), Reply::Double(lease.expires_at)));
    if let Some(expired) = expired {
        fields.push((Reply::text("expired"), flag(expired)));
    }
    Reply::Map(fields)
}
