//! A node's clock guard: it probes its peers' clocks over the bus every
//! second, judges its own by the skew rule ([`super::skew`]), and while it
//! is too far off refuses to lead: its elections are off, a lead it holds
//! is handed to a peer whose clock agrees with the majority's, and the bus
//! declines hand-overs to it ([`Guard::refuses_to_lead`]). It publishes
//! its offset and verdict for `CLUSTER INFO`.
//!
//! Until it has compared its clock with a majority's it refuses to lead
//! too: a node 2 s ahead must not win the first election before its first
//! probe is answered. Without a majority of estimates later on (peers
//! unreachable) it keeps its verdict, so it does not flap.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, join_all};
use openraft::async_runtime::WatchReceiver;
use openraft::{Raft, ServerState};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::bus::Bus;
use super::skew::{Estimate, Judgement, Verdict, estimate, judge, successor};
use super::stamp::Clock;
use super::state_machine::StateMachine;
use super::status::ClockStatus;
use super::types::{NodeId, TypeConfig};

/// How often every peer is probed once this node has a verdict.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// How often before: a node refuses to lead until its first verdict.
const PROBE_FIRST_EVERY: Duration = Duration::from_millis(200);

/// How long a probe may take before it is given up (one whose round trip
/// passes [`super::skew::MAX_ROUND_TRIP`] is ignored anyway; the longer
/// wait lets a first probe finish dialling, for the next one to use).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A peer whose clock has not been estimated for this long counts as
/// unreachable.
const STALE_AFTER: Duration = Duration::from_secs(5);

/// What the bus server needs of the guard: this node's clock, as peers'
/// probes read it, and whether this node refuses to lead. Cheap to clone.
#[derive(Clone)]
pub struct Guard {
    clock: Clock,
    refusing: Arc<AtomicBool>,
}

impl Guard {
    /// A guard on `clock` (the wall clock the leader's stamps are anchored
    /// to). It refuses nothing until [`run`] runs on it.
    pub fn new(clock: Clock) -> Guard {
        Guard {
            clock,
            refusing: Arc::default(),
        }
    }

    /// Seconds since the Unix epoch by this node's clock.
    pub fn now(&self) -> f64 {
        (self.clock)()
    }

    /// Whether this node refuses to lead (its clock is skewed, or not
    /// compared with a majority's yet).
    pub fn refuses_to_lead(&self) -> bool {
        self.refusing.load(Ordering::SeqCst)
    }
}

/// Asks a peer what its clock reads.
pub type AskTime = Arc<dyn Fn(NodeId) -> BoxFuture<'static, Result<f64, String>> + Send + Sync>;

/// Asks peers over `bus`, at the addresses its configuration gives them.
pub fn over_bus(bus: Bus) -> AskTime {
    Arc::new(move |peer| {
        let bus = bus.clone();
        async move { bus.time(peer, PROBE_TIMEOUT).await }.boxed()
    })
}

/// Where the guard publishes what it found, each time it probes.
pub type Publish = Box<dyn Fn(ClockStatus) + Send + Sync>;

/// Guards `raft`'s node until `shutdown` is cancelled or the Raft stops:
/// probes its voting peers with `ask`, and refuses to lead while its clock
/// is further than `bound` from the majority's. It refuses at once, before
/// the task it spawns first runs: call it before the node's first election
/// can start.
pub fn start(
    guard: Guard,
    raft: Raft<TypeConfig, StateMachine>,
    ask: AskTime,
    bound: Duration,
    publish: Publish,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    guard.refusing.store(true, Ordering::SeqCst);
    raft.runtime_config().elect(false);
    tokio::spawn(run(guard, raft, ask, bound, publish, shutdown))
}

