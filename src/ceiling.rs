//! The data directory: its lock, and the durable fencing-token ceiling.
//!
//! Tokens must never repeat for the life of the data directory, even
//! after a crash. Writing every token to disk would cost an fsync per
//! acquire, so the core instead reserves tokens in blocks: before it
//! issues a token above the stored ceiling it durably raises the ceiling
//! (temp file, fsync, rename, fsync of the directory). After any crash the
//! next token starts above the stored ceiling, so above every token issued.
//! On a clean shutdown the ceiling is lowered to the last token issued, so
//! a restart continues without a gap.
//!
//! The file is one line of text, with a checksum so a damaged file stops
//! the start instead of letting tokens go backwards:
//! `leased-token-ceiling 1 <ceiling> <crc32 of the number, hex>`. A file
//! holding just a number is read too: that is how an operator who lost the
//! file writes a new one by hand.
//!
//! A missing ceiling file is only normal in a new directory. The lock file
//! records that the directory has been set up (its ceiling file written),
//! so a ceiling file deleted later stops the start instead of silently
//! restarting tokens at 1.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

const CEILING_FILE: &str = "token-ceiling";
const LOCK_FILE: &str = "leased.lock";
const MAGIC: &str = "leased-token-ceiling";
/// Written into the lock file once the directory has its ceiling file.
const SET_UP: &[u8] = b"leased data directory\n";
const FORMAT_VERSION: &str = "1";

/// An open data directory. While it exists, no other process may use the
/// directory: it holds an exclusive lock on `leased.lock`.
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    _lock: File,
}

/// Why the data directory cannot be used. The messages say which path
/// and what to do.
#[derive(Debug)]
pub enum DataDirError {
    Io { path: PathBuf, error: io::Error },
    Locked { path: PathBuf },
    CorruptCeiling { path: PathBuf, reason: String },
    MissingCeiling { path: PathBuf },
}

impl std::fmt::Display for DataDirError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataDirError::Io { path, error } => {
                write!(f, "cannot use data directory '{}': {error}", path.display())
            }
            DataDirError::Locked { path } => write!(
                f,
                "data directory '{}' is in use by another leased process \
                 (it holds the lock on {}); give each server its own 'dir'",
                path.display(),
                path.join(LOCK_FILE).display()
            ),
            DataDirError::CorruptCeiling { path, reason } => write!(
                f,
                "the token ceiling file '{}' is damaged ({reason}); \
                 fencing tokens could go backwards, so the server will not start. \
                 Restore it from a backup, or replace it with one line holding a number \
                 above every token ever issued",
                path.display()
            ),
            DataDirError::MissingCeiling { path } => write!(
                f,
                "the token ceiling file '{}' is missing from a data directory that has been \
                 used; fencing tokens could go backwards, so the server will not start. \
                 Restore it from a backup, or write one line holding a number above every \
                 token ever issued into it",
                path.display()
            ),
        }
    }
}

impl std::error::Error for DataDirError {}

impl DataDir {
    /// Creates the directory if missing, takes its lock, and sets a new
    /// directory up with ceiling 0.
    pub fn open(path: &Path) -> Result<DataDir, DataDirError> {
        let io_error = |error| DataDirError::Io {
            path: path.to_path_buf(),
            error,
        };
        fs::create_dir_all(path).map_err(io_error)?;
        let mut lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path.join(LOCK_FILE))
            .map_err(io_error)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(DataDirError::Locked {
                    path: path.to_path_buf(),
                });
            }
            Err(fs::TryLockError::Error(error)) => return Err(io_error(error)),
        }
        let ceiling = path.join(CEILING_FILE);
        let mut marker = Vec::new();
        lock.read_to_end(&mut marker).map_err(io_error)?;
        if marker.is_empty() {
            // New, or its set-up was interrupted before any token was issued.
            if !ceiling.exists() {
                CeilingWriter::new(path).store(0).map_err(io_error)?;
            }
            lock.write_all(SET_UP).map_err(io_error)?;
            lock.sync_all().map_err(io_error)?;
        } else if !ceiling.exists() {
            return Err(DataDirError::MissingCeiling { path: ceiling });
        }
        Ok(DataDir {
            path: path.to_path_buf(),
            _lock: lock,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored ceiling: no token above it was ever issued.
    pub fn read_ceiling(&self) -> Result<u64, DataDirError> {
        let path = self.path.join(CEILING_FILE);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(DataDirError::MissingCeiling { path });
            }
            Err(error) => return Err(DataDirError::Io { path, error }),
        };
        parse_ceiling(&text).map_err(|reason| DataDirError::CorruptCeiling { path, reason })
    }

    /// A handle that writes the ceiling, for a blocking thread.
    pub fn ceiling_writer(&self) -> CeilingWriter {
        CeilingWriter::new(&self.path)
    }
}

/// Writes the ceiling file atomically and durably. Cheap to clone; each
/// call blocks on fsync, so call it off the async runtime.
#[derive(Clone, Debug)]
pub struct CeilingWriter {
    dir: PathBuf,
}

