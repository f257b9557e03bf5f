//! Linearizability of the cluster, checked: concurrent clients send random
//! lease commands to random nodes of an in-process cluster while its leader
//! is cut off and healed, and stateright's `LinearizabilityTester` looks
//! for one order of the commands, respecting real time, in which the
//! registry's reference model (`registry::model`) gives every reply the
//! clients saw.
//!
//! Every write carries an explicit `now` far above the machine's clock
//! (lease-max-skew is off), so leader stamps lag registry time and a
//! command is evaluated at its `now` or at registry time, as the model
//! evaluates it with a lagging clock: the outcome depends on the order of
//! commands only, which is what the tester searches. A read (VALIDATE,
//! GET) carries the client's `now` (above registry time: it goes through
//! the log), none, or one a few commands old (served at a read index, at
//! registry time, which the model's lagging clock gives too), so reads
//! at a read index, on the leader and on followers, mix with writes.
//!
//! The network drops (cuts) and delays links at random moments, and the
//! nodes' clocks are off each other's by up to a second (proptest picks
//! the faults, their times and the offsets).
//!
//! A command refused with `-TRYAGAIN` did not happen and is left out; one
//! answered `-UNCERTAIN` stays in flight for good (it may or may not have
//! happened), and its client goes on as a new thread of the history.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};

use super::core_tests::Cluster;
use crate::core::{CoreAnswer, CoreCommand, Refusal};
use crate::registry::model::Model;
use crate::registry::{Op, Outcome};

/// Far above the machine's clock: leaders' stamps always lag it.
const BASE: f64 = 1e10;
const CLIENTS: u64 = 4;
/// Clients that only read (GET without `now`, at a read index), faster
/// than the others: a node answering from a replica behind the log (an
/// isolated old leader, a follower that has not caught up) would be seen.
const READERS: u64 = 2;
const READS_PER_READER: usize = 60;
/// The readers' thread ids start here, apart from the clients' (which
/// move up by `CLIENTS` after each `-UNCERTAIN`).
const READER_THREADS: u64 = 1 << 32;
const OPS_PER_CLIENT: usize = 30;
const RUNS: [&str; 2] = ["run-a", "run-b"];

/// The reference model as stateright's sequential specification.
#[derive(Clone, Debug)]
struct Spec(Model);

impl SequentialSpec for Spec {
    type Op = Op;
    type Ret = Outcome;

    fn invoke(&mut self, op: &Op) -> Outcome {
        // A clock below every `now`: the model evaluates at registry time,
        // as replicas do with a lagging stamp.
        self.0
            .apply(op, 0.0)
            .expect("the model knows every lease op")
    }
}

/// One command as a client saw it: when it was sent and answered, in one
/// sequence shared by all clients, and its answer.
#[derive(Debug)]
struct Call {
    thread: u64,
    op: Op,
    sent: u64,
    answered: u64,
    result: Result<Outcome, Refusal>,
}

/// A small deterministic generator (xorshift), one per client.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, sides: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % sides
    }
}

/// The next command of a client that last held `held`.
fn next_op(dice: &mut Dice, worker: &str, held: &Option<(Bytes, u64)>, now: f64) -> Op {
    let run = Bytes::from_static(RUNS[dice.roll(2) as usize].as_bytes());
    let (lease_id, token) = held
        .clone()
        .unwrap_or_else(|| (Bytes::from_static(b"run-a:nobody:1"), 1));
    match dice.roll(6) {
        0 | 1 => Op::Acquire {
            run_id: run,
            worker_id: Bytes::copy_from_slice(worker.as_bytes()),
            now: Some(now),
            ttl: Some(2.0),
            lock_delay: None,
            with_data: false,
        },
        2 => Op::Heartbeat {
            lease_id,
            token,
            now: Some(now),
        },
        3 => Op::Validate {
            run_id: run,
            lease_id,
            token,
            now: read_now(dice, now),
        },
        4 => Op::Release { lease_id, token },
        _ => Op::Get {
            run_id: run,
            now: read_now(dice, now),
        },
    }
}

/// A read's `now`: the client's (the read moves registry time, through the
/// log), none, or one eight commands old (mostly not above registry time:
/// both served at a read index).
fn read_now(dice: &mut Dice, now: f64) -> Option<f64> {
    match dice.roll(3) {
        0 => Some(now),
        1 => None,
        _ => Some(now - 2.0),
    }
}

