//! What the command table says about itself: `COMMAND INFO`, `COMMAND
//! DOCS`, `COMMAND COUNT|LIST`, and the syntax lines of `docs/commands.md`.
//!
//! The reply shapes are Redis 7's to the letter: `redis-cli` 7.0 reads
//! `COMMAND DOCS` to show argument hints and aborts on small deviations.

use bytes::Bytes;

use super::table::{self, Arg, ArgKind, COMMANDS, CommandSpec};
use crate::reply::Reply;

/// Every command and subcommand, as `(parent, spec)`.
fn all_specs() -> impl Iterator<Item = (Option<&'static CommandSpec>, &'static CommandSpec)> {
    COMMANDS.iter().flat_map(|spec| {
        std::iter::once((None, spec))
            .chain(spec.subcommands.iter().map(move |sub| (Some(spec), sub)))
    })
}

/// `COMMAND COUNT`: top-level commands, as Redis counts them.
pub fn count() -> Reply {
    Reply::Int(COMMANDS.len() as i64)
}

/// `COMMAND LIST`: every command and subcommand name.
pub fn list() -> Reply {
    Reply::Array(
        all_specs()
            .map(|(parent, spec)| Reply::bulk(table::full_name(parent, spec)))
            .collect(),
    )
}

/// `COMMAND` and `COMMAND INFO [name ...]`; unknown names give null.
pub fn info(names: Option<&[Bytes]>) -> Reply {
    match names {
        None => Reply::Array(COMMANDS.iter().map(|spec| info_entry(None, spec)).collect()),
        Some(names) => Reply::Array(
            names
                .iter()
                .map(|name| match find(name) {
                    Some((parent, spec)) => info_entry(parent, spec),
                    None => Reply::Null,
                })
                .collect(),
        ),
    }
}

/// `COMMAND DOCS [name ...]`: a map from name to docs; unknown names are
/// left out. With no names, every command.
pub fn docs(names: &[Bytes]) -> Reply {
    let entries: Vec<_> = if names.is_empty() {
        COMMANDS.iter().map(|spec| (None, spec)).collect()
    } else {
        names.iter().filter_map(|name| find(name)).collect()
    };
    Reply::Map(
        entries
            .into_iter()
            .map(|(parent, spec)| (Reply::bulk(table::full_name(parent, spec)), doc_entry(spec)))
            .collect(),
    )
}

/// A command by name, or a subcommand by `parent|sub`.
fn find(name: &[u8]) -> Option<(Option<&'static CommandSpec>, &'static CommandSpec)> {
    match name.iter().position(|&b| b == b'|') {
        None => table::lookup(COMMANDS, name).map(|spec| (None, spec)),
        Some(bar) => {
            let parent = table::lookup(COMMANDS, &name[..bar])?;
            let sub = table::lookup(parent.subcommands, &name[bar + 1..])?;
            Some((Some(parent), sub))
        }
    }
}

fn statuses(words: &'static [&'static str]) -> Reply {
    Reply::Set(words.iter().map(|word| Reply::Status(word)).collect())
}

/// `[name, arity, flags, first_key, last_key, step, acl_categories, tips,
/// key_specs, subcommands]`. The keys are the lease commands' first
/// argument (a run or a lease id) and the keyspace view's runs; no key
/// specs are given (cluster clients read the legacy positions). Redis sends the last three as
/// sets in RESP3; so do we.
fn info_entry(parent: Option<&CommandSpec>, spec: &'static CommandSpec) -> Reply {
    let (first, last, step) = key_positions(parent, spec);
    Reply::Array(vec![
        Reply::bulk(table::full_name(parent, spec)),
        Reply::Int(i64::from(spec.arity)),
        Reply::Set(spec.flags.names().map(Reply::Status).collect()),
        Reply::Int(first),
        Reply::Int(last),
        Reply::Int(step),
        statuses(spec.acl_categories),
        Reply::Set(Vec::new()),
        Reply::Set(Vec::new()),
        Reply::Set(
            spec.subcommands
                .iter()
                .map(|sub| info_entry(Some(spec), sub))
                .collect(),
        ),
    ])
}

