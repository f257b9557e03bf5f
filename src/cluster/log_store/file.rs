//! The log file, `raft/log`: a header line, one record holding the purge
//! point (the last log id dropped, or none), then one record per entry, in
//! index order with no gaps.
//!
//! The file is only ever created whole (temporary file, fsync, rename), so
//! its header is never torn; its last entry may be, by a crash during an
//! append, and is then cut off.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::Path;

use openraft::alias::{EntryOf, LogIdOf};

use super::super::disk::{self, OpenError, Record};
use super::super::types::TypeConfig;

pub(super) type Entry = EntryOf<TypeConfig>;
pub(super) type LogId = LogIdOf<TypeConfig>;

pub(super) const LOG_FILE: &str = "log";
pub(super) const MAGIC: &[u8] = b"leased raft log 1\n";

/// The start of a log file whose entries follow `purged`.
pub(super) fn header(purged: Option<&LogId>) -> std::io::Result<Vec<u8>> {
    let mut out = MAGIC.to_vec();
    disk::frame(
        &postcard::to_stdvec(&purged).map_err(std::io::Error::other)?,
        &mut out,
    )?;
    Ok(out)
}

/// Appends `entry` to `out` as one record, and returns the entry read
/// back from it: what the log keeps in memory.
///
/// On the leader an entry's ops hold their run and lease ids as slices of
/// the client connections' read buffers, and each slice keeps its whole
/// buffer alive. Kept as they came, the entries not yet purged held about
/// five times the memory they do on a follower (1.2 GB against 330 MB
/// with a million acquires in 5,000 entries), and the connections kept
/// faulting in fresh pages for new buffers. The copy read back owns just
/// its bytes; decoding costs far less than the encoding every entry gets
/// anyway.
pub(super) fn encode_compact(entry: Entry, out: &mut Vec<u8>) -> std::io::Result<Entry> {
    let payload = postcard::to_stdvec(&entry).map_err(std::io::Error::other)?;
    drop(entry);
    disk::frame(&payload, out)?;
    postcard::from_bytes(&payload).map_err(std::io::Error::other)
}

/// What the log file holds.
#[derive(Default)]
pub(super) struct Loaded {
    pub purged: Option<LogId>,
    pub entries: BTreeMap<u64, Entry>,
    /// Each entry's record's offset in the file, for `truncate_after`.
    pub offsets: BTreeMap<u64, u64>,
    /// The file's length, up to its last intact record.
    pub len: u64,
}

/// Reads the log in `raft`, creating an empty one if there is none, and
/// cuts off a torn last record.
pub(super) fn load(raft: &Path) -> Result<Loaded, OpenError> {
    // A crash during a purge's rewrite: the log itself is whole.
    disk::remove_temp(raft, LOG_FILE)?;
    let path = raft.join(LOG_FILE);
    let Some(bytes) = disk::read_if_present(&path)? else {
        let header = header(None).map_err(OpenError::io(&path))?;
        disk::replace(raft, LOG_FILE, &header, true).map_err(OpenError::io(&path))?;
        return Ok(Loaded {
            len: header.len() as u64,
            ..Loaded::default()
        });
    };
    let (loaded, torn) = parse(&path, &bytes)?;
    if let Some(reason) = torn {
        tracing::warn!(
            "The Raft log {} ends in a torn record ({reason}), as a crash during an append \
             leaves: cutting it off at byte {}",
            path.display(),
            loaded.len
        );
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(OpenError::io(&path))?;
        file.set_len(loaded.len).map_err(OpenError::io(&path))?;
        file.sync_data().map_err(OpenError::io(&path))?;
    }
    Ok(loaded)
}

/// Opens the log for appending (and for a purge to read its tail).
pub(super) fn open_append(raft: &Path) -> Result<File, OpenError> {
    let path = raft.join(LOG_FILE);
    OpenOptions::new()
        .read(true)
        .append(true)
        .open(&path)
        .map_err(OpenError::io(&path))
}

/// The file's contents, and why its last record was torn if it was.
fn parse(path: &Path, bytes: &[u8]) -> Result<(Loaded, Option<String>), OpenError> {
    if !bytes.starts_with(MAGIC) {
        return Err(OpenError::corrupt(path, 0, "no leased Raft log header"));
    }
    let at = MAGIC.len();
    let Record::Intact { payload, end } = disk::next_record(bytes, at) else {
        return Err(OpenError::corrupt(
            path,
            at as u64,
            "the purge point is damaged",
        ));
    };
    let purged: Option<LogId> = postcard::from_bytes(payload)
        .map_err(|error| OpenError::corrupt(path, at as u64, format!("purge point: {error}")))?;
    let mut loaded = Loaded {
        purged,
        len: end as u64,
        ..Loaded::default()
    };
    let mut at = end;
    loop {
        match disk::next_record(bytes, at) {
            Record::Intact { payload, end } => {
                let entry: Entry = postcard::from_bytes(payload).map_err(|error| {
                    OpenError::corrupt(path, at as u64, format!("an entry: {error}"))
                })?;
                check_follows(&loaded, &entry)
                    .map_err(|why| OpenError::corrupt(path, at as u64, why))?;
                loaded.offsets.insert(entry.log_id.index, at as u64);
                loaded.entries.insert(entry.log_id.index, entry);
                loaded.len = end as u64;
                at = end;
            }
            Record::End => return Ok((loaded, None)),
            Record::Torn(reason) => return Ok((loaded, Some(reason))),
            Record::Damaged(reason) => return Err(OpenError::corrupt(path, at as u64, reason)),
        }
    }
}

/// An entry must follow the one before it, or the purge point.
fn check_follows(loaded: &Loaded, entry: &Entry) -> Result<(), String> {
    let index = entry.log_id.index;
    let expected = match loaded.entries.keys().next_back() {
        Some(last) => Some(last + 1),
        None => loaded.purged.as_ref().map(|purged| purged.index + 1),
    };
    match expected {
        Some(expected) if expected != index => {
            Err(format!("entry {index} where entry {expected} should be"))
        }
        _ => Ok(()),
    }
}
