//! The Prometheus endpoint (`metrics-port`), fetched over plain TCP as a
//! scraper would: off by default, the same figures as INFO, the text and
//! OpenMetrics formats, 404 elsewhere, bad HTTP harming nothing, protected
//! mode, and a clean shutdown with a scraper connected; and a cluster
//! node's figures, scraped from three real nodes.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::binary::{Server, free_port};
use common::client::{bulk_value, lease_or_null};
use common::cluster::Cluster;
use common::inprocess::{InProcess, within_wall_clock};
use redis::Value;
use tokio::time::advance;

const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A server with the endpoint on a free port; checks the log names it.
fn start(args: &[&str]) -> (Server, u16) {
    let port = free_port();
    let port_text = port.to_string();
    let mut all = vec!["--metrics-port", port_text.as_str()];
    all.extend_from_slice(args);
    let server = Server::start_with(&all);
    let line = format!("Metrics endpoint on http://127.0.0.1:{port}/metrics");
    assert!(server.log().contains(&line), "{}", server.log());
    (server, port)
}

fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the metrics port");
    // Past the server's 10 s header timeout, so a hang shows as a failure.
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// Sends `request` and reads until the server closes the connection.
fn exchange(port: u16, request: &[u8]) -> Vec<u8> {
    let mut stream = connect(port);
    stream.write_all(request).unwrap();
    let mut response = Vec::new();
    if let Err(error) = stream.read_to_end(&mut response) {
        // A reset after a refusal still counts as closed.
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::ConnectionReset,
            "not closed: {error}"
        );
    }
    response
}

struct Response {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

impl Response {
    fn parse(bytes: &[u8]) -> Response {
        let text = String::from_utf8(bytes.to_vec()).expect("a UTF-8 response");
        let (head, body) = text.split_once("\r\n\r\n").expect("a complete head");
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap();
        let status = status_line
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("status line {status_line:?}"));
        let headers = lines
            .map(|line| {
                let (name, value) = line.split_once(':').expect("name: value");
                (name.to_ascii_lowercase(), value.trim().to_owned())
            })
            .collect();
        Response {
            status,
            headers,
            body: body.to_owned(),
        }
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers))
    }
}

fn request(method: &str, path: &str, extra: &str) -> Vec<u8> {
    format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n{extra}Connection: close\r\n\r\n")
        .into_bytes()
}

fn get(port: u16, path: &str) -> Response {
    Response::parse(&exchange(port, &request("GET", path, "")))
}

/// The samples of a text exposition: series (name and labels) to value.
fn samples(body: &str) -> HashMap<String, f64> {
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("series value");
            let value = value
                .parse()
                .unwrap_or_else(|_| panic!("value of {line:?}"));
            (series.to_owned(), value)
        })
        .collect()
}

fn sample(samples: &HashMap<String, f64>, series: &str) -> f64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("no {series} in {samples:?}"))
}

fn info_number(info: &HashMap<String, String>, name: &str) -> f64 {
    (info.get(name).and_then(|value| value.parse().ok()))
        .unwrap_or_else(|| panic!("no number {name} in INFO"))
}

#[test]
fn off_by_default() {
    for args in [&[][..], &["--metrics-port", "0"]] {
        let server = Server::start_with(args);
        assert!(
            !server.log().contains("Metrics endpoint"),
            "{}",
            server.log()
        );
        assert_eq!(
            server.typed().run(&["CONFIG", "GET", "metrics-port"]),
            redis::Value::Array(vec![bulk_value("metrics-port"), bulk_value("0")])
        );
    }
}

