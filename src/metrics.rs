//! The Prometheus endpoint (`metrics-port`, off by default): `GET /metrics`
//! answers with the server's and the registry's figures in the Prometheus
//! text format, or in OpenMetrics for a scraper whose `Accept` header asks
//! for it. Any other path is a 404.
//!
//! The figures are pulled at scrape time: the endpoint asks the core for
//! the report INFO renders too, and reads the server's own figures beside
//! it, so the request path pays nothing for the endpoint and the two never
//! disagree. Every metric reads a typed value, never INFO's text.
//! prometheus-client encodes the metrics; hyper speaks HTTP/1.1.
//!
//! In cluster mode the node's cluster figures follow ([`cluster`]); a
//! single node shows none.
//!
//! It listens on the `bind` addresses, so protected mode covers it as it
//! covers the RESP port; `requirepass` does not. The figures carry no lease,
//! run or worker id.

mod cluster;

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ACCEPT, ALLOW, CONTENT_TYPE, HeaderMap, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeMetric, NoLabelSet, prometheus_text, text,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::core::{CommandStats, CoreHandle, CoreReport};
use crate::histogram::Histogram;
use crate::info;
use crate::registry::{Refused, TenureEnd};
use crate::state::Shared;
use crate::system::{self, CpuTimes, Memory};
use Kind::{Counter, Gauge};

/// Scrapers connected at once; a connection past this is closed at once.
const MAX_CONNECTIONS: usize = 64;
/// How long a scraper may take to send a request's headers, and may stay
/// idle between two requests.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of a request buffered (hyper's smallest allowed).
const MAX_BUFFER: usize = 8 * 1024;
/// How long shutdown waits for a scrape under way.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves scrapers on `listener` until shutdown.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    core: CoreHandle,
    tracker: TaskTracker,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Usually out of file descriptors: wait instead of spinning.
                warn!("Accepting a metrics connection failed: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Dropping the stream closes it.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!("Closing a metrics connection: {MAX_CONNECTIONS} are open");
            continue;
        };
        let (shared, core) = (shared.clone(), core.clone());
        tracker.spawn(async move {
            serve_connection(stream, &shared, core).await;
            drop(slot);
        });
    }
}

/// One scraper's connection; at shutdown, a scrape under way gets
/// [`SHUTDOWN_GRACE`] to finish.
async fn serve_connection(stream: TcpStream, shared: &Arc<Shared>, core: CoreHandle) {
    let service_shared = shared.clone();
    let service = service_fn(move |request| respond(request, service_shared.clone(), core.clone()));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_BUFFER);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        _ = shared.shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            match tokio::time::timeout(SHUTDOWN_GRACE, connection).await {
                Ok(result) => result,
                Err(_) => return,
            }
        }
    };
    if let Err(error) = result {
        debug!("Metrics connection closed: {error}");
    }
}

async fn respond(
    request: Request<Incoming>,
    shared: Arc<Shared>,
    core: CoreHandle,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.uri().path() != "/metrics" {
        return Ok(plain(StatusCode::NOT_FOUND, "Not found: try /metrics\n"));
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed\n");
        let allowed = HeaderValue::from_static("GET, HEAD");
        response.headers_mut().insert(ALLOW, allowed);
        return Ok(response);
    }
    let Some(figures) = scrape(&shared, &core).await else {
        let status = StatusCode::SERVICE_UNAVAILABLE;
        return Ok(plain(status, "The server is shutting down\n"));
    };
    let openmetrics = wants_openmetrics(request.headers());
    let Ok(body) = encode(figures, openmetrics) else {
        let status = StatusCode::INTERNAL_SERVER_ERROR;
        return Ok(plain(status, "The metrics could not be encoded\n"));
    };
    let content_type = if openmetrics {
        OPENMETRICS_CONTENT_TYPE
    } else {
        prometheus_text::CONTENT_TYPE
    };
    Ok(with_type(StatusCode::OK, content_type, body))
}

fn plain(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    with_type(status, "text/plain; charset=utf-8", body.to_owned())
}

fn with_type(
    status: StatusCode,
    content_type: &'static str,
    body: String,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let value = HeaderValue::from_static(content_type);
    response.headers_mut().insert(CONTENT_TYPE, value);
    response
}

/// OpenMetrics if the scraper names it (Prometheus does), else the
/// classic text format, which every scraper reads.
fn wants_openmetrics(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("application/openmetrics-text"))
}

