//! Typed commands, parsed from a request's arguments.
//!
//! [`parse`] finds the command in the [command table](table), checks its
//! arity there (one rule, one error message for all), then runs the
//! command's own parse step, which turns the arguments into a [`Command`]
//! or a Redis-worded error. Lease commands become a registry [`Op`] for
//! the core; the rest are answered by the connection (some with the
//! core's help).
//!
//! The files: `args` (the argument cursor and shared argument kinds),
//! `lease` (lease commands), [`keyspace`] (the runs as read-only Redis
//! keys, and the refusal of Redis's write commands), `server` (connection, client and admin
//! commands), [`table`] (the command table and flags), `help` (the HELP
//! texts), [`docs`] (what the table says about itself).

mod args;
pub mod docs;
pub mod help;
pub mod keyspace;
mod lease;
mod pubsub;
mod server;
pub mod table;

use std::borrow::Cow;
use std::sync::OnceLock;

use bytes::Bytes;

use crate::pubsub::Kind;
use crate::registry::Op;
use crate::reply::{Protocol, Reply};
pub use args::{Args, syntax_error};
use table::{CommandSpec, Flags};

/// `CLIENT SETINFO` attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAttr {
    LibName,
    LibVer,
}

/// Which clients `CLIENT KILL` closes: those that match every filter given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KillFilter {
    /// The old form, `CLIENT KILL addr`: it replies `OK` or an error
    /// instead of a count, and may close the client that sent it.
    pub legacy: bool,
    pub id: Option<u64>,
    /// `ip:port` as `CLIENT LIST` shows it.
    pub addr: Option<Bytes>,
    pub laddr: Option<Bytes>,
    /// `TYPE normal|pubsub` (the last one given); `master` and `replica`
    /// match nobody, as there are none.
    pub kind: Option<ClientKind>,
    /// Spare the client that sent the command (`SKIPME yes`, the default).
    pub skip_me: bool,
    /// Only clients connected for longer than this many seconds.
    pub max_age: Option<u64>,
}

/// `SLOWLOG` subcommands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlowlogCommand {
    /// The newest entries, at most this many; `None` for all of them.
    Get(Option<usize>),
    Len,
    Reset,
}

/// `CLUSTER` subcommands: views of the node's cluster status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterView {
    Info,
    Nodes,
    Slots,
    Shards,
    MyId,
    Help,
}

/// `CLUSTER ADDNODE id host:port[@busport]` and `CLUSTER DELNODE id`: a
/// change of the cluster's membership, one node at a time. A node that
/// does not lead sends it to the leader over the bus as it is.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ClusterChange {
    /// Add node `id`, whose `cluster-nodes` entry would be
    /// `id@<address>`: `address` is `host:port[@busport]` as written.
    Add { id: u64, address: String },
    /// Remove node `id`.
    Remove { id: u64 },
}

impl ClusterChange {
    /// The command as a client wrote it, for the log and errors.
    pub fn describe(&self) -> String {
        match self {
            ClusterChange::Add { id, address } => format!("CLUSTER ADDNODE {id} {address}"),
            ClusterChange::Remove { id } => format!("CLUSTER DELNODE {id}"),
        }
    }
}

/// A client's type, as `CLIENT LIST TYPE` and `CLIENT KILL TYPE` name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientKind {
    Normal,
    /// Subscribed to a channel or a pattern.
    PubSub,
    /// `master` or `replica`: no client here is either.
    Replication,
}

