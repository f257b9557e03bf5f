//! Loading the log at start-up: replay, and the repairs a crash makes
//! necessary (a torn tail cut off; with `aof-load-good-prefix`, a corrupt
//! tail cut off after the whole file is copied aside).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tracing::warn;

use super::format::{self, HEADER, ReplayError};
use super::{OpenError, sibling};
use crate::registry::Change;

/// What the log did at start-up, for the log lines.
#[derive(Debug, Default)]
pub struct Recovery {
    pub records: u64,
    /// A torn final record was cut off at this offset.
    pub torn_at: Option<u64>,
    /// The log was corrupt at this offset and, as asked, cut there; the whole
    /// file was first copied to the path given.
    pub corrupt_cut: Option<(u64, PathBuf)>,
}

/// Writes an empty log (just the header) atomically and durably.
pub(super) fn create_log(path: &Path, dir: &Path) -> io::Result<()> {
    let temp = sibling(path, ".new");
    let mut file = File::create(&temp)?;
    file.write_all(HEADER)?;
    file.sync_all()?;
    fs::rename(&temp, path)?;
    File::open(dir)?.sync_all()
}

/// Replays the log at `path`, cutting a torn tail and, if allowed, a corrupt
/// one.
pub(super) fn replay_file(
    path: &Path,
    load_good_prefix: bool,
    apply: impl FnMut(Change),
) -> Result<Recovery, OpenError> {
    let file = File::open(path).map_err(OpenError::io(path))?;
    let len = file.metadata().map_err(OpenError::io(path))?.len();
    let mut recovery = Recovery::default();
    match format::replay(BufReader::with_capacity(1 << 20, file), apply) {
        Ok(replayed) => {
            recovery.records = replayed.records;
            if let Some(offset) = replayed.torn_at {
                warn!(
                    "The append-only log {} ends with an incomplete record at byte offset \
                     {offset} (a write cut short by a crash): cutting the last {} bytes off",
                    path.display(),
                    len - offset
                );
                truncate(path, offset)?;
                recovery.torn_at = Some(offset);
            }
        }
        Err(ReplayError::BadHeader) => {
            return Err(OpenError::NotALog {
                path: path.to_path_buf(),
            });
        }
        Err(ReplayError::Io(error)) => return Err(OpenError::io(path)(io::Error::other(error))),
        Err(ReplayError::Corrupt {
            offset,
            reason,
            replayed,
        }) => {
            if !load_good_prefix {
                return Err(OpenError::Corrupt {
                    path: path.to_path_buf(),
                    offset,
                    reason,
                    records: replayed.records,
                });
            }
            let copy = keep_copy(path)?;
            warn!(
                "The append-only log {} is corrupt at byte offset {offset} ({reason}): \
                 loaded the {} records before it and cut the rest off, as \
                 aof-load-good-prefix asks; the whole file was copied to {}",
                path.display(),
                replayed.records,
                copy.display()
            );
            truncate(path, offset)?;
            recovery.records = replayed.records;
            recovery.corrupt_cut = Some((offset, copy));
        }
    }
    Ok(recovery)
}

fn truncate(path: &Path, len: u64) -> Result<(), OpenError> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(OpenError::io(path))?;
    file.set_len(len).map_err(OpenError::io(path))?;
    file.sync_all().map_err(OpenError::io(path))
}

/// Copies a damaged log aside before it is cut, so nothing is destroyed.
fn keep_copy(path: &Path) -> Result<PathBuf, OpenError> {
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let copy = sibling(path, &format!(".corrupt-{stamp}"));
    fs::copy(path, &copy).map_err(OpenError::io(&copy))?;
    Ok(copy)
}
