//! What tells a restored backup from a node's own Raft state, and the
//! floor it needs.

use std::fs;

use super::log_store::LogStore;
use super::migrate::{check_floor, is_restored_backup};

#[test]
fn a_snapshot_without_vote_or_log_entries_is_a_restored_backup() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let raft = dir.join("raft");
    fs::create_dir(&raft).unwrap();
    assert!(!is_restored_backup(dir).unwrap(), "no snapshot");
    fs::write(raft.join("snapshot"), b"copied").unwrap();
    assert!(is_restored_backup(dir).unwrap());
    // What opening the log leaves: still a backup.
    fs::write(raft.join("log"), LogStore::empty_file()).unwrap();
    assert!(is_restored_backup(dir).unwrap());
    fs::write(raft.join("log"), b"entries").unwrap();
    assert!(!is_restored_backup(dir).unwrap(), "a log with entries");
    fs::remove_file(raft.join("log")).unwrap();
    fs::write(raft.join("vote"), b"vote").unwrap();
    assert!(!is_restored_backup(dir).unwrap(), "a vote");
}

#[test]
fn a_restored_backup_needs_a_floor_above_its_last_token() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    for ceiling in [0, 41, 42] {
        let refused = check_floor(dir, ceiling, 42).unwrap_err().0;
        let file = dir.join("token-ceiling");
        assert!(
            refused.contains(&format!("Write a floor into {}", file.display())),
            "{refused}"
        );
        assert!(refused.contains("tokens up to 42"), "{refused}");
        assert!(refused.contains("starting at 43"), "{refused}");
        assert!(refused.contains("last_fencing_token"), "{refused}");
        assert!(
            refused.contains(&format!("holds {ceiling} now")),
            "{refused}"
        );
    }
    assert!(check_floor(dir, 43, 42).is_ok());
    assert!(check_floor(dir, 1_000_000_042, 42).is_ok());
}
