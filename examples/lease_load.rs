//! A load generator for heartbeats, validations, releases and run data
//! writes of many different live leases, which redis-benchmark cannot send
//! (it cannot put a lease id and its matching token in one command).
//!
//!     cargo run --release --example lease_load -- --port PORT [options]
//!
//! It first acquires the leases it needs (pipelined, runs `run:<tag>:<n>`
//! with a tag unique to this invocation, worker `w`, `TTL 1e9` so they stay
//! live) and keeps every lease's id and token. Then it opens `-c`
//! connections and sends `-n` requests in all, each connection its share,
//! in pipelines of `-P` (write P commands, read P replies, as
//! redis-benchmark does). Request i uses lease i mod `--leases`, and each
//! connection takes a contiguous range of requests, so with the default
//! `--leases` (= `-n`) every request hits a different lease and no two
//! connections share one. Every reply is checked: heartbeat, validate,
//! release and setdata must answer 1 (ping: PONG). Any other reply is counted as an
//! error, the first few are printed, and the program exits non-zero.
//!
//! Output: on stdout, two lines in the shape of `redis-benchmark --csv`,
//! so bench/compare.sh reads them like redis-benchmark's:
//!
//!     "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
//!     "LEASE.HEARTBEAT (100000 leases)","1204819.28","0.611","0.090","0.583","0.911","1.203","3.015"
//!
//! rps is the requests over the wall time of the timed phase only (from
//! the first connection's first write to the last connection's last reply;
//! the acquires before it are not timed). The latencies are of whole
//! pipelines, from writing the first command to reading the last reply
//! (with -P 1, of single requests), in ms. A summary goes to stderr.
//!
//! Options:
//!   --port P                the server's port (required)
//!   --host H                127.0.0.1
//!   --target leased|lua     leased's LEASE.* commands, or Redis running
//!                           bench/lease.lua (`EVALSHA sha 0 HEARTBEAT ...`)
//!   --sha SHA               the script's SHA1 (required with --target lua)
//!   --op heartbeat|validate|release|setdata|ping
//!                           setdata writes --value-size bytes as the run's
//!                           data (`LEASE.SETDATA lease_id token value`, or
//!                           `EVALSHA sha 0 SETDATA lease_id token value`);
//!                           ping sends PING and acquires nothing: a check
//!                           of the generator itself against redis-benchmark
//!   --value-size N          bytes of run data per setdata (1024)
//!   --leases N              leases to acquire and spread the requests over
//!                           (default -n; release needs at least -n, since
//!                           each lease can be released once)
//!   -c N                    connections (50)
//!   -P N                    commands per pipeline (16)
//!   -n N                    requests in all (100000)
//!   --threads N             tokio worker threads; 1 is a single-threaded
//!                           event loop like redis-benchmark's (1)
//!   --client raw|crate      raw: commands encoded before the timed phase and
//!                           written over a plain TcpStream, replies parsed by
//!                           hand; crate: the same pipelines through the
//!                           redis crate (`redis::pipe()` on a multiplexed
//!                           connection), for comparison (raw)
//!   --setup-batch N         acquires per pipeline while setting up (10000)
//!   --keep                  leave the leases of a heartbeat, validate or
//!                           setdata run held; by default they are released
//!                           afterwards (untimed; after a setdata run their
//!                           data is deleted first, `DELDATA`), so repeated
//!                           runs do not pile leases or data up on the server

use std::io::Write as _;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Barrier;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// How many wrong replies are printed (all of them are counted).
const SHOWN_ERRORS: usize = 5;
/// The TTL of the leases taken for the run, far longer than any run.
const TTL: &str = "1e9";

#[derive(Clone, Copy, PartialEq)]
enum Target {
    Leased,
    Lua,
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Heartbeat,
    Validate,
    Release,
    SetData,
    Ping,
}

