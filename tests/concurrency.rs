//! Many clients at once against the real binary: races for the same runs,
//! and heartbeats interleaved with acquires, checking that every client gets
//! its own replies and that fencing tokens stay unique.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier};
use std::thread;

use common::binary::Server;
use common::client::{AsyncClient, Client, Lease, lease_reply};
use redis::Value;

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn fifty_clients_race_for_the_same_hundred_runs() {
    race_for_the_same_hundred_runs(&Server::start());
}

/// The same race with connections served by four runtime threads instead
/// of the default one: the core still applies one command at a time.
#[test]
fn the_race_holds_with_four_io_threads() {
    let server = Server::start_with(&["--io-threads", "4"]);
    assert_eq!(server.typed().config_get("io-threads"), "4");
    race_for_the_same_hundred_runs(&server);
}

fn race_for_the_same_hundred_runs(server: &Server) {
    const CLIENTS: usize = 50;
    const RUNS: usize = 100;
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|c| {
            // Half the clients speak RESP3.
            let client = if c % 2 == 0 {
                server.client()
            } else {
                server.client_resp3()
            };
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut con = Client::new(client.get_connection().unwrap());
                let worker = format!("worker-{c}");
                // Each client in its own order: rotated, and reversed for odd ones.
                let mut order: Vec<usize> = (0..RUNS).map(|i| (i + 7 * c) % RUNS).collect();
                if c % 2 == 1 {
                    order.reverse();
                }
                barrier.wait();
                let mut won = Vec::new();
                for run in order {
                    let run_id = format!("run-{run}");
                    if let Some(lease) = con.acquire(&run_id, &worker, Some(0.0), None) {
                        assert_eq!(lease.run_id, format!("run-{run}").as_bytes());
                        assert_eq!(lease.worker_id, worker.as_bytes());
                        won.push(lease);
                    }
                }
                won
            })
        })
        .collect();

    let mut winners: BTreeMap<String, Lease> = BTreeMap::new();
    for thread in threads {
        for lease in thread.join().unwrap() {
            let run = text(&lease.run_id);
            if let Some(first) = winners.insert(run.clone(), lease.clone()) {
                panic!("{run} acquired twice: {first:?} and {lease:?}");
            }
        }
    }
    assert_eq!(winners.len(), RUNS, "every run acquired once");
    let tokens: BTreeSet<i64> = winners.values().map(|l| l.fencing_token).collect();
    assert_eq!(tokens, (1..=RUNS as i64).collect::<BTreeSet<_>>());
    for lease in winners.values() {
        let id = format!(
            "{}:{}:{}",
            text(&lease.run_id),
            text(&lease.worker_id),
            lease.fencing_token
        );
        assert_eq!(text(&lease.lease_id), id);
        assert_eq!(lease.expires_at, 10.0);
    }

    let mut con = server.typed();
    assert_eq!(con.dbsize(), RUNS as i64);
    // The registry agrees with what the winners were told.
    for (run, lease) in &winners {
        let current = con.get(run, Some(0.0)).expect("held");
        assert_eq!(current.lease_id, lease.lease_id);
        assert_eq!(current.fencing_token, lease.fencing_token);
        assert_eq!(current.expired, Some(0));
    }
}

