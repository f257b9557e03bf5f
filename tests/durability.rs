//! Durability of the append-only log, against the real binary: crashes
//! under load in every fsync mode, registry time across restarts, every
//! prefix of a log, damaged and torn logs, rewrites while serving and
//! crashes during them, automatic rewrites, `appendonly no`, and write
//! errors.
//!
//! Leases are read with `LEASE.GET run 0`: a lagging `now`, so the read is
//! at registry time and moves nothing.

mod common;

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::binary::{Server, data_dir, wait_for_rewrites, wait_until};
use common::client::{Client, Lease, error_line, info_map, info_number, lease_reply};
use redis::Value;

/// The first bytes of every log file (see `src/aof/format.rs`).
const HEADER: &[u8] = b"LEASEDLOG\x001\n";
const LOG: &str = "leased.aof";
/// A TTL no test outlives, so nothing expires under load.
const LONG_TTL: &str = "100000";

fn start(dir: &Path, args: &[&str]) -> Server {
    Server::start_in(dir, args).unwrap_or_else(|output| panic!("{output}"))
}

/// `LEASE.GET run 0` for many runs, in pipelines.
fn get_all(con: &mut Client, runs: &[Vec<u8>]) -> Vec<Option<Lease>> {
    let mut state = Vec::with_capacity(runs.len());
    for chunk in runs.chunks(10_000) {
        let mut pipe = redis::pipe();
        for run in chunk {
            pipe.cmd("LEASE.GET").arg(&run[..]).arg(0);
        }
        let replies: Vec<Value> = pipe.query(con).expect("pipelined LEASE.GET");
        state.extend(replies.iter().map(|reply| match reply {
            Value::Nil => None,
            reply => Some(lease_reply(reply)),
        }));
    }
    state
}

/// Acquires each run with `worker` at `now` in pipelines; every run must
/// be free. Returns the leases in order.
fn acquire_all(con: &mut Client, runs: &[Vec<u8>], now: f64) -> Vec<Lease> {
    let mut leases = Vec::with_capacity(runs.len());
    for chunk in runs.chunks(10_000) {
        let mut pipe = redis::pipe();
        for run in chunk {
            pipe.cmd("LEASE.ACQUIRE").arg(&run[..]).arg("w").arg(now);
        }
        let replies: Vec<Value> = pipe.query(con).expect("pipelined LEASE.ACQUIRE");
        leases.extend(replies.iter().map(lease_reply));
    }
    leases
}

/// Heartbeats each lease at `now` in pipelines; each must still be held.
fn heartbeat_all(con: &mut Client, leases: &[Lease], now: f64) {
    for chunk in leases.chunks(10_000) {
        let mut pipe = redis::pipe();
        for lease in chunk {
            pipe.cmd("LEASE.HEARTBEAT")
                .arg(&lease.lease_id[..])
                .arg(lease.fencing_token)
                .arg(now);
        }
        let replies: Vec<i64> = pipe.query(con).expect("pipelined LEASE.HEARTBEAT");
        assert!(replies.iter().all(|&r| r == 1), "a heartbeat failed");
    }
}

/// Acquires a run nobody used, at a lagging `now` with a TTL of 1, and
/// returns its token and registry time as the server saw it (`expires_at`
/// is `max(registry time, 0) + 1`).
fn probe(con: &mut Client, run: &str) -> (i64, f64) {
    let lease = con.acquire(run, "probe", Some(0.0), Some(1.0));
    let lease = lease.expect("a run nobody used");
    (lease.fencing_token, lease.expires_at - 1.0)
}

/// Whether an error means the server went away (as opposed to replying).
fn gone(error: &redis::RedisError) -> bool {
    error.is_io_error() || error.is_connection_dropped()
}

/// Files in `dir` whose names start with `prefix`.
fn files_starting(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .expect("read dir")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with(prefix))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// 1. kill -9 under load, in every fsync mode
// ---------------------------------------------------------------------------

/// What one client sent and which replies it got.
#[derive(Default)]
struct History {
    /// Run i of this client and the lease its acquire returned.
    acquired: Vec<(String, Lease)>,
    /// Runs and `now`s of heartbeats that returned 1.
    heartbeats: Vec<(String, f64)>,
    /// Runs whose release returned 1.
    released: Vec<String>,
    /// The run of the command sent when the server died, if any, and
    /// whether that command was a release.
    in_flight: Option<(String, bool)>,
}

/// One client: acquires `{tag}-{t}-{i}` for i = 0, 1, ..., heartbeats
/// some of its leases and releases others, until the server goes away.
fn storm_client(
    mut con: redis::Connection,
    tag: String,
    t: usize,
    ops: Arc<AtomicUsize>,
    failed: Arc<AtomicBool>,
) -> History {
    let mut history = History::default();
    let worker = format!("w{t}");
    let fail = |what: String| -> ! {
        failed.store(true, Ordering::Relaxed);
        panic!("{what}");
    };
    for i in 0.. {
        let run = format!("{tag}-{t}-{i}");
        let reply = redis::cmd("LEASE.ACQUIRE")
            .arg(&run)
            .arg(&worker)
            .arg(1000)
            .query::<Value>(&mut con);
        match reply {
            Ok(Value::Nil) => fail(format!("{run} was held")),
            Ok(reply) => history.acquired.push((run, lease_reply(&reply))),
            Err(error) if gone(&error) => {
                history.in_flight = Some((run, false));
                break;
            }
            Err(error) => fail(format!("acquire {run}: {error:?}")),
        }
        ops.fetch_add(1, Ordering::Relaxed);
        if i % 3 == 2 {
            let (run, lease) = history.acquired[i - 1].clone();
            let now = 1000.0 + i as f64;
            let reply = redis::cmd("LEASE.HEARTBEAT")
                .arg(&lease.lease_id[..])
                .arg(lease.fencing_token)
                .arg(now)
                .query::<i64>(&mut con);
            match reply {
                Ok(1) => history.heartbeats.push((run, now)),
                Ok(other) => fail(format!("heartbeat of {run} returned {other}")),
                Err(error) if gone(&error) => {
                    history.in_flight = Some((run, false));
                    break;
                }
                Err(error) => fail(format!("heartbeat {run}: {error:?}")),
            }
            ops.fetch_add(1, Ordering::Relaxed);
        }
        if i % 4 == 3 {
            let (run, lease) = history.acquired[i - 2].clone();
            let reply = redis::cmd("LEASE.RELEASE")
                .arg(&lease.lease_id[..])
                .arg(lease.fencing_token)
                .query::<i64>(&mut con);
            match reply {
                Ok(1) => history.released.push(run),
                Ok(other) => fail(format!("release of {run} returned {other}")),
                Err(error) if gone(&error) => {
                    history.in_flight = Some((run, true));
                    break;
                }
                Err(error) => fail(format!("release {run}: {error:?}")),
            }
            ops.fetch_add(1, Ordering::Relaxed);
        }
    }
    history
}

