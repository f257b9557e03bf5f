//! `INFO`: the server's state as `# Section` blocks of `field:value` lines,
//! in Redis 7's format and section order, so the tools that parse Redis's
//! INFO (redis-cli --stat, exporters, monitoring agents) read ours.
//!
//! Fields have real values wherever leased has them. A field for a Redis
//! feature leased does not have (RDB snapshots, replicas, Lua, eviction)
//! holds the value Redis shows while that feature is unused, never a
//! made-up figure. docs/metrics.md lists what each field means here.

use std::fmt::Write;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use crate::cluster::views;
use crate::command::ClientKind;
use crate::core::{CommandStats, CoreReport, SnapshotReport};
use crate::registry::{Refused, TenureEnd};
use crate::reply::format_double;
use crate::state::cluster_stats::ClusterStats;
use crate::state::{SAMPLE_INTERVAL, Shared};
use crate::system;

/// What a section is rendered from: the shared state, and the core's
/// report (taken on the core, rendered here, off it).
struct Context<'a> {
    shared: &'a Shared,
    report: &'a CoreReport,
}

type Section = fn(&mut String, &Context);

/// Every section: its name for `INFO <name>`, its header, and its
/// renderer, in the order Redis prints them; leased's own comes last.
const SECTIONS: &[(&str, &str, Section)] = &[
    ("server", "Server", server),
    ("clients", "Clients", clients),
    ("memory", "Memory", memory),
    ("persistence", "Persistence", persistence),
    ("stats", "Stats", stats),
    ("replication", "Replication", replication),
    ("cpu", "CPU", cpu),
    ("commandstats", "Commandstats", commandstats),
    ("errorstats", "Errorstats", errorstats),
    ("latencystats", "Latencystats", latencystats),
    ("cluster", "Cluster", cluster),
    ("keyspace", "Keyspace", keyspace),
    ("leases", "Leases", leases),
];

/// The sections Redis leaves out of `default` (and of a bare `INFO`), and
/// `all` and `everything` include.
const NOT_DEFAULT: [&str; 2] = ["commandstats", "latencystats"];

/// Renders the requested sections: for none or `default`, all but
/// [`NOT_DEFAULT`]; for `all` or `everything`, all of them (leased has no
/// modules, which is all that `everything` adds in Redis); names are
/// case-insensitive and unknown ones ignored, as in Redis.
pub fn render(requested: &[Bytes], shared: &Shared, report: &CoreReport) -> String {
    let context = Context { shared, report };
    let is = |name: &Bytes, word: &str| name.eq_ignore_ascii_case(word.as_bytes());
    let asked = |word: &str| requested.iter().any(|name| is(name, word));
    let all = asked("all") || asked("everything");
    let default = requested.is_empty() || asked("default");
    let mut out = String::new();
    for (name, header, render) in SECTIONS {
        let chosen = all || asked(name) || (default && !NOT_DEFAULT.contains(name));
        if !chosen {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        let _ = write!(out, "# {header}\r\n");
        render(&mut out, &context);
    }
    out
}

fn server(out: &mut String, context: &Context) {
    let shared = context.shared;
    let uptime = shared.started.elapsed().as_secs();
    let port = shared.listen_addrs.first().map_or(0, |a| a.port());
    let executable = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let config = shared.config();
    let config_file = (config.config_file.as_ref())
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let hz = Duration::from_secs(1).as_millis() / SAMPLE_INTERVAL.as_millis();
    // Tools gate features on redis_version: this is the Redis release whose
    // protocol and command formats leased follows, not leased's version.
    line(out, "redis_version", "7.0.0");
    line(out, "leased_version", env!("CARGO_PKG_VERSION"));
    line(out, "redis_git_sha1", "00000000");
    line(out, "redis_git_dirty", 0);
    line(out, "redis_mode", views::mode(shared.cluster().is_some()));
    line(out, "os", system::os_name());
    line(out, "arch_bits", usize::BITS);
    line(out, "monotonic_clock", "POSIX clock_gettime");
    line(out, "multiplexing_api", multiplexing_api());
    line(out, "process_id", std::process::id());
    line(out, "process_supervised", "no");
    line(out, "run_id", &ids().0);
    line(out, "tcp_port", port);
    line(
        out,
        "server_time_usec",
        unix_time(SystemTime::now()).as_micros(),
    );
    line(out, "uptime_in_seconds", uptime);
    line(out, "uptime_in_days", uptime / 86_400);
    // The frequency of the server's periodic work: sampling the rates.
    line(out, "hz", hz);
    line(out, "configured_hz", hz);
    line(out, "executable", executable);
    line(out, "config_file", config_file);
    line(out, "io_threads_active", i32::from(config.io_threads > 1));
}

/// The readiness API under tokio's reactor, as Redis names its own.
fn multiplexing_api() -> &'static str {
    if cfg!(any(target_os = "linux", target_os = "android")) {
        "epoll"
    } else if cfg!(any(
        target_os = "macos",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "openbsd"
    )) {
        "kqueue"
    } else {
        "unknown"
    }
}

