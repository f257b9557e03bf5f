//! Configuration: the directive table, the redis.conf-style file and the
//! `--directive value` overrides, and `CONFIG GET`.
//!
//! One table, `DIRECTIVES`, drives all of them and `--help`, so the file,
//! the command line and `CONFIG GET` cannot disagree about a directive's
//! name, default or syntax. Adding a directive is a field and a row.

use std::ffi::OsString;
use std::fmt;
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use crate::number::{parse_finite_f64, parse_i64};
use crate::splitargs::split_args;
use clap::builder::ValueRange;
use clap::{Arg, ArgMatches, Command};

use crate::aof::FsyncPolicy;
use crate::glob;

/// Redis's log levels, mapped onto `tracing` levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Verbose,
    Notice,
    Warning,
    Nothing,
}

impl LogLevel {
    const ALL: [LogLevel; 5] = [
        LogLevel::Debug,
        LogLevel::Verbose,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Nothing,
    ];

    /// The name used in the file, on the command line and by `CONFIG GET`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Verbose => "verbose",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Nothing => "nothing",
        }
    }

    /// Case-insensitive, as Redis reads its enum directives.
    fn from_name(name: &str) -> Option<LogLevel> {
        LogLevel::ALL
            .into_iter()
            .find(|level| level.as_str().eq_ignore_ascii_case(name))
    }
}

/// `logformat`: how each log line is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable: time, level, message.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// `tls-auth-clients`: whether a TLS client must present a certificate
/// signed by one of `tls-ca-cert-file`'s CAs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsAuthClients {
    /// A client without a valid certificate is refused.
    Yes,
    /// A certificate is asked for; one that is presented must be valid.
    Optional,
    /// No certificate is asked for.
    No,
}

impl TlsAuthClients {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsAuthClients::Yes => "yes",
            TlsAuthClients::Optional => "optional",
            TlsAuthClients::No => "no",
        }
    }
}

/// The server's settings, after the file and the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// TCP port; 0 picks a free one.
    pub port: u16,
    /// Addresses to listen on, already parsed so the server cannot be
    /// handed a name it would have to resolve or reject.
    pub bind: Vec<IpAddr>,
    /// Port of the Prometheus endpoint on every `bind` address; 0: off.
    pub metrics_port: u16,
    /// Data directory: the token ceiling and the lock live here.
    pub dir: PathBuf,
    /// Default lease TTL in seconds.
    pub lease_ttl: f64,
    /// Seconds an expired lease stays releasable before it is reclaimed;
    /// 0 keeps expired leases forever.
    pub lease_retention: f64,
    pub loglevel: LogLevel,
    /// Text or JSON lines.
    pub logformat: LogFormat,
    /// The file log lines are appended to; `None`: standard output.
    pub logfile: Option<PathBuf>,
    /// Whether changes go to the append-only log (leases survive restarts).
    pub appendonly: bool,
    /// The log's file name inside `dir`.
    pub appendfilename: String,
    /// When the log is fsynced.
    pub appendfsync: FsyncPolicy,
    /// Rewrite the log when it has grown by this percentage since the last
    /// rewrite (0: never automatically).
    pub auto_aof_rewrite_percentage: u64,
    /// ... and is at least this many bytes.
    pub auto_aof_rewrite_min_size: u64,
    /// Start with the good records before a corrupt one instead of refusing.
    pub aof_load_good_prefix: bool,
    /// Threads serving connections: 1 runs everything on one thread (the
    /// fastest on small machines), more a multi-thread runtime.
    pub io_threads: usize,
    /// Connections served at once; one more gets an error and is closed.
    pub maxclients: usize,
    /// The password of the `default` user; empty: no password.
    pub requirepass: String,
    /// Refuse to listen on a non-loopback address without a password.
    pub protected_mode: bool,
    /// Seconds a client may stay idle before it is closed; 0: forever.
    pub timeout: u64,
    /// Commands that run at least this many microseconds go to the slow
    /// log; 0 logs every command, a negative value none.
    pub slowlog_log_slower_than: i64,
    /// The most entries the slow log keeps.
    pub slowlog_max_len: usize,
    /// The longest bulk string (argument) a client may send.
    pub proto_max_bulk_len: usize,
    /// The most bytes of unfinished requests one client may have buffered.
    pub client_query_buffer_limit: usize,
    /// When a client that does not read its replies is disconnected.
    pub client_output_buffer_limit: OutputLimit,
    /// The longest run or worker id a lease command accepts.
    pub lease_max_id_len: usize,
    /// TLS port on every `bind` address; 0: no TLS listener.
    pub tls_port: u16,
    /// The server's certificate chain and private key (PEM), needed with
    /// a `tls_port`.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    /// The CAs (PEM bundle) that client certificates must be signed by.
    pub tls_ca_cert_file: Option<PathBuf>,
    /// Whether TLS clients must present a certificate.
    pub tls_auth_clients: TlsAuthClients,
    /// The configuration file read at start-up, if any.
    pub config_file: Option<PathBuf>,
}

/// `client-output-buffer-limit normal <hard> <soft> <soft-seconds>`: a
/// client whose unsent replies pass `hard` bytes, or stay above `soft`
/// bytes for `soft_seconds`, is disconnected. 0 turns a limit off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputLimit {
    pub hard: u64,
    pub soft: u64,
    pub soft_seconds: u64,
}

