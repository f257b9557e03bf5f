//! `cluster-redirect moved`: a follower answers a keyed command with
//! `-MOVED <slot> <host>:<port>`, as a Redis Cluster node answers for a
//! slot it does not serve, instead of forwarding it to the leader.
//!
//! The cluster is one shard: the leader serves every slot (`CLUSTER
//! SLOTS`, `CLUSTER SHARDS`), so any slot a follower names leads the
//! client to the leader. The slot is the hash slot of the command's first
//! key (Redis's CRC16, with `{hash tags}`), the key `COMMAND INFO` gives:
//! a client that checks the slot against its own routing finds the same
//! one. The address is the leader's client address, as `cluster-nodes`
//! gives it. Without a known leader (an election under way) the answer is
//! Redis's `-CLUSTERDOWN The cluster is down`, which cluster clients
//! retry after reading the slots again.
//!
//! Only commands with a key are redirected: a keyless one (`PING`,
//! `INFO`, `CLUSTER ...`, `LEASE.SCAN`, `SCAN`, `DBSIZE`) names no slot, so
//! the node answers it as in `proxy` mode (a keyless read still goes to
//! the leader through the bus). What is keyed is decided by the caller
//! from the command table.

use redis_protocol::redis_keyslot;

use super::status::{ClusterStatus, Role};

/// Redis's reply when no node serves the slot.
pub const CLUSTER_DOWN: &str = "CLUSTERDOWN The cluster is down";

/// The hash slot of `key`, as Redis Cluster computes it.
pub fn slot(key: &[u8]) -> u16 {
    redis_keyslot(key)
}

/// The error a node answers a command whose first key is `key` with,
/// instead of running it: none on the leader (it runs the command);
/// `MOVED` to the leader on any other node that knows one; `CLUSTERDOWN`
/// while no leader is known.
pub fn redirect(status: &ClusterStatus, key: &[u8]) -> Option<String> {
    // A node that names itself leader runs the command: its core
    // proposes it, or answers `-TRYAGAIN` if it has just lost the lead.
    if status.role == Role::Leader || status.leader == Some(status.id) {
        return None;
    }
    match status.leader_member() {
        // An IPv6 address without brackets, as Redis writes it (and as
        // `CLUSTER NODES` does): clients split the port off at the last
        // colon.
        Some(leader) => Some(format!(
            "MOVED {} {}:{}",
            slot(key),
            leader.addr.ip(),
            leader.addr.port()
        )),
        None => Some(CLUSTER_DOWN.to_owned()),
    }
}

#[cfg(test)]
#[path = "redirect_tests.rs"]
mod tests;
