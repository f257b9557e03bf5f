//! The leader's choices when it removes itself: whom it hands its lead
//! to, and what it refuses.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use openraft::alias::{LeaderIdOf, LogIdOf, StoredMembershipOf};
use openraft::vote::RaftLeaderId;
use openraft::{BasicNode, Membership, RaftMetrics};

use super::{removable, successor};
use crate::cluster::types::{NodeId, TypeConfig};
use crate::reply::Reply;

fn log_id(index: u64) -> LogIdOf<TypeConfig> {
    LogIdOf::<TypeConfig>::new(LeaderIdOf::<TypeConfig>::new(1, 1).to_committed(), index)
}

/// Node 1's metrics as the leader of `voters` (and `learners`), each
/// other node having matched the log up to its index in `matched`.
fn leader(
    voters: &[NodeId],
    learners: &[NodeId],
    matched: &[(NodeId, Option<u64>)],
) -> RaftMetrics<TypeConfig> {
    let nodes: BTreeMap<NodeId, BasicNode> = (voters.iter().chain(learners))
        .map(|&id| (id, BasicNode::new(format!("127.0.0.1:{}", 7000 + id))))
        .collect();
    let config = vec![voters.iter().copied().collect::<BTreeSet<_>>()];
    let membership = Membership::new(config, nodes).unwrap();
    let mut metrics = RaftMetrics::new_initial(1);
    metrics.membership_config = Arc::new(StoredMembershipOf::<TypeConfig>::new(
        Some(log_id(1)),
        membership,
    ));
    let replication = (matched.iter())
        .map(|&(id, index)| (id, index.map(log_id)))
        .collect();
    metrics.replication = Some(replication);
    metrics
}

#[test]
fn the_lead_goes_to_the_other_voter_with_the_most_of_the_log() {
    let metrics = leader(&[1, 2, 3], &[], &[(1, Some(9)), (2, Some(7)), (3, Some(9))]);
    assert_eq!(successor(&metrics), Some(3));
    // A tie goes to the lower id; a voter that matched nothing comes last.
    let metrics = leader(&[1, 2, 3, 4], &[], &[(2, Some(5)), (3, Some(5)), (4, None)]);
    assert_eq!(successor(&metrics), Some(2));
    // Never a learner, however far along: it cannot be elected.
    let metrics = leader(&[1, 2, 3], &[4], &[(2, Some(3)), (3, None), (4, Some(9))]);
    assert_eq!(successor(&metrics), Some(2));
    // Nobody to hand over to, or not leading (no replication).
    assert_eq!(successor(&leader(&[1], &[4], &[(4, Some(9))])), None);
    let mut follower = leader(&[1, 2, 3], &[], &[]);
    follower.replication = None;
    assert_eq!(successor(&follower), None);
}

#[test]
fn only_a_member_that_is_not_the_last_voter_is_removed() {
    let metrics = leader(&[1, 2, 3], &[4], &[]);
    assert_eq!(removable(&metrics, 1), Ok(()));
    assert_eq!(removable(&metrics, 4), Ok(()));
    let error = |reply: Result<(), Reply>| match reply {
        Err(Reply::Error(error)) => error,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        error(removable(&metrics, 9)),
        "ERR node 9 is not a member of this cluster"
    );
    let alone = leader(&[1], &[4], &[]);
    assert_eq!(
        error(removable(&alone, 1)),
        "ERR node 1 is the cluster's only voter: it cannot be removed"
    );
    assert_eq!(removable(&alone, 4), Ok(()));
}
