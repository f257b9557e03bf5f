//! Benches of the pure registry holding a million leases, and of the hash
//! functions its lease table could use.
//!
//! `cargo bench --bench core` runs both groups; `-- registry_1m` or
//! `-- hasher` runs one.
//!
//! # How the registry is driven
//!
//! As the server drives it: jemalloc is the allocator, the retention is the
//! default (3600 s), and change recording is on (the default
//! `appendonly yes`), with the changes taken after every operation, as the
//! core takes them after every command (here they are dropped instead of
//! appended to the log).
//!
//! One registry of a million leases (`run:000000` .. `run:999999`, held by
//! `worker-10` .. `worker-99`) is built once and shared by every bench of
//! the group. Leases are visited in a scattered order (a stride through the
//! million), so each operation meets a lease whose slot and index entries
//! are not in cache, as it would be with a million clients. `now` moves
//! 3 µs per operation, so a lease comes round again about three virtual
//! seconds later and a heartbeat moves it to another second of the expiry
//! index, as real heartbeats do. The TTL is a million seconds, so no lease
//! ever expires.
//!
//! Operations are timed in chunks of [`CHUNK`]: each chunk's arguments
//! (ids and lease ids, as the decoder would hand them over) are prepared
//! untimed, and what a bench has to undo to keep the table at a million
//! leases is undone untimed after the chunk.

use std::hint::black_box;
use std::io::Write;
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use hashbrown::HashTable;
use leased::registry::Registry;
use std::hash::BuildHasher;

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Leases in the registry while it is measured.
const LEASES: usize = 1_000_000;
/// The step of the walk over the leases: coprime with [`LEASES`], so the
/// walk visits every lease once per million steps.
const STRIDE: usize = 387_253;
/// Operations timed between two untimed stretches.
const CHUNK: usize = 1000;
/// The TTL of every lease, in seconds: nothing expires during the run.
const TTL: f64 = 1.0e6;
/// The server's default `lease-retention`.
const RETENTION: f64 = 3600.0;
/// Registry time when the leases are taken.
const START: f64 = 1_000_000.0;
/// How far `now` moves per operation.
const STEP: f64 = 3.0e-6;

fn run_id(i: usize, out: &mut Vec<u8>) {
    out.clear();
    write!(out, "run:{i:06}").expect("writing to a vector");
}

fn worker_id(i: usize, out: &mut Vec<u8>) {
    out.clear();
    write!(out, "worker-{}", 10 + i % 90).expect("writing to a vector");
}

fn lease_id(run_id: &[u8], worker_id: &[u8], token: u64, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(run_id);
    out.push(b':');
    out.extend_from_slice(worker_id);
    write!(out, ":{token}").expect("writing to a vector");
}

/// Takes the changes an operation recorded, as the core does after every
/// command.
fn drain(registry: &mut Registry) {
    for change in registry.take_changes() {
        black_box(change);
    }
}

struct Fixture {
    registry: Registry,
    /// The current fencing token of `run:{i}`.
    tokens: Vec<u64>,
    now: f64,
    /// Steps taken in the walk over the leases.
    cursor: usize,
    /// Run ids handed out for acquires of runs that have no lease.
    fresh: usize,
}

impl Fixture {
    fn new() -> Fixture {
        let mut registry = Registry::new(TTL, 0);
        registry.set_retention(RETENTION);
        registry.set_recording(true);
        let mut tokens = Vec::with_capacity(LEASES);
        let (mut run, mut worker) = (Vec::new(), Vec::new());
        for i in 0..LEASES {
            run_id(i, &mut run);
            worker_id(i, &mut worker);
            let lease = registry
                .acquire(&run, &worker, START, None)
                .expect("tokens up to MAX_TOKEN")
                .expect("a run of its own");
            drain(&mut registry);
            tokens.push(lease.fencing_token);
        }
        assert_eq!(registry.len(), LEASES);
        Fixture {
            registry,
            tokens,
            // Two seconds on, so even the first heartbeat of a lease moves
            // it to another second of the expiry index.
            now: START + 2.0,
            cursor: 0,
            fresh: 0,
        }
    }

    /// The next lease of the walk.
    fn next_lease(&mut self) -> usize {
        let i = (self.cursor % LEASES) * STRIDE % LEASES;
        self.cursor += 1;
        i
    }

    /// The `now` of the next operation.
    fn tick(&mut self) -> f64 {
        let now = self.now;
        self.now += STEP;
        now
    }

