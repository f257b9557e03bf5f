//! The command table: one entry per command, as in Redis's `commands.def`.
//!
//! Each entry drives the arity check and its error, the command's parse
//! step, `COMMAND COUNT|INFO|DOCS|LIST` (so `redis-cli` shows argument
//! hints) and the syntax lines in `docs/commands.md`, which a test checks
//! against this table.

use bitflags::bitflags;

use super::Command;
use super::args::{Args, syntax_error};
use super::keyspace::*;
use super::lease::*;
use super::pubsub::*;
use super::server::*;
use crate::reply::Reply;

/// The kind of an argument, as `COMMAND DOCS` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    String,
    Integer,
    Double,
    Pattern,
    /// A key: a run id, in the keyspace view's commands.
    Key,
    /// A literal word such as `NOW`, with no value.
    PureToken,
    /// Exactly one of its sub-arguments.
    OneOf,
    /// Its sub-arguments in sequence.
    Block,
}

impl ArgKind {
    pub fn name(self) -> &'static str {
        match self {
            ArgKind::String => "string",
            ArgKind::Integer => "integer",
            ArgKind::Double => "double",
            ArgKind::Pattern => "pattern",
            ArgKind::Key => "key",
            ArgKind::PureToken => "pure-token",
            ArgKind::OneOf => "oneof",
            ArgKind::Block => "block",
        }
    }
}

/// One argument in a command's documentation.
#[derive(Debug)]
pub struct Arg {
    pub name: &'static str,
    pub kind: ArgKind,
    /// The word that introduces it, e.g. `TTL`.
    pub token: Option<&'static str>,
    pub optional: bool,
    /// It may repeat.
    pub multiple: bool,
    /// The members of a `OneOf` or `Block`.
    pub args: &'static [Arg],
}

pub type ParseFn = fn(&mut Args) -> Result<Command, Reply>;

/// One command (or one subcommand of a container such as `CLIENT`).
#[derive(Debug)]
pub struct CommandSpec {
    /// Lower case, as `COMMAND INFO` reports it; a subcommand's own word.
    pub name: &'static str,
    /// Positive: exactly this many words, name included. Negative: at least.
    pub arity: i32,
    /// Redis's command flags: `COMMAND INFO` shows them, and behaviour
    /// reads them (`no_auth`: may run before AUTH; `admin`: hidden from
    /// MONITOR).
    pub flags: Flags,
    pub acl_categories: &'static [&'static str],
    /// The documentation group (`connection`, `server`, `lease`).
    pub group: &'static str,
    pub summary: &'static str,
    pub complexity: &'static str,
    pub args: &'static [Arg],
    pub subcommands: &'static [CommandSpec],
    /// Turns the arguments after the name(s) into a command. Runs after the
    /// arity check, so it may take required arguments without checking.
    pub parse: ParseFn,
}

bitflags! {
    /// Redis's command flags, as bits.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Flags: u32 {
        const WRITE = 1 << 0;
        const READONLY = 1 << 1;
        const DENYOOM = 1 << 2;
        const ADMIN = 1 << 3;
        const NOSCRIPT = 1 << 4;
        const LOADING = 1 << 5;
        const STALE = 1 << 6;
        const FAST = 1 << 7;
        const NO_AUTH = 1 << 8;
        const NO_ASYNC_LOADING = 1 << 9;
        const NO_MULTI = 1 << 10;
        const ALLOW_BUSY = 1 << 11;
        const PUBSUB = 1 << 12;
        const BLOCKING = 1 << 13;
        const SKIP_SLOWLOG = 1 << 14;
    }
}

impl Flags {
    /// The flags' names as `COMMAND INFO` shows them (`write`, `no_auth`),
    /// in Redis's order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        const NAMES: [(Flags, &str); 15] = [
            (Flags::WRITE, "write"),
            (Flags::READONLY, "readonly"),
            (Flags::DENYOOM, "denyoom"),
            (Flags::ADMIN, "admin"),
            (Flags::PUBSUB, "pubsub"),
            (Flags::NOSCRIPT, "noscript"),
            (Flags::BLOCKING, "blocking"),
            (Flags::LOADING, "loading"),
            (Flags::STALE, "stale"),
            (Flags::SKIP_SLOWLOG, "skip_slowlog"),
            (Flags::FAST, "fast"),
            (Flags::NO_AUTH, "no_auth"),
            (Flags::NO_ASYNC_LOADING, "no_async_loading"),
            (Flags::NO_MULTI, "no_multi"),
            (Flags::ALLOW_BUSY, "allow_busy"),
        ];
        NAMES
            .into_iter()
            .filter(move |(flag, _)| self.contains(*flag))
            .map(|(_, name)| name)
    }
}

/// The version that introduced every command in this table.
pub const SINCE: &str = "0.1.0";

/// Finds a command by name, ignoring case.
pub fn lookup<'a>(table: &'a [CommandSpec], name: &[u8]) -> Option<&'a CommandSpec> {
    table
        .iter()
        .find(|spec| spec.name.as_bytes().eq_ignore_ascii_case(name))
}

/// `client|setname` for a subcommand, `lease.get` for a command.
pub fn full_name(parent: Option<&CommandSpec>, spec: &CommandSpec) -> String {
    match parent {
        Some(parent) => format!("{}|{}", parent.name, spec.name),
        None => spec.name.to_string(),
    }
}

const fn arg(name: &'static str, kind: ArgKind) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
        multiple: false,
        args: &[],
    }
}

const fn optional(arg: Arg) -> Arg {
    Arg {
        optional: true,
        ..arg
    }
}

const fn multiple(arg: Arg) -> Arg {
    Arg {
        multiple: true,
        ..arg
    }
}

