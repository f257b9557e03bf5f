//! The keyspace view: every run that holds a lease is also a read-only key
//! of type `hash`, so Redis tooling (`redis-cli --scan`, `--bigkeys`,
//! `--memkeys`, key browsers, exporters) sees the registry.
//!
//! The reads here become registry ops that change nothing ([`Op::Scan`],
//! [`Op::Inspect`], [`Op::RandomRun`]) and a [`View`]: how the connection
//! words the outcome as the Redis command would. Redis's write commands
//! are refused by name ([`refuse_write`]): leases change only through the
//! `LEASE.*` commands, which check and issue fencing tokens.

use std::hash::BuildHasher;

use bytes::Bytes;

use super::Command;
use super::args::{Args, not_an_integer, syntax_error};
use crate::number::parse_i64;
use crate::registry::Op;
use crate::reply::Reply;

/// How a keyspace read's outcome is worded.
#[derive(Clone, Debug, PartialEq)]
pub enum View {
    /// `SCAN`: cursor and run ids; no ids when `TYPE` names a type other
    /// than `hash` (the cursor still moves).
    Scan {
        hashes: bool,
    },
    /// `KEYS`: the run ids.
    Keys,
    RandomKey,
    Exists,
    Type,
    /// `TTL` (seconds, relative), `PTTL`, `EXPIRETIME`, `PEXPIRETIME`.
    Ttl {
        millis: bool,
        absolute: bool,
    },
    HGetAll,
    HGet(Bytes),
    HMGet(Vec<Bytes>),
    HLen,
    HKeys,
    HVals,
    HExists(Bytes),
    /// `HSCAN`: every field in one reply (cursor `0`), as Redis answers
    /// for a small hash; those whose name matches `pattern`.
    HScan {
        pattern: Option<Bytes>,
        values: bool,
    },
    MemoryUsage,
    ObjectEncoding,
}

/// Redis's write commands, refused with one error by [`refuse_write`]:
/// they are not in the command table (so `COMMAND` does not list them),
/// and a name found neither there nor here is an unknown command. Keep
/// this the one list of them.
#[rustfmt::skip]
const WRITES: &[&str] = &[
    // Strings and keys.
    "set", "setnx", "setex", "psetex", "mset", "msetnx", "getset", "getdel", "getex",
    "append", "setrange", "incr", "incrby", "incrbyfloat", "decr", "decrby", "setbit",
    "bitop", "bitfield", "del", "unlink", "expire", "pexpire", "expireat", "pexpireat",
    "persist", "rename", "renamenx", "move", "copy", "restore", "migrate", "sort",
    // Hashes.
    "hset", "hsetnx", "hmset", "hdel", "hincrby", "hincrbyfloat", "hexpire", "hpexpire",
    "hexpireat", "hpexpireat", "hpersist", "hgetdel", "hgetex", "hsetex",
    // Lists.
    "lpush", "rpush", "lpushx", "rpushx", "lpop", "rpop", "linsert", "lset", "lrem", "ltrim",
    "lmove", "blmove", "rpoplpush", "brpoplpush", "blpop", "brpop", "lmpop", "blmpop",
    // Sets and sorted sets.
    "sadd", "srem", "spop", "smove", "sinterstore", "sunionstore", "sdiffstore", "zadd",
    "zrem", "zincrby", "zpopmin", "zpopmax", "bzpopmin", "bzpopmax", "zmpop", "bzmpop",
    "zremrangebyscore", "zremrangebyrank", "zremrangebylex", "zunionstore", "zinterstore",
    "zdiffstore", "zrangestore",
    // Streams, HyperLogLog, geo.
    "xadd", "xdel", "xtrim", "pfadd", "pfmerge", "geoadd", "geosearchstore",
    // The whole database.
    "flushall", "flushdb", "swapdb",
];

/// The refusal of a Redis write command, by its name; `None` for any
/// other name.
pub fn refuse_write(name: &[u8]) -> Option<Reply> {
    let name = WRITES
        .iter()
        .find(|write| write.as_bytes().eq_ignore_ascii_case(name))?;
    Some(Reply::error(format!(
        "ERR leases change only through LEASE.* commands: '{name}' would bypass their fencing tokens"
    )))
}