    /// Prepares the arguments naming lease `i` as its holder knows it.
    fn held(&self, i: usize, input: &mut Input) {
        input.index = i;
        run_id(i, &mut input.run_id);
        worker_id(i, &mut input.worker_id);
        input.token = self.tokens[i];
        lease_id(
            &input.run_id,
            &input.worker_id,
            input.token,
            &mut input.lease_id,
        );
    }
}

/// The arguments of one operation.
#[derive(Default)]
struct Input {
    index: usize,
    run_id: Vec<u8>,
    worker_id: Vec<u8>,
    lease_id: Vec<u8>,
    token: u64,
}

/// Times `iters` operations, [`CHUNK`] at a time: `prepare` sets up the
/// chunk's arguments, `op` is the operation timed, `undo` restores what it
/// changed; only `op` is timed.
fn in_chunks(
    fixture: &mut Fixture,
    iters: u64,
    mut prepare: impl FnMut(&mut Fixture, usize, &mut Input),
    mut op: impl FnMut(&mut Fixture, &Input),
    mut undo: impl FnMut(&mut Fixture, &Input),
) -> Duration {
    let mut inputs: Vec<Input> = (0..CHUNK).map(|_| Input::default()).collect();
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        for (k, input) in inputs[..n].iter_mut().enumerate() {
            prepare(fixture, k, input);
        }
        let start = Instant::now();
        for input in &inputs[..n] {
            op(fixture, input);
        }
        total += start.elapsed();
        for input in &inputs[..n] {
            undo(fixture, input);
        }
        left -= n as u64;
    }
    total
}

fn nothing(_: &mut Fixture, _: &Input) {}

/// Prepares the next live lease, as its holder would present it.
fn next_held(fixture: &mut Fixture, _: usize, input: &mut Input) {
    let i = fixture.next_lease();
    fixture.held(i, input);
}

/// One bench of the registry group, timed by [`in_chunks`], building the
/// shared fixture on first use.
fn chunked(
    group: &mut BenchmarkGroup<'_, WallTime>,
    fixture: &mut Option<Fixture>,
    name: &str,
    mut prepare: impl FnMut(&mut Fixture, usize, &mut Input),
    mut op: impl FnMut(&mut Fixture, &Input),
    mut undo: impl FnMut(&mut Fixture, &Input),
) {
    group.bench_function(name, |b| {
        let fixture = fixture.get_or_insert_with(Fixture::new);
        b.iter_custom(|iters| in_chunks(fixture, iters, &mut prepare, &mut op, &mut undo))
    });
}

