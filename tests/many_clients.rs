//! 2,000 connections held open at once, every one served, while a separate
//! client's PING latency is measured and printed (not asserted: timings
//! belong in benchmarks). Run with `-- --nocapture` to see the figures.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::binary::Server;

const CONNECTIONS: usize = 2000;
const PROBES: usize = 2000;
/// Connections opened at once before they are PINGed: fewer than the
/// server's listen backlog (128). A larger burst fills the backlog before
/// the server has accepted it, the kernel drops the next SYN, and the
/// client sends it again only a second later (12 such seconds for 2,000
/// connections opened in one go).
const BURST: usize = 100;

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
    let mut held: Vec<TcpStream> = Vec::with_capacity(CONNECTIONS);
    // Every one is accepted and served, not merely queued.
    while held.len() < CONNECTIONS {
        let start = held.len();
        held.extend((0..BURST).map(|_| server.raw()));
        for stream in &mut held[start..] {
            ping(stream);
        }
    }
    let clients = server.typed().info("clients");
    assert_eq!(
        clients["connected_clients"],
        (CONNECTIONS + 1).to_string(),
        "{clients:?}"
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
