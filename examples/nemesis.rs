//! The nemesis (tests/common/nemesis.rs) for minutes: three real nodes,
//! clients working on leases, a fault every few seconds at random (kill
//! -9 of the leader or a follower, SIGSTOP of the leader, the leader
//! isolated, a node's links delayed), then the whole history checked.
//!
//!     cargo run --release --example nemesis -- [options]
//!
//! (bench/nemesis.sh builds and runs it.) Prints each fault as it is
//! injected, then the history's counts, each fault's unavailability
//! window (from the fault until an acquire sent after it was answered)
//! and the checker's verdict; exits 1 on a violation.
//!
//! Options: `--minutes M` (10), `--seconds S` (instead of minutes),
//! `--clients N` (50), `--runs N` (36), `--ttl S` (3), `--pause-ms MS`
//! (50, between a client's commands), `--every S` (5, mean time between
//! faults), `--seed N`, `--binary PATH` (target/release/leased).

#[path = "../tests/common/cluster.rs"]
mod cluster;
#[path = "../tests/common/history.rs"]
mod history;
#[path = "../tests/common/nemesis.rs"]
mod nemesis;
#[path = "../tests/common/proxy.rs"]
mod proxy;
#[path = "../tests/common/recording.rs"]
mod recording;

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nemesis::Settings;

/// The settings and the binary, from the command line.
fn options() -> (Settings, PathBuf) {
    let mut settings = Settings {
        duration: Duration::from_secs(600),
        clients: 50,
        runs: 36,
        ttl: 3.0,
        pause: Duration::from_millis(50),
        every: 5.0,
        seed: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    let mut binary = PathBuf::from("target/release/leased");
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let [name, value] = pair else {
            panic!("option {} without a value", pair[0]);
        };
        let number = || -> f64 { value.parse().unwrap_or_else(|_| panic!("{name} {value}")) };
        match name.as_str() {
            "--minutes" => settings.duration = Duration::from_secs_f64(number() * 60.0),
            "--seconds" => settings.duration = Duration::from_secs_f64(number()),
            "--clients" => settings.clients = number() as usize,
            "--runs" => settings.runs = number() as u64,
            "--ttl" => settings.ttl = number(),
            "--pause-ms" => settings.pause = Duration::from_secs_f64(number() / 1000.0),
            "--every" => settings.every = number(),
            "--seed" => settings.seed = value.parse().expect("--seed"),
            "--binary" => binary = PathBuf::from(value),
            other => panic!("unknown option {other}"),
        }
    }
    (settings, binary)
}

fn main() {
    let (settings, binary) = options();
    println!(
        "nemesis: {:?}, {} clients, {} runs, TTL {} s, a fault every ~{} s, seed {}",
        settings.duration,
        settings.clients,
        settings.runs,
        settings.ttl,
        settings.every,
        settings.seed
    );
    let outcome = nemesis::run(&binary, &settings);
    println!("\n{}", outcome.report());
    if !outcome.violations.is_empty() {
        std::process::exit(1);
    }
}
