//! The server: listeners, the client table, start-up and clean shutdown.
//!
//! [`run`] takes listeners that are already bound and a shutdown future, so
//! the binary and tests start a server the same way. Shutdown (a signal,
//! `SHUTDOWN`, or the future) stops the accept loops, asks every connection
//! to finish the requests it has read and close, waits for them, and then
//! drops the last handle to the core, which stores the token ceiling and
//! ends.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::ceiling::DataDir;
use crate::command::{CommandName, KillFilter};
use crate::config::Config;
use crate::connection::{Connection, linger};
use crate::core::{Core, load_state};
use crate::metrics;
use crate::monitor::Monitors;
use crate::reply::Protocol;
use crate::slowlog::SlowLog;
use crate::stats::{self, Metered, Stats};
use crate::tls::{self, TlsAcceptor};

/// State every connection and the core can see.
#[derive(Debug)]
pub struct Shared {
    pub config: Config,
    /// The addresses actually listened on (with the real port for `--port 0`).
    pub listen_addrs: Vec<SocketAddr>,
    /// The addresses listened on for TLS (`tls-port`).
    pub tls_listen_addrs: Vec<SocketAddr>,
    pub started: Instant,
    pub clients: ClientTable,
    pub stats: Stats,
    /// The connections in `MONITOR` mode, and the feed of commands to them.
    pub monitors: Monitors,
    pub slowlog: SlowLog,
    /// Cancelled to shut the server down.
    pub shutdown: CancellationToken,
}

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
    fn register(&self, addr: SocketAddr, local_addr: SocketAddr, fd: i32) -> Arc<ClientEntry> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = Arc::new(ClientEntry {
            id,
            addr,
            local_addr,
            fd,
            connected: Instant::now(),
            killed: CancellationToken::new(),
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
        let spared = filter.nobody || (filter.skip_me && self.id == me);
        !spared
            && filter.id.is_none_or(|id| id == self.id)
            && addr_is(&filter.addr, self.addr)
            && addr_is(&filter.laddr, self.local_addr)
            && filter
                .max_age
                .is_none_or(|age| self.connected.elapsed().as_secs() > age)
    }

    /// One line of `CLIENT LIST` / `CLIENT INFO`, with every field of
    /// Redis 7's format: client libraries parse the numeric ones. Fields for
    /// features leased does not have (pub/sub, MULTI, redirection) hold the
    /// values Redis shows when they are unused.
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
            "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db=0 sub=0 psub=0 \
             ssub=0 multi=-1 qbuf={} qbuf-free={} argv-mem=0 multi-mem=0 rbs={} rbp={} obl=0 \
             oll=0 omem={} tot-mem={} events=r cmd={} user=default redir=-1 resp={} \
             lib-name={} lib-ver={}\n",
            self.id,
            self.addr,
            self.local_addr,
            self.fd,
            text(&meta.name),
            age.as_secs(),
            idle.as_secs(),
            if meta.monitor { "O" } else { "N" },
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

/// The bound sockets the server accepts clients on.
pub struct Listeners {
    pub plain: Vec<TcpListener>,
    /// On `tls-port`, with the acceptor that does their clients' handshakes.
    pub tls: Option<(TlsAcceptor, Vec<TcpListener>)>,
    /// The metrics endpoint's, on `metrics-port`; none when it is 0.
    pub metrics: Vec<TcpListener>,
}

/// Loads the TLS setup and binds every address of `bind` on `port`, and
/// on `tls-port` when set. With port 0 the first address gets a free port
/// and the others the same one, so the server has one port as it would
/// with a fixed one. A failure names the address.
pub async fn bind(config: &Config) -> Result<Listeners, String> {
    check_protected_mode(config)?;
    let acceptor = tls::acceptor(config)?;
    // TLS and metrics first: their ports are fixed, so a free port picked
    // for `port 0` cannot take them.
    let tls = match acceptor {
        None => None,
        Some(acceptor) => Some((acceptor, bind_all(config, config.tls_port, "TLS").await?)),
    };
    let metrics = match config.metrics_port {
        0 => Vec::new(),
        port => bind_all(config, port, "metrics").await?,
    };
    let plain = bind_all(config, config.port, "TCP").await?;
    Ok(Listeners {
        plain,
        tls,
        metrics,
    })
}

async fn bind_all(config: &Config, port: u16, kind: &str) -> Result<Vec<TcpListener>, String> {
    let mut listeners = Vec::new();
    let mut port = port;
    for address in &config.bind {
        let target = SocketAddr::new(*address, port);
        let listener = TcpListener::bind(target).await.map_err(|error| {
            format!("Could not create server {kind} listening socket {target}: {error}")
        })?;
        port = listener.local_addr().map_or(port, |a| a.port());
        listeners.push(listener);
    }
    Ok(listeners)
}

/// Protected mode: a server without a password listens only where nobody
/// but this machine can reach it, unless told otherwise.
fn check_protected_mode(config: &Config) -> Result<(), String> {
    if !config.protected_mode || !config.requirepass.is_empty() {
        return Ok(());
    }
    match config.bind.iter().find(|address| !address.is_loopback()) {
        None => Ok(()),
        Some(address) => Err(format!(
            "Refusing to listen on {address}: protected mode is on and no password is set. \
             Set one with 'requirepass <password>', bind only loopback addresses \
             (e.g. 'bind 127.0.0.1'), or, if every client that can reach this address \
             is trusted, turn protection off with 'protected-mode no'."
        )),
    }
}

/// Serves clients on `listeners` until `shutdown` completes, a signal
/// arrives, or a client sends `SHUTDOWN`; then shuts down cleanly.
pub async fn run(
    config: Config,
    listeners: Listeners,
    data_dir: DataDir,
    shutdown: impl Future<Output = ()>,
) -> Result<(), String> {
    let (registry, log) = load_state(&config, &data_dir)?;
    let local_addrs = |listeners: &[TcpListener]| {
        listeners
            .iter()
            .map(|l| l.local_addr())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())
    };
    let listen_addrs = local_addrs(&listeners.plain)?;
    let tls_listen_addrs = match &listeners.tls {
        Some((_, tls)) => local_addrs(tls)?,
        None => Vec::new(),
    };
    let shared = Arc::new(Shared {
        config,
        listen_addrs,
        tls_listen_addrs,
        started: Instant::now(),
        clients: ClientTable::default(),
        stats: Stats::new(),
        monitors: Monitors::default(),
        slowlog: SlowLog::default(),
        shutdown: CancellationToken::new(),
    });
    let (core, core_task) = Core::start(registry, log, data_dir.ceiling_writer(), shared.clone())
        .map_err(|e| {
        format!(
            "cannot write the token ceiling in '{}': {e}",
            data_dir.path().display()
        )
    })?;

    let mut signals =
        Signals::install().map_err(|e| format!("cannot listen for SIGTERM/SIGINT: {e}"))?;
    // Plain addresses first: tests take the first for the port.
    let addrs: Vec<String> = (shared.listen_addrs.iter().map(|a| a.to_string()))
        .chain(shared.tls_listen_addrs.iter().map(|a| format!("{a} (tls)")))
        .collect();
    let tracker = TaskTracker::new();
    tracker.spawn(stats::run_sampler(shared.clone()));
    for listener in listeners.metrics {
        if let Ok(addr) = listener.local_addr() {
            info!("Metrics endpoint on http://{addr}/metrics");
        }
        let (shared, core) = (shared.clone(), core.clone());
        tracker.spawn(metrics::serve(listener, shared, core, tracker.clone()));
    }
    info!("Ready to accept connections on {}", addrs.join(", "));

    let (acceptor, tls_listeners) = listeners.tls.unzip();
    let all = (listeners.plain.into_iter().map(|l| (l, None))).chain(
        tls_listeners
            .into_iter()
            .flatten()
            .map(|l| (l, acceptor.clone())),
    );
    for (listener, acceptor) in all {
        tracker.spawn(accept_loop(
            listener,
            acceptor,
            shared.clone(),
            core.clone(),
            tracker.clone(),
        ));
    }
    tokio::select! {
        _ = shutdown => {}
        _ = signals.recv() => {}
        _ = shared.shutdown.cancelled() => {}
    }
    info!(
        "Shutting down: closing {} client connection(s)",
        shared.clients.len()
    );
    shared.shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    drop(core);
    // Resolves once the core has flushed the log; a core that failed has
    // already ended the process (see `Core::start`).
    let _ = core_task.await;
    info!("leased is now ready to exit, bye bye...");
    drop(data_dir);
    Ok(())
}

