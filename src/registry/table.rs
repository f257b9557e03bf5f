//! The lease table: what the registry stores per lease, and its indexes.
//!
//! Leases live in an arena of fixed-size slots. A slot keeps its index for
//! its lease's whole life (snapshots walk the arena by index while it
//! changes), and a freed slot is reused lowest first, so that when leases
//! come and go the live ones gather at the front and the arena can shrink
//! from its end.
//!
//! A slot is 72 bytes: the run and worker ids in one field (inline when
//! they fit in 21 bytes, else one heap block), the token, the expiry, the
//! TTL, when the lease was acquired and how many heartbeats it has had
//! (its tenure, for `LEASE.HISTORY`), and two links of the expiry index. The lease id is derived, never
//! stored. Three indexes point into the arena by slot number only:
//! - by run id and by fencing token: hash tables of `u32` that grow and
//!   shrink a step per change ([`SlotIndex`]), never all at once;
//! - by expiry: the leases of each whole second of `expires_at` form a list
//!   threaded through their slots, and an ordered map holds each second's
//!   list head, so the earliest leases are found without a scan and moving
//!   a lease (a heartbeat) is O(1) plus a map update.

use std::collections::BTreeMap;
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashMap};

use super::arena::{Arena, Vacancy};
use super::index::{Retired, SlotIndex};

/// The end of an expiry list.
const NIL: u32 = u32::MAX;
/// Ids of up to this many bytes (run and worker together) live in the slot.
const INLINE: usize = 21;

/// The run and worker ids of a lease, in one field of 24 bytes.
#[derive(Clone, Debug)]
enum Ids {
    Inline {
        run_len: u8,
        len: u8,
        bytes: [u8; INLINE],
    },
    /// `run_len` as 4 bytes little-endian, then run id and worker id.
    Heap(Box<[u8]>),
}

impl Ids {
    fn new(run_id: &[u8], worker_id: &[u8]) -> Ids {
        let len = run_id.len() + worker_id.len();
        if len <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..run_id.len()].copy_from_slice(run_id);
            bytes[run_id.len()..len].copy_from_slice(worker_id);
            return Ids::Inline {
                run_len: run_id.len() as u8,
                len: len as u8,
                bytes,
            };
        }
        let run_len = u32::try_from(run_id.len()).expect("run ids are far below 4 GiB");
        let mut heap = Vec::with_capacity(4 + len);
        heap.extend_from_slice(&run_len.to_le_bytes());
        heap.extend_from_slice(run_id);
        heap.extend_from_slice(worker_id);
        Ids::Heap(heap.into_boxed_slice())
    }

    /// The run id and the worker id.
    fn split(&self) -> (&[u8], &[u8]) {
        match self {
            Ids::Inline {
                run_len,
                len,
                bytes,
            } => bytes[..usize::from(*len)].split_at(usize::from(*run_len)),
            Ids::Heap(heap) => {
                let (run_len, ids) = heap.split_at(4);
                let run_len = u32::from_le_bytes(run_len.try_into().expect("4 bytes")) as usize;
                ids.split_at(run_len)
            }
        }
    }

    fn empty() -> Ids {
        Ids::Inline {
            run_len: 0,
            len: 0,
            bytes: [0; INLINE],
        }
    }
}

/// One lease. A free slot has token 0 (tokens start at 1).
#[derive(Clone, Debug)]
pub struct Slot {
    ids: Ids,
    pub fencing_token: u64,
    pub expires_at: f64,
    /// Seconds each heartbeat extends this lease by.
    pub ttl: f64,
    /// Registry time when it was acquired.
    pub acquired_at: f64,
    /// Heartbeats that extended it.
    pub heartbeats: u32,
    /// Neighbours in the list of leases expiring in the same second.
    prev: u32,
    next: u32,
}

impl Vacancy for Slot {
    fn vacant() -> Slot {
        Slot {
            ids: Ids::empty(),
            fencing_token: 0,
            expires_at: 0.0,
            ttl: 0.0,
            acquired_at: 0.0,
            heartbeats: 0,
            prev: NIL,
            next: NIL,
        }
    }

