//! The workers of README's "A worker" (examples/worker.py with the leased
//! package of clients/python, examples/worker.rs with the `redis` crate),
//! run as a user runs them, against the real server and one real SQLite
//! file.
//!
//! Every scenario runs with the Rust worker, which needs only the Rust
//! toolchain and the worker built: `cargo test` builds it; alone, `cargo
//! build --example worker && cargo test --test examples`. The tests that
//! start the Python worker need `python3` with redis-py 5 and the leased
//! package, which examples/worker.py is built on (`pip install
//! 'redis>=5,<6' ./clients/python`), and are marked ignored, with that
//! reason; `cargo test -- --include-ignored` (which `.ci/run` runs, after
//! installing both) runs them, failing if either is missing.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::binary::{Server, wait_until};
use common::client::{bulk_value, field, int, pairs, text};

/// The workers' exit codes.
const FINISHED: i32 = 0;
const HELD: i32 = 3;
const LOST: i32 = 4;
const REJECTED: i32 = 5;

/// Long enough for anything a worker does here on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
enum Language {
    Python,
    Rust,
}

use Language::{Python, Rust};

impl Language {
    fn command(self) -> Command {
        match self {
            Python => {
                let mut command = Command::new("python3");
                command.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/worker.py"));
                command
            }
            Rust => Command::new(rust_worker()),
        }
    }

    /// A worker id that says which worker wrote a row.
    fn worker_id(self) -> &'static str {
        match self {
            Python => "worker-py",
            Rust => "worker-rs",
        }
    }
}

/// target/debug/examples/worker, next to this test's target/debug/deps/.
/// Fails when it is missing or older than its source, rather than test
/// what an earlier build left.
fn rust_worker() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let debug = exe.parent().and_then(Path::parent).expect("target dir");
    let worker = debug.join("examples").join("worker");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/worker.rs");
    let modified = |path: &Path| path.metadata().and_then(|m| m.modified()).ok();
    let built = modified(&worker);
    assert!(
        built.is_some() && built >= modified(&source),
        "{} is missing or older than examples/worker.rs: \
         build it with `cargo build --example worker` (plain `cargo test` does)",
        worker.display()
    );
    worker
}

/// A worker process (or examples/watch.py), its output collected as it
/// comes. Killed if the test ends before it does.
struct Worker {
    child: Child,
    output: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Worker {
    fn start(language: Language, server: &Server, db: &Path, args: &[&str]) -> Worker {
        let mut command = language.command();
        command
            .args(["--port", &server.port.to_string(), "--db"])
            .arg(db)
            .args(args);
        Worker::spawn(command)
    }

    fn spawn(mut command: Command) -> Worker {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        let output = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            collect(child.stdout.take().unwrap(), output.clone()),
            collect(child.stderr.take().unwrap(), output.clone()),
        ];
        Worker {
            child,
            output,
            readers,
        }
    }

    fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// Waits for a line containing `text` and returns it.
    fn line_with(&mut self, text: &str) -> String {
        self.wait_until(&format!("a line with {text:?}"), |worker| {
            worker
                .output()
                .lines()
                .find(|l| l.contains(text))
                .map(str::to_owned)
        })
    }

    /// Waits until the process is stopped (state T in /proc/PID/stat).
    fn wait_stopped(&mut self) {
        let stat = format!("/proc/{}/stat", self.child.id());
        self.wait_until("the process to be stopped", |_| {
            let stat = std::fs::read_to_string(&stat).ok()?;
            // The state follows the command name, which is in parentheses.
            let state = stat.rsplit(')').next()?.trim_start().chars().next()?;
            (state == 'T').then_some(())
        });
    }

    /// Polls `ready` every 5 ms until it gives a value (nothing wakes the
    /// test when another process writes or stops); panics, with the
    /// worker's output, if the worker exits first or PATIENCE runs out.
    fn wait_until<T>(&mut self, what: &str, mut ready: impl FnMut(&Self) -> Option<T>) -> T {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(value) = ready(self) {
                return value;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "worker exited ({status}) before {what}:\n{}",
                    self.finish_output()
                );
            }
            assert!(Instant::now() < deadline, "no {what}:\n{}", self.output());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Sends SIGCONT to a stopped worker.
    fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Sends SIGINT, as Ctrl-C at a terminal does.
    fn interrupt(&self) {
        self.signal(libc::SIGINT);
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill has no memory preconditions; the pid is our child's,
        // not yet reaped.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "signal {signal}");
    }