/// Accepts clients on `listener`, TLS ones when given an acceptor. A TLS
/// handshake happens in the client's own task, so a client that never
/// completes one holds up nobody else.
async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    core: crate::core::CoreHandle,
    tracker: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, addr) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Usually out of file descriptors: wait instead of spinning.
                warn!("Accepting a client connection failed: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let full = shared.clients.len() >= shared.config.maxclients;
        if full {
            let rejected = &shared.stats.rejected_connections;
            rejected.fetch_add(1, Ordering::Relaxed);
        }
        match (&acceptor, full) {
            (None, true) => {
                tracker.spawn(refuse(stream));
            }
            (None, false) => {
                let (stream, client) = open_connection(stream, addr, &shared);
                let stream = Metered::new(stream, &shared);
                tracker
                    .spawn(Connection::new(stream, client, shared.clone(), core.clone()).serve());
            }
            (Some(acceptor), true) => {
                let handshake = handshake(acceptor.clone(), stream, addr, shared.clone());
                tracker.spawn(async move {
                    if let Some(stream) = handshake.await {
                        refuse(stream).await;
                    }
                });
            }
            (Some(acceptor), false) => {
                // Registered before the handshake, so handshaking clients
                // count toward maxclients.
                let (stream, client) = open_connection(stream, addr, &shared);
                let handshake = handshake(acceptor.clone(), stream, addr, shared.clone());
                let (shared, core) = (shared.clone(), core.clone());
                tracker.spawn(async move {
                    match handshake.await {
                        Some(stream) => {
                            let stream = Metered::new(stream, &shared);
                            Connection::new(stream, client, shared, core).serve().await
                        }
                        None => shared.clients.unregister(client.id),
                    }
                });
            }
        }
    }
}

