//! The decisions the library makes about failures, as pure functions: how
//! an error is treated, how long to wait before a retry, and how a write
//! whose outcome is unknown is resolved from what the server shows. The
//! registry ([`crate::Registry`]) applies them; the unit tests below check
//! them one by one, and `tests/nodes.rs` checks the registry applying them
//! against a fake server.

use std::collections::HashSet;
use std::time::Duration;

use crate::reply::{LeaseInfo, RunData};

/// What a failed command means for the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// `-TRYAGAIN` (or a cluster's `-CLUSTERDOWN`, no leader now): the
    /// command did nothing; send it again after a pause.
    TryAgain,
    /// `-MOVED slot host:port`, from a cluster's follower with
    /// `cluster-redirect moved`: the command did nothing; send it to the
    /// leader it names.
    Moved,
    /// `-UNCERTAIN`: a write that may or may not have taken effect; read
    /// the state back to find out.
    Uncertain,
    /// The node could not be reached, or the connection failed or timed
    /// out: a request on it may have been sent, and may have taken effect.
    Unreachable,
    /// Any other error reply: the server refused the command.
    Refused,
}

/// How a failure is treated, from the error's kind (an I/O failure, a
/// timeout included) and its code (`TRYAGAIN`, `UNCERTAIN`, `ERR`, ...).
pub fn classify(io: bool, code: Option<&str>) -> Failure {
    match code {
        _ if io => Failure::Unreachable,
        Some("TRYAGAIN" | "CLUSTERDOWN") => Failure::TryAgain,
        Some("MOVED") => Failure::Moved,
        Some("UNCERTAIN") => Failure::Uncertain,
        _ => Failure::Refused,
    }
}

/// [`classify`] for an error of the redis crate.
pub(crate) fn failure(error: &redis::RedisError) -> Failure {
    classify(error.kind() == redis::ErrorKind::Io, error.code())
}

/// The pause before the `attempt`th retry (0 first) of a command answered
/// `-TRYAGAIN`: 10 ms, doubling, at most 500 ms.
pub fn backoff(attempt: u32) -> Duration {
    let ms = 10u64.saturating_mul(1u64 << attempt.min(16));
    Duration::from_millis(ms.min(500))
}

/// The `host:port` of a node's URL (`redis://[user:pass@]host:port/...`),
/// to find the node a `-MOVED` names.
pub fn url_address(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next()?;
    Some(
        authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host),
    )
}

/// The index of the node at `address` (`host:port`, as a `-MOVED` names
/// it) among `urls`; `localhost` and `127.0.0.1` are the same host.
pub fn node_at<'a>(urls: impl IntoIterator<Item = &'a str>, address: &str) -> Option<usize> {
    let same = |a: &str, b: &str| {
        let canonical = |text: &str| text.replacen("localhost:", "127.0.0.1:", 1);
        canonical(a) == canonical(b)
    };
    urls.into_iter()
        .position(|url| url_address(url).is_some_and(|at| same(at, address)))
}

/// The node after `node` in a list of `nodes`.
pub fn next_node(node: usize, nodes: usize) -> usize {
    (node + 1) % nodes.max(1)
}

/// Whether an acquire whose outcome is unknown took the run: `shown` is
/// `LEASE.GET run` after it, `heartbeats` the heartbeat count of the
/// run's newest tenure in `LEASE.HISTORY run COUNT 1` (None when the
/// server keeps no history). It did if the run's lease is unexpired, has
/// our worker id, is not one this process already holds, and has not been
/// heartbeated yet (a lease just granted has had none; another process's
/// with our worker id would have had one within a third of its TTL).
/// Worker ids must therefore be unique among live processes.
pub fn acquire_took(
    shown: Option<&LeaseInfo>,
    heartbeats: Option<i64>,
    worker: &str,
    held: &HashSet<i64>,
) -> bool {
    let Some(lease) = shown else {
        return false;
    };
    lease.expired != Some(true)
        && lease.worker_id == worker
        && !held.contains(&lease.fencing_token)
        && heartbeats.is_none_or(|beats| beats == 0)
}

/// What a heartbeat whose outcome is unknown tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Beat {
    /// Answered 1: the lease was extended.
    Extended,
    /// Answered 0, or the lease is gone: lost.
    Refused,
    /// The lease is still there and unexpired, but whether it was
    /// extended is unknown: the deadline stays where it was.
    Unknown,
}

/// A heartbeat whose outcome is unknown, resolved from `LEASE.GET run`:
/// the lease still shown, unexpired, proves nothing about the extension;
/// anything else means it is lost.
pub fn heartbeat_outcome(shown: Option<&LeaseInfo>, lease_id: &str, token: i64) -> Beat {
    match shown {
        Some(lease)
            if lease.lease_id == lease_id
                && lease.fencing_token == token
                && lease.expired != Some(true) =>
        {
            Beat::Unknown
        }
        _ => Beat::Refused,
    }
}

/// Whether a `LEASE.SETDATA` whose outcome is unknown took: the run's data
/// (`LEASE.GETDATA run`) is its value, written with its token.
pub fn setdata_took(shown: Option<&RunData>, value: &[u8], token: i64) -> bool {
    shown.is_some_and(|data| data.value == value && data.fencing_token == token)
}

