//! Typed commands, parsed from a request's arguments.
//!
//! [`parse`] finds the command in the [command table](table), checks its
//! arity there (one rule, one error message for all), then runs the
//! command's own parse step, which turns the arguments into a [`Command`]
//! or a Redis-worded error. Lease commands become a [`LeaseCommand`] for
//! the core; the rest are answered by the connection.

pub mod docs;
pub mod table;

use std::borrow::Cow;

use bytes::Bytes;

use crate::number::{parse_finite_f64, parse_i64};
use crate::reply::{Protocol, Reply};
use table::CommandSpec;

/// A command for the core task, which owns the registry. `None` for `now`
/// means "the server's clock".
#[derive(Clone, Debug, PartialEq)]
pub enum LeaseCommand {
    Acquire {
        run_id: Bytes,
        worker_id: Bytes,
        now: Option<f64>,
        ttl: Option<f64>,
    },
    Heartbeat {
        lease_id: Bytes,
        token: u64,
        now: Option<f64>,
    },
    Validate {
        run_id: Bytes,
        lease_id: Bytes,
        token: u64,
        now: Option<f64>,
    },
    Release {
        lease_id: Bytes,
        token: u64,
    },
    Get {
        run_id: Bytes,
        now: Option<f64>,
    },
    /// `LEASE.SCAN`: the run ids of up to about `count` leases from slot
    /// `cursor` on, those matching `pattern` if given.
    Scan {
        cursor: u64,
        pattern: Option<Bytes>,
        count: usize,
    },
    DbSize,
    /// INFO: the core renders it, as it holds the registry's figures.
    Info {
        sections: Vec<Bytes>,
    },
    /// BGREWRITEAOF: compact the append-only log.
    RewriteLog,
}

impl LeaseCommand {
    /// Whether the command may change leases (as opposed to only moving
    /// registry time forward): such commands are refused while the log
    /// cannot be written.
    pub fn changes_state(&self) -> bool {
        matches!(
            self,
            LeaseCommand::Acquire { .. }
                | LeaseCommand::Heartbeat { .. }
                | LeaseCommand::Release { .. }
        )
    }

    /// The error for a run or worker id longer than `max` bytes, if any.
    /// Lease ids are not checked: one longer than any id could make is
    /// simply not found.
    pub fn check_id_len(&self, max: usize) -> Result<(), Reply> {
        let (run_id, worker_id) = match self {
            LeaseCommand::Acquire {
                run_id, worker_id, ..
            } => (run_id, Some(worker_id)),
            LeaseCommand::Validate { run_id, .. } | LeaseCommand::Get { run_id, .. } => {
                (run_id, None)
            }
            _ => return Ok(()),
        };
        let too_long = |what: &str| {
            Reply::error(format!(
                "ERR {what} id is longer than {max} bytes (lease-max-id-len)"
            ))
        };
        if run_id.len() > max {
            return Err(too_long("run"));
        }
        if worker_id.is_some_and(|id| id.len() > max) {
            return Err(too_long("worker"));
        }
        Ok(())
    }
}

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
    /// `TYPE master|replica|pubsub` matches nobody: every client is normal.
    pub nobody: bool,
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

/// Filters of `CLIENT LIST`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientFilter {
    All,
    /// `TYPE normal|master|replica|pubsub`: every client here is normal.
    NormalOnly(bool),
    Ids(Vec<u64>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Lease(LeaseCommand),
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
    Time,
    Shutdown,
}

/// Parses one request. The error is the reply to send instead. The
/// arguments are borrowed (the command takes cheap clones of the ones it
/// keeps), so the connection still has them for `SLOWLOG`.
pub fn parse(args: &[Bytes]) -> Result<Command, Reply> {
    let mut args = Args::new(args);
    let name = args
        .next()
        .expect("the decoder never yields an empty request");
    let Some(spec) = table::lookup(table::COMMANDS, &name) else {
        return Err(unknown_command(&name, args.rest()));
    };
    check_arity(spec, None, args.len() + 1)?;
    // A container run bare (only `COMMAND` allows it) has its own parse step.
    let Some(sub_name) = spec.subcommands.first().and_then(|_| args.next()) else {
        return (spec.parse)(&mut args);
    };
    let Some(sub) = table::lookup(spec.subcommands, &sub_name) else {
        return Err(Reply::error(format!(
            "ERR unknown subcommand '{}'. Try {} HELP.",
            truncated(&sub_name),
            spec.name.to_ascii_uppercase()
        )));
    };
    check_arity(sub, Some(spec), args.len() + 2)?;
    (sub.parse)(&mut args)
}

/// The command a request names (a subcommand where it has one), known or
/// not to the table; for `CLIENT LIST`'s `cmd=`.
#[derive(Clone, Copy, Debug)]
pub struct CommandName {
    parent: Option<&'static CommandSpec>,
    spec: &'static CommandSpec,
}

