//! A client whose every lease command goes into a [`Recorder`]'s history,
//! its reply read into a [`Reply`]; and the reading of `LEASE.HISTORY`
//! after recovery. For the cluster tests and the nemesis example (which
//! includes this file, with `history.rs`, by `#[path]`).
//!
//! A connection that failed, or whose reply did not come in time, is
//! dropped: a late reply would otherwise answer the next command.

use std::time::Duration;

use redis::Value;

use std::collections::HashMap;

use super::history::{self, Call, Op, Recorder, Reply, Tenure};

/// A worker named `w<client>`, sending to one node at a time.
#[allow(dead_code)]
pub struct Worker {
    pub client: usize,
    pub name: String,
    url: String,
    con: Option<redis::Connection>,
    timeout: Duration,
}

#[allow(dead_code)]
impl Worker {
    /// `timeout`: how long a reply is awaited (a node frozen by SIGSTOP
    /// never answers).
    pub fn new(client: usize, url: &str, timeout: Duration) -> Worker {
        Worker {
            client,
            name: format!("w{client}"),
            url: url.to_string(),
            con: None,
            timeout,
        }
    }

    /// Sends to another node from now on.
    pub fn switch(&mut self, url: &str) {
        if self.url != url {
            self.url = url.to_string();
            self.con = None;
        }
    }

    pub fn lease_id(&self, run: &str, token: i64) -> String {
        format!("{run}:{}:{token}", self.name)
    }

    /// Sends `call`, recorded with its reply in `recorder`.
    pub fn send(&mut self, recorder: &Recorder, call: Call) -> Reply {
        recorder.record(self.client, call, |call| self.execute(call))
    }

    fn command(&self, call: &Call) -> redis::Cmd {
        let mut cmd;
        match call {
            Call::Acquire { run, ttl } => {
                cmd = redis::cmd("LEASE.ACQUIRE");
                cmd.arg(run).arg(&self.name).arg("TTL").arg(*ttl);
            }
            Call::Heartbeat { run, token } => {
                cmd = redis::cmd("LEASE.HEARTBEAT");
                cmd.arg(self.lease_id(run, *token)).arg(*token);
            }
            Call::Validate { run, token } => {
                cmd = redis::cmd("LEASE.VALIDATE");
                cmd.arg(run).arg(self.lease_id(run, *token)).arg(*token);
            }
            Call::Release { run, token } => {
                cmd = redis::cmd("LEASE.RELEASE");
                cmd.arg(self.lease_id(run, *token)).arg(*token);
            }
        }
        cmd
    }

    fn connection(&mut self) -> redis::RedisResult<&mut redis::Connection> {
        if self.con.is_none() {
            let client = redis::Client::open(self.url.as_str())?;
            let con = client.get_connection_with_timeout(self.timeout)?;
            con.set_read_timeout(Some(self.timeout))?;
            con.set_write_timeout(Some(self.timeout))?;
            self.con = Some(con);
        }
        Ok(self.con.as_mut().expect("connected"))
    }

    fn execute(&mut self, call: &Call) -> Reply {
        let cmd = self.command(call);
        let con = match self.connection() {
            Ok(con) => con,
            // Nothing was sent.
            Err(_) => return Reply::TryAgain,
        };
        match cmd.query::<Value>(con) {
            Ok(value) => read_reply(call, &value),
            Err(error) => {
                let reply = error_reply(&error);
                if matches!(reply, Reply::Uncertain) && error.code().is_none() {
                    // Lost or timed out: the connection is out of step.
                    self.con = None;
                }
                reply
            }
        }
    }
}

/// A reply in the history's terms.
fn read_reply(call: &Call, value: &Value) -> Reply {
    match (call, value) {
        (Call::Acquire { .. }, Value::Nil) => Reply::Held,
        (Call::Acquire { .. }, value) => {
            match (field(value, "fencing_token"), field(value, "expires_at")) {
                (Some(token), Some(expires_at)) => Reply::Acquired {
                    token: number(&token) as i64,
                    expires_at: number(&expires_at),
                },
                _ => Reply::Error(format!("not a lease: {value:?}")),
            }
        }
        (_, Value::Int(flag)) => Reply::Flag(*flag == 1),
        (_, value) => Reply::Error(format!("unexpected reply {value:?}")),
    }
}

/// An error in the history's terms: what the cluster says may be
/// resent, what may have happened, and the rest. A connection lost or a
/// reply not in time leaves the command's fate unknown.
fn error_reply(error: &redis::RedisError) -> Reply {
    match error.code() {
        Some("TRYAGAIN") => Reply::TryAgain,
        Some("UNCERTAIN") => Reply::Uncertain,
        Some(_) => Reply::Error(error.to_string()),
        None => Reply::Uncertain,
    }
}

