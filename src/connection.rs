//! One client's session: read, decode, parse, dispatch, encode, write.
//!
//! Every socket read is decoded into all the complete requests it holds.
//! Their lease commands go to the core as one batch; the others (PING,
//! HELLO, CLIENT ...) are answered here. The replies are encoded in request
//! order, each in the protocol in force when its request was read, and
//! written back with one write.
//!
//! Reading goes on while replies wait to be written: a client that sends a
//! large burst before reading anything must not deadlock against us.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker, ready};
use std::time::{Duration, Instant, SystemTime};

use bytes::{Buf, Bytes, BytesMut};
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio_util::io::{poll_read_buf, poll_write_buf};
use tracing::{debug, warn};

use crate::command::{
    self, ClientAttr, ClientFilter, Command, CommandName, KillFilter, SlowlogCommand, docs,
};
use crate::core::{Answer, CoreHandle};
use crate::monitor::MonitorFeed;
use crate::reply::{Protocol, Reply};
use crate::request::{Limits, RequestDecoder};
use crate::server::{ClientEntry, Shared};
use crate::slowlog::Stopwatch;

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

/// A client's session over `S`: a `TcpStream`, or a TLS stream over one.
pub struct Connection<S = TcpStream> {
    stream: S,
    client: Arc<ClientEntry>,
    shared: Arc<Shared>,
    core: CoreHandle,
    decoder: RequestDecoder,
    read_buf: BytesMut,
    write_buf: BytesMut,
    protocol: Protocol,
    /// The last command run, for `CLIENT LIST`.
    last_command: Option<CommandName>,
    /// Whether the client may run commands: always without `requirepass`.
    authenticated: bool,
    /// Since when the unsent replies have been above the soft output limit.
    over_soft_limit_since: Option<Instant>,
    /// Bytes the stream took but may not have sent yet (TLS records it
    /// could not pass to the socket); never set for a `TcpStream`.
    unflushed: bool,
    /// In `MONITOR` mode: the feed of commands run by every client.
    monitor: Option<MonitorFeed>,
}