/// The figures of one scrape: the core's report and the server's own,
/// read now.
async fn scrape(shared: &Shared, core: &CoreHandle) -> Option<Scrape> {
    let report = core.report().await?;
    let count = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let stats = &shared.stats;
    Some(Scrape {
        report: *report,
        uptime: shared.started.elapsed().as_secs(),
        connected_clients: shared.clients.len() as u64,
        maxclients: shared.config().maxclients as u64,
        memory: stats.memory(),
        cpu: system::cpu_times(),
        connections_received: count(&stats.total_connections_received),
        commands_processed: count(&stats.total_commands_processed),
        net_input: count(&stats.net_input_bytes),
        net_output: count(&stats.net_output_bytes),
        rejected_connections: count(&stats.rejected_connections),
        pubsub_clients: info::pubsub_clients(shared) as u64,
        cluster: (shared.cluster())
            .map(|status| cluster::Figures::read(status, &shared.cluster_stats)),
    })
}

fn encode(scrape: Scrape, openmetrics: bool) -> Result<String, fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut out = String::new();
    if openmetrics {
        text::encode(&mut out, &registry)?;
    } else {
        prometheus_text::encode(&mut out, &registry)?;
    }
    Ok(out)
}

/// What kind of metric, and so how Prometheus treats it.
#[derive(Clone, Copy)]
enum Kind {
    Gauge,
    Counter,
}

/// A metric with a single value. The encoder appends the unit and, for a
/// counter, `_total` to the name.
struct Metric {
    name: &'static str,
    kind: Kind,
    /// `bytes`, `seconds`, or empty.
    unit: &'static str,
    help: &'static str,
    /// Its value in a scrape; `None` leaves the metric out.
    value: fn(&Scrape) -> Option<Number>,
}

const fn metric(
    name: &'static str,
    kind: Kind,
    unit: &'static str,
    help: &'static str,
    value: fn(&Scrape) -> Option<Number>,
) -> Metric {
    Metric {
        name,
        kind,
        unit,
        help,
        value,
    }
}

fn int(value: u64) -> Option<Number> {
    Some(Number::Integer(value))
}

fn flag(value: bool) -> Option<Number> {
    int(u64::from(value))
}

fn seconds(time: Duration) -> Option<Number> {
    Some(Number::Float(time.as_secs_f64()))
}

