//! The Prometheus endpoint (`metrics-port`, off by default): `GET /metrics`
//! answers with the server's and the registry's figures in the Prometheus
//! text format, or in OpenMetrics for a scraper whose `Accept` header asks
//! for it. Any other path is a 404.
//!
//! The figures are pulled at scrape time: the endpoint asks the core for
//! `INFO`, as a client would, and turns its fields into metrics, so the
//! request path pays nothing for the endpoint and the two never disagree.
//! prometheus-client encodes the metrics; hyper speaks HTTP/1.1.
//!
//! It listens on the `bind` addresses, so protected mode covers it as it
//! covers the RESP port; `requirepass` does not. The figures carry no lease,
//! run or worker id.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
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
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, prometheus_text, text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::command::LeaseCommand;
use crate::core::{CommandStats, CoreHandle};
use crate::reply::Reply;
use crate::server::Shared;
use Kind::{Counter, Gauge, Status};

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
async fn serve_connection(stream: TcpStream, shared: &Shared, core: CoreHandle) {
    let service = service_fn(move |request| respond(request, core.clone()));
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
    let Some(info) = scrape(&core).await else {
        let status = StatusCode::SERVICE_UNAVAILABLE;
        return Ok(plain(status, "The server is shutting down\n"));
    };
    let openmetrics = wants_openmetrics(request.headers());
    let Ok(body) = encode(info, openmetrics) else {
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

/// INFO's fields, from the core; `None` once it has stopped.
async fn scrape(core: &CoreHandle) -> Option<Scrape> {
    let info = LeaseCommand::Info {
        sections: Vec::new(),
    };
    let text = match core.call(vec![info]).await.replies.pop() {
        Some(Reply::Verbatim(text)) => text,
        _ => return None,
    };
    let text = String::from_utf8_lossy(&text);
    let fields = (text.lines())
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    Some(Scrape { fields })
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

/// How an INFO field becomes a metric's value.
#[derive(Clone, Copy)]
enum Kind {
    Gauge,
    Counter,
    /// `ok` or `err`, as 1 or 0.
    Status,
}

/// A metric read from one INFO field. The encoder appends the unit and,
/// for a counter, `_total` to the name.
struct FieldMetric {
    field: &'static str,
    name: &'static str,
    kind: Kind,
    /// `bytes`, `seconds`, or empty.
    unit: &'static str,
    help: &'static str,
}

const fn metric(
    field: &'static str,
    name: &'static str,
    kind: Kind,
    unit: &'static str,
    help: &'static str,
) -> FieldMetric {
    FieldMetric {
        field,
        name,
        kind,
        unit,
        help,
    }
}

/// Every metric taken from a single INFO field, in INFO's order. Fields
/// INFO leaves out (the log's, with `appendonly no`; registry time before
/// any) give no metric.
static FIELD_METRICS: &[FieldMetric] = &[
    metric(
        "uptime_in_seconds",
        "leased_uptime",
        Gauge,
        "seconds",
        "Time since the server started",
    ),
    metric(
        "connected_clients",
        "leased_connected_clients",
        Gauge,
        "",
        "Clients connected, plain and TLS",
    ),
    metric(
        "maxclients",
        "leased_max_clients",
        Gauge,
        "",
        "Clients that may connect at once (maxclients)",
    ),
    metric(
        "used_memory",
        "leased_memory_used",
        Gauge,
        "bytes",
        "Memory allocated by the server, according to its allocator",
    ),
    metric(
        "used_memory_rss",
        "leased_memory_rss",
        Gauge,
        "bytes",
        "Resident set size of the server's process",
    ),
    metric(
        "used_memory_peak",
        "leased_memory_peak",
        Gauge,
        "bytes",
        "The most memory allocated at once since the start",
    ),
    metric(
        "aof_enabled",
        "leased_aof_enabled",
        Gauge,
        "",
        "1 if changes go to the append-only log (appendonly yes)",
    ),
    metric(
        "aof_rewrite_in_progress",
        "leased_aof_rewrite_in_progress",
        Gauge,
        "",
        "1 while the append-only log is being rewritten",
    ),
    metric(
        "aof_last_bgrewrite_status",
        "leased_aof_last_rewrite_ok",
        Status,
        "",
        "1 if the last rewrite of the append-only log succeeded (or none was tried), 0 if it failed",
    ),
    metric(
        "aof_rewrites",
        "leased_aof_rewrites",
        Counter,
        "",
        "Rewrites of the append-only log completed since the start",
    ),
    metric(
        "aof_last_write_status",
        "leased_aof_last_write_ok",
        Status,
        "",
        "1 if the last write to the append-only log succeeded, 0 if it failed: changes are refused until one succeeds",
    ),
    metric(
        "aof_current_size",
        "leased_aof_size",
        Gauge,
        "bytes",
        "Size of the append-only log",
    ),
    metric(
        "aof_base_size",
        "leased_aof_base_size",
        Gauge,
        "bytes",
        "Size of the append-only log after the last rewrite or load",
    ),
    metric(
        "aof_last_fsync_status",
        "leased_aof_last_fsync_ok",
        Status,
        "",
        "1 if the last fsync of the append-only log succeeded, 0 if it failed",
    ),
    metric(
        "token_ceiling",
        "leased_token_ceiling",
        Gauge,
        "",
        "The highest fencing token reserved on disk: tokens up to it may be issued without a disk write",
    ),
    metric(
        "total_connections_received",
        "leased_connections_received",
        Counter,
        "",
        "Client connections accepted",
    ),
    metric(
        "total_commands_processed",
        "leased_commands_processed",
        Counter,
        "",
        "Commands received from clients, including refused ones",
    ),
    metric(
        "total_net_input_bytes",
        "leased_net_input",
        Counter,
        "bytes",
        "Bytes read from clients",
    ),
    metric(
        "total_net_output_bytes",
        "leased_net_output",
        Counter,
        "bytes",
        "Bytes written to clients",
    ),
    metric(
        "rejected_connections",
        "leased_rejected_connections",
        Counter,
        "",
        "Connections refused because maxclients clients were connected",
    ),
    metric(
        "keyspace_hits",
        "leased_keyspace_hits",
        Counter,
        "",
        "LEASE.GET, LEASE.VALIDATE and LEASE.HEARTBEAT that found the lease they named",
    ),
    metric(
        "keyspace_misses",
        "leased_keyspace_misses",
        Counter,
        "",
        "LEASE.GET, LEASE.VALIDATE and LEASE.HEARTBEAT that did not find the lease they named",
    ),
    metric(
        "used_cpu_sys",
        "leased_cpu_system",
        Counter,
        "seconds",
        "CPU time the server's process spent in the kernel",
    ),
    metric(
        "used_cpu_user",
        "leased_cpu_user",
        Counter,
        "seconds",
        "CPU time the server's process spent in user mode",
    ),
    metric(
        "leases_reclaimed",
        "leased_leases_reclaimed",
        Counter,
        "",
        "Expired leases removed once lease-retention had passed",
    ),
    metric(
        "last_fencing_token",
        "leased_last_fencing_token",
        Gauge,
        "",
        "The last fencing token issued (0 before the first)",
    ),
    metric(
        "registry_time",
        "leased_registry_time",
        Gauge,
        "seconds",
        "Registry time: the latest `now` a lease command carried or the server's clock gave",
    ),
];

/// One scrape: INFO's fields by name.
#[derive(Debug)]
struct Scrape {
    fields: HashMap<String, String>,
}

impl Scrape {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    fn integer(&self, name: &str) -> Option<u64> {
        self.field(name)?.parse().ok()
    }

    fn encode_field(&self, encoder: &mut DescriptorEncoder, metric: &FieldMetric) -> fmt::Result {
        let Some(value) = self.field(metric.field) else {
            return Ok(());
        };
        let unit = match metric.unit {
            "bytes" => Some(Unit::Bytes),
            "seconds" => Some(Unit::Seconds),
            _ => None,
        };
        let (metric_type, value) = match metric.kind {
            Kind::Gauge => (MetricType::Gauge, Number::parse(value)),
            Kind::Counter => (MetricType::Counter, Number::parse(value)),
            Kind::Status => (MetricType::Gauge, Number::status(value)),
        };
        let Some(value) = value else {
            return Ok(());
        };
        let descriptor =
            encoder.encode_descriptor(metric.name, metric.help, unit.as_ref(), metric_type)?;
        match (metric_type, value) {
            (MetricType::Counter, Number::Integer(n)) => ConstCounter::new(n).encode(descriptor),
            (MetricType::Counter, Number::Float(x)) => ConstCounter::new(x).encode(descriptor),
            (_, Number::Integer(n)) => match i64::try_from(n) {
                Ok(n) => ConstGauge::new(n).encode(descriptor),
                Err(_) => ConstGauge::new(n as f64).encode(descriptor),
            },
            (_, Number::Float(x)) => ConstGauge::new(x).encode(descriptor),
        }
    }

    /// `leased_leases{state}`: active and expired leases held.
    fn encode_leases(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let help = "Leases held: active, and expired but not yet reclaimed";
        let mut family =
            encoder.encode_descriptor("leased_leases", help, None, MetricType::Gauge)?;
        for state in ["active", "expired"] {
            if let Some(count) = self.integer(&format!("leases_{state}")) {
                let labels = [("state", state)];
                ConstGauge::new(count as i64).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }

    /// `leased_lease_commands_total{command,result}`.
    fn encode_commands(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let help = "Lease commands answered, by command and result: ok when it did what it asked \
                    (a lease, or 1), failed otherwise (null, 0 or an error)";
        let mut family =
            encoder.encode_descriptor("leased_lease_commands", help, None, MetricType::Counter)?;
        for command in CommandStats::NAMES {
            for result in ["ok", "failed"] {
                if let Some(count) = self.integer(&format!("{command}_{result}")) {
                    let labels = [("command", command), ("result", result)];
                    ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }

    /// `leased_info{version}`, always 1.
    fn encode_info(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let version = self.field("leased_version").unwrap_or_default();
        let info = Info::new([("version", version.to_owned())]);
        let help = "The server's version, as a label";
        info.encode(encoder.encode_descriptor("leased", help, None, MetricType::Info)?)
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        self.encode_info(&mut encoder)?;
        self.encode_leases(&mut encoder)?;
        self.encode_commands(&mut encoder)?;
        for metric in FIELD_METRICS {
            self.encode_field(&mut encoder, metric)?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Number {
    Integer(u64),
    Float(f64),
}

impl Number {
    fn parse(value: &str) -> Option<Number> {
        if let Ok(n) = value.parse() {
            return Some(Number::Integer(n));
        }
        value
            .parse()
            .ok()
            .filter(|x: &f64| x.is_finite())
            .map(Number::Float)
    }

    fn status(value: &str) -> Option<Number> {
        match value {
            "ok" => Some(Number::Integer(1)),
            "err" => Some(Number::Integer(0)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(fields: &[(&str, &str)]) -> Scrape {
        let fields = fields
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        Scrape { fields }
    }

    #[test]
    fn fields_become_metrics_in_both_formats() {
        let sample = || {
            scrape(&[
                ("leased_version", "1.2.3"),
                ("uptime_in_seconds", "42"),
                ("used_cpu_user", "0.250000"),
                ("aof_last_write_status", "err"),
                ("registry_time", ""),
                ("leases_active", "3"),
                ("leases_expired", "1"),
                ("acquire_ok", "4"),
                ("acquire_failed", "2"),
            ])
        };
        let text = encode(sample(), false).unwrap();
        for expected in [
            "# TYPE leased_info gauge\nleased_info{version=\"1.2.3\"} 1\n",
            "leased_uptime_seconds 42\n",
            "# TYPE leased_cpu_user_seconds_total counter\nleased_cpu_user_seconds_total 0.25\n",
            "leased_aof_last_write_ok 0\n",
            "leased_leases{state=\"active\"} 3\nleased_leases{state=\"expired\"} 1\n",
            "leased_lease_commands_total{command=\"acquire\",result=\"ok\"} 4\n",
            "leased_lease_commands_total{command=\"acquire\",result=\"failed\"} 2\n",
        ] {
            assert!(text.contains(expected), "{expected:?} in\n{text}");
        }
        // Absent or empty fields give no metric.
        assert!(!text.contains("registry_time"), "{text}");
        assert!(!text.contains("leased_aof_size"), "{text}");
        assert!(!text.contains("command=\"heartbeat\""), "{text}");

        let openmetrics = encode(sample(), true).unwrap();
        assert!(
            openmetrics.contains("# TYPE leased info\n"),
            "{openmetrics}"
        );
        assert!(openmetrics.contains("# UNIT leased_uptime_seconds seconds\n"));
        assert!(openmetrics.ends_with("# EOF\n"), "{openmetrics}");
    }
}