/// Filters of `CLIENT LIST`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientFilter {
    All,
    OfKind(ClientKind),
    Ids(Vec<u64>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// A lease command (or `DBSIZE`), for the core's registry.
    Lease(Op),
    /// `LEASE.ACQUIRE ... BLOCK ms`: the acquire, and how long to wait for
    /// the run (`None`: forever).
    AcquireBlocking {
        op: Op,
        timeout: Option<std::time::Duration>,
    },
    /// A read of the keyspace view (`SCAN`, `TYPE`, `HGETALL`, ...): an
    /// op that changes nothing, and how to word its outcome.
    Keyspace {
        op: Op,
        view: keyspace::View,
    },
    /// `LEASE.WAITERS run`: the workers blocked on the run, in order.
    Waiters(Bytes),
    /// `CLIENT UNBLOCK id [TIMEOUT|ERROR]`: `error` for `ERROR`.
    ClientUnblock {
        id: u64,
        error: bool,
    },
    /// `SUBSCRIBE channel ...` or `PSUBSCRIBE pattern ...`.
    Subscribe(Kind, Vec<Bytes>),
    /// `UNSUBSCRIBE [channel ...]` or `PUNSUBSCRIBE [pattern ...]`: none
    /// named means every one.
    Unsubscribe(Kind, Vec<Bytes>),
    /// `PUBSUB CHANNELS [pattern]`.
    PubsubChannels(Option<Bytes>),
    /// `PUBSUB NUMSUB [channel ...]`.
    PubsubNumsub(Vec<Bytes>),
    /// `PUBSUB NUMPAT`.
    PubsubNumpat,
    /// `INFO [section ...]`: rendered from the core's report.
    Info(Vec<Bytes>),
    /// `BGREWRITEAOF`: compact the append-only log.
    RewriteLog,
    /// `BGSAVE`: a cluster node builds its snapshot now.
    Save,
    /// `LASTSAVE`: when the node's snapshot was last saved.
    LastSave,
    /// `SYNC`: a cluster node sends its snapshot file, then closes.
    Sync,
    /// `REPLCONF option value ...`: accepted (what `redis-cli --rdb`
    /// sends before `SYNC`), or the first option not known.
    Replconf(Result<(), Bytes>),
    /// `CONFIG SET parameter value ...`, the pairs as given.
    ConfigSet(Vec<(Bytes, Bytes)>),
    ConfigResetStat,
    ConfigRewrite,
    Ping(Option<Bytes>),
    Echo(Bytes),
    Hello {
        protocol: Option<Protocol>,
        auth: Option<(Bytes, Bytes)>,
        set_name: Option<Bytes>,
    },
    Auth {
        username: Option<Bytes>,
        password: Bytes,
    },
    Quit,
    Reset,
    Select,
    ClientSetName(Bytes),
    ClientGetName,
    ClientId,
    ClientSetInfo(ClientAttr, Bytes),
    ClientInfo,
    ClientList(ClientFilter),
    ClientKill(KillFilter),
    /// Stream every command the server runs to this connection.
    Monitor,
    Slowlog(SlowlogCommand),
    /// Every command's `COMMAND INFO`, or the named ones'.
    CommandInfo(Option<Vec<Bytes>>),
    CommandCount,
    CommandDocs(Vec<Bytes>),
    CommandList,
    ConfigGet(Vec<Bytes>),
    /// The lines of a container's `HELP` subcommand.
    Help(&'static [&'static str]),
    /// `ROLE`: the node's replication role.
    Role,
    /// `CLUSTER INFO|NODES|SLOTS|MYID|HELP`: refused on a single node.
    Cluster(ClusterView),
    /// `CLUSTER ADDNODE|DELNODE`: refused on a single node.
    ClusterChange(ClusterChange),
    Time,
    Shutdown,
    /// `MULTI`: start queuing a transaction.
    Multi,
    /// `EXEC`: run the queued transaction.
    Exec,
    /// `DISCARD`: drop the queued transaction.
    Discard,
    /// `WATCH key ...`: refused (see the connection's `multi`).
    Watch,
    /// `UNWATCH`: nothing is ever watched, so only `OK`.
    Unwatch,
}

/// Parses one request. The error is the reply to send instead. The
/// arguments are borrowed (the command takes cheap clones of the ones it
/// keeps), so the connection still has them for `SLOWLOG`.
pub fn parse(args: &[Bytes]) -> Result<Command, Reply> {
    parse_gated(args, |_| None)
}

/// [`parse`], with `gate` asked once the command is known and its arity
/// checked, before its own parse step: an error it returns is the reply.
/// That is where Redis refuses a command for the connection's state (a
/// RESP2 subscriber may only (un)subscribe, PING, QUIT or RESET).
pub fn parse_gated(
    args: &[Bytes],
    gate: impl FnOnce(CommandName) -> Option<Reply>,
) -> Result<Command, Reply> {
    let name = check(args)?;
    if let Some(refused) = gate(name) {
        return Err(refused);
    }
    parse_checked(name, args)
}

/// The command's own parse step, once [`check`] has named it: an error
/// here is the command's own (it ran and failed, for `INFO
/// commandstats`).
pub fn parse_checked(name: CommandName, args: &[Bytes]) -> Result<Command, Reply> {
    let mut rest = Args::new(args);
    let words = if name.parent.is_some() { 2 } else { 1 };
    for _ in 0..words {
        rest.next();
    }
    (name.spec.parse)(&mut rest)
}

/// The command a request names, once it is known to exist (a subcommand
/// too) and its arity is right: Redis's checks before it runs or queues a
/// command; inside `MULTI` failing them aborts the transaction.
pub fn check(args: &[Bytes]) -> Result<CommandName, Reply> {
    check_named(args).map_err(|(_, reply)| reply)
}

