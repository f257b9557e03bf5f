//! The directive table: each directive's name, default, syntax, help and
//! whether it may change while the server runs; how its arguments are
//! checked and stored; how its value is printed (`CONFIG GET`) and written
//! back to the file (`CONFIG REWRITE`).
//!
//! Every way of setting a directive goes through its row's `set`, so a
//! value means the same in the file, on the command line and in `CONFIG
//! SET`, and is refused with the same message.

use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::path::PathBuf;

use clap::Arg;
use clap::builder::ValueRange;

use super::cluster::{parse_nodes, show_nodes};
use super::{
    ClusterRedirect, Config, DirectiveError, FsyncPolicy, LogFormat, LogLevel, OutputLimit,
    OutputLimits, TlsAuthClients,
};
use crate::number::{parse_finite_f64, parse_i64};

/// A directive's arguments: how many follow its name, and how `CONFIG
/// REWRITE` writes its value back so that the file reads it again as is.
#[derive(Clone, Copy)]
enum Syntax {
    /// One argument, written as `show` prints it.
    One,
    /// One size, which `show` prints in bytes and the file gets in
    /// Redis's units where they are exact (`64mb`).
    Size,
    /// One or more arguments: the words `show` prints (`bind`).
    Words,
    /// `<class> <hard> <soft> <soft-seconds>` for one or more classes, the
    /// sizes in Redis's units.
    OutputLimit,
}

impl Syntax {
    fn takes_words(self) -> bool {
        matches!(self, Syntax::Words | Syntax::OutputLimit)
    }

    fn check(self, name: &'static str, given: usize) -> Result<(), DirectiveError> {
        let (fits, expected) = if self.takes_words() {
            (given >= 1, "at least 1")
        } else {
            (given == 1, "1")
        };
        if fits {
            Ok(())
        } else {
            Err(DirectiveError::Arity {
                name,
                expected,
                given,
            })
        }
    }

    fn range(self) -> ValueRange {
        if self.takes_words() {
            ValueRange::new(1..)
        } else {
            ValueRange::new(1)
        }
    }
}

/// `CONFIG SET` may change the directive while the server runs (no flag,
/// as in Redis).
const MUTABLE: u8 = 0;
/// Only the file and the command line set the directive: the server reads
/// it once, at start-up (listeners, files, threads).
const IMMUTABLE: u8 = 1;
/// The value is a secret: `CONFIG SET` of it must not reach the logs, the
/// slow log or `MONITOR` unredacted.
const SENSITIVE: u8 = 2;

/// Why a setter refused its arguments. `Directive::apply` turns it into a
/// `DirectiveError` naming the directive, so no setter repeats its name.
enum Refusal {
    /// What the argument should have been, as in "(expected yes or no)".
    Expected(&'static str),
    /// One of `bind`'s addresses, which is not an IP address.
    Address(String),
}

/// `value`, or the refusal saying what was expected instead.
fn expect<T>(value: Option<T>, expected: &'static str) -> Result<T, Refusal> {
    value.ok_or(Refusal::Expected(expected))
}

/// One settable directive.
pub(super) struct Directive {
    pub(super) name: &'static str,
    /// The arguments as they would be written in the file.
    pub(super) default: &'static [&'static str],
    /// Shown in `--help` as `--name <VALUE_NAME>`.
    value_name: &'static str,
    pub(super) help: &'static str,
    syntax: Syntax,
    /// `MUTABLE` or `IMMUTABLE`, and `SENSITIVE` for a secret.
    flags: u8,
    /// Validates the arguments (already counted) and stores them.
    set: fn(&mut Config, &[String]) -> Result<(), Refusal>,
    /// The value as `CONFIG GET` prints it.
    pub(super) show: fn(&Config) -> String,
}

