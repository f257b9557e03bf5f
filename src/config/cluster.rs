//! Cluster mode's settings: the `cluster-nodes` entries, and the checked
//! value ([`ClusterConfig`]) the server starts a node with.
//!
//! The directives themselves are rows of the one table (`directives`);
//! this file holds what is particular to them: the syntax of a member
//! (`id@host:port[@busport]`), and the rules between the cluster
//! directives and `port`, which no single line can be refused for.
//!
//! Addresses. Each entry of `cluster-nodes` is a node's *client* address,
//! the one clients reach it on (and that `-MOVED` names). Its bus address
//! (node-to-node traffic) is the same host with the port the entry gives
//! after a second `@` (Redis's `ip:port@cport` habit), or else its client
//! port + 10000. Every node reads the others' bus ports from this one
//! list, so `cluster-port`, this node's own bus port, may only repeat what
//! the list says of it: a node that listened elsewhere would never be
//! reached.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::{ClusterRedirect, Config};

/// How far above its client port a node's bus listens by default, as in
/// Redis Cluster.
pub const BUS_PORT_OFFSET: u32 = 10000;

/// The smallest ratio of election timeout to heartbeat interval: a
/// follower must miss several heartbeats in a row before it stands for
/// election, or one late heartbeat on a busy machine deposes a live
/// leader.
pub const MIN_ELECTION_HEARTBEATS: u64 = 3;

/// One entry of `cluster-nodes`, as written (so `CONFIG GET` and `CONFIG
/// REWRITE` give it back as the operator wrote it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNode {
    /// The node's id: a positive integer, unique in the list.
    pub id: u64,
    /// The host as `cluster-nodes` spells it: an IPv4 address, an IPv6
    /// address in brackets, or `localhost`.
    pub host: String,
    /// The address `host` stands for (`localhost` is 127.0.0.1).
    pub ip: IpAddr,
    /// The client port.
    pub port: u16,
    /// The bus port, when the entry gives one (`@busport`).
    pub bus_port: Option<u16>,
}

impl ClusterNode {
    /// The client address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }

    /// The bus port: the entry's, or the client port + 10000 (`None` when
    /// that passes 65535).
    pub fn bus_port(&self) -> Option<u16> {
        match self.bus_port {
            Some(port) => Some(port),
            None => u16::try_from(u32::from(self.port) + BUS_PORT_OFFSET).ok(),
        }
    }
}

impl fmt::Display for ClusterNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}:{}", self.id, self.host, self.port)?;
        match self.bus_port {
            Some(bus) => write!(f, "@{bus}"),
            None => Ok(()),
        }
    }
}

/// What a `cluster-nodes` entry must look like, for the refusal.
const ENTRY: &str = "entries id@host:port[@busport] separated by spaces: the id a positive \
                     integer, the host an IPv4 address, an IPv6 address in brackets or \
                     localhost, the ports from 1 to 65535";
const UNIQUE: &str = "each node's id once";

/// `cluster-nodes`' arguments: entries separated by spaces, in one
/// argument (`"1@a:1 2@b:2"`, the form the file and `CONFIG GET` show) or
/// several. The error says what was expected.
pub(super) fn parse_nodes(args: &[String]) -> Result<Vec<ClusterNode>, &'static str> {
    let mut nodes: Vec<ClusterNode> = Vec::new();
    for entry in args.iter().flat_map(|arg| arg.split_whitespace()) {
        let node = parse_entry(entry).ok_or(ENTRY)?;
        if nodes.iter().any(|seen| seen.id == node.id) {
            return Err(UNIQUE);
        }
        nodes.push(node);
    }
    Ok(nodes)
}

/// `cluster-nodes` as `CONFIG GET` prints it: the entries, space-separated.
pub(super) fn show_nodes(nodes: &[ClusterNode]) -> String {
    let entries: Vec<String> = nodes.iter().map(ClusterNode::to_string).collect();
    entries.join(" ")
}