#[test]
fn heartbeats_and_acquires_interleave_without_crossed_replies() {
    const HOLDERS: usize = 12;
    const ROUNDS: usize = 150;
    const ACQUIRERS: usize = 6;
    const NEW_RUNS: usize = 150;
    let server = Server::start();
    let barrier = Arc::new(Barrier::new(HOLDERS + ACQUIRERS));

    // Holders take a run each, then keep heartbeating it, pipelining an
    // ECHO of a unique text, the heartbeat, a GET and a VALIDATE per round.
    let holders: Vec<_> = (0..HOLDERS)
        .map(|h| {
            let client = if h % 2 == 0 {
                server.client()
            } else {
                server.client_resp3()
            };
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut con = Client::new(client.get_connection().unwrap());
                let run = format!("hold-{h}");
                let worker = format!("holder-{h}");
                let lease = con.acquire(&run, &worker, Some(0.0), None);
                let lease = lease.expect("own run is free");
                let token = lease.fencing_token;
                let id = text(&lease.lease_id);
                assert_eq!(id, format!("{run}:{worker}:{token}"));
                barrier.wait();
                for round in 0..ROUNDS {
                    let tag = format!("{h}/{round}");
                    let (echo, beat, got, valid): (String, i64, Value, i64) = redis::pipe()
                        .cmd("ECHO")
                        .arg(&tag)
                        .cmd("LEASE.HEARTBEAT")
                        .arg(&id)
                        .arg(token)
                        .arg(0)
                        .cmd("LEASE.GET")
                        .arg(&run)
                        .arg(0)
                        .cmd("LEASE.VALIDATE")
                        .arg(&run)
                        .arg(&id)
                        .arg(token)
                        .arg(0)
                        .query(&mut con)
                        .unwrap();
                    assert_eq!(echo, tag);
                    assert_eq!(beat, 1, "{tag}: heartbeat");
                    assert_eq!(valid, 1, "{tag}: validate");
                    let current = lease_reply(&got);
                    assert_eq!(text(&current.lease_id), id, "{tag}");
                    assert_eq!(current.fencing_token, token, "{tag}");
                    assert_eq!(current.expires_at, 10.0, "{tag}");
                    assert_eq!(current.expired, Some(0), "{tag}");
                }
                vec![token]
            })
        })
        .collect();

    // Acquirers take new runs of their own, and try the holders' runs,
    // which are held and must give null.
    let acquirers: Vec<_> = (0..ACQUIRERS)
        .map(|a| {
            let client = server.client();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut con = Client::new(client.get_connection().unwrap());
                let worker = format!("acquirer-{a}");
                barrier.wait();
                let mut tokens = Vec::new();
                for k in 0..NEW_RUNS {
                    let run = format!("new-{a}-{k}");
                    let lease = con.acquire(&run, &worker, Some(0.0), None);
                    let lease = lease.expect("a new run is free");
                    assert_eq!(lease.run_id, run.as_bytes());
                    assert_eq!(lease.worker_id, worker.as_bytes());
                    let id = format!("{run}:{worker}:{}", lease.fencing_token);
                    assert_eq!(text(&lease.lease_id), id);
                    tokens.push(lease.fencing_token);
                    if k % 10 == 0 {
                        let held = format!("hold-{}", k / 10 % HOLDERS);
                        let lease = con.acquire(&held, &worker, Some(0.0), None);
                        assert_eq!(lease, None, "a holder's run is held");
                    }
                }
                tokens
            })
        })
        .collect();

    let mut tokens = Vec::new();
    for thread in holders.into_iter().chain(acquirers) {
        tokens.extend(thread.join().unwrap());
    }
    let total = HOLDERS + ACQUIRERS * NEW_RUNS;
    assert_eq!(tokens.len(), total);
    let unique: BTreeSet<i64> = tokens.iter().copied().collect();
    // Unique, and no failed acquire used one up.
    assert_eq!(unique, (1..=total as i64).collect::<BTreeSet<_>>());
    assert_eq!(server.typed().dbsize(), total as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_sharing_a_multiplexed_connection_get_their_own_replies() {
    const TASKS: usize = 100;
    const EACH: usize = 20;
    let server = Server::start();
    let con = AsyncClient::connect(&server.url()).await;
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let mut con = con.clone();
        tasks.spawn(async move {
            let worker = format!("task-{t}");
            let mut tokens = Vec::new();
            for n in 0..EACH {
                let run = format!("m-{t}-{n}");
                let echo = con.run(&["ECHO", &run]).await;
                assert_eq!(echo, Value::BulkString(run.clone().into_bytes()));
                let lease = con.acquire(&run, &worker, Some(0.0), None).await;
                let lease = lease.expect("a new run is free");
                assert_eq!(lease.run_id, run.as_bytes());
                assert_eq!(lease.worker_id, worker.as_bytes());
                tokens.push(lease.fencing_token);
            }
            tokens
        });
    }
    let mut tokens = BTreeSet::new();
    while let Some(result) = tasks.join_next().await {
        for token in result.unwrap() {
            assert!(tokens.insert(token), "token {token} issued twice");
        }
    }
    assert_eq!(tokens, (1..=(TASKS * EACH) as i64).collect::<BTreeSet<_>>());
}
