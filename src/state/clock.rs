//! The server's clock: seconds since the Unix epoch, to the millisecond,
//! for lease commands that omit `now` and for the `lease-max-skew` bound.
//!
//! A real server reads the system's wall clock; a testing aid can set it
//! off by a fixed amount (`LEASED_CLOCK_OFFSET_MS`, read once at start,
//! to make one node of a cluster skewed). A server started inside a
//! test can instead follow tokio's clock from a fixed start, so that a test
//! with paused time moves the server's clock with `tokio::time::advance`
//! instead of sleeping.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

#[derive(Clone, Copy, Debug)]
pub enum Clock {
    /// The system's wall clock.
    System,
    /// The system's wall clock plus this many seconds (a testing aid).
    Offset(f64),
    /// `start` seconds at `origin`, then as tokio's clock moves.
    Tokio { start: f64, origin: Instant },
}

impl Clock {
    /// A clock that starts at the wall clock's present reading and then
    /// follows tokio's time (paused or not).
    pub fn following_tokio() -> Clock {
        Clock::Tokio {
            start: system_seconds(),
            origin: Instant::now(),
        }
    }

    /// The instant of tokio's clock at which [`Clock::now`] first reads
    /// `seconds` or more, for timers that wait for the clock: the start of
    /// the first millisecond at or after `seconds` (a value a hair under
    /// a millisecond, from arithmetic on floats, counts as it). For the
    /// system clock it is as good as the moment it is asked, and a little
    /// late rather than early, so a timer never wakes to find it early.
    pub fn when(&self, seconds: f64) -> Instant {
        const LONGEST: f64 = 86_400.0;
        let target = (seconds * 1000.0 - 0.001).ceil() / 1000.0;
        if self.now() >= target {
            return Instant::now();
        }
        match self {
            Clock::System | Clock::Offset(_) => {
                let ahead = (target - self.unrounded()).clamp(0.0, LONGEST);
                Instant::now() + Duration::from_secs_f64(ahead) + Duration::from_micros(50)
            }
            Clock::Tokio { start, origin } => {
                let since_origin =
                    (target - start).clamp(0.0, origin.elapsed().as_secs_f64() + LONGEST);
                *origin + Duration::from_secs_f64(since_origin) + Duration::from_micros(1)
            }
        }
    }

    /// Seconds since the Unix epoch, to the millisecond.
    pub fn now(&self) -> f64 {
        (self.unrounded() * 1000.0).floor() / 1000.0
    }

    fn unrounded(&self) -> f64 {
        match self {
            Clock::System => system_seconds(),
            Clock::Offset(seconds) => system_seconds() + seconds,
            Clock::Tokio { start, origin } => start + origin.elapsed().as_secs_f64(),
        }
    }
}

fn system_seconds() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_tokio_clock_moves_only_with_tokio_time() {
        let clock = Clock::following_tokio();
        let before = clock.now();
        assert!(before > 1.6e9);
        assert_eq!(clock.now(), before);
        tokio::time::advance(std::time::Duration::from_millis(2500)).await;
        assert!((clock.now() - before - 2.5).abs() < 0.002);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_set_for_a_time_wakes_when_the_clock_reads_it() {
        let clock = Clock::following_tokio();
        let at = clock.now() + 1.5;
        let when = clock.when(at);
        tokio::time::sleep_until(when).await;
        assert!(clock.now() >= at);
        // The same clock a millisecond behind reads less: the timer was
        // not late by a whole millisecond.
        let early = Clock::Tokio {
            start: clock_start(&clock),
            origin: clock_origin(&clock) + std::time::Duration::from_millis(1),
        };
        assert!(early.now() < at);
        // A time already reached is now, for either kind of clock.
        assert!(clock.when(at) <= Instant::now());
        assert!(clock.when(at - 10.0) <= Instant::now());
        let system = Clock::System;
        assert!(system.when(system.now()) <= Instant::now());
    }

    #[test]
    fn an_offset_clock_reads_the_system_clock_moved() {
        let ahead = Clock::Offset(2.0);
        let (before, read, after) = (Clock::System.now(), ahead.now(), Clock::System.now());
        assert!(
            read >= before + 2.0 && read <= after + 2.0,
            "{before} {read} {after}"
        );
        // Its timers wait for it, not for the system clock.
        let soon = Instant::now() + Duration::from_millis(2100);
        assert!(ahead.when(read + 0.1) <= soon);
        assert!(ahead.when(read + 0.1) > Instant::now());
    }

    fn clock_start(clock: &Clock) -> f64 {
        match clock {
            Clock::Tokio { start, .. } => *start,
            Clock::System | Clock::Offset(_) => unreachable!(),
        }
    }

    fn clock_origin(clock: &Clock) -> Instant {
        match clock {
            Clock::Tokio { origin, .. } => *origin,
            Clock::System | Clock::Offset(_) => unreachable!(),
        }
    }
}