#[test]
fn the_figures_are_those_of_info() {
    let (server, port) = start(&[]);
    let mut con = server.typed();
    for words in [
        &["LEASE.ACQUIRE", "a", "w", "0"][..],
        &["LEASE.ACQUIRE", "b", "w", "0", "TTL", "100"],
        &["LEASE.ACQUIRE", "a", "v", "1"],
        &["LEASE.HEARTBEAT", "b:w:2", "2", "5"],
        &["LEASE.VALIDATE", "a", "a:w:1", "1", "12"],
        &["LEASE.GET", "a", "12"],
        &["LEASE.GET", "nobody", "12"],
        &["LEASE.RELEASE", "nothing:w:9", "9"],
    ] {
        con.run(words);
    }
    let info = con.info("all");
    let response = get(port, "/metrics");
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), TEXT_FORMAT);
    let body = &response.body;
    let samples = samples(body);

    let version = format!("leased_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION"));
    assert_eq!(sample(&samples, &version), 1.0);
    // A single node shows no cluster figures.
    assert!(!body.contains("leased_cluster"), "{body}");
    // At registry time 12, a (expired at 10) is expired and b active.
    assert_eq!(sample(&samples, "leased_leases{state=\"active\"}"), 1.0);
    assert_eq!(sample(&samples, "leased_leases{state=\"expired\"}"), 1.0);
    for (series, field) in [
        ("leased_leases{state=\"active\"}", "leases_active"),
        ("leased_leases{state=\"expired\"}", "leases_expired"),
        ("leased_last_fencing_token", "last_fencing_token"),
        ("leased_token_ceiling", "token_ceiling"),
        ("leased_leases_reclaimed_total", "leases_reclaimed"),
        ("leased_registry_time_seconds", "registry_time"),
        ("leased_connected_clients", "connected_clients"),
        ("leased_max_clients", "maxclients"),
        (
            "leased_connections_received_total",
            "total_connections_received",
        ),
        (
            "leased_commands_processed_total",
            "total_commands_processed",
        ),
        ("leased_rejected_connections_total", "rejected_connections"),
        ("leased_keyspace_hits_total", "keyspace_hits"),
        ("leased_keyspace_misses_total", "keyspace_misses"),
        ("leased_aof_enabled", "aof_enabled"),
        ("leased_aof_size_bytes", "aof_current_size"),
        ("leased_aof_base_size_bytes", "aof_base_size"),
        ("leased_aof_rewrites_total", "aof_rewrites"),
        ("leased_aof_rewrite_in_progress", "aof_rewrite_in_progress"),
    ] {
        assert_eq!(
            sample(&samples, series),
            info_number(&info, field),
            "{series} against {field}"
        );
    }
    assert_eq!(sample(&samples, "leased_last_fencing_token"), 2.0);
    assert_eq!(sample(&samples, "leased_registry_time_seconds"), 12.0);
    for command in ["acquire", "heartbeat", "validate", "release", "get"] {
        for result in ["ok", "failed"] {
            let series =
                format!("leased_lease_commands_total{{command=\"{command}\",result=\"{result}\"}}");
            let field = format!("{command}_{result}");
            assert_eq!(sample(&samples, &series), info_number(&info, &field));
        }
    }
    let acquires = "leased_lease_commands_total{command=\"acquire\",result=\"failed\"}";
    assert_eq!(sample(&samples, acquires), 1.0);
    for series in [
        "leased_aof_last_write_ok",
        "leased_aof_last_fsync_ok",
        "leased_aof_last_rewrite_ok",
    ] {
        assert_eq!(sample(&samples, series), 1.0, "{series}");
    }
    // Figures that only grow, or that move on their own, are at least
    // what INFO showed just before.
    for (series, field) in [
        ("leased_uptime_seconds", "uptime_in_seconds"),
        ("leased_cpu_user_seconds_total", "used_cpu_user"),
        ("leased_cpu_system_seconds_total", "used_cpu_sys"),
        ("leased_net_input_bytes_total", "total_net_input_bytes"),
        ("leased_net_output_bytes_total", "total_net_output_bytes"),
        ("leased_memory_peak_bytes", "used_memory_peak"),
    ] {
        assert!(
            sample(&samples, series) >= info_number(&info, field),
            "{series}"
        );
    }
    assert!(sample(&samples, "leased_memory_used_bytes") > 0.0);
    assert!(sample(&samples, "leased_memory_rss_bytes") > 0.0);

    // Every sample has its HELP and TYPE; counters, and only they, end in
    // _total; a histogram's samples end in _bucket, _sum and _count.
    for series in samples.keys() {
        let name = series.split('{').next().unwrap();
        let histogram = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|family| body.contains(&format!("# TYPE {family} histogram\n")));
        let (name, kind) = match histogram {
            Some(family) => (family, "histogram"),
            None if name.ends_with("_total") => (name, "counter"),
            None => (name, "gauge"),
        };
        assert!(body.contains(&format!("# TYPE {name} {kind}\n")), "{name}");
        assert!(body.contains(&format!("# HELP {name} ")), "{name}");
    }
}