    /// SIGKILL, as a crash: the worker releases nothing. Waits until it is
    /// gone.
    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL the worker");
        self.child.wait().expect("reap the worker");
    }

    /// Waits for the worker to exit, polling every 5 ms; its exit code and
    /// all its output.
    fn finish(mut self) -> (i32, String) {
        let deadline = Instant::now() + PATIENCE;
        let status: ExitStatus = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "worker still running:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        let output = self.finish_output();
        let code = status
            .code()
            .unwrap_or_else(|| panic!("worker ended by a signal ({status}):\n{output}"));
        (code, output)
    }

    /// All the output of a worker that has exited.
    fn finish_output(&mut self) -> String {
        for reader in self.readers.drain(..) {
            reader.join().expect("output reader");
        }
        self.output()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn collect(
    stream: impl Read + Send + 'static,
    output: Arc<Mutex<String>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            let mut output = output.lock().unwrap();
            output.push_str(&line);
            output.push('\n');
        }
    })
}

/// Runs a worker to its end: its exit code and output.
fn run_worker(language: Language, server: &Server, db: &Path, args: &[&str]) -> (i32, String) {
    Worker::start(language, server, db, args).finish()
}

/// The lease id and token of `acquired LEASE_ID (token N)`.
fn acquired(output: &str) -> (String, i64) {
    let line = output
        .lines()
        .find_map(|l| l.strip_prefix("acquired "))
        .unwrap_or_else(|| panic!("no acquired line:\n{output}"));
    let (lease_id, token) = line.split_once(" (token ").expect("acquired line");
    let token = token.strip_suffix(')').and_then(|t| t.parse().ok());
    (
        lease_id.to_owned(),
        token.expect("token in the acquired line"),
    )
}

/// The checkpoint steps a worker reported as written, in order.
fn written_steps(output: &str) -> Vec<u32> {
    output
        .lines()
        .filter_map(|l| l.strip_prefix("wrote checkpoint "))
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect()
}

