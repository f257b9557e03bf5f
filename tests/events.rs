//! Lease events over pub/sub, through the `redis` crate: its RESP2
//! `PubSub` and a RESP3 connection that receives pushes. Most tests run
//! the server in the test's runtime with paused time, so that leases
//! expire when the test moves the clock; the one about latency runs the
//! real binary on the real clock.

mod common;

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use common::binary::Server;
use common::client::{AsyncClient, Lease, text};
use common::inprocess::{InProcess, at_one_instant, settle};
use futures_util::StreamExt;
use redis::aio::PubSubStream;
use redis::{PushInfo, Value};
use tokio::sync::mpsc;
use tokio::time::advance;

/// One message: its channel and payload.
type Message = (String, String);

/// A RESP2 subscriber to `pattern`, as a stream of messages.
async fn subscriber(url: &str, pattern: &str) -> PubSubStream {
    let client = redis::Client::open(url).unwrap();
    let mut pubsub = at_one_instant(client.get_async_pubsub()).await.unwrap();
    at_one_instant(pubsub.psubscribe(pattern)).await.unwrap();
    pubsub.into_on_message()
}

async fn next(stream: &mut PubSubStream) -> Message {
    let message = at_one_instant(stream.next()).await.expect("a message");
    let payload: String = message.get_payload().unwrap();
    (message.get_channel_name().to_string(), payload)
}

/// A RESP3 client subscribed to `pattern`, whose messages come as pushes
/// on the returned channel while it can still run commands.
async fn resp3_subscriber(
    server: &InProcess,
    pattern: &str,
) -> (AsyncClient, mpsc::UnboundedReceiver<PushInfo>) {
    let (pushes, received) = mpsc::unbounded_channel();
    let client = redis::Client::open(server.url_resp3()).unwrap();
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(None)
        .set_push_sender(pushes);
    let connected = client.get_multiplexed_async_connection_with_config(&config);
    let mut con = at_one_instant(connected).await.unwrap();
    at_one_instant(con.psubscribe(pattern)).await.unwrap();
    (AsyncClient { con }, received)
}

/// The next pmessage push: its channel and payload.
async fn next_push(pushes: &mut mpsc::UnboundedReceiver<PushInfo>) -> Message {
    loop {
        let push = at_one_instant(pushes.recv()).await.expect("a push");
        if push.kind == redis::PushKind::PMessage {
            return (text(&push.data[1]), text(&push.data[2]));
        }
    }
}

// ---------------------------------------------------------------------
// Every transition, in order
// ---------------------------------------------------------------------

/// A small deterministic generator: the test is the same every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A lease as the test knows it from the replies, times in milliseconds
/// of the server's clock.
#[derive(Clone)]
struct Known {
    lease: Lease,
    run: String,
    ttl_ms: i64,
    expires_ms: i64,
    /// Still its run's lease (not released, not taken over).
    current: bool,
    /// Its `expired` is expected already.
    expired: bool,
}

/// What the replies say happened, and so which events each run must see.
#[derive(Default)]
struct Expected {
    leases: Vec<Known>,
    per_run: HashMap<String, Vec<String>>,
}

impl Expected {
    fn event(&mut self, run: &str, kind: &str, lease: &Lease) {
        let worker = String::from_utf8_lossy(&lease.worker_id);
        let message = format!("{kind}:{}:{worker}", lease.fencing_token);
        self.per_run
            .entry(run.to_string())
            .or_default()
            .push(message);
    }

    /// Every current lease whose expiry is before `now_ms` has expired.
    fn expire_up_to(&mut self, now_ms: i64) {
        for i in 0..self.leases.len() {
            let known = &self.leases[i];
            if known.current && !known.expired && known.expires_ms < now_ms {
                let (run, lease) = (known.run.clone(), known.lease.clone());
                self.leases[i].expired = true;
                self.event(&run, "expired", &lease);
            }
        }
    }

    fn current_of(&self, run: &str) -> Option<usize> {
        self.leases.iter().position(|l| l.current && l.run == run)
    }
}