/// `run_id` and `master_replid`: random, and fixed for the process's life.
fn ids() -> &'static (String, String) {
    static IDS: OnceLock<(String, String)> = OnceLock::new();
    IDS.get_or_init(|| (system::random_hex_id(), system::random_hex_id()))
}

/// The client buffers, as of each client's last request: the largest
/// read buffer, the largest write buffer, and all of them together.
fn client_buffers(shared: &Shared) -> (usize, usize, usize) {
    let (mut input, mut output, mut total) = (0, 0, 0);
    for client in shared.clients.snapshot() {
        let meta = client.meta();
        input = input.max(meta.query_buf_capacity);
        output = output.max(meta.output_capacity);
        total += meta.query_buf_capacity + meta.output_capacity;
    }
    (input, output, total)
}

/// Clients subscribed to a channel or a pattern.
pub(crate) fn pubsub_clients(shared: &Shared) -> usize {
    let clients = shared.clients.snapshot();
    clients
        .iter()
        .filter(|client| client.kind() == ClientKind::PubSub)
        .count()
}

fn clients(out: &mut String, context: &Context) {
    let shared = context.shared;
    let (input, output, _) = client_buffers(shared);
    line(out, "connected_clients", shared.clients.len());
    line(out, "cluster_connections", 0);
    line(out, "maxclients", shared.config().maxclients);
    line(out, "client_recent_max_input_buffer", input);
    line(out, "client_recent_max_output_buffer", output);
    line(out, "blocked_clients", context.report.blocked_clients);
    line(out, "tracking_clients", 0);
    line(out, "pubsub_clients", pubsub_clients(shared));
    line(out, "clients_in_timeout_table", 0);
}

fn memory(out: &mut String, context: &Context) {
    let memory = context.shared.stats.memory();
    let system::AllocatorStats {
        allocated,
        active,
        resident,
    } = memory.allocator;
    let (rss, peak) = (memory.rss, memory.peak);
    let system = system::total_system_memory();
    let (_, _, clients) = client_buffers(context.shared);
    line(out, "used_memory", allocated);
    line(out, "used_memory_human", human_bytes(allocated));
    line(out, "used_memory_rss", rss);
    line(out, "used_memory_rss_human", human_bytes(rss));
    line(out, "used_memory_peak", peak);
    line(out, "used_memory_peak_human", human_bytes(peak));
    let peak_perc = ratio(allocated, peak) * 100.0;
    line(out, "used_memory_peak_perc", format!("{peak_perc:.2}%"));
    line(out, "allocator_allocated", allocated);
    line(out, "allocator_active", active);
    line(out, "allocator_resident", resident);
    line(out, "total_system_memory", system);
    line(out, "total_system_memory_human", human_bytes(system));
    // No Lua: no interpreter, no scripts.
    line(out, "used_memory_lua", 0);
    line(out, "used_memory_lua_human", human_bytes(0));
    line(out, "used_memory_scripts", 0);
    line(out, "used_memory_scripts_human", human_bytes(0));
    line(out, "number_of_cached_scripts", 0);
    let maxmemory = context.shared.config().maxmemory;
    line(out, "maxmemory", maxmemory);
    line(out, "maxmemory_human", human_bytes(maxmemory));
    line(out, "maxmemory_policy", "noeviction");
    fragmentation(out, "allocator_frag", active, allocated);
    fragmentation(out, "allocator_rss", resident, active);
    fragmentation(out, "rss_overhead", rss, resident);
    fragmentation(out, "mem_fragmentation", rss, allocated);
    line(out, "mem_not_counted_for_evict", 0);
    line(out, "mem_replication_backlog", 0);
    line(out, "mem_clients_slaves", 0);
    line(out, "mem_clients_normal", clients);
    line(out, "mem_allocator", system::allocator_name());
    // Run data (LEASE.SETDATA): counted in used_memory as well; this is its
    // own share, run ids, values and an estimate of the bookkeeping (of
    // runs that keep only history too). Past tenures (LEASE.HISTORY) are
    // apart: their packed bytes, and how many.
    line(out, "mem_run_data", context.report.run_data_bytes);
    line(out, "run_data_runs", context.report.run_data);
    line(out, "mem_run_history", context.report.history_bytes);
    line(out, "run_history_entries", context.report.history_entries);
    line(out, "active_defrag_running", 0);
    line(out, "lazyfree_pending_objects", 0);
}

