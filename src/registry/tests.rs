use super::model::{Model, RUNS, WORKERS, check_runs, check_state, step_both};
use super::*;

use bytes::BytesMut;
use proptest::prelude::*;

use crate::aof::format::Round;
use proptest::sample::{Index, select};

// ---------------------------------------------------------------
// Helpers: ops with an explicit `now` (the clock passed to `apply` is
// then never read), and their outcomes.
// ---------------------------------------------------------------

fn lease(run: &[u8], worker: &[u8], token: u64, expires_at: f64) -> Lease {
    Lease {
        run_id: Bytes::copy_from_slice(run),
        worker_id: Bytes::copy_from_slice(worker),
        fencing_token: token,
        expires_at,
    }
}

/// A registry with the contract's default TTL.
fn registry() -> Registry {
    Registry::new(10.0, 0)
}

/// The clock for ops that carry their own `now`: reading it would show.
const UNREAD: f64 = f64::NAN;

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

fn bytes(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

fn acq(run: &str, worker: &str, now: f64, ttl: Option<f64>) -> Op {
    Op::Acquire {
        run_id: bytes(run),
        worker_id: bytes(worker),
        now: Some(now),
        ttl,
        lock_delay: None,
        with_data: false,
    }
}

fn hb(lease_id: &str, token: u64, now: f64) -> Op {
    Op::Heartbeat {
        lease_id: bytes(lease_id),
        token,
        now: Some(now),
    }
}

fn val(run: &str, lease_id: &str, token: u64, now: f64) -> Op {
    Op::Validate {
        run_id: bytes(run),
        lease_id: bytes(lease_id),
        token,
        now: Some(now),
    }
}

fn rel(lease_id: &str, token: u64) -> Op {
    Op::Release {
        lease_id: bytes(lease_id),
        token,
    }
}

fn get(run: &str, now: f64) -> Op {
    Op::Get {
        run_id: bytes(run),
        now: Some(now),
    }
}

fn issued(run: &str, worker: &str, token: u64, expires_at: f64) -> Outcome {
    Outcome::Acquired(Some(lease(
        run.as_bytes(),
        worker.as_bytes(),
        token,
        expires_at,
    )))
}

fn held() -> Outcome {
    Outcome::Acquired(None)
}

fn got(run: &str, worker: &str, token: u64, expires_at: f64, expired: bool) -> Outcome {
    Outcome::Got(Some((
        lease(run.as_bytes(), worker.as_bytes(), token, expires_at),
        expired,
    )))
}

const ONE: Outcome = Outcome::Flag(true);
const ZERO: Outcome = Outcome::Flag(false);
const NULL: Outcome = Outcome::Got(None);

#[test]
fn worked_example() {
    // (command, reply, len() after, last_token() after, registry time after)
    #[rustfmt::skip]
    let table: Vec<(Op, Outcome, usize, u64, f64)> = vec![
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
    for (row, (op, want, len, last_token, time)) in table.iter().enumerate() {
        let outcome = registry.apply(op, UNREAD);
        assert_eq!(&outcome, want, "row {row}: {op:?}");
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
    let mut restored = Registry::new(10.0, 41);
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
fn tokens_are_exhausted_at_max_token() {
    let mut registry = Registry::new(10.0, MAX_TOKEN - 1);
    let last = acquire(&mut registry, b"r", b"w", 0.0).unwrap();
    assert_eq!(last.fencing_token, MAX_TOKEN);
    assert_eq!(last.lease_id(), b"r:w:9223372036854775807");
    assert!(registry.heartbeat(b"r:w:9223372036854775807", MAX_TOKEN, 1.0));
    assert_eq!(
        registry.acquire(b"s", b"w", 1.0, None),
        Err(TokensExhausted)
    );
    assert_eq!(
        registry.apply(&acq("r", "x", 20.0, None), UNREAD),
        Outcome::TokensExhausted
    );
    assert_eq!(registry.last_token(), MAX_TOKEN);
    assert_eq!(registry.len(), 1);
    assert!(registry.release(b"r:w:9223372036854775807", MAX_TOKEN));
}

#[test]
fn reads_without_now_are_evaluated_at_the_clock_and_change_nothing() {
    let mut registry = registry();
    registry.set_recording(true);
    acquire(&mut registry, b"run", b"w", 100.0).unwrap();
    registry.take_changes().for_each(drop);
    let get_now = Op::Get {
        run_id: bytes("run"),
        now: None,
    };
    let validate = Op::Validate {
        run_id: bytes("run"),
        lease_id: bytes("run:w:1"),
        token: 1,
        now: None,
    };
    // A clock behind registry time reads as registry time.
    assert_eq!(
        registry.apply(&get_now, 50.0),
        got("run", "w", 1, 110.0, false)
    );
    assert_eq!(registry.apply(&validate, 109.9), ONE);
    // At or past expiry by the clock: expired, yet time stays where it was.
    assert_eq!(
        registry.apply(&get_now, 110.0),
        got("run", "w", 1, 110.0, true)
    );
    assert_eq!(registry.apply(&validate, 200.0), ZERO);
    assert_eq!(registry.time(), 100.0);
    assert_eq!(registry.take_changes().count(), 0);
    // So the lease is still alive for its holder.
    assert!(registry.heartbeat(b"run:w:1", 1, 105.0));
    registry.take_changes().for_each(drop);
    // An explicit `now` on a read does move time, and records it.
    assert_eq!(
        registry.apply(&get("run", 120.0), UNREAD),
        got("run", "w", 1, 115.0, true)
    );
    assert_eq!(registry.time(), 120.0);
    let changes: Vec<_> = registry.take_changes().collect();
    assert_eq!(changes, vec![Change::Time(120.0)]);
}

#[test]
fn writes_without_now_move_registry_time_to_the_clock() {
    let mut registry = registry();
    let acquire = Op::Acquire {
        run_id: bytes("run"),
        worker_id: bytes("w"),
        now: None,
        ttl: None,
        lock_delay: None,
        with_data: false,
    };
    assert_eq!(
        registry.apply(&acquire, 100.0),
        issued("run", "w", 1, 110.0)
    );
    assert_eq!(registry.time(), 100.0);
    let heartbeat = Op::Heartbeat {
        lease_id: bytes("run:w:1"),
        token: 1,
        now: None,
    };
    // A lagging clock is read as registry time.
    assert_eq!(registry.apply(&heartbeat, 90.0), ONE);
    assert_eq!(registry.get(b"run", 100.0).unwrap().0.expires_at, 110.0);
    assert_eq!(registry.apply(&heartbeat, 105.0), ONE);
    assert_eq!(registry.time(), 105.0);
}

#[test]
fn a_lease_past_retention_is_gone_to_every_command_before_it_is_reclaimed() {
    let mut registry = registry();
    registry.set_retention(5.0);
    acquire(&mut registry, b"run", b"w", 0.0).unwrap();
    acquire(&mut registry, b"other", b"w", 0.0).unwrap();
    // Expired at 10, releasable until 15 (exclusive).
    assert_eq!(
        registry.get(b"run", 14.9),
        Some((lease(b"run", b"w", 1, 10.0), true))
    );
    assert_eq!(registry.get(b"run", 15.0), None);
    assert_eq!(registry.apply(&rel("run:w:1", 1), UNREAD), ZERO);
    assert_eq!(
        registry.apply(&val("run", "run:w:1", 1, 15.0), UNREAD),
        ZERO
    );
    let scan = Op::Scan {
        cursor: 0,
        pattern: None,
        count: 10,
    };
    assert_eq!(
        registry.apply(&scan, UNREAD),
        Outcome::Scanned {
            next: 0,
            runs: Vec::new()
        }
    );
    // Nothing was removed by looking: both stay held until reclaimed, which
    // takes a whole second of expiries at a time, once all are past.
    assert_eq!(registry.len(), 2);
    assert_eq!(registry.apply(&Op::DbSize, UNREAD), Outcome::Count(2));
    assert_eq!(
        registry.apply(&Op::Reclaim { max: 1 }, UNREAD),
        Outcome::Reclaimed(0)
    );
    // A takeover of a run whose lease is past retention replaces it.
    assert_eq!(
        registry.apply(&acq("other", "x", 16.0, None), UNREAD),
        issued("other", "x", 3, 26.0)
    );
    assert_eq!(registry.len(), 2);
    assert_eq!(
        registry.apply(&Op::Reclaim { max: 10 }, UNREAD),
        Outcome::Reclaimed(1)
    );
    assert_eq!(registry.len(), 1);
    assert_eq!(
        registry.get(b"other", 16.0).map(|(l, _)| l.fencing_token),
        Some(3)
    );
}

#[test]
fn reclaim_takes_at_most_its_count_earliest_first() {
    let mut registry = registry();
    registry.set_retention(1.0);
    for (i, now) in [3.0, 1.0, 2.0, 0.0].into_iter().enumerate() {
        let run = format!("run-{i}");
        acquire(&mut registry, run.as_bytes(), b"w", now).unwrap();
    }
    registry.advance_time(100.0);
    assert_eq!(registry.reclaim(2), 2);
    // The two that expired first are gone.
    assert!(registry.get(b"run-3", 100.0).is_none());
    assert_eq!(registry.len(), 2);
    assert_eq!(registry.reclaim(usize::MAX), 2);
    assert!(registry.is_empty());
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
    // Past `far`'s expiry and retention: the reclaim leaves that second
    // alone while `never` is in it (its bound is infinite), and the
    // lookups treat `far` as gone.
    assert_eq!(registry.get(b"other", 1.1e308), None);
    assert_eq!(registry.expired_count(), 1);
    assert_eq!(registry.reclaim(usize::MAX), 0);
    assert_eq!(registry.get(b"far", 1.1e308), None);
    assert_eq!(registry.len(), 2);
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
// Random operation sequences, run against the model.
// ---------------------------------------------------------------

/// Which lease id and token a step names.
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

/// A step of a client whose clock moves by `dt` before it; `explicit`
/// says whether the op carries that time as `now` or leaves it to the
/// server's clock (which then reads the same).
#[derive(Clone, Debug)]
enum Step {
    Acquire {
        run: Index,
        worker: Index,
        dt: f64,
        ttl: Option<f64>,
        lock_delay: Option<f64>,
        explicit: bool,
    },
    Heartbeat {
        lease: Ref,
        dt: f64,
        explicit: bool,
    },
    /// `run: None` validates against the run of the referenced lease.
    Validate {
        run: Option<Index>,
        lease: Ref,
        dt: f64,
        explicit: bool,
    },
    Release {
        lease: Ref,
    },
    Get {
        run: Index,
        dt: f64,
        explicit: bool,
    },
    /// Reclaims up to this many leases, as the core does between rounds.
    Reclaim(usize),
    SetData {
        lease: Ref,
        value: u8,
        dt: f64,
        explicit: bool,
    },
    GetData {
        run: Index,
    },
    DelData {
        lease: Ref,
    },
    History {
        run: Index,
        count: usize,
    },
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

/// Mostly the default lock delay, sometimes one of a few seconds.
fn lock_delay() -> impl Strategy<Value = Option<f64>> {
    prop::option::weighted(0.3, select(vec![0.0, 0.5, 2.0, 7.5]))
}

/// Mostly explicit `now`, as the contract's examples use it.
fn explicit() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.7)
}

fn lease_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (any::<Index>(), any::<Index>(), dt(), ttl(), lock_delay(), explicit()).prop_map(
            |(run, worker, dt, ttl, lock_delay, explicit)| {
                Step::Acquire { run, worker, dt, ttl, lock_delay, explicit }
            }
        ),
        3 => (lease_ref(), dt(), explicit())
            .prop_map(|(lease, dt, explicit)| Step::Heartbeat { lease, dt, explicit }),
        2 => (prop::option::of(any::<Index>()), lease_ref(), dt(), explicit())
            .prop_map(|(run, lease, dt, explicit)| Step::Validate { run, lease, dt, explicit }),
        2 => lease_ref().prop_map(|lease| Step::Release { lease }),
        2 => (any::<Index>(), dt(), explicit())
            .prop_map(|(run, dt, explicit)| Step::Get { run, dt, explicit }),
        2 => (lease_ref(), any::<u8>(), dt(), explicit()).prop_map(
            |(lease, value, dt, explicit)| Step::SetData { lease, value, dt, explicit }
        ),
        1 => any::<Index>().prop_map(|run| Step::GetData { run }),
        1 => lease_ref().prop_map(|lease| Step::DelData { lease }),
        1 => (any::<Index>(), select(vec![1usize, 2, 3, usize::MAX]))
            .prop_map(|(run, count)| Step::History { run, count }),
    ]
}

/// Lease steps with reclaiming in between.
fn any_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => lease_step(),
        1 => select(vec![0usize, 1, 3, usize::MAX]).prop_map(Step::Reclaim),
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

/// Turns a step into an op and the server's clock for it: the client's
/// clock `now`, moved by the step.
fn resolve(step: &Step, model: &Model, now: &mut f64) -> (Op, f64) {
    let mut tick = |dt: f64, explicit: bool| {
        *now += dt;
        explicit.then_some(*now)
    };
    let op = match step {
        Step::Acquire {
            run,
            worker,
            dt,
            ttl,
            lock_delay,
            explicit,
        } => Op::Acquire {
            run_id: Bytes::from_static(RUNS[run.index(RUNS.len())]),
            worker_id: Bytes::from_static(WORKERS[worker.index(WORKERS.len())]),
            now: tick(*dt, *explicit),
            ttl: *ttl,
            lock_delay: *lock_delay,
            // Half of them, picked by the step's clock.
            with_data: (*dt * 2.0) as i64 % 2 == 0,
        },
        Step::Heartbeat {
            lease,
            dt,
            explicit,
        } => {
            let (_, lease_id, token) = resolve_ref(lease, model);
            Op::Heartbeat {
                lease_id: lease_id.into(),
                token,
                now: tick(*dt, *explicit),
            }
        }
        Step::Validate {
            run,
            lease,
            dt,
            explicit,
        } => {
            let (lease_run, lease_id, token) = resolve_ref(lease, model);
            let run = match run {
                Some(index) => index.get(&RUNS).to_vec(),
                None => lease_run.unwrap_or_else(|| RUNS[0].to_vec()),
            };
            Op::Validate {
                run_id: run.into(),
                lease_id: lease_id.into(),
                token,
                now: tick(*dt, *explicit),
            }
        }
        Step::Release { lease } => {
            let (_, lease_id, token) = resolve_ref(lease, model);
            Op::Release {
                lease_id: lease_id.into(),
                token,
            }
        }
        Step::Get { run, dt, explicit } => Op::Get {
            run_id: Bytes::from_static(RUNS[run.index(RUNS.len())]),
            now: tick(*dt, *explicit),
        },
        Step::Reclaim(max) => Op::Reclaim { max: *max },
        Step::SetData {
            lease,
            value,
            dt,
            explicit,
        } => {
            let (_, lease_id, token) = resolve_ref(lease, model);
            Op::SetData {
                lease_id: lease_id.into(),
                token,
                value: Bytes::from(vec![*value; usize::from(*value % 5)]),
                now: tick(*dt, *explicit),
            }
        }
        Step::GetData { run } => Op::GetData {
            run_id: Bytes::from_static(RUNS[run.index(RUNS.len())]),
        },
        Step::DelData { lease } => {
            let (_, lease_id, token) = resolve_ref(lease, model);
            Op::DelData {
                lease_id: lease_id.into(),
                token,
            }
        }
        Step::History { run, count } => Op::History {
            run_id: Bytes::from_static(RUNS[run.index(RUNS.len())]),
            count: *count,
        },
    };
    (op, *now)
}

/// Runs `steps` against a registry and the model, comparing every outcome
/// and the observable state after it. A retention of 0 keeps expired
/// leases forever, as the `lease-retention` directive has it.
fn check_against_model(
    default_ttl: f64,
    retention: f64,
    last_token: u64,
    history_len: usize,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let mut registry = Registry::new(default_ttl, last_token);
    registry.set_retention(retention);
    registry.set_history_len(history_len);
    let mut model = Model::new(default_ttl, last_token);
    model.retention = registry.retention();
    model.history_len = history_len;
    let mut now = 0.0;
    for (index, step) in steps.iter().enumerate() {
        let (op, clock) = resolve(step, &model, &mut now);
        step_both(&mut registry, &mut model, &op, clock)
            .map_err(|error| TestCaseError::fail(format!("step {index}: {error}")))?;
        check_state(&registry, &model)
            .map_err(|error| TestCaseError::fail(format!("after step {index}: {error}")))?;
    }
    check_runs(&mut registry, &mut model).map_err(TestCaseError::fail)?;
    Ok(())
}

/// A lease as a snapshot reads it: run, worker, token, expiry, TTL, lock
/// delay, when acquired, heartbeats.
type Held = (Bytes, Bytes, u64, f64, f64, f64, f64, u32);

/// Every lease a registry holds, in token order, for comparing state.
fn dump(registry: &Registry) -> Vec<Held> {
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
                e.lock_delay,
                e.acquired_at,
                e.heartbeats,
            ))
        });
    }
    leases.sort_by_key(|lease| lease.2);
    leases
}

