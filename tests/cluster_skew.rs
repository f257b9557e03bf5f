//! Cluster mode's clock-skew rule with real processes: three `leased`
//! nodes on loopback, node 3 started with its clock 2 s ahead
//! (`LEASED_CLOCK_OFFSET_MS=2000`). Node 3 says so in `CLUSTER INFO` and
//! its log, and never leads: not at the first election, nor when the
//! leader is killed and only one other node is left to lead.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::binary::{Server, cluster_node, free_port, wait_until};

/// Node `id`'s process, on `port`, in the cluster `nodes` describes.
fn start(id: usize, port: u16, nodes: &str, dir: &Path, offset_ms: Option<i64>) -> Server {
    let mut command = cluster_node(dir, id as u64, port, nodes);
    if let Some(offset) = offset_ms {
        command.env("LEASED_CLOCK_OFFSET_MS", offset.to_string());
    }
    Server::spawn(command, dir).expect("node starts")
}

#[test]
fn a_node_whose_clock_is_ahead_never_leads() {
    let began = Instant::now();
    let temp = tempfile::tempdir().unwrap();
    // Client and bus ports, each free a moment ago.
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let nodes = (1..)
        .zip(&ports)
        .map(|(id, (port, bus))| format!("{id}@127.0.0.1:{port}@{bus}"))
        .collect::<Vec<_>>()
        .join(" ");
    let mut servers: Vec<Option<Server>> = (1..=3)
        .zip(&ports)
        .map(|(id, (port, _))| {
            let dir = temp.path().join(format!("node{id}"));
            let offset = (id == 3).then_some(2000);
            Some(start(id, *port, &nodes, &dir, offset))
        })
        .collect();

    // Every poll also checks that node 3 does not lead.
    let poll = |servers: &[Option<Server>]| -> Vec<Option<HashMap<String, String>>> {
        let infos: Vec<_> = (servers.iter())
            .map(|server| server.as_ref().and_then(Server::cluster_info))
            .collect();
        if let Some(three) = &infos[2] {
            assert_ne!(three["cluster_role"], "leader", "node 3 leads: {three:?}");
        }
        infos
    };

    // Node 3 finds itself skewed; nodes 1 and 2 within; one of them leads.
    let leader = wait_until(Duration::from_secs(15), || {
        let infos = poll(&servers);
        let infos: Vec<&HashMap<String, String>> = infos.iter().flatten().collect();
        if infos.len() < 3 {
            return Err("not every node answers".into());
        }
        let (three, others) = (infos[2], &infos[..2]);
        let offset: i64 = three["cluster_clock_offset_ms"].parse().unwrap();
        let leaders: Vec<&str> = infos
            .iter()
            .map(|i| i["cluster_leader_id"].as_str())
            .collect();
        let agreed = leaders.iter().all(|l| *l == leaders[0]) && leaders[0] != "0";
        let healthy = (others.iter()).all(|i| i["cluster_clock_skewed"] == "0");
        match three["cluster_clock_skewed"] == "1" && (1900..=2100).contains(&offset) {
            true if healthy && agreed => Ok(leaders[0].parse::<usize>().unwrap()),
            _ => Err(format!("{infos:?}")),
        }
    });
    assert_ne!(leader, 3);

    // The leader dies: the last healthy node must lead, node 3 still not.
    servers[leader - 1].take().unwrap().kill9();
    let survivor = 3 - leader;
    wait_until(Duration::from_secs(15), || {
        let infos = poll(&servers);
        match &infos[survivor - 1] {
            Some(info) if info["cluster_role"] == "leader" => Ok(()),
            other => Err(format!("node {survivor}: {other:?}")),
        }
    });
    // A while longer: node 3 does not take over.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        poll(&servers);
        std::thread::sleep(Duration::from_millis(50));
    }

    let log = servers[2].as_ref().unwrap().log();
    assert!(log.contains("LEASED_CLOCK_OFFSET_MS is set"), "{log}");
    assert!(
        log.contains("ms off the majority's (ahead; more than cluster-max-clock-skew, 500 ms)"),
        "{log}"
    );
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "{:?}",
        began.elapsed()
    );
    for server in servers.iter_mut().flatten() {
        server.stop();
    }
}