fn kill_under_load(fsync: &str) {
    const CLIENTS: usize = 4;
    let (_temp, dir) = data_dir();
    let args = ["--appendfsync", fsync, "--lease-ttl", LONG_TTL];
    let ttl: f64 = LONG_TTL.parse().unwrap();
    let mut server = start(&dir, &args);
    let ops = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let con = server.connect();
            let (tag, ops, failed) = (fsync.to_string(), ops.clone(), failed.clone());
            std::thread::spawn(move || storm_client(con, tag, t, ops, failed))
        })
        .collect();
    wait_until(Duration::from_secs(20), || {
        let done = ops.load(Ordering::Relaxed);
        if done >= 3_000 || failed.load(Ordering::Relaxed) {
            return Ok(());
        }
        Err(format!("clients too slow: {done} commands"))
    });
    server.kill9();
    let histories: Vec<History> = clients
        .into_iter()
        .map(|client| client.join().expect("client thread"))
        .collect();

    let server = start(&dir, &args);
    let mut con = server.typed();
    let seen_max = histories
        .iter()
        .flat_map(|h| h.acquired.iter().map(|(_, lease)| lease.fencing_token))
        .max()
        .expect("some acquires succeeded");
    let (next, _) = probe(&mut con, "after-the-crash");
    assert!(
        next > seen_max,
        "{fsync}: token {next} after the crash, a client saw {seen_max}"
    );

    // Every run any client used, with what it was told about it.
    let mut runs: Vec<Vec<u8>> = Vec::new();
    let mut in_flight = HashMap::new();
    for history in &histories {
        runs.extend(
            history
                .acquired
                .iter()
                .map(|(run, _)| run.clone().into_bytes()),
        );
        if let Some((run, release)) = &history.in_flight {
            in_flight.insert(run.clone(), *release);
            if !history.acquired.iter().any(|(r, _)| r == run) {
                runs.push(run.clone().into_bytes());
            }
        }
    }
    let state = get_all(&mut con, &runs);
    let present = state.iter().filter(|lease| lease.is_some()).count();
    // The probe holds a lease too.
    assert_eq!(
        con.dbsize(),
        present as i64 + 1,
        "{fsync}: DBSIZE disagrees with LEASE.GET of every run used"
    );
    let mut tokens = HashSet::new();
    for lease in state.iter().flatten() {
        assert!(
            tokens.insert(lease.fencing_token),
            "{fsync}: two leases hold token {}",
            lease.fencing_token
        );
    }
    let by_run: HashMap<&[u8], &Option<Lease>> =
        runs.iter().map(|r| &r[..]).zip(state.iter()).collect();
    let mut checked = 0;
    for history in &histories {
        let released: HashSet<&String> = history.released.iter().collect();
        let mut least_expiry: HashMap<&String, f64> = HashMap::new();
        for (run, now) in &history.heartbeats {
            least_expiry.insert(run, now + ttl);
        }
        for (run, acquired) in &history.acquired {
            let after = by_run[run.as_bytes()];
            if in_flight.get(run) == Some(&true) {
                // Its release was in flight: either outcome.
                if let Some(lease) = after {
                    assert_eq!(lease.fencing_token, acquired.fencing_token, "{run}");
                }
                continue;
            }
            // The server writes each round to the log before it answers, in
            // every mode; a killed process leaves what it wrote in the page
            // cache, so every reply a client got is in the log. (`everysec`
            // and `no` differ only when the machine itself goes down.)
            if released.contains(run) {
                assert_eq!(after, &None, "{fsync}: {run} was released, then came back");
                continue;
            }
            let lease = after
                .as_ref()
                .unwrap_or_else(|| panic!("{fsync}: acquired {run} is gone after the crash"));
            assert_eq!(lease.lease_id, acquired.lease_id, "{fsync}: {run}");
            assert_eq!(lease.worker_id, acquired.worker_id, "{fsync}: {run}");
            assert_eq!(
                lease.fencing_token, acquired.fencing_token,
                "{fsync}: {run}"
            );
            let least = least_expiry
                .get(run)
                .copied()
                .unwrap_or(acquired.expires_at)
                .max(acquired.expires_at);
            assert!(
                lease.expires_at >= least,
                "{fsync}: {run} expires at {} after the crash, a heartbeat set {least}",
                lease.expires_at
            );
            checked += 1;
        }
    }
    // The in-flight acquires: present or not, but with a token no client saw.
    let seen: HashSet<i64> = histories
        .iter()
        .flat_map(|h| h.acquired.iter().map(|(_, lease)| lease.fencing_token))
        .collect();
    for run in in_flight.keys() {
        if histories
            .iter()
            .any(|h| h.acquired.iter().any(|(r, _)| r == run))
        {
            continue;
        }
        if let Some(lease) = by_run[run.as_bytes()] {
            assert!(
                !seen.contains(&lease.fencing_token),
                "{fsync}: in-flight {run} holds token {}, which another acquire got",
                lease.fencing_token
            );
        }
    }
    assert!(checked > 1000, "{fsync}: only {checked} leases checked");
}

#[test]
fn kill_under_load_with_appendfsync_always() {
    kill_under_load("always");
}

#[test]
fn kill_under_load_with_appendfsync_everysec() {
    kill_under_load("everysec");
}

#[test]
fn kill_under_load_with_appendfsync_no() {
    kill_under_load("no");
}

// ---------------------------------------------------------------------------
// 2. Registry time across restarts
// ---------------------------------------------------------------------------

#[test]
fn registry_time_resumes_after_a_clean_restart() {
    let (_temp, dir) = data_dir();
    let args = ["--lease-ttl", "10"];
    let mut server = start(&dir, &args);
    let mut con = server.typed();
    con.acquire("early", "w", Some(1000.0), None).expect("free");
    server.stop();
    let server = start(&dir, &args);
    let mut con = server.typed();
    let reply: Value = redis::cmd("LEASE.ACQUIRE")
        .arg("x")
        .arg("w")
        .arg(5)
        .query(&mut con)
        .unwrap();
    assert_eq!(lease_reply(&reply).expires_at, 1010.0);
}

#[test]
fn registry_time_resumes_after_a_crash_with_always() {
    let (_temp, dir) = data_dir();
    let args = ["--lease-ttl", "10", "--appendfsync", "always"];
    let mut server = start(&dir, &args);
    let mut con = server.typed();
    con.acquire("early", "w", Some(1000.0), None).expect("free");
    // A command that changes no lease still moves registry time.
    let valid: i64 = redis::cmd("LEASE.VALIDATE")
        .arg("early")
        .arg("early:w:1")
        .arg(1)
        .arg(1500)
        .query(&mut con)
        .unwrap();
    assert_eq!(valid, 0, "expired at 1500");
    server.kill9();
    let server = start(&dir, &args);
    let mut con = server.typed();
    let reply: Value = redis::cmd("LEASE.ACQUIRE")
        .arg("x")
        .arg("w")
        .arg(5)
        .query(&mut con)
        .unwrap();
    assert_eq!(lease_reply(&reply).expires_at, 1510.0);
    // The lease from before is there, and expired at registry time.
    let early = con.get(b"early", Some(0.0)).expect("early survived");
    assert_eq!((early.fencing_token, early.expired), (1, Some(1)));
}

// ---------------------------------------------------------------------------
// A small log with a known history, for 3, 4 and 5
// ---------------------------------------------------------------------------

/// The runs the small log's commands touch.
const SMALL_RUNS: [&[u8]; 5] = [b"a", b"b:c", b"", b"x", b"a:w1"];

/// One command of the small log and the reply it must get.
struct Step {
    words: &'static [&'static [u8]],
    /// The token of the lease it issues, or the integer it returns, or
    /// None for a null reply.
    expect: Option<i64>,
    now: Option<f64>,
}