/// A run's entry as a snapshot reads it: run, data (value, token,
/// written_at), past tenures, when orphaned.
type Kept = (
    Bytes,
    Option<(Bytes, u64, f64)>,
    Vec<crate::registry::PastTenure>,
    Option<f64>,
);

/// Every run's entry a registry holds, in run order.
fn dump_data(registry: &Registry) -> Vec<Kept> {
    let mut runs = Vec::new();
    let mut after: Option<Bytes> = None;
    loop {
        after = registry.snapshot_runs(after.as_deref(), 2, |r| {
            runs.push((
                Bytes::copy_from_slice(r.run_id),
                r.data
                    .map(|d| (d.value.clone(), d.fencing_token, d.written_at)),
                r.history.clone(),
                r.orphaned_at,
            ))
        });
        if after.is_none() {
            return runs;
        }
    }
}

/// Everything that makes a registry's state: its leases, its runs' data
/// and history, last token and registry time.
fn state(registry: &Registry) -> (Vec<Held>, Vec<Kept>, u64, f64) {
    (
        dump(registry),
        dump_data(registry),
        registry.last_token(),
        registry.time(),
    )
}

/// Runs `steps` on a recording registry. A replica fed its changes must
/// match it after every step; and a snapshot walked `chunk` slots at a
/// time from step `start`, while the ops go on, followed by the changes
/// made since `start`, must rebuild the final state.
fn check_changes_rebuild_state(
    steps: &[Step],
    start: usize,
    chunk: usize,
) -> Result<(), TestCaseError> {
    let mut live = Registry::new(3.0, 0);
    live.set_recording(true);
    let mut replica = Registry::new(3.0, 0);
    let mut model = Model::new(3.0, 0);
    let mut now = 0.0;
    let mut snapshot = Vec::new();
    let mut since_start = Vec::new();
    let mut cursor = None;
    for (index, step) in steps.iter().enumerate() {
        if index == start {
            snapshot.push(Change::LastToken(live.last_token()));
            snapshot.push(Change::Time(live.time()));
            cursor = Some(0);
        }
        let (op, clock) = resolve(step, &model, &mut now);
        model.apply(&op, clock);
        live.apply(&op, clock);
        for change in live.take_changes() {
            replica.replay(change.clone());
            if index >= start {
                since_start.push(change);
            }
        }
        prop_assert_eq!(
            state(&replica),
            state(&live),
            "replica after step {}",
            index
        );
        if let Some(from) = cursor {
            cursor = live.snapshot(from, chunk, |lease| snapshot.extend(lease.to_changes()));
        }
    }
    while let Some(from) = cursor {
        cursor = live.snapshot(from, chunk, |lease| snapshot.extend(lease.to_changes()));
    }
    // Then the run data, as a rewrite writes it after the leases.
    let mut after: Option<Bytes> = None;
    loop {
        after = live.snapshot_runs(after.as_deref(), chunk, |run| {
            snapshot.extend(run.to_changes())
        });
        if after.is_none() {
            break;
        }
    }
    let mut rebuilt = Registry::new(3.0, 0);
    for change in snapshot.into_iter().chain(since_start) {
        rebuilt.replay(change);
    }
    prop_assert_eq!(state(&rebuilt), state(&live));
    // Applying the same changes again changes nothing.
    let mut again = Registry::new(3.0, 0);
    live.set_recording(false);
    let mut all = Vec::new();
    let mut from = Some(0);
    while let Some(at) = from {
        from = live.snapshot(at, 7, |lease| all.extend(lease.to_changes()));
    }
    let mut after: Option<Bytes> = None;
    loop {
        after = live.snapshot_runs(after.as_deref(), 7, |run| all.extend(run.to_changes()));
        if after.is_none() {
            break;
        }
    }
    for change in all.iter().chain(all.iter()) {
        again.replay(change.clone());
    }
    prop_assert_eq!(dump(&again), dump(&live));
    prop_assert_eq!(dump_data(&again), dump_data(&live));
    Ok(())
}

