//! Restarts and crashes of the real binary on one data directory: fencing
//! tokens never repeat or go backwards, a clean shutdown leaves no gap,
//! and a directory that is in use or damaged stops the start.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::binary::{Server, data_dir, wait_until};
use common::client::{acquire, lease_or_null, lease_reply};

/// A server without the append-only log: what these tests check is that
/// fencing tokens survive on the token ceiling alone.
fn start(dir: &Path) -> Server {
    Server::start_in(dir, &["--lease-ttl", "5", "--appendonly", "no"]).expect("server starts")
}

/// A server with the append-only log (the default).
fn start_logged(dir: &Path) -> Server {
    Server::start_in(dir, &["--lease-ttl", "5"]).expect("server starts")
}

/// Acquires `count` distinct runs and returns their tokens, in order.
fn acquire_runs(server: &Server, prefix: &str, count: usize) -> Vec<i64> {
    let mut con = server.typed();
    (0..count)
        .map(|i| acquire(&mut con, &format!("{prefix}-{i}"), "w", 0.0).expect("run is free"))
        .collect()
}

/// How a test ends a server cleanly.
#[derive(Clone, Copy, Debug)]
enum Stop {
    Signal(&'static str),
    Shutdown(&'static [&'static str]),
}

fn stop_cleanly(server: &mut Server, how: Stop) {
    match how {
        Stop::Signal(signal) => server.signal(signal),
        Stop::Shutdown(args) => {
            let mut con = server.connect();
            let error = redis::cmd("SHUTDOWN")
                .arg(args)
                .query::<redis::Value>(&mut con)
                .expect_err("SHUTDOWN gets no reply");
            assert!(
                error.is_io_error() || error.is_connection_dropped(),
                "SHUTDOWN should close the connection without a reply, got {error:?}"
            );
        }
    }
    let status = server.wait(Duration::from_secs(10));
    assert!(
        status.success(),
        "{how:?} gave exit status {status}:\n{}",
        server.log()
    );
}

/// Acquires five leases, stops the server `how`, restarts it on the same
/// directory and checks that the tokens go on without a gap, that the
/// leases are gone, and that the server said they would be.
fn clean_restart_continues_without_a_gap(how: Stop) {
    let (_temp, dir) = data_dir();
    let mut first = start(&dir);
    assert_eq!(acquire_runs(&first, "run", 5), [1, 2, 3, 4, 5]);
    // An idle client must not hold up the shutdown.
    let mut idle = first.typed();
    assert_eq!(idle.dbsize(), 5);
    stop_cleanly(&mut first, how);
    assert!(
        first.log().contains("do not survive a restart"),
        "the server should say that leases do not survive:\n{}",
        first.log()
    );

    let mut second = start(&dir);
    assert!(second.log().contains("do not survive a restart"));
    let mut con = second.typed();
    let lease = con.get("run-0", Some(0.0));
    assert_eq!(lease, None, "leases do not survive a restart");
    assert_eq!(con.dbsize(), 0);
    // The run is free again, and its new lease gets the next token.
    assert_eq!(acquire(&mut con, "run-0", "w", 0.0), Some(6));
    assert_eq!(acquire(&mut con, "run-new", "w", 0.0), Some(7));

    // And once more, so the second clean stop is checked too.
    stop_cleanly(&mut second, how);
    let third = start(&dir);
    assert_eq!(acquire_runs(&third, "again", 2), [8, 9]);
}

/// With the log, a clean stop keeps every lease and the next token.
fn clean_restart_keeps_leases_with_the_log(how: Stop) {
    let (_temp, dir) = data_dir();
    let mut first = start_logged(&dir);
    assert_eq!(acquire_runs(&first, "run", 5), [1, 2, 3, 4, 5]);
    stop_cleanly(&mut first, how);
    let second = start_logged(&dir);
    assert!(!second.log().contains("do not survive a restart"));
    let mut con = second.typed();
    assert_eq!(con.dbsize(), 5);
    assert_eq!(
        acquire(&mut con, "run-0", "w", 0.0),
        None,
        "run-0 is still held"
    );
    assert_eq!(acquire(&mut con, "run-new", "w", 0.0), Some(6));
}

#[test]
fn clean_restart_after_sigterm() {
    clean_restart_continues_without_a_gap(Stop::Signal("TERM"));
    clean_restart_keeps_leases_with_the_log(Stop::Signal("TERM"));
}

#[test]
fn clean_restart_after_sigint() {
    clean_restart_continues_without_a_gap(Stop::Signal("INT"));
    clean_restart_keeps_leases_with_the_log(Stop::Signal("INT"));
}

#[test]
fn clean_restart_after_shutdown_command() {
    clean_restart_continues_without_a_gap(Stop::Shutdown(&[]));
    clean_restart_keeps_leases_with_the_log(Stop::Shutdown(&[]));
}

#[test]
fn clean_restart_after_shutdown_nosave() {
    clean_restart_continues_without_a_gap(Stop::Shutdown(&["NOSAVE"]));
}