const fn step(words: &'static [&'static [u8]], expect: Option<i64>, now: Option<f64>) -> Step {
    Step { words, expect, now }
}

/// Acquires (ids with `:` and empty ones, a TTL option, a lagging
/// acquire), heartbeats, releases and a takeover, with explicit `now`s.
const SMALL_STEPS: &[Step] = &[
    step(
        &[b"LEASE.ACQUIRE", b"a", b"w1", b"1000"],
        Some(1),
        Some(1000.0),
    ),
    step(
        &[b"LEASE.ACQUIRE", b"b:c", b"d:e", b"1001"],
        Some(2),
        Some(1001.0),
    ),
    step(
        &[b"LEASE.ACQUIRE", b"", b"", b"1002", b"TTL", b"50"],
        Some(3),
        Some(1002.0),
    ),
    step(
        &[b"LEASE.ACQUIRE", b"a", b"w2", b"1003"],
        None,
        Some(1003.0),
    ),
    step(
        &[b"LEASE.HEARTBEAT", b"a:w1:1", b"1", b"1004"],
        Some(1),
        Some(1004.0),
    ),
    step(
        &[b"LEASE.HEARTBEAT", b"::3", b"3", b"1005"],
        Some(1),
        Some(1005.0),
    ),
    step(
        &[b"LEASE.ACQUIRE", b"x", b"w", b"1006", b"TTL", b"2.5"],
        Some(4),
        Some(1006.0),
    ),
    step(&[b"LEASE.RELEASE", b"b:c:d:e:2", b"2"], Some(1), None),
    // A takeover: x expired at 1008.5.
    step(
        &[b"LEASE.ACQUIRE", b"x", b"w9", b"1009"],
        Some(5),
        Some(1009.0),
    ),
    step(
        &[b"LEASE.HEARTBEAT", b"x:w:4", b"4", b"1010"],
        Some(0),
        Some(1010.0),
    ),
    step(
        &[b"LEASE.ACQUIRE", b"b:c", b"w", b"1011"],
        Some(6),
        Some(1011.0),
    ),
    step(&[b"LEASE.RELEASE", b"a:w1:1", b"1"], Some(1), None),
    step(
        &[b"LEASE.ACQUIRE", b"a:w1", b"1", b"1012"],
        Some(7),
        Some(1012.0),
    ),
    step(
        &[b"LEASE.HEARTBEAT", b"b:c:w:6", b"6", b"1013"],
        Some(1),
        Some(1013.0),
    ),
    // Run data: set by holders (SetData, then Time), refused for a stale
    // token, and orphaned by a release (one Release record).
    step(
        &[b"LEASE.SETDATA", b"b:c:w:6", b"6", b"cp-b", b"1014"],
        Some(1),
        Some(1014.0),
    ),
    step(
        &[b"LEASE.SETDATA", b"x:w:4", b"4", b"stale", b"1014"],
        Some(0),
        Some(1014.0),
    ),
    step(
        &[b"LEASE.SETDATA", b"::3", b"3", b"cp-empty", b"1015"],
        Some(1),
        Some(1015.0),
    ),
    step(
        &[b"LEASE.SETDATA", b"x:w9:5", b"5", b"cp-x", b"1016"],
        Some(1),
        Some(1016.0),
    ),
    step(
        &[b"LEASE.SETDATA", b"x:w9:5", b"5", b"cp-x2", b"1017"],
        Some(1),
        Some(1017.0),
    ),
    step(&[b"LEASE.RELEASE", b"::3", b"3"], Some(1), None),
    // Lagging: it moves no time, so its record is the log's last.
    step(&[b"LEASE.ACQUIRE", b"late", b"w", b"1"], Some(8), None),
];

/// The registry after some of the small log's commands.
#[derive(Clone, Debug, PartialEq)]
struct Snapshot {
    /// LEASE.GET of each of [`SMALL_RUNS`] and `late`, without `expired`.
    leases: Vec<Option<Lease>>,
    /// Registry time as a probe sees it: `max(time, 0)`.
    time: f64,
    /// The last token issued.
    last_token: i64,
    /// LEASE.GETDATA of the same runs: value and token.
    data: Vec<Option<(Vec<u8>, i64)>>,
    /// LEASE.HISTORY of the same runs, as replied.
    history: Vec<Value>,
}

struct SmallLog {
    /// The log after a clean stop.
    bytes: Vec<u8>,
    ceiling: Vec<u8>,
    lock: Vec<u8>,
    /// `snapshots[k]`: after the first k commands.
    snapshots: Vec<Snapshot>,
    /// `ends[k]`: the log's length after the first k commands.
    ends: Vec<usize>,
}

fn small_runs() -> Vec<Vec<u8>> {
    let mut runs: Vec<Vec<u8>> = SMALL_RUNS.iter().map(|r| r.to_vec()).collect();
    runs.push(b"late".to_vec());
    runs
}

/// LEASE.GETDATA of each of the small log's runs: value and token. The
/// small log's servers keep data forever (`lease-retention 0`), so what
/// a read at the server's clock sees does not depend on when it runs.
fn small_data(con: &mut Client) -> Vec<Option<(Vec<u8>, i64)>> {
    small_runs()
        .iter()
        .map(|run| {
            let reply: Value = redis::cmd("LEASE.GETDATA")
                .arg(&run[..])
                .query(con)
                .expect("LEASE.GETDATA");
            match reply {
                Value::Nil => None,
                Value::Array(items) => match &items[..] {
                    [_, Value::BulkString(value), _, Value::Int(token), _, _] => {
                        Some((value.clone(), *token))
                    }
                    other => panic!("GETDATA replied {other:?}"),
                },
                other => panic!("GETDATA replied {other:?}"),
            }
        })
        .collect()
}

/// LEASE.HISTORY of each of the small log's runs. At the server's clock
/// every lease of the small log (explicit `now`s near 1000) has expired,
/// so the replies do not depend on when they are read either.
fn small_history(con: &mut Client) -> Vec<Value> {
    small_runs()
        .iter()
        .map(|run| {
            redis::cmd("LEASE.HISTORY")
                .arg(&run[..])
                .query(con)
                .expect("LEASE.HISTORY")
        })
        .collect()
}

fn small_state(con: &mut Client) -> Vec<Option<Lease>> {
    get_all(con, &small_runs())
        .into_iter()
        .map(|lease| {
            lease.map(|mut lease| {
                lease.expired = None;
                lease
            })
        })
        .collect()
}

