//! One load generator for leased and etcd, side by side: the same clients,
//! the same loop and the same clock for both (bench/etcd.sh runs it).
//!
//!     etcd-load --system etcd|leased --endpoints H:P,H:P,H:P [options]
//!
//! `-c` clients (tasks) each send one request at a time, as fast as the
//! replies come, for `--duration` seconds per operation, in phases:
//!
//! - acquire: a new run each time (`run:<tag>:<client>:<n>`, worker `w`,
//!   `--ttl` seconds); leased `LEASE.ACQUIRE run w TTL ttl`, etcd a lease
//!   grant and a put-if-absent transaction bound to it (src/etcd.rs);
//! - heartbeat: of the client's last lease; `LEASE.HEARTBEAT id token`,
//!   etcd one `LeaseKeepAlive`;
//! - validate: of the client's last lease; `LEASE.VALIDATE run id token`,
//!   etcd a `Get` of the key compared with the token.
//!
//! leased's clients each have a connection of their own, to the nodes
//! round-robin (client i to node i mod 3, followers proxying to the
//! leader). etcd's clients share `--etcd-channels` sets of gRPC channels,
//! client i on set i mod N (HTTP/2 multiplexes the requests of the
//! clients on a channel); with `--etcd-balance rotate` a set is a channel
//! per endpoint, and client i starts on endpoint i mod 3, as leased's;
//! with `channel`, one channel over every endpoint, balanced by the
//! etcd-client crate. After a failed request a client moves to the next
//! node (leased: reconnects; etcd `rotate`: the next endpoint's channel).
//!
//! Output, on stdout, one CSV line per phase:
//!
//!     system,op,clients,requests,errors,seconds,per_second,p50_ms,p99_ms,max_ms
//!
//! requests are the successful ones, per_second = requests / seconds, the
//! phase's wall time (first request sent to last reply read); latencies of
//! successful requests, in ms. Failed requests (error replies, timeouts
//! after `--timeout` seconds, lost connections) are counted in errors and
//! sent again after 10 ms; the first few are printed to stderr.
//!
//! `--failover`: clients acquire for `--duration` seconds; after
//! `--kill-after` seconds the generator finds the leader (leased: `ROLE`
//! on each node; etcd: each endpoint's status) and kills it (SIGKILL to
//! its process, `--pids` in the order of `--endpoints`). Each client's
//! window is from the kill to the reply of its first successful acquire
//! sent after the kill and after its last failure. One line:
//!
//!     system,failover,clients,requests,errors,killed,first_ms,median_ms,max_ms,unrecovered
//!
//! (killed: the leader's index in --endpoints; first/median/max of the
//! clients' windows, in ms, `-` if none recovered; unrecovered: clients
//! with no such acquire by the end).
//!
//! Options: -c N (50), --duration S (10), --ops LIST (acquire,heartbeat,
//! validate), --ttl S (30), --timeout S (5), --tag T (from the clock),
//! --etcd-channels N (1), --etcd-heartbeat once|stream (once),
//! --etcd-balance rotate|channel (rotate),
//! --kill-after S (3), --pids LIST, --trace (every failed request to
//! stderr, with the time since the start, and the kill's).

mod etcd;
mod failover;
mod leased;
mod stats;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use stats::{Samples, Summary};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Failed requests printed per phase (all are counted).
const SHOWN_ERRORS: usize = 3;
/// The pause before a failed request is sent again.
const RETRY_PAUSE: Duration = Duration::from_millis(10);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Acquire,
    Heartbeat,
    Validate,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Heartbeat => "heartbeat",
            Op::Validate => "validate",
        }
    }
}

struct Options {
    system: String,
    endpoints: Vec<String>,
    clients: usize,
    duration: Duration,
    ops: Vec<Op>,
    ttl: i64,
    timeout: Duration,
    tag: String,
    etcd_channels: usize,
    etcd_heartbeat: etcd::Heartbeat,
    etcd_balance: etcd::Balance,
    failover: bool,
    trace: bool,
    kill_after: Duration,
    pids: Vec<i32>,
}

fn usage() -> String {
    include_str!("main.rs")
        .lines()
        .take_while(|line| line.starts_with("//!"))
        .map(|line| line.trim_start_matches("//!").trim_start_matches(' '))
        .collect::<Vec<_>>()
        .join("\n")
}