#[test]
fn the_figures_follow_the_server() {
    let (server, port) = start(&["--maxclients", "1", "--appendonly", "no"]);
    let scrape = || samples(&get(port, "/metrics").body);
    let before = scrape();
    assert_eq!(sample(&before, "leased_connected_clients"), 0.0);
    assert_eq!(sample(&before, "leased_aof_enabled"), 0.0);
    assert!(!before.contains_key("leased_aof_size_bytes"));
    // Before any `now`, there is no registry time to show.
    assert!(!before.contains_key("leased_registry_time_seconds"));

    let mut con = server.typed();
    con.acquire("run", "w", Some(100.0), None).unwrap();
    let mut refused = server.raw();
    assert_eq!(
        common::raw::read_to_close(&mut refused),
        b"-ERR max number of clients reached\r\n"
    );
    let after = scrape();
    assert_eq!(sample(&after, "leased_connected_clients"), 1.0);
    assert_eq!(sample(&after, "leased_rejected_connections_total"), 1.0);
    assert_eq!(
        sample(&after, "leased_connections_received_total"),
        sample(&before, "leased_connections_received_total") + 1.0
    );
    assert_eq!(sample(&after, "leased_leases{state=\"active\"}"), 1.0);
    assert_eq!(sample(&after, "leased_last_fencing_token"), 1.0);
    assert_eq!(sample(&after, "leased_registry_time_seconds"), 100.0);
    // Scrapes are not client commands.
    assert_eq!(
        sample(&scrape(), "leased_commands_processed_total"),
        sample(&after, "leased_commands_processed_total")
    );
}

#[test]
fn openmetrics_when_the_scraper_asks_for_it() {
    let (_server, port) = start(&[]);
    let accept = "Accept: application/openmetrics-text;version=1.0.0;q=0.5,\
                  text/plain;version=0.0.4;q=0.3\r\n";
    let response = Response::parse(&exchange(port, &request("GET", "/metrics", accept)));
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), OPENMETRICS);
    let body = &response.body;
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(body.contains("# TYPE leased info\n"), "{body}");
    assert!(
        body.contains("# TYPE leased_lease_commands counter\n"),
        "{body}"
    );
    assert!(
        body.contains("# UNIT leased_memory_used_bytes bytes\n"),
        "{body}"
    );
    let samples = samples(body);
    assert_eq!(sample(&samples, "leased_last_fencing_token"), 0.0);
}

#[test]
fn other_paths_are_not_found_and_other_methods_not_allowed() {
    let (_server, port) = start(&[]);
    for path in ["/", "/metrics/", "/metricsx", "/favicon.ico", "/info"] {
        assert_eq!(get(port, path).status, 404, "{path}");
    }
    // A query string does not change the path.
    assert_eq!(get(port, "/metrics?name[]=x").status, 200);
    let post = Response::parse(&exchange(
        port,
        &request("POST", "/metrics", "Content-Length: 0\r\n"),
    ));
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), "GET, HEAD");
    let head = Response::parse(&exchange(port, &request("HEAD", "/metrics", "")));
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-type"), TEXT_FORMAT);
    assert!(head.body.is_empty(), "{}", head.body);
}

/// [`exchange`] with a server in the test's runtime, whose 10 s header
/// timeout passes on tokio's clock while the test waits.
async fn exchange_in_process(port: u16, request: &[u8]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = ("127.0.0.1", port);
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut response = Vec::new();
    if let Err(error) = within_wall_clock(stream.read_to_end(&mut response)).await {
        // A reset after a refusal still counts as closed.
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::ConnectionReset,
            "not closed: {error}"
        );
    }
    response
}