/// The type names `SCAN ... TYPE` knows, as Redis's.
const TYPES: [&str; 6] = ["string", "list", "set", "zset", "hash", "stream"];

fn read(op: Op, view: View) -> Result<Command, Reply> {
    Ok(Command::Keyspace { op, view })
}

fn inspect(args: &mut Args, view: View) -> Result<Command, Reply> {
    let run_ids = vec![args.required()];
    read(Op::Inspect { run_ids }, view)
}

/// A SCAN cursor: an unsigned 64-bit decimal number.
pub(super) fn cursor_arg(arg: &[u8]) -> Result<u64, Reply> {
    let invalid = || Reply::error("ERR invalid cursor");
    if arg.is_empty() || !arg.iter().all(u8::is_ascii_digit) {
        return Err(invalid());
    }
    let text = std::str::from_utf8(arg).map_err(|_| invalid())?;
    text.parse().map_err(|_| invalid())
}

/// `COUNT count` of the SCAN family: an integer, 1 or more.
pub(super) fn count_arg(arg: &[u8]) -> Result<usize, Reply> {
    match parse_i64(arg) {
        None => Err(not_an_integer()),
        Some(n) if n < 1 => Err(syntax_error()),
        Some(n) => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
    }
}

/// `MATCH pattern`: `None` for `*`, which matches everything.
pub(super) fn pattern_arg(arg: Bytes) -> Option<Bytes> {
    (&arg[..] != b"*").then_some(arg)
}

