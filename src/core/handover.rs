//! Blocked acquires (`LEASE.ACQUIRE ... BLOCK ms`): a client that finds
//! its run held joins the run's queue, and the core hands the run to the
//! head of the queue the moment it is free: released, or its lease's
//! `expires_at` plus lock delay passed on the server's clock (the core's
//! timer wakes for that; no command needs to arrive). One waiter per
//! hand-over, first come first served; a grant is an ordinary acquire,
//! logged before its reply goes out.
//!
//! A waiter leaves the queue when its timeout runs out (null, no token
//! spent), when `CLIENT UNBLOCK` names it, or when its connection is gone
//! (the receiver of its reply dropped): then it is skipped, never granted.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::task::{Core, Round};
use super::waiters::{Granted, Waiter};
use super::{CoreAnswer, Refusal};
use crate::aof::WriteError;
use crate::registry::{Op, Outcome};

impl Core {
    /// Takes the run at once if nobody waits for it and it is free;
    /// otherwise queues the client, whose answer comes later.
    pub(super) fn acquire_blocking(
        &mut self,
        op: Op,
        timeout: Option<Duration>,
        client_id: u64,
        round: &Round,
    ) -> CoreAnswer {
        match self.outcome(&op, round) {
            Ok(Outcome::Acquired(None)) => {}
            Ok(outcome) => {
                self.stats.record(&op, Some(&outcome));
                return CoreAnswer::Outcome(outcome);
            }
            Err(refusal) => {
                self.stats.record(&op, None);
                return CoreAnswer::Refused(refusal);
            }
        }
        let (run_id, waiter, receiver) = Waiter::for_acquire(op, client_id);
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        let free_at = self.registry.free_at(&run_id);
        self.waiters.enqueue(run_id, waiter, deadline, free_at);
        // Releases must be seen from now on, to wake this waiter.
        self.watch(round.clock);
        CoreAnswer::Blocked(receiver)
    }

    /// Hands every run that may be free by now to the head of its queue.
    pub(super) fn serve_waiters(&mut self, round: &Round) {
        if self.waiters.is_empty() {
            return;
        }
        let now = round.clock.max(self.registry.time());
        for run in self.waiters.due(now) {
            self.serve_run(run, round);
        }
    }

    /// Grants `run` to its first waiter still waiting, if the run is free;
    /// a waiter refused (log or ceiling failing, tokens exhausted) gets the
    /// error and the next is tried. If the run is still closed, it is
    /// looked at again when it may be free.
    fn serve_run(&mut self, run: Bytes, round: &Round) {
        while let Some(waiter) = self.waiters.front(&run) {
            let op = waiter.acquire(run.clone());
            let now = round.clock.max(self.registry.time());
            if let Some(at) = self.registry.free_at(&run)
                && at > now
            {
                self.waiters.free_at(run, at);
                return;
            }
            let granted = match self.refusal(&op, round) {
                Some(refusal) => Granted::Refused(refusal),
                // Past the queue check of `outcome`: this is the queue.
                None => match self.registry.apply(&op, round.clock) {
                    Outcome::Acquired(Some(lease)) => Granted::Lease(lease, None),
                    Outcome::AcquiredData(acquired) => {
                        let (lease, data) = *acquired;
                        Granted::Lease(lease, Some(data))
                    }
                    Outcome::TokensExhausted => Granted::TokensExhausted,
                    _ => {
                        // Closed after all (never expected): look again.
                        let at = self.registry.free_at(&run).unwrap_or(now);
                        self.waiters.free_at(run, at.max(now + 0.001));
                        return;
                    }
                },
            };
            let outcome = match &granted {
                Granted::Lease(lease, _) => Some(Outcome::Acquired(Some(lease.clone()))),
                _ => None,
            };
            self.stats.record(&op, outcome.as_ref());
            self.publish();
            let waiter = self.waiters.pop(&run).expect("the front waiter");
            let taken = outcome.is_some();
            if taken {
                self.stats.granted_after(waiter.since.elapsed());
            }
            self.grants.push((waiter, granted));
            if taken {
                if let Some(at) = self.registry.free_at(&run) {
                    self.waiters.free_at(run, at);
                }
                return;
            }
        }
    }

    /// Sends the round's grants, now that their changes are committed (or
    /// not: then the waiters get the log's error). A waiter whose client
    /// left after it was chosen gives the run back at once, for the next.
    pub(super) fn send_grants(&mut self, committed: &Result<(), WriteError>) {
        for (waiter, granted) in std::mem::take(&mut self.grants) {
            let granted = match (committed, granted) {
                (Err(error), Granted::Lease(..)) => Granted::Refused(Refusal::Log(error.clone())),
                (_, granted) => granted,
            };
            if let Err(Granted::Lease(lease, _)) = waiter.reply.send(granted) {
                let release = Op::Release {
                    lease_id: lease.lease_id().into(),
                    token: lease.fencing_token,
                };
                self.registry.apply(&release, self.shared.clock.now());
                self.publish();
                self.log_changes();
            }
        }
    }

    /// Answers null to the waiters whose timeout has run out.
    pub(super) fn time_out_waiters(&mut self) {
        for waiter in self.waiters.timed_out(Instant::now()) {
            self.stats.timed_out += 1;
            let _ = waiter.reply.send(Granted::TimedOut);
        }
    }

    /// `CLIENT UNBLOCK`: the client leaves its queue with null (`TIMEOUT`)
    /// or an error (`ERROR`); false if it was not waiting.
    pub(super) fn unblock(&mut self, client_id: u64, error: bool) -> bool {
        let Some(waiter) = self.waiters.take_client(client_id) else {
            return false;
        };
        let answer = if error {
            Granted::Unblocked
        } else {
            Granted::TimedOut
        };
        waiter.reply.send(answer).is_ok()
    }
}
