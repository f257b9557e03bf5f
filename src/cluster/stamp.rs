//! The leader's time stamp on each entry it proposes.
//!
//! A stamp is `max(last stamp, clock, floor)`: it never goes back on one
//! leader even if its clock does, and a new leader starts from at least
//! the registry time it has applied (the `floor`), so a clock behind the
//! old leader's does not stamp the past. The clock is injected, so tests
//! drive time.

use std::sync::{Arc, Mutex};

/// Seconds since the Unix epoch, as the node reads them.
pub type Clock = Arc<dyn Fn() -> f64 + Send + Sync>;

pub struct Stamper {
    clock: Clock,
    last: Mutex<f64>,
}

impl Stamper {
    pub fn new(clock: Clock) -> Stamper {
        Stamper {
            clock,
            last: Mutex::new(f64::NEG_INFINITY),
        }
    }

    /// The next stamp, at least `floor`.
    pub fn stamp(&self, floor: f64) -> f64 {
        let mut last = self.last.lock().expect("stamp lock");
        *last = last.max((self.clock)()).max(floor);
        *last
    }
}

/// A leader's clock: the wall clock read once, when it was last
/// anchored (at start and whenever the node becomes leader), then moved by
/// the monotonic clock. A wall clock stepped back or forward while it
/// leads (NTP, an operator) does not move its stamps; it is read again at
/// the next election.
pub struct Anchor {
    wall: Clock,
    at: Mutex<(f64, tokio::time::Instant)>,
}

impl Anchor {
    pub fn new(wall: Clock) -> Arc<Anchor> {
        let at = Mutex::new((wall(), tokio::time::Instant::now()));
        Arc::new(Anchor { wall, at })
    }

    /// Reads the wall clock again.
    pub fn reset(&self) {
        *self.at.lock().expect("anchor lock") = ((self.wall)(), tokio::time::Instant::now());
    }

    /// To the millisecond, as the single node's clock reads.
    pub fn now(&self) -> f64 {
        let (wall, at) = *self.at.lock().expect("anchor lock");
        ((wall + at.elapsed().as_secs_f64()) * 1000.0).floor() / 1000.0
    }

    /// The anchored time as a [`Clock`] for the stamper.
    pub fn clock(self: &Arc<Anchor>) -> Clock {
        let anchor = self.clone();
        Arc::new(move || anchor.now())
    }
}

/// The machine's clock.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[tokio::test(start_paused = true)]
    async fn an_anchored_clock_moves_with_the_monotonic_clock_until_reset() {
        let wall = Arc::new(AtomicU64::new(100f64.to_bits()));
        let read = wall.clone();
        let anchor = Anchor::new(Arc::new(move || {
            f64::from_bits(read.load(Ordering::SeqCst))
        }));
        tokio::time::advance(std::time::Duration::from_millis(1500)).await;
        // The wall clock is stepped back: the anchored clock does not follow.
        wall.store(50f64.to_bits(), Ordering::SeqCst);
        assert_eq!(anchor.now(), 101.5);
        anchor.reset();
        assert_eq!(anchor.now(), 50.0);
    }

    #[test]
    fn a_stamp_never_goes_back() {
        let now = Arc::new(AtomicU64::new(10f64.to_bits()));
        let read = now.clone();
        let stamper = Stamper::new(Arc::new(move || {
            f64::from_bits(read.load(Ordering::SeqCst))
        }));
        assert_eq!(stamper.stamp(f64::NEG_INFINITY), 10.0);
        now.store(5f64.to_bits(), Ordering::SeqCst);
        assert_eq!(stamper.stamp(f64::NEG_INFINITY), 10.0);
        assert_eq!(stamper.stamp(12.0), 12.0);
        now.store(20f64.to_bits(), Ordering::SeqCst);
        assert_eq!(stamper.stamp(12.0), 20.0);
    }
}