#[tokio::test(start_paused = true)]
async fn bad_http_harms_nothing() {
    use tokio::io::AsyncWriteExt;
    let server = InProcess::start(&["--metrics-port", &free_port().to_string()]).await;
    let port = server.metrics_port.expect("the metrics endpoint");
    // Held open, half a request: the others are served meanwhile.
    let mut stalled = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stalled.write_all(b"GET /metr").await.unwrap();

    let huge_header = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100_000)
    );
    let garbage: Vec<Vec<u8>> = vec![
        (0..=255u8).cycle().take(4096).collect(),
        // Blank lines before a request are allowed: the header timeout
        // closes this one.
        b"\r\n\r\n\r\n".to_vec(),
        b"GET /metrics HTTP/9.9\r\n\r\n".to_vec(),
        b"GET\r\n\r\n".to_vec(),
        b"*1\r\n$4\r\nPING\r\n".to_vec(),
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
        b"GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n".to_vec(),
        huge_header.into_bytes(),
    ];
    for input in &garbage {
        let response = exchange_in_process(port, input).await;
        let text = String::from_utf8_lossy(&response);
        assert!(
            response.is_empty() || text.starts_with("HTTP/1.1 4"),
            "{:?} got {text:?}",
            String::from_utf8_lossy(&input[..input.len().min(40)])
        );
    }

    let scraped = exchange_in_process(port, &request("GET", "/metrics", "")).await;
    assert_eq!(Response::parse(&scraped).status, 200);
    server.client().await.ping().await;
    drop(stalled);
}

#[test]
fn shutdown_is_clean_with_a_scraper_connected() {
    let (mut server, port) = start(&[]);
    // A keep-alive scraper, idle after its first scrape.
    let mut scraper = connect(port);
    scraper
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 15];
    scraper.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200 OK");
    // Half of a second request.
    scraper.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    server.stop();
    assert!(server.log().contains("bye bye"));
}

#[test]
fn requirepass_does_not_guard_the_endpoint() {
    let (server, port) = start(&["--requirepass", "secret"]);
    let mut con = server.typed();
    assert!(con.error(&["DBSIZE"]).starts_with("NOAUTH"));
    let response = get(port, "/metrics");
    assert_eq!(response.status, 200);
    assert!(!response.body.contains("secret"));
}

#[test]
fn protected_mode_covers_the_endpoint() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("data");
    let port = free_port().to_string();
    let exited = common::binary::run_to_exit(&[
        "--port",
        "0",
        "--dir",
        dir.to_str().unwrap(),
        "--bind",
        "0.0.0.0",
        "--metrics-port",
        &port,
    ]);
    assert!(!exited.status.success());
    assert!(
        exited.output().contains("protected mode"),
        "{}",
        exited.output()
    );
}

#[test]
fn a_taken_metrics_port_stops_the_start_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("data");
    let Err(output) = Server::start_in(&dir, &["--metrics-port", &port]) else {
        panic!("started on a taken metrics port");
    };
    let expected = format!("Could not create server metrics listening socket 127.0.0.1:{port}");
    assert!(output.contains(&expected), "{output}");
}

