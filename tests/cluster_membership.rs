//! Membership changes on a running cluster, with real processes:
//! `CLUSTER ADDNODE` and `CLUSTER DELNODE` while clients work, every
//! client command recorded and the history checked
//! (tests/common/history.rs).

mod common;
#[path = "common/history.rs"]
mod history;
#[path = "common/recording.rs"]
mod recording;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use history::{Recorder, Reply};
use recording::{Worker, Workload};

const BINARY: &str = env!("CARGO_BIN_EXE_leased");

/// Longer than a write's patience (3 s) and a forward's deadline (5 s).
const REPLY_TIMEOUT: Duration = Duration::from_secs(8);

/// Longer than ADDNODE takes on a loaded machine (it waits 60 s at most).
const CHANGE_TIMEOUT: Duration = Duration::from_secs(70);

/// A command's reply as text: a status, a bulk string, or the error.
fn send(cluster: &Cluster, i: usize, words: &[&str]) -> Result<String, String> {
    let mut con = cluster
        .try_connect(i, CHANGE_TIMEOUT)
        .map_err(|e| e.to_string())?;
    match common::client::words(words).query::<redis::Value>(&mut con) {
        Ok(redis::Value::Okay) => Ok("OK".into()),
        Ok(redis::Value::SimpleString(s)) => Ok(s),
        Ok(redis::Value::BulkString(b)) => Ok(String::from_utf8_lossy(&b).into_owned()),
        Ok(redis::Value::VerbatimString { text, .. }) => Ok(text),
        Ok(other) => Ok(format!("{other:?}")),
        Err(error) => Err(error.to_string()),
    }
}

/// `CLUSTER ADDNODE` of node `new` (started, joining) through the leader.
fn add(cluster: &Cluster, new: usize) {
    let leader = cluster.leader(Duration::from_secs(10));
    let id = (new + 1).to_string();
    let address = cluster.add_address(new);
    let started = Instant::now();
    let reply = send(cluster, leader, &["CLUSTER", "ADDNODE", &id, &address]);
    assert_eq!(reply, Ok("OK".into()), "ADDNODE {id}");
    println!("ADDNODE {id}: {:.2} s", started.elapsed().as_secs_f64());
}

/// `CLUSTER DELNODE` of node `gone` through the leader.
fn remove(cluster: &Cluster, gone: usize) {
    let leader = cluster.leader(Duration::from_secs(10));
    remove_through(cluster, leader, gone);
}

/// `CLUSTER DELNODE` of node `gone`, sent to node `via`.
fn remove_through(cluster: &Cluster, via: usize, gone: usize) {
    let id = (gone + 1).to_string();
    let reply = send(cluster, via, &["CLUSTER", "DELNODE", &id]);
    assert_eq!(
        reply,
        Ok("OK".into()),
        "DELNODE {id} through node {}",
        via + 1
    );
}

/// The node whose log says it committed node `gone`'s removal, and the
/// term it led in then.
fn remover(cluster: &Cluster, gone: usize) -> Option<(usize, u64)> {
    let said = format!(
        "CLUSTER DELNODE {}: committed by this node, the leader in term ",
        gone + 1
    );
    (0..cluster.size()).find_map(|i| {
        let log = cluster.log(i);
        let term = log.split(&said).nth(1)?.split_whitespace().next()?;
        Some((i, term.parse().ok()?))
    })
}

/// The longest time between two successful commands (an answer, not
/// `-TRYAGAIN` or `-UNCERTAIN`) that ended between `from` and `to`, and
/// when it began: how long the clients, together, were left without
/// service.
fn longest_gap(recorder: &Recorder, from: f64, to: f64) -> (f64, f64) {
    let mut done: Vec<f64> = (recorder.ops().iter())
        .filter(|op| !matches!(op.reply, Reply::TryAgain | Reply::Uncertain))
        .map(|op| op.ret)
        .filter(|&ret| ret >= from && ret <= to)
        .collect();
    done.sort_by(f64::total_cmp);
    (done.windows(2))
        .map(|pair| (pair[1] - pair[0], pair[0]))
        .fold(
            (0.0, from),
            |longest, gap| if gap.0 > longest.0 { gap } else { longest },
        )
}

