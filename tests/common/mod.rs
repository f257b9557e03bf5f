//! Starts the real `leased` binary on a free port with its own data
//! directory, for tests that drive it over TCP like any client would.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const BINARY: &str = env!("CARGO_BIN_EXE_leased");

/// A running server. Killed (SIGKILL) when dropped if still running.
pub struct Server {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
    log: Arc<Mutex<String>>,
    /// Keeps the temporary data directory alive, when the test made none.
    _temp: Option<tempfile::TempDir>,
}

impl Server {
    /// A server with a fresh data directory and default settings.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// A server with a fresh data directory and extra `--directive value` arguments.
    pub fn start_with(args: &[&str]) -> Server {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().join("data");
        let mut server = Server::start_in(&dir, args).expect("server starts");
        server._temp = Some(temp);
        server
    }

    /// A server on `dir` (kept by the caller, so a restart can reuse it).
    /// Returns the server's output if it exits instead of becoming ready.
    pub fn start_in(dir: &Path, args: &[&str]) -> Result<Server, String> {
        let mut command = Command::new(BINARY);
        command
            .args(["--port", "0", "--dir"])
            .arg(dir)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Server::spawn(command, dir)
    }

    /// Spawns `command` (which must start leased) and waits for readiness.
    pub fn spawn(command: Command, dir: &Path) -> Result<Server, String> {
        let (ready_tx, ready_rx) = mpsc::channel();
        Server::spawn_until(command, dir, Some(ready_tx), "ready", || {
            ready_rx.recv_timeout(Duration::from_millis(20)).ok()
        })
    }

    /// Spawns `command` (which must start leased listening on `port`) and
    /// waits until `port` accepts connections, for servers whose log level
    /// hides the readiness line. Returns the output if it exits first.
    pub fn spawn_on_port(command: Command, dir: &Path, port: u16) -> Result<Server, String> {
        Server::spawn_until(command, dir, None, "listening", || {
            std::thread::sleep(Duration::from_millis(20));
            TcpStream::connect(("127.0.0.1", port)).ok().map(|_| port)
        })
    }

