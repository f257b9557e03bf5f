//! A server inside the test's own process and tokio runtime, as tokio's
//! mini-redis tests start theirs: on a free port, with a fresh data
//! directory, and with the server's clock following tokio's. In a test
//! with paused time (`#[tokio::test(start_paused = true)]`),
//! `tokio::time::advance` then moves the server's clock, its timers
//! (`timeout`, background work) and the clients' alike, so a test that
//! needs time to pass takes none.
//!
//! Clients must run on the same runtime ([`AsyncClient`]): with paused
//! time, tokio moves the clock forward whenever the runtime has nothing to
//! do, so a client on another thread would see the server's time race.
//! For the same reason a test awaits what comes over a socket through
//! [`at_one_instant`] (the typed client does so for every command): tokio
//! does not wait for the kernel before it moves its clock.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use leased::ceiling::DataDir;
use leased::config::Config;
use leased::server::{self, ServeError};
use leased::state::Clock;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::client::AsyncClient;

pub struct InProcess {
    pub port: u16,
    /// The metrics endpoint's port, with `--metrics-port`.
    #[allow(dead_code)]
    pub metrics_port: Option<u16>,
    #[allow(dead_code)]
    pub dir: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
    /// Keeps the temporary data directory, when the test made none.
    _temp: Option<tempfile::TempDir>,
}

#[allow(dead_code)]
impl InProcess {
    /// A server with a fresh data directory and extra `--directive value`
    /// arguments.
    pub async fn start(args: &[&str]) -> InProcess {
        let temp = tempfile::tempdir().expect("temp dir");
        let mut server = InProcess::start_in(&temp.path().join("data"), args)
            .await
            .unwrap_or_else(|error| panic!("the server did not start: {error}"));
        server._temp = Some(temp);
        server
    }

    /// A server on `dir` (kept by the caller, so a restart can reuse it);
    /// the error if it does not start.
    pub async fn start_in(dir: &Path, args: &[&str]) -> Result<InProcess, String> {
        let dir_arg = dir.to_str().expect("a UTF-8 path");
        let all = ["leased", "--port", "0", "--dir", dir_arg]
            .into_iter()
            .chain(args.iter().copied());
        let config = Config::from_args(all).map_err(|e| e.to_string())?;
        let data_dir = DataDir::open(&config.dir).map_err(|e| e.to_string())?;
        let listeners = server::bind(&config).await.map_err(|e| e.to_string())?;
        let port = listeners.plain[0].local_addr().expect("bound").port();
        let metrics_port =
            (listeners.metrics.first()).map(|l| l.local_addr().expect("bound").port());
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let clock = Clock::following_tokio();
        let task = tokio::spawn(server::run(config, listeners, data_dir, clock, shutdown));
        Ok(InProcess {
            port,
            metrics_port,
            dir: dir.to_path_buf(),
            stop: Some(stop),
            task,
            _temp: None,
        })
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn url_resp3(&self) -> String {
        format!("redis://127.0.0.1:{}/?protocol=resp3", self.port)
    }

    /// A typed RESP2 client.
    pub async fn client(&self) -> AsyncClient {
        AsyncClient::connect(&self.url()).await
    }

    /// A typed RESP3 client.
    pub async fn client_resp3(&self) -> AsyncClient {
        AsyncClient::connect(&self.url_resp3()).await
    }

    /// Shuts the server down cleanly (as SIGTERM does: the log flushed, the
    /// ceiling stored) and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = &mut self.task;
        task.await
            .expect("the server task")
            .expect("a clean shutdown");
    }
}

/// Lets the server finish the work it can do now (a reclaim of several
/// steps, a connection to close) before the test looks. Under paused time
/// a sleep ends only when the runtime has nothing else to run, so this
/// takes a millisecond of tokio's clock and no wall-clock wait.
#[allow(dead_code)]
pub async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// How long [`at_one_instant`] waits, on the wall clock, before the test
/// fails.
const WALL_CLOCK_PATIENCE: Duration = Duration::from_secs(20);

/// Awaits `io` (a reply, a line, a closed connection) with tokio's clock
/// held still, failing the test after 20 s of wall-clock time.
///
/// Under paused time tokio moves its clock to the next timer whenever the
/// runtime has nothing to run, without waiting for the kernel: while a
/// reply or a close is still on its way through loopback (rarely, and
/// only on a loaded machine), the clock can run through the server's
/// timeouts and the test's in microseconds. tokio does not move the clock
/// while a blocking task runs, so one waits here until `io` is done: what
/// the test awaits happens at one instant of the server's clock, and time
/// passes only through `advance` and [`settle`]. (Elsewhere than on a
/// current-thread runtime, where the clock cannot be paused, `io` is
/// simply awaited.)
pub async fn at_one_instant<F: Future>(io: F) -> F::Output {
    if Handle::current().runtime_flavor() != RuntimeFlavor::CurrentThread {
        return io.await;
    }
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let mut hold =
        tokio::task::spawn_blocking(move || wait.recv_timeout(WALL_CLOCK_PATIENCE).is_ok());
    tokio::pin!(io);
    tokio::select! {
        biased;
        output = &mut io => {
            let _ = done.send(());
            let _ = (&mut hold).await;
            output
        }
        _ = &mut hold => {
            panic!("nothing from the server after {WALL_CLOCK_PATIENCE:?} of wall-clock time")
        }
    }
}

/// Awaits `io` while tokio's clock runs on as usual, for what needs the
/// server's time to pass (a timeout that closes a connection), failing
/// the test after 20 s of wall-clock time. A timeout on tokio's clock
/// cannot bound such a wait: tokio may move its clock past it before the
/// kernel has delivered what the test waits for.
#[allow(dead_code)]
pub async fn within_wall_clock<F: Future>(io: F) -> F::Output {
    let (expired, expiry) = oneshot::channel::<()>();
    let (done, wait) = std::sync::mpsc::channel::<()>();
    // A thread of its own, not a blocking task: tokio would hold its clock
    // still while one runs.
    std::thread::spawn(move || {
        if wait.recv_timeout(WALL_CLOCK_PATIENCE).is_err() {
            let _ = expired.send(());
        }
    });
    tokio::pin!(io);
    tokio::select! {
        biased;
        output = &mut io => {
            let _ = done.send(());
            output
        }
        _ = expiry => {
            panic!("nothing from the server after {WALL_CLOCK_PATIENCE:?} of wall-clock time")
        }
    }
}

impl Drop for InProcess {
    /// A server the test did not stop is stopped with its runtime; telling
    /// it to shut down lets it flush if the runtime lives on.
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