async fn run(
    guard: Guard,
    raft: Raft<TypeConfig, StateMachine>,
    ask: AskTime,
    bound: Duration,
    publish: Publish,
    shutdown: CancellationToken,
) {
    let mut estimates: HashMap<NodeId, (Estimate, Instant)> = HashMap::new();
    // `None` until the first verdict.
    let mut skewed: Option<bool> = None;
    loop {
        let metrics = raft.metrics().borrow_watched().clone();
        if metrics.state == ServerState::Shutdown {
            return;
        }
        let me = metrics.id;
        let voters: Vec<NodeId> = metrics.membership_config.membership().voter_ids().collect();
        let peers = voters.iter().copied().filter(|&id| id != me);
        for (peer, estimated) in join_all(peers.map(|peer| probe(&guard.clock, &ask, peer))).await {
            if let Some(estimated) = estimated {
                estimates.insert(peer, (estimated, Instant::now()));
            }
        }
        estimates.retain(|_, (_, at)| at.elapsed() < STALE_AFTER);
        let offsets: HashMap<NodeId, f64> = (estimates.iter())
            .map(|(&peer, (estimated, _))| (peer, estimated.offset))
            .collect();
        let judged = judge(me, &voters, &offsets, bound);
        let now_skewed = match judged.verdict {
            Verdict::Skewed => Some(true),
            Verdict::Within => Some(false),
            Verdict::Undecided => skewed,
        };
        if now_skewed != skewed {
            decided(&guard, &raft, &judged, bound);
            skewed = now_skewed;
        }
        if skewed == Some(true)
            && metrics.state == ServerState::Leader
            && let Some(offset) = judged.offset
        {
            hand_over(&raft, me, &voters, &offsets, offset, bound).await;
        }
        publish(ClockStatus {
            offset_ms: judged.offset.map(|offset| (offset * 1000.0).round() as i64),
            skewed: skewed == Some(true),
        });
        let pause = if skewed.is_some() {
            PROBE_EVERY
        } else {
            PROBE_FIRST_EVERY
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// One probe of `peer`: its estimate, if it answered quickly enough.
async fn probe(clock: &Clock, ask: &AskTime, peer: NodeId) -> (NodeId, Option<Estimate>) {
    let sent = clock();
    let started = Instant::now();
    let answered = tokio::time::timeout(PROBE_TIMEOUT, ask(peer)).await;
    let round_trip = started.elapsed();
    match answered {
        Ok(Ok(seconds)) => (peer, estimate(sent, round_trip, seconds)),
        Ok(Err(why)) => {
            tracing::debug!("Clock probe of node {peer} failed: {why}");
            (peer, None)
        }
        Err(_) => (peer, None),
    }
}

/// Acts on a new verdict, and says so once.
fn decided(
    guard: &Guard,
    raft: &Raft<TypeConfig, StateMachine>,
    judged: &Judgement,
    bound: Duration,
) {
    let offset_ms = judged.offset.map_or(0.0, |offset| offset * 1000.0);
    let bound_ms = bound.as_millis();
    match judged.verdict {
        Verdict::Skewed => {
            guard.refusing.store(true, Ordering::SeqCst);
            raft.runtime_config().elect(false);
            let side = if offset_ms > 0.0 { "ahead" } else { "behind" };
            warn!(
                "This node's clock is {:.0} ms off the majority's ({side}; more than \
                 cluster-max-clock-skew, {bound_ms} ms): it refuses to lead until it is back \
                 within that bound",
                offset_ms.abs()
            );
        }
        Verdict::Within => {
            raft.runtime_config().elect(true);
            guard.refusing.store(false, Ordering::SeqCst);
            info!(
                "This node's clock is within cluster-max-clock-skew ({bound_ms} ms) of the \
                 majority's ({offset_ms:+.0} ms): it may lead"
            );
        }
        Verdict::Undecided => {}
    }
}

/// A skewed leader hands its lead to the peer whose clock is nearest the
/// majority's; tried again at each probe while it still leads (openraft
/// reports it leader until the new leader's vote reaches it).
async fn hand_over(
    raft: &Raft<TypeConfig, StateMachine>,
    me: NodeId,
    voters: &[NodeId],
    offsets: &HashMap<NodeId, f64>,
    offset: f64,
    bound: Duration,
) {
    // Its verdict was logged already; this passes with the next probes.
    let Some(to) = successor(me, voters, offsets, offset, bound) else {
        tracing::debug!("No peer's clock is within the bound of the majority's: no hand-over yet");
        return;
    };
    info!("This node's clock is skewed: it hands its lead to node {to}");
    if let Err(error) = raft.trigger().transfer_leader(to).await {
        warn!("Handing the lead to node {to}: {error}");
    }
}