/// `<name>_ratio` and `<name>_bytes` of `larger` over `smaller`, as Redis
/// reports its fragmentation figures.
fn fragmentation(out: &mut String, name: &str, larger: u64, smaller: u64) {
    line(
        out,
        &format!("{name}_ratio"),
        format!("{:.2}", ratio(larger, smaller)),
    );
    let bytes = i128::from(larger) - i128::from(smaller);
    line(out, &format!("{name}_bytes"), bytes);
}

fn ratio(numerator: u64, denominator: u64) -> f64 {
    if denominator == 0 {
        0.0
    } else {
        numerator as f64 / denominator as f64
    }
}

/// `LASTSAVE`, and `rdb_last_save_time`: when a cluster node's snapshot
/// file last changed; the server's start otherwise (a single node saves
/// no snapshot, and Redis counts its start as its last save).
pub fn last_save(shared: &Shared, report: &CoreReport) -> u64 {
    let started = unix_time(shared.stats.started).as_secs();
    (report.snapshot.as_ref())
        .and_then(|snapshot| snapshot.last_save_unix)
        .unwrap_or(started)
}

fn persistence(out: &mut String, context: &Context) {
    let ok = |good: bool| if good { "ok" } else { "err" };
    line(out, "loading", 0);
    line(out, "async_loading", 0);
    // A cluster node's Raft snapshot is its RDB file. A single node has
    // none: Redis's figures for a server that never saved, whose last
    // save is its start.
    let snapshot = context.report.snapshot.clone().unwrap_or(SnapshotReport {
        last_ok: true,
        ..SnapshotReport::default()
    });
    let or_none = |value: Option<u64>| value.map_or(-1, |value| value as i64);
    line(out, "rdb_changes_since_last_save", snapshot.changes_since);
    line(
        out,
        "rdb_bgsave_in_progress",
        i32::from(snapshot.in_progress),
    );
    line(
        out,
        "rdb_last_save_time",
        last_save(context.shared, context.report),
    );
    line(out, "rdb_last_bgsave_status", ok(snapshot.last_ok));
    line(
        out,
        "rdb_last_bgsave_time_sec",
        or_none(snapshot.last_took_secs),
    );
    line(
        out,
        "rdb_current_bgsave_time_sec",
        or_none(snapshot.current_secs),
    );
    line(out, "rdb_saves", snapshot.saves);
    // Built on a thread, not in a forked child.
    line(out, "rdb_last_cow_size", 0);
    let log = context.report.log.as_ref();
    line(out, "aof_enabled", i32::from(log.is_some()));
    let in_progress = log.is_some_and(|log| log.rewrite_in_progress);
    line(out, "aof_rewrite_in_progress", i32::from(in_progress));
    line(out, "aof_rewrite_scheduled", 0);
    let last_rewrite_secs = log.map_or(-1, |log| log.last_rewrite_secs);
    line(out, "aof_last_rewrite_time_sec", last_rewrite_secs);
    let rewrite_ok = log.is_none_or(|log| log.last_rewrite_ok);
    line(out, "aof_last_bgrewrite_status", ok(rewrite_ok));
    line(out, "aof_rewrites", log.map_or(0, |log| log.rewrites));
    let write_ok = log.is_none_or(|log| log.last_write_ok);
    line(out, "aof_last_write_status", ok(write_ok));
    // Rewrites run on a thread, not in a forked child.
    line(out, "aof_last_cow_size", 0);
    if let Some(log) = log {
        line(out, "aof_current_size", log.size);
        line(out, "aof_base_size", log.base_size);
        line(out, "aof_pending_rewrite", 0);
        line(out, "aof_fsync", log.policy.as_str());
        line(out, "aof_last_fsync_status", ok(log.last_fsync_ok));
    }
    line(out, "token_ceiling", context.report.token_ceiling);
    if context.report.snapshot.is_some() {
        // What a copy of the snapshot file holds: a restore starts above
        // a floor at least this high.
        line(out, "snapshot_last_log_index", or_none(snapshot.index));
        line(
            out,
            "snapshot_last_fencing_token",
            or_none(snapshot.last_token),
        );
    }
}