/// Runs [`SMALL_STEPS`] on a new server, recording the state and the
/// log's length after each, and stops it cleanly.
fn build_small_log() -> SmallLog {
    let (_temp, dir) = data_dir();
    let mut server = start(&dir, &["--appendfsync", "always", "--lease-retention", "0"]);
    let mut con = server.typed();
    let log_len = || fs::metadata(dir.join(LOG)).expect("log exists").len() as usize;
    let mut snapshots = vec![Snapshot {
        leases: vec![None; SMALL_RUNS.len() + 1],
        time: 0.0,
        last_token: 0,
        data: vec![None; SMALL_RUNS.len() + 1],
        history: vec![Value::Array(Vec::new()); SMALL_RUNS.len() + 1],
    }];
    let mut ends = vec![log_len()];
    let (mut time, mut last_token) = (0.0f64, 0);
    for step in SMALL_STEPS {
        let mut cmd = redis::cmd(std::str::from_utf8(step.words[0]).unwrap());
        for word in &step.words[1..] {
            cmd.arg(*word);
        }
        let reply: Value = cmd.query(&mut con).expect("small log command");
        let got = match &reply {
            Value::Nil => None,
            Value::Int(n) => Some(*n),
            reply => Some(lease_reply(reply).fencing_token),
        };
        assert_eq!(got, step.expect, "{:?} replied {reply:?}", step.words);
        if let (Some(token), Value::Array(_)) = (got, &reply) {
            last_token = token;
        }
        time = time.max(step.now.unwrap_or(0.0));
        // The log is written before the reply: its length is final here.
        ends.push(log_len());
        snapshots.push(Snapshot {
            leases: small_state(&mut con),
            time,
            last_token,
            data: small_data(&mut con),
            history: small_history(&mut con),
        });
    }
    server.stop();
    let bytes = fs::read(dir.join(LOG)).unwrap();
    assert_eq!(
        bytes.len(),
        *ends.last().unwrap(),
        "a clean stop added records"
    );
    SmallLog {
        bytes,
        ceiling: fs::read(dir.join("token-ceiling")).unwrap(),
        lock: fs::read(dir.join("leased.lock")).unwrap(),
        snapshots,
        ends,
    }
}

/// A record of the log: where it starts and ends, its type and, for the
/// types that carry one, its fencing token.
#[derive(Clone, Copy, Debug)]
struct Frame {
    start: usize,
    end: usize,
    kind: u8,
    token: Option<u64>,
}

