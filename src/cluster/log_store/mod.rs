//! The Raft log and vote: durable under `dir/raft/` ([`LogStore::open`]),
//! or in memory for tests that need no disk ([`LogStore::in_memory`]).
//!
//! Files (see [`file`] and [`values`] for their formats):
//! - `log`: the purge point, then the entries as records
//!   `[u32 len][u32 crc32][postcard entry]`; fsynced before openraft is
//!   told an append is flushed (one fsync per round of the writer thread,
//!   [`writer`]); a truncation is fsynced too; a purge rewrites the kept
//!   tail into a new file renamed over the old.
//! - `vote`: fsynced before `save_vote` returns.
//! - `committed`: written without fsync, at most every 100 ms (a hint;
//!   [`values`] says why, [`writer`] why not more often).
//! - `lock`: held while the store is open, so two processes never share
//!   the directory.
//!
//! Every entry also stays in memory, where openraft reads it: the log
//! holds only what the last snapshot does not cover (plus
//! `max_in_snapshot_log_to_keep`), so it is bounded by the snapshot
//! policy.

mod file;
mod values;
mod writer;

#[cfg(test)]
mod killed;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use openraft::alias::{EntryOf, LogIdOf, VoteOf};
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader};
use tokio::sync::oneshot;

use super::disk::{self, OpenError};
use super::types::TypeConfig;
use writer::{Job, Reply, Writer};

#[derive(Debug, Default)]
struct Log {
    vote: Option<VoteOf<TypeConfig>>,
    committed: Option<LogIdOf<TypeConfig>>,
    last_purged: Option<LogIdOf<TypeConfig>>,
    entries: BTreeMap<u64, EntryOf<TypeConfig>>,
}

/// A node's log; clones share it (the reader openraft asks for is one).
/// A durable one's writer thread, and its lock on the directory, end once
/// every clone is dropped and the writes queued before are done.
#[derive(Clone, Debug, Default)]
pub struct LogStore {
    log: Arc<Mutex<Log>>,
    /// The writer thread's queue; `None` in memory.
    disk: Option<Sender<Job>>,
}

impl LogStore {
    /// A log that keeps nothing on disk: a restarted node rejoins empty.
    pub fn in_memory() -> LogStore {
        LogStore::default()
    }

    /// Opens (or creates) the log under `dir/raft/` and reads it back; a
    /// torn last record is cut off, any other damage is an error naming
    /// the file and the offset.
    pub fn open(dir: &Path) -> Result<LogStore, OpenError> {
        let raft = disk::raft_dir(dir)?;
        let lock = disk::lock(&raft)?;
        let vote = values::load_vote(&raft)?;
        let committed = values::load_committed(&raft)?;
        let loaded = file::load(&raft)?;
        let writer = Writer {
            file: file::open_append(&raft)?,
            raft,
            len: loaded.len,
            offsets: loaded.offsets,
            lock,
        };
        let log = Log {
            vote,
            committed,
            last_purged: loaded.purged,
            entries: loaded.entries,
        };
        Ok(LogStore {
            log: Arc::new(Mutex::new(log)),
            disk: Some(writer.start()),
        })
    }

    /// The bytes of a log file with no entry and no purge point, as a new
    /// store writes it.
    pub fn empty_file() -> Vec<u8> {
        file::header(None).expect("an empty log's header encodes")
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().expect("log store lock")
    }

    /// Hands `job` to the writer thread.
    fn send(&self, job: Job) -> io::Result<()> {
        match &self.disk {
            Some(jobs) => jobs
                .send(job)
                .map_err(|_| io::Error::other("the Raft log writer thread has stopped")),
            None => Ok(()),
        }
    }

    /// Hands a job to the writer thread and waits for it to be done.
    async fn ask(&self, job: impl FnOnce(Reply) -> Job) -> io::Result<()> {
        if self.disk.is_none() {
            return Ok(());
        }
        let (done, answer) = oneshot::channel();
        self.send(job(done))?;
        answer
            .await
            .map_err(|_| io::Error::other("the Raft log writer thread has stopped"))?
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<EntryOf<TypeConfig>>, io::Error> {
        Ok(self
            .log()
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<TypeConfig>>, io::Error> {
        Ok(self.log().vote)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let log = self.log();
        let last = log.entries.values().next_back().map(|e| e.log_id);
        Ok(LogState {
            last_purged_log_id: log.last_purged,
            last_log_id: last.or(log.last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &VoteOf<TypeConfig>) -> Result<(), io::Error> {
        let record = values::encode(vote)?;
        self.ask(|done| Job::Vote { record, done }).await?;
        self.log().vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogIdOf<TypeConfig>>,
    ) -> Result<(), io::Error> {
        self.log().committed = committed;
        if self.disk.is_some() {
            let record = values::encode(&committed)?;
            self.send(Job::Committed { record })?;
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<TypeConfig>>, io::Error> {
        Ok(self.log().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = EntryOf<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut records = Vec::new();
        let mut starts = Vec::new();
        {
            let mut log = self.log();
            for mut entry in entries {
                if self.disk.is_some() {
                    starts.push((entry.log_id.index, records.len() as u64));
                    entry = file::encode_compact(entry, &mut records)?;
                }
                log.entries.insert(entry.log_id.index, entry);
            }
        }
        match self.disk {
            Some(_) => self.send(Job::Append {
                records,
                starts,
                done: callback,
            })?,
            // In memory: "flushed" as soon as it is stored.
            None => callback.io_completed(Ok(())),
        }
        Ok(())
    }

    async fn truncate_after(
        &mut self,
        last_log_id: Option<LogIdOf<TypeConfig>>,
    ) -> Result<(), io::Error> {
        let from = last_log_id.map_or(0, |id| id.index + 1);
        self.log().entries.split_off(&from);
        self.ask(|done| Job::Truncate { from, done }).await
    }

    async fn purge(&mut self, log_id: LogIdOf<TypeConfig>) -> Result<(), io::Error> {
        let purged = {
            let mut log = self.log();
            let kept = log.entries.split_off(&(log_id.index + 1));
            log.last_purged = Some(log_id);
            std::mem::replace(&mut log.entries, kept)
        };
        // Freeing the entries a snapshot covers (every op of thousands of
        // entries) took a quarter of a second after a snapshot of 1.4
        // million leases: not on the runtime's threads.
        tokio::task::spawn_blocking(move || drop(purged));
        self.ask(|done| Job::Purge { upto: log_id, done }).await
    }
}