impl Op {
    fn lease_command(self) -> &'static str {
        match self {
            Op::Heartbeat => "HEARTBEAT",
            Op::Validate => "VALIDATE",
            Op::Release => "RELEASE",
            Op::SetData => "SETDATA",
            Op::Ping => "PING",
        }
    }

    /// The one reply that counts as a success, as it is on the wire (RESP2).
    fn expected(self) -> &'static [u8] {
        match self {
            Op::Ping => b"+PONG\r\n",
            _ => b":1\r\n",
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Driver {
    Raw,
    Crate,
}

struct Options {
    host: String,
    port: u16,
    target: Target,
    sha: Option<String>,
    op: Op,
    leases: Option<usize>,
    clients: usize,
    pipeline: usize,
    requests: usize,
    threads: usize,
    driver: Driver,
    setup_batch: usize,
    keep: bool,
    /// The run data setdata writes, `--value-size` bytes.
    value: Vec<u8>,
}

fn parse_options() -> Result<Options, Error> {
    let mut options = Options {
        host: "127.0.0.1".into(),
        port: 0,
        target: Target::Leased,
        sha: None,
        op: Op::Heartbeat,
        leases: None,
        clients: 50,
        pipeline: 16,
        requests: 100_000,
        threads: 1,
        driver: Driver::Raw,
        setup_batch: 10_000,
        keep: false,
        value: Vec::new(),
    };
    let mut value_size = 1024;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--host" => options.host = value()?,
            "--port" => options.port = value()?.parse()?,
            "--target" => {
                options.target = match value()?.as_str() {
                    "leased" => Target::Leased,
                    "lua" => Target::Lua,
                    other => return Err(format!("--target leased|lua, not {other}").into()),
                }
            }
            "--sha" => options.sha = Some(value()?),
            "--op" => {
                options.op = match value()?.as_str() {
                    "heartbeat" => Op::Heartbeat,
                    "validate" => Op::Validate,
                    "release" => Op::Release,
                    "setdata" => Op::SetData,
                    "ping" => Op::Ping,
                    other => {
                        return Err(format!(
                            "--op heartbeat|validate|release|setdata|ping, not {other}"
                        )
                        .into());
                    }
                }
            }
            "--leases" => options.leases = Some(value()?.parse()?),
            "-c" => options.clients = value()?.parse()?,
            "-P" => options.pipeline = value()?.parse()?,
            "-n" => options.requests = value()?.parse()?,
            "--threads" => options.threads = value()?.parse()?,
            "--client" => {
                options.driver = match value()?.as_str() {
                    "raw" => Driver::Raw,
                    "crate" => Driver::Crate,
                    other => return Err(format!("--client raw|crate, not {other}").into()),
                }
            }
            "--setup-batch" => options.setup_batch = value()?.parse()?,
            "--keep" => options.keep = true,
            "--value-size" => value_size = value()?.parse()?,
            _ => return Err(format!("unknown option {flag} (see the top of the source)").into()),
        }
    }
    // Printable bytes, different from one position to the next.
    options.value = (0..value_size).map(|i| b'a' + (i % 26) as u8).collect();
    if options.port == 0 {
        return Err("--port PORT is required".into());
    }
    if options.target == Target::Lua && options.sha.is_none() {
        return Err("--target lua needs --sha SHA (SCRIPT LOAD of bench/lease.lua)".into());
    }
    if options.clients == 0
        || options.pipeline == 0
        || options.requests == 0
        || options.threads == 0
        || options.setup_batch == 0
        || options.leases == Some(0)
    {
        return Err("-c, -P, -n, --threads, --setup-batch and --leases must be positive".into());
    }
    if options.op == Op::Release && options.leases.is_some_and(|n| n < options.requests) {
        return Err("--op release releases each lease once: --leases must be at least -n".into());
    }
    Ok(options)
}

/// A lease taken for the run, as the server returned it.
struct Lease {
    run: Vec<u8>,
    id: Vec<u8>,
    token: Vec<u8>,
}

/// The value of `key` in a lease reply: a flat array of pairs (RESP2, and
/// the script's reply) or a map (RESP3).
fn lease_field<'a>(reply: &'a Value, key: &str) -> Option<&'a Value> {
    let same = |k: &Value| matches!(k, Value::BulkString(b) if b == key.as_bytes());
    match reply {
        Value::Array(items) => items
            .chunks_exact(2)
            .find(|pair| same(&pair[0]))
            .map(|pair| &pair[1]),
        Value::Map(pairs) => pairs.iter().find(|(k, _)| same(k)).map(|(_, v)| v),
        _ => None,
    }
}

