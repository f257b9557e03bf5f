//! What a cluster node knows of its own snapshot file, `dir/raft/snapshot`,
//! for whoever backs it up: whether a build is under way (`BGSAVE`), when
//! the file last changed (`LASTSAVE`), how the last build went, and what
//! the file holds (its last log index and fencing token), shown in `INFO
//! persistence` and logged.
//!
//! A build begins because `BGSAVE` asked for one or because openraft's
//! snapshot policy did; either way only one runs at a time. `BGSAVE` marks
//! a build as wanted before it asks openraft, so a second `BGSAVE` right
//! after it is refused as Redis refuses one during a save, and it asks
//! again while openraft drops the request (it does while the build before
//! is being reported done).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;
use tracing::warn;

use super::node::Node;
use crate::core::SnapshotReport;

/// How long `BGSAVE` waits for the build it asked for to begin before it
/// asks again, and how many times it asks.
const BEGIN_PATIENCE: Duration = Duration::from_millis(500);
const ASKS: usize = 20;

/// `BGSAVE`: has `node` build its snapshot now, in the background;
/// refused while one is wanted or being built.
pub fn bgsave(node: &Arc<Node>) -> Result<(), InProgress> {
    let saves = node.state.saves().clone();
    let begun = saves.want()?;
    let node = node.clone();
    tokio::spawn(async move {
        for _ in 0..ASKS {
            if let Err(error) = node.raft.trigger().snapshot().await {
                warn!("BGSAVE: this node's Raft has stopped ({error})");
                break;
            }
            saves.wait_begun(begun, BEGIN_PATIENCE).await;
            if saves.began_after(begun) {
                return;
            }
        }
        warn!("BGSAVE: no snapshot build began");
        saves.not_begun();
    });
    Ok(())
}

/// A node's saves, shared by its state machine (which builds, installs
/// and loads snapshots) and its core (which answers `BGSAVE` and INFO).
#[derive(Debug, Default)]
pub struct Saves {
    state: Mutex<State>,
    /// Woken when a build begins.
    begun: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// `BGSAVE` wants a build that has not begun yet.
    wanted: bool,
    /// When the build under way began.
    building: Option<Instant>,
    /// Builds begun since the node started.
    begun: u64,
    /// Builds completed since the node started (`rdb_saves`).
    saved: u64,
    /// When the file last changed: built, installed, or (at start) its
    /// modification time.
    last_save: Option<SystemTime>,
    /// Whether the last build completed.
    last_failed: bool,
    /// How long the last completed build took.
    last_took: Option<Duration>,
    /// What the file holds, once there is one.
    holds: Option<Holds>,
}

/// What a snapshot file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holds {
    /// The last log index it covers.
    pub index: u64,
    /// The last fencing token issued in it.
    pub last_token: u64,
}

/// Why `BGSAVE` started nothing.
#[derive(Debug, PartialEq, Eq)]
pub struct InProgress;

