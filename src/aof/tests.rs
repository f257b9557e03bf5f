use std::fs;
use std::path::Path;
use std::time::Duration;

use super::format::HEADER;
use super::rewrite::REWRITE_CHUNK;
use super::*;
use crate::registry::Registry;

fn options(dir: &Path) -> LogOptions {
    LogOptions {
        dir: dir.to_path_buf(),
        file_name: "test.aof".into(),
        policy: FsyncPolicy::Always,
        rewrite_percentage: 100,
        rewrite_min_size: 0,
        load_good_prefix: false,
    }
}

/// Opens the log in `dir` and replays it into a fresh registry.
fn reopen(dir: &Path) -> (Log, Registry) {
    let mut registry = Registry::new(10.0, 0);
    let (log, _) = Log::open(options(dir), |change| registry.replay(change)).unwrap();
    registry.set_recording(true);
    (log, registry)
}

fn commit_changes(log: &mut Log, registry: &mut Registry) {
    for change in registry.take_changes() {
        log.append(&change);
    }
    block_on(log.commit(Commit::Replies)).unwrap();
}

/// Runs a future of the log to completion: with `always` its fsync
/// needs a runtime's blocking pool.
fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(future)
}

/// Every lease, for comparing two registries.
fn leases(registry: &mut Registry, runs: usize) -> Vec<Option<(Vec<u8>, u64, f64)>> {
    (0..runs)
        .map(|i| {
            registry
                .get(format!("run-{i}").as_bytes(), f64::NEG_INFINITY)
                .map(|(lease, _)| (lease.lease_id(), lease.fencing_token, lease.expires_at))
        })
        .collect()
}

#[test]
fn committed_changes_come_back_after_reopening() {
    let temp = tempfile::tempdir().unwrap();
    let (mut log, mut registry) = reopen(temp.path());
    for i in 0..10 {
        let run = format!("run-{i}");
        registry
            .acquire(run.as_bytes(), b"w", i as f64, None)
            .unwrap();
    }
    registry.heartbeat(b"run-3:w:4", 4, 10.0);
    registry.release(b"run-5:w:6", 6);
    commit_changes(&mut log, &mut registry);
    block_on(log.close()).unwrap();
    let (_, mut again) = reopen(temp.path());
    assert_eq!(leases(&mut again, 10), leases(&mut registry, 10));
    assert_eq!(again.last_token(), 10);
}

#[test]
fn a_rewrite_while_changes_go_on_keeps_every_change_and_shrinks_the_log() {
    let temp = tempfile::tempdir().unwrap();
    let (mut log, mut registry) = reopen(temp.path());
    let runs = 3 * REWRITE_CHUNK + 17;
    for i in 0..runs {
        let run = format!("run-{i}");
        registry
            .acquire(run.as_bytes(), b"w", 0.0, Some(1e6))
            .unwrap();
    }
    for round in 1..=5 {
        for token in 1..=runs as u64 {
            let id = format!("run-{}:w:{token}", token - 1);
            registry.heartbeat(id.as_bytes(), token, f64::from(round));
        }
    }
    commit_changes(&mut log, &mut registry);
    let before = log.status().size;
    log.start_rewrite(&registry).unwrap();
    let mut step = 0;
    loop {
        // Changes between the steps: releases, takeovers, new runs.
        let token = (step * 7 % runs) as u64 + 1;
        let id = format!("run-{}:w:{token}", token - 1);
        registry.release(id.as_bytes(), token);
        let run = format!("run-{}", step * 3 % runs);
        registry
            .acquire(run.as_bytes(), b"late", 2e6, None)
            .unwrap();
        commit_changes(&mut log, &mut registry);
        step += 1;
        match log.step_rewrite(&registry) {
            RewriteStep::Idle => break,
            RewriteStep::Waiting => std::thread::sleep(Duration::from_millis(1)),
            RewriteStep::Progress => {}
        }
    }
    let status = log.status();
    assert_eq!((status.rewrites, status.last_rewrite_ok), (1, true));
    assert!(status.size < before, "{} >= {before}", status.size);
    assert!(!rewrite_path(log.path()).exists());
    // Changes after the rewrite land in the new file.
    registry.acquire(b"run-after", b"w", 3e6, None).unwrap();
    commit_changes(&mut log, &mut registry);
    block_on(log.close()).unwrap();
    let (_, mut again) = reopen(temp.path());
    assert_eq!(leases(&mut again, runs), leases(&mut registry, runs));
    assert!(again.get(b"run-after", 0.0).is_some());
    assert_eq!(again.last_token(), registry.last_token());
    assert_eq!(again.len(), registry.len());
}

#[test]
fn a_run_released_and_taken_again_during_a_rewrite_keeps_its_history() {
    let temp = tempfile::tempdir().unwrap();
    let (mut log, mut registry) = reopen(temp.path());
    for i in 0..2 * REWRITE_CHUNK {
        let run = format!("run-{i}");
        registry
            .acquire(run.as_bytes(), b"w", 0.0, Some(1e6))
            .unwrap();
    }
    commit_changes(&mut log, &mut registry);
    log.start_rewrite(&registry).unwrap();
    // Before the walk reaches it: the first lease released, its run taken
    // again, so the walk meets the new lease.
    registry.release(b"run-0:w:1", 1);
    registry.acquire(b"run-0", b"late", 1.0, None).unwrap();
    commit_changes(&mut log, &mut registry);
    loop {
        match log.step_rewrite(&registry) {
            RewriteStep::Idle => break,
            RewriteStep::Waiting => std::thread::sleep(Duration::from_millis(1)),
            RewriteStep::Progress => {}
        }
    }
    block_on(log.close()).unwrap();
    let (_, again) = reopen(temp.path());
    let history = again.history(b"run-0", 10, 2.0);
    assert_eq!(history, registry.history(b"run-0", 10, 2.0));
    assert_eq!(history[1].end_name(), "released");
}

#[test]
fn a_torn_tail_is_cut_and_corruption_stops_the_open() {
    let temp = tempfile::tempdir().unwrap();
    let (mut log, mut registry) = reopen(temp.path());
    for i in 0..3 {
        let run = format!("run-{i}");
        registry.acquire(run.as_bytes(), b"w", 0.0, None).unwrap();
        commit_changes(&mut log, &mut registry);
    }
    let path = log.path().to_path_buf();
    block_on(log.close()).unwrap();
    let whole = fs::read(&path).unwrap();

    fs::write(&path, &whole[..whole.len() - 3]).unwrap();
    let mut registry = Registry::new(10.0, 0);
    let (_, recovery) = Log::open(options(temp.path()), |c| registry.replay(c)).unwrap();
    assert!(recovery.torn_at.is_some());
    assert_eq!(registry.len(), 2);
    assert_eq!(
        fs::metadata(&path).unwrap().len(),
        recovery.torn_at.unwrap()
    );

    let mut damaged = whole.clone();
    damaged[HEADER.len() + 12] ^= 0x40;
    fs::write(&path, &damaged).unwrap();
    let error = Log::open(options(temp.path()), |_| {})
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains(&format!("byte offset {}", HEADER.len())),
        "{error}"
    );
    assert!(error.contains("aof-load-good-prefix"), "{error}");

    let mut good_prefix = options(temp.path());
    good_prefix.load_good_prefix = true;
    let (_, recovery) = Log::open(good_prefix, |_| {}).unwrap();
    let (offset, copy) = recovery.corrupt_cut.unwrap();
    assert_eq!(offset, HEADER.len() as u64);
    assert_eq!(fs::read(copy).unwrap(), damaged);
    assert_eq!(fs::metadata(&path).unwrap().len(), offset);
}
