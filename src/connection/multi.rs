//! A transaction being queued: what `MULTI` opened, until `EXEC`,
//! `DISCARD`, `RESET` or the connection's end.
//!
//! The rules are Redis 7's (`processCommand` and multi.c): while queuing,
//! a request that fails the checks made before a command runs (unknown
//! command or subcommand, wrong arity, `NOAUTH`, a RESP2 subscriber's
//! refusal) or that is flagged `no_multi` gets its error and marks the
//! transaction aborted, so `EXEC` answers `EXECABORT` and runs nothing.
//! `EXEC`, `DISCARD`, `MULTI`, `WATCH`, `QUIT` and `RESET` run at once;
//! the nested `MULTI` and `WATCH` are refused without aborting. Every
//! other request is queued whole and parsed only at `EXEC`, so an error in
//! its arguments is that command's reply inside `EXEC`'s array.
//!
//! `EXEC` sends the queued lease commands to the core in one batch, which
//! the core applies back to back and logs with one write (crate::core);
//! the handlers do that part.

use bytes::Bytes;

use crate::command::CommandName;
use crate::reply::Reply;

pub(super) const NESTED: &str = "ERR MULTI calls can not be nested";
pub(super) const EXEC_WITHOUT_MULTI: &str = "ERR EXEC without MULTI";
pub(super) const DISCARD_WITHOUT_MULTI: &str = "ERR DISCARD without MULTI";
pub(super) const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";
pub(super) const NOT_ALLOWED: &str = "ERR Command not allowed inside a transaction";
pub(super) const WATCH_INSIDE_MULTI: &str = "ERR WATCH inside MULTI is not allowed";
/// WATCH guards keys that other clients may change; leases change only
/// through lease commands, and the fencing token already tells a worker
/// that its lease moved on, so there is nothing WATCH would add.
pub(super) const WATCH_UNSUPPORTED: &str = "ERR WATCH is not supported: leases change only \
     through LEASE.* commands; check a lease with its fencing token (LEASE.VALIDATE) instead";
/// `MONITOR` inside `EXEC`, as Redis words it: it would never reply.
pub(super) const MONITOR_IN_EXEC: &str = "ERR MONITOR isn't allowed for DENY BLOCKING client";

/// The requests queued since `MULTI`.
#[derive(Debug, Default)]
pub(super) struct Transaction {
    queued: Vec<Vec<Bytes>>,
    /// A request was refused while queuing: `EXEC` will discard.
    aborted: bool,
}

impl Transaction {
    /// Takes a request made inside the transaction. `checked` is the
    /// command it names, or the error of the checks made before a command
    /// runs. `None`: the request is not queued but runs now (`EXEC` and
    /// the others that do); otherwise the reply to it.
    pub(super) fn admit(
        &mut self,
        args: &[Bytes],
        checked: Result<CommandName, Reply>,
    ) -> Option<Reply> {
        let name = match checked {
            Ok(name) => name,
            Err(error) => return Some(self.abort(error)),
        };
        if name.runs_in_multi() {
            return None;
        }
        if name.refused_in_multi() {
            return Some(self.abort(Reply::error(NOT_ALLOWED)));
        }
        // Nothing is kept once aborted: EXEC runs none of it.
        if !self.aborted {
            self.queued.push(args.to_vec());
        }
        Some(Reply::Status("QUEUED"))
    }

    fn abort(&mut self, error: Reply) -> Reply {
        self.aborted = true;
        error
    }

    /// How many requests are queued, for `CLIENT LIST`'s `multi=`.
    pub(super) fn len(&self) -> usize {
        self.queued.len()
    }

    /// `EXEC`: the requests to run in order, or `EXECABORT`.
    pub(super) fn into_queued(self) -> Result<Vec<Vec<Bytes>>, Reply> {
        if self.aborted {
            Err(Reply::error(EXECABORT))
        } else {
            Ok(self.queued)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command;

    fn request(words: &str) -> Vec<Bytes> {
        words
            .split(' ')
            .map(|word| Bytes::copy_from_slice(word.as_bytes()))
            .collect()
    }

    fn admit(transaction: &mut Transaction, words: &str) -> Option<Reply> {
        let args = request(words);
        transaction.admit(&args, command::check(&args))
    }

    #[test]
    fn commands_are_queued_whole_and_run_in_order() {
        let mut transaction = Transaction::default();
        let queued = Some(Reply::Status("QUEUED"));
        assert_eq!(admit(&mut transaction, "LEASE.ACQUIRE r1 w"), queued);
        // A bad argument is found at EXEC, not while queuing.
        assert_eq!(admit(&mut transaction, "LEASE.ACQUIRE r2 w TTL x"), queued);
        assert_eq!(admit(&mut transaction, "client list"), queued);
        assert_eq!(transaction.len(), 3);
        let runs = transaction.into_queued().expect("not aborted");
        assert_eq!(runs[1], request("LEASE.ACQUIRE r2 w TTL x"));
        assert_eq!(runs[2], request("client list"));
    }

    #[test]
    fn unknown_commands_and_wrong_arity_abort_the_transaction() {
        for bad in ["NOSUCH x", "LEASE.ACQUIRE r1", "CLIENT NOSUCH", "ECHO"] {
            let mut transaction = Transaction::default();
            admit(&mut transaction, "LEASE.ACQUIRE r1 w");
            let reply = admit(&mut transaction, bad);
            assert!(
                matches!(&reply, Some(Reply::Error(message)) if message.starts_with("ERR ")),
                "{bad}: {reply:?}"
            );
            // Later requests are answered QUEUED but not kept.
            admit(&mut transaction, "PING");
            assert_eq!(transaction.len(), 1);
            assert_eq!(transaction.into_queued(), Err(Reply::error(EXECABORT)));
        }
    }

    #[test]
    fn a_refusal_of_the_connection_aborts_too() {
        let mut transaction = Transaction::default();
        let args = request("LEASE.GET r1");
        let noauth = Reply::error("NOAUTH Authentication required.");
        assert_eq!(transaction.admit(&args, Err(noauth.clone())), Some(noauth));
        assert_eq!(transaction.into_queued(), Err(Reply::error(EXECABORT)));
    }

    #[test]
    fn no_multi_commands_are_refused_and_abort() {
        let mut transaction = Transaction::default();
        assert_eq!(
            admit(&mut transaction, "SHUTDOWN"),
            Some(Reply::error(NOT_ALLOWED))
        );
        assert_eq!(transaction.into_queued(), Err(Reply::error(EXECABORT)));
    }

    #[test]
    fn the_transaction_commands_quit_and_reset_run_at_once() {
        let mut transaction = Transaction::default();
        for word in ["EXEC", "discard", "MULTI", "WATCH k", "QUIT", "RESET"] {
            assert_eq!(admit(&mut transaction, word), None, "{word}");
        }
        // UNWATCH is queued, as in Redis.
        assert_eq!(
            admit(&mut transaction, "UNWATCH"),
            Some(Reply::Status("QUEUED"))
        );
        assert_eq!(transaction.into_queued().map(|q| q.len()), Ok(1));
    }
}
