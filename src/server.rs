//! The server: listeners, start-up and clean shutdown.
//!
//! [`run`] takes listeners that are already bound, the clock to serve
//! with and a shutdown future, so the binary and tests start a server the
//! same way (a test in-process, on tokio's paused clock). Shutdown
//! (`SHUTDOWN`, or the future: the binary's is SIGTERM/SIGINT) stops the
//! accept loops, asks every connection to finish the requests it has read
//! and close, waits for them, and then drops the last handle to the core,
//! which stores the token ceiling and ends.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::ceiling::DataDir;
use crate::config::Config;
use crate::connection::{Connection, linger};
use crate::core::{self, CoreHandle, StartError};
use crate::metrics;
use crate::state::{self, ClientEntry, Clock, Metered, Shared};
use crate::tls::{self, TlsAcceptor, TlsError};

/// Why the server could not start.
#[derive(Debug)]
pub enum ServeError {
    /// An address of `bind` could not be listened on.
    Bind {
        kind: &'static str,
        addr: SocketAddr,
        error: io::Error,
    },
    /// Protected mode refuses a non-loopback address without a password.
    ProtectedMode(std::net::IpAddr),
    Tls(TlsError),
    Core(StartError),
    /// Cluster mode: the node could not start.
    Cluster(crate::cluster::node::StartError),
    LocalAddr(io::Error),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Bind { kind, addr, error } => {
                write!(
                    f,
                    "Could not create server {kind} listening socket {addr}: {error}"
                )
            }
            ServeError::ProtectedMode(address) => write!(
                f,
                "Refusing to listen on {address}: protected mode is on and no password is set. \
                 Set one with 'requirepass <password>', bind only loopback addresses \
                 (e.g. 'bind 127.0.0.1'), or, if every client that can reach this address \
                 is trusted, turn protection off with 'protected-mode no'."
            ),
            ServeError::Tls(error) => write!(f, "{error}"),
            ServeError::Core(error) => write!(f, "{error}"),
            ServeError::Cluster(error) => write!(f, "The cluster node could not start: {error}"),
            ServeError::LocalAddr(error) => write!(f, "cannot read a listener's address: {error}"),
        }
    }
}

impl std::error::Error for ServeError {}

/// The bound sockets the server accepts clients on.
pub struct Listeners {
    pub plain: Vec<TcpListener>,
    /// On `tls-port`, with the acceptor that does their clients' handshakes.
    pub tls: Option<(TlsAcceptor, Vec<TcpListener>)>,
    /// The metrics endpoint's, on `metrics-port`; none when it is 0.
    pub metrics: Vec<TcpListener>,
    /// Cluster mode: the node bus's, on this node's bus address, with its
    /// TLS when `tls-cluster` is yes.
    pub bus: Option<(TcpListener, Option<tls::BusTls>)>,
}

/// Loads the TLS setup and binds every address of `bind` on `port`, and
/// on `tls-port` when set. With port 0 the first address gets a free port
/// and the others the same one, so the server has one port as it would
/// with a fixed one. A failure names the address.
pub async fn bind(config: &Config) -> Result<Listeners, ServeError> {
    check_protected_mode(config)?;
    let acceptor = tls::acceptor(config).map_err(ServeError::Tls)?;
    let bus_tls = tls::bus(config).map_err(ServeError::Tls)?;
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
    let bus = match config.cluster() {
        Ok(Some(cluster)) => {
            let addr = cluster.me().bus_addr;
            let listener = listen(addr, config.tcp_backlog).map_err(|error| ServeError::Bind {
                kind: "cluster bus",
                addr,
                error,
            })?;
            Some((listener, bus_tls))
        }
        // Checked when the configuration was loaded.
        Ok(None) | Err(_) => None,
    };
    let plain = bind_all(config, config.port, "TCP").await?;
    Ok(Listeners {
        plain,
        tls,
        metrics,
        bus,
    })
}

async fn bind_all(
    config: &Config,
    port: u16,
    kind: &'static str,
) -> Result<Vec<TcpListener>, ServeError> {
    let mut listeners = Vec::new();
    let mut port = port;
    for address in &config.bind {
        let addr = SocketAddr::new(*address, port);
        let listener = listen(addr, config.tcp_backlog).map_err(|error| ServeError::Bind {
            kind,
            addr,
            error,
        })?;
        port = listener.local_addr().map_or(port, |a| a.port());
        listeners.push(listener);
    }
    Ok(listeners)
}

/// A listener on `addr` with a queue of `backlog` connections
/// (`tcp-backlog`; tokio's own `bind` asks for 128).
fn listen(addr: SocketAddr, backlog: u32) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    // As `TcpListener::bind` does: a restarted server listens again at once.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// Protected mode: a server without a password listens only where nobody
/// but this machine can reach it, unless told otherwise.
fn check_protected_mode(config: &Config) -> Result<(), ServeError> {
    if !protected(config) {
        return Ok(());
    }
    match config.bind.iter().find(|address| !address.is_loopback()) {
        None => Ok(()),
        Some(address) => Err(ServeError::ProtectedMode(*address)),
    }
}

