//! One client's connection: read, decode, hand the requests to the
//! handlers, write the replies.
//!
//! Every socket read is decoded into all the complete requests it holds,
//! which `handlers` run in order (lease commands go to the core as one
//! batch); their replies are written back with one write. The client's
//! protocol, authentication and name are its `session::Session`.
//!
//! Reading goes on while replies wait to be written: a client that sends a
//! large burst before reading anything must not deadlock against us.
//!
//! A blocked acquire (`LEASE.ACQUIRE ... BLOCK`) holds the connection as
//! in Redis: its reply comes when the core grants the run (or the wait
//! ends), and the requests the client pipelined after it run only then.
//! Between requests the connection also passes on what it is fed: lease
//! events for a subscriber (`pubsub`), commands for a monitor.
//!
//! Inside `MULTI` requests are queued (`multi`) until `EXEC`, whose lease
//! commands join the batch of the read it came in, so the core runs them
//! back to back and logs them with one write.

mod handlers;
mod keyspace;
mod moved;
mod multi;
mod pubsub;
mod session;
mod sync;
mod words;

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::io::{poll_read_buf, poll_write_buf};
use tracing::{debug, warn};

use crate::command::CommandName;
use crate::config::Config;
use crate::core::{CoreCommand, CoreHandle, Granted};
use crate::monitor::MonitorFeed;
use crate::pubsub::Message;
use crate::reply::{Protocol, Reply};
use crate::request::{Limits, RequestDecoder};
use crate::state::{ClientEntry, Shared, Tally};
use multi::Transaction;
use pubsub::Subscriber;
use session::Session;

/// Bytes requested from the socket per read.
const READ_CHUNK: usize = 16 * 1024;
/// How long shutdown waits for a client to take its last replies.
const FINAL_FLUSH: Duration = Duration::from_secs(1);
/// How long a closing connection (QUIT, a protocol error) waits for the
/// client to take its last replies: one that never reads must not keep
/// its connection forever.
const CLOSE_FLUSH: Duration = Duration::from_secs(10);
/// How long a closed connection goes on discarding the client's input.
const LINGER: Duration = Duration::from_secs(1);

/// A client's connection over `S`: a `TcpStream`, or a TLS stream over
/// one.
pub struct Connection<S = TcpStream> {
    stream: S,
    client: Arc<ClientEntry>,
    shared: Arc<Shared>,
    core: CoreHandle,
    decoder: RequestDecoder,
    read_buf: BytesMut,
    write_buf: BytesMut,
    session: Session,
    /// The last command run, for `CLIENT LIST`.
    last_command: Option<CommandName>,
    /// Since when the unsent replies have been above the soft output limit.
    over_soft_limit_since: Option<Instant>,
    /// Bytes the stream took but may not have sent yet (TLS records it
    /// could not pass to the socket); never set for a `TcpStream`.
    unflushed: bool,
    /// In `MONITOR` mode: the feed of commands run by every client.
    monitor: Option<MonitorFeed>,
    /// Waiting for a blocked acquire's outcome.
    blocked: Option<Blocked>,
    /// Once it has subscribed: its subscriptions and their messages.
    subscriber: Option<Subscriber>,
    /// Inside `MULTI`: the requests queued for `EXEC`.
    transaction: Option<Transaction>,
    /// The outcomes of the requests being run, for `INFO commandstats`,
    /// `errorstats` and `latencystats`: folded into the shared counters
    /// once per batch.
    tally: Tally,
}

/// A blocked acquire: where its outcome comes from, and the protocol its
/// request was read in.
struct Blocked {
    outcome: oneshot::Receiver<Granted>,
    protocol: Protocol,
}

/// What one wait for the client, its output or its feeds ended with.
enum Turn {
    /// Go on; `true` if the client or its output did something.
    Go(bool),
    /// Stop now (killed, idle, or the read side failed).
    Stop(io::Result<()>),
    /// Write what is pending, then close: the client closed its side.
    Close,
    /// The server is shutting down: a last flush, briefly.
    Shutdown,
}

