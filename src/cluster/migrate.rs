//! Moving a registry between a single node and a cluster, at start-up.
//!
//! - **Single node to cluster** (`cluster-init-from-single yes`): on its
//!   first start in cluster mode (no Raft state in `dir/raft/`), a node
//!   loads the single node's registry from `dir` as a single node would
//!   (its append-only log replayed, tokens above its token ceiling) and
//!   saves it as its Raft snapshot at log index 0, with a membership of
//!   this node alone. openraft starts from that snapshot as from any
//!   other (the log before it counts as purged), the node elects itself,
//!   and every lease, its data and history, and the last token are the
//!   cluster's first state; the next acquire's token is the last one the
//!   single node could have issued + 1. The other nodes join with `CLUSTER
//!   ADDNODE`, and are sent the snapshot. The single node's files are left
//!   as they were.
//! - **Cluster to single node** (`cluster-recover-as-single yes` with
//!   `cluster-enabled no`): the node's Raft snapshot, then every entry of
//!   its log after it (committed or not: a surviving node's log may hold
//!   acknowledged entries it never learned were committed; applying one
//!   that was not is the safe side, tokens only go up), become the single
//!   node's append-only log (written whole, as a rewrite writes it) and
//!   its token ceiling (the last token, never lowered). `dir/raft/` is
//!   then renamed `dir/raft.recovered` (or `raft.recovered.N`), so that
//!   the next start is an ordinary one.
//! - **A restored backup** (`dir/raft/` holds a snapshot copied from a
//!   cluster node after `BGSAVE`, and no log or vote): recovered the same
//!   way, but only above a floor the operator writes into
//!   `dir/token-ceiling`. A backup is stale the moment it is taken:
//!   tokens the cluster issued after it are in no file here, and starting
//!   at the backup's last token + 1 would issue them again. So without a
//!   ceiling above the backup's last token the node refuses to start, and
//!   says what to write there.
//!
//! Without these directives a node refuses to start on a `dir` that holds
//! the other mode's state, rather than ignore the leases in it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use openraft::alias::{LeaderIdOf, LogIdOf, StoredMembershipOf};
use openraft::vote::RaftLeaderId;
use openraft::{EntryPayload, Membership, RaftLogReader};
use tracing::{info, warn};

use super::disk;
use super::log_store::LogStore;
use super::members;
use super::snapshot_file::{self, Meta};
use super::state_machine::{self, MakeRegistry, StateMachine};
use super::types::{Command, NodeId, TypeConfig};
use crate::aof::format::HEADER;
use crate::ceiling::DataDir;
use crate::config::{ClusterConfig, Config};
use crate::registry::Registry;

/// Why a node did not start from the other mode's state; the message
/// says what to do.
#[derive(Debug)]
pub struct MigrateError(pub String);

impl fmt::Display for MigrateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MigrateError {}

fn failed(what: &str, error: impl fmt::Display) -> MigrateError {
    MigrateError(format!("{what}: {error}"))
}

/// Whether `dir/raft/` holds Raft state: a snapshot, a vote, or a log with
/// an entry or a purge point. Read without the log's lock.
pub fn holds_raft_state(dir: &Path) -> Result<bool, MigrateError> {
    let raft = dir.join(disk::RAFT_DIR);
    if raft.join("snapshot").exists() || raft.join("vote").exists() {
        return Ok(true);
    }
    let log = raft.join("log");
    let read = disk::read_if_present(&log).map_err(|e| failed("reading the Raft log", e))?;
    match read {
        None => Ok(false),
        Some(bytes) => Ok(bytes != LogStore::empty_file()),
    }
}

/// What a single node left in `dir`, if anything: leases (its
/// append-only log) or issued tokens (a ceiling above 0).
pub fn single_state(config: &Config, data_dir: &DataDir) -> Result<Option<String>, MigrateError> {
    let ceiling = (data_dir.read_ceiling()).map_err(|e| failed("reading the token ceiling", e))?;
    let log = data_dir.path().join(&config.appendfilename);
    let logged = std::fs::metadata(&log).is_ok_and(|meta| meta.len() > HEADER.len() as u64);
    Ok(match (logged, ceiling) {
        (false, 0) => None,
        (true, _) => Some(format!(
            "its append-only log {} and token ceiling {ceiling}",
            log.display()
        )),
        (false, _) => Some(format!("its token ceiling {ceiling}")),
    })
}