    /// Spawns leased and polls `ready` for its port until it answers, the
    /// process exits, or 20 seconds pass.
    fn spawn_until(
        mut command: Command,
        dir: &Path,
        ready_line: Option<mpsc::Sender<u16>>,
        waiting_for: &str,
        mut ready: impl FnMut() -> Option<u16>,
    ) -> Result<Server, String> {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn leased");
        let log = Arc::new(Mutex::new(String::new()));
        collect_output(child.stdout.take().unwrap(), log.clone(), ready_line);
        collect_output(child.stderr.take().unwrap(), log.clone(), None);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(port) = ready() {
                return Ok(Server {
                    child,
                    port,
                    dir: dir.to_path_buf(),
                    log,
                    _temp: None,
                });
            }
            if let Ok(Some(status)) = child.try_wait() {
                std::thread::sleep(Duration::from_millis(100));
                let output = log.lock().unwrap().clone();
                return Err(format!(
                    "leased exited with {status} before {waiting_for}:\n{output}"
                ));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let output = log.lock().unwrap().clone();
                return Err(format!("leased not {waiting_for} after 20s:\n{output}"));
            }
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn url_resp3(&self) -> String {
        format!("redis://127.0.0.1:{}/?protocol=resp3", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    pub fn client_resp3(&self) -> redis::Client {
        redis::Client::open(self.url_resp3()).unwrap()
    }

    /// A blocking RESP2 connection.
    pub fn connect(&self) -> redis::Connection {
        self.client().get_connection().expect("connect")
    }

    /// A blocking RESP3 connection.
    pub fn connect_resp3(&self) -> redis::Connection {
        self.client_resp3().get_connection().expect("connect resp3")
    }

    /// A raw TCP socket to the server.
    pub fn raw(&self) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("tcp connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
    }

    /// Everything the server printed so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. "TERM", "INT", "KILL") to the server.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits for the server to exit, at most `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // Let the output threads catch the last lines.
                std::thread::sleep(Duration::from_millis(50));
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("leased did not exit within {timeout:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// kill -9, and wait for the process to be gone.
    pub fn kill9(&mut self) {
        self.signal("KILL");
        self.wait(Duration::from_secs(10));
    }

    /// SIGTERM, expecting a clean exit with code 0.
    pub fn stop(&mut self) {
        self.signal("TERM");
        let status = self.wait(Duration::from_secs(10));
        assert!(status.success(), "exit status {status}:\n{}", self.log());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Copies a stream of the server's output into `log`; the first readiness
/// line's port goes to `ready`.
fn collect_output(
    stream: impl Read + Send + 'static,
    log: Arc<Mutex<String>>,
    ready: Option<mpsc::Sender<u16>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut ready = ready;
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            // Into the log first, so a test woken by readiness sees the line.
            {
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
            if let Some(port) = ready_port(&line)
                && let Some(tx) = ready.take()
            {
                let _ = tx.send(port);
            }
        }
    })
}

/// The port in `Ready to accept connections on 127.0.0.1:PORT`, whichever
/// the log format.
fn ready_port(line: &str) -> Option<u16> {
    let message = log_message(line);
    let rest = message.split("Ready to accept connections on ").nth(1)?;
    let first = rest.split(',').next()?.trim();
    first.rsplit(':').next()?.parse().ok()
}

/// A log line's message: the `message` of a JSON line (`logformat json`),
/// the whole line otherwise.
pub fn log_message(line: &str) -> String {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|json| Some(json.get("message")?.as_str()?.to_owned()))
        .unwrap_or_else(|| line.to_owned())
}

/// Sends raw bytes and reads until `expected` bytes have arrived (or the
/// read times out), returning what came back.
pub fn exchange(stream: &mut TcpStream, request: &[u8], expected: usize) -> Vec<u8> {
    stream.write_all(request).unwrap();
    read_at_least(stream, expected)
}

pub fn read_at_least(stream: &mut TcpStream, expected: usize) -> Vec<u8> {
    let mut reply = Vec::new();
    let mut chunk = [0u8; 65536];
    while reply.len() < expected {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
            Err(_) => break,
        }
    }
    reply
}

/// A request in RESP multibulk form.
pub fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one complete RESP2 or RESP3 reply and returns its bytes exactly as
/// they arrived. Fails on end of stream, a timeout, or bytes that do not
/// frame as a reply.
pub fn read_frame(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut frame = Vec::new();
    read_frame_into(reader, &mut frame)?;
    Ok(frame)
}

fn read_frame_into(reader: &mut impl BufRead, frame: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    let start = frame.len();
    if reader.read_until(b'\n', frame)? == 0 {
        return Err(Error::new(ErrorKind::UnexpectedEof, "stream ended"));
    }
    let line = &frame[start..];
    let bad = |what: &str| {
        Error::new(
            ErrorKind::InvalidData,
            format!("{what}: {:?}", line.escape_ascii().to_string()),
        )
    };
    let Some(header) = line.strip_suffix(b"\r\n") else {
        return Err(bad("line without CRLF"));
    };
    let kind = header[0];
    let number = || -> std::io::Result<i64> {
        std::str::from_utf8(&header[1..])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("bad length"))
    };
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(()),
        b'$' | b'=' | b'!' => {
            let Ok(len) = usize::try_from(number()?) else {
                return Ok(()); // $-1
            };
            let data = frame.len();
            frame.resize(data + len + 2, 0);
            reader.read_exact(&mut frame[data..])?;
            if !frame.ends_with(b"\r\n") {
                return Err(Error::new(ErrorKind::InvalidData, "bulk without CRLF"));
            }
            Ok(())
        }
        b'*' | b'~' | b'>' | b'%' => {
            let Ok(count) = usize::try_from(number()?) else {
                return Ok(()); // *-1
            };
            let items = if kind == b'%' { 2 * count } else { count };
            for _ in 0..items {
                read_frame_into(reader, frame)?;
            }
            Ok(())
        }
        _ => Err(bad("unknown reply type")),
    }
}

/// Reads until the server closes the connection, failing if it has not
/// within the socket's read timeout.
pub fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    match stream.read_to_end(&mut all) {
        Ok(_) => all,
        Err(error) => panic!(
            "connection not closed ({error}); received so far: {:?}",
            all.escape_ascii().to_string()
        ),
    }
}

