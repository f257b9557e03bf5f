//! Arbitrary operation sequences through the registry's `apply` and its
//! reference model (`leased::registry::model`), which must agree on every
//! outcome and on the registry's figures after every step, with
//! reclaiming in between as the core does it.

#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use leased::registry::model::{Model, RUNS, WORKERS, check_runs, check_state, step_both};
use leased::registry::{MAX_TOKEN, Op, Registry};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    default_ttl: u8,
    retention: u8,
    /// Near 0, or near the last token there is.
    high_tokens: bool,
    ops: Vec<Step>,
}

/// Which lease id and token an operation names.
#[derive(Arbitrary, Debug)]
enum LeaseRef {
    Latest,
    Issued(u16),
    /// One issued lease's id with another's token.
    Crossed(u16, u16),
    NextToken(u16),
    Made {
        run: u8,
        worker: u8,
        id_token: u8,
        token: Option<u8>,
    },
    Junk(Vec<u8>, u64),
}

/// Time steps are in half seconds, like every TTL, so commands land
/// exactly on expiry times. `explicit` says whether the op carries the
/// client's clock as `now` or leaves it to the server's (which then reads
/// the same).
#[derive(Arbitrary, Debug)]
enum Step {
    Acquire {
        run: u8,
        worker: u8,
        dt: i8,
        ttl: u8,
        lock_delay: u8,
        explicit: bool,
    },
    Heartbeat {
        lease: LeaseRef,
        dt: i8,
        explicit: bool,
    },
    Validate {
        run: Option<u8>,
        lease: LeaseRef,
        dt: i8,
        explicit: bool,
    },
    Release {
        lease: LeaseRef,
    },
    Get {
        run: u8,
        dt: i8,
        explicit: bool,
    },
    /// How many leases the reclaim after this step may remove.
    Sweep(u8),
}

fn pick<T: Copy>(pool: &[T], index: u8) -> T {
    pool[usize::from(index) % pool.len()]
}

/// (the named lease's run, lease id, token), from the model's history.
fn resolve_ref(lease: &LeaseRef, model: &Model) -> (Option<Vec<u8>>, Vec<u8>, u64) {
    let issued = &model.issued;
    let nth = |i: u16| &issued[usize::from(i) % issued.len()];
    match lease {
        LeaseRef::Made {
            run,
            worker,
            id_token,
            token,
        } => {
            let id_token = u64::from(*id_token);
            let id = [
                pick(&RUNS, *run),
                b":",
                pick(&WORKERS, *worker),
                b":",
                id_token.to_string().as_bytes(),
            ]
            .concat();
            (None, id, token.map_or(id_token, u64::from))
        }
        LeaseRef::Junk(id, token) => (None, id.clone(), *token),
        _ if issued.is_empty() => (None, b"a:b:c:1".to_vec(), 1),
        LeaseRef::Latest => {
            let l = issued.last().expect("not empty");
            (Some(l.run.clone()), l.id(), l.token)
        }
        LeaseRef::Issued(i) => (Some(nth(*i).run.clone()), nth(*i).id(), nth(*i).token),
        LeaseRef::Crossed(a, b) => (Some(nth(*a).run.clone()), nth(*a).id(), nth(*b).token),
        LeaseRef::NextToken(i) => (Some(nth(*i).run.clone()), nth(*i).id(), nth(*i).token + 1),
    }
}

/// The op a step makes, and the server's clock for it: the client's
/// clock `now`, moved by the step.
fn resolve(step: &Step, model: &Model, now: &mut f64) -> Option<(Op, f64)> {
    let mut tick = |dt: i8, explicit: bool| {
        *now += f64::from(dt) * 0.5;
        explicit.then_some(*now)
    };
    let bytes = |pool: &[&'static [u8]], index: u8| Bytes::from_static(pick(pool, index));
    let op = match step {
        Step::Acquire {
            run,
            worker,
            dt,
            ttl,
            lock_delay,
            explicit,
        } => Op::Acquire {
            run_id: bytes(&RUNS, *run),
            worker_id: bytes(&WORKERS, *worker),
            now: tick(*dt, *explicit),
            ttl: (*ttl % 16 != 0).then(|| f64::from(*ttl % 16) * 0.5),
            // 0 is the default; otherwise 0 to 7.5 seconds.
            lock_delay: (*lock_delay % 17 != 0).then(|| f64::from(*lock_delay % 17 - 1) * 0.5),
            with_data: false,
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
                Some(index) => pick(&RUNS, *index).to_vec(),
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
            run_id: bytes(&RUNS, *run),
            now: tick(*dt, *explicit),
        },
        Step::Sweep(_) => return None,
    };
    Some((op, *now))
}

fuzz_target!(|input: Input| {
    let default_ttl = pick(&[3.0, 0.5, 10.0, 1.5], input.default_ttl);
    let retention = pick(&[f64::INFINITY, 0.5, 1.0, 2.5, 7.0], input.retention);
    let last_token = if input.high_tokens { MAX_TOKEN - 4 } else { 0 };
    let mut registry = Registry::new(default_ttl, last_token);
    registry.set_retention(retention);
    let mut model = Model::new(default_ttl, last_token);
    model.retention = retention;
    let mut now = 0.0;
    let mut sweep = usize::MAX;
    for (index, step) in input.ops.iter().take(200).enumerate() {
        if let Step::Sweep(n) = step {
            sweep = usize::from(*n % 4);
        }
        if let Some((op, clock)) = resolve(step, &model, &mut now) {
            if let Err(error) = step_both(&mut registry, &mut model, &op, clock) {
                panic!("step {index}: {error}");
            }
        }
        registry.apply(&Op::Reclaim { max: sweep }, now);
        if let Err(error) = check_state(&registry, &model) {
            panic!("after step {index} ({step:?}): {error}");
        }
    }
    if let Err(error) = check_runs(&mut registry, &mut model) {
        panic!("at the end: {error}");
    }
});