    fn is_vacant(&self) -> bool {
        self.fencing_token == 0
    }
}

impl Slot {
    pub fn run_id(&self) -> &[u8] {
        self.ids.split().0
    }

    pub fn worker_id(&self) -> &[u8] {
        self.ids.split().1
    }

    /// The bytes kept for this lease: the slot, the ids' heap block if
    /// they have one, and a `u32` in each of the run and token indexes.
    pub fn footprint(&self) -> usize {
        let heap = match &self.ids {
            Ids::Inline { .. } => 0,
            Ids::Heap(heap) => heap.len(),
        };
        std::mem::size_of::<Slot>() + heap + 2 * std::mem::size_of::<u32>()
    }
}

/// The head and length of one second's expiry list, and bounds of the
/// expiries in it: no lease in it expires before `min` or after `max`
/// (bounds that removals leave as they were, so they stay true).
#[derive(Clone, Copy, Debug)]
struct Second {
    head: u32,
    count: u32,
    min: f64,
    max: f64,
}

impl Second {
    /// Makes the bounds take in `expires_at`.
    fn widen(&mut self, expires_at: f64) {
        self.min = self.min.min(expires_at);
        self.max = self.max.max(expires_at);
    }
}

/// The second an expiry falls in. Times beyond `i64` (or infinite) share
/// the last one, which is only ever reached by time itself being there.
fn second_of(expires_at: f64) -> i64 {
    // `as` saturates, which is what we want at the extremes.
    expires_at.floor() as i64
}

/// A time no lease in `second`'s list expires after: the second's end;
/// but the last second holds every expiry from 2^63 on, up to infinity,
/// so there only the list's own bound tells. (The first second, holding
/// everything below -2^63, needs no such care: its end bounds it.)
fn end_of(second: i64, list: &Second) -> f64 {
    if second == i64::MAX {
        list.max
    } else {
        second as f64 + 1.0
    }
}

/// A lease to put in a slot: everything but its run id.
#[derive(Clone, Copy, Debug)]
pub struct NewLease<'a> {
    pub worker_id: &'a [u8],
    pub fencing_token: u64,
    pub expires_at: f64,
    pub ttl: f64,
    /// 0 for none.
    pub lock_delay: f64,
    pub acquired_at: f64,
}

#[derive(Debug, Default)]
pub struct LeaseTable {
    slots: Arena<Slot>,
    len: usize,
    by_run: SlotIndex,
    by_token: SlotIndex,
    hasher: DefaultHashBuilder,
    /// Each second of `expires_at` that has leases, with its list.
    expiry: BTreeMap<i64, Second>,
    /// The lock delays of the slots that have one: few leases do, so they
    /// are kept beside the slots rather than in each.
    lock_delays: HashMap<u32, f64>,
}

