//! The arena the lease table keeps its slots in.
//!
//! Slots are numbered from 0 and stored in chunks of a fixed size, so the
//! arena grows and shrinks a chunk at a time: a million leases never have
//! to be copied to a larger block in one go (a 72 MB copy, tens of
//! milliseconds with every client waiting). A freed slot is reused lowest
//! first, so live slots gather at the front and the end can be given back.

/// What the arena needs of its slots: an empty value, and telling one.
pub trait Vacancy {
    fn vacant() -> Self;
    fn is_vacant(&self) -> bool;
}

const CHUNK_BITS: u32 = 12;
/// Slots per chunk: 4,096 (295 KB of 72-byte slots).
const CHUNK: usize = 1 << CHUNK_BITS;

#[derive(Debug)]
pub struct Arena<T> {
    chunks: Vec<Box<[T]>>,
    /// Slots `0..end` are in use or free; beyond `end` all are vacant.
    end: usize,
    /// One bit per slot below `end`, set when it is free.
    free: Vec<u64>,
    /// No free slot below `64 * free_hint`.
    free_hint: usize,
}

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Arena {
            chunks: Vec::new(),
            end: 0,
            free: Vec::new(),
            free_hint: 0,
        }
    }
}

impl<T: Vacancy> Arena<T> {
    /// Slots `0..end()` may hold something.
    pub fn end(&self) -> usize {
        self.end
    }

    /// Slots allocated, in use or not: the arena grows only past these.
    pub fn capacity(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    pub fn get(&self, slot: u32) -> &T {
        let slot = slot as usize;
        &self.chunks[slot >> CHUNK_BITS][slot & (CHUNK - 1)]
    }

    pub fn get_mut(&mut self, slot: u32) -> &mut T {
        let slot = slot as usize;
        &mut self.chunks[slot >> CHUNK_BITS][slot & (CHUNK - 1)]
    }

    /// The slot, if it exists and is not vacant.
    pub fn at(&self, slot: usize) -> Option<&T> {
        if slot >= self.end {
            return None;
        }
        Some(self.get(slot as u32)).filter(|value| !value.is_vacant())
    }

    /// The lowest free slot, or a new one at the end. The caller fills it.
    pub fn take(&mut self) -> u32 {
        while self.free_hint < self.free.len() {
            let word = self.free[self.free_hint];
            if word != 0 {
                let bit = word.trailing_zeros() as usize;
                self.free[self.free_hint] &= !(1 << bit);
                return (self.free_hint * 64 + bit) as u32;
            }
            self.free_hint += 1;
        }
        let slot = u32::try_from(self.end).expect("fewer than 2^32 slots");
        assert!(slot != u32::MAX, "fewer than 2^32 - 1 slots");
        if self.end == self.chunks.len() * CHUNK {
            self.chunks.push((0..CHUNK).map(|_| T::vacant()).collect());
        }
        self.end += 1;
        if self.free.len() * 64 < self.end {
            self.free.push(0);
        }
        slot
    }

    /// Marks `slot`, already made vacant by the caller, free; trims free
    /// slots off the end and gives back chunks no longer needed (keeping
    /// one spare, so a table hovering at a chunk boundary does not
    /// allocate and free it over and over).
    pub fn release(&mut self, slot: u32) {
        debug_assert!(self.get(slot).is_vacant());
        let slot = slot as usize;
        self.free[slot / 64] |= 1 << (slot % 64);
        self.free_hint = self.free_hint.min(slot / 64);
        while self.end > 0 && self.get(self.end as u32 - 1).is_vacant() {
            self.end -= 1;
            self.free[self.end / 64] &= !(1 << (self.end % 64));
        }
        self.free.truncate(self.end.div_ceil(64));
        self.free_hint = self.free_hint.min(self.free.len());
        let needed = self.end.div_ceil(CHUNK);
        if self.chunks.len() > needed + 1 {
            self.chunks.truncate(needed + 1);
        }
        if self.free.capacity() > 64 && self.free.capacity() / 4 > self.free.len() {
            self.free.shrink_to(self.free.len() * 2);
        }
    }

    /// Chunks allocated (for tests).
    #[cfg(test)]
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Vacancy for u64 {
        fn vacant() -> u64 {
            0
        }
        fn is_vacant(&self) -> bool {
            *self == 0
        }
    }

    #[test]
    fn slots_are_reused_lowest_first_and_chunks_given_back() {
        let mut arena = Arena::<u64>::default();
        for i in 0..3 * CHUNK as u64 {
            let slot = arena.take();
            assert_eq!(slot as u64, i);
            *arena.get_mut(slot) = i + 1;
        }
        assert_eq!((arena.end(), arena.chunks()), (3 * CHUNK, 3));
        for slot in [7, 3] {
            *arena.get_mut(slot) = 0;
            arena.release(slot);
        }
        for slot in [3, 7] {
            assert_eq!(arena.take(), slot);
            *arena.get_mut(slot) = u64::from(slot) + 1;
        }
        for slot in (CHUNK as u32..3 * CHUNK as u32).rev() {
            *arena.get_mut(slot) = 0;
            arena.release(slot);
        }
        // One chunk in use and one spare.
        assert_eq!((arena.end(), arena.chunks()), (CHUNK, 2));
        assert_eq!(arena.at(5), Some(&6));
        assert_eq!(arena.at(CHUNK), None);
        for slot in (0..CHUNK as u32).rev() {
            *arena.get_mut(slot) = 0;
            arena.release(slot);
        }
        assert_eq!((arena.end(), arena.chunks()), (0, 1));
        assert_eq!(arena.take(), 0);
    }
}
