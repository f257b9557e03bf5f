//! The append-only log: every change of the registry goes here before the
//! client sees its reply; at start-up the log is replayed; when it has
//! grown well past the live state it is rewritten as a snapshot of it.
//!
//! Only the core task touches a [`Log`]. It encodes each round's changes
//! into one buffer and writes them with one `write` (and, with `always`, one
//! fsync) before answering the round: group commit. The `always` fsync runs
//! on the runtime's blocking pool while the core task waits for it, so the
//! connections go on reading requests meanwhile. With `everysec` a thread
//! of its own fsyncs once a second; with `no` the OS decides.
//!
//! A rewrite runs while the server serves. The core walks the registry a
//! few thousand slots at a time (see `Registry::snapshot`) and hands the
//! encoded leases to a writer thread that fills a temporary file; every
//! change committed meanwhile is kept aside too. When the snapshot is on
//! disk, the core appends the changes kept aside, fsyncs, and renames the
//! file over the log. Changes set state outright, so the snapshot does not
//! need to be consistent: replaying the changes made since it began fixes
//! whatever moved under it. A crash at any point leaves either the old log
//! or the new one, both complete.
//!
//! The module's files: `log` (the file, its writes and commits),
//! `load` (replay and repair at start-up), `rewrite` (the snapshot
//! and its writer thread), `fsync` (the `everysec` thread), [`format`](mod@format)
//! (the bytes on disk).

pub mod format;
mod fsync;
mod load;
mod log;
mod rewrite;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use load::Recovery;
pub use log::{Commit, Log, LogStatus};
pub use rewrite::RewriteStep;

pub use crate::config::FsyncPolicy;

/// Settings the log needs, from the configuration.
#[derive(Clone, Debug)]
pub struct LogOptions {
    pub dir: PathBuf,
    pub file_name: String,
    pub policy: FsyncPolicy,
    pub rewrite_percentage: u64,
    pub rewrite_min_size: u64,
    pub load_good_prefix: bool,
}

/// Why the log could not be opened and loaded at start-up. The messages
/// name the file and say what to do.
#[derive(Debug)]
pub enum OpenError {
    Io {
        path: PathBuf,
        error: io::Error,
    },
    /// The file does not start with the log's header.
    NotALog {
        path: PathBuf,
    },
    /// A record fails its checksum or does not decode, and
    /// `aof-load-good-prefix` is off.
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
        /// Records before it, all intact.
        records: u64,
    },
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Io { path, error } => write!(f, "'{}': {error}", path.display()),
            OpenError::NotALog { path } => write!(
                f,
                "'{}' is not a leased append-only log (it does not start with leased's \
                 header); move it away or point appendfilename elsewhere",
                path.display()
            ),
            OpenError::Corrupt {
                path,
                offset,
                reason,
                records,
            } => write!(
                f,
                "The append-only log {} is corrupt at byte offset {offset} ({reason}). \
                 The {records} records before it are intact. Restore the log from a backup, \
                 or start with 'aof-load-good-prefix yes' (--aof-load-good-prefix yes) to \
                 load them and drop everything from offset {offset} on; a copy of the whole \
                 file is kept",
                path.display(),
            ),
        }
    }
}

impl std::error::Error for OpenError {}

impl OpenError {
    fn io(path: &Path) -> impl FnOnce(io::Error) -> OpenError + '_ {
        move |error| OpenError::Io {
            path: path.to_path_buf(),
            error,
        }
    }
}

/// A write or fsync of the log that failed, as the operating system
/// described it. While the log has one, changes are refused: the log may
/// be missing what it would acknowledge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteError(Arc<str>);

impl WriteError {
    fn new(error: &io::Error) -> WriteError {
        WriteError(error.to_string().into())
    }
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WriteError {}

/// Why a rewrite could not start.
#[derive(Debug)]
pub enum RewriteError {
    /// One is under way already.
    InProgress,
    /// Its temporary file or writer thread could not be made.
    Start(io::Error),
}

impl fmt::Display for RewriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RewriteError::InProgress => f.write_str("a rewrite is already in progress"),
            RewriteError::Start(error) => write!(f, "cannot start rewriting: {error}"),
        }
    }
}

impl std::error::Error for RewriteError {}

/// `path` with `suffix` added to its file name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

fn rewrite_path(path: &Path) -> PathBuf {
    sibling(path, ".rewrite")
}