const fn token(word: &'static str, arg: Arg) -> Arg {
    Arg {
        token: Some(word),
        ..arg
    }
}

const fn word(name: &'static str, word: &'static str) -> Arg {
    token(word, arg(name, ArgKind::PureToken))
}

const fn group(name: &'static str, kind: ArgKind, args: &'static [Arg]) -> Arg {
    Arg {
        args,
        ..arg(name, kind)
    }
}

const fn command(
    name: &'static str,
    arity: i32,
    group: &'static str,
    summary: &'static str,
    parse: ParseFn,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags: Flags::empty(),
        acl_categories: &[],
        group,
        summary,
        complexity: "O(1)",
        args: &[],
        subcommands: &[],
        parse,
    }
}

/// A container's `HELP` subcommand.
const fn help_subcommand(
    group: &'static str,
    acl_categories: &'static [&'static str],
    parse: ParseFn,
) -> CommandSpec {
    CommandSpec {
        flags: Flags::LOADING.union(Flags::STALE),
        acl_categories,
        ..command(
            "help",
            2,
            group,
            "Show helpful text about the different subcommands",
            parse,
        )
    }
}

/// The flags of a command whose reply depends only on the connection.
const CONNECTION_FLAGS: Flags = Flags::NOSCRIPT
    .union(Flags::LOADING)
    .union(Flags::STALE)
    .union(Flags::FAST);
/// Commands a client may send before authenticating.
const NO_AUTH_FLAGS: Flags = Flags::NOSCRIPT
    .union(Flags::LOADING)
    .union(Flags::STALE)
    .union(Flags::FAST)
    .union(Flags::NO_AUTH)
    .union(Flags::ALLOW_BUSY);
const FAST_CONNECTION: &[&str] = &["@fast", "@connection"];
const SLOW_CONNECTION: &[&str] = &["@slow", "@connection"];
const LEASE_WRITE: Flags = Flags::WRITE.union(Flags::FAST);
/// Administrative commands: `MONITOR` does not show them.
const ADMIN_FLAGS: Flags = Flags::ADMIN
    .union(Flags::NOSCRIPT)
    .union(Flags::LOADING)
    .union(Flags::STALE);
const ADMIN_ACL: &[&str] = &["@admin", "@slow", "@dangerous"];
const LEASE_ACL: &[&str] = &["@write", "@fast"];

/// (Un)subscribing: allowed while subscribed, as in Redis.
const PUBSUB_FLAGS: Flags = Flags::PUBSUB
    .union(Flags::NOSCRIPT)
    .union(Flags::LOADING)
    .union(Flags::STALE);
const PUBSUB_ACL: &[&str] = &["@pubsub", "@slow"];
const PUBSUB_INTROSPECTION: Flags = Flags::PUBSUB.union(Flags::LOADING).union(Flags::STALE);

/// MULTI, DISCARD, WATCH and UNWATCH, as Redis flags them.
const TRANSACTION_FLAGS: Flags = Flags::NOSCRIPT
    .union(Flags::LOADING)
    .union(Flags::STALE)
    .union(Flags::FAST)
    .union(Flags::ALLOW_BUSY);
const FAST_TRANSACTION: &[&str] = &["@fast", "@transaction"];

/// `now` as the lease commands take it: optional, in seconds.
const NOW: Arg = optional(arg("now", ArgKind::Double));
/// A lease command's first argument, its key: the run, or the lease id
/// (whose commands name no run). `COMMAND INFO` gives its position, so
/// Redis Cluster clients (redis-py's `RedisCluster`) route the command by
/// its hash slot; a follower's `-MOVED` names the slot of the same
/// argument (docs/cluster.md, "Cluster clients").
const RUN: Arg = arg("run", ArgKind::Key);
const LEASE_ID: Arg = arg("lease_id", ArgKind::Key);
/// The arguments that name a lease: `LEASE.RELEASE`'s and `LEASE.DELDATA`'s.
const LEASE_ID_TOKEN: &[Arg] = &[LEASE_ID, arg("token", ArgKind::Integer)];

/// A run id named as a key.
const KEY: Arg = arg("key", ArgKind::Key);
const KEYSPACE_SLOW: &[&str] = &["@keyspace", "@read", "@slow"];
const HASH_SLOW: &[&str] = &["@read", "@hash", "@slow"];

