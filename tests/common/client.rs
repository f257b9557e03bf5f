//! One typed client for every test: the lease commands with their replies
//! read into Rust values (and their shapes checked), INFO as a map, CONFIG,
//! and any other command as words.
//!
//! [`Client`] wraps a blocking connection, for the spawned binary;
//! [`AsyncClient`] a multiplexed async one, for a server running in the
//! test's own runtime (where time can be paused and advanced). Both build
//! the same commands and read the same replies through the functions of
//! this file.

use std::collections::HashMap;

use redis::{Cmd, Value};

use super::inprocess::at_one_instant;

/// A lease as the lease commands answer with it, in RESP2 (a flat array,
/// `expires_at` a bulk string) or RESP3 (a map, `expires_at` a double).
#[derive(Clone, Debug, PartialEq)]
pub struct Lease {
    pub run_id: Vec<u8>,
    pub worker_id: Vec<u8>,
    pub lease_id: Vec<u8>,
    pub fencing_token: i64,
    pub expires_at: f64,
    /// Present in `LEASE.GET` replies only.
    pub expired: Option<i64>,
}

#[allow(dead_code)]
impl Lease {
    /// This lease as `LEASE.GET` shows it, with `expired` 1 or 0.
    pub fn with_expired(&self, expired: bool) -> Lease {
        Lease {
            expired: Some(i64::from(expired)),
            ..self.clone()
        }
    }
}

// ---------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------

/// A command given as words.
pub fn words(words: &[&str]) -> Cmd {
    let mut cmd = redis::cmd(words[0]);
    for word in &words[1..] {
        cmd.arg(*word);
    }
    cmd
}

/// `LEASE.ACQUIRE run worker [now] [TTL ttl]`.
pub fn acquire_cmd(run: &str, worker: &str, now: Option<f64>, ttl: Option<f64>) -> Cmd {
    let mut cmd = redis::cmd("LEASE.ACQUIRE");
    cmd.arg(run).arg(worker);
    if let Some(now) = now {
        cmd.arg(now);
    }
    if let Some(ttl) = ttl {
        cmd.arg("TTL").arg(ttl);
    }
    cmd
}

/// One `LEASE.ACQUIRE` per run, all at `now` with `ttl`, in one pipeline
/// whose replies are dropped: for loading many leases.
#[allow(dead_code)]
pub fn acquire_all_cmd(
    runs: impl IntoIterator<Item = String>,
    worker: &str,
    now: f64,
    ttl: f64,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for run in runs {
        pipe.add_command(acquire_cmd(&run, worker, Some(now), Some(ttl)))
            .ignore();
    }
    pipe
}

/// `LEASE.HEARTBEAT lease_id token [now]`.
pub fn heartbeat_cmd(lease_id: &[u8], token: i64, now: Option<f64>) -> Cmd {
    let mut cmd = redis::cmd("LEASE.HEARTBEAT");
    cmd.arg(lease_id).arg(token);
    if let Some(now) = now {
        cmd.arg(now);
    }
    cmd
}

/// `LEASE.VALIDATE run lease_id token [now]`.
pub fn validate_cmd(run: &str, lease_id: &[u8], token: i64, now: Option<f64>) -> Cmd {
    let mut cmd = redis::cmd("LEASE.VALIDATE");
    cmd.arg(run).arg(lease_id).arg(token);
    if let Some(now) = now {
        cmd.arg(now);
    }
    cmd
}

/// `LEASE.RELEASE lease_id token`.
pub fn release_cmd(lease_id: &[u8], token: i64) -> Cmd {
    let mut cmd = redis::cmd("LEASE.RELEASE");
    cmd.arg(lease_id).arg(token);
    cmd
}

/// `LEASE.GET run [now]`.
pub fn get_cmd(run: &[u8], now: Option<f64>) -> Cmd {
    let mut cmd = redis::cmd("LEASE.GET");
    cmd.arg(run);
    if let Some(now) = now {
        cmd.arg(now);
    }
    cmd
}

/// `CONFIG SET name value [name value ...]`.
pub fn config_set_cmd(pairs: &[(&str, &str)]) -> Cmd {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("SET");
    for (name, value) in pairs {
        cmd.arg(*name).arg(*value);
    }
    cmd
}

// ---------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------

