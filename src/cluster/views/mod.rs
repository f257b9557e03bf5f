//! A node's [`ClusterStatus`] in Redis's words: `ROLE`, `CLUSTER
//! INFO|NODES|SLOTS|SHARDS|MYID` and the cluster's lines of `INFO replication`, so that
//! tools that read Redis's replication and cluster views read ours.
//!
//! The mapping, where Redis has no exact word:
//!
//! - The leader is Redis's master and the other members its replicas. The
//!   replication offset is the last log index applied here.
//! - A follower or a learner is a replica of the leader it knows:
//!   `connected` with one, `connect` (Redis's "trying to reach its
//!   master") without.
//! - A candidate (an election under way), or a node shut down, knows no
//!   leader to follow and must not be written to: a replica in state
//!   `connect`, its master's host empty and port 0. Claiming `master`
//!   would send writes to a node that cannot take them.
//! - `CLUSTER NODES` shows one shard: the leader owns every slot
//!   (0-16383), the others are its replicas; a learner, which never stands
//!   for election, also carries Redis's `nofailover` flag. With no leader
//!   known, every node is a master without slots and `cluster_state` is
//!   `fail`, as Redis shows a cluster whose slots nobody serves.
//! - Redis names a node by 40 hex digits; a member's name is its numeric
//!   id in hexadecimal, zero-padded to 40 digits (node 1 is
//!   `000...0001`), so one can be read back from the other.
//! - An index or a leader not known yet reads 0 (node ids start at 1).

use crate::cluster::status::{ClusterStatus, Member, Role};
use crate::cluster::types::NodeId;
use crate::reply::Reply;

/// Redis Cluster's slot count: the leader serves them all.
pub const SLOTS: u32 = 16384;

/// Redis's answer to `CLUSTER ...` on a node that is not in a cluster.
pub const DISABLED: &str = "ERR This instance has cluster support disabled";

/// The 40-hex-digit name Redis gives a node, from its numeric id.
pub fn node_name(id: NodeId) -> String {
    format!("{id:040x}")
}

/// HELLO's `mode` and INFO's `redis_mode`: `cluster` on a cluster's node,
/// as Redis Cluster says, else `standalone`.
pub fn mode(cluster: bool) -> &'static str {
    if cluster { "cluster" } else { "standalone" }
}

/// leased's own name for a role, in `CLUSTER INFO`.
pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::Leader => "leader",
        Role::Follower => "follower",
        Role::Candidate => "candidate",
        Role::Learner => "learner",
        Role::Shutdown => "shutdown",
    }
}

/// The leader this node follows, if it is a follower or a learner that
/// knows one: what Redis calls a connected replica's master.
fn followed(status: &ClusterStatus) -> Option<&Member> {
    match status.role {
        Role::Follower | Role::Learner => status.leader_member(),
        Role::Leader | Role::Candidate | Role::Shutdown => None,
    }
}

/// The members the leader replicates to and has heard from (their match
/// index is known): Redis's connected replicas.
fn replicas(status: &ClusterStatus) -> impl Iterator<Item = (&Member, u64)> {
    let leading = status.role == Role::Leader;
    status
        .members
        .iter()
        .filter(move |member| leading && member.id != status.id)
        .filter_map(|member| member.matched.map(|matched| (member, matched)))
}

fn applied(status: &ClusterStatus) -> u64 {
    status.applied_index.unwrap_or(0)
}

fn int(value: u64) -> Reply {
    Reply::Int(i64::try_from(value).unwrap_or(i64::MAX))
}

/// `ROLE`, in Redis 7's form. A single node (`None`) is a master without
/// replicas at offset 0.
pub fn role(status: Option<&ClusterStatus>) -> Reply {
    let Some(status) = status else {
        return master_role(0, Vec::new());
    };
    if status.role == Role::Leader {
        let replicas = replicas(status)
            .map(|(member, matched)| {
                Reply::Array(vec![
                    Reply::bulk(member.addr.ip().to_string()),
                    Reply::bulk(member.addr.port().to_string()),
                    Reply::bulk(matched.to_string()),
                ])
            })
            .collect();
        return master_role(applied(status), replicas);
    }
    let (host, port, state) = match followed(status) {
        Some(leader) => (
            leader.addr.ip().to_string(),
            leader.addr.port(),
            "connected",
        ),
        None => (String::new(), 0, "connect"),
    };
    Reply::Array(vec![
        Reply::text("slave"),
        Reply::bulk(host),
        Reply::Int(i64::from(port)),
        Reply::text(state),
        int(applied(status)),
    ])
}

