//! The real `leased` binary, spawned on a free port with its own data
//! directory: for tests of the process itself (start-up, signals, crashes,
//! restarts, logs) and of other programs driving it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::client::{Client, info_number};

pub const BINARY: &str = env!("CARGO_BIN_EXE_leased");

/// A running server. Killed (SIGKILL) when dropped if still running.
pub struct Server {
    child: Child,
    pub port: u16,
    #[allow(dead_code)]
    pub dir: PathBuf,
    log: Arc<Mutex<String>>,
    /// The threads copying its output into `log`; they end when it exits.
    readers: Vec<std::thread::JoinHandle<()>>,
    /// Keeps the temporary data directory alive, when the test made none.
    _temp: Option<tempfile::TempDir>,
}

#[allow(dead_code)]
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

    /// Spawns `command` (which must start leased) and waits for readiness:
    /// woken by the readiness line, and every 20 ms to see whether the
    /// process exited instead.
    pub fn spawn(command: Command, dir: &Path) -> Result<Server, String> {
        let (ready_tx, ready_rx) = mpsc::channel();
        Server::spawn_until(command, dir, Some(ready_tx), "ready", || {
            ready_rx.recv_timeout(Duration::from_millis(20)).ok()
        })
    }

    /// Spawns `command` (which must start leased listening on `port`) and
    /// waits until `port` accepts connections, for servers whose log level
    /// hides the readiness line. Returns the output if it exits first. A
    /// bounded poll, every 5 ms: nothing else says the port is open.
    pub fn spawn_on_port(command: Command, dir: &Path, port: u16) -> Result<Server, String> {
        Server::spawn_until(command, dir, None, "listening", || {
            std::thread::sleep(Duration::from_millis(5));
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
        let readers = vec![
            collect_output(child.stdout.take().unwrap(), log.clone(), ready_line),
            collect_output(child.stderr.take().unwrap(), log.clone(), None),
        ];
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(port) = ready() {
                return Ok(Server {
                    child,
                    port,
                    dir: dir.to_path_buf(),
                    log,
                    readers,
                    _temp: None,
                });
            }
            if let Ok(Some(status)) = child.try_wait() {
                join_all(readers);
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

    /// The typed client over a blocking RESP2 connection.
    pub fn typed(&self) -> Client {
        Client::new(self.connect())
    }

    /// The typed client over a blocking RESP3 connection.
    pub fn typed_resp3(&self) -> Client {
        Client::new(self.connect_resp3())
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
    /// Its `CLUSTER INFO`, if it answers within a second.
    pub fn cluster_info(&self) -> Option<HashMap<String, String>> {
        let mut con = (self.client())
            .get_connection_with_timeout(Duration::from_secs(1))
            .ok()?;
        let info: redis::Value = redis::cmd("CLUSTER").arg("INFO").query(&mut con).ok()?;
        Some(super::client::info_map(&info))
    }

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

    /// Waits for the server to exit, at most `timeout`, and for its last
    /// lines of output.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let Some(status) = wait_for_exit(&mut self.child, timeout) else {
            let _ = self.child.kill();
            panic!("leased did not exit within {timeout:?}:\n{}", self.log());
        };
        // The output threads end at the end of the pipes: every line is in.
        join_all(std::mem::take(&mut self.readers));
        status
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

/// How a run of leased that was expected to end by itself ended.
#[derive(Debug)]
pub struct Exited {
    #[allow(dead_code)]
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

#[allow(dead_code)]
impl Exited {
    /// Standard output and standard error together, for messages.
    pub fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs leased with `args` until it exits by itself. Panics, after killing
/// it, if it is still running after 20 s (for example because it started
/// serving when it should have refused to).
#[allow(dead_code)]
pub fn run_to_exit(args: &[&str]) -> Exited {
    let mut command = Command::new(BINARY);
    command.args(args);
    run_command_to_exit(command)
}

/// [`run_to_exit`] for a prepared command (to set a working directory).
#[allow(dead_code)]
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
    let Some(status) = wait_for_exit(&mut child, Duration::from_secs(20)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "leased {:?} was still running after 20s:\n{}{}",
            command.get_args().collect::<Vec<_>>(),
            stdout.lock().unwrap(),
            stderr.lock().unwrap()
        );
    };
    join_all(readers.into());
    let stdout = stdout.lock().unwrap().clone();
    let stderr = stderr.lock().unwrap().clone();
    Exited {
        status,
        stdout,
        stderr,
    }
}

/// A data directory in a new temporary directory, for servers started on
/// it one after another; it is removed when the `TempDir` is dropped.
#[allow(dead_code)]
pub fn data_dir() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = temp.path().join("data");
    (temp, dir)
}

/// Polls `ready` every 5 ms until it gives a value, for what a spawned
/// server does that no reply announces (a background step finished, a
/// closed connection noticed, a line logged); `Err` says what it sees
/// instead, for the failure after `patience`.
#[allow(dead_code)]
pub fn wait_until<T>(patience: Duration, mut ready: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + patience;
    loop {
        match ready() {
            Ok(value) => return value,
            Err(seen) => assert!(Instant::now() < deadline, "after {patience:?}: {seen}"),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The server's clock as a spawned server reads it: seconds since the
/// epoch.
#[allow(dead_code)]
pub fn clock() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Waits up to 30 s for `rewrites` rewrites (BGREWRITEAOF) to have
/// finished; `INFO persistence` then.
#[allow(dead_code)]
pub fn wait_for_rewrites(con: &mut Client, rewrites: u64) -> HashMap<String, String> {
    wait_until(Duration::from_secs(30), || {
        let info = con.info("persistence");
        if info["aof_rewrite_in_progress"] == "0" && info_number(&info, "aof_rewrites") >= rewrites
        {
            return Ok(info);
        }
        Err(format!("rewrite not done: {info:?}"))
    })
}

/// Waits up to `timeout` for `child` to exit. A bounded poll: nothing
/// wakes a thread when a child exits, so it looks every 2 ms.
fn wait_for_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits for output threads to reach the end of their pipes.
fn join_all(readers: Vec<std::thread::JoinHandle<()>>) {
    for reader in readers {
        reader.join().expect("output reader");
    }
}

/// A port that was free a moment ago (bound and released at once), for
/// tests that must choose the port themselves.
#[allow(dead_code)]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind a free port")
        .port()
}

/// The command that starts node `id` of a cluster on `dir`, its client
/// port `port`, with `nodes` as its `cluster-nodes`; more arguments may
/// follow.
#[allow(dead_code)]
pub fn cluster_node(dir: &Path, id: u64, port: u16, nodes: &str) -> Command {
    let mut command = Command::new(BINARY);
    command
        .args(["--port", &port.to_string(), "--dir"])
        .arg(dir)
        .args([
            "--cluster-enabled",
            "yes",
            "--cluster-node-id",
            &id.to_string(),
        ])
        .args(["--cluster-nodes", nodes]);
    command
}
