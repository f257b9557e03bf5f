//! The Raft log, in memory.
//!
//! Nothing here survives the process: the vote and the entries are lost
//! with it, so a restarted node rejoins empty and is brought up to date
//! by the leader (entries, or a snapshot). A durable log, with the vote
//! fsynced before it is granted, comes in a later slice.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex};

use openraft::alias::{EntryOf, LogIdOf, VoteOf};
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader};

use super::types::TypeConfig;

#[derive(Debug, Default)]
struct Log {
    vote: Option<VoteOf<TypeConfig>>,
    committed: Option<LogIdOf<TypeConfig>>,
    last_purged: Option<LogIdOf<TypeConfig>>,
    entries: BTreeMap<u64, EntryOf<TypeConfig>>,
}

/// A node's log; clones share it (the reader openraft asks for is one).
#[derive(Clone, Debug, Default)]
pub struct LogStore {
    log: Arc<Mutex<Log>>,
}

impl LogStore {
    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().expect("log store lock")
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
        self.log().vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogIdOf<TypeConfig>>,
    ) -> Result<(), io::Error> {
        self.log().committed = committed;
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
        {
            let mut log = self.log();
            for entry in entries {
                log.entries.insert(entry.log_id.index, entry);
            }
        }
        // In memory: "flushed" as soon as it is stored.
        callback.io_completed(Ok(()));
        Ok(())
    }

    async fn truncate_after(
        &mut self,
        last_log_id: Option<LogIdOf<TypeConfig>>,
    ) -> Result<(), io::Error> {
        let from = last_log_id.map_or(0, |id| id.index + 1);
        self.log().entries.split_off(&from);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogIdOf<TypeConfig>) -> Result<(), io::Error> {
        let mut log = self.log();
        log.entries = log.entries.split_off(&(log_id.index + 1));
        log.last_purged = Some(log_id);
        Ok(())
    }
}