/// Where a request's reply comes from, and the protocol to encode it in.
enum Slot {
    Ready(Protocol, Reply),
    /// The next of the core's replies, to the request at this position.
    Core(Protocol, usize),
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
        let authenticated = shared.config.requirepass.is_empty();
        let limits = decoder_limits(&shared, authenticated);
        Connection {
            stream,
            client,
            shared,
            core,
            decoder: RequestDecoder::new(limits),
            read_buf: BytesMut::with_capacity(READ_CHUNK),
            write_buf: BytesMut::new(),
            protocol: Protocol::Resp2,
            last_command: None,
            authenticated,
            over_soft_limit_since: None,
            unflushed: false,
            monitor: None,
        }
    }

    /// Serves the client until it leaves, QUITs, or the server shuts down.
    pub async fn serve(mut self) {
        if let Err(error) = self.run().await {
            debug!("client {} closed: {error}", self.client.addr);
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
        let idle_limit = match self.shared.config.timeout {
            0 => None,
            seconds => Some(Duration::from_secs(seconds)),
        };
        // Without a timeout it is never polled, so it costs nothing.
        let idle = tokio::time::sleep(idle_limit.unwrap_or(Duration::MAX));
        tokio::pin!(idle);
        let mut requests = Vec::new();
        loop {
            if kill.is_cancelled() {
                debug!("Client {} closed by CLIENT KILL", self.client.addr);
                return Ok(());
            }
            // Before AUTH, one request at a time: an AUTH lifts the
            // unauthenticated limits for the request after it.
            let was_authenticated = self.authenticated;
            let decoded = if was_authenticated {
                self.decoder.decode(&mut self.read_buf, &mut requests)
            } else {
                self.decoder.decode_one(&mut self.read_buf, &mut requests)
            };
            let mut after = After::Continue;
            let had_requests = !requests.is_empty();
            if had_requests {
                after = self.execute(&mut requests).await;
            }
            if self.authenticated != was_authenticated {
                self.decoder
                    .set_limits(decoder_limits(&self.shared, self.authenticated));
            }
            if after == After::Continue
                && let Err(error) = decoded
            {
                Reply::error(error.message()).encode(self.protocol, &mut self.write_buf);
                after = After::Close;
            }
            if after == After::Continue
                && self.read_buf.len() > self.shared.config.client_query_buffer_limit
            {
                warn!(
                    "Closing client {} that reached max query buffer length",
                    self.client.addr
                );
                Reply::error(QUERY_BUFFER_FULL).encode(self.protocol, &mut self.write_buf);
                after = After::Close;
            }
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
            if !was_authenticated && had_requests && !self.read_buf.is_empty() {
                // More may be complete already: decode before reading.
                continue;
            }
            self.read_buf.reserve(READ_CHUNK);
            self.report_status();
            // Out of `self` while the select borrows it for the socket.
            let mut feed = self.monitor.take();
            tokio::select! {
                _ = &mut cancelled => {
                    return tokio::time::timeout(FINAL_FLUSH, self.flush())
                        .await
                        .unwrap_or(Ok(()));
                }
                _ = &mut killed => {
                    debug!("Client {} closed by CLIENT KILL", self.client.addr);
                    return Ok(());
                }
                // Monitors are never idle, as in Redis.
                _ = &mut idle, if idle_limit.is_some() && feed.is_none() => {
                    debug!("Closing idle client {}", self.client.addr);
                    return Ok(());
                }
                line = next_line(feed.as_mut()), if feed.is_some() => {
                    if let Some(feed) = &mut feed
                        && let Err(behind) = self.take_lines(feed, line)
                    {
                        warn!(
                            "Closing monitor client {} that fell {behind} lines behind",
                            self.client.addr
                        );
                        return Ok(());
                    }
                }
                read = std::future::poll_fn(|cx| self.poll_io(cx)) => {
                    if read? == Some(0) {
                        // The client closed its side; it may still read.
                        return self.close().await;
                    }
                }
            }
            self.monitor = feed;
            if let Some(limit) = idle_limit {
                idle.as_mut().reset(tokio::time::Instant::now() + limit);
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
        meta.last_active = self.client.connected.elapsed();
        meta.last_command = self.last_command;
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
        let limit = self.shared.config.client_output_buffer_limit;
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

    /// Runs one read's requests and encodes their replies in order.
    async fn execute(&mut self, requests: &mut Vec<Vec<Bytes>>) -> After {
        self.shared
            .stats
            .total_commands_processed
            .fetch_add(requests.len() as u64, Ordering::Relaxed);
        if let Some(name) = requests.last().and_then(|args| command::name_of(args)) {
            self.last_command = Some(name);
        }
        let monitored = self.shared.monitors.active();

        let mut slots = Vec::with_capacity(requests.len());
        let mut lease_commands = Vec::new();
        let mut after = After::Continue;
        for (index, args) in requests.iter().enumerate() {
            if !self.authenticated && !allowed_before_auth(args) {
                slots.push(Slot::Ready(self.protocol, Reply::error(NOAUTH)));
                continue;
            }
            let parsed = command::parse(args);
            if monitored && parsed.is_ok() {
                self.publish(args);
            }
            match parsed {
                Ok(Command::Lease(command)) => {
                    if let Err(reply) = command.check_id_len(self.shared.config.lease_max_id_len) {
                        slots.push(Slot::Ready(self.protocol, reply));
                        continue;
                    }
                    lease_commands.push(command);
                    slots.push(Slot::Core(self.protocol, index));
                }
                Ok(command) => {
                    let mut stopwatch = Stopwatch::start(&self.shared.config);
                    let (reply, next) = self.apply(command);
                    if let Some(took) = stopwatch.as_mut().and_then(Stopwatch::lap) {
                        self.log_slow(args, took);
                    }
                    if let Some(reply) = reply {
                        slots.push(Slot::Ready(self.protocol, reply));
                    }
                    if next != After::Continue {
                        // Requests after QUIT or SHUTDOWN are not run.
                        after = next;
                        break;
                    }
                }
                Err(reply) => slots.push(Slot::Ready(self.protocol, reply)),
            }
        }

        let answer = if lease_commands.is_empty() {
            Answer::default()
        } else {
            self.core.call(lease_commands).await
        };
        for (nth, took) in answer.slow {
            let index = slots
                .iter()
                .filter_map(|slot| match slot {
                    Slot::Core(_, index) => Some(*index),
                    Slot::Ready(..) => None,
                })
                .nth(nth)
                .expect("one slot per core command");
            self.log_slow(&requests[index], took);
        }
        requests.clear();

        let mut core_replies = answer.replies.into_iter();
        for slot in slots {
            let (protocol, reply) = match slot {
                Slot::Ready(protocol, reply) => (protocol, reply),
                Slot::Core(protocol, _) => (
                    protocol,
                    core_replies.next().expect("one reply per command"),
                ),
            };
            reply.encode(protocol, &mut self.write_buf);
        }
        after
    }

    /// Shows a command to the monitors, unless it is an administrative one
    /// (as Redis hides those).
    fn publish(&self, args: &[Bytes]) {
        if command::name_of(args).is_some_and(|name| !name.is_admin()) {
            self.shared.monitors.publish(self.client.addr, args);
        }
    }

    fn log_slow(&self, args: &[Bytes], took: Duration) {
        let max_len = self.shared.config.slowlog_max_len;
        self.shared
            .slowlog
            .record(max_len, args, took, &self.client);
    }

    /// Answers a command that needs only this connection and the server.
    fn apply(&mut self, command: Command) -> (Option<Reply>, After) {
        let reply = match command {
            Command::Quit => return (Some(Reply::OK), After::Close),
            Command::Shutdown => return (None, After::Shutdown),
            Command::Lease(_) => unreachable!("lease commands go to the core"),
            Command::Ping(None) => Reply::Status("PONG"),
            Command::Ping(Some(message)) | Command::Echo(message) => Reply::Bulk(message),
            Command::Hello {
                protocol,
                auth,
                set_name,
            } => self.hello(protocol, auth, set_name),
            Command::Auth { username, password } => self
                .auth(username.as_deref(), &password)
                .map(|()| Reply::OK)
                .unwrap_or_else(|e| e),
            Command::Reset => {
                self.authenticated = self.shared.config.requirepass.is_empty();
                self.set_protocol(Protocol::Resp2);
                self.monitor = None;
                let mut meta = self.client.meta();
                meta.name = None;
                meta.monitor = false;
                Reply::Status("RESET")
            }
            Command::Select => Reply::OK,
            Command::ClientSetName(name) => self
                .set_name(name)
                .map(|()| Reply::OK)
                .unwrap_or_else(|e| e),
            Command::ClientGetName => self
                .client
                .meta()
                .name
                .clone()
                .map_or(Reply::Null, Reply::Bulk),
            Command::ClientId => Reply::Int(self.client.id as i64),
            Command::ClientSetInfo(attr, value) => self.set_info(attr, value),
            Command::ClientInfo => {
                self.report_status();
                Reply::Verbatim(self.client.describe().into())
            }
            Command::ClientList(filter) => {
                self.report_status();
                self.client_list(&filter)
            }
            Command::ClientKill(filter) => return self.client_kill(&filter),
            Command::Monitor => {
                if self.monitor.is_none() {
                    self.monitor = Some(self.shared.monitors.subscribe());
                    self.client.meta().monitor = true;
                }
                Reply::OK
            }
            Command::Slowlog(SlowlogCommand::Get(count)) => self.shared.slowlog.get(count),
            Command::Slowlog(SlowlogCommand::Len) => Reply::Int(self.shared.slowlog.len() as i64),
            Command::Slowlog(SlowlogCommand::Reset) => {
                self.shared.slowlog.reset();
                Reply::OK
            }
            Command::CommandInfo(names) => docs::info(names.as_deref()),
            Command::CommandCount => docs::count(),
            Command::CommandDocs(names) => docs::docs(&names),
            Command::CommandList => docs::list(),
            Command::ConfigGet(patterns) => self.config_get(&patterns),
            Command::Help(lines) => {
                Reply::Array(lines.iter().map(|line| Reply::Status(line)).collect())
            }
            Command::Time => time(),
        };
        (Some(reply), After::Continue)
    }

    fn set_protocol(&mut self, protocol: Protocol) {
        self.protocol = protocol;
        self.client.meta().protocol = Some(protocol);
    }

    /// `HELLO`: checks AUTH and SETNAME before changing anything, then
    /// switches protocol and replies in the new one.
    fn hello(
        &mut self,
        protocol: Option<Protocol>,
        credentials: Option<(Bytes, Bytes)>,
        set_name: Option<Bytes>,
    ) -> Reply {
        match &credentials {
            Some((username, password)) => {
                if let Err(reply) = self.auth(Some(username), password) {
                    return reply;
                }
            }
            None if !self.authenticated => return Reply::error(HELLO_NOAUTH),
            None => {}
        }
        if let Some(name) = set_name
            && let Err(reply) = self.set_name(name)
        {
            return reply;
        }
        if let Some(protocol) = protocol {
            self.set_protocol(protocol);
        }
        let field = |name: &'static str, value: Reply| (Reply::text(name), value);
        Reply::Map(vec![
            field("server", Reply::text("leased")),
            field("version", Reply::text(env!("CARGO_PKG_VERSION"))),
            field("proto", Reply::Int(self.protocol.version())),
            field("id", Reply::Int(self.client.id as i64)),
            field("mode", Reply::text("standalone")),
            field("role", Reply::text("master")),
            field("modules", Reply::Array(Vec::new())),
        ])
    }

    /// `AUTH`, as Redis does it with only the `default` user: without
    /// `requirepass` any password of `default` is accepted, with it the
    /// password must match, compared in constant time.
    fn auth(&mut self, username: Option<&[u8]>, password: &[u8]) -> Result<(), Reply> {
        let required = self.shared.config.requirepass.as_bytes();
        if required.is_empty() && username.is_none() {
            return Err(Reply::error(
                "ERR AUTH <password> called without any password configured for the default \
                 user. Are you sure your configuration is correct?",
            ));
        }
        let user_ok = username.is_none_or(|user| user == b"default");
        let password_ok = required.is_empty() || bool::from(required.ct_eq(password));
        if user_ok && password_ok {
            self.authenticated = true;
            Ok(())
        } else {
            Err(Reply::error(
                "WRONGPASS invalid username-password pair or user is disabled.",
            ))
        }
    }

    fn set_name(&mut self, name: Bytes) -> Result<(), Reply> {
        if !is_printable_word(&name) {
            return Err(Reply::error(
                "ERR Client names cannot contain spaces, newlines or special characters.",
            ));
        }
        self.client.meta().name = (!name.is_empty()).then_some(name);
        Ok(())
    }

    fn set_info(&mut self, attr: ClientAttr, value: Bytes) -> Reply {
        let label = match attr {
            ClientAttr::LibName => "lib-name",
            ClientAttr::LibVer => "lib-ver",
        };
        if !is_printable_word(&value) {
            return Reply::error(format!(
                "ERR {label} cannot contain spaces, newlines or special characters."
            ));
        }
        let value = (!value.is_empty()).then_some(value);
        let mut meta = self.client.meta();
        match attr {
            ClientAttr::LibName => meta.lib_name = value,
            ClientAttr::LibVer => meta.lib_ver = value,
        }
        Reply::OK
    }

    /// `CLIENT KILL`: the old form answers `OK` or an error, the new one
    /// how many clients it closed. A client that closes itself gets its
    /// reply first.
    fn client_kill(&self, filter: &KillFilter) -> (Option<Reply>, After) {
        let killed = self.shared.clients.kill(filter, self.client.id);
        let reply = match (filter.legacy, killed) {
            (true, 0) => Reply::error("ERR No such client"),
            (true, _) => Reply::OK,
            (false, n) => Reply::Int(n as i64),
        };
        let after = if self.client.killed.is_cancelled() {
            After::Close
        } else {
            After::Continue
        };
        (Some(reply), after)
    }

    fn client_list(&self, filter: &ClientFilter) -> Reply {
        let clients = self.shared.clients.snapshot();
        let text: String = clients
            .iter()
            .filter(|client| match filter {
                ClientFilter::All => true,
                ClientFilter::NormalOnly(normal) => *normal,
                ClientFilter::Ids(ids) => ids.contains(&client.id),
            })
            .map(|client| client.describe())
            .collect();
        Reply::Verbatim(text.into())
    }

    /// `CONFIG GET pattern ...`: each matching parameter once.
    fn config_get(&self, patterns: &[Bytes]) -> Reply {
        let mut found: Vec<(&'static str, String)> = Vec::new();
        for pattern in patterns {
            for (name, value) in self.shared.config.get(pattern) {
                if !found.iter().any(|(seen, _)| *seen == name) {
                    found.push((name, value));
                }
            }
        }
        Reply::Map(
            found
                .into_iter()
                .map(|(name, value)| (Reply::text(name), Reply::bulk(value)))
                .collect(),
        )
    }
}

/// The reply to any command but AUTH, HELLO and QUIT before AUTH.
const NOAUTH: &str = "NOAUTH Authentication required.";
/// Redis's reply to HELLO without AUTH before authenticating.
const HELLO_NOAUTH: &str = "NOAUTH HELLO must be called with the client already authenticated, \
     otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate \
     the client and select the RESP protocol version at the same time";

/// A lingering close: after the server has closed its sending side, it
/// discards what the client still sends, for up to [`LINGER`], until the
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
fn decoder_limits(shared: &Shared, authenticated: bool) -> Limits {
    Limits {
        max_bulk_len: shared.config.proto_max_bulk_len,
        unauthenticated: !authenticated,
        ..Limits::default()
    }
}

/// Redis closes such a client without a word; saying why helps whoever
/// reads the client's log.
const QUERY_BUFFER_FULL: &str =
    "ERR Protocol error: query buffer limit reached (client-query-buffer-limit)";

/// What a client may send before it has authenticated.
fn allowed_before_auth(args: &[Bytes]) -> bool {
    let name = args.first().map_or(&b""[..], |name| &name[..]);
    [&b"auth"[..], b"hello", b"quit"]
        .iter()
        .any(|allowed| name.eq_ignore_ascii_case(allowed))
}

/// Redis's rule for client names and library info: printable ASCII
/// without spaces.
fn is_printable_word(value: &[u8]) -> bool {
    value.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

/// The next line for a monitor; only polled when there is a feed.
async fn next_line(feed: Option<&mut MonitorFeed>) -> Result<Bytes, RecvError> {
    match feed {
        Some(feed) => feed.lines.recv().await,
        None => std::future::pending().await,
    }
}

/// `TIME`: wall-clock seconds and microseconds, as bulk strings.
fn time() -> Reply {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    Reply::Array(vec![
        Reply::bulk(now.as_secs().to_string()),
        Reply::bulk(now.subsec_micros().to_string()),
    ])
}