fn lease_from_reply(run: Vec<u8>, reply: &Value) -> Result<Lease, Error> {
    let name = String::from_utf8_lossy(&run).into_owned();
    if *reply == Value::Nil {
        return Err(format!("{name} was already held").into());
    }
    if let Value::ServerError(error) = reply {
        return Err(format!("acquiring {name} failed: {error:?}").into());
    }
    let id = match lease_field(reply, "lease_id") {
        Some(Value::BulkString(id)) => id.clone(),
        _ => return Err(format!("no lease_id in the reply for {name}: {reply:?}").into()),
    };
    let token = match lease_field(reply, "fencing_token") {
        Some(Value::Int(token)) => token.to_string().into_bytes(),
        _ => return Err(format!("no fencing_token in the reply for {name}: {reply:?}").into()),
    };
    match lease_field(reply, "run_id") {
        Some(Value::BulkString(r)) if *r == run => {}
        _ => return Err(format!("the reply for {name} names another run: {reply:?}").into()),
    }
    Ok(Lease { run, id, token })
}

/// A connection that waits for replies as long as they take.
async fn connect(client: &Client) -> Result<MultiplexedConnection, Error> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(None);
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// Acquires `count` fresh runs, `--setup-batch` per pipeline.
async fn acquire_leases(
    client: &Client,
    options: &Options,
    count: usize,
) -> Result<Vec<Lease>, Error> {
    let mut con = connect(client).await?;
    let tag = format!(
        "lg{}-{}",
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis(),
        std::process::id()
    );
    let mut leases = Vec::with_capacity(count);
    while leases.len() < count {
        let from = leases.len();
        let to = (from + options.setup_batch).min(count);
        let runs: Vec<Vec<u8>> = (from..to)
            .map(|i| format!("run:{tag}:{i}").into_bytes())
            .collect();
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for run in &runs {
            let command = pipe.cmd(match options.target {
                Target::Leased => "LEASE.ACQUIRE",
                Target::Lua => "EVALSHA",
            });
            if options.target == Target::Lua {
                command
                    .arg(options.sha.as_deref().unwrap_or_default())
                    .arg(0)
                    .arg("ACQUIRE");
            }
            command.arg(run).arg("w").arg("TTL").arg(TTL);
        }
        let replies: Vec<Value> = pipe.query_async(&mut con).await?;
        if replies.len() != runs.len() {
            return Err(format!("{} replies to {} acquires", replies.len(), runs.len()).into());
        }
        for (run, reply) in runs.into_iter().zip(&replies) {
            leases.push(lease_from_reply(run, reply)?);
        }
    }
    Ok(leases)
}

/// Releases the leases after a heartbeat, validate or setdata run,
/// untimed, so that repeated runs do not pile leases up on the server;
/// after setdata, deletes their data first (`DELDATA`), since a run's data
/// outlives its lease.
async fn release_leases(client: &Client, options: &Options, leases: &[Lease]) -> Result<(), Error> {
    let mut con = connect(client).await?;
    let sha = options.sha.as_deref().unwrap_or_default();
    for chunk in leases.chunks(options.setup_batch) {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for lease in chunk {
            if options.op == Op::SetData {
                let mut args = vec![b"DELDATA".as_slice()];
                if options.target == Target::Leased {
                    args[0] = b"LEASE.DELDATA".as_slice();
                } else {
                    args.splice(0..0, [b"EVALSHA".as_slice(), sha.as_bytes(), b"0"]);
                }
                args.extend([lease.id.as_slice(), lease.token.as_slice()]);
                add_command(&mut pipe, &args)?;
            }
            add_command(
                &mut pipe,
                &command_args(options.target, sha, Op::Release, Some(lease), &[]),
            )?;
        }
        let replies: Vec<Value> = pipe.query_async(&mut con).await?;
        // DELDATA answers 0 for a lease whose run got no data.
        let bad = if options.op == Op::SetData {
            replies.chunks(2).find(|pair| {
                !matches!(pair[0], Value::Int(0 | 1)) || pair.get(1) != Some(&Value::Int(1))
            })
        } else {
            replies.chunks(1).find(|one| one[0] != Value::Int(1))
        };
        if let Some(bad) = bad {
            return Err(format!("releasing the leases afterwards: {bad:?}").into());
        }
    }
    Ok(())
}