/// The voters node i's `CLUSTER NODES` lists (those without `nofailover`).
fn voters(cluster: &Cluster, i: usize) -> Vec<u64> {
    let nodes = send(cluster, i, &["CLUSTER", "NODES"]).expect("CLUSTER NODES");
    let mut ids: Vec<u64> = (nodes.lines())
        .filter(|line| !line.split(' ').nth(2).unwrap_or("").contains("nofailover"))
        .map(|line| u64::from_str_radix(line.split(' ').next().unwrap(), 16).unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

/// Waits until every running node's `CLUSTER NODES` lists `expected` as
/// its voters.
fn wait_voters(cluster: &Cluster, expected: &[u64]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in (0..cluster.size()).filter(|&i| cluster.is_running(i)) {
        loop {
            let seen = voters(cluster, i);
            if seen == expected {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {} sees voters {seen:?}, not {expected:?}",
                i + 1
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `count` clients on nodes `on` (rotating among them when a reply is not
/// an answer), a command every 20 ms on eight runs of 2 s leases.
fn clients(
    cluster: &Cluster,
    on: &[usize],
    count: usize,
    recorder: &Recorder,
    done: &Arc<AtomicBool>,
) -> Vec<thread::JoinHandle<Vec<(f64, Reply)>>> {
    let urls: Vec<String> = on.iter().map(|&i| cluster.url(i)).collect();
    let workload = Workload {
        runs: 8,
        ttl: 2.0,
        pause: Duration::from_millis(20),
        rotate: true,
    };
    recording::spawn_clients(&urls, count, workload, REPLY_TIMEOUT, recorder, done)
}

/// The checker finds nothing, and no command failed with an error other
/// than -TRYAGAIN or -UNCERTAIN.
fn assert_safe(cluster: &Cluster, recorder: &Recorder) {
    let ops = recorder.ops();
    let errors: Vec<_> = (ops.iter())
        .filter(|op| matches!(op.reply, Reply::Error(_)))
        .collect();
    assert!(errors.is_empty(), "failed commands: {errors:#?}");
    let leader = cluster.leader(Duration::from_secs(10));
    let recovered = recording::recovered(&mut cluster.connect(leader), &ops);
    let violations = history::check(&ops, &recovered);
    println!("{}", history::summary(&ops));
    assert!(violations.is_empty(), "violations: {violations:#?}");
    let acquired = (ops.iter())
        .filter(|op| matches!(op.reply, Reply::Acquired { .. }))
        .count();
    assert!(acquired > 10, "the load hardly ran: {acquired} acquires");
}

#[test]
fn three_nodes_grow_to_five_and_back_to_three_under_load() {
    let mut cluster = Cluster::start(Path::new(BINARY), 3, &[]);
    let recorder = Recorder::new();
    let done = Arc::new(AtomicBool::new(false));
    let running = clients(&cluster, &[0, 1, 2], 6, &recorder, &done);
    thread::sleep(Duration::from_millis(500));

    let mut phases = vec![("3 voters", recorder.now())];
    // Node 4 joins while the clients work.
    let four = cluster.add_node();
    assert_eq!(cluster.info_number(four, "cluster_known_nodes"), Some(0));
    add(&cluster, four);
    // Node 5: its ADDNODE waits for it, and a second change meanwhile is
    // refused.
    let five = cluster.add_node_stopped();
    let adding = {
        let leader = cluster.leader(Duration::from_secs(10));
        let url = cluster.url(leader);
        let address = cluster.add_address(five);
        thread::spawn(move || {
            let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
            redis::cmd("CLUSTER")
                .arg("ADDNODE")
                .arg(5)
                .arg(address)
                .query::<String>(&mut con)
        })
    };
    let leader = cluster.leader(Duration::from_secs(10));
    // Once the leader has taken it (a line its log shows; nothing else
    // says so).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cluster.log(leader).contains("node 5 joins as a learner") {
        assert!(Instant::now() < deadline, "{}", cluster.log(leader));
        thread::sleep(Duration::from_millis(10));
    }
    let busy = send(&cluster, leader, &["CLUSTER", "DELNODE", "4"]);
    assert!(
        busy.as_ref()
            .is_err_and(|e| e.contains("a membership change is in progress")),
        "{busy:?}; ADDNODE 5: {:?}",
        adding.is_finished()
    );
    cluster.restart(five);
    assert_eq!(adding.join().unwrap().as_deref(), Ok("OK"));
    wait_voters(&cluster, &[1, 2, 3, 4, 5]);
    phases.push(("5 voters", recorder.now()));
    // The new nodes serve: what they apply is the others' state.
    cluster.converged(Duration::from_secs(10));
    let mut worker = Worker::new(99, &cluster.url(five), REPLY_TIMEOUT);
    let acquired = worker.send(
        &recorder,
        history::Call::Acquire {
            run: "on-five".into(),
            ttl: 30.0,
        },
    );
    assert!(matches!(acquired, Reply::Acquired { .. }), "{acquired:?}");
    thread::sleep(Duration::from_millis(500));

    // Back to three: a follower, then the leader itself.
    remove(&cluster, five);
    cluster.kill9(five);
    phases.push(("4 voters", recorder.now()));
    let leader = cluster.leader(Duration::from_secs(10));
    remove(&cluster, leader);
    phases.push(("leader removed", recorder.now()));
    let removed = Instant::now();
    let others: Vec<usize> = [0, 1, 2, 3].into_iter().filter(|&i| i != leader).collect();
    let next = cluster.leader_among(&others, Duration::from_secs(10));
    assert_ne!(next, leader);
    println!(
        "DELNODE of the leader (node {}): node {} leads {:.2} s after the reply",
        leader + 1,
        next + 1,
        removed.elapsed().as_secs_f64()
    );
    // The removed leader handed its lead over before its removal: it
    // serves no lease command once the DELNODE answered, and says why.
    let refused = send(&cluster, leader, &["LEASE.GET", "gone"]);
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("removed")),
        "{refused:?}"
    );
    let (by, _) = remover(&cluster, leader).expect("a node committed the removal");
    assert_ne!(by, leader, "the removed leader committed its own removal");
    assert!(
        cluster.log(leader).contains("was removed from the cluster"),
        "{}",
        cluster.log(leader)
    );
    cluster.kill9(leader);
    let mut three: Vec<u64> = others.iter().map(|&i| i as u64 + 1).collect();
    three.sort_unstable();
    wait_voters(&cluster, &three);
    thread::sleep(Duration::from_millis(500));
    done.store(true, Ordering::SeqCst);
    for client in running {
        client.join().unwrap();
    }
    cluster.converged(Duration::from_secs(10));
    phases.push(("end", recorder.now()));
    report(&recorder, &phases);
    assert_safe(&cluster, &recorder);
}

#[test]
fn removing_the_leader_hands_its_lead_over_before_the_removal_commits() {
    let mut cluster = Cluster::start(Path::new(BINARY), 3, &[]);
    let recorder = Recorder::new();
    let done = Arc::new(AtomicBool::new(false));
    // Clients on every node, the leader included.
    let running = clients(&cluster, &[0, 1, 2], 6, &recorder, &done);
    thread::sleep(Duration::from_millis(1000));

    let leader = cluster.leader(Duration::from_secs(10));
    let term = cluster
        .info_number(leader, "cluster_current_epoch")
        .unwrap();
    let asked = recorder.now();
    remove(&cluster, leader);
    let answered = recorder.now();
    // The removal was committed by another node, leading in a later term:
    // the lead moved first.
    let (by, in_term) = remover(&cluster, leader).expect("a node committed the removal");
    assert_ne!(by, leader, "{}", cluster.log(leader));
    assert!(in_term > term, "committed in term {in_term}, led in {term}");
    let log = cluster.log(leader);
    assert!(log.contains("hands its lead to node"), "{log}");
    assert!(log.contains("was removed from the cluster"), "{log}");
    // The removed node says so to its clients at once.
    let refused = send(&cluster, leader, &["LEASE.GET", "r1"]);
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("removed")),
        "{refused:?}"
    );
    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    assert_eq!(cluster.leader_among(&others, Duration::from_secs(10)), by);
    thread::sleep(Duration::from_millis(1000));
    done.store(true, Ordering::SeqCst);
    for client in running {
        client.join().unwrap();
    }
    cluster.kill9(leader);
    let mut two: Vec<u64> = others.iter().map(|&i| i as u64 + 1).collect();
    two.sort_unstable();
    wait_voters(&cluster, &two);
    let end = recorder.now();
    let phases = [
        ("before", 0.0),
        ("DELNODE", asked),
        ("after", answered),
        ("end", end),
    ];
    report(&recorder, &phases);
    let (gap, at) = longest_gap(&recorder, asked - 1.0, answered + 1.0);
    println!(
        "DELNODE of the leader (node {}) took {:.3} s; node {} committed it in term {in_term} \
         (was {term}); longest time without a successful command around it: {:.3} s, from \
         {:.3} s after the DELNODE was sent",
        leader + 1,
        answered - asked,
        by + 1,
        gap,
        at - asked
    );
    assert_safe(&cluster, &recorder);
}

#[test]
fn changes_sent_to_a_follower_are_made_by_the_leader_with_moved_redirects() {
    let mut cluster = Cluster::start(Path::new(BINARY), 3, &["--cluster-redirect", "moved"]);
    let leader = cluster.leader(Duration::from_secs(10));
    let follower = (leader + 1) % 3;
    // Keyed commands are redirected by this follower; membership changes,
    // keyless, are sent to the leader.
    let moved = send(&cluster, follower, &["LEASE.GET", "a"]);
    let leader_port = cluster.nodes[leader].port.to_string();
    assert!(
        moved
            .as_ref()
            .is_err_and(|e| e.to_lowercase().contains("moved") && e.contains(&leader_port)),
        "{moved:?}"
    );
    let four = cluster.add_node();
    let address = cluster.add_address(four);
    let reply = send(&cluster, follower, &["CLUSTER", "ADDNODE", "4", &address]);
    assert_eq!(reply, Ok("OK".into()));
    assert!(
        cluster.log(follower).contains("CLUSTER ADDNODE 4"),
        "{}",
        cluster.log(follower)
    );
    wait_voters(&cluster, &[1, 2, 3, 4]);
    // The leader's refusals come back as they are.
    let voter = send(&cluster, follower, &["CLUSTER", "ADDNODE", "4", &address]);
    assert!(
        voter.as_ref().is_err_and(|e| e.contains("already a voter")),
        "{voter:?}"
    );
    // The leader's own removal, sent to a follower: the leader hands its
    // lead over, and the new leader (maybe this follower) removes it.
    remove_through(&cluster, follower, leader);
    let (by, _) = remover(&cluster, leader).expect("a node committed the removal");
    assert_ne!(by, leader);
    let mut rest: Vec<u64> = [0, 1, 2, 3]
        .into_iter()
        .filter(|&i| i != leader)
        .map(|i| i as u64 + 1)
        .collect();
    cluster.kill9(leader);
    wait_voters(&cluster, &rest);
    // And a follower's removal, sent to another follower.
    let next = cluster.leader(Duration::from_secs(10));
    let followers: Vec<usize> = [0, 1, 2, 3]
        .into_iter()
        .filter(|&i| i != leader && i != next)
        .collect();
    remove_through(&cluster, followers[0], followers[1]);
    // The removed follower is told (it would not learn it from the log:
    // the leader stops replicating to it as it appends its removal). A
    // keyless read, not redirected, says so.
    let gone = followers[1];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let refused = send(&cluster, gone, &["LEASE.SCAN", "0"]);
        if refused.as_ref().is_err_and(|e| e.contains("removed")) {
            break;
        }
        assert!(Instant::now() < deadline, "{refused:?}");
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        cluster.log(gone).contains("was removed from the cluster"),
        "{}",
        cluster.log(gone)
    );
    cluster.kill9(gone);
    rest.retain(|&id| id != gone as u64 + 1);
    wait_voters(&cluster, &rest);
}

#[test]
fn a_leader_that_cannot_hand_its_lead_over_removes_nothing() {
    let cluster = Cluster::start(Path::new(BINARY), 3, &[]);
    let leader = cluster.leader(Duration::from_secs(10));
    let id = (leader + 1).to_string();
    // Cut off from the others, it can hand its lead to nobody.
    cluster.isolate(leader);
    let started = Instant::now();
    let refused = send(&cluster, leader, &["CLUSTER", "DELNODE", &id]);
    println!(
        "DELNODE of an isolated leader refused after {:.2} s: {refused:?}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        refused.as_ref().is_err_and(
            |e| e.contains("could not hand its lead over") && e.contains("nothing was removed")
        ),
        "{refused:?}"
    );
    cluster.heal();
    // Still a member: the three agree on a leader and on three voters,
    // and the old leader serves its clients again.
    cluster.leader(Duration::from_secs(10));
    wait_voters(&cluster, &[1, 2, 3]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let served = send(&cluster, leader, &["LEASE.GET", "a"]);
        if served.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "{served:?}");
        thread::sleep(Duration::from_millis(20));
    }
    assert!(remover(&cluster, leader).is_none());
}