/// Runs one client: its commands to random nodes, recorded.
#[allow(clippy::too_many_arguments)]
async fn client(
    cluster: Arc<Cluster>,
    index: u64,
    seed: u64,
    ids: Vec<u64>,
    sequence: Arc<AtomicU64>,
    time: Arc<AtomicU64>,
    calls: Arc<Mutex<Vec<Call>>>,
) {
    let mut dice = Dice((0x9E37_79B9_7F4A_7C15 ^ seed ^ ((index + 1) * 0x2545_F491)) | 1);
    let worker = format!("w{index}");
    let mut thread = index;
    let mut held: Option<(Bytes, u64)> = None;
    for _ in 0..OPS_PER_CLIENT {
        // Paced, so the commands span the partition and the healing.
        tokio::time::sleep(Duration::from_millis(80)).await;
        // Time moves a quarter second per command, shared by all clients,
        // so leases (TTL 2) expire and runs change hands.
        let now = BASE + time.fetch_add(1, Ordering::SeqCst) as f64 * 0.25;
        let op = next_op(&mut dice, &worker, &held, now);
        let node = ids[dice.roll(ids.len() as u64) as usize];
        let call = send(&cluster, node, op, &sequence, thread).await;
        if let Ok(Outcome::Acquired(Some(lease))) = &call.result {
            held = Some((lease.lease_id().into(), lease.fencing_token));
        }
        let uncertain = matches!(call.result, Err(Refusal::Uncertain(_)));
        calls.lock().unwrap().push(call);
        if uncertain {
            // Its command stays in flight: the client goes on as another
            // thread of the history.
            thread += CLIENTS;
        }
    }
}

/// Runs one reader: GETs without `now` to random nodes, recorded.
async fn reader(
    cluster: Arc<Cluster>,
    index: u64,
    seed: u64,
    ids: Vec<u64>,
    sequence: Arc<AtomicU64>,
    calls: Arc<Mutex<Vec<Call>>>,
) {
    let mut dice = Dice((0x51_7CC1_B727_220A ^ seed ^ ((index + 1) * 0x2545_F491)) | 1);
    for _ in 0..READS_PER_READER {
        tokio::time::sleep(Duration::from_millis(25)).await;
        let op = Op::Get {
            run_id: Bytes::from_static(RUNS[dice.roll(2) as usize].as_bytes()),
            now: None,
        };
        let node = ids[dice.roll(ids.len() as u64) as usize];
        let call = send(&cluster, node, op, &sequence, READER_THREADS + index).await;
        calls.lock().unwrap().push(call);
    }
}

/// Sends `op` to node `node` for history thread `thread`: the call, its
/// sending and answer placed in real-time order by `sequence`.
async fn send(cluster: &Cluster, node: u64, op: Op, sequence: &AtomicU64, thread: u64) -> Call {
    let sent = sequence.fetch_add(1, Ordering::SeqCst);
    let answer = cluster.core(node).call(vec![CoreCommand::Op(op.clone())]);
    let answer = answer.await.answers.pop().expect("one answer");
    let answered = sequence.fetch_add(1, Ordering::SeqCst);
    let result = match answer {
        CoreAnswer::Outcome(outcome) => Ok(outcome),
        CoreAnswer::Refused(refusal) => Err(refusal),
        other => panic!("unexpected answer {other:?}"),
    };
    Call {
        thread,
        op,
        sent,
        answered,
        result,
    }
}

/// Feeds the calls to the tester in real-time order: `TRYAGAIN`s left
/// out, `UNCERTAIN`s invoked and never returned.
fn check(calls: &[Call]) -> Result<usize, String> {
    let mut events: Vec<(u64, usize, bool)> = Vec::new();
    for (index, call) in calls.iter().enumerate() {
        match &call.result {
            Err(Refusal::TryAgain(_)) => {}
            Err(Refusal::Uncertain(_)) => events.push((call.sent, index, true)),
            Ok(_) => {
                events.push((call.sent, index, true));
                events.push((call.answered, index, false));
            }
            Err(other) => return Err(format!("refused: {other:?} for {:?}", call.op)),
        }
    }
    events.sort_by_key(|(at, _, _)| *at);
    let mut tester = LinearizabilityTester::new(Spec(Model::new(10.0, 0)));
    for (_, index, invoke) in events {
        let call = &calls[index];
        match (invoke, &call.result) {
            (true, _) => tester.on_invoke(call.thread, call.op.clone())?,
            (false, Ok(outcome)) => tester.on_return(call.thread, outcome.clone())?,
            (false, Err(_)) => unreachable!("only answered calls return"),
        };
    }
    let certain = calls.iter().filter(|call| call.result.is_ok()).count();
    match tester.is_consistent() {
        true => Ok(certain),
        false => Err("no linearization explains the replies".into()),
    }
}

/// A fault the network suffers, some milliseconds into the run.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// The node that leads at that moment is cut off from the others.
    IsolateLeader,
    /// One node (by position) is cut off.
    Isolate(usize),
    /// The link between two nodes (by position) is cut both ways.
    Cut(usize, usize),
    /// The link between two nodes (by position) delayed, both ways.
    Delay(usize, usize, u64),
    /// Every link mended.
    Heal,
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        2 => Just(Fault::IsolateLeader),
        1 => (0..3usize).prop_map(Fault::Isolate),
        1 => (0..3usize, 0..3usize).prop_map(|(a, b)| Fault::Cut(a, b)),
        1 => (0..3usize, 0..3usize, 10..300u64).prop_map(|(a, b, ms)| Fault::Delay(a, b, ms)),
        1 => Just(Fault::Heal),
    ]
}

