//! A rewrite of the log while the server serves: the core walks the
//! registry a chunk at a time and hands the encoded leases to a writer
//! thread that fills a temporary file; every change committed meanwhile is
//! kept aside too and appended when the snapshot is on disk.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::format;
use crate::registry::Registry;

/// Slots of the registry encoded per rewrite step: small enough that a
/// step costs the core about a tenth of a millisecond (measured: 4096
/// slots a step doubled request latency during a rewrite).
pub(super) const REWRITE_CHUNK: usize = 1024;
/// Bytes the rewrite writer writes between two fsyncs.
const INCREMENTAL_FSYNC: usize = 4 << 20;
/// Encoded chunks queued for the rewrite writer before the core waits.
const REWRITE_QUEUE: usize = 16;
/// Changes made during a rewrite beyond this many bytes go to the writer
/// thread; the rest the core writes itself when it installs the new file.
const CATCH_UP: usize = 1 << 20;
/// The bytes of one piece of [`SinceStart`].
const SINCE_START_PIECE: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RewriteStep {
    /// No rewrite under way.
    Idle,
    /// Encoded part of the snapshot; more remains.
    Progress,
    /// Waiting for the writer: nothing to do for now.
    Waiting,
}

/// A rewrite under way.
pub(super) struct Rewrite {
    pub(super) temp: PathBuf,
    /// Encoded snapshot chunks for the writer; dropped to say "done".
    pub(super) chunks: Option<SyncSender<BytesMut>>,
    /// The writer's answer: the finished, fsynced file.
    pub(super) written: Receiver<io::Result<File>>,
    /// The next registry slot to encode, until the leases are out.
    pub(super) cursor: Option<usize>,
    /// Then the run data: `Some(None)` from the first run, `Some(Some(run))`
    /// after `run`, `None` once it is out.
    pub(super) runs_cursor: Option<Option<Bytes>>,
    /// Everything committed since the rewrite began.
    pub(super) since_start: SinceStart,
    pub(super) started: Instant,
    /// A chunk the writer had no room for yet.
    pub(super) held: Option<BytesMut>,
}

impl Rewrite {
    pub(super) fn start(temp: PathBuf, head: Vec<u8>) -> io::Result<Rewrite> {
        let _ = fs::remove_file(&temp);
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&temp)?;
        let (chunks, incoming) = mpsc::sync_channel::<BytesMut>(REWRITE_QUEUE);
        let (done, written) = mpsc::channel();
        std::thread::Builder::new()
            .name("leased-rewrite".into())
            .spawn(move || {
                let _ = done.send(write_snapshot(file, head, incoming));
            })?;
        Ok(Rewrite {
            temp,
            chunks: Some(chunks),
            written,
            cursor: Some(0),
            runs_cursor: Some(None),
            since_start: SinceStart::default(),
            started: Instant::now(),
            held: None,
        })
    }

    /// Encodes the next slots (or retries a chunk the writer had no room
    /// for) and hands them to the writer; closes the channel after the last.
    pub(super) fn send_chunk(&mut self, registry: &Registry) -> RewriteStep {
        let Some(chunks) = &self.chunks else {
            return RewriteStep::Waiting;
        };
        let chunk = match (self.held.take(), self.cursor) {
            (Some(chunk), _) => chunk,
            (None, Some(from)) => {
                let mut out = BytesMut::new();
                self.cursor = registry.snapshot(from, REWRITE_CHUNK, |lease| {
                    format::encode_lease(&lease, &mut out)
                });
                out
            }
            // The leases are out; then the run data, a chunk of runs at a
            // time, in run order.
            (None, None) if self.runs_cursor.is_some() => {
                let mut out = BytesMut::new();
                let after = self.runs_cursor.take().flatten();
                self.runs_cursor = registry
                    .snapshot_runs(after.as_deref(), REWRITE_CHUNK, |run| {
                        format::encode_run(&run, &mut out)
                    })
                    .map(Some);
                out
            }
            // The snapshot is out; the writer also takes the changes made
            // since it began, so that few are left for the core to write
            // when it installs the file.
            (None, None) if self.since_start.len() > CATCH_UP => {
                self.since_start.pop().expect("more than CATCH_UP bytes")
            }
            (None, None) => BytesMut::new(),
        };
        match chunks.try_send(chunk) {
            Ok(()) => {}
            Err(TrySendError::Full(chunk)) => {
                self.held = Some(chunk);
                return RewriteStep::Waiting;
            }
            Err(TrySendError::Disconnected(_)) => {
                self.cursor = None;
                self.runs_cursor = None;
            }
        }
        // The changes since the start go a piece at a time: as many as the
        // writer has room for.
        while self.cursor.is_none()
            && self.runs_cursor.is_none()
            && self.held.is_none()
            && self.since_start.len() > CATCH_UP
        {
            let piece = self.since_start.pop().expect("more than CATCH_UP bytes");
            match chunks.try_send(piece) {
                Ok(()) => {}
                Err(TrySendError::Full(piece)) => {
                    self.held = Some(piece);
                    return RewriteStep::Waiting;
                }
                Err(TrySendError::Disconnected(_)) => break,
            }
        }
        if self.cursor.is_none()
            && self.runs_cursor.is_none()
            && self.held.is_none()
            && self.since_start.len() <= CATCH_UP
        {
            // The snapshot is complete: closing the channel tells the writer.
            self.chunks = None;
        }
        RewriteStep::Progress
    }

    pub(super) fn abandon(self) {
        drop(self.chunks);
        let _ = fs::remove_file(&self.temp);
    }
}