/// Redis's legacy key positions, `(first_key, last_key, step)`, read off
/// the arguments: the first key argument's word (the name, and a
/// subcommand's word, come before it), to the last word when it repeats.
/// None when no argument is a key, or one before it may be left out or
/// repeat (the key's place would vary).
pub(crate) fn key_positions(parent: Option<&CommandSpec>, spec: &CommandSpec) -> (i64, i64, i64) {
    let Some(at) = spec.args.iter().position(|arg| arg.kind == ArgKind::Key) else {
        return (0, 0, 0);
    };
    if spec.args[..at]
        .iter()
        .any(|arg| arg.optional || arg.multiple)
    {
        return (0, 0, 0);
    }
    let words_before = if parent.is_some() { 2 } else { 1 };
    let first = (at + words_before) as i64;
    let last = if spec.args[at].multiple { -1 } else { first };
    (first, last, 1)
}

fn field(name: &'static str, value: Reply) -> (Reply, Reply) {
    (Reply::text(name), value)
}

fn doc_entry(spec: &'static CommandSpec) -> Reply {
    let mut fields = vec![
        field("summary", Reply::text(spec.summary)),
        field("since", Reply::text(table::SINCE)),
        field("group", Reply::text(spec.group)),
        field("complexity", Reply::text(spec.complexity)),
    ];
    if !spec.args.is_empty() {
        fields.push(field("arguments", arg_docs(spec.args)));
    }
    if !spec.subcommands.is_empty() {
        let subs = spec
            .subcommands
            .iter()
            .map(|sub| {
                (
                    Reply::bulk(table::full_name(Some(spec), sub)),
                    doc_entry(sub),
                )
            })
            .collect();
        fields.push(field("subcommands", Reply::Map(subs)));
    }
    Reply::Map(fields)
}

fn arg_docs(args: &'static [Arg]) -> Reply {
    Reply::Array(args.iter().map(arg_doc).collect())
}

fn arg_doc(arg: &'static Arg) -> Reply {
    let mut fields = vec![
        field("name", Reply::text(arg.name)),
        field("type", Reply::text(arg.kind.name())),
    ];
    if let Some(token) = arg.token {
        fields.push(field("token", Reply::text(token)));
    }
    let mut flags = Vec::new();
    if arg.optional {
        flags.push(Reply::Status("optional"));
    }
    if arg.multiple {
        flags.push(Reply::Status("multiple"));
    }
    if !flags.is_empty() {
        fields.push(field("flags", Reply::Set(flags)));
    }
    if matches!(arg.kind, ArgKind::OneOf | ArgKind::Block) {
        fields.push(field("arguments", arg_docs(arg.args)));
    }
    Reply::Map(fields)
}

/// The usage line of a command, e.g.
/// `LEASE.ACQUIRE run worker [now] [TTL seconds]`.
pub fn syntax(parent: Option<&CommandSpec>, spec: &CommandSpec) -> String {
    let mut words = Vec::new();
    if let Some(parent) = parent {
        words.push(parent.name.to_ascii_uppercase());
    }
    words.push(spec.name.to_ascii_uppercase());
    words.extend(spec.args.iter().map(arg_syntax));
    words.join(" ")
}

fn arg_syntax(arg: &Arg) -> String {
    let mut text = match arg.kind {
        ArgKind::PureToken => String::new(),
        ArgKind::OneOf => {
            let choices: Vec<String> = arg.args.iter().map(arg_syntax).collect();
            let choices = choices.join(" | ");
            // Brackets alone show an optional choice; otherwise it needs <>.
            if arg.optional && arg.token.is_none() {
                choices
            } else {
                format!("<{choices}>")
            }
        }
        ArgKind::Block => arg
            .args
            .iter()
            .map(arg_syntax)
            .collect::<Vec<_>>()
            .join(" "),
        _ => arg.name.to_string(),
    };
    // A repeated argument repeats its value, not the word before it.
    if arg.multiple {
        text = format!("{text} [{text} ...]");
    }
    let text = match (arg.token, text.is_empty()) {
        (Some(token), true) => token.to_string(),
        (Some(token), false) => format!("{token} {text}"),
        (None, _) => text,
    };
    if arg.optional {
        format!("[{text}]")
    } else {
        text
    }
}

/// Every command's name as the reference's heading gives it (`CLIENT
/// KILL`) and its usage line, for the documentation check. A container
/// has no entry of its own unless it runs bare (`COMMAND`).
pub fn reference_entries() -> Vec<(String, String)> {
    all_specs()
        .filter(|(_, spec)| spec.subcommands.is_empty() || spec.arity == -1)
        .map(|(parent, spec)| {
            let heading = table::full_name(parent, spec)
                .replace('|', " ")
                .to_ascii_uppercase();
            (heading, syntax(parent, spec))
        })
        .collect()
}
