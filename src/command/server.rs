//! The parse steps of the commands the connection answers itself or
//! passes to the core as admin work: connection, client, server and
//! configuration commands.

use super::args::{Args, not_an_integer, syntax_error};
use super::{
    ClientAttr, ClientFilter, ClientKind, ClusterChange, ClusterView, Command, KillFilter,
    SlowlogCommand, help, truncated,
};
use crate::number::parse_i64;
use crate::reply::{Protocol, Reply};

pub fn parse_bgrewriteaof(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::RewriteLog)
}

/// `BGSAVE [SCHEDULE]`: SCHEDULE changes nothing (nothing else runs in
/// the background that would make a save wait).
pub fn parse_bgsave(args: &mut Args) -> Result<Command, Reply> {
    let options = args.take_rest();
    match &options[..] {
        [] => Ok(Command::Save),
        [option] if option.eq_ignore_ascii_case(b"schedule") => Ok(Command::Save),
        _ => Err(syntax_error()),
    }
}

pub fn parse_sync(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Sync)
}

/// `REPLCONF option value [option value ...]`: the options a replica (or
/// `redis-cli --rdb`) sends before `SYNC`. Nothing is configured by them:
/// `SYNC` always sends the snapshot file alone and closes.
pub fn parse_replconf(args: &mut Args) -> Result<Command, Reply> {
    let pairs = args.take_rest();
    if !pairs.len().is_multiple_of(2) {
        return Err(syntax_error());
    }
    let known = [&b"listening-port"[..], b"ip-address", b"capa", b"rdb-only"];
    let unknown = (pairs.iter().step_by(2))
        .find(|option| !known.iter().any(|known| option.eq_ignore_ascii_case(known)));
    Ok(Command::Replconf(match unknown {
        Some(option) => Err(option.clone()),
        None => Ok(()),
    }))
}

pub fn parse_lastsave(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::LastSave)
}

pub fn parse_info(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Info(args.take_rest()))
}

pub fn parse_ping(args: &mut Args) -> Result<Command, Reply> {
    let message = args.next();
    args.finish("ping")?;
    Ok(Command::Ping(message))
}