/// Every settable directive, in the order `CONFIG GET` lists them.
pub(super) static DIRECTIVES: &[Directive] = &[
    Directive {
        name: "port",
        default: &["6479"],
        value_name: "PORT",
        help: "TCP port to listen on; 0 picks a free one",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: set_port,
        show: |c| c.port.to_string(),
    },
    Directive {
        name: "bind",
        default: &["127.0.0.1"],
        value_name: "ADDRESS",
        help: "IPv4 or IPv6 addresses to listen on",
        syntax: Syntax::Words,
        flags: IMMUTABLE,
        set: set_bind,
        show: show_bind,
    },
    Directive {
        name: "tcp-backlog",
        default: &["511"],
        value_name: "N",
        help: "Connections the kernel queues for the server before it accepts them (capped by net.core.somaxconn)",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: set_tcp_backlog,
        show: |c| c.tcp_backlog.to_string(),
    },
    Directive {
        name: "metrics-port",
        default: &["0"],
        value_name: "PORT",
        help: "Port of the Prometheus endpoint (GET /metrics) on every bind address; 0 turns it off",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: set_metrics_port,
        show: |c| c.metrics_port.to_string(),
    },
    Directive {
        name: "dir",
        default: &["./data"],
        value_name: "PATH",
        help: "Data directory, relative to the working directory",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: set_dir,
        show: |c| c.dir.display().to_string(),
    },
    Directive {
        name: "lease-ttl",
        default: &["10"],
        value_name: "SECONDS",
        help: "Default lease TTL in seconds (a finite number > 0)",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: set_lease_ttl,
        show: |c| c.lease_ttl.to_string(),
    },
    Directive {
        name: "lease-retention",
        default: &["3600"],
        value_name: "SECONDS",
        help: "How long an expired, untaken lease stays releasable before it is reclaimed; 0 keeps it forever",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: |c, args| set_seconds(&mut c.lease_retention, &args[0]),
        show: |c| c.lease_retention.to_string(),
    },
    Directive {
        name: "lease-max-skew",
        default: &["60"],
        value_name: "SECONDS",
        help: "An explicit `now` more than this many seconds ahead of the server's wall clock is refused; 0 = no bound",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: |c, args| set_seconds(&mut c.lease_max_skew, &args[0]),
        show: |c| c.lease_max_skew.to_string(),
    },
    Directive {
        name: "lease-lock-delay",
        default: &["0"],
        value_name: "SECONDS",
        help: "Lock delay of an acquire without LOCKDELAY: seconds after an expiry (not a release) during which the run cannot be acquired; 0 = none",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: |c, args| set_seconds(&mut c.lease_lock_delay, &args[0]),
        show: |c| c.lease_lock_delay.to_string(),
    },
    Directive {
        name: "lease-max-lock-delay",
        default: &["60"],
        value_name: "SECONDS",
        help: "The largest lock delay, in seconds, an acquire may ask for with LOCKDELAY (at least lease-lock-delay)",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: |c, args| set_seconds(&mut c.lease_max_lock_delay, &args[0]),
        show: |c| c.lease_max_lock_delay.to_string(),
    },
    Directive {
        name: "loglevel",
        default: &["notice"],
        value_name: "LEVEL",
        help: "Log verbosity: debug, verbose, notice, warning or nothing",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: set_loglevel,
        show: |c| c.loglevel.as_str().to_owned(),
    },
    Directive {
        name: "logformat",
        default: &["text"],
        value_name: "text|json",
        help: "Log lines as human-readable text or as one JSON object per line",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: set_logformat,
        show: |c| c.logformat.as_str().to_owned(),
    },
    Directive {
        name: "logfile",
        default: &[""],
        value_name: "PATH",
        help: "Append log lines to this file instead of standard output (empty: standard output)",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| set_path(&mut c.logfile, &args[0]),
        show: |c| show_path(&c.logfile),
    },
    Directive {
        name: "appendonly",
        default: &["yes"],
        value_name: "yes|no",
        help: "Log every change to the append-only log, so leases survive restarts",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| set_yes_no(&mut c.appendonly, &args[0]),
        show: |c| yes_no(c.appendonly),
    },
    Directive {
        name: "appendfilename",
        default: &["leased.aof"],
        value_name: "NAME",
        help: "File name of the append-only log, inside dir",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: set_appendfilename,
        show: |c| c.appendfilename.clone(),
    },
    Directive {
        name: "appendfsync",
        default: &["everysec"],
        value_name: "always|everysec|no",
        help: "When the log is fsynced: before each reply, once a second, or when the OS decides",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: set_appendfsync,
        show: |c| c.appendfsync.as_str().to_owned(),
    },
    Directive {
        name: "auto-aof-rewrite-percentage",
        default: &["100"],
        value_name: "PERCENT",
        help: "Rewrite the log once it has grown by this much since the last rewrite; 0 disables",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: set_rewrite_percentage,
        show: |c| c.auto_aof_rewrite_percentage.to_string(),
    },
    Directive {
        name: "auto-aof-rewrite-min-size",
        default: &["64mb"],
        value_name: "SIZE",
        help: "Never rewrite the log automatically below this size (e.g. 64mb, 1gb)",
        syntax: Syntax::Size,
        flags: MUTABLE,
        set: set_rewrite_min_size,
        show: |c| c.auto_aof_rewrite_min_size.to_string(),
    },
    Directive {
        name: "aof-load-good-prefix",
        default: &["no"],
        value_name: "yes|no",
        help: "On a corrupt log, start with the records before the damage instead of refusing",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: |c, args| set_yes_no(&mut c.aof_load_good_prefix, &args[0]),
        show: |c| yes_no(c.aof_load_good_prefix),
    },
    Directive {
        name: "io-threads",
        default: &["1"],
        value_name: "N",
        help: "Threads serving connections and the core (1 to 128); 1 runs everything on one thread",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: set_io_threads,
        show: |c| c.io_threads.to_string(),
    },
    Directive {
        name: "maxclients",
        default: &["10000"],
        value_name: "N",
        help: "Clients connected at once; more are told so and disconnected",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: set_maxclients,
        show: |c| c.maxclients.to_string(),
    },
    Directive {
        name: "requirepass",
        default: &[""],
        value_name: "PASSWORD",
        help: "Password clients must give with AUTH or HELLO ... AUTH (empty: none)",
        syntax: Syntax::One,
        flags: MUTABLE | SENSITIVE,
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
        syntax: Syntax::One,
        flags: MUTABLE,
        set: |c, args| set_yes_no(&mut c.protected_mode, &args[0]),
        show: |c| yes_no(c.protected_mode),
    },
    Directive {
        name: "timeout",
        default: &["0"],
        value_name: "SECONDS",
        help: "Close a client after this many seconds without a request; 0 never does",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: set_timeout,
        show: |c| c.timeout.to_string(),
    },
    Directive {
        name: "slowlog-log-slower-than",
        default: &["10000"],
        value_name: "MICROSECONDS",
        help: "Log commands that run at least this long in SLOWLOG; 0 logs every command, a negative value none",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: |c, args| {
            c.slowlog_log_slower_than = expect(
                integer_in(&args[0], i64::MIN..=i64::MAX),
                "an integer of microseconds",
            )?;
            Ok(())
        },
        show: |c| c.slowlog_log_slower_than.to_string(),
    },
    Directive {
        name: "slowlog-max-len",
        default: &["128"],
        value_name: "N",
        help: "The most entries SLOWLOG keeps; the oldest go first",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: |c, args| {
            c.slowlog_max_len =
                expect(integer_in(&args[0], 0..=i64::MAX), "an integer, 0 or more")?;
            Ok(())
        },
        show: |c| c.slowlog_max_len.to_string(),
    },
    Directive {
        name: "maxmemory",
        default: &["0"],
        value_name: "SIZE",
        help: "Memory limit: above it an acquire that would take a run gets OOM and changes nothing; leases are never evicted (0 = no limit)",
        syntax: Syntax::Size,
        flags: MUTABLE,
        set: |c, args| {
            c.maxmemory = expect(
                parse_memory(&args[0]),
                "a size, e.g. 2gb, or 0 for no limit",
            )?;
            Ok(())
        },
        show: |c| c.maxmemory.to_string(),
    },
    Directive {
        name: "maxmemory-policy",
        default: &["noeviction"],
        value_name: "POLICY",
        help: "What happens above maxmemory: noeviction, the only policy (leases are never evicted)",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: |_, args| {
            let known = args[0].eq_ignore_ascii_case("noeviction");
            known.then_some(()).ok_or(Refusal::Expected(
                "noeviction: leases are never evicted, so it is the only policy",
            ))
        },
        show: |_| "noeviction".to_owned(),
    },
    Directive {
        name: "proto-max-bulk-len",
        default: &["512mb"],
        value_name: "SIZE",
        help: "The longest argument a client may send (at least 1mb)",
        syntax: Syntax::Size,
        flags: MUTABLE,
        set: |c, args| set_size(&mut c.proto_max_bulk_len, &args[0]),
        show: |c| c.proto_max_bulk_len.to_string(),
    },
    Directive {
        name: "client-query-buffer-limit",
        default: &["1gb"],
        value_name: "SIZE",
        help: "The most bytes of unfinished requests a client may send before it is closed (at least 1mb)",
        syntax: Syntax::Size,
        flags: MUTABLE,
        set: |c, args| set_size(&mut c.client_query_buffer_limit, &args[0]),
        show: |c| c.client_query_buffer_limit.to_string(),
    },
    Directive {
        name: "client-output-buffer-limit",
        default: &[
            "normal", "512mb", "128mb", "60", "pubsub", "32mb", "8mb", "60",
        ],
        value_name: "CLASS HARD SOFT SECONDS",
        help: "Disconnect a client whose unread replies pass HARD bytes, or stay above SOFT for SECONDS, by CLASS (normal, pubsub; replica is accepted and unused); 0 turns a limit off",
        syntax: Syntax::OutputLimit,
        flags: MUTABLE,
        set: set_output_limits,
        show: show_output_limits,
    },
    Directive {
        name: "lease-max-id-len",
        default: &["1024"],
        value_name: "BYTES",
        help: "The longest run or worker id a lease command accepts (at least 1024)",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: set_lease_max_id_len,
        show: |c| c.lease_max_id_len.to_string(),
    },
    Directive {
        name: "lease-max-data-len",
        default: &["64kb"],
        value_name: "SIZE",
        help: "The longest run data (a checkpoint) LEASE.SETDATA accepts (e.g. 64kb, 1mb)",
        syntax: Syntax::Size,
        flags: MUTABLE,
        set: set_lease_max_data_len,
        show: |c| c.lease_max_data_len.to_string(),
    },
    Directive {
        name: "lease-history-len",
        default: &["8"],
        value_name: "COUNT",
        help: "Tenures LEASE.HISTORY keeps per run, the current one included (0 to 1000); 0 keeps none",
        syntax: Syntax::One,
        flags: MUTABLE,
        set: set_lease_history_len,
        show: |c| c.lease_history_len.to_string(),
    },
    Directive {
        name: "tls-port",
        default: &["0"],
        value_name: "PORT",
        help: "TLS port to listen on as well, on every bind address; 0 turns TLS off",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: set_tls_port,
        show: |c| c.tls_port.to_string(),
    },
    Directive {
        name: "tls-cert-file",
        default: &[""],
        value_name: "PATH",
        help: "The server's certificate chain (PEM), needed with tls-port",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| set_path(&mut c.tls_cert_file, &args[0]),
        show: |c| show_path(&c.tls_cert_file),
    },
    Directive {
        name: "tls-key-file",
        default: &[""],
        value_name: "PATH",
        help: "The private key of tls-cert-file (PEM, unencrypted), needed with tls-port",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| set_path(&mut c.tls_key_file, &args[0]),
        show: |c| show_path(&c.tls_key_file),
    },
    Directive {
        name: "tls-ca-cert-file",
        default: &[""],
        value_name: "PATH",
        help: "CA certificates (PEM) that sign client certificates, needed unless tls-auth-clients is no",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| set_path(&mut c.tls_ca_cert_file, &args[0]),
        show: |c| show_path(&c.tls_ca_cert_file),
    },
    Directive {
        name: "tls-auth-clients",
        default: &["yes"],
        value_name: "yes|no|optional",
        help: "TLS clients need a certificate signed by tls-ca-cert-file (yes), may present one (optional), or are not asked (no)",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: set_tls_auth_clients,
        show: |c| c.tls_auth_clients.as_str().to_owned(),
    },
    Directive {
        name: "tls-cluster",
        default: &["no"],
        value_name: "yes|no",
        help: "With cluster-enabled yes, the node bus in mutual TLS: tls-cert-file and tls-key-file are this node's certificate (its IP address a SAN), tls-ca-cert-file the CA that signs every node's",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| set_yes_no(&mut c.tls_cluster, &args[0]),
        show: |c| yes_no(c.tls_cluster),
    },
    // Cluster mode is set up at start-up only: a node cannot change the
    // membership or its own place in it under a running Raft.
    Directive {
        name: "cluster-enabled",
        default: &["no"],
        value_name: "yes|no",
        help: "Run as one node of a cluster (cluster-node-id, cluster-nodes) instead of on its own",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| set_yes_no(&mut c.cluster_enabled, &args[0]),
        show: |c| yes_no(c.cluster_enabled),
    },
    Directive {
        name: "cluster-node-id",
        default: &["0"],
        value_name: "ID",
        help: "This node's id in cluster-nodes, a positive integer; required with cluster-enabled yes (0: none)",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| {
            c.cluster_node_id = expect(
                integer_in(&args[0], 0..=i64::MAX),
                "a positive integer, this node's id in cluster-nodes (0: none)",
            )?;
            Ok(())
        },
        show: |c| c.cluster_node_id.to_string(),
    },
    Directive {
        name: "cluster-nodes",
        default: &[""],
        value_name: "ID@HOST:PORT[@BUSPORT]",
        help: "Every node of the cluster, this one included: id@host:port (its client address; the bus is on port + 10000 unless @busport says otherwise), the same on every node",
        syntax: Syntax::Words,
        flags: IMMUTABLE,
        set: |c, args| {
            c.cluster_nodes = parse_nodes(args).map_err(Refusal::Expected)?;
            Ok(())
        },
        show: |c| show_nodes(&c.cluster_nodes),
    },
    Directive {
        name: "cluster-port",
        default: &["0"],
        value_name: "PORT",
        help: "This node's bus port, as cluster-nodes gives it (0: the one cluster-nodes gives, by default port + 10000)",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| {
            c.cluster_port = expect(integer_in(&args[0], 0..=65535), PORT)?;
            Ok(())
        },
        show: |c| c.cluster_port.to_string(),
    },
    Directive {
        name: "cluster-secret",
        default: &[""],
        value_name: "SECRET",
        help: "The secret the nodes' bus requires of every peer, the same on every node; required when a node is not on a loopback address",
        syntax: Syntax::One,
        flags: IMMUTABLE | SENSITIVE,
        set: |c, args| {
            c.cluster_secret = args[0].clone();
            Ok(())
        },
        show: |c| c.cluster_secret.clone(),
    },
    Directive {
        name: "cluster-join",
        default: &["no"],
        value_name: "yes|no",
        help: "A new node for a running cluster: it starts empty and waits for CLUSTER ADDNODE on the leader, never forming a cluster of its own (ignored once it has a Raft log)",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| set_yes_no(&mut c.cluster_join, &args[0]),
        show: |c| yes_no(c.cluster_join),
    },
    Directive {
        name: "cluster-init-from-single",
        default: &["no"],
        value_name: "yes|no",
        help: "On its first start in cluster mode, this node forms a one-node cluster from the single node's leases, history and token ceiling in dir (the others join with CLUSTER ADDNODE)",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| set_yes_no(&mut c.cluster_init_from_single, &args[0]),
        show: |c| yes_no(c.cluster_init_from_single),
    },
    Directive {
        name: "cluster-recover-as-single",
        default: &["no"],
        value_name: "yes|no",
        help: "With cluster-enabled no: start as a single node from the cluster node's Raft state in dir (recovery from one surviving node); the Raft state is then set aside as raft.recovered",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| set_yes_no(&mut c.cluster_recover_as_single, &args[0]),
        show: |c| yes_no(c.cluster_recover_as_single),
    },
    Directive {
        name: "cluster-max-clock-skew",
        default: &["500"],
        value_name: "MILLISECONDS",
        help: "A node whose clock differs from the majority's by more than this refuses to lead",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| set_millis(&mut c.cluster_max_clock_skew, &args[0]),
        show: |c| c.cluster_max_clock_skew.to_string(),
    },
    Directive {
        name: "cluster-heartbeat-interval",
        default: &["100"],
        value_name: "MILLISECONDS",
        help: "How often the leader sends heartbeats to the other nodes",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| set_millis(&mut c.cluster_heartbeat_interval, &args[0]),
        show: |c| c.cluster_heartbeat_interval.to_string(),
    },
    Directive {
        name: "cluster-election-timeout",
        default: &["600"],
        value_name: "MILLISECONDS",
        help: "A follower that hears no leader for between this and twice this stands for election (at least 3 heartbeat intervals)",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| set_millis(&mut c.cluster_election_timeout, &args[0]),
        show: |c| c.cluster_election_timeout.to_string(),
    },
    Directive {
        name: "cluster-redirect",
        default: &["proxy"],
        value_name: "proxy|moved",
        help: "A follower sends a client's write to the leader and relays the answer (proxy), or answers -MOVED with the leader's address (moved)",
        syntax: Syntax::One,
        flags: IMMUTABLE,
        set: |c, args| {
            c.cluster_redirect = expect(ClusterRedirect::from_name(&args[0]), "proxy or moved")?;
            Ok(())
        },
        show: |c| c.cluster_redirect.as_str().to_owned(),
    },
];