/// [`check`], with the command a refusal is counted against in `INFO
/// commandstats`: the one whose arity is wrong; none for an unknown
/// command or subcommand (Redis counts those only in `errorstats`).
pub fn check_named(args: &[Bytes]) -> Result<CommandName, (Option<CommandName>, Reply)> {
    let mut args = Args::new(args);
    let name = args
        .next()
        .expect("the decoder never yields an empty request");
    let Some(spec) = table::lookup(table::COMMANDS, &name) else {
        let refused =
            keyspace::refuse_write(&name).unwrap_or_else(|| unknown_command(&name, args.rest()));
        return Err((None, refused));
    };
    let named = |parent, spec| Some(CommandName { parent, spec });
    check_arity(spec, None, args.len() + 1).map_err(|reply| (named(None, spec), reply))?;
    // A container run bare (only `COMMAND` allows it) has its own parse step.
    let Some(sub_name) = spec.subcommands.first().and_then(|_| args.next()) else {
        return Ok(CommandName { parent: None, spec });
    };
    let Some(sub) = table::lookup(spec.subcommands, &sub_name) else {
        let unknown = Reply::error(format!(
            "ERR unknown subcommand '{}'. Try {} HELP.",
            truncated(&sub_name),
            spec.name.to_ascii_uppercase()
        ));
        return Err((None, unknown));
    };
    check_arity(sub, Some(spec), args.len() + 2)
        .map_err(|reply| (named(Some(spec), sub), reply))?;
    Ok(CommandName {
        parent: Some(spec),
        spec: sub,
    })
}

/// The command a request names (a subcommand where it has one), known or
/// not to the table; for `CLIENT LIST`'s `cmd=`.
#[derive(Clone, Copy, Debug)]
pub struct CommandName {
    parent: Option<&'static CommandSpec>,
    spec: &'static CommandSpec,
}

impl CommandName {
    /// The command's place in [`table::COMMANDS`] counted with every
    /// subcommand (a container first, then its subcommands): an index
    /// below [`stat_count`], for the counters of `INFO commandstats`.
    pub fn id(&self) -> usize {
        let size = std::mem::size_of::<CommandSpec>();
        let index = |table: &[CommandSpec], spec: &CommandSpec| {
            (spec as *const CommandSpec as usize - table.as_ptr() as usize) / size
        };
        match self.parent {
            None => stat_ids().first[index(table::COMMANDS, self.spec)],
            Some(parent) => {
                let container = stat_ids().first[index(table::COMMANDS, parent)];
                container + 1 + index(parent.subcommands, self.spec)
            }
        }
    }

    /// The command's flags, with its container's (`CLIENT`, `CONFIG`).
    pub fn flags(&self) -> Flags {
        self.spec.flags | self.parent.map_or(Flags::empty(), |parent| parent.flags)
    }

    /// Whether the command is an administrative one, which `MONITOR` does
    /// not show (as in Redis: they may carry secrets or be noisy).
    pub fn is_admin(&self) -> bool {
        self.flags().contains(Flags::ADMIN)
    }

    /// Whether a client may send it before it has authenticated (Redis's
    /// `no_auth` flag: AUTH, HELLO, QUIT, RESET).
    pub fn allowed_before_auth(&self) -> bool {
        self.flags().contains(Flags::NO_AUTH)
    }

    /// Whether Redis refuses it inside `MULTI` (its `no_multi` flag).
    pub fn refused_in_multi(&self) -> bool {
        self.flags().contains(Flags::NO_MULTI)
    }

    /// Whether it runs at once inside `MULTI` rather than being queued:
    /// the transaction's own commands, `QUIT` and `RESET`, as in Redis.
    pub fn runs_in_multi(&self) -> bool {
        const NOT_QUEUED: [&str; 6] = ["exec", "discard", "multi", "watch", "quit", "reset"];
        self.parent.is_none() && NOT_QUEUED.contains(&self.spec.name)
    }

    /// The request's first key, at the position `COMMAND INFO` gives for
    /// the command (none for a command without keys): what a cluster
    /// client routes it by, and what a follower's `-MOVED` names the slot
    /// of.
    pub fn first_key<'a>(&self, args: &'a [Bytes]) -> Option<&'a Bytes> {
        let (first, _, _) = docs::key_positions(self.parent, self.spec);
        let first = usize::try_from(first).ok().filter(|&first| first > 0)?;
        args.get(first)
    }

    /// Whether a RESP2 client subscribed to something may run it: only
    /// the (un)subscribe commands, `PING`, `QUIT` and `RESET`, as in Redis.
    pub fn allowed_while_subscribed(&self) -> bool {
        const ALLOWED: [&str; 7] = [
            "subscribe",
            "psubscribe",
            "unsubscribe",
            "punsubscribe",
            "ping",
            "quit",
            "reset",
        ];
        self.parent.is_none() && ALLOWED.contains(&self.spec.name)
    }
}

impl std::fmt::Display for CommandName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.parent {
            Some(parent) => write!(f, "{}|{}", parent.name, self.spec.name),
            None => f.write_str(self.spec.name),
        }
    }
}

