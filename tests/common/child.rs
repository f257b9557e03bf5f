//! Other programs run by a test (a Python or Node script): bounded, so
//! that one that hangs (a blocked acquire never answered) fails the test
//! instead of hanging it, and killed if the test ends first.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a script may run.
const PATIENCE: Duration = Duration::from_secs(60);

/// A child process killed (and reaped) when dropped, if still running.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Runs `command` to its end: whether it succeeded, its stdout and stderr.
/// Fails the test if it cannot start (`program` says what is missing) or
/// runs longer than 60 s; polls every 10 ms, as nothing wakes a thread
/// when a child exits.
#[allow(dead_code)]
pub fn run_bounded(command: &mut Command, program: &str) -> (bool, String, String) {
    let spawned = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = Killed(spawned.unwrap_or_else(|e| panic!("cannot run {program}: {e}")));
    let stdout = read_all(child.0.stdout.take().unwrap());
    let stderr = read_all(child.0.stderr.take().unwrap());
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            drop(child);
            panic!(
                "still running after {PATIENCE:?}, killed:\n{}\n{}",
                stdout.join().unwrap(),
                stderr.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (
        status.success(),
        stdout.join().unwrap(),
        stderr.join().unwrap(),
    )
}

/// Reads a pipe to its end on a thread of its own, so a full pipe never
/// stalls the child.
fn read_all(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    })
}