/// Settings that Redis tools query (redis-benchmark asks for `save` and
/// `appendonly`) but that leased does not let anyone change: `CONFIG GET`
/// answers them truthfully, while the file and the command line reject
/// them as unknown. A name moves to `DIRECTIVES` once it can be set.
pub(super) static READ_ONLY: &[(&str, &str)] = &[
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

const PORT: &str = "an integer from 0 to 65535";

fn set_port(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.port = expect(integer_in(&args[0], 0..=65535), PORT)?;
    Ok(())
}

fn set_tcp_backlog(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.tcp_backlog = expect(
        integer_in(&args[0], 1..=65535),
        "an integer from 1 to 65535",
    )?;
    Ok(())
}

fn set_metrics_port(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.metrics_port = expect(integer_in(&args[0], 0..=65535), PORT)?;
    Ok(())
}

fn set_tls_port(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.tls_port = expect(integer_in(&args[0], 0..=65535), PORT)?;
    Ok(())
}

/// A file path; the empty string, as in Redis, for none.
fn set_path(field: &mut Option<PathBuf>, arg: &str) -> Result<(), Refusal> {
    *field = (!arg.is_empty()).then(|| PathBuf::from(arg));
    Ok(())
}

fn show_path(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

fn set_tls_auth_clients(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.tls_auth_clients = match args[0].to_ascii_lowercase().as_str() {
        "yes" => TlsAuthClients::Yes,
        "optional" => TlsAuthClients::Optional,
        "no" => TlsAuthClients::No,
        _ => return Err(Refusal::Expected("yes, no or optional")),
    };
    Ok(())
}

fn set_bind(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.bind = args
        .iter()
        .map(|arg| arg.parse().map_err(|_| Refusal::Address(arg.clone())))
        .collect::<Result<_, _>>()?;
    Ok(())
}

fn show_bind(config: &Config) -> String {
    let addresses: Vec<String> = config.bind.iter().map(IpAddr::to_string).collect();
    addresses.join(" ")
}

fn set_dir(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    if args[0].is_empty() {
        return Err(Refusal::Expected("a non-empty path"));
    }
    config.dir = PathBuf::from(&args[0]);
    Ok(())
}

fn set_lease_ttl(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    let ttl = parse_finite_f64(args[0].as_bytes()).filter(|ttl| *ttl > 0.0);
    config.lease_ttl = expect(ttl, "a finite number of seconds greater than 0")?;
    Ok(())
}

/// A duration in seconds: any finite number, 0 or more.
fn set_seconds(field: &mut f64, arg: &str) -> Result<(), Refusal> {
    let seconds = parse_finite_f64(arg.as_bytes()).filter(|seconds| *seconds >= 0.0);
    *field = expect(seconds, "a finite number of seconds, 0 or more")?;
    Ok(())
}

/// A duration in whole milliseconds, at least 1 and at most a day.
fn set_millis(field: &mut u64, arg: &str) -> Result<(), Refusal> {
    *field = expect(
        integer_in(arg, 1..=86_400_000),
        "a whole number of milliseconds, from 1 to 86400000",
    )?;
    Ok(())
}

/// The rules between directives, which no one line can be refused for
/// since another may follow it: checked once the file and the command
/// line are read, and once a `CONFIG SET` has applied all its values. The
/// error comes with the directive it is blamed on.
pub(super) fn check_together(config: &Config) -> Result<(), (&'static str, DirectiveError)> {
    // An acquire without LOCKDELAY gets lease-lock-delay: it must be a
    // delay an acquire may ask for.
    if config.lease_lock_delay > config.lease_max_lock_delay {
        let error = DirectiveError::LockDelayOverMax {
            lock_delay: config.lease_lock_delay.to_string(),
            max: config.lease_max_lock_delay.to_string(),
        };
        return Err(("lease-lock-delay", error));
    }
    // The cluster directives with each other and with `port`.
    if let Err(error) = config.cluster() {
        return Err((error.directive(), DirectiveError::Cluster(error)));
    }
    Ok(())
}

fn set_maxclients(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.maxclients = expect(integer_in(&args[0], 1..=i64::MAX), "a positive integer")?;
    Ok(())
}

fn set_timeout(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.timeout = expect(
        integer_in(&args[0], 0..=i64::MAX),
        "whole seconds, 0 or more",
    )?;
    Ok(())
}

/// The smallest request size limit, as in Redis: below it ordinary
/// requests would be refused.
const MIN_REQUEST_LIMIT: u64 = 1024 * 1024;

fn set_size(field: &mut usize, arg: &str) -> Result<(), Refusal> {
    let size = parse_memory(arg)
        .filter(|size| *size >= MIN_REQUEST_LIMIT)
        .and_then(|size| usize::try_from(size).ok());
    *field = expect(size, "a size of at least 1mb, e.g. 512mb")?;
    Ok(())
}

/// Redis's `client-output-buffer-limit`: one or more classes, each with
/// its limits; the classes not named keep theirs. Every class is checked
/// before any is stored, so a refused value changes nothing.
fn set_output_limits(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    const SYNTAX: &str =
        "one or more '<class> <hard> <soft> <soft-seconds>', the class normal, replica or pubsub";
    const CLASS: &str =
        "the class normal, replica, slave or pubsub in '<class> <hard> <soft> <soft-seconds>'";
    const LIMITS: &str = "sizes and whole seconds in '<class> <hard> <soft> <soft-seconds>', \
                          e.g. 'normal 512mb 128mb 60'";
    let (groups, []) = args.as_chunks::<4>() else {
        return Err(Refusal::Expected(SYNTAX));
    };
    let mut limits = config.client_output_buffer_limit;
    for [class, hard, soft, seconds] in groups {
        let slot = match class.to_ascii_lowercase().as_str() {
            "normal" => Some(&mut limits.normal),
            "pubsub" => Some(&mut limits.pubsub),
            // Redis tools may send it; leased has no replicas to limit.
            "replica" | "slave" => None,
            _ => return Err(Refusal::Expected(CLASS)),
        };
        let limit = OutputLimit {
            hard: expect(parse_memory(hard), LIMITS)?,
            soft: expect(parse_memory(soft), LIMITS)?,
            soft_seconds: expect(integer_in(seconds, 0..=i64::MAX), LIMITS)?,
        };
        if let Some(slot) = slot {
            *slot = limit;
        }
    }
    config.client_output_buffer_limit = limits;
    Ok(())
}

/// Each class leased keeps, by the name Redis prints, in Redis's order.
fn output_classes(limits: &OutputLimits) -> [(&'static str, OutputLimit); 2] {
    [("normal", limits.normal), ("pubsub", limits.pubsub)]
}

/// As Redis prints it: each class, then bytes and seconds.
fn show_output_limits(config: &Config) -> String {
    let classes = output_classes(&config.client_output_buffer_limit);
    let shown: Vec<String> = classes
        .iter()
        .map(|(class, limit)| {
            format!(
                "{class} {} {} {}",
                limit.hard, limit.soft, limit.soft_seconds
            )
        })
        .collect();
    shown.join(" ")
}

fn set_lease_max_id_len(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.lease_max_id_len = expect(
        integer_in(&args[0], 1024..=i64::MAX),
        "an integer of at least 1024",
    )?;
    Ok(())
}

fn set_lease_max_data_len(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    let bytes: u64 = expect(
        parse_memory(&args[0]),
        "bytes, or a size such as 64kb or 1mb",
    )?;
    config.lease_max_data_len = usize::try_from(bytes).unwrap_or(usize::MAX);
    Ok(())
}

fn set_lease_history_len(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.lease_history_len = expect(integer_in(&args[0], 0..=1000), "an integer from 0 to 1000")?;
    Ok(())
}

fn set_io_threads(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.io_threads = expect(integer_in(&args[0], 1..=128), "an integer from 1 to 128")?;
    Ok(())
}

fn set_loglevel(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.loglevel = expect(
        LogLevel::from_name(&args[0]),
        "one of: debug, verbose, notice, warning, nothing",
    )?;
    Ok(())
}

fn set_logformat(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.logformat = match args[0].to_ascii_lowercase().as_str() {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        _ => return Err(Refusal::Expected("text or json")),
    };
    Ok(())
}

fn set_yes_no(field: &mut bool, arg: &str) -> Result<(), Refusal> {
    *field = match arg.to_ascii_lowercase().as_str() {
        "yes" => true,
        "no" => false,
        _ => return Err(Refusal::Expected("yes or no")),
    };
    Ok(())
}

fn yes_no(value: bool) -> String {
    if value { "yes" } else { "no" }.to_owned()
}

fn set_appendfilename(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    let name = &args[0];
    // A bare name, as in Redis: the log lives in `dir`.
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(Refusal::Expected("a file name without '/'"));
    }
    config.appendfilename = name.clone();
    Ok(())
}

fn set_appendfsync(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.appendfsync = expect(
        FsyncPolicy::from_name(&args[0]),
        "one of: always, everysec, no",
    )?;
    Ok(())
}

fn set_rewrite_percentage(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.auto_aof_rewrite_percentage =
        expect(integer_in(&args[0], 0..=i64::MAX), "an integer >= 0")?;
    Ok(())
}

fn set_rewrite_min_size(config: &mut Config, args: &[String]) -> Result<(), Refusal> {
    config.auto_aof_rewrite_min_size = expect(
        parse_memory(&args[0]),
        "bytes, or a size such as 64mb or 1gb",
    )?;
    Ok(())
}

/// A size as redis.conf writes one: a number with an optional unit, where
/// `k`, `m` and `g` are powers of 1000 and `kb`, `mb` and `gb` powers of
/// 1024, in any case.
pub(super) fn parse_memory(text: &str) -> Option<u64> {
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

/// Arguments as the setters take them: text, which every directive's
/// arguments are.
pub(super) fn utf8_args(args: Vec<Vec<u8>>) -> Result<Vec<String>, DirectiveError> {
    args.into_iter()
        .map(|arg| String::from_utf8(arg).map_err(|_| DirectiveError::NotUtf8))
        .collect()
}

/// The inverse of `parse_memory`, as Redis writes sizes back: in the
/// largest of `gb`, `mb` and `kb` that divides them, else in bytes. A size
/// past `i64::MAX` cannot be read back in bytes; `parse_memory` only makes
/// one with a unit, so one of `g`, `m` and `k` divides it if no power of
/// 1024 does.
pub(super) fn format_memory(bytes: u64) -> String {
    const BINARY: [(u64, &str); 3] = [(1 << 30, "gb"), (1 << 20, "mb"), (1 << 10, "kb")];
    const DECIMAL: [(u64, &str); 3] = [(1_000_000_000, "g"), (1_000_000, "m"), (1000, "k")];
    let huge = i64::try_from(bytes).is_err();
    BINARY
        .iter()
        .chain(DECIMAL.iter().filter(|_| huge))
        .find(|(unit, _)| bytes != 0 && bytes.is_multiple_of(*unit))
        .map_or_else(
            || bytes.to_string(),
            |(unit, name)| format!("{}{name}", bytes / unit),
        )
}

pub(super) fn lookup(name: &str) -> Option<&'static Directive> {
    DIRECTIVES
        .iter()
        .find(|d| d.name.eq_ignore_ascii_case(name))
}

impl Directive {
    pub(super) fn is_mutable(&self) -> bool {
        self.flags & IMMUTABLE == 0
    }

    pub(super) fn is_sensitive(&self) -> bool {
        self.flags & SENSITIVE != 0
    }

    /// Whether the directive takes several arguments (`bind 127.0.0.1 ::1`),
    /// which `CONFIG SET` receives as the words of one value.
    pub(super) fn takes_words(&self) -> bool {
        self.syntax.takes_words()
    }

    /// The running value as arguments of a file line, unquoted: what the
    /// setter must be given to store the same value again.
    pub(super) fn file_args(&self, config: &Config) -> Vec<String> {
        let shown = (self.show)(config);
        match self.syntax {
            Syntax::One => vec![shown],
            // `show` prints a size as an integer; were it ever not one, its
            // text would still be what the setter reads.
            Syntax::Size => match shown.parse() {
                Ok(bytes) => vec![format_memory(bytes)],
                Err(_) => vec![shown],
            },
            Syntax::Words => shown.split(' ').map(str::to_owned).collect(),
            Syntax::OutputLimit => output_classes(&config.client_output_buffer_limit)
                .iter()
                .flat_map(|(class, limit)| {
                    [
                        (*class).to_owned(),
                        format_memory(limit.hard),
                        format_memory(limit.soft),
                        limit.soft_seconds.to_string(),
                    ]
                })
                .collect(),
        }
    }

    /// Checks and stores the directive's arguments: the one way every
    /// source of configuration sets a value.
    pub(super) fn apply(&self, config: &mut Config, args: &[String]) -> Result<(), DirectiveError> {
        self.syntax.check(self.name, args.len())?;
        (self.set)(config, args).map_err(|refusal| match refusal {
            Refusal::Expected(expected) => DirectiveError::Invalid {
                name: self.name,
                expected,
            },
            Refusal::Address(address) => DirectiveError::InvalidAddress { address },
        })
    }

    pub(super) fn arg(&self) -> Arg {
        Arg::new(self.name)
            .long(self.name)
            .value_name(self.value_name)
            .num_args(self.syntax.range())
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

/// A placeholder in `Config::default` until the table's default is set.
const NO_OUTPUT_LIMIT: OutputLimit = OutputLimit {
    hard: 0,
    soft: 0,
    soft_seconds: 0,
};

impl Default for Config {
    fn default() -> Config {
        // Placeholders only: every field but `config_file` is then set from
        // the table, through the same setters as the file.
        let mut config = Config {
            port: 0,
            bind: Vec::new(),
            tcp_backlog: 0,
            metrics_port: 0,
            dir: PathBuf::new(),
            lease_ttl: 0.0,
            lease_retention: 0.0,
            lease_max_skew: 0.0,
            lease_lock_delay: 0.0,
            lease_max_lock_delay: 0.0,
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
            maxmemory: 0,
            client_query_buffer_limit: 0,
            client_output_buffer_limit: OutputLimits {
                normal: NO_OUTPUT_LIMIT,
                pubsub: NO_OUTPUT_LIMIT,
            },
            lease_max_id_len: 0,
            lease_max_data_len: 0,
            lease_history_len: 0,
            tls_port: 0,
            tls_cert_file: None,
            tls_key_file: None,
            tls_ca_cert_file: None,
            tls_auth_clients: TlsAuthClients::Yes,
            tls_cluster: false,
            cluster_enabled: false,
            cluster_node_id: 0,
            cluster_nodes: Vec::new(),
            cluster_port: 0,
            cluster_secret: String::new(),
            cluster_join: false,
            cluster_init_from_single: false,
            cluster_recover_as_single: false,
            cluster_max_clock_skew: 0,
            cluster_heartbeat_interval: 0,
            cluster_election_timeout: 0,
            cluster_redirect: ClusterRedirect::Proxy,
            config_file: None,
        };
        for directive in DIRECTIVES {
            let args: Vec<String> = directive.default.iter().map(|&a| a.to_owned()).collect();
            if let Err(what) = directive.apply(&mut config, &args) {
                panic!("the default of '{}' is invalid: {what}", directive.name);
            }
        }
        if let Err((name, what)) = check_together(&config) {
            panic!("the default of '{name}' is invalid: {what}");
        }
        config
    }
}
