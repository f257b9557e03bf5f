//! Three `leased` processes forming one cluster on loopback, each directed
//! bus link i→j through a [`Proxy`] of its own, so a test (or the nemesis
//! example, which includes this file by `#[path]`) can kill, restart,
//! stop, partition or slow any node.
//!
//! A node's own `cluster-nodes` decides where it dials the others' buses:
//! node i lists node j at the port of proxy i→j, and itself at its real
//! bus port. Killing a node leaves its proxies listening; the dials
//! through them then fail as if the node's port were closed.
//!
//! It depends on the proxy alone (not on `binary.rs`, whose binary path
//! only integration tests know): the caller names the binary.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::proxy::{Mode, Proxy};

/// How long a status query (ROLE, CLUSTER INFO) may take: a stopped node
/// never answers, and must not hold up the poll of the others.
#[allow(dead_code)]
const STATUS_TIMEOUT: Duration = Duration::from_millis(300);

/// One node: its ports, its directory, and its process while it runs.
#[allow(dead_code)]
pub struct Node {
    pub id: u64,
    pub port: u16,
    pub bus_port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
    stopped: bool,
    /// Started with `cluster-join yes` (added by [`Cluster::add_node`]).
    join: bool,
}

/// A cluster of spawned nodes. Every process is killed when it is dropped.
#[allow(dead_code)]
pub struct Cluster {
    binary: PathBuf,
    pub nodes: Vec<Node>,
    /// `links[i][j]`: node i's link to node j's bus (None for i == j, and
    /// for the links of nodes added later: they dial each other directly).
    links: Vec<Vec<Option<Proxy>>>,
    extra: Vec<String>,
    /// Each node's own arguments, after `extra` (a metrics port, say).
    own: Vec<Vec<String>>,
    _temp: tempfile::TempDir,
}

#[allow(dead_code)]
impl Cluster {
    /// `size` nodes of `binary`, each with `extra` arguments too, started
    /// and with a leader elected (within 20 s).
    pub fn start(binary: &Path, size: usize, extra: &[&str]) -> Cluster {
        Cluster::start_each(binary, size, extra, |_| Vec::new())
    }

    /// [`Cluster::start`], node i also given `own(i)`'s arguments.
    pub fn start_each(
        binary: &Path,
        size: usize,
        extra: &[&str],
        own: impl Fn(usize) -> Vec<String>,
    ) -> Cluster {
        let temp = tempfile::tempdir().expect("temp dir");
        let (ports, links) = loop {
            let ports = distinct_ports(size * 2);
            let ports: Vec<(u16, u16)> = ports.chunks(2).map(|pair| (pair[0], pair[1])).collect();
            let links = proxies(&ports);
            // A proxy listens on a port of the system's choosing, which can
            // be one picked above and free until a node binds it (CI hit
            // it once): pick again.
            let picked = |port: u16| ports.iter().any(|&(a, b)| port == a || port == b);
            let clash = (links.iter().flatten().flatten()).any(|proxy| picked(proxy.addr.port()));
            if !clash {
                break (ports, links);
            }
        };
        let nodes = (0..size)
            .map(|i| Node {
                id: i as u64 + 1,
                port: ports[i].0,
                bus_port: ports[i].1,
                dir: temp.path().join(format!("n{}", i + 1)),
                child: None,
                stopped: false,
                join: false,
            })
            .collect();
        let mut cluster = Cluster {
            binary: binary.to_path_buf(),
            nodes,
            links,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            own: (0..size).map(own).collect(),
            _temp: temp,
        };
        for i in 0..size {
            cluster.spawn(i);
        }
        for i in 0..size {
            cluster.wait_serving(i);
        }
        cluster.leader(Duration::from_secs(20));
        cluster
    }

    /// Starts one more node (the next id) with `cluster-join yes`: it
    /// waits, empty, for `CLUSTER ADDNODE` (see [`Cluster::add_address`]).
    /// Its links to and from the others are direct, without a proxy. Its
    /// index.
    pub fn add_node(&mut self) -> usize {
        let i = self.add_node_stopped();
        self.restart(i);
        i
    }