/// The `checkpoints` row of `run`: step, token, worker.
fn row(db: &Path, run: &str) -> Option<(u32, i64, String)> {
    let db = rusqlite::Connection::open(db).expect("open the database");
    let mut query = db
        .prepare("SELECT step, token, worker FROM checkpoints WHERE run = ?1")
        .expect("the checkpoints table");
    let mut rows = query
        .query_map([run], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap();
    rows.next().map(|r| r.unwrap())
}

/// The run's data, `LEASE.GETDATA run`: the checkpoint and the token that
/// wrote it.
fn data(server: &Server, run: &str) -> Option<(String, i64)> {
    match server.typed().run(&["LEASE.GETDATA", run]) {
        redis::Value::Nil => None,
        reply => {
            let fields = pairs(reply);
            Some((
                text(&field(&fields, "value")),
                int(&field(&fields, "fencing_token")),
            ))
        }
    }
}

/// The step of `resuming after checkpoint K (written with token T)`, and T.
fn resumed_after(output: &str) -> Option<(u32, i64)> {
    let line = output
        .lines()
        .find_map(|l| l.strip_prefix("resuming after checkpoint "))?;
    let (step, token) = line
        .split_once(" (written with token ")
        .expect("resuming line");
    let token = token.strip_suffix(')').expect("resuming line");
    Some((step.parse().unwrap(), token.parse().unwrap()))
}

const FRESH: &str = "no checkpoint: starting at step 0";

fn a_worker_checkpoints_every_step_and_releases(language: Language) {
    let server = Server::start();
    let temp = tempfile::tempdir().unwrap();
    let db = temp.path().join("checkpoints.db");
    let run = format!("happy-{language:?}");
    let args = [
        "--run",
        &run,
        "--ttl",
        "5",
        "--steps",
        "3",
        "--interval",
        "0.2",
    ];
    let (code, output) = run_worker(language, &server, &db, &args);
    assert_eq!(code, FINISHED, "{output}");
    let (lease_id, token) = acquired(&output);
    assert_eq!(lease_id, format!("{run}:{}:{token}", language.worker_id()));
    assert!(output.lines().any(|l| l == FRESH), "{output}");
    assert_eq!(written_steps(&output), [0, 1, 2], "{output}");
    assert!(output.contains("released=1"), "{output}");
    let expected = (2, token, language.worker_id().to_owned());
    assert_eq!(row(&db, &run), Some(expected), "{output}");
    assert_eq!(data(&server, &run), Some(("step=2".into(), token)));
    assert_eq!(server.typed().get(&run, None), None, "not released");
}

#[test]
fn the_rust_worker_checkpoints_every_step_and_releases() {
    a_worker_checkpoints_every_step_and_releases(Rust);
}

#[test]
#[ignore = "needs python3 with redis-py 5 and the leased package (pip install 'redis>=5,<6' ./clients/python); run with --include-ignored"]
fn the_python_worker_checkpoints_every_step_and_releases() {
    a_worker_checkpoints_every_step_and_releases(Python);
}

fn a_worker_does_not_write_to_a_run_held_by_another(language: Language) {
    let server = Server::start();
    let temp = tempfile::tempdir().unwrap();
    let db = temp.path().join("checkpoints.db");
    let holder = server.typed().acquire("held", "holder", None, None);
    let holder = holder.expect("acquired");
    let (code, output) = run_worker(language, &server, &db, &["--run", "held"]);
    assert_eq!(code, HELD, "{output}");
    assert!(
        output.contains("held is held by another worker"),
        "{output}"
    );
    assert_eq!(row(&db, "held"), None);
    let still = server
        .typed()
        .get("held", None)
        .map(|lease| lease.fencing_token);
    assert_eq!(still, Some(holder.fencing_token));
}

#[test]
fn the_rust_worker_does_not_write_to_a_run_held_by_another() {
    a_worker_does_not_write_to_a_run_held_by_another(Rust);
}

#[test]
#[ignore = "needs python3 with redis-py 5 and the leased package (pip install 'redis>=5,<6' ./clients/python); run with --include-ignored"]
fn the_python_worker_does_not_write_to_a_run_held_by_another() {
    a_worker_does_not_write_to_a_run_held_by_another(Python);
}

/// Worker A stops itself (SIGSTOP) just before a checkpoint, with its lease
/// valid, and its lease expires: registry time moves to A's expiry, A
/// stalled. Worker `taker` B acquires the run `WITHDATA` with a higher
/// token: it does not start over, but resumes right after A's last
/// accepted checkpoint, and checkpoints to the end. A, resumed, writes at
/// once, believing it still holds the run: the storage rejects the write,
/// and the row and the run's data stay B's.
fn a_stalled_workers_late_write_is_rejected(paused: Language, taker: Language) {
    let server = Server::start();
    let temp = tempfile::tempdir().unwrap();
    let db = temp.path().join("checkpoints.db");
    let a_args = ["--run", "run-1", "--worker", "worker-a", "--ttl", "3"];
    let a_args = [&a_args[..], &["--steps", "4", "--pause-before-write", "2"]].concat();
    let mut a = Worker::start(paused, &server, &db, &a_args);
    a.line_with("pausing before checkpoint 2");
    a.wait_stopped();
    let (_, a_token) = acquired(&a.output());
    assert_eq!(written_steps(&a.output()), [0, 1], "{}", a.output());
    assert_eq!(row(&db, "run-1"), Some((1, a_token, "worker-a".into())));
    assert_eq!(data(&server, "run-1"), Some(("step=1".into(), a_token)));
    expire(&server, "run-1", a_token);

    let b_args = [
        "--run", "run-1", "--worker", "worker-b", "--ttl", "5", "--steps", "4",
    ];
    let (code, b_output) = run_worker(taker, &server, &db, &b_args);
    assert_eq!(code, FINISHED, "{b_output}");
    let (_, b_token) = acquired(&b_output);
    assert!(b_token > a_token, "B's token {b_token}, A's {a_token}");
    assert_eq!(resumed_after(&b_output), Some((1, a_token)), "{b_output}");
    assert_eq!(written_steps(&b_output), [2, 3], "{b_output}");
    assert_eq!(row(&db, "run-1"), Some((3, b_token, "worker-b".into())));
    assert_eq!(data(&server, "run-1"), Some(("step=3".into(), b_token)));

    a.resume();
    let (code, a_output) = a.finish();
    assert_eq!(code, REJECTED, "{a_output}");
    assert!(
        a_output.contains("write rejected: checkpoint 2"),
        "{a_output}"
    );
    assert_eq!(written_steps(&a_output), [0, 1], "{a_output}");
    assert_eq!(row(&db, "run-1"), Some((3, b_token, "worker-b".into())));
    assert_eq!(data(&server, "run-1"), Some(("step=3".into(), b_token)));
}

/// Moves registry time to the expiry of the lease on `run`, which must
/// have `token`: the registry's word that it expired, without waiting.
fn expire(server: &Server, run: &str, token: i64) {
    let mut con = server.typed();
    let lease = con.get(run, None).expect("the lease");
    assert_eq!((lease.fencing_token, lease.expired), (token, Some(0)));
    let expired = con.get(run, Some(lease.expires_at));
    assert_eq!(expired, Some(lease.with_expired(true)));
}

#[test]
fn a_stalled_rust_workers_run_is_resumed_by_another_and_its_late_write_rejected() {
    a_stalled_workers_late_write_is_rejected(Rust, Rust);
}

#[test]
#[ignore = "needs python3 with redis-py 5 and the leased package (pip install 'redis>=5,<6' ./clients/python); run with --include-ignored"]
fn a_stalled_python_workers_run_is_resumed_by_another_and_its_late_write_rejected() {
    a_stalled_workers_late_write_is_rejected(Python, Python);
}

#[test]
#[ignore = "needs python3 with redis-py 5 and the leased package (pip install 'redis>=5,<6' ./clients/python); run with --include-ignored"]
fn a_stalled_python_workers_run_is_resumed_by_rust_and_its_late_write_rejected() {
    a_stalled_workers_late_write_is_rejected(Python, Rust);
}

#[test]
#[ignore = "needs python3 with redis-py 5 and the leased package (pip install 'redis>=5,<6' ./clients/python); run with --include-ignored"]
fn a_stalled_rust_workers_run_is_resumed_by_python_and_its_late_write_rejected() {
    a_stalled_workers_late_write_is_rejected(Rust, Python);
}

/// The order of a checkpoint's two writes, SQLite row first, run data
/// second. Worker A is stalled just before checkpoint 2 until its lease
/// expires; B takes the run over and stops itself (SIGSTOP) before it has
/// written anything, so the row's token is still A's. A, resumed, writes
/// checkpoint 2: the row takes it (the storage knows no newer token), but
/// `LEASE.SETDATA` is refused, for A's lease is no longer the run's, and
/// A stops as one whose heartbeat failed. The run's data still says
/// checkpoint 1; B, resumed, redoes checkpoint 2 with its higher token and
/// goes on. Every step is in the table, none skipped, the last one B's.
fn a_stalled_workers_checkpoint_past_its_lease_is_redone(language: Language) {
    let server = Server::start();
    let temp = tempfile::tempdir().unwrap();
    let db = temp.path().join("checkpoints.db");
    let a_args = ["--run", "run-2", "--worker", "worker-a", "--ttl", "3"];
    let a_args = [&a_args[..], &["--steps", "4", "--pause-before-write", "2"]].concat();
    let mut a = Worker::start(language, &server, &db, &a_args);
    a.line_with("pausing before checkpoint 2");
    a.wait_stopped();
    let (_, a_token) = acquired(&a.output());
    expire(&server, "run-2", a_token);

    // B's TTL outlasts all that A does while B is stopped.
    let b_args = ["--run", "run-2", "--worker", "worker-b", "--ttl", "30"];
    let b_args = [&b_args[..], &["--steps", "4", "--pause-before-write", "2"]].concat();
    let mut b = Worker::start(language, &server, &db, &b_args);
    b.line_with("pausing before checkpoint 2");
    b.wait_stopped();
    let (_, b_token) = acquired(&b.output());
    assert!(b_token > a_token, "B's token {b_token}, A's {a_token}");
    assert_eq!(resumed_after(&b.output()), Some((1, a_token)));

    a.resume();
    let (code, a_output) = a.finish();
    assert_eq!(code, LOST, "{a_output}");
    assert!(
        a_output.contains("lease lost: checkpoint 2 is in the table, but leased refused it"),
        "{a_output}"
    );
    assert_eq!(written_steps(&a_output), [0, 1], "{a_output}");
    assert_eq!(row(&db, "run-2"), Some((2, a_token, "worker-a".into())));
    assert_eq!(data(&server, "run-2"), Some(("step=1".into(), a_token)));

    b.resume();
    let (code, b_output) = b.finish();
    assert_eq!(code, FINISHED, "{b_output}");
    assert_eq!(written_steps(&b_output), [2, 3], "{b_output}");
    assert_eq!(row(&db, "run-2"), Some((3, b_token, "worker-b".into())));
    assert_eq!(data(&server, "run-2"), Some(("step=3".into(), b_token)));
}

#[test]
fn a_stalled_rust_workers_checkpoint_past_its_lease_is_redone_by_the_next() {
    a_stalled_workers_checkpoint_past_its_lease_is_redone(Rust);
}

#[test]
#[ignore = "needs python3 with redis-py 5 and the leased package (pip install 'redis>=5,<6' ./clients/python); run with --include-ignored"]
fn a_stalled_python_workers_checkpoint_past_its_lease_is_redone_by_the_next() {
    a_stalled_workers_checkpoint_past_its_lease_is_redone(Python);
}

/// A run worked to its end keeps its data: a worker that acquires it again
/// (`starter`'s database, another worker) has nothing left to do, and
/// releases it, writing nothing; one given more steps resumes after the
/// last one. The data is `step=N` in both languages, so either resumes the
/// other's run.
fn a_finished_run_is_not_worked_again(starter: Language, rerunner: Language) {
    let server = Server::start();
    let temp = tempfile::tempdir().unwrap();
    let db = temp.path().join("checkpoints.db");
    let args = [
        "--run",
        "done",
        "--ttl",
        "5",
        "--steps",
        "3",
        "--interval",
        "0.1",
    ];
    let (code, output) = run_worker(starter, &server, &db, &args);
    assert_eq!(code, FINISHED, "{output}");
    assert!(output.lines().any(|l| l == FRESH), "{output}");
    assert_eq!(written_steps(&output), [0, 1, 2], "{output}");
    let (_, first) = acquired(&output);
    let finished = Some((2, first, starter.worker_id().to_owned()));
    assert_eq!(row(&db, "done"), finished);

    let (code, output) = run_worker(rerunner, &server, &db, &args);
    assert_eq!(code, FINISHED, "{output}");
    let (_, again) = acquired(&output);
    assert!(again > first, "{output}");
    assert_eq!(resumed_after(&output), Some((2, first)), "{output}");
    assert!(
        output.contains("run already complete: nothing to do after checkpoint 2"),
        "{output}"
    );
    assert_eq!(written_steps(&output), [0u32; 0], "{output}");
    assert!(
        output.contains(&format!(
            "done: wrote 0 checkpoints (token {again}), released=1"
        )),
        "{output}"
    );
    assert_eq!(row(&db, "done"), finished);
    assert_eq!(data(&server, "done"), Some(("step=2".into(), first)));
    assert_eq!(server.typed().get("done", None), None, "not released");

    let more = [&args[..4], &["--steps", "5"]].concat();
    let (code, output) = run_worker(rerunner, &server, &db, &more);
    assert_eq!(code, FINISHED, "{output}");
    let (_, last) = acquired(&output);
    assert_eq!(resumed_after(&output), Some((2, first)), "{output}");
    assert_eq!(written_steps(&output), [3, 4], "{output}");
    let expected = (4, last, rerunner.worker_id().to_owned());
    assert_eq!(row(&db, "done"), Some(expected));
    assert_eq!(data(&server, "done"), Some(("step=4".into(), last)));
}

#[test]
fn a_finished_rust_run_is_not_worked_again() {
    a_finished_run_is_not_worked_again(Rust, Rust);
}

#[test]
#[ignore = "needs python3 with redis-py 5 and the leased package (pip install 'redis>=5,<6' ./clients/python); run with --include-ignored"]
fn a_finished_python_run_is_not_worked_again() {
    a_finished_run_is_not_worked_again(Python, Python);
}

#[test]
#[ignore = "needs python3 with redis-py 5 and the leased package (pip install 'redis>=5,<6' ./clients/python); run with --include-ignored"]
fn a_finished_python_run_is_not_worked_again_by_rust() {
    a_finished_run_is_not_worked_again(Python, Rust);
}

/// The lease is taken away while the worker runs (released from another
/// connection, and the run acquired by someone else): the worker's next
/// heartbeat gets 0, or, more likely, its next checkpoint's
/// `LEASE.SETDATA` does, and it writes no checkpoint after that. It has far
/// more steps than it can do before its next heartbeat, so the outcome does
/// not hang on timing; which of the two notices first does, and the test
/// checks each outcome exactly.
fn a_worker_stops_writing_once_a_heartbeat_fails(language: Language) {
    let server = Server::start();
    let temp = tempfile::tempdir().unwrap();
    let db = temp.path().join("checkpoints.db");
    let mut con = server.typed();
    let run = format!("lost-{language:?}");
    let args = [
        "--run",
        &run,
        "--ttl",
        "3",
        "--steps",
        "1000",
        "--interval",
        "0.1",
    ];
    let mut worker = Worker::start(language, &server, &db, &args);
    worker.line_with("wrote checkpoint 1 ");
    let (lease_id, token) = acquired(&worker.output());
    let release = ["LEASE.RELEASE", &lease_id, &token.to_string()];
    assert_eq!(con.run(&release), redis::Value::Int(1));
    let taker = con.acquire(&run, "taker", None, None).expect("taken over");
    assert!(taker.fencing_token > token);

    let (code, output) = worker.finish();
    assert_eq!(code, LOST, "{output}");
    let step_after = |prefix: &str, suffix: &str| {
        let rest = output.lines().find_map(|l| l.strip_prefix(prefix))?;
        rest.strip_suffix(suffix)?.parse::<u32>().ok()
    };
    let (stopped, in_table) =
        if let Some(step) = step_after("lease lost: stopped writing before checkpoint ", "") {
            (step, step - 1) // a heartbeat failed
        } else if let Some(step) = step_after(
            "lease lost: checkpoint ",
            " is in the table, but leased refused it",
        ) {
            (step, step) // the row took it, leased did not
        } else {
            panic!("no lease lost line:\n{output}")
        };
    let written = written_steps(&output);
    assert_eq!(written, (0..stopped).collect::<Vec<_>>(), "{output}");
    assert!(stopped < 1000, "{output}");
    let expected = (in_table, token, language.worker_id().to_owned());
    assert_eq!(row(&db, &run), Some(expected), "{output}");
    let last = format!("step={}", stopped - 1);
    assert_eq!(data(&server, &run), Some((last, token)), "{output}");
}

#[test]
fn the_rust_worker_stops_writing_once_a_heartbeat_fails() {
    a_worker_stops_writing_once_a_heartbeat_fails(Rust);
}

#[test]
#[ignore = "needs python3 with redis-py 5 and the leased package (pip install 'redis>=5,<6' ./clients/python); run with --include-ignored"]
fn the_python_worker_stops_writing_once_a_heartbeat_fails() {
    a_worker_stops_writing_once_a_heartbeat_fails(Python);
}

/// A worker with `--wait` finds its run held by another worker process and
/// waits for it; that process is killed (SIGKILL: it releases nothing)
/// while it works on the step after its checkpoint 0 (a step takes it 30
/// seconds, while it heartbeats), and once its lease expires on the
/// server's clock the server hands the run to the waiting worker, with the
/// next token and the run's data. It resumes after checkpoint 0 and
/// checkpoints to the end.
fn a_waiting_worker_gets_the_run_of_a_killed_one(holder: Language, waiter: Language) {
    let server = Server::start();
    let temp = tempfile::tempdir().unwrap();
    let db = temp.path().join("checkpoints.db");
    let run = format!("killed-{holder:?}-{waiter:?}");
    let holder_args = [
        "--run",
        &run,
        "--worker",
        "holder",
        "--ttl",
        "1",
        "--steps",
        "4",
        "--interval",
        "30",
    ];
    let mut holder = Worker::start(holder, &server, &db, &holder_args);
    holder.line_with("wrote checkpoint 0 ");
    let (_, holder_token) = acquired(&holder.output());

    let waiter_args = [
        "--run",
        &run,
        "--worker",
        "waiter",
        "--ttl",
        "5",
        "--steps",
        "4",
        "--interval",
        "0.1",
        "--wait",
        "30",
    ];
    let mut waiter = Worker::start(waiter, &server, &db, &waiter_args);
    waiter.line_with(&format!("waiting up to 30 s for {run}"));
    // The line comes before the blocked acquire is sent: wait until the
    // server has queued it.
    let mut con = server.typed();
    wait_until(PATIENCE, || {
        let waiters = con.run(&["LEASE.WAITERS", &run]);
        let queued = waiters == redis::Value::Array(vec![bulk_value("waiter")]);
        queued.then_some(()).ok_or(format!("waiters: {waiters:?}"))
    });
    assert!(!waiter.output().contains("acquired"), "{}", waiter.output());
    holder.kill();

    let (code, output) = waiter.finish();
    assert_eq!(code, FINISHED, "{output}");
    let (lease_id, token) = acquired(&output);
    assert_eq!(token, holder_token + 1, "{output}");
    assert_eq!(lease_id, format!("{run}:waiter:{token}"));
    assert_eq!(resumed_after(&output), Some((0, holder_token)), "{output}");
    assert_eq!(written_steps(&output), [1, 2, 3], "{output}");
    assert!(output.contains("released=1"), "{output}");
    assert_eq!(row(&db, &run), Some((3, token, "waiter".to_owned())));
    assert_eq!(data(&server, &run), Some(("step=3".into(), token)));
}

#[test]
fn a_waiting_rust_worker_gets_the_run_of_a_killed_one() {
    a_waiting_worker_gets_the_run_of_a_killed_one(Rust, Rust);
}

#[test]
#[ignore = "needs python3 with redis-py 5 and the leased package (pip install 'redis>=5,<6' ./clients/python); run with --include-ignored"]
fn a_waiting_python_worker_gets_the_run_of_a_killed_one() {
    a_waiting_worker_gets_the_run_of_a_killed_one(Python, Python);
}

#[test]
#[ignore = "needs python3 with redis-py 5 and the leased package (pip install 'redis>=5,<6' ./clients/python); run with --include-ignored"]
fn a_waiting_rust_worker_resumes_the_run_of_a_killed_python_one() {
    a_waiting_worker_gets_the_run_of_a_killed_one(Python, Rust);
}

/// A worker whose `--wait` runs out with the run still held exits 3, as
/// one that does not wait, and leaves no place in the queue behind.
fn a_worker_whose_wait_runs_out_exits_held(language: Language) {
    let server = Server::start();
    let temp = tempfile::tempdir().unwrap();
    let db = temp.path().join("checkpoints.db");
    let mut con = server.typed();
    let holder = con.acquire("held", "holder", None, Some(30.0));
    let holder = holder.expect("acquired");
    let started = Instant::now();
    let (code, output) = run_worker(language, &server, &db, &["--run", "held", "--wait", "0.3"]);
    assert_eq!(code, HELD, "{output}");
    assert!(started.elapsed() >= Duration::from_millis(300), "{output}");
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(
        lines,
        [
            "waiting up to 0.3 s for held",
            "held is held by another worker"
        ],
        "{output}"
    );
    assert_eq!(row(&db, "held"), None);
    assert_eq!(
        con.run(&["LEASE.WAITERS", "held"]),
        redis::Value::Array(vec![])
    );
    let still = con.get("held", None).map(|lease| lease.fencing_token);
    assert_eq!(still, Some(holder.fencing_token));
}

#[test]
fn a_rust_worker_whose_wait_runs_out_exits_held() {
    a_worker_whose_wait_runs_out_exits_held(Rust);
}

#[test]
#[ignore = "needs python3 with redis-py 5 and the leased package (pip install 'redis>=5,<6' ./clients/python); run with --include-ignored"]
fn a_python_worker_whose_wait_runs_out_exits_held() {
    a_worker_whose_wait_runs_out_exits_held(Python);
}

/// examples/watch.py started with `args`, once it has subscribed.
fn watch(server: &Server, args: &[&str]) -> Worker {
    let mut command = Command::new("python3");
    command
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/watch.py"))
        .args(["--port", &server.port.to_string()])
        .args(args);
    let mut watcher = Worker::spawn(command);
    watcher.line_with("watching ");
    watcher
}

/// A watch.py line without its time: `HH:MM:SS.mmm rest` (the time of day
/// the event arrived, to the millisecond).
fn untimed(line: &str) -> &str {
    let (time, rest) = line.split_once(' ').expect("a time, then the event");
    let digits = time.chars().filter(char::is_ascii_digit).count();
    assert!(
        time.len() == 12 && digits == 9 && &time[2..3] == ":" && &time[8..9] == ".",
        "{line}"
    );
    rest
}

/// examples/watch.py prints a short lease's `acquired` and, as the
/// server's clock passes its expiry, `expired`, one line each; with a
/// pattern that also takes `__leaseevent__:` channels it shows those
/// messages too. Ctrl-C (SIGINT) ends it with 0.
#[test]
#[ignore = "needs python3 with redis-py 5 (pip install 'redis>=5,<6'); run with --include-ignored"]
fn watch_py_prints_each_event_as_it_happens() {
    let server = Server::start();
    let mut runs = watch(&server, &[]);
    let mut all = watch(&server, &["--pattern", "__lease*"]);
    let lease = server.typed().acquire("run-w", "w:1", None, Some(0.3));
    assert_eq!(lease.expect("free run").fencing_token, 1);

    let line = runs.line_with("run-w expired");
    assert_eq!(untimed(&line), "run-w expired token=1 worker=w:1");
    let line = all.line_with("(on __leaseevent__:expired)");
    assert_eq!(
        untimed(&line),
        "run-w expired token=1 (on __leaseevent__:expired)"
    );
    for (watcher, expected) in [
        (
            runs,
            &[
                "watching __lease__:* on port",
                "run-w acquired token=1 worker=w:1",
                "run-w expired token=1 worker=w:1",
            ][..],
        ),
        (
            all,
            &[
                "watching __lease* on port",
                "run-w acquired token=1 worker=w:1",
                "run-w acquired token=1 (on __leaseevent__:acquired)",
                "run-w expired token=1 worker=w:1",
                "run-w expired token=1 (on __leaseevent__:expired)",
            ],
        ),
    ] {
        watcher.interrupt();
        let (code, output) = watcher.finish();
        assert_eq!(code, 0, "{output}");
        let mut lines = output.lines();
        let first = lines.next().unwrap_or_default();
        assert!(first.starts_with(expected[0]), "{output}");
        let events: Vec<&str> = lines.map(untimed).collect();
        assert_eq!(events, expected[1..], "{output}");
    }
}

/// README's "A worker" quotes the examples: each quoted block's lines
/// (indentation aside) are a run of consecutive lines of its example.
#[test]
fn the_readme_quotes_the_workers_as_they_are() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = readme
        .split("\n## A worker\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("README has an \"A worker\" section");
    let mut quoted = 0;
    for (fence, file) in [("```python\n", "worker.py"), ("```rust\n", "worker.rs")] {
        let source = std::fs::read_to_string(root.join("examples").join(file)).unwrap();
        let source = code_lines(&source);
        for block in section.split(fence).skip(1) {
            let block = code_lines(block.split("```").next().unwrap());
            let found = source.windows(block.len()).any(|window| window == block);
            assert!(
                found,
                "README quotes lines not in examples/{file}:\n{}",
                block.join("\n")
            );
            quoted += 1;
        }
    }
    assert!(quoted >= 2, "README's \"A worker\" quotes no worker");
}