/// Whether protected mode is in force: on, and no password set. Checked at
/// start-up for the addresses listened on, and for every client accepted,
/// since `CONFIG SET` may change either setting while the server runs.
fn protected(config: &Config) -> bool {
    config.protected_mode && config.requirepass.is_empty()
}

/// Serves clients on `listeners`, with `clock` as the server's clock for
/// lease commands, until `shutdown` completes or a client sends
/// `SHUTDOWN`; then shuts down cleanly.
pub async fn run(
    config: Config,
    listeners: Listeners,
    data_dir: DataDir,
    clock: Clock,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let local_addrs = |listeners: &[TcpListener]| {
        listeners
            .iter()
            .map(|l| l.local_addr())
            .collect::<Result<Vec<_>, _>>()
            .map_err(ServeError::LocalAddr)
    };
    let listen_addrs = local_addrs(&listeners.plain)?;
    let tls_listen_addrs = match &listeners.tls {
        Some((_, tls)) => local_addrs(tls)?,
        None => Vec::new(),
    };
    let shared = Arc::new(Shared::new(config, listen_addrs, tls_listen_addrs, clock));
    let cluster = shared.config().cluster().ok().flatten();
    let (core, core_task) = match (cluster, listeners.bus) {
        (Some(cluster), Some((bus, bus_tls))) => {
            crate::cluster::serve::start(&cluster, &data_dir, shared.clone(), bus, bus_tls)
                .await
                .map_err(ServeError::Cluster)?
        }
        _ => {
            let make = crate::cluster::serve::make_registry(&shared.config());
            crate::cluster::migrate::before_single(&shared.config(), &data_dir, make)
                .await
                .map_err(|error| {
                    ServeError::Cluster(crate::cluster::node::StartError::Migrate(error))
                })?;
            core::start(&data_dir, shared.clone()).map_err(ServeError::Core)?
        }
    };

    // Plain addresses first: tests take the first for the port.
    let addrs: Vec<String> = (shared.listen_addrs.iter().map(|a| a.to_string()))
        .chain(shared.tls_listen_addrs.iter().map(|a| format!("{a} (tls)")))
        .collect();
    let tracker = TaskTracker::new();
    tracker.spawn(state::run_sampler(shared.clone()));
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
    // already ended the process (see `core::start`).
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
    core: CoreHandle,
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
        let refusal = refusal(&shared, addr);
        if refusal == Some(MAX_CLIENTS) {
            let rejected = &shared.stats.rejected_connections;
            rejected.fetch_add(1, Ordering::Relaxed);
        }
        match (&acceptor, refusal) {
            (None, Some(refusal)) => {
                tracker.spawn(refuse(stream, refusal));
            }
            (None, None) => {
                let (stream, client) = open_connection(stream, addr, &shared);
                let stream = Metered::new(stream, &shared);
                tracker
                    .spawn(Connection::new(stream, client, shared.clone(), core.clone()).serve());
            }
            (Some(acceptor), Some(refusal)) => {
                let handshake = handshake(acceptor.clone(), stream, addr, shared.clone());
                tracker.spawn(async move {
                    if let Some(stream) = handshake.await {
                        refuse(stream, refusal).await;
                    }
                });
            }
            (Some(acceptor), None) => {
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

/// Redis's error to a client over `maxclients`.
const MAX_CLIENTS: &str = "-ERR max number of clients reached\r\n";

/// Redis's error to a client from another machine while protected mode is
/// in force (its settings may have changed since the listeners were bound).
const DENIED: &str = "-DENIED leased is running in protected mode because protected mode is \
    enabled and no password is set for the default user. In this mode connections are only \
    accepted from the loopback interface. Set a password with 'CONFIG SET requirepass \
    <password>' from a loopback client, or, if every client that can reach this server is \
    trusted, turn protection off with 'CONFIG SET protected-mode no'.\r\n";

/// Why a new client at `addr` is refused, if it is.
fn refusal(shared: &Shared, addr: SocketAddr) -> Option<&'static str> {
    let config = shared.config();
    if protected(&config) && !addr.ip().to_canonical().is_loopback() {
        return Some(DENIED);
    }
    (shared.clients.len() >= config.maxclients).then_some(MAX_CLIENTS)
}

/// A refused client is told why, as Redis does, and closed; a client that
/// does not read the error is not waited for long.
async fn refuse(mut stream: impl AsyncRead + AsyncWrite + Unpin, error: &str) {
    let told = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(error.as_bytes()).await?;
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