/// The documentation group and ACL categories of a fast read of a run as
/// a key (`TYPE`, `TTL`, ...) or as a hash (`HGET`, `HLEN`, ...).
type ReadKind = (&'static str, &'static [&'static str]);
const KEY_READ: ReadKind = ("generic", &["@keyspace", "@read", "@fast"]);
const HASH_READ: ReadKind = ("hash", &["@read", "@hash", "@fast"]);

/// A fast read of one run (the keyspace view).
const fn fast_read(
    name: &'static str,
    arity: i32,
    (group, acl_categories): ReadKind,
    summary: &'static str,
    parse: ParseFn,
) -> CommandSpec {
    CommandSpec {
        flags: Flags::READONLY.union(Flags::FAST),
        acl_categories,
        args: &[KEY],
        ..command(name, arity, group, summary, parse)
    }
}

fn unreachable_container(_: &mut Args) -> Result<Command, Reply> {
    // The arity of CLIENT and CONFIG requires a subcommand.
    Err(syntax_error())
}

pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        // Redis's `blocking` flag: the command may block (with BLOCK).
        flags: Flags::WRITE
            .union(Flags::DENYOOM)
            .union(Flags::BLOCKING)
            .union(Flags::FAST),
        acl_categories: &["@write", "@blocking", "@fast"],
        args: &[
            RUN,
            arg("worker", ArgKind::String),
            NOW,
            optional(token("TTL", arg("seconds", ArgKind::Double))),
            optional(token("LOCKDELAY", arg("seconds", ArgKind::Double))),
            optional(token("BLOCK", arg("ms", ArgKind::Integer))),
            optional(word("withdata", "WITHDATA")),
        ],
        ..command(
            "lease.acquire",
            -3,
            "lease",
            "Take the lease on a run if it is free or its lease has expired, issuing the next fencing token",
            parse_acquire,
        )
    },
    CommandSpec {
        flags: LEASE_WRITE,
        acl_categories: LEASE_ACL,
        args: &[LEASE_ID, arg("token", ArgKind::Integer), NOW],
        ..command(
            "lease.heartbeat",
            -3,
            "lease",
            "Extend a current, unexpired lease by its TTL",
            parse_heartbeat,
        )
    },
    CommandSpec {
        flags: LEASE_WRITE,
        acl_categories: LEASE_ACL,
        args: &[
            RUN,
            arg("lease_id", ArgKind::String),
            arg("token", ArgKind::Integer),
            NOW,
        ],
        ..command(
            "lease.validate",
            -4,
            "lease",
            "Check that a lease is its run's current, unexpired lease",
            parse_validate,
        )
    },
    CommandSpec {
        flags: LEASE_WRITE,
        acl_categories: LEASE_ACL,
        args: LEASE_ID_TOKEN,
        ..command(
            "lease.release",
            3,
            "lease",
            "Remove a lease that is still its run's current lease, expired or not",
            parse_release,
        )
    },
    CommandSpec {
        flags: LEASE_WRITE,
        acl_categories: LEASE_ACL,
        args: &[RUN, NOW],
        ..command(
            "lease.get",
            -2,
            "lease",
            "Return a run's current lease and whether it has expired",
            parse_get,
        )
    },
    CommandSpec {
        // Redis's `denyoom`: refused above `maxmemory`.
        flags: LEASE_WRITE.union(Flags::DENYOOM),
        acl_categories: LEASE_ACL,
        complexity: "O(N) where N is the length of the value",
        args: &[
            LEASE_ID,
            arg("token", ArgKind::Integer),
            arg("value", ArgKind::String),
            NOW,
        ],
        ..command(
            "lease.setdata",
            -4,
            "lease",
            "Store a run's data (its checkpoint), fenced by a current, unexpired lease of the run",
            parse_setdata,
        )
    },
    CommandSpec {
        flags: Flags::READONLY.union(Flags::FAST),
        acl_categories: &["@keyspace", "@read", "@fast"],
        args: &[RUN],
        ..command(
            "lease.getdata",
            2,
            "lease",
            "Return a run's data, the fencing token that wrote it and when",
            parse_getdata,
        )
    },
    CommandSpec {
        flags: Flags::READONLY,
        acl_categories: &["@keyspace", "@read", "@slow"],
        complexity: "O(N) where N is the number of tenures returned (at most lease-history-len)",
        args: &[
            RUN,
            optional(token("COUNT", arg("count", ArgKind::Integer))),
        ],
        ..command(
            "lease.history",
            -2,
            "lease",
            "Return a run's most recent tenures, newest first: who held it, from when, and how each ended",
            parse_history,
        )
    },
    CommandSpec {
        flags: LEASE_WRITE,
        acl_categories: LEASE_ACL,
        args: LEASE_ID_TOKEN,
        ..command(
            "lease.deldata",
            3,
            "lease",
            "Remove a run's data, fenced by a current, unexpired lease of the run",
            parse_deldata,
        )
    },
    CommandSpec {
        flags: Flags::READONLY.union(Flags::FAST),
        acl_categories: &["@keyspace", "@read", "@fast"],
        complexity: "O(N) where N is the number of clients waiting for the run",
        args: &[RUN],
        ..command(
            "lease.waiters",
            2,
            "lease",
            "Return the workers blocked waiting for a run, in the order they will be served",
            parse_waiters,
        )
    },
    CommandSpec {
        flags: Flags::READONLY,
        acl_categories: &["@keyspace", "@read", "@slow"],
        complexity: "O(1) for every call. O(N) for a complete iteration, N being the number of leases",
        args: &[
            arg("cursor", ArgKind::Integer),
            optional(token("MATCH", arg("pattern", ArgKind::Pattern))),
            optional(token("COUNT", arg("count", ArgKind::Integer))),
        ],
        ..command(
            "lease.scan",
            -2,
            "lease",
            "Iterate over the runs that hold a lease, a few at a time, without blocking the server",
            parse_scan,
        )
    },
    CommandSpec {
        flags: Flags::READONLY.union(Flags::FAST),
        acl_categories: &["@keyspace", "@read", "@fast"],
        ..command(
            "dbsize",
            1,
            "server",
            "Return the number of leases held, active or expired",
            parse_dbsize,
        )
    },
    CommandSpec {
        flags: Flags::LOADING.union(Flags::STALE),
        acl_categories: &["@slow", "@dangerous"],
        args: &[optional(multiple(arg("section", ArgKind::String)))],
        complexity: "O(1)",
        ..command(
            "info",
            -1,
            "server",
            "Return information and statistics about the server",
            parse_info,
        )
    },
    CommandSpec {
        flags: Flags::ADMIN
            .union(Flags::NOSCRIPT)
            .union(Flags::NO_ASYNC_LOADING),
        acl_categories: &["@admin", "@slow", "@dangerous"],
        ..command(
            "bgrewriteaof",
            1,
            "server",
            "Rewrite the append-only log as a snapshot of the live leases, in the background",
            parse_bgrewriteaof,
        )
    },
    CommandSpec {
        flags: Flags::ADMIN
            .union(Flags::NOSCRIPT)
            .union(Flags::NO_ASYNC_LOADING),
        acl_categories: &["@admin", "@slow", "@dangerous"],
        args: &[optional(word("schedule", "SCHEDULE"))],
        ..command(
            "bgsave",
            -1,
            "server",
            "Cluster mode: build this node's Raft snapshot now, in the background (the file a \
             backup copies)",
            parse_bgsave,
        )
    },
    CommandSpec {
        flags: Flags::ADMIN
            .union(Flags::NOSCRIPT)
            .union(Flags::NO_ASYNC_LOADING)
            .union(Flags::NO_MULTI),
        acl_categories: &["@admin", "@slow", "@dangerous"],
        ..command(
            "sync",
            1,
            "server",
            "Cluster mode: send this node's Raft snapshot file (what redis-cli --rdb saves), then \
             close the connection",
            parse_sync,
        )
    },
    CommandSpec {
        flags: Flags::ADMIN
            .union(Flags::NOSCRIPT)
            .union(Flags::LOADING)
            .union(Flags::STALE)
            .union(Flags::ALLOW_BUSY),
        acl_categories: &["@admin", "@slow", "@dangerous"],
        args: &[optional(multiple(arg("option value", ArgKind::String)))],
        ..command(
            "replconf",
            -1,
            "server",
            "Accept the options a replica or redis-cli --rdb sends before SYNC (they change nothing)",
            parse_replconf,
        )
    },
    CommandSpec {
        flags: Flags::LOADING.union(Flags::STALE).union(Flags::FAST),
        acl_categories: &["@admin", "@fast", "@dangerous"],
        ..command(
            "lastsave",
            1,
            "server",
            "The Unix time of this node's last saved snapshot (the server's start on a single node)",
            parse_lastsave,
        )
    },
    CommandSpec {
        flags: Flags::FAST,
        acl_categories: FAST_CONNECTION,
        args: &[optional(arg("message", ArgKind::String))],
        ..command("ping", -1, "connection", "Ping the server", parse_ping)
    },
    CommandSpec {
        flags: Flags::LOADING.union(Flags::STALE).union(Flags::FAST),
        acl_categories: FAST_CONNECTION,
        args: &[arg("message", ArgKind::String)],
        ..command(
            "echo",
            2,
            "connection",
            "Return the given string",
            parse_echo,
        )
    },
    CommandSpec {
        flags: NO_AUTH_FLAGS,
        acl_categories: FAST_CONNECTION,
        args: &[optional(group(
            "arguments",
            ArgKind::Block,
            &[
                arg("protover", ArgKind::Integer),
                optional(token(
                    "AUTH",
                    group(
                        "username_password",
                        ArgKind::Block,
                        &[
                            arg("username", ArgKind::String),
                            arg("password", ArgKind::String),
                        ],
                    ),
                )),
                optional(token("SETNAME", arg("clientname", ArgKind::String))),
            ],
        ))],
        ..command(
            "hello",
            -1,
            "connection",
            "Handshake: choose RESP2 or RESP3, optionally authenticate and name the connection",
            parse_hello,
        )
    },
    CommandSpec {
        flags: NO_AUTH_FLAGS,
        acl_categories: FAST_CONNECTION,
        args: &[
            optional(arg("username", ArgKind::String)),
            arg("password", ArgKind::String),
        ],
        ..command(
            "auth",
            -2,
            "connection",
            "Authenticate to the server",
            parse_auth,
        )
    },
    CommandSpec {
        flags: NO_AUTH_FLAGS,
        acl_categories: FAST_CONNECTION,
        ..command("quit", -1, "connection", "Close the connection", parse_quit)
    },
    CommandSpec {
        flags: NO_AUTH_FLAGS,
        acl_categories: FAST_CONNECTION,
        ..command(
            "reset",
            1,
            "connection",
            "Reset the connection: RESP2, no name",
            parse_reset,
        )
    },
    CommandSpec {
        flags: Flags::LOADING.union(Flags::STALE).union(Flags::FAST),
        acl_categories: FAST_CONNECTION,
        args: &[arg("index", ArgKind::Integer)],
        ..command(
            "select",
            2,
            "connection",
            "Select the database; only database 0 exists",
            parse_select,
        )
    },
    CommandSpec {
        flags: PUBSUB_FLAGS,
        acl_categories: PUBSUB_ACL,
        complexity: "O(N) where N is the number of channels to subscribe to",
        args: &[multiple(arg("channel", ArgKind::String))],
        ..command(
            "subscribe",
            -2,
            "pubsub",
            "Listen for lease events on channels",
            parse_subscribe,
        )
    },
    CommandSpec {
        flags: PUBSUB_FLAGS,
        acl_categories: PUBSUB_ACL,
        complexity: "O(N) where N is the number of patterns to subscribe to",
        args: &[multiple(arg("pattern", ArgKind::Pattern))],
        ..command(
            "psubscribe",
            -2,
            "pubsub",
            "Listen for lease events on every channel that matches a pattern",
            parse_psubscribe,
        )
    },
    CommandSpec {
        flags: PUBSUB_FLAGS,
        acl_categories: PUBSUB_ACL,
        complexity: "O(N) where N is the number of channels to unsubscribe from",
        args: &[optional(multiple(arg("channel", ArgKind::String)))],
        ..command(
            "unsubscribe",
            -1,
            "pubsub",
            "Stop listening on channels; on every channel when none is named",
            parse_unsubscribe,
        )
    },
    CommandSpec {
        flags: PUBSUB_FLAGS,
        acl_categories: PUBSUB_ACL,
        complexity: "O(N) where N is the number of patterns to unsubscribe from",
        args: &[optional(multiple(arg("pattern", ArgKind::Pattern)))],
        ..command(
            "punsubscribe",
            -1,
            "pubsub",
            "Stop listening on patterns; on every pattern when none is named",
            parse_punsubscribe,
        )
    },
    CommandSpec {
        acl_categories: &["@slow"],
        complexity: "Depends on subcommand.",
        subcommands: PUBSUB_SUBCOMMANDS,
        ..command(
            "pubsub",
            -2,
            "pubsub",
            "A container for publish/subscribe introspection commands",
            unreachable_container,
        )
    },
    CommandSpec {
        acl_categories: &["@slow"],
        complexity: "Depends on subcommand.",
        subcommands: CLIENT_SUBCOMMANDS,
        ..command(
            "client",
            -2,
            "connection",
            "A container for client connection commands",
            unreachable_container,
        )
    },
    CommandSpec {
        flags: Flags::LOADING.union(Flags::STALE),
        acl_categories: SLOW_CONNECTION,
        complexity: "O(N) where N is the total number of commands",
        subcommands: COMMAND_SUBCOMMANDS,
        ..command(
            "command",
            -1,
            "server",
            "Return details about every command",
            parse_command_all,
        )
    },
    CommandSpec {
        acl_categories: &["@slow"],
        complexity: "Depends on subcommand.",
        subcommands: CONFIG_SUBCOMMANDS,
        ..command(
            "config",
            -2,
            "server",
            "A container for server configuration commands",
            unreachable_container,
        )
    },
    CommandSpec {
        flags: ADMIN_FLAGS,
        acl_categories: ADMIN_ACL,
        ..command(
            "monitor",
            1,
            "server",
            "Stream every command the server runs, as it runs it",
            parse_monitor,
        )
    },
    CommandSpec {
        acl_categories: &["@slow"],
        complexity: "Depends on subcommand.",
        subcommands: SLOWLOG_SUBCOMMANDS,
        ..command(
            "slowlog",
            -2,
            "server",
            "A container for slow log commands",
            unreachable_container,
        )
    },
    CommandSpec {
        flags: Flags::LOADING.union(Flags::STALE).union(Flags::FAST),
        acl_categories: &["@fast"],
        ..command(
            "time",
            1,
            "server",
            "Return the server's wall-clock time",
            parse_time,
        )
    },
    CommandSpec {
        flags: Flags::ADMIN
            .union(Flags::NOSCRIPT)
            .union(Flags::LOADING)
            .union(Flags::STALE)
            .union(Flags::NO_MULTI)
            .union(Flags::ALLOW_BUSY),
        acl_categories: &["@admin", "@slow", "@dangerous"],
        args: &[
            optional(group(
                "nosave_save",
                ArgKind::OneOf,
                &[word("nosave", "NOSAVE"), word("save", "SAVE")],
            )),
            optional(word("now", "NOW")),
            optional(word("force", "FORCE")),
            optional(word("abort", "ABORT")),
        ],
        ..command(
            "shutdown",
            -1,
            "server",
            "Flush the token ceiling and stop the server",
            parse_shutdown,
        )
    },
    CommandSpec {
        flags: TRANSACTION_FLAGS,
        acl_categories: FAST_TRANSACTION,
        ..command(
            "multi",
            1,
            "transactions",
            "Start a transaction: the commands that follow are queued until EXEC",
            parse_multi,
        )
    },
    CommandSpec {
        flags: Flags::NOSCRIPT
            .union(Flags::LOADING)
            .union(Flags::STALE)
            .union(Flags::SKIP_SLOWLOG),
        acl_categories: &["@slow", "@transaction"],
        ..command(
            "exec",
            1,
            "transactions",
            "Run the queued commands of a transaction together, with nothing in between",
            parse_exec,
        )
    },
    CommandSpec {
        flags: TRANSACTION_FLAGS,
        acl_categories: FAST_TRANSACTION,
        ..command(
            "discard",
            1,
            "transactions",
            "Drop the queued commands of a transaction",
            parse_discard,
        )
    },
    CommandSpec {
        flags: TRANSACTION_FLAGS,
        acl_categories: FAST_TRANSACTION,
        args: &[multiple(arg("key", ArgKind::String))],
        ..command(
            "watch",
            -2,
            "transactions",
            "Refused: leases change only through lease commands, which fencing tokens guard",
            parse_watch,
        )
    },
    CommandSpec {
        flags: TRANSACTION_FLAGS,
        acl_categories: FAST_TRANSACTION,
        ..command(
            "unwatch",
            1,
            "transactions",
            "Forget watched keys: none ever are, so it only answers OK",
            parse_unwatch,
        )
    },
    // The keyspace view (keyspace.rs): runs as read-only hash keys.
    CommandSpec {
        flags: Flags::READONLY,
        acl_categories: KEYSPACE_SLOW,
        complexity: "O(1) for every call. O(N) for a complete iteration, N being the number of leases",
        args: &[
            arg("cursor", ArgKind::Integer),
            optional(token("MATCH", arg("pattern", ArgKind::Pattern))),
            optional(token("COUNT", arg("count", ArgKind::Integer))),
            optional(token("TYPE", arg("type", ArgKind::String))),
        ],
        ..command(
            "scan",
            -2,
            "generic",
            "Iterate over the runs that hold a lease, as keys of type hash",
            parse_scan_keys,
        )
    },
    CommandSpec {
        flags: Flags::READONLY,
        acl_categories: &["@keyspace", "@read", "@slow", "@dangerous"],
        complexity: "O(N) with N being the number of leases",
        args: &[arg("pattern", ArgKind::Pattern)],
        ..command(
            "keys",
            2,
            "generic",
            "Return every run holding a lease whose id matches a pattern",
            parse_keys,
        )
    },
    CommandSpec {
        flags: Flags::READONLY,
        acl_categories: KEYSPACE_SLOW,
        complexity: "O(N) in the worst case, N being the number of table slots",
        ..command(
            "randomkey",
            1,
            "generic",
            "Return a random run that holds a lease",
            parse_randomkey,
        )
    },
    CommandSpec {
        complexity: "O(N) where N is the number of keys to check",
        args: &[multiple(KEY)],
        ..fast_read(
            "exists",
            -2,
            KEY_READ,
            "Count how many of the runs named hold a lease",
            parse_exists,
        )
    },
    fast_read(
        "type",
        2,
        KEY_READ,
        "Return hash for a run that holds a lease, none otherwise",
        parse_type,
    ),
    fast_read(
        "ttl",
        2,
        KEY_READ,
        "Return the seconds left to a lease's expires_at",
        parse_ttl,
    ),
    fast_read(
        "pttl",
        2,
        KEY_READ,
        "Return the milliseconds left to a lease's expires_at",
        parse_pttl,
    ),
    fast_read(
        "expiretime",
        2,
        KEY_READ,
        "Return a lease's expires_at as a Unix time in seconds",
        parse_expiretime,
    ),
    fast_read(
        "pexpiretime",
        2,
        KEY_READ,
        "Return a lease's expires_at as a Unix time in milliseconds",
        parse_pexpiretime,
    ),
    CommandSpec {
        flags: Flags::READONLY,
        acl_categories: HASH_SLOW,
        complexity: "O(1): a lease has six fields",
        ..fast_read(
            "hgetall",
            2,
            HASH_READ,
            "Return a lease's fields and values",
            parse_hgetall,
        )
    },
    CommandSpec {
        args: &[KEY, arg("field", ArgKind::String)],
        ..fast_read(
            "hget",
            3,
            HASH_READ,
            "Return one field of a lease",
            parse_hget,
        )
    },
    CommandSpec {
        args: &[KEY, multiple(arg("field", ArgKind::String))],
        ..fast_read(
            "hmget",
            -3,
            HASH_READ,
            "Return fields of a lease",
            parse_hmget,
        )
    },
    fast_read(
        "hlen",
        2,
        HASH_READ,
        "Return the number of fields of a lease (6), or 0",
        parse_hlen,
    ),
    CommandSpec {
        flags: Flags::READONLY,
        acl_categories: HASH_SLOW,
        ..fast_read(
            "hkeys",
            2,
            HASH_READ,
            "Return a lease's field names",
            parse_hkeys,
        )
    },
    CommandSpec {
        flags: Flags::READONLY,
        acl_categories: HASH_SLOW,
        ..fast_read(
            "hvals",
            2,
            HASH_READ,
            "Return a lease's values",
            parse_hvals,
        )
    },
    CommandSpec {
        args: &[KEY, arg("field", ArgKind::String)],
        ..fast_read(
            "hexists",
            3,
            HASH_READ,
            "Return whether a lease has a field",
            parse_hexists,
        )
    },
    CommandSpec {
        flags: Flags::READONLY,
        acl_categories: HASH_SLOW,
        args: &[
            KEY,
            arg("cursor", ArgKind::Integer),
            optional(token("MATCH", arg("pattern", ArgKind::Pattern))),
            optional(token("COUNT", arg("count", ArgKind::Integer))),
            optional(word("novalues", "NOVALUES")),
        ],
        ..fast_read(
            "hscan",
            -3,
            HASH_READ,
            "Return a lease's fields and values in one call, cursor 0",
            parse_hscan,
        )
    },
    CommandSpec {
        flags: Flags::NOSCRIPT
            .union(Flags::LOADING)
            .union(Flags::STALE)
            .union(Flags::FAST),
        acl_categories: &["@admin", "@fast", "@dangerous"],
        ..command(
            "role",
            1,
            "server",
            "Return the node's replication role: the cluster's leader is a master, the other nodes its replicas",
            parse_role,
        )
    },
    CommandSpec {
        acl_categories: &["@slow"],
        complexity: "Depends on subcommand.",
        subcommands: CLUSTER_SUBCOMMANDS,
        ..command(
            "cluster",
            -2,
            "cluster",
            "A container for cluster commands",
            unreachable_container,
        )
    },
    CommandSpec {
        acl_categories: &["@slow"],
        complexity: "Depends on subcommand.",
        subcommands: MEMORY_SUBCOMMANDS,
        ..command(
            "memory",
            -2,
            "server",
            "A container for memory diagnostics commands",
            unreachable_container,
        )
    },
    CommandSpec {
        acl_categories: &["@slow"],
        complexity: "Depends on subcommand.",
        subcommands: OBJECT_SUBCOMMANDS,
        ..command(
            "object",
            -2,
            "generic",
            "A container for object introspection commands",
            unreachable_container,
        )
    },
];