/// Everything committed since a rewrite began, in pieces of about
/// [`SINCE_START_PIECE`] bytes: appending never moves what is already
/// there. (One buffer that grew by doubling copied all of it at every
/// doubling, into fresh pages the kernel had to clear: with 1 KiB
/// `SETDATA`s, 7% of the server's time during a rewrite.)
#[derive(Default)]
pub(super) struct SinceStart {
    pieces: VecDeque<BytesMut>,
    len: usize,
}

impl SinceStart {
    pub(super) fn append(&mut self, bytes: &[u8]) {
        match self.pieces.back_mut() {
            Some(last) if last.capacity() - last.len() >= bytes.len() => {
                last.extend_from_slice(bytes);
            }
            _ if bytes.is_empty() => {}
            _ => {
                let mut piece = BytesMut::with_capacity(SINCE_START_PIECE.max(bytes.len()));
                piece.extend_from_slice(bytes);
                self.pieces.push_back(piece);
            }
        }
        self.len += bytes.len();
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Takes the oldest piece out.
    fn pop(&mut self) -> Option<BytesMut> {
        let piece = self.pieces.pop_front()?;
        self.len -= piece.len();
        Some(piece)
    }

    /// The pieces, oldest first.
    pub(super) fn pieces(&self) -> impl Iterator<Item = &[u8]> {
        self.pieces.iter().map(|piece| &piece[..])
    }
}

/// The rewrite writer thread: the header, then chunks until the channel
/// closes, then fsync. It fsyncs every few MiB on the way, as Redis's
/// `aof-rewrite-incremental-fsync` does: one large flush at the end would
/// hold up the log's own fsyncs behind it (a journal commit waits for it).
fn write_snapshot(mut file: File, head: Vec<u8>, chunks: Receiver<BytesMut>) -> io::Result<File> {
    file.write_all(&head)?;
    let mut unsynced = 0;
    for chunk in chunks {
        file.write_all(&chunk)?;
        unsynced += chunk.len();
        if unsynced >= INCREMENTAL_FSYNC {
            file.sync_data()?;
            unsynced = 0;
        }
    }
    file.sync_all()?;
    Ok(file)
}
