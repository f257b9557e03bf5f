//! Blocked acquires: per run, a first-come-first-served queue of clients
//! waiting for it (`LEASE.ACQUIRE ... BLOCK ms`). The core serves a run's
//! queue when the run may be free, one waiter per hand-over, and drops a
//! waiter whose time is up, who was unblocked, or whose connection is gone
//! (its reply channel closed): such a waiter is never granted the run.
//!
//! Two timelines drive it, both kept as heaps cleaned lazily: when each
//! waited-for run may next be free (its lease's `expires_at` plus lock
//! delay, on the server's clock, in seconds), and when each waiter's
//! `BLOCK` timeout runs out (on tokio's clock). Waiters are not durable.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::Refusal;
use crate::registry::{Lease, Op, RunData, Seconds};

/// What a blocked acquire ends with.
#[derive(Debug)]
pub enum Granted {
    /// The run, with the next token; for an acquire `WITHDATA`, the run's
    /// data as well (`Some(None)`: it has none).
    Lease(Lease, Option<Option<RunData>>),
    /// The timeout ran out (or `CLIENT UNBLOCK id TIMEOUT`): null.
    TimedOut,
    /// `CLIENT UNBLOCK id ERROR`.
    Unblocked,
    /// The grant could not be made durable, or no token is left.
    Refused(Refusal),
    /// Every fencing token has been issued.
    TokensExhausted,
}

/// One blocked acquire.
#[derive(Debug)]
pub struct Waiter {
    pub id: u64,
    /// The connection's client id, for `CLIENT UNBLOCK`.
    pub client_id: u64,
    pub worker_id: Bytes,
    pub ttl: Option<f64>,
    pub lock_delay: Option<f64>,
    /// `WITHDATA`: the grant carries the run's data.
    pub with_data: bool,
    pub reply: oneshot::Sender<Granted>,
    /// When it began to wait.
    pub since: Instant,
    /// When its `BLOCK` timeout runs out (set when it is queued).
    pub deadline: Option<Instant>,
}

impl Waiter {
    /// The waiter of a blocked acquire `op` by client `client_id`, and the
    /// receiver its answer comes through.
    pub fn for_acquire(op: Op, client_id: u64) -> (Bytes, Waiter, oneshot::Receiver<Granted>) {
        let Op::Acquire {
            run_id,
            worker_id,
            ttl,
            lock_delay,
            with_data,
            ..
        } = op
        else {
            unreachable!("a blocked command is an acquire")
        };
        let (reply, receiver) = oneshot::channel();
        let waiter = Waiter {
            id: 0,
            client_id,
            worker_id,
            ttl,
            lock_delay,
            with_data,
            reply,
            since: Instant::now(),
            deadline: None,
        };
        (run_id, waiter, receiver)
    }

    /// The acquire that grants it `run`, on the server's clock.
    pub fn acquire(&self, run: Bytes) -> Op {
        Op::Acquire {
            run_id: run,
            worker_id: self.worker_id.clone(),
            now: None,
            ttl: self.ttl,
            lock_delay: self.lock_delay,
            with_data: self.with_data,
        }
    }

    /// Whether its client still waits (its connection holds the receiver).
    fn waiting(&self) -> bool {
        !self.reply.is_closed()
    }
}

#[derive(Debug, Default)]
pub struct Waiters {
    queues: HashMap<Bytes, VecDeque<Waiter>>,
    /// (when the run may be free, run): the earliest first. An entry is
    /// only a hint: the registry is asked again when it comes up.
    frees: BinaryHeap<Reverse<(Seconds, Bytes)>>,
    /// (when the waiter's timeout runs out, waiter id, run).
    deadlines: BinaryHeap<Reverse<(Instant, u64, Bytes)>>,
    next_id: u64,
}