/// One `cluster-nodes` entry, `id@host:port[@busport]` (`CLUSTER ADDNODE`
/// checks its address with it).
pub fn parse_member(entry: &str) -> Option<ClusterNode> {
    parse_entry(entry)
}

fn parse_entry(entry: &str) -> Option<ClusterNode> {
    let (id, rest) = entry.split_once('@')?;
    let id = parse_decimal(id).filter(|id| *id > 0)?;
    // No host form holds an '@', so a second one starts the bus port.
    let (address, bus_port) = match rest.split_once('@') {
        Some((address, bus)) => (address, Some(parse_port(bus)?)),
        None => (rest, None),
    };
    let (host, ip, port) = parse_host_port(address)?;
    Some(ClusterNode {
        id,
        host,
        ip,
        port,
        bus_port,
    })
}

/// `host:port`, the host as written and the address it stands for. An
/// IPv6 address must be in brackets: bare, its colons would hide where
/// the port starts.
fn parse_host_port(address: &str) -> Option<(String, IpAddr, u16)> {
    if let Some(bracketed) = address.strip_prefix('[') {
        let (ip, port) = bracketed.split_once("]:")?;
        let ip: std::net::Ipv6Addr = ip.parse().ok()?;
        return Some((format!("[{ip}]"), IpAddr::V6(ip), parse_port(port)?));
    }
    let (host, port) = address.rsplit_once(':')?;
    let port = parse_port(port)?;
    if host.eq_ignore_ascii_case("localhost") {
        return Some((
            "localhost".to_owned(),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            port,
        ));
    }
    let ip: Ipv4Addr = host.parse().ok()?;
    Some((ip.to_string(), IpAddr::V4(ip), port))
}

fn parse_port(text: &str) -> Option<u16> {
    parse_decimal(text)
        .and_then(|port| u16::try_from(port).ok())
        .filter(|port| *port > 0)
}

/// Digits only: no sign, no spaces.
fn parse_decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// One member of the cluster, with both its addresses resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMember {
    pub id: u64,
    /// Where its clients connect (its `port`).
    pub addr: SocketAddr,
    /// Where the other nodes reach it.
    pub bus_addr: SocketAddr,
}

/// The cluster settings the server starts a node with, checked: this
/// node is a member, every address is usable, the timeouts fit together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// This node's id (`cluster-node-id`).
    pub node_id: u64,
    /// Every member, this node included, in id order.
    pub members: Vec<ClusterMember>,
    /// The secret every node's bus requires of its peers; `None` when
    /// `cluster-secret` is empty (allowed only when every member is on a
    /// loopback address).
    pub secret: Option<String>,
    /// Above this difference from the majority's clock, a node refuses to
    /// lead.
    pub max_clock_skew: Duration,
    /// How often the leader sends heartbeats.
    pub heartbeat_interval: Duration,
    /// `cluster-election-timeout`: after this long without hearing its
    /// leader a follower votes for a candidate, and it stands for election
    /// itself after a random 1.5 to 2 times it (src/cluster/start.rs).
    pub election_timeout: Duration,
    /// How a follower treats a client's write: proxied to the leader, or
    /// answered `-MOVED`.
    pub redirect: ClusterRedirect,
    /// `cluster-join`: wait to be added, never form a cluster.
    pub join: bool,
    /// `cluster-init-from-single`: form a one-node cluster from the single
    /// node's state in `dir`, on the first start.
    pub init_from_single: bool,
}

impl ClusterConfig {
    /// This node's own entry.
    pub fn me(&self) -> &ClusterMember {
        self.members
            .iter()
            .find(|member| member.id == self.node_id)
            .expect("checked: the node is a member")
    }

    /// The other members.
    pub fn peers(&self) -> impl Iterator<Item = &ClusterMember> {
        self.members
            .iter()
            .filter(move |member| member.id != self.node_id)
    }
}

