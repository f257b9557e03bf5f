//! The Rust client of leased, the lease registry that speaks the Redis
//! protocol: a lease with a background heartbeat, a deadline to check
//! before each write, its fencing token to stamp every write with,
//! checkpoints in the run's data, events and history. Built on the `redis`
//! crate with tokio.
//!
//! ```no_run
//! use std::time::Duration;
//! use leased_client::{LeaseOptions, Registry};
//!
//! # async fn work(step: u32) {}
//! # async fn store(step: u32, token: i64) {}
//! # async fn run() -> Result<(), leased_client::Error> {
//! let registry = Registry::connect("redis://127.0.0.1:6479/").await?;
//! let options = LeaseOptions::new().ttl(Duration::from_secs(10)).wait(Duration::from_secs(30));
//! let mut lease = registry.lease("run-42", "worker-a", options).await?;
//! let data = lease.data().map(|d| String::from_utf8_lossy(d).into_owned());
//! let mut step = data.and_then(|d| d.strip_prefix("step=")?.parse::<u32>().ok()).map_or(0, |s| s + 1);
//! while step < 100 {
//!     work(step).await;
//!     lease.check()?;                              // Error::LeaseLost: stop writing
//!     store(step, lease.token()).await;            // the storage checks the token
//!     lease.checkpoint(format!("step={step}")).await?; // the next holder resumes here
//!     step += 1;
//! }
//! lease.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # The rules
//!
//! - **The TTL** is [`LeaseOptions::ttl`], else the server's `lease-ttl`,
//!   read once with `CONFIG GET` when the registry connects; it is sent
//!   with every acquire, so the server and the deadline agree on it.
//! - **The deadline** ([`Lease::deadline`], a [`tokio::time::Instant`] on
//!   the local monotonic clock) is the moment the last successful acquire
//!   or heartbeat was *sent*, plus the TTL. The server started the TTL when
//!   the command arrived, later, so the deadline is never after the
//!   server's expiry, whatever the round trip took. A lease granted after
//!   a wait (`BLOCK`) is heartbeated at once and dated from that heartbeat
//!   (the grant's moment is not known here; the block's start is the
//!   fallback, which is earlier still).
//! - **[`Lease::check`]** errors with [`Error::LeaseLost`] once `lost` is
//!   set or the deadline has passed (and then sets `lost`). Call it before
//!   each write. It cannot close the gap between itself and the write (a
//!   pause can strike there): the fencing token, checked by the storage,
//!   does.
//! - **Heartbeats** run in a tokio task every TTL/3. A reply of 1 moves
//!   the deadline to (send time + TTL); 0 (expired, released, taken over)
//!   sets `lost` at once; an error or a timeout is retried every TTL/12,
//!   and when none has succeeded for a whole period since the first that
//!   failed (or the deadline passes first), `lost` is set: a dead server or
//!   a cut connection loses the lease within one period of the heartbeat
//!   that found it. A heartbeat times out after half a period (TTL/6). A
//!   lease, once lost, stays lost.
//! - **Writes stop at `lost`.** [`Lease::checkpoint`] checks first and
//!   holds the lease's write lock from its check until its `LEASE.SETDATA`
//!   is answered; the heartbeat task sets `lost` under the same lock. So
//!   the library sends no `LEASE.SETDATA` once `lost` is set, or once the
//!   deadline has passed. A `LEASE.SETDATA` answered 0 sets `lost`, and
//!   so does one still unanswered when the deadline passes: a checkpoint
//!   holds the lock no longer than that.
//! - **A paused process** (a GC pause, SIGSTOP, a suspended VM, a blocked
//!   runtime thread) sends no heartbeat. When it wakes, the monotonic clock
//!   is past the deadline: `check()` errors before the next write, and the
//!   heartbeat task sets `lost` without sending anything.
//! - **Release**: [`Lease::release`] sends `LEASE.RELEASE` and says
//!   whether the server removed the lease. Dropping a lease that was not
//!   released (an early return, `?`, a panic) releases it on a best-effort
//!   basis: the release is spawned on the current tokio runtime, if there
//!   is one, and is lost if the runtime shuts down first (as when `main`
//!   returns) or the server cannot be reached. The lease then expires by
//!   itself at the end of its TTL. Dropping or releasing a lease also
//!   sets its `lost`: its token protects no more writes.
//! - **Blocking acquires** ([`LeaseOptions::wait`]) use a connection of
//!   their own, whose response timeout is the wait plus 5 seconds: the
//!   redis crate's default (500 ms) would give up on a reply the server is
//!   still about to send.
//! - **Nodes.** [`Registry::connect_nodes`] takes a list of nodes.
//!   Commands go to the node that last answered; a read moves on to the
//!   next node when one cannot be reached, and fails with
//!   [`Error::Unavailable`] when none can. `-TRYAGAIN` is retried after
//!   10 ms, doubling up to 500 ms, for at most
//!   [`RegistryOptions::retry_for`]. A write answered `-UNCERTAIN`, or
//!   whose connection failed once it may have been sent, is resolved by
//!   reading the state back, as [`rules`] spells out: an acquire took the
//!   run if `LEASE.GET` shows an unexpired lease with our worker id that
//!   this process does not already hold and that `LEASE.HISTORY` shows
//!   with no heartbeat yet (so **worker ids must be unique among live
//!   processes**), otherwise it is sent again, up to three times; a
//!   heartbeat moves no deadline, and the lease is lost if `LEASE.GET` no
//!   longer shows it unexpired; a `LEASE.SETDATA` took if `LEASE.GETDATA`
//!   shows its value and token, otherwise it is checked and sent again; a
//!   `LEASE.RELEASE` is sent again while `LEASE.GET` still shows the
//!   lease. In a cluster with `cluster-redirect moved`, a follower's
//!   `-MOVED slot host:port` sends the command to the node at that
//!   address, if it is in the list (a few times in a row at most; then,
//!   as for a `-MOVED` to a node not in the list, it is retried as a
//!   `-TRYAGAIN`, from the next node); `-CLUSTERDOWN` (no leader now) is
//!   retried as `-TRYAGAIN`. These rules are tested against a fake server
//!   (`tests/nodes.rs`), and examples/worker.rs against a cluster
//!   (tests/examples.rs).