/// Before a cluster node starts: forms a one-node cluster from the single
/// node's state with `cluster-init-from-single yes`, or refuses to start
/// on a `dir` whose single-node leases it would ignore.
pub fn before_cluster(
    config: &Config,
    cluster: &ClusterConfig,
    data_dir: &DataDir,
) -> Result<(), MigrateError> {
    if holds_raft_state(data_dir.path())? {
        refuse_backup(data_dir.path())?;
        if cluster.init_from_single {
            info!(
                "cluster-init-from-single is yes, but this node already has its Raft state: \
                 the directive is ignored"
            );
        }
        return Ok(());
    }
    let single = single_state(config, data_dir)?;
    match (single, cluster.init_from_single) {
        (None, false) => Ok(()),
        (Some(found), false) => Err(MigrateError(format!(
            "dir '{}' holds a single node's state ({found}) and no cluster state: set \
             cluster-init-from-single yes to make it this cluster's first node, or give this \
             node an empty dir",
            data_dir.path().display()
        ))),
        (_, true) if cluster.join => Err(MigrateError(
            "cluster-init-from-single and cluster-join are both yes: a node made from a single \
             node forms the cluster, the others join it"
                .into(),
        )),
        (_, true) => seed(config, cluster, data_dir),
    }
}

/// Saves the single node's registry as this node's first snapshot, with
/// this node as the only member.
fn seed(config: &Config, cluster: &ClusterConfig, data_dir: &DataDir) -> Result<(), MigrateError> {
    let registry = crate::core::load_single(config, data_dir)
        .map_err(|e| failed("loading the single node's state", e))?;
    let me = cluster.me();
    let id: NodeId = me.id;
    let log_id = LogIdOf::<TypeConfig>::new(LeaderIdOf::<TypeConfig>::new(0, id).to_committed(), 0);
    // Its own bus port, which the others learn from the log.
    let node = members::basic_node(me.addr, Some(me.bus_addr.port()));
    let membership = Membership::new(vec![BTreeSet::from([id])], BTreeMap::from([(id, node)]))
        .map_err(|e| failed("the first membership", e))?;
    let meta = Meta {
        last_log_id: Some(log_id),
        last_membership: StoredMembershipOf::<TypeConfig>::new(Some(log_id), membership),
    };
    let data = state_machine::encode_registry(&registry);
    let raft = disk::raft_dir(data_dir.path()).map_err(|e| failed("creating raft/", e))?;
    snapshot_file::save(&raft, &meta, &data).map_err(|e| failed("saving the snapshot", e))?;
    info!(
        "cluster-init-from-single: node {id} forms a cluster of itself from the single node's \
         state in {}: {} leases, last fencing token {}; add the others with CLUSTER ADDNODE",
        data_dir.path().display(),
        registry.len(),
        registry.last_token()
    );
    Ok(())
}

/// Before a single node starts: with `cluster-recover-as-single yes`,
/// turns the cluster node's Raft state in `dir` into the single node's log
/// and ceiling; without it, refuses a `dir` that holds Raft state.
pub async fn before_single(
    config: &Config,
    data_dir: &DataDir,
    make: MakeRegistry,
) -> Result<(), MigrateError> {
    let dir = data_dir.path();
    if !holds_raft_state(dir)? {
        if config.cluster_recover_as_single {
            info!("cluster-recover-as-single is yes, but dir holds no Raft state: ignored");
        }
        return Ok(());
    }
    if !config.cluster_recover_as_single {
        return Err(MigrateError(format!(
            "dir '{}' holds a cluster node's Raft state ({}): start it with cluster-enabled \
             yes, or set cluster-recover-as-single yes to start a single node from it",
            dir.display(),
            dir.join(disk::RAFT_DIR).display()
        )));
    }
    if !config.appendonly {
        return Err(MigrateError(
            "cluster-recover-as-single yes needs appendonly yes: the recovered leases are \
             written to the append-only log"
                .into(),
        ));
    }
    // Before the log is opened, which creates an empty one.
    let restored = is_restored_backup(dir)?;
    let registry = replay_raft(dir, make).await?;
    let last_token = registry.last_token();
    let ceiling = (data_dir.read_ceiling()).map_err(|e| failed("reading the token ceiling", e))?;
    if restored {
        check_floor(dir, ceiling, last_token)?;
        warn!(
            "cluster-recover-as-single: {} holds a restored backup (a snapshot, no log): its \
             fencing tokens go up to {last_token}, and tokens continue above the floor \
             {ceiling} written in token-ceiling",
            dir.join(disk::RAFT_DIR).display()
        );
    }
    let bytes = state_machine::encode_registry(&registry);
    disk::replace(dir, &config.appendfilename, &bytes, true)
        .map_err(|e| failed("writing the append-only log", e))?;
    (data_dir.ceiling_writer().store(ceiling.max(last_token)))
        .map_err(|e| failed("writing the token ceiling", e))?;
    let aside = set_aside(dir)?;
    warn!(
        "cluster-recover-as-single: this node starts alone from its cluster state: {} leases, \
         last fencing token {last_token}; the Raft state is kept in {} (remove \
         cluster-recover-as-single from the configuration)",
        registry.len(),
        aside.display()
    );
    Ok(())
}

