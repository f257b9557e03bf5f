//! 2,000 connections held open at once, every one served, while a separate
//! client's PING latency is measured and printed (not asserted: timings
//! belong in benchmarks). Run with `-- --nocapture` to see the figures.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Server;

const CONNECTIONS: usize = 2000;
const PROBES: usize = 2000;

fn ping(stream: &mut TcpStream) {
    stream.write_all(b"PING\r\n").unwrap();
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"+PONG\r\n");
}

/// PINGs `PROBES` times on a connection of its own; prints p50, p99, max.
fn probe(server: &Server, phase: &str) {
    let mut stream = server.raw();
    stream.set_nodelay(true).unwrap();
    let mut times: Vec<Duration> = (0..PROBES)
        .map(|_| {
            let started = Instant::now();
            ping(&mut stream);
            started.elapsed()
        })
        .collect();
    times.sort();
    let at = |fraction: f64| times[((times.len() - 1) as f64 * fraction) as usize];
    eprintln!(
        "PING latency with {CONNECTIONS} other connections {phase}: p50 {:?}, p99 {:?}, max {:?} ({PROBES} PINGs)",
        at(0.5),
        at(0.99),
        times[times.len() - 1]
    );
}

#[test]
fn two_thousand_connections_are_served_while_another_client_pings() {
    // Both ends of 2,000 sockets live in this process and the server.
    rlimit::increase_nofile_limit(3 * CONNECTIONS as u64).unwrap();
    let server = Server::start();
    let mut held: Vec<TcpStream> = (0..CONNECTIONS).map(|_| server.raw()).collect();
    // Every one is accepted and served, not merely queued.
    for stream in &mut held {
        ping(stream);
    }
    let mut con = server.connect();
    let info: String = redis::cmd("INFO").arg("clients").query(&mut con).unwrap();
    assert!(
        info.contains(&format!("connected_clients:{}", CONNECTIONS + 1)),
        "{info}"
    );

    probe(&server, "idle");

    // Now every held connection PINGs in turn while the probe runs.
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut rounds = 0usize;
            while !stop.load(Ordering::Relaxed) {
                for stream in &mut held {
                    ping(stream);
                }
                rounds += 1;
            }
            (held, rounds)
        })
    };
    probe(&server, "pinging in turn");
    stop.store(true, Ordering::Relaxed);
    let (mut held, rounds) = busy.join().unwrap();
    eprintln!("the {CONNECTIONS} connections made {rounds} round(s) of PINGs meanwhile");
    // All still open and served afterwards.
    for stream in held.iter_mut().step_by(97) {
        ping(stream);
    }
}
