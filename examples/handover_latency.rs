//! Blocked acquires, lease events and pattern subscribers, measured: the
//! driver of bench/handover.sh and bench/subscribers.sh. Three modes:
//!
//!     cargo run --release --example handover_latency -- handover \
//!         --leased-port P --redis-port Q [options]
//!     cargo run --release --example handover_latency -- events --port P [options]
//!     cargo run --release --example handover_latency -- subscribe --port P [options]
//!
//! Everything runs on one tokio thread (a current-thread runtime), over
//! plain TCP with RESP2 encoded and parsed by hand, so that both servers
//! are measured through the same few lines of client code.
//!
//! **handover**: how long a blocked client waits for a run once its holder
//! lets go. For each `--waiters` count N, N connections block on one key:
//! on leased `LEASE.ACQUIRE run w<i> TTL 30 BLOCK 0` (the run held by the
//! last client granted it), on Redis `BLPOP list 0`. They are started one
//! at a time, each after the one before shows in `INFO clients`
//! `blocked_clients`, so the queue is in the order of their numbers. A
//! controller connection then, over and over: waits until
//! `blocked_clients` is N again; times a `PING` round trip (for scale);
//! notes t0 and writes the wake-up, `LEASE.RELEASE lease_id token` of the
//! current holder (the client granted it passes its lease id and token to
//! the controller) or `LPUSH list x`; and takes t1 as the moment the
//! read that completed the woken client's reply returned. The woken
//! client passes t1 on and at once blocks again, at the back of the queue.
//! The controller reads the reply to its own command (must be `:1` on
//! both servers) only after the waiter has reported, so the two never
//! compete for the one client thread. The sample is t1 - t0: from sending
//! the release or push to the waiter's reply arriving, the same on both
//! servers. The first `--warmup` hand-overs of every round are not kept.
//! Every connection set is fresh per round; rounds alternate which server
//! goes first. The grants must come round in queue order (FIFO): the
//! client woken by hand-over k must be the one woken by k - N; the table
//! says whether they did. Prints a Markdown table of the kept samples of
//! all rounds (p50, p90, p99, max in µs, the spread of the rounds' p99s,
//! and the PING round trip) and the ratio of leased's p99 (and p50) to
//! Redis's; each round's figures go to stderr.
//!
//! Options: `--leased-port P`, `--redis-port P` (either may be left out to
//! measure one server), `--waiters LIST` (1,1000), `--handovers N` kept per
//! round (1000), `--warmup N` per round (200), `--rounds R` (5),
//! `--host H`.
//!
//! **events**: how late an `expired` event reaches a pattern subscriber.
//! One connection subscribes with `PSUBSCRIBE` (leased: `__lease__:*`;
//! Redis: `__keyevent@*__:expired`, after `CONFIG SET
//! notify-keyspace-events Ex`), then another takes `--leases` leases one
//! at a time, lease i with `TTL first + spread * i / leases` seconds
//! (leased: `LEASE.ACQUIRE ev:<tag>:<i> w TTL t`, its `expires_at` read
//! from the reply; Redis: `SET key w PX ms`, then `PEXPIRETIME key`), and
//! no other request is sent until every expiry has been announced (or
//! `--timeout` seconds after the last is due). For each lease the sample is
//! the subscriber's wall clock when the read that completed the message
//! returned, minus `expires_at` (both the system's clock: same machine).
//! On leased it also times the `acquired` event: its arrival at the
//! subscriber minus the arrival of the acquire's reply (negative when the
//! event came first). Prints one Markdown row per measurement.
//!
//! Options: `--port P`, `--target leased|redis` (leased), `--leases N`
//! (1000), `--first S` (1.0), `--spread S` (5.0), `--timeout S` (5),
//! `--host H`.
//!
//! **subscribe**: `--subscribers` N connections (100), each `PSUBSCRIBE
//! --pattern` (`__lease__:*`) and reading everything it is sent (counted,
//! not kept), until SIGTERM or SIGINT. Prints `ready N` on stdout once all
//! are subscribed. After the signal it keeps reading until no message
//! came for `--quiet-ms` (200), then prints one line of `key=value`: the
//! messages received (total, fewest and most per subscriber), the
//! subscribers the server closed, and how long the backlog took to drain
//! after the signal.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis_protocol::resp2::decode::{decode, decode_range};
use redis_protocol::resp2::types::OwnedFrame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

#[path = "support/mod.rs"]
mod support;
use support::{Error, percentile};

