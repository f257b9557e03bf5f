//! `CONFIG SET name value [name value ...]`, as Redis 7 does it: all or
//! nothing. The names are checked first (known, settable while running,
//! given once) and the first that fails is the error; then the values are
//! applied, in order, to a copy of the configuration, through the same
//! setters as the file. The copy is returned only if every value was taken,
//! so a refused value leaves nothing half-changed and there is nothing to
//! roll back. Rules between directives (`lease-lock-delay` at most
//! `lease-max-lock-delay`) are checked on the copy once every value is in.

use std::fmt;

use super::directives::{Directive, READ_ONLY, check_together, lookup, utf8_args};
use super::{Config, DirectiveError};
use crate::splitargs::split_args;

/// Why `CONFIG SET` changed nothing. `Display` gives Redis's message, the
/// part after `ERR `.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetError {
    /// An odd number of arguments after `CONFIG SET`.
    Syntax,
    /// No directive has this name (the first such, as the client wrote it).
    Unknown { name: String },
    /// The directive `name` was refused: as the client wrote it when it
    /// cannot change at run time or was given twice, the directive's own
    /// name when its value was refused (as Redis names them).
    Failed { name: String, error: DirectiveError },
}

impl fmt::Display for SetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetError::Syntax => f.write_str("syntax error"),
            SetError::Unknown { name } => write!(
                f,
                "Unknown option or number of arguments for CONFIG SET - '{name}'"
            ),
            SetError::Failed { name, error } => write!(
                f,
                "CONFIG SET failed (possibly related to argument '{name}') - {error}"
            ),
        }
    }
}

impl std::error::Error for SetError {}

/// Whether the value of the directive `name` (any case) is a secret, so
/// that `CONFIG SET name value` must be redacted before it reaches a log,
/// the slow log or `MONITOR`. Redis redacts it even when the command fails.
pub fn is_sensitive(name: &[u8]) -> bool {
    find(name).is_some_and(Directive::is_sensitive)
}

impl Config {
    /// `CONFIG SET` of `(name, value)` pairs: the configuration with every
    /// value set, or why none was. `self` is never changed.
    ///
    /// A directive of one argument takes the value whole, spaces included
    /// (`requirepass "a b"`); one of several (`client-output-buffer-limit
    /// "normal 1gb 256mb 30"`) takes the value's words, quoted as in the
    /// file. An empty value is one empty argument, so `requirepass ""`
    /// removes the password.
    pub fn set(&self, pairs: &[(&[u8], &[u8])]) -> Result<Config, SetError> {
        let directives = check_names(pairs)?;
        let mut config = self.clone();
        for (directive, (_, value)) in directives.into_iter().zip(pairs) {
            value_args(directive, value)
                .and_then(|args| directive.apply(&mut config, &args))
                .map_err(|error| SetError::Failed {
                    name: directive.name.to_owned(),
                    error,
                })?;
        }
        // After all the values, so that `lease-lock-delay 90
        // lease-max-lock-delay 120` is not refused for its first pair.
        check_together(&config).map_err(|(name, error)| SetError::Failed {
            name: name.to_owned(),
            error,
        })?;
        Ok(config)
    }

    /// [`Config::set`] of the arguments after `CONFIG SET`, which must come
    /// in pairs.
    pub fn set_args<A: AsRef<[u8]>>(&self, args: &[A]) -> Result<Config, SetError> {
        let (pairs, []) = args.as_chunks::<2>() else {
            return Err(SetError::Syntax);
        };
        let pairs: Vec<(&[u8], &[u8])> = pairs
            .iter()
            .map(|[name, value]| (name.as_ref(), value.as_ref()))
            .collect();
        self.set(&pairs)
    }
}

/// The settable directive called `name`, in any case.
fn find(name: &[u8]) -> Option<&'static Directive> {
    std::str::from_utf8(name).ok().and_then(lookup)
}

fn is_read_only(name: &[u8]) -> bool {
    READ_ONLY
        .iter()
        .any(|(read_only, _)| read_only.as_bytes().eq_ignore_ascii_case(name))
}

/// Redis's first pass: each name must be known, changeable at run time and
/// not given before. The first name that is not decides the error.
fn check_names(pairs: &[(&[u8], &[u8])]) -> Result<Vec<&'static Directive>, SetError> {
    let mut found: Vec<&'static Directive> = Vec::with_capacity(pairs.len());
    for (name, _) in pairs {
        let failed = |error| SetError::Failed {
            name: String::from_utf8_lossy(name).into_owned(),
            error,
        };
        let Some(directive) = find(name) else {
            if is_read_only(name) {
                return Err(failed(DirectiveError::Immutable));
            }
            let name = String::from_utf8_lossy(name).into_owned();
            return Err(SetError::Unknown { name });
        };
        if !directive.is_mutable() {
            return Err(failed(DirectiveError::Immutable));
        }
        if found.iter().any(|seen| seen.name == directive.name) {
            return Err(failed(DirectiveError::Duplicate));
        }
        found.push(directive);
    }
    Ok(found)
}

/// The arguments a `CONFIG SET` value stands for (see [`Config::set`]).
fn value_args(directive: &Directive, value: &[u8]) -> Result<Vec<String>, DirectiveError> {
    let args = if directive.takes_words() && !value.is_empty() {
        split_args(value).ok_or(DirectiveError::UnbalancedQuotes)?
    } else {
        vec![value.to_vec()]
    };
    utf8_args(args)
}
