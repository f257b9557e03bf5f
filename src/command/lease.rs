//! The lease commands' parse steps: each turns its arguments into a
//! registry [`Op`] for the core.

use super::Command;
use super::args::{Args, float_arg, not_an_integer, optional_now, syntax_error, token_arg};
use crate::number::parse_i64;
use crate::registry::Op;
use crate::reply::Reply;

/// `LEASE.ACQUIRE run worker [now] [TTL seconds]`
pub fn parse_acquire(args: &mut Args) -> Result<Command, Reply> {
    let run_id = args.required();
    let worker_id = args.required();
    let mut now = None;
    let mut ttl = None;
    let mut next = args.next();
    if let Some(arg) = &next
        && !arg.eq_ignore_ascii_case(b"ttl")
    {
        now = Some(float_arg(arg)?);
        next = args.next();
    }
    if let Some(arg) = next {
        if !arg.eq_ignore_ascii_case(b"ttl") {
            return Err(syntax_error());
        }
        let Some(seconds) = args.next() else {
            return Err(syntax_error());
        };
        let seconds = float_arg(&seconds)?;
        if seconds <= 0.0 {
            return Err(Reply::error(
                "ERR invalid expire time in 'lease.acquire' command",
            ));
        }
        ttl = Some(seconds);
    }
    if args.len() > 0 {
        return Err(syntax_error());
    }
    Ok(Command::Lease(Op::Acquire {
        run_id,
        worker_id,
        now,
        ttl,
    }))
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

/// `LEASE.SCAN cursor [MATCH pattern] [COUNT count]`, parsed as Redis
/// parses `SCAN`'s options: either may repeat, the last one wins.
pub fn parse_scan(args: &mut Args) -> Result<Command, Reply> {
    let cursor = args.required();
    let cursor = cursor_arg(&cursor).ok_or_else(|| Reply::error("ERR invalid cursor"))?;
    let mut pattern = None;
    let mut count = 10;
    while let Some(option) = args.next() {
        let Some(value) = args.next() else {
            return Err(syntax_error());
        };
        if option.eq_ignore_ascii_case(b"match") {
            // `*` matches every id, the empty one included, as in SCAN.
            pattern = (&value[..] != b"*").then_some(value);
        } else if option.eq_ignore_ascii_case(b"count") {
            count = match parse_i64(&value) {
                None => return Err(not_an_integer()),
                Some(n) if n < 1 => return Err(syntax_error()),
                Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            };
        } else {
            return Err(syntax_error());
        }
    }
    Ok(Command::Lease(Op::Scan {
        cursor,
        pattern,
        count,
    }))
}

/// A SCAN cursor: an unsigned 64-bit decimal number.
fn cursor_arg(arg: &[u8]) -> Option<u64> {
    if arg.is_empty() || !arg.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(arg).ok()?.parse().ok()
}

pub fn parse_dbsize(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Lease(Op::DbSize))
}