    /// [`Cluster::add_node`], not started yet ([`Cluster::restart`] starts
    /// it).
    pub fn add_node_stopped(&mut self) -> usize {
        let i = self.size();
        let mut taken: Vec<u16> = (self.nodes.iter())
            .flat_map(|node| [node.port, node.bus_port])
            .collect();
        let mut fresh = || loop {
            let port = free_port();
            if !taken.contains(&port) {
                taken.push(port);
                return port;
            }
        };
        let (port, bus_port) = (fresh(), fresh());
        self.nodes.push(Node {
            id: i as u64 + 1,
            port,
            bus_port,
            dir: self._temp.path().join(format!("n{}", i + 1)),
            child: None,
            stopped: false,
            join: true,
        });
        for row in &mut self.links {
            row.push(None);
        }
        self.links.push((0..=i).map(|_| None).collect());
        i
    }

    /// Node i's address as `CLUSTER ADDNODE` takes it: `host:port@busport`.
    pub fn add_address(&self, i: usize) -> String {
        let node = &self.nodes[i];
        format!("127.0.0.1:{}@{}", node.port, node.bus_port)
    }

    /// Node i's `cluster-nodes`: itself at its bus port, the others at
    /// its proxies to them.
    fn nodes_line(&self, i: usize) -> String {
        let entries: Vec<String> = (self.nodes.iter().enumerate())
            .map(|(j, node)| {
                let bus = match self.links.get(i).and_then(|row| row.get(j)?.as_ref()) {
                    Some(proxy) => proxy.addr.port(),
                    None => node.bus_port,
                };
                format!("{}@127.0.0.1:{}@{}", node.id, node.port, bus)
            })
            .collect();
        entries.join(" ")
    }

    fn spawn(&mut self, i: usize) {
        let line = self.nodes_line(i);
        let node = &self.nodes[i];
        std::fs::create_dir_all(&node.dir).expect("node dir");
        // Appended, so a restarted node's log follows its earlier life's.
        let log = (File::options().create(true).append(true))
            .open(node.dir.with_extension("log"))
            .expect("node log");
        let mut command = Command::new(&self.binary);
        if node.join {
            command.args(["--cluster-join", "yes"]);
        }
        let child = command
            .args(["--port", &node.port.to_string(), "--dir"])
            .arg(&node.dir)
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-node-id", &node.id.to_string()])
            .args(["--cluster-nodes", &line])
            .args(&self.extra)
            .args(self.own.get(i).into_iter().flatten())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn leased");
        self.nodes[i].child = Some(child);
        self.nodes[i].stopped = false;
    }

