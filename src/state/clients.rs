//! The connected clients: who they are and what their connections are
//! doing, for `CLIENT LIST|INFO|KILL` and `INFO clients`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::command::{ClientKind, CommandName, KillFilter};
use crate::reply::Protocol;

/// The connected clients, for `CLIENT LIST` and `INFO clients`.
#[derive(Debug, Default)]
pub struct ClientTable {
    next_id: AtomicU64,
    clients: Mutex<BTreeMap<u64, Arc<ClientEntry>>>,
}

/// What the server knows of one connected client.
#[derive(Debug)]
pub struct ClientEntry {
    pub id: u64,
    pub addr: SocketAddr,
    pub local_addr: SocketAddr,
    pub fd: i32,
    pub connected: Instant,
    /// Cancelled by `CLIENT KILL`: the connection closes at once.
    pub killed: CancellationToken,
    /// Notified when `CONFIG SET` changed the settings, so that a
    /// connection waiting for its client reads the new ones (`timeout`)
    /// at once rather than at its next request.
    pub reconfigured: Notify,
    /// What the client said about itself and what its connection is doing;
    /// the connection updates it once per batch of requests.
    pub meta: Mutex<ClientMeta>,
}

#[derive(Debug, Default)]
pub struct ClientMeta {
    pub name: Option<Bytes>,
    pub lib_name: Option<Bytes>,
    pub lib_ver: Option<Bytes>,
    pub protocol: Option<Protocol>,
    /// In `MONITOR` mode.
    pub monitor: bool,
    /// Waiting in a `LEASE.ACQUIRE ... BLOCK`.
    pub blocked: bool,
    /// Channels and patterns subscribed to.
    pub channels: usize,
    pub patterns: usize,
    /// Inside `MULTI`: how many commands are queued.
    pub multi: Option<usize>,
    /// Time since `connected` of the last batch of requests.
    pub last_active: Duration,
    pub last_command: Option<CommandName>,
    /// Bytes read but not yet decoded, and the read buffer's size.
    pub query_buf: usize,
    pub query_buf_capacity: usize,
    /// Reply bytes not yet written, and the write buffer's size.
    pub output_pending: usize,
    pub output_capacity: usize,
}

impl ClientTable {
    pub fn register(&self, addr: SocketAddr, local_addr: SocketAddr, fd: i32) -> Arc<ClientEntry> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = Arc::new(ClientEntry {
            id,
            addr,
            local_addr,
            fd,
            connected: Instant::now(),
            killed: CancellationToken::new(),
            reconfigured: Notify::new(),
            meta: Mutex::new(ClientMeta::default()),
        });
        self.lock().insert(id, entry.clone());
        entry
    }

    pub fn unregister(&self, id: u64) {
        self.lock().remove(&id);
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The clients in id order.
    pub fn snapshot(&self) -> Vec<Arc<ClientEntry>> {
        self.lock().values().cloned().collect()
    }

    /// Tells every connection that the settings changed.
    pub fn reconfigured(&self) {
        for client in self.lock().values() {
            client.reconfigured.notify_one();
        }
    }

    /// `CLIENT KILL`: closes every client that `filter` matches, on behalf
    /// of client `me`, and returns how many.
    pub fn kill(&self, filter: &KillFilter, me: u64) -> usize {
        let mut killed = 0;
        for client in self.lock().values() {
            if client.matches(filter, me) {
                client.killed.cancel();
                killed += 1;
            }
        }
        killed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<ClientEntry>>> {
        // A panic elsewhere cannot leave the map half-updated.
        self.clients
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl ClientEntry {
    pub fn meta(&self) -> std::sync::MutexGuard<'_, ClientMeta> {
        self.meta
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn matches(&self, filter: &KillFilter, me: u64) -> bool {
        let addr_is = |want: &Option<Bytes>, addr: SocketAddr| {
            want.as_ref()
                .is_none_or(|want| want[..] == *addr.to_string().as_bytes())
        };
        let spared = filter.skip_me && self.id == me;
        !spared
            && filter.kind.is_none_or(|kind| kind == self.kind())
            && filter.id.is_none_or(|id| id == self.id)
            && addr_is(&filter.addr, self.addr)
            && addr_is(&filter.laddr, self.local_addr)
            && filter
                .max_age
                .is_none_or(|age| self.connected.elapsed().as_secs() > age)
    }

    /// The client's type: `pubsub` while it is subscribed to something.
    pub fn kind(&self) -> ClientKind {
        let meta = self.meta();
        if meta.channels + meta.patterns > 0 {
            ClientKind::PubSub
        } else {
            ClientKind::Normal
        }
    }

    /// One line of `CLIENT LIST` / `CLIENT INFO`, with every field of
    /// Redis 7's format: client libraries parse the numeric ones. Fields for
    /// features leased does not have (shard channels, redirection)
    /// hold the values Redis shows when they are unused.
    pub fn describe(&self) -> String {
        let meta = self.meta();
        let text = |value: &Option<Bytes>| {
            value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        let age = self.connected.elapsed();
        let idle = age.saturating_sub(meta.last_active);
        let command = meta
            .last_command
            .map_or("NULL".to_string(), |name| name.to_string());
        let total_memory = meta.query_buf_capacity + meta.output_capacity;
        format!(
            "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db=0 sub={} psub={} \
             ssub=0 multi={} qbuf={} qbuf-free={} argv-mem=0 multi-mem=0 rbs={} rbp={} obl=0 \
             oll=0 omem={} tot-mem={} events=r cmd={} user=default redir=-1 resp={} \
             lib-name={} lib-ver={}\n",
            self.id,
            self.addr,
            self.local_addr,
            self.fd,
            text(&meta.name),
            age.as_secs(),
            idle.as_secs(),
            flags(&meta),
            meta.channels,
            meta.patterns,
            meta.multi.map_or(-1, |queued| queued as i64),
            meta.query_buf,
            meta.query_buf_capacity - meta.query_buf,
            meta.query_buf_capacity,
            meta.query_buf_capacity,
            meta.output_pending,
            total_memory,
            command,
            meta.protocol.unwrap_or(Protocol::Resp2).version(),
            text(&meta.lib_name),
            text(&meta.lib_ver),
        )
    }
}

/// `CLIENT LIST`'s flags, in Redis's order: `O` monitor, `P` subscribed,
/// `x` inside `MULTI`, `b` blocked; `N` for none.
fn flags(meta: &ClientMeta) -> String {
    let mut flags = String::new();
    for (set, flag) in [
        (meta.monitor, 'O'),
        (meta.channels + meta.patterns > 0, 'P'),
        (meta.multi.is_some(), 'x'),
        (meta.blocked, 'b'),
    ] {
        if set {
            flags.push(flag);
        }
    }
    if flags.is_empty() {
        flags.push('N');
    }
    flags
}
