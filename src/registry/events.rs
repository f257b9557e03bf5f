//! What happens to leases, as events: a lease acquired, released, expired
//! or reclaimed. The core publishes them (pub/sub) and hands runs to their
//! waiters with them.
//!
//! Events are made only while they are asked for ([`Registry::set_emitting`]),
//! so a registry nobody watches pays nothing. Per run they come in the
//! order things happened: a lease that expired and is then taken over,
//! released or reclaimed is announced `expired` first, once. Expiries are
//! announced as time passes them: the registry keeps a watermark of the
//! time up to which every expiry was announced, and
//! [`Registry::announce_expired`] moves it (the core calls it when the
//! server's clock or registry time has passed the next expiry).

use bytes::Bytes;

use super::Registry;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Acquired,
    Released,
    Expired,
    Reclaimed,
    /// Run data written (`LEASE.SETDATA`) by the lease.
    Data,
}

impl EventKind {
    /// The event's name in messages: `acquired`, `released`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Acquired => "acquired",
            EventKind::Released => "released",
            EventKind::Expired => "expired",
            EventKind::Reclaimed => "reclaimed",
            EventKind::Data => "data",
        }
    }
}

/// One thing that happened to one lease.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub kind: EventKind,
    pub run_id: Bytes,
    pub worker_id: Bytes,
    pub fencing_token: u64,
}

impl Registry {
    /// Starts or stops making events. Started, it treats every expiry up
    /// to `now` as announced: events tell what happens from then on.
    pub fn set_emitting(&mut self, on: bool, now: f64) {
        if on && !self.emitting {
            self.announced = self.announced.max(now);
        }
        if !on {
            self.events.clear();
        }
        self.emitting = on;
    }

    pub fn emitting(&self) -> bool {
        self.emitting
    }

    /// The events made since the last call, oldest first.
    pub fn take_events(&mut self) -> std::vec::Drain<'_, Event> {
        self.events.drain(..)
    }

    /// Announces, as `expired`, every lease whose `expires_at` is above the
    /// watermark and at or below `up_to`, and moves the watermark there.
    /// Returns how many.
    pub fn announce_expired(&mut self, up_to: f64) -> usize {
        if !self.emitting || up_to <= self.announced {
            return 0;
        }
        let mut slots = Vec::new();
        self.leases
            .visit_expiring(self.announced, up_to, |slot| slots.push(slot));
        self.announced = up_to;
        for &slot in &slots {
            self.emit(super::EventKind::Expired, slot);
        }
        slots.len()
    }

    /// The earliest expiry not yet announced, while events are made.
    pub fn next_unannounced_expiry(&self) -> Option<f64> {
        if !self.emitting {
            return None;
        }
        self.leases.next_expiry_above(self.announced)
    }

    /// Records `kind` for the lease in `slot`.
    pub(super) fn emit(&mut self, kind: EventKind, slot: u32) {
        if !self.emitting {
            return;
        }
        let entry = self.leases.get(slot);
        self.events.push(Event {
            kind,
            run_id: Bytes::copy_from_slice(entry.run_id()),
            worker_id: Bytes::copy_from_slice(entry.worker_id()),
            fencing_token: entry.fencing_token,
        });
    }

    /// Records `expired` for the lease in `slot` if it has expired at `at`
    /// and that was not announced yet: before it is taken over, released
    /// or reclaimed, so that per run `expired` comes first.
    pub(super) fn emit_if_expired(&mut self, slot: u32, at: f64) {
        let expires_at = self.leases.get(slot).expires_at;
        if expires_at <= at && expires_at > self.announced {
            self.emit(EventKind::Expired, slot);
        }
    }
}