/// The TTL of the leases handed over, far longer than a round.
const HANDOVER_TTL: &str = "30";

// ---------------------------------------------------------------------
// RESP2 on a plain socket.

/// A RESP2 reply, decoded by the same crate the server uses.
type Resp = OwnedFrame;

/// The reply at the start of `buf` and its length, or None when more bytes
/// are needed.
fn parse(buf: &[u8]) -> Result<Option<(Resp, usize)>, Error> {
    Ok(decode(buf)?)
}

/// The length of the complete reply at the start of `buf`, decoded as
/// ranges into `buf` without copying (for counting messages), or None when
/// more bytes are needed.
fn skip(buf: &[u8]) -> Result<Option<usize>, Error> {
    Ok(decode_range(buf)?.map(|(_, len)| len))
}

fn bulk(text: &[u8]) -> Resp {
    Resp::BulkString(text.to_vec())
}

/// One command as a RESP array of bulk strings.
fn command<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = Vec::new();
    write!(out, "*{}\r\n", args.len()).expect("writing to a Vec");
    for arg in args {
        let arg = arg.as_ref();
        write!(out, "${}\r\n", arg.len()).expect("writing to a Vec");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A connection, its unread bytes, and when its last read returned.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    at: usize,
    /// When the last read returned, on the monotonic clock and on the wall
    /// clock: the arrival of the reply that read completed.
    read_at: Instant,
    read_wall: SystemTime,
}

impl Conn {
    async fn connect(address: &str) -> Result<Conn, Error> {
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(1 << 16),
            at: 0,
            read_at: Instant::now(),
            read_wall: SystemTime::now(),
        })
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.stream.write_all(bytes).await?;
        Ok(())
    }

    /// Reads more bytes; false when the server closed the connection.
    async fn fill(&mut self) -> Result<bool, Error> {
        if self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        } else if self.at > 0 && self.buf.len() - self.at < self.buf.capacity() / 2 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        self.buf.reserve(1 << 14);
        let read = self.stream.read_buf(&mut self.buf).await?;
        self.read_at = Instant::now();
        self.read_wall = SystemTime::now();
        Ok(read > 0)
    }

    /// The next reply.
    async fn reply(&mut self) -> Result<Resp, Error> {
        loop {
            if let Some((reply, len)) = parse(&self.buf[self.at..])? {
                self.at += len;
                return Ok(reply);
            }
            if !self.fill().await? {
                return Err("the server closed the connection".into());
            }
        }
    }

    /// Sends one command and reads its reply; a server error is an error.
    async fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Resp, Error> {
        self.send(&command(args)).await?;
        match self.reply().await? {
            Resp::Error(error) => Err(format!(
                "{} answered {}",
                String::from_utf8_lossy(args[0].as_ref()),
                error
            )
            .into()),
            reply => Ok(reply),
        }
    }

    /// One field of `INFO section`, as a number.
    async fn info_number(&mut self, section: &str, key: &str) -> Result<i64, Error> {
        let text = match self.call(&["INFO", section]).await? {
            Resp::BulkString(text) => String::from_utf8(text)?,
            other => return Err(format!("INFO answered {other:?}").into()),
        };
        let value = text
            .lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
            .ok_or_else(|| format!("INFO {section} has no {key}"))?;
        Ok(value.trim().parse()?)
    }
}

/// A field of a lease reply (RESP2: a flat array of names and values).
fn lease_field<'a>(reply: &'a Resp, key: &str) -> Option<&'a Resp> {
    let Resp::Array(items) = reply else {
        return None;
    };
    items
        .chunks_exact(2)
        .find(|pair| pair[0] == bulk(key.as_bytes()))
        .map(|pair| &pair[1])
}

/// The lease id, fencing token and `expires_at` of a lease reply.
fn lease_of(reply: &Resp) -> Result<(Vec<u8>, i64, f64), Error> {
    let id = match lease_field(reply, "lease_id") {
        Some(Resp::BulkString(id)) => id.clone(),
        _ => return Err(format!("not a lease: {reply:?}").into()),
    };
    let token = match lease_field(reply, "fencing_token") {
        Some(Resp::Integer(token)) => *token,
        _ => return Err(format!("no fencing_token in {reply:?}").into()),
    };
    let expires_at = match lease_field(reply, "expires_at") {
        Some(Resp::BulkString(text)) => std::str::from_utf8(text)?.parse()?,
        _ => return Err(format!("no expires_at in {reply:?}").into()),
    };
    Ok((id, token, expires_at))
}