fn stats(out: &mut String, context: &Context) {
    let stats = &context.shared.stats;
    let count = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    let rates = stats.instantaneous();
    let kbps = |bytes_per_sec: f64| format!("{:.2}", bytes_per_sec / 1024.0);
    line(
        out,
        "total_connections_received",
        count(&stats.total_connections_received),
    );
    line(
        out,
        "total_commands_processed",
        count(&stats.total_commands_processed),
    );
    line(out, "instantaneous_ops_per_sec", rates.ops_per_sec as u64);
    line(out, "total_net_input_bytes", count(&stats.net_input_bytes));
    line(
        out,
        "total_net_output_bytes",
        count(&stats.net_output_bytes),
    );
    line(out, "total_net_repl_input_bytes", 0);
    line(out, "total_net_repl_output_bytes", 0);
    line(
        out,
        "instantaneous_input_kbps",
        kbps(rates.input_bytes_per_sec),
    );
    line(
        out,
        "instantaneous_output_kbps",
        kbps(rates.output_bytes_per_sec),
    );
    line(out, "instantaneous_input_repl_kbps", "0.00");
    line(out, "instantaneous_output_repl_kbps", "0.00");
    line(
        out,
        "rejected_connections",
        count(&stats.rejected_connections),
    );
    // A full resync is, in a cluster, a snapshot sent to a follower that
    // lacked the log it covers (0 on a single node).
    let snapshots_sent = &context.shared.cluster_stats.snapshots_sent;
    line(out, "sync_full", ClusterStats::read(snapshots_sent));
    line(out, "sync_partial_ok", 0);
    line(out, "sync_partial_err", 0);
    // A lease is the only key, and it leaves by being reclaimed.
    line(out, "expired_keys", context.report.commands.reclaimed);
    line(out, "expired_stale_perc", "0.00");
    line(out, "expired_time_cap_reached_count", 0);
    line(out, "evicted_keys", 0);
    line(out, "evicted_clients", 0);
    line(out, "keyspace_hits", context.report.commands.hits);
    line(out, "keyspace_misses", context.report.commands.misses);
    line(
        out,
        "pubsub_channels",
        context.shared.pubsub.channel_count(),
    );
    line(
        out,
        "pubsub_patterns",
        context.shared.pubsub.pattern_count(),
    );
    line(out, "pubsubshard_channels", 0);
    line(out, "latest_fork_usec", 0);
    line(out, "total_forks", 0);
    line(out, "migrate_cached_sockets", 0);
    line(out, "slave_expires_tracked_keys", 0);
    line(out, "active_defrag_hits", 0);
    line(out, "active_defrag_misses", 0);
    line(out, "active_defrag_key_hits", 0);
    line(out, "active_defrag_key_misses", 0);
}

/// A single node is a master without replicas, as Redis shows one. In a
/// cluster the leader is the master and the other nodes its replicas
/// (`cluster::views`), their offset the log index applied, and leased's
/// own lines follow Redis's.
fn replication(out: &mut String, context: &Context) {
    let status = context.shared.cluster();
    match status.as_deref() {
        None => {
            line(out, "role", "master");
            line(out, "connected_slaves", 0);
        }
        Some(status) => {
            for (name, value) in views::replication_role(status) {
                line(out, &name, value);
            }
        }
    }
    line(out, "master_failover_state", "no-failover");
    line(out, "master_replid", &ids().1);
    line(out, "master_replid2", "0".repeat(40));
    let offset = status.as_deref().map_or(0, views::replication_offset);
    line(out, "master_repl_offset", offset);
    line(out, "second_repl_offset", -1);
    line(out, "repl_backlog_active", 0);
    // No backlog exists, so none is allocated or configured.
    line(out, "repl_backlog_size", 0);
    line(out, "repl_backlog_first_byte_offset", 0);
    line(out, "repl_backlog_histlen", 0);
    if let Some(status) = status.as_deref() {
        for (name, value) in views::replication_cluster(status) {
            line(out, &name, value);
        }
    }
}