/// Splits a log into its records, as `src/aof/format.rs` lays them out.
fn frames(log: &[u8]) -> Vec<Frame> {
    assert!(log.starts_with(HEADER), "not a log");
    let u32_at = |at: usize| u32::from_le_bytes(log[at..at + 4].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(log[at..at + 8].try_into().unwrap());
    let mut frames = Vec::new();
    let mut at = HEADER.len();
    while at < log.len() {
        let len = u32_at(at);
        let payload = at + 8;
        let kind = log[payload];
        let token = match kind {
            // Put (without and with its tenure).
            1 | 14 => {
                let run_len = u32_at(payload + 1);
                let worker_len = u32_at(payload + 5 + run_len);
                Some(u64_at(payload + 9 + run_len + worker_len))
            }
            // Extend, Remove, Beat, Release.
            2 | 3 | 10 | 11 => Some(u64_at(payload + 1)),
            _ => None,
        };
        frames.push(Frame {
            start: at,
            end: payload + len,
            kind,
            token,
        });
        at = payload + len;
    }
    assert_eq!(at, log.len(), "the last record runs past the end");
    frames
}

impl SmallLog {
    /// The states a server may show after loading the records that end at
    /// or before `good` (a record boundary): those of the commands whose
    /// records are all in, and if it cuts one command's records in two,
    /// that command's first record applied or its second one.
    fn expected_at(&self, good: usize) -> Vec<Snapshot> {
        // A log cut inside its header holds no records.
        let good = good.max(HEADER.len());
        let k = self.ends.iter().rposition(|&end| end <= good).unwrap();
        if self.ends[k] == good {
            return vec![self.snapshots[k].clone()];
        }
        let (before, after) = (&self.snapshots[k], &self.snapshots[k + 1]);
        vec![
            Snapshot {
                time: before.time,
                ..after.clone()
            },
            Snapshot {
                leases: before.leases.clone(),
                last_token: before.last_token,
                time: after.time,
                data: before.data.clone(),
                history: before.history.clone(),
            },
        ]
    }

    /// The largest record boundary at or below `len`; 0 for a file shorter
    /// than the header.
    fn good_prefix(&self, frames: &[Frame], len: usize) -> usize {
        if len < HEADER.len() {
            return 0;
        }
        frames
            .iter()
            .map(|f| f.end)
            .filter(|&end| end <= len)
            .max()
            .unwrap_or(HEADER.len())
    }

    /// Writes a data directory holding `log` and, if `with_ceiling`, the
    /// token ceiling and lock file the original run left.
    fn write_dir(&self, dir: &Path, log: &[u8], with_ceiling: bool) {
        fs::create_dir_all(dir).unwrap();
        fs::write(dir.join(LOG), log).unwrap();
        if with_ceiling {
            fs::write(dir.join("token-ceiling"), &self.ceiling).unwrap();
            fs::write(dir.join("leased.lock"), &self.lock).unwrap();
        }
    }
}

/// Starts a server on `dir`, whose log was cut at `len` bytes, and checks
/// its state against the small log's history. The server is killed
/// afterwards.
fn check_prefix(
    small: &SmallLog,
    frames: &[Frame],
    len: usize,
    with_ceiling: bool,
) -> Result<(), String> {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("data");
    small.write_dir(&dir, &small.bytes[..len], with_ceiling);
    let server = Server::start_in(&dir, &["--lease-retention", "0"])
        .map_err(|output| format!("refused: {output}"))?;
    let good = small.good_prefix(frames, len);
    let log = server.log();
    let is_boundary = len == 0 || len == good;
    let warned = log.contains("incomplete record");
    if is_boundary && warned {
        return Err(format!("warned about a cut at a record boundary:\n{log}"));
    }
    if !is_boundary && !log.contains(&format!("incomplete record at byte offset {good} ")) {
        return Err(format!("no warning naming offset {good}:\n{log}"));
    }
    let on_disk = fs::metadata(dir.join(LOG)).unwrap().len() as usize;
    if on_disk != good.max(HEADER.len()) {
        return Err(format!(
            "the log is {on_disk} bytes after the start, good part {good}"
        ));
    }
    let mut con = server.typed();
    let leases = small_state(&mut con);
    let size = con.dbsize();
    let (token, time) = probe(&mut con, "probe");
    let observed = Snapshot {
        leases,
        time,
        last_token: 0,
        data: small_data(&mut con),
        history: small_history(&mut con),
    };
    let expected = small.expected_at(good);
    let matching: Vec<&Snapshot> = expected
        .iter()
        .filter(|s| {
            s.leases == observed.leases
                && s.time == observed.time
                && s.data == observed.data
                && s.history == observed.history
        })
        .collect();
    let Some(snapshot) = matching.first() else {
        return Err(format!(
            "state after loading {good} good bytes:\n{observed:?}\nexpected one of\n{expected:?}"
        ));
    };
    let held = snapshot.leases.iter().flatten().count() as i64;
    if size != held {
        return Err(format!("DBSIZE {size}, {held} leases"));
    }
    // With the ceiling every token ever issued is below the next one; with
    // the log alone, every token the log holds.
    let floor = if with_ceiling {
        small.snapshots.last().unwrap().last_token
    } else {
        snapshot.last_token
    };
    if token <= floor {
        return Err(format!("next token {token}, but {floor} was issued"));
    }
    Ok(())
}

/// Checks every prefix length of the small log, on a few threads.
fn check_every_prefix(with_ceiling: bool) {
    let small = build_small_log();
    let frames = frames(&small.bytes);
    let kinds: HashSet<u8> = frames.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        HashSet::from([4, 7, 10, 11, 14]),
        "Time, SetData, Beat, Release, Put"
    );
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| {
                loop {
                    let len = next.fetch_add(1, Ordering::Relaxed);
                    if len > small.bytes.len() {
                        break;
                    }
                    if let Err(failure) = check_prefix(&small, &frames, len, with_ceiling) {
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("prefix {len}: {failure}"));
                    }
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort();
    assert!(
        failures.is_empty(),
        "{} of {} prefixes failed; first ones:\n{}",
        failures.len(),
        small.bytes.len() + 1,
        failures[..failures.len().min(3)].join("\n")
    );
}

// ---------------------------------------------------------------------------
// 3. Every prefix of a small log
// ---------------------------------------------------------------------------

/// A crash cut the log; the token ceiling and lock file are as it left them.
#[test]
fn every_prefix_of_a_log_loads_with_the_ceiling_beside_it() {
    check_every_prefix(true);
}

/// The log alone, moved into a new directory.
#[test]
fn every_prefix_of_a_log_loads_alone_in_a_new_dir() {
    check_every_prefix(false);
}

// ---------------------------------------------------------------------------
// 4. Damage in the middle of a log
// ---------------------------------------------------------------------------

/// Damages the record that starts at `frame` with `damage`, checks that the
/// server refuses it and names the offset and the directive, then loads
/// the good prefix with `aof-load-good-prefix yes`.
fn damaged_log_is_refused(small: &SmallLog, frame: Frame, damage: impl Fn(&mut Vec<u8>)) {
    let (_temp, dir) = data_dir();
    let mut bytes = small.bytes.clone();
    damage(&mut bytes);
    assert_ne!(bytes, small.bytes);
    small.write_dir(&dir, &bytes, true);
    let dir_arg = dir.to_str().unwrap();
    let refused = common::binary::run_to_exit(&["--port", "0", "--dir", dir_arg]);
    let output = refused.output();
    assert!(
        !refused.status.success(),
        "started on a corrupt log:\n{output}"
    );
    assert!(
        output.contains(&format!("corrupt at byte offset {} ", frame.start)),
        "no offset {} in:\n{output}",
        frame.start
    );
    assert!(output.contains("aof-load-good-prefix"), "{output}");
    assert_eq!(
        fs::read(dir.join(LOG)).unwrap(),
        bytes,
        "a refused start changed the log"
    );

    let mut server = start(&dir, &["--aof-load-good-prefix", "yes"]);
    let log = server.log();
    assert!(
        log.contains(&format!("corrupt at byte offset {} ", frame.start)),
        "{log}"
    );
    assert_eq!(
        fs::read(dir.join(LOG)).unwrap(),
        &bytes[..frame.start],
        "the log should be cut to its good prefix"
    );
    let copies = files_starting(&dir, "leased.aof.corrupt-");
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(
        fs::read(&copies[0]).unwrap(),
        bytes,
        "the copy is the whole file"
    );
    let mut con = server.typed();
    let expected = small.expected_at(frame.start);
    assert_eq!(expected.len(), 1, "damage at a command boundary");
    let state = small_state(&mut con);
    assert_eq!(state, expected[0].leases);
    server.stop();

    // The log is clean now: no option needed, nothing to warn about.
    let server = start(&dir, &[]);
    let log = server.log();
    assert!(
        !log.contains("corrupt") && !log.contains("incomplete"),
        "{log}"
    );
    let mut con = server.typed();
    assert_eq!(small_state(&mut con), expected[0].leases);
    let (token, _) = probe(&mut con, "probe");
    assert!(token > small.snapshots.last().unwrap().last_token);
}

/// The Put of the takeover (token 5): a record in the middle.
fn takeover_put(small: &SmallLog) -> Frame {
    let frames = frames(&small.bytes);
    let frame = *frames
        .iter()
        .find(|f| f.kind == 14 && f.token == Some(5))
        .expect("the takeover's Put");
    assert!(frame.end < small.bytes.len() - 100, "not near the end");
    frame
}

#[test]
fn a_flipped_byte_in_a_middle_record_stops_the_start() {
    let small = build_small_log();
    let frame = takeover_put(&small);
    // A byte of the worker id, inside the payload: the checksum fails.
    damaged_log_is_refused(&small, frame, |bytes| bytes[frame.start + 8 + 11] ^= 0x20);
}

#[test]
fn a_damaged_length_in_a_middle_record_stops_the_start() {
    let small = build_small_log();
    let frame = takeover_put(&small);
    // One more byte: the record takes the next one's first byte.
    damaged_log_is_refused(&small, frame, |bytes| bytes[frame.start] += 1);
}

#[test]
fn a_length_past_the_end_in_a_middle_record_is_not_a_torn_tail() {
    let small = build_small_log();
    let frame = takeover_put(&small);
    // As if the record ran past the end of the file: it cannot be a torn
    // append, because a Put with these ids has another length.
    damaged_log_is_refused(&small, frame, |bytes| bytes[frame.start + 2] = 0x10);
}

// ---------------------------------------------------------------------------
// 5. A torn final record
// ---------------------------------------------------------------------------

#[test]
fn a_torn_final_record_is_cut_with_a_warning_and_the_rest_loads() {
    let small = build_small_log();
    let frames = frames(&small.bytes);
    let last = *frames.last().unwrap();
    // The lagging acquire of `late` (token 8) wrote the last record alone.
    assert_eq!((last.kind, last.token), (14, Some(8)));
    let (_temp, dir) = data_dir();
    let torn = &small.bytes[..small.bytes.len() - 3];
    small.write_dir(&dir, torn, true);
    let mut server = start(&dir, &[]);
    let log = server.log();
    assert!(
        log.contains(&format!("incomplete record at byte offset {} ", last.start)),
        "{log}"
    );
    assert_eq!(fs::read(dir.join(LOG)).unwrap(), &small.bytes[..last.start]);
    let mut con = server.typed();
    let before_last = &small.snapshots[SMALL_STEPS.len() - 1];
    assert_eq!(small_state(&mut con), before_last.leases);
    assert_eq!(con.get(b"late", Some(0.0)), None);
    // b:c, x and a:w1 hold leases; a and "" were released.
    assert_eq!(con.dbsize(), 3);
    let (token, _) = probe(&mut con, "probe");
    assert!(
        token > 8,
        "token {token} after losing the record of token 8"
    );
    server.stop();
    let server = start(&dir, &[]);
    assert!(!server.log().contains("incomplete"), "{}", server.log());
}

/// Some file systems leave zeros after a crash during an append.
#[test]
fn a_zero_filled_tail_is_cut_with_a_warning_and_every_record_loads() {
    let small = build_small_log();
    let (_temp, dir) = data_dir();
    let mut bytes = small.bytes.clone();
    bytes.resize(bytes.len() + 4096, 0);
    small.write_dir(&dir, &bytes, true);
    let server = start(&dir, &[]);
    let log = server.log();
    let end = small.bytes.len();
    assert!(
        log.contains(&format!("incomplete record at byte offset {end} ")),
        "{log}"
    );
    assert_eq!(fs::read(dir.join(LOG)).unwrap(), small.bytes);
    let mut con = server.typed();
    assert_eq!(
        small_state(&mut con),
        small.snapshots.last().unwrap().leases
    );
}

// ---------------------------------------------------------------------------
// 6. A rewrite while clients change the registry
// ---------------------------------------------------------------------------

/// What a rewrite-time client was told.
#[derive(Default)]
struct Touched {
    /// Its own runs and the leases it acquired.
    acquired: Vec<(Vec<u8>, Lease)>,
    /// Runs whose release returned 1.
    released: Vec<Vec<u8>>,
    /// Preloaded runs it heartbeated.
    heartbeated: Vec<Vec<u8>>,
}

/// Commands of each kind a rewrite-time client sends per round trip.
const BATCH: usize = 20;

/// Acquires runs of its own and releases half of them, heartbeats its
/// share of the preloaded leases and releases some of them, in pipelines,
/// until `stop`. `ops` counts round trips.
fn rewrite_client(
    mut con: redis::Connection,
    t: usize,
    clients: usize,
    preloaded: Arc<Vec<Lease>>,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicUsize>,
) -> Touched {
    let mut touched = Touched::default();
    let mut i = 0;
    for round in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let mut pipe = redis::pipe();
        let runs: Vec<Vec<u8>> = (0..BATCH)
            .map(|k| format!("live-{t}-{round}-{k}").into_bytes())
            .collect();
        for run in &runs {
            pipe.cmd("LEASE.ACQUIRE").arg(&run[..]).arg("w").arg(1000);
        }
        // Every other lease of the last round.
        let mine: Vec<(Vec<u8>, Lease)> = touched
            .acquired
            .iter()
            .rev()
            .take(BATCH)
            .step_by(2)
            .cloned()
            .collect();
        for (_, lease) in &mine {
            pipe.cmd("LEASE.RELEASE")
                .arg(&lease.lease_id[..])
                .arg(lease.fencing_token);
        }
        // Preloaded leases: one in three released, the others heartbeated.
        let old: Vec<(bool, &Lease)> = (0..BATCH)
            .map(|_| {
                i += 1;
                (i % 3 == 0, &preloaded[(i * clients + t) % preloaded.len()])
            })
            .collect();
        for (release, lease) in &old {
            if *release {
                pipe.cmd("LEASE.RELEASE")
                    .arg(&lease.lease_id[..])
                    .arg(lease.fencing_token);
            } else {
                pipe.cmd("LEASE.HEARTBEAT")
                    .arg(&lease.lease_id[..])
                    .arg(lease.fencing_token)
                    .arg(2000 + round);
            }
        }
        let replies: Vec<Value> = pipe.query(&mut con).expect("client pipeline");
        let (acquired, rest) = replies.split_at(BATCH);
        let (released, old_replies) = rest.split_at(mine.len());
        for (run, reply) in runs.into_iter().zip(acquired) {
            touched.acquired.push((run, lease_reply(reply)));
        }
        for ((run, _), reply) in mine.into_iter().zip(released) {
            assert_eq!(
                reply,
                &Value::Int(1),
                "release of {}",
                common::raw::show(&run)
            );
            touched.released.push(run);
        }
        for ((release, lease), reply) in old.into_iter().zip(old_replies) {
            assert_eq!(
                reply,
                &Value::Int(1),
                "{}",
                common::raw::show(&lease.run_id)
            );
            if release {
                touched.released.push(lease.run_id.clone());
            } else {
                touched.heartbeated.push(lease.run_id.clone());
            }
        }
        ops.fetch_add(1, Ordering::Relaxed);
    }
    touched
}