static MEMORY_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        flags: Flags::READONLY,
        acl_categories: &["@read", "@slow"],
        args: &[
            KEY,
            optional(token("SAMPLES", arg("count", ArgKind::Integer))),
        ],
        ..command(
            "usage",
            -3,
            "server",
            "Estimate the bytes the registry keeps for a lease",
            parse_memory_usage,
        )
    },
    help_subcommand("server", &["@slow"], parse_memory_help),
];

static OBJECT_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        flags: Flags::READONLY,
        acl_categories: KEYSPACE_SLOW,
        args: &[KEY],
        ..command(
            "encoding",
            3,
            "generic",
            "Return the encoding Redis would give a lease's hash",
            parse_object_encoding,
        )
    },
    help_subcommand("generic", KEYSPACE_SLOW, parse_object_help),
];

static CLIENT_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        flags: CONNECTION_FLAGS,
        acl_categories: SLOW_CONNECTION,
        ..command(
            "getname",
            2,
            "connection",
            "Return the name of the connection",
            parse_client_getname,
        )
    },
    CommandSpec {
        flags: CONNECTION_FLAGS,
        acl_categories: SLOW_CONNECTION,
        args: &[arg("connection-name", ArgKind::String)],
        ..command(
            "setname",
            3,
            "connection",
            "Set the name of the connection",
            parse_client_setname,
        )
    },
    CommandSpec {
        flags: CONNECTION_FLAGS,
        acl_categories: SLOW_CONNECTION,
        ..command(
            "id",
            2,
            "connection",
            "Return the ID of the connection",
            parse_client_id,
        )
    },
    CommandSpec {
        flags: CONNECTION_FLAGS,
        acl_categories: SLOW_CONNECTION,
        args: &[group(
            "attr",
            ArgKind::OneOf,
            &[
                token("LIB-NAME", arg("libname", ArgKind::String)),
                token("LIB-VER", arg("libver", ArgKind::String)),
            ],
        )],
        ..command(
            "setinfo",
            4,
            "connection",
            "Set client library name or version for this connection",
            parse_client_setinfo,
        )
    },
    CommandSpec {
        flags: CONNECTION_FLAGS,
        acl_categories: SLOW_CONNECTION,
        ..command(
            "info",
            2,
            "connection",
            "Return information about this connection",
            parse_client_info,
        )
    },
    CommandSpec {
        flags: Flags::ADMIN
            .union(Flags::NOSCRIPT)
            .union(Flags::LOADING)
            .union(Flags::STALE),
        acl_categories: &["@admin", "@slow", "@dangerous", "@connection"],
        complexity: "O(N) where N is the number of client connections",
        args: &[
            optional(token(
                "TYPE",
                group(
                    "client-type",
                    ArgKind::OneOf,
                    &[
                        word("normal", "NORMAL"),
                        word("master", "MASTER"),
                        word("replica", "REPLICA"),
                        word("pubsub", "PUBSUB"),
                    ],
                ),
            )),
            optional(token("ID", multiple(arg("client-id", ArgKind::Integer)))),
        ],
        ..command(
            "list",
            -2,
            "connection",
            "List the open connections",
            parse_client_list,
        )
    },
    CommandSpec {
        flags: ADMIN_FLAGS,
        acl_categories: &["@admin", "@slow", "@dangerous", "@connection"],
        complexity: "O(N) where N is the number of client connections",
        // The filters are listed in the reference rather than modelled one
        // by one: a usage line naming all seven twice reads like noise.
        args: &[group(
            "filter",
            ArgKind::OneOf,
            &[
                arg("ip:port", ArgKind::String),
                multiple(group(
                    "new-format",
                    ArgKind::Block,
                    &[
                        arg("filter", ArgKind::String),
                        arg("value", ArgKind::String),
                    ],
                )),
            ],
        )],
        ..command(
            "kill",
            -3,
            "connection",
            "Close client connections: the one at an address, or all that match filters",
            parse_client_kill,
        )
    },
    CommandSpec {
        flags: ADMIN_FLAGS,
        acl_categories: &["@admin", "@slow", "@dangerous", "@connection"],
        complexity: "O(log N) where N is the number of client connections",
        args: &[
            arg("client-id", ArgKind::Integer),
            optional(group(
                "unblock-type",
                ArgKind::OneOf,
                &[word("timeout", "TIMEOUT"), word("error", "ERROR")],
            )),
        ],
        ..command(
            "unblock",
            -3,
            "connection",
            "Unblock a client blocked in LEASE.ACQUIRE ... BLOCK: with a timeout's null, or an error",
            parse_client_unblock,
        )
    },
    help_subcommand("connection", SLOW_CONNECTION, parse_client_help),
];

