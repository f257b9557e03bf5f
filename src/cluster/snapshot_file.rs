//! The state machine's snapshot on disk, `raft/snapshot`.
//!
//! Format 2 (written since snapshots are built a step at a time): the
//! header line `leased raft snapshot 2`, then records ([`super::disk`]'s
//! framing) whose payload starts with a tag byte: `d` and a piece of the
//! data (the registry in the append-only log's snapshot format,
//! [`super::snapshot_walk`]; the pieces in order make it whole), as many
//! as the writer streamed, then one `m` and the snapshot's meta (postcard:
//! last log id and membership), last. The meta comes last because a build
//! knows its last log id only once its walk is done.
//!
//! Format 1 (`leased raft snapshot 1`: a meta record, then one record
//! with all the data) is still read, so a node restarted on one starts;
//! the next snapshot it saves is format 2.
//!
//! A snapshot is written to a temporary file ([`Writer`]; fsynced every
//! few MiB on the way, as the log rewrite is) and replaces the one before
//! (fsync, rename, fsync of the directory) before it is reported built or
//! installed, so openraft purges only entries a durable snapshot covers. A
//! crash leaves the old snapshot or the new one; any damage stops the
//! start.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use openraft::alias::SnapshotMetaOf;

use super::disk::{self, OpenError, Record};
use super::types::TypeConfig;

pub type Meta = SnapshotMetaOf<TypeConfig>;

const SNAPSHOT_FILE: &str = "snapshot";
/// Where a build streams its snapshot (an install saves through the
/// temporary file [`disk::temp_path`] names, so the two never meet).
const BUILD_FILE: &str = "snapshot.build";
const MAGIC_1: &[u8] = b"leased raft snapshot 1\n";
const MAGIC_2: &[u8] = b"leased raft snapshot 2\n";
const MAGIC_PREFIX: &[u8] = b"leased raft snapshot ";
const DATA: u8 = b'd';
const META: u8 = b'm';
/// The most data one record holds when a whole snapshot is saved.
const PIECE: usize = 64 << 20;
/// Bytes written between two fsyncs: one large flush at the end would
/// hold up the log's own fsyncs behind it.
const INCREMENTAL_FSYNC: usize = 4 << 20;

/// A snapshot being written to its temporary file.
pub struct Writer {
    file: File,
    raft: PathBuf,
    temp: PathBuf,
    unsynced: usize,
}

impl Writer {
    /// Starts the file a build streams to, replacing any left over.
    pub fn build(raft: &Path) -> io::Result<Writer> {
        Writer::create(raft, raft.join(BUILD_FILE))
    }

    fn create(raft: &Path, temp: PathBuf) -> io::Result<Writer> {
        let mut file = File::create(&temp)?;
        file.write_all(MAGIC_2)?;
        Ok(Writer {
            file,
            raft: raft.to_path_buf(),
            temp,
            unsynced: 0,
        })
    }

    /// Appends a piece of the data.
    pub fn data(&mut self, piece: &[u8]) -> io::Result<()> {
        if piece.is_empty() {
            return Ok(());
        }
        self.record(DATA, piece)?;
        self.unsynced += piece.len();
        if self.unsynced >= INCREMENTAL_FSYNC {
            self.file.sync_data()?;
            self.unsynced = 0;
        }
        Ok(())
    }

    /// Appends the meta and puts the file in the snapshot's place, durably.
    pub fn finish(mut self, meta: &Meta) -> io::Result<()> {
        self.record(META, &postcard::to_stdvec(meta).map_err(io::Error::other)?)?;
        self.file.sync_all()?;
        fs::rename(&self.temp, self.raft.join(SNAPSHOT_FILE))?;
        disk::sync_dir(&self.raft)
    }

    /// Removes the unfinished file.
    pub fn abandon(self) {
        let _ = fs::remove_file(&self.temp);
    }

    fn record(&mut self, tag: u8, payload: &[u8]) -> io::Result<()> {
        let len = u32::try_from(payload.len() + 1)
            .map_err(|_| io::Error::other(format!("a record of {} bytes", payload.len())))?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&[tag]);
        crc.update(payload);
        let mut frame = [0; disk::FRAME + 1];
        frame[..4].copy_from_slice(&len.to_le_bytes());
        frame[4..disk::FRAME].copy_from_slice(&crc.finalize().to_le_bytes());
        frame[disk::FRAME] = tag;
        self.file.write_all(&frame)?;
        self.file.write_all(payload)
    }
}