/// Each phase's replies: successes, -TRYAGAIN, -UNCERTAIN.
fn report(recorder: &Recorder, phases: &[(&str, f64)]) {
    let ops = recorder.ops();
    for pair in phases.windows(2) {
        let (name, from, to) = (pair[0].0, pair[0].1, pair[1].1);
        let ops: Vec<_> = (ops.iter())
            .filter(|op| op.invoke >= from && op.invoke < to)
            .collect();
        let count = |f: fn(&Reply) -> bool| ops.iter().filter(|op| f(&op.reply)).count();
        println!(
            "{name:15} {:5.2} s: {} commands, {} tryagain, {} uncertain",
            to - from,
            ops.len(),
            count(|r| matches!(r, Reply::TryAgain)),
            count(|r| matches!(r, Reply::Uncertain))
        );
    }
}

#[test]
fn a_dead_node_is_replaced_through_a_follower() {
    let mut cluster = Cluster::start(Path::new(BINARY), 3, &[]);
    let leader = cluster.leader(Duration::from_secs(10));
    let follower = (leader + 1) % 3;
    let mut con = cluster.connect(leader);
    let token: redis::Value = redis::cmd("LEASE.ACQUIRE")
        .arg("kept")
        .arg("w")
        .arg("TTL")
        .arg(600)
        .query(&mut con)
        .unwrap();
    assert!(matches!(
        token,
        redis::Value::Map(_) | redis::Value::Array(_)
    ));

    // Bad requests are refused, by the leader and through a follower.
    for (words, error) in [
        (&["CLUSTER", "DELNODE", "9"][..], "not a member"),
        (&["CLUSTER", "DELNODE", "0"][..], "Invalid node id"),
        (
            &["CLUSTER", "ADDNODE", "2", "127.0.0.1:1"][..],
            "already a voter",
        ),
        (
            &["CLUSTER", "ADDNODE", "7", "nowhere:1"][..],
            "Invalid node address",
        ),
    ] {
        for via in [leader, follower] {
            let reply = send(&cluster, via, words);
            assert!(
                reply.as_ref().is_err_and(|e| e.contains(error)),
                "{words:?} on node {}: {reply:?}",
                via + 1
            );
        }
    }

    // The other follower dies; it is removed, and a new node takes its
    // place, both sent to the follower left.
    let dead = (leader + 2) % 3;
    cluster.kill9(dead);
    remove_through(&cluster, follower, dead);
    let new = cluster.add_node();
    let address = cluster.add_address(new);
    let id = (new + 1).to_string();
    let reply = send(&cluster, follower, &["CLUSTER", "ADDNODE", &id, &address]);
    assert_eq!(reply, Ok("OK".into()), "ADDNODE {id} through a follower");
    let mut expected: Vec<u64> = [leader, follower, new]
        .iter()
        .map(|&i| i as u64 + 1)
        .collect();
    expected.sort_unstable();
    wait_voters(&cluster, &expected);
    cluster.converged(Duration::from_secs(10));
    // With the new node, the old leader's death leaves a majority.
    cluster.kill9(leader);
    let next = cluster.leader_among(&[follower, new], Duration::from_secs(10));
    let mut con = cluster.connect(new);
    let held: Option<std::collections::HashMap<String, redis::Value>> =
        redis::cmd("LEASE.GET").arg("kept").query(&mut con).unwrap();
    let held = held.expect("the lease is kept");
    assert_eq!(held["worker_id"], redis::Value::BulkString(b"w".to_vec()));
    println!("node {} leads", next + 1);
}
