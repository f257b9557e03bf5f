//! What the client's tests share: the real server, run inside the test
//! process on a free port with a fresh data directory; a watcher of every
//! command the server runs (MONITOR); a TCP proxy that can be cut; and a
//! plain connection to look at the server's state.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leased::ceiling::DataDir;
use leased::config::Config;
use leased::server;
use leased::state::Clock;

/// The leased server, on the system's clock, in a runtime of its own on a
/// thread of its own: the test's runtime (or its blocked thread) does not
/// hold it up. [`Server::kill`] shuts that runtime down at once, which
/// closes every connection as a killed process's would.
pub struct Server {
    pub port: u16,
    /// Tells the server's thread to drop its runtime.
    kill: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// A server with extra `--directive value` arguments.
    pub fn start_with(args: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        let all = ["leased", "--port", "0", "--dir", data.to_str().unwrap()]
            .into_iter()
            .chain(args.iter().copied());
        let config = Config::from_args(all).expect("config");
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let (kill, killed) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("the server's runtime");
            runtime.block_on(async {
                let data_dir = DataDir::open(&config.dir).expect("data dir");
                let listeners = server::bind(&config).await.expect("bind");
                let port = listeners.plain[0].local_addr().unwrap().port();
                let forever = std::future::pending::<()>();
                tokio::spawn(server::run(
                    config,
                    listeners,
                    data_dir,
                    Clock::System,
                    forever,
                ));
                port_tx.send(port).unwrap();
            });
            let _ = killed.recv();
            runtime.shutdown_background();
        });
        let port = port_rx.recv().expect("the server started");
        Server {
            port,
            kill: Some(kill),
            thread: Some(thread),
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Stops the server at once: its tasks dropped, its sockets closed.
    pub fn kill(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }

    /// A plain blocking connection, to look.
    pub fn connect(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .expect("connect")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One command the server ran, as MONITOR showed it, with when it arrived
/// here since the watch started.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Duration,
    pub args: Vec<String>,
}

impl Seen {
    pub fn name(&self) -> &str {
        self.args.first().map_or("", String::as_str)
    }
}

/// Every command the server runs, from a MONITOR connection read by a
/// thread of its own.
pub struct Monitor {
    started: Instant,
    seen: Arc<Mutex<Vec<Seen>>>,
    stream: TcpStream,
}

impl Monitor {
    pub fn start(server: &Server) -> Monitor {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port)).expect("monitor");
        stream.write_all(b"MONITOR\r\n").unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut ok = String::new();
        reader.read_line(&mut ok).unwrap();
        assert_eq!(ok, "+OK\r\n");
        let started = Instant::now();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { return };
                let args = monitor_args(&line);
                log.lock().unwrap().push(Seen {
                    at: started.elapsed(),
                    args,
                });
            }
        });
        Monitor {
            started,
            seen,
            stream,
        }
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// The arguments of a MONITOR line: `+secs.micros [0 addr] "a" "b" ...`,
/// each argument quoted with Redis's escapes (kept as they are here).
fn monitor_args(line: &str) -> Vec<String> {
    let Some((_, quoted)) = line.split_once("] ") else {
        return Vec::new();
    };
    let mut args = Vec::new();
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(escaped) = chars.next() {
                        arg.push(escaped);
                    }
                }
                '"' => break,
                c => arg.push(c),
            }
        }
        args.push(arg);
    }
    args
}

/// A TCP proxy on a free port to `target`. [`Proxy::cut`] closes every
/// connection through it and from then on accepts new ones but forwards
/// nothing: a network that drops everything.
pub struct Proxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let streams = Arc::new(Mutex::new(Vec::new()));
        let (is_cut, open) = (cut.clone(), streams.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                // Accepted and kept, never forwarded: a black hole.
                open.lock().unwrap().push(client.try_clone().unwrap());
                if is_cut.load(Ordering::SeqCst) {
                    continue;
                }
                let Ok(upstream) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                open.lock().unwrap().push(upstream.try_clone().unwrap());
                pipe(client.try_clone().unwrap(), upstream.try_clone().unwrap());
                pipe(upstream, client);
            }
        });
        Proxy { port, cut, streams }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for stream in self.streams.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buffer = [0u8; 16384];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buffer[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

/// Polls `ready` every 10 ms until it is Some, for at most `patience`.
pub fn eventually<T>(patience: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(value) = ready() {
            return Some(value);
        }
        if start.elapsed() > patience {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `LEASE.GET run`'s token, if the run has a lease.
pub fn current_token(con: &mut redis::Connection, run: &str) -> Option<i64> {
    let reply: redis::Value = redis::cmd("LEASE.GET").arg(run).query(con).unwrap();
    let redis::Value::Array(items) = reply else {
        return None;
    };
    let at = items
        .iter()
        .position(|item| *item == redis::Value::BulkString(b"fencing_token".to_vec()))?;
    match items[at + 1] {
        redis::Value::Int(token) => Some(token),
        _ => None,
    }
}
