use super::model::{Cmd, Model, RUNS, Reply, WORKERS, apply, check_runs, check_state, step_both};
use super::*;

use proptest::prelude::*;
use proptest::sample::{Index, select};

// ---------------------------------------------------------------
// Shared vocabulary: a command with every argument resolved, and the
// registry's answer to it. The table test, the unit tests' helpers and
// the property tests all speak it.
// ---------------------------------------------------------------

fn lease(run: &[u8], worker: &[u8], token: u64, expires_at: f64) -> Lease {
    Lease {
        run_id: Bytes::copy_from_slice(run),
        worker_id: Bytes::copy_from_slice(worker),
        fencing_token: token,
        expires_at,
    }
}

/// A registry with the contract's default TTL and no ceiling to speak of.
fn registry() -> Registry {
    Registry::new(10.0, 0, u64::MAX)
}

/// Acquires with the default TTL, expecting a token to be available.
fn acquire(registry: &mut Registry, run: &[u8], worker: &[u8], now: f64) -> Option<Lease> {
    registry
        .acquire(run, worker, now, None)
        .expect("a token is available")
}

// ---------------------------------------------------------------
// A worked example, as a table. The contract has none, so this one
// walks a few runs through their life with concrete times.
// ---------------------------------------------------------------

fn acq(run: &str, worker: &str, now: f64, ttl: Option<f64>) -> Cmd {
    Cmd::Acquire {
        run: run.into(),
        worker: worker.into(),
        now,
        ttl,
    }
}

fn hb(lease_id: &str, token: u64, now: f64) -> Cmd {
    Cmd::Heartbeat {
        lease_id: lease_id.into(),
        token,
        now,
    }
}

fn val(run: &str, lease_id: &str, token: u64, now: f64) -> Cmd {
    Cmd::Validate {
        run: run.into(),
        lease_id: lease_id.into(),
        token,
        now,
    }
}

fn rel(lease_id: &str, token: u64) -> Cmd {
    Cmd::Release {
        lease_id: lease_id.into(),
        token,
    }
}

fn get(run: &str, now: f64) -> Cmd {
    Cmd::Get {
        run: run.into(),
        now,
    }
}

fn issued(run: &str, worker: &str, token: u64, expires_at: f64) -> Reply {
    Reply::Acquired(Ok(Some(lease(
        run.as_bytes(),
        worker.as_bytes(),
        token,
        expires_at,
    ))))
}

fn held() -> Reply {
    Reply::Acquired(Ok(None))
}

fn got(run: &str, worker: &str, token: u64, expires_at: f64, expired: bool) -> Reply {
    Reply::Got(Some((
        lease(run.as_bytes(), worker.as_bytes(), token, expires_at),
        expired,
    )))
}

const ONE: Reply = Reply::Flag(true);
const ZERO: Reply = Reply::Flag(false);
const NULL: Reply = Reply::Got(None);

#[test]
fn worked_example() {
    // (command, reply, len() after, last_token() after, registry time after)
    #[rustfmt::skip]
    let table: Vec<(Cmd, Reply, usize, u64, f64)> = vec![
        // run-1 is free: worker-a gets token 1 until 100 + 10.
        (acq("run-1", "worker-a", 100.0, None), issued("run-1", "worker-a", 1, 110.0), 1, 1, 100.0),
        // Held: another worker and the holder itself are refused, no token spent.
        (acq("run-1", "worker-b", 101.0, None), held(), 1, 1, 101.0),
        (acq("run-1", "worker-a", 102.0, None), held(), 1, 1, 102.0),
        // A heartbeat extends from its own `now`: 105 + 10.
        (hb("run-1:worker-a:1", 1, 105.0), ONE, 1, 1, 105.0),
        (get("run-1", 106.0), got("run-1", "worker-a", 1, 115.0, false), 1, 1, 106.0),
        // run-2 with its own TTL of 2 seconds; tokens are registry-wide.
        (acq("run-2", "worker-b", 107.0, Some(2.0)), issued("run-2", "worker-b", 2, 109.0), 2, 2, 107.0),
        // Its heartbeat extends by its own TTL: 108 + 2.
        (hb("run-2:worker-b:2", 2, 108.0), ONE, 2, 2, 108.0),
        // At exactly 110 it has expired: no validation, no revival.
        (val("run-2", "run-2:worker-b:2", 2, 110.0), ZERO, 2, 2, 110.0),
        (hb("run-2:worker-b:2", 2, 110.0), ZERO, 2, 2, 110.0),
        (get("run-2", 110.0), got("run-2", "worker-b", 2, 110.0, true), 2, 2, 110.0),
        (val("run-1", "run-1:worker-a:1", 1, 111.0), ONE, 2, 2, 111.0),
        // worker-c takes the expired run-2 over with a fresh token.
        (acq("run-2", "worker-c", 111.0, None), issued("run-2", "worker-c", 3, 121.0), 2, 3, 111.0),
        // The old holder of run-2 has lost it for good.
        (rel("run-2:worker-b:2", 2), ZERO, 2, 3, 111.0),
        (hb("run-2:worker-b:2", 2, 112.0), ZERO, 2, 3, 112.0),
        // Wrong token, wrong run.
        (hb("run-1:worker-a:1", 3, 112.0), ZERO, 2, 3, 112.0),
        (val("run-2", "run-1:worker-a:1", 1, 112.0), ZERO, 2, 3, 112.0),
        (get("run-3", 113.0), NULL, 2, 3, 113.0),
        // A lagging clock is read as registry time: 113 + 10, not 103 + 10.
        (acq("run-3", "worker-a", 103.0, None), issued("run-3", "worker-a", 4, 123.0), 3, 4, 113.0),
        (get("run-1", 116.0), got("run-1", "worker-a", 1, 115.0, true), 3, 4, 116.0),
        // A lagging heartbeat cannot bring run-1 back: it is read at 116.
        (hb("run-1:worker-a:1", 1, 114.0), ZERO, 3, 4, 116.0),
        (val("run-1", "run-1:worker-a:1", 1, 114.0), ZERO, 3, 4, 116.0),
        // Nobody took run-1 over, so its holder may still release it, once.
        (rel("run-1:worker-a:1", 1), ONE, 2, 4, 116.0),
        (rel("run-1:worker-a:1", 1), ZERO, 2, 4, 116.0),
        (get("run-1", 117.0), NULL, 2, 4, 117.0),
        (acq("run-1", "worker-b", 117.0, None), issued("run-1", "worker-b", 5, 127.0), 3, 5, 117.0),
        (rel("run-3:worker-a:4", 4), ONE, 2, 5, 117.0),
        (rel("run-2:worker-c:3", 3), ONE, 1, 5, 117.0),
        (rel("run-1:worker-b:5", 5), ONE, 0, 5, 117.0),
    ];
    let mut registry = registry();
    for (row, (cmd, want, len, last_token, time)) in table.iter().enumerate() {
        let reply = apply(&mut registry, cmd);
        assert_eq!(&reply, want, "row {row}: {cmd:?}");
        assert_eq!(registry.len(), *len, "len after row {row}");
        assert_eq!(
            registry.last_token(),
            *last_token,
            "last_token after row {row}"
        );
        assert_eq!(registry.time(), *time, "time after row {row}");
    }
    assert!(registry.is_empty());
}

