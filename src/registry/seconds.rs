//! A time in seconds, ordered, for keys of ordered maps and heaps (run
//! data's orphans here, blocked acquires' free times in the core). Times
//! are never NaN; `total_cmp` orders them anyway.

use std::cmp::Ordering;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Seconds(pub f64);

impl Eq for Seconds {}

impl PartialOrd for Seconds {
    fn partial_cmp(&self, other: &Seconds) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Seconds {
    fn cmp(&self, other: &Seconds) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}