/// Runs `threads` clients that acquire distinct runs as fast as they can
/// until the server goes away, kills it with SIGKILL once they have
/// `at_least` tokens between them, and returns every token they got.
fn acquire_until_killed(server: &mut Server, threads: usize, at_least: usize) -> Vec<i64> {
    acquire_until_stopped(server, threads, at_least, Server::kill9)
}

/// [`acquire_until_killed`], ending the server with `stop` instead.
fn acquire_until_stopped(
    server: &mut Server,
    threads: usize,
    at_least: usize,
    stop: impl FnOnce(&mut Server),
) -> Vec<i64> {
    let count = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let mut con = server.connect();
            let count = count.clone();
            let failed = failed.clone();
            std::thread::spawn(move || {
                let mut tokens = Vec::new();
                for i in 0.. {
                    let reply = redis::cmd("LEASE.ACQUIRE")
                        .arg(format!("storm-{t}-{i}"))
                        .arg("w")
                        .arg(0)
                        .query::<redis::Value>(&mut con);
                    match reply {
                        Ok(reply) => {
                            let Some(lease) = lease_or_null(&reply) else {
                                failed.store(true, Ordering::Relaxed);
                                panic!("unexpected reply {reply:?}");
                            };
                            tokens.push(lease.fencing_token);
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                        // The server went away.
                        Err(error) if error.is_io_error() || error.is_connection_dropped() => {
                            break;
                        }
                        Err(error) => {
                            failed.store(true, Ordering::Relaxed);
                            panic!("unexpected error {error:?}");
                        }
                    }
                }
                tokens
            })
        })
        .collect();
    wait_until(Duration::from_secs(20), || {
        let done = count.load(Ordering::Relaxed);
        if done >= at_least || failed.load(Ordering::Relaxed) {
            return Ok(());
        }
        Err(format!(
            "clients too slow: {done} acquires\n{}",
            server.log()
        ))
    });
    stop(server);
    let mut tokens: Vec<i64> = workers
        .into_iter()
        .flat_map(|worker| worker.join().expect("client thread"))
        .collect();
    tokens.sort_unstable();
    let issued = tokens.len();
    tokens.dedup();
    assert_eq!(tokens.len(), issued, "a token was issued twice");
    tokens
}

#[test]
fn crashes_under_load_never_reuse_a_token() {
    let (_temp, dir) = data_dir();
    let mut seen_max = 0;
    for round in 0..3 {
        let mut server = start(&dir);
        let tokens = acquire_until_killed(&mut server, 4, 2_000);
        let (first, last) = (tokens[0], *tokens.last().unwrap());
        assert!(
            first > seen_max,
            "round {round}: token {first} issued again after a crash (max before {seen_max})"
        );
        // Within one life of the server tokens have no gaps; only the
        // replies in flight at the kill (one per client) can be missing.
        let missing = (last - first + 1) as usize - tokens.len();
        assert!(
            missing <= 4,
            "round {round}: {missing} tokens between {first} and {last} were never seen"
        );
        seen_max = last;
    }
    let server = start(&dir);
    let next = acquire_runs(&server, "after", 1)[0];
    assert!(
        next > seen_max,
        "token {next} after the crashes, max before {seen_max}"
    );
}

#[test]
fn sigterm_under_load_exits_cleanly_and_leaves_no_gap() {
    let (_temp, dir) = data_dir();
    let mut server = start(&dir);
    let tokens = acquire_until_stopped(&mut server, 4, 2_000, Server::stop);
    let last = *tokens.last().unwrap();
    // Every acquire the server ran before it stopped was answered.
    assert_eq!(tokens, (1..=last).collect::<Vec<_>>());
    let server = start(&dir);
    assert_eq!(acquire_runs(&server, "after", 1), [last + 1]);
}

#[test]
fn crashes_right_after_start_keep_tokens_above_the_past() {
    let (_temp, dir) = data_dir();
    // A crash before any acquire on a new directory leaves it usable.
    start(&dir).kill9();
    let mut server = start(&dir);
    let tokens = acquire_runs(&server, "run", 3);
    assert_eq!(tokens, [tokens[0], tokens[0] + 1, tokens[0] + 2]);
    server.stop();
    // Two crashes in a row with no acquire at all.
    for _ in 0..2 {
        start(&dir).kill9();
    }
    let server = start(&dir);
    let next = acquire_runs(&server, "run", 1)[0];
    assert!(
        next > tokens[2],
        "token {next} after crashes repeats one issued before (up to {})",
        tokens[2]
    );
}