/// A lease map, checking its keys, their order and the value types; `None`
/// for null.
pub fn lease_or_null(value: &Value) -> Option<Lease> {
    match value {
        Value::Nil => None,
        value => Some(lease_reply(value)),
    }
}

/// Reads a lease map, checking its keys, their order and the value types.
pub fn lease_reply(value: &Value) -> Lease {
    let pairs: Vec<(&Value, &Value)> = match value {
        Value::Array(items) if items.len() % 2 == 0 => {
            items.chunks(2).map(|pair| (&pair[0], &pair[1])).collect()
        }
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        other => panic!("not a lease map: {other:?}"),
    };
    let bulk = |value: &Value| match value {
        Value::BulkString(bytes) => bytes.clone(),
        other => panic!("expected a bulk string, got {other:?}"),
    };
    let int = |value: &Value| match value {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    };
    let keys: Vec<Vec<u8>> = pairs.iter().map(|(k, _)| bulk(k)).collect();
    let mut expected_keys = vec![
        &b"run_id"[..],
        b"worker_id",
        b"lease_id",
        b"fencing_token",
        b"expires_at",
    ];
    if pairs.len() == 6 {
        expected_keys.push(b"expired");
    }
    assert_eq!(keys, expected_keys, "lease map keys in {value:?}");
    let expires_at = match (value, pairs[4].1) {
        (Value::Map(_), Value::Double(d)) => *d,
        (Value::Array(_), Value::BulkString(text)) => std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("expires_at is not a number: {text:?}")),
        (_, other) => panic!("expires_at of the wrong type: {other:?}"),
    };
    let lease = Lease {
        run_id: bulk(pairs[0].1),
        worker_id: bulk(pairs[1].1),
        lease_id: bulk(pairs[2].1),
        fencing_token: int(pairs[3].1),
        expires_at,
        expired: pairs.get(5).map(|(_, v)| int(v)),
    };
    // The lease id is built from the run, the worker and the token.
    let mut id = [&lease.run_id[..], b":", &lease.worker_id, b":"].concat();
    id.extend_from_slice(lease.fencing_token.to_string().as_bytes());
    assert_eq!(lease.lease_id, id, "lease_id in {value:?}");
    lease
}

/// A number in INFO's fields.
#[allow(dead_code)]
pub fn info_number(info: &HashMap<String, String>, name: &str) -> u64 {
    (info.get(name).and_then(|value| value.parse().ok()))
        .unwrap_or_else(|| panic!("no number {name} in {info:?}"))
}

/// An integer 1 or 0 as a boolean.
pub fn flag(value: &Value) -> bool {
    match value {
        Value::Int(1) => true,
        Value::Int(0) => false,
        other => panic!("expected 1 or 0, got {other:?}"),
    }
}

pub fn int(value: &Value) -> i64 {
    match value {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// INFO's `field:value` lines as a map (sections and blank lines left out).
pub fn info_map(value: &Value) -> HashMap<String, String> {
    let text = match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => panic!("INFO is not text: {other:?}"),
    };
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// A map reply as key/value pairs, whichever protocol carried it.
pub fn pairs(value: Value) -> Vec<(Value, Value)> {
    match value {
        Value::Map(pairs) => pairs,
        Value::Array(items) => items
            .chunks(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect(),
        other => panic!("not a map: {other:?}"),
    }
}

/// The value under `key` in a map reply's pairs.
pub fn field(pairs: &[(Value, Value)], key: &str) -> Value {
    pairs
        .iter()
        .find(|(k, _)| *k == bulk_value(key))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {key} in {pairs:?}"))
}

/// A bulk string value, as the `redis` crate reports one.
pub fn bulk_value(text: &str) -> Value {
    Value::BulkString(text.as_bytes().to_vec())
}

/// A reply that is text (a bulk, verbatim or simple string) as a string.
#[allow(dead_code)]
pub fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).expect("UTF-8"),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::SimpleString(text) => text.clone(),
        other => panic!("not text: {other:?}"),
    }
}

/// A simple string (status) value, such as `+PONG`.
pub fn status(text: &str) -> Value {
    Value::SimpleString(text.to_owned())
}

/// `CONFIG GET name`'s value, for a name without glob characters: the
/// reply must be that one pair.
fn config_value(value: Value, name: &str) -> String {
    let pairs = pairs(value);
    assert_eq!(pairs.len(), 1, "CONFIG GET {name} answered {pairs:?}");
    match field(&pairs, name) {
        Value::BulkString(bytes) => String::from_utf8(bytes).expect("UTF-8"),
        other => panic!("{name} is {other:?}"),
    }
}

