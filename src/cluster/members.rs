//! Members' addresses as the Raft membership stores them.
//!
//! The membership is in the log (and in snapshots), the same on every
//! node, and names each member by a [`BasicNode`] whose `addr` is its
//! `cluster-nodes` address without the id: `host:port`, the client
//! address, for the members a cluster was formed with (their bus is on
//! the port each node's own `cluster-nodes` gives, by default port +
//! 10000), and `host:port@busport` for a member added by `CLUSTER
//! ADDNODE`, so that every node learns where the new one's bus is from
//! the log alone.
//!
//! A node reaches a peer's bus at the address its own `cluster-nodes`
//! gives, if it lists the peer (how one node reaches another is its own
//! affair: a proxy, another interface), else at the membership's.

use std::net::SocketAddr;

use openraft::BasicNode;

use super::status::Address;
use super::types::NodeId;
use crate::config::{BUS_PORT_OFFSET, parse_member};

/// The membership's entry for a member at `addr` with its bus on
/// `bus_port`.
pub fn basic_node(addr: SocketAddr, bus_port: Option<u16>) -> BasicNode {
    let host = match addr {
        SocketAddr::V4(v4) => v4.ip().to_string(),
        SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
    };
    let addr = match bus_port {
        Some(bus) => format!("{host}:{}@{bus}", addr.port()),
        None => format!("{host}:{}", addr.port()),
    };
    BasicNode::new(addr)
}

/// A member's client and bus addresses from its membership entry; `None`
/// if the entry does not parse (it was written by this module, so only a
/// damaged log could give one).
pub fn address(id: NodeId, node: &BasicNode) -> Option<Address> {
    let entry = parse_member(&format!("{id}@{}", node.addr))?;
    let bus_port = match entry.bus_port {
        Some(port) => port,
        None => u16::try_from(u32::from(entry.port) + BUS_PORT_OFFSET).ok()?,
    };
    Some(Address {
        id,
        addr: entry.addr(),
        bus_addr: SocketAddr::new(entry.ip, bus_port),
    })
}

/// Every member of `membership` with its addresses, in id order: the bus
/// address from `configured` (this node's `cluster-nodes`) when it lists
/// the member, else the membership's.
pub fn addresses<'a>(
    nodes: impl Iterator<Item = (&'a NodeId, &'a BasicNode)>,
    configured: &[Address],
) -> Vec<Address> {
    let mut found: Vec<Address> = nodes
        .filter_map(|(id, node)| {
            let listed = configured.iter().find(|address| address.id == *id);
            listed.copied().or_else(|| address(*id, node))
        })
        .collect();
    found.sort_by_key(|address| address.id);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_with_their_bus_ports() {
        let added = basic_node("127.0.0.1:7004".parse().unwrap(), Some(9004));
        assert_eq!(added.addr, "127.0.0.1:7004@9004");
        let read = address(4, &added).unwrap();
        assert_eq!(read.addr, "127.0.0.1:7004".parse().unwrap());
        assert_eq!(read.bus_addr, "127.0.0.1:9004".parse().unwrap());
        // A founding member's entry: the bus on port + 10000.
        let founding = address(1, &BasicNode::new("127.0.0.1:7001")).unwrap();
        assert_eq!(founding.bus_addr, "127.0.0.1:17001".parse().unwrap());
        let v6 = basic_node("[::1]:7005".parse().unwrap(), None);
        assert_eq!(v6.addr, "[::1]:7005");
        assert_eq!(address(5, &v6).unwrap().bus_addr.port(), 17005);
        assert_eq!(address(6, &BasicNode::new("nonsense")), None);
    }

    #[test]
    fn this_nodes_configuration_decides_where_a_listed_peer_is() {
        let proxy: SocketAddr = "127.0.0.1:5555".parse().unwrap();
        let configured = [Address {
            id: 2,
            addr: "127.0.0.1:7002".parse().unwrap(),
            bus_addr: proxy,
        }];
        let nodes = [
            (3, basic_node("127.0.0.1:7003".parse().unwrap(), Some(9003))),
            (2, BasicNode::new("127.0.0.1:7002")),
        ];
        let found = addresses(nodes.iter().map(|(id, node)| (id, node)), &configured);
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].id, found[0].bus_addr), (2, proxy));
        assert_eq!(found[1].bus_addr, "127.0.0.1:9003".parse().unwrap());
    }
}