static PUBSUB_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        flags: PUBSUB_INTROSPECTION,
        acl_categories: &["@pubsub", "@slow"],
        complexity: "O(N) where N is the number of active channels",
        args: &[optional(arg("pattern", ArgKind::Pattern))],
        ..command(
            "channels",
            -2,
            "pubsub",
            "Return the channels that have a subscriber",
            parse_pubsub_channels,
        )
    },
    CommandSpec {
        flags: PUBSUB_INTROSPECTION,
        acl_categories: &["@pubsub", "@slow"],
        complexity: "O(N) for the number of channels named",
        args: &[optional(multiple(arg("channel", ArgKind::String)))],
        ..command(
            "numsub",
            -2,
            "pubsub",
            "Return the number of subscribers of channels (pattern subscribers not counted)",
            parse_pubsub_numsub,
        )
    },
    CommandSpec {
        flags: PUBSUB_INTROSPECTION,
        acl_categories: &["@pubsub", "@slow"],
        ..command(
            "numpat",
            2,
            "pubsub",
            "Return the number of patterns subscribed to",
            parse_pubsub_numpat,
        )
    },
    help_subcommand("pubsub", &["@slow"], parse_pubsub_help),
];

static SLOWLOG_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        flags: Flags::ADMIN.union(Flags::LOADING).union(Flags::STALE),
        acl_categories: ADMIN_ACL,
        complexity: "O(N) where N is the number of entries returned",
        args: &[optional(arg("count", ArgKind::Integer))],
        ..command(
            "get",
            -2,
            "server",
            "Return the newest entries of the slow log",
            parse_slowlog_get,
        )
    },
    CommandSpec {
        flags: Flags::ADMIN.union(Flags::LOADING).union(Flags::STALE),
        acl_categories: ADMIN_ACL,
        ..command(
            "len",
            2,
            "server",
            "Return the number of entries in the slow log",
            parse_slowlog_len,
        )
    },
    CommandSpec {
        flags: Flags::ADMIN.union(Flags::LOADING).union(Flags::STALE),
        acl_categories: ADMIN_ACL,
        complexity: "O(N) where N is the number of entries in the slow log",
        ..command(
            "reset",
            2,
            "server",
            "Clear the slow log",
            parse_slowlog_reset,
        )
    },
    help_subcommand("server", &["@slow"], parse_slowlog_help),
];