fn wall_seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// Nearest-rank percentile of sorted numbers.
fn percentile_f64(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn take_value(flag: &str, args: &mut impl Iterator<Item = String>) -> Result<String, Error> {
    args.next()
        .ok_or_else(|| format!("{flag} needs a value").into())
}

fn list(text: &str) -> Result<Vec<usize>, Error> {
    text.split(',')
        .map(|n| Ok(n.trim().parse::<usize>()?))
        .collect()
}

// ---------------------------------------------------------------------
// handover

#[derive(Clone, Copy, Debug, PartialEq)]
enum Server {
    Leased,
    Redis,
}

impl Server {
    fn name(self) -> &'static str {
        match self {
            Server::Leased => "leased",
            Server::Redis => "Redis",
        }
    }
}

struct HandoverOptions {
    host: String,
    leased_port: Option<u16>,
    redis_port: Option<u16>,
    waiters: Vec<usize>,
    handovers: usize,
    warmup: usize,
    rounds: usize,
}

fn handover_options(mut args: impl Iterator<Item = String>) -> Result<HandoverOptions, Error> {
    let mut options = HandoverOptions {
        host: "127.0.0.1".into(),
        leased_port: None,
        redis_port: None,
        waiters: vec![1, 1000],
        handovers: 1000,
        warmup: 200,
        rounds: 5,
    };
    while let Some(flag) = args.next() {
        let value = take_value(&flag, &mut args)?;
        match flag.as_str() {
            "--host" => options.host = value,
            "--leased-port" => options.leased_port = Some(value.parse()?),
            "--redis-port" => options.redis_port = Some(value.parse()?),
            "--waiters" => options.waiters = list(&value)?,
            "--handovers" => options.handovers = value.parse()?,
            "--warmup" => options.warmup = value.parse()?,
            "--rounds" => options.rounds = value.parse()?,
            _ => return Err(format!("unknown option {flag} (see the top of the source)").into()),
        }
    }
    if options.leased_port.is_none() && options.redis_port.is_none() {
        return Err("give --leased-port, --redis-port or both".into());
    }
    if options.handovers == 0 || options.rounds == 0 || options.waiters.contains(&0) {
        return Err("--handovers, --rounds and --waiters must be positive".into());
    }
    Ok(options)
}

/// What a woken client tells the controller: who it is, when its reply
/// arrived, and (leased) how to release the lease it was granted.
struct Grant {
    waiter: usize,
    at: Instant,
    release: Option<Vec<u8>>,
}

/// One blocked client: blocks, and each time it is woken reports and
/// blocks again at once.
async fn waiter(
    address: String,
    server: Server,
    index: usize,
    block: Vec<u8>,
    grants: UnboundedSender<Result<Grant, String>>,
) {
    let run = async {
        let mut conn = Conn::connect(&address).await?;
        loop {
            conn.send(&block).await?;
            let reply = conn.reply().await?;
            let at = conn.read_at;
            let release = match server {
                Server::Leased => {
                    let (id, token, _) = lease_of(&reply)?;
                    Some(command(&[
                        b"LEASE.RELEASE".as_slice(),
                        &id,
                        token.to_string().as_bytes(),
                    ]))
                }
                Server::Redis => match &reply {
                    Resp::Array(items) if items.len() == 2 => None,
                    other => return Err(format!("BLPOP answered {other:?}").into()),
                },
            };
            let grant = Grant {
                waiter: index,
                at,
                release,
            };
            if grants.send(Ok(grant)).is_err() {
                return Ok::<(), Error>(());
            }
        }
    };
    if let Err(error) = run.await {
        let _ = grants.send(Err(format!("waiter {index}: {error}")));
    }
}

/// Polls `INFO clients` until `blocked_clients` is `n` (and, with
/// `connected`, `connected_clients` too).
async fn wait_clients(ctl: &mut Conn, blocked: i64, connected: Option<i64>) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now_blocked = ctl.info_number("clients", "blocked_clients").await?;
        let done = now_blocked == blocked
            && match connected {
                Some(n) => ctl.info_number("clients", "connected_clients").await? == n,
                None => true,
            };
        if done {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "blocked_clients stayed at {now_blocked}, waiting for {blocked} (connected {connected:?})"
            )
            .into());
        }
        if now_blocked > blocked {
            return Err(format!("{now_blocked} clients blocked, expected {blocked}").into());
        }
        tokio::task::yield_now().await;
    }
}