/// The whole error line of a failed command, code included.
pub fn error_line(error: &redis::RedisError) -> String {
    format!(
        "{} {}",
        error.code().unwrap_or("?"),
        error.detail().unwrap_or("")
    )
}

// ---------------------------------------------------------------------
// The blocking client
// ---------------------------------------------------------------------

/// Runs a command given as words and returns the raw reply.
pub fn run(con: &mut dyn redis::ConnectionLike, words_: &[&str]) -> Value {
    words(words_)
        .query(con)
        .unwrap_or_else(|e| panic!("{words_:?} failed: {e}"))
}

/// Runs a command that must fail; returns the whole error line.
pub fn error(con: &mut dyn redis::ConnectionLike, words_: &[&str]) -> String {
    match words(words_).query::<Value>(con) {
        Err(e) => error_line(&e),
        Ok(value) => panic!("{words_:?} should fail, got {value:?}"),
    }
}

/// `LEASE.ACQUIRE run worker now`: the fencing token, or None when the
/// run is held.
#[allow(dead_code)]
pub fn acquire(
    con: &mut dyn redis::ConnectionLike,
    run: &str,
    worker: &str,
    now: f64,
) -> Option<i64> {
    let reply: Value = acquire_cmd(run, worker, Some(now), None)
        .query(con)
        .expect("LEASE.ACQUIRE");
    lease_or_null(&reply).map(|lease| lease.fencing_token)
}

/// A typed client over a blocking connection.
pub struct Client {
    pub con: redis::Connection,
}

#[allow(dead_code)]
impl Client {
    pub fn new(con: redis::Connection) -> Client {
        Client { con }
    }

    fn query(&mut self, cmd: &Cmd) -> Value {
        cmd.query(&mut self.con)
            .unwrap_or_else(|e| panic!("{:?} failed: {e}", cmd.args_iter().collect::<Vec<_>>()))
    }

    pub fn run(&mut self, words_: &[&str]) -> Value {
        run(&mut self.con, words_)
    }

    /// PING, which must answer PONG.
    pub fn ping(&mut self) {
        assert_eq!(self.run(&["PING"]), status("PONG"));
    }

    pub fn error(&mut self, words_: &[&str]) -> String {
        error(&mut self.con, words_)
    }

    pub fn acquire(
        &mut self,
        run: &str,
        worker: &str,
        now: Option<f64>,
        ttl: Option<f64>,
    ) -> Option<Lease> {
        lease_or_null(&self.query(&acquire_cmd(run, worker, now, ttl)))
    }

    pub fn heartbeat(&mut self, lease: &Lease, now: Option<f64>) -> bool {
        flag(&self.query(&heartbeat_cmd(&lease.lease_id, lease.fencing_token, now)))
    }

    pub fn validate(&mut self, run: &str, lease: &Lease, now: Option<f64>) -> bool {
        let cmd = validate_cmd(run, &lease.lease_id, lease.fencing_token, now);
        flag(&self.query(&cmd))
    }

    pub fn release(&mut self, lease: &Lease) -> bool {
        flag(&self.query(&release_cmd(&lease.lease_id, lease.fencing_token)))
    }

    /// `LEASE.GET`; the run as text or bytes.
    pub fn get(&mut self, run: impl AsRef<[u8]>, now: Option<f64>) -> Option<Lease> {
        lease_or_null(&self.query(&get_cmd(run.as_ref(), now)))
    }

    pub fn dbsize(&mut self) -> i64 {
        int(&self.run(&["DBSIZE"]))
    }

    pub fn info(&mut self, section: &str) -> HashMap<String, String> {
        info_map(&self.run(&["INFO", section]))
    }

    pub fn config_get(&mut self, name: &str) -> String {
        config_value(self.run(&["CONFIG", "GET", name]), name)
    }

    /// `CONFIG SET`: `Err` with the error line when it is refused.
    pub fn config_set(&mut self, pairs: &[(&str, &str)]) -> Result<(), String> {
        match config_set_cmd(pairs).query::<Value>(&mut self.con) {
            Ok(Value::Okay) => Ok(()),
            Ok(other) => panic!("CONFIG SET answered {other:?}"),
            Err(error) => Err(error_line(&error)),
        }
    }
}