/// Every metric with a single value. Figures the server does not have
/// (the log's, with `appendonly no`; registry time before any) give none.
static METRICS: &[Metric] = &[
    metric(
        "leased_uptime",
        Gauge,
        "seconds",
        "Time since the server started",
        |s| int(s.uptime),
    ),
    metric(
        "leased_connected_clients",
        Gauge,
        "",
        "Clients connected, plain and TLS",
        |s| int(s.connected_clients),
    ),
    metric(
        "leased_max_clients",
        Gauge,
        "",
        "Clients that may connect at once (maxclients)",
        |s| int(s.maxclients),
    ),
    metric(
        "leased_memory_used",
        Gauge,
        "bytes",
        "Memory allocated by the server, according to its allocator",
        |s| int(s.memory.allocator.allocated),
    ),
    metric(
        "leased_memory_rss",
        Gauge,
        "bytes",
        "Resident set size of the server's process",
        |s| int(s.memory.rss),
    ),
    metric(
        "leased_memory_peak",
        Gauge,
        "bytes",
        "The most memory allocated at once since the start",
        |s| int(s.memory.peak),
    ),
    metric(
        "leased_aof_enabled",
        Gauge,
        "",
        "1 if changes go to the append-only log (appendonly yes)",
        |s| flag(s.report.log.is_some()),
    ),
    metric(
        "leased_aof_rewrite_in_progress",
        Gauge,
        "",
        "1 while the append-only log is being rewritten",
        |s| {
            flag(
                s.report
                    .log
                    .as_ref()
                    .is_some_and(|log| log.rewrite_in_progress),
            )
        },
    ),
    metric(
        "leased_aof_last_rewrite_ok",
        Gauge,
        "",
        "1 if the last rewrite of the append-only log succeeded (or none was tried), 0 if it failed",
        |s| flag(s.report.log.as_ref().is_none_or(|log| log.last_rewrite_ok)),
    ),
    metric(
        "leased_aof_rewrites",
        Counter,
        "",
        "Rewrites of the append-only log completed since the start",
        |s| int(s.report.log.as_ref().map_or(0, |log| log.rewrites)),
    ),
    metric(
        "leased_aof_last_write_ok",
        Gauge,
        "",
        "1 if the last write to the append-only log succeeded, 0 if it failed: changes are refused until one succeeds",
        |s| flag(s.report.log.as_ref().is_none_or(|log| log.last_write_ok)),
    ),
    metric(
        "leased_aof_size",
        Gauge,
        "bytes",
        "Size of the append-only log",
        |s| int(s.report.log.as_ref()?.size),
    ),
    metric(
        "leased_aof_base_size",
        Gauge,
        "bytes",
        "Size of the append-only log after the last rewrite or load",
        |s| int(s.report.log.as_ref()?.base_size),
    ),
    metric(
        "leased_aof_last_fsync_ok",
        Gauge,
        "",
        "1 if the last fsync of the append-only log succeeded, 0 if it failed",
        |s| flag(s.report.log.as_ref()?.last_fsync_ok),
    ),
    metric(
        "leased_token_ceiling",
        Gauge,
        "",
        "The highest fencing token reserved on disk: tokens up to it may be issued without a disk write",
        |s| int(s.report.token_ceiling),
    ),
    metric(
        "leased_connections_received",
        Counter,
        "",
        "Client connections accepted",
        |s| int(s.connections_received),
    ),
    metric(
        "leased_commands_processed",
        Counter,
        "",
        "Commands received from clients, including refused ones",
        |s| int(s.commands_processed),
    ),
    metric(
        "leased_net_input",
        Counter,
        "bytes",
        "Bytes read from clients",
        |s| int(s.net_input),
    ),
    metric(
        "leased_net_output",
        Counter,
        "bytes",
        "Bytes written to clients",
        |s| int(s.net_output),
    ),
    metric(
        "leased_rejected_connections",
        Counter,
        "",
        "Connections refused because maxclients clients were connected",
        |s| int(s.rejected_connections),
    ),
    metric(
        "leased_keyspace_hits",
        Counter,
        "",
        "LEASE.GET, LEASE.VALIDATE and LEASE.HEARTBEAT that found the lease they named",
        |s| int(s.report.commands.hits),
    ),
    metric(
        "leased_keyspace_misses",
        Counter,
        "",
        "LEASE.GET, LEASE.VALIDATE and LEASE.HEARTBEAT that did not find the lease they named",
        |s| int(s.report.commands.misses),
    ),
    metric(
        "leased_cpu_system",
        Counter,
        "seconds",
        "CPU time the server's process spent in the kernel",
        |s| seconds(s.cpu.system),
    ),
    metric(
        "leased_cpu_user",
        Counter,
        "seconds",
        "CPU time the server's process spent in user mode",
        |s| seconds(s.cpu.user),
    ),
    metric(
        "leased_leases_reclaimed",
        Counter,
        "",
        "Expired leases removed once lease-retention had passed",
        |s| int(s.report.commands.reclaimed),
    ),
    metric(
        "leased_last_fencing_token",
        Gauge,
        "",
        "The last fencing token issued (0 before the first)",
        |s| int(s.report.last_token),
    ),
    metric(
        "leased_acquires_waited",
        Counter,
        "",
        "Blocked acquires (BLOCK) granted their run; how long they waited is leased_acquire_wait_seconds",
        |s| int(s.report.commands.waited),
    ),
    metric(
        "leased_acquires_timed_out",
        Counter,
        "",
        "Blocked acquires whose BLOCK timeout ran out (answered null)",
        |s| int(s.report.commands.timed_out),
    ),
    metric(
        "leased_acquires_lock_delayed",
        Counter,
        "",
        "Acquires refused because the run's lease had expired but its lock delay had not passed",
        |s| int(s.report.health.lock_delayed),
    ),
    metric(
        "leased_blocked_clients",
        Gauge,
        "",
        "Clients waiting in a blocked acquire",
        |s| int(s.report.blocked_clients as u64),
    ),
    metric(
        "leased_pubsub_clients",
        Gauge,
        "",
        "Clients subscribed to a channel or a pattern",
        |s| int(s.pubsub_clients),
    ),
    metric(
        "leased_events_published",
        Counter,
        "",
        "Lease events published while someone subscribed, each counted once",
        |s| int(s.report.commands.events),
    ),
    metric(
        "leased_registry_time",
        Gauge,
        "seconds",
        "Registry time: the latest `now` a lease command carried or the server's clock gave",
        |s| {
            let time = s.report.registry_time;
            time.is_finite().then_some(Number::Float(time))
        },
    ),
];

/// One scrape's figures, typed.
#[derive(Debug)]
struct Scrape {
    report: CoreReport,
    uptime: u64,
    connected_clients: u64,
    maxclients: u64,
    memory: Memory,
    cpu: CpuTimes,
    connections_received: u64,
    commands_processed: u64,
    net_input: u64,
    net_output: u64,
    rejected_connections: u64,
    pubsub_clients: u64,
    /// In cluster mode only.
    cluster: Option<cluster::Figures>,
}

