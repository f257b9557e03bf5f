//! The clock-skew rule: how far this node's clock is from its cluster's,
//! and whether that is too far for it to lead.
//!
//! The leader's clock stamps every entry, and so every lease's expiry: a
//! leader whose clock runs ahead expires leases before their holders
//! expect, one behind lets them outlive their time. Each node therefore
//! estimates its peers' clocks (a probe's answer against the middle of its
//! round trip, [`estimate`]) and compares its own with the majority's: the
//! median of every voter's clock it has an estimate of, its own included
//! ([`judge`]). Only a majority of voters can say which clock is wrong: one
//! node against one other is no evidence either way.

use std::collections::HashMap;
use std::time::Duration;

use super::types::NodeId;

/// Probes whose round trip took longer are ignored: the offset is only
/// known within the round trip, which would then be a large part of the
/// bound it is checked against.
pub const MAX_ROUND_TRIP: Duration = Duration::from_millis(100);

/// A peer's clock as one probe saw it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The peer's clock minus this node's, in seconds.
    pub offset: f64,
    /// The probe's round trip: the peer read its clock somewhere within
    /// it, so the offset is right within half of it.
    pub error: Duration,
}

/// The estimate from a probe sent at `sent` by this node's clock and
/// answered `peer` by the peer's, `round_trip` later (timed by the
/// monotonic clock, so a wall clock stepped meanwhile does not count): the
/// peer is assumed to have read its clock in the middle of the round trip,
/// `peer - (sent + received) / 2`. `None` if the round trip was too long
/// to tell anything ([`MAX_ROUND_TRIP`]).
pub fn estimate(sent: f64, round_trip: Duration, peer: f64) -> Option<Estimate> {
    if round_trip > MAX_ROUND_TRIP {
        return None;
    }
    let received = sent + round_trip.as_secs_f64();
    Some(Estimate {
        offset: peer - (sent + received) / 2.0,
        error: round_trip,
    })
}

/// Whether this node's clock is fit to lead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Within the bound of the majority's clock.
    Within,
    /// Further than the bound from the majority's clock.
    Skewed,
    /// Not known: estimates of too few voters, or as many clocks on this
    /// node's side as against it. The node keeps what it was.
    Undecided,
}

/// What [`judge`] found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Judgement {
    /// This node's clock minus the majority's, in seconds (positive: this
    /// node is ahead); `None` without estimates of a majority of voters.
    pub offset: Option<f64>,
    pub verdict: Verdict,
}

/// Judges node `me`'s clock among `voters` from `offsets`, its latest
/// estimates of reachable peers' clocks (each peer's minus its own).
///
/// The clocks are this node's (offset 0) and those of the voters it has
/// estimates of; with fewer than a majority of the voters there is no
/// verdict. The majority's clock is their median. With an even number of
/// clocks the two middle ones must agree: skewed if both are beyond
/// `bound`, within if neither is, undecided otherwise (with one peer of
/// three reachable, say, this node's clock and the peer's are the middle
/// two and nothing says which is wrong). The offset shown is then their
/// mean.
pub fn judge(
    me: NodeId,
    voters: &[NodeId],
    offsets: &HashMap<NodeId, f64>,
    bound: Duration,
) -> Judgement {
    // Each clock as this node's minus it.
    let mut clocks: Vec<f64> = vec![0.0];
    clocks.extend(
        (voters.iter())
            .filter(|&&id| id != me)
            .filter_map(|id| offsets.get(id))
            .map(|offset| -offset),
    );
    if voters.is_empty() || clocks.len() <= voters.len() / 2 {
        return Judgement {
            offset: None,
            verdict: Verdict::Undecided,
        };
    }
    clocks.sort_by(f64::total_cmp);
    let n = clocks.len();
    let (low, high) = (clocks[(n - 1) / 2], clocks[n / 2]);
    let bound = bound.as_secs_f64();
    let verdict = match (low.abs() > bound, high.abs() > bound) {
        (true, true) => Verdict::Skewed,
        (false, false) => Verdict::Within,
        _ => Verdict::Undecided,
    };
    Judgement {
        offset: Some((low + high) / 2.0),
        verdict,
    }
}