/// What one way of batching `ops` gave: the outcomes, the changes in
/// order, and the log the rounds wrote.
struct Batched {
    registry: Registry,
    outcomes: Vec<Outcome>,
    changes: Vec<Change>,
    log: Vec<u8>,
}

/// Applies `ops` (each with its clock) in rounds that end after the
/// indexes in `ends`, as the core does: every op of a round applied in
/// order, then the round's changes taken and written as one log round.
fn run_in_rounds(ops: &[(Op, f64)], ends: &[usize]) -> Batched {
    let mut registry = Registry::new(3.0, 0);
    registry.set_retention(2.5);
    registry.set_recording(true);
    let (mut outcomes, mut changes) = (Vec::new(), Vec::new());
    let mut log = BytesMut::from(crate::aof::format::HEADER);
    let mut round = Round::default();
    for (index, (op, clock)) in ops.iter().enumerate() {
        outcomes.push(registry.apply(op, *clock));
        if ends.contains(&index) || index + 1 == ops.len() {
            for change in registry.take_changes() {
                round.push(&change);
                changes.push(change);
            }
            round.close();
            log.extend_from_slice(round.bytes());
            round.clear();
        }
    }
    Batched {
        registry,
        outcomes,
        changes,
        log: log.to_vec(),
    }
}

