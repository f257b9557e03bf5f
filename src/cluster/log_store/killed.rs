//! A process killed (`SIGKILL`) while it appends and votes: what it had
//! acknowledged is all there when the log is opened again, and whatever
//! its last write left is cut cleanly.
//!
//! The test binary runs itself as the child (one ignored test, told its
//! directory by an environment variable) and reads what the child
//! acknowledged from its output.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use openraft::RaftLogReader;
use openraft::alias::VoteOf;
use openraft::storage::RaftLogStorage;

use super::LogStore;
use super::tests::{append, entry};
use crate::cluster::types::TypeConfig;

const DIR_VAR: &str = "LEASED_TEST_RAFT_CHILD_DIR";
const CHILD: &str = "cluster::log_store::killed::child_appends_until_killed";

/// The child: appends (and now and then votes) until it is killed,
/// printing what each acknowledgement covers.
#[tokio::test]
#[ignore = "the child process of a_killed_process_keeps_what_it_acknowledged"]
async fn child_appends_until_killed() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let mut store = LogStore::open(dir.as_ref()).unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    let mut index = 0;
    while Instant::now() < until {
        let batch = index % 3 + 1;
        append(
            &mut store,
            (index..index + batch).map(|i| entry(1, i)).collect(),
        )
        .await;
        index += batch;
        println!("appended {}", index - 1);
        if index % 20 < batch {
            store
                .save_vote(&VoteOf::<TypeConfig>::new(index, 1))
                .await
                .unwrap();
            println!("voted {index}");
        }
    }
}

/// Kills the child even if the test fails first.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_killed_process_keeps_what_it_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            CHILD,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_VAR, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let (mut appended, mut voted) = (None, None);
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    while appended.is_none_or(|last| last < 300) {
        let line = lines.next().expect("the child stopped early").unwrap();
        let parse = |rest: &str| rest.trim().parse::<u64>().ok();
        if let Some(rest) = line.strip_prefix("appended ") {
            appended = parse(rest).or(appended);
        } else if let Some(rest) = line.strip_prefix("voted ") {
            voted = parse(rest).or(voted);
        }
    }
    // SIGKILL: what the child wrote is in the kernel's page cache.
    drop(child);

    // The kernel let go of the child's lock when it died.
    let mut store = LogStore::open(dir.path()).unwrap();
    let last = store.get_log_state().await.unwrap().last_log_id.unwrap();
    assert!(Some(last.index) >= appended, "{last:?} behind {appended:?}");
    let expected: Vec<_> = (0..=last.index).map(|i| entry(1, i)).collect();
    assert_eq!(store.try_get_log_entries(..).await.unwrap(), expected);
    let vote = store.read_vote().await.unwrap();
    let acknowledged = voted.map(|term| VoteOf::<TypeConfig>::new(term, 1));
    assert!(vote >= acknowledged, "{vote:?} behind {acknowledged:?}");
}
