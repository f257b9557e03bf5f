//! Cluster mode with real processes on loopback: three `leased` nodes,
//! each bus link through a proxy of our own (tests/common/proxy.rs) so a
//! test can partition, delay or reset it; every client command goes into
//! a history that the checker (tests/common/history.rs) then examines.

mod common;
#[path = "common/history.rs"]
mod history;
#[path = "common/nemesis.rs"]
mod nemesis;
#[path = "common/recording.rs"]
mod recording;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

// `cluster` itself too: nemesis.rs finds it as `super::cluster`.
use common::cluster::{self, Cluster};
use common::proxy::{Mode, Proxy};
use history::{Call, Recorder, Reply};
use recording::{Worker, Workload};

/// An echo server, for the proxy's own test.
fn echo() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut stream = stream;
                let mut buffer = [0; 1024];
                while let Ok(read) = stream.read(&mut buffer) {
                    if read == 0 || stream.write_all(&buffer[..read]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

fn roundtrip(stream: &mut TcpStream, text: &[u8]) -> std::io::Result<Vec<u8>> {
    stream.write_all(text)?;
    let mut back = vec![0; text.len()];
    stream.read_exact(&mut back)?;
    Ok(back)
}

#[test]
fn the_proxy_passes_drops_delays_and_resets() {
    let proxy = Proxy::start(echo());
    let mut stream = TcpStream::connect(proxy.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    assert_eq!(roundtrip(&mut stream, b"one").unwrap(), b"one");

    proxy.set_forth(Mode::Drop);
    let lost = roundtrip(&mut stream, b"two").unwrap_err();
    assert_eq!(lost.kind(), std::io::ErrorKind::WouldBlock, "{lost}");

    proxy.set(Mode::Pass);
    assert_eq!(roundtrip(&mut stream, b"three").unwrap(), b"three");

    proxy.set_back(Mode::Delay(Duration::from_millis(300)));
    let started = std::time::Instant::now();
    assert_eq!(roundtrip(&mut stream, b"four").unwrap(), b"four");
    assert!(started.elapsed() >= Duration::from_millis(300));

    proxy.set(Mode::Pass);
    proxy.reset();
    let mut closed = [0; 1];
    assert_eq!(
        stream.read(&mut closed).unwrap_or(0),
        0,
        "reset closes the link"
    );
    let mut again = TcpStream::connect(proxy.addr).unwrap();
    assert_eq!(roundtrip(&mut again, b"five").unwrap(), b"five");
}

// ---------------------------------------------------------------------
// Three real nodes
// ---------------------------------------------------------------------

const BINARY: &str = env!("CARGO_BIN_EXE_leased");

/// How long a reply is awaited: longer than a write's patience (3 s) and
/// a forward's deadline (5 s).
const REPLY_TIMEOUT: Duration = Duration::from_secs(8);

/// Three nodes with default settings.
fn cluster() -> Cluster {
    Cluster::start(Path::new(BINARY), 3, &[])
}

fn call(con: &mut redis::Connection, words: &[&str]) -> redis::RedisResult<redis::Value> {
    common::client::words(words).query(con)
}

/// `LEASE.ACQUIRE run worker TTL ttl` through `worker`, resent while the
/// cluster answers TRYAGAIN or UNCERTAIN (on another run name for an
/// uncertain one, whose first attempt may have taken the run), until
/// `patience` passes. The token and the run it was taken on.
fn acquire_until(
    worker: &mut Worker,
    recorder: &Recorder,
    run: &str,
    ttl: f64,
    patience: Duration,
) -> (i64, String) {
    let deadline = Instant::now() + patience;
    let mut attempt = 0;
    loop {
        let name = if attempt == 0 {
            run.to_string()
        } else {
            format!("{run}.{attempt}")
        };
        let reply = worker.send(
            recorder,
            Call::Acquire {
                run: name.clone(),
                ttl,
            },
        );
        match reply {
            Reply::Acquired { token, .. } => return (token, name),
            Reply::TryAgain => {}
            Reply::Uncertain => attempt += 1,
            other => panic!("acquire {name}: {other:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "no acquire of {run} within {patience:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts the checker finds nothing in the recorded history.
fn assert_safe(cluster: &Cluster, recorder: &Recorder) {
    let ops = recorder.ops();
    let leader = cluster.leader(Duration::from_secs(10));
    let recovered = recording::recovered(&mut cluster.connect(leader), &ops);
    let violations = history::check(&ops, &recovered);
    println!("{}", history::summary(&ops));
    assert!(violations.is_empty(), "violations: {violations:#?}");
}

#[test]
fn three_nodes_form_a_cluster_and_serve_through_every_node() {
    let cluster = cluster();
    let leader = cluster.leader(Duration::from_secs(10));
    for i in 0..3 {
        let role = cluster.role(i).expect("ROLE");
        let info = cluster.info(i).expect("CLUSTER INFO");
        assert_eq!(info["cluster_leader_id"], (leader + 1).to_string());
        assert_eq!(info["cluster_state"], "ok");
        let expected = if i == leader {
            ("master", "leader")
        } else {
            ("slave", "follower")
        };
        assert_eq!(
            (role.as_str(), info["cluster_role"].as_str()),
            expected,
            "node {}",
            i + 1
        );
    }
    let recorder = Recorder::new();
    let mut workers: Vec<Worker> = (0..3)
        .map(|i| Worker::new(i, &cluster.url(i), REPLY_TIMEOUT))
        .collect();
    for (i, worker) in workers.iter_mut().enumerate() {
        let reply = worker.send(
            &recorder,
            Call::Acquire {
                run: format!("run-{i}"),
                ttl: 30.0,
            },
        );
        assert!(
            matches!(reply, Reply::Acquired { token, .. } if token == i as i64 + 1),
            "acquire through node {}: {reply:?}",
            i + 1
        );
    }
    let follower = (leader + 1) % 3;
    let token = follower as i64 + 1;
    let run = format!("run-{follower}");
    let beat = workers[follower].send(
        &recorder,
        Call::Heartbeat {
            run: run.clone(),
            token,
        },
    );
    assert_eq!(beat, Reply::Flag(true));
    let valid = workers[follower].send(&recorder, Call::Validate { run, token });
    assert_eq!(valid, Reply::Flag(true));
    assert_safe(&cluster, &recorder);
}

/// A worker heartbeating `run` (token `token`) through node `node` every
/// 100 ms until `done`; its replies.
fn heartbeating(
    cluster: &Cluster,
    node: usize,
    recorder: &Recorder,
    mut worker: Worker,
    run: String,
    token: i64,
    done: Arc<AtomicBool>,
) -> thread::JoinHandle<Vec<Reply>> {
    worker.switch(&cluster.url(node));
    let recorder = recorder.clone();
    thread::spawn(move || {
        let mut replies = Vec::new();
        while !done.load(Ordering::SeqCst) {
            let call = Call::Heartbeat {
                run: run.clone(),
                token,
            };
            replies.push(worker.send(&recorder, call));
            thread::sleep(Duration::from_millis(100));
        }
        replies
    })
}

#[test]
fn a_killed_leader_is_replaced_within_3_seconds_and_catches_up_when_restarted() {
    let mut cluster = cluster();
    let leader = cluster.leader(Duration::from_secs(10));
    let survivor = (leader + 1) % 3;
    let recorder = Recorder::new();
    let mut worker = Worker::new(0, &cluster.url(survivor), REPLY_TIMEOUT);
    let mut issued = 0;
    for n in 0..5 {
        let (token, _) = acquire_until(
            &mut worker,
            &recorder,
            &format!("before-{n}"),
            30.0,
            Duration::from_secs(5),
        );
        issued = issued.max(token);
    }
    let (token, run) = acquire_until(&mut worker, &recorder, "kept", 6.0, Duration::from_secs(5));
    issued = issued.max(token);
    let done = Arc::new(AtomicBool::new(false));
    let beats = heartbeating(
        &cluster,
        survivor,
        &recorder,
        Worker::new(0, &cluster.url(survivor), REPLY_TIMEOUT),
        run,
        token,
        done.clone(),
    );

    let killed = Instant::now();
    cluster.kill9(leader);
    let mut prober = Worker::new(1, &cluster.url(survivor), REPLY_TIMEOUT);
    let (after, _) = acquire_until(
        &mut prober,
        &recorder,
        "after",
        30.0,
        Duration::from_secs(10),
    );
    let failover = killed.elapsed();
    println!("kill -9 of the leader: acquires served again after {failover:?}");
    let new_leader = cluster.leader_among(&[survivor, (leader + 2) % 3], Duration::from_secs(5));
    assert_ne!(new_leader, leader);
    assert!(
        after > issued,
        "token {after} after the failover, {issued} issued before"
    );
    assert!(
        failover < Duration::from_secs(3),
        "failover took {failover:?}"
    );

    // The heartbeats went on through the failover.
    thread::sleep(Duration::from_millis(300));
    done.store(true, Ordering::SeqCst);
    let beats = beats.join().unwrap();
    assert!(
        !beats.contains(&Reply::Flag(false)),
        "a heartbeat answered 0: {beats:?}"
    );
    assert!(beats.contains(&Reply::Flag(true)), "{beats:?}");

    cluster.restart(leader);
    cluster.converged(Duration::from_secs(10));
    let mut back = Worker::new(2, &cluster.url(leader), REPLY_TIMEOUT);
    let (again, _) = acquire_until(
        &mut back,
        &recorder,
        "restarted",
        30.0,
        Duration::from_secs(5),
    );
    assert!(again > after);
    assert_safe(&cluster, &recorder);
}

/// `count` clients, two per node, each [`recording::work`]ing on four runs
/// with 2 s leases until `done`, a command every 20 ms, staying on its
/// node; each returns its commands' invoke times and replies.
fn clients(
    cluster: &Cluster,
    count: usize,
    recorder: &Recorder,
    done: &Arc<AtomicBool>,
) -> Vec<thread::JoinHandle<Vec<(f64, Reply)>>> {
    (0..count)
        .map(|client| {
            let url = cluster.url(client % cluster.size());
            let mut worker = Worker::new(client, &url, REPLY_TIMEOUT);
            let (recorder, done) = (recorder.clone(), done.clone());
            thread::spawn(move || {
                let workload = Workload {
                    runs: 4,
                    ttl: 2.0,
                    pause: Duration::from_millis(20),
                    rotate: false,
                };
                recording::work(&mut worker, &recorder, &workload, &[url], &done)
            })
        })
        .collect()
}

fn succeeded(reply: &Reply) -> bool {
    matches!(reply, Reply::Acquired { .. } | Reply::Held | Reply::Flag(_))
}

#[test]
fn a_stopped_leader_is_replaced_and_follows_when_continued() {
    let mut cluster = cluster();
    let leader = cluster.leader(Duration::from_secs(10));
    let followers = [(leader + 1) % 3, (leader + 2) % 3];
    let recorder = Recorder::new();
    let done = Arc::new(AtomicBool::new(false));
    // Two clients per node: those on the stopped node wait for it.
    let running = clients(&cluster, 6, &recorder, &done);
    thread::sleep(Duration::from_millis(500));

    cluster.stop(leader);
    let stopped = recorder.now();
    let new_leader = cluster.leader_among(&followers, Duration::from_secs(10));
    println!(
        "SIGSTOP of the leader: node {} leads after {:.2} s",
        new_leader + 1,
        recorder.now() - stopped
    );
    let elected = recorder.now();
    thread::sleep(Duration::from_millis(700));
    cluster.cont(leader);
    // The old leader hears the new term and follows.
    let agreed = cluster.leader(Duration::from_secs(10));
    assert_eq!(agreed, new_leader);
    assert_eq!(cluster.info(leader).unwrap()["cluster_role"], "follower");
    thread::sleep(Duration::from_millis(500));
    done.store(true, Ordering::SeqCst);
    let replies: Vec<Vec<(f64, Reply)>> = running.into_iter().map(|c| c.join().unwrap()).collect();
    // The clients of the two live nodes were served while the leader was
    // stopped.
    for (client, replies) in replies.iter().enumerate() {
        if followers.contains(&(client % 3)) {
            let served = (replies.iter())
                .filter(|(at, reply)| *at > elected && succeeded(reply))
                .count();
            assert!(
                served > 0,
                "client {client} of node {} not served: {replies:?}",
                client % 3 + 1
            );
        }
    }
    cluster.converged(Duration::from_secs(10));
    assert_safe(&cluster, &recorder);
}

#[test]
fn an_isolated_leader_never_answers_a_wrong_success_and_the_majority_serves() {
    let cluster = cluster();
    let leader = cluster.leader(Duration::from_secs(10));
    let majority = [(leader + 1) % 3, (leader + 2) % 3];
    let recorder = Recorder::new();
    let mut minority = Worker::new(0, &cluster.url(leader), REPLY_TIMEOUT);
    let (token, run) = acquire_until(
        &mut minority,
        &recorder,
        "held",
        30.0,
        Duration::from_secs(5),
    );

    cluster.isolate(leader);
    let isolated = recorder.now();
    // The isolated leader's clients, an acquire and a heartbeat, while
    // the majority's are served.
    let lonely = {
        let (recorder, url) = (recorder.clone(), cluster.url(leader));
        thread::spawn(move || {
            let mut worker = Worker::new(1, &url, REPLY_TIMEOUT);
            let call = Call::Acquire {
                run: "lonely".into(),
                ttl: 30.0,
            };
            worker.send(&recorder, call)
        })
    };
    let beat = {
        let recorder = recorder.clone();
        let call = Call::Heartbeat {
            run: run.clone(),
            token,
        };
        thread::spawn(move || {
            let beat = minority.send(&recorder, call);
            (minority, beat)
        })
    };
    let mut served = Worker::new(2, &cluster.url(majority[0]), REPLY_TIMEOUT);
    let (after, _) = acquire_until(
        &mut served,
        &recorder,
        "majority",
        30.0,
        Duration::from_secs(10),
    );
    let serving = recorder.now() - isolated;
    let new_leader = cluster.leader_among(&majority, Duration::from_secs(10));
    println!(
        "partition of the leader: node {} serves after {serving:.2} s",
        new_leader + 1,
    );
    let (mut minority, beat) = beat.join().unwrap();
    let lonely = lonely.join().unwrap();
    for reply in [&beat, &lonely] {
        assert!(
            matches!(reply, Reply::TryAgain | Reply::Uncertain),
            "isolated leader answered {reply:?}"
        );
    }
    assert!(after > token);

    cluster.heal();
    assert_eq!(cluster.leader(Duration::from_secs(10)), new_leader);
    cluster.converged(Duration::from_secs(10));
    minority.switch(&cluster.url(leader));
    let (last, _) = acquire_until(
        &mut minority,
        &recorder,
        "healed",
        30.0,
        Duration::from_secs(5),
    );
    assert!(last > after);
    assert_safe(&cluster, &recorder);
}

/// Subscribes to `__lease__:<run>` on node `follower`, acquires `run`
/// through node `other` with a short TTL once `settle` returns, and
/// returns the events the subscriber gets up to the lease's expiry, and
/// what they should be.
fn events_on_a_follower(
    cluster: &Cluster,
    follower: usize,
    other: usize,
    run: &str,
    settle: impl FnOnce(),
) -> (Vec<String>, Vec<String>) {
    let mut subscriber = cluster.connect(follower);
    let mut pubsub = subscriber.as_pubsub();
    pubsub.subscribe(format!("__lease__:{run}")).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    settle();
    let mut con = cluster.connect(other);
    let lease = call(&mut con, &["LEASE.ACQUIRE", run, "wa", "TTL", "0.5"]).expect("acquire");
    let token = match lease {
        redis::Value::Array(items) => items[7].clone(),
        other => panic!("not a lease: {other:?}"),
    };
    let token: i64 = redis::from_redis_value(token).unwrap();
    let mut next = || -> String {
        pubsub
            .get_message()
            .expect("an event")
            .get_payload()
            .unwrap()
    };
    // Up to the expiry, announced once registry time passes it (the
    // leader ticks).
    let mut seen = vec![next()];
    if !seen[0].starts_with("expired:") {
        seen.push(next());
    }
    let expected = ["acquired", "expired"].map(|event| format!("{event}:{token}:wa"));
    (seen, expected.to_vec())
}

/// Waits until node `i`'s applied index moves (the leader ticks every
/// 100 ms).
fn entry_applied(cluster: &Cluster, i: usize) {
    let applied = cluster.info_number(i, "cluster_applied_index");
    wait_for(Duration::from_secs(5), || {
        cluster.info_number(i, "cluster_applied_index") > applied
    });
}

#[test]
fn a_follower_publishes_events_of_acquires_sent_elsewhere() {
    let cluster = cluster();
    let leader = cluster.leader(Duration::from_secs(10));
    let (follower, other) = ((leader + 1) % 3, (leader + 2) % 3);
    // Once the follower has applied an entry since the subscription, it
    // makes events: see the ignored test below.
    let (seen, expected) = events_on_a_follower(&cluster, follower, other, "ev", || {
        entry_applied(&cluster, follower)
    });
    assert_eq!(seen, expected);
}

/// A replica turns its registry's events on *after* applying an entry
/// (`publish_applied`, the state machine's `on_applied` hook), so the
/// events of the first entry it applies after its first subscriber
/// arrives are lost; the single node turns them on before (`Core::watch`).
/// Each attempt subscribes with no other subscriber on the node, so it
/// loses the acquire's event when no tick is applied between the
/// SUBSCRIBE and the acquire: about one attempt in two.
#[test]
fn a_follower_publishes_the_events_of_the_first_entry_after_a_subscription() {
    let cluster = cluster();
    let leader = cluster.leader(Duration::from_secs(10));
    let (follower, other) = ((leader + 1) % 3, (leader + 2) % 3);
    let mut lost = Vec::new();
    for attempt in 0..6 {
        let run = format!("ev{attempt}");
        let (seen, expected) = events_on_a_follower(&cluster, follower, other, &run, || {});
        if seen != expected {
            lost.push((run.clone(), seen));
        }
        // The subscriber gone (its connection closed) and an entry
        // applied since: the node's events are off again.
        let mut con = cluster.connect(follower);
        wait_for(Duration::from_secs(5), || {
            let channel = format!("__lease__:{run}");
            let counts: Vec<redis::Value> =
                redis::from_redis_value(call(&mut con, &["PUBSUB", "NUMSUB", &channel]).unwrap())
                    .unwrap();
            counts.get(1) == Some(&redis::Value::Int(0))
        });
        entry_applied(&cluster, follower);
    }
    assert!(lost.is_empty(), "events lost: {lost:?}");
}

/// Polls `done` every 10 ms until it holds; fails after `patience`.
fn wait_for(patience: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + patience;
    while !done() {
        assert!(Instant::now() < deadline, "not done within {patience:?}");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_whole_cluster_restarted_keeps_every_acknowledged_lease_and_token() {
    let mut cluster = cluster();
    cluster.leader(Duration::from_secs(10));
    let recorder = Recorder::new();
    let mut issued = 0;
    for i in 0..6 {
        let mut worker = Worker::new(i, &cluster.url(i % 3), REPLY_TIMEOUT);
        let (token, run) = acquire_until(
            &mut worker,
            &recorder,
            &format!("kept-{i}"),
            60.0,
            Duration::from_secs(5),
        );
        issued = issued.max(token);
        if i == 0 {
            assert_eq!(
                worker.send(&recorder, Call::Release { run, token }),
                Reply::Flag(true)
            );
        }
    }
    for i in 0..3 {
        cluster.kill9(i);
    }
    for i in 0..3 {
        cluster.restart(i);
    }
    cluster.leader(Duration::from_secs(10));
    cluster.converged(Duration::from_secs(10));
    let mut worker = Worker::new(9, &cluster.url(0), REPLY_TIMEOUT);
    let (token, _) = acquire_until(&mut worker, &recorder, "new", 60.0, Duration::from_secs(5));
    assert!(
        token > issued,
        "token {token} after the restart, {issued} issued before"
    );
    // Every lease still held, on every node's copy.
    for i in 0..3 {
        let mut con = cluster.connect(i);
        let tenures = recording::tenures(&mut con, "kept-3").unwrap();
        assert_eq!(tenures.len(), 1, "node {}: {tenures:?}", i + 1);
    }
    assert_safe(&cluster, &recorder);
}

/// The nemesis (tests/common/nemesis.rs) for 30 s, 10 clients: faults
/// every ~4 s at random, the history checked; bench/nemesis.sh runs it
/// for minutes.
#[test]
fn a_short_nemesis_finds_no_violation() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("seed {seed}");
    let settings = nemesis::Settings {
        duration: Duration::from_secs(30),
        clients: 10,
        runs: 12,
        ttl: 3.0,
        pause: Duration::from_millis(50),
        every: 4.0,
        seed,
    };
    let outcome = nemesis::run(Path::new(BINARY), &settings);
    let report = outcome.report();
    println!("{report}");
    assert!(outcome.violations.is_empty(), "seed {seed}: {report}");
    assert!(
        outcome
            .faults
            .iter()
            .all(|fault| fault.unavailable.is_some()),
        "acquires never answered again after a fault: {report}"
    );
}

/// A rolling restart, as an upgrade does it (docs/cluster.md, "Rolling
/// upgrades"): each node in turn stopped cleanly (SIGTERM), started
/// again on its directory, the followers first and the leader last; before
/// each next step every node agrees on a leader and has applied its
/// commit index. Six clients work throughout, moving to another node when
/// theirs does not answer. No acknowledged change is lost (every run's
/// newest acknowledged token is in its history after recovery), the
/// checker finds no violation, and acquires are served after each step.
#[test]
fn a_rolling_restart_loses_no_acknowledged_change() {
    let mut cluster = cluster();
    let leader = cluster.leader(Duration::from_secs(10));
    let urls: Vec<String> = (0..cluster.size()).map(|i| cluster.url(i)).collect();
    let recorder = Recorder::new();
    let done = Arc::new(AtomicBool::new(false));
    let workload = Workload {
        runs: 6,
        ttl: 2.0,
        pause: Duration::from_millis(20),
        rotate: true,
    };
    let running = recording::spawn_clients(&urls, 6, workload, REPLY_TIMEOUT, &recorder, &done);
    thread::sleep(Duration::from_millis(500));
    let term = |cluster: &Cluster| {
        let leader = cluster.leader(Duration::from_secs(10));
        (leader + 1, cluster.info_number(leader, "cluster_term"))
    };
    println!(
        "before: node {} leads, term {:?}",
        term(&cluster).0,
        term(&cluster).1
    );
    let mut steps = Vec::new();
    for node in [(leader + 1) % 3, (leader + 2) % 3, leader] {
        cluster.terminate(node);
        cluster.restart(node);
        cluster.leader(Duration::from_secs(10));
        cluster.converged(Duration::from_secs(10));
        steps.push(recorder.now());
        let (leads, now) = term(&cluster);
        println!(
            "node {} restarted at {:.2} s; node {leads} leads, term {now:?}",
            node + 1,
            recorder.now()
        );
    }
    thread::sleep(Duration::from_millis(500));
    done.store(true, Ordering::SeqCst);
    let replies: Vec<(f64, Reply)> = (running.into_iter())
        .flat_map(|client| client.join().unwrap())
        .collect();
    // Acquires were answered (a lease or null) after each step.
    let ops = recorder.ops();
    for (n, after) in steps.iter().enumerate() {
        let served = (ops.iter())
            .filter(|op| matches!(op.call, Call::Acquire { .. }) && op.invoke > *after)
            .any(|op| matches!(op.reply, Reply::Acquired { .. } | Reply::Held));
        assert!(served, "no acquire answered after step {}", n + 1);
    }
    let answered = replies.iter().filter(|(_, reply)| succeeded(reply)).count();
    println!("{answered} of {} commands answered", replies.len());
    assert_safe(&cluster, &recorder);
}