fn cpu(out: &mut String, _: &Context) {
    let times = system::cpu_times();
    let seconds = |time: Duration| format!("{}.{:06}", time.as_secs(), time.subsec_micros());
    line(out, "used_cpu_sys", seconds(times.system));
    line(out, "used_cpu_user", seconds(times.user));
    line(out, "used_cpu_sys_children", seconds(times.children_system));
    line(out, "used_cpu_user_children", seconds(times.children_user));
}

fn cluster(out: &mut String, context: &Context) {
    let enabled = context.shared.cluster().is_some();
    line(out, "cluster_enabled", i32::from(enabled));
}

/// One database, `db0`, whose keys are the leases; every lease expires,
/// so `expires` is `keys`. Without leases there is no line, as in Redis.
fn keyspace(out: &mut String, context: &Context) {
    let leases = context.report.leases;
    if leases > 0 {
        line(
            out,
            "db0",
            format!("keys={leases},expires={leases},avg_ttl=0"),
        );
    }
}

fn leases(out: &mut String, context: &Context) {
    let report = context.report;
    line(out, "leases", report.leases);
    line(out, "leases_active", report.leases - report.expired);
    line(out, "leases_expired", report.expired);
    line(out, "leases_reclaimed", report.commands.reclaimed);
    line(out, "last_fencing_token", report.last_token);
    let time = report.registry_time;
    let time = if time.is_finite() {
        format_double(time)
    } else {
        String::new()
    };
    line(out, "registry_time", time);
    line(out, "lease_ttl", format_double(report.lease_ttl));
    let config = context.shared.config();
    line(
        out,
        "lease_retention",
        format_double(config.lease_retention),
    );
    line(out, "lease_max_skew", format_double(config.lease_max_skew));
    let counts = report.commands.counts;
    for (name, [ok, failed]) in CommandStats::NAMES.iter().zip(counts) {
        line(out, &format!("{name}_ok"), ok);
        line(out, &format!("{name}_failed"), failed);
    }
    health(out, report);
}

/// `cmdstat_<name>:calls=N,usec=N,usec_per_call=F,rejected_calls=N,failed_calls=N`
/// for each command called or refused since the start or `CONFIG
/// RESETSTAT`; a subcommand is `<command>|<subcommand>`.
fn commandstats(out: &mut String, context: &Context) {
    for (name, counts) in context.shared.calls.commands() {
        line(out, &format!("cmdstat_{name}"), counts.info_value());
    }
}

/// `errorstat_<PREFIX>:count=N` for each error reply's first word.
fn errorstats(out: &mut String, context: &Context) {
    for (prefix, count) in context.shared.calls.errors() {
        // As Redis's getSafeInfoString: no field separators in a name.
        let prefix: String = prefix
            .chars()
            .map(|c| if "#:\n\r".contains(c) { '_' } else { c })
            .collect();
        line(
            out,
            &format!("errorstat_{prefix}"),
            format!("count={count}"),
        );
    }
}

/// `latency_percentiles_usec_<name>:p50=F,p99=F,p99.9=F` for each command
/// that ran.
fn latencystats(out: &mut String, context: &Context) {
    for (name, counts) in context.shared.calls.commands() {
        if counts.calls > 0 {
            let name = format!("latency_percentiles_usec_{name}");
            line(out, &name, counts.latency_value());
        }
    }
}

/// How heartbeats, tenures and waits fared, and events published.
fn health(out: &mut String, report: &CoreReport) {
    let health = &report.health;
    for (why, count) in Refused::ALL.iter().zip(health.refused) {
        line(out, &format!("heartbeats_refused_{}", why.as_str()), count);
    }
    line(out, "heartbeat_slack", health.slack.info_value());
    for (how, count) in TenureEnd::ALL.iter().zip(health.ended) {
        let name = how.as_str().replace('-', "_");
        line(out, &format!("tenures_{name}"), count);
    }
    let commands = &report.commands;
    line(out, "acquires_waited", commands.waited);
    line(out, "acquire_wait_seconds", commands.wait.info_value());
    line(out, "acquires_timed_out", commands.timed_out);
    line(out, "acquires_lock_delayed", health.lock_delayed);
    line(out, "events_published", commands.events);
}