/// What the connection does after a batch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum After {
    Continue,
    /// QUIT, or a protocol error: write what is pending and close.
    Close,
    /// SHUTDOWN: close and stop the server.
    Shutdown,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    pub fn new(
        stream: S,
        client: Arc<ClientEntry>,
        shared: Arc<Shared>,
        core: CoreHandle,
    ) -> Connection<S> {
        let config = shared.config();
        let session = Session::new(&config.requirepass);
        let limits = decoder_limits(&config, session.authenticated);
        drop(config);
        Connection {
            stream,
            client,
            shared,
            core,
            decoder: RequestDecoder::new(limits),
            read_buf: BytesMut::with_capacity(READ_CHUNK),
            write_buf: BytesMut::new(),
            session,
            last_command: None,
            over_soft_limit_since: None,
            unflushed: false,
            monitor: None,
            blocked: None,
            subscriber: None,
            transaction: None,
            tally: Tally::default(),
        }
    }

    /// Serves the client until it leaves, QUITs, or the server shuts down.
    pub async fn serve(mut self) {
        if let Err(error) = self.run().await {
            debug!("client {} closed: {error}", self.client.addr);
        }
        self.unsubscribe_all();
        if self.blocked.take().is_some() {
            // Leave the queue now rather than when the core next looks.
            let client_id = self.client.id;
            let unblock = CoreCommand::Unblock {
                client_id,
                error: false,
            };
            self.core.call(vec![unblock]).await;
        }
        self.shared.clients.unregister(self.client.id);
    }

    async fn run(&mut self) -> io::Result<()> {
        let shutdown = self.shared.shutdown.clone();
        // Made once: a fresh one per turn of the loop would join and leave
        // the token's waiter list for every request.
        let cancelled = shutdown.cancelled();
        tokio::pin!(cancelled);
        let kill = self.client.killed.clone();
        let killed = kill.cancelled();
        tokio::pin!(killed);
        let client = self.client.clone();
        let reconfigured = client.reconfigured.notified();
        tokio::pin!(reconfigured);
        // Armed only while `timeout` is set; read each turn, so that
        // `CONFIG SET timeout` applies to connections already open.
        let idle = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(idle);
        let mut last_active = Instant::now();
        let mut requests = Vec::new();
        loop {
            if kill.is_cancelled() {
                debug!("Client {} closed by CLIENT KILL", self.client.addr);
                return Ok(());
            }
            // Before AUTH, one request at a time: an AUTH lifts the
            // unauthenticated limits for the request after it. While
            // blocked, nothing more runs.
            let was_authenticated = self.session.authenticated;
            let blocked_before = self.blocked.is_some();
            let decoded = match (blocked_before, was_authenticated) {
                (true, _) => Ok(()),
                (false, true) => self.decoder.decode(&mut self.read_buf, &mut requests),
                (false, false) => self.decoder.decode_one(&mut self.read_buf, &mut requests),
            };
            let mut after = After::Continue;
            let had_requests = !blocked_before && !requests.is_empty();
            if had_requests {
                after = self.execute(&mut requests).await;
            }
            let config = self.shared.config();
            self.decoder
                .set_limits(decoder_limits(&config, self.session.authenticated));
            let protocol = self.session.protocol;
            if after == After::Continue
                && let Err(error) = decoded
            {
                self.tally.error(&error.message());
                self.shared.calls.fold(&mut self.tally);
                Reply::error(error.message()).encode(protocol, &mut self.write_buf);
                after = After::Close;
            }
            if after == After::Continue && self.read_buf.len() > config.client_query_buffer_limit {
                warn!(
                    "Closing client {} that reached max query buffer length",
                    self.client.addr
                );
                Reply::error(QUERY_BUFFER_FULL).encode(protocol, &mut self.write_buf);
                after = After::Close;
            }
            let idle_limit = match config.timeout {
                0 => None,
                seconds => Some(Duration::from_secs(seconds)),
            };
            drop(config);
            match after {
                After::Continue => {}
                After::Close => return self.close().await,
                After::Shutdown => {
                    shutdown.cancel();
                    return self.close().await;
                }
            }

            self.write_now()?;
            if self.over_output_limit() {
                warn!(
                    "Closing client {} for overcoming of output buffer limits ({} bytes unread)",
                    self.client.addr,
                    self.write_buf.len()
                );
                return Ok(());
            }
            let more_now = !was_authenticated && had_requests && !self.read_buf.is_empty();
            // Requests held behind a blocked acquire that was answered at
            // once run now, before reading more.
            let held = self.blocked.is_none() && !requests.is_empty();
            if more_now || held {
                continue;
            }
            self.read_buf.reserve(READ_CHUNK);
            self.report_status();
            // Monitors, subscribers and blocked clients are never idle, as
            // in Redis.
            let idle_exempt = self.monitor.is_some() || self.blocked.is_some() || self.subscribed();
            let idle_limit = idle_limit.filter(|_| !idle_exempt);
            if let Some(limit) = idle_limit {
                idle.as_mut().reset(last_active + limit);
            }
            // Out of `self` while the select borrows it for the socket.
            let mut feed = self.monitor.take();
            let mut blocked = self.blocked.take();
            let mut subscriber = self.subscriber.take();
            let turn = tokio::select! {
                _ = &mut cancelled => Turn::Shutdown,
                _ = &mut killed => {
                    debug!("Client {} closed by CLIENT KILL", self.client.addr);
                    Turn::Stop(Ok(()))
                }
                // Settings changed: the next turn reads them (the idle
                // timeout of a client that sends nothing).
                _ = &mut reconfigured => {
                    reconfigured.set(client.reconfigured.notified());
                    Turn::Go(false)
                }
                _ = &mut idle, if idle_limit.is_some() => {
                    debug!("Closing idle client {}", self.client.addr);
                    Turn::Stop(Ok(()))
                }
                outcome = next_outcome(blocked.as_mut()), if blocked.is_some() => {
                    let protocol = blocked.take().map_or(Protocol::Resp2, |b| b.protocol);
                    self.client.meta().blocked = false;
                    words::granted(outcome.ok()).encode(protocol, &mut self.write_buf);
                    Turn::Go(true)
                }
                Some(message) = next_message(subscriber.as_mut()), if subscriber.is_some() => {
                    if let Some(subscriber) = &mut subscriber {
                        self.take_messages(subscriber, message);
                    }
                    Turn::Go(false)
                }
                line = next_line(feed.as_mut()), if feed.is_some() => {
                    match feed.as_mut().map(|feed| self.take_lines(feed, line)) {
                        Some(Err(behind)) => {
                            warn!(
                                "Closing monitor client {} that fell {behind} lines behind",
                                self.client.addr
                            );
                            Turn::Stop(Ok(()))
                        }
                        _ => Turn::Go(true),
                    }
                }
                read = std::future::poll_fn(|cx| self.poll_io(cx)) => match read {
                    // The client closed its side; it may still read.
                    Ok(Some(0)) => Turn::Close,
                    Ok(_) => Turn::Go(true),
                    Err(error) => Turn::Stop(Err(error)),
                },
            };
            self.monitor = feed;
            self.blocked = blocked;
            self.subscriber = subscriber;
            match turn {
                Turn::Go(true) => last_active = Instant::now(),
                Turn::Go(false) => {}
                Turn::Stop(result) => return result,
                Turn::Close => return self.close().await,
                Turn::Shutdown => {
                    // A blocked client is never granted the run now.
                    self.blocked = None;
                    return tokio::time::timeout(FINAL_FLUSH, self.flush())
                        .await
                        .unwrap_or(Ok(()));
                }
            }
        }
    }

    /// Writes what the socket takes without waiting. The replies to a read
    /// nearly always fit, and then they leave without another turn of the
    /// loop; the rest waits for the `select!`.
    fn write_now(&mut self) -> io::Result<()> {
        if self.write_buf.is_empty() {
            return Ok(());
        }
        // Polled with a waker that does nothing: for a `TcpStream` this is
        // `try_write`; `poll_io` registers the real waker if needed.
        let mut cx = Context::from_waker(Waker::noop());
        let mut stream = Pin::new(&mut self.stream);
        if let Poll::Ready(written) = stream.as_mut().poll_write(&mut cx, &self.write_buf) {
            self.write_buf.advance(written?);
            // A TLS stream may keep records it could not send yet.
            self.unflushed = stream.poll_flush(&mut cx)?.is_pending();
        }
        Ok(())
    }

    /// Sends pending output while reading, until a read completes (with
    /// its byte count) or the output is all out (`None`).
    fn poll_io(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<usize>>> {
        if (!self.write_buf.is_empty() || self.unflushed)
            && let Poll::Ready(result) = self.poll_output(cx)
        {
            return Poll::Ready(result.map(|()| None));
        }
        match ready!(poll_read_buf(
            Pin::new(&mut self.stream),
            cx,
            &mut self.read_buf
        )) {
            // A TLS client that closes without close_notify: taken as a
            // plain close, so it still gets the replies it waits for.
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => Poll::Ready(Ok(Some(0))),
            read => Poll::Ready(read.map(Some)),
        }
    }

    fn poll_output(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.write_buf.is_empty() {
            let written = ready!(poll_write_buf(
                Pin::new(&mut self.stream),
                cx,
                &mut self.write_buf
            ))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
        }
        ready!(Pin::new(&mut self.stream).poll_flush(cx))?;
        self.unflushed = false;
        Poll::Ready(Ok(()))
    }

    /// Queues a monitor line and every other one already waiting; the
    /// error is how many lines were lost when the client fell behind.
    fn take_lines(
        &mut self,
        feed: &mut MonitorFeed,
        first: Result<Bytes, RecvError>,
    ) -> Result<(), u64> {
        let mut line = first;
        loop {
            match line {
                Ok(line) => self.write_buf.extend_from_slice(&line),
                Err(RecvError::Lagged(lost)) => return Err(lost),
                // The sender lives as long as the server.
                Err(RecvError::Closed) => return Ok(()),
            }
            line = match feed.lines.try_recv() {
                Ok(next) => Ok(next),
                Err(TryRecvError::Lagged(lost)) => Err(RecvError::Lagged(lost)),
                Err(_) => return Ok(()),
            };
        }
    }

    /// Publishes what `CLIENT LIST` shows of this connection.
    fn report_status(&self) {
        let mut meta = self.client.meta();
        meta.name.clone_from(&self.session.name);
        meta.lib_name.clone_from(&self.session.lib_name);
        meta.lib_ver.clone_from(&self.session.lib_ver);
        meta.protocol = Some(self.session.protocol);
        meta.last_active = self.client.connected.elapsed();
        meta.last_command = self.last_command;
        meta.multi = self.transaction.as_ref().map(Transaction::len);
        meta.query_buf = self.read_buf.len();
        meta.query_buf_capacity = self.read_buf.capacity();
        meta.output_pending = self.write_buf.len();
        meta.output_capacity = self.write_buf.capacity();
    }

    /// `client-output-buffer-limit`: whether the replies the client has
    /// not taken are past the hard limit, or have stayed past the soft one
    /// for too long. Redis closes such a client without a reply, as it
    /// would never read one.
    fn over_output_limit(&mut self) -> bool {
        let limits = self.shared.config().client_output_buffer_limit;
        let limit = if self.subscribed() {
            limits.pubsub
        } else {
            limits.normal
        };
        let pending = self.write_buf.len() as u64;
        if limit.hard > 0 && pending > limit.hard {
            return true;
        }
        if limit.soft == 0 || pending <= limit.soft {
            self.over_soft_limit_since = None;
            return false;
        }
        let since = *self.over_soft_limit_since.get_or_insert_with(Instant::now);
        since.elapsed() >= Duration::from_secs(limit.soft_seconds)
    }

    /// Writes what is pending and closes the sending side, waiting a
    /// bounded time for a client that does not read; then lingers (see
    /// [`linger`]).
    async fn close(&mut self) -> io::Result<()> {
        tokio::time::timeout(CLOSE_FLUSH, self.flush())
            .await
            .unwrap_or(Ok(()))?;
        linger(&mut self.stream).await;
        Ok(())
    }

    /// Writes the last replies and closes the sending side (with a TLS
    /// close_notify).
    async fn flush(&mut self) -> io::Result<()> {
        self.stream.write_all_buf(&mut self.write_buf).await?;
        self.stream.shutdown().await
    }
}