fn master_role(offset: u64, replicas: Vec<Reply>) -> Reply {
    Reply::Array(vec![
        Reply::text("master"),
        int(offset),
        Reply::Array(replicas),
    ])
}

/// `CLUSTER INFO`: Redis's fields, then leased's own (`cluster_role` ...).
pub fn cluster_info(status: &ClusterStatus) -> String {
    let ok = status.has_leader();
    let served = if ok { SLOTS } else { 0 };
    let fields: [(&str, String); 19] = [
        ("cluster_enabled", "1".into()),
        ("cluster_state", if ok { "ok" } else { "fail" }.into()),
        ("cluster_slots_assigned", SLOTS.to_string()),
        ("cluster_slots_ok", served.to_string()),
        ("cluster_slots_pfail", "0".into()),
        ("cluster_slots_fail", (SLOTS - served).to_string()),
        ("cluster_known_nodes", status.members.len().to_string()),
        ("cluster_size", "1".into()),
        ("cluster_current_epoch", status.term.to_string()),
        ("cluster_my_epoch", status.term.to_string()),
        ("cluster_role", role_name(status.role).into()),
        ("cluster_leader_id", status.leader.unwrap_or(0).to_string()),
        ("cluster_term", status.term.to_string()),
        ("cluster_commit_index", index(status.commit_index)),
        ("cluster_applied_index", index(status.applied_index)),
        ("cluster_last_log_index", index(status.last_log_index)),
        ("cluster_elections", status.elections.to_string()),
        (
            "cluster_clock_offset_ms",
            status.clock.offset_ms.unwrap_or(0).to_string(),
        ),
        (
            "cluster_clock_skewed",
            u8::from(status.clock.skewed).to_string(),
        ),
    ];
    lines(&fields)
}

fn index(index: Option<u64>) -> String {
    index.unwrap_or(0).to_string()
}

fn lines(fields: &[(&str, String)]) -> String {
    fields
        .iter()
        .map(|(name, value)| format!("{name}:{value}\r\n"))
        .collect()
}

/// `CLUSTER NODES`: one line per member, in id order, in Redis's format:
/// `<name> <ip:port@cport> <flags> <master> <ping-sent> <pong-recv>
/// <config-epoch> <link-state> [<slots>]`.
pub fn cluster_nodes(status: &ClusterStatus) -> String {
    status
        .members
        .iter()
        .map(|member| node_line(status, member))
        .collect()
}

fn node_line(status: &ClusterStatus, member: &Member) -> String {
    let leads = status.leader == Some(member.id);
    let mut flags = Vec::new();
    if member.id == status.id {
        flags.push("myself");
    }
    let master = match status.leader {
        Some(leader) if !leads => {
            flags.push("slave");
            node_name(leader)
        }
        // The leader, or any node while no leader is known.
        _ => {
            flags.push("master");
            "-".to_owned()
        }
    };
    if !member.voter {
        flags.push("nofailover");
    }
    // Redis writes an IPv6 address without brackets: readers split the
    // port off at the last colon.
    let address = format!(
        "{}:{}@{}",
        member.addr.ip(),
        member.addr.port(),
        member.bus_addr.port()
    );
    let slots = if leads {
        format!(" 0-{}", SLOTS - 1)
    } else {
        String::new()
    };
    format!(
        "{} {address} {} {master} 0 0 {} connected{slots}\n",
        node_name(member.id),
        flags.join(","),
        status.term
    )
}

/// `CLUSTER SLOTS`, Redis 7's form: one range, every slot, served by the
/// leader, then the other members as its replicas; each node is `[ip,
/// port, name, []]` (the last, Redis's extra networking metadata, is
/// empty). This is what cluster clients read to find where to send
/// commands. Without a leader known (an election) this node is named in
/// the leader's place; see [`serving`].
pub fn cluster_slots(status: &ClusterStatus) -> Reply {
    let Some(head) = serving(status) else {
        return Reply::Array(Vec::new());
    };
    let mut range = vec![Reply::Int(0), Reply::Int(i64::from(SLOTS - 1))];
    range.push(slot_node(head));
    let others = status.members.iter().filter(|member| member.id != head.id);
    range.extend(others.map(slot_node));
    Reply::Array(vec![Reply::Array(range)])
}

/// The member `CLUSTER SLOTS` and `CLUSTER SHARDS` name as the slots'
/// master: the leader, or while none is known this node itself (`None`
/// only on a node that is not a member). Redis never shows a cluster
/// client an empty slot map while its slots are assigned, and clients
/// are built for that: the `redis` crate's cluster client drops every
/// connection to a node the map does not name, so an empty map in an
/// election left it with none, and its retries of that case do not wait.
/// Named, this node answers `-CLUSTERDOWN` (`-TRYAGAIN` in proxy mode)
/// until the election ends, which every cluster client waits on and
/// retries.
fn serving(status: &ClusterStatus) -> Option<&Member> {
    let me = || status.members.iter().find(|member| member.id == status.id);
    status.leader_member().or_else(me)
}