fn ms(seconds: f64) -> i64 {
    (seconds * 1000.0).round() as i64
}

#[tokio::test(start_paused = true)]
async fn every_transition_of_random_operations_is_published_in_per_run_order() {
    let server = InProcess::start(&[]).await;
    let mut by_run = subscriber(&server.url(), "__lease__:*").await;
    let (_events_client, mut by_event) = resp3_subscriber(&server, "__leaseevent__:*").await;
    let mut con = server.client().await;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut expected = Expected::default();
    // The server's clock in ms: read from the first acquire, then moved
    // with tokio's clock. Steps are whole tenths of a second and TTLs end
    // in 50 ms, so no command ever lands on an expiry.
    let mut now_ms: Option<i64> = None;
    for _ in 0..1000 {
        let roll = rng.below(100);
        if let Some(now) = now_ms {
            expected.expire_up_to(now);
        }
        if roll < 50 || expected.leases.is_empty() {
            let run = format!("run-{:02}", rng.below(50));
            let worker = format!("w{}", rng.below(6));
            let ttl_ms = 1050 + 1000 * rng.below(3) as i64;
            let ttl = ttl_ms as f64 / 1000.0;
            let reply = con.acquire(&run, &worker, None, Some(ttl)).await;
            let now =
                *now_ms.get_or_insert_with(|| ms(reply.as_ref().unwrap().expires_at) - ttl_ms);
            let holder = expected.current_of(&run);
            let free = holder.is_none_or(|i| expected.leases[i].expires_ms < now);
            assert_eq!(reply.is_some(), free, "acquire {run} at {now}");
            let Some(lease) = reply else { continue };
            assert_eq!(ms(lease.expires_at), now + ttl_ms);
            if let Some(i) = holder {
                expected.leases[i].current = false;
            }
            expected.event(&run, "acquired", &lease);
            let expires_ms = now + ttl_ms;
            expected.leases.push(Known {
                lease,
                run,
                ttl_ms,
                expires_ms,
                current: true,
                expired: false,
            });
        } else if roll < 70 {
            let i = rng.below(expected.leases.len() as u64) as usize;
            let now = now_ms.unwrap();
            let known = &expected.leases[i];
            let alive = known.current && known.expires_ms > now;
            assert_eq!(con.heartbeat(&known.lease, None).await, alive);
            if alive {
                expected.leases[i].expires_ms = now + known.ttl_ms;
            }
        } else if roll < 90 {
            let i = rng.below(expected.leases.len() as u64) as usize;
            let known = expected.leases[i].clone();
            assert_eq!(con.release(&known.lease).await, known.current);
            if known.current {
                expected.leases[i].current = false;
                expected.event(&known.run, "released", &known.lease);
            }
        } else {
            let step = 100 * (1 + rng.below(20));
            advance(Duration::from_millis(step)).await;
            if let Some(now) = &mut now_ms {
                *now += step as i64;
            }
        }
    }
    // Every lease left expires; a marker then closes the sequence.
    advance(Duration::from_secs(5)).await;
    expected.expire_up_to(now_ms.unwrap() + 5000);
    let marker = con.acquire("zz-marker", "m", None, None).await.unwrap();
    expected.event("zz-marker", "acquired", &marker);
    let total: usize = expected.per_run.values().map(Vec::len).sum();
    assert!(total > 600, "only {total} events");

    let mut seen: HashMap<String, Vec<String>> = HashMap::new();
    let mut order = Vec::new();
    for _ in 0..total {
        let (channel, message) = next(&mut by_run).await;
        let run = channel.strip_prefix("__lease__:").expect("a lease channel");
        let (kind, rest) = message.split_once(':').unwrap();
        let token = rest.split_once(':').unwrap().0;
        order.push((kind.to_string(), format!("{token}:{run}")));
        seen.entry(run.to_string()).or_default().push(message);
    }
    assert_eq!(seen, expected.per_run);
    // The same events, in the same order, by kind.
    for (kind, message) in order {
        let pushed = next_push(&mut by_event).await;
        assert_eq!(pushed, (format!("__leaseevent__:{kind}"), message));
    }
}

