//! Typed commands, parsed from a request's arguments.
//!
//! [`parse`] finds the command in the [command table](table), checks its
//! arity there (one rule, one error message for all), then runs the
//! command's own parse step, which turns the arguments into a [`Command`]
//! or a Redis-worded error. Lease commands become a [`LeaseCommand`] for
//! the core; the rest are answered by the connection.

pub mod docs;
pub mod table;

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

/// Parses one request. The error is the reply to send instead.
pub fn parse(args: Vec<Bytes>) -> Result<Command, Reply> {
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
pub struct Args {
    items: std::vec::IntoIter<Bytes>,
}

impl Args {
    fn new(items: Vec<Bytes>) -> Args {
        Args {
            items: items.into_iter(),
        }
    }

    fn next(&mut self) -> Option<Bytes> {
        self.items.next()
    }

    /// The next argument, which the command's arity guarantees.
    fn required(&mut self) -> Bytes {
        self.items.next().expect("arity checked against the table")
    }

    fn len(&self) -> usize {
        self.items.len()
    }

    fn rest(&self) -> &[Bytes] {
        self.items.as_slice()
    }

    fn take_rest(&mut self) -> Vec<Bytes> {
        self.items.by_ref().collect()
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
        let kind = args.required();
        let normal = kind.eq_ignore_ascii_case(b"normal");
        let known = [&b"master"[..], b"replica", b"slave", b"pubsub"]
            .iter()
            .any(|word| kind.eq_ignore_ascii_case(word));
        if !normal && !known {
            return Err(Reply::error(format!(
                "ERR Unknown client type '{}'",
                truncated(&kind)
            )));
        }
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