mod lease;
mod reply;
pub mod rules;

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{MultiplexedConnection, PubSubStream};
use redis::{AsyncConnectionConfig, Cmd, Value};
use tokio::time::Instant;

pub use lease::Lease;
pub use reply::{Event, LeaseInfo, RunData, Tenure, parse_event};
use rules::{Beat, Failure};

/// How much longer than a blocked acquire's wait its connection waits for
/// the reply.
const BLOCK_REPLY_MARGIN: Duration = Duration::from_secs(5);

/// How many times a write whose outcome stayed unknown is sent.
const UNCERTAIN_SENDS: usize = 3;

/// The library's errors.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The run is held by another worker (after the wait, with one).
    RunHeld { run: String },
    /// The lease is lost: a heartbeat or a `LEASE.SETDATA` was refused,
    /// its deadline passed, or it was released. Stop writing.
    LeaseLost { reason: String },
    /// No node answered, or `-TRYAGAIN` lasted longer than `retry_for`.
    Unavailable { reason: String },
    /// The server refused the command (an error reply), or the client
    /// could not be set up (a bad URL).
    Redis(redis::RedisError),
    /// A reply of an unexpected shape.
    Protocol(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::RunHeld { run } => write!(f, "{run} is held by another worker"),
            Error::LeaseLost { reason } => write!(f, "lease lost: {reason}"),
            Error::Unavailable { reason } => write!(f, "leased unavailable: {reason}"),
            Error::Redis(error) => write!(f, "{error}"),
            Error::Protocol(what) => write!(f, "{what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(error) => Some(error),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(error: redis::RedisError) -> Error {
        Error::Redis(error)
    }
}

/// How the registry talks to its nodes.
#[derive(Clone, Debug)]
pub struct RegistryOptions {
    /// How long a command waits for its reply (5 s). Heartbeats wait less:
    /// half their period.
    pub response_timeout: Duration,
    /// How long a connection attempt may take (2 s).
    pub connect_timeout: Duration,
    /// How long a command answered `-TRYAGAIN` is retried (2 s).
    pub retry_for: Duration,
}

impl Default for RegistryOptions {
    fn default() -> RegistryOptions {
        RegistryOptions {
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            retry_for: Duration::from_secs(2),
        }
    }
}