static COMMAND_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        flags: Flags::LOADING.union(Flags::STALE),
        acl_categories: SLOW_CONNECTION,
        ..command(
            "count",
            2,
            "server",
            "Return the number of commands",
            parse_command_count,
        )
    },
    CommandSpec {
        flags: Flags::LOADING.union(Flags::STALE),
        acl_categories: SLOW_CONNECTION,
        complexity: "O(N) where N is the number of commands to look up",
        args: &[optional(multiple(arg("command-name", ArgKind::String)))],
        ..command(
            "docs",
            -2,
            "server",
            "Return documentary information about commands",
            parse_command_docs,
        )
    },
    CommandSpec {
        flags: Flags::LOADING.union(Flags::STALE),
        acl_categories: SLOW_CONNECTION,
        complexity: "O(N) where N is the number of commands to look up",
        args: &[optional(multiple(arg("command-name", ArgKind::String)))],
        ..command(
            "info",
            -2,
            "server",
            "Return information about commands",
            parse_command_info,
        )
    },
    CommandSpec {
        flags: Flags::LOADING.union(Flags::STALE),
        acl_categories: SLOW_CONNECTION,
        complexity: "O(N) where N is the total number of commands",
        ..command(
            "list",
            -2,
            "server",
            "Return the names of all commands",
            parse_command_list,
        )
    },
    help_subcommand("server", SLOW_CONNECTION, parse_command_help),
];

