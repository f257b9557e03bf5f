//! The log's writer thread: every disk write of the log store, in the
//! order openraft asked for them, off the async runtime.
//!
//! Appends are written as they arrive and fsynced once per round: a round
//! is every job queued when the thread wakes, so appends that arrive while
//! an fsync runs share the next one (group commit). openraft is told an
//! append is flushed only after its fsync. Any other job (truncate, purge,
//! vote) first fsyncs the appends before it, keeping the order.
//!
//! The committed id is written after the fsync that covers it, at most
//! every 100 ms ([`COMMITTED_EVERY`]).
//!
//! After a failed write the file may not hold what openraft was told, so
//! the writer refuses everything after it; openraft then stops the node.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use openraft::storage::IOFlushed;
use tokio::sync::oneshot;

use super::super::disk;
use super::super::types::TypeConfig;
use super::file::{self, LOG_FILE, LogId};
use super::values::{COMMITTED_FILE, VOTE_FILE};

/// The committed id is written at most this often. It is a hint (a
/// restarted node whose hint is older re-applies the rest once the leader
/// says what is committed), and replacing its file after every fsync
/// round (create, write, rename) cost the leader about 7% of its CPU at a
/// thousand rounds a second; the latest value is written once the interval
/// has passed, even if no job comes, and when the thread ends.
const COMMITTED_EVERY: Duration = Duration::from_millis(100);

/// Answers a job openraft waits for.
pub(super) type Reply = oneshot::Sender<io::Result<()>>;

pub(super) enum Job {
    /// Records to append, with each entry's index and its record's offset
    /// in `records`.
    Append {
        records: Vec<u8>,
        starts: Vec<(u64, u64)>,
        done: IOFlushed<TypeConfig>,
    },
    /// Drop the entries from index `from` on.
    Truncate {
        from: u64,
        done: Reply,
    },
    /// Drop the entries up to `upto`, inclusive.
    Purge {
        upto: LogId,
        done: Reply,
    },
    Vote {
        record: Vec<u8>,
        done: Reply,
    },
    Committed {
        record: Vec<u8>,
    },
}

pub(super) struct Writer {
    pub raft: PathBuf,
    pub file: File,
    pub len: u64,
    pub offsets: BTreeMap<u64, u64>,
    /// The directory's lock: released when the thread ends, after its
    /// last write.
    pub lock: File,
}

/// What one round has not finished yet.
#[derive(Default)]
struct Round {
    /// Appends written, not yet fsynced.
    unsynced: Vec<IOFlushed<TypeConfig>>,
    /// The last committed log id handed over.
    committed: Option<Vec<u8>>,
}

struct Thread {
    writer: Writer,
    /// Why writing stopped, if it did.
    failed: Option<String>,
}

impl Writer {
    /// Starts the thread; it ends once every sender is dropped and the
    /// jobs queued before are done.
    pub fn start(self) -> Sender<Job> {
        let (jobs, queue) = mpsc::channel();
        let thread = Thread {
            writer: self,
            failed: None,
        };
        std::thread::Builder::new()
            .name("leased-raft-log".into())
            .spawn(move || thread.run(queue))
            .expect("spawn the Raft log writer thread");
        jobs
    }

    fn append(&mut self, records: &[u8], starts: Vec<(u64, u64)>) -> io::Result<()> {
        if let Err(error) = (&self.file).write_all(records) {
            let _ = self.file.set_len(self.len);
            return Err(error);
        }
        for (index, start) in starts {
            self.offsets.insert(index, self.len + start);
        }
        self.len += records.len() as u64;
        Ok(())
    }

    fn truncate(&mut self, from: u64) -> io::Result<()> {
        let Some((_, &at)) = self.offsets.range(from..).next() else {
            return Ok(());
        };
        self.file.set_len(at)?;
        self.file.sync_data()?;
        self.len = at;
        self.offsets.split_off(&from);
        Ok(())
    }

