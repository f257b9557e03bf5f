//! Log output: Redis's log levels, text or JSON lines, standard output or
//! `logfile`.
//!
//! JSON lines are flat objects, `{"timestamp":..,"level":..,"message":..}`,
//! so a log shipper finds the message at the top level, as it finds the
//! text of a plain line. The message text is the same in both formats.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Registry, reload};

use crate::config::{Config, LogFormat, LogLevel};

/// The handle that changes the installed subscriber's level (`CONFIG SET
/// loglevel`): set once [`init`] has installed it; a server started
/// without it (in a test) has nothing to change.
static LEVEL: OnceLock<reload::Handle<LevelFilter, Registry>> = OnceLock::new();

/// `logfile` could not be opened for appending.
#[derive(Debug)]
pub struct LogFileError {
    pub path: PathBuf,
    pub error: io::Error,
}

impl fmt::Display for LogFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "can't open the log file '{}' (logfile): {}",
            self.path.display(),
            self.error
        )
    }
}

impl std::error::Error for LogFileError {}

/// Installs the global subscriber for `config`'s `loglevel`, `logformat`
/// and `logfile`. Fails, naming the file, if `logfile` cannot be opened
/// for appending.
pub fn init(config: &Config) -> Result<(), LogFileError> {
    let (writer, terminal) = match &config.logfile {
        None => (BoxMakeWriter::new(io::stdout), io::stdout().is_terminal()),
        Some(path) => (BoxMakeWriter::new(LogFile::check(path)?), false),
    };
    // The level filter sits right on the registry, under the format, so
    // one handle type reloads it whichever the format.
    let (level, handle) = reload::Layer::new(level_filter(config.loglevel));
    let lines = tracing_subscriber::fmt::layer()
        .with_target(false)
        .with_writer(writer);
    // openraft reports every failed heartbeat to an unreachable peer (ten
    // a second) as a warning; the node logs its own view of the cluster
    // (leaders, elections) instead, and openraft's errors still show.
    let raft = Targets::new()
        .with_target("openraft", LevelFilter::ERROR)
        .with_default(LevelFilter::TRACE);
    let subscriber = tracing_subscriber::registry().with(level).with(raft);
    match config.logformat {
        LogFormat::Text => subscriber.with(lines.with_ansi(terminal)).init(),
        LogFormat::Json => subscriber
            .with(
                lines
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(false),
            )
            .init(),
    }
    let _ = LEVEL.set(handle);
    Ok(())
}

/// Makes `level` the log level from now on.
pub fn set_level(level: LogLevel) {
    if let Some(handle) = LEVEL.get() {
        // Fails only once the subscriber is gone, at exit.
        let _ = handle.reload(level_filter(level));
    }
}

/// Redis's levels onto tracing's: `notice`, the production level, is
/// `INFO`, so `verbose` is `DEBUG` and `debug` everything.
fn level_filter(level: LogLevel) -> LevelFilter {
    match level {
        LogLevel::Debug => LevelFilter::TRACE,
        LogLevel::Verbose => LevelFilter::DEBUG,
        LogLevel::Notice => LevelFilter::INFO,
        LogLevel::Warning => LevelFilter::WARN,
        LogLevel::Nothing => LevelFilter::OFF,
    }
}

/// `logfile`: the file is opened anew for every line, as redis-server
/// does, so a log rotated by renaming it (logrotate without
/// `copytruncate`) goes on in a new file at once.
struct LogFile(PathBuf);

impl LogFile {
    /// A log file that can be opened now.
    fn check(path: &Path) -> Result<LogFile, LogFileError> {
        let file = LogFile(path.to_path_buf());
        file.open().map_err(|error| LogFileError {
            path: path.to_path_buf(),
            error,
        })?;
        Ok(file)
    }

    fn open(&self) -> io::Result<File> {
        OpenOptions::new().create(true).append(true).open(&self.0)
    }
}

impl<'a> MakeWriter<'a> for LogFile {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        LogLine(self.open())
    }
}

/// One line's writer: the file, or why it could not be opened, which
/// tracing-subscriber then reports on standard error.
struct LogLine(io::Result<File>);

impl Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.0 {
            Ok(file) => file.write(buf),
            Err(error) => Err(io::Error::new(error.kind(), error.to_string())),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.0 {
            Ok(file) => file.flush(),
            Err(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_line(log: &LogFile, line: &str) -> io::Result<()> {
        log.make_writer().write_all(line.as_bytes())
    }

    #[test]
    fn lines_are_appended_and_a_renamed_file_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leased.log");
        std::fs::write(&path, "before\n").unwrap();
        let log = LogFile::check(&path).unwrap();
        write_line(&log, "one\n").unwrap();
        let rotated = dir.path().join("leased.log.1");
        std::fs::rename(&path, &rotated).unwrap();
        write_line(&log, "two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&rotated).unwrap(), "before\none\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");
    }

    #[test]
    fn a_file_that_cannot_be_opened_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir/leased.log");
        let Err(message) = LogFile::check(&path).map_err(|e| e.to_string()) else {
            panic!("a log file in a missing directory was accepted");
        };
        assert!(
            message.starts_with(&format!(
                "can't open the log file '{}' (logfile): ",
                path.display()
            )),
            "{message}"
        );
    }

    #[test]
    fn a_line_that_cannot_be_written_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/leased.log");
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let log = LogFile::check(&path).unwrap();
        std::fs::remove_dir_all(dir.path().join("sub")).unwrap();
        assert!(write_line(&log, "lost\n").is_err());
    }
}