/// The snapshot's file under `raft`: what a backup copies.
pub fn path(raft: &Path) -> PathBuf {
    raft.join(SNAPSHOT_FILE)
}

/// Saves a whole snapshot durably, replacing the one before.
pub fn save(raft: &Path, meta: &Meta, data: &[u8]) -> io::Result<()> {
    let mut writer = Writer::create(raft, disk::temp_path(raft, SNAPSHOT_FILE))?;
    let written = data.chunks(PIECE).try_for_each(|piece| writer.data(piece));
    match written {
        Ok(()) => writer.finish(meta),
        Err(error) => {
            writer.abandon();
            Err(error)
        }
    }
}

/// The saved snapshot, if there is one.
pub fn load(raft: &Path) -> Result<Option<(Meta, Bytes)>, OpenError> {
    disk::remove_temp(raft, SNAPSHOT_FILE)?;
    remove_build(raft)?;
    let path = raft.join(SNAPSHOT_FILE);
    let Some(bytes) = disk::read_if_present(&path)? else {
        return Ok(None);
    };
    let bytes = Bytes::from(bytes);
    if bytes.starts_with(MAGIC_1) {
        load_1(&path, &bytes).map(Some)
    } else if bytes.starts_with(MAGIC_2) {
        load_2(&path, &bytes).map(Some)
    } else if bytes.starts_with(MAGIC_PREFIX) {
        Err(OpenError::corrupt(
            &path,
            0,
            "a snapshot format this leased cannot read (written by a newer one?)",
        ))
    } else {
        Err(OpenError::corrupt(
            &path,
            0,
            "no leased Raft snapshot header",
        ))
    }
}

/// Format 1: the meta record, then the data record.
fn load_1(path: &Path, bytes: &Bytes) -> Result<(Meta, Bytes), OpenError> {
    let at = MAGIC_1.len();
    let (meta, at) = intact(path, bytes, at)?;
    let meta: Meta = postcard::from_bytes(meta)
        .map_err(|error| OpenError::corrupt(path, MAGIC_1.len() as u64, error.to_string()))?;
    let (data, end) = intact(path, bytes, at)?;
    if end != bytes.len() {
        return Err(OpenError::corrupt(path, end as u64, "bytes after the data"));
    }
    Ok((meta, bytes.slice_ref(data)))
}

/// Format 2: data records, then the meta record, last.
fn load_2(path: &Path, bytes: &Bytes) -> Result<(Meta, Bytes), OpenError> {
    let mut pieces = Vec::new();
    let mut at = MAGIC_2.len();
    loop {
        let (payload, end) = intact(path, bytes, at)?;
        match payload.split_first() {
            Some((&DATA, piece)) => pieces.push(piece),
            Some((&META, meta)) => {
                let meta: Meta = postcard::from_bytes(meta)
                    .map_err(|error| OpenError::corrupt(path, at as u64, error.to_string()))?;
                if end != bytes.len() {
                    return Err(OpenError::corrupt(path, end as u64, "bytes after the meta"));
                }
                return Ok((meta, joined(bytes, &pieces)));
            }
            _ => {
                return Err(OpenError::corrupt(
                    path,
                    at as u64,
                    "a record of no known kind",
                ));
            }
        }
        at = end;
    }
}

/// The data pieces as one buffer (without a copy when there is one).
fn joined(bytes: &Bytes, pieces: &[&[u8]]) -> Bytes {
    if let [piece] = pieces {
        return bytes.slice_ref(piece);
    }
    let mut data = BytesMut::with_capacity(pieces.iter().map(|piece| piece.len()).sum());
    for piece in pieces {
        data.extend_from_slice(piece);
    }
    data.freeze()
}

fn remove_build(raft: &Path) -> Result<(), OpenError> {
    let path = raft.join(BUILD_FILE);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(OpenError::io(&path)(error)),
    }
}

/// The intact record at `at` and the offset after it.
fn intact<'a>(path: &Path, bytes: &'a [u8], at: usize) -> Result<(&'a [u8], usize), OpenError> {
    match disk::next_record(bytes, at) {
        Record::Intact { payload, end } => Ok((payload, end)),
        Record::End => Err(OpenError::corrupt(path, at as u64, "cut short")),
        Record::Torn(why) | Record::Damaged(why) => Err(OpenError::corrupt(path, at as u64, why)),
    }
}