// ---------------------------------------------------------------------
// Expiry without traffic
// ---------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn expired_is_published_as_the_clock_passes_with_no_command_and_before_a_takeover() {
    let server = InProcess::start(&[]).await;
    let mut events = subscriber(&server.url(), "__lease__:*").await;
    let mut con = server.client().await;
    let lease = con.acquire("run", "w1", None, Some(1.0)).await.unwrap();
    assert_eq!(next(&mut events).await.1, "acquired:1:w1");
    // Just before the expiry another event goes out; the expiry's comes
    // after it, with no command sent, within 15 ms of the expiry.
    advance(Duration::from_millis(999)).await;
    con.acquire("marker", "m", None, None).await.unwrap();
    advance(Duration::from_millis(16)).await;
    assert_eq!(
        next(&mut events).await,
        ("__lease__:marker".into(), "acquired:2:m".into())
    );
    assert_eq!(
        next(&mut events).await,
        ("__lease__:run".into(), "expired:1:w1".into())
    );
    // A takeover much later: no second `expired`.
    advance(Duration::from_secs(3)).await;
    con.acquire("run", "w2", None, None).await.unwrap();
    assert_eq!(next(&mut events).await.1, "acquired:3:w2");
    // Released after its expiry: `expired` first, then `released`.
    let short = con.acquire("short", "w", None, Some(0.5)).await.unwrap();
    assert_eq!(next(&mut events).await.1, "acquired:4:w");
    let mut quiet = server.client().await;
    advance(Duration::from_millis(600)).await;
    assert!(quiet.release(&short).await);
    assert_eq!(next(&mut events).await.1, "expired:4:w");
    assert_eq!(next(&mut events).await.1, "released:4:w");
    drop(lease);
}

