//! The lease commands' parse steps: each turns its arguments into a
//! registry [`Op`] for the core.

use super::Command;
use super::args::{Args, float_arg, not_an_integer, optional_now, syntax_error, token_arg};
use super::keyspace::scan_args;
use std::time::Duration;

use bytes::Bytes;

use crate::number::parse_i64;
use crate::registry::Op;
use crate::reply::Reply;

/// The options of `LEASE.ACQUIRE`, in any order after `now`.
const OPTIONS: [&[u8]; 4] = [b"ttl", b"lockdelay", b"block", b"withdata"];

/// `LEASE.ACQUIRE run worker [now] [TTL seconds] [LOCKDELAY seconds]
/// [BLOCK ms] [WITHDATA]`: options in any order after `now`, the last of a
/// repeated one counting (as SCAN's do).
pub fn parse_acquire(args: &mut Args) -> Result<Command, Reply> {
    let run_id = args.required();
    let worker_id = args.required();
    let mut now = None;
    if let Some(arg) = args.peek()
        && !OPTIONS
            .iter()
            .any(|option| arg.eq_ignore_ascii_case(option))
    {
        now = Some(float_arg(arg)?);
        args.next();
    }
    let (mut ttl, mut lock_delay, mut block) = (None, None, None);
    let mut with_data = false;
    while let Some(option) = args.next() {
        if option.eq_ignore_ascii_case(b"withdata") {
            with_data = true;
            continue;
        }
        let Some(value) = args.next() else {
            return Err(syntax_error());
        };
        if option.eq_ignore_ascii_case(b"ttl") {
            ttl = Some(positive_seconds(&value, "expire time")?);
        } else if option.eq_ignore_ascii_case(b"lockdelay") {
            lock_delay = Some(lock_delay_arg(&value)?);
        } else if option.eq_ignore_ascii_case(b"block") {
            block = Some(block_arg(&value)?);
        } else {
            return Err(syntax_error());
        }
    }
    let op = Op::Acquire {
        run_id,
        worker_id,
        now,
        ttl,
        lock_delay,
        with_data,
    };
    match block {
        None => Ok(Command::Lease(op)),
        Some(_) if now.is_some() => Err(Reply::error(
            "ERR BLOCK cannot be given with now: a blocked acquire runs on the server's clock",
        )),
        Some(timeout) => Ok(Command::AcquireBlocking { op, timeout }),
    }
}

/// A TTL: a finite number of seconds above 0.
fn positive_seconds(arg: &[u8], what: &str) -> Result<f64, Reply> {
    let seconds = float_arg(arg)?;
    if seconds <= 0.0 {
        return Err(Reply::error(format!(
            "ERR invalid {what} in 'lease.acquire' command"
        )));
    }
    Ok(seconds)
}

/// A lock delay: a finite number of seconds, 0 or more.
fn lock_delay_arg(arg: &[u8]) -> Result<f64, Reply> {
    let seconds = float_arg(arg)?;
    if seconds < 0.0 {
        return Err(Reply::error(
            "ERR invalid lock delay in 'lease.acquire' command",
        ));
    }
    Ok(seconds)
}

/// `BLOCK ms`: milliseconds as Redis reads a blocking timeout; 0 waits
/// forever (`None`).
fn block_arg(arg: &[u8]) -> Result<Option<Duration>, Reply> {
    match parse_i64(arg) {
        None => Err(Reply::error(
            "ERR timeout is not an integer or out of range",
        )),
        Some(ms) if ms < 0 => Err(Reply::error("ERR timeout is negative")),
        Some(0) => Ok(None),
        Some(ms) => Ok(Some(Duration::from_millis(ms as u64))),
    }
}

/// `LEASE.HEARTBEAT lease_id token [now]`
pub fn parse_heartbeat(args: &mut Args) -> Result<Command, Reply> {
    let lease_id = args.required();
    let token = token_arg(&args.required())?;
    let now = optional_now(args, "lease.heartbeat")?;
    Ok(Command::Lease(Op::Heartbeat {
        lease_id,
        token,
        now,
    }))
}

/// `LEASE.VALIDATE run lease_id token [now]`
pub fn parse_validate(args: &mut Args) -> Result<Command, Reply> {
    let run_id = args.required();
    let lease_id = args.required();
    let token = token_arg(&args.required())?;
    let now = optional_now(args, "lease.validate")?;
    Ok(Command::Lease(Op::Validate {
        run_id,
        lease_id,
        token,
        now,
    }))
}

/// `LEASE.RELEASE lease_id token`
pub fn parse_release(args: &mut Args) -> Result<Command, Reply> {
    let lease_id = args.required();
    let token = token_arg(&args.required())?;
    Ok(Command::Lease(Op::Release { lease_id, token }))
}

/// `LEASE.GET run [now]`
pub fn parse_get(args: &mut Args) -> Result<Command, Reply> {
    let run_id = args.required();
    let now = optional_now(args, "lease.get")?;
    Ok(Command::Lease(Op::Get { run_id, now }))
}

/// `LEASE.SETDATA lease_id token value [now]`
pub fn parse_setdata(args: &mut Args) -> Result<Command, Reply> {
    let lease_id = args.required();
    let token = token_arg(&args.required())?;
    // The run keeps its data, maybe for long: a copy of its own, so that it
    // does not hold on to the connection's read buffer (16 KiB or more,
    // with the other requests in it) as a slice of it would.
    let value = Bytes::copy_from_slice(&args.required());
    let now = optional_now(args, "lease.setdata")?;
    Ok(Command::Lease(Op::SetData {
        lease_id,
        token,
        value,
        now,
    }))
}

/// `LEASE.GETDATA run`
pub fn parse_getdata(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Lease(Op::GetData {
        run_id: args.required(),
    }))
}

/// `LEASE.DELDATA lease_id token`
pub fn parse_deldata(args: &mut Args) -> Result<Command, Reply> {
    let lease_id = args.required();
    let token = token_arg(&args.required())?;
    Ok(Command::Lease(Op::DelData { lease_id, token }))
}

/// `LEASE.HISTORY run [COUNT n]`: `COUNT` must be positive, as Redis's
/// `LPOP key count` words it.
pub fn parse_history(args: &mut Args) -> Result<Command, Reply> {
    let run_id = args.required();
    let mut count = usize::MAX;
    while let Some(option) = args.next() {
        let Some(value) = args.next() else {
            return Err(syntax_error());
        };
        if !option.eq_ignore_ascii_case(b"count") {
            return Err(syntax_error());
        }
        count = match parse_i64(&value) {
            None => return Err(not_an_integer()),
            Some(n) if n < 1 => {
                return Err(Reply::error("ERR value is out of range, must be positive"));
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        };
    }
    Ok(Command::Lease(Op::History { run_id, count }))
}

/// `LEASE.WAITERS run`
pub fn parse_waiters(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Waiters(args.required()))
}

/// `LEASE.SCAN cursor [MATCH pattern] [COUNT count]`: `SCAN`'s options
/// without `TYPE`.
pub fn parse_scan(args: &mut Args) -> Result<Command, Reply> {
    let (op, _) = scan_args(args, false)?;
    Ok(Command::Lease(op))
}

pub fn parse_dbsize(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Lease(Op::DbSize))
}