/// The typed client is a connection too: `redis::cmd(..).query(&mut con)`
/// and pipelines work on it, for what it has no method for.
impl redis::ConnectionLike for Client {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<Value> {
        self.con.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<Value>> {
        self.con.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.con.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.con.check_connection()
    }

    fn is_open(&self) -> bool {
        self.con.is_open()
    }
}

// ---------------------------------------------------------------------
// The async client
// ---------------------------------------------------------------------

/// A typed client over a multiplexed async connection. Its replies have no
/// timeout, so paused time in the test never fails a command, and each
/// command is answered at one instant of tokio's clock
/// ([`at_one_instant`]).
#[derive(Clone)]
pub struct AsyncClient {
    pub con: redis::aio::MultiplexedConnection,
}

#[allow(dead_code)]
impl AsyncClient {
    /// Connects to `url` (`redis://127.0.0.1:PORT/`, with
    /// `?protocol=resp3` for RESP3).
    pub async fn connect(url: &str) -> AsyncClient {
        let client = redis::Client::open(url).expect("a valid URL");
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(None);
        let connected = client.get_multiplexed_async_connection_with_config(&config);
        let con = at_one_instant(connected).await.expect("connect");
        AsyncClient { con }
    }

    async fn query(&mut self, cmd: &Cmd) -> Value {
        at_one_instant(cmd.query_async(&mut self.con))
            .await
            .unwrap_or_else(|e| panic!("{:?} failed: {e}", cmd.args_iter().collect::<Vec<_>>()))
    }

    pub async fn run(&mut self, words_: &[&str]) -> Value {
        self.query(&words(words_)).await
    }

    /// PING, which must answer PONG.
    pub async fn ping(&mut self) {
        assert_eq!(self.run(&["PING"]).await, status("PONG"));
    }

    /// Runs a command that must fail; returns the whole error line.
    pub async fn error(&mut self, words_: &[&str]) -> String {
        let cmd = words(words_);
        match at_one_instant(cmd.query_async::<Value>(&mut self.con)).await {
            Err(e) => error_line(&e),
            Ok(value) => panic!("{words_:?} should fail, got {value:?}"),
        }
    }

    pub async fn acquire(
        &mut self,
        run: &str,
        worker: &str,
        now: Option<f64>,
        ttl: Option<f64>,
    ) -> Option<Lease> {
        lease_or_null(&self.query(&acquire_cmd(run, worker, now, ttl)).await)
    }

    pub async fn heartbeat(&mut self, lease: &Lease, now: Option<f64>) -> bool {
        let cmd = heartbeat_cmd(&lease.lease_id, lease.fencing_token, now);
        flag(&self.query(&cmd).await)
    }

    pub async fn validate(&mut self, run: &str, lease: &Lease, now: Option<f64>) -> bool {
        let cmd = validate_cmd(run, &lease.lease_id, lease.fencing_token, now);
        flag(&self.query(&cmd).await)
    }

    pub async fn release(&mut self, lease: &Lease) -> bool {
        let cmd = release_cmd(&lease.lease_id, lease.fencing_token);
        flag(&self.query(&cmd).await)
    }

    /// `LEASE.GET`; the run as text or bytes.
    pub async fn get(&mut self, run: impl AsRef<[u8]>, now: Option<f64>) -> Option<Lease> {
        lease_or_null(&self.query(&get_cmd(run.as_ref(), now)).await)
    }

    pub async fn dbsize(&mut self) -> i64 {
        int(&self.run(&["DBSIZE"]).await)
    }

    pub async fn info(&mut self, section: &str) -> HashMap<String, String> {
        info_map(&self.run(&["INFO", section]).await)
    }

    pub async fn config_get(&mut self, name: &str) -> String {
        config_value(self.run(&["CONFIG", "GET", name]).await, name)
    }

    /// `CONFIG SET`: `Err` with the error line when it is refused.
    pub async fn config_set(&mut self, pairs: &[(&str, &str)]) -> Result<(), String> {
        let cmd = config_set_cmd(pairs);
        match at_one_instant(cmd.query_async::<Value>(&mut self.con)).await {
            Ok(Value::Okay) => Ok(()),
            Ok(other) => panic!("CONFIG SET answered {other:?}"),
            Err(error) => Err(error_line(&error)),
        }
    }
}