/// The voter a skewed leader should hand over to: the peer whose clock is
/// nearest the majority's, if one is within `bound` of it. `offset` is
/// this node's offset from the majority ([`Judgement::offset`]).
pub fn successor(
    me: NodeId,
    voters: &[NodeId],
    offsets: &HashMap<NodeId, f64>,
    offset: f64,
    bound: Duration,
) -> Option<NodeId> {
    // A peer's clock minus the majority's: (peer - me) + (me - majority).
    let from_majority = |id: &NodeId| Some((*id, (offsets.get(id)? + offset).abs()));
    (voters.iter())
        .filter(|&&id| id != me)
        .filter_map(from_majority)
        .filter(|&(_, off)| off <= bound.as_secs_f64())
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(id, _)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_millis(500);

    fn offsets(pairs: &[(NodeId, f64)]) -> HashMap<NodeId, f64> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn an_estimate_takes_the_middle_of_the_round_trip() {
        // Sent at 100.000, back 40 ms later; the peer read 102.020: its
        // clock is 2 s ahead, read at 100.020 by this one's.
        let estimate = estimate(100.0, Duration::from_millis(40), 102.02).unwrap();
        assert!((estimate.offset - 2.0).abs() < 1e-9, "{estimate:?}");
        assert_eq!(estimate.error, Duration::from_millis(40));
        // Behind.
        let estimate = super::estimate(100.0, Duration::from_millis(10), 99.505).unwrap();
        assert!((estimate.offset + 0.5).abs() < 1e-9, "{estimate:?}");
        // A slow round trip tells too little.
        assert_eq!(
            super::estimate(100.0, Duration::from_millis(101), 100.0),
            None
        );
        assert!(super::estimate(100.0, MAX_ROUND_TRIP, 100.0).is_some());
    }

    #[test]
    fn a_node_ahead_of_both_others_is_skewed() {
        let voters = [1, 2, 3];
        // Node 3, 2 s ahead, sees both others 2 s behind it.
        let judged = judge(3, &voters, &offsets(&[(1, -2.0), (2, -1.99)]), BOUND);
        assert_eq!(judged.verdict, Verdict::Skewed);
        assert!((judged.offset.unwrap() - 1.99).abs() < 1e-9, "{judged:?}");
        // Node 1 sees node 2 with it and node 3 ahead: the median is its own.
        let judged = judge(1, &voters, &offsets(&[(2, 0.01), (3, 2.0)]), BOUND);
        assert_eq!(judged.verdict, Verdict::Within);
        assert!((judged.offset.unwrap() + 0.01).abs() < 1e-9, "{judged:?}");
    }

    #[test]
    fn the_bound_is_inclusive_and_either_side_counts() {
        let voters = [1, 2, 3];
        let at = judge(1, &voters, &offsets(&[(2, 0.5), (3, 0.5)]), BOUND);
        assert_eq!(at.verdict, Verdict::Within);
        let behind = judge(1, &voters, &offsets(&[(2, 0.6), (3, 0.7)]), BOUND);
        assert_eq!(behind.verdict, Verdict::Skewed);
        assert!((behind.offset.unwrap() + 0.6).abs() < 1e-9, "{behind:?}");
    }

    #[test]
    fn without_a_majority_of_estimates_there_is_no_verdict() {
        let voters = [1, 2, 3, 4, 5];
        // Itself and one peer of five: two clocks, not a majority.
        let judged = judge(1, &voters, &offsets(&[(2, 3.0)]), BOUND);
        assert_eq!(judged.verdict, Verdict::Undecided);
        assert_eq!(judged.offset, None);
        // Estimates of non-voters do not count.
        let judged = judge(1, &voters, &offsets(&[(2, 3.0), (9, 3.0)]), BOUND);
        assert_eq!(judged.verdict, Verdict::Undecided);
        // Two peers: three clocks of five, a majority.
        let judged = judge(1, &voters, &offsets(&[(2, 3.0), (3, 3.0)]), BOUND);
        assert_eq!(judged.verdict, Verdict::Skewed);
        // No membership yet.
        assert_eq!(
            judge(1, &[], &offsets(&[]), BOUND).verdict,
            Verdict::Undecided
        );
    }

    #[test]
    fn a_lone_voter_is_its_own_majority() {
        let judged = judge(1, &[1], &offsets(&[]), BOUND);
        assert_eq!(judged.verdict, Verdict::Within);
        assert_eq!(judged.offset, Some(0.0));
    }

    #[test]
    fn one_clock_against_one_other_decides_nothing_unless_they_agree() {
        let voters = [1, 2, 3];
        // Node 3 unreachable: node 1 and node 2, 2 s apart, cannot tell
        // which of them is wrong.
        let judged = judge(1, &voters, &offsets(&[(2, 2.0)]), BOUND);
        assert_eq!(judged.verdict, Verdict::Undecided);
        assert!((judged.offset.unwrap() + 1.0).abs() < 1e-9, "{judged:?}");
        let judged = judge(2, &voters, &offsets(&[(1, -2.0)]), BOUND);
        assert_eq!(judged.verdict, Verdict::Undecided);
        // Close together, both are within.
        let judged = judge(1, &voters, &offsets(&[(2, 0.2)]), BOUND);
        assert_eq!(judged.verdict, Verdict::Within);
        // Four voters, all reachable: the two middle clocks must agree.
        let voters = [1, 2, 3, 4];
        let ahead = offsets(&[(2, -2.0), (3, -2.0), (4, -2.1)]);
        assert_eq!(judge(1, &voters, &ahead, BOUND).verdict, Verdict::Skewed);
        let split = offsets(&[(2, 0.0), (3, -2.0), (4, -2.0)]);
        assert_eq!(judge(1, &voters, &split, BOUND).verdict, Verdict::Undecided);
    }

    #[test]
    fn a_skewed_leader_hands_over_to_the_peer_nearest_the_majority() {
        let voters = [1, 2, 3];
        // Node 1 is ahead: node 2 is 2.1 s behind it, node 3 1.95 s.
        let seen = offsets(&[(2, -2.1), (3, -1.95)]);
        let judged = judge(1, &voters, &seen, BOUND);
        let offset = judged.offset.unwrap();
        assert!((offset - 1.95).abs() < 1e-9, "{judged:?}");
        assert_eq!(successor(1, &voters, &seen, offset, BOUND), Some(3));
        // A peer it has no estimate of is not chosen; nor is one whose
        // clock is itself far from the majority's.
        let seen = offsets(&[(2, -2.0), (3, -2.0)]);
        let far = offsets(&[(2, -2.0)]);
        assert_eq!(successor(1, &voters, &far, 2.0, BOUND), Some(2));
        assert_eq!(successor(1, &voters, &seen, 5.0, BOUND), None);
    }
}
