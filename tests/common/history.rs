//! A history of client commands against a cluster, and the checks that
//! leases stayed safe through whatever failed meanwhile.
//!
//! Each command is recorded with its invoke and return instants on one
//! monotonic clock shared by every client (seconds since the history
//! began), and its reply: a success, `-TRYAGAIN` (surely not done),
//! `-UNCERTAIN` or a lost connection (maybe done), or another error.
//! Only successes are facts; a maybe-done acquire may have issued a token
//! nobody saw, which the checks allow.
//!
//! Registry time is the leader's stamp, read back from replies: an
//! acquire's `expires_at - ttl` is the registry time it was applied at.
//! A heartbeat's reply is only 1, so the time it was applied at is
//! bounded below by the registry time of every reply returned before it
//! was sent (registry time never goes back: checked too).
//!
//! Pure data and functions, no I/O: the nemesis example includes this
//! file by `#[path]`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Slack for times that went through decimal text (stamps are whole
/// milliseconds, TTLs a few decimals).
const EPSILON: f64 = 1e-6;

/// What a client sent.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    Acquire { run: String, ttl: f64 },
    Heartbeat { run: String, token: i64 },
    Validate { run: String, token: i64 },
    Release { run: String, token: i64 },
}

impl Call {
    pub fn run(&self) -> &str {
        match self {
            Call::Acquire { run, .. }
            | Call::Heartbeat { run, .. }
            | Call::Validate { run, .. }
            | Call::Release { run, .. } => run,
        }
    }
}

/// What came back.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// An acquire's lease: its token and `expires_at` (registry time).
    Acquired { token: i64, expires_at: f64 },
    /// An acquire answered null: the run is held.
    Held,
    /// A heartbeat's, validate's or release's 1 or 0.
    Flag(bool),
    /// `-TRYAGAIN`: refused before it reached a log.
    TryAgain,
    /// `-UNCERTAIN`, or the connection lost after the command was sent.
    Uncertain,
    /// Any other error.
    Error(String),
}

/// One command of the history.
#[derive(Clone, Debug)]
#[allow(dead_code)] // `client` shows in reports (Debug) only.
pub struct Op {
    pub client: usize,
    pub call: Call,
    pub invoke: f64,
    pub ret: f64,
    pub reply: Reply,
}

impl Op {
    /// The registry time this command was applied at, if its reply says.
    fn registry_time(&self) -> Option<f64> {
        match (&self.call, &self.reply) {
            (Call::Acquire { ttl, .. }, Reply::Acquired { expires_at, .. }) => {
                Some(expires_at - ttl)
            }
            _ => None,
        }
    }

    /// Whether the reply told the client its lease is valid.
    fn told_valid(&self) -> bool {
        matches!(
            (&self.call, &self.reply),
            (
                Call::Heartbeat { .. } | Call::Validate { .. },
                Reply::Flag(true)
            )
        )
    }
}

/// A tenure as `LEASE.HISTORY` reports it, read after recovery.
#[derive(Clone, Debug, PartialEq)]
pub struct Tenure {
    pub token: i64,
    pub acquired_at: f64,
    pub expires_at: f64,
    pub ended_at: Option<f64>,
}

/// The history being recorded, shared by every client thread.
#[derive(Clone)]
pub struct Recorder {
    start: Instant,
    ops: Arc<Mutex<Vec<Op>>>,
}

#[allow(dead_code)]
impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            ops: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Seconds since the history began, on the shared clock.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Runs `send` (which performs `call`) between two readings of the
    /// clock, records it, and returns its reply.
    pub fn record(&self, client: usize, call: Call, send: impl FnOnce(&Call) -> Reply) -> Reply {
        let invoke = self.now();
        let reply = send(&call);
        let ret = self.now();
        self.ops.lock().unwrap().push(Op {
            client,
            call,
            invoke,
            ret,
            reply: reply.clone(),
        });
        reply
    }

    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap().clone()
    }
}

