//! `tls-cluster yes` with real processes: the node bus in mutual TLS.
//! Four nodes on loopback are listed in `cluster-nodes`; three have
//! certificates from the cluster's CA, the fourth one from another CA.
//! The three elect a leader and a follower proxies an acquire to it over
//! the TLS bus; the fourth cannot join (it never learns a leader), and
//! the others' logs say why. Also: the start-up refusal without the files.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::binary::{BINARY, Server, free_port, run_to_exit, wait_until};
use common::client::{acquire_cmd, lease_or_null};
use common::pki::{Ca, ca, leaf};
use rcgen::ExtendedKeyUsagePurpose;

/// A node's certificate for 127.0.0.1, signed by `issuer`, for server and
/// client use: its certificate and key files in `dir`.
fn node_files(dir: &Path, name: &str, issuer: &Ca) -> (PathBuf, PathBuf) {
    let usages = [
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let (cert, key) = leaf(issuer, name, &["127.0.0.1"], &usages);
    let (cert_file, key_file) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&cert_file, cert).unwrap();
    std::fs::write(&key_file, key).unwrap();
    (cert_file, key_file)
}

/// Node `id` on `port`, in the cluster `nodes` describes, its bus in TLS
/// with `cert`/`key` and the cluster's CA, and a cluster secret as well.
fn start(id: usize, port: u16, nodes: &str, dir: &Path, files: [&Path; 3]) -> Server {
    let [cert, key, ca] = files;
    let mut command = Command::new(BINARY);
    command
        .args(["--port", &port.to_string(), "--dir"])
        .arg(dir)
        .args(["--cluster-enabled", "yes"])
        .args(["--cluster-node-id", &id.to_string()])
        .args(["--cluster-nodes", nodes])
        .args(["--cluster-secret", "s3cret"])
        .args(["--tls-cluster", "yes", "--tls-cert-file"])
        .arg(cert)
        .arg("--tls-key-file")
        .arg(key)
        .arg("--tls-ca-cert-file")
        .arg(ca);
    Server::spawn(command, dir).expect("node starts")
}

/// A node's `ROLE`, its first word.
fn role(server: &Server) -> Option<String> {
    let mut con = (server.client())
        .get_connection_with_timeout(Duration::from_secs(1))
        .ok()?;
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut con).ok()?;
    redis::from_redis_value(role.first()?.clone()).ok()
}

#[test]
fn nodes_with_certificates_from_the_ca_form_a_cluster_over_tls_and_a_stranger_cannot_join() {
    let began = Instant::now();
    let temp = tempfile::tempdir().unwrap();
    let pki = temp.path();
    let authority = ca("cluster CA");
    let ca_file = pki.join("ca.pem");
    std::fs::write(&ca_file, authority.pem()).unwrap();
    let other = ca("another CA");

    let ports: Vec<(u16, u16)> = (0..4).map(|_| (free_port(), free_port())).collect();
    let nodes = (1..)
        .zip(&ports)
        .map(|(id, (port, bus))| format!("{id}@127.0.0.1:{port}@{bus}"))
        .collect::<Vec<_>>()
        .join(" ");
    let servers: Vec<Server> = (1..=4)
        .zip(&ports)
        .map(|(id, (port, _))| {
            // Node 4's certificate is from another CA; it trusts the
            // cluster's CA like the others.
            let issuer = if id == 4 { &other } else { &authority };
            let (cert, key) = node_files(pki, &format!("node{id}"), issuer);
            let dir = temp.path().join(format!("node{id}"));
            start(id, *port, &nodes, &dir, [&cert, &key, &ca_file])
        })
        .collect();
    for server in &servers {
        assert!(
            server.log().contains("its bus listens on"),
            "{}",
            server.log()
        );
        assert!(server.log().contains("in TLS"), "{}", server.log());
    }

    // Nodes 1 to 3 agree on a leader among them, whose ROLE is master.
    let leader = wait_until(Duration::from_secs(15), || {
        let infos: Vec<_> = servers[..3].iter().map(Server::cluster_info).collect();
        let leaders: Vec<Option<&str>> = (infos.iter())
            .map(|info| Some(info.as_ref()?.get("cluster_leader_id")?.as_str()))
            .collect();
        let leader = leaders[0].and_then(|id| id.parse::<usize>().ok());
        match leader {
            Some(id @ 1..=3) if leaders.iter().all(|l| *l == leaders[0]) => {
                match role(&servers[id - 1]).as_deref() {
                    Some("master") => Ok(id),
                    other => Err(format!("leader {id}'s ROLE: {other:?}")),
                }
            }
            _ => Err(format!("{leaders:?}")),
        }
    });

    // An acquire through a follower is proxied to the leader over TLS.
    let follower = if leader == 1 { 2 } else { 1 };
    let mut con = servers[follower - 1].connect();
    let lease = wait_until(Duration::from_secs(5), || {
        let reply: redis::Value = acquire_cmd("tls-run", "w", None, Some(30.0))
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        lease_or_null(&reply).ok_or_else(|| "null".to_string())
    });
    assert_eq!(lease.fencing_token, 1);
    assert_eq!(role(&servers[follower - 1]).as_deref(), Some("slave"));

    // Node 4 never learns of a leader: nobody lets it in, nor will it let
    // a leader in (its certificate is not one the others trust). Watched
    // for 2 s, longer than its election timeout, so it stood at least once.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let info = servers[3].cluster_info().expect("node 4 answers");
        assert_eq!(info["cluster_leader_id"], "0", "{info:?}");
        assert_ne!(info["cluster_role"], "leader", "{info:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Its log says its certificate was refused (by the peers dialling it).
    let log = servers[3].log();
    assert!(log.contains("received fatal alert"), "{log}");
    // The others refused its certificate, and say so.
    let refused = wait_until(Duration::from_secs(5), || {
        let logs: Vec<String> = servers[..3].iter().map(Server::log).collect();
        (logs.iter())
            .find(|log| log.contains("bus: TLS handshake with") && log.contains("UnknownIssuer"))
            .cloned()
            .ok_or_else(|| logs.join("\n---\n"))
    });
    assert!(refused.contains("invalid peer certificate"), "{refused}");

    assert!(
        began.elapsed() < Duration::from_secs(30),
        "{:?}",
        began.elapsed()
    );
    for mut server in servers {
        server.stop();
    }
}

#[test]
fn tls_cluster_without_its_files_stops_the_start() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("data");
    let port = free_port();
    let nodes = format!("1@127.0.0.1:{port}@{}", free_port());
    let exited = run_to_exit(&[
        "--port",
        &port.to_string(),
        "--dir",
        dir.to_str().unwrap(),
        "--cluster-enabled",
        "yes",
        "--cluster-node-id",
        "1",
        "--cluster-nodes",
        &nodes,
        "--tls-cluster",
        "yes",
    ]);
    let output = exited.output();
    assert!(!exited.status.success(), "{output}");
    assert!(
        output.contains("tls-cluster is yes but tls-cert-file is not set"),
        "{output}"
    );
    assert!(!output.contains("Ready to accept connections"), "{output}");
}
