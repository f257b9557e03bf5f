//! A node's outgoing connections: dialled on demand, one call at a time
//! each, kept per (address, kind) for the next call once a call on them
//! succeeded.
//!
//! With a TLS connector, every connection is TLS under the handshake.
//!
//! A connection is taken out of the pool for the length of a call and put
//! back only when the call got its answer. A call that fails, times out or
//! is dropped by its caller (openraft drops RPCs past their deadline)
//! drops its connection too: a late answer can then never be read as the
//! next call's. The next call dials again.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_util::either::Either;

use super::frame::{self, FrameError, MAX_FRAME, read_frame};
use super::handshake::{HandshakeError, introduce};
use super::wire::{Hello, Kind, PROTOCOL, Request, Response};
use crate::cluster::types::NodeId;
use crate::state::cluster_stats::{BusError, ClusterStats};

/// Idle connections kept per (address, kind): calls of one kind to one
/// node are mostly one at a time, but forwarded commands are not.
const MAX_IDLE: usize = 4;

/// A connection, in TLS or not.
pub(super) type Conn = Either<TcpStream, TlsStream<TcpStream>>;

/// Idle connections by the address and kind they were opened for.
type Idle = HashMap<(String, Kind), Vec<Conn>>;

/// How a call failed, by what the peer may have seen of it.
#[derive(Debug)]
pub enum CallError {
    /// The request surely did not reach the peer whole: no connection, a
    /// refused handshake, or a write that failed.
    NotSent(String),
    /// The request was written, then no answer came.
    NoAnswer(String),
    /// The deadline passed; `sent` says whether the request was written.
    TimedOut { sent: bool },
}

/// Dials, introduces and keeps this node's connections.
#[derive(Clone)]
pub struct Pool {
    me: NodeId,
    secret: Option<Bytes>,
    connect_timeout: Duration,
    /// TLS for every connection, if set.
    tls: Option<TlsConnector>,
    idle: Arc<Mutex<Idle>>,
    /// Where failed dials, refused handshakes and broken calls are
    /// counted.
    stats: Arc<ClusterStats>,
}

impl Pool {
    pub fn new(me: NodeId, secret: Option<Bytes>, connect_timeout: Duration) -> Pool {
        Pool {
            me,
            secret,
            connect_timeout,
            tls: None,
            idle: Arc::default(),
            stats: Arc::default(),
        }
    }

    /// The same pool, counting its errors in `stats`.
    pub fn with_stats(mut self, stats: Arc<ClusterStats>) -> Pool {
        self.stats = stats;
        self
    }

    /// Where this pool counts.
    pub fn stats(&self) -> &ClusterStats {
        &self.stats
    }