/// How to acquire a lease: see [`Registry::lease`].
#[derive(Clone, Debug)]
pub struct LeaseOptions {
    /// The lease's TTL; by default the server's `lease-ttl`.
    pub ttl: Option<Duration>,
    /// How long to wait for a held run (`BLOCK`); None (or zero): not at all.
    pub wait: Option<Duration>,
    /// The lease's lock delay (`LOCKDELAY`); by default the server's.
    pub lock_delay: Option<Duration>,
    /// Acquire `WITHDATA`, for [`Lease::data`] (on by default).
    pub with_data: bool,
}

impl Default for LeaseOptions {
    fn default() -> LeaseOptions {
        LeaseOptions {
            ttl: None,
            wait: None,
            lock_delay: None,
            with_data: true,
        }
    }
}

impl LeaseOptions {
    pub fn new() -> LeaseOptions {
        LeaseOptions::default()
    }

    pub fn ttl(mut self, ttl: Duration) -> LeaseOptions {
        self.ttl = Some(ttl);
        self
    }

    pub fn wait(mut self, wait: Duration) -> LeaseOptions {
        self.wait = Some(wait);
        self
    }

    pub fn lock_delay(mut self, lock_delay: Duration) -> LeaseOptions {
        self.lock_delay = Some(lock_delay);
        self
    }

    pub fn with_data(mut self, with_data: bool) -> LeaseOptions {
        self.with_data = with_data;
        self
    }
}

/// A write's outcome: its reply, or unknown (`-UNCERTAIN`, or the
/// connection failed once the request may have been sent).
enum Sent {
    Answered(Value),
    Uncertain,
}

/// A node and its shared connection (multiplexed: heartbeats and writes
/// of every lease go over it), made when first needed and again after a
/// failure.
struct Node {
    url: String,
    client: redis::Client,
    connection: tokio::sync::Mutex<Option<MultiplexedConnection>>,
}

struct Inner {
    nodes: Vec<Node>,
    /// The node that last answered.
    current: AtomicUsize,
    options: RegistryOptions,
    server_ttl: OnceLock<Duration>,
    /// The tokens of the leases this process holds, for resolving an
    /// uncertain acquire.
    held: Mutex<HashSet<i64>>,
}

/// A connection to leased (one node, or a list of nodes to fall back on),
/// shared by every lease taken through it. Cheap to clone.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