/// The same ops at the same clocks, applied one round per op and in
/// rounds cut at random, give the same outcomes, the same changes in the
/// same order and the same state; and either log, replayed, rebuilds
/// that state.
fn check_batching(steps: &[Step], ends: &[usize]) -> Result<(), TestCaseError> {
    // Resolve against a model so the ops name real leases.
    let mut model = Model::new(3.0, 0);
    model.retention = 2.5;
    let mut now = 0.0;
    let ops: Vec<(Op, f64)> = steps
        .iter()
        .map(|step| {
            let (op, clock) = resolve(step, &model, &mut now);
            model.apply(&op, clock);
            (op, clock)
        })
        .collect();
    let every: Vec<usize> = (0..ops.len()).collect();
    let one_by_one = run_in_rounds(&ops, &every);
    let batched = run_in_rounds(&ops, ends);
    prop_assert_eq!(&one_by_one.outcomes, &batched.outcomes);
    prop_assert_eq!(&one_by_one.changes, &batched.changes);
    let live = state(&one_by_one.registry);
    prop_assert_eq!(&live, &state(&batched.registry));
    for log in [&one_by_one.log, &batched.log] {
        let mut replayed = Registry::new(3.0, 0);
        crate::aof::format::replay(&log[..], |change| replayed.replay(change))
            .map_err(|error| TestCaseError::fail(error.to_string()))?;
        prop_assert_eq!(&state(&replayed), &live);
    }
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
            Change::Time(1.0),
            Change::Beat {
                fencing_token: 1,
                expires_at: 11.0,
                heartbeats: 1
            },
            Change::Time(2.0),
            Change::Release {
                fencing_token: 1,
                at: 2.0
            },
        ]
    );
}