/// More tokens than one block of the stored ceiling, pipelined in batches.
#[test]
fn crash_after_crossing_a_token_block() {
    const TOTAL: i64 = 120_000;
    const BATCH: i64 = 1_000;
    let (_temp, dir) = data_dir();
    let mut server = start(&dir);
    let mut con = server.connect();
    let started = Instant::now();
    for batch in 0..TOTAL / BATCH {
        let mut pipe = redis::pipe();
        for i in 0..BATCH {
            pipe.cmd("LEASE.ACQUIRE")
                .arg(format!("block-{batch}-{i}"))
                .arg("w")
                .arg(0);
        }
        let replies: Vec<redis::Value> = pipe.query(&mut con).expect("pipelined acquires");
        for (i, reply) in replies.iter().enumerate() {
            let expected = batch * BATCH + i as i64 + 1;
            assert_eq!(
                lease_reply(reply).fencing_token,
                expected,
                "crossing a block boundary must not skip or repeat tokens"
            );
        }
    }
    eprintln!("{TOTAL} pipelined acquires took {:?}", started.elapsed());
    server.kill9();
    let server = start(&dir);
    let next = acquire_runs(&server, "after", 1)[0];
    assert!(
        next > TOTAL,
        "token {next} after a crash, {TOTAL} issued before"
    );
}

#[test]
fn a_second_server_on_the_same_directory_refuses_to_start() {
    let (_temp, dir) = data_dir();
    let mut first = start(&dir);
    assert_eq!(acquire_runs(&first, "run", 2), [1, 2]);

    let dir_arg = dir.to_str().unwrap();
    let second = common::binary::run_to_exit(&["--port", "0", "--dir", dir_arg]);
    let output = second.output();
    assert!(!second.status.success(), "second server: {output}");
    assert!(output.contains("in use"), "{output}");
    assert!(
        output.contains(dir_arg),
        "the message should name the directory: {output}"
    );
    assert!(!output.contains("Ready to accept connections"), "{output}");

    // The first server is unharmed: its leases and tokens go on.
    let mut con = first.typed();
    assert_eq!(con.dbsize(), 2);
    assert_eq!(acquire(&mut con, "run-2", "w", 0.0), Some(3));
    first.stop();
    // Once it is gone the directory can be used again, with no gap.
    let third = start(&dir);
    assert_eq!(acquire_runs(&third, "next", 1), [4]);
}

/// Starts on `dir`, expecting a refusal that names the ceiling file.
fn assert_refused_for_damaged_ceiling(dir: &Path, damage: &str) {
    let exited = common::binary::run_to_exit(&["--port", "0", "--dir", dir.to_str().unwrap()]);
    let output = exited.output();
    assert!(
        !exited.status.success(),
        "started with a damaged ceiling ({damage}): {output}"
    );
    assert!(
        !output.contains("Ready to accept connections"),
        "{damage}: {output}"
    );
    let file = dir.join("token-ceiling");
    assert!(
        output.contains(file.to_str().unwrap()),
        "{damage}: the message should name {}: {output}",
        file.display()
    );
}

#[test]
fn a_damaged_token_ceiling_stops_the_start() {
    let (_temp, dir) = data_dir();
    let mut server = start(&dir);
    assert_eq!(acquire_runs(&server, "run", 3), [1, 2, 3]);
    server.stop();
    let file = dir.join("token-ceiling");
    let good = std::fs::read(&file).expect("the ceiling file exists after a clean stop");

    // Changing any one digit of the file damages it.
    for (at, _) in good.iter().enumerate().filter(|(_, b)| b.is_ascii_digit()) {
        let mut damaged = good.clone();
        damaged[at] = if damaged[at] == b'9' {
            b'0'
        } else {
            damaged[at] + 1
        };
        std::fs::write(&file, &damaged).unwrap();
        let text = String::from_utf8_lossy(&damaged);
        assert_refused_for_damaged_ceiling(&dir, &format!("digit {at} changed: {text:?}"));
    }
    let half = good[..good.len() / 2].to_vec();
    for (damage, contents) in [
        ("garbage", b"garbage\n".to_vec()),
        ("empty", Vec::new()),
        ("truncated", half),
    ] {
        std::fs::write(&file, contents).unwrap();
        assert_refused_for_damaged_ceiling(&dir, damage);
    }

    // The good file starts again, right after the last token.
    std::fs::write(&file, &good).unwrap();
    let server = start(&dir);
    assert_eq!(acquire_runs(&server, "next", 1), [4]);
}

#[test]
fn a_ceiling_deleted_from_a_used_dir_stops_the_start() {
    let (_temp, dir) = data_dir();
    let mut server = start(&dir);
    assert_eq!(acquire_runs(&server, "run", 3), [1, 2, 3]);
    server.kill9();
    let file = dir.join("token-ceiling");
    std::fs::remove_file(&file).unwrap();
    assert_refused_for_damaged_ceiling(&dir, "deleted");
    let output =
        common::binary::run_to_exit(&["--port", "0", "--dir", dir.to_str().unwrap()]).output();
    assert!(output.contains("is missing"), "{output}");

    // An operator who knows a bound writes it by hand; tokens go on above it.
    std::fs::write(&file, "1000\n").unwrap();
    let server = start(&dir);
    assert_eq!(acquire_runs(&server, "next", 1), [1001]);
}