#[tokio::test(start_paused = true)]
async fn explicit_now_and_retention_make_their_events_too() {
    let server = InProcess::start(&["--lease-retention", "2"]).await;
    let mut events = subscriber(&server.url(), "__lease__:*").await;
    let mut con = server.client().await;
    let probe = con.acquire("probe", "w", None, Some(100.0)).await.unwrap();
    let clock = probe.expires_at - 100.0;
    assert_eq!(next(&mut events).await.1, "acquired:1:w");
    // Registry time passing an expiry through an explicit `now` announces
    // it at once, before the command's own event; past retention too, the
    // lease is then reclaimed.
    con.acquire("ahead", "w", Some(clock), Some(10.0))
        .await
        .unwrap();
    assert_eq!(next(&mut events).await.1, "acquired:2:w");
    con.acquire("other", "w", Some(clock + 20.0), None)
        .await
        .unwrap();
    let expected: [(String, String); 3] = [
        ("__lease__:ahead".into(), "expired:2:w".into()),
        ("__lease__:other".into(), "acquired:3:w".into()),
        ("__lease__:ahead".into(), "reclaimed:2:w".into()),
    ];
    for message in expected {
        assert_eq!(next(&mut events).await, message);
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_on_a_logical_clock_is_announced_expired_at_once() {
    let server = InProcess::start(&[]).await;
    let mut events = subscriber(&server.url(), "__lease__:*").await;
    let mut con = server.client().await;
    // Small explicit `now` values are long past on the server's clock.
    con.acquire("logical", "w", Some(5.0), None).await.unwrap();
    assert_eq!(next(&mut events).await.1, "acquired:1:w");
    assert_eq!(next(&mut events).await.1, "expired:1:w");
    let lease = con.acquire("logical", "w2", Some(6.0), None).await;
    assert!(lease.is_none(), "still alive in registry time");
}

/// On the real clock, with the real binary: how long after `expires_at`
/// the `expired` message reaches a subscriber, with no other traffic.
#[test]
fn expired_reaches_a_subscriber_within_100_ms_of_expires_at() {
    let server = Server::start_with(&["--appendonly", "no"]);
    let mut subscriber = server.connect();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.subscribe("__leaseevent__:expired").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut con = server.typed();
    let mut expiries = HashMap::new();
    for i in 0..20 {
        let ttl = 0.3 + 0.037 * f64::from(i);
        let lease = con
            .acquire(&format!("run-{i}"), "w", None, Some(ttl))
            .unwrap();
        expiries.insert(lease.fencing_token, lease.expires_at);
    }
    let mut late = Vec::new();
    while late.len() < expiries.len() {
        let message = pubsub.get_message().expect("an expired event in time");
        let arrived = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let payload: String = message.get_payload().unwrap();
        let token: i64 = payload.split_once(':').unwrap().0.parse().unwrap();
        late.push(arrived - expiries[&token]);
    }
    late.sort_by(f64::total_cmp);
    let (p50, max) = (late[late.len() / 2], late[late.len() - 1]);
    println!(
        "expired after expires_at: p50 {:.1} ms, max {:.1} ms",
        p50 * 1e3,
        max * 1e3
    );
    // Never early (the server's clock is this machine's, read to the ms).
    assert!(late[0] > -0.002, "{late:?}");
    assert!(max < 0.1, "{late:?}");
}

// ---------------------------------------------------------------------
// Slow subscribers
// ---------------------------------------------------------------------

#[tokio::test]
async fn a_subscriber_that_never_reads_is_disconnected_and_the_others_keep_receiving() {
    let limit = ["--client-output-buffer-limit", "pubsub", "256kb", "0", "0"];
    let server = InProcess::start(&limit).await;
    // A subscriber that asks for everything and reads nothing, with a
    // small receive buffer so that the server's output backs up soon.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut slow = socket
        .connect(([127, 0, 0, 1], server.port).into())
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut slow, b"CLIENT ID\r\nPSUBSCRIBE *\r\n")
        .await
        .unwrap();
    let mut reader = server.client().await;
    while common::client::int(&reader.run(&["PUBSUB", "NUMPAT"]).await) == 0 {
        settle().await;
    }
    let listed = text(&reader.run(&["CLIENT", "LIST", "TYPE", "pubsub"]).await);
    let slow_id = listed.split_whitespace().next().unwrap().to_string();
    let mut reading = subscriber(&server.url(), "__leaseevent__:acquired").await;

    let mut con = server.client().await;
    let long = "x".repeat(200);
    let (batches, per_batch) = (40, 500);
    for batch in 0..batches {
        let runs = (0..per_batch).map(|i| format!("{long}-{batch}-{i}"));
        let cmd = common::client::acquire_all_cmd(runs, "w", 1.0, 10.0);
        at_one_instant(cmd.query_async::<()>(&mut con.con))
            .await
            .unwrap();
    }
    for token in 1..=batches * per_batch {
        let (_, message) = next(&mut reading).await;
        assert!(message.starts_with(&format!("{token}:")), "{message}");
    }
    let listed = text(&reader.run(&["CLIENT", "LIST"]).await);
    assert!(
        !listed.contains(&format!("{slow_id} ")),
        "still connected:\n{listed}"
    );
    assert_eq!(reader.info("clients").await["pubsub_clients"], "1");
}

// ---------------------------------------------------------------------
// Subscribed mode, as in Redis 7
// ---------------------------------------------------------------------

/// Sends `request` and returns the replies that come back, at least
/// `expected` bytes of them.
async fn exchange(stream: &mut tokio::net::TcpStream, request: &str, expected: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    while got.len() < expected.len() {
        let mut chunk = [0u8; 4096];
        let read = at_one_instant(stream.read(&mut chunk)).await.unwrap();
        assert!(read > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..read]);
    }
    assert_eq!(String::from_utf8_lossy(&got), expected, "for {request:?}");
}

