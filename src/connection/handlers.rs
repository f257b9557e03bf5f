//! What a connection does with one read's requests: lease and admin
//! commands go to the core as one batch; the others are answered here,
//! from the session and the shared state. Replies are encoded in request
//! order, each in the protocol in force when its request was read.
//!
//! Inside `MULTI` requests are queued (`multi`); `EXEC` plans them like a
//! read's requests, into the same batch, and answers with their replies
//! as one array.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tracing::{info, warn};

use super::multi::{self, Transaction};
use super::session::NOAUTH;
use super::sync;
use super::words::{self, Wording};
use super::{After, Blocked, Connection};
use crate::cluster::status::{ClusterStatus, Role};
use crate::cluster::views;
use crate::command::{
    self, ClientFilter, ClusterView, Command, KillFilter, SlowlogCommand, docs, help,
};
use crate::config::ClusterRedirect;
use crate::core::{Answer, CoreAnswer, CoreCommand, Refusal};
use crate::registry::Op;
use crate::reply::{Protocol, Reply};
use crate::slowlog::Stopwatch;

/// Where a request's reply comes from, and the protocol to encode it in.
enum Slot {
    Ready(Protocol, Reply),
    /// The core's next answer, to the request at this position, and how
    /// to word it (for INFO, the sections to render its report in); the
    /// command's id, for `INFO commandstats`.
    Core(Protocol, usize, Wording, usize),
    /// `EXEC`: the slots of the transaction's requests, which it holds
    /// (the positions of their `Core` slots are in these); EXEC's id and
    /// the time it took outside the core.
    Exec(Protocol, Vec<Slot>, Vec<Vec<Bytes>>, usize, Duration),
}

/// The settings every request of one read is run with, read once.
struct Settings {
    monitored: bool,
    max_id_len: usize,
    max_lock_delay: f64,
    max_data_len: usize,
    slower_than: i64,
    /// `cluster-redirect moved` in a cluster: a follower redirects keyed
    /// requests (`moved`).
    moved: bool,
}

impl Settings {
    /// Why a lease command is refused before it reaches the core.
    fn refused(&self, op: &Op) -> Option<Reply> {
        words::refused_op(op, self.max_id_len, self.max_lock_delay, self.max_data_len)
    }
}

/// What follows one request.
enum Flow {
    Next,
    /// A blocking acquire went to the core: the requests after it wait.
    Blocked,
    /// QUIT, SHUTDOWN, or a client that closed itself: run nothing more.
    Stop(After),
    /// `CLUSTER ADDNODE|DELNODE`: its reply comes once the change is done
    /// (after the replies of the requests before it); the requests after
    /// it wait.
    Admin(Admin),
}

/// A membership change under way: its reply, the protocol to encode it
/// in, and the command's id, for `INFO commandstats`.
struct Admin {
    protocol: Protocol,
    id: usize,
    reply: futures_util::future::BoxFuture<'static, Reply>,
    /// What the connection does once the reply is written (`SYNC` closes).
    then: After,
}

