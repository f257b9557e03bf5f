//! The state machine's snapshot on disk, `raft/snapshot`: a header line,
//! a record holding the snapshot's meta (postcard: last log id and
//! membership), and a record holding its data (the registry in the
//! append-only log's snapshot format, [`super::state_machine`]).
//!
//! It is replaced whole (temporary file, fsync, rename, fsync of the
//! directory) before a snapshot is reported built or installed, so
//! openraft purges only entries a durable snapshot covers. A crash leaves
//! the old snapshot or the new one; any damage stops the start.

use std::io;
use std::path::Path;

use bytes::Bytes;
use openraft::alias::SnapshotMetaOf;

use super::disk::{self, OpenError, Record};
use super::types::TypeConfig;

pub type Meta = SnapshotMetaOf<TypeConfig>;

const SNAPSHOT_FILE: &str = "snapshot";
const MAGIC: &[u8] = b"leased raft snapshot 1\n";

/// Saves a snapshot durably, replacing the one before.
pub fn save(raft: &Path, meta: &Meta, data: &[u8]) -> io::Result<()> {
    let mut out = MAGIC.to_vec();
    disk::frame(
        &postcard::to_stdvec(meta).map_err(io::Error::other)?,
        &mut out,
    )?;
    disk::frame(data, &mut out)?;
    disk::replace(raft, SNAPSHOT_FILE, &out, true)
}

/// The saved snapshot, if there is one.
pub fn load(raft: &Path) -> Result<Option<(Meta, Bytes)>, OpenError> {
    disk::remove_temp(raft, SNAPSHOT_FILE)?;
    let path = raft.join(SNAPSHOT_FILE);
    let Some(bytes) = disk::read_if_present(&path)? else {
        return Ok(None);
    };
    let bytes = Bytes::from(bytes);
    if !bytes.starts_with(MAGIC) {
        return Err(OpenError::corrupt(
            &path,
            0,
            "no leased Raft snapshot header",
        ));
    }
    let at = MAGIC.len();
    let (meta, at) = intact(&path, &bytes, at)?;
    let meta: Meta = postcard::from_bytes(meta)
        .map_err(|error| OpenError::corrupt(&path, MAGIC.len() as u64, error.to_string()))?;
    let (data, end) = intact(&path, &bytes, at)?;
    if end != bytes.len() {
        return Err(OpenError::corrupt(
            &path,
            end as u64,
            "bytes after the data",
        ));
    }
    let data = bytes.slice_ref(data);
    Ok(Some((meta, data)))
}

/// The intact record at `at` and the offset after it.
fn intact<'a>(path: &Path, bytes: &'a [u8], at: usize) -> Result<(&'a [u8], usize), OpenError> {
    match disk::next_record(bytes, at) {
        Record::Intact { payload, end } => Ok((payload, end)),
        Record::End => Err(OpenError::corrupt(path, at as u64, "cut short")),
        Record::Torn(why) | Record::Damaged(why) => Err(OpenError::corrupt(path, at as u64, why)),
    }
}