impl Waiters {
    /// Whether any run has waiters.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Whether `run` has a client waiting for it.
    pub fn has_waiters(&self, run: &[u8]) -> bool {
        // Most of the time nobody waits: then no hashing of the run id.
        !self.queues.is_empty()
            && self
                .queues
                .get(run)
                .is_some_and(|queue| queue.iter().any(Waiter::waiting))
    }

    /// Blocked clients, for INFO.
    pub fn count(&self) -> usize {
        self.queues
            .values()
            .map(|queue| queue.iter().filter(|w| w.waiting()).count())
            .sum()
    }

    /// Queues a waiter for `run`, with its timeout's deadline, and the time
    /// the run may be free (`None`: now).
    pub fn enqueue(
        &mut self,
        run: Bytes,
        mut waiter: Waiter,
        deadline: Option<Instant>,
        free_at: Option<f64>,
    ) {
        self.next_id += 1;
        waiter.id = self.next_id;
        waiter.deadline = deadline;
        if let Some(deadline) = deadline {
            self.deadlines
                .push(Reverse((deadline, waiter.id, run.clone())));
        }
        self.queues
            .entry(run.clone())
            .or_default()
            .push_back(waiter);
        self.free_at(run, free_at.unwrap_or(f64::NEG_INFINITY));
    }

    /// Notes that `run` may be free at `seconds` on the server's clock.
    pub fn free_at(&mut self, run: Bytes, seconds: f64) {
        if self.queues.contains_key(&run) {
            self.frees.push(Reverse((Seconds(seconds), run)));
        }
    }

    /// The earliest time a waited-for run may be free, in seconds.
    pub fn next_free(&self) -> Option<f64> {
        self.frees.peek().map(|Reverse((Seconds(at), _))| *at)
    }