    /// Writes the entries after `upto` into a new file that replaces the
    /// log whole: a crash leaves either file, each complete.
    fn purge(&mut self, upto: &LogId) -> io::Result<()> {
        let first_kept = upto.index + 1;
        let keep_from = self
            .offsets
            .range(first_kept..)
            .next()
            .map_or(self.len, |(_, &at)| at);
        let mut bytes = file::header(Some(upto))?;
        let header_len = bytes.len() as u64;
        let tail_len = (self.len - keep_from) as usize;
        bytes.resize(bytes.len() + tail_len, 0);
        self.file
            .read_exact_at(&mut bytes[header_len as usize..], keep_from)?;
        disk::replace(&self.raft, LOG_FILE, &bytes, true)?;
        self.file = file::open_append(&self.raft).map_err(io::Error::other)?;
        self.offsets = self
            .offsets
            .split_off(&first_kept)
            .into_iter()
            .map(|(index, at)| (index, at - keep_from + header_len))
            .collect();
        self.len = bytes.len() as u64;
        Ok(())
    }
}

impl Thread {
    fn run(mut self, queue: Receiver<Job>) {
        // The committed id not written yet, and when it last was.
        let mut committed: Option<Vec<u8>> = None;
        let mut written: Option<Instant> = None;
        loop {
            let job = match &committed {
                None => queue.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(_) => {
                    let since = written.map_or(COMMITTED_EVERY, |at| at.elapsed());
                    queue.recv_timeout(COMMITTED_EVERY.saturating_sub(since))
                }
            };
            match job {
                Ok(job) => {
                    let mut round = Round::default();
                    self.take(job, &mut round);
                    while let Ok(job) = queue.try_recv() {
                        self.take(job, &mut round);
                    }
                    self.sync(&mut round);
                    if let Some(record) = round.committed.take() {
                        committed = Some(record);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            let due = written.is_none_or(|at| at.elapsed() >= COMMITTED_EVERY);
            if let Some(record) = committed.take_if(|_| due) {
                self.write_committed(&record);
                written = Some(Instant::now());
            }
        }
        if let Some(record) = committed {
            self.write_committed(&record);
        }
        drop(self.writer.lock);
    }

    fn write_committed(&mut self, record: &[u8]) {
        let raft = self.writer.raft.clone();
        let _ = self.step(|_| disk::replace(&raft, COMMITTED_FILE, record, false));
    }

    fn take(&mut self, job: Job, round: &mut Round) {
        match job {
            Job::Append {
                records,
                starts,
                done,
            } => match self.step(|writer| writer.append(&records, starts)) {
                Ok(()) => round.unsynced.push(done),
                Err(error) => done.io_completed(Err(error)),
            },
            // Written once the round's appends are synced: it never points
            // past the durable log.
            Job::Committed { record } => round.committed = Some(record),
            Job::Truncate { from, done } => {
                self.sync(round);
                let _ = done.send(self.step(|writer| writer.truncate(from)));
            }
            Job::Purge { upto, done } => {
                self.sync(round);
                let _ = done.send(self.step(|writer| writer.purge(&upto)));
            }
            Job::Vote { record, done } => {
                self.sync(round);
                let raft = self.writer.raft.clone();
                let _ = done.send(self.step(|_| disk::replace(&raft, VOTE_FILE, &record, true)));
            }
        }
    }

    /// Fsyncs the round's appends, then tells openraft they are flushed.
    fn sync(&mut self, round: &mut Round) {
        if round.unsynced.is_empty() {
            return;
        }
        let synced = self.step(|writer| writer.file.sync_data());
        for done in round.unsynced.drain(..) {
            let result = match &synced {
                Ok(()) => Ok(()),
                Err(error) => Err(io::Error::new(error.kind(), error.to_string())),
            };
            done.io_completed(result);
        }
    }

    /// Runs one disk step, unless an earlier one failed.
    fn step(&mut self, step: impl FnOnce(&mut Writer) -> io::Result<()>) -> io::Result<()> {
        if let Some(why) = &self.failed {
            return Err(io::Error::other(format!(
                "the Raft log in {} stopped after a failed write: {why}",
                self.writer.raft.display()
            )));
        }
        let result = step(&mut self.writer);
        if let Err(error) = &result {
            tracing::error!(
                "Writing the Raft log in {} failed: {error}",
                self.writer.raft.display()
            );
            self.failed = Some(error.to_string());
        }
        result
    }
}