proptest! {
    #[test]
    fn registry_matches_the_model(
        history_len in select(vec![0usize, 1, 3, 8]),
        steps in prop::collection::vec(lease_step(), 1..80),
    ) {
        check_against_model(3.0, 0.0, 0, history_len, &steps)?;
    }

    #[test]
    fn registry_matches_the_model_with_retention_and_reclaiming(
        retention in select(vec![0.5, 1.0, 2.5, 7.0]),
        steps in prop::collection::vec(any_step(), 1..80),
    ) {
        check_against_model(3.0, retention, 0, 8, &steps)?;
    }

    #[test]
    fn registry_matches_the_model_near_the_last_token(
        steps in prop::collection::vec(lease_step(), 1..40),
    ) {
        check_against_model(3.0, 0.0, MAX_TOKEN - 4, 8, &steps)?;
    }

    #[test]
    fn changes_and_fuzzy_snapshots_rebuild_the_state(
        steps in prop::collection::vec(any_step(), 1..80),
        start in any::<Index>(),
        chunk in 1usize..6,
    ) {
        let start = start.index(steps.len());
        check_changes_rebuild_state(&steps, start, chunk)?;
    }

    #[test]
    fn the_same_ops_give_the_same_state_and_changes_however_batched(
        steps in prop::collection::vec(any_step(), 1..80),
        ends in prop::collection::vec(any::<Index>(), 0..10),
    ) {
        let ends: Vec<usize> = ends.iter().map(|end| end.index(steps.len())).collect();
        check_batching(&steps, &ends)?;
    }
}

// ---------------------------------------------------------------
// Lock delays and events
// ---------------------------------------------------------------

/// The events made since the last call, as `kind:token:worker@run`.
fn events(registry: &mut Registry) -> Vec<String> {
    registry
        .take_events()
        .map(|e| {
            let worker = String::from_utf8_lossy(&e.worker_id).into_owned();
            let run = String::from_utf8_lossy(&e.run_id).into_owned();
            format!("{}:{}:{worker}@{run}", e.kind.as_str(), e.fencing_token)
        })
        .collect()
}

#[test]
fn a_lock_delay_closes_the_run_after_an_expiry_only() {
    let mut registry = registry();
    let first = registry
        .acquire_with(b"run", b"a", 0.0, Some(10.0), Some(5.0))
        .unwrap()
        .unwrap();
    assert_eq!(registry.free_at(b"run"), Some(15.0));
    assert_eq!(acquire(&mut registry, b"run", b"b", 12.0), None);
    assert_eq!(acquire(&mut registry, b"run", b"b", 14.999), None);
    let second = acquire(&mut registry, b"run", b"b", 15.0).unwrap();
    assert_eq!(second.fencing_token, first.fencing_token + 1);
    // The default lock delay applies to acquires without one; a release,
    // even after the expiry, frees the run at once.
    registry.set_default_lock_delay(30.0);
    assert!(registry.release(b"run:b:2", 2));
    let third = acquire(&mut registry, b"run", b"c", 15.0).unwrap();
    assert_eq!(registry.free_at(b"run"), Some(55.0));
    assert_eq!(acquire(&mut registry, b"run", b"d", 26.0), None);
    assert!(registry.release(b"run:c:3", third.fencing_token));
    assert!(acquire(&mut registry, b"run", b"d", 26.0).is_some());
    // A lease past retention is gone, lock delay or not.
    registry.set_retention(5.0);
    assert_eq!(acquire(&mut registry, b"run", b"e", 40.0), None);
    assert!(acquire(&mut registry, b"run", b"e", 41.0).is_some());
}

