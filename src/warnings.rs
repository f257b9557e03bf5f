//! Settings that work but put leases at risk, and what to do about each.
//!
//! [`risky_settings`] is the one place these rules live: the server logs
//! every message it returns once, as a warning, when it starts. Each says
//! what is set, why it matters, and how to fix it, as Redis's start-up
//! warnings do. Settings that cannot work at all are refused by the
//! configuration or at bind time instead (protected mode, TLS files).

use std::net::IpAddr;

use crate::aof::FsyncPolicy;
use crate::config::Config;

/// Below this default TTL, in seconds, heartbeats must come faster than
/// ordinary pauses (a GC, a busy machine, a slow network) last.
const SHORT_LEASE_TTL: f64 = 1.0;

/// The warnings for `config`, in the order of conf/leased.conf's sections;
/// none for the defaults.
pub fn risky_settings(config: &Config) -> Vec<String> {
    let checks: [fn(&Config) -> Option<String>; 9] = [
        open_to_anyone,
        password_in_clear,
        short_lease_ttl,
        keeps_expired_leases_forever,
        memory_only,
        fsync_left_to_the_os,
        never_rewritten,
        loads_good_prefix,
        cluster_host_not_bound,
    ];
    checks.iter().filter_map(|check| check(config)).collect()
}

/// The first address in `bind` that other machines may reach.
fn exposed_address(config: &Config) -> Option<IpAddr> {
    config.bind.iter().copied().find(|a| !a.is_loopback())
}

fn open_to_anyone(config: &Config) -> Option<String> {
    let address = exposed_address(config)?;
    (!config.protected_mode && config.requirepass.is_empty()).then(|| {
        format!(
            "protected-mode is no and no password is set, and the server listens on \
             {address}: anyone who can reach that address can acquire, extend and release \
             any lease. Set 'requirepass <password>' (with TLS, tls-port), or bind only \
             loopback addresses (e.g. 'bind 127.0.0.1')."
        )
    })
}

fn password_in_clear(config: &Config) -> Option<String> {
    let address = exposed_address(config)?;
    (!config.requirepass.is_empty() && config.tls_port == 0).then(|| {
        format!(
            "The server listens on {address} without TLS: the password (AUTH) and every \
             fencing token cross the network in clear, and anyone who can read the traffic \
             can log in with the password. Set tls-port, tls-cert-file and tls-key-file and \
             have clients connect with TLS, or bind only loopback addresses."
        )
    })
}

fn short_lease_ttl(config: &Config) -> Option<String> {
    (config.lease_ttl < SHORT_LEASE_TTL).then(|| {
        format!(
            "lease-ttl is {} seconds: a worker must send heartbeats several times within \
             that, so any pause that long (a GC, a busy machine, a slow network) loses its \
             lease and another worker takes the run over. Raise lease-ttl (the default is \
             10 seconds), or give short-lived leases their own 'TTL' in LEASE.ACQUIRE.",
            config.lease_ttl
        )
    })
}

fn keeps_expired_leases_forever(config: &Config) -> Option<String> {
    (config.lease_retention == 0.0).then(|| {
        "lease-retention is 0: expired leases that nobody takes over are kept forever, \
         so memory grows with every abandoned run. Set \
         lease-retention to the longest a worker may take to release a lease after it \
         expired (the default is 3600 seconds)."
            .to_owned()
    })
}

fn memory_only(config: &Config) -> Option<String> {
    (!config.appendonly).then(|| {
        "appendonly is no: leases are kept in memory only and do not survive a restart; \
         fencing tokens do (the token ceiling is stored in the data directory). After a \
         restart every run is free again while its old holder may still be working. Set \
         'appendonly yes' to keep leases across restarts."
            .to_owned()
    })
}

fn fsync_left_to_the_os(config: &Config) -> Option<String> {
    (config.appendonly && config.appendfsync == FsyncPolicy::No).then(|| {
        "appendfsync is no: the operating system decides when the append-only log reaches \
         the disk (usually within 30 seconds), so a crash of the machine can lose that \
         much: acquires, heartbeats and releases clients were told about. Fencing tokens \
         still never repeat. Set 'appendfsync everysec' (about a second at most) or \
         'appendfsync always' (nothing acknowledged is lost)."
            .to_owned()
    })
}