fn wait_for_ops(ops: &AtomicUsize, at_least: usize) {
    wait_until(Duration::from_secs(20), || {
        match ops.load(Ordering::Relaxed) {
            done if done >= at_least => Ok(()),
            done => Err(format!("clients too slow: {done} round trips")),
        }
    });
}

fn rewrite_under_load(crash: bool) {
    const CLIENTS: usize = 3;
    const PRELOADED: usize = 50_000;
    let (_temp, dir) = data_dir();
    let fsync = if crash { "always" } else { "everysec" };
    let args = ["--lease-ttl", LONG_TTL, "--appendfsync", fsync];
    let mut server = start(&dir, &args);
    let mut con = server.typed();
    let runs: Vec<Vec<u8>> = (0..PRELOADED)
        .map(|i| format!("pre-{i}").into_bytes())
        .collect();
    let preloaded = acquire_all(&mut con, &runs, 1000.0);
    // Heartbeats make the log much longer than the live state.
    heartbeat_all(&mut con, &preloaded, 1001.0);
    heartbeat_all(&mut con, &preloaded, 1002.0);
    let before = info_number(&con.info("persistence"), "aof_current_size");

    let preloaded = Arc::new(preloaded);
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let con = server.connect();
            let (preloaded, stop, ops) = (preloaded.clone(), stop.clone(), ops.clone());
            std::thread::spawn(move || rewrite_client(con, t, CLIENTS, preloaded, stop, ops))
        })
        .collect();
    wait_for_ops(&ops, 50);
    // Both in one round: the second finds the first under way.
    let replies: Vec<Value> = redis::pipe()
        .cmd("BGREWRITEAOF")
        .cmd("BGREWRITEAOF")
        .ignore_errors()
        .query(&mut con)
        .expect("BGREWRITEAOF twice");
    let started = ops.load(Ordering::Relaxed);
    assert!(
        matches!(&replies[0], Value::SimpleString(s) if s.contains("rewriting started")),
        "{replies:?}"
    );
    match &replies[1] {
        Value::ServerError(error) => {
            let text = format!("{error:?}");
            assert!(text.contains("already in progress"), "{text}");
        }
        other => panic!("a second BGREWRITEAOF got {other:?}"),
    }
    let info = wait_for_rewrites(&mut con, 1);
    let finished = ops.load(Ordering::Relaxed);
    assert_eq!(info_number(&info, "aof_rewrites"), 1);
    assert_eq!(info["aof_last_bgrewrite_status"], "ok");
    // And some after it, into the new file.
    wait_for_ops(&ops, finished + 50);
    stop.store(true, Ordering::Relaxed);
    let touched: Vec<Touched> = clients
        .into_iter()
        .map(|client| client.join().expect("client thread"))
        .collect();
    eprintln!(
        "rewrite: {} client round trips while it ran, {} in all",
        finished - started,
        ops.load(Ordering::Relaxed)
    );
    let base = info_number(&con.info("persistence"), "aof_base_size");
    assert!(
        base < before * 3 / 4,
        "the rewritten log ({base} bytes) is not much smaller than the log before ({before})"
    );

    let mut all_runs = runs.clone();
    for client in &touched {
        all_runs.extend(client.acquired.iter().map(|(run, _)| run.clone()));
    }
    let state = get_all(&mut con, &all_runs);
    let size = con.dbsize();
    // What the clients were told holds before the restart, too.
    let by_run: HashMap<&[u8], &Option<Lease>> =
        all_runs.iter().map(|r| &r[..]).zip(state.iter()).collect();
    for client in &touched {
        for run in &client.released {
            assert_eq!(by_run[&run[..]], &None);
        }
        for run in &client.heartbeated {
            let lease = by_run[&run[..]].as_ref().expect("heartbeated lease");
            assert!(lease.expires_at >= 2000.0 + LONG_TTL.parse::<f64>().unwrap());
        }
    }
    assert_eq!(size, state.iter().flatten().count() as i64);

    if crash {
        server.kill9();
    } else {
        server.stop();
    }
    let server = start(&dir, &args);
    let mut con = server.typed();
    assert_eq!(con.dbsize(), size, "DBSIZE after the restart");
    let after = get_all(&mut con, &all_runs);
    for ((run, before), after) in all_runs.iter().zip(&state).zip(&after) {
        assert_eq!(
            before,
            after,
            "{} changed across the restart",
            common::raw::show(run)
        );
    }
}