/// Why the configuration could not be loaded.
#[derive(Debug)]
pub enum ConfigError {
    /// From the command-line parser, including `--help` and `--version`,
    /// which `clap::Error::exit` prints and exits with the right code.
    Args(clap::Error),
    /// Anything else: the message names the directive (and file line).
    Invalid(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Args(e) => write!(f, "{e}"),
            ConfigError::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ConfigError {}

/// How many arguments follow a directive's name.
#[derive(Clone, Copy)]
enum Arity {
    One,
    OneOrMore,
}

impl Arity {
    fn check(self, name: &str, given: usize) -> Result<(), String> {
        let (fits, expected) = match self {
            Arity::One => (given == 1, "1"),
            Arity::OneOrMore => (given >= 1, "at least 1"),
        };
        if fits {
            Ok(())
        } else {
            Err(format!(
                "wrong number of arguments for '{name}' (expected {expected}, got {given})"
            ))
        }
    }

    fn range(self) -> ValueRange {
        match self {
            Arity::One => ValueRange::new(1),
            Arity::OneOrMore => ValueRange::new(1..),
        }
    }
}

/// One settable directive.
struct Directive {
    name: &'static str,
    /// The arguments as they would be written in the file.
    default: &'static [&'static str],
    /// Shown in `--help` as `--name <VALUE_NAME>`.
    value_name: &'static str,
    help: &'static str,
    arity: Arity,
    /// Validates the arguments (already counted) and stores them.
    set: fn(&mut Config, &[String]) -> Result<(), String>,
    /// The value as `CONFIG GET` prints it.
    show: fn(&Config) -> String,
}

/// Every settable directive, in the order `CONFIG GET` lists them.
static DIRECTIVES: &[Directive] = &[
    Directive {
        name: "port",
        default: &["6479"],
        value_name: "PORT",
        help: "TCP port to listen on; 0 picks a free one",
        arity: Arity::One,
        set: set_port,
        show: |c| c.port.to_string(),
    },
    Directive {
        name: "bind",
        default: &["127.0.0.1"],
        value_name: "ADDRESS",
        help: "IPv4 or IPv6 addresses to listen on",
        arity: Arity::OneOrMore,
        set: set_bind,
        show: show_bind,
    },
    Directive {
        name: "metrics-port",
        default: &["0"],
        value_name: "PORT",
        help: "Port of the Prometheus endpoint (GET /metrics) on every bind address; 0 turns it off",
        arity: Arity::One,
        set: set_metrics_port,
        show: |c| c.metrics_port.to_string(),
    },
    Directive {
        name: "dir",
        default: &["./data"],
        value_name: "PATH",
        help: "Data directory, relative to the working directory",
        arity: Arity::One,
        set: set_dir,
        show: |c| c.dir.display().to_string(),
    },
    Directive {
        name: "lease-ttl",
        default: &["10"],
        value_name: "SECONDS",
        help: "Default lease TTL in seconds (a finite number > 0)",
        arity: Arity::One,
        set: set_lease_ttl,
        show: |c| c.lease_ttl.to_string(),
    },
    Directive {
        name: "lease-retention",
        default: &["3600"],
        value_name: "SECONDS",
        help: "How long an expired, untaken lease stays releasable before it is reclaimed; 0 keeps it forever",
        arity: Arity::One,
        set: set_lease_retention,
        show: |c| c.lease_retention.to_string(),
    },
    Directive {
        name: "loglevel",
        default: &["notice"],
        value_name: "LEVEL",
        help: "Log verbosity: debug, verbose, notice, warning or nothing",
        arity: Arity::One,
        set: set_loglevel,
        show: |c| c.loglevel.as_str().to_owned(),
    },
    Directive {
        name: "logformat",
        default: &["text"],
        value_name: "text|json",
        help: "Log lines as human-readable text or as one JSON object per line",
        arity: Arity::One,
        set: set_logformat,
        show: |c| c.logformat.as_str().to_owned(),
    },
    Directive {
        name: "logfile",
        default: &[""],
        value_name: "PATH",
        help: "Append log lines to this file instead of standard output (empty: standard output)",
        arity: Arity::One,
        set: |c, args| set_path(&mut c.logfile, &args[0]),
        show: |c| show_path(&c.logfile),
    },
    Directive {
        name: "appendonly",
        default: &["yes"],
        value_name: "yes|no",
        help: "Log every change to the append-only log, so leases survive restarts",
        arity: Arity::One,
        set: |c, args| set_yes_no(&mut c.appendonly, "appendonly", &args[0]),
        show: |c| yes_no(c.appendonly),
    },
    Directive {
        name: "appendfilename",
        default: &["leased.aof"],
        value_name: "NAME",
        help: "File name of the append-only log, inside dir",
        arity: Arity::One,
        set: set_appendfilename,
        show: |c| c.appendfilename.clone(),
    },
    Directive {
        name: "appendfsync",
        default: &["everysec"],
        value_name: "always|everysec|no",
        help: "When the log is fsynced: before each reply, once a second, or when the OS decides",
        arity: Arity::One,
        set: set_appendfsync,
        show: |c| c.appendfsync.as_str().to_owned(),
    },
    Directive {
        name: "auto-aof-rewrite-percentage",
        default: &["100"],
        value_name: "PERCENT",
        help: "Rewrite the log once it has grown by this much since the last rewrite; 0 disables",
        arity: Arity::One,
        set: set_rewrite_percentage,
        show: |c| c.auto_aof_rewrite_percentage.to_string(),
    },
    Directive {
        name: "auto-aof-rewrite-min-size",
        default: &["64mb"],
        value_name: "SIZE",
        help: "Never rewrite the log automatically below this size (e.g. 64mb, 1gb)",
        arity: Arity::One,
        set: set_rewrite_min_size,
        show: |c| c.auto_aof_rewrite_min_size.to_string(),
    },
    Directive {
        name: "aof-load-good-prefix",
        default: &["no"],
        value_name: "yes|no",
        help: "On a corrupt log, start with the records before the damage instead of refusing",
        arity: Arity::One,
        set: |c, args| {
            set_yes_no(
                &mut c.aof_load_good_prefix,
                "aof-load-good-prefix",
                &args[0],
            )
        },
        show: |c| yes_no(c.aof_load_good_prefix),
    },
    Directive {
        name: "io-threads",
        default: &["1"],
        value_name: "N",
        help: "Threads serving connections and the core (1 to 128); 1 runs everything on one thread",
        arity: Arity::One,
        set: set_io_threads,
        show: |c| c.io_threads.to_string(),
    },
    Directive {
        name: "maxclients",
        default: &["10000"],
        value_name: "N",
        help: "Clients connected at once; more are told so and disconnected",
        arity: Arity::One,
        set: set_maxclients,
        show: |c| c.maxclients.to_string(),
    },
    Directive {
        name: "requirepass",
        default: &[""],
        value_name: "PASSWORD",
        help: "Password clients must give with AUTH or HELLO ... AUTH (empty: none)",
        arity: Arity::One,
        set: |c, args| {
            c.requirepass = args[0].clone();
            Ok(())
        },
        show: |c| c.requirepass.clone(),
    },
    Directive {
        name: "protected-mode",
        default: &["yes"],
        value_name: "yes|no",
        help: "Refuse to listen on a non-loopback address without requirepass",
        arity: Arity::One,
        set: |c, args| set_yes_no(&mut c.protected_mode, "protected-mode", &args[0]),
        show: |c| yes_no(c.protected_mode),
    },
    Directive {
        name: "timeout",
        default: &["0"],
        value_name: "SECONDS",
        help: "Close a client after this many seconds without a request; 0 never does",
        arity: Arity::One,
        set: set_timeout,
        show: |c| c.timeout.to_string(),
    },
    Directive {
        name: "slowlog-log-slower-than",
        default: &["10000"],
        value_name: "MICROSECONDS",
        help: "Log commands that run at least this long in SLOWLOG; 0 logs every command, a negative value none",
        arity: Arity::One,
        set: |c, args| {
            c.slowlog_log_slower_than = integer_in(&args[0], i64::MIN..=i64::MAX)
                .ok_or("invalid slowlog-log-slower-than (expected an integer of microseconds)")?;
            Ok(())
        },
        show: |c| c.slowlog_log_slower_than.to_string(),
    },
    Directive {
        name: "slowlog-max-len",
        default: &["128"],
        value_name: "N",
        help: "The most entries SLOWLOG keeps; the oldest go first",
        arity: Arity::One,
        set: |c, args| {
            c.slowlog_max_len = integer_in(&args[0], 0..=i64::MAX)
                .ok_or("invalid slowlog-max-len (expected an integer, 0 or more)")?;
            Ok(())
        },
        show: |c| c.slowlog_max_len.to_string(),
    },
    Directive {
        name: "proto-max-bulk-len",
        default: &["512mb"],
        value_name: "SIZE",
        help: "The longest argument a client may send (at least 1mb)",
        arity: Arity::One,
        set: |c, args| set_size(&mut c.proto_max_bulk_len, "proto-max-bulk-len", &args[0]),
        show: |c| c.proto_max_bulk_len.to_string(),
    },
    Directive {
        name: "client-query-buffer-limit",
        default: &["1gb"],
        value_name: "SIZE",
        help: "The most bytes of unfinished requests a client may send before it is closed (at least 1mb)",
        arity: Arity::One,
        set: |c, args| {
            set_size(
                &mut c.client_query_buffer_limit,
                "client-query-buffer-limit",
                &args[0],
            )
        },
        show: |c| c.client_query_buffer_limit.to_string(),
    },
    Directive {
        name: "client-output-buffer-limit",
        default: &["normal", "512mb", "128mb", "60"],
        value_name: "normal HARD SOFT SECONDS",
        help: "Disconnect a client whose unread replies pass HARD bytes, or stay above SOFT for SECONDS; 0 turns a limit off",
        arity: Arity::OneOrMore,
        set: set_output_limit,
        show: show_output_limit,
    },
    Directive {
        name: "lease-max-id-len",
        default: &["1024"],
        value_name: "BYTES",
        help: "The longest run or worker id a lease command accepts (at least 1024)",
        arity: Arity::One,
        set: set_lease_max_id_len,
        show: |c| c.lease_max_id_len.to_string(),
    },
    Directive {
        name: "tls-port",
        default: &["0"],
        value_name: "PORT",
        help: "TLS port to listen on as well, on every bind address; 0 turns TLS off",
        arity: Arity::One,
        set: set_tls_port,
        show: |c| c.tls_port.to_string(),
    },
    Directive {
        name: "tls-cert-file",
        default: &[""],
        value_name: "PATH",
        help: "The server's certificate chain (PEM), needed with tls-port",
        arity: Arity::One,
        set: |c, args| set_path(&mut c.tls_cert_file, &args[0]),
        show: |c| show_path(&c.tls_cert_file),
    },
    Directive {
        name: "tls-key-file",
        default: &[""],
        value_name: "PATH",
        help: "The private key of tls-cert-file (PEM, unencrypted), needed with tls-port",
        arity: Arity::One,
        set: |c, args| set_path(&mut c.tls_key_file, &args[0]),
        show: |c| show_path(&c.tls_key_file),
    },
    Directive {
        name: "tls-ca-cert-file",
        default: &[""],
        value_name: "PATH",
        help: "CA certificates (PEM) that sign client certificates, needed unless tls-auth-clients is no",
        arity: Arity::One,
        set: |c, args| set_path(&mut c.tls_ca_cert_file, &args[0]),
        show: |c| show_path(&c.tls_ca_cert_file),
    },
    Directive {
        name: "tls-auth-clients",
        default: &["yes"],
        value_name: "yes|no|optional",
        help: "TLS clients need a certificate signed by tls-ca-cert-file (yes), may present one (optional), or are not asked (no)",
        arity: Arity::One,
        set: set_tls_auth_clients,
        show: |c| c.tls_auth_clients.as_str().to_owned(),
    },
];

/// Settings that Redis tools query (redis-benchmark asks for `save` and
/// `appendonly`) but that leased does not let anyone change: `CONFIG GET`
/// answers them truthfully, while the file and the command line reject
/// them as unknown. A name moves to `DIRECTIVES` once it can be set.
static READ_ONLY: &[(&str, &str)] = &[
    // No RDB snapshots, ever.
    ("save", ""),
    // One registry, like a single database.
    ("databases", "1"),
];

/// An integer argument within `range`, in the type of its field.
fn integer_in<T: TryFrom<i64>>(arg: &str, range: RangeInclusive<i64>) -> Option<T> {
    parse_i64(arg.as_bytes())
        .filter(|n| range.contains(n))
        .and_then(|n| T::try_from(n).ok())
}

fn set_port(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.port = integer_in(&args[0], 0..=65535)
        .ok_or("invalid port (expected an integer from 0 to 65535)")?;
    Ok(())
}

fn set_metrics_port(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.metrics_port = integer_in(&args[0], 0..=65535)
        .ok_or("invalid metrics-port (expected an integer from 0 to 65535)")?;
    Ok(())
}

fn set_tls_port(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.tls_port = integer_in(&args[0], 0..=65535)
        .ok_or("invalid tls-port (expected an integer from 0 to 65535)")?;
    Ok(())
}

/// A file path; the empty string, as in Redis, for none.
fn set_path(field: &mut Option<PathBuf>, arg: &str) -> Result<(), String> {
    *field = (!arg.is_empty()).then(|| PathBuf::from(arg));
    Ok(())
}

fn show_path(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

fn set_tls_auth_clients(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.tls_auth_clients = match args[0].to_ascii_lowercase().as_str() {
        "yes" => TlsAuthClients::Yes,
        "optional" => TlsAuthClients::Optional,
        "no" => TlsAuthClients::No,
        _ => return Err("invalid tls-auth-clients (expected yes, no or optional)".into()),
    };
    Ok(())
}

fn set_bind(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.bind = args
        .iter()
        .map(|arg| {
            arg.parse().map_err(|_| {
                format!("invalid bind address '{arg}' (expected an IPv4 or IPv6 address)")
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(())
}

fn show_bind(config: &Config) -> String {
    let addresses: Vec<String> = config.bind.iter().map(IpAddr::to_string).collect();
    addresses.join(" ")
}

fn set_dir(config: &mut Config, args: &[String]) -> Result<(), String> {
    if args[0].is_empty() {
        return Err("invalid dir (expected a non-empty path)".into());
    }
    config.dir = PathBuf::from(&args[0]);
    Ok(())
}

fn set_lease_ttl(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.lease_ttl = parse_finite_f64(args[0].as_bytes())
        .filter(|ttl| *ttl > 0.0)
        .ok_or("invalid lease-ttl (expected a finite number of seconds greater than 0)")?;
    Ok(())
}

fn set_lease_retention(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.lease_retention = parse_finite_f64(args[0].as_bytes())
        .filter(|seconds| *seconds >= 0.0)
        .ok_or("invalid lease-retention (expected a finite number of seconds, 0 or more)")?;
    Ok(())
}

fn set_maxclients(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.maxclients = integer_in(&args[0], 1..=i64::MAX)
        .ok_or("invalid maxclients (expected a positive integer)")?;
    Ok(())
}

fn set_timeout(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.timeout = integer_in(&args[0], 0..=i64::MAX)
        .ok_or("invalid timeout (expected whole seconds, 0 or more)")?;
    Ok(())
}

/// The smallest request size limit, as in Redis: below it ordinary
/// requests would be refused.
const MIN_REQUEST_LIMIT: u64 = 1024 * 1024;

fn set_size(field: &mut usize, name: &str, arg: &str) -> Result<(), String> {
    *field = parse_memory(arg)
        .filter(|size| *size >= MIN_REQUEST_LIMIT)
        .and_then(|size| usize::try_from(size).ok())
        .ok_or_else(|| format!("invalid {name} (expected a size of at least 1mb, e.g. 512mb)"))?;
    Ok(())
}

fn set_output_limit(config: &mut Config, args: &[String]) -> Result<(), String> {
    const USAGE: &str = "invalid client-output-buffer-limit (expected 'normal <hard> <soft> \
         <soft-seconds>'; leased has only normal clients)";
    let [class, hard, soft, seconds] = args else {
        return Err(USAGE.into());
    };
    if !class.eq_ignore_ascii_case("normal") {
        return Err(USAGE.into());
    }
    config.client_output_buffer_limit = OutputLimit {
        hard: parse_memory(hard).ok_or(USAGE)?,
        soft: parse_memory(soft).ok_or(USAGE)?,
        soft_seconds: integer_in(seconds, 0..=i64::MAX).ok_or(USAGE)?,
    };
    Ok(())
}

/// As Redis prints it: the class, then bytes and seconds.
fn show_output_limit(config: &Config) -> String {
    let limit = config.client_output_buffer_limit;
    format!(
        "normal {} {} {}",
        limit.hard, limit.soft, limit.soft_seconds
    )
}

fn set_lease_max_id_len(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.lease_max_id_len = integer_in(&args[0], 1024..=i64::MAX)
        .ok_or("invalid lease-max-id-len (expected an integer of at least 1024)")?;
    Ok(())
}

fn set_io_threads(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.io_threads = integer_in(&args[0], 1..=128)
        .ok_or("invalid io-threads (expected an integer from 1 to 128)")?;
    Ok(())
}

fn set_loglevel(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.loglevel = LogLevel::from_name(&args[0])
        .ok_or("invalid loglevel (expected one of: debug, verbose, notice, warning, nothing)")?;
    Ok(())
}

fn set_logformat(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.logformat = match args[0].to_ascii_lowercase().as_str() {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        _ => return Err("invalid logformat (expected text or json)".into()),
    };
    Ok(())
}

fn set_yes_no(field: &mut bool, name: &str, arg: &str) -> Result<(), String> {
    *field = match arg.to_ascii_lowercase().as_str() {
        "yes" => true,
        "no" => false,
        _ => return Err(format!("invalid {name} (expected yes or no)")),
    };
    Ok(())
}

fn yes_no(value: bool) -> String {
    if value { "yes" } else { "no" }.to_owned()
}

fn set_appendfilename(config: &mut Config, args: &[String]) -> Result<(), String> {
    let name = &args[0];
    // A bare name, as in Redis: the log lives in `dir`.
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err("invalid appendfilename (expected a file name without '/')".into());
    }
    config.appendfilename = name.clone();
    Ok(())
}

fn set_appendfsync(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.appendfsync = FsyncPolicy::from_name(&args[0])
        .ok_or("invalid appendfsync (expected one of: always, everysec, no)")?;
    Ok(())
}

fn set_rewrite_percentage(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.auto_aof_rewrite_percentage = integer_in(&args[0], 0..=i64::MAX)
        .ok_or("invalid auto-aof-rewrite-percentage (expected an integer >= 0)")?;
    Ok(())
}

fn set_rewrite_min_size(config: &mut Config, args: &[String]) -> Result<(), String> {
    config.auto_aof_rewrite_min_size = parse_memory(&args[0]).ok_or(
        "invalid auto-aof-rewrite-min-size (expected bytes, or a size such as 64mb or 1gb)",
    )?;
    Ok(())
}

/// A size as redis.conf writes one: a number with an optional unit, where
/// `k`, `m` and `g` are powers of 1000 and `kb`, `mb` and `gb` powers of
/// 1024, in any case.
fn parse_memory(text: &str) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(digits_end);
    let multiplier: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    let number = u64::try_from(parse_i64(digits.as_bytes())?).ok()?;
    number.checked_mul(multiplier)
}

fn lookup(name: &str) -> Option<&'static Directive> {
    DIRECTIVES
        .iter()
        .find(|d| d.name.eq_ignore_ascii_case(name))
}

impl Directive {
    fn apply(&self, config: &mut Config, args: &[String]) -> Result<(), String> {
        self.arity.check(self.name, args.len())?;
        (self.set)(config, args)
    }

    fn arg(&self) -> Arg {
        Arg::new(self.name)
            .long(self.name)
            .value_name(self.value_name)
            .num_args(self.arity.range())
            // So `--lease-ttl -1` reaches the validator instead of being
            // taken for an unknown flag.
            .allow_negative_numbers(true)
            .help(format!(
                "{} [default: {}]",
                self.help,
                self.default.join(" ")
            ))
    }
}

impl Default for Config {
    fn default() -> Config {
        // Placeholders only: every field but `config_file` is then set from
        // the table, through the same setters as the file.
        let mut config = Config {
            port: 0,
            bind: Vec::new(),
            metrics_port: 0,
            dir: PathBuf::new(),
            lease_ttl: 0.0,
            lease_retention: 0.0,
            loglevel: LogLevel::Notice,
            logformat: LogFormat::Text,
            logfile: None,
            appendonly: false,
            appendfilename: String::new(),
            appendfsync: FsyncPolicy::EverySec,
            auto_aof_rewrite_percentage: 0,
            auto_aof_rewrite_min_size: 0,
            aof_load_good_prefix: false,
            io_threads: 0,
            maxclients: 0,
            requirepass: String::new(),
            protected_mode: false,
            timeout: 0,
            slowlog_log_slower_than: 0,
            slowlog_max_len: 0,
            proto_max_bulk_len: 0,
            client_query_buffer_limit: 0,
            client_output_buffer_limit: OutputLimit {
                hard: 0,
                soft: 0,
                soft_seconds: 0,
            },
            lease_max_id_len: 0,
            tls_port: 0,
            tls_cert_file: None,
            tls_key_file: None,
            tls_ca_cert_file: None,
            tls_auth_clients: TlsAuthClients::Yes,
            config_file: None,
        };
        for directive in DIRECTIVES {
            let args: Vec<String> = directive.default.iter().map(|&a| a.to_owned()).collect();
            if let Err(what) = directive.apply(&mut config, &args) {
                panic!("the default of '{}' is invalid: {what}", directive.name);
            }
        }
        config
    }
}

/// The clap id of the positional file argument.
const CONFIG_FILE: &str = "config_file";

/// The command line: `leased [CONFIG_FILE] [--directive value ...]`.
fn command() -> Command {
    let file = Arg::new(CONFIG_FILE)
        .value_name("CONFIG_FILE")
        .value_parser(clap::value_parser!(PathBuf))
        .help("A redis.conf-style file, read before the --directive options");
    let command = Command::new("leased")
        .version(env!("CARGO_PKG_VERSION"))
        .about(env!("CARGO_PKG_DESCRIPTION"))
        // The file comes first, or `--bind a b FILE` would take FILE for an
        // address.
        .override_usage("leased [CONFIG_FILE] [--DIRECTIVE VALUE ...]")
        // The last `--port` wins, as with redis-server.
        .args_override_self(true)
        .arg(file);
    DIRECTIVES
        .iter()
        .fold(command, |command, directive| command.arg(directive.arg()))
}

impl Config {
    /// Builds the configuration from `leased [CONFIG_FILE] [--directive value ...]`
    /// (the first item is the program name).
    pub fn from_args<I, T>(args: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let matches = command()
            .try_get_matches_from(args)
            .map_err(ConfigError::Args)?;
        let mut config = Config::default();
        if let Some(path) = matches.get_one::<PathBuf>(CONFIG_FILE) {
            config.load_file(path)?;
            config.config_file = Some(path.clone());
        }
        config.apply_matches(&matches)?;
        Ok(config)
    }

    /// `CONFIG GET`: every directive whose name matches `pattern`, with its
    /// value as Redis prints it, in table order.
    pub fn get(&self, pattern: &[u8]) -> Vec<(&'static str, String)> {
        let wanted = |name: &str| glob::matches(pattern, name.as_bytes(), true);
        let settable = DIRECTIVES
            .iter()
            .filter(|d| wanted(d.name))
            .map(|d| (d.name, (d.show)(self)));
        let fixed = READ_ONLY
            .iter()
            .filter(|(name, _)| wanted(name))
            .map(|&(name, value)| (name, value.to_owned()));
        settable.chain(fixed).collect()
    }

    fn load_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let text = std::fs::read(path).map_err(|e| {
            ConfigError::Invalid(format!("can't open config file '{}': {e}", path.display()))
        })?;
        self.apply_text(&path.display().to_string(), &text)
    }

    /// Applies redis.conf text; `source` names it in error messages.
    fn apply_text(&mut self, source: &str, text: &[u8]) -> Result<(), ConfigError> {
        for (index, line) in text.split(|&b| b == b'\n').enumerate() {
            let line = line.trim_ascii();
            if line.is_empty() || line[0] == b'#' {
                continue;
            }
            self.apply_line(line).map_err(|what| {
                let line = String::from_utf8_lossy(line);
                ConfigError::Invalid(format!("{source}:{}: '{line}': {what}", index + 1))
            })?;
        }
        Ok(())
    }

    fn apply_line(&mut self, line: &[u8]) -> Result<(), String> {
        let args = split_args(line).ok_or("unbalanced quotes")?;
        let args = args
            .into_iter()
            .map(String::from_utf8)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| "an argument is not valid UTF-8")?;
        let Some((name, rest)) = args.split_first() else {
            return Ok(());
        };
        let directive = lookup(name).ok_or_else(|| format!("unknown directive '{name}'"))?;
        directive.apply(self, rest)
    }

    fn apply_matches(&mut self, matches: &ArgMatches) -> Result<(), ConfigError> {
        for directive in DIRECTIVES {
            let Some(values) = matches.get_many::<String>(directive.name) else {
                continue;
            };
            let values: Vec<String> = values.cloned().collect();
            directive.apply(self, &values).map_err(|what| {
                let given = values.join(" ");
                ConfigError::Invalid(format!(
                    "command line: '--{} {given}': {what}",
                    directive.name
                ))
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn parse_text(text: &str) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        config.apply_text("test.conf", text.as_bytes())?;
        Ok(config)
    }

    fn invalid(text: &str) -> String {
        match parse_text(text) {
            Err(ConfigError::Invalid(message)) => message,
            other => panic!("{text:?} gave {other:?}"),
        }
    }

    fn conf_file(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file
    }

    fn args(list: &[&str]) -> Result<Config, ConfigError> {
        Config::from_args(std::iter::once("leased").chain(list.iter().copied()))
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn defaults() {
        let config = Config::default();
        assert_eq!(config.port, 6479);
        assert_eq!(config.bind, vec![ip("127.0.0.1")]);
        assert_eq!(config.dir, PathBuf::from("./data"));
        assert_eq!(config.lease_ttl, 10.0);
        assert_eq!(config.loglevel, LogLevel::Notice);
        assert_eq!(config.logformat, LogFormat::Text);
        assert_eq!(config.logfile, None);
        assert_eq!(config.config_file, None);
    }

    #[test]
    fn no_arguments_give_the_defaults() {
        assert_eq!(args(&[]).unwrap(), Config::default());
    }

    #[test]
    fn file_with_comments_blank_lines_and_any_case() {
        let config = parse_text(
            "# a comment\n\n   # indented comment\nPORT 7000\r\nLease-TTL 2.5\n\tloglevel WARNING  \n",
        )
        .unwrap();
        assert_eq!(config.port, 7000);
        assert_eq!(config.lease_ttl, 2.5);
        assert_eq!(config.loglevel, LogLevel::Warning);
    }

    #[test]
    fn file_with_quotes() {
        let config = parse_text("dir \"/tmp/with space\"\nbind '::1' \"127.0.0.1\"\n").unwrap();
        assert_eq!(config.dir, PathBuf::from("/tmp/with space"));
        assert_eq!(config.bind, vec![ip("::1"), ip("127.0.0.1")]);
        assert_eq!(
            parse_text("dir \"a\\x41\\tb\"").unwrap().dir,
            PathBuf::from("aA\tb")
        );
        assert_eq!(
            parse_text("dir 'it\\'s'").unwrap().dir,
            PathBuf::from("it's")
        );
        assert_eq!(
            parse_text("dir x\"y z\"").unwrap().dir,
            PathBuf::from("xy z")
        );
    }

    #[test]
    fn multi_value_bind_and_later_lines_win() {
        let config = parse_text("bind 127.0.0.1 ::1 10.0.0.1\nport 1\nport 2\n").unwrap();
        assert_eq!(
            config.bind,
            vec![ip("127.0.0.1"), ip("::1"), ip("10.0.0.1")]
        );
        assert_eq!(config.port, 2);
    }

    #[test]
    fn bad_port_names_file_line_and_problem() {
        let expected =
            "test.conf:3: 'port abc': invalid port (expected an integer from 0 to 65535)";
        assert_eq!(invalid("# c\n\nport abc\n"), expected);
        for bad in ["65536", "-1", "+1", "08", "1.0", "-0", "\" 1\"", "\"\""] {
            let message = invalid(&format!("port {bad}"));
            assert!(message.starts_with("test.conf:1: 'port "), "{message}");
            assert!(message.ends_with("invalid port (expected an integer from 0 to 65535)"));
        }
        assert_eq!(parse_text("port 0").unwrap().port, 0);
        assert_eq!(parse_text("port 65535").unwrap().port, 65535);
    }

    #[test]
    fn bad_bind_names_the_address() {
        assert_eq!(
            invalid("bind 127.0.0.1 localhost"),
            "test.conf:1: 'bind 127.0.0.1 localhost': invalid bind address 'localhost' \
             (expected an IPv4 or IPv6 address)"
        );
        assert!(invalid("bind 1.2.3").contains("'1.2.3'"));
    }

    #[test]
    fn bad_lease_ttl() {
        for bad in [
            "0", "-1", "inf", "-inf", "nan", "abc", "1e999", "\" 1\"", "\"1 \"", "10s",
        ] {
            let message = invalid(&format!("lease-ttl {bad}"));
            assert!(message.starts_with("test.conf:1: 'lease-ttl "), "{message}");
            assert!(
                message.ends_with(
                    "invalid lease-ttl (expected a finite number of seconds greater than 0)"
                ),
                "{message}"
            );
        }
        assert_eq!(parse_text("lease-ttl 1e3").unwrap().lease_ttl, 1000.0);
        assert_eq!(parse_text("lease-ttl 0.001").unwrap().lease_ttl, 0.001);
    }

    #[test]
    fn bad_loglevel_and_dir() {
        assert_eq!(
            invalid("loglevel loud"),
            "test.conf:1: 'loglevel loud': invalid loglevel \
             (expected one of: debug, verbose, notice, warning, nothing)"
        );
        assert_eq!(
            invalid("dir \"\""),
            "test.conf:1: 'dir \"\"': invalid dir (expected a non-empty path)"
        );
    }

    #[test]
    fn logging_directives() {
        let config = parse_text("logformat JSON\nlogfile \"/var/log/leased/leased.log\"").unwrap();
        assert_eq!(config.logformat, LogFormat::Json);
        assert_eq!(
            config.logfile,
            Some(PathBuf::from("/var/log/leased/leased.log"))
        );
        assert_eq!(
            config.get(b"logf*"),
            [
                ("logformat", "json".to_owned()),
                ("logfile", "/var/log/leased/leased.log".to_owned()),
            ]
        );
        // The empty string is standard output, as in Redis.
        let config = parse_text("logfile a.log\nlogfile \"\"\nlogformat text").unwrap();
        assert_eq!(config.logfile, None);
        assert_eq!(config.logformat, LogFormat::Text);
        assert_eq!(
            invalid("logformat yaml"),
            "test.conf:1: 'logformat yaml': invalid logformat (expected text or json)"
        );
    }

    #[test]
    fn unknown_directives_including_read_only_ones() {
        assert_eq!(
            invalid("port 1\nmaxmemory 10mb"),
            "test.conf:2: 'maxmemory 10mb': unknown directive 'maxmemory'"
        );
        assert_eq!(
            invalid("save 900 1"),
            "test.conf:1: 'save 900 1': unknown directive 'save'"
        );
        assert!(invalid("databases 1").contains("unknown directive 'databases'"));
    }

    #[test]
    fn tls_directives() {
        let config = parse_text(
            "tls-port 6380\ntls-cert-file \"/etc/tls/server cert.pem\"\n\
             tls-key-file key.pem\ntls-ca-cert-file ca.pem\ntls-auth-clients OPTIONAL",
        )
        .unwrap();
        assert_eq!(config.tls_port, 6380);
        assert_eq!(
            config.tls_cert_file,
            Some(PathBuf::from("/etc/tls/server cert.pem"))
        );
        assert_eq!(config.tls_key_file, Some(PathBuf::from("key.pem")));
        assert_eq!(config.tls_ca_cert_file, Some(PathBuf::from("ca.pem")));
        assert_eq!(config.tls_auth_clients, TlsAuthClients::Optional);
        assert_eq!(
            config.get(b"tls-*"),
            [
                ("tls-port", "6380".to_owned()),
                ("tls-cert-file", "/etc/tls/server cert.pem".to_owned()),
                ("tls-key-file", "key.pem".to_owned()),
                ("tls-ca-cert-file", "ca.pem".to_owned()),
                ("tls-auth-clients", "optional".to_owned()),
            ]
        );
        // The empty string unsets a file, as in Redis.
        let config = parse_text("tls-cert-file a.pem\ntls-cert-file \"\"").unwrap();
        assert_eq!(config.tls_cert_file, None);
        assert_eq!(
            parse_text("tls-auth-clients no").unwrap().tls_auth_clients,
            TlsAuthClients::No
        );
        assert!(
            invalid("tls-auth-clients maybe")
                .ends_with("invalid tls-auth-clients (expected yes, no or optional)")
        );
        assert!(
            invalid("tls-port 65536")
                .ends_with("invalid tls-port (expected an integer from 0 to 65535)")
        );
    }

    #[test]
    fn persistence_directives() {
        let config = parse_text(
            "appendonly no\nappendfsync ALWAYS\nappendfilename log.aof\n\
             auto-aof-rewrite-percentage 0\nauto-aof-rewrite-min-size 1gb\n\
             aof-load-good-prefix yes",
        )
        .unwrap();
        assert!(!config.appendonly);
        assert_eq!(config.appendfsync, FsyncPolicy::Always);
        assert_eq!(config.appendfilename, "log.aof");
        assert_eq!(config.auto_aof_rewrite_percentage, 0);
        assert_eq!(config.auto_aof_rewrite_min_size, 1 << 30);
        assert!(config.aof_load_good_prefix);
        for (size, bytes) in [
            ("100", 100),
            ("1k", 1000),
            ("1KB", 1024),
            ("2m", 2_000_000),
            ("3mb", 3 << 20),
            ("1g", 1_000_000_000),
        ] {
            assert_eq!(parse_memory(size), Some(bytes), "{size}");
        }
        for bad in ["", "mb", "-1mb", "1tb", "1.5mb", "01mb"] {
            assert_eq!(parse_memory(bad), None, "{bad}");
        }
        assert!(invalid("appendonly maybe").contains("invalid appendonly (expected yes or no)"));
        assert!(invalid("appendfsync sometimes").contains("invalid appendfsync"));
        assert!(invalid("appendfilename a/b").contains("invalid appendfilename"));
        assert!(
            invalid("auto-aof-rewrite-percentage -5")
                .contains("invalid auto-aof-rewrite-percentage")
        );
        assert!(
            invalid("auto-aof-rewrite-min-size lots").contains("invalid auto-aof-rewrite-min-size")
        );
    }

    #[test]
    fn wrong_number_of_arguments() {
        assert_eq!(
            invalid("port 1 2"),
            "test.conf:1: 'port 1 2': wrong number of arguments for 'port' (expected 1, got 2)"
        );
        assert_eq!(
            invalid("\n\nbind"),
            "test.conf:3: 'bind': wrong number of arguments for 'bind' (expected at least 1, got 0)"
        );
        assert!(invalid("dir").contains("for 'dir' (expected 1, got 0)"));
    }

    #[test]
    fn unbalanced_quotes_and_bad_utf8() {
        assert_eq!(
            invalid("dir \"/tmp"),
            "test.conf:1: 'dir \"/tmp': unbalanced quotes"
        );
        assert_eq!(
            invalid("dir \"\\xff\""),
            "test.conf:1: 'dir \"\\xff\"': an argument is not valid UTF-8"
        );
    }

    #[test]
    fn missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope.conf");
        let Err(ConfigError::Invalid(message)) = args(&[path.to_str().unwrap()]) else {
            panic!("a missing file was accepted");
        };
        assert!(
            message.starts_with(&format!("can't open config file '{}': ", path.display())),
            "{message}"
        );
    }

    #[test]
    fn file_errors_name_the_file_path() {
        let file = conf_file("port 1\nport x\n");
        let path = file.path().to_str().unwrap();
        let Err(ConfigError::Invalid(message)) = args(&[path]) else {
            panic!("a bad file was accepted");
        };
        assert!(
            message.starts_with(&format!("{path}:2: 'port x': ")),
            "{message}"
        );
    }

    #[test]
    fn command_line_overrides_file() {
        let file = conf_file("port 7000\nloglevel debug\nbind 10.0.0.1\n");
        let path = file.path().to_str().unwrap();
        let config = args(&[path, "--port", "7001", "--bind", "127.0.0.1", "::1"]).unwrap();
        assert_eq!(config.port, 7001);
        assert_eq!(config.loglevel, LogLevel::Debug);
        assert_eq!(config.bind, vec![ip("127.0.0.1"), ip("::1")]);
        assert_eq!(config.config_file, Some(PathBuf::from(path)));
    }

    #[test]
    fn command_line_without_a_file() {
        let config = args(&[
            "--lease-ttl",
            "2.5",
            "--dir",
            "/tmp/x",
            "--port",
            "1",
            "--port",
            "2",
        ]);
        let config = config.unwrap();
        assert_eq!(config.lease_ttl, 2.5);
        assert_eq!(config.dir, PathBuf::from("/tmp/x"));
        assert_eq!(config.port, 2);
        assert_eq!(config.config_file, None);
    }

    #[test]
    fn bad_command_line_value_names_the_option() {
        let Err(ConfigError::Invalid(message)) = args(&["--lease-ttl", "-1"]) else {
            panic!("a negative TTL was accepted");
        };
        assert_eq!(
            message,
            "command line: '--lease-ttl -1': invalid lease-ttl \
             (expected a finite number of seconds greater than 0)"
        );
    }

    #[test]
    fn unknown_flag_is_a_clap_error_naming_it() {
        let Err(ConfigError::Args(error)) = args(&["--no-such-thing", "1"]) else {
            panic!("an unknown flag was accepted");
        };
        assert_eq!(error.kind(), clap::error::ErrorKind::UnknownArgument);
        assert!(error.to_string().contains("--no-such-thing"), "{error}");
        let Err(ConfigError::Args(error)) = args(&["--save", ""]) else {
            panic!("--save was accepted");
        };
        assert_eq!(error.kind(), clap::error::ErrorKind::UnknownArgument);
    }

    #[test]
    fn help_and_version_come_from_clap() {
        let Err(ConfigError::Args(help)) = args(&["--help"]) else {
            panic!("--help did not stop");
        };
        assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
        let text = help.to_string();
        for directive in DIRECTIVES {
            assert!(text.contains(&format!("--{}", directive.name)), "{text}");
            assert!(text.contains(directive.help), "{text}");
        }
        let Err(ConfigError::Args(version)) = args(&["--version"]) else {
            panic!("--version did not stop");
        };
        assert_eq!(version.kind(), clap::error::ErrorKind::DisplayVersion);
    }

    #[test]
    fn command_is_well_formed() {
        command().debug_assert();
    }

    fn names(config: &Config, pattern: &str) -> Vec<&'static str> {
        config
            .get(pattern.as_bytes())
            .into_iter()
            .map(|(name, _)| name)
            .collect()
    }

    #[test]
    fn config_get_all_in_table_order() {
        let all = Config::default().get(b"*");
        let expected = [
            ("port", "6479"),
            ("bind", "127.0.0.1"),
            ("metrics-port", "0"),
            ("dir", "./data"),
            ("lease-ttl", "10"),
            ("lease-retention", "3600"),
            ("loglevel", "notice"),
            ("logformat", "text"),
            ("logfile", ""),
            ("appendonly", "yes"),
            ("appendfilename", "leased.aof"),
            ("appendfsync", "everysec"),
            ("auto-aof-rewrite-percentage", "100"),
            ("auto-aof-rewrite-min-size", "67108864"),
            ("aof-load-good-prefix", "no"),
            ("io-threads", "1"),
            ("maxclients", "10000"),
            ("requirepass", ""),
            ("protected-mode", "yes"),
            ("timeout", "0"),
            ("slowlog-log-slower-than", "10000"),
            ("slowlog-max-len", "128"),
            ("proto-max-bulk-len", "536870912"),
            ("client-query-buffer-limit", "1073741824"),
            (
                "client-output-buffer-limit",
                "normal 536870912 134217728 60",
            ),
            ("lease-max-id-len", "1024"),
            ("tls-port", "0"),
            ("tls-cert-file", ""),
            ("tls-key-file", ""),
            ("tls-ca-cert-file", ""),
            ("tls-auth-clients", "yes"),
            ("save", ""),
            ("databases", "1"),
        ];
        let all: Vec<(&str, &str)> = all.iter().map(|(n, v)| (*n, v.as_str())).collect();
        assert_eq!(all, expected);
    }

    #[test]
    fn config_get_patterns() {
        let config = Config::default();
        assert_eq!(config.get(b"port"), vec![("port", "6479".to_owned())]);
        assert_eq!(config.get(b"PORT"), vec![("port", "6479".to_owned())]);
        assert_eq!(names(&config, "*ttl*"), ["lease-ttl"]);
        assert_eq!(
            names(&config, "lease-*"),
            ["lease-ttl", "lease-retention", "lease-max-id-len"]
        );
        assert_eq!(names(&config, "appendonly"), ["appendonly"]);
        assert_eq!(names(&config, "log*"), ["loglevel", "logformat", "logfile"]);
        assert_eq!(names(&config, "d*"), ["dir", "databases"]);
        assert!(config.get(b"nosuch").is_empty());
        assert!(config.get(b"").is_empty());
    }

    #[test]
    fn config_get_prints_values_as_redis_does() {
        let config = parse_text("bind 127.0.0.1 ::1\nlease-ttl 2.5\nloglevel VERBOSE").unwrap();
        assert_eq!(
            config.get(b"bind"),
            vec![("bind", "127.0.0.1 ::1".to_owned())]
        );
        assert_eq!(
            config.get(b"lease-ttl"),
            vec![("lease-ttl", "2.5".to_owned())]
        );
        assert_eq!(
            config.get(b"loglevel"),
            vec![("loglevel", "verbose".to_owned())]
        );
    }

    #[test]
    fn limit_directives() {
        let config = parse_text(
            "timeout 30\nproto-max-bulk-len 2mb\nclient-query-buffer-limit 1gb\n\
             client-output-buffer-limit NORMAL 1gb 256mb 30\nlease-max-id-len 4096",
        )
        .unwrap();
        assert_eq!(config.timeout, 30);
        assert_eq!(config.proto_max_bulk_len, 2 << 20);
        assert_eq!(config.client_query_buffer_limit, 1 << 30);
        assert_eq!(
            config.client_output_buffer_limit,
            OutputLimit {
                hard: 1 << 30,
                soft: 256 << 20,
                soft_seconds: 30
            }
        );
        assert_eq!(config.lease_max_id_len, 4096);
        for bad in [
            "timeout -1",
            "proto-max-bulk-len 1048575",
            "client-query-buffer-limit 0",
            "client-output-buffer-limit pubsub 32mb 8mb 60",
            "client-output-buffer-limit normal 1mb 1mb",
            "client-output-buffer-limit normal 1mb 1mb x",
            "lease-max-id-len 1023",
        ] {
            let name = bad.split(' ').next().unwrap();
            assert!(invalid(bad).contains(&format!("invalid {name}")), "{bad}");
        }
    }

    fn shipped_conf() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/leased.conf")
    }

    #[test]
    fn shipped_conf_gives_the_defaults() {
        let path = shipped_conf();
        let config = Config::from_args(["leased".as_ref(), path.as_os_str()]).unwrap();
        assert_eq!(config.config_file.as_deref(), Some(path.as_path()));
        assert_eq!(
            Config {
                config_file: None,
                ..config
            },
            Config::default()
        );
    }

    #[test]
    fn shipped_conf_sets_every_directive() {
        let text = std::fs::read_to_string(shipped_conf()).unwrap();
        for directive in DIRECTIVES {
            let set = text.lines().any(|line| {
                let line = line.trim();
                let args = split_args(line.as_bytes()).unwrap_or_default();
                !line.starts_with('#')
                    && args
                        .first()
                        .is_some_and(|name| name == directive.name.as_bytes())
            });
            assert!(set, "conf/leased.conf does not set '{}'", directive.name);
        }
    }
}
