//! The cluster's metrics, in cluster mode only: the node's status as it
//! last published it (what `ROLE` and `CLUSTER INFO` show) and what its
//! bus and Raft counted ([`ClusterStats`]), both read at scrape time.
//!
//! Replication lag is the leader's view: for each other member, the log
//! entries the leader holds that the member has not acknowledged. Only
//! the leader knows it, so only the leader shows it.

use std::fmt;
use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use crate::cluster::views::role_name;
use crate::state::cluster::{ClusterStatus, Role};
use crate::state::cluster_stats::{BusError, ClusterStats};

/// Every role a node can have, for `leased_cluster_role{role}`.
const ROLES: [Role; 5] = [
    Role::Leader,
    Role::Follower,
    Role::Candidate,
    Role::Learner,
    Role::Shutdown,
];

/// One scrape's cluster figures.
#[derive(Debug)]
pub struct Figures {
    status: Arc<ClusterStatus>,
    elections_started: u64,
    elections_won: u64,
    /// Built, sent, installed.
    snapshots: [u64; 3],
    bus_errors: [u64; BusError::ALL.len()],
}

impl Figures {
    pub fn read(status: Arc<ClusterStatus>, stats: &ClusterStats) -> Figures {
        let read = ClusterStats::read;
        Figures {
            status,
            elections_started: read(&stats.elections_started),
            elections_won: read(&stats.elections_won),
            snapshots: [
                read(&stats.snapshots_built),
                read(&stats.snapshots_sent),
                read(&stats.snapshots_installed),
            ],
            bus_errors: stats.bus_errors(),
        }
    }

    pub fn encode(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let status = &*self.status;
        let index = |index: Option<u64>| index.unwrap_or(0);
        gauge(
            encoder,
            "leased_cluster_node_id",
            "This node's id in cluster-nodes",
            status.id,
        )?;
        self.encode_role(encoder)?;
        gauge(
            encoder,
            "leased_cluster_term",
            "The Raft term this node is in (CLUSTER INFO cluster_term)",
            status.term,
        )?;
        gauge(
            encoder,
            "leased_cluster_leader_id",
            "The leader this node knows of, 0 for none",
            status.leader.unwrap_or(0),
        )?;
        gauge(
            encoder,
            "leased_cluster_last_log_index",
            "The index of the last entry in this node's Raft log",
            index(status.last_log_index),
        )?;
        gauge(
            encoder,
            "leased_cluster_commit_index",
            "The index of the last entry this node knows to be committed by a majority",
            index(status.commit_index),
        )?;
        gauge(
            encoder,
            "leased_cluster_applied_index",
            "The index of the last entry applied to this node's registry",
            index(status.applied_index),
        )?;
        self.encode_followers(encoder)?;
        counter(
            encoder,
            "leased_cluster_elections_started",
            "Elections this node started (it stood as a candidate)",
            self.elections_started,
        )?;
        counter(
            encoder,
            "leased_cluster_elections_won",
            "Elections this node won (it became the leader)",
            self.elections_won,
        )?;
        self.encode_snapshots(encoder)?;
        self.encode_bus_errors(encoder)?;
        self.encode_clock(encoder)
    }

    /// `leased_cluster_role{role}`: 1 for this node's role, 0 for the others.
    fn encode_role(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let help = "This node's role: 1 for the one it has (leader, follower, candidate, learner, \
                    shutdown), 0 for the others";
        let mut family =
            encoder.encode_descriptor("leased_cluster_role", help, None, MetricType::Gauge)?;
        for role in ROLES {
            let labels = [("role", role_name(role))];
            let value = i64::from(role == self.status.role);
            ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// On the leader, for each other member: the index it is known to
    /// hold, and how many entries it lacks.
    fn encode_followers(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let status = &*self.status;
        if status.role != Role::Leader {
            return Ok(());
        }
        let last = status.last_log_index.unwrap_or(0);
        let followers: Vec<(String, Option<u64>)> = (status.members.iter())
            .filter(|member| member.id != status.id)
            .map(|member| (member.id.to_string(), member.matched))
            .collect();
        let help = "On the leader: the index of the last entry each other member is known to \
                    hold (none until it answered the leader)";
        let mut family = encoder.encode_descriptor(
            "leased_cluster_follower_matched_index",
            help,
            None,
            MetricType::Gauge,
        )?;
        for (node, matched) in &followers {
            if let Some(matched) = matched {
                let labels = [("node", node.as_str())];
                ConstGauge::new(int(*matched)).encode(family.encode_family(&labels)?)?;
            }
        }
        let help = "On the leader: the log entries it holds that each other member has not \
                    acknowledged (all of them while the member has not answered)";
        let mut family = encoder.encode_descriptor(
            "leased_cluster_follower_lag",
            help,
            None,
            MetricType::Gauge,
        )?;
        for (node, matched) in &followers {
            let labels = [("node", node.as_str())];
            let lag = last.saturating_sub(matched.unwrap_or(0));
            ConstGauge::new(int(lag)).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// `leased_cluster_snapshots_total{event}`.
    fn encode_snapshots(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let help = "Snapshots of the registry: built by this node (its log then purged), sent \
                    whole to a follower that lacked the entries they cover, installed from the \
                    leader";
        let mut family = encoder.encode_descriptor(
            "leased_cluster_snapshots",
            help,
            None,
            MetricType::Counter,
        )?;
        for (event, count) in ["built", "sent", "installed"]
            .into_iter()
            .zip(self.snapshots)
        {
            let labels = [("event", event)];
            ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// `leased_cluster_bus_errors_total{error}`.
    fn encode_bus_errors(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let help = "Errors on the node bus, by kind: connect (dialling a peer failed), tls (a TLS \
                    handshake failed), refused (this node refused a peer's handshake: wrong or \
                    missing cluster-secret), rejected (a peer refused this node's), crc (a frame \
                    with a bad checksum), broken (a connection lost or garbled mid-call)";
        let mut family = encoder.encode_descriptor(
            "leased_cluster_bus_errors",
            help,
            None,
            MetricType::Counter,
        )?;
        for (error, count) in BusError::ALL.into_iter().zip(self.bus_errors) {
            let labels = [("error", error.as_str())];
            ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// This node's clock against the majority's.
    fn encode_clock(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let clock = self.status.clock;
        if let Some(offset) = clock.offset_ms {
            let help = "This node's clock minus the majority's (positive: ahead); absent until \
                        it has estimates of a majority's clocks";
            let metric = encoder.encode_descriptor(
                "leased_cluster_clock_offset",
                help,
                Some(&Unit::Seconds),
                MetricType::Gauge,
            )?;
            ConstGauge::new(offset as f64 / 1000.0).encode(metric)?;
        }
        gauge(
            encoder,
            "leased_cluster_clock_skewed",
            "1 while this node refuses to lead because its clock is further from the majority's \
             than cluster-max-clock-skew",
            u64::from(clock.skewed),
        )
    }
}

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> fmt::Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(int(value)).encode(metric)
}

fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> fmt::Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(value).encode(metric)
}

#[cfg(test)]
mod tests;