/// Whether a `LEASE.RELEASE` whose outcome is unknown must be sent again:
/// the run's lease (`LEASE.GET run`) is still this one.
pub fn release_again(shown: Option<&LeaseInfo>, lease_id: &str, token: i64) -> bool {
    shown.is_some_and(|lease| lease.lease_id == lease_id && lease.fencing_token == token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(worker: &str, token: i64, expired: bool) -> LeaseInfo {
        LeaseInfo {
            run_id: "run".into(),
            worker_id: worker.into(),
            lease_id: format!("run:{worker}:{token}"),
            fencing_token: token,
            expires_at: 100.0,
            expired: Some(expired),
        }
    }

    #[test]
    fn errors_are_classified_by_kind_then_code() {
        assert_eq!(classify(false, Some("TRYAGAIN")), Failure::TryAgain);
        assert_eq!(classify(false, Some("UNCERTAIN")), Failure::Uncertain);
        assert_eq!(classify(false, Some("CLUSTERDOWN")), Failure::TryAgain);
        assert_eq!(classify(false, Some("MOVED")), Failure::Moved);
        assert_eq!(classify(false, Some("ERR")), Failure::Refused);
        assert_eq!(classify(false, None), Failure::Refused);
        assert_eq!(classify(true, None), Failure::Unreachable);
        let io = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(failure(&io), Failure::Unreachable);
    }

    #[test]
    fn a_moved_names_a_node_of_the_list_by_its_address() {
        let urls = [
            "redis://127.0.0.1:7001/",
            "redis://user:pass@localhost:7002/?protocol=resp3",
            "redis://[::1]:7003",
        ];
        assert_eq!(url_address(urls[1]), Some("localhost:7002"));
        assert_eq!(node_at(urls, "127.0.0.1:7001"), Some(0));
        assert_eq!(node_at(urls, "127.0.0.1:7002"), Some(1));
        assert_eq!(node_at(urls, "[::1]:7003"), Some(2));
        assert_eq!(node_at(urls, "127.0.0.1:7004"), None);
    }

    #[test]
    fn tryagain_backs_off_from_10_ms_doubling_to_500() {
        let pauses: Vec<u64> = (0..8).map(|n| backoff(n).as_millis() as u64).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 500, 500]);
        assert_eq!(backoff(u32::MAX), Duration::from_millis(500));
    }

    #[test]
    fn nodes_are_tried_in_turn() {
        assert_eq!(next_node(0, 3), 1);
        assert_eq!(next_node(2, 3), 0);
        assert_eq!(next_node(0, 1), 0);
    }

    #[test]
    fn an_uncertain_acquire_took_the_run_only_if_the_lease_is_new_and_ours() {
        let none = HashSet::new();
        let ours = lease("w", 5, false);
        assert!(acquire_took(Some(&ours), Some(0), "w", &none));
        assert!(acquire_took(Some(&ours), None, "w", &none));
        assert!(!acquire_took(None, None, "w", &none));
        assert!(!acquire_took(
            Some(&lease("other", 5, false)),
            Some(0),
            "w",
            &none
        ));
        assert!(!acquire_took(
            Some(&lease("w", 5, true)),
            Some(0),
            "w",
            &none
        ));
        assert!(!acquire_took(Some(&ours), Some(1), "w", &none));
        let held = HashSet::from([5]);
        assert!(!acquire_took(Some(&ours), Some(0), "w", &held));
    }

    #[test]
    fn an_uncertain_heartbeat_moves_no_deadline_and_a_gone_lease_is_lost() {
        let ours = lease("w", 5, false);
        assert_eq!(heartbeat_outcome(Some(&ours), "run:w:5", 5), Beat::Unknown);
        let expired = lease("w", 5, true);
        assert_eq!(
            heartbeat_outcome(Some(&expired), "run:w:5", 5),
            Beat::Refused
        );
        let taken = lease("x", 6, false);
        assert_eq!(heartbeat_outcome(Some(&taken), "run:w:5", 5), Beat::Refused);
        assert_eq!(heartbeat_outcome(None, "run:w:5", 5), Beat::Refused);
    }

    #[test]
    fn an_uncertain_setdata_took_if_the_data_is_its_value_and_token() {
        let data = RunData {
            value: b"step=3".to_vec(),
            fencing_token: 5,
            written_at: 1.0,
        };
        assert!(setdata_took(Some(&data), b"step=3", 5));
        assert!(!setdata_took(Some(&data), b"step=4", 5));
        assert!(!setdata_took(Some(&data), b"step=3", 6));
        assert!(!setdata_took(None, b"step=3", 5));
    }

    #[test]
    fn an_uncertain_release_is_sent_again_while_the_lease_is_shown() {
        let ours = lease("w", 5, true);
        assert!(release_again(Some(&ours), "run:w:5", 5));
        assert!(!release_again(Some(&lease("x", 6, false)), "run:w:5", 5));
        assert!(!release_again(None, "run:w:5", 5));
    }
}
