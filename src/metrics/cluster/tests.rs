use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text;
use prometheus_client::registry::Registry;

use super::*;
use crate::state::cluster::{ClockStatus, Member};

/// The cluster figures alone, as the endpoint's collector encodes them.
#[derive(Debug)]
struct Only(Figures);

impl Collector for Only {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        self.0.encode(&mut encoder)
    }
}

fn encoded(figures: Figures) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Only(figures)));
    let mut out = String::new();
    text::encode(&mut out, &registry).unwrap();
    out
}

fn member(id: u64, matched: Option<u64>) -> Member {
    Member {
        id,
        addr: format!("127.0.0.1:700{id}").parse().unwrap(),
        bus_addr: format!("127.0.0.1:1700{id}").parse().unwrap(),
        voter: true,
        matched,
    }
}

/// Node 1 leading nodes 2 (2 entries behind) and 3 (not heard from).
fn leader() -> ClusterStatus {
    ClusterStatus {
        id: 1,
        role: Role::Leader,
        term: 4,
        leader: Some(1),
        commit_index: Some(10),
        applied_index: Some(9),
        last_log_index: Some(12),
        members: vec![member(1, Some(12)), member(2, Some(10)), member(3, None)],
        elections: 1,
        clock: ClockStatus {
            offset_ms: Some(-250),
            skewed: false,
        },
    }
}

#[test]
fn a_leader_shows_its_status_its_followers_lag_and_its_counts() {
    let stats = ClusterStats::default();
    ClusterStats::count(&stats.elections_started);
    ClusterStats::count(&stats.elections_won);
    ClusterStats::count(&stats.snapshots_sent);
    stats.bus_error(BusError::Refused);
    stats.bus_error(BusError::Refused);
    let text = encoded(Figures::read(Arc::new(leader()), &stats));
    for expected in [
        "leased_cluster_node_id 1\n",
        "leased_cluster_role{role=\"leader\"} 1\n",
        "leased_cluster_role{role=\"follower\"} 0\n",
        "leased_cluster_role{role=\"shutdown\"} 0\n",
        "leased_cluster_term 4\n",
        "leased_cluster_leader_id 1\n",
        "leased_cluster_last_log_index 12\n",
        "leased_cluster_commit_index 10\n",
        "leased_cluster_applied_index 9\n",
        "leased_cluster_follower_matched_index{node=\"2\"} 10\n",
        "leased_cluster_follower_lag{node=\"2\"} 2\n",
        // Not heard from: all of the log is missing there.
        "leased_cluster_follower_lag{node=\"3\"} 12\n",
        "# TYPE leased_cluster_elections_started counter\nleased_cluster_elections_started_total 1\n",
        "leased_cluster_elections_won_total 1\n",
        "leased_cluster_snapshots_total{event=\"built\"} 0\n",
        "leased_cluster_snapshots_total{event=\"sent\"} 1\n",
        "leased_cluster_bus_errors_total{error=\"refused\"} 2\n",
        "leased_cluster_bus_errors_total{error=\"crc\"} 0\n",
        "leased_cluster_clock_offset_seconds -0.25\n",
        "leased_cluster_clock_skewed 0\n",
    ] {
        assert!(text.contains(expected), "{expected:?} in\n{text}");
    }
    // The leader is no follower of its own; node 3's index is unknown.
    assert!(!text.contains("node=\"1\""), "{text}");
    assert!(!text.contains("matched_index{node=\"3\"}"), "{text}");
}

#[test]
fn a_follower_shows_no_lag_and_no_offset_before_its_clock_verdict() {
    let mut status = leader();
    status.id = 2;
    status.role = Role::Follower;
    status.clock = ClockStatus::default();
    let stats = ClusterStats::default();
    stats.installing.store(5, Ordering::Relaxed);
    let text = encoded(Figures::read(Arc::new(status), &stats));
    assert!(
        text.contains("leased_cluster_role{role=\"follower\"} 1\n"),
        "{text}"
    );
    assert!(text.contains("leased_cluster_leader_id 1\n"), "{text}");
    assert!(!text.contains("follower_lag"), "{text}");
    assert!(!text.contains("matched_index"), "{text}");
    assert!(!text.contains("clock_offset"), "{text}");
}