/// Why the cluster settings cannot start a node. The messages name the
/// directives to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterError {
    NoNodeId,
    NoNodes,
    /// `cluster-node-id` is not among `cluster-nodes`' ids.
    NotAMember {
        id: u64,
        ids: Vec<u64>,
    },
    /// This node's entry gives another client port than `port`.
    PortMismatch {
        id: u64,
        listed: u16,
        port: u16,
    },
    /// A member's bus port would be its client port + 10000, past 65535.
    BusPortTooHigh {
        id: u64,
        port: u16,
    },
    /// `cluster-port` is not the bus port `cluster-nodes` gives this node.
    ClusterPortMismatch {
        id: u64,
        cluster_port: u16,
        bus_port: u16,
    },
    /// Two of the members' client and bus addresses are one.
    AddressTwice {
        address: SocketAddr,
    },
    /// A member on a non-loopback address, and no `cluster-secret`.
    NeedsSecret {
        address: IpAddr,
    },
    /// `cluster-election-timeout` below 3 heartbeat intervals.
    ElectionTimeoutTooShort {
        election_timeout: u64,
        heartbeat_interval: u64,
    },
}

impl ClusterError {
    /// The directive the error is blamed on.
    pub fn directive(&self) -> &'static str {
        match self {
            ClusterError::NoNodeId | ClusterError::NotAMember { .. } => "cluster-node-id",
            ClusterError::NoNodes
            | ClusterError::PortMismatch { .. }
            | ClusterError::BusPortTooHigh { .. }
            | ClusterError::AddressTwice { .. } => "cluster-nodes",
            ClusterError::ClusterPortMismatch { .. } => "cluster-port",
            ClusterError::NeedsSecret { .. } => "cluster-secret",
            ClusterError::ElectionTimeoutTooShort { .. } => "cluster-election-timeout",
        }
    }
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterError::NoNodeId => f.write_str(
                "cluster-enabled yes needs cluster-node-id: this node's id in cluster-nodes",
            ),
            ClusterError::NoNodes => f.write_str(
                "cluster-enabled yes needs cluster-nodes: every node's id@host:port \
                 (its client address), this node's included, the same on every node",
            ),
            ClusterError::NotAMember { id, ids } => {
                let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
                write!(
                    f,
                    "cluster-node-id {id} is not in cluster-nodes (its ids: {})",
                    ids.join(", ")
                )
            }
            ClusterError::PortMismatch { id, listed, port } => write!(
                f,
                "cluster-nodes gives node {id} (this node) the client port {listed}, but port \
                 is {port}: each entry is its node's client address"
            ),
            ClusterError::BusPortTooHigh { id, port } => write!(
                f,
                "node {id}'s bus port would be its client port {port} + {BUS_PORT_OFFSET}, \
                 above 65535: give it one in cluster-nodes ({id}@host:{port}@busport)"
            ),
            ClusterError::ClusterPortMismatch {
                id,
                cluster_port,
                bus_port,
            } => write!(
                f,
                "cluster-port is {cluster_port}, but cluster-nodes gives node {id} (this node) \
                 the bus port {bus_port}: the other nodes find it there, so write it there \
                 ({id}@host:port@{cluster_port}) on every node"
            ),
            ClusterError::AddressTwice { address } => write!(
                f,
                "cluster-nodes uses {address} twice: every node's client and bus addresses \
                 must differ"
            ),
            ClusterError::NeedsSecret { address } => write!(
                f,
                "cluster-nodes names {address}, which is not a loopback address: set \
                 cluster-secret (the same on every node), since the bus refuses peers \
                 without it"
            ),
            ClusterError::ElectionTimeoutTooShort {
                election_timeout,
                heartbeat_interval,
            } => write!(
                f,
                "cluster-election-timeout ({election_timeout} ms) is less than \
                 {MIN_ELECTION_HEARTBEATS} times cluster-heartbeat-interval \
                 ({heartbeat_interval} ms): followers would depose a leader that is alive"
            ),
        }
    }
}

impl std::error::Error for ClusterError {}