/// The arguments of `LEASE.SCAN` (`cursor [MATCH pattern] [COUNT
/// count]`), and of `SCAN` when `typed` (`[TYPE type]` too), parsed as
/// Redis parses `SCAN`'s options: any may repeat, the last one wins.
/// Returns the scan op and whether `TYPE` lets hashes through.
pub(super) fn scan_args(args: &mut Args, typed: bool) -> Result<(Op, bool), Reply> {
    let cursor = cursor_arg(&args.required())?;
    let (mut pattern, mut count, mut hashes) = (None, 10, true);
    while let Some(option) = args.next() {
        let Some(value) = args.next() else {
            return Err(syntax_error());
        };
        if option.eq_ignore_ascii_case(b"match") {
            // `*` matches every id, the empty one included, as in SCAN.
            pattern = pattern_arg(value);
        } else if option.eq_ignore_ascii_case(b"count") {
            count = count_arg(&value)?;
        } else if typed && option.eq_ignore_ascii_case(b"type") {
            let Some(kind) = TYPES
                .iter()
                .find(|kind| kind.as_bytes().eq_ignore_ascii_case(&value))
            else {
                return Err(Reply::error(format!(
                    "ERR unknown type name '{}'",
                    super::truncated(&value)
                )));
            };
            hashes = *kind == "hash";
        } else {
            return Err(syntax_error());
        }
    }
    let op = Op::Scan {
        cursor,
        pattern,
        count,
    };
    Ok((op, hashes))
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`: `LEASE.SCAN`'s
/// iteration, with its guarantees.
pub fn parse_scan_keys(args: &mut Args) -> Result<Command, Reply> {
    let (op, hashes) = scan_args(args, true)?;
    read(op, View::Scan { hashes })
}

/// `KEYS pattern`: every run holding a lease whose id matches, in one walk.
pub fn parse_keys(args: &mut Args) -> Result<Command, Reply> {
    let op = Op::Scan {
        cursor: 0,
        pattern: pattern_arg(args.required()),
        count: usize::MAX,
    };
    read(op, View::Keys)
}

/// `RANDOMKEY`: the seed comes from a per-call random hasher.
pub fn parse_randomkey(_: &mut Args) -> Result<Command, Reply> {
    let seed = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
    read(Op::RandomRun { seed }, View::RandomKey)
}

/// `EXISTS key [key ...]`: a key named twice counts twice, as in Redis.
pub fn parse_exists(args: &mut Args) -> Result<Command, Reply> {
    let run_ids = args.take_rest();
    read(Op::Inspect { run_ids }, View::Exists)
}

pub fn parse_type(args: &mut Args) -> Result<Command, Reply> {
    inspect(args, View::Type)
}

fn ttl(args: &mut Args, millis: bool, absolute: bool) -> Result<Command, Reply> {
    inspect(args, View::Ttl { millis, absolute })
}

pub fn parse_ttl(args: &mut Args) -> Result<Command, Reply> {
    ttl(args, false, false)
}

pub fn parse_pttl(args: &mut Args) -> Result<Command, Reply> {
    ttl(args, true, false)
}

pub fn parse_expiretime(args: &mut Args) -> Result<Command, Reply> {
    ttl(args, false, true)
}

pub fn parse_pexpiretime(args: &mut Args) -> Result<Command, Reply> {
    ttl(args, true, true)
}

pub fn parse_hgetall(args: &mut Args) -> Result<Command, Reply> {
    inspect(args, View::HGetAll)
}

pub fn parse_hget(args: &mut Args) -> Result<Command, Reply> {
    let run_ids = vec![args.required()];
    read(Op::Inspect { run_ids }, View::HGet(args.required()))
}

pub fn parse_hmget(args: &mut Args) -> Result<Command, Reply> {
    let run_ids = vec![args.required()];
    read(Op::Inspect { run_ids }, View::HMGet(args.take_rest()))
}

pub fn parse_hlen(args: &mut Args) -> Result<Command, Reply> {
    inspect(args, View::HLen)
}

pub fn parse_hkeys(args: &mut Args) -> Result<Command, Reply> {
    inspect(args, View::HKeys)
}

pub fn parse_hvals(args: &mut Args) -> Result<Command, Reply> {
    inspect(args, View::HVals)
}

pub fn parse_hexists(args: &mut Args) -> Result<Command, Reply> {
    let run_ids = vec![args.required()];
    read(Op::Inspect { run_ids }, View::HExists(args.required()))
}

/// `HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]`: the
/// options are checked as Redis checks them; the reply holds every
/// matching field whatever the cursor and count.
pub fn parse_hscan(args: &mut Args) -> Result<Command, Reply> {
    let run_ids = vec![args.required()];
    cursor_arg(&args.required())?;
    let (mut pattern, mut values) = (None, true);
    while let Some(option) = args.next() {
        if option.eq_ignore_ascii_case(b"novalues") {
            values = false;
            continue;
        }
        let Some(value) = args.next() else {
            return Err(syntax_error());
        };
        if option.eq_ignore_ascii_case(b"match") {
            pattern = pattern_arg(value);
        } else if option.eq_ignore_ascii_case(b"count") {
            count_arg(&value)?;
        } else {
            return Err(syntax_error());
        }
    }
    read(Op::Inspect { run_ids }, View::HScan { pattern, values })
}

/// `MEMORY USAGE key [SAMPLES count]`: `SAMPLES` is checked as Redis
/// checks it, and has nothing to sample.
pub fn parse_memory_usage(args: &mut Args) -> Result<Command, Reply> {
    let run_ids = vec![args.required()];
    while let Some(option) = args.next() {
        let Some(value) = args.next() else {
            return Err(syntax_error());
        };
        if !option.eq_ignore_ascii_case(b"samples") {
            return Err(syntax_error());
        }
        match parse_i64(&value) {
            None => return Err(not_an_integer()),
            Some(n) if n < 0 => return Err(syntax_error()),
            Some(_) => {}
        }
    }
    read(Op::Inspect { run_ids }, View::MemoryUsage)
}

pub fn parse_object_encoding(args: &mut Args) -> Result<Command, Reply> {
    inspect(args, View::ObjectEncoding)
}

pub fn parse_memory_help(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Help(super::help::MEMORY_HELP))
}

pub fn parse_object_help(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Help(super::help::OBJECT_HELP))
}