// ---------------------------------------------------------------
// One test per rule of "Registry semantics".
// ---------------------------------------------------------------

#[test]
fn lease_id_is_run_worker_token() {
    let lease = lease(b"run-1", b"worker-a", 1, 10.0);
    assert_eq!(lease.lease_id(), b"run-1:worker-a:1");
    let lease = Lease {
        fencing_token: MAX_TOKEN,
        ..lease
    };
    assert_eq!(lease.lease_id(), b"run-1:worker-a:9223372036854775807");
    assert_eq!(
        Lease {
            run_id: Bytes::new(),
            worker_id: Bytes::new(),
            ..lease
        }
        .lease_id(),
        b"::9223372036854775807"
    );
}

#[test]
fn tokens_are_registry_wide_and_start_at_one() {
    let mut registry = registry();
    assert_eq!(registry.last_token(), 0);
    assert_eq!(
        acquire(&mut registry, b"run-1", b"worker-a", 0.0),
        Some(lease(b"run-1", b"worker-a", 1, 10.0))
    );
    assert_eq!(
        acquire(&mut registry, b"run-2", b"worker-a", 0.0),
        Some(lease(b"run-2", b"worker-a", 2, 10.0))
    );
    assert_eq!(
        acquire(&mut registry, b"run-3", b"worker-b", 1.0),
        Some(lease(b"run-3", b"worker-b", 3, 11.0))
    );
    // A takeover of run-1 continues the one sequence.
    assert_eq!(
        acquire(&mut registry, b"run-1", b"worker-b", 10.0),
        Some(lease(b"run-1", b"worker-b", 4, 20.0))
    );
    // After a release, the run's next lease still gets a new token.
    assert!(registry.release(b"run-2:worker-a:2", 2));
    assert_eq!(
        acquire(&mut registry, b"run-2", b"worker-a", 10.0),
        Some(lease(b"run-2", b"worker-a", 5, 20.0))
    );
    assert_eq!(registry.last_token(), 5);

    // A registry restored from durable state continues after its last token.
    let mut restored = Registry::new(10.0, 41, u64::MAX);
    assert_eq!(restored.last_token(), 41);
    assert_eq!(
        acquire(&mut restored, b"run-1", b"worker-a", 0.0).map(|l| l.fencing_token),
        Some(42)
    );
}

#[test]
fn failed_acquire_issues_no_token() {
    let mut registry = registry();
    acquire(&mut registry, b"run-1", b"worker-a", 0.0).unwrap();
    for now in [0.0, 5.0, 9.5] {
        assert_eq!(acquire(&mut registry, b"run-1", b"worker-b", now), None);
        assert_eq!(registry.last_token(), 1);
    }
    assert_eq!(
        acquire(&mut registry, b"run-2", b"worker-b", 9.5).map(|l| l.fencing_token),
        Some(2)
    );
}

#[test]
fn acquiring_an_active_run_fails_even_for_its_current_worker() {
    let mut registry = registry();
    let first = acquire(&mut registry, b"run-1", b"worker-a", 0.0).unwrap();
    assert_eq!(acquire(&mut registry, b"run-1", b"worker-a", 5.0), None);
    assert_eq!(
        registry.acquire(b"run-1", b"worker-a", 5.0, Some(100.0)),
        Ok(None)
    );
    // Nothing changed: same lease, same expiry, no token spent.
    assert_eq!(registry.get(b"run-1", 5.0), Some((first, false)));
    assert_eq!(registry.last_token(), 1);
    assert_eq!(registry.len(), 1);
    // Heartbeat is the way to renew.
    assert!(registry.heartbeat(b"run-1:worker-a:1", 1, 5.0));
    assert_eq!(
        registry.get(b"run-1", 5.0),
        Some((lease(b"run-1", b"worker-a", 1, 15.0), false))
    );
}

#[test]
fn expiry_is_inclusive_for_heartbeat() {
    let mut registry = registry();
    acquire(&mut registry, b"r", b"w", 0.0).unwrap();
    // Just before expiry it extends; exactly at expiry it does not.
    assert!(registry.heartbeat(b"r:w:1", 1, 10.0_f64.next_down()));
    let expires_at = 10.0_f64.next_down() + 10.0;
    assert!(!registry.heartbeat(b"r:w:1", 1, expires_at));
    assert_eq!(
        registry.get(b"r", expires_at),
        Some((lease(b"r", b"w", 1, expires_at), true))
    );
}

#[test]
fn expiry_is_inclusive_for_validate() {
    let mut registry = registry();
    acquire(&mut registry, b"r", b"w", 0.0).unwrap();
    assert!(registry.validate(b"r", b"r:w:1", 1, 10.0_f64.next_down()));
    assert!(!registry.validate(b"r", b"r:w:1", 1, 10.0));
}