/// A lingering close: after the server has closed its sending side, it
/// discards what the client still sends, for up to `LINGER`, until the
/// client closes too. Closing with unread input would reset the
/// connection, and the client could lose its last reply (often an error
/// saying why it is closed) before reading it.
pub async fn linger(stream: &mut (impl AsyncRead + Unpin)) {
    let mut sink = [0u8; 4096];
    let drain = async {
        while stream.read(&mut sink).await? > 0 {}
        io::Result::Ok(())
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// The decoder's limits: `proto-max-bulk-len`, and Redis's smaller ones
/// for a client that has yet to give the password.
fn decoder_limits(config: &Config, authenticated: bool) -> Limits {
    Limits {
        max_bulk_len: config.proto_max_bulk_len,
        unauthenticated: !authenticated,
        ..Limits::default()
    }
}

/// Redis closes such a client without a word; saying why helps whoever
/// reads the client's log.
const QUERY_BUFFER_FULL: &str =
    "ERR Protocol error: query buffer limit reached (client-query-buffer-limit)";

/// A blocked acquire's outcome; only polled while blocked. An error if
/// the core has stopped.
async fn next_outcome(blocked: Option<&mut Blocked>) -> Result<Granted, oneshot::error::RecvError> {
    match blocked {
        Some(blocked) => (&mut blocked.outcome).await,
        None => std::future::pending().await,
    }
}

/// The next message for a subscriber; only polled when it has subscribed.
async fn next_message(subscriber: Option<&mut Subscriber>) -> Option<Message> {
    match subscriber {
        Some(subscriber) => subscriber.next().await,
        None => std::future::pending().await,
    }
}

/// The next line for a monitor; only polled when there is a feed.
async fn next_line(feed: Option<&mut MonitorFeed>) -> Result<Bytes, RecvError> {
    match feed {
        Some(feed) => feed.lines.recv().await,
        None => std::future::pending().await,
    }
}