    /// The same pool, connecting in TLS with `connector`.
    pub fn with_tls(mut self, connector: TlsConnector) -> Pool {
        self.tls = Some(connector);
        self
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    /// Sends `request` to `addr` over a `kind` connection and reads its
    /// answer, all within `timeout`. With `expected`, only that node may
    /// answer at `addr`.
    pub async fn call(
        &self,
        addr: &str,
        kind: Kind,
        expected: Option<NodeId>,
        request: &Request,
        timeout: Duration,
    ) -> Result<Response, CallError> {
        let mut sent = false;
        let exchange = self.exchange(addr, kind, expected, request, &mut sent);
        match tokio::time::timeout(timeout, exchange).await {
            Ok(answered) => answered,
            Err(_) => Err(CallError::TimedOut { sent }),
        }
    }

    async fn exchange(
        &self,
        addr: &str,
        kind: Kind,
        expected: Option<NodeId>,
        request: &Request,
        sent: &mut bool,
    ) -> Result<Response, CallError> {
        let bytes = frame::encode(request).map_err(|e| CallError::NotSent(e.to_string()))?;
        let mut stream = match self.take_idle(addr, kind) {
            Some(stream) => stream,
            None => self.connect(addr, kind, expected).await?,
        };
        // A failed write means the peer lacks at least the frame's end,
        // and a frame is acted on only whole.
        if let Err(error) = write_all(&mut stream, &bytes).await {
            self.stats.bus_error(BusError::Broken);
            return Err(CallError::NotSent(format!("{addr}: {error}")));
        }
        *sent = true;
        let response = read_frame(&mut stream, MAX_FRAME).await.map_err(|e| {
            self.stats.bus_error(frame_error(&e));
            CallError::NoAnswer(format!("{addr}: {e}"))
        })?;
        self.put_idle(addr, kind, stream);
        Ok(response)
    }

    /// A connection of `kind` to `addr` for a conversation the caller
    /// holds (and drops when it ends: it is not put back).
    pub async fn open(&self, addr: &str, kind: Kind) -> Result<Conn, CallError> {
        match self.take_idle(addr, kind) {
            Some(conn) => Ok(conn),
            None => self.connect(addr, kind, None).await,
        }
    }

    /// A new connection, dialled by a task of its own: a caller whose
    /// deadline passes mid-dial leaves the connection to the pool, so a
    /// short deadline (a heartbeat's) under load does not dial forever
    /// without ever getting to use the connection.
    async fn connect(
        &self,
        addr: &str,
        kind: Kind,
        expected: Option<NodeId>,
    ) -> Result<Conn, CallError> {
        let (tx, rx) = oneshot::channel();
        let pool = self.clone();
        let owned = addr.to_string();
        tokio::spawn(async move {
            let dialled = pool.dial(&owned, kind, expected).await;
            if let Err(Ok(conn)) = tx.send(dialled) {
                pool.put_idle(&owned, kind, conn);
            }
        });
        rx.await
            .unwrap_or_else(|_| Err(CallError::NotSent(format!("{addr}: dialling failed"))))
    }

    /// A new connection to `addr`, introduced as `kind`.
    async fn dial(
        &self,
        addr: &str,
        kind: Kind,
        expected: Option<NodeId>,
    ) -> Result<Conn, CallError> {
        let hello = Hello {
            protocol: PROTOCOL,
            from: self.me,
            kind,
        };
        let secret = self.secret.as_deref();
        let dialled = tokio::time::timeout(self.connect_timeout, async {
            let connect = |e: io::Error| (BusError::Connect, e.to_string());
            let stream = TcpStream::connect(addr).await.map_err(connect)?;
            stream.set_nodelay(true).map_err(connect)?;
            let mut stream = (self.secure(addr, stream).await).map_err(|e| (BusError::Tls, e))?;
            introduce(&mut stream, hello, secret, expected)
                .await
                .map_err(|e| (handshake_error(&e), e.to_string()))?;
            Ok::<_, (BusError, String)>(stream)
        });
        match dialled.await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err((counted, error))) => {
                self.stats.bus_error(counted);
                Err(CallError::NotSent(format!("{addr}: {error}")))
            }
            Err(_) => {
                self.stats.bus_error(BusError::Connect);
                Err(CallError::NotSent(format!(
                    "{addr}: no connection within {:?}",
                    self.connect_timeout
                )))
            }
        }
    }

    /// `stream` in TLS, if the pool has it, checking the certificate
    /// names `addr`'s host.
    async fn secure(&self, addr: &str, stream: TcpStream) -> Result<Conn, String> {
        let Some(connector) = &self.tls else {
            return Ok(Either::Left(stream));
        };
        let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: {e}"))?;
        let stream = connector
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        Ok(Either::Right(stream))
    }

    /// An idle connection the peer has not closed meanwhile (a server
    /// that restarted closed them all); one it closed is dropped.
    fn take_idle(&self, addr: &str, kind: Kind) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap();
        let streams = idle.get_mut(&(addr.to_string(), kind))?;
        while let Some(stream) = streams.pop() {
            if open(&stream) {
                return Some(stream);
            }
        }
        None
    }

    /// How many idle connections to `addr` of `kind` the pool holds.
    #[cfg(test)]
    pub fn idle(&self, addr: &str, kind: Kind) -> usize {
        let idle = self.idle.lock().unwrap();
        idle.get(&(addr.to_string(), kind)).map_or(0, Vec::len)
    }

    /// Keeps `stream` for the next call (or conversation) of `kind` to
    /// `addr`.
    pub(super) fn put_idle(&self, addr: &str, kind: Kind, stream: Conn) {
        let mut idle = self.idle.lock().unwrap();
        let streams = idle.entry((addr.to_string(), kind)).or_default();
        if streams.len() < MAX_IDLE {
            streams.push(stream);
        }
    }
}

/// How a frame error is counted: a bad checksum apart, as it may mean a
/// faulty network or memory.
pub fn frame_error(error: &FrameError) -> BusError {
    match error {
        FrameError::Corrupt { .. } => BusError::Crc,
        _ => BusError::Broken,
    }
}

/// How a failed handshake of this node's is counted.
fn handshake_error(error: &HandshakeError) -> BusError {
    match error {
        HandshakeError::Frame(error) => frame_error(error),
        HandshakeError::Refused(_) | HandshakeError::WrongNode { .. } => BusError::Rejected,
    }
}

/// Whether an idle connection still looks usable: nothing to read on its
/// socket (a closed one reads its end, an error, or bytes nobody asked
/// for, a TLS close alert among them).
fn open(conn: &Conn) -> bool {
    let stream = match conn {
        Either::Left(stream) => stream,
        Either::Right(tls) => tls.get_ref().0,
    };
    let mut byte = [0; 1];
    matches!(stream.try_read(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

async fn write_all(stream: &mut Conn, bytes: &[u8]) -> io::Result<()> {
    stream.write_all(bytes).await?;
    stream.flush().await
}