/// One round on one server: its hand-overs and PING round trips (the
/// kept ones), and whether the grants came in queue order.
struct RoundResult {
    handovers: Vec<Duration>,
    pings: Vec<Duration>,
    fifo: bool,
}

async fn handover_round(
    server: Server,
    address: &str,
    waiters: usize,
    warmup: usize,
    handovers: usize,
    key: &str,
) -> Result<RoundResult, Error> {
    let mut ctl = Conn::connect(address).await?;
    let mut holder = match server {
        Server::Leased => {
            let reply = ctl
                .call(&["LEASE.ACQUIRE", key, "ctl", "TTL", HANDOVER_TTL])
                .await?;
            let (id, token, _) = lease_of(&reply)?;
            Some(command(&[
                b"LEASE.RELEASE".as_slice(),
                &id,
                token.to_string().as_bytes(),
            ]))
        }
        Server::Redis => {
            ctl.call(&["DEL", key]).await?;
            None
        }
    };
    let (grants, mut granted) = unbounded_channel();
    let mut tasks = Vec::with_capacity(waiters);
    for index in 0..waiters {
        let block = match server {
            Server::Leased => command(&[
                "LEASE.ACQUIRE",
                key,
                &format!("w{index}"),
                "TTL",
                HANDOVER_TTL,
                "BLOCK",
                "0",
            ]),
            Server::Redis => command(&["BLPOP", key, "0"]),
        };
        let address = address.to_string();
        tasks.push(tokio::spawn(waiter(
            address,
            server,
            index,
            block,
            grants.clone(),
        )));
        wait_clients(&mut ctl, index as i64 + 1, None).await?;
    }
    drop(grants);
    let push = command(&["LPUSH", key, "x"]);
    let ping = command(&["PING"]);
    let mut result = RoundResult {
        handovers: Vec::with_capacity(handovers),
        pings: Vec::with_capacity(handovers),
        fifo: true,
    };
    let mut order = Vec::with_capacity(warmup + handovers);
    for k in 0..warmup + handovers {
        wait_clients(&mut ctl, waiters as i64, None).await?;
        let sent = Instant::now();
        ctl.send(&ping).await?;
        if ctl.reply().await? != Resp::SimpleString(b"PONG".to_vec()) {
            return Err("PING did not answer PONG".into());
        }
        let ping_took = ctl.read_at - sent;
        let wake = match server {
            Server::Leased => holder.take().ok_or("no lease to release")?,
            Server::Redis => push.clone(),
        };
        let t0 = Instant::now();
        ctl.send(&wake).await?;
        let grant = granted.recv().await.ok_or("every waiter is gone")??;
        let latency = grant.at.saturating_duration_since(t0);
        match ctl.reply().await? {
            Resp::Integer(1) => {}
            other => return Err(format!("the wake-up answered {other:?}, not 1").into()),
        }
        if k >= warmup {
            result.handovers.push(latency);
            result.pings.push(ping_took);
        }
        order.push(grant.waiter);
        holder = grant.release;
    }
    result.fifo = order.iter().skip(waiters).zip(&order).all(|(a, b)| a == b);
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        let _ = task.await;
    }
    match (server, holder) {
        (Server::Leased, Some(release)) => {
            ctl.send(&release).await?;
            ctl.reply().await?;
        }
        _ => {
            ctl.call(&["DEL", key]).await?;
        }
    }
    // The servers have seen every waiter go before the next round.
    wait_clients(&mut ctl, 0, Some(1)).await?;
    Ok(result)
}

/// p50, p90, p99 and max of durations, in µs.
fn spread(samples: &[Duration]) -> [f64; 4] {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    [
        micros(percentile(&sorted, 50.0)),
        micros(percentile(&sorted, 90.0)),
        micros(percentile(&sorted, 99.0)),
        micros(*sorted.last().expect("samples")),
    ]
}

/// Every round of one server at one waiter count, gathered.
struct Gathered {
    server: Server,
    handovers: Vec<Duration>,
    pings: Vec<Duration>,
    round_p99s: Vec<f64>,
    fifo: bool,
}