#[test]
fn a_rewrite_under_load_loses_nothing_across_a_clean_restart() {
    rewrite_under_load(false);
}

#[test]
fn a_rewrite_under_load_loses_nothing_across_a_crash_with_always() {
    rewrite_under_load(true);
}

// ---------------------------------------------------------------------------
// 7. A crash during a rewrite
// ---------------------------------------------------------------------------

#[test]
fn a_crash_during_a_rewrite_loses_nothing() {
    const LEASES: usize = 200_000;
    let (_temp, dir) = data_dir();
    let args = ["--lease-ttl", LONG_TTL, "--appendfsync", "always"];
    let mut server = start(&dir, &args);
    let mut con = server.typed();
    let runs: Vec<Vec<u8>> = (0..LEASES)
        .map(|i| format!("big-{i}").into_bytes())
        .collect();
    let leases = acquire_all(&mut con, &runs, 1000.0);
    // The rewrite starts, changes land while it runs, and INFO sees it.
    let replies: Vec<Value> = redis::pipe()
        .cmd("BGREWRITEAOF")
        .cmd("LEASE.ACQUIRE")
        .arg("during")
        .arg("w")
        .arg(1000)
        .cmd("LEASE.RELEASE")
        .arg(&leases[7].lease_id[..])
        .arg(leases[7].fencing_token)
        .cmd("LEASE.HEARTBEAT")
        .arg(&leases[8].lease_id[..])
        .arg(leases[8].fencing_token)
        .arg(1500)
        .cmd("INFO")
        .arg("persistence")
        .query(&mut con)
        .expect("pipeline");
    server.kill9();
    let info = info_map(&replies[4]);
    assert_eq!(info["aof_rewrite_in_progress"], "1", "{info:?}");
    let during = lease_reply(&replies[1]);
    assert_eq!(replies[2], Value::Int(1));
    assert_eq!(replies[3], Value::Int(1));
    let temp_left = dir.join("leased.aof.rewrite").exists();
    if !temp_left {
        eprintln!("note: the rewrite finished before the kill landed");
    }

    let server = start(&dir, &args);
    assert!(
        !dir.join("leased.aof.rewrite").exists(),
        "the rewrite's temporary file is still there"
    );
    let mut con = server.typed();
    assert_eq!(
        con.dbsize(),
        LEASES as i64,
        "200k - 1 released + 1 acquired"
    );
    assert_eq!(
        con.get(b"during", Some(0.0)).map(|l| l.fencing_token),
        Some(during.fencing_token)
    );
    assert_eq!(con.get(&runs[7], Some(0.0)), None);
    let ttl: f64 = LONG_TTL.parse().unwrap();
    assert_eq!(
        con.get(&runs[8], Some(0.0)).unwrap().expires_at,
        1500.0 + ttl
    );
    let sample: Vec<usize> = (0..LEASES)
        .step_by(997)
        .filter(|&i| i != 7 && i != 8)
        .collect();
    let sampled: Vec<Vec<u8>> = sample.iter().map(|&i| runs[i].clone()).collect();
    for (&i, lease) in sample.iter().zip(get_all(&mut con, &sampled)) {
        let lease = lease.unwrap_or_else(|| panic!("big-{i} is gone"));
        let expected = &leases[i];
        assert_eq!(
            (&lease.lease_id, lease.fencing_token, lease.expires_at),
            (
                &expected.lease_id,
                expected.fencing_token,
                expected.expires_at
            )
        );
    }
    let (token, _) = probe(&mut con, "probe");
    assert!(token > during.fencing_token);

    // A clean stop during a rewrite abandons it: the log is complete.
    let mut server = server;
    let started: String = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
    assert!(started.contains("started"), "{started}");
    server.stop();
    assert!(
        !dir.join("leased.aof.rewrite").exists(),
        "left by a clean stop"
    );
    let server = start(&dir, &args);
    let mut con = server.typed();
    assert_eq!(con.dbsize(), LEASES as i64 + 1, "with the probe");
    assert_eq!(
        con.get(b"probe", Some(0.0)).map(|l| l.fencing_token),
        Some(token)
    );
}

// ---------------------------------------------------------------------------
// 8. Automatic rewrite
// ---------------------------------------------------------------------------

#[test]
fn the_log_is_rewritten_automatically_when_it_grows() {
    let (_temp, dir) = data_dir();
    let args = [
        "--auto-aof-rewrite-min-size",
        "64kb",
        "--auto-aof-rewrite-percentage",
        "100",
        "--lease-ttl",
        "30",
    ];
    let mut server = start(&dir, &args);
    let mut con = server.typed();
    let hot = con.acquire("hot", "w", Some(1000.0), None).expect("free");
    let token = hot.fencing_token;
    let heartbeat = |con: &mut Client, from: u64, count: u64| {
        let mut pipe = redis::pipe();
        for now in from..from + count {
            pipe.cmd("LEASE.HEARTBEAT")
                .arg("hot:w:1")
                .arg(token)
                .arg(now);
        }
        let replies: Vec<i64> = pipe.query(con).expect("heartbeats");
        assert!(replies.iter().all(|&r| r == 1));
    };
    let mut now = 1001;
    let (mut largest, mut growth) = (0, 0);
    loop {
        heartbeat(&mut con, now, 100);
        now += 100;
        let info = con.info("persistence");
        let size = info_number(&info, "aof_current_size");
        if info_number(&info, "aof_rewrites") >= 1 && size < largest {
            break;
        }
        growth = size - largest;
        largest = size;
        assert!(now < 100_000, "no automatic rewrite: {info:?}");
    }
    // The batch that triggered it took the log past the minimum size.
    assert!(
        largest + growth >= 64 * 1024,
        "rewritten below the minimum size: {largest} bytes + {growth}"
    );
    // After the rewrite, changes go to the new file.
    heartbeat(&mut con, now, 10);
    let last_now = (now + 9) as f64;
    assert!(fs::metadata(dir.join(LOG)).unwrap().len() < 64 * 1024);
    server.kill9();
    let server = start(&dir, &args);
    let mut con = server.typed();
    let lease = con.get(b"hot", Some(0.0)).expect("the lease survived");
    assert_eq!(lease.fencing_token, token);
    assert_eq!(lease.expires_at, last_now + 30.0);
    assert_eq!(con.dbsize(), 1);
}

/// A snapshot has no record of released leases (without history), yet
/// tokens and registry time must survive it even in a directory without
/// the token ceiling.
#[test]
fn a_rewritten_log_keeps_the_last_token_and_registry_time() {
    let (_temp, dir) = data_dir();
    let args = ["--lease-ttl", "10", "--lease-history-len", "0"];
    let mut server = start(&dir, &args);
    let mut con = server.typed();
    for run in ["r1", "r2", "r3"] {
        con.acquire(run, "w", Some(1000.0), None).expect("free");
    }
    let kept = con.acquire("kept", "w", Some(1200.0), None).expect("free");
    let kept = kept.fencing_token;
    for (run, token) in [("r1", 1), ("r2", 2), ("r3", 3)] {
        let released: i64 = redis::cmd("LEASE.RELEASE")
            .arg(format!("{run}:w:{token}"))
            .arg(token)
            .query(&mut con)
            .unwrap();
        assert_eq!(released, 1);
    }
    let started: String = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
    assert!(started.contains("started"), "{started}");
    wait_for_rewrites(&mut con, 1);
    server.stop();
    let log = fs::read(dir.join(LOG)).unwrap();
    let kinds: Vec<u8> = frames(&log).iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [5, 4, 14], "LastToken, Time, then the one lease");

    // The log alone, in a new directory.
    let (_other, moved) = data_dir();
    fs::create_dir_all(&moved).unwrap();
    fs::write(moved.join(LOG), &log).unwrap();
    let server = start(&moved, &args);
    let mut con = server.typed();
    assert_eq!(con.dbsize(), 1);
    assert_eq!(
        con.get(b"kept", Some(0.0)).map(|l| l.fencing_token),
        Some(kept)
    );
    let reply: Value = redis::cmd("LEASE.ACQUIRE")
        .arg("r1")
        .arg("w")
        .arg(5)
        .query(&mut con)
        .unwrap();
    let lease = lease_reply(&reply);
    assert!(
        lease.fencing_token > kept,
        "token {} reused",
        lease.fencing_token
    );
    assert_eq!(lease.expires_at, 1210.0, "registry time was 1200");
}