impl Config {
    /// The cluster this node belongs to: `None` with `cluster-enabled no`
    /// (a single node, as before), else the checked settings. A
    /// configuration from [`Config::from_args`] has passed this check, so
    /// for it the error cannot happen.
    pub fn cluster(&self) -> Result<Option<ClusterConfig>, ClusterError> {
        check_timing(self)?;
        if !self.cluster_enabled {
            return Ok(None);
        }
        let me = own_entry(self)?;
        let members = members(&self.cluster_nodes)?;
        check_cluster_port(self, me)?;
        check_distinct(&members)?;
        let secret = (!self.cluster_secret.is_empty()).then(|| self.cluster_secret.clone());
        if secret.is_none()
            && let Some(node) = self.cluster_nodes.iter().find(|n| !n.ip.is_loopback())
        {
            return Err(ClusterError::NeedsSecret { address: node.ip });
        }
        Ok(Some(ClusterConfig {
            node_id: me.id,
            members,
            secret,
            max_clock_skew: Duration::from_millis(self.cluster_max_clock_skew),
            heartbeat_interval: Duration::from_millis(self.cluster_heartbeat_interval),
            election_timeout: Duration::from_millis(self.cluster_election_timeout),
            redirect: self.cluster_redirect,
            join: self.cluster_join,
            init_from_single: self.cluster_init_from_single,
        }))
    }
}

/// The timeouts fit together whether or not the cluster is on, so that
/// turning it on cannot reveal an old mistake.
fn check_timing(config: &Config) -> Result<(), ClusterError> {
    let heartbeats = config.cluster_heartbeat_interval * MIN_ELECTION_HEARTBEATS;
    if config.cluster_election_timeout < heartbeats {
        return Err(ClusterError::ElectionTimeoutTooShort {
            election_timeout: config.cluster_election_timeout,
            heartbeat_interval: config.cluster_heartbeat_interval,
        });
    }
    Ok(())
}

/// This node's entry in `cluster-nodes`, whose port must be `port`.
fn own_entry(config: &Config) -> Result<&ClusterNode, ClusterError> {
    if config.cluster_node_id == 0 {
        return Err(ClusterError::NoNodeId);
    }
    if config.cluster_nodes.is_empty() {
        return Err(ClusterError::NoNodes);
    }
    let id = config.cluster_node_id;
    let Some(me) = config.cluster_nodes.iter().find(|node| node.id == id) else {
        let mut ids: Vec<u64> = config.cluster_nodes.iter().map(|node| node.id).collect();
        ids.sort_unstable();
        return Err(ClusterError::NotAMember { id, ids });
    };
    if me.port != config.port {
        return Err(ClusterError::PortMismatch {
            id,
            listed: me.port,
            port: config.port,
        });
    }
    Ok(me)
}

/// Every entry with its addresses resolved, in id order.
fn members(nodes: &[ClusterNode]) -> Result<Vec<ClusterMember>, ClusterError> {
    let mut members = nodes
        .iter()
        .map(|node| {
            let bus_port = node.bus_port().ok_or(ClusterError::BusPortTooHigh {
                id: node.id,
                port: node.port,
            })?;
            Ok(ClusterMember {
                id: node.id,
                addr: node.addr(),
                bus_addr: SocketAddr::new(node.ip, bus_port),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    members.sort_by_key(|member| member.id);
    Ok(members)
}

fn check_cluster_port(config: &Config, me: &ClusterNode) -> Result<(), ClusterError> {
    // Already known to fit: `members` checked every bus port.
    let bus_port = me.bus_port().unwrap_or_default();
    if config.cluster_port != 0 && config.cluster_port != bus_port {
        return Err(ClusterError::ClusterPortMismatch {
            id: me.id,
            cluster_port: config.cluster_port,
            bus_port,
        });
    }
    Ok(())
}

/// No two listeners of the cluster on one address: two nodes on one
/// machine must not collide, nor one's bus with another's clients.
fn check_distinct(members: &[ClusterMember]) -> Result<(), ClusterError> {
    let mut seen = BTreeSet::new();
    for member in members {
        for address in [member.addr, member.bus_addr] {
            if !seen.insert(address) {
                return Err(ClusterError::AddressTwice { address });
            }
        }
    }
    Ok(())
}
