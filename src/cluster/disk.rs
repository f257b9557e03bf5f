//! What the files under a node's `dir/raft/` share: the record framing,
//! writes that replace a file whole, the directory's lock, and the errors
//! opening them gives (each names the file and what to do).
//!
//! A record is `[u32 length][u32 crc32 of the payload][payload]`, both
//! numbers little-endian. A record cut short, or a bad checksum in the
//! file's last record, is what a crash in the middle of an append leaves;
//! a bad checksum with more records after it is damage. So is nothing but
//! zeros to the end: a file whose length reached the disk before its
//! data did.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The subdirectory of a node's data directory that holds its Raft state.
pub const RAFT_DIR: &str = "raft";
/// Held (`flock`) by the log store while it is open.
const LOCK_FILE: &str = "lock";
/// Bytes before a record's payload.
pub const FRAME: usize = 8;

/// Why a node's Raft state cannot be opened.
#[derive(Debug)]
pub enum OpenError {
    Io {
        path: PathBuf,
        error: io::Error,
    },
    /// Another process (or another store in this one) has the directory.
    Locked {
        path: PathBuf,
    },
    /// A file is damaged before its end: not what a crash leaves.
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Io { path, error } => write!(f, "'{}': {error}", path.display()),
            OpenError::Locked { path } => write!(
                f,
                "the Raft state in '{}' is in use by another leased process (it holds the \
                 lock on {}); give each node its own 'dir'",
                path.display(),
                path.join(LOCK_FILE).display()
            ),
            OpenError::Corrupt {
                path,
                offset,
                reason,
            } => write!(
                f,
                "the Raft file {} is corrupt at byte offset {offset} ({reason}). Move this \
                 node's '{RAFT_DIR}' directory away and start it empty: the other nodes send \
                 it their log or a snapshot",
                path.display()
            ),
        }
    }
}

impl std::error::Error for OpenError {}

impl OpenError {
    pub fn io(path: &Path) -> impl FnOnce(io::Error) -> OpenError + '_ {
        move |error| OpenError::Io {
            path: path.to_path_buf(),
            error,
        }
    }

    pub fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> OpenError {
        OpenError::Corrupt {
            path: path.to_path_buf(),
            offset,
            reason: reason.into(),
        }
    }
}

/// Creates `dir/raft/` if missing (durably: its parent is fsynced) and
/// returns its path.
pub fn raft_dir(dir: &Path) -> Result<PathBuf, OpenError> {
    let raft = dir.join(RAFT_DIR);
    if !raft.is_dir() {
        fs::create_dir_all(&raft).map_err(OpenError::io(&raft))?;
        sync_dir(dir).map_err(OpenError::io(dir))?;
    }
    Ok(raft)
}

/// Takes the exclusive lock on `raft/lock`, held as long as the file is.
pub fn lock(raft: &Path) -> Result<File, OpenError> {
    let path = raft.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(OpenError::io(&path))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(fs::TryLockError::WouldBlock) => Err(OpenError::Locked {
            path: raft.to_path_buf(),
        }),
        Err(fs::TryLockError::Error(error)) => Err(OpenError::Io { path, error }),
    }
}

/// Appends `payload` to `out` as one record.
pub fn frame(payload: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::other(format!("a record of {} bytes", payload.len())))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// What [`next_record`] found at an offset.
#[derive(Debug, PartialEq)]
pub enum Record<'a> {
    /// An intact record, and the offset just past it.
    Intact { payload: &'a [u8], end: usize },
    /// The end of the bytes, exactly.
    End,
    /// The last record, cut short or with a bad checksum: a crash's tail.
    Torn(String),
    /// A bad checksum with bytes after it.
    Damaged(String),
}

/// Reads the record at `at`.
pub fn next_record(bytes: &[u8], at: usize) -> Record<'_> {
    let rest = &bytes[at..];
    if rest.is_empty() {
        return Record::End;
    }
    if rest.iter().all(|&byte| byte == 0) {
        return Record::Torn(format!("{} zero bytes at the end", rest.len()));
    }
    if rest.len() < FRAME {
        return Record::Torn(format!("{} bytes of a record's frame", rest.len()));
    }
    let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(rest[4..FRAME].try_into().expect("4 bytes"));
    let Some(payload) = rest.get(FRAME..FRAME + len) else {
        let have = rest.len() - FRAME;
        return Record::Torn(format!("a record of {len} bytes with {have} present"));
    };
    let end = at + FRAME + len;
    match (crc32fast::hash(payload) == crc, end == bytes.len()) {
        (true, _) => Record::Intact { payload, end },
        (false, true) => Record::Torn("the last record fails its checksum".into()),
        (false, false) => Record::Damaged("a record fails its checksum".into()),
    }
}

/// Replaces `dir/name` with `bytes` whole: written to a temporary file and
/// renamed over it, so a crash leaves the old file or the new one. With
/// `durable`, the data is fsynced before the rename and the directory
/// after it, so the new file survives a power loss once this returns.
pub fn replace(dir: &Path, name: &str, bytes: &[u8], durable: bool) -> io::Result<()> {
    let temp = temp_path(dir, name);
    let mut file = File::create(&temp)?;
    file.write_all(bytes)?;
    if durable {
        file.sync_data()?;
    }
    drop(file);
    fs::rename(&temp, dir.join(name))?;
    if durable {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Where [`replace`] writes `name` before renaming it.
pub fn temp_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.tmp"))
}

/// Removes a temporary file a crash in [`replace`] left behind.
pub fn remove_temp(dir: &Path, name: &str) -> Result<(), OpenError> {
    let temp = temp_path(dir, name);
    match fs::remove_file(&temp) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(OpenError::Io { path: temp, error }),
    }
}

/// Fsyncs a directory, so the names created or renamed in it persist.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Reads a small file, `None` if it does not exist.
pub fn read_if_present(path: &Path) -> Result<Option<Vec<u8>>, OpenError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(OpenError::io(path)(error)),
    }
}