/// A read served at a read index, whatever the registry time.
fn read_without_now(op: &Op) -> bool {
    matches!(
        op,
        Op::Validate { now: None, .. } | Op::Get { now: None, .. }
    )
}

/// Runs the clients against a cluster while `faults` happen, each after
/// its pause, then heals and checks the history.
async fn run_with(faults: Vec<(u64, Fault)>, seed: u64, offsets: &[f64]) {
    let cluster = Arc::new(Cluster::start_with(&[1, 2, 3], offsets).await);
    let ids = vec![1, 2, 3];
    cluster.leader(&ids).await;
    let sequence = Arc::new(AtomicU64::new(0));
    let time = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(Mutex::new(Vec::new()));
    let readers: Vec<_> = (0..READERS)
        .map(|index| {
            let (sequence, calls) = (sequence.clone(), calls.clone());
            let ids = ids.clone();
            tokio::spawn(reader(cluster.clone(), index, seed, ids, sequence, calls))
        })
        .collect();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|index| {
            let (sequence, time, calls) = (sequence.clone(), time.clone(), calls.clone());
            let ids = ids.clone();
            tokio::spawn(client(
                cluster.clone(),
                index,
                seed,
                ids,
                sequence,
                time,
                calls,
            ))
        })
        .collect();
    for (pause, fault) in faults {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        match fault {
            Fault::IsolateLeader => {
                let leader = (ids.iter()).find(|&&id| cluster.nodes_leads(id)).copied();
                if let Some(leader) = leader {
                    cluster.router.isolate(leader);
                }
            }
            Fault::Isolate(node) => cluster.router.isolate(ids[node]),
            Fault::Cut(a, b) if a != b => cluster.router.cut(ids[a], ids[b]),
            Fault::Delay(a, b, ms) if a != b => {
                cluster
                    .router
                    .delay(ids[a], ids[b], Duration::from_millis(ms));
            }
            Fault::Cut(..) | Fault::Delay(..) => {}
            Fault::Heal => cluster.router.heal(),
        }
    }
    cluster.router.heal();
    for client in clients.into_iter().chain(readers) {
        client.await.unwrap();
    }
    let calls = calls.lock().unwrap();
    let count = |pick: fn(&Call) -> bool| calls.iter().filter(|call| pick(call)).count();
    eprintln!(
        "{} commands: {} answered, {} TRYAGAIN, {} UNCERTAIN; {} reads without now answered",
        calls.len(),
        count(|call| call.result.is_ok()),
        count(|call| matches!(call.result, Err(Refusal::TryAgain(_)))),
        count(|call| matches!(call.result, Err(Refusal::Uncertain(_)))),
        count(|call| call.result.is_ok() && read_without_now(&call.op)),
    );
    let certain = check(&calls).unwrap_or_else(|error| panic!("{error}: {calls:#?}"));
    assert!(certain > 0, "no command was answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_through_a_leader_partition_are_linearizable() {
    let faults = vec![(500, Fault::IsolateLeader), (2500, Fault::Heal)];
    run_with(faults, 1, &[0.0, 0.3, -0.3]).await;
}

proptest! {
    // A few cases by default (each runs a cluster for seconds);
    // PROPTEST_CASES=N runs more.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(2),
        ..ProptestConfig::default()
    })]
    #[test]
    fn replies_through_random_faults_are_linearizable(
        faults in proptest::collection::vec((100..1500u64, fault()), 1..4),
        seed in any::<u64>(),
        offsets in proptest::collection::vec(-0.5..0.5f64, 3),
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(run_with(faults, seed, &offsets));
    }
}

#[test]
fn the_checker_catches_a_reply_no_order_explains() {
    let acquire = |worker: &str, now: f64| Op::Acquire {
        run_id: Bytes::from_static(b"run-a"),
        worker_id: Bytes::copy_from_slice(worker.as_bytes()),
        now: Some(BASE + now),
        ttl: Some(2.0),
        lock_delay: None,
        with_data: false,
    };
    let first = Model::new(10.0, 0).apply(&acquire("w0", 0.0), 0.0).unwrap();
    let call = |thread, op, sent, answered, result| Call {
        thread,
        op,
        sent,
        answered,
        result: Ok(result),
    };
    // Two acquires of one run, one after the other, both granted.
    let calls = vec![
        call(0, acquire("w0", 0.0), 0, 1, first.clone()),
        call(1, acquire("w1", 0.5), 2, 3, first),
    ];
    assert!(check(&calls).is_err());
    // The second one refused: explained.
    let mut calls = calls;
    calls[1].result = Ok(Outcome::Acquired(None));
    assert_eq!(check(&calls), Ok(2));
}