fn seconds(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

impl Registry {
    /// Connects to the node at `url` (`redis://host:port/`; add
    /// `?protocol=resp3` for RESP3, which the library reads as well) and
    /// reads its `lease-ttl`.
    pub async fn connect(url: &str) -> Result<Registry, Error> {
        Registry::connect_with([url], RegistryOptions::default()).await
    }

    /// Connects to a list of nodes, tried in turn.
    pub async fn connect_nodes<I, S>(nodes: I) -> Result<Registry, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Registry::connect_with(nodes, RegistryOptions::default()).await
    }

    /// Connects to a list of nodes with `options`.
    pub async fn connect_with<I, S>(nodes: I, options: RegistryOptions) -> Result<Registry, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let nodes = nodes
            .into_iter()
            .map(|url| {
                let url = url.as_ref().to_owned();
                Ok(Node {
                    client: redis::Client::open(url.as_str())?,
                    url,
                    connection: tokio::sync::Mutex::new(None),
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        if nodes.is_empty() {
            return Err(Error::Unavailable {
                reason: "no nodes given".into(),
            });
        }
        let registry = Registry {
            inner: Arc::new(Inner {
                nodes,
                current: AtomicUsize::new(0),
                options,
                server_ttl: OnceLock::new(),
                held: Mutex::new(HashSet::new()),
            }),
        };
        let mut get = redis::cmd("CONFIG");
        get.arg("GET").arg("lease-ttl");
        let ttl = reply::config_seconds(registry.read(&get).await?, "lease-ttl")?;
        if !(ttl.is_finite() && ttl > 0.0) {
            return Err(Error::Protocol(format!("the server's lease-ttl is {ttl}")));
        }
        let _ = registry.inner.server_ttl.set(Duration::from_secs_f64(ttl));
        Ok(registry)
    }

    /// The server's `lease-ttl`, as read when the registry connected: the
    /// TTL of a lease acquired without one.
    pub fn server_ttl(&self) -> Duration {
        self.inner.server_ttl.get().copied().unwrap_or_default()
    }

    pub fn options(&self) -> &RegistryOptions {
        &self.inner.options
    }

    /// Acquires the lease on `run` for `worker`: a [`Lease`] that
    /// heartbeats in the background until it is released or dropped.
    /// [`Error::RunHeld`] when the run is held (still held when the wait
    /// ran out, with [`LeaseOptions::wait`]).
    pub async fn lease(
        &self,
        run: &str,
        worker: &str,
        options: LeaseOptions,
    ) -> Result<Lease, Error> {
        let ttl = options.ttl.unwrap_or_else(|| self.server_ttl());
        let mut acquire = redis::cmd("LEASE.ACQUIRE");
        acquire.arg(run).arg(worker).arg("TTL").arg(seconds(ttl));
        if let Some(lock_delay) = options.lock_delay {
            acquire.arg("LOCKDELAY").arg(seconds(lock_delay));
        }
        if options.with_data {
            acquire.arg("WITHDATA");
        }
        let wait = options.wait.filter(|wait| !wait.is_zero());
        let (acquired, deadline) = match wait {
            None => {
                let sent = Instant::now();
                let acquired = self
                    .acquire_once(&acquire, run, worker, options.with_data)
                    .await?;
                (acquired, sent + ttl)
            }
            Some(wait) => {
                self.acquire_waiting(acquire, run, worker, wait, ttl, options.with_data)
                    .await?
            }
        };
        let Some(acquired) = acquired else {
            return Err(Error::RunHeld { run: run.into() });
        };
        self.hold(acquired.info.fencing_token);
        Ok(Lease::start(self.clone(), acquired, ttl, deadline))
    }

    /// An acquire sent (again, while its outcome is unknown) on the shared
    /// connection.
    async fn acquire_once(
        &self,
        acquire: &Cmd,
        run: &str,
        worker: &str,
        with_data: bool,
    ) -> Result<Option<reply::Acquired>, Error> {
        for _ in 0..UNCERTAIN_SENDS {
            match self.write(acquire).await? {
                Sent::Answered(value) => return reply::lease(value),
                Sent::Uncertain => {
                    if let Some(acquired) = self.resolve_acquire(run, worker, with_data).await? {
                        return Ok(Some(acquired));
                    }
                }
            }
        }
        Err(Error::Unavailable {
            reason: format!("the acquire of {run} stayed uncertain {UNCERTAIN_SENDS} times"),
        })
    }

    /// Sends a blocking acquire on a connection of its own to the first
    /// node that takes one (from the current one): when it was sent, and
    /// its answer.
    async fn send_waiting(
        &self,
        acquire: &Cmd,
        config: &AsyncConnectionConfig,
    ) -> Result<(Instant, redis::RedisResult<Value>), Error> {
        let mut waiting = None;
        let mut failures = Vec::new();
        let first = self.inner.current.load(Ordering::SeqCst);
        for offset in 0..self.inner.nodes.len() {
            let index = (first + offset) % self.inner.nodes.len();
            let node = &self.inner.nodes[index];
            match node
                .client
                .get_multiplexed_async_connection_with_config(config)
                .await
            {
                Ok(connection) => {
                    self.inner.current.store(index, Ordering::SeqCst);
                    waiting = Some(connection);
                    break;
                }
                Err(error) => failures.push(format!("{}: {error}", node.url)),
            }
        }
        let Some(mut waiting) = waiting else {
            return Err(Error::Unavailable {
                reason: failures.join("; "),
            });
        };
        let sent = Instant::now();
        Ok((sent, acquire.query_async::<Value>(&mut waiting).await))
    }

    /// A blocking acquire, on a connection of its own whose timeout
    /// outlasts the wait; then a heartbeat at once, to date the deadline.
    async fn acquire_waiting(
        &self,
        mut acquire: Cmd,
        run: &str,
        worker: &str,
        wait: Duration,
        ttl: Duration,
        with_data: bool,
    ) -> Result<(Option<reply::Acquired>, Instant), Error> {
        let block_ms = wait.as_millis().max(1);
        acquire.arg("BLOCK").arg(block_ms as u64);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.inner.options.connect_timeout))
            .set_response_timeout(Some(wait + BLOCK_REPLY_MARGIN));
        // A follower's -MOVED is followed to the leader it names, a few
        // times at most.
        let mut moves = 0;
        let (sent, answer) = loop {
            let (sent, answer) = self.send_waiting(&acquire, &config).await?;
            let Err(error) = &answer else {
                break (sent, answer);
            };
            let urls = self.inner.nodes.iter().map(|node| node.url.as_str());
            let to = error
                .redirect_node()
                .and_then(|(at, _)| rules::node_at(urls, at));
            match to {
                Some(to) if moves < 2 * self.inner.nodes.len() => {
                    moves += 1;
                    self.inner.current.store(to, Ordering::SeqCst);
                }
                _ => break (sent, answer),
            }
        };
        let acquired = match answer {
            Ok(value) => reply::lease(value)?,
            Err(error) => match rules::failure(&error) {
                Failure::Unreachable | Failure::Uncertain => {
                    match self.resolve_acquire(run, worker, with_data).await? {
                        Some(acquired) => Some(acquired),
                        None => {
                            return Err(Error::Unavailable {
                                reason: format!("the connection failed while waiting: {error}"),
                            });
                        }
                    }
                }
                Failure::TryAgain | Failure::Moved | Failure::Refused => {
                    return Err(Error::Redis(error));
                }
            },
        };
        let mut deadline = sent + ttl;
        if let Some(lease) = &acquired {
            let beat = Instant::now();
            let info = &lease.info;
            match self
                .heartbeat(run, &info.lease_id, info.fencing_token)
                .await
            {
                Ok(Beat::Extended) => deadline = beat + ttl,
                Ok(Beat::Refused) => {
                    return Err(Error::LeaseLost {
                        reason: "the lease granted after the wait was gone at once".into(),
                    });
                }
                Ok(Beat::Unknown) | Err(_) => {}
            }
        }
        Ok((acquired, deadline))
    }

    /// After an acquire whose outcome is unknown: the lease, if it took.
    async fn resolve_acquire(
        &self,
        run: &str,
        worker: &str,
        with_data: bool,
    ) -> Result<Option<reply::Acquired>, Error> {
        let mut get = redis::cmd("LEASE.GET");
        get.arg(run);
        let Some(shown) = reply::lease(self.read(&get).await?)? else {
            return Ok(None);
        };
        let mut history = redis::cmd("LEASE.HISTORY");
        history.arg(run).arg("COUNT").arg(1);
        let heartbeats = match self.read(&history).await {
            Ok(value) => reply::history(value)?
                .into_iter()
                .next()
                .filter(|tenure| tenure.lease_id == shown.info.lease_id)
                .map(|tenure| tenure.heartbeats),
            Err(Error::Redis(_)) => None,
            Err(error) => return Err(error),
        };
        let held = self.inner.held.lock().unwrap().clone();
        if !rules::acquire_took(Some(&shown.info), heartbeats, worker, &held) {
            return Ok(None);
        }
        let mut acquired = shown;
        acquired.info.expired = None;
        if with_data && let Some(data) = self.get_data(run).await? {
            acquired.data = Some(data.value);
            acquired.data_token = Some(data.fencing_token);
        }
        Ok(Some(acquired))
    }

    fn hold(&self, token: i64) {
        self.inner.held.lock().unwrap().insert(token);
    }

    fn unhold(&self, token: i64) {
        self.inner.held.lock().unwrap().remove(&token);
    }

    /// One heartbeat, resolved when its outcome is unknown.
    pub(crate) async fn heartbeat(
        &self,
        run: &str,
        lease_id: &str,
        token: i64,
    ) -> Result<Beat, Error> {
        let mut beat = redis::cmd("LEASE.HEARTBEAT");
        beat.arg(lease_id).arg(token);
        match self.write(&beat).await? {
            Sent::Answered(value) => Ok(match reply::flag(&value)? {
                true => Beat::Extended,
                false => Beat::Refused,
            }),
            Sent::Uncertain => {
                let shown = self.get(run).await?;
                Ok(rules::heartbeat_outcome(shown.as_ref(), lease_id, token))
            }
        }
    }

    /// One `LEASE.SETDATA`: whether it was stored, or None when its outcome
    /// stayed unknown and it did not take.
    pub(crate) async fn set_data(
        &self,
        run: &str,
        lease_id: &str,
        token: i64,
        value: &[u8],
    ) -> Result<Option<bool>, Error> {
        let mut set = redis::cmd("LEASE.SETDATA");
        set.arg(lease_id).arg(token).arg(value);
        match self.write(&set).await? {
            Sent::Answered(reply) => reply::flag(&reply).map(Some),
            Sent::Uncertain => {
                let shown = self.get_data(run).await?;
                Ok(rules::setdata_took(shown.as_ref(), value, token).then_some(true))
            }
        }
    }

    /// `LEASE.RELEASE`, sent again while its outcome is unknown and the
    /// lease still shown.
    pub(crate) async fn release(
        &self,
        run: &str,
        lease_id: &str,
        token: i64,
    ) -> Result<bool, Error> {
        self.unhold(token);
        let mut release = redis::cmd("LEASE.RELEASE");
        release.arg(lease_id).arg(token);
        for _ in 0..UNCERTAIN_SENDS {
            match self.write(&release).await? {
                Sent::Answered(value) => return reply::flag(&value),
                Sent::Uncertain => {
                    let shown = self.get(run).await?;
                    if !rules::release_again(shown.as_ref(), lease_id, token) {
                        return Ok(true);
                    }
                }
            }
        }
        Err(Error::Unavailable {
            reason: format!("the release of {lease_id} stayed uncertain"),
        })
    }

    /// The run's current lease (`LEASE.GET`), active or expired, or None.
    pub async fn get(&self, run: &str) -> Result<Option<LeaseInfo>, Error> {
        let mut get = redis::cmd("LEASE.GET");
        get.arg(run);
        Ok(reply::lease(self.read(&get).await?)?.map(|lease| lease.info))
    }

    /// The run's data (`LEASE.GETDATA`), or None.
    pub async fn get_data(&self, run: &str) -> Result<Option<RunData>, Error> {
        let mut get = redis::cmd("LEASE.GETDATA");
        get.arg(run);
        reply::run_data(self.read(&get).await?)
    }

    /// The run's most recent tenures, newest first (`LEASE.HISTORY`), at
    /// most `count` of them.
    pub async fn history(&self, run: &str, count: Option<u32>) -> Result<Vec<Tenure>, Error> {
        let mut history = redis::cmd("LEASE.HISTORY");
        history.arg(run);
        if let Some(count) = count {
            history.arg("COUNT").arg(count);
        }
        reply::history(self.read(&history).await?)
    }

    /// The lease events on the channels matching `pattern` (`PSUBSCRIBE`,
    /// e.g. `__lease__:*` or `__leaseevent__:expired`), on a connection of
    /// their own to the current node, subscribed when this returns. Events
    /// are delivered at most once: to miss no change, subscribe first, then
    /// read [`Registry::get`], and ignore events whose token is not above
    /// the one read.
    pub async fn events(&self, pattern: &str) -> Result<Events, Error> {
        let mut failures = Vec::new();
        let first = self.inner.current.load(Ordering::SeqCst);
        let timeout = self.inner.options.connect_timeout;
        for offset in 0..self.inner.nodes.len() {
            let node = &self.inner.nodes[(first + offset) % self.inner.nodes.len()];
            let subscribed = tokio::time::timeout(timeout, async {
                let mut pubsub = node.client.get_async_pubsub().await?;
                pubsub.psubscribe(pattern).await?;
                Ok::<_, redis::RedisError>(pubsub)
            })
            .await;
            match subscribed {
                Ok(Ok(pubsub)) => {
                    return Ok(Events {
                        stream: pubsub.into_on_message(),
                    });
                }
                Ok(Err(error)) if rules::failure(&error) == Failure::Refused => {
                    return Err(Error::Redis(error));
                }
                Ok(Err(error)) => failures.push(format!("{}: {error}", node.url)),
                Err(_) => failures.push(format!("{}: no answer in {timeout:?}", node.url)),
            }
        }
        Err(Error::Unavailable {
            reason: failures.join("; "),
        })
    }

    /// Sends a command that changes nothing: retried on `-TRYAGAIN`, and on
    /// the next node when one cannot be reached.
    async fn read(&self, command: &Cmd) -> Result<Value, Error> {
        match self.send(command, false).await? {
            Sent::Answered(value) => Ok(value),
            Sent::Uncertain => unreachable!("a read is never uncertain"),
        }
    }

    /// Sends a write: retried on `-TRYAGAIN`; uncertain when answered
    /// `-UNCERTAIN` or when its connection failed after it may have gone.
    async fn write(&self, command: &Cmd) -> Result<Sent, Error> {
        self.send(command, true).await
    }

    async fn send(&self, command: &Cmd, write: bool) -> Result<Sent, Error> {
        let nodes = self.inner.nodes.len();
        let started = Instant::now();
        let mut tries = 0;
        let mut unreachable = 0;
        let mut moves = 0;
        // Nodes this command could not reach: a -MOVED to one of them
        // (a follower that has not yet seen its leader die) is waited out
        // as a -TRYAGAIN.
        let mut dead = vec![false; nodes];
        let mut failures = Vec::new();
        loop {
            let index = self.inner.current.load(Ordering::SeqCst);
            let node = &self.inner.nodes[index];
            let (mut connection, reused) = match self.connection(node).await {
                Ok(connection) => connection,
                Err(error) => {
                    // Nothing was sent: any command may go to the next node.
                    failures.push(format!("{}: {error}", node.url));
                    self.move_on(index);
                    dead[index] = true;
                    unreachable += 1;
                    if unreachable >= nodes {
                        return Err(Error::Unavailable {
                            reason: failures.join("; "),
                        });
                    }
                    continue;
                }
            };
            let error = match command.query_async::<Value>(&mut connection).await {
                Ok(value) => return Ok(Sent::Answered(value)),
                Err(error) => error,
            };
            let mut failure = rules::failure(&error);
            if failure == Failure::Moved {
                // Straight to the leader it names, if it is one of ours
                // (a few times: then as -TRYAGAIN, while the nodes
                // disagree on who leads).
                let urls = self.inner.nodes.iter().map(|node| node.url.as_str());
                let to = error
                    .redirect_node()
                    .and_then(|(at, _)| rules::node_at(urls, at));
                if let Some(to) = to.filter(|&to| to != index && !dead[to] && moves < 2 * nodes) {
                    moves += 1;
                    let _ = (self.inner.current).compare_exchange(
                        index,
                        to,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                    continue;
                }
                self.move_on(index);
                failure = Failure::TryAgain;
            }
            match failure {
                Failure::Refused => return Err(Error::Redis(error)),
                Failure::Moved => unreachable!("handled above"),
                Failure::Uncertain if write => return Ok(Sent::Uncertain),
                Failure::TryAgain | Failure::Uncertain => {
                    // A node answered: the nodes are not all unreachable.
                    unreachable = 0;
                    if started.elapsed() >= self.inner.options.retry_for {
                        return Err(Error::Unavailable {
                            reason: format!(
                                "{} answered {error} for {:?}",
                                node.url, self.inner.options.retry_for
                            ),
                        });
                    }
                    tokio::time::sleep(rules::backoff(tries)).await;
                    tries += 1;
                }
                Failure::Unreachable => {
                    *node.connection.lock().await = None;
                    if write {
                        self.move_on(index);
                        return Ok(Sent::Uncertain);
                    }
                    failures.push(format!("{}: {error}", node.url));
                    // A connection kept from before may have died since:
                    // one new connection to the same node first.
                    if !reused {
                        self.move_on(index);
                        dead[index] = true;
                        unreachable += 1;
                        if unreachable >= nodes {
                            return Err(Error::Unavailable {
                                reason: failures.join("; "),
                            });
                        }
                    }
                }
            }
        }
    }

    /// The node's shared connection (made if there is none): whether it
    /// was kept from before.
    async fn connection(
        &self,
        node: &Node,
    ) -> Result<(MultiplexedConnection, bool), redis::RedisError> {
        let mut slot = node.connection.lock().await;
        if let Some(connection) = &*slot {
            return Ok((connection.clone(), true));
        }
        let options = &self.inner.options;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(Some(options.response_timeout));
        let connection = node
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        *slot = Some(connection.clone());
        Ok((connection, false))
    }

    /// Moves on from node `index` to the next (unless another command
    /// already did).
    fn move_on(&self, index: usize) {
        let next = rules::next_node(index, self.inner.nodes.len());
        let _ =
            self.inner
                .current
                .compare_exchange(index, next, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// A stream of lease events: see [`Registry::events`].
pub struct Events {
    stream: PubSubStream,
}

impl Events {
    /// The next event; None when the connection closed.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            let message = self.stream.next().await?;
            if let Some(event) =
                parse_event(message.get_channel_name(), message.get_payload_bytes())
            {
                return Some(event);
            }
        }
    }
}