#[tokio::test(start_paused = true)]
async fn a_resp2_subscriber_may_only_subscribe_ping_quit_or_reset() {
    let server = InProcess::start(&[]).await;
    let mut raw = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    let refused = |name: &str| {
        format!(
            "-ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / \
             RESET are allowed in this context\r\n"
        )
    };
    let subscribed = "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n\
                      *3\r\n$10\r\npsubscribe\r\n$1\r\n*\r\n:2\r\n";
    exchange(&mut raw, "SUBSCRIBE a\r\nPSUBSCRIBE *\r\n", subscribed).await;
    exchange(&mut raw, "LEASE.GET run\r\n", &refused("lease.get")).await;
    exchange(&mut raw, "PUBSUB NUMPAT\r\n", &refused("pubsub|numpat")).await;
    exchange(&mut raw, "CLIENT LIST\r\n", &refused("client|list")).await;
    // Unknown commands and wrong arity are told first, as in Redis.
    exchange(
        &mut raw,
        "PUBLISH a b\r\n",
        "-ERR unknown command 'PUBLISH', with args beginning with: 'a' 'b' \r\n",
    )
    .await;
    exchange(
        &mut raw,
        "PING\r\nPING hi\r\n",
        "*2\r\n$4\r\npong\r\n$0\r\n\r\n*2\r\n$4\r\npong\r\n$2\r\nhi\r\n",
    )
    .await;

    let mut con = server.client().await;
    let listed = text(&con.run(&["CLIENT", "LIST", "TYPE", "pubsub"]).await);
    assert!(
        listed.contains("flags=P ") && listed.contains("sub=1 psub=1 "),
        "{listed}"
    );
    let info = con.info("stats").await;
    assert_eq!(
        (&info["pubsub_channels"][..], &info["pubsub_patterns"][..]),
        ("1", "1")
    );
    let numsub = con.run(&["PUBSUB", "NUMSUB", "a", "b"]).await;
    let bulk = common::client::bulk_value;
    let counts = vec![bulk("a"), Value::Int(1), bulk("b"), Value::Int(0)];
    assert_eq!(numsub, Value::Array(counts));

    exchange(
        &mut raw,
        "UNSUBSCRIBE\r\nUNSUBSCRIBE\r\nPUNSUBSCRIBE *\r\n",
        "*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n\
         *3\r\n$11\r\nunsubscribe\r\n$-1\r\n:1\r\n\
         *3\r\n$12\r\npunsubscribe\r\n$1\r\n*\r\n:0\r\n",
    )
    .await;
    // Out of subscribed mode, anything runs again.
    exchange(&mut raw, "LEASE.GET run\r\nPING\r\n", "$-1\r\n+PONG\r\n").await;
    // RESET leaves subscribed mode too.
    exchange(
        &mut raw,
        "SUBSCRIBE b\r\nRESET\r\nLEASE.GET run\r\n",
        "*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:1\r\n+RESET\r\n$-1\r\n",
    )
    .await;
    assert_eq!(con.run(&["PUBSUB", "CHANNELS"]).await, Value::Array(vec![]));
    assert_eq!(con.info("clients").await["pubsub_clients"], "0");
}

#[tokio::test(start_paused = true)]
async fn a_resp3_subscriber_runs_commands_and_gets_its_messages_as_pushes() {
    let server = InProcess::start(&[]).await;
    let (mut con, mut pushes) = resp3_subscriber(&server, "__lease__:*").await;
    // Commands run while subscribed; the events they cause arrive as pushes.
    let lease = con.acquire("run", "w", None, Some(5.0)).await.unwrap();
    assert_eq!(lease.fencing_token, 1);
    let ping = con.run(&["PING"]).await;
    assert_eq!(ping, common::client::status("PONG"));
    assert_eq!(
        next_push(&mut pushes).await,
        ("__lease__:run".into(), "acquired:1:w".into())
    );
    assert!(con.release(&lease).await);
    assert_eq!(next_push(&mut pushes).await.1, "released:1:w");
    // `CLIENT KILL TYPE pubsub` closes subscribers, and only them.
    let mut admin = server.client().await;
    assert_eq!(
        admin.run(&["CLIENT", "KILL", "TYPE", "pubsub"]).await,
        Value::Int(1)
    );
    settle().await;
    assert_eq!(admin.run(&["PUBSUB", "NUMPAT"]).await, Value::Int(0));
    admin.ping().await;
}