pub fn parse_echo(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Echo(args.required()))
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`
pub fn parse_hello(args: &mut Args) -> Result<Command, Reply> {
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
pub fn parse_auth(args: &mut Args) -> Result<Command, Reply> {
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

pub fn parse_quit(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Quit)
}

pub fn parse_reset(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Reset)
}

pub fn parse_multi(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Multi)
}

pub fn parse_exec(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Exec)
}

pub fn parse_discard(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Discard)
}

pub fn parse_watch(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Watch)
}

pub fn parse_unwatch(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Unwatch)
}

/// `SELECT index`: there is one database, number 0.
pub fn parse_select(args: &mut Args) -> Result<Command, Reply> {
    match parse_i64(&args.required()) {
        None => Err(not_an_integer()),
        Some(0) => Ok(Command::Select),
        Some(_) => Err(Reply::error("ERR DB index is out of range")),
    }
}

pub fn parse_time(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Time)
}

/// `SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]`: the log is always
/// flushed, so the save modifiers change nothing here.
pub fn parse_shutdown(args: &mut Args) -> Result<Command, Reply> {
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

pub fn parse_client_setname(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::ClientSetName(args.required()))
}

pub fn parse_client_getname(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::ClientGetName)
}

pub fn parse_client_id(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::ClientId)
}

pub fn parse_client_info(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::ClientInfo)
}

/// `CLIENT SETINFO LIB-NAME|LIB-VER value`
pub fn parse_client_setinfo(args: &mut Args) -> Result<Command, Reply> {
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
pub fn parse_client_list(args: &mut Args) -> Result<Command, Reply> {
    let Some(option) = args.next() else {
        return Ok(Command::ClientList(ClientFilter::All));
    };
    if option.eq_ignore_ascii_case(b"type") && args.len() == 1 {
        let kind = client_kind(&args.required())?;
        return Ok(Command::ClientList(ClientFilter::OfKind(kind)));
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
pub fn parse_client_kill(args: &mut Args) -> Result<Command, Reply> {
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
            b"type" => filter.kind = Some(client_kind(&value)?),
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

/// The client type a `TYPE` argument names; an error for a name Redis
/// does not know.
fn client_kind(kind: &[u8]) -> Result<ClientKind, Reply> {
    let is = |word: &[u8]| kind.eq_ignore_ascii_case(word);
    if is(b"normal") {
        Ok(ClientKind::Normal)
    } else if is(b"pubsub") {
        Ok(ClientKind::PubSub)
    } else if is(b"master") || is(b"replica") || is(b"slave") {
        Ok(ClientKind::Replication)
    } else {
        Err(Reply::error(format!(
            "ERR Unknown client type '{}'",
            truncated(kind)
        )))
    }
}

/// `CLIENT UNBLOCK client-id [TIMEOUT|ERROR]`, checked in Redis's order:
/// the reason first, then the id.
pub fn parse_client_unblock(args: &mut Args) -> Result<Command, Reply> {
    if args.len() > 2 {
        // Redis's table allows more words; its handler then refuses them.
        return Err(Reply::error(
            "ERR unknown subcommand or wrong number of arguments for 'unblock'. Try CLIENT HELP.",
        ));
    }
    let id = args.required();
    let error = match args.next() {
        None => false,
        Some(reason) if reason.eq_ignore_ascii_case(b"timeout") => false,
        Some(reason) if reason.eq_ignore_ascii_case(b"error") => true,
        Some(_) => {
            return Err(Reply::error(
                "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR",
            ));
        }
    };
    let id = parse_i64(&id).ok_or_else(not_an_integer)?;
    // No client has an id below 1: such an id unblocks nobody.
    Ok(Command::ClientUnblock {
        id: u64::try_from(id).unwrap_or(0),
        error,
    })
}

pub fn parse_monitor(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Monitor)
}

/// `SLOWLOG GET [count]`: 10 entries by default, all of them for -1.
pub fn parse_slowlog_get(args: &mut Args) -> Result<Command, Reply> {
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

pub fn parse_slowlog_len(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Slowlog(SlowlogCommand::Len))
}

pub fn parse_slowlog_reset(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Slowlog(SlowlogCommand::Reset))
}

pub fn parse_slowlog_help(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Help(help::SLOWLOG_HELP))
}

pub fn parse_command_all(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::CommandInfo(None))
}

pub fn parse_command_info(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::CommandInfo(Some(args.take_rest())))
}

pub fn parse_command_count(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::CommandCount)
}

pub fn parse_command_docs(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::CommandDocs(args.take_rest()))
}

pub fn parse_command_list(args: &mut Args) -> Result<Command, Reply> {
    // FILTERBY narrows by module, ACL category or pattern; none applies here.
    if args.len() > 0 {
        return Err(syntax_error());
    }
    Ok(Command::CommandList)
}

pub fn parse_config_get(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::ConfigGet(args.take_rest()))
}

pub fn parse_client_help(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Help(help::CLIENT_HELP))
}

pub fn parse_command_help(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Help(help::COMMAND_HELP))
}

pub fn parse_config_help(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Help(help::CONFIG_HELP))
}

/// `CONFIG SET parameter value [parameter value ...]`: the pairs as given;
/// the configuration checks them all before changing anything.
pub fn parse_config_set(args: &mut Args) -> Result<Command, Reply> {
    let words = args.take_rest();
    if !words.len().is_multiple_of(2) {
        return Err(syntax_error());
    }
    let pairs = words
        .chunks(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect();
    Ok(Command::ConfigSet(pairs))
}

pub fn parse_config_resetstat(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::ConfigResetStat)
}

pub fn parse_config_rewrite(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::ConfigRewrite)
}

pub fn parse_role(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Role)
}

pub fn parse_cluster_info(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Cluster(ClusterView::Info))
}

pub fn parse_cluster_nodes(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Cluster(ClusterView::Nodes))
}

pub fn parse_cluster_slots(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Cluster(ClusterView::Slots))
}

pub fn parse_cluster_shards(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Cluster(ClusterView::Shards))
}

pub fn parse_cluster_myid(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Cluster(ClusterView::MyId))
}

/// `CLUSTER ADDNODE id host:port[@busport]`: the address is checked as a
/// `cluster-nodes` entry is (`id@host:port[@busport]`).
pub fn parse_cluster_addnode(args: &mut Args) -> Result<Command, Reply> {
    let id = node_id(&args.required())?;
    let address = String::from_utf8_lossy(&args.required()).into_owned();
    if crate::config::parse_member(&format!("{id}@{address}")).is_none() {
        return Err(Reply::error(format!(
            "ERR Invalid node address '{address}': expected host:port[@busport], the host an \
             IPv4 address, an IPv6 address in brackets or localhost"
        )));
    }
    Ok(Command::ClusterChange(ClusterChange::Add { id, address }))
}

/// `CLUSTER DELNODE id`.
pub fn parse_cluster_delnode(args: &mut Args) -> Result<Command, Reply> {
    let id = node_id(&args.required())?;
    Ok(Command::ClusterChange(ClusterChange::Remove { id }))
}

/// A node id: a positive integer.
fn node_id(arg: &[u8]) -> Result<u64, Reply> {
    std::str::from_utf8(arg)
        .ok()
        .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|text| text.parse::<u64>().ok())
        .filter(|id| *id > 0)
        .ok_or_else(|| Reply::error("ERR Invalid node id: expected a positive integer"))
}

/// Not `Command::Help` directly: a single node refuses `CLUSTER HELP` too,
/// as Redis does.
pub fn parse_cluster_help(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Cluster(ClusterView::Help))
}