fn slot_node(member: &Member) -> Reply {
    Reply::Array(vec![
        Reply::bulk(member.addr.ip().to_string()),
        Reply::Int(i64::from(member.addr.port())),
        Reply::bulk(node_name(member.id)),
        Reply::Array(Vec::new()),
    ])
}

/// `CLUSTER SHARDS`, Redis 7's form: one shard, `slots` `[0, 16383]`, its
/// `nodes` the leader (`master`) then the other members (`replica`), each
/// a map of `id`, `port`, `ip`, `endpoint`, `role`, `replication-offset`
/// (the leader's applied index; a member's matched index where the leader
/// knows it, else 0) and `health` (`online`: a node does not track its
/// peers' health). Without a leader known, this node is the master, as in
/// `CLUSTER SLOTS`.
pub fn cluster_shards(status: &ClusterStatus) -> Reply {
    let Some(head) = serving(status) else {
        return Reply::Array(Vec::new());
    };
    let mut nodes = vec![shard_node(head, "master", applied(status))];
    let others = status.members.iter().filter(|m| m.id != head.id);
    nodes.extend(others.map(|member| shard_node(member, "replica", member.matched.unwrap_or(0))));
    let slots = vec![Reply::Int(0), Reply::Int(i64::from(SLOTS - 1))];
    Reply::Array(vec![shard(slots, nodes)])
}

fn shard(slots: Vec<Reply>, nodes: Vec<Reply>) -> Reply {
    Reply::Map(vec![
        (Reply::text("slots"), Reply::Array(slots)),
        (Reply::text("nodes"), Reply::Array(nodes)),
    ])
}

fn shard_node(member: &Member, role: &'static str, offset: u64) -> Reply {
    let ip = member.addr.ip().to_string();
    Reply::Map(vec![
        (Reply::text("id"), Reply::bulk(node_name(member.id))),
        (
            Reply::text("port"),
            Reply::Int(i64::from(member.addr.port())),
        ),
        (Reply::text("ip"), Reply::bulk(ip.clone())),
        (Reply::text("endpoint"), Reply::bulk(ip)),
        (Reply::text("role"), Reply::text(role)),
        (Reply::text("replication-offset"), int(offset)),
        (Reply::text("health"), Reply::text("online")),
    ])
}

/// The head of `INFO replication` in cluster mode, in Redis's order: the
/// role, then a leader's replicas or a follower's master.
pub fn replication_role(status: &ClusterStatus) -> Vec<(String, String)> {
    let field = |name: &str, value: String| (name.to_owned(), value);
    if status.role == Role::Leader {
        let replicas: Vec<(&Member, u64)> = replicas(status).collect();
        let mut fields = vec![
            field("role", "master".into()),
            field("connected_slaves", replicas.len().to_string()),
        ];
        for (n, (member, matched)) in replicas.iter().enumerate() {
            let value = format!(
                "ip={},port={},state=online,offset={matched},lag=0",
                member.addr.ip(),
                member.addr.port()
            );
            fields.push(field(&format!("slave{n}"), value));
        }
        return fields;
    }
    let leader = followed(status);
    vec![
        field("role", "slave".into()),
        field(
            "master_host",
            leader.map_or(String::new(), |m| m.addr.ip().to_string()),
        ),
        field(
            "master_port",
            leader.map_or(0, |m| m.addr.port()).to_string(),
        ),
        field(
            "master_link_status",
            if leader.is_some() { "up" } else { "down" }.into(),
        ),
        field("master_sync_in_progress", "0".into()),
        field("slave_repl_offset", applied(status).to_string()),
        field("connected_slaves", "0".into()),
    ]
}

/// The replication offset `INFO replication` shows: the applied index.
pub fn replication_offset(status: &ClusterStatus) -> u64 {
    applied(status)
}

/// leased's own lines at the end of `INFO replication` in cluster mode.
pub fn replication_cluster(status: &ClusterStatus) -> Vec<(String, String)> {
    [
        ("cluster_term", status.term.to_string()),
        ("cluster_leader_id", status.leader.unwrap_or(0).to_string()),
        ("cluster_commit_index", index(status.commit_index)),
        ("cluster_applied_index", index(status.applied_index)),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

#[cfg(test)]
mod tests;