/// The TLS handshake with a client, given [`tls::HANDSHAKE_TIMEOUT`] and
/// abandoned at shutdown; `None` if it did not complete.
async fn handshake(
    acceptor: TlsAcceptor,
    stream: TcpStream,
    addr: SocketAddr,
    shared: Arc<Shared>,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let result = tokio::select! {
        _ = shared.shutdown.cancelled() => return None,
        result = tokio::time::timeout(tls::HANDSHAKE_TIMEOUT, acceptor.accept(stream)) => result,
    };
    match result {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(error)) => {
            debug!("TLS handshake with {addr} failed: {error}");
            None
        }
        Err(_) => {
            debug!("TLS handshake with {addr} timed out");
            None
        }
    }
}

/// A client over `maxclients` is told so, as Redis does, and closed; a
/// client that does not read the error is not waited for long.
async fn refuse(mut stream: impl AsyncRead + AsyncWrite + Unpin) {
    let error = b"-ERR max number of clients reached\r\n";
    let told = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(error).await?;
        stream.shutdown().await
    })
    .await;
    if matches!(told, Ok(Ok(()))) {
        linger(&mut stream).await;
    }
}

/// Registers a new client and prepares its socket.
fn open_connection(
    stream: TcpStream,
    addr: SocketAddr,
    shared: &Arc<Shared>,
) -> (TcpStream, Arc<ClientEntry>) {
    // Replies are written once per batch, so Nagle would only add delay.
    let _ = stream.set_nodelay(true);
    let local_addr = stream.local_addr().unwrap_or(addr);
    let fd = raw_fd(&stream);
    shared
        .stats
        .total_connections_received
        .fetch_add(1, Ordering::Relaxed);
    let client = shared.clients.register(addr, local_addr, fd);
    (stream, client)
}

#[cfg(unix)]
fn raw_fd(stream: &TcpStream) -> i32 {
    use std::os::fd::AsRawFd;
    stream.as_raw_fd()
}

#[cfg(not(unix))]
fn raw_fd(_: &TcpStream) -> i32 {
    -1
}

/// SIGTERM and SIGINT, registered before the server says it is ready, so
/// a signal sent right after start-up shuts it down cleanly instead of
/// killing it.
struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => info!("Received SIGTERM scheduling shutdown..."),
            _ = self.int.recv() => info!("Received SIGINT scheduling shutdown..."),
        }
    }
}

/// Seconds since the Unix epoch, to the millisecond: the server's clock
/// for lease commands that omit `now`.
pub fn wall_clock() -> f64 {
    let since_epoch = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    since_epoch.as_millis() as f64 / 1000.0
}