/// Non-blank lines, without their indentation.
fn code_lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect()
}

/// A worker given a cluster's nodes (`--nodes`, a follower first) with
/// `cluster-redirect moved`: it follows the follower's `-MOVED` to the
/// leader, and when the leader is killed (`kill -9`) after its second
/// checkpoint, moves on to the new leader and finishes every step with
/// its lease, and releases it.
fn a_worker_moves_on_when_the_leader_dies(language: Language) {
    let binary = Path::new(env!("CARGO_BIN_EXE_leased"));
    let mut cluster = common::cluster::Cluster::start(binary, 3, &["--cluster-redirect", "moved"]);
    let leader = cluster.leader(Duration::from_secs(10));
    let mut order: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    order.push(leader);
    let nodes: Vec<String> = (order.iter())
        .map(|&i| format!("127.0.0.1:{}", cluster.nodes[i].port))
        .collect();
    let temp = tempfile::tempdir().unwrap();
    let db = temp.path().join("checkpoints.db");
    let run = format!("failover-{language:?}");
    let mut command = language.command();
    command.args(["--nodes", &nodes.join(","), "--db"]).arg(&db);
    command.args([
        "--run",
        &run,
        "--ttl",
        "9",
        "--steps",
        "8",
        "--interval",
        "0.5",
    ]);
    let mut worker = Worker::spawn(command);
    worker.line_with("wrote checkpoint 1 ");
    cluster.kill9(leader);
    let (code, output) = worker.finish();
    assert_eq!(code, FINISHED, "{output}");
    let (_, token) = acquired(&output);
    assert_eq!(
        written_steps(&output),
        (0..8).collect::<Vec<_>>(),
        "{output}"
    );
    assert!(output.contains("released=1"), "{output}");
    let expected = (7, token, language.worker_id().to_owned());
    assert_eq!(row(&db, &run), Some(expected), "{output}");
}

#[test]
fn the_rust_worker_moves_on_when_the_leader_dies() {
    a_worker_moves_on_when_the_leader_dies(Rust);
}

#[test]
#[ignore = "needs python3 with redis-py 5 and the leased package (pip install 'redis>=5,<6' ./clients/python); run with --include-ignored"]
fn the_python_worker_moves_on_when_the_leader_dies() {
    a_worker_moves_on_when_the_leader_dies(Python);
}
