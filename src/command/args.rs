//! The arguments of one request after its name, consumed front to back,
//! and the argument kinds every command shares (floats, tokens, integers),
//! each with its Redis-worded error.

use bytes::Bytes;

use super::wrong_arity;
use crate::number::{parse_finite_f64, parse_i64};
use crate::reply::Reply;

/// Arity was checked against the table before a parse step runs, so the
/// required arguments are there.
pub struct Args<'a> {
    items: std::slice::Iter<'a, Bytes>,
}

impl<'a> Args<'a> {
    pub(super) fn new(items: &'a [Bytes]) -> Args<'a> {
        Args {
            items: items.iter(),
        }
    }

    /// The next argument: a view of the request's bytes, not a copy.
    pub(super) fn next(&mut self) -> Option<Bytes> {
        self.items.next().cloned()
    }

    /// The next argument, left where it is.
    pub(super) fn peek(&self) -> Option<&'a Bytes> {
        self.items.as_slice().first()
    }

    /// The next argument, which the command's arity guarantees.
    pub(super) fn required(&mut self) -> Bytes {
        self.next().expect("arity checked against the table")
    }

    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    pub(super) fn rest(&self) -> &[Bytes] {
        self.items.as_slice()
    }

    pub(super) fn take_rest(&mut self) -> Vec<Bytes> {
        self.items.by_ref().cloned().collect()
    }

    /// Fails with the arity error when arguments remain: for commands
    /// whose optional arguments are positional.
    pub(super) fn finish(&self, full_name: &str) -> Result<(), Reply> {
        if self.items.len() == 0 {
            Ok(())
        } else {
            Err(wrong_arity(full_name))
        }
    }
}

/// A finite `now` or TTL.
pub fn float_arg(arg: &[u8]) -> Result<f64, Reply> {
    parse_finite_f64(arg).ok_or_else(not_a_float)
}

/// A fencing token: a positive integer up to 2^63-1.
pub fn token_arg(arg: &[u8]) -> Result<u64, Reply> {
    match parse_i64(arg) {
        None => Err(not_an_integer()),
        Some(token) if token <= 0 => {
            Err(Reply::error("ERR value is out of range, must be positive"))
        }
        Some(token) => Ok(token as u64),
    }
}

/// An optional trailing `now`.
pub fn optional_now(args: &mut Args, full_name: &str) -> Result<Option<f64>, Reply> {
    let now = args.next().map(|arg| float_arg(&arg)).transpose()?;
    args.finish(full_name)?;
    Ok(now)
}

pub fn syntax_error() -> Reply {
    Reply::error("ERR syntax error")
}

pub fn not_a_float() -> Reply {
    Reply::error("ERR value is not a valid float")
}

pub fn not_an_integer() -> Reply {
    Reply::error("ERR value is not an integer or out of range")
}
