//! The keyspace view's replies: a run's lease worded as Redis words a key
//! of type `hash` whose fields are the lease's.

use bytes::Bytes;

use super::words::outcome_reply;
use crate::command::keyspace::View;
use crate::glob;
use crate::registry::{KeyState, Outcome};
use crate::reply::{Reply, format_double};

/// Redis keeps a hash as a listpack while every field and value is at
/// most this many bytes (`hash-max-listpack-value`), and a lease has
/// fewer fields than `hash-max-listpack-entries`.
const LISTPACK_VALUE: usize = 64;

/// The reply to a keyspace read, from the outcome of its op.
pub(super) fn reply(view: &View, outcome: Outcome) -> Reply {
    match outcome {
        Outcome::Scanned { next, runs } => scanned(view, next, runs),
        Outcome::Run(run) => run.map_or(Reply::Null, Reply::Bulk),
        Outcome::Inspected(states) if matches!(view, View::Exists) => {
            Reply::Int(states.iter().flatten().count() as i64)
        }
        Outcome::Inspected(mut states) => {
            let state = states.pop().flatten();
            key_reply(view, state.as_ref())
        }
        // Not reached: the views' ops give the outcomes above.
        outcome => outcome_reply(outcome),
    }
}

fn scanned(view: &View, next: u64, runs: Vec<Bytes>) -> Reply {
    let array = |runs: Vec<Bytes>| Reply::Array(runs.into_iter().map(Reply::Bulk).collect());
    match view {
        View::Keys => array(runs),
        View::Scan { hashes } => {
            let runs = if *hashes { runs } else { Vec::new() };
            Reply::Array(vec![Reply::bulk(next.to_string()), array(runs)])
        }
        _ => unreachable!("only SCAN and KEYS scan"),
    }
}

/// The lease's fields as a hash's, every value a string: what `LEASE.GET`
/// gives in RESP2, with `fencing_token` and `expired` in decimal.
pub fn fields(state: &KeyState) -> [(&'static str, Bytes); 6] {
    let lease = &state.lease;
    [
        ("run_id", lease.run_id.clone()),
        ("worker_id", lease.worker_id.clone()),
        ("lease_id", lease.lease_id().into()),
        ("fencing_token", lease.fencing_token.to_string().into()),
        ("expires_at", format_double(lease.expires_at).into()),
        ("expired", if state.expired { "1" } else { "0" }.into()),
    ]
}

fn field_named(state: &KeyState, name: &[u8]) -> Option<Bytes> {
    fields(state)
        .into_iter()
        .find(|(field, _)| field.as_bytes() == name)
        .map(|(_, value)| value)
}

fn key_reply(view: &View, state: Option<&KeyState>) -> Reply {
    let all = || state.map(fields).into_iter().flatten();
    match view {
        View::Type => Reply::Status(if state.is_some() { "hash" } else { "none" }),
        View::Ttl { millis, absolute } => Reply::Int(ttl(state, *millis, *absolute)),
        View::HGetAll => Reply::Map(
            all()
                .map(|(field, value)| (Reply::text(field), Reply::Bulk(value)))
                .collect(),
        ),
        View::HGet(field) => state
            .and_then(|state| field_named(state, field))
            .map_or(Reply::Null, Reply::Bulk),
        View::HMGet(names) => Reply::Array(
            names
                .iter()
                .map(|name| {
                    state
                        .and_then(|state| field_named(state, name))
                        .map_or(Reply::Null, Reply::Bulk)
                })
                .collect(),
        ),
        View::HLen => Reply::Int(all().count() as i64),
        View::HKeys => Reply::Array(all().map(|(field, _)| Reply::text(field)).collect()),
        View::HVals => Reply::Array(all().map(|(_, value)| Reply::Bulk(value)).collect()),
        View::HExists(name) => Reply::Int(i64::from(
            state.is_some_and(|state| field_named(state, name).is_some()),
        )),
        View::HScan { pattern, values } => {
            let mut items = Vec::new();
            let matching = all().filter(|(field, _)| {
                pattern
                    .as_ref()
                    .is_none_or(|pattern| glob::matches(pattern, field.as_bytes(), false))
            });
            for (field, value) in matching {
                items.push(Reply::text(field));
                if *values {
                    items.push(Reply::Bulk(value));
                }
            }
            Reply::Array(vec![Reply::bulk("0"), Reply::Array(items)])
        }
        View::MemoryUsage => state.map_or(Reply::Null, |state| Reply::Int(state.memory as i64)),
        View::ObjectEncoding => state.map_or(Reply::Null, |state| {
            let small = fields(state)
                .iter()
                .all(|(_, value)| value.len() <= LISTPACK_VALUE);
            Reply::bulk(if small { "listpack" } else { "hashtable" })
        }),
        View::Scan { .. } | View::Keys | View::RandomKey | View::Exists => {
            unreachable!("not a read of one key")
        }
    }
}

/// `TTL` and its kin, as Redis answers them: -2 for a run without a lease;
/// -1 for an expired lease still held (it will not go away by itself:
/// only a release, a takeover or reclaiming ends it); else the time left
/// to `expires_at` (or `expires_at` itself when `absolute`), in
/// milliseconds or rounded to seconds.
fn ttl(state: Option<&KeyState>, millis: bool, absolute: bool) -> i64 {
    let Some(state) = state else {
        return -2;
    };
    if state.expired {
        return -1;
    }
    let expires_at = state.lease.expires_at;
    let seconds = if absolute {
        expires_at
    } else {
        (expires_at - state.at).max(0.0)
    };
    // `as` saturates: an infinite TTL reads as the largest integer.
    let ms = (seconds * 1000.0).round() as i64;
    if millis {
        ms
    } else {
        ms.saturating_add(500) / 1000
    }
}
