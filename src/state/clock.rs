//! The server's clock: seconds since the Unix epoch, to the millisecond,
//! for lease commands that omit `now` and for the `lease-max-skew` bound.
//!
//! A real server reads the system's wall clock. A server started inside a
//! test can instead follow tokio's clock from a fixed start, so that a test
//! with paused time moves the server's clock with `tokio::time::advance`
//! instead of sleeping.

use std::time::SystemTime;

use tokio::time::Instant;

#[derive(Clone, Copy, Debug)]
pub enum Clock {
    /// The system's wall clock.
    System,
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

    /// Seconds since the Unix epoch, to the millisecond.
    pub fn now(&self) -> f64 {
        let seconds = match self {
            Clock::System => system_seconds(),
            Clock::Tokio { start, origin } => start + origin.elapsed().as_secs_f64(),
        };
        (seconds * 1000.0).floor() / 1000.0
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
}