#[test]
fn expiry_is_inclusive_for_get() {
    let mut registry = registry();
    acquire(&mut registry, b"r", b"w", 0.0).unwrap();
    let lease = lease(b"r", b"w", 1, 10.0);
    assert_eq!(registry.get(b"r", 0.0), Some((lease.clone(), false)));
    assert_eq!(
        registry.get(b"r", 10.0_f64.next_down()),
        Some((lease.clone(), false))
    );
    assert_eq!(registry.get(b"r", 10.0), Some((lease.clone(), true)));
    assert_eq!(registry.get(b"r", 1e9), Some((lease, true)));
}

#[test]
fn expiry_is_inclusive_for_acquire_takeover() {
    let mut registry = registry();
    acquire(&mut registry, b"r", b"w", 0.0).unwrap();
    assert_eq!(
        acquire(&mut registry, b"r", b"x", 10.0_f64.next_down()),
        None
    );
    assert_eq!(
        acquire(&mut registry, b"r", b"x", 10.0),
        Some(lease(b"r", b"x", 2, 20.0))
    );
    assert_eq!(registry.len(), 1);
}

#[test]
fn heartbeat_never_revives_an_expired_lease() {
    let mut registry = registry();
    acquire(&mut registry, b"r", b"w", 0.0).unwrap();
    assert!(!registry.heartbeat(b"r:w:1", 1, 12.0));
    // Also not when the clock goes back before the expiry.
    assert!(!registry.heartbeat(b"r:w:1", 1, 5.0));
    assert!(!registry.validate(b"r", b"r:w:1", 1, 5.0));
    assert_eq!(
        registry.get(b"r", 5.0),
        Some((lease(b"r", b"w", 1, 10.0), true))
    );
}

#[test]
fn heartbeat_extends_from_now_by_the_leases_own_ttl() {
    let mut registry = registry();
    acquire(&mut registry, b"r", b"w", 0.0).unwrap();
    registry
        .acquire(b"s", b"w", 0.0, Some(2.5))
        .unwrap()
        .unwrap();
    assert!(registry.heartbeat(b"s:w:2", 2, 2.0));
    assert!(registry.heartbeat(b"r:w:1", 1, 4.0));
    assert_eq!(
        registry.get(b"r", 4.0),
        Some((lease(b"r", b"w", 1, 14.0), false))
    );
    assert_eq!(
        registry.get(b"s", 4.0),
        Some((lease(b"s", b"w", 2, 4.5), false))
    );
    // Heartbeats keep a short lease alive as long as they come in time.
    assert!(registry.heartbeat(b"s:w:2", 2, 4.25));
    assert_eq!(registry.get(b"s", 6.0).unwrap().0.expires_at, 6.75);
    assert!(registry.validate(b"s", b"s:w:2", 2, 6.5));
    assert!(!registry.validate(b"s", b"s:w:2", 2, 6.75));
}

#[test]
fn release_succeeds_past_expiry_while_the_lease_is_current() {
    let mut registry = registry();
    acquire(&mut registry, b"r", b"w", 0.0).unwrap();
    assert_eq!(
        registry.get(b"r", 50.0).map(|(_, expired)| expired),
        Some(true)
    );
    assert!(registry.release(b"r:w:1", 1));
    assert_eq!(registry.get(b"r", 50.0), None);
    assert!(registry.is_empty());
    // Only once.
    assert!(!registry.release(b"r:w:1", 1));
    // The run is free at once, and gets a new token.
    assert_eq!(
        acquire(&mut registry, b"r", b"w", 50.0),
        Some(lease(b"r", b"w", 2, 60.0))
    );
}

#[test]
fn release_of_an_active_lease_frees_the_run() {
    let mut registry = registry();
    acquire(&mut registry, b"r", b"w", 0.0).unwrap();
    assert!(registry.release(b"r:w:1", 1));
    assert!(!registry.heartbeat(b"r:w:1", 1, 1.0));
    assert!(!registry.validate(b"r", b"r:w:1", 1, 1.0));
    assert_eq!(
        acquire(&mut registry, b"r", b"x", 1.0),
        Some(lease(b"r", b"x", 2, 11.0))
    );
}

#[test]
fn release_fails_after_a_takeover() {
    let mut registry = registry();
    acquire(&mut registry, b"r", b"w", 0.0).unwrap();
    let successor = acquire(&mut registry, b"r", b"x", 10.0).unwrap();
    assert!(!registry.release(b"r:w:1", 1));
    assert!(!registry.heartbeat(b"r:w:1", 1, 11.0));
    assert!(!registry.validate(b"r", b"r:w:1", 1, 11.0));
    // The successor is untouched.
    assert_eq!(registry.get(b"r", 11.0), Some((successor, false)));
    assert!(registry.validate(b"r", b"r:x:2", 2, 11.0));
    assert_eq!(registry.len(), 1);
}

#[test]
fn ttl_option_sets_this_leases_ttl_only() {
    let mut registry = registry();
    assert_eq!(
        registry.acquire(b"r", b"w", 100.0, Some(0.5)),
        Ok(Some(lease(b"r", b"w", 1, 100.5)))
    );
    assert_eq!(
        registry.acquire(b"s", b"w", 100.0, None),
        Ok(Some(lease(b"s", b"w", 2, 110.0)))
    );
    assert_eq!(
        registry.acquire(b"t", b"w", 100.0, Some(3600.0)),
        Ok(Some(lease(b"t", b"w", 3, 3700.0)))
    );
    assert!(registry.heartbeat(b"r:w:1", 1, 100.25));
    assert!(registry.heartbeat(b"s:w:2", 2, 100.25));
    assert!(registry.heartbeat(b"t:w:3", 3, 100.25));
    let expiries: Vec<f64> = [&b"r"[..], b"s", b"t"]
        .iter()
        .map(|run| registry.get(run, 100.25).unwrap().0.expires_at)
        .collect();
    assert_eq!(expiries, [100.75, 110.25, 3700.25]);
    // The short lease expired at 100.75 and a takeover uses the default.
    assert_eq!(
        acquire(&mut registry, b"r", b"x", 100.75),
        Some(lease(b"r", b"x", 4, 110.75))
    );
}