fn registry_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("registry_1m");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    // Built by the first bench that runs, so a filter that skips them all
    // skips building it too.
    let mut fixture: Option<Fixture> = None;

    // A run that has no lease: a new one is inserted and a token issued.
    // The chunk's runs are released again, untimed, after the chunk, so the
    // table holds between 1,000,000 and 1,001,000 leases.
    chunked(
        &mut group,
        &mut fixture,
        "acquire/new_run",
        |f, k, input| {
            // Ids of the same shape, never held at the same time
            // as the million (`run:1000000` ..).
            let n = LEASES + f.fresh % LEASES;
            f.fresh += 1;
            run_id(n, &mut input.run_id);
            worker_id(n, &mut input.worker_id);
            input.token = f.registry.last_token() + 1 + k as u64;
            lease_id(
                &input.run_id,
                &input.worker_id,
                input.token,
                &mut input.lease_id,
            );
        },
        |f, input| {
            let now = f.tick();
            let lease = f
                .registry
                .acquire(&input.run_id, &input.worker_id, now, None);
            assert!(matches!(&lease, Ok(Some(l)) if l.fencing_token == input.token));
            black_box(lease).ok();
            drain(&mut f.registry);
        },
        |f, input| {
            assert!(f.registry.release(&input.lease_id, input.token));
            drain(&mut f.registry);
        },
    );

    // A run held by another worker: the acquire fails, nothing changes.
    chunked(
        &mut group,
        &mut fixture,
        "acquire/held_run",
        |f, _, input| {
            let i = f.next_lease();
            run_id(i, &mut input.run_id);
            worker_id(i + 1, &mut input.worker_id);
        },
        |f, input| {
            let now = f.tick();
            let lease = f
                .registry
                .acquire(&input.run_id, &input.worker_id, now, None);
            assert!(matches!(lease, Ok(None)));
            drain(&mut f.registry);
        },
        nothing,
    );

    // A live lease's heartbeat: found by token, id compared, expiry moved
    // to a later second of the expiry index, an `Extend` recorded.
    chunked(
        &mut group,
        &mut fixture,
        "heartbeat/live",
        next_held,
        |f, input| {
            let now = f.tick();
            assert!(f.registry.heartbeat(&input.lease_id, input.token, now));
            drain(&mut f.registry);
        },
        nothing,
    );

    // The holder's validate: found by run, token and id compared.
    chunked(
        &mut group,
        &mut fixture,
        "validate/live",
        next_held,
        |f, input| {
            let now = f.tick();
            assert!(
                f.registry
                    .validate(&input.run_id, &input.lease_id, input.token, now)
            );
            drain(&mut f.registry);
        },
        nothing,
    );

    // A stale holder's validate: the run is found, its token differs.
    chunked(
        &mut group,
        &mut fixture,
        "validate/stale_token",
        |f, _, input| {
            let i = f.next_lease();
            f.held(i, input);
            input.token -= 1;
            lease_id(
                &input.run_id,
                &input.worker_id,
                input.token,
                &mut input.lease_id,
            );
        },
        |f, input| {
            let now = f.tick();
            assert!(
                !f.registry
                    .validate(&input.run_id, &input.lease_id, input.token, now)
            );
            drain(&mut f.registry);
        },
        nothing,
    );

    // A run the registry has never seen: a miss in the run index.
    chunked(
        &mut group,
        &mut fixture,
        "validate/unknown_run",
        |f, _, input| {
            let i = f.next_lease();
            // `run:2000000` .. : never acquired by any bench.
            run_id(2 * LEASES + i, &mut input.run_id);
            worker_id(i, &mut input.worker_id);
            input.token = f.tokens[i];
            lease_id(
                &input.run_id,
                &input.worker_id,
                input.token,
                &mut input.lease_id,
            );
        },
        |f, input| {
            let now = f.tick();
            assert!(
                !f.registry
                    .validate(&input.run_id, &input.lease_id, input.token, now)
            );
            drain(&mut f.registry);
        },
        nothing,
    );

    // A live lease released by its holder: found by token, id compared,
    // removed from all three indexes, a `Remove` recorded. After the chunk
    // the runs are acquired again, untimed, by the same workers (with new
    // tokens), so the table holds between 999,000 and 1,000,000 leases.
    chunked(
        &mut group,
        &mut fixture,
        "release/live",
        next_held,
        |f, input| {
            assert!(f.registry.release(&input.lease_id, input.token));
            drain(&mut f.registry);
        },
        |f, input| {
            let now = f.tick();
            let lease = f
                .registry
                .acquire(&input.run_id, &input.worker_id, now, None)
                .expect("tokens up to MAX_TOKEN")
                .expect("a released run is free");
            f.tokens[input.index] = lease.fencing_token;
            drain(&mut f.registry);
        },
    );

    // A run's lease read back: found by run, both ids copied out.
    chunked(
        &mut group,
        &mut fixture,
        "get/live",
        |f, _, input| {
            let i = f.next_lease();
            run_id(i, &mut input.run_id);
        },
        |f, input| {
            let now = f.tick();
            let got = f.registry.get(&input.run_id, now);
            assert!(matches!(got, Some((_, false))));
            black_box(got);
            drain(&mut f.registry);
        },
        nothing,
    );

    group.finish();
    if let Some(fixture) = &fixture {
        assert_eq!(fixture.registry.len(), LEASES);
        assert_eq!(fixture.registry.expired_count(), 0);
    }
}

/// A lease-table slot as `src/registry/table.rs` lays it out: 56 bytes,
/// ids inline, the token beside them.
#[allow(dead_code)]
struct Row {
    run_len: u8,
    ids: [u8; 23],
    token: u64,
    rest: [u64; 3],
}

impl Row {
    fn run_id(&self) -> &[u8] {
        &self.ids[..usize::from(self.run_len)]
    }
}

/// Writes `run:{i:06}` without the formatting machinery, so that producing
/// the key costs little next to what is measured.
fn fast_run_id(i: usize, out: &mut [u8; 10]) {
    out[..4].copy_from_slice(b"run:");
    let mut rest = i;
    for digit in out[4..].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
}