impl CeilingWriter {
    fn new(dir: &Path) -> CeilingWriter {
        CeilingWriter {
            dir: dir.to_path_buf(),
        }
    }

    /// Replaces the stored ceiling with `ceiling`: after this returns, a
    /// crash at any point leaves the new value on disk.
    pub fn store(&self, ceiling: u64) -> io::Result<()> {
        let temp = self.dir.join(format!("{CEILING_FILE}.tmp"));
        let mut file = File::create(&temp)?;
        file.write_all(format_ceiling(ceiling).as_bytes())?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temp, self.dir.join(CEILING_FILE))?;
        // The rename is durable only once the directory entry is.
        File::open(&self.dir)?.sync_all()
    }
}

fn format_ceiling(ceiling: u64) -> String {
    let number = ceiling.to_string();
    let crc = crc32fast::hash(number.as_bytes());
    format!("{MAGIC} {FORMAT_VERSION} {number} {crc:08x}\n")
}

fn parse_ceiling(text: &str) -> Result<u64, String> {
    let line = text.trim_end_matches('\n');
    if !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) {
        return line.parse().map_err(|_| format!("'{line}' is too large"));
    }
    let fields: Vec<&str> = line.split(' ').collect();
    let [magic, version, number, crc] = fields[..] else {
        return Err("expected one line of four fields".to_string());
    };
    if magic != MAGIC {
        return Err(format!("it does not start with '{MAGIC}'"));
    }
    if version != FORMAT_VERSION {
        return Err(format!("unknown format version '{version}'"));
    }
    let expected = u32::from_str_radix(crc, 16).map_err(|_| "bad checksum field".to_string())?;
    if crc32fast::hash(number.as_bytes()) != expected {
        return Err("checksum mismatch".to_string());
    }
    number
        .parse()
        .map_err(|_| format!("'{number}' is not a token number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_directory_has_ceiling_zero() {
        let temp = tempfile::tempdir().unwrap();
        let dir = DataDir::open(&temp.path().join("new")).unwrap();
        assert_eq!(dir.read_ceiling().unwrap(), 0);
    }

    #[test]
    fn stored_ceilings_read_back() {
        let temp = tempfile::tempdir().unwrap();
        let dir = DataDir::open(temp.path()).unwrap();
        let writer = dir.ceiling_writer();
        writer.store(100_000).unwrap();
        assert_eq!(dir.read_ceiling().unwrap(), 100_000);
        writer.store(7).unwrap();
        assert_eq!(dir.read_ceiling().unwrap(), 7);
        assert!(!temp.path().join("token-ceiling.tmp").exists());
    }

    #[test]
    fn a_second_open_of_the_same_directory_is_refused() {
        let temp = tempfile::tempdir().unwrap();
        let _first = DataDir::open(temp.path()).unwrap();
        let second = DataDir::open(temp.path()).unwrap_err();
        assert!(matches!(second, DataDirError::Locked { .. }), "{second}");
        assert!(
            second
                .to_string()
                .contains("in use by another leased process")
        );
    }

    #[test]
    fn a_damaged_ceiling_is_refused() {
        let temp = tempfile::tempdir().unwrap();
        let dir = DataDir::open(temp.path()).unwrap();
        dir.ceiling_writer().store(123_456).unwrap();
        let path = temp.path().join(CEILING_FILE);
        let damaged = fs::read_to_string(&path)
            .unwrap()
            .replace("123456", "123406");
        fs::write(&path, damaged).unwrap();
        let error = dir.read_ceiling().unwrap_err();
        assert!(error.to_string().contains("checksum mismatch"), "{error}");
        fs::write(&path, "garbage").unwrap();
        assert!(dir.read_ceiling().is_err());
        fs::write(&path, "").unwrap();
        assert!(dir.read_ceiling().is_err());
    }

    #[test]
    fn a_hand_written_number_is_a_ceiling() {
        let temp = tempfile::tempdir().unwrap();
        let dir = DataDir::open(temp.path()).unwrap();
        fs::write(temp.path().join(CEILING_FILE), "5000000\n").unwrap();
        assert_eq!(dir.read_ceiling().unwrap(), 5_000_000);
    }

    #[test]
    fn a_ceiling_deleted_from_a_used_directory_is_noticed() {
        let temp = tempfile::tempdir().unwrap();
        drop(DataDir::open(temp.path()).unwrap());
        // Reopening a set-up directory is fine.
        assert_eq!(
            DataDir::open(temp.path()).unwrap().read_ceiling().unwrap(),
            0
        );
        fs::remove_file(temp.path().join(CEILING_FILE)).unwrap();
        let error = DataDir::open(temp.path()).unwrap_err();
        assert!(
            matches!(error, DataDirError::MissingCeiling { .. }),
            "{error}"
        );
        // A set-up interrupted before the marker was written starts over.
        fs::write(temp.path().join(LOCK_FILE), "").unwrap();
        assert_eq!(
            DataDir::open(temp.path()).unwrap().read_ceiling().unwrap(),
            0
        );
    }
}