/// A scripted fleet: a worker that heartbeats early, one that heartbeats
/// late, one too late (refused, then taken over), one with a made-up lease,
/// a blocked acquire that is served and one that times out, an acquire
/// held off by a lock delay, and a subscriber. INFO and the endpoint show
/// the same figures, and `CONFIG RESETSTAT` zeroes them.
#[tokio::test(start_paused = true)]
async fn a_fleet_that_heartbeats_late_shows_in_info_and_metrics() {
    // Leases are kept (retention 0): a reclaim would end the logical-clock
    // tenures below as expired, as soon as the server's clock is seen.
    let metrics_port = free_port().to_string();
    let args = ["--metrics-port", &metrics_port, "--lease-retention", "0"];
    let server = InProcess::start(&args).await;
    let port = server.metrics_port.expect("the metrics endpoint");
    let mut con = server.client().await;
    // On a logical clock (explicit `now`), TTL 10.
    let ttl = Some(10.0);
    let early = con.acquire("early", "w", Some(0.0), ttl).await.unwrap();
    let late = con.acquire("late", "w", Some(0.0), ttl).await.unwrap();
    let stalled = con.acquire("stalled", "w", Some(0.0), ttl).await.unwrap();
    assert!(con.heartbeat(&early, Some(1.0)).await); // slack 0.9
    assert!(con.heartbeat(&early, Some(2.0)).await); // 0.9 again
    assert!(con.heartbeat(&late, Some(9.0)).await); // 0.1
    assert!(!con.heartbeat(&stalled, Some(10.0)).await); // expired
    let took = con.acquire("stalled", "v", Some(12.0), ttl).await.unwrap();
    assert!(!con.heartbeat(&stalled, Some(12.0)).await); // taken over
    let mut made_up = took.clone();
    made_up.lease_id = b"nobody:w:99".to_vec();
    made_up.fencing_token = 99;
    assert!(!con.heartbeat(&made_up, Some(12.0)).await); // unknown
    // A lock delay holds an acquire off after an expiry.
    let words = [
        "LEASE.ACQUIRE",
        "delayed",
        "w",
        "20",
        "TTL",
        "1",
        "LOCKDELAY",
        "5",
    ];
    con.run(&words).await;
    assert_eq!(con.acquire("delayed", "v", Some(22.0), ttl).await, None);

    // On the server's clock every lease above is long past: released late.
    assert!(con.release(&late).await);
    let fresh = con.acquire("fresh", "w", None, ttl).await.unwrap();
    assert!(con.release(&fresh).await);

    // A blocked acquire served after 2 s, and one that times out.
    let holder = con.acquire("wanted", "h", None, Some(2.0)).await.unwrap();
    let served = blocked(&server, "wanted", 0).await;
    advance(Duration::from_secs(3)).await;
    assert!(lease_or_null(&served.await.unwrap().unwrap()).is_some());
    let held = con.acquire("held", "h", None, Some(60.0)).await.unwrap();
    let timing_out = blocked(&server, "held", 100).await;
    advance(Duration::from_millis(200)).await;
    assert_eq!(timing_out.await.unwrap().unwrap(), Value::Nil);

    // A subscriber makes the registry publish: one acquire, one event.
    let mut subscriber = server.client().await;
    subscriber.run(&["PSUBSCRIBE", "__lease__:*"]).await;
    con.acquire("watched", "w", None, ttl).await.unwrap();

    let info = con.info("leases").await;
    let scraped = exchange_in_process(port, &request("GET", "/metrics", "")).await;
    let samples = samples(&Response::parse(&scraped).body);
    for (field, series, value) in [
        (
            "heartbeats_refused_expired",
            "leased_heartbeats_refused_total{reason=\"expired\"}",
            1.0,
        ),
        (
            "heartbeats_refused_taken_over",
            "leased_heartbeats_refused_total{reason=\"taken_over\"}",
            1.0,
        ),
        (
            "heartbeats_refused_unknown",
            "leased_heartbeats_refused_total{reason=\"unknown\"}",
            1.0,
        ),
        (
            "tenures_released",
            "leased_tenures_ended_total{end=\"released\"}",
            1.0,
        ),
        (
            "tenures_released_late",
            "leased_tenures_ended_total{end=\"released-late\"}",
            1.0,
        ),
        // The stalled worker's lease at the takeover; the holder of
        // "wanted" at its waiter's grant.
        (
            "tenures_expired",
            "leased_tenures_ended_total{end=\"expired\"}",
            2.0,
        ),
        ("acquires_waited", "leased_acquires_waited_total", 1.0),
        ("acquires_timed_out", "leased_acquires_timed_out_total", 1.0),
        (
            "acquires_lock_delayed",
            "leased_acquires_lock_delayed_total",
            1.0,
        ),
        ("events_published", "leased_events_published_total", 1.0),
    ] {
        assert_eq!(info_number(&info, field), value, "INFO {field}");
        assert_eq!(sample(&samples, series), value, "{series}");
    }
    assert_eq!(
        info["heartbeat_slack"],
        "le_0.1=1,le_0.2=1,le_0.3=1,le_0.4=1,le_0.5=1,le_0.6=1,le_0.7=1,le_0.8=1,\
         le_0.9=3,le_1=3,le_inf=3,sum=1.9,count=3"
    );
    for (le, count) in [("0.1", 1.0), ("0.8", 1.0), ("0.9", 3.0), ("+Inf", 3.0)] {
        let series = format!("leased_heartbeat_slack_ratio_bucket{{le=\"{le}\"}}");
        assert_eq!(sample(&samples, &series), count, "{series}");
    }
    // The waiter waited 2 s (the holder's TTL), on tokio's clock.
    let waits = &info["acquire_wait_seconds"];
    assert!(waits.starts_with("le_0.001=0,"), "{waits}");
    assert!(waits.contains(",le_1=0,le_5=1,"), "{waits}");
    let wait_series = "leased_acquire_wait_seconds_bucket{le=\"5\"}";
    assert_eq!(sample(&samples, wait_series), 1.0);
    assert_eq!(sample(&samples, "leased_acquire_wait_seconds_count"), 1.0);
    assert_eq!(sample(&samples, "leased_pubsub_clients"), 1.0);

    assert_eq!(con.run(&["CONFIG", "RESETSTAT"]).await, Value::Okay);
    let info = con.info("leases").await;
    for field in [
        "heartbeats_refused_expired",
        "tenures_expired",
        "acquires_waited",
    ] {
        assert_eq!(info_number(&info, field), 0.0, "{field} after RESETSTAT");
    }
    assert!(info["heartbeat_slack"].ends_with("count=0"));
    drop((held, holder));
}