    /// The earliest timeout.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.peek().map(|Reverse((at, _, _))| *at)
    }

    /// The runs that may be free at `clock`, each once.
    pub fn due(&mut self, clock: f64) -> Vec<Bytes> {
        let mut runs: Vec<Bytes> = Vec::new();
        while let Some(Reverse((Seconds(at), _))) = self.frees.peek()
            && *at <= clock
        {
            let Reverse((_, run)) = self.frees.pop().expect("peeked");
            if self.queues.contains_key(&run) && !runs.contains(&run) {
                runs.push(run);
            }
        }
        runs
    }

    /// The first waiter of `run` still waiting; those gone are dropped.
    pub fn front(&mut self, run: &[u8]) -> Option<&Waiter> {
        let queue = self.queues.get_mut(run)?;
        while queue.front().is_some_and(|waiter| !waiter.waiting()) {
            queue.pop_front();
        }
        if queue.is_empty() {
            self.queues.remove(run);
            return None;
        }
        self.queues.get(run)?.front()
    }

    /// Takes the first waiter of `run` (after [`Waiters::front`]).
    pub fn pop(&mut self, run: &[u8]) -> Option<Waiter> {
        let queue = self.queues.get_mut(run)?;
        let waiter = queue.pop_front();
        if queue.is_empty() {
            self.queues.remove(run);
        }
        waiter
    }

    /// Puts back at the head of its run's queue a waiter taken with
    /// [`Waiters::pop`] whose attempt at the run did not get it (cluster
    /// mode, where a grant is a round trip through the log), keeping its
    /// place and its timeout; gives it back if that has run out meanwhile.
    pub fn push_front(&mut self, run: Bytes, waiter: Waiter, free_at: f64) -> Option<Waiter> {
        if let Some(deadline) = waiter.deadline {
            if deadline <= Instant::now() {
                return Some(waiter);
            }
            self.deadlines
                .push(Reverse((deadline, waiter.id, run.clone())));
        }
        self.queues
            .entry(run.clone())
            .or_default()
            .push_front(waiter);
        self.free_at(run, free_at);
        None
    }

    /// The runs that have waiters.
    pub fn runs(&self) -> Vec<Bytes> {
        self.queues.keys().cloned().collect()
    }

    /// Takes every waiter out.
    pub fn drain(&mut self) -> Vec<Waiter> {
        self.frees.clear();
        self.deadlines.clear();
        self.queues.drain().flat_map(|(_, queue)| queue).collect()
    }

    /// The waiters whose timeout has run out at `now`, taken out.
    pub fn timed_out(&mut self, now: Instant) -> Vec<Waiter> {
        let mut out = Vec::new();
        while let Some(Reverse((at, _, _))) = self.deadlines.peek()
            && *at <= now
        {
            let Reverse((_, id, run)) = self.deadlines.pop().expect("peeked");
            if let Some(waiter) = self.take(&run, |waiter| waiter.id == id) {
                out.push(waiter);
            }
        }
        out
    }

    /// Takes out the waiter of client `client_id`, wherever it waits.
    pub fn take_client(&mut self, client_id: u64) -> Option<Waiter> {
        let run = self
            .queues
            .iter()
            .find(|(_, queue)| queue.iter().any(|w| w.client_id == client_id))
            .map(|(run, _)| run.clone())?;
        self.take(&run, |waiter| waiter.client_id == client_id)
    }

    /// The workers waiting for `run`, in queue order.
    pub fn workers(&self, run: &[u8]) -> Vec<Bytes> {
        self.queues.get(run).map_or_else(Vec::new, |queue| {
            queue
                .iter()
                .filter(|waiter| waiter.waiting())
                .map(|waiter| waiter.worker_id.clone())
                .collect()
        })
    }

    fn take(&mut self, run: &[u8], which: impl Fn(&Waiter) -> bool) -> Option<Waiter> {
        let queue = self.queues.get_mut(run)?;
        let at = queue.iter().position(which)?;
        let waiter = queue.remove(at);
        if queue.is_empty() {
            self.queues.remove(run);
        }
        waiter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(client_id: u64, worker: &str) -> (Waiter, oneshot::Receiver<Granted>) {
        let (reply, receiver) = oneshot::channel();
        let waiter = Waiter {
            id: 0,
            client_id,
            worker_id: Bytes::copy_from_slice(worker.as_bytes()),
            ttl: None,
            lock_delay: None,
            with_data: false,
            reply,
            since: Instant::now(),
            deadline: None,
        };
        (waiter, receiver)
    }

    fn run(name: &str) -> Bytes {
        Bytes::copy_from_slice(name.as_bytes())
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_queue_in_order_and_leave_when_gone_timed_out_or_taken() {
        let mut waiters = Waiters::default();
        let (a, _a) = waiter(1, "a");
        let (b, b_rx) = waiter(2, "b");
        let (c, _c) = waiter(3, "c");
        let now = Instant::now();
        waiters.enqueue(run("r"), a, None, Some(10.0));
        waiters.enqueue(
            run("r"),
            b,
            Some(now + std::time::Duration::from_secs(1)),
            None,
        );
        waiters.enqueue(run("s"), c, None, Some(5.0));
        assert_eq!(waiters.workers(b"r"), [run("a"), run("b")]);
        assert_eq!(waiters.count(), 3);
        // Hints come out earliest first, each run once.
        assert_eq!(waiters.due(7.0), [run("r"), run("s")]);
        assert_eq!(waiters.due(20.0), [run("r")]);
        // A waiter whose client went away is skipped.
        drop(b_rx);
        assert_eq!(waiters.workers(b"r"), [run("a")]);
        assert_eq!(waiters.front(b"r").map(|w| w.client_id), Some(1));
        assert_eq!(waiters.pop(b"r").map(|w| w.client_id), Some(1));
        assert_eq!(waiters.front(b"r").map(|w| w.client_id), None);
        assert!(!waiters.has_waiters(b"r"));
        // The gone waiter's deadline finds nothing to time out.
        let later = now + std::time::Duration::from_secs(2);
        assert!(waiters.timed_out(later).is_empty());
        assert_eq!(waiters.take_client(3).map(|w| w.worker_id), Some(run("c")));
        assert!(waiters.is_empty());
    }
}