/// A million rows with their run and token indexes, hashed by `S`, built
/// as the lease table builds them.
struct Tables<S> {
    hasher: S,
    rows: Vec<Row>,
    by_run: HashTable<u32>,
    by_token: HashTable<u32>,
}

impl<S: BuildHasher> Tables<S> {
    fn new(hasher: S) -> Tables<S> {
        let mut rows = Vec::with_capacity(LEASES);
        for i in 0..LEASES {
            let mut ids = [0; 23];
            let mut id = [0; 10];
            fast_run_id(i, &mut id);
            ids[..10].copy_from_slice(&id);
            rows.push(Row {
                run_len: 10,
                ids,
                // Tokens are issued in order, as the registry issues them.
                token: i as u64 + 1,
                rest: [0; 3],
            });
        }
        let mut by_run = HashTable::new();
        let mut by_token = HashTable::new();
        for slot in 0..LEASES as u32 {
            let row = &rows[slot as usize];
            by_run.insert_unique(hasher.hash_one(row.run_id()), slot, |&s| {
                hasher.hash_one(rows[s as usize].run_id())
            });
            by_token.insert_unique(hasher.hash_one(row.token), slot, |&s| {
                hasher.hash_one(rows[s as usize].token)
            });
        }
        Tables {
            hasher,
            rows,
            by_run,
            by_token,
        }
    }

    fn find_run(&self, run_id: &[u8]) -> Option<u32> {
        let hash = self.hasher.hash_one(run_id);
        let rows = &self.rows;
        self.by_run
            .find(hash, |&slot| rows[slot as usize].run_id() == run_id)
            .copied()
    }

    fn find_token(&self, token: u64) -> Option<u32> {
        let hash = self.hasher.hash_one(token);
        let rows = &self.rows;
        self.by_token
            .find(hash, |&slot| rows[slot as usize].token == token)
            .copied()
    }
}

/// Hashing alone, and lookups in a million-entry `HashTable<u32>` keyed as
/// the lease table keys its run and token indexes, with hasher `S`.
fn one_hasher<S: BuildHasher>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    hasher: impl Fn() -> S,
) {
    let key: &[u8] = b"run:123456";
    let h = hasher();
    group.bench_function(format!("hash_run_id/{name}"), |b| {
        b.iter(|| h.hash_one(black_box(key)))
    });
    group.bench_function(format!("hash_token/{name}"), |b| {
        b.iter(|| h.hash_one(black_box(1_234_567_u64)))
    });

    let mut tables: Option<Tables<S>> = None;
    group.bench_function(format!("lookup_run_id/{name}"), |b| {
        let tables = tables.get_or_insert_with(|| Tables::new(hasher()));
        let mut cursor = 0;
        let mut id = [0; 10];
        b.iter(|| {
            let i = cursor * STRIDE % LEASES;
            cursor = (cursor + 1) % LEASES;
            fast_run_id(i, &mut id);
            let found = tables.find_run(&id);
            assert_eq!(found, Some(i as u32));
            found
        })
    });
    group.bench_function(format!("lookup_token/{name}"), |b| {
        let tables = tables.get_or_insert_with(|| Tables::new(hasher()));
        let mut cursor = 0;
        b.iter(|| {
            let i = cursor * STRIDE % LEASES;
            cursor = (cursor + 1) % LEASES;
            let found = tables.find_token(i as u64 + 1);
            assert_eq!(found, Some(i as u32));
            found
        })
    });
}

fn hasher_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("hasher");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1500));

    // The cost of producing the key in the run-id lookups, to subtract.
    group.bench_function("make_run_id", |b| {
        let mut cursor = 0;
        let mut id = [0; 10];
        b.iter(|| {
            let i = cursor * STRIDE % LEASES;
            cursor = (cursor + 1) % LEASES;
            fast_run_id(i, &mut id);
            black_box(id)
        })
    });

    // What table.rs uses: hashbrown's default, foldhash's fast variant.
    one_hasher(
        &mut group,
        "hashbrown_default",
        hashbrown::DefaultHashBuilder::default,
    );
    one_hasher(
        &mut group,
        "foldhash_quality",
        foldhash::quality::RandomState::default,
    );
    one_hasher(&mut group, "std_siphash", std::hash::RandomState::new);
    one_hasher(&mut group, "ahash", ahash::RandomState::new);
    one_hasher(&mut group, "rustc_hash_fx", || rustc_hash::FxBuildHasher);
    group.finish();
}

criterion_group!(benches, registry_benches, hasher_benches);
criterion_main!(benches);