#[test]
fn registry_time_is_the_latest_now_seen() {
    let mut registry = registry();
    assert_eq!(registry.time(), f64::NEG_INFINITY);
    // Every operation with a `now` moves time, succeeding or not.
    assert!(!registry.heartbeat(b"nope", 7, 5.0));
    assert_eq!(registry.time(), 5.0);
    assert!(!registry.validate(b"r", b"nope", 7, 6.0));
    assert_eq!(registry.time(), 6.0);
    assert_eq!(registry.get(b"r", 7.0), None);
    assert_eq!(registry.time(), 7.0);
    acquire(&mut registry, b"r", b"w", 8.0).unwrap();
    assert_eq!(registry.time(), 8.0);
    assert_eq!(acquire(&mut registry, b"r", b"w", 9.0), None);
    assert_eq!(registry.time(), 9.0);
    // Older times leave it where it is.
    assert!(!registry.get(b"r", 1.0).unwrap().1);
    assert!(registry.heartbeat(b"r:w:1", 1, -3.0));
    assert_eq!(registry.time(), 9.0);
    assert_eq!(registry.advance_time(2.0), 9.0);
    assert_eq!(registry.advance_time(9.5), 9.5);
    assert_eq!(registry.time(), 9.5);
}

#[test]
fn lagging_acquire_expires_at_registry_time_plus_ttl() {
    let mut registry = registry();
    assert_eq!(registry.get(b"other", 100.0), None);
    assert_eq!(
        acquire(&mut registry, b"r", b"w", 50.0),
        Some(lease(b"r", b"w", 1, 110.0))
    );
    assert_eq!(
        registry.acquire(b"s", b"w", 0.0, Some(1.5)),
        Ok(Some(lease(b"s", b"w", 2, 101.5)))
    );
    // A lagging heartbeat extends from registry time too.
    assert!(registry.heartbeat(b"s:w:2", 2, 0.0));
    assert_eq!(registry.get(b"s", 0.0).unwrap().0.expires_at, 101.5);
}

#[test]
fn lagging_acquire_cannot_take_over_an_active_lease_and_sees_expiry() {
    let mut registry = registry();
    acquire(&mut registry, b"r", b"w", 0.0).unwrap();
    // A clock far behind cannot make a held run look free, and a clock
    // behind the expiry cannot keep an expired lease held.
    assert_eq!(acquire(&mut registry, b"r", b"x", -100.0), None);
    assert!(registry.get(b"r", 20.0).unwrap().1);
    assert_eq!(
        acquire(&mut registry, b"r", b"x", 5.0),
        Some(lease(b"r", b"x", 2, 30.0))
    );
}

#[test]
fn lagging_heartbeat_or_validate_cannot_revive_or_validate() {
    let mut registry = registry();
    acquire(&mut registry, b"r", b"w", 0.0).unwrap();
    // Another client's later clock has passed the expiry.
    assert_eq!(registry.get(b"unrelated", 10.0), None);
    for now in [0.0, 5.0, 9.99] {
        assert!(!registry.heartbeat(b"r:w:1", 1, now));
        assert!(!registry.validate(b"r", b"r:w:1", 1, now));
        assert_eq!(
            registry.get(b"r", now),
            Some((lease(b"r", b"w", 1, 10.0), true))
        );
    }
}

#[test]
fn release_does_not_move_registry_time() {
    let mut registry = registry();
    acquire(&mut registry, b"r", b"w", 3.0).unwrap();
    acquire(&mut registry, b"s", b"w", 4.0).unwrap();
    assert!(registry.release(b"r:w:1", 1));
    assert!(!registry.release(b"r:w:1", 1));
    assert!(!registry.release(b"junk", 99));
    assert_eq!(registry.time(), 4.0);
    let mut fresh = self::registry();
    assert!(!fresh.release(b"r:w:1", 1));
    assert_eq!(fresh.time(), f64::NEG_INFINITY);
}

#[test]
fn ids_containing_colons_never_confuse_lookups() {
    let mut registry = registry();
    let first = acquire(&mut registry, b"a:b", b"c", 0.0).unwrap();
    let second = acquire(&mut registry, b"a", b"b:c", 0.0).unwrap();
    assert_eq!(first.lease_id(), b"a:b:c:1");
    assert_eq!(second.lease_id(), b"a:b:c:2");
    assert_eq!(registry.len(), 2);

    // Each id with the other's token names no lease.
    assert!(!registry.heartbeat(b"a:b:c:2", 1, 1.0));
    assert!(!registry.heartbeat(b"a:b:c:1", 2, 1.0));
    assert!(!registry.validate(b"a:b", b"a:b:c:2", 2, 1.0));
    assert!(!registry.validate(b"a", b"a:b:c:1", 1, 1.0));
    assert!(!registry.validate(b"a:b", b"a:b:c:2", 1, 1.0));
    assert!(!registry.validate(b"a", b"a:b:c:1", 2, 1.0));
    assert!(!registry.release(b"a:b:c:2", 1));
    assert!(!registry.release(b"a:b:c:1", 2));
    // Runs that are prefixes of each other are distinct runs.
    assert_eq!(registry.get(b"a:b:c", 1.0), None);
    assert_eq!(registry.get(b"a:", 1.0), None);
    // Nothing above touched either lease.
    assert_eq!(registry.get(b"a:b", 1.0), Some((first, false)));
    assert_eq!(registry.get(b"a", 1.0), Some((second.clone(), false)));

    // Their own ids and tokens work.
    assert!(registry.heartbeat(b"a:b:c:1", 1, 2.0));
    assert!(registry.validate(b"a", b"a:b:c:2", 2, 2.0));
    assert!(registry.release(b"a:b:c:1", 1));
    assert_eq!(registry.get(b"a:b", 2.0), None);
    assert_eq!(registry.get(b"a", 2.0), Some((second, false)));
}