/// A broken promise found in a history.
#[derive(Clone, Debug, PartialEq)]
pub enum Violation {
    /// Two acknowledged acquires got the same token.
    DuplicateToken { token: i64 },
    /// An acquire that returned before another began got a larger token.
    TokenOrder { earlier: i64, later: i64 },
    /// Token `later` of `run` was acquired at registry time `acquired`,
    /// before the `expires_at` (`valid_until`) that token `earlier` was
    /// known to hold.
    Overlap {
        run: String,
        earlier: i64,
        later: i64,
        valid_until: f64,
        acquired: f64,
    },
    /// A heartbeat or validate of `token` succeeded although it was sent
    /// after an acquire of a later token of the run had returned.
    StaleSuccess { run: String, token: i64, later: i64 },
    /// A reply's registry time is behind one that returned before its
    /// command was sent.
    TimeWentBack { before: f64, after: f64 },
    /// After recovery the run's newest token is below an acknowledged one.
    Lost {
        run: String,
        acknowledged: i64,
        recovered: Option<i64>,
    },
    /// Two tenures of `run` in `LEASE.HISTORY` overlap.
    TenureOverlap {
        run: String,
        earlier: i64,
        later: i64,
    },
}

/// The checks over a finished history; `recovered` is each run's
/// `LEASE.HISTORY` after recovery (newest first), for runs with
/// acknowledged acquires. Empty when all is well.
pub fn check(ops: &[Op], recovered: &HashMap<String, Vec<Tenure>>) -> Vec<Violation> {
    let mut found = Vec::new();
    found.extend(unique_tokens(ops));
    found.extend(tokens_in_real_time(ops));
    found.extend(time_never_back(ops));
    found.extend(no_overlap(ops));
    found.extend(no_stale_success(ops));
    found.extend(recovery(ops, recovered));
    found.extend(tenures_apart(recovered));
    found
}

/// Acknowledged acquires: `(op, token, registry time)`.
fn acquires(ops: &[Op]) -> Vec<(&Op, i64, f64)> {
    (ops.iter())
        .filter_map(|op| match op.reply {
            Reply::Acquired { token, .. } => Some((op, token, op.registry_time()?)),
            _ => None,
        })
        .collect()
}

fn unique_tokens(ops: &[Op]) -> Vec<Violation> {
    let mut seen = HashSet::new();
    (acquires(ops).into_iter())
        .filter(|(_, token, _)| !seen.insert(*token))
        .map(|(_, token, _)| Violation::DuplicateToken { token })
        .collect()
}

/// For each op (in `ops` order) the largest `value` among the ops that
/// returned strictly before it was sent: one sweep over returns sorted.
fn max_returned_before(ops: &[Op], value: impl Fn(&Op) -> Option<f64>) -> Vec<Option<f64>> {
    let mut returns: Vec<(f64, f64)> = (ops.iter())
        .filter_map(|op| Some((op.ret, value(op)?)))
        .collect();
    returns.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by(|&a, &b| ops[a].invoke.total_cmp(&ops[b].invoke));
    let mut result = vec![None; ops.len()];
    let (mut next, mut best): (usize, Option<f64>) = (0, None);
    for index in order {
        while next < returns.len() && returns[next].0 < ops[index].invoke {
            best = Some(best.map_or(returns[next].1, |b: f64| b.max(returns[next].1)));
            next += 1;
        }
        result[index] = best;
    }
    result
}

fn tokens_in_real_time(ops: &[Op]) -> Vec<Violation> {
    let token = |op: &Op| match op.reply {
        Reply::Acquired { token, .. } => Some(token as f64),
        _ => None,
    };
    let before = max_returned_before(ops, token);
    (ops.iter().zip(before))
        .filter_map(|(op, before)| {
            let later = token(op)? as i64;
            let earlier = before? as i64;
            (earlier >= later).then_some(Violation::TokenOrder { earlier, later })
        })
        .collect()
}

fn time_never_back(ops: &[Op]) -> Vec<Violation> {
    let before = max_returned_before(ops, Op::registry_time);
    (ops.iter().zip(before))
        .filter_map(|(op, before)| {
            let (after, before) = (op.registry_time()?, before?);
            (after + EPSILON < before).then_some(Violation::TimeWentBack { before, after })
        })
        .collect()
}

