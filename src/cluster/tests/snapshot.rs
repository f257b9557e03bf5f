//! Snapshots built a step at a time while entries go on being applied,
//! installed, saved and started from; the first snapshot format still
//! read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use bytes::Bytes;
use openraft::RaftSnapshotBuilder;
use openraft::alias::{EntryOf, SnapshotMetaOf};
use openraft::entry::RaftEntry;
use openraft::storage::RaftStateMachine;
use openraft::testing::{log_id, membership_ent};

use super::super::disk;
use super::super::snapshot_walk::STEP;
use super::super::state_machine::StateMachine;
use super::{
    Cluster, NodeId, Op, State, acquire, acquired, apply_batch, apply_tick, decode_into, heartbeat,
    make, release, snapshot_and_purge, state,
};
use crate::cluster::types::{Batch, Command, Tick, TypeConfig};
use crate::registry::{Lease, Outcome, Registry};

/// Leases in the registry before a build: several steps' worth.
const LEASES: usize = 3 * STEP + 100;

/// A state machine fed entries, beside a registry fed the same, with the
/// reference state after every entry.
struct Fed {
    machine: StateMachine,
    reference: Registry,
    states: BTreeMap<u64, State>,
    index: u64,
    time: f64,
    leases: Vec<Lease>,
}

impl Fed {
    fn new(machine: StateMachine) -> Fed {
        let mut fed = Fed {
            machine,
            reference: make()(),
            states: BTreeMap::new(),
            index: 0,
            time: 100.0,
            leases: Vec::new(),
        };
        let members = vec![BTreeSet::from([1, 2, 3])];
        fed.machine
            .apply_entry(membership_ent::<TypeConfig>(1, 1, 1, members));
        fed.index = 1;
        fed.states.insert(1, state(&fed.reference));
        fed
    }

    /// Applies `command` as the next entry to both.
    fn apply(&mut self, command: Command) -> Vec<Outcome> {
        self.index += 1;
        let expected = match &command {
            Command::Batch(batch) => apply_batch(&mut self.reference, batch),
            Command::Tick(tick) => apply_tick(&mut self.reference, *tick),
        };
        let entry =
            EntryOf::<TypeConfig>::new_normal(log_id::<TypeConfig>(1, 1, self.index), command);
        let outcomes = self.machine.apply_entry(entry);
        assert_eq!(outcomes, expected);
        self.states.insert(self.index, state(&self.reference));
        outcomes
    }

    fn batch(&mut self, ops: Vec<Op>) -> Vec<Outcome> {
        let time = self.time;
        self.apply(Command::Batch(Batch { time, ops }))
    }

    /// `count` leases with run data on every tenth.
    fn fill(&mut self, count: usize) {
        let ops = (0..count)
            .map(|i| acquire(&format!("run{i}"), "w", 10.0))
            .collect();
        let outcomes = self.batch(ops);
        self.leases = outcomes.iter().map(acquired).collect();
        let data = (self.leases.iter().step_by(10))
            .map(|lease| set_data(lease, "checkpoint"))
            .collect();
        self.batch(data);
    }

    /// Step `k` of a history that touches leases the walk has passed and
    /// leases it has yet to reach: heartbeats, releases, new leases (some
    /// in freed slots), run data, takeovers of expired leases, and time.
    fn churn(&mut self, k: usize) {
        let n = self.leases.len();
        self.time += 0.7;
        let beat = heartbeat(&self.leases[(k * 7) % n]);
        let gone = release(&self.leases[(k * 13 + 5) % n]);
        let data = set_data(&self.leases[(k * 11 + 3) % n], "later");
        let outcomes = self.batch(vec![
            beat,
            gone,
            data,
            acquire(&format!("new{k}"), "w2", 10.0),
            // Taken over once its first lease expired (or released).
            acquire(&format!("run{}", (k * 17 + 1) % n), "w3", 10.0),
        ]);
        for outcome in &outcomes[3..] {
            if let Outcome::Acquired(Some(lease)) = outcome {
                self.leases.push(lease.clone());
            }
        }
        if k.is_multiple_of(3) {
            self.apply(Command::Tick(Tick {
                time: self.time + 0.3,
                reclaim: 16,
            }));
        }
    }
}