/// The arguments of `op` for `lease` (PING needs none) on `target`;
/// `value` is setdata's.
fn command_args<'a>(
    target: Target,
    sha: &'a str,
    op: Op,
    lease: Option<&'a Lease>,
    value: &'a [u8],
) -> Vec<&'a [u8]> {
    if op == Op::Ping {
        return vec![b"PING".as_slice()];
    }
    let lease = lease.expect("lease commands have a lease");
    let mut args: Vec<&[u8]> = Vec::with_capacity(7);
    match target {
        Target::Leased => args.push(match op {
            Op::Heartbeat => b"LEASE.HEARTBEAT".as_slice(),
            Op::Validate => b"LEASE.VALIDATE".as_slice(),
            Op::SetData => b"LEASE.SETDATA".as_slice(),
            _ => b"LEASE.RELEASE".as_slice(),
        }),
        Target::Lua => {
            args.extend([
                b"EVALSHA".as_slice(),
                sha.as_bytes(),
                b"0",
                op.lease_command().as_bytes(),
            ]);
        }
    }
    // Same order in leased and in bench/lease.lua:
    //   HEARTBEAT lease_id token / VALIDATE run lease_id token /
    //   RELEASE lease_id token / SETDATA lease_id token value
    if op == Op::Validate {
        args.push(&lease.run);
    }
    args.push(&lease.id);
    args.push(&lease.token);
    if op == Op::SetData {
        args.push(value);
    }
    args
}

/// Appends one command to a redis crate pipeline.
fn add_command(pipe: &mut redis::Pipeline, args: &[&[u8]]) -> Result<(), Error> {
    let command = pipe.cmd(std::str::from_utf8(args[0])?);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    Ok(())
}