#[test]
fn empty_ids_are_ordinary_ids() {
    let mut registry = registry();
    assert_eq!(
        acquire(&mut registry, b"", b"", 0.0),
        Some(lease(b"", b"", 1, 10.0))
    );
    let colon_worker = acquire(&mut registry, b"", b":", 0.0);
    assert_eq!(colon_worker, None, "the empty run is held");
    let colon_run = acquire(&mut registry, b":", b"", 0.0).unwrap();
    assert_eq!(colon_run.lease_id(), b":::2");
    assert_eq!(lease(b"", b"", 1, 10.0).lease_id(), b"::1");

    // "::1" is the empty run's lease, ":::2" the run ":"'s.
    assert!(!registry.validate(b"", b":::2", 2, 1.0));
    assert!(!registry.validate(b":", b"::1", 1, 1.0));
    assert!(!registry.heartbeat(b"::2", 2, 1.0));
    assert!(!registry.heartbeat(b":::1", 1, 1.0));
    assert!(!registry.release(b"", 1));
    assert!(!registry.release(b"", 2));
    assert!(registry.validate(b"", b"::1", 1, 1.0));
    assert!(registry.validate(b":", b":::2", 2, 1.0));
    assert!(registry.heartbeat(b"::1", 1, 1.0));
    assert!(registry.release(b":::2", 2));
    assert_eq!(registry.get(b":", 1.0), None);
    assert_eq!(
        registry.get(b"", 1.0),
        Some((lease(b"", b"", 1, 11.0), false))
    );

    // After the empty run is taken over, run "" worker ":" has id ":::3".
    assert_eq!(
        acquire(&mut registry, b"", b":", 11.0).map(|l| l.lease_id()),
        Some(b":::3".to_vec())
    );
    assert!(!registry.release(b"::1", 1));
    assert!(registry.validate(b"", b":::3", 3, 11.0));
}

#[test]
fn wrong_token_or_wrong_id_fails() {
    let mut registry = registry();
    acquire(&mut registry, b"run", b"worker", 0.0).unwrap();
    acquire(&mut registry, b"other", b"worker", 0.0).unwrap();
    let wrong: &[(&[u8], u64)] = &[
        (b"run:worker:1", 0),
        (b"run:worker:1", 2),
        (b"run:worker:1", 11),
        (b"run:worker:1", u64::MAX),
        (b"run:worker:2", 2),
        (b"run:worker:01", 1),
        (b"run:worker:1 ", 1),
        (b"run:worker:", 1),
        (b"run:worker1", 1),
        (b"run:worke:1", 1),
        (b"Run:worker:1", 1),
        // Same length as the real id, one byte off.
        (b"run:workex:1", 1),
        (b"rum:worker:1", 1),
        (b"run;worker:1", 1),
        (b"run:worker;1", 1),
        (b"run:worker:2", 1),
        (b"", 1),
    ];
    for &(lease_id, token) in wrong {
        let shown = String::from_utf8_lossy(lease_id);
        assert!(
            !registry.heartbeat(lease_id, token, 1.0),
            "heartbeat {shown} {token}"
        );
        assert!(
            !registry.validate(b"run", lease_id, token, 1.0),
            "validate {shown} {token}"
        );
        assert!(
            !registry.release(lease_id, token),
            "release {shown} {token}"
        );
    }
    // The right id and token with the wrong run.
    assert!(!registry.validate(b"other", b"run:worker:1", 1, 1.0));
    assert!(!registry.validate(b"", b"run:worker:1", 1, 1.0));
    // None of that disturbed anything.
    assert_eq!(registry.len(), 2);
    assert_eq!(
        registry.get(b"run", 1.0),
        Some((lease(b"run", b"worker", 1, 10.0), false))
    );
    assert!(registry.validate(b"run", b"run:worker:1", 1, 1.0));
    assert!(registry.validate(b"other", b"other:worker:2", 2, 1.0));
}

#[test]
fn ceiling_reached_consumes_no_token_until_raised() {
    let mut registry = Registry::new(10.0, 0, 2);
    assert_eq!(registry.token_ceiling(), 2);
    acquire(&mut registry, b"r", b"w", 0.0).unwrap();
    acquire(&mut registry, b"s", b"w", 0.0).unwrap();
    // last_token == ceiling: a free run cannot be had yet.
    assert_eq!(
        registry.acquire(b"t", b"w", 1.0, None),
        Err(TokenError::CeilingReached)
    );
    assert_eq!(registry.last_token(), 2);
    assert_eq!(registry.len(), 2);
    assert_eq!(registry.get(b"t", 1.0), None);
    // A held run is still just held.
    assert_eq!(registry.acquire(b"r", b"x", 1.0, None), Ok(None));
    // An expired lease that could not be taken over stays as it was,
    // still releasable by its holder.
    assert_eq!(
        registry.acquire(b"r", b"x", 10.0, None),
        Err(TokenError::CeilingReached)
    );
    assert_eq!(
        registry.get(b"r", 10.0),
        Some((lease(b"r", b"w", 1, 10.0), true))
    );
    // Lowering is ignored.
    registry.set_token_ceiling(1);
    assert_eq!(registry.token_ceiling(), 2);
    registry.set_token_ceiling(0);
    assert_eq!(registry.token_ceiling(), 2);
    // Raising allows exactly up to the new ceiling.
    registry.set_token_ceiling(4);
    assert_eq!(registry.token_ceiling(), 4);
    assert_eq!(
        registry.acquire(b"t", b"w", 10.0, None),
        Ok(Some(lease(b"t", b"w", 3, 20.0)))
    );
    assert_eq!(
        registry.acquire(b"r", b"x", 10.0, None),
        Ok(Some(lease(b"r", b"x", 4, 20.0)))
    );
    assert_eq!(
        registry.acquire(b"u", b"w", 10.0, None),
        Err(TokenError::CeilingReached)
    );
    assert!(registry.release(b"s:w:2", 2));
    assert_eq!(
        registry.acquire(b"s", b"w", 10.0, None),
        Err(TokenError::CeilingReached)
    );
    assert_eq!(registry.last_token(), 4);
}