fn set_data(lease: &Lease, value: &'static str) -> Op {
    Op::SetData {
        lease_id: lease.lease_id().into(),
        token: lease.fencing_token,
        value: Bytes::from_static(value.as_bytes()),
        now: None,
    }
}

fn decoded(data: &[u8]) -> State {
    let mut registry = make()();
    decode_into(&mut registry, data).unwrap();
    state(&registry)
}

/// Asserts two states are the same, naming the first difference.
fn assert_same(got: &State, expected: &State) {
    assert_eq!((got.0, got.1), (expected.0, expected.1), "last token, time");
    let leases = got.2.iter().zip(&expected.2);
    if let Some((got, expected)) = leases.clone().find(|(got, expected)| got != expected) {
        panic!("lease {got:?}, expected {expected:?}");
    }
    assert_eq!(got.2.len(), expected.2.len(), "leases");
    let runs = got.3.iter().zip(&expected.3);
    if let Some((got, expected)) = runs.clone().find(|(got, expected)| got != expected) {
        panic!("run change {got:?}, expected {expected:?}");
    }
    assert_eq!(got.3.len(), expected.3.len(), "run changes");
}

fn reopened(dir: &Path) -> StateMachine {
    StateMachine::open(make(), dir).unwrap()
}

#[test]
fn a_snapshot_built_while_entries_are_applied_is_the_registry_at_its_last_log_id() {
    let dir = tempfile::tempdir().unwrap();
    let mut fed = Fed::new(reopened(dir.path()));
    fed.fill(LEASES);
    let before = fed.index;

    let machine = fed.machine.clone();
    let mut steps = 0;
    let snapshot = machine
        .build_stepping(|| {
            fed.churn(steps);
            steps += 1;
        })
        .unwrap();

    // Entries were applied between the walk's steps, and the snapshot
    // holds every one of them.
    assert!(steps > LEASES / STEP, "{steps} steps");
    let last = snapshot.meta.last_log_id.expect("a last log id").index;
    assert!(last > before);
    assert_eq!(last, fed.index);
    assert_same(&decoded(&snapshot.snapshot), &fed.states[&last]);
    assert_eq!(
        snapshot.meta.last_membership.log_id().map(|id| id.index),
        Some(1)
    );
    // Saved: a state machine opened on the directory starts from it.
    let restarted = reopened(dir.path());
    assert_eq!(restarted.last_applied_index(), Some(last));
    assert_eq!(state(&restarted.lock().registry), fed.states[&last]);
    // Recording stopped with the build: later entries are not kept.
    fed.churn(steps);
    assert!(fed.machine.lock().registry.take_changes().next().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_installed_snapshot_replaces_the_registry_and_is_saved() {
    let mut fed = Fed::new(StateMachine::new(make()));
    fed.fill(LEASES);
    for k in 0..5 {
        fed.churn(k);
    }
    let mut source = fed.machine.clone();
    let built = source
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let last = built.meta.last_log_id.unwrap().index;
    assert_eq!(last, fed.index);

    let dir = tempfile::tempdir().unwrap();
    let mut target = reopened(dir.path());
    let mut other = Fed::new(target.clone());
    other.fill(10);
    target
        .install_snapshot(&built.meta, built.snapshot.clone())
        .await
        .unwrap();
    assert_eq!(target.last_applied_index(), Some(last));
    assert_eq!(state(&target.lock().registry), fed.states[&last]);
    let current = target.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, built.meta);
    let restarted = reopened(dir.path());
    assert_eq!(restarted.last_applied_index(), Some(last));
    assert_eq!(state(&restarted.lock().registry), fed.states[&last]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_that_an_install_overtakes_walks_the_installed_registry() {
    let mut source = Fed::new(StateMachine::new(make()));
    source.fill(100);
    source.time += 50.0;
    source.fill(LEASES);
    let installed = source.machine.build().unwrap();
    let last = installed.meta.last_log_id.unwrap().index;

    let dir = tempfile::tempdir().unwrap();
    let mut fed = Fed::new(reopened(dir.path()));
    fed.fill(LEASES);
    let machine = fed.machine.clone();
    let mut installer = fed.machine.clone();
    let runtime = tokio::runtime::Handle::current();
    let mut installs = 0;
    let built = tokio::task::spawn_blocking(move || {
        machine.build_stepping(|| {
            if installs == 0 {
                let install =
                    installer.install_snapshot(&installed.meta, installed.snapshot.clone());
                runtime.block_on(install).unwrap();
            }
            installs += 1;
        })
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(built.meta.last_log_id.unwrap().index, last);
    assert_eq!(decoded(&built.snapshot), source.states[&last]);
    assert_eq!(
        state(&reopened(dir.path()).lock().registry),
        source.states[&last]
    );
}

#[test]
fn a_snapshot_saved_in_the_first_format_is_still_read() {
    let mut fed = Fed::new(StateMachine::new(make()));
    fed.fill(50);
    let built = fed.machine.build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let raft = disk::raft_dir(dir.path()).unwrap();
    let mut old = b"leased raft snapshot 1\n".to_vec();
    let meta: &SnapshotMetaOf<TypeConfig> = &built.meta;
    disk::frame(&postcard::to_stdvec(meta).unwrap(), &mut old).unwrap();
    disk::frame(&built.snapshot, &mut old).unwrap();
    std::fs::write(raft.join("snapshot"), old).unwrap();

    let restarted = reopened(dir.path());
    assert_eq!(restarted.last_applied_index(), Some(fed.index));
    assert_eq!(state(&restarted.lock().registry), fed.states[&fed.index]);
    // A format this build does not know stops the start, saying why.
    std::fs::write(raft.join("snapshot"), b"leased raft snapshot 9\n").unwrap();
    let error = StateMachine::open(make(), dir.path()).err().unwrap();
    assert!(error.to_string().contains("cannot read"), "{error}");
}

const IDS: [NodeId; 3] = [1, 2, 3];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarts_from_a_snapshot_of_many_steps() {
    let mut cluster = Cluster::start_on_disk(&IDS, 100.0).await;
    let ops = (0..LEASES)
        .map(|i| acquire(&format!("run{i}"), "w", 10.0))
        .collect();
    let leases: Vec<Lease> = cluster
        .write(&IDS, ops)
        .await
        .iter()
        .map(acquired)
        .collect();
    let leader = cluster.leader(&IDS).await;
    cluster.settle(leader, &IDS).await;
    let follower = *IDS.iter().find(|&&id| id != leader).unwrap();
    let index = snapshot_and_purge(&cluster, follower).await;
    let before = cluster.state_of(follower);
    cluster.stop(follower).await;

    let rest: Vec<NodeId> = IDS.iter().copied().filter(|&id| id != follower).collect();
    cluster.write(&rest, vec![release(&leases[7])]).await;
    cluster.router.isolate(follower);
    cluster.start_node(follower).await;
    assert!(cluster.nodes[&follower].state.last_applied_index() >= index);
    assert_eq!(cluster.state_of(follower), before);
    assert_eq!(before.2.len(), LEASES);
    cluster.router.heal();
    let leader = cluster.leader(&IDS).await;
    cluster.settle(leader, &IDS).await;
    let reference = cluster.reference();
    for id in IDS {
        assert_eq!(cluster.state_of(id), reference, "node {id}");
    }
    cluster.shutdown().await;
}