// ---------------------------------------------------------------------------
// 9. appendonly no
// ---------------------------------------------------------------------------

#[test]
fn without_the_log_leases_are_lost_but_tokens_go_on() {
    let (_temp, dir) = data_dir();
    let args = ["--appendonly", "no"];
    let mut server = start(&dir, &args);
    let mut con = server.typed();
    for (i, run) in ["r1", "r2", "r3"].into_iter().enumerate() {
        assert_eq!(
            con.acquire(run, "w", Some(1000.0), None)
                .map(|lease| lease.fencing_token),
            Some(i as i64 + 1)
        );
    }
    let error = redis::cmd("BGREWRITEAOF")
        .query::<Value>(&mut con)
        .expect_err("BGREWRITEAOF without a log");
    assert!(error_line(&error).starts_with("ERR"), "{error:?}");
    assert_eq!(con.info("persistence")["aof_enabled"], "0");
    server.kill9();
    assert!(!dir.join(LOG).exists(), "appendonly no wrote a log");

    let server = start(&dir, &args);
    assert!(
        server.log().contains("do not survive a restart"),
        "{}",
        server.log()
    );
    let mut con = server.typed();
    assert_eq!(con.dbsize(), 0);
    assert_eq!(con.get(b"r1", Some(0.0)), None);
    let next = con.acquire("r1", "w", Some(1000.0), None);
    let next = next.expect("free after restart").fencing_token;
    assert!(next > 3, "token {next} after tokens 1-3");
}

// ---------------------------------------------------------------------------
// 10. Log write errors
// ---------------------------------------------------------------------------

/// Whether `error` is the refusal a failing log gives.
fn misconf(result: redis::RedisResult<Value>, what: &str) {
    match result {
        Err(error) if error_line(&error).starts_with("MISCONF") => {}
        other => panic!("{what} while the log fails: {other:?}"),
    }
}

#[test]
fn a_failing_log_refuses_changes_with_misconf() {
    let (_temp, dir) = data_dir();
    // Files may not grow past 16 blocks of 512 bytes; with SIGXFSZ ignored
    // a write past that fails with EFBIG instead of killing the server.
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg("ulimit -f 16; trap '' XFSZ; exec \"$0\" \"$@\"")
        .arg(common::binary::BINARY)
        .args(["--port", "0", "--appendfsync", "always", "--dir"])
        .arg(&dir);
    let mut server = Server::spawn(command, &dir).unwrap_or_else(|output| panic!("{output}"));
    let mut con = server.typed();
    let mut acknowledged = Vec::new();
    loop {
        let run = format!("m-{}", acknowledged.len());
        let reply = redis::cmd("LEASE.ACQUIRE")
            .arg(&run)
            .arg("w")
            .arg(1000)
            .query::<Value>(&mut con);
        match reply {
            Ok(reply) => acknowledged.push(lease_reply(&reply)),
            Err(error) if error_line(&error).starts_with("MISCONF") => break,
            Err(error) => panic!("acquire {run}: {error:?}"),
        }
        assert!(acknowledged.len() < 1000, "8 KiB of log never failed");
    }
    assert!(
        acknowledged.len() > 50,
        "failed early: {}",
        acknowledged.len()
    );
    let failed = "Writing the append-only log failed";
    wait_until(Duration::from_secs(10), || match server.log() {
        log if log.contains(failed) => Ok(()),
        log => Err(format!("no {failed:?} in:\n{log}")),
    });
    let held = acknowledged[0].clone();
    let refusals = |con: &mut Client| {
        misconf(
            redis::cmd("LEASE.ACQUIRE")
                .arg("new")
                .arg("w")
                .arg(1000)
                .query(con),
            "acquire",
        );
        misconf(
            redis::cmd("LEASE.HEARTBEAT")
                .arg(&held.lease_id[..])
                .arg(held.fencing_token)
                .arg(1001)
                .query(con),
            "heartbeat",
        );
        misconf(
            redis::cmd("LEASE.RELEASE")
                .arg(&held.lease_id[..])
                .arg(held.fencing_token)
                .query(con),
            "release",
        );
    };
    refusals(&mut con);
    // Reads still answer, and the refused changes did not happen.
    let lease = con.get(&held.run_id, Some(0.0)).expect("held lease");
    assert_eq!(
        lease.expires_at, held.expires_at,
        "a refused heartbeat extended it"
    );
    let valid: i64 = redis::cmd("LEASE.VALIDATE")
        .arg(&held.run_id[..])
        .arg(&held.lease_id[..])
        .arg(held.fencing_token)
        .arg(1000)
        .query(&mut con)
        .unwrap();
    assert_eq!(valid, 1);
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(con.info("persistence")["aof_last_write_status"], "err");
    assert_eq!(con.get(b"new", Some(0.0)), None);
    // The server retries the write a second after it failed; it fails
    // again, and says so again. A real wait: the retry follows the
    // process's own clock (std::time::Instant, not tokio's), and the
    // failure needs a process of its own (`ulimit -f`).
    let failures = |server: &Server| server.log().matches(failed).count();
    let before = failures(&server);
    std::thread::sleep(Duration::from_millis(1100));
    refusals(&mut con);
    assert_eq!(con.info("persistence")["aof_last_write_status"], "err");
    wait_until(Duration::from_secs(10), || match failures(&server) {
        after if after > before => Ok(()),
        after => Err(format!(
            "{after} failures logged, {before} before the retry"
        )),
    });
    server.kill9();

    let server = start(&dir, &["--appendfsync", "always"]);
    let log = server.log();
    assert!(
        !log.contains("incomplete") && !log.contains("corrupt"),
        "{log}"
    );
    let mut con = server.typed();
    let runs: Vec<Vec<u8>> = acknowledged.iter().map(|l| l.run_id.clone()).collect();
    for (lease, after) in acknowledged.iter().zip(get_all(&mut con, &runs)) {
        let mut after = after
            .unwrap_or_else(|| panic!("acknowledged {} is gone", common::raw::show(&lease.run_id)));
        after.expired = None;
        assert_eq!(&after, lease);
    }
    assert_eq!(con.get(b"new", Some(0.0)), None);
    let (token, _) = probe(&mut con, "probe");
    let last = acknowledged.last().unwrap().fencing_token;
    assert!(
        token > last + 1,
        "token {token}: {} went to the refused acquire",
        last + 1
    );
}