/// Appends one command in RESP (an array of bulk strings).
fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    write!(out, "*{}\r\n", args.len()).expect("writing to a Vec");
    for arg in args {
        write!(out, "${}\r\n", arg.len()).expect("writing to a Vec");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// One connection's share: the requests it sends, in pipelines.
struct Share {
    /// The global request numbers of its pipelines.
    pipelines: Vec<Range<usize>>,
}

fn shares(options: &Options) -> Vec<Share> {
    let per = options.requests / options.clients;
    let extra = options.requests % options.clients;
    let mut next = 0;
    let mut all = Vec::new();
    for k in 0..options.clients {
        let end = next + per + usize::from(k < extra);
        let mut pipelines = Vec::new();
        let mut from = next;
        while from < end {
            let to = (from + options.pipeline).min(end);
            pipelines.push(from..to);
            from = to;
        }
        if !pipelines.is_empty() {
            all.push(Share { pipelines });
        }
        next = end;
    }
    all
}

/// What one connection measured.
struct Outcome {
    started: Instant,
    finished: Instant,
    latencies: Vec<Duration>,
    replies: usize,
    errors: usize,
    shown: Vec<String>,
}

impl Outcome {
    fn new() -> Self {
        let now = Instant::now();
        Outcome {
            started: now,
            finished: now,
            latencies: Vec::new(),
            replies: 0,
            errors: 0,
            shown: Vec::new(),
        }
    }

    fn wrong(&mut self, request: usize, reply: String) {
        self.errors += 1;
        if self.shown.len() < SHOWN_ERRORS {
            self.shown.push(format!("request {request}: {reply}"));
        }
    }
}

/// The length of the complete RESP2 reply at the start of `buf`, or None
/// when more bytes are needed.
fn reply_len(buf: &[u8]) -> Result<Option<usize>, Error> {
    let Some(kind) = buf.first() else {
        return Ok(None);
    };
    let Some(cr) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line_end = cr + 2;
    let number = || -> Result<i64, Error> { Ok(std::str::from_utf8(&buf[1..cr])?.parse::<i64>()?) };
    match kind {
        b'+' | b'-' | b':' => Ok(Some(line_end)),
        b'$' => {
            let len = number()?;
            if len < 0 {
                return Ok(Some(line_end));
            }
            let end = line_end + len as usize + 2;
            Ok((buf.len() >= end).then_some(end))
        }
        b'*' => {
            let count = number()?;
            let mut at = line_end;
            for _ in 0..count.max(0) {
                match reply_len(&buf[at..])? {
                    Some(len) => at += len,
                    None => return Ok(None),
                }
            }
            Ok(Some(at))
        }
        other => Err(format!("not a RESP2 reply (type byte {other:#04x})").into()),
    }
}

/// Sends a connection's pipelines over a plain TcpStream: the commands were
/// encoded beforehand, so the timed loop only writes bytes and compares
/// replies with the expected bytes.
async fn run_raw(
    address: String,
    wire: Vec<u8>,
    pipelines: Vec<(Range<usize>, Range<usize>)>,
    expected: &'static [u8],
    start: Arc<Barrier>,
) -> Result<Outcome, Error> {
    let mut stream = TcpStream::connect(&address).await?;
    stream.set_nodelay(true)?;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut at = 0;
    let mut outcome = Outcome::new();
    outcome.latencies.reserve(pipelines.len());
    start.wait().await;
    outcome.started = Instant::now();
    for (bytes, requests) in pipelines {
        let sent = Instant::now();
        stream.write_all(&wire[bytes]).await?;
        for request in requests {
            let len = loop {
                if let Some(len) = reply_len(&buf[at..])? {
                    break len;
                }
                if at == buf.len() {
                    buf.clear();
                    at = 0;
                } else if at > 0 {
                    buf.drain(..at);
                    at = 0;
                }
                buf.reserve(1 << 14);
                if stream.read_buf(&mut buf).await? == 0 {
                    return Err("the server closed the connection".into());
                }
            };
            let reply = &buf[at..at + len];
            if reply != expected {
                outcome.wrong(
                    request,
                    String::from_utf8_lossy(reply).trim_end().to_string(),
                );
            }
            outcome.replies += 1;
            at += len;
        }
        outcome.latencies.push(sent.elapsed());
    }
    outcome.finished = Instant::now();
    Ok(outcome)
}

/// The same through the redis crate: one multiplexed connection, the
/// pipelines built beforehand.
async fn run_crate(
    client: Client,
    pipes: Vec<(redis::Pipeline, Range<usize>)>,
    op: Op,
    start: Arc<Barrier>,
) -> Result<Outcome, Error> {
    let mut con = connect(&client).await?;
    let mut outcome = Outcome::new();
    outcome.latencies.reserve(pipes.len());
    start.wait().await;
    outcome.started = Instant::now();
    for (pipe, requests) in pipes {
        let sent = Instant::now();
        let replies: Vec<Value> = pipe.query_async(&mut con).await?;
        outcome.latencies.push(sent.elapsed());
        if replies.len() != requests.len() {
            return Err(format!("{} replies to {} requests", replies.len(), requests.len()).into());
        }
        for (request, reply) in requests.zip(replies) {
            let good = match op {
                Op::Ping => matches!(&reply, Value::SimpleString(s) if s == "PONG"),
                _ => reply == Value::Int(1),
            };
            if !good {
                outcome.wrong(request, format!("{reply:?}"));
            }
            outcome.replies += 1;
        }
    }
    outcome.finished = Instant::now();
    Ok(outcome)
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of sorted latencies.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn run(options: Options) -> Result<(), Error> {
    let address = format!("{}:{}", options.host, options.port);
    let client = Client::open(format!("redis://{address}/"))?;
    let lease_count = match options.op {
        Op::Ping => 0,
        _ => options.leases.unwrap_or(options.requests),
    };

    let setup = Instant::now();
    let leases = acquire_leases(&client, &options, lease_count).await?;
    if lease_count > 0 {
        let took = setup.elapsed().as_secs_f64();
        eprintln!(
            "lease_load: acquired {lease_count} leases in {took:.2} s ({:.0}/s)",
            lease_count as f64 / took
        );
    }

    let sha = options.sha.as_deref().unwrap_or_default();
    let args_of = |request: usize| {
        let lease = (!leases.is_empty()).then(|| &leases[request % leases.len()]);
        command_args(options.target, sha, options.op, lease, &options.value)
    };
    let shares = shares(&options);
    let start = Arc::new(Barrier::new(shares.len()));
    let mut tasks = Vec::with_capacity(shares.len());
    for share in shares {
        let task = match options.driver {
            Driver::Raw => {
                let mut wire = Vec::new();
                let mut pipelines = Vec::with_capacity(share.pipelines.len());
                for requests in share.pipelines {
                    let from = wire.len();
                    for request in requests.clone() {
                        encode(&mut wire, &args_of(request));
                    }
                    pipelines.push((from..wire.len(), requests));
                }
                tokio::spawn(run_raw(
                    address.clone(),
                    wire,
                    pipelines,
                    options.op.expected(),
                    start.clone(),
                ))
            }
            Driver::Crate => {
                let mut pipes = Vec::with_capacity(share.pipelines.len());
                for requests in share.pipelines {
                    let mut pipe = redis::pipe();
                    pipe.ignore_errors();
                    for request in requests.clone() {
                        add_command(&mut pipe, &args_of(request))?;
                    }
                    pipes.push((pipe, requests));
                }
                tokio::spawn(run_crate(client.clone(), pipes, options.op, start.clone()))
            }
        };
        tasks.push(task);
    }

    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(task.await??);
    }
    let started = outcomes
        .iter()
        .map(|o| o.started)
        .min()
        .expect("a connection");
    let finished = outcomes
        .iter()
        .map(|o| o.finished)
        .max()
        .expect("a connection");
    let wall = finished - started;
    let replies: usize = outcomes.iter().map(|o| o.replies).sum();
    let errors: usize = outcomes.iter().map(|o| o.errors).sum();
    let mut latencies: Vec<Duration> = outcomes
        .iter()
        .flat_map(|o| o.latencies.iter().copied())
        .collect();
    latencies.sort_unstable();
    let average = latencies.iter().sum::<Duration>() / latencies.len() as u32;
    let rps = replies as f64 / wall.as_secs_f64();

    let name = match (options.op, options.target) {
        (Op::Ping, _) => "PING".to_string(),
        (op, Target::Leased) => format!("LEASE.{} ({lease_count} leases)", op.lease_command()),
        (op, Target::Lua) => format!("EVALSHA {} ({lease_count} leases)", op.lease_command()),
    };
    println!(
        "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\
         \"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\""
    );
    println!(
        "\"{name}\",\"{rps:.2}\",\"{:.3}\",\"{:.3}\",\"{:.3}\",\"{:.3}\",\"{:.3}\",\"{:.3}\"",
        millis(average),
        millis(latencies[0]),
        millis(percentile(&latencies, 50.0)),
        millis(percentile(&latencies, 95.0)),
        millis(percentile(&latencies, 99.0)),
        millis(*latencies.last().expect("not empty")),
    );
    eprintln!(
        "lease_load: {name}: {replies} requests on {} connections, -P {}, in {:.3} s: \
         {rps:.0} ops/s, p50 {:.3} ms, p99 {:.3} ms per pipeline; {errors} wrong replies",
        outcomes.len(),
        options.pipeline,
        wall.as_secs_f64(),
        millis(percentile(&latencies, 50.0)),
        millis(percentile(&latencies, 99.0)),
    );
    if errors == 0
        && matches!(options.op, Op::Heartbeat | Op::Validate | Op::SetData)
        && !options.keep
    {
        release_leases(&client, &options, &leases).await?;
    }
    if errors > 0 {
        let shown = outcomes.iter().flat_map(|o| o.shown.iter());
        for reply in shown.take(SHOWN_ERRORS) {
            eprintln!("lease_load: wrong reply to {reply}");
        }
        return Err(format!(
            "{errors} of {replies} replies were not {:?}",
            String::from_utf8_lossy(options.op.expected()).trim_end()
        )
        .into());
    }
    Ok(())
}

fn main() -> Result<(), Error> {
    let options = parse_options()?;
    let runtime = if options.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(options.threads)
            .enable_all()
            .build()?
    };
    runtime.block_on(run(options))
}