impl<S> Connection<S>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    /// Runs one read's requests and encodes their replies in order.
    pub(super) async fn execute(&mut self, requests: &mut Vec<Vec<Bytes>>) -> After {
        self.shared
            .stats
            .total_commands_processed
            .fetch_add(requests.len() as u64, Ordering::Relaxed);
        if let Some(name) = requests.last().and_then(|args| command::name_of(args)) {
            self.last_command = Some(name);
        }
        let config = self.shared.config();
        let settings = Settings {
            monitored: self.shared.monitors.active(),
            max_id_len: config.lease_max_id_len,
            max_lock_delay: config.lease_max_lock_delay,
            max_data_len: config.lease_max_data_len,
            slower_than: config.slowlog_log_slower_than,
            moved: config.cluster_enabled && config.cluster_redirect == ClusterRedirect::Moved,
        };
        drop(config);

        let mut slots = Vec::with_capacity(requests.len());
        let mut for_core = Vec::new();
        let mut after = After::Continue;
        // How many of the requests run now: those after a blocking acquire
        // wait for its answer.
        let mut taken = requests.len();
        let mut admin = None;
        for (index, args) in requests.iter().enumerate() {
            match self.plan(index, args, &settings, false, &mut slots, &mut for_core) {
                Flow::Next => {}
                Flow::Blocked => {
                    taken = index + 1;
                    break;
                }
                Flow::Admin(change) => {
                    taken = index + 1;
                    after = change.then;
                    admin = Some(change);
                    break;
                }
                Flow::Stop(next) => {
                    after = next;
                    break;
                }
            }
        }

        // Before the core runs a CONFIG RESETSTAT among them.
        self.shared.calls.fold(&mut self.tally);
        let answer = if for_core.is_empty() {
            Answer::default()
        } else {
            self.core.call(for_core).await
        };
        self.log_slow_core(&slots, requests, &answer.slow);
        if after == After::Continue {
            requests.drain(..taken);
        } else {
            // Requests after QUIT or SHUTDOWN are not run.
            requests.clear();
        }

        let mut answers = answer.answers.into_iter().zip(answer.took);
        for slot in slots {
            if let Some((protocol, reply, _)) = self.resolve(slot, &mut answers) {
                reply.encode(protocol, &mut self.write_buf);
            }
        }
        if let Some(admin) = admin {
            self.run_admin(admin).await;
        }
        self.shared.calls.fold(&mut self.tally);
        after
    }

    /// Waits for a membership change's reply (the server shutting down
    /// answers at once: the change goes on, or not, without this client).
    async fn run_admin(&mut self, admin: Admin) {
        let started = std::time::Instant::now();
        let reply = tokio::select! {
            reply = admin.reply => reply,
            _ = self.shared.shutdown.cancelled() => {
                Reply::error("ERR the server is shutting down: check CLUSTER NODES for the change's outcome")
            }
        };
        self.tally_reply(admin.id, started.elapsed(), &reply);
        reply.encode(admin.protocol, &mut self.write_buf);
    }

    /// Runs one request, or plans it: its slot, and the command it sends
    /// the core if any. `in_exec`: the request is one of a transaction's,
    /// run by `EXEC` (it was checked when queued, and may not block).
    fn plan(
        &mut self,
        index: usize,
        args: &[Bytes],
        settings: &Settings,
        in_exec: bool,
        slots: &mut Vec<Slot>,
        for_core: &mut Vec<CoreCommand>,
    ) -> Flow {
        let protocol = self.session.protocol;
        if !in_exec && let Some(reply) = self.queue(args, settings.moved) {
            slots.push(Slot::Ready(protocol, reply));
            return Flow::Next;
        }
        if !self.session.authenticated && !allowed_before_auth(args) {
            self.tally
                .rejected(command::name_of(args).map(|name| name.id()));
            self.tally.error(NOAUTH);
            slots.push(Slot::Ready(protocol, Reply::error(NOAUTH)));
            return Flow::Next;
        }
        let checked = command::check_named(args).and_then(|name| {
            match self.refused_while_subscribed(name).filter(|_| !in_exec) {
                Some(refused) => Err((Some(name), refused)),
                // A transaction's requests were checked when queued, and
                // again all together at EXEC.
                None => match self.redirected(settings.moved && !in_exec, name, args) {
                    Some(moved) => Err((Some(name), moved)),
                    None => Ok(name),
                },
            }
        });
        let name = match checked {
            Ok(name) => name,
            Err((named, refused)) => {
                self.refuse(named.map(|name| name.id()), refused, slots);
                return Flow::Next;
            }
        };
        let id = name.id();
        let parsed = command::parse_checked(name, args);
        // EXEC is shown after its commands, as in Redis.
        let exec = matches!(parsed, Ok(Command::Exec));
        if settings.monitored && parsed.is_ok() && !exec {
            self.publish(args);
        }
        let command = match parsed {
            Ok(command) => command,
            Err(reply) => {
                // Its own argument checks refused it: it ran, and failed
                // (untimed, in no time worth a clock read).
                self.tally_reply(id, Duration::ZERO, &reply);
                slots.push(Slot::Ready(protocol, reply));
                return Flow::Next;
            }
        };
        let (core_command, wording) = match command {
            Command::Lease(op) | Command::AcquireBlocking { op, .. }
                if let Some(refused) = settings.refused(&op) =>
            {
                self.tally_reply(id, Duration::ZERO, &refused);
                slots.push(Slot::Ready(protocol, refused));
                return Flow::Next;
            }
            Command::Lease(op) => (CoreCommand::Op(op), Wording::Plain),
            Command::Keyspace { op, view } => (CoreCommand::Op(op), Wording::Key(view)),
            Command::AcquireBlocking { op, timeout } => {
                if in_exec {
                    // As Redis runs a blocking command in a transaction:
                    // it does not wait (a held run answers null at once).
                    (CoreCommand::Op(op), Wording::Plain)
                } else {
                    let client_id = self.client.id;
                    for_core.push(CoreCommand::AcquireBlocking {
                        op,
                        timeout,
                        client_id,
                    });
                    slots.push(Slot::Core(protocol, index, Wording::Plain, id));
                    return Flow::Blocked;
                }
            }
            Command::Waiters(run_id) => (CoreCommand::Waiters(run_id), Wording::Plain),
            Command::ClientUnblock { id, error } => (
                CoreCommand::Unblock {
                    client_id: id,
                    error,
                },
                Wording::Plain,
            ),
            Command::Info(sections) => (CoreCommand::Report, Wording::Info(sections)),
            Command::RewriteLog => (CoreCommand::RewriteLog, Wording::Plain),
            Command::Save => (CoreCommand::Save, Wording::Plain),
            Command::LastSave => (CoreCommand::Report, Wording::LastSave),
            Command::ConfigSet(pairs) => (CoreCommand::Configure(pairs), Wording::Plain),
            Command::ConfigResetStat => (CoreCommand::ResetStats, Wording::Plain),
            Command::Exec => {
                let flow = self.exec(id, settings, slots, for_core);
                if settings.monitored {
                    self.publish(args);
                }
                return flow;
            }
            Command::ClusterChange(change) => {
                let refused = match self.shared.membership() {
                    _ if in_exec => {
                        Reply::error(format!("ERR {} cannot run inside MULTI", change.describe()))
                    }
                    None => Reply::error(views::DISABLED),
                    Some(hook) => {
                        let reply = (hook.0)(change);
                        return Flow::Admin(Admin {
                            protocol,
                            id,
                            reply,
                            then: After::Continue,
                        });
                    }
                };
                self.tally_reply(id, Duration::ZERO, &refused);
                slots.push(Slot::Ready(protocol, refused));
                return Flow::Next;
            }
            Command::Sync if self.shared.config().cluster_enabled => {
                let dir = self.shared.config().dir.clone();
                return Flow::Admin(Admin {
                    protocol,
                    id,
                    reply: sync::snapshot(dir),
                    then: After::Close,
                });
            }
            Command::Monitor if in_exec => {
                let refused = Reply::error(multi::MONITOR_IN_EXEC);
                self.tally_reply(id, Duration::ZERO, &refused);
                slots.push(Slot::Ready(protocol, refused));
                return Flow::Next;
            }
            command => {
                let mut stopwatch = Stopwatch::start(settings.slower_than);
                let (reply, next) = self.apply(command);
                let took = stopwatch.lap();
                if stopwatch.is_slow(took) {
                    self.log_slow(args, took);
                }
                match &reply {
                    Some(reply) => self.tally_reply(id, took, reply),
                    None => self.tally.ran(id, took, false),
                }
                if let Some(reply) = reply {
                    // In the protocol HELLO may just have chosen.
                    slots.push(Slot::Ready(self.session.protocol, reply));
                }
                return match next {
                    After::Continue => Flow::Next,
                    // Requests after QUIT or SHUTDOWN are not run.
                    next => Flow::Stop(next),
                };
            }
        };
        for_core.push(core_command);
        slots.push(Slot::Core(protocol, index, wording, id));
        Flow::Next
    }

    /// A request refused before it ran: counted against the command
    /// (`None`: an unknown one) and its error.
    fn refuse(&mut self, id: Option<usize>, refused: Reply, slots: &mut Vec<Slot>) {
        self.tally.rejected(id);
        if let Reply::Error(message) = &refused {
            self.tally.error(message);
        }
        slots.push(Slot::Ready(self.session.protocol, refused));
    }

    /// A command that ran for `took` and answered `reply`.
    fn tally_reply(&mut self, id: usize, took: Duration, reply: &Reply) {
        if let Reply::Error(message) = reply {
            self.tally.error(message);
        }
        self.tally.ran(id, took, reply.is_error());
    }

    /// Inside `MULTI`: queues the request, or refuses it, and answers;
    /// `None` if it runs now (or there is no transaction).
    fn queue(&mut self, args: &[Bytes], moved: bool) -> Option<Reply> {
        self.transaction.as_ref()?;
        let checked = if !self.session.authenticated && !allowed_before_auth(args) {
            Err((command::name_of(args), Reply::error(NOAUTH)))
        } else {
            command::check_named(args).and_then(|name| {
                let refused = (self.refused_while_subscribed(name))
                    .or_else(|| self.redirected(moved, name, args));
                match refused {
                    Some(refused) => Err((Some(name), refused)),
                    None => Ok(name),
                }
            })
        };
        // A refusal while queuing counts against the command refused.
        let named = match &checked {
            Ok(name) => Some(*name),
            Err((named, _)) => *named,
        };
        let checked = checked.map_err(|(_, refused)| refused);
        let reply = self.transaction.as_mut()?.admit(args, checked)?;
        if let Reply::Error(message) = &reply {
            self.tally.rejected(named.map(|name| name.id()));
            self.tally.error(message);
        }
        Some(reply)
    }

    /// `EXEC`: plans the queued requests in order into one slot, their
    /// core commands going into this read's one batch, where the core
    /// applies them back to back and logs them with one write.
    fn exec(
        &mut self,
        id: usize,
        settings: &Settings,
        slots: &mut Vec<Slot>,
        for_core: &mut Vec<CoreCommand>,
    ) -> Flow {
        let protocol = self.session.protocol;
        let Some(transaction) = self.transaction.take() else {
            let error = Reply::error(multi::EXEC_WITHOUT_MULTI);
            self.tally_reply(id, Duration::ZERO, &error);
            slots.push(Slot::Ready(protocol, error));
            return Flow::Next;
        };
        let queued = match transaction.into_queued() {
            // Leadership moved away since the requests were queued.
            Ok(queued) if let Some(moved) = self.redirected_exec(settings.moved, &queued) => {
                self.refuse(Some(id), moved, slots);
                return Flow::Next;
            }
            Ok(queued) => queued,
            Err(execabort) => {
                // As in Redis, EXEC ran and failed.
                self.tally_reply(id, Duration::ZERO, &execabort);
                slots.push(Slot::Ready(protocol, execabort));
                return Flow::Next;
            }
        };
        let mut stopwatch = Stopwatch::start(settings.slower_than);
        let mut inner = Vec::with_capacity(queued.len());
        let mut flow = Flow::Next;
        for (index, args) in queued.iter().enumerate() {
            // Every request runs, even after one that closes the client
            // (its own CLIENT KILL): it closes after EXEC's reply.
            if let Flow::Stop(after) = self.plan(index, args, settings, true, &mut inner, for_core)
            {
                flow = Flow::Stop(after);
            }
        }
        let planned = stopwatch.lap();
        slots.push(Slot::Exec(protocol, inner, queued, id, planned));
        flow
    }

    /// The reply of a slot, once the core has answered: `None` for a
    /// blocked acquire, whose reply comes later.
    /// The time is what the core took to run it (zero for a reply made
    /// here, which was counted when made).
    fn resolve(
        &mut self,
        slot: Slot,
        answers: &mut impl Iterator<Item = (CoreAnswer, Duration)>,
    ) -> Option<(Protocol, Reply, Duration)> {
        let (protocol, wording, id) = match slot {
            Slot::Ready(protocol, reply) => return Some((protocol, reply, Duration::ZERO)),
            Slot::Exec(protocol, inner, _, id, planned) => {
                let mut took = planned;
                let mut replies = Vec::with_capacity(inner.len());
                for slot in inner {
                    if let Some((_, reply, core_took)) = self.resolve(slot, answers) {
                        took += core_took;
                        replies.push(match reply {
                            // One element per queued command: SUBSCRIBE's
                            // notices, one per name, become an array.
                            Reply::Replies(replies) => Reply::Array(replies),
                            reply => reply,
                        });
                    }
                }
                self.tally.ran(id, took, false);
                return Some((protocol, Reply::Array(replies), Duration::ZERO));
            }
            Slot::Core(protocol, _, wording, id) => (protocol, wording, id),
        };
        let (answer, took) = answers.next().expect("one answer per command");
        match answer {
            CoreAnswer::Configured(Ok(())) => {
                // Off the core: the connections waiting for their clients
                // read the new settings.
                self.shared.clients.reconfigured();
            }
            CoreAnswer::Blocked(outcome) => {
                // The last slot: its reply comes later. Counted as a call
                // now, for the time the core took to queue it.
                self.tally.ran(id, took, false);
                self.blocked = Some(Blocked { outcome, protocol });
                self.client.meta().blocked = true;
                return None;
            }
            // Refused before it was applied, as Redis refuses a command
            // for OOM.
            CoreAnswer::Refused(Refusal::OutOfMemory) => {
                let reply = words::answer(answer, wording, &self.shared);
                if let Reply::Error(message) = &reply {
                    self.tally.error(message);
                }
                self.tally.rejected(Some(id));
                return Some((protocol, reply, took));
            }
            _ => {}
        }
        let reply = words::answer(answer, wording, &self.shared);
        self.tally_reply(id, took, &reply);
        Some((protocol, reply, took))
    }

    /// Puts the core's slow commands in the slow log: `slow` holds their
    /// positions among the commands sent to the core.
    fn log_slow_core(&self, slots: &[Slot], requests: &[Vec<Bytes>], slow: &[(usize, Duration)]) {
        if slow.is_empty() {
            return;
        }
        let mut sent = Vec::new();
        core_requests(slots, requests, &mut sent);
        for &(nth, took) in slow {
            self.log_slow(sent[nth], took);
        }
    }

    /// Shows a command to the monitors, unless it is an administrative one
    /// (as Redis hides those).
    fn publish(&self, args: &[Bytes]) {
        if command::name_of(args).is_some_and(|name| !name.is_admin()) {
            self.shared.monitors.publish(self.client.addr, args);
        }
    }

    fn log_slow(&self, args: &[Bytes], took: Duration) {
        let max_len = self.shared.config().slowlog_max_len;
        let name = self.session.name.clone().unwrap_or_default();
        self.shared
            .slowlog
            .record(max_len, args, took, self.client.addr, name);
    }

    /// Answers a command that needs only this connection and the server.
    fn apply(&mut self, command: Command) -> (Option<Reply>, After) {
        let reply = match command {
            Command::Quit => return (Some(Reply::OK), After::Close),
            Command::Sync => Reply::error(sync::SINGLE),
            Command::Replconf(Ok(())) => Reply::OK,
            Command::Replconf(Err(option)) => Reply::error(format!(
                "ERR Unrecognized REPLCONF option: {}",
                String::from_utf8_lossy(&option)
            )),
            Command::Shutdown => return (None, After::Shutdown),
            Command::Lease(_)
            | Command::Keyspace { .. }
            | Command::AcquireBlocking { .. }
            | Command::Waiters(_)
            | Command::ClientUnblock { .. }
            | Command::Info(_)
            | Command::RewriteLog
            | Command::Save
            | Command::LastSave
            | Command::ConfigSet(_)
            | Command::ConfigResetStat
            | Command::ClusterChange(_)
            | Command::Exec => unreachable!("the core answers these"),
            Command::Ping(message) if self.subscribed_pong(None).is_some() => {
                self.subscribed_pong(message).expect("subscribed")
            }
            Command::Ping(None) => Reply::Status("PONG"),
            Command::Ping(Some(message)) | Command::Echo(message) => Reply::Bulk(message),
            Command::Hello {
                protocol,
                auth,
                set_name,
            } => {
                let requirepass = self.shared.config().requirepass.clone();
                match self.session.hello(&requirepass, protocol, auth, set_name) {
                    Ok(()) => self.hello_map(),
                    Err(reply) => reply,
                }
            }
            Command::Auth { username, password } => {
                let requirepass = self.shared.config().requirepass.clone();
                let done = self
                    .session
                    .auth(&requirepass, username.as_deref(), &password);
                done.map(|()| Reply::OK).unwrap_or_else(|e| e)
            }
            Command::Subscribe(kind, names) => self.subscribe(kind, names),
            Command::Unsubscribe(kind, names) => self.unsubscribe(kind, names),
            Command::PubsubChannels(pattern) => Reply::Array(
                (self.shared.pubsub.channels(pattern.as_deref()).into_iter())
                    .map(Reply::Bulk)
                    .collect(),
            ),
            Command::PubsubNumsub(channels) => Reply::Array(
                channels
                    .into_iter()
                    .flat_map(|channel| {
                        let count = self.shared.pubsub.subscribers(&channel) as i64;
                        [Reply::Bulk(channel), Reply::Int(count)]
                    })
                    .collect(),
            ),
            Command::PubsubNumpat => Reply::Int(self.shared.pubsub.pattern_count() as i64),
            Command::Multi if self.transaction.is_some() => Reply::error(multi::NESTED),
            Command::Multi => {
                self.transaction = Some(Transaction::default());
                Reply::OK
            }
            Command::Discard => match self.transaction.take() {
                Some(_) => Reply::OK,
                None => Reply::error(multi::DISCARD_WITHOUT_MULTI),
            },
            Command::Watch if self.transaction.is_some() => Reply::error(multi::WATCH_INSIDE_MULTI),
            Command::Watch => Reply::error(multi::WATCH_UNSUPPORTED),
            // Nothing is ever watched.
            Command::Unwatch => Reply::OK,
            Command::Reset => {
                self.transaction = None;
                self.unsubscribe_all();
                self.session.reset(&self.shared.config().requirepass);
                self.monitor = None;
                self.client.meta().monitor = false;
                Reply::Status("RESET")
            }
            Command::Select => Reply::OK,
            Command::ClientSetName(name) => ok_or(self.session.set_name(name)),
            Command::ClientGetName => self.session.name.clone().map_or(Reply::Null, Reply::Bulk),
            Command::ClientId => Reply::Int(self.client.id as i64),
            Command::ClientSetInfo(attr, value) => ok_or(self.session.set_info(attr, value)),
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
            Command::ConfigRewrite => self.config_rewrite(),
            Command::Help(lines) => help_reply(lines),
            Command::Role => views::role(self.shared.cluster().as_deref()),
            Command::Cluster(view) => cluster_view(self.shared.cluster().as_deref(), view),
            Command::Time => time(),
        };
        (Some(reply), After::Continue)
    }

    /// HELLO's reply: the server's map, in the protocol just chosen.
    fn hello_map(&self) -> Reply {
        let field = |name: &'static str, value: Reply| (Reply::text(name), value);
        Reply::Map(vec![
            field("server", Reply::text("leased")),
            field("version", Reply::text(env!("CARGO_PKG_VERSION"))),
            field("proto", Reply::Int(self.session.protocol.version())),
            field("id", Reply::Int(self.client.id as i64)),
            field(
                "mode",
                Reply::text(views::mode(self.shared.cluster().is_some())),
            ),
            field("role", Reply::text(self.hello_role())),
            field("modules", Reply::Array(Vec::new())),
        ])
    }

    /// HELLO's `role`: a cluster's followers are replicas, as `ROLE` says.
    fn hello_role(&self) -> &'static str {
        match self.shared.cluster() {
            Some(status) if status.role != Role::Leader => "replica",
            _ => "master",
        }
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
                ClientFilter::OfKind(kind) => client.kind() == *kind,
                ClientFilter::Ids(ids) => ids.contains(&client.id),
            })
            .map(|client| client.describe())
            .collect();
        Reply::Verbatim(text.into())
    }

    /// `CONFIG GET pattern ...`: each matching parameter once.
    fn config_get(&self, patterns: &[Bytes]) -> Reply {
        let config = self.shared.config();
        let mut found: Vec<(&'static str, String)> = Vec::new();
        for pattern in patterns {
            for (name, value) in config.get(pattern) {
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

    /// `CONFIG REWRITE`: the running values into the file the server was
    /// started with, as Redis does, on this task (it is rare, and Redis
    /// too writes the file inline).
    fn config_rewrite(&self) -> Reply {
        let config = self.shared.config();
        let Some(path) = &config.config_file else {
            return Reply::error("ERR The server is running without a config file");
        };
        match config.rewrite(path) {
            Ok(()) => {
                info!("CONFIG REWRITE executed with success.");
                Reply::OK
            }
            Err(error) => {
                warn!("CONFIG REWRITE failed: {error}");
                Reply::error(format!("ERR {error}"))
            }
        }
    }
}

/// The requests of the slots sent to the core, in the order sent: a
/// transaction's are in its `EXEC` slot.
fn core_requests<'a>(slots: &'a [Slot], requests: &'a [Vec<Bytes>], sent: &mut Vec<&'a [Bytes]>) {
    for slot in slots {
        match slot {
            Slot::Ready(..) => {}
            Slot::Core(_, index, ..) => sent.push(&requests[*index]),
            Slot::Exec(_, inner, queued, ..) => core_requests(inner, queued, sent),
        }
    }
}

/// What a client may send before it has authenticated: the commands
/// flagged `no_auth` in the command table.
fn allowed_before_auth(args: &[Bytes]) -> bool {
    command::name_of(args).is_some_and(|name| name.allowed_before_auth())
}

/// A container's `HELP`: its lines as status replies, as Redis sends them.
fn help_reply(lines: &[&'static str]) -> Reply {
    Reply::Array(lines.iter().map(|line| Reply::Status(line)).collect())
}

/// `CLUSTER INFO|NODES|SLOTS|SHARDS|MYID|HELP`, from the status the node published; a
/// single node refuses every one, as Redis does without cluster support.
fn cluster_view(status: Option<&ClusterStatus>, view: ClusterView) -> Reply {
    let Some(status) = status else {
        return Reply::error(views::DISABLED);
    };
    match view {
        ClusterView::Info => Reply::Verbatim(views::cluster_info(status).into()),
        ClusterView::Nodes => Reply::Verbatim(views::cluster_nodes(status).into()),
        ClusterView::Slots => views::cluster_slots(status),
        ClusterView::Shards => views::cluster_shards(status),
        ClusterView::MyId => Reply::bulk(views::node_name(status.id)),
        ClusterView::Help => help_reply(help::CLUSTER_HELP),
    }
}

fn ok_or(done: Result<(), Reply>) -> Reply {
    done.map(|()| Reply::OK).unwrap_or_else(|error| error)
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