#[test]
fn ceiling_below_the_last_token_issues_nothing() {
    let mut registry = Registry::new(10.0, 5, 3);
    assert_eq!(
        registry.acquire(b"r", b"w", 0.0, None),
        Err(TokenError::CeilingReached)
    );
    assert_eq!(registry.last_token(), 5);
    registry.set_token_ceiling(5);
    assert_eq!(
        registry.acquire(b"r", b"w", 0.0, None),
        Err(TokenError::CeilingReached)
    );
    registry.set_token_ceiling(6);
    assert_eq!(
        acquire(&mut registry, b"r", b"w", 0.0).map(|l| l.fencing_token),
        Some(6)
    );
}

#[test]
fn tokens_are_exhausted_at_max_token() {
    for ceiling in [MAX_TOKEN, u64::MAX] {
        let mut registry = Registry::new(10.0, MAX_TOKEN - 1, ceiling);
        let last = acquire(&mut registry, b"r", b"w", 0.0).unwrap();
        assert_eq!(last.fencing_token, MAX_TOKEN);
        assert_eq!(last.lease_id(), b"r:w:9223372036854775807");
        assert!(registry.heartbeat(b"r:w:9223372036854775807", MAX_TOKEN, 1.0));
        assert_eq!(
            registry.acquire(b"s", b"w", 1.0, None),
            Err(TokenError::Exhausted)
        );
        // Raising the ceiling does not help.
        registry.set_token_ceiling(u64::MAX);
        assert_eq!(
            registry.acquire(b"r", b"x", 20.0, None),
            Err(TokenError::Exhausted)
        );
        assert_eq!(registry.last_token(), MAX_TOKEN);
        assert_eq!(registry.len(), 1);
        assert!(registry.release(b"r:w:9223372036854775807", MAX_TOKEN));
    }
}

/// Found by the registry_model fuzz target. Every expiry from 2^63
/// seconds on (a client may send any finite `now` and TTL, so up to
/// infinity) falls in the expiry index's last second, which was taken to
/// end one second later: once registry time was past 2^63 + 1, the
/// leases in it counted as expired and were reclaimed while still active.
#[test]
fn expiries_beyond_the_last_indexed_second_are_not_taken_early() {
    let mut registry = registry();
    registry.set_retention(1.0);
    let never = registry
        .acquire(b"never", b"w", 1e308, Some(1e308))
        .unwrap()
        .unwrap();
    assert_eq!(never.expires_at, f64::INFINITY);
    // A lagging clock, read as 1e308.
    let far = registry
        .acquire(b"far", b"w", 1e19, Some(1e306))
        .unwrap()
        .unwrap();
    assert_eq!(far.expires_at, 1e308 + 1e306);
    assert_eq!(registry.expired_count(), 0);
    assert!(!registry.reclaim_due());
    assert_eq!(registry.reclaim(usize::MAX), 0);
    assert_eq!(registry.len(), 2);
    assert!(registry.validate(b"far", &far.lease_id(), 2, 1e308));
    assert!(registry.heartbeat(&never.lease_id(), 1, 1e308));
    // Past `far`'s expiry and retention: the sweep leaves that second to
    // the lookups while `never` is in it (its bound is infinite), and a
    // lookup reclaims `far`.
    assert_eq!(registry.get(b"other", 1.1e308), None);
    assert_eq!(registry.expired_count(), 1);
    assert_eq!(registry.reclaim(usize::MAX), 0);
    assert_eq!(registry.get(b"far", 1.1e308), None);
    assert_eq!(registry.len(), 1);
    assert!(registry.validate(b"never", &never.lease_id(), 1, 1.1e308));

    // Once the bound of that second has passed, the sweep takes its leases:
    // at 1e300 the one second of TTL and of retention are lost to rounding,
    // so this lease expires on the spot and is due for reclaiming at once.
    let mut registry = self::registry();
    registry.set_retention(1.0);
    let brief = registry
        .acquire(b"b", b"w", 1e300, Some(1.0))
        .unwrap()
        .unwrap();
    assert_eq!(brief.expires_at, 1e300);
    assert_eq!(registry.expired_count(), 1);
    assert!(registry.reclaim_due());
    assert_eq!(registry.reclaim(usize::MAX), 1);
    assert!(registry.is_empty());
}

#[test]
fn len_counts_active_and_expired_leases() {
    let mut registry = registry();
    assert!(registry.is_empty());
    registry
        .acquire(b"r", b"w", 0.0, Some(1.0))
        .unwrap()
        .unwrap();
    acquire(&mut registry, b"s", b"w", 0.0).unwrap();
    assert_eq!(registry.len(), 2);
    assert!(registry.get(b"r", 5.0).unwrap().1);
    assert_eq!(registry.len(), 2);
    // A takeover replaces; it does not add.
    acquire(&mut registry, b"r", b"x", 5.0).unwrap();
    assert_eq!(registry.len(), 2);
    assert!(!registry.is_empty());
}

// ---------------------------------------------------------------
// Random operation sequences, run against both.
// ---------------------------------------------------------------

/// Which lease id and token an operation names.
#[derive(Clone, Debug)]
enum Ref {
    /// The lease issued last (often still current).
    Latest,
    /// Any lease issued so far: current, expired, released or taken over.
    Issued(Index),
    /// One issued lease's id with another's token.
    Crossed(Index, Index),
    /// An issued lease's id with the next token.
    NextToken(Index),
    /// An id built from the pools; may or may not name a real lease.
    Made {
        run: Index,
        worker: Index,
        id_token: u64,
        token: Option<u64>,
    },
    /// Bytes and a token of any kind.
    Junk(Vec<u8>, u64),
}

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        run: Index,
        worker: Index,
        dt: f64,
        ttl: Option<f64>,
    },
    Heartbeat {
        lease: Ref,
        dt: f64,
    },
    /// `run: None` validates against the run of the referenced lease.
    Validate {
        run: Option<Index>,
        lease: Ref,
        dt: f64,
    },
    Release {
        lease: Ref,
    },
    Get {
        run: Index,
        dt: f64,
    },
    /// Sets the ceiling to the starting last token plus this.
    SetCeiling(u64),
}