impl CommandName {
    /// Whether the command is an administrative one, which `MONITOR` does
    /// not show (as in Redis: they may carry secrets or be noisy).
    pub fn is_admin(&self) -> bool {
        let admin = |spec: &CommandSpec| spec.flags.contains(&"admin");
        admin(self.spec) || self.parent.is_some_and(admin)
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

/// What `MONITOR` and `SLOWLOG` show of a request: the password of `AUTH`
/// and the credentials of `HELLO ... AUTH` read `(redacted)`, as in Redis.
pub fn redacted(args: &[Bytes]) -> Cow<'_, [Bytes]> {
    let hidden = Bytes::from_static(b"(redacted)");
    let name = args.first().map_or(&b""[..], |name| &name[..]);
    if name.eq_ignore_ascii_case(b"auth") {
        let mut shown = args.to_vec();
        shown[1..].fill(hidden);
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
fn truncated(name: &[u8]) -> String {
    String::from_utf8_lossy(&name[..name.len().min(128)]).into_owned()
}

pub fn syntax_error() -> Reply {
    Reply::error("ERR syntax error")
}

fn not_a_float() -> Reply {
    Reply::error("ERR value is not a valid float")
}

fn not_an_integer() -> Reply {
    Reply::error("ERR value is not an integer or out of range")
}

/// The arguments of one request after its name, consumed front to back.
/// Arity was checked against the table before a parse step runs, so the
/// required arguments are there.
pub struct Args<'a> {
    items: std::slice::Iter<'a, Bytes>,
}

impl<'a> Args<'a> {
    fn new(items: &'a [Bytes]) -> Args<'a> {
        Args {
            items: items.iter(),
        }
    }

    /// The next argument: a view of the request's bytes, not a copy.
    fn next(&mut self) -> Option<Bytes> {
        self.items.next().cloned()
    }

    /// The next argument, which the command's arity guarantees.
    fn required(&mut self) -> Bytes {
        self.next().expect("arity checked against the table")
    }

    fn len(&self) -> usize {
        self.items.len()
    }

    fn rest(&self) -> &[Bytes] {
        self.items.as_slice()
    }

    fn take_rest(&mut self) -> Vec<Bytes> {
        self.items.by_ref().cloned().collect()
    }

    /// Fails with the arity error when arguments remain: for commands
    /// whose optional arguments are positional.
    fn finish(&self, full_name: &str) -> Result<(), Reply> {
        if self.items.len() == 0 {
            Ok(())
        } else {
            Err(wrong_arity(full_name))
        }
    }
}

/// A finite `now` or TTL.
fn float_arg(arg: &[u8]) -> Result<f64, Reply> {
    parse_finite_f64(arg).ok_or_else(not_a_float)
}

/// A fencing token: a positive integer up to 2^63-1.
fn token_arg(arg: &[u8]) -> Result<u64, Reply> {
    match parse_i64(arg) {
        None => Err(not_an_integer()),
        Some(token) if token <= 0 => {
            Err(Reply::error("ERR value is out of range, must be positive"))
        }
        Some(token) => Ok(token as u64),
    }
}

/// An optional trailing `now`.
fn optional_now(args: &mut Args, full_name: &str) -> Result<Option<f64>, Reply> {
    let now = args.next().map(|arg| float_arg(&arg)).transpose()?;
    args.finish(full_name)?;
    Ok(now)
}

/// `LEASE.ACQUIRE run worker [now] [TTL seconds]`
fn parse_acquire(args: &mut Args) -> Result<Command, Reply> {
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
    Ok(Command::Lease(LeaseCommand::Acquire {
        run_id,
        worker_id,
        now,
        ttl,
    }))
}

/// `LEASE.HEARTBEAT lease_id token [now]`
fn parse_heartbeat(args: &mut Args) -> Result<Command, Reply> {
    let lease_id = args.required();
    let token = token_arg(&args.required())?;
    let now = optional_now(args, "lease.heartbeat")?;
    Ok(Command::Lease(LeaseCommand::Heartbeat {
        lease_id,
        token,
        now,
    }))
}

/// `LEASE.VALIDATE run lease_id token [now]`
fn parse_validate(args: &mut Args) -> Result<Command, Reply> {
    let run_id = args.required();
    let lease_id = args.required();
    let token = token_arg(&args.required())?;
    let now = optional_now(args, "lease.validate")?;
    Ok(Command::Lease(LeaseCommand::Validate {
        run_id,
        lease_id,
        token,
        now,
    }))
}

/// `LEASE.RELEASE lease_id token`
fn parse_release(args: &mut Args) -> Result<Command, Reply> {
    let lease_id = args.required();
    let token = token_arg(&args.required())?;
    Ok(Command::Lease(LeaseCommand::Release { lease_id, token }))
}

/// `LEASE.GET run [now]`
fn parse_get(args: &mut Args) -> Result<Command, Reply> {
    let run_id = args.required();
    let now = optional_now(args, "lease.get")?;
    Ok(Command::Lease(LeaseCommand::Get { run_id, now }))
}

/// `LEASE.SCAN cursor [MATCH pattern] [COUNT count]`, parsed as Redis
/// parses `SCAN`'s options: either may repeat, the last one wins.
fn parse_scan(args: &mut Args) -> Result<Command, Reply> {
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
    Ok(Command::Lease(LeaseCommand::Scan {
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

fn parse_dbsize(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Lease(LeaseCommand::DbSize))
}

fn parse_bgrewriteaof(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Lease(LeaseCommand::RewriteLog))
}

fn parse_info(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Lease(LeaseCommand::Info {
        sections: args.take_rest(),
    }))
}

fn parse_ping(args: &mut Args) -> Result<Command, Reply> {
    let message = args.next();
    args.finish("ping")?;
    Ok(Command::Ping(message))
}

fn parse_echo(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Echo(args.required()))
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`
fn parse_hello(args: &mut Args) -> Result<Command, Reply> {
    let protocol = match args.next() {
        None => None,
        Some(version) => Some(match parse_i64(&version) {
            None => {
                return Err(Reply::error(
                    "ERR Protocol version is not an integer or out of range",
                ));
            }
            Some(2) => Protocol::Resp2,
            Some(3) => Protocol::Resp3,
            Some(_) => return Err(Reply::error("NOPROTO unsupported protocol version")),
        }),
    };
    let mut auth = None;
    let mut set_name = None;
    while let Some(option) = args.next() {
        if option.eq_ignore_ascii_case(b"auth") && args.len() >= 2 {
            auth = Some((args.required(), args.required()));
        } else if option.eq_ignore_ascii_case(b"setname") && args.len() >= 1 {
            set_name = Some(args.required());
        } else {
            return Err(Reply::error(format!(
                "ERR Syntax error in HELLO option '{}'",
                truncated(&option)
            )));
        }
    }
    Ok(Command::Hello {
        protocol,
        auth,
        set_name,
    })
}

/// `AUTH [username] password`
fn parse_auth(args: &mut Args) -> Result<Command, Reply> {
    match args.len() {
        1 => Ok(Command::Auth {
            username: None,
            password: args.required(),
        }),
        2 => Ok(Command::Auth {
            username: Some(args.required()),
            password: args.required(),
        }),
        _ => Err(syntax_error()),
    }
}

fn parse_quit(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Quit)
}

fn parse_reset(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Reset)
}

/// `SELECT index`: there is one database, number 0.
fn parse_select(args: &mut Args) -> Result<Command, Reply> {
    match parse_i64(&args.required()) {
        None => Err(not_an_integer()),
        Some(0) => Ok(Command::Select),
        Some(_) => Err(Reply::error("ERR DB index is out of range")),
    }
}

fn parse_time(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Time)
}

/// `SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]`: the log is always
/// flushed, so the save modifiers change nothing here.
fn parse_shutdown(args: &mut Args) -> Result<Command, Reply> {
    for option in args.take_rest() {
        let known = [&b"nosave"[..], b"save", b"now", b"force"]
            .iter()
            .any(|word| option.eq_ignore_ascii_case(word));
        if option.eq_ignore_ascii_case(b"abort") {
            return Err(Reply::error("ERR No shutdown in progress."));
        }
        if !known {
            return Err(syntax_error());
        }
    }
    Ok(Command::Shutdown)
}

fn parse_client_setname(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::ClientSetName(args.required()))
}

fn parse_client_getname(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::ClientGetName)
}

fn parse_client_id(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::ClientId)
}

fn parse_client_info(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::ClientInfo)
}

/// `CLIENT SETINFO LIB-NAME|LIB-VER value`
fn parse_client_setinfo(args: &mut Args) -> Result<Command, Reply> {
    let attr = args.required();
    let value = args.required();
    let attr = if attr.eq_ignore_ascii_case(b"lib-name") {
        ClientAttr::LibName
    } else if attr.eq_ignore_ascii_case(b"lib-ver") {
        ClientAttr::LibVer
    } else {
        return Err(Reply::error(format!(
            "ERR Unrecognized option '{}'",
            truncated(&attr)
        )));
    };
    Ok(Command::ClientSetInfo(attr, value))
}

/// `CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id [id ...]]`
fn parse_client_list(args: &mut Args) -> Result<Command, Reply> {
    let Some(option) = args.next() else {
        return Ok(Command::ClientList(ClientFilter::All));
    };
    if option.eq_ignore_ascii_case(b"type") && args.len() == 1 {
        let normal = client_type_is_normal(&args.required())?;
        return Ok(Command::ClientList(ClientFilter::NormalOnly(normal)));
    }
    if option.eq_ignore_ascii_case(b"id") && args.len() >= 1 {
        let mut ids = Vec::with_capacity(args.len());
        for id in args.take_rest() {
            match parse_i64(&id) {
                Some(id) if id > 0 => ids.push(id as u64),
                _ => return Err(Reply::error("ERR Invalid client ID")),
            }
        }
        return Ok(Command::ClientList(ClientFilter::Ids(ids)));
    }
    Err(syntax_error())
}

/// `CLIENT KILL addr`, or `CLIENT KILL <filter value> ...` with the
/// filters `ID`, `ADDR`, `LADDR`, `USER`, `TYPE`, `SKIPME` and `MAXAGE`.
fn parse_client_kill(args: &mut Args) -> Result<Command, Reply> {
    if args.len() == 1 {
        return Ok(Command::ClientKill(KillFilter {
            legacy: true,
            addr: Some(args.required()),
            ..KillFilter::default()
        }));
    }
    let mut filter = KillFilter {
        skip_me: true,
        ..KillFilter::default()
    };
    while let Some(option) = args.next() {
        let Some(value) = args.next() else {
            return Err(syntax_error());
        };
        let option = option.to_ascii_lowercase();
        match &option[..] {
            b"id" => match parse_i64(&value) {
                Some(id) if id > 0 => filter.id = Some(id as u64),
                _ => return Err(Reply::error("ERR client-id should be greater than 0")),
            },
            b"addr" => filter.addr = Some(value),
            b"laddr" => filter.laddr = Some(value),
            b"user" if &value[..] == b"default" => {}
            b"user" => {
                return Err(Reply::error(format!(
                    "ERR No such user '{}'",
                    truncated(&value)
                )));
            }
            b"type" => filter.nobody |= !client_type_is_normal(&value)?,
            b"skipme" if value.eq_ignore_ascii_case(b"yes") => filter.skip_me = true,
            b"skipme" if value.eq_ignore_ascii_case(b"no") => filter.skip_me = false,
            b"maxage" => match parse_i64(&value) {
                Some(age) if age >= 0 => filter.max_age = Some(age as u64),
                _ => return Err(not_an_integer()),
            },
            _ => return Err(syntax_error()),
        }
    }
    Ok(Command::ClientKill(filter))
}

/// Whether a `TYPE` argument names normal clients, the only kind here;
/// an error for a name Redis does not know.
fn client_type_is_normal(kind: &[u8]) -> Result<bool, Reply> {
    if kind.eq_ignore_ascii_case(b"normal") {
        return Ok(true);
    }
    let known = [&b"master"[..], b"replica", b"slave", b"pubsub"]
        .iter()
        .any(|word| kind.eq_ignore_ascii_case(word));
    if known {
        Ok(false)
    } else {
        Err(Reply::error(format!(
            "ERR Unknown client type '{}'",
            truncated(kind)
        )))
    }
}

fn parse_monitor(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Monitor)
}

/// `SLOWLOG GET [count]`: 10 entries by default, all of them for -1.
fn parse_slowlog_get(args: &mut Args) -> Result<Command, Reply> {
    let count = match args.next() {
        None => Some(10),
        Some(count) => match parse_i64(&count) {
            None => return Err(not_an_integer()),
            Some(-1) => None,
            Some(n) if n < -1 => {
                return Err(Reply::error(
                    "ERR count should be greater than or equal to -1",
                ));
            }
            Some(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        },
    };
    Ok(Command::Slowlog(SlowlogCommand::Get(count)))
}

fn parse_slowlog_len(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Slowlog(SlowlogCommand::Len))
}

fn parse_slowlog_reset(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Slowlog(SlowlogCommand::Reset))
}

fn parse_slowlog_help(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Help(table::SLOWLOG_HELP))
}

fn parse_command_all(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::CommandInfo(None))
}

fn parse_command_info(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::CommandInfo(Some(args.take_rest())))
}

fn parse_command_count(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::CommandCount)
}

fn parse_command_docs(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::CommandDocs(args.take_rest()))
}

fn parse_command_list(args: &mut Args) -> Result<Command, Reply> {
    // FILTERBY narrows by module, ACL category or pattern; none applies here.
    if args.len() > 0 {
        return Err(syntax_error());
    }
    Ok(Command::CommandList)
}

fn parse_config_get(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::ConfigGet(args.take_rest()))
}

fn parse_client_help(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Help(table::CLIENT_HELP))
}

fn parse_command_help(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Help(table::COMMAND_HELP))
}

fn parse_config_help(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Help(table::CONFIG_HELP))
}

#[cfg(test)]
mod tests;