impl Scrape {
    fn encode_metric(&self, encoder: &mut DescriptorEncoder, metric: &Metric) -> fmt::Result {
        let Some(value) = (metric.value)(self) else {
            return Ok(());
        };
        let unit = match metric.unit {
            "bytes" => Some(Unit::Bytes),
            "seconds" => Some(Unit::Seconds),
            _ => None,
        };
        let metric_type = match metric.kind {
            Kind::Gauge => MetricType::Gauge,
            Kind::Counter => MetricType::Counter,
        };
        let descriptor =
            encoder.encode_descriptor(metric.name, metric.help, unit.as_ref(), metric_type)?;
        match (metric.kind, value) {
            (Kind::Counter, Number::Integer(n)) => ConstCounter::new(n).encode(descriptor),
            (Kind::Counter, Number::Float(x)) => ConstCounter::new(x).encode(descriptor),
            (Kind::Gauge, Number::Integer(n)) => match i64::try_from(n) {
                Ok(n) => ConstGauge::new(n).encode(descriptor),
                Err(_) => ConstGauge::new(n as f64).encode(descriptor),
            },
            (Kind::Gauge, Number::Float(x)) => ConstGauge::new(x).encode(descriptor),
        }
    }

    /// `leased_leases{state}`: active and expired leases held.
    fn encode_leases(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let help = "Leases held: active, and expired but not yet reclaimed";
        let mut family =
            encoder.encode_descriptor("leased_leases", help, None, MetricType::Gauge)?;
        let report = &self.report;
        for (state, count) in [
            ("active", report.leases - report.expired),
            ("expired", report.expired),
        ] {
            let labels = [("state", state)];
            ConstGauge::new(count as i64).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// `leased_lease_commands_total{command,result}`.
    fn encode_commands(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let help = "Lease commands answered, by command and result: ok when it did what it asked \
                    (a lease, or 1), failed otherwise (null, 0 or an error)";
        let mut family =
            encoder.encode_descriptor("leased_lease_commands", help, None, MetricType::Counter)?;
        let counts = self.report.commands.counts;
        for (command, [ok, failed]) in CommandStats::NAMES.into_iter().zip(counts) {
            for (result, count) in [("ok", ok), ("failed", failed)] {
                let labels = [("command", command), ("result", result)];
                ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }

    /// `leased_heartbeats_refused_total{reason}` and
    /// `leased_tenures_ended_total{end}`.
    fn encode_health(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let help = "Heartbeats answered 0, by reason: expired (the lease's time had run out), \
                    taken_over (its run has a newer lease), unknown (no such lease)";
        let mut family = encoder.encode_descriptor(
            "leased_heartbeats_refused",
            help,
            None,
            MetricType::Counter,
        )?;
        let health = &self.report.health;
        for (why, count) in Refused::ALL.iter().zip(health.refused) {
            let labels = [("reason", why.as_str())];
            ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
        }
        let help = "Tenures (leases) ended, by how: released before expires_at, released-late \
                    (at or after it), expired (never released; counted at the takeover or reclaim)";
        let mut family =
            encoder.encode_descriptor("leased_tenures_ended", help, None, MetricType::Counter)?;
        for (how, count) in TenureEnd::ALL.iter().zip(health.ended) {
            let labels = [("end", how.as_str())];
            ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// The histograms: heartbeat slack and acquire waits.
    fn encode_histograms(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let help = "Heartbeat slack: the time a lease had left when its heartbeat extended it, \
                    over its TTL (0: about to expire; 1: just extended)";
        let slack = &self.report.health.slack;
        encode_histogram(encoder, "leased_heartbeat_slack_ratio", help, None, slack)?;
        let help = "How long blocked acquires waited before they were granted their run";
        let wait = &self.report.commands.wait;
        encode_histogram(
            encoder,
            "leased_acquire_wait",
            help,
            Some(Unit::Seconds),
            wait,
        )
    }

    /// `leased_info{version}`, always 1.
    fn encode_info(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let info = Info::new([("version", env!("CARGO_PKG_VERSION").to_owned())]);
        let help = "The server's version, as a label";
        info.encode(encoder.encode_descriptor("leased", help, None, MetricType::Info)?)
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        self.encode_info(&mut encoder)?;
        self.encode_leases(&mut encoder)?;
        self.encode_commands(&mut encoder)?;
        self.encode_health(&mut encoder)?;
        self.encode_histograms(&mut encoder)?;
        for metric in METRICS {
            self.encode_metric(&mut encoder, metric)?;
        }
        if let Some(cluster) = &self.cluster {
            cluster.encode(&mut encoder)?;
        }
        Ok(())
    }
}

fn encode_histogram(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    histogram: &Histogram,
) -> fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, unit.as_ref(), MetricType::Histogram)?;
    let buckets = histogram.buckets();
    metric.encode_histogram::<NoLabelSet>(histogram.sum(), histogram.count(), &buckets, None)
}

#[derive(Clone, Copy)]
enum Number {
    Integer(u64),
    Float(f64),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aof::{FsyncPolicy, LogStatus};
    use crate::registry::Health;

    fn sample() -> Scrape {
        let mut commands = CommandStats::default();
        commands.counts[0] = [4, 2];
        commands.granted_after(Duration::from_millis(3));
        let mut health = Health {
            refused: [5, 1, 0],
            ended: [7, 2, 3],
            ..Health::default()
        };
        health.slack.observe(0.05);
        health.slack.observe(0.95);
        Scrape {
            report: CoreReport {
                leases: 4,
                expired: 1,
                last_token: 9,
                token_ceiling: 100_009,
                registry_time: f64::NEG_INFINITY,
                lease_ttl: 10.0,
                blocked_clients: 0,
                run_data: 0,
                run_data_bytes: 0,
                history_entries: 0,
                history_bytes: 0,
                commands,
                health,
                log: Some(LogStatus {
                    policy: FsyncPolicy::EverySec,
                    size: 100,
                    base_size: 12,
                    last_write_ok: false,
                    last_fsync_ok: true,
                    rewrite_in_progress: false,
                    rewrites: 0,
                    last_rewrite_ok: true,
                    last_rewrite_secs: -1,
                }),
                snapshot: None,
            },
            uptime: 42,
            connected_clients: 1,
            maxclients: 10_000,
            memory: Memory::default(),
            cpu: CpuTimes {
                user: Duration::from_millis(250),
                ..CpuTimes::default()
            },
            connections_received: 3,
            commands_processed: 7,
            net_input: 0,
            net_output: 0,
            rejected_connections: 0,
            pubsub_clients: 2,
            cluster: None,
        }
    }

    #[test]
    fn figures_become_metrics_in_both_formats() {
        let text = encode(sample(), false).unwrap();
        for expected in [
            "leased_uptime_seconds 42\n",
            "# TYPE leased_cpu_user_seconds_total counter\nleased_cpu_user_seconds_total 0.25\n",
            "leased_aof_last_write_ok 0\n",
            "leased_aof_size_bytes 100\n",
            "leased_leases{state=\"active\"} 3\nleased_leases{state=\"expired\"} 1\n",
            "leased_lease_commands_total{command=\"acquire\",result=\"ok\"} 4\n",
            "leased_lease_commands_total{command=\"acquire\",result=\"failed\"} 2\n",
            "leased_last_fencing_token 9\n",
            "leased_heartbeats_refused_total{reason=\"expired\"} 5\n",
            "leased_heartbeats_refused_total{reason=\"taken_over\"} 1\n",
            "leased_tenures_ended_total{end=\"released-late\"} 2\n",
            "leased_heartbeat_slack_ratio_count 2\n",
            "leased_heartbeat_slack_ratio_bucket{le=\"0.1\"} 1\n",
            "leased_heartbeat_slack_ratio_bucket{le=\"0.9\"} 1\n",
            "leased_heartbeat_slack_ratio_bucket{le=\"1\"} 2\n",
            "leased_heartbeat_slack_ratio_bucket{le=\"+Inf\"} 2\n",
            "leased_acquire_wait_seconds_bucket{le=\"0.001\"} 0\n",
            "leased_acquire_wait_seconds_bucket{le=\"0.005\"} 1\n",
            "leased_acquires_waited_total 1\n",
            "leased_pubsub_clients 2\n",
        ] {
            assert!(text.contains(expected), "{expected:?} in\n{text}");
        }
        assert!(text.contains(&format!(
            "leased_info{{version=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        )));
        // Registry time before any `now` gives no metric.
        assert!(!text.contains("registry_time"), "{text}");
        // A single node shows no cluster figures.
        assert!(!text.contains("leased_cluster"), "{text}");

        let mut memory_only = sample();
        memory_only.report.log = None;
        let text = encode(memory_only, false).unwrap();
        assert!(!text.contains("leased_aof_size"), "{text}");
        assert!(text.contains("leased_aof_enabled 0\n"), "{text}");

        let openmetrics = encode(sample(), true).unwrap();
        assert!(
            openmetrics.contains("# TYPE leased info\n"),
            "{openmetrics}"
        );
        assert!(openmetrics.contains("# UNIT leased_uptime_seconds seconds\n"));
        assert!(openmetrics.ends_with("# EOF\n"), "{openmetrics}");
    }
}