async fn handover(options: HandoverOptions) -> Result<(), Error> {
    let mut servers = Vec::new();
    if let Some(port) = options.leased_port {
        servers.push((Server::Leased, format!("{}:{port}", options.host)));
    }
    if let Some(port) = options.redis_port {
        servers.push((Server::Redis, format!("{}:{port}", options.host)));
    }
    let tag = format!(
        "{}-{}",
        std::process::id(),
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis()
    );
    let mut rows = Vec::new();
    for &waiters in &options.waiters {
        let mut all: Vec<Gathered> = servers
            .iter()
            .map(|(server, _)| Gathered {
                server: *server,
                handovers: Vec::new(),
                pings: Vec::new(),
                round_p99s: Vec::new(),
                fifo: true,
            })
            .collect();
        for round in 0..options.rounds {
            let mut turn: Vec<usize> = (0..servers.len()).collect();
            if round % 2 == 1 {
                turn.reverse();
            }
            for which in turn {
                let (server, address) = &servers[which];
                let key = format!("handover:{tag}:{waiters}:{round}");
                let result = handover_round(
                    *server,
                    address,
                    waiters,
                    options.warmup,
                    options.handovers,
                    &key,
                )
                .await?;
                let [p50, p90, p99, max] = spread(&result.handovers);
                let [ping50, _, ping99, _] = spread(&result.pings);
                eprintln!(
                    "round {round}: {:<6} {waiters:>5} waiters: hand-over p50 {p50:.1} p90 {p90:.1} \
                     p99 {p99:.1} max {max:.1} us; PING p50 {ping50:.1} p99 {ping99:.1} us; FIFO {}",
                    server.name(),
                    if result.fifo { "yes" } else { "NO" },
                );
                let gathered = &mut all[which];
                gathered.handovers.extend(result.handovers);
                gathered.pings.extend(result.pings);
                gathered.round_p99s.push(p99);
                gathered.fifo &= result.fifo;
            }
        }
        rows.push((waiters, all));
    }

    println!(
        "\n{} hand-overs kept per server and waiter count ({} rounds of {}, each after {} \
         not kept); µs from sending the release (LPUSH) to the woken client's reply arriving\n",
        options.rounds * options.handovers,
        options.rounds,
        options.handovers,
        options.warmup
    );
    println!(
        "| server | waiters | hand-overs | p50 µs | p90 µs | p99 µs | max µs | p99 of rounds µs | \
         FIFO | PING p50 µs | PING p99 µs |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|");
    let mut ratios = Vec::new();
    for (waiters, all) in &rows {
        let mut p = HashMap::new();
        for gathered in all {
            let [p50, p90, p99, max] = spread(&gathered.handovers);
            let [ping50, _, ping99, _] = spread(&gathered.pings);
            let p99s = &gathered.round_p99s;
            let low = p99s.iter().copied().fold(f64::INFINITY, f64::min);
            let high = p99s.iter().copied().fold(0.0, f64::max);
            println!(
                "| {} | {waiters} | {} | {p50:.1} | {p90:.1} | {p99:.1} | {max:.1} | {low:.1}–{high:.1} \
                 | {} | {ping50:.1} | {ping99:.1} |",
                gathered.server.name(),
                gathered.handovers.len(),
                if gathered.fifo { "yes" } else { "**no**" },
            );
            p.insert(gathered.server.name(), (p50, p99));
        }
        if let (Some(ours), Some(theirs)) = (p.get("leased"), p.get("Redis")) {
            ratios.push((*waiters, ours.1 / theirs.1, ours.0 / theirs.0));
        }
    }
    if !ratios.is_empty() {
        println!("\n| waiters | leased p99 / Redis p99 | leased p50 / Redis p50 |");
        println!("|---:|---:|---:|");
        for (waiters, p99, p50) in ratios {
            println!("| {waiters} | {p99:.2} | {p50:.2} |");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------
// events

struct EventsOptions {
    host: String,
    port: u16,
    target: Server,
    leases: usize,
    first: f64,
    spread: f64,
    timeout: f64,
}

fn events_options(mut args: impl Iterator<Item = String>) -> Result<EventsOptions, Error> {
    let mut options = EventsOptions {
        host: "127.0.0.1".into(),
        port: 0,
        target: Server::Leased,
        leases: 1000,
        first: 1.0,
        spread: 5.0,
        timeout: 5.0,
    };
    while let Some(flag) = args.next() {
        let value = take_value(&flag, &mut args)?;
        match flag.as_str() {
            "--host" => options.host = value,
            "--port" => options.port = value.parse()?,
            "--target" => {
                options.target = match value.as_str() {
                    "leased" => Server::Leased,
                    "redis" => Server::Redis,
                    other => return Err(format!("--target leased|redis, not {other}").into()),
                }
            }
            "--leases" => options.leases = value.parse()?,
            "--first" => options.first = value.parse()?,
            "--spread" => options.spread = value.parse()?,
            "--timeout" => options.timeout = value.parse()?,
            _ => return Err(format!("unknown option {flag} (see the top of the source)").into()),
        }
    }
    if options.port == 0 {
        return Err("--port PORT is required".into());
    }
    if options.leases == 0 || options.first <= 0.0 || options.spread < 0.0 {
        return Err("--leases and --first must be positive, --spread not negative".into());
    }
    Ok(options)
}

/// A message as the subscriber got it: when, on which channel, what.
struct Arrival {
    at: Instant,
    wall: f64,
    channel: Vec<u8>,
    payload: Vec<u8>,
}

/// A lease (or key) taken for the events run.
struct Taken {
    expires_at: f64,
    token: i64,
    reply_at: Instant,
}

/// Reads `pmessage`s until the connection ends, passing each on.
async fn listen(mut conn: Conn, arrivals: UnboundedSender<Arrival>) -> Result<(), Error> {
    loop {
        let reply = conn.reply().await?;
        let Resp::Array(items) = reply else {
            return Err(format!("a subscriber got {reply:?}").into());
        };
        match items.as_slice() {
            [
                Resp::BulkString(kind),
                _,
                Resp::BulkString(channel),
                Resp::BulkString(payload),
            ] if kind == b"pmessage" => {
                let arrival = Arrival {
                    at: conn.read_at,
                    wall: wall_seconds(conn.read_wall),
                    channel: channel.clone(),
                    payload: payload.clone(),
                };
                if arrivals.send(arrival).is_err() {
                    return Ok(());
                }
            }
            other => return Err(format!("a subscriber got {other:?}").into()),
        }
    }
}

fn stats_row(samples: &mut [f64]) -> String {
    if samples.is_empty() {
        return "— | — | — | —".into();
    }
    samples.sort_by(f64::total_cmp);
    format!(
        "{:.3} | {:.3} | {:.3} | {:.3}",
        samples[0],
        percentile_f64(samples, 50.0),
        percentile_f64(samples, 99.0),
        samples[samples.len() - 1]
    )
}

async fn events(options: EventsOptions) -> Result<(), Error> {
    let address = format!("{}:{}", options.host, options.port);
    let mut ctl = Conn::connect(&address).await?;
    let pattern = match options.target {
        Server::Leased => "__lease__:*",
        Server::Redis => {
            ctl.call(&["CONFIG", "SET", "notify-keyspace-events", "Ex"])
                .await?;
            "__keyevent@*__:expired"
        }
    };
    let mut sub = Conn::connect(&address).await?;
    sub.send(&command(&["PSUBSCRIBE", pattern])).await?;
    match sub.reply().await? {
        Resp::Array(items) if items.first() == Some(&bulk(b"psubscribe")) => {}
        other => return Err(format!("PSUBSCRIBE answered {other:?}").into()),
    }
    let (arrivals_in, mut arrivals) = unbounded_channel();
    let listener = tokio::spawn(listen(sub, arrivals_in));

    let tag = format!(
        "{}-{}",
        std::process::id(),
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis()
    );
    let mut taken: HashMap<Vec<u8>, Taken> = HashMap::with_capacity(options.leases);
    let mut last_due: f64 = 0.0;
    for i in 0..options.leases {
        let run = format!("ev:{tag}:{i:06}");
        let ttl = options.first + options.spread * i as f64 / options.leases as f64;
        let entry = match options.target {
            Server::Leased => {
                let reply = ctl
                    .call(&["LEASE.ACQUIRE", &run, "w", "TTL", &format!("{ttl:.3}")])
                    .await?;
                let reply_at = ctl.read_at;
                let (_, token, expires_at) = lease_of(&reply)?;
                Taken {
                    expires_at,
                    token,
                    reply_at,
                }
            }
            Server::Redis => {
                let ms = (ttl * 1000.0).round() as i64;
                ctl.call(&["SET", &run, "w", "PX", &ms.to_string()]).await?;
                let reply_at = ctl.read_at;
                let at = match ctl.call(&["PEXPIRETIME", &run]).await? {
                    Resp::Integer(ms) if ms > 0 => ms,
                    other => return Err(format!("PEXPIRETIME answered {other:?}").into()),
                };
                Taken {
                    expires_at: at as f64 / 1000.0,
                    token: 0,
                    reply_at,
                }
            }
        };
        last_due = last_due.max(entry.expires_at);
        taken.insert(run.into_bytes(), entry);
    }
    let acquired_in = wall_seconds(SystemTime::now());

    // Nothing more is sent: wait for the announcements.
    let deadline = Instant::now()
        + Duration::from_secs_f64((last_due - wall_seconds(SystemTime::now())).max(0.0))
        + Duration::from_secs_f64(options.timeout);
    let mut expired: Vec<f64> = Vec::with_capacity(options.leases);
    let mut acquired: Vec<f64> = Vec::with_capacity(options.leases);
    let (mut wrong, mut duplicates) = (0usize, 0usize);
    let mut seen: HashMap<Vec<u8>, bool> = HashMap::new();
    while expired.len() < options.leases {
        let arrival = tokio::select! {
            arrival = arrivals.recv() => match arrival {
                Some(arrival) => arrival,
                None => break,
            },
            () = tokio::time::sleep_until(deadline.into()) => break,
        };
        let (run, kind, token) = match options.target {
            Server::Leased => {
                let Some(run) = arrival.channel.strip_prefix(b"__lease__:") else {
                    wrong += 1;
                    continue;
                };
                let text = String::from_utf8_lossy(&arrival.payload).into_owned();
                let mut parts = text.splitn(3, ':');
                let kind = parts.next().unwrap_or_default().to_string();
                let token: i64 = parts.next().and_then(|t| t.parse().ok()).unwrap_or(-1);
                (run.to_vec(), kind, token)
            }
            Server::Redis => (arrival.payload.clone(), "expired".to_string(), 0),
        };
        let Some(lease) = taken.get(&run) else {
            wrong += 1;
            continue;
        };
        if token != lease.token {
            wrong += 1;
            continue;
        }
        match kind.as_str() {
            "acquired" => {
                let took = arrival
                    .at
                    .saturating_duration_since(lease.reply_at)
                    .as_secs_f64()
                    - lease
                        .reply_at
                        .saturating_duration_since(arrival.at)
                        .as_secs_f64();
                acquired.push(took * 1000.0);
            }
            "expired" => {
                if seen.insert(run.clone(), true).is_some() {
                    duplicates += 1;
                    continue;
                }
                expired.push((arrival.wall - lease.expires_at) * 1000.0);
            }
            _ => wrong += 1,
        }
    }
    listener.abort();
    let missing = options.leases - expired.len();
    let first_due = taken
        .values()
        .map(|t| t.expires_at)
        .fold(f64::INFINITY, f64::min);
    eprintln!(
        "events: {} on port {}: {} leases, acquired by {:.3} s before the first expiry; \
         {} expired events, {missing} missing, {duplicates} duplicates, {wrong} unexpected",
        options.target.name(),
        options.port,
        options.leases,
        first_due - acquired_in,
        expired.len(),
    );
    println!(
        "| {} | `expired` − expires_at | {} | {:.1} s | {}/{} | {} |",
        options.target.name(),
        options.leases,
        options.spread,
        expired.len(),
        options.leases,
        stats_row(&mut expired)
    );
    if options.target == Server::Leased {
        println!(
            "| {} | `acquired` − the acquire's reply | {} | — | {}/{} | {} |",
            options.target.name(),
            options.leases,
            acquired.len(),
            options.leases,
            stats_row(&mut acquired)
        );
    }
    if missing > 0 || duplicates > 0 || wrong > 0 {
        return Err(format!(
            "{missing} expired events missing, {duplicates} duplicated, {wrong} unexpected messages"
        )
        .into());
    }
    Ok(())
}

// ---------------------------------------------------------------------
// subscribe

struct SubscribeOptions {
    host: String,
    port: u16,
    subscribers: usize,
    pattern: String,
    quiet: Duration,
}

fn subscribe_options(mut args: impl Iterator<Item = String>) -> Result<SubscribeOptions, Error> {
    let mut options = SubscribeOptions {
        host: "127.0.0.1".into(),
        port: 0,
        subscribers: 100,
        pattern: "__lease__:*".into(),
        quiet: Duration::from_millis(200),
    };
    while let Some(flag) = args.next() {
        let value = take_value(&flag, &mut args)?;
        match flag.as_str() {
            "--host" => options.host = value,
            "--port" => options.port = value.parse()?,
            "--subscribers" => options.subscribers = value.parse()?,
            "--pattern" => options.pattern = value,
            "--quiet-ms" => options.quiet = Duration::from_millis(value.parse()?),
            _ => return Err(format!("unknown option {flag} (see the top of the source)").into()),
        }
    }
    if options.port == 0 || options.subscribers == 0 {
        return Err("--port is required and --subscribers must be positive".into());
    }
    Ok(options)
}

/// What one subscriber counted.
#[derive(Default)]
struct Tally {
    messages: AtomicU64,
    bytes: AtomicU64,
    closed: AtomicBool,
}

/// Subscribes, reports ready, then counts every reply until the end.
async fn subscriber(
    address: String,
    pattern: String,
    tally: Arc<Tally>,
    ready: UnboundedSender<Result<(), String>>,
) {
    let subscribed = async {
        let mut conn = Conn::connect(&address).await?;
        conn.send(&command(&["PSUBSCRIBE", &pattern])).await?;
        match conn.reply().await? {
            Resp::Array(items) if items.first() == Some(&bulk(b"psubscribe")) => {}
            other => return Err(format!("PSUBSCRIBE answered {other:?}").into()),
        }
        Ok::<Conn, Error>(conn)
    };
    let mut conn = match subscribed.await {
        Ok(conn) => conn,
        Err(error) => {
            let _ = ready.send(Err(error.to_string()));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    loop {
        // Count the complete replies buffered, then read more.
        let mut counted = 0;
        while let Ok(Some(len)) = skip(&conn.buf[conn.at..]) {
            conn.at += len;
            counted += 1;
        }
        tally.messages.fetch_add(counted, Ordering::Relaxed);
        let before = conn.buf.len() - conn.at;
        match conn.fill().await {
            Ok(true) => {
                let read = (conn.buf.len() - conn.at - before) as u64;
                tally.bytes.fetch_add(read, Ordering::Relaxed);
            }
            Ok(false) | Err(_) => {
                tally.closed.store(true, Ordering::Relaxed);
                return;
            }
        }
    }
}

async fn subscribe(options: SubscribeOptions) -> Result<(), Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let address = format!("{}:{}", options.host, options.port);
    let tallies: Vec<Arc<Tally>> = (0..options.subscribers)
        .map(|_| Arc::new(Tally::default()))
        .collect();
    let (ready_in, mut ready) = unbounded_channel();
    for tally in &tallies {
        tokio::spawn(subscriber(
            address.clone(),
            options.pattern.clone(),
            tally.clone(),
            ready_in.clone(),
        ));
    }
    drop(ready_in);
    for _ in 0..options.subscribers {
        ready.recv().await.ok_or("a subscriber task ended")??;
    }
    println!("ready {}", options.subscribers);
    std::io::stdout().flush()?;

    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    let signalled = Instant::now();
    let total = |tallies: &[Arc<Tally>]| -> u64 {
        tallies
            .iter()
            .map(|t| t.messages.load(Ordering::Relaxed))
            .sum()
    };
    let mut last = total(&tallies);
    let mut last_change = signalled;
    while last_change.elapsed() < options.quiet {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now = total(&tallies);
        if now != last {
            last = now;
            last_change = Instant::now();
        }
    }
    let counts: Vec<u64> = tallies
        .iter()
        .map(|t| t.messages.load(Ordering::Relaxed))
        .collect();
    let bytes: u64 = tallies
        .iter()
        .map(|t| t.bytes.load(Ordering::Relaxed))
        .sum();
    let closed = tallies
        .iter()
        .filter(|t| t.closed.load(Ordering::Relaxed))
        .count();
    println!(
        "subscribers={} messages={} min={} max={} bytes={bytes} closed={closed} drained_ms={:.0}",
        options.subscribers,
        counts.iter().sum::<u64>(),
        counts.iter().min().copied().unwrap_or(0),
        counts.iter().max().copied().unwrap_or(0),
        (last_change - signalled).as_secs_f64() * 1000.0,
    );
    Ok(())
}

// ---------------------------------------------------------------------

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match mode.as_str() {
        "handover" => runtime.block_on(handover(handover_options(args)?)),
        "events" => runtime.block_on(events(events_options(args)?)),
        "subscribe" => runtime.block_on(subscribe(subscribe_options(args)?)),
        _ => Err(
            "the first argument is the mode: handover, events or subscribe \
                  (see the top of the source)"
                .into(),
        ),
    }
}