fn parse_options() -> Result<Options, Error> {
    let tag = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let mut options = Options {
        system: String::new(),
        endpoints: Vec::new(),
        clients: 50,
        duration: Duration::from_secs(10),
        ops: vec![Op::Acquire, Op::Heartbeat, Op::Validate],
        ttl: 30,
        timeout: Duration::from_secs(5),
        tag: tag.to_string(),
        etcd_channels: 1,
        etcd_heartbeat: etcd::Heartbeat::Once,
        etcd_balance: etcd::Balance::Rotate,
        failover: false,
        trace: false,
        kill_after: Duration::from_secs(3),
        pids: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--failover" {
            options.failover = true;
            continue;
        }
        if arg == "--trace" {
            options.trace = true;
            continue;
        }
        if arg == "-h" || arg == "--help" {
            println!("{}", usage());
            std::process::exit(0);
        }
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        let seconds = |v: &str| -> Result<Duration, Error> {
            let s: f64 = v.parse()?;
            if !(s.is_finite() && s > 0.0) {
                return Err(format!("{arg} takes a positive number of seconds").into());
            }
            Ok(Duration::from_secs_f64(s))
        };
        match arg.as_str() {
            "--system" => options.system = value,
            "--endpoints" => options.endpoints = value.split(',').map(String::from).collect(),
            "-c" => options.clients = value.parse()?,
            "--duration" => options.duration = seconds(&value)?,
            "--ops" => {
                options.ops = value
                    .split(',')
                    .map(|op| match op {
                        "acquire" => Ok(Op::Acquire),
                        "heartbeat" => Ok(Op::Heartbeat),
                        "validate" => Ok(Op::Validate),
                        _ => Err(format!("unknown op {op}")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--ttl" => options.ttl = value.parse()?,
            "--timeout" => options.timeout = seconds(&value)?,
            "--tag" => options.tag = value,
            "--etcd-channels" => options.etcd_channels = value.parse()?,
            "--etcd-heartbeat" => {
                options.etcd_heartbeat = match value.as_str() {
                    "once" => etcd::Heartbeat::Once,
                    "stream" => etcd::Heartbeat::Stream,
                    _ => return Err("--etcd-heartbeat takes once or stream".into()),
                }
            }
            "--etcd-balance" => {
                options.etcd_balance = match value.as_str() {
                    "rotate" => etcd::Balance::Rotate,
                    "channel" => etcd::Balance::Channel,
                    _ => return Err("--etcd-balance takes rotate or channel".into()),
                }
            }
            "--kill-after" => options.kill_after = seconds(&value)?,
            "--pids" => {
                options.pids = value.split(',').map(str::parse).collect::<Result<_, _>>()?
            }
            _ => return Err(format!("unknown option {arg} (--help lists them)").into()),
        }
    }
    if options.system != "etcd" && options.system != "leased" {
        return Err("--system takes etcd or leased".into());
    }
    if options.endpoints.is_empty() || options.clients == 0 || options.etcd_channels == 0 {
        return Err("--endpoints, -c and --etcd-channels must not be empty or 0".into());
    }
    if options.failover && options.pids.len() != options.endpoints.len() {
        return Err("--failover needs --pids, one per endpoint, in the same order".into());
    }
    if options.failover && options.kill_after >= options.duration {
        return Err("--kill-after must be shorter than --duration".into());
    }
    Ok(options)
}

/// One client's connection, to either system.
enum Conn {
    Etcd(etcd::Etcd),
    Leased(leased::Leased),
}

enum Held {
    Etcd(etcd::Held),
    Leased(leased::Held),
}

/// A client: its connection, its last lease, how many runs it acquired.
struct Client {
    index: usize,
    conn: Conn,
    held: Option<Held>,
    acquired: u64,
}

impl Client {
    async fn acquire(&mut self, options: &Options) -> Result<(), Error> {
        let run = format!("run:{}:{}:{}", options.tag, self.index, self.acquired);
        self.acquired += 1;
        self.held = Some(match &mut self.conn {
            Conn::Etcd(c) => Held::Etcd(c.acquire(&run, "w", options.ttl).await?),
            Conn::Leased(c) => Held::Leased(c.acquire(&run, "w", options.ttl).await?),
        });
        Ok(())
    }

    async fn run(&mut self, op: Op, options: &Options) -> Result<(), Error> {
        match (op, &mut self.conn, self.held.as_mut()) {
            (Op::Acquire, _, _) => self.acquire(options).await,
            (Op::Heartbeat, Conn::Etcd(c), Some(Held::Etcd(h))) => c.heartbeat(h).await,
            (Op::Heartbeat, Conn::Leased(c), Some(Held::Leased(h))) => c.heartbeat(h).await,
            (Op::Validate, Conn::Etcd(c), Some(Held::Etcd(h))) => c.validate(h).await,
            (Op::Validate, Conn::Leased(c), Some(Held::Leased(h))) => c.validate(h).await,
            _ => Err("no lease held".into()),
        }
    }

    /// `op`, timed out after `--timeout`; after a failure the client
    /// moves to the next node.
    async fn timed(&mut self, op: Op, options: &Options) -> Result<(), Error> {
        let result = match tokio::time::timeout(options.timeout, self.run(op, options)).await {
            Ok(result) => result,
            Err(_) => Err(format!("no reply in {:?}", options.timeout).into()),
        };
        if result.is_err() {
            match (&mut self.conn, self.held.as_mut()) {
                (Conn::Leased(c), _) => c.next_node(),
                (Conn::Etcd(c), Some(Held::Etcd(h))) => c.next_node(Some(h)),
                (Conn::Etcd(c), _) => c.next_node(None),
            }
        }
        result
    }
}

async fn connect(options: &Options) -> Result<Vec<Client>, Error> {
    let mut channels = Vec::new();
    if options.system == "etcd" {
        for _ in 0..options.etcd_channels {
            channels.push(
                etcd::Etcd::connect(
                    &options.endpoints,
                    options.etcd_balance,
                    options.etcd_heartbeat,
                )
                .await?,
            );
        }
    }
    Ok((0..options.clients)
        .map(|index| Client {
            index,
            conn: if options.system == "etcd" {
                Conn::Etcd(channels[index % channels.len()].share(index))
            } else {
                Conn::Leased(leased::Leased::new(&options.endpoints, index))
            },
            held: None,
            acquired: 0,
        })
        .collect())
}

/// Sends `op` until it succeeds (untimed set-up), at most 50 times.
async fn until_done(client: &mut Client, op: Op, options: &Options) -> Result<(), Error> {
    let mut last = None;
    for _ in 0..50 {
        match client.timed(op, options).await {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    Err(format!(
        "client {}: {} failed 50 times: {:?}",
        client.index,
        op.name(),
        last
    )
    .into())
}

/// Every request of a failover run: sent, answered, succeeded.
type Attempts = Vec<(Instant, Instant, bool)>;

/// One client's loop: `op` until `end`; returns its samples, every attempt
/// (in failover runs) and when its last reply came.
async fn drive(
    client: &mut Client,
    op: Op,
    options: &Options,
    start: Instant,
    end: Instant,
    shown: &std::sync::atomic::AtomicUsize,
) -> (Samples, Attempts, Instant) {
    let mut samples = Samples::default();
    let mut attempts = Vec::new();
    tokio::time::sleep_until(start.into()).await;
    let mut last = Instant::now();
    while Instant::now() < end {
        let sent = Instant::now();
        let result = client.timed(op, options).await;
        last = Instant::now();
        if options.failover {
            attempts.push((sent, last, result.is_ok()));
        }
        match result {
            Ok(()) => samples.record(last - sent),
            Err(e) => {
                samples.errors += 1;
                if options.trace {
                    let at = last.saturating_duration_since(start).as_millis();
                    eprintln!(
                        "{at} ms: client {} sent at {} ms: {e}",
                        client.index,
                        sent.saturating_duration_since(start).as_millis()
                    );
                } else if shown.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < SHOWN_ERRORS {
                    eprintln!(
                        "{} {}: client {}: {e}",
                        options.system,
                        op.name(),
                        client.index
                    );
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
    (samples, attempts, last)
}

/// One phase: every client runs `op` for the duration, all starting at
/// once. Returns the clients, the summary and every client's attempts.
async fn phase(
    clients: Vec<Client>,
    op: Op,
    options: &Arc<Options>,
) -> Result<(Vec<Client>, Summary, Vec<Attempts>), Error> {
    // Set-up, untimed: a lease to heartbeat or validate, and one heartbeat
    // first (it opens etcd's keep-alive stream in `stream` mode).
    let mut ready = Vec::new();
    for mut client in clients {
        let options = options.clone();
        ready.push(tokio::spawn(async move {
            if op != Op::Acquire && client.held.is_none() {
                until_done(&mut client, Op::Acquire, &options).await?;
            }
            if op == Op::Heartbeat {
                until_done(&mut client, Op::Heartbeat, &options).await?;
            }
            Ok::<_, Error>(client)
        }));
    }
    let mut clients = Vec::new();
    for task in ready {
        clients.push(task.await??);
    }

    let start = Instant::now() + Duration::from_millis(100);
    let end = start + options.duration;
    let shown = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for mut client in clients {
        let (options, shown) = (options.clone(), shown.clone());
        tasks.push(tokio::spawn(async move {
            let (samples, attempts, last) =
                drive(&mut client, op, &options, start, end, &shown).await;
            (client, samples, attempts, last)
        }));
    }
    let (mut clients, mut all, mut attempts, mut last) =
        (Vec::new(), Samples::default(), Vec::new(), start);
    for task in tasks {
        let (client, samples, client_attempts, client_last) = task.await?;
        clients.push(client);
        all.merge(samples);
        attempts.push(client_attempts);
        last = last.max(client_last);
    }
    Ok((clients, all.summary(last - start), attempts))
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("etcd-load: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Error> {
    let options = Arc::new(parse_options()?);
    let mut clients = connect(&options).await?;
    if options.failover {
        return failover::run(clients, options).await;
    }
    for &op in &options.ops {
        let (next, summary, _) = phase(clients, op, &options).await?;
        clients = next;
        println!(
            "{},{},{},{},{},{:.2},{:.0},{:.3},{:.3},{:.3}",
            options.system,
            op.name(),
            options.clients,
            summary.requests,
            summary.errors,
            summary.seconds,
            summary.per_second,
            summary.p50_ms,
            summary.p99_ms,
            summary.max_ms
        );
    }
    Ok(())
}
