//! The nemesis: three real nodes (every bus link through a proxy),
//! clients acquiring, heartbeating, validating and releasing leases, and
//! a fault injected every few seconds at random; then the history of
//! every client command is checked. Run by examples/nemesis.rs (and
//! bench/nemesis.sh) for minutes, and briefly by tests/cluster.rs; both
//! include this file by `#[path]`, with `cluster.rs`, `proxy.rs`,
//! `history.rs` and `recording.rs` beside it at their crate's root.
//!
//! Faults: kill -9 of the leader or of a follower, restarted after a
//! while; SIGSTOP of the leader, SIGCONT after a while; the leader
//! isolated (its links drop every byte both ways), healed after a while;
//! a node's links delayed (each read held that long, so a busy link also
//! backs up). After each repair it waits for a leader that every node
//! agrees on before the next fault, so at most one node is down at once
//! and a majority can always serve.
//!
//! At the end it heals everything, waits for a leader and for every node
//! to apply the leader's log, reads each run's `LEASE.HISTORY`, runs the
//! checker, and reports each fault's unavailability window: from the
//! fault until an acquire sent after it was answered (a lease or null).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::cluster::Cluster;
use super::history::{self, Call, Op, Recorder, Reply, Violation};
use super::recording::{self, Worker, Workload};

/// How long a client awaits a reply: longer than a write's patience (3 s)
/// and a forward's deadline (5 s).
const REPLY_TIMEOUT: Duration = Duration::from_secs(8);
/// How long the cluster may take to agree on a leader after a repair.
const LEADER_PATIENCE: Duration = Duration::from_secs(30);

/// What to run.
pub struct Settings {
    pub duration: Duration,
    pub clients: usize,
    pub runs: u64,
    /// Each lease's TTL, seconds.
    pub ttl: f64,
    /// Between a client's commands.
    pub pause: Duration,
    /// The mean time between faults, seconds.
    pub every: f64,
    pub seed: u64,
}

/// One injected fault: what, when (on the history's clock), for how
/// long, and how long acquires went unanswered after it (None: never).
pub struct Fault {
    pub what: String,
    pub at: f64,
    pub held: Duration,
    pub unavailable: Option<f64>,
}

/// What a run found.
pub struct Outcome {
    pub faults: Vec<Fault>,
    pub violations: Vec<Violation>,
    /// The history's counts of replies.
    pub summary: String,
    /// How many runs were acquired (and checked after recovery).
    pub runs: usize,
}

impl Outcome {
    /// The summary, a table of the faults, and the verdict.
    pub fn report(&self) -> String {
        let mut text = format!(
            "{}\n{} runs acquired, all checked after recovery\n\n",
            self.summary, self.runs
        );
        text.push_str("fault                              held    unavailable\n");
        for fault in &self.faults {
            let window = (fault.unavailable).map_or("never".to_string(), |s| format!("{s:.2}s"));
            let held = fault.held.as_secs_f64();
            text.push_str(&format!("{:34} {held:5.2}s  {window}\n", fault.what));
        }
        if self.violations.is_empty() {
            text.push_str("\nverdict: no violation\n");
        } else {
            text.push_str(&format!(
                "\nverdict: {} violations\n",
                self.violations.len()
            ));
            for violation in self.violations.iter().take(50) {
                text.push_str(&format!("  {violation:?}\n"));
            }
        }
        text
    }
}

/// xorshift64*: the faults' randomness, repeatable from the seed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in `[low, high)` seconds.
    fn seconds(&mut self, low: f64, high: f64) -> Duration {
        let unit = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        Duration::from_secs_f64(low + unit * (high - low))
    }
}