fn line(out: &mut String, name: &str, value: impl std::fmt::Display) {
    let _ = write!(out, "{name}:{value}\r\n");
}

fn unix_time(time: SystemTime) -> Duration {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

/// Bytes as Redis's `bytesToHuman` writes them: `1.50M`.
fn human_bytes(bytes: u64) -> String {
    let units = [
        (1u64 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for (size, unit) in units {
        if bytes >= size {
            return format!("{:.2}{unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::status::{ClusterStatus, Member, Role};
    use crate::config::Config;
    use crate::core::CommandStats;
    use crate::registry::Health;
    use crate::state::Clock;

    fn report() -> CoreReport {
        CoreReport {
            leases: 0,
            expired: 0,
            last_token: 0,
            token_ceiling: 0,
            registry_time: f64::NEG_INFINITY,
            lease_ttl: 10.0,
            blocked_clients: 0,
            run_data: 0,
            run_data_bytes: 0,
            history_entries: 0,
            history_bytes: 0,
            commands: CommandStats::default(),
            health: Health::default(),
            log: None,
            snapshot: None,
        }
    }

    /// The `field:value` lines of `sections`, without headers.
    fn rendered(shared: &Shared, sections: &[&str]) -> Vec<String> {
        let sections: Vec<Bytes> = sections
            .iter()
            .map(|name| Bytes::copy_from_slice(name.as_bytes()))
            .collect();
        render(&sections, shared, &report())
            .lines()
            .filter(|line| !line.starts_with('#') && !line.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// Node 2 of two, following node 1.
    fn follower() -> ClusterStatus {
        let member = |id: u64| Member {
            id,
            addr: format!("127.0.0.1:700{id}").parse().unwrap(),
            bus_addr: format!("127.0.0.1:1700{id}").parse().unwrap(),
            voter: true,
            matched: None,
        };
        ClusterStatus {
            id: 2,
            role: Role::Follower,
            term: 3,
            leader: Some(1),
            commit_index: Some(9),
            applied_index: Some(8),
            last_log_index: Some(9),
            members: vec![member(1), member(2)],
            elections: 0,
            clock: Default::default(),
        }
    }

    #[test]
    fn replication_and_cluster_follow_the_cluster_status() {
        let shared = Shared::new(Config::default(), Vec::new(), Vec::new(), Clock::System);
        let single = rendered(&shared, &["replication", "cluster"]);
        assert_eq!(single[..2], ["role:master", "connected_slaves:0"]);
        assert!(single.contains(&"master_repl_offset:0".to_owned()));
        assert_eq!(single.last().unwrap(), "cluster_enabled:0");
        assert!(!single.iter().any(|line| line.starts_with("cluster_term")));

        shared.set_cluster(Some(follower()));
        let lines = rendered(&shared, &["replication", "cluster"]);
        assert_eq!(
            lines[..8],
            [
                "role:slave",
                "master_host:127.0.0.1",
                "master_port:7001",
                "master_link_status:up",
                "master_sync_in_progress:0",
                "slave_repl_offset:8",
                "connected_slaves:0",
                "master_failover_state:no-failover",
            ]
        );
        assert!(lines.contains(&"master_repl_offset:8".to_owned()));
        let tail: Vec<&str> = lines
            .iter()
            .rev()
            .take(5)
            .rev()
            .map(String::as_str)
            .collect();
        assert_eq!(
            tail,
            [
                "cluster_term:3",
                "cluster_leader_id:1",
                "cluster_commit_index:9",
                "cluster_applied_index:8",
                "cluster_enabled:1",
            ]
        );

        shared.set_cluster(None);
        assert_eq!(rendered(&shared, &["replication", "cluster"]), single);
    }

    #[test]
    fn human_bytes_as_redis_writes_them() {
        assert_eq!(human_bytes(0), "0B");
        assert_eq!(human_bytes(1023), "1023B");
        assert_eq!(human_bytes(1536), "1.50K");
        assert_eq!(human_bytes(3 << 20), "3.00M");
        assert_eq!(human_bytes(5 << 30), "5.00G");
    }
}