#[test]
fn events_tell_each_transition_once_and_expired_first() {
    let mut registry = registry();
    acquire(&mut registry, b"quiet", b"w", 0.0).unwrap();
    assert!(events(&mut registry).is_empty(), "none while not emitting");
    registry.set_emitting(true, 1.0);
    acquire(&mut registry, b"run", b"a", 1.0).unwrap();
    assert_eq!(events(&mut registry), ["acquired:2:a@run"]);
    // A heartbeat or a read makes none; time passing announces expiries,
    // each once, up to the time given.
    assert!(registry.heartbeat(b"run:a:2", 2, 2.0));
    assert_eq!(
        registry.apply(&get("run", 3.0), UNREAD),
        Outcome::Got(Some((lease(b"run", b"a", 2, 12.0), false)))
    );
    assert!(events(&mut registry).is_empty());
    assert_eq!(registry.next_unannounced_expiry(), Some(10.0));
    assert_eq!(
        registry.apply(&Op::AnnounceExpired, 10.5),
        Outcome::Count(1)
    );
    assert_eq!(events(&mut registry), ["expired:1:w@quiet"]);
    assert_eq!(registry.next_unannounced_expiry(), Some(12.0));
    // A takeover past the expiry: `expired` before `acquired`.
    acquire(&mut registry, b"run", b"b", 13.0).unwrap();
    assert_eq!(
        events(&mut registry),
        ["expired:2:a@run", "acquired:3:b@run"]
    );
    // Released after its expiry (on the clock; registry time lags):
    // `expired`, then `released`.
    assert_eq!(
        registry.apply(&rel("run:b:3", 3), 30.0),
        Outcome::Flag(true)
    );
    assert_eq!(
        events(&mut registry),
        ["expired:3:b@run", "released:3:b@run"]
    );
    // Reclaimed: `reclaimed`, its expiry long announced.
    registry.set_retention(1.0);
    registry.advance_time(40.0);
    assert_eq!(registry.reclaim(10), 1);
    assert_eq!(events(&mut registry), ["reclaimed:1:w@quiet"]);
    // Stopped, nothing more is made.
    registry.set_emitting(false, 40.0);
    acquire(&mut registry, b"other", b"w", 40.0).unwrap();
    assert!(events(&mut registry).is_empty());
}

#[test]
fn leases_behind_the_announced_time_are_announced_at_once() {
    let mut registry = registry();
    registry.set_emitting(true, 1_000.0);
    // Taken on a clock far behind: already expired there.
    acquire(&mut registry, b"run", b"a", 5.0).unwrap();
    assert_eq!(
        events(&mut registry),
        ["acquired:1:a@run", "expired:1:a@run"]
    );
    // Registry time moving past an expiry announces it before what moved it.
    registry.set_emitting(false, 0.0);
    let mut registry = Registry::new(10.0, 0);
    registry.set_emitting(true, 0.0);
    acquire(&mut registry, b"x", b"a", 1.0).unwrap();
    acquire(&mut registry, b"y", b"b", 20.0).unwrap();
    assert_eq!(
        events(&mut registry),
        ["acquired:1:a@x", "expired:1:a@x", "acquired:2:b@y"]
    );
}

// ---------------------------------------------------------------
// Health: why heartbeats were refused, their slack, how tenures ended.
// ---------------------------------------------------------------

#[test]
fn refused_heartbeats_are_counted_by_reason() {
    let mut r = registry();
    let ops = [
        (acq("a:b", "c", 0.0, None), issued("a:b", "c", 1, 10.0)),
        // Expired: still its run's lease, but out of time.
        (hb("a:b:c:1", 1, 10.0), ZERO),
        // Taken over: the run has a newer lease.
        (acq("a:b", "d", 11.0, None), issued("a:b", "d", 2, 21.0)),
        (hb("a:b:c:1", 1, 12.0), ZERO),
        // Run and worker may hold ':', so "a:b:c:1" also reads as run "a",
        // worker "b:c": once run "a" has a newer lease, that is taken over
        // too, as is any id that reads as a lease of "a" older than 3.
        (acq("a", "x", 12.0, None), issued("a", "x", 3, 22.0)),
        (hb("a:b:c:1", 1, 12.0), ZERO),
        (hb("a:b:e:2", 2, 12.0), ZERO),
        // Unknown: a token newer than every lease of the runs the id can
        // name, and an id that does not end in ":<token>".
        (hb("a:b:d:9", 9, 12.0), ZERO),
        (hb("a:b:d:02", 2, 12.0), ZERO),
    ];
    for (op, want) in ops {
        assert_eq!(r.apply(&op, UNREAD), want, "{op:?}");
    }
    assert_eq!(r.health().refused, [1, 3, 2]);
}

#[test]
fn heartbeat_slack_is_the_share_of_the_ttl_left() {
    let mut r = registry();
    assert_eq!(
        r.apply(&acq("run", "w", 0.0, None), UNREAD),
        issued("run", "w", 1, 10.0)
    );
    for (now, left) in [(1.0, 0.9), (9.5, 0.15), (10.0, 0.95), (19.0, 0.1)] {
        let before = r.health().slack.buckets();
        assert_eq!(r.apply(&hb("run:w:1", 1, now), UNREAD), ONE);
        let after = r.health().slack.buckets();
        let moved: Vec<f64> = (before.iter().zip(&after))
            .filter(|(b, a)| b.1 != a.1)
            .map(|(_, a)| a.0)
            .collect();
        let bucket = SLACK_BOUNDS.iter().copied().find(|&b| left <= b);
        assert_eq!(moved, [bucket.unwrap()], "slack {left} at {now}");
    }
    assert_eq!(r.health().slack.count(), 4);
    assert_eq!(r.health().refused, [0, 0, 0]);
}