/// Steps of the client clock: it repeats and goes backwards, and
/// lands exactly on expiry times (every TTL is a multiple of 0.5).
fn dt() -> impl Strategy<Value = f64> {
    select(vec![
        -3.0, -1.0, -0.5, 0.0, 0.0, 0.5, 0.5, 1.0, 1.0, 2.0, 4.0,
    ])
}

fn ttl() -> impl Strategy<Value = Option<f64>> {
    select(vec![
        None,
        None,
        None,
        Some(0.5),
        Some(1.0),
        Some(2.5),
        Some(6.0),
    ])
}

fn any_token() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 1u64..12,
        1 => Just(0),
        1 => Just(MAX_TOKEN),
        1 => Just(u64::MAX),
    ]
}

fn lease_ref() -> impl Strategy<Value = Ref> {
    prop_oneof![
        3 => Just(Ref::Latest),
        4 => any::<Index>().prop_map(Ref::Issued),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Ref::Crossed(a, b)),
        1 => any::<Index>().prop_map(Ref::NextToken),
        2 => (any::<Index>(), any::<Index>(), 1u64..10, prop::option::of(1u64..10)).prop_map(
            |(run, worker, id_token, token)| Ref::Made {
                run,
                worker,
                id_token,
                token,
            }
        ),
        1 => (prop::collection::vec(select(b"ab:c1".to_vec()), 0..8), any_token())
            .prop_map(|(id, token)| Ref::Junk(id, token)),
    ]
}

fn lease_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<Index>(), any::<Index>(), dt(), ttl())
            .prop_map(|(run, worker, dt, ttl)| Op::Acquire { run, worker, dt, ttl }),
        3 => (lease_ref(), dt()).prop_map(|(lease, dt)| Op::Heartbeat { lease, dt }),
        2 => (prop::option::of(any::<Index>()), lease_ref(), dt())
            .prop_map(|(run, lease, dt)| Op::Validate { run, lease, dt }),
        2 => lease_ref().prop_map(|lease| Op::Release { lease }),
        2 => (any::<Index>(), dt()).prop_map(|(run, dt)| Op::Get { run, dt }),
    ]
}

fn ceiling_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => lease_op(),
        1 => (0u64..8).prop_map(Op::SetCeiling),
    ]
}

/// Turns a referenced lease into (its run, if it names an issued one;
/// lease id; token), looking at the model's history.
fn resolve_ref(lease: &Ref, model: &Model) -> (Option<Vec<u8>>, Vec<u8>, u64) {
    let issued = &model.issued;
    let pick = |index: &Index| &issued[index.index(issued.len())];
    match lease {
        Ref::Made {
            run,
            worker,
            id_token,
            token,
        } => {
            let run = *run.get(&RUNS);
            let worker = *worker.get(&WORKERS);
            let id = [run, b":", worker, b":", id_token.to_string().as_bytes()].concat();
            (None, id, token.unwrap_or(*id_token))
        }
        Ref::Junk(id, token) => (None, id.clone(), *token),
        _ if issued.is_empty() => (None, b"a:b:c:1".to_vec(), 1),
        Ref::Latest => {
            let l = issued.last().expect("not empty");
            (Some(l.run.clone()), l.id(), l.token)
        }
        Ref::Issued(index) => {
            let l = pick(index);
            (Some(l.run.clone()), l.id(), l.token)
        }
        Ref::Crossed(a, b) => {
            let l = pick(a);
            (Some(l.run.clone()), l.id(), pick(b).token)
        }
        Ref::NextToken(index) => {
            let l = pick(index);
            (Some(l.run.clone()), l.id(), l.token + 1)
        }
    }
}

/// Turns an operation into a command: `now` is the client clock, moved
/// by each operation's step.
fn resolve(op: &Op, model: &Model, now: &mut f64, first_token: u64) -> Cmd {
    let mut step = |dt: f64| {
        *now += dt;
        *now
    };
    match op {
        Op::Acquire {
            run,
            worker,
            dt,
            ttl,
        } => Cmd::Acquire {
            run: run.get(&RUNS).to_vec(),
            worker: worker.get(&WORKERS).to_vec(),
            now: step(*dt),
            ttl: *ttl,
        },
        Op::Heartbeat { lease, dt } => {
            let (_, lease_id, token) = resolve_ref(lease, model);
            Cmd::Heartbeat {
                lease_id,
                token,
                now: step(*dt),
            }
        }
        Op::Validate { run, lease, dt } => {
            let (lease_run, lease_id, token) = resolve_ref(lease, model);
            let run = match run {
                Some(index) => index.get(&RUNS).to_vec(),
                None => lease_run.unwrap_or_else(|| RUNS[0].to_vec()),
            };
            Cmd::Validate {
                run,
                lease_id,
                token,
                now: step(*dt),
            }
        }
        Op::Release { lease } => {
            let (_, lease_id, token) = resolve_ref(lease, model);
            Cmd::Release { lease_id, token }
        }
        Op::Get { run, dt } => Cmd::Get {
            run: run.get(&RUNS).to_vec(),
            now: step(*dt),
        },
        Op::SetCeiling(delta) => Cmd::SetCeiling(first_token + delta),
    }
}

/// Runs `ops` against a registry and the model, both made with these
/// arguments, comparing every reply and the observable state after it.
fn check_against_model(
    default_ttl: f64,
    last_token: u64,
    ceiling: u64,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    check_with_retention(default_ttl, f64::INFINITY, last_token, ceiling, ops, 0)
}