static CONFIG_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        flags: Flags::ADMIN
            .union(Flags::NOSCRIPT)
            .union(Flags::LOADING)
            .union(Flags::STALE),
        acl_categories: &["@admin", "@slow", "@dangerous"],
        complexity: "O(N) when N is the number of configuration parameters provided",
        args: &[multiple(arg("parameter", ArgKind::Pattern))],
        ..command(
            "get",
            -3,
            "server",
            "Return the values of configuration parameters matching glob patterns",
            parse_config_get,
        )
    },
    CommandSpec {
        flags: ADMIN_FLAGS,
        acl_categories: &["@admin", "@slow", "@dangerous"],
        complexity: "O(N) when N is the number of configuration parameters provided",
        args: &[multiple(group(
            "data",
            ArgKind::Block,
            &[
                arg("parameter", ArgKind::String),
                arg("value", ArgKind::String),
            ],
        ))],
        ..command(
            "set",
            -4,
            "server",
            "Change configuration parameters while the server runs, all or none",
            parse_config_set,
        )
    },
    CommandSpec {
        flags: ADMIN_FLAGS,
        acl_categories: &["@admin", "@slow", "@dangerous"],
        ..command(
            "resetstat",
            2,
            "server",
            "Reset the statistics reported by INFO",
            parse_config_resetstat,
        )
    },
    CommandSpec {
        flags: ADMIN_FLAGS,
        acl_categories: &["@admin", "@slow", "@dangerous"],
        ..command(
            "rewrite",
            2,
            "server",
            "Write the running configuration back into the configuration file",
            parse_config_rewrite,
        )
    },
    help_subcommand("server", &["@slow"], parse_config_help),
];