impl Saves {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("saves lock")
    }

    /// The file found at start, written at `modified`.
    pub fn loaded(&self, holds: Holds, modified: Option<SystemTime>) {
        let mut state = self.lock();
        state.holds = Some(holds);
        state.last_save = modified;
    }

    /// `BGSAVE`: marks a build as wanted, unless one is wanted or under
    /// way. Returns the count of builds begun so far: the build wanted is
    /// the next.
    pub fn want(&self) -> Result<u64, InProgress> {
        let mut state = self.lock();
        if state.wanted || state.building.is_some() {
            return Err(InProgress);
        }
        state.wanted = true;
        Ok(state.begun)
    }

    /// Whether a build began after `begun` builds had (or none is wanted
    /// any more).
    pub fn began_after(&self, begun: u64) -> bool {
        let state = self.lock();
        state.begun > begun || !state.wanted
    }

    /// Waits until a build begins, or `patience` passes.
    pub async fn wait_begun(&self, begun: u64, patience: Duration) {
        let notified = self.begun.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.began_after(begun) {
            return;
        }
        let _ = tokio::time::timeout(patience, notified).await;
    }

    /// The build `BGSAVE` wanted could not be started.
    pub fn not_begun(&self) {
        let mut state = self.lock();
        if state.wanted && state.building.is_none() {
            state.wanted = false;
            state.last_failed = true;
        }
    }

    /// A build begins.
    pub fn begin(&self) {
        let mut state = self.lock();
        state.wanted = false;
        state.building = Some(Instant::now());
        state.begun += 1;
        drop(state);
        self.begun.notify_waiters();
    }

    /// The build under way ended: its file in place holding `holds`, or
    /// failed (`None`).
    pub fn end(&self, holds: Option<Holds>) {
        let mut state = self.lock();
        let took = state.building.take().map(|began| began.elapsed());
        state.last_failed = holds.is_none();
        if let Some(holds) = holds {
            state.saved += 1;
            state.last_took = took;
            state.last_save = Some(SystemTime::now());
            state.keep(holds);
        }
    }

    /// A snapshot received from the leader replaced the file.
    pub fn installed(&self, holds: Holds) {
        let mut state = self.lock();
        state.last_save = Some(SystemTime::now());
        state.keep(holds);
    }

    /// What the file holds now.
    pub fn holds(&self) -> Option<Holds> {
        self.lock().holds
    }

    /// The figures INFO shows; `applied` is the node's last applied index.
    pub fn report(&self, applied: Option<u64>) -> SnapshotReport {
        let state = self.lock();
        let since = |index| applied.map_or(0, |applied: u64| applied.saturating_sub(index));
        SnapshotReport {
            in_progress: state.wanted || state.building.is_some(),
            current_secs: state.building.map(|began| began.elapsed().as_secs()),
            last_save_unix: (state.last_save)
                .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
                .map(|since| since.as_secs()),
            last_ok: !state.last_failed,
            last_took_secs: state.last_took.map(|took| took.as_secs()),
            saves: state.saved,
            changes_since: match state.holds {
                Some(holds) => since(holds.index),
                None => applied.map_or(0, |applied| applied + 1),
            },
            index: state.holds.map(|holds| holds.index),
            last_token: state.holds.map(|holds| holds.last_token),
        }
    }
}

impl State {
    /// Keeps what the newer of two files holds (a build racing an install
    /// never replaces a newer file).
    fn keep(&mut self, holds: Holds) {
        if self.holds.is_none_or(|held| held.index <= holds.index) {
            self.holds = Some(holds);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holds(index: u64, last_token: u64) -> Holds {
        Holds { index, last_token }
    }

    #[test]
    fn a_second_bgsave_is_refused_until_the_build_ends() {
        let saves = Saves::default();
        assert_eq!(saves.want(), Ok(0));
        assert_eq!(saves.want(), Err(InProgress));
        assert!(saves.report(Some(10)).in_progress);
        assert!(!saves.began_after(0));
        saves.begin();
        assert!(saves.began_after(0));
        assert_eq!(saves.want(), Err(InProgress));
        saves.end(Some(holds(10, 7)));
        let report = saves.report(Some(12));
        assert!(!report.in_progress && report.last_ok);
        assert_eq!((report.index, report.last_token), (Some(10), Some(7)));
        assert_eq!((report.saves, report.changes_since), (1, 2));
        assert!(report.last_save_unix.is_some());
        assert_eq!(saves.want(), Ok(1));
    }

    #[test]
    fn a_failed_or_never_begun_build_is_reported_and_frees_bgsave() {
        let saves = Saves::default();
        saves.loaded(holds(5, 3), None);
        saves.want().unwrap();
        saves.not_begun();
        let report = saves.report(Some(5));
        assert!(!report.in_progress && !report.last_ok);
        assert_eq!(report.last_save_unix, None);
        saves.want().unwrap();
        saves.begin();
        // A policy build that began meanwhile is not undone.
        saves.not_begun();
        assert!(saves.report(None).in_progress);
        saves.end(None);
        let report = saves.report(Some(9));
        assert!(!report.last_ok && report.saves == 0);
        assert_eq!((report.index, report.changes_since), (Some(5), 4));
    }

    #[test]
    fn an_older_build_never_replaces_what_a_newer_install_holds() {
        let saves = Saves::default();
        saves.installed(holds(100, 50));
        saves.begin();
        saves.end(Some(holds(90, 45)));
        assert_eq!(saves.holds(), Some(holds(100, 50)));
        saves.installed(holds(120, 60));
        assert_eq!(saves.holds(), Some(holds(120, 60)));
        // A node with no snapshot: every applied entry is a change.
        let none = Saves::default();
        assert_eq!(none.report(Some(4)).changes_since, 5);
        assert_eq!(none.report(None).changes_since, 0);
    }
}
