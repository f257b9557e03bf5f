//! `maxmemory`, as Redis has it with its `noeviction` policy: leases are
//! never evicted. Above the limit an acquire that would grow the registry
//! (a new run, with every allocated slot taken) gets Redis's `OOM` error
//! and changes nothing. Heartbeats, releases and reads go on, since they
//! keep or free memory; so do acquires of runs that have a lease (null, or
//! a takeover in the same slot), and of new runs once releases or reclaims
//! have left slots to reuse: the allocator keeps what the registry freed,
//! so memory does not fall back under the limit, but it no longer grows.
//!
//! Above the limit `LEASE.SETDATA` gets `OOM` too: run data grows memory
//! whatever the run.
//!
//! The figure compared is jemalloc's `allocated`, INFO's `used_memory`.
//! Reading it refreshes all of jemalloc's statistics (about 0.1 ms), so
//! the core reads it at most every [`SAMPLE_EVERY`], and only while a
//! limit is set and acquires arrive: a burst can pass the limit by what
//! that long of acquires allocates (about 800 KB at 500,000 acquires a
//! second) before the next reading refuses the rest.

use std::time::Duration;

use tokio::time::Instant;

use super::task::{Core, Round};
use crate::system;

/// The most time between two readings of the allocator's figure.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// The last reading of the memory allocated.
#[derive(Debug, Default)]
pub(super) struct MemoryReading {
    allocated: u64,
    at: Option<Instant>,
}

impl Core {
    /// Whether an acquire of `run_id` must be refused for `maxmemory`: a
    /// limit is set, the acquire would grow the registry, and memory is
    /// above the limit.
    pub(super) fn over_maxmemory(&mut self, run_id: &[u8], round: &Round) -> bool {
        round.maxmemory > 0
            && self.registry.would_grow(run_id)
            && self.allocated() > round.maxmemory
    }

    /// Whether a `LEASE.SETDATA` must be refused for `maxmemory`: a limit
    /// is set and memory is above it. Any SETDATA may grow memory (by up
    /// to `lease-max-data-len`), so, as Redis refuses its `denyoom`
    /// commands, it is refused; `LEASE.DELDATA` goes on and frees.
    pub(super) fn data_over_maxmemory(&mut self, round: &Round) -> bool {
        round.maxmemory > 0 && self.allocated() > round.maxmemory
    }

    /// The memory allocated, read again if the last reading is stale.
    fn allocated(&mut self) -> u64 {
        let reading = &mut self.memory;
        if reading.at.is_none_or(|at| at.elapsed() >= SAMPLE_EVERY) {
            reading.allocated = system::allocator_stats().allocated;
            reading.at = Some(Instant::now());
        }
        reading.allocated
    }
}
