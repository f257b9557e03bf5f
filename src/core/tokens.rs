//! Durable fencing tokens: the core never lets the registry issue a token
//! above the ceiling stored on disk, and raises that ceiling a block at a
//! time on a helper thread, ahead of need. The registry itself knows
//! nothing of it: it only counts tokens.

use std::io;
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::{Duration, Instant};

use tracing::{error, info};

use crate::ceiling::CeilingWriter;

/// Tokens reserved on disk per write of the ceiling. A crash skips at most
/// this many; a clean shutdown skips none.
pub const TOKEN_BLOCK: u64 = 100_000;
/// A new block is reserved in the background when fewer remain.
const LOW_WATER: u64 = TOKEN_BLOCK / 2;
/// After a failed ceiling write, acquires fail fast this long before the
/// next attempt, instead of each trying the disk again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The ceiling could not be written: acquires are refused until it can.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CeilingError(pub String);

pub struct Tokens {
    /// Tokens up to this are durably reserved and may be issued.
    ceiling: u64,
    writer: CeilingWriter,
    /// A ceiling write under way, answering with the ceiling it stored.
    reservation: Option<Receiver<io::Result<u64>>>,
    /// The last failed ceiling write: when, and why.
    failure: Option<(Instant, CeilingError)>,
}

impl Tokens {
    /// Reserves the first block above `last_token` before anything is
    /// served, so a data directory that cannot be written stops the start.
    pub fn start(writer: CeilingWriter, last_token: u64) -> io::Result<Tokens> {
        let ceiling = last_token.saturating_add(TOKEN_BLOCK);
        writer.store(ceiling)?;
        Ok(Tokens {
            ceiling,
            writer,
            reservation: None,
            failure: None,
        })
    }

    pub fn ceiling(&self) -> u64 {
        self.ceiling
    }

    /// Makes sure one more token than `last_token` may be issued, waiting
    /// for the disk if it must.
    pub fn allow_next(&mut self, last_token: u64) -> Result<(), CeilingError> {
        if last_token < self.ceiling {
            return Ok(());
        }
        if let Some((when, failure)) = &self.failure
            && when.elapsed() < RETRY_AFTER
        {
            return Err(failure.clone());
        }
        if self.reservation.is_none() {
            self.start_reservation(last_token);
        }
        if let Some(reservation) = self.reservation.take() {
            let done = reservation
                .recv()
                .unwrap_or_else(|_| Err(io::Error::other("the ceiling writer stopped")));
            self.reserved(done);
        }
        match &self.failure {
            Some((_, failure)) if last_token >= self.ceiling => Err(failure.clone()),
            _ => Ok(()),
        }
    }

    /// Takes the outcome of a ceiling write that finished meanwhile.
    pub fn poll(&mut self) {
        let Some(reservation) = &self.reservation else {
            return;
        };
        let done = match reservation.try_recv() {
            Err(TryRecvError::Empty) => return,
            Err(TryRecvError::Disconnected) => Err(io::Error::other("the ceiling writer stopped")),
            Ok(done) => done,
        };
        self.reservation = None;
        self.reserved(done);
    }

    /// Starts writing a new block in the background when few tokens remain.
    pub fn reserve_ahead(&mut self, last_token: u64) {
        let remaining = self.ceiling.saturating_sub(last_token);
        let failed_recently = self
            .failure
            .as_ref()
            .is_some_and(|(when, _)| when.elapsed() < RETRY_AFTER);
        if remaining < LOW_WATER && self.reservation.is_none() && !failed_recently {
            self.start_reservation(last_token);
        }
    }

    fn start_reservation(&mut self, last_token: u64) {
        let target = last_token.saturating_add(TOKEN_BLOCK);
        let writer = self.writer.clone();
        let (done, reservation) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("leased-ceiling".into())
            .spawn(move || {
                let _ = done.send(writer.store(target).map(|()| target));
            });
        match spawned {
            Ok(_) => self.reservation = Some(reservation),
            Err(error) => self.reserved(Err(error)),
        }
    }

    fn reserved(&mut self, done: io::Result<u64>) {
        match done {
            Ok(ceiling) => {
                self.ceiling = self.ceiling.max(ceiling);
                self.failure = None;
            }
            Err(failure) => {
                error!("Writing the token ceiling failed: {failure}");
                self.failure = Some((Instant::now(), CeilingError(failure.to_string())));
            }
        }
    }

    /// At shutdown: waits for a write under way, then lowers the stored
    /// ceiling to the last token issued, so a restart continues right
    /// after it.
    pub fn finish(mut self, last_token: u64) {
        if let Some(reservation) = self.reservation.take()
            && let Ok(done) = reservation.recv()
        {
            self.reserved(done);
        }
        match self.writer.store(last_token) {
            Ok(()) => info!("Token ceiling saved: the last fencing token issued is {last_token}"),
            Err(error) => error!("Saving the token ceiling failed: {error}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ceiling::DataDir;

    #[test]
    fn tokens_are_allowed_up_to_the_stored_ceiling_and_raised_a_block_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let data = DataDir::open(dir.path()).unwrap();
        let mut tokens = Tokens::start(data.ceiling_writer(), 7).unwrap();
        assert_eq!(tokens.ceiling(), 7 + TOKEN_BLOCK);
        assert_eq!(data.read_ceiling().unwrap(), 7 + TOKEN_BLOCK);
        assert_eq!(tokens.allow_next(7 + TOKEN_BLOCK - 1), Ok(()));
        // At the ceiling: it is raised, durably, before the next token.
        assert_eq!(tokens.allow_next(7 + TOKEN_BLOCK), Ok(()));
        assert_eq!(tokens.ceiling(), 7 + 2 * TOKEN_BLOCK);
        assert_eq!(data.read_ceiling().unwrap(), 7 + 2 * TOKEN_BLOCK);
        // Below the low water mark a block is reserved in the background.
        tokens.reserve_ahead(7 + 2 * TOKEN_BLOCK - 10);
        while tokens.reservation.is_some() {
            tokens.poll();
            std::thread::yield_now();
        }
        assert_eq!(tokens.ceiling(), 7 + 3 * TOKEN_BLOCK - 10);
        tokens.finish(42);
        assert_eq!(data.read_ceiling().unwrap(), 42);
    }

    #[test]
    fn a_ceiling_that_cannot_be_written_refuses_tokens_beyond_it() {
        let dir = tempfile::tempdir().unwrap();
        let data = DataDir::open(dir.path()).unwrap();
        let mut tokens = Tokens::start(data.ceiling_writer(), 0).unwrap();
        // The directory gone: the next block cannot be stored.
        drop(data);
        std::fs::remove_dir_all(dir.path()).unwrap();
        assert_eq!(tokens.allow_next(TOKEN_BLOCK - 1), Ok(()));
        let refused = tokens.allow_next(TOKEN_BLOCK).unwrap_err();
        assert!(!refused.0.is_empty());
        // Failing fast, without trying the disk again at once.
        assert_eq!(tokens.allow_next(TOKEN_BLOCK), Err(refused));
        assert_eq!(tokens.ceiling(), TOKEN_BLOCK);
    }
}
