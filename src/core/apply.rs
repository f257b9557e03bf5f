//! One command on the core: a client's lease command, checked for the
//! refusals that keep the registry's promises and applied to the
//! registry; or one of the commands the core answers from what it owns
//! (INFO's figures, BGREWRITEAOF, CONFIG SET, the waiter queues).

use bytes::Bytes;

use super::report::{CommandStats, CoreReport};
use super::task::{Core, Round};
use super::{CoreAnswer, CoreCommand, Refusal, SaveRefused};
use crate::aof::Log;
use crate::config::{Config, SetError};
use crate::logging;
use crate::registry::{Op, Outcome};
use crate::state::Shared;
use crate::system;

impl Core {
    /// Applies a client's lease command, unless it must be refused, and
    /// counts it.
    pub(super) fn apply(&mut self, op: &Op, round: &Round) -> CoreAnswer {
        match self.outcome(op, round) {
            Ok(outcome) => {
                self.stats.record(op, Some(&outcome));
                CoreAnswer::Outcome(outcome)
            }
            Err(refusal) => {
                self.stats.record(op, None);
                CoreAnswer::Refused(refusal)
            }
        }
    }

    /// [`Core::apply`] without counting. An acquire of a run that clients
    /// are blocked waiting for gets null: the run goes to them first, in
    /// order (its `now` still moves registry time, as any acquire's does).
    pub(super) fn outcome(&mut self, op: &Op, round: &Round) -> Result<Outcome, Refusal> {
        if let Some(refusal) = self.refusal(op, round) {
            return Err(refusal);
        }
        if let Op::Acquire { run_id, now, .. } = op
            && self.waiters.has_waiters(run_id)
        {
            self.registry.advance_time(now.unwrap_or(round.clock));
            return Ok(Outcome::Acquired(None));
        }
        Ok(self.registry.apply(op, round.clock))
    }

    /// Why `op` must not be applied, if it must not: a change while the log
    /// is failing, a `now` too far ahead of the clock, an acquire while the
    /// next token cannot be made durable, or that would grow the registry
    /// while memory is above `maxmemory`.
    pub(super) fn refusal(&mut self, op: &Op, round: &Round) -> Option<Refusal> {
        if let Some(failure) = &round.log_failure
            && op.changes_leases()
        {
            return Some(failure.clone());
        }
        if let Some(now) = op.explicit_now()
            && round.max_skew > 0.0
            && now > round.clock + round.max_skew
        {
            return Some(Refusal::FutureNow {
                max_skew: round.max_skew,
            });
        }
        if let Op::Acquire { .. } = op
            && let Err(error) = self.tokens.allow_next(self.registry.last_token())
        {
            return Some(Refusal::Ceiling(error));
        }
        if let Op::Acquire { run_id, .. } = op
            && self.over_maxmemory(run_id, round)
        {
            return Some(Refusal::OutOfMemory);
        }
        if let Op::SetData { .. } = op
            && self.data_over_maxmemory(round)
        {
            return Some(Refusal::OutOfMemory);
        }
        None
    }

    /// The commands that are not lease commands.
    pub(super) fn execute(&mut self, command: CoreCommand) -> CoreAnswer {
        match command {
            CoreCommand::Op(_) | CoreCommand::AcquireBlocking { .. } => {
                unreachable!("lease commands are applied")
            }
            CoreCommand::Report => CoreAnswer::Report(Box::new(self.report())),
            CoreCommand::RewriteLog => match &mut self.log {
                None => CoreAnswer::Refused(Refusal::NoLog),
                Some(log) => CoreAnswer::Rewrite(log.start_rewrite(&self.registry)),
            },
            CoreCommand::Save => CoreAnswer::Save(Err(SaveRefused::SingleNode)),
            CoreCommand::Configure(pairs) => CoreAnswer::Configured(self.configure(&pairs)),
            CoreCommand::ResetStats => {
                self.stats = CommandStats::default();
                self.registry.reset_health();
                self.shared.stats.reset();
                self.shared.calls.reset();
                CoreAnswer::Reset
            }
            CoreCommand::Waiters(run_id) => CoreAnswer::Workers(self.waiters.workers(&run_id)),
            CoreCommand::Unblock { client_id, error } => {
                CoreAnswer::Outcome(Outcome::Flag(self.unblock(client_id, error)))
            }
        }
    }

    fn report(&self) -> CoreReport {
        CoreReport {
            leases: self.registry.len(),
            expired: self.registry.expired_count(),
            last_token: self.registry.last_token(),
            token_ceiling: self.tokens.ceiling(),
            registry_time: self.registry.time(),
            lease_ttl: self.registry.default_ttl(),
            blocked_clients: self.waiters.count(),
            run_data: self.registry.data_count(),
            run_data_bytes: self.registry.data_memory(),
            history_entries: self.registry.history_entries(),
            history_bytes: self.registry.history_memory(),
            commands: self.stats.clone(),
            health: self.registry.health().clone(),
            log: self.log.as_ref().map(Log::status),
            snapshot: None,
        }
    }

    /// `CONFIG SET`: the new configuration, whole or not at all; the core
    /// applies what it owns (the registry's TTL, lock delay, retention and
    /// history length, the log's fsync and rewrite settings), then every
    /// reader sees the new one.
    fn configure(&mut self, pairs: &[(Bytes, Bytes)]) -> Result<(), SetError> {
        let old = self.shared.config();
        let pairs: Vec<(&[u8], &[u8])> = pairs.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        let new = old.set(&pairs)?;
        self.registry.set_default_ttl(new.lease_ttl);
        self.registry.set_default_lock_delay(new.lease_lock_delay);
        self.registry.set_retention(new.lease_retention);
        self.registry.set_history_len(new.lease_history_len);
        if let Some(log) = &mut self.log {
            log.set_fsync(new.appendfsync);
            log.set_rewrite_thresholds(
                new.auto_aof_rewrite_percentage,
                new.auto_aof_rewrite_min_size,
            );
        }
        run_config(&self.shared, &old, new);
        Ok(())
    }
}

/// Makes `new` the running configuration in place of `old`, with what the
/// server does for the settings no core owns (the log level, the open
/// files limit). Shared by the single node's core and the cluster's.
pub(crate) fn run_config(shared: &Shared, old: &Config, new: Config) {
    if new.loglevel != old.loglevel {
        logging::set_level(new.loglevel);
    }
    if new.maxclients > old.maxclients {
        system::raise_open_files_limit(new.maxclients);
    }
    shared.set_config(new);
}