impl LeaseTable {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, slot: u32) -> &Slot {
        self.slots.get(slot)
    }

    /// Slots `0..bound()` may hold leases.
    pub fn bound(&self) -> usize {
        self.slots.end()
    }

    /// The lease in `slot`, if the slot exists and holds one.
    pub fn at(&self, slot: usize) -> Option<&Slot> {
        self.slots.at(slot)
    }

    pub fn find_run(&self, run_id: &[u8]) -> Option<u32> {
        let hash = self.hasher.hash_one(run_id);
        self.by_run
            .find(hash, |slot| self.slots.get(slot).run_id() == run_id)
    }

    pub fn find_token(&self, fencing_token: u64) -> Option<u32> {
        let hash = self.hasher.hash_one(fencing_token);
        self.by_token.find(hash, |slot| {
            self.slots.get(slot).fencing_token == fencing_token
        })
    }

    /// Whether a new run fits in a slot already allocated (one freed by a
    /// release or reclaim, or the rest of the last chunk).
    pub fn has_room(&self) -> bool {
        self.len < self.slots.capacity()
    }

    /// Adds a lease for a run that has none; returns its slot.
    pub fn insert(&mut self, run_id: &[u8], lease: &NewLease) -> u32 {
        let slot = self.slots.take();
        *self.slots.get_mut(slot) = Slot {
            ids: Ids::new(run_id, lease.worker_id),
            fencing_token: lease.fencing_token,
            expires_at: lease.expires_at,
            ttl: lease.ttl,
            acquired_at: lease.acquired_at,
            heartbeats: 0,
            prev: NIL,
            next: NIL,
        };
        self.set_lock_delay(slot, lease.lock_delay);
        self.len += 1;
        let hash = self.hasher.hash_one(run_id);
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.by_run
            .insert(hash, slot, |s| hasher.hash_one(slots.get(s).run_id()));
        self.index_token(slot);
        self.link(slot);
        self.resize_step();
        slot
    }

    /// Gives the run in `slot` a new lease (a takeover), keeping the slot.
    pub fn replace(&mut self, slot: u32, lease: &NewLease) {
        self.unindex_token(slot);
        self.unlink(slot);
        let entry = self.slots.get_mut(slot);
        entry.ids = Ids::new(entry.ids.split().0, lease.worker_id);
        entry.fencing_token = lease.fencing_token;
        entry.expires_at = lease.expires_at;
        entry.ttl = lease.ttl;
        entry.acquired_at = lease.acquired_at;
        entry.heartbeats = 0;
        self.set_lock_delay(slot, lease.lock_delay);
        self.index_token(slot);
        self.link(slot);
        self.resize_step();
    }

    pub fn set_expiry(&mut self, slot: u32, expires_at: f64) {
        let old = self.slots.get(slot).expires_at;
        if second_of(old) == second_of(expires_at) {
            self.slots.get_mut(slot).expires_at = expires_at;
            self.expiry
                .get_mut(&second_of(expires_at))
                .expect("a linked lease's second is listed")
                .widen(expires_at);
            return;
        }
        self.unlink(slot);
        self.slots.get_mut(slot).expires_at = expires_at;
        self.link(slot);
    }

    /// Sets the tenure of the lease in `slot`: when it was acquired and
    /// how many heartbeats it has had.
    pub fn set_tenure(&mut self, slot: u32, acquired_at: f64, heartbeats: u32) {
        let entry = self.slots.get_mut(slot);
        entry.acquired_at = acquired_at;
        entry.heartbeats = heartbeats;
    }

    /// The lock delay of the lease in `slot`; 0 for none.
    pub fn lock_delay(&self, slot: u32) -> f64 {
        self.lock_delays.get(&slot).copied().unwrap_or(0.0)
    }

    pub fn set_lock_delay(&mut self, slot: u32, lock_delay: f64) {
        if lock_delay > 0.0 {
            self.lock_delays.insert(slot, lock_delay);
        } else {
            self.lock_delays.remove(&slot);
        }
    }

    pub fn remove(&mut self, slot: u32) {
        self.lock_delays.remove(&slot);
        self.unindex_token(slot);
        self.unlink(slot);
        let hash = self.hasher.hash_one(self.slots.get(slot).run_id());
        self.by_run.remove(hash, slot);
        *self.slots.get_mut(slot) = Slot::vacant();
        self.len -= 1;
        self.slots.release(slot);
        self.resize_step();
    }

    /// A lease expiring in the earliest second that has any, and that
    /// second: the next candidate for reclaiming.
    pub fn earliest(&self) -> Option<(i64, u32)> {
        self.expiry
            .first_key_value()
            .map(|(&second, list)| (second, list.head))
    }

    /// A time no lease expiring in `second` (a second [`earliest`] gave)
    /// expires after.
    ///
    /// [`earliest`]: LeaseTable::earliest
    pub fn second_end(&self, second: i64) -> f64 {
        match self.expiry.get(&second) {
            Some(list) => end_of(second, list),
            None => second as f64 + 1.0,
        }
    }

    /// How many leases have expired at `time` (`expires_at <= time`).
    pub fn count_expired(&self, time: f64) -> usize {
        let mut count = 0;
        for (&second, list) in self.expiry.range(..=second_of(time)) {
            if end_of(second, list) <= time || list.max <= time {
                count += list.count as usize;
                continue;
            }
            if time < list.min {
                continue;
            }
            // The second under way: only a walk tells which have expired.
            let mut slot = list.head;
            while slot != NIL {
                let entry = self.slots.get(slot);
                count += usize::from(entry.expires_at <= time);
                slot = entry.next;
            }
        }
        count
    }

    /// Visits every lease with `after < expires_at <= up_to`, second by
    /// second, in no order within a second.
    pub fn visit_expiring(&self, after: f64, up_to: f64, mut visit: impl FnMut(u32)) {
        if up_to <= after {
            return;
        }
        for (&second, list) in self.expiry.range(second_of(after)..=second_of(up_to)) {
            if list.max <= after || list.min > up_to || end_of(second, list) <= after {
                continue;
            }
            let mut slot = list.head;
            while slot != NIL {
                let entry = self.slots.get(slot);
                if after < entry.expires_at && entry.expires_at <= up_to {
                    visit(slot);
                }
                slot = entry.next;
            }
        }
    }

    /// The earliest `expires_at` above `after`, if any lease has one, or
    /// a time between `after` and it: a second's earliest is known without
    /// a walk, and a long list part of which is past `after` is not walked
    /// (the caller looks again at the lower bound). For scheduling.
    pub fn next_expiry_above(&self, after: f64) -> Option<f64> {
        const WALK_AT_MOST: u32 = 256;
        let (_, list) = self
            .expiry
            .range(second_of(after)..)
            .find(|(_, list)| list.max > after)?;
        if list.min > after {
            return Some(list.min);
        }
        if list.count > WALK_AT_MOST {
            return Some(after);
        }
        let mut earliest = list.max;
        let mut slot = list.head;
        while slot != NIL {
            let entry = self.slots.get(slot);
            if entry.expires_at > after {
                earliest = earliest.min(entry.expires_at);
            }
            slot = entry.next;
        }
        Some(earliest)
    }

    /// The index tables that resizes have replaced since the last call.
    pub fn take_retired(&mut self) -> Retired {
        let mut retired = Retired::default();
        self.by_run.take_retired(&mut retired);
        self.by_token.take_retired(&mut retired);
        retired
    }

    /// A step of resizing each index (see [`SlotIndex`]); every change to
    /// the table does one, so a resize finishes within a bounded number of
    /// changes and no single change pays for all of it.
    fn resize_step(&mut self) {
        let (slots, hasher) = (&self.slots, &self.hasher);
        let end = slots.end();
        self.by_run.step(end, |s| {
            slots.at(s as usize).map(|e| hasher.hash_one(e.run_id()))
        });
        self.by_token.step(end, |s| {
            slots
                .at(s as usize)
                .map(|e| hasher.hash_one(e.fencing_token))
        });
    }

    fn index_token(&mut self, slot: u32) {
        let hash = self.hasher.hash_one(self.slots.get(slot).fencing_token);
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.by_token
            .insert(hash, slot, |s| hasher.hash_one(slots.get(s).fencing_token));
    }

    fn unindex_token(&mut self, slot: u32) {
        let hash = self.hasher.hash_one(self.slots.get(slot).fencing_token);
        self.by_token.remove(hash, slot);
    }

    /// Puts `slot` at the head of its second's expiry list.
    fn link(&mut self, slot: u32) {
        let expires_at = self.slots.get(slot).expires_at;
        let list = self.expiry.entry(second_of(expires_at)).or_insert(Second {
            head: NIL,
            count: 0,
            min: expires_at,
            max: expires_at,
        });
        list.widen(expires_at);
        let old_head = list.head;
        list.head = slot;
        list.count += 1;
        let entry = self.slots.get_mut(slot);
        entry.prev = NIL;
        entry.next = old_head;
        if old_head != NIL {
            self.slots.get_mut(old_head).prev = slot;
        }
    }

    /// Takes `slot` out of its expiry list (before its expiry changes).
    fn unlink(&mut self, slot: u32) {
        let Slot {
            prev,
            next,
            expires_at,
            ..
        } = *self.slots.get(slot);
        if next != NIL {
            self.slots.get_mut(next).prev = prev;
        }
        if prev != NIL {
            self.slots.get_mut(prev).next = next;
        }
        let second = second_of(expires_at);
        let list = self
            .expiry
            .get_mut(&second)
            .expect("a linked lease's second is listed");
        if prev == NIL {
            list.head = next;
        }
        list.count -= 1;
        if list.count == 0 {
            self.expiry.remove(&second);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(table: &mut LeaseTable, run: &[u8], worker: &[u8], token: u64, at: f64, ttl: f64) {
        let lease = NewLease {
            worker_id: worker,
            fencing_token: token,
            expires_at: at,
            ttl,
            lock_delay: 0.0,
            acquired_at: 0.0,
        };
        table.insert(run, &lease);
    }

    #[test]
    fn a_slot_is_72_bytes() {
        assert_eq!(std::mem::size_of::<Ids>(), 24);
        assert_eq!(std::mem::size_of::<Slot>(), 72);
    }

    #[test]
    fn ids_inline_and_on_the_heap() {
        for (run, worker) in [
            (&b""[..], &b""[..]),
            (b"run:123456", b"worker-12"),
            (b"a-run-id-of-21-bytes!", b""),
            (b"", b"a-worker-of-22-bytes!!"),
            (b"r", &[0xff; 300][..]),
        ] {
            let ids = Ids::new(run, worker);
            assert_eq!(ids.split(), (run, worker));
            let inline = matches!(ids, Ids::Inline { .. });
            assert_eq!(inline, run.len() + worker.len() <= INLINE);
        }
    }

    #[test]
    fn freed_slots_are_reused_lowest_first_and_the_end_shrinks() {
        let mut table = LeaseTable::default();
        for i in 0..200u64 {
            put(
                &mut table,
                format!("r{i}").as_bytes(),
                b"w",
                i + 1,
                i as f64,
                1.0,
            );
        }
        for token in [150u64, 10, 70] {
            let slot = table.find_token(token).unwrap();
            table.remove(slot);
        }
        put(&mut table, b"new-1", b"w", 1001, 0.0, 1.0);
        put(&mut table, b"new-2", b"w", 1002, 0.0, 1.0);
        assert_eq!(table.find_run(b"new-1"), Some(9));
        assert_eq!(table.find_run(b"new-2"), Some(69));
        for token in 100..=200u64 {
            if let Some(slot) = table.find_token(token) {
                table.remove(slot);
            }
        }
        assert_eq!(table.bound(), 99);
        assert_eq!(table.len(), 99);
        for i in 0..99 {
            if let Some(entry) = table.at(i) {
                assert_eq!(table.find_run(entry.run_id()), Some(i as u32));
            }
        }
    }

    #[test]
    fn the_expiry_index_finds_the_earliest_and_counts_expired() {
        let mut table = LeaseTable::default();
        put(&mut table, b"a", b"w", 1, 10.5, 1.0);
        put(&mut table, b"b", b"w", 2, 10.2, 1.0);
        put(&mut table, b"c", b"w", 3, 3.0, 1.0);
        assert_eq!(table.earliest(), Some((3, 2)));
        assert_eq!(table.count_expired(10.3), 2);
        assert_eq!(table.count_expired(2.9), 0);
        assert_eq!(table.count_expired(11.0), 3);
        table.set_expiry(2, 20.0);
        assert_eq!(table.earliest(), Some((10, 1)));
        table.set_expiry(0, 10.9);
        assert_eq!(table.count_expired(10.95), 2);
        table.remove(1);
        assert_eq!(table.earliest(), Some((10, 0)));
        table.remove(0);
        assert_eq!(table.earliest(), Some((20, 2)));
        table.remove(2);
        assert_eq!(table.earliest(), None);
        assert_eq!((table.len(), table.bound()), (0, 0));
    }

    #[test]
    fn the_indexes_resize_step_by_step_and_find_every_lease_throughout() {
        let mut table = LeaseTable::default();
        let mut resized = 0;
        let mut was_resizing = false;
        let check = |table: &LeaseTable, token: u64| {
            let slot = table.find_token(token).expect("indexed by token");
            let run = format!("run:{token}");
            assert_eq!(table.find_run(run.as_bytes()), Some(slot));
        };
        for token in 1..=50_000u64 {
            put(
                &mut table,
                format!("run:{token}").as_bytes(),
                b"w",
                token,
                10.0,
                1.0,
            );
            if table.by_run.resizing() != was_resizing {
                was_resizing = !was_resizing;
                resized += usize::from(!was_resizing);
                for sample in (1..=token).step_by(97) {
                    check(&table, sample);
                }
            }
        }
        assert!(resized >= 4, "{resized} resizes while growing");
        let grown = table.by_run.capacity();
        // Remove all but every 1000th, in an order that leaves holes.
        for token in (1..=50_000u64).filter(|t| t % 1000 != 0) {
            let slot = table.find_token(token).unwrap();
            table.remove(slot);
        }
        for token in (1000..=50_000u64).step_by(1000) {
            check(&table, token);
            assert_eq!(
                table.find_run(format!("run:{}", token - 1).as_bytes()),
                None
            );
        }
        // Changes drive the resizing: a few heartbeats' worth of churn.
        for round in 0..2_000u64 {
            let token = 100_000 + round;
            put(&mut table, b"churn", b"w", token, 10.0, 1.0);
            table.remove(table.find_token(token).unwrap());
        }
        assert!(
            table.by_run.capacity() < grown / 8,
            "{} of {grown}",
            table.by_run.capacity()
        );
        assert!(table.by_token.capacity() < grown / 8);
        for token in (1000..=50_000u64).step_by(1000) {
            check(&table, token);
        }
    }

    #[test]
    fn expiring_leases_are_visited_by_range_and_the_next_one_found() {
        let mut table = LeaseTable::default();
        for (token, at) in [(1, 10.5), (2, 10.2), (3, 3.0), (4, 12.0), (5, 10.9)] {
            put(
                &mut table,
                format!("r{token}").as_bytes(),
                b"w",
                token,
                at,
                1.0,
            );
        }
        let tokens = |after: f64, up_to: f64| {
            let mut seen = Vec::new();
            table.visit_expiring(after, up_to, |slot| {
                seen.push(table.get(slot).fencing_token)
            });
            seen.sort();
            seen
        };
        assert_eq!(tokens(f64::NEG_INFINITY, 3.0), [3]);
        assert_eq!(tokens(3.0, 10.5), [1, 2]);
        assert_eq!(tokens(10.5, 12.0), [4, 5]);
        assert_eq!(tokens(12.0, 100.0), Vec::<u64>::new());
        assert_eq!(table.next_expiry_above(f64::NEG_INFINITY), Some(3.0));
        assert_eq!(table.next_expiry_above(3.0), Some(10.2));
        assert_eq!(table.next_expiry_above(10.5), Some(10.9));
        assert_eq!(table.next_expiry_above(12.0), None);
    }

    #[test]
    fn lock_delays_go_with_their_slot() {
        let mut table = LeaseTable::default();
        put(&mut table, b"a", b"w", 1, 10.0, 1.0);
        let slot = table.find_token(1).unwrap();
        assert_eq!(table.lock_delay(slot), 0.0);
        table.set_lock_delay(slot, 5.0);
        assert_eq!(table.lock_delay(slot), 5.0);
        let takeover = NewLease {
            worker_id: b"x",
            fencing_token: 2,
            expires_at: 20.0,
            ttl: 1.0,
            lock_delay: 0.0,
            acquired_at: 10.0,
        };
        table.replace(slot, &takeover);
        assert_eq!(table.lock_delay(slot), 0.0);
        table.set_lock_delay(slot, 2.0);
        table.remove(slot);
        put(&mut table, b"b", b"w", 3, 10.0, 1.0);
        assert_eq!(table.lock_delay(table.find_token(3).unwrap()), 0.0);
    }
}
