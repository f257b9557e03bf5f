//! The log store: openraft's own storage suite (on disk and in memory),
//! and what a restart reads back (vote, entries, committed, purge point)
//! after appends, truncations, purges, a torn tail and damage.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::alias::{EntryOf, LogIdOf, VoteOf};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::testing::log_id;
use openraft::type_config::TypeConfigExt;
use openraft::{RaftLogReader, StorageError};
use tempfile::TempDir;

use super::LogStore;
use super::file::{LOG_FILE, MAGIC};
use crate::cluster::disk::{self, OpenError, RAFT_DIR, Record};
use crate::cluster::state_machine::{MakeRegistry, StateMachine};
use crate::cluster::types::{Command, Tick, TypeConfig};
use crate::registry::Registry;

fn make() -> MakeRegistry {
    Arc::new(|| Registry::new(10.0, 0))
}

/// Stores in a fresh directory each, for openraft's suite.
struct OnDisk;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for OnDisk {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().unwrap();
        let log = LogStore::open(dir.path()).unwrap();
        let state = StateMachine::open(make(), dir.path()).unwrap();
        Ok((dir, log, state))
    }
}

struct InMemory;

impl StoreBuilder<TypeConfig, LogStore, StateMachine> for InMemory {
    async fn build(&self) -> Result<((), LogStore, StateMachine), StorageError<TypeConfig>> {
        Ok(((), LogStore::in_memory(), StateMachine::new(make())))
    }
}

#[tokio::test]
async fn openraft_storage_suite_passes_on_disk() {
    Suite::test_all(OnDisk).await.unwrap();
}

#[tokio::test]
async fn openraft_storage_suite_passes_in_memory() {
    Suite::test_all(InMemory).await.unwrap();
}

type Entry = EntryOf<TypeConfig>;

fn id(term: u64, index: u64) -> LogIdOf<TypeConfig> {
    log_id::<TypeConfig>(term, 1, index)
}

/// An entry with a payload, so records differ in size and content.
pub(super) fn entry(term: u64, index: u64) -> Entry {
    let tick = Tick {
        time: index as f64,
        reclaim: index as usize,
    };
    Entry::new_normal(id(term, index), Command::Tick(tick))
}

fn entries(term: u64, indexes: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
    indexes.map(|index| entry(term, index)).collect()
}

/// Appends and waits until the store says the entries are flushed.
pub(super) async fn append(store: &mut LogStore, entries: Vec<Entry>) {
    let (done, flushed) = TypeConfig::oneshot();
    store
        .append(entries, IOFlushed::signal(done))
        .await
        .unwrap();
    flushed.await.unwrap().unwrap();
}

/// Opens `dir` once the writer thread of a store dropped before has
/// let go of the lock.
async fn open_when_free(dir: &Path) -> Result<LogStore, OpenError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match LogStore::open(dir) {
            Err(OpenError::Locked { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            opened => return opened,
        }
    }
}

/// Drops `store` and opens its directory again.
async fn reopen(dir: &Path, store: LogStore) -> LogStore {
    drop(store);
    open_when_free(dir).await.unwrap()
}

async fn all_entries(store: &mut LogStore) -> Vec<Entry> {
    store.try_get_log_entries(..).await.unwrap()
}

fn log_path(dir: &Path) -> PathBuf {
    dir.join(RAFT_DIR).join(LOG_FILE)
}

/// The offset of each entry's record in the log file.
fn record_offsets(dir: &Path) -> Vec<usize> {
    let bytes = fs::read(log_path(dir)).unwrap();
    let mut offsets = Vec::new();
    // The purge point's record comes first.
    let mut at = MAGIC.len();
    while let Record::Intact { end, .. } = disk::next_record(&bytes, at) {
        offsets.push(at);
        at = end;
    }
    offsets.remove(0);
    offsets
}

fn flip_byte(path: &Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at] ^= 0x55;
    fs::write(path, bytes).unwrap();
}

#[tokio::test]
async fn a_restart_keeps_the_vote_entries_committed_and_purge_point() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = LogStore::open(dir.path()).unwrap();
    append(&mut store, entries(1, 0..=4)).await;
    append(&mut store, entries(1, 5..=9)).await;
    let vote = VoteOf::<TypeConfig>::new(3, 2);
    store.save_vote(&vote).await.unwrap();
    store.save_committed(Some(id(1, 8))).await.unwrap();
    store.purge(id(1, 3)).await.unwrap();

    let mut store = reopen(dir.path(), store).await;
    assert_eq!(store.read_vote().await.unwrap(), Some(vote));
    assert_eq!(store.read_committed().await.unwrap(), Some(id(1, 8)));
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(id(1, 3)));
    assert_eq!(state.last_log_id, Some(id(1, 9)));
    assert_eq!(all_entries(&mut store).await, entries(1, 4..=9));

    // Appends after the restart land after what was read back.
    append(&mut store, entries(1, 10..=11)).await;
    let mut store = reopen(dir.path(), store).await;
    assert_eq!(all_entries(&mut store).await, entries(1, 4..=11));
}