/// A field of a map reply (RESP2 flat array or RESP3 map).
fn field(value: &Value, name: &str) -> Option<Value> {
    let pairs: Vec<(&Value, &Value)> = match value {
        Value::Array(items) => items.chunks(2).map(|p| (&p[0], &p[1])).collect(),
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    (pairs.into_iter())
        .find(|(key, _)| matches!(key, Value::BulkString(k) if k == name.as_bytes()))
        .map(|(_, value)| value.clone())
}

/// A number sent as an integer, a double or decimal text.
fn number(value: &Value) -> f64 {
    match value {
        Value::Int(i) => *i as f64,
        Value::Double(d) => *d,
        Value::BulkString(text) => (std::str::from_utf8(text).ok())
            .and_then(|text| text.parse().ok())
            .unwrap_or(f64::NAN),
        _ => f64::NAN,
    }
}

/// A run's tenures as `LEASE.HISTORY` lists them, newest first.
#[allow(dead_code)]
pub fn tenures(con: &mut redis::Connection, run: &str) -> redis::RedisResult<Vec<Tenure>> {
    let value: Value = redis::cmd("LEASE.HISTORY").arg(run).query(con)?;
    let Value::Array(items) = value else {
        return Ok(Vec::new());
    };
    Ok((items.iter())
        .map(|tenure| {
            let get = |name| field(tenure, name).map(|v| number(&v));
            Tenure {
                token: get("fencing_token").unwrap_or(f64::NAN) as i64,
                acquired_at: get("acquired_at").unwrap_or(f64::NAN),
                expires_at: get("expires_at").unwrap_or(f64::NAN),
                ended_at: get("ended_at").filter(|t| !t.is_nan()),
            }
        })
        .collect())
}

/// What a [`work`]ing client does.
#[allow(dead_code)]
pub struct Workload {
    /// Runs `r0` .. `r<runs-1>`, taken at random.
    pub runs: u64,
    /// Each lease's TTL, seconds.
    pub ttl: f64,
    /// Between two commands.
    pub pause: Duration,
    /// Whether a client moves on to the next node after a reply that is
    /// not an answer (a node killed or cut off): else it stays.
    pub rotate: bool,
}

/// `count` clients, each on its own thread [`work`]ing until `done`,
/// client `i` starting on node `i mod urls.len()` and moving on to the
/// next node after a reply that is not an answer; each returns its
/// replies.
#[allow(dead_code)]
pub fn spawn_clients(
    urls: &[String],
    count: usize,
    workload: Workload,
    timeout: Duration,
    recorder: &Recorder,
    done: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<(f64, Reply)>>> {
    let workload = std::sync::Arc::new(workload);
    (0..count)
        .map(|client| {
            let mut mine = urls.to_vec();
            mine.rotate_left(client % urls.len());
            let mut worker = Worker::new(client, &mine[0], timeout);
            let (recorder, done, workload) = (recorder.clone(), done.clone(), workload.clone());
            std::thread::spawn(move || work(&mut worker, &recorder, &workload, &mine, &done))
        })
        .collect()
}

/// A client's life until `done`: without a lease it acquires a random run;
/// with one it heartbeats (6 in 10), validates (3 in 10) or releases it,
/// and forgets it when told 0 or when its fate is unknown. Returns each
/// command's invoke time and reply. `urls` are the nodes, the worker's
/// own first.
#[allow(dead_code)]
pub fn work(
    worker: &mut Worker,
    recorder: &Recorder,
    workload: &Workload,
    urls: &[String],
    done: &std::sync::atomic::AtomicBool,
) -> Vec<(f64, Reply)> {
    let mut replies = Vec::new();
    let mut node = 0;
    // A linear congruential generator per client: no dependency, and a
    // different sequence for each.
    let mut step = worker.client as u64 ^ 0x9e37_79b9_7f4a_7c15;
    let mut held: Option<(String, i64)> = None;
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        step = (step.wrapping_mul(6364136223846793005)).wrapping_add(1442695040888963407);
        let call = match &held {
            None => Call::Acquire {
                run: format!("r{}", (step >> 40) % workload.runs),
                ttl: workload.ttl,
            },
            Some((run, token)) => {
                let (run, token) = (run.clone(), *token);
                match (step >> 33) % 10 {
                    0 => Call::Release { run, token },
                    1..=3 => Call::Validate { run, token },
                    _ => Call::Heartbeat { run, token },
                }
            }
        };
        let invoke = recorder.now();
        let reply = worker.send(recorder, call.clone());
        held = match (&call, &reply) {
            (Call::Acquire { run, .. }, Reply::Acquired { token, .. }) => {
                Some((run.clone(), *token))
            }
            (Call::Acquire { .. } | Call::Release { .. }, _) | (_, Reply::Flag(false)) => None,
            // A heartbeat or validate not answered: the lease may still
            // hold; the next heartbeat says.
            _ => held,
        };
        if workload.rotate && matches!(reply, Reply::TryAgain | Reply::Uncertain) {
            node = (node + 1) % urls.len();
            worker.switch(&urls[node]);
        }
        replies.push((invoke, reply));
        std::thread::sleep(workload.pause);
    }
    replies
}

/// The tenures of every run with an acknowledged acquire in `ops`, read
/// over `con` after recovery: what [`history::check`] compares with.
#[allow(dead_code)]
pub fn recovered(con: &mut redis::Connection, ops: &[Op]) -> HashMap<String, Vec<Tenure>> {
    (history::acknowledged(ops).into_keys())
        .map(|run| {
            let tenures = tenures(con, &run).expect("LEASE.HISTORY");
            (run, tenures)
        })
        .collect()
}