#[test]
fn tenures_are_counted_once_by_how_they_ended() {
    let mut r = registry();
    r.set_retention(100.0);
    let steps = [
        (acq("r1", "w", 0.0, None), issued("r1", "w", 1, 10.0)),
        (rel("r1:w:1", 1), ONE), // released in time
        (acq("r2", "w", 0.0, None), issued("r2", "w", 2, 10.0)),
        (acq("r3", "w", 0.0, None), issued("r3", "w", 3, 10.0)),
        (get("r1", 10.0), NULL),
        (rel("r2:w:2", 2), ONE), // released at its expires_at: late
        (acq("r3", "v", 12.0, None), issued("r3", "v", 4, 22.0)), // takeover
    ];
    for (op, want) in steps {
        assert_eq!(r.apply(&op, UNREAD), want, "{op:?}");
    }
    assert_eq!(r.health().ended, [1, 1, 1]);
    // r3's second lease expires and is reclaimed once retention has run.
    assert_eq!(r.apply(&get("r3", 200.0), UNREAD), NULL);
    assert_eq!(r.reclaim(10), 1);
    assert_eq!(r.health().ended, [1, 1, 2]);
    r.reset_health();
    assert_eq!(r.health(), &Health::default());
}

#[test]
fn acquires_held_off_by_a_lock_delay_are_counted() {
    let mut r = registry();
    let delayed = Op::Acquire {
        run_id: bytes("run"),
        worker_id: bytes("w"),
        now: Some(0.0),
        ttl: None,
        lock_delay: Some(5.0),
        with_data: false,
    };
    assert_eq!(r.apply(&delayed, UNREAD), issued("run", "w", 1, 10.0));
    assert_eq!(r.apply(&acq("run", "v", 5.0, None), UNREAD), held());
    assert_eq!(r.health().lock_delayed, 0, "held, not delayed");
    assert_eq!(r.apply(&acq("run", "v", 12.0, None), UNREAD), held());
    assert_eq!(r.health().lock_delayed, 1);
    assert_eq!(
        r.apply(&acq("run", "v", 15.0, None), UNREAD),
        issued("run", "v", 2, 25.0)
    );
    assert_eq!(r.health().ended, [0, 0, 1]);
}

// ---------------------------------------------------------------
// Run data: a fenced checkpoint per run.
// ---------------------------------------------------------------

fn setdata(lease_id: &str, token: u64, value: &str, now: f64) -> Op {
    Op::SetData {
        lease_id: bytes(lease_id),
        token,
        value: bytes(value),
        now: Some(now),
    }
}

fn getdata(run: &str) -> Op {
    Op::GetData { run_id: bytes(run) }
}

fn deldata(lease_id: &str, token: u64) -> Op {
    Op::DelData {
        lease_id: bytes(lease_id),
        token,
    }
}

fn data(value: &str, token: u64, written_at: f64) -> Outcome {
    Outcome::Data(Some(RunData {
        value: bytes(value),
        fencing_token: token,
        written_at,
    }))
}

#[test]
fn only_the_current_unexpired_holder_sets_data() {
    let mut r = registry();
    r.apply(&acq("a", "w1", 0.0, None), UNREAD);
    r.apply(&acq("b", "w1", 0.0, None), UNREAD);
    // The holder.
    assert_eq!(
        r.apply(&setdata("a:w1:1", 1, "one", 1.0), UNREAD),
        Outcome::Flag(true)
    );
    // A stale token, and a lease id of another run with this run's token.
    assert_eq!(
        r.apply(&setdata("a:w1:1", 3, "x", 2.0), UNREAD),
        Outcome::Flag(false)
    );
    assert_eq!(
        r.apply(&setdata("b:w1:2", 1, "x", 2.0), UNREAD),
        Outcome::Flag(false)
    );
    assert_eq!(r.apply(&getdata("a"), 2.0), data("one", 1, 1.0));
    // SETDATA does not extend the lease: after expiry it is refused.
    assert_eq!(
        r.apply(&setdata("a:w1:1", 1, "late", 10.0), UNREAD),
        Outcome::Flag(false)
    );
    // A takeover reads the previous holder's data; the old holder is fenced.
    r.apply(&acq("a", "w2", 11.0, None), UNREAD);
    assert_eq!(r.apply(&getdata("a"), 11.0), data("one", 1, 1.0));
    assert_eq!(
        r.apply(&setdata("a:w1:1", 1, "stale", 12.0), UNREAD),
        Outcome::Flag(false)
    );
    assert_eq!(
        r.apply(&setdata("a:w2:3", 3, "two", 12.0), UNREAD),
        Outcome::Flag(true)
    );
    assert_eq!(r.apply(&getdata("a"), 12.0), data("two", 3, 12.0));
    assert_eq!(r.apply(&getdata("b"), 12.0), Outcome::Data(None));
}

#[test]
fn setdata_without_now_is_written_at_the_clock_and_moves_time() {
    let mut r = registry();
    r.apply(&acq("a", "w", 100.0, None), UNREAD);
    let op = Op::SetData {
        lease_id: bytes("a:w:1"),
        token: 1,
        value: bytes("v"),
        now: None,
    };
    assert_eq!(r.apply(&op, 105.0), Outcome::Flag(true));
    assert_eq!(r.time(), 105.0);
    assert_eq!(r.apply(&getdata("a"), 0.0), data("v", 1, 105.0));
}