/// Whether `dir/raft/` holds a snapshot and nothing a node writes as it
/// runs (a vote, a log with an entry or a purge point): a backup put
/// there by hand. A node's own directory always has its vote once it has
/// a snapshot (it was a member, or was sent one by a leader).
pub fn is_restored_backup(dir: &Path) -> Result<bool, MigrateError> {
    let raft = dir.join(disk::RAFT_DIR);
    if !snapshot_file::path(&raft).exists() || raft.join("vote").exists() {
        return Ok(false);
    }
    let log = raft.join("log");
    let read = disk::read_if_present(&log).map_err(|e| failed("reading the Raft log", e))?;
    Ok(read.is_none_or(|bytes| bytes == LogStore::empty_file()))
}

/// A cluster node refuses to start on a restored backup: without its
/// vote and log it could vote twice in a term, and its tokens would go on
/// from the backup's. The snapshot a node made from a single node saves
/// at index 0 (`seed`) is its own, even before its first vote.
fn refuse_backup(dir: &Path) -> Result<(), MigrateError> {
    if !is_restored_backup(dir)? {
        return Ok(());
    }
    let raft = dir.join(disk::RAFT_DIR);
    let loaded = snapshot_file::load(&raft).map_err(|e| failed("reading the snapshot", e))?;
    let index = loaded
        .and_then(|(meta, _)| meta.last_log_id)
        .map_or(0, |id| id.index);
    if index == 0 {
        return Ok(());
    }
    Err(MigrateError(format!(
        "{} holds a restored backup (a snapshot up to log index {index}, and no Raft log or \
         vote): a cluster node does not start on one. Start it as a single node with \
         cluster-enabled no and cluster-recover-as-single yes, above a floor written in \
         token-ceiling; then make a cluster of it with cluster-init-from-single yes",
        raft.display()
    )))
}

/// A restored backup starts only above a floor the operator wrote into
/// `token-ceiling`: at least above the backup's own last token.
pub fn check_floor(dir: &Path, ceiling: u64, last_token: u64) -> Result<(), MigrateError> {
    if ceiling > last_token {
        return Ok(());
    }
    let file = dir.join("token-ceiling");
    Err(MigrateError(format!(
        "{raft} holds a restored backup: a cluster snapshot with fencing tokens up to \
         {last_token}, and no Raft log or vote. The cluster went on issuing tokens after the \
         backup was taken, and they are in no file here: starting at {next} could issue them \
         again. Write a floor into {file}: one number above every token the old cluster \
         issued (the largest of the last last_fencing_token its nodes showed in INFO leases \
         or as the leased_last_fencing_token metric, the last token in their logs, and the \
         highest token your storage accepted), plus a generous margin (tokens go up to \
         2^63-1, so adding a billion costs nothing), e.g. `echo {example} > {file}`; then \
         start again. Tokens continue above it. ({file} holds {ceiling} now.)",
        raft = dir.join(disk::RAFT_DIR).display(),
        next = last_token.saturating_add(1),
        file = file.display(),
        example = last_token.saturating_add(1_000_000_000),
    )))
}

/// The registry `dir/raft/` holds: its snapshot, then every entry of its
/// log after it.
async fn replay_raft(dir: &Path, make: MakeRegistry) -> Result<Registry, MigrateError> {
    let mut log = LogStore::open(dir).map_err(|e| failed("opening the Raft log", e))?;
    let machine = StateMachine::open(make, dir).map_err(|e| failed("opening the snapshot", e))?;
    let after = machine.last_applied_index().map_or(0, |index| index + 1);
    let entries =
        (log.try_get_log_entries(after..).await).map_err(|e| failed("reading the Raft log", e))?;
    let mut replica = machine.lock();
    let registry = &mut replica.registry;
    for entry in entries {
        match entry.payload {
            EntryPayload::Normal(Command::Batch(batch)) => {
                state_machine::apply_batch(registry, &batch);
            }
            EntryPayload::Normal(Command::Tick(tick)) => {
                state_machine::apply_tick(registry, tick);
            }
            EntryPayload::Blank | EntryPayload::Membership(_) => {}
        }
    }
    Ok(std::mem::replace(registry, Registry::new(0.0, 0)))
}

/// Renames `dir/raft` to the first free `raft.recovered[.N]`.
fn set_aside(dir: &Path) -> Result<PathBuf, MigrateError> {
    let raft = dir.join(disk::RAFT_DIR);
    let mut aside = dir.join("raft.recovered");
    let mut n = 1;
    while aside.exists() {
        aside = dir.join(format!("raft.recovered.{n}"));
        n += 1;
    }
    std::fs::rename(&raft, &aside).map_err(|e| failed("setting raft/ aside", e))?;
    disk::sync_dir(dir).map_err(|e| failed("syncing dir", e))?;
    Ok(aside)
}
