//! Lease events to subscribers: every `acquired`, `released`, `expired`
//! and `reclaimed` the registry reports is published on
//! `__lease__:<run_id>` as `<event>:<fencing_token>:<worker_id>` and on
//! `__leaseevent__:<event>` as `<fencing_token>:<run_id>`, in the order
//! the registry made them, so per run in the order things happened.
//!
//! The registry makes events only while someone needs them: a subscriber,
//! or a blocked acquire (a release must wake its waiter). Expiries need no
//! command: the core's timer wakes when the server's clock passes the
//! next one not yet announced, at most every [`ANNOUNCE_EVERY`], so an
//! `expired` goes out within that (plus a millisecond) of its time.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::time::Instant;

use super::task::{Core, Round};
use crate::pubsub::PubSub;
use crate::registry::{Event, EventKind, Op, Registry};

/// The least time between two announcements of expiries: a burst of
/// leases expiring one after another is announced in batches.
const ANNOUNCE_EVERY: Duration = Duration::from_millis(10);

impl Core {
    /// Makes events when they are wanted, and stops when not. Started by a
    /// subscriber, events are owed from when it subscribed.
    pub(super) fn watch(&mut self, clock: f64) {
        let pubsub = &self.shared.pubsub;
        let listening = pubsub.active();
        let wanted = listening || !self.waiters.is_empty();
        if wanted == self.registry.emitting() {
            return;
        }
        let since = if listening {
            pubsub.active_since().min(clock)
        } else {
            clock
        };
        self.registry.set_emitting(wanted, since);
    }

    /// Publishes the events the registry made since the last call, and
    /// wakes the waiters of runs they freed.
    pub(super) fn publish(&mut self) {
        if !self.registry.emitting() {
            return;
        }
        let pubsub = &self.shared.pubsub;
        let listening = pubsub.active();
        // The channel names are matched before any payload is made, in a
        // buffer of their own, so an event nobody gets allocates nothing.
        let mut channel = Vec::new();
        for event in self.registry.take_events() {
            if matches!(event.kind, EventKind::Released | EventKind::Reclaimed) {
                self.waiters
                    .free_at(event.run_id.clone(), f64::NEG_INFINITY);
            }
            if listening {
                self.stats.events += 1;
                publish_event(pubsub, &event, &mut channel);
            }
        }
    }

    /// Announces the leases that have expired by now, if one has and the
    /// last announcement is not too recent.
    pub(super) fn announce(&mut self, round: &Round) {
        let Some(next) = self.registry.next_unannounced_expiry() else {
            return;
        };
        let recent = self
            .last_announce
            .is_some_and(|at| at.elapsed() < ANNOUNCE_EVERY);
        if recent || next > round.clock.max(self.registry.time()) {
            return;
        }
        self.registry.apply(&Op::AnnounceExpired, round.clock);
        self.last_announce = Some(Instant::now());
        self.publish();
    }

    /// When expiries are next to be announced.
    pub(super) fn next_announce(&self) -> Option<Instant> {
        let next = self.instant_at(self.registry.next_unannounced_expiry()?);
        let earliest = self.last_announce.map(|at| at + ANNOUNCE_EVERY);
        Some(earliest.map_or(next, |earliest| next.max(earliest)))
    }
}

/// Cluster mode, after a replica applies an entry: makes events while
/// someone here subscribes, announces the leases expired by registry time
/// (the leader's stamps move it), and publishes what the entry made.
pub(crate) fn publish_applied(registry: &mut Registry, pubsub: &PubSub) {
    let listening = pubsub.active();
    if listening != registry.emitting() {
        registry.set_emitting(listening, pubsub.active_since());
    }
    if !listening {
        return;
    }
    registry.apply(&Op::AnnounceExpired, registry.time());
    let mut channel = Vec::new();
    for event in registry.take_events() {
        publish_event(pubsub, &event, &mut channel);
    }
}

/// One event on its run's channel and on its kind's.
fn publish_event(pubsub: &PubSub, event: &Event, channel: &mut Vec<u8>) {
    run_channel(event, channel);
    pubsub.publish(channel, || run_payload(event));
    event_channel(event, channel);
    pubsub.publish(channel, || event_payload(event));
}

/// `__lease__:<run_id>`, into `out`.
fn run_channel(event: &Event, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(b"__lease__:");
    out.extend_from_slice(&event.run_id);
}

/// `<event>:<fencing_token>:<worker_id>`, the payload on the run's channel.
fn run_payload(event: &Event) -> Bytes {
    let mut token = itoa::Buffer::new();
    let token = token.format(event.fencing_token).as_bytes();
    let kind = event.kind.as_str().as_bytes();
    let mut message = BytesMut::with_capacity(kind.len() + token.len() + event.worker_id.len() + 2);
    message.put_slice(kind);
    message.put_u8(b':');
    message.put_slice(token);
    message.put_u8(b':');
    message.put_slice(&event.worker_id);
    message.freeze()
}

/// `__leaseevent__:<event>`, into `out`.
fn event_channel(event: &Event, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(b"__leaseevent__:");
    out.extend_from_slice(event.kind.as_str().as_bytes());
}

/// `<fencing_token>:<run_id>`, the payload on the event's channel.
fn event_payload(event: &Event) -> Bytes {
    let mut token = itoa::Buffer::new();
    let token = token.format(event.fencing_token).as_bytes();
    let mut message = BytesMut::with_capacity(token.len() + 1 + event.run_id.len());
    message.put_slice(token);
    message.put_u8(b':');
    message.put_slice(&event.run_id);
    message.freeze()
}