/// Token k's lease was valid up to at least its acquire's `expires_at`,
/// each successful heartbeat's lower bound (registry time then + TTL) and
/// each successful validate's (valid after registry time then); a later
/// token of the run acquired before that is an overlap. A lease released
/// (or maybe released: an uncertain release) is left out: it ended at a
/// time no reply gives.
fn no_overlap(ops: &[Op]) -> Vec<Violation> {
    let times = max_returned_before(ops, Op::registry_time);
    let mut ttl: HashMap<(String, i64), f64> = HashMap::new();
    let mut acquired: BTreeMap<(String, i64), f64> = BTreeMap::new();
    for (op, token, at) in acquires(ops) {
        if let Call::Acquire { run, ttl: t } = &op.call {
            ttl.insert((run.clone(), token), *t);
            acquired.insert((run.clone(), token), at);
        }
    }
    let mut valid_until: HashMap<(String, i64), f64> = HashMap::new();
    let mut released: HashSet<(String, i64)> = HashSet::new();
    let mut extend = |key: (String, i64), until: f64| {
        let entry = valid_until.entry(key).or_insert(until);
        *entry = entry.max(until);
    };
    for (op, time) in ops.iter().zip(&times) {
        match (&op.call, &op.reply) {
            (Call::Acquire { .. }, Reply::Acquired { token, expires_at }) => {
                extend((op.call.run().to_string(), *token), *expires_at)
            }
            (Call::Heartbeat { run, token }, Reply::Flag(true)) => {
                let key = (run.clone(), *token);
                if let (Some(ttl), Some(time)) = (ttl.get(&key), time) {
                    extend(key, time + ttl);
                }
            }
            (Call::Validate { run, token }, Reply::Flag(true)) => {
                if let Some(time) = time {
                    // Valid strictly after `time`: an acquire at or
                    // before it overlaps.
                    extend((run.clone(), *token), time + EPSILON * 2.0);
                }
            }
            (Call::Release { run, token }, Reply::Flag(true) | Reply::Uncertain) => {
                released.insert((run.clone(), *token));
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    let mut previous: Option<(&(String, i64), f64)> = None;
    for (key, &at) in &acquired {
        if let Some((earlier, _)) = previous.filter(|(earlier, _)| earlier.0 == key.0)
            && !released.contains(earlier)
            && let Some(&until) = valid_until.get(earlier)
            && at + EPSILON < until
        {
            found.push(Violation::Overlap {
                run: key.0.clone(),
                earlier: earlier.1,
                later: key.1,
                valid_until: until,
                acquired: at,
            });
        }
        previous = Some((key, at));
    }
    found
}

fn no_stale_success(ops: &[Op]) -> Vec<Violation> {
    // Per run, acquires by token; for a token k, the first return of any
    // later token.
    let mut by_run: HashMap<&str, Vec<(i64, f64)>> = HashMap::new();
    for (op, token, _) in acquires(ops) {
        by_run
            .entry(op.call.run())
            .or_default()
            .push((token, op.ret));
    }
    for acquires in by_run.values_mut() {
        acquires.sort_by_key(|(token, _)| *token);
    }
    let mut found = Vec::new();
    for op in ops.iter().filter(|op| op.told_valid()) {
        let (Call::Heartbeat { run, token } | Call::Validate { run, token }) = &op.call else {
            continue;
        };
        let Some(acquires) = by_run.get(run.as_str()) else {
            continue;
        };
        let later = (acquires.iter())
            .filter(|(later, ret)| later > token && *ret < op.invoke)
            .map(|(later, _)| *later)
            .next();
        if let Some(later) = later {
            found.push(Violation::StaleSuccess {
                run: run.clone(),
                token: *token,
                later,
            });
        }
    }
    found
}

/// Each run's largest acknowledged token.
pub fn acknowledged(ops: &[Op]) -> HashMap<String, i64> {
    let mut newest: HashMap<String, i64> = HashMap::new();
    for (op, token, _) in acquires(ops) {
        let entry = newest.entry(op.call.run().to_string()).or_insert(token);
        *entry = (*entry).max(token);
    }
    newest
}

fn recovery(ops: &[Op], recovered: &HashMap<String, Vec<Tenure>>) -> Vec<Violation> {
    let mut found: Vec<Violation> = (acknowledged(ops).into_iter())
        .filter_map(|(run, acknowledged)| {
            let newest = recovered
                .get(&run)
                .and_then(|t| t.iter().map(|t| t.token).max());
            (newest < Some(acknowledged)).then_some(Violation::Lost {
                run,
                acknowledged,
                recovered: newest,
            })
        })
        .collect();
    found.sort_by_key(|v| format!("{v:?}"));
    found
}

/// Each tenure ended (or expires) no later than the next one began.
fn tenures_apart(recovered: &HashMap<String, Vec<Tenure>>) -> Vec<Violation> {
    let mut found = Vec::new();
    for (run, tenures) in recovered {
        let mut tenures = tenures.clone();
        tenures.sort_by_key(|t| t.token);
        for pair in tenures.windows(2) {
            let end = pair[0].ended_at.unwrap_or(pair[0].expires_at);
            if pair[1].acquired_at + EPSILON < end {
                found.push(Violation::TenureOverlap {
                    run: run.clone(),
                    earlier: pair[0].token,
                    later: pair[1].token,
                });
            }
        }
    }
    found
}

/// Counts of replies by kind, for a summary line.
#[allow(dead_code)]
pub fn summary(ops: &[Op]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for op in ops {
        let kind = match op.reply {
            Reply::Acquired { .. } => "acquired",
            Reply::Held => "held",
            Reply::Flag(true) => "1",
            Reply::Flag(false) => "0",
            Reply::TryAgain => "tryagain",
            Reply::Uncertain => "uncertain",
            Reply::Error(_) => "error",
        };
        *counts.entry(kind).or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!("{} commands: {}", ops.len(), parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(client: usize, call: Call, invoke: f64, ret: f64, reply: Reply) -> Op {
        Op {
            client,
            call,
            invoke,
            ret,
            reply,
        }
    }

    fn acquire(run: &str, at: f64, token: i64, invoke: f64, ret: f64) -> Op {
        let call = Call::Acquire {
            run: run.into(),
            ttl: 2.0,
        };
        let reply = Reply::Acquired {
            token,
            expires_at: at + 2.0,
        };
        op(0, call, invoke, ret, reply)
    }

    fn heartbeat(run: &str, token: i64, invoke: f64, ret: f64) -> Op {
        let call = Call::Heartbeat {
            run: run.into(),
            token,
        };
        op(1, call, invoke, ret, Reply::Flag(true))
    }

    fn tenure(token: i64, acquired_at: f64, ended_at: f64) -> Tenure {
        Tenure {
            token,
            acquired_at,
            expires_at: ended_at,
            ended_at: Some(ended_at),
        }
    }

    /// Two leases of run a, one after the other, and what recovery read.
    fn good() -> (Vec<Op>, HashMap<String, Vec<Tenure>>) {
        let ops = vec![
            acquire("a", 100.0, 1, 0.0, 0.1),
            acquire("b", 100.5, 2, 0.7, 0.8),
            heartbeat("a", 1, 0.9, 1.0),
            acquire("a", 103.0, 3, 3.0, 3.1),
        ];
        let recovered = HashMap::from([
            (
                "a".into(),
                vec![tenure(3, 103.0, 105.0), tenure(1, 100.0, 102.5)],
            ),
            ("b".into(), vec![tenure(2, 100.5, 102.5)]),
        ]);
        (ops, recovered)
    }

    #[test]
    fn a_correct_history_passes() {
        let (ops, recovered) = good();
        assert_eq!(check(&ops, &recovered), vec![]);
    }

    #[test]
    fn uncertain_and_refused_replies_are_no_facts() {
        let (mut ops, recovered) = good();
        let call = Call::Acquire {
            run: "a".into(),
            ttl: 2.0,
        };
        ops.push(op(2, call.clone(), 0.0, 9.0, Reply::Uncertain));
        ops.push(op(2, call, 0.0, 9.0, Reply::TryAgain));
        assert_eq!(check(&ops, &recovered), vec![]);
    }

    #[test]
    fn catches_a_repeated_token() {
        let (mut ops, recovered) = good();
        ops.push(acquire("c", 104.0, 3, 4.0, 4.1));
        assert!(check(&ops, &recovered).contains(&Violation::DuplicateToken { token: 3 }));
    }

    #[test]
    fn catches_tokens_out_of_real_time_order() {
        let (mut ops, recovered) = good();
        // Sent after token 3's acquire returned, yet given a smaller one.
        ops.push(acquire("c", 104.0, 0, 4.0, 4.1));
        let found = check(&ops, &recovered);
        assert!(
            found.contains(&Violation::TokenOrder {
                earlier: 3,
                later: 0
            }),
            "{found:?}"
        );
        // Concurrent acquires may be ordered either way: token 4 returned
        // after token 3's acquire began.
        let (mut ops, mut recovered) = good();
        ops.push(acquire("c", 102.9, 4, 2.95, 3.05));
        recovered.insert("c".into(), vec![tenure(4, 102.9, 104.9)]);
        assert_eq!(check(&ops, &recovered), vec![]);
    }

    #[test]
    fn catches_two_leases_valid_at_once() {
        let (mut ops, recovered) = good();
        // Token 1 expired at 102.5 (its heartbeat at >= 100.5 extended it);
        // token 4 acquired at 102.0.
        ops[3] = acquire("a", 102.0, 4, 3.0, 3.1);
        let found = check(&ops, &recovered);
        assert!(
            found.contains(&Violation::Overlap {
                run: "a".into(),
                earlier: 1,
                later: 4,
                valid_until: 102.5,
                acquired: 102.0
            }),
            "{found:?}"
        );
        // The same acquire after a release of token 1 is fine.
        let release = Call::Release {
            run: "a".into(),
            token: 1,
        };
        ops.push(op(1, release, 1.0, 1.1, Reply::Flag(true)));
        assert!(
            !check(&ops, &recovered)
                .iter()
                .any(|v| matches!(v, Violation::Overlap { .. }))
        );
    }

    #[test]
    fn catches_a_validate_after_the_run_was_taken_over() {
        let (mut ops, recovered) = good();
        let call = Call::Validate {
            run: "a".into(),
            token: 1,
        };
        ops.push(op(1, call.clone(), 3.2, 3.3, Reply::Flag(true)));
        let found = check(&ops, &recovered);
        let stale = Violation::StaleSuccess {
            run: "a".into(),
            token: 1,
            later: 3,
        };
        assert!(found.contains(&stale), "{found:?}");
        // Concurrent with the takeover, it may have come first.
        ops.pop();
        ops.push(op(1, call, 3.05, 3.3, Reply::Flag(true)));
        assert_eq!(check(&ops, &recovered), vec![]);
        // A heartbeat too.
        ops.push(heartbeat("a", 1, 3.5, 3.6));
        assert!(check(&ops, &recovered).contains(&stale));
    }

    #[test]
    fn catches_registry_time_going_back() {
        let (mut ops, recovered) = good();
        ops.push(acquire("c", 102.0, 4, 3.5, 3.6));
        let found = check(&ops, &recovered);
        assert!(
            found.contains(&Violation::TimeWentBack {
                before: 103.0,
                after: 102.0
            }),
            "{found:?}"
        );
    }

    #[test]
    fn catches_a_lost_acquire() {
        let (ops, mut recovered) = good();
        recovered.get_mut("a").unwrap().remove(0);
        let found = check(&ops, &recovered);
        let lost = Violation::Lost {
            run: "a".into(),
            acknowledged: 3,
            recovered: Some(1),
        };
        assert_eq!(found, vec![lost]);
        recovered.remove("b");
        assert!(check(&ops, &recovered).contains(&Violation::Lost {
            run: "b".into(),
            acknowledged: 2,
            recovered: None
        }));
    }

    #[test]
    fn catches_overlapping_tenures_in_the_recovered_history() {
        let (ops, mut recovered) = good();
        recovered.get_mut("a").unwrap()[0].acquired_at = 102.0;
        let found = check(&ops, &recovered);
        assert!(found.contains(&Violation::TenureOverlap {
            run: "a".into(),
            earlier: 1,
            later: 3
        }));
    }
}
