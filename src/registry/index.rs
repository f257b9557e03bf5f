//! A hash index of arena slots that resizes a little at a time.
//!
//! A hashbrown table resizes all at once: growing, shrinking or clearing
//! out its tombstones rehashes every entry in one call, 0.1–0.5 s for a
//! million leases, while every client waits. So this index keeps the
//! table below hashbrown's own thresholds and, when it needs another size
//! (or a clean copy without tombstones), builds the new table beside the
//! old one: each change to the index copies the next few arena slots into
//! it, and the new table takes over once the copy has passed the arena's
//! end. Lookups use the old table until then; changes go to both.
//!
//! Tombstones are seen through hashbrown's `capacity()`, which is the
//! entries plus the room left before it must rehash: each tombstone makes
//! it one smaller than it was when the table was new.

use hashbrown::HashTable;

/// Below this capacity hashbrown resizes on its own: it takes microseconds.
const SMALL: usize = 1024;
/// Arena slots copied per change while a resize runs. At the thresholds
/// below, the copy ends long before the old table runs out of room.
const STEP: usize = 32;

#[derive(Debug, Default)]
pub struct SlotIndex {
    table: HashTable<u32>,
    /// `table.capacity()` while it had no tombstones.
    full: usize,
    resize: Option<Resize>,
    /// The table a finished resize replaced, until the owner takes it.
    retired: Option<HashTable<u32>>,
}

/// Index tables replaced by resizes. Freeing tens of megabytes takes
/// milliseconds, so the server drops these on another thread.
#[derive(Debug, Default)]
pub struct Retired(Vec<HashTable<u32>>);

impl Retired {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[derive(Debug)]
struct Resize {
    /// Every live slot below `cursor`, and no other.
    table: HashTable<u32>,
    full: usize,
    cursor: usize,
}

impl SlotIndex {
    pub fn find(&self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        self.table.find(hash, |&slot| is(slot)).copied()
    }

    /// Adds `slot`; `hash_of` gives any indexed slot's hash.
    pub fn insert(&mut self, hash: u64, slot: u32, hash_of: impl Fn(u32) -> u64) {
        if let Some(resize) = &mut self.resize
            && (slot as usize) < resize.cursor
        {
            resize.table.insert_unique(hash, slot, |&s| hash_of(s));
        }
        self.table.insert_unique(hash, slot, |&s| hash_of(s));
        // Grown by hashbrown itself: new, so without tombstones.
        self.full = self.full.max(self.table.capacity());
    }

    pub fn remove(&mut self, hash: u64, slot: u32) {
        remove_from(&mut self.table, hash, slot);
        if let Some(resize) = &mut self.resize
            && (slot as usize) < resize.cursor
        {
            remove_from(&mut resize.table, hash, slot);
        }
    }

    /// Does a step of resizing, or starts one if the index needs it.
    /// `live(slot)` is the hash of what `slot` holds, `None` if it is
    /// free; slots from `end` on are all free.
    pub fn step(&mut self, end: usize, live: impl Fn(u32) -> Option<u64>) {
        let Some(resize) = &mut self.resize else {
            if let Some(capacity) = self.wanted_capacity() {
                let table = HashTable::with_capacity(capacity);
                let full = table.capacity();
                self.resize = Some(Resize {
                    table,
                    full,
                    cursor: 0,
                });
            }
            return;
        };
        let stop = (resize.cursor + STEP).min(end);
        for slot in resize.cursor as u32..stop as u32 {
            if let Some(hash) = live(slot) {
                let rehash = |&s: &u32| live(s).expect("indexed slots are live");
                resize.table.insert_unique(hash, slot, rehash);
            }
        }
        resize.cursor = stop.max(resize.cursor);
        if resize.cursor >= end {
            let done = self.resize.take().expect("a resize is running");
            // An older one nobody took is simply freed here.
            self.retired = Some(std::mem::replace(&mut self.table, done.table));
            self.full = done.full;
        }
    }

    /// The capacity to move to: larger when three quarters full, smaller
    /// when under a quarter, the same (a clean copy) when tombstones have
    /// eaten most of the room; `None` when the table is fine as it is.
    fn wanted_capacity(&self) -> Option<usize> {
        let (len, full) = (self.table.len(), self.full);
        if full < SMALL {
            if full > 64 && len < full / 4 {
                return Some((len * 2).max(64));
            }
            return None;
        }
        let room = self.table.capacity() - len;
        if len >= full / 4 * 3 {
            Some(full * 2)
        } else if len < full / 4 {
            Some((len * 2).max(64))
        } else if room < full / 8 {
            Some(full)
        } else {
            None
        }
    }

    /// Moves the table the last resize replaced, if any, into `retired`.
    pub fn take_retired(&mut self, retired: &mut Retired) {
        retired.0.extend(self.retired.take());
    }

    #[cfg(test)]
    pub fn resizing(&self) -> bool {
        self.resize.is_some()
    }

    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }
}

fn remove_from(table: &mut HashTable<u32>, hash: u64, slot: u32) {
    if let Ok(found) = table.find_entry(hash, |&s| s == slot) {
        found.remove();
    }
}