/// Bytes shown readably in assertion messages.
pub fn show(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// A lease map as the `redis` crate hands it over, in RESP2 (a flat array,
/// `expires_at` a bulk string) or RESP3 (a map, `expires_at` a double).
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseReply {
    pub run_id: Vec<u8>,
    pub worker_id: Vec<u8>,
    pub lease_id: Vec<u8>,
    pub fencing_token: i64,
    pub expires_at: f64,
    /// Present in `LEASE.GET` replies only.
    pub expired: Option<i64>,
}

/// Reads a lease map, checking its keys, their order and the value types.
pub fn lease_reply(value: &redis::Value) -> LeaseReply {
    use redis::Value;
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
    LeaseReply {
        run_id: bulk(pairs[0].1),
        worker_id: bulk(pairs[1].1),
        lease_id: bulk(pairs[2].1),
        fencing_token: int(pairs[3].1),
        expires_at,
        expired: pairs.get(5).map(|(_, v)| int(v)),
    }
}

/// A bulk string value, as the `redis` crate reports one.
pub fn bulk_value(text: &str) -> redis::Value {
    redis::Value::BulkString(text.as_bytes().to_vec())
}

fn command_of(words: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(words[0]);
    for word in &words[1..] {
        cmd.arg(*word);
    }
    cmd
}

/// Runs a command given as words and returns the raw reply.
pub fn run(con: &mut redis::Connection, words: &[&str]) -> redis::Value {
    command_of(words)
        .query(con)
        .unwrap_or_else(|e| panic!("{words:?} failed: {e}"))
}

/// Runs a command that must fail; returns the whole error line.
pub fn error(con: &mut redis::Connection, words: &[&str]) -> String {
    match command_of(words).query::<redis::Value>(con) {
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
        Ok(value) => panic!("{words:?} should fail, got {value:?}"),
    }
}

/// A map reply as key/value pairs, whichever protocol carried it.
pub fn pairs(value: redis::Value) -> Vec<(redis::Value, redis::Value)> {
    match value {
        redis::Value::Map(pairs) => pairs,
        redis::Value::Array(items) => items
            .chunks(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect(),
        other => panic!("not a map: {other:?}"),
    }
}

/// The value under `key` in a map reply's pairs.
pub fn field(pairs: &[(redis::Value, redis::Value)], key: &str) -> redis::Value {
    pairs
        .iter()
        .find(|(k, _)| *k == bulk_value(key))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {key} in {pairs:?}"))
}
/// How a run of leased that was expected to end by itself ended.
#[derive(Debug)]
pub struct Exited {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Exited {
    /// Standard output and standard error together, for messages.
    pub fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs leased with `args` until it exits by itself. Panics, after killing
/// it, if it is still running after 20 s (for example because it started
/// serving when it should have refused to).
pub fn run_to_exit(args: &[&str]) -> Exited {
    let mut command = Command::new(BINARY);
    command.args(args);
    run_command_to_exit(command)
}

/// [`run_to_exit`] for a prepared command (to set a working directory).
pub fn run_command_to_exit(mut command: Command) -> Exited {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn leased");
    let stdout = Arc::new(Mutex::new(String::new()));
    let stderr = Arc::new(Mutex::new(String::new()));
    let readers = [
        collect_output(child.stdout.take().unwrap(), stdout.clone(), None),
        collect_output(child.stderr.take().unwrap(), stderr.clone(), None),
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "leased {:?} was still running after 20s:\n{}{}",
                command.get_args().collect::<Vec<_>>(),
                stdout.lock().unwrap(),
                stderr.lock().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    for reader in readers {
        reader.join().expect("output reader");
    }
    let stdout = stdout.lock().unwrap().clone();
    let stderr = stderr.lock().unwrap().clone();
    Exited {
        status,
        stdout,
        stderr,
    }
}

/// A port that was free a moment ago (bound and released at once), for
/// tests that must choose the port themselves.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind a free port")
        .port()
}

/// `LEASE.ACQUIRE run worker now`: the fencing token, or None when the
/// run is held.
pub fn acquire(con: &mut redis::Connection, run: &str, worker: &str, now: f64) -> Option<i64> {
    let reply: redis::Value = redis::cmd("LEASE.ACQUIRE")
        .arg(run)
        .arg(worker)
        .arg(now)
        .query(con)
        .expect("LEASE.ACQUIRE");
    lease_field(&reply, "fencing_token").map(|token| match token {
        redis::Value::Int(token) => *token,
        other => panic!("fencing_token is not an integer: {other:?}"),
    })
}

/// A field of a lease map (RESP2 flat array or RESP3 map); None for null.
pub fn lease_field<'a>(reply: &'a redis::Value, name: &str) -> Option<&'a redis::Value> {
    use redis::Value;
    let is_name = |key: &Value| match key {
        Value::BulkString(key) => key == name.as_bytes(),
        Value::SimpleString(key) => key == name,
        _ => false,
    };
    match reply {
        Value::Nil => None,
        Value::Array(items) => {
            let pairs = items.chunks(2);
            let found = pairs.into_iter().find(|pair| is_name(&pair[0]));
            Some(&found.unwrap_or_else(|| panic!("no {name} in {reply:?}"))[1])
        }
        Value::Map(pairs) => {
            let found = pairs.iter().find(|(key, _)| is_name(key));
            Some(&found.unwrap_or_else(|| panic!("no {name} in {reply:?}")).1)
        }
        other => panic!("not a lease map: {other:?}"),
    }
}
