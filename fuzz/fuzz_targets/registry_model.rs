//! Arbitrary operation sequences through the registry and its reference
//! model (`leased::registry::model`), which must agree on every reply and
//! on the registry's figures after every step, with reclaiming in between
//! as the core does it.

#![no_main]

use arbitrary::Arbitrary;
use leased::registry::model::{Cmd, Model, RUNS, WORKERS, check_runs, check_state, step_both};
use leased::registry::{MAX_TOKEN, Registry};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    default_ttl: u8,
    retention: u8,
    /// Near 0, or near the last token there is.
    high_tokens: bool,
    ceiling: Option<u8>,
    ops: Vec<Op>,
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
/// exactly on expiry times.
#[derive(Arbitrary, Debug)]
enum Op {
    Acquire {
        run: u8,
        worker: u8,
        dt: i8,
        ttl: u8,
    },
    Heartbeat {
        lease: LeaseRef,
        dt: i8,
    },
    Validate {
        run: Option<u8>,
        lease: LeaseRef,
        dt: i8,
    },
    Release {
        lease: LeaseRef,
    },
    Get {
        run: u8,
        dt: i8,
    },
    SetCeiling(u8),
    /// How many leases the sweep after this step may reclaim.
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

fn resolve(op: &Op, model: &Model, now: &mut f64, first_token: u64) -> Option<Cmd> {
    let mut step = |dt: i8| {
        *now += f64::from(dt) * 0.5;
        *now
    };
    Some(match op {
        Op::Acquire {
            run,
            worker,
            dt,
            ttl,
        } => Cmd::Acquire {
            run: pick(&RUNS, *run).to_vec(),
            worker: pick(&WORKERS, *worker).to_vec(),
            now: step(*dt),
            ttl: (*ttl % 16 != 0).then(|| f64::from(*ttl % 16) * 0.5),
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
                Some(index) => pick(&RUNS, *index).to_vec(),
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
            run: pick(&RUNS, *run).to_vec(),
            now: step(*dt),
        },
        Op::SetCeiling(delta) => Cmd::SetCeiling(first_token + u64::from(*delta % 16)),
        Op::Sweep(_) => return None,
    })
}

fuzz_target!(|input: Input| {
    let default_ttl = pick(&[3.0, 0.5, 10.0, 1.5], input.default_ttl);
    let retention = pick(&[f64::INFINITY, 0.5, 1.0, 2.5, 7.0], input.retention);
    let last_token = if input.high_tokens { MAX_TOKEN - 4 } else { 0 };
    let ceiling = input
        .ceiling
        .map_or(u64::MAX, |c| last_token + u64::from(c % 8));
    let mut registry = Registry::new(default_ttl, last_token, ceiling);
    registry.set_retention(retention);
    let mut model = Model::new(default_ttl, last_token, ceiling);
    model.retention = retention;
    let mut now = 0.0;
    let mut sweep = usize::MAX;
    for (step, op) in input.ops.iter().take(200).enumerate() {
        if let Op::Sweep(n) = op {
            sweep = usize::from(*n % 4);
        }
        if let Some(cmd) = resolve(op, &model, &mut now, last_token) {
            if let Err(error) = step_both(&mut registry, &mut model, &cmd) {
                panic!("step {step}: {error}");
            }
        }
        registry.reclaim(sweep);
        if let Err(error) = check_state(&registry, &model) {
            panic!("after step {step} ({op:?}): {error}");
        }
    }
    if let Err(error) = check_runs(&mut registry, &mut model) {
        panic!("at the end: {error}");
    }
});