/// The commands and subcommands, in the order of their ids.
struct StatIds {
    /// Each command's id, by its index in the table.
    first: Vec<usize>,
    /// Each id's full name, `client|list` for a subcommand.
    names: Vec<String>,
}

fn stat_ids() -> &'static StatIds {
    static IDS: OnceLock<StatIds> = OnceLock::new();
    IDS.get_or_init(|| {
        let mut ids = StatIds {
            first: Vec::new(),
            names: Vec::new(),
        };
        for spec in table::COMMANDS {
            ids.first.push(ids.names.len());
            ids.names.push(table::full_name(None, spec));
            for sub in spec.subcommands {
                ids.names.push(table::full_name(Some(spec), sub));
            }
        }
        ids
    })
}

/// How many ids there are: the commands with their subcommands.
pub fn stat_count() -> usize {
    stat_ids().names.len()
}

/// The full name of the command with id `id` (`client|list`).
pub fn stat_name(id: usize) -> &'static str {
    &stat_ids().names[id]
}

/// Which known command `args` names, if any.
pub fn name_of(args: &[Bytes]) -> Option<CommandName> {
    let spec = table::lookup(table::COMMANDS, args.first()?)?;
    let sub = args
        .get(1)
        .and_then(|name| table::lookup(spec.subcommands, name));
    Some(match sub {
        Some(sub) => CommandName {
            parent: Some(spec),
            spec: sub,
        },
        None => CommandName { parent: None, spec },
    })
}

/// What `MONITOR` and `SLOWLOG` show of a request: the password of `AUTH`,
/// the credentials of `HELLO ... AUTH` and the value of a sensitive
/// directive in `CONFIG SET` (`requirepass`) read `(redacted)`, as in
/// Redis.
pub fn redacted(args: &[Bytes]) -> Cow<'_, [Bytes]> {
    let hidden = Bytes::from_static(b"(redacted)");
    let name = args.first().map_or(&b""[..], |name| &name[..]);
    if name.eq_ignore_ascii_case(b"auth") {
        let mut shown = args.to_vec();
        shown[1..].fill(hidden);
        return Cow::Owned(shown);
    }
    let config_set = name.eq_ignore_ascii_case(b"config")
        && args
            .get(1)
            .is_some_and(|sub| sub.eq_ignore_ascii_case(b"set"));
    if config_set {
        let mut shown = args.to_vec();
        for pair in shown[2..].chunks_mut(2) {
            if let [name, value] = pair
                && crate::config::is_sensitive(name)
            {
                *value = hidden.clone();
            }
        }
        return Cow::Owned(shown);
    }
    if !name.eq_ignore_ascii_case(b"hello") {
        return Cow::Borrowed(args);
    }
    // HELLO protover [AUTH user pass] [SETNAME name], options in any order.
    let mut shown = args.to_vec();
    let mut at = 2;
    while at < shown.len() {
        let left = shown.len() - at - 1;
        if shown[at].eq_ignore_ascii_case(b"auth") && left >= 2 {
            shown[at + 1] = hidden.clone();
            shown[at + 2] = hidden.clone();
            at += 3;
        } else if shown[at].eq_ignore_ascii_case(b"setname") && left >= 1 {
            at += 2;
        } else {
            break;
        }
    }
    Cow::Owned(shown)
}

/// Redis's arity rule: positive means exactly that many arguments
/// (counting the command name), negative means at least that many.
fn check_arity(
    spec: &CommandSpec,
    parent: Option<&CommandSpec>,
    count: usize,
) -> Result<(), Reply> {
    let arity = spec.arity.unsigned_abs() as usize;
    let ok = if spec.arity >= 0 {
        count == arity
    } else {
        count >= arity
    };
    if ok {
        Ok(())
    } else {
        Err(wrong_arity(&table::full_name(parent, spec)))
    }
}

/// `ERR wrong number of arguments for 'lease.acquire' command`.
pub fn wrong_arity(full_name: &str) -> Reply {
    Reply::error(format!(
        "ERR wrong number of arguments for '{full_name}' command"
    ))
}

fn unknown_command(name: &[u8], rest: &[Bytes]) -> Reply {
    // Redis quotes the first arguments, up to about 128 bytes of them.
    let mut quoted = String::new();
    for arg in rest {
        if quoted.len() >= 128 {
            break;
        }
        let room = 128 - quoted.len();
        let text = String::from_utf8_lossy(&arg[..arg.len().min(room)]);
        quoted.push_str(&format!("'{text}' "));
    }
    Reply::error(format!(
        "ERR unknown command '{}', with args beginning with: {quoted}",
        truncated(name)
    ))
}

/// At most 128 bytes of a name, for error messages.
pub(crate) fn truncated(name: &[u8]) -> String {
    String::from_utf8_lossy(&name[..name.len().min(128)]).into_owned()
}

#[cfg(test)]
mod tests;