/// A view of the cluster status, as Redis flags its `CLUSTER` reads.
const fn cluster_view(name: &'static str, summary: &'static str, parse: ParseFn) -> CommandSpec {
    CommandSpec {
        flags: Flags::STALE,
        acl_categories: &["@slow"],
        ..command(name, 2, "cluster", summary, parse)
    }
}

static CLUSTER_SUBCOMMANDS: &[CommandSpec] = &[
    cluster_view(
        "info",
        "Return the cluster's state and this node's role, term, leader and log indexes",
        parse_cluster_info,
    ),
    CommandSpec {
        complexity: "O(N) where N is the number of nodes",
        ..cluster_view(
            "nodes",
            "Return the cluster's nodes: the leader masters every slot, the others replicate it",
            parse_cluster_nodes,
        )
    },
    CommandSpec {
        flags: Flags::LOADING.union(Flags::STALE),
        complexity: "O(N) where N is the number of nodes",
        ..cluster_view(
            "slots",
            "Return the slot ranges and their nodes: every slot, served by the leader",
            parse_cluster_slots,
        )
    },
    CommandSpec {
        flags: Flags::LOADING.union(Flags::STALE),
        complexity: "O(N) where N is the number of nodes",
        ..cluster_view(
            "shards",
            "Return the cluster's shards: one, every slot, led by the leader",
            parse_cluster_shards,
        )
    },
    cluster_view("myid", "Return this node's id", parse_cluster_myid),
    CommandSpec {
        flags: ADMIN_FLAGS,
        acl_categories: ADMIN_ACL,
        complexity: "O(N) where N is the number of leases (the new node's snapshot)",
        args: &[
            arg("node-id", ArgKind::Integer),
            arg("address", ArgKind::String),
        ],
        ..command(
            "addnode",
            4,
            "cluster",
            "Add a node to the cluster: it catches up as a learner, then votes",
            parse_cluster_addnode,
        )
    },
    CommandSpec {
        flags: ADMIN_FLAGS,
        acl_categories: ADMIN_ACL,
        args: &[arg("node-id", ArgKind::Integer)],
        ..command(
            "delnode",
            3,
            "cluster",
            "Remove a node from the cluster (the leader hands its lead over)",
            parse_cluster_delnode,
        )
    },
    help_subcommand("cluster", &["@slow"], parse_cluster_help),
];