/// Runs the nemesis with `binary` as the nodes; prints each fault as it
/// is injected.
pub fn run(binary: &Path, settings: &Settings) -> Outcome {
    let mut cluster = Cluster::start(binary, 3, &[]);
    let urls: Vec<String> = (0..cluster.size()).map(|i| cluster.url(i)).collect();
    let recorder = Recorder::new();
    let done = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..settings.clients)
        .map(|client| {
            // Each client starts on a node of its own and moves on when
            // that node does not answer.
            let mut mine = urls.clone();
            mine.rotate_left(client % urls.len());
            let mut worker = Worker::new(client, &mine[0], REPLY_TIMEOUT);
            let workload = Workload {
                runs: settings.runs,
                ttl: settings.ttl,
                pause: settings.pause,
                rotate: true,
            };
            let (recorder, done) = (recorder.clone(), done.clone());
            thread::spawn(move || recording::work(&mut worker, &recorder, &workload, &mine, &done))
        })
        .collect();

    let mut random = Random(settings.seed | 1);
    let mut faults = Vec::new();
    let started = Instant::now();
    loop {
        thread::sleep(random.seconds(settings.every * 0.5, settings.every * 1.5));
        if started.elapsed() >= settings.duration {
            break;
        }
        let fault = inject(&mut cluster, &recorder, &mut random);
        println!(
            "{:7.2}s {} for {:.2}s",
            fault.at,
            fault.what,
            fault.held.as_secs_f64()
        );
        faults.push(fault);
        cluster.leader(LEADER_PATIENCE);
    }

    // Heal all, then let the clients see the healed cluster for a moment.
    cluster.heal();
    for i in 0..cluster.size() {
        if cluster.is_stopped(i) {
            cluster.cont(i);
        }
        if !cluster.is_running(i) {
            cluster.restart(i);
        }
    }
    let leader = cluster.leader(LEADER_PATIENCE);
    thread::sleep(Duration::from_secs(1));
    done.store(true, Ordering::SeqCst);
    for client in clients {
        client.join().expect("client thread");
    }
    cluster.converged(LEADER_PATIENCE);

    let ops = recorder.ops();
    let recovered = recording::recovered(&mut cluster.connect(leader), &ops);
    for fault in &mut faults {
        fault.unavailable = unavailable(&ops, fault.at);
    }
    Outcome {
        faults,
        violations: history::check(&ops, &recovered),
        summary: history::summary(&ops),
        runs: recovered.len(),
    }
}

/// Injects one fault at random, holds it, repairs it; returns it.
fn inject(cluster: &mut Cluster, recorder: &Recorder, random: &mut Random) -> Fault {
    let leader = cluster.leader(LEADER_PATIENCE);
    let follower = (leader + 1 + random.below(2) as usize) % cluster.size();
    let held = random.seconds(1.0, 4.0);
    let at = recorder.now();
    let what = match random.below(5) {
        0 => {
            cluster.kill9(leader);
            thread::sleep(held);
            cluster.restart(leader);
            format!("kill -9 leader (node {})", leader + 1)
        }
        1 => {
            cluster.kill9(follower);
            thread::sleep(held);
            cluster.restart(follower);
            format!("kill -9 follower (node {})", follower + 1)
        }
        2 => {
            cluster.stop(leader);
            thread::sleep(held);
            cluster.cont(leader);
            format!("SIGSTOP leader (node {})", leader + 1)
        }
        3 => {
            cluster.isolate(leader);
            thread::sleep(held);
            cluster.heal();
            format!("isolate leader (node {})", leader + 1)
        }
        _ => {
            let node = random.below(cluster.size() as u64) as usize;
            let delay = Duration::from_millis(20 + random.below(180));
            cluster.delay(node, delay);
            thread::sleep(held);
            cluster.heal();
            let role = if node == leader { "leader" } else { "follower" };
            format!("delay {role} (node {}) {} ms", node + 1, delay.as_millis())
        }
    };
    Fault {
        what,
        at,
        held,
        unavailable: None,
    }
}

/// Seconds from `at` until an acquire sent at or after it was answered
/// (a lease or null): the first such answer's return.
fn unavailable(ops: &[Op], at: f64) -> Option<f64> {
    (ops.iter())
        .filter(|op| matches!(op.call, Call::Acquire { .. }) && op.invoke >= at)
        .filter(|op| matches!(op.reply, Reply::Acquired { .. } | Reply::Held))
        .map(|op| op.ret - at)
        .min_by(f64::total_cmp)
}