#[tokio::test]
async fn a_torn_last_record_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = LogStore::open(dir.path()).unwrap();
    append(&mut store, entries(1, 0..=5)).await;
    drop(store);
    let path = log_path(dir.path());

    // Cut short, as a crash in the middle of the write leaves it.
    let len = fs::metadata(&path).unwrap().len();
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len - 3).unwrap();
    let mut store = reopen(dir.path(), LogStore::in_memory()).await;
    assert_eq!(all_entries(&mut store).await, entries(1, 0..=4));
    append(&mut store, entries(2, 5..=6)).await;

    // Whole length, but its bytes never all reached the disk.
    let store = reopen(dir.path(), store).await;
    drop(store);
    let last = *record_offsets(dir.path()).last().unwrap();
    flip_byte(&path, last + disk::FRAME);
    let mut store = reopen(dir.path(), LogStore::in_memory()).await;
    let mut expected = entries(1, 0..=4);
    expected.push(entry(2, 5));
    assert_eq!(all_entries(&mut store).await, expected);
    drop(store);

    // Zeros: the length reached the disk, the data did not.
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(&[0; 40]);
    fs::write(&path, bytes).unwrap();
    let mut store = reopen(dir.path(), LogStore::in_memory()).await;
    assert_eq!(all_entries(&mut store).await, expected);
}

#[tokio::test]
async fn damage_before_the_end_is_refused_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = LogStore::open(dir.path()).unwrap();
    append(&mut store, entries(1, 0..=5)).await;
    let store = reopen(dir.path(), store).await;
    drop(store);
    let second = record_offsets(dir.path())[1];
    flip_byte(&log_path(dir.path()), second + disk::FRAME + 1);

    let Err(error) = open_when_free(dir.path()).await else {
        panic!("a damaged log was opened");
    };
    match &error {
        OpenError::Corrupt { path, offset, .. } => {
            assert_eq!(path, &log_path(dir.path()));
            assert_eq!(*offset, second as u64);
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains(&log_path(dir.path()).display().to_string()),
        "{message}"
    );
    assert!(message.contains(&format!("offset {second}")), "{message}");
}

#[tokio::test]
async fn truncate_then_append_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = LogStore::open(dir.path()).unwrap();
    append(&mut store, entries(1, 0..=9)).await;
    store.truncate_after(Some(id(1, 6))).await.unwrap();
    append(&mut store, entries(2, 7..=8)).await;

    let mut store = reopen(dir.path(), store).await;
    let mut expected = entries(1, 0..=6);
    expected.extend(entries(2, 7..=8));
    assert_eq!(all_entries(&mut store).await, expected);
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(id(2, 8)));

    // Truncating everything, then a restart.
    store.truncate_after(None).await.unwrap();
    let mut store = reopen(dir.path(), store).await;
    assert!(all_entries(&mut store).await.is_empty());
    append(&mut store, entries(3, 0..=1)).await;
    let mut store = reopen(dir.path(), store).await;
    assert_eq!(all_entries(&mut store).await, entries(3, 0..=1));
}

#[tokio::test]
async fn purges_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = LogStore::open(dir.path()).unwrap();
    append(&mut store, entries(1, 0..=9)).await;
    store.purge(id(1, 5)).await.unwrap();
    append(&mut store, entries(1, 10..=12)).await;
    // The kept tail can still be truncated at the right offset.
    store.truncate_after(Some(id(1, 11))).await.unwrap();

    let mut store = reopen(dir.path(), store).await;
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(id(1, 5)));
    assert_eq!(all_entries(&mut store).await, entries(1, 6..=11));

    // Everything, then past the end (a snapshot installed from a leader
    // that is further on).
    store.purge(id(1, 11)).await.unwrap();
    let mut store = reopen(dir.path(), store).await;
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(id(1, 11)));
    assert_eq!(state.last_log_id, Some(id(1, 11)));
    store.purge(id(2, 20)).await.unwrap();
    append(&mut store, entries(2, 21..=21)).await;
    let mut store = reopen(dir.path(), store).await;
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(id(2, 20)));
    assert_eq!(all_entries(&mut store).await, entries(2, 21..=21));
}

#[tokio::test]
async fn a_second_store_on_one_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _store = LogStore::open(dir.path()).unwrap();
    let error = LogStore::open(dir.path()).unwrap_err();
    assert!(matches!(error, OpenError::Locked { .. }), "{error:?}");
    assert!(error.to_string().contains("in use"), "{error}");
}

#[tokio::test]
async fn a_damaged_committed_id_is_forgotten_a_damaged_vote_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = LogStore::open(dir.path()).unwrap();
    append(&mut store, entries(1, 0..=2)).await;
    store.save_committed(Some(id(1, 2))).await.unwrap();
    store
        .save_vote(&VoteOf::<TypeConfig>::new(1, 1))
        .await
        .unwrap();
    let store = reopen(dir.path(), store).await;
    drop(store);
    let raft = dir.path().join(RAFT_DIR);

    flip_byte(&raft.join("committed"), disk::FRAME);
    let mut store = reopen(dir.path(), LogStore::in_memory()).await;
    assert_eq!(store.read_committed().await.unwrap(), None);
    drop(store);

    flip_byte(&raft.join("vote"), disk::FRAME);
    match open_when_free(dir.path()).await {
        Err(OpenError::Corrupt { path, .. }) => assert_eq!(path, raft.join("vote")),
        other => panic!("expected a corrupt vote, got {other:?}"),
    }
}