/// A blocked `LEASE.ACQUIRE run waiter BLOCK ms` on a connection of its
/// own, once the server has queued it.
async fn blocked(
    server: &InProcess,
    run: &str,
    block_ms: u64,
) -> tokio::task::JoinHandle<redis::RedisResult<Value>> {
    let mut con = server.client().await;
    let words: Vec<String> = [
        "LEASE.ACQUIRE",
        run,
        "waiter",
        "BLOCK",
        &block_ms.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let queued = tokio::spawn(async move {
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        common::client::words(&words)
            .query_async::<Value>(&mut con.con)
            .await
    });
    let mut admin = server.client().await;
    while admin.run(&["LEASE.WAITERS", run]).await == Value::Array(vec![]) {
        common::inprocess::settle().await;
    }
    queued
}

fn scrape(port: u16) -> HashMap<String, f64> {
    let response = get(port, "/metrics");
    assert_eq!(response.status, 200);
    samples(&response.body)
}

/// Scrapes node `port` every 20 ms until `done` holds of its samples
/// (`patience` at most); returns them.
fn scrape_until(
    port: u16,
    patience: Duration,
    what: &str,
    done: impl Fn(&HashMap<String, f64>) -> bool,
) -> HashMap<String, f64> {
    let deadline = Instant::now() + patience;
    loop {
        let samples = scrape(port);
        if done(&samples) {
            return samples;
        }
        assert!(
            Instant::now() < deadline,
            "{what} not seen within {patience:?}: {samples:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A series' value, or -1 if the scrape lacks it (for polls, which then
/// go on; a leader elected meanwhile lacks its followers' lag at first).
fn or_less(samples: &HashMap<String, f64>, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or(-1.0)
}

fn bus_errors(samples: &HashMap<String, f64>, error: &str) -> f64 {
    sample(
        samples,
        &format!("leased_cluster_bus_errors_total{{error=\"{error}\"}}"),
    )
}

/// Three real nodes, each with its endpoint: role, term and leader agree
/// with `ROLE` and `CLUSTER INFO`; writes move the indexes; a killed
/// follower's lag grows on the leader; a node restarted with a wrong
/// `cluster-secret` makes refused and rejected handshakes count, on both
/// sides.
#[test]
fn a_cluster_node_shows_its_role_indexes_lag_and_bus_errors() {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let metrics_args = |i: usize| vec!["--metrics-port".to_string(), ports[i].to_string()];
    let binary = Path::new(env!("CARGO_BIN_EXE_leased"));
    let secret = ["--cluster-secret", "right"];
    let mut cluster = Cluster::start_each(binary, 3, &secret, metrics_args);
    let leader = cluster.leader(Duration::from_secs(10));
    for (i, port) in ports.iter().enumerate() {
        let info = cluster.info(i).expect("CLUSTER INFO");
        let samples = scrape(*port);
        let (role, redis_role) = match i == leader {
            true => ("leader", "master"),
            false => ("follower", "slave"),
        };
        assert_eq!(cluster.role(i).as_deref(), Some(redis_role));
        let role_series = format!("leased_cluster_role{{role=\"{role}\"}}");
        assert_eq!(sample(&samples, &role_series), 1.0, "node {}", i + 1);
        let roles = samples
            .iter()
            .filter(|(k, _)| k.starts_with("leased_cluster_role{"));
        assert_eq!(roles.map(|(_, v)| v).sum::<f64>(), 1.0);
        assert_eq!(sample(&samples, "leased_cluster_node_id"), (i + 1) as f64);
        assert_eq!(
            sample(&samples, "leased_cluster_leader_id"),
            (leader + 1) as f64
        );
        assert_eq!(
            sample(&samples, "leased_cluster_term"),
            info_number(&info, "cluster_term")
        );
        assert_eq!(sample(&samples, "leased_cluster_clock_skewed"), 0.0);
        assert_eq!(bus_errors(&samples, "refused"), 0.0);
        // Only the leader knows its followers' progress.
        let lags = samples
            .keys()
            .filter(|k| k.starts_with("leased_cluster_follower_lag"));
        assert_eq!(lags.count(), if i == leader { 2 } else { 0 });
    }
    // The leader won the election it started.
    let before = scrape(ports[leader]);
    assert!(sample(&before, "leased_cluster_elections_won_total") >= 1.0);
    assert!(sample(&before, "leased_cluster_elections_started_total") >= 1.0);

    let mut con = cluster.connect(leader);
    let acquire = |con: &mut redis::Connection, run: String| {
        let reply: redis::Value = redis::cmd("LEASE.ACQUIRE")
            .arg(run)
            .arg("w")
            .arg("TTL")
            .arg(60)
            .query(con)
            .expect("acquire");
        assert!(
            matches!(reply, Value::Array(_) | Value::Map(_)),
            "{reply:?}"
        );
    };
    for n in 0..20 {
        acquire(&mut con, format!("m{n}"));
    }
    // Each acquire was its own entry, committed and applied everywhere.
    let commit = sample(&before, "leased_cluster_commit_index");
    for port in &ports {
        scrape_until(*port, Duration::from_secs(5), "the 20 entries", |samples| {
            or_less(samples, "leased_cluster_commit_index") >= commit + 20.0
                && or_less(samples, "leased_cluster_applied_index") >= commit + 20.0
        });
    }

    let follower = (leader + 1) % 3;
    let other = (leader + 2) % 3;
    let dead = format!("leased_cluster_follower_lag{{node=\"{}\"}}", follower + 1);
    let live = format!("leased_cluster_follower_lag{{node=\"{}\"}}", other + 1);
    cluster.kill9(follower);
    for n in 0..30 {
        acquire(&mut con, format!("k{n}"));
    }
    let lagging = scrape_until(
        ports[leader],
        Duration::from_secs(5),
        "the killed follower's lag",
        |samples| or_less(samples, &dead) >= 30.0 && (0.0..5.0).contains(&or_less(samples, &live)),
    );
    println!(
        "lag of the killed follower {}, of the live one {}",
        sample(&lagging, &dead),
        sample(&lagging, &live)
    );

    // Back with the wrong secret: each side refuses the other's handshakes.
    let mut wrong = metrics_args(follower);
    wrong.extend(["--cluster-secret".to_string(), "wrong".to_string()]);
    cluster.set_own_args(follower, wrong);
    cluster.restart(follower);
    let patience = Duration::from_secs(10);
    let refusing = |samples: &HashMap<String, f64>| {
        bus_errors(samples, "refused") >= 1.0 && bus_errors(samples, "rejected") >= 1.0
    };
    let on_leader = scrape_until(ports[leader], patience, "refusals on the leader", refusing);
    let on_wrong = scrape_until(ports[follower], patience, "refusals on the node", refusing);
    assert_eq!(bus_errors(&on_leader, "crc"), 0.0);
    // It never catches up: the leader's lag for it stays.
    assert!(sample(&on_leader, &dead) >= 30.0, "{on_leader:?}");
    // (Its own status may still name the leader it knew before its
    // restart: it hears from no one, and stands in no election before
    // its clock is judged, which needs its peers.)
    println!(
        "the node with the wrong secret names leader {}",
        sample(&on_wrong, "leased_cluster_leader_id")
    );
    assert!(
        cluster
            .log(follower)
            .contains("cluster-secret proof does not match"),
        "{}",
        cluster.log(follower)
    );
    // Its clients are told to try again: nothing reached the leader.
    let mut con = cluster.connect(follower);
    let refused = redis::cmd("LEASE.ACQUIRE")
        .arg("x")
        .arg("w")
        .query::<Value>(&mut con)
        .expect_err("an acquire through the node with the wrong secret");
    assert_eq!(refused.code(), Some("TRYAGAIN"), "{refused}");
    println!("{refused}");
    // The leader still leads the other node.
    assert_eq!(cluster.leader_among(&[leader, other], patience), leader);
}