/// [`check_against_model`] with a retention, reclaiming up to `sweep`
/// leases after each step as the core does between rounds.
fn check_with_retention(
    default_ttl: f64,
    retention: f64,
    last_token: u64,
    ceiling: u64,
    ops: &[Op],
    sweep: usize,
) -> Result<(), TestCaseError> {
    let mut registry = Registry::new(default_ttl, last_token, ceiling);
    registry.set_retention(retention);
    let mut model = Model::new(default_ttl, last_token, ceiling);
    // A retention of 0 keeps expired leases forever, as the
    // `lease-retention` directive has it.
    model.retention = if retention > 0.0 {
        retention
    } else {
        f64::INFINITY
    };
    let mut now = 0.0;
    for (step, op) in ops.iter().enumerate() {
        let cmd = resolve(op, &model, &mut now, last_token);
        step_both(&mut registry, &mut model, &cmd)
            .map_err(|error| TestCaseError::fail(format!("step {step}: {error}")))?;
        registry.reclaim(sweep);
        check_state(&registry, &model)
            .map_err(|error| TestCaseError::fail(format!("after step {step}: {error}")))?;
    }
    check_runs(&mut registry, &mut model).map_err(TestCaseError::fail)?;
    Ok(())
}

/// Every lease a registry holds, in token order, for comparing state.
fn dump(registry: &Registry) -> Vec<(Bytes, Bytes, u64, f64, f64)> {
    let mut leases = Vec::new();
    let mut from = Some(0);
    while let Some(at) = from {
        from = registry.snapshot(at, 100, |e| {
            leases.push((
                Bytes::copy_from_slice(e.run_id),
                Bytes::copy_from_slice(e.worker_id),
                e.fencing_token,
                e.expires_at,
                e.ttl,
            ))
        });
    }
    leases.sort_by_key(|lease| lease.2);
    leases
}

/// Runs `ops` on a recording registry. A replica fed its changes must
/// match it after every step; and a snapshot walked `chunk` slots at a
/// time from step `start`, while the ops go on, followed by the changes
/// made since `start`, must rebuild the final state.
fn check_changes_rebuild_state(
    ops: &[Op],
    start: usize,
    chunk: usize,
) -> Result<(), TestCaseError> {
    let mut live = Registry::new(3.0, 0, u64::MAX);
    live.set_recording(true);
    let mut replica = Registry::new(3.0, 0, u64::MAX);
    let mut model = Model::new(3.0, 0, u64::MAX);
    let mut now = 0.0;
    let mut snapshot = Vec::new();
    let mut since_start = Vec::new();
    let mut cursor = None;
    for (step, op) in ops.iter().enumerate() {
        if step == start {
            snapshot.push(Change::LastToken(live.last_token()));
            cursor = Some(0);
        }
        let cmd = resolve(op, &model, &mut now, 0);
        model.apply(&cmd);
        apply(&mut live, &cmd);
        for change in live.take_changes() {
            replica.apply(change.clone());
            if step >= start {
                since_start.push(change);
            }
        }
        prop_assert_eq!(dump(&replica), dump(&live), "replica after step {}", step);
        prop_assert_eq!(replica.last_token(), live.last_token());
        if let Some(from) = cursor {
            cursor = live.snapshot(from, chunk, |lease| snapshot.push(lease.to_change()));
        }
    }
    while let Some(from) = cursor {
        cursor = live.snapshot(from, chunk, |lease| snapshot.push(lease.to_change()));
    }
    let mut rebuilt = Registry::new(3.0, 0, u64::MAX);
    for change in snapshot.into_iter().chain(since_start) {
        rebuilt.apply(change);
    }
    prop_assert_eq!(dump(&rebuilt), dump(&live));
    prop_assert_eq!(rebuilt.last_token(), live.last_token());
    // Applying the same changes again changes nothing.
    let mut again = Registry::new(3.0, 0, u64::MAX);
    live.set_recording(false);
    let mut all = Vec::new();
    let mut from = Some(0);
    while let Some(at) = from {
        from = live.snapshot(at, 7, |lease| all.push(lease.to_change()));
    }
    for change in all.iter().chain(all.iter()) {
        again.apply(change.clone());
    }
    prop_assert_eq!(dump(&again), dump(&live));
    Ok(())
}

#[test]
fn nothing_is_recorded_unless_asked() {
    let mut registry = registry();
    acquire(&mut registry, b"run", b"w", 0.0).unwrap();
    assert_eq!(registry.take_changes().count(), 0);
    registry.set_recording(true);
    registry.heartbeat(b"run:w:1", 1, 1.0);
    registry.validate(b"run", b"run:w:1", 1, 2.0);
    registry.release(b"run:w:1", 1);
    let changes: Vec<_> = registry.take_changes().collect();
    assert_eq!(
        changes,
        vec![
            Change::Extend {
                fencing_token: 1,
                expires_at: 11.0
            },
            Change::Remove { fencing_token: 1 },
        ]
    );
}

proptest! {
    #[test]
    fn registry_matches_the_model(ops in prop::collection::vec(lease_op(), 1..80)) {
        check_against_model(3.0, 0, u64::MAX, &ops)?;
    }

    #[test]
    fn registry_matches_the_model_with_retention(
        retention in select(vec![0.5, 1.0, 2.5, 7.0]),
        sweep in select(vec![0usize, 1, 3, usize::MAX]),
        ops in prop::collection::vec(lease_op(), 1..80),
    ) {
        check_with_retention(3.0, retention, 0, u64::MAX, &ops, sweep)?;
    }

    #[test]
    fn registry_matches_the_model_near_its_token_limits(
        near_max in any::<bool>(),
        headroom in 0u64..4,
        ops in prop::collection::vec(ceiling_op(), 1..60),
    ) {
        let last_token = if near_max { MAX_TOKEN - 4 } else { 0 };
        check_against_model(3.0, last_token, last_token + headroom, &ops)?;
    }

    #[test]
    fn changes_and_fuzzy_snapshots_rebuild_the_state(
        ops in prop::collection::vec(lease_op(), 1..80),
        start in any::<Index>(),
        chunk in 1usize..6,
    ) {
        let start = start.index(ops.len());
        check_changes_rebuild_state(&ops, start, chunk)?;
    }
}