    /// Waits until node i answers PING (20 s at most, polled every 10 ms:
    /// nothing announces it); panics with its log if it exits first.
    fn wait_serving(&mut self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.ping(i) {
                return;
            }
            let exited = (self.nodes[i].child.as_mut()).and_then(|child| child.try_wait().ok()?);
            if let Some(status) = exited {
                panic!("node {} exited with {status}:\n{}", i + 1, self.log(i));
            }
            assert!(
                Instant::now() < deadline,
                "node {} not serving after 20 s:\n{}",
                i + 1,
                self.log(i)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn ping(&self, i: usize) -> bool {
        let Some(mut con) = self.status_connection(i) else {
            return false;
        };
        redis::cmd("PING").query::<String>(&mut con).is_ok()
    }

    /// Everything node i printed, over all its lives.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.nodes[i].dir.with_extension("log")).unwrap_or_default()
    }

    pub fn size(&self) -> usize {
        self.nodes.len()
    }

    pub fn url(&self, i: usize) -> String {
        format!("redis://127.0.0.1:{}/", self.nodes[i].port)
    }

    /// A client connection to node i, its replies awaited at most 10 s
    /// (longer than a forward's 5 s and a write's patience).
    pub fn connect(&self, i: usize) -> redis::Connection {
        self.try_connect(i, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("connect to node {}: {e}", i + 1))
    }

    pub fn try_connect(
        &self,
        i: usize,
        timeout: Duration,
    ) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url(i))?;
        let con = client.get_connection_with_timeout(timeout)?;
        con.set_read_timeout(Some(timeout))?;
        con.set_write_timeout(Some(timeout))?;
        Ok(con)
    }

    fn status_connection(&self, i: usize) -> Option<redis::Connection> {
        self.nodes[i].child.as_ref()?;
        if self.nodes[i].stopped {
            return None;
        }
        self.try_connect(i, STATUS_TIMEOUT).ok()
    }

    /// Node i's `CLUSTER INFO` fields, if it answers quickly.
    pub fn info(&self, i: usize) -> Option<std::collections::HashMap<String, String>> {
        let mut con = self.status_connection(i)?;
        let text: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).ok()?;
        Some(
            text.lines()
                .filter_map(|line| line.split_once(':'))
                .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                .collect(),
        )
    }

    /// Node i's `ROLE` first word ("master" or "slave").
    pub fn role(&self, i: usize) -> Option<String> {
        let mut con = self.status_connection(i)?;
        let role: redis::Value = redis::cmd("ROLE").query(&mut con).ok()?;
        match role {
            redis::Value::Array(items) => match items.first()? {
                redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                redis::Value::SimpleString(s) => Some(s.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    /// A number in node i's `CLUSTER INFO`.
    pub fn info_number(&self, i: usize, field: &str) -> Option<u64> {
        self.info(i)?.get(field)?.parse().ok()
    }

    /// The leader's index, once every running, unstopped node that
    /// answers names the same leader, and that leader's `ROLE` says
    /// master and `CLUSTER INFO` says leader; polled every 20 ms until
    /// `patience` passes.
    pub fn leader(&self, patience: Duration) -> usize {
        self.leader_among(&(0..self.size()).collect::<Vec<_>>(), patience)
    }

    /// [`Cluster::leader`] as the nodes in `among` see it (those on the
    /// majority side of a partition, say).
    pub fn leader_among(&self, among: &[usize], patience: Duration) -> usize {
        let deadline = Instant::now() + patience;
        loop {
            let mut seen = String::new();
            if let Some(leader) = self.agreed_leader(among, &mut seen) {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "no agreed leader after {patience:?}: {seen}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn agreed_leader(&self, among: &[usize], seen: &mut String) -> Option<usize> {
        let mut leader = None;
        let mut answered = 0;
        for &i in among {
            if self.nodes[i].child.is_none() || self.nodes[i].stopped {
                continue;
            }
            let info = self.info(i);
            // A node waiting to be added knows no cluster yet (a founding
            // node that knows none has not started: it must agree too).
            let known = info
                .as_ref()
                .and_then(|info| info.get("cluster_known_nodes").cloned());
            if self.nodes[i].join && known.as_deref() == Some("0") {
                continue;
            }
            let id = info
                .as_ref()
                .and_then(|info| info.get("cluster_leader_id").cloned());
            seen.push_str(&format!("node {}: leader {id:?}; ", i + 1));
            let id: u64 = id?.parse().ok()?;
            if id == 0 || leader.is_some_and(|leader| leader != id) {
                return None;
            }
            leader = Some(id);
            answered += 1;
        }
        let index = (leader? - 1) as usize;
        if answered == 0 || !among.contains(&index) {
            return None;
        }
        let role = self.info(index)?.get("cluster_role")?.clone();
        (role == "leader" && self.role(index)? == "master").then_some(index)
    }

    /// The node's process id, if it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].child.as_ref().map(Child::id)
    }

    fn signal(&self, i: usize, signal: libc::c_int) {
        let pid = self.pid(i).expect("node is running") as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid, which we have not reaped.
        let done = unsafe { libc::kill(pid, signal) };
        assert_eq!(done, 0, "kill({pid}, {signal})");
    }

    /// kill -9, and the process reaped.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.nodes[i].stopped = false;
    }

    /// SIGTERM (a clean shutdown, as `systemctl stop` does), and the
    /// process reaped once it exits; panics if it has not within 30 s.
    pub fn terminate(&mut self, i: usize) {
        self.signal(i, libc::SIGTERM);
        let mut child = self.nodes[i].child.take().expect("node is running");
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().expect("wait for the node").is_none() {
            assert!(
                Instant::now() < deadline,
                "node {} still runs 30 s after SIGTERM",
                i + 1
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Node i's own arguments from its next start on.
    pub fn set_own_args(&mut self, i: usize, args: Vec<String>) {
        self.own[i] = args;
    }

    /// Starts node i again on its directory (after [`Cluster::kill9`]),
    /// and waits until it answers PING.
    pub fn restart(&mut self, i: usize) {
        assert!(self.nodes[i].child.is_none(), "node {} still runs", i + 1);
        self.spawn(i);
        self.wait_serving(i);
    }

    /// SIGSTOP: the process is frozen, its sockets open.
    pub fn stop(&mut self, i: usize) {
        self.signal(i, libc::SIGSTOP);
        self.nodes[i].stopped = true;
    }

    /// SIGCONT, after [`Cluster::stop`].
    pub fn cont(&mut self, i: usize) {
        self.signal(i, libc::SIGCONT);
        self.nodes[i].stopped = false;
    }

    pub fn is_stopped(&self, i: usize) -> bool {
        self.nodes[i].stopped
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }

    /// The link from node i to node j's bus.
    pub fn link(&self, i: usize, j: usize) -> &Proxy {
        self.links[i][j]
            .as_ref()
            .expect("no link from a node to itself")
    }

    /// Node i cut off: every link to and from it drops every byte, both
    /// ways (a silent partition). Clients still reach it.
    pub fn isolate(&self, i: usize) {
        for j in 0..self.size() {
            for (from, to) in [(i, j), (j, i)] {
                if let Some(proxy) = &self.links[from][to] {
                    proxy.set(Mode::Drop);
                }
            }
        }
    }

    /// Every link of node i slowed by `delay` each way.
    pub fn delay(&self, i: usize, delay: Duration) {
        for j in 0..self.size() {
            for (from, to) in [(i, j), (j, i)] {
                if let Some(proxy) = &self.links[from][to] {
                    proxy.set(Mode::Delay(delay));
                }
            }
        }
    }

    /// Every link passes again, and its connections are reset: a link
    /// that dropped bytes mid-frame would otherwise carry a broken stream.
    pub fn heal(&self) {
        for row in &self.links {
            for proxy in row.iter().flatten() {
                proxy.set(Mode::Pass);
                proxy.reset();
            }
        }
    }

    /// Waits (polling every 20 ms, `patience` at most) until every running
    /// node has applied what the leader has committed.
    pub fn converged(&self, patience: Duration) {
        let deadline = Instant::now() + patience;
        loop {
            let leader = self.leader(patience);
            let commit = self.info_number(leader, "cluster_commit_index");
            let behind: Vec<(usize, Option<u64>)> = (0..self.size())
                .filter(|&i| self.is_running(i) && !self.is_stopped(i))
                .map(|i| (i, self.info_number(i, "cluster_applied_index")))
                .filter(|(_, applied)| commit.is_none() || *applied < commit)
                .collect();
            if behind.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not converged after {patience:?}: commit {commit:?}, behind {behind:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A failed test shows what the nodes logged last: CI keeps only
        // the test's output.
        if std::thread::panicking() {
            for i in 0..self.nodes.len() {
                let log = self.log(i);
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(40)..].join("\n");
                eprintln!("--- node {} (last 40 lines of its log) ---\n{tail}", i + 1);
            }
        }
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                // SIGKILL ends a stopped process too.
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// `links[i][j]`: a proxy in front of node j's bus, for node i
/// (`ports[j]` is node j's client and bus port).
fn proxies(ports: &[(u16, u16)]) -> Vec<Vec<Option<Proxy>>> {
    let size = ports.len();
    (0..size)
        .map(|i| {
            (0..size)
                .map(|j| {
                    (i != j).then(|| {
                        let bus: SocketAddr = ([127, 0, 0, 1], ports[j].1).into();
                        Proxy::start(bus)
                    })
                })
                .collect()
        })
        .collect()
}

/// A port that was free a moment ago (as `binary::free_port`: the nemesis
/// example includes this file without the rest of `common`).
#[allow(dead_code)]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind a free port")
        .port()
}

/// `count` ports free a moment ago, no two the same.
#[allow(dead_code)]
fn distinct_ports(count: usize) -> Vec<u16> {
    let mut ports = Vec::new();
    while ports.len() < count {
        let port = free_port();
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}
