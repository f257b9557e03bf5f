//! Blocked acquires in a cluster (`LEASE.ACQUIRE ... BLOCK`): each node
//! queues its own clients, first come first served per run, and watches
//! its own replica (which applies every entry) for the run to be free:
//! released, or past its lease's `expires_at` plus lock delay by registry
//! time, which the leader's ticks move. Then it sends an acquire for the
//! head of the queue through the log like any command (proposed here if
//! this node leads, forwarded otherwise); if another node's client got
//! the run first, the waiter keeps its place and waits again.
//!
//! An ordinary acquire of a run this node's clients wait for gets null, as
//! on a single node; clients waiting on other nodes compete through the
//! log, in the order their acquires reach it. When the leader changes,
//! every node answers its blocked clients `-TRYAGAIN` (they may block
//! again), as the contract says of a node that loses leadership.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::warn;

use super::core::{ClusterCore, Outcomes, Wake};
use super::types::Forwarded;
use crate::core::waiters::{Granted, Waiter};
use crate::core::{CoreAnswer, Refusal};
use crate::registry::{Op, Outcome};

/// How long a waiter whose acquire was refused with `-TRYAGAIN` (no
/// leader) waits before it tries again.
const RETRY: f64 = 0.1;

impl ClusterCore {
    /// Queues a blocked acquire; its answer comes through the receiver.
    pub(super) fn acquire_blocking(
        &mut self,
        op: Op,
        timeout: Option<Duration>,
        client_id: u64,
    ) -> CoreAnswer {
        let (run_id, waiter, receiver) = Waiter::for_acquire(op, client_id);
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        self.waiters.enqueue(run_id, waiter, deadline, None);
        CoreAnswer::Blocked(receiver)
    }

    /// Tries, for every run whose head waiter is not already trying and
    /// that this replica sees free, to take it for that waiter.
    pub(super) async fn serve_waiters(&mut self) {
        self.time_out_waiters();
        if self.waiters.is_empty() {
            return;
        }
        let clock = self.shared.clock.now();
        let free: Vec<Bytes> = {
            let replica = self.node.state.lock();
            let now = clock.max(replica.registry.time());
            (self.waiters.runs().into_iter())
                .filter(|run| !self.trying.contains(run))
                .filter(|run| replica.registry.free_at(run).is_none_or(|at| at <= now))
                .collect()
        };
        for run in free {
            if self.waiters.front(&run).is_none() {
                continue;
            }
            let waiter = self.waiters.pop(&run).expect("the front waiter");
            self.try_for(run, waiter).await;
        }
    }

    /// Sends an acquire for `waiter`; the outcome comes back as a wake.
    async fn try_for(&mut self, run: Bytes, waiter: Waiter) {
        let op = waiter.acquire(run.clone());
        self.trying.insert(run.clone());
        let outcome = self.submit(vec![op]).await;
        let wake = self.wake.clone();
        tokio::spawn(async move {
            let outcome = outcome.await;
            let _ = wake.send(Wake::Tried {
                run,
                waiter,
                outcome,
            });
        });
    }

    /// What came of an attempt for a waiter: the run, a place kept at the
    /// head of the queue, or an error.
    pub(super) async fn tried(&mut self, run: Bytes, waiter: Waiter, outcome: Outcomes) {
        self.trying.remove(&run);
        let granted = match outcome.map(|mut answers| answers.pop()) {
            Ok(Some(Forwarded::Outcome(Outcome::Acquired(Some(lease))))) => {
                Granted::Lease(lease, None)
            }
            Ok(Some(Forwarded::Outcome(Outcome::AcquiredData(acquired)))) => {
                let (lease, data) = *acquired;
                Granted::Lease(lease, Some(data))
            }
            Ok(Some(Forwarded::Outcome(Outcome::TokensExhausted))) => Granted::TokensExhausted,
            Ok(Some(Forwarded::Outcome(Outcome::Acquired(None)))) => {
                return self.wait_again(run, waiter, 0.0);
            }
            Err(Refusal::TryAgain(_)) => return self.wait_again(run, waiter, RETRY),
            Err(refusal) => Granted::Refused(refusal),
            Ok(other) => Granted::Refused(Refusal::Uncertain(format!(
                "unexpected answer to a blocked acquire: {other:?}"
            ))),
        };
        let taken = matches!(granted, Granted::Lease(..));
        if taken {
            self.stats().granted_after(waiter.since.elapsed());
        }
        if let Err(Granted::Lease(lease, _)) = waiter.reply.send(granted) {
            // The client left after the run was taken for it: give it back.
            let release = Op::Release {
                lease_id: lease.lease_id().into(),
                token: lease.fencing_token,
            };
            // Spawned: a forward is only sent when its future runs.
            tokio::spawn(self.submit(vec![release]).await);
        }
    }

    /// Puts a waiter back at the head of its queue, to look again when the
    /// run may be free (`after` seconds from now at the earliest).
    fn wait_again(&mut self, run: Bytes, waiter: Waiter, after: f64) {
        let free_at = {
            let replica = self.node.state.lock();
            let now = self.shared.clock.now().max(replica.registry.time());
            replica
                .registry
                .free_at(&run)
                .unwrap_or(now)
                .max(now + after)
        };
        if let Some(waiter) = self.waiters.push_front(run, waiter, free_at) {
            self.stats().timed_out += 1;
            let _ = waiter.reply.send(Granted::TimedOut);
        }
    }

    /// Answers null to the waiters whose timeout has run out.
    fn time_out_waiters(&mut self) {
        for waiter in self.waiters.timed_out(Instant::now()) {
            self.stats().timed_out += 1;
            let _ = waiter.reply.send(Granted::TimedOut);
        }
    }

    /// The leader changed: every blocked client is told to block again.
    pub(super) fn leader_changed(&mut self) {
        let waiters = self.waiters.drain();
        if !waiters.is_empty() {
            warn!(
                "The leader changed: {} blocked clients are answered TRYAGAIN",
                waiters.len()
            );
        }
        for waiter in waiters {
            let why = "the cluster's leader changed while this client was blocked; block again";
            let _ = waiter
                .reply
                .send(Granted::Refused(Refusal::TryAgain(why.into())));
        }
    }

    /// `CLIENT UNBLOCK`: the client leaves its queue with null (`TIMEOUT`)
    /// or an error (`ERROR`); false if it was not waiting (or its attempt
    /// is on its way through the log).
    pub(super) fn unblock(&mut self, client_id: u64, error: bool) -> bool {
        let Some(waiter) = self.waiters.take_client(client_id) else {
            return false;
        };
        let answer = match error {
            true => Granted::Unblocked,
            false => Granted::TimedOut,
        };
        waiter.reply.send(answer).is_ok()
    }
}
