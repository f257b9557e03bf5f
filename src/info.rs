//! `INFO`: the server's state as `# Section` blocks of `field:value` lines,
//! in Redis's format, so tools that parse Redis's INFO read ours.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::aof::LogStatus;
use crate::core::CommandStats;
use crate::registry::Registry;
use crate::reply::format_double;
use crate::server::Shared;

/// Section names in the order INFO prints them.
const SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "leases",
];

/// Renders the requested sections (all of them for none, `all`, `default`
/// or `everything`); unknown names are ignored, as in Redis.
pub fn render(
    requested: &[Bytes],
    shared: &Shared,
    registry: &Registry,
    commands: &CommandStats,
    log: Option<&LogStatus>,
) -> String {
    let everything = requested.is_empty()
        || requested.iter().any(|name| {
            [&b"all"[..], b"default", b"everything"]
                .iter()
                .any(|word| name.eq_ignore_ascii_case(word))
        });
    let mut out = String::new();
    for section in SECTIONS {
        let wanted = everything
            || requested
                .iter()
                .any(|name| name.eq_ignore_ascii_case(section.as_bytes()));
        if !wanted {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        match *section {
            "server" => server(&mut out, shared),
            "clients" => clients(&mut out, shared),
            "memory" => memory(&mut out),
            "persistence" => persistence(&mut out, registry, log),
            "stats" => stats(&mut out, shared),
            _ => leases(&mut out, registry, shared, commands),
        }
    }
    out
}

fn server(out: &mut String, shared: &Shared) {
    let uptime = shared.started.elapsed().as_secs();
    let port = shared.listen_addrs.first().map_or(0, |a| a.port());
    let executable = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let config_file = shared
        .config
        .config_file
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    out.push_str("# Server\r\n");
    // Tools gate features on redis_version: this is the Redis release whose
    // protocol and command formats leased follows, not leased's version.
    line(out, "redis_version", "7.0.0");
    line(out, "leased_version", env!("CARGO_PKG_VERSION"));
    line(out, "redis_mode", "standalone");
    line(
        out,
        "os",
        format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
    );
    line(out, "arch_bits", usize::BITS);
    line(out, "process_id", std::process::id());
    line(out, "tcp_port", port);
    line(out, "server_time_usec", now_usec());
    line(out, "uptime_in_seconds", uptime);
    line(out, "uptime_in_days", uptime / 86_400);
    line(out, "executable", executable);
    line(out, "config_file", config_file);
}

fn clients(out: &mut String, shared: &Shared) {
    out.push_str("# Clients\r\n");
    line(out, "connected_clients", shared.clients.len());
}

fn memory(out: &mut String) {
    out.push_str("# Memory\r\n");
    let (allocated, resident) = allocator_stats();
    let rss = resident_bytes();
    line(out, "used_memory", allocated);
    line(out, "used_memory_human", human_bytes(allocated));
    line(out, "used_memory_rss", rss);
    line(out, "used_memory_rss_human", human_bytes(rss));
    line(out, "allocator_resident", resident);
    line(out, "mem_allocator", "jemalloc");
}

/// Bytes allocated and resident according to jemalloc, the server's
/// allocator. Its statistics are cached: advancing the epoch refreshes them.
fn allocator_stats() -> (u64, u64) {
    use tikv_jemalloc_ctl::{epoch, stats};
    let _ = epoch::advance();
    let allocated = stats::allocated::read().unwrap_or(0);
    let resident = stats::resident::read().unwrap_or(0);
    (allocated as u64, resident as u64)
}

fn persistence(out: &mut String, registry: &Registry, log: Option<&LogStatus>) {
    out.push_str("# Persistence\r\n");
    line(out, "loading", 0);
    line(out, "aof_enabled", i32::from(log.is_some()));
    if let Some(log) = log {
        let ok = |good: bool| if good { "ok" } else { "err" };
        line(out, "aof_fsync", log.policy.as_str());
        line(
            out,
            "aof_rewrite_in_progress",
            i32::from(log.rewrite_in_progress),
        );
        line(out, "aof_rewrites", log.rewrites);
        line(out, "aof_last_rewrite_time_sec", log.last_rewrite_secs);
        line(out, "aof_last_bgrewrite_status", ok(log.last_rewrite_ok));
        line(out, "aof_last_write_status", ok(log.last_write_ok));
        line(out, "aof_last_fsync_status", ok(log.last_fsync_ok));
        line(out, "aof_current_size", log.size);
        line(out, "aof_base_size", log.base_size);
    }
    line(out, "token_ceiling", registry.token_ceiling());
}

fn stats(out: &mut String, shared: &Shared) {
    let stats = &shared.stats;
    out.push_str("# Stats\r\n");
    line(
        out,
        "total_connections_received",
        stats.total_connections_received.load(Ordering::Relaxed),
    );
    line(
        out,
        "total_commands_processed",
        stats.total_commands_processed.load(Ordering::Relaxed),
    );
}

fn leases(out: &mut String, registry: &Registry, shared: &Shared, stats: &CommandStats) {
    out.push_str("# Leases\r\n");
    let expired = registry.expired_count();
    line(out, "leases", registry.len());
    line(out, "leases_active", registry.len() - expired);
    line(out, "leases_expired", expired);
    line(out, "leases_reclaimed", registry.reclaimed());
    line(out, "last_fencing_token", registry.last_token());
    let time = registry.time();
    let time = if time.is_finite() {
        format_double(time)
    } else {
        String::new()
    };
    line(out, "registry_time", time);
    line(out, "lease_ttl", format_double(registry.default_ttl()));
    line(
        out,
        "lease_retention",
        format_double(shared.config.lease_retention),
    );
    for (name, [ok, failed]) in CommandStats::NAMES.iter().zip(stats.counts) {
        line(out, &format!("{name}_ok"), ok);
        line(out, &format!("{name}_failed"), failed);
    }
}

fn line(out: &mut String, name: &str, value: impl std::fmt::Display) {
    let _ = write!(out, "{name}:{value}\r\n");
}

fn now_usec() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or_default()
}

/// The process's resident set size, from `/proc/self/statm` where there is
/// one (Linux); 0 elsewhere.
fn resident_bytes() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .unwrap_or(0);
    // Linux on the platforms we build for uses 4 KiB pages.
    pages * 4096
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