#[test]
fn data_survives_a_release_for_retention_then_goes() {
    let mut r = registry();
    r.set_retention(30.0);
    r.set_recording(true);
    r.apply(&acq("a", "w", 0.0, None), UNREAD);
    r.apply(&setdata("a:w:1", 1, "cp", 1.0), UNREAD);
    assert_eq!(r.apply(&rel("a:w:1", 1), 5.0), Outcome::Flag(true));
    // Counted from the release (at the server's clock, 5).
    assert_eq!(r.apply(&getdata("a"), 34.9), data("cp", 1, 1.0));
    assert_eq!(r.apply(&getdata("a"), 35.0), Outcome::Data(None));
    assert_eq!(r.data_count(), 1, "a read never writes");
    // Registry time passes the due time: the reclaim step sweeps it (and
    // reports no lease reclaimed: only data went).
    r.apply(&get("zz", 35.0), UNREAD);
    assert!(r.reclaim_due());
    assert_eq!(
        r.apply(&Op::Reclaim { max: 10 }, 35.0),
        Outcome::Reclaimed(0)
    );
    assert_eq!(r.data_count(), 0);
    assert!(
        r.take_changes()
            .any(|c| c == Change::Forget { run_id: bytes("a") })
    );
}

#[test]
fn a_new_lease_within_retention_adopts_released_data() {
    let mut r = registry();
    r.set_retention(30.0);
    r.apply(&acq("a", "w", 0.0, None), UNREAD);
    r.apply(&setdata("a:w:1", 1, "cp", 1.0), UNREAD);
    r.apply(&rel("a:w:1", 1), 2.0);
    r.apply(&acq("a", "w2", 20.0, None), UNREAD);
    // Long after the first release: the data is the new lease's now.
    r.apply(&hb("a:w2:2", 2, 29.0), UNREAD);
    r.apply(&hb("a:w2:2", 2, 38.0), UNREAD);
    r.apply(&Op::Reclaim { max: 10 }, 38.0);
    assert_eq!(r.apply(&getdata("a"), 38.0), data("cp", 1, 1.0));
    // Acquired after the data's time was up, the run starts empty.
    r.apply(&rel("a:w2:2", 2), 40.0);
    r.apply(&acq("a", "w3", 70.0, None), UNREAD);
    assert_eq!(r.apply(&getdata("a"), 70.0), Outcome::Data(None));
}

#[test]
fn data_goes_with_an_expired_lease_when_it_is_reclaimed() {
    let mut r = registry();
    r.set_retention(30.0);
    r.apply(&acq("a", "w", 0.0, None), UNREAD);
    r.apply(&setdata("a:w:1", 1, "cp", 1.0), UNREAD);
    // Expires at 10; gone at 40, from expires_at.
    assert_eq!(r.apply(&getdata("a"), 39.0), data("cp", 1, 1.0));
    assert_eq!(r.apply(&getdata("a"), 40.0), Outcome::Data(None));
    // Reclaiming goes a whole second of expiries at a time.
    r.apply(&get("zz", 41.0), UNREAD);
    assert_eq!(
        r.apply(&Op::Reclaim { max: 10 }, 41.0),
        Outcome::Reclaimed(1)
    );
    assert_eq!(r.data_count(), 0);
}

#[test]
fn an_acquire_past_retention_does_not_inherit_the_data() {
    let mut r = registry();
    r.set_retention(30.0);
    r.apply(&acq("a", "w", 0.0, None), UNREAD);
    r.apply(&setdata("a:w:1", 1, "cp", 1.0), UNREAD);
    // Not reclaimed yet, but past retention: the lease and its data are gone.
    r.apply(&acq("a", "w2", 45.0, None), UNREAD);
    assert_eq!(r.apply(&getdata("a"), 45.0), Outcome::Data(None));
    assert_eq!(r.data_count(), 0);
}

#[test]
fn retention_zero_keeps_data_forever() {
    let mut r = registry();
    r.set_retention(0.0);
    r.apply(&acq("a", "w", 0.0, None), UNREAD);
    r.apply(&setdata("a:w:1", 1, "cp", 1.0), UNREAD);
    r.apply(&rel("a:w:1", 1), 2.0);
    r.apply(&get("zz", 1e9), UNREAD);
    r.apply(&Op::Reclaim { max: 10 }, 1e9);
    assert_eq!(r.apply(&getdata("a"), 1e9), data("cp", 1, 1.0));
}

#[test]
fn deldata_needs_the_holder_and_says_whether_there_was_data() {
    let mut r = registry();
    r.apply(&acq("a", "w", 0.0, None), UNREAD);
    assert_eq!(r.apply(&deldata("a:w:1", 1), 1.0), Outcome::Flag(false));
    r.apply(&setdata("a:w:1", 1, "cp", 1.0), UNREAD);
    assert_eq!(r.apply(&deldata("a:w:1", 2), 1.0), Outcome::Flag(false));
    // At the server's clock: expired there, refused.
    assert_eq!(r.apply(&deldata("a:w:1", 1), 10.0), Outcome::Flag(false));
    assert_eq!(r.apply(&deldata("a:w:1", 1), 2.0), Outcome::Flag(true));
    assert_eq!(r.apply(&getdata("a"), 2.0), Outcome::Data(None));
    assert_eq!(r.data_memory(), 0);
}

#[test]
fn setdata_is_recorded_and_emits_a_data_event() {
    let mut r = registry();
    r.set_recording(true);
    r.set_emitting(true, 0.0);
    r.apply(&acq("a", "w", 0.0, None), UNREAD);
    r.take_changes();
    r.take_events().for_each(drop);
    r.apply(&setdata("a:w:1", 1, "cp", 1.0), UNREAD);
    let changes: Vec<Change> = r.take_changes().collect();
    assert!(changes.contains(&Change::SetData {
        run_id: bytes("a"),
        value: bytes("cp"),
        fencing_token: 1,
        written_at: 1.0,
    }));
    let events: Vec<Event> = r.take_events().collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, EventKind::Data);
    assert_eq!(events[0].fencing_token, 1);
}
