//! `leased [CONFIG_FILE] [--directive value ...]`: parse the configuration,
//! open the data directory, bind, and serve until shutdown.

use std::path::Path;
use std::process::ExitCode;

use leased::ceiling::DataDir;
use leased::config::{Config, ConfigError};
use leased::state::Clock;
use leased::warnings::risky_settings;
use leased::{logging, server, system};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

fn main() -> ExitCode {
    let config = match Config::from_args(std::env::args_os()) {
        Ok(config) => config,
        Err(ConfigError::Args(error)) => error.exit(),
        Err(error) => {
            eprintln!("leased: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(message) = logging::init(&config) {
        eprintln!("leased: {message}");
        return ExitCode::FAILURE;
    }
    let runtime = match runtime_builder(config.io_threads).enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            error!("Cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(start(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            error!("{message}");
            ExitCode::FAILURE
        }
    }
}

/// With one I/O thread, connections and the core share a current-thread
/// runtime: a request and its reply then cross no thread boundary, which
/// on two cores measured fastest (docs/benchmarks.md). With more, they run
/// on a multi-thread runtime of that many workers.
fn runtime_builder(io_threads: usize) -> tokio::runtime::Builder {
    if io_threads <= 1 {
        return tokio::runtime::Builder::new_current_thread();
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(io_threads);
    builder
}

async fn start(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    info!(
        "leased {} starting (pid {}, config file: {})",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        config
            .config_file
            .as_deref()
            .map_or("none".into(), absolute),
    );
    system::raise_open_files_limit(config.maxclients);
    let data_dir = DataDir::open(&config.dir)?;
    info!(
        "Data directory: {}; persistence: {}",
        absolute(&config.dir),
        persistence(&config)
    );
    for warning in risky_settings(&config) {
        warn!("{warning}");
    }
    // Registered before the server says it is ready, so a signal sent right
    // after start-up shuts it down cleanly instead of killing it.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let signalled = async move {
        tokio::select! {
            _ = term.recv() => info!("Received SIGTERM scheduling shutdown..."),
            _ = int.recv() => info!("Received SIGINT scheduling shutdown..."),
        }
    };
    // The ports come last, in "Ready to accept connections on ...", once
    // they are bound (with the real port for `--port 0`).
    let clock = clock()?;
    let listeners = server::bind(&config).await?;
    server::run(config, listeners, data_dir, clock, signalled).await?;
    Ok(())
}

/// The system clock, or, for tests of cluster mode's clock-skew rule, the
/// system clock off by `LEASED_CLOCK_OFFSET_MS` milliseconds (read once,
/// here; docs/cluster.md).
fn clock() -> Result<Clock, String> {
    const OFFSET: &str = "LEASED_CLOCK_OFFSET_MS";
    let Some(value) = std::env::var_os(OFFSET) else {
        return Ok(Clock::System);
    };
    let millis: i64 = (value.to_str())
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| format!("{OFFSET} must be a whole number of milliseconds, not {value:?}"))?;
    warn!(
        "{OFFSET} is set: this server's clock reads the system clock {millis:+} ms off. A testing \
         aid: never set it in production"
    );
    Ok(Clock::Offset(millis as f64 / 1000.0))
}

/// The persistence mode, in the directives' own words (the log's path
/// follows when it is loaded).
fn persistence(config: &Config) -> String {
    if config.cluster_enabled {
        // appendonly and appendfsync do not apply: the Raft log is the log.
        "cluster mode, the Raft log under raft/ (fsynced before each acknowledgement)".to_owned()
    } else if config.appendonly {
        format!(
            "appendonly yes, appendfsync {}",
            config.appendfsync.as_str()
        )
    } else {
        "appendonly no (leases in memory only)".to_owned()
    }
}

fn absolute(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// jemalloc, chosen by measurement (docs/benchmarks.md): about 20% more
/// pipelined acquires per second than the system allocator, and exact
/// allocation statistics for `INFO memory`.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
