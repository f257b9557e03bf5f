//! The core's answers in the words a Redis client expects: outcomes as
//! replies, refusals and failures as Redis-style errors.

use bytes::Bytes;

use super::keyspace;
use crate::aof::RewriteError;
use crate::command::keyspace::View;
use crate::core::{CoreAnswer, Granted, Refusal, SaveRefused};
use crate::info;
use crate::registry::{IdKind, Op, Outcome};
use crate::reply::Reply;
use crate::state::Shared;

/// How to word a core answer.
#[derive(Debug)]
pub enum Wording {
    /// As its command's own reply.
    Plain,
    /// An INFO's report, in these sections.
    Info(Vec<Bytes>),
    /// A lease command's outcome as a keyspace read's reply.
    Key(View),
    /// A report's time of the last save (`LASTSAVE`).
    LastSave,
}

/// The reply to a core answer.
pub fn answer(answer: CoreAnswer, wording: Wording, shared: &Shared) -> Reply {
    match answer {
        CoreAnswer::Outcome(outcome) => match wording {
            Wording::Key(view) => keyspace::reply(&view, outcome),
            _ => outcome_reply(outcome),
        },
        CoreAnswer::Refused(refusal) => refusal_reply(&refusal),
        CoreAnswer::Report(report) => {
            let sections = match wording {
                Wording::Info(sections) => sections,
                Wording::LastSave => return Reply::Int(info::last_save(shared, &report) as i64),
                _ => Vec::new(),
            };
            Reply::Verbatim(info::render(&sections, shared, &report).into())
        }
        CoreAnswer::Rewrite(Ok(())) => {
            Reply::Status("Background append only file rewriting started")
        }
        CoreAnswer::Rewrite(Err(RewriteError::InProgress)) => {
            Reply::error("ERR Background append only file rewriting already in progress")
        }
        CoreAnswer::Rewrite(Err(RewriteError::Start(error))) => Reply::error(format!(
            "ERR cannot start rewriting the append-only log: {error}"
        )),
        CoreAnswer::Save(Ok(())) => Reply::Status("Background saving started"),
        CoreAnswer::Save(Err(SaveRefused::InProgress)) => {
            Reply::error("ERR Background save already in progress")
        }
        CoreAnswer::Save(Err(SaveRefused::SingleNode)) => Reply::error(
            "ERR BGSAVE is for cluster mode: a single node keeps no snapshot; back up its \
             append-only log and token-ceiling (BGREWRITEAOF compacts the log first)",
        ),
        CoreAnswer::Configured(Ok(())) | CoreAnswer::Reset => Reply::OK,
        CoreAnswer::Configured(Err(error)) => Reply::error(format!("ERR {error}")),
        CoreAnswer::Workers(workers) => {
            Reply::Array(workers.into_iter().map(Reply::Bulk).collect())
        }
        CoreAnswer::Blocked(_) => unreachable!("the connection waits for a blocked acquire"),
    }
}

/// The reply to a blocked acquire, once it ends; `None` if the core
/// stopped first.
pub fn granted(outcome: Option<Granted>) -> Reply {
    match outcome {
        Some(Granted::Lease(lease, None)) => Reply::lease(lease, None),
        Some(Granted::Lease(lease, Some(data))) => Reply::lease_with_data(&lease, data.as_ref()),
        Some(Granted::TimedOut) => Reply::Null,
        Some(Granted::Unblocked) => Reply::error("UNBLOCKED client unblocked via CLIENT UNBLOCK"),
        Some(Granted::Refused(refusal)) => refusal_reply(&refusal),
        Some(Granted::TokensExhausted) => outcome_reply(Outcome::TokensExhausted),
        None => refusal_reply(&Refusal::ShuttingDown),
    }
}

/// Why a lease command is refused before it reaches the core: an id
/// longer than `lease-max-id-len`, a lock delay above
/// `lease-max-lock-delay`, run data longer than `lease-max-data-len`.
pub fn refused_op(
    op: &Op,
    max_id_len: usize,
    max_lock_delay: f64,
    max_data_len: usize,
) -> Option<Reply> {
    if let Some(kind) = op.oversized_id(max_id_len) {
        return Some(id_too_long(kind, max_id_len));
    }
    match op {
        Op::SetData { value, .. } if value.len() > max_data_len => Some(Reply::error(format!(
            "ERR value is longer than {max_data_len} bytes (lease-max-data-len)"
        ))),
        Op::Acquire {
            lock_delay: Some(delay),
            ..
        } if *delay > max_lock_delay => Some(Reply::error(format!(
            "ERR lock delay is more than {max_lock_delay} seconds (lease-max-lock-delay)"
        ))),
        _ => None,
    }
}

pub(super) fn outcome_reply(outcome: Outcome) -> Reply {
    match outcome {
        Outcome::Acquired(Some(lease)) => Reply::lease(lease, None),
        Outcome::AcquiredData(acquired) => Reply::lease_with_data(&acquired.0, acquired.1.as_ref()),
        Outcome::Acquired(None) | Outcome::Got(None) => Reply::Null,
        Outcome::Got(Some((lease, expired))) => Reply::lease(lease, Some(expired)),
        Outcome::Flag(done) => Reply::Int(i64::from(done)),
        Outcome::Scanned { next, runs } => Reply::Array(vec![
            Reply::bulk(next.to_string()),
            Reply::Array(runs.into_iter().map(Reply::Bulk).collect()),
        ]),
        Outcome::Count(count) | Outcome::Reclaimed(count) => Reply::Int(count as i64),
        Outcome::TokensExhausted => {
            Reply::error("ERR every fencing token up to 2^63-1 has been issued")
        }
        Outcome::Data(data) => data.map_or(Reply::Null, |data| Reply::run_data(&data)),
        Outcome::History(tenures) => Reply::Array(tenures.into_iter().map(Reply::tenure).collect()),
        Outcome::Inspected(_) | Outcome::Run(_) => {
            unreachable!("only the keyspace view inspects")
        }
    }
}

fn refusal_reply(refusal: &Refusal) -> Reply {
    match refusal {
        Refusal::Log(error) => {
            Reply::error(format!("MISCONF Errors writing to the AOF file: {error}"))
        }
        Refusal::Ceiling(error) => Reply::error(format!(
            "MISCONF Errors writing the fencing-token ceiling to disk ({}); acquires are \
             refused until it can be written",
            error.0
        )),
        Refusal::FutureNow { max_skew } => Reply::error(format!(
            "ERR now is more than {max_skew} seconds ahead of the server's clock \
             (lease-max-skew); send seconds since the Unix epoch, or omit now"
        )),
        Refusal::OutOfMemory => {
            Reply::error("OOM command not allowed when used memory > 'maxmemory'.")
        }
        Refusal::NoLog => Reply::error("ERR the append-only log is disabled (appendonly no)"),
        Refusal::ShuttingDown => Reply::error("ERR the server is shutting down"),
        Refusal::TryAgain(why) => Reply::error(format!(
            "TRYAGAIN {why}; the command did not happen: send it again"
        )),
        Refusal::Uncertain(why) => Reply::error(format!(
            "UNCERTAIN {why}; the command may or may not have happened: check with LEASE.GET"
        )),
        Refusal::NotInCluster(what) => {
            Reply::error(format!("ERR {what} is not available in cluster mode"))
        }
    }
}

/// A run or worker id longer than `lease-max-id-len`.
fn id_too_long(kind: IdKind, max: usize) -> Reply {
    Reply::error(format!(
        "ERR {} id is longer than {max} bytes (lease-max-id-len)",
        kind.as_str()
    ))
}