fn never_rewritten(config: &Config) -> Option<String> {
    (config.appendonly && config.auto_aof_rewrite_percentage == 0).then(|| {
        "auto-aof-rewrite-percentage is 0: the append-only log is never rewritten \
         automatically, yet every acquire, heartbeat and release makes it longer, until \
         the disk is full and changes are refused (MISCONF). Run BGREWRITEAOF regularly, \
         or set auto-aof-rewrite-percentage back to 100."
            .to_owned()
    })
}

fn loads_good_prefix(config: &Config) -> Option<String> {
    (config.appendonly && config.aof_load_good_prefix).then(|| {
        "aof-load-good-prefix is yes: a damaged append-only log no longer stops the \
         start; the records after the damage are dropped (a copy of the file is kept) and \
         the leases they held are forgotten. Use it to recover from one damaged log, then \
         set it back to 'no' so that the next damage stops the start for someone to look \
         at."
        .to_owned()
    })
}

/// This node's host in `cluster-nodes` is not one it listens on: the
/// other nodes and clients will look for it there. A warning, not an
/// error: behind NAT or a forwarded port the address may be right.
fn cluster_host_not_bound(config: &Config) -> Option<String> {
    let cluster = config.cluster().ok().flatten()?;
    let host = cluster.me().addr.ip();
    let listens = |bound: &IpAddr| *bound == host || bound.is_unspecified();
    (!config.bind.iter().any(listens)).then(|| {
        format!(
            "cluster-nodes gives this node (node {}) the address {host}, which is not one              of its bind addresses: the other nodes and clients will look for it where it              does not listen. Add {host} to bind, or correct this node's entry in              cluster-nodes.",
            cluster.node_id
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warnings_for(args: &[&str]) -> Vec<String> {
        let all = std::iter::once("leased").chain(args.iter().copied());
        risky_settings(&Config::from_args(all).unwrap())
    }

    /// The one warning `args` gives, which must contain `expected`.
    fn only_warning(args: &[&str], expected: &str) -> String {
        let warnings = warnings_for(args);
        assert_eq!(warnings.len(), 1, "{args:?}: {warnings:#?}");
        assert!(warnings[0].contains(expected), "{args:?}: {}", warnings[0]);
        warnings[0].clone()
    }

    #[test]
    fn the_defaults_give_none() {
        assert_eq!(warnings_for(&[]), Vec::<String>::new());
    }

    #[test]
    fn safe_settings_give_none() {
        let safe: &[&[&str]] = &[
            &["--bind", "127.0.0.1", "::1", "--protected-mode", "no"],
            &[
                "--bind",
                "0.0.0.0",
                "--requirepass",
                "pw",
                "--tls-port",
                "6480",
            ],
            &["--lease-ttl", "1", "--lease-retention", "0.001"],
            &["--appendfsync", "always", "--aof-load-good-prefix", "no"],
            // Log settings do not matter without the log; its own warning
            // says so.
            &["--appendonly", "no", "--appendfsync", "no"],
        ];
        for args in safe {
            let warnings = warnings_for(args);
            let expected = usize::from(args.contains(&"--appendonly"));
            assert_eq!(warnings.len(), expected, "{args:?}: {warnings:#?}");
        }
    }

    #[test]
    fn a_cluster_node_on_an_address_it_does_not_bind() {
        let cluster = [
            "--cluster-enabled",
            "yes",
            "--cluster-node-id",
            "1",
            "--cluster-nodes",
            "1@127.0.0.2:6479 2@127.0.0.1:6480",
        ];
        only_warning(&cluster, "node 1) the address 127.0.0.2");
        for bind in ["127.0.0.2", "0.0.0.0"] {
            let mut args = cluster.to_vec();
            args.extend(["--bind", "127.0.0.1", bind]);
            assert_eq!(warnings_for(&args), Vec::<String>::new(), "{bind}");
        }
    }

    #[test]
    fn an_open_server_is_one_warning_not_two() {
        // Without a password there is nothing to send in clear.
        only_warning(
            &["--bind", "::", "--protected-mode", "no"],
            "anyone who can reach",
        );
    }

    #[test]
    fn several_risky_settings_give_one_warning_each_in_order() {
        let warnings = warnings_for(&[
            "--aof-load-good-prefix",
            "yes",
            "--lease-retention",
            "0",
            "--appendfsync",
            "no",
        ]);
        let starts: Vec<&str> = warnings
            .iter()
            .map(|w| w.split(':').next().unwrap())
            .collect();
        assert_eq!(
            starts,
            [
                "lease-retention is 0",
                "appendfsync is no",
                "aof-load-good-prefix is yes"
            ]
        );
    }
}
