//! A worker paused past its TTL: its runtime's only thread is blocked (as
//! a long GC pause, a SIGSTOP or a suspended VM would stop it), so its
//! heartbeat task cannot run. Meanwhile its lease expires and another
//! worker takes the run over. When it wakes, `check()` errors before its
//! next write, `checkpoint()` refuses without sending, and the server,
//! watched with MONITOR, runs no `LEASE.SETDATA` or `LEASE.HEARTBEAT` of
//! its lease after the pause. The test prints the transcript: what the
//! worker did and every lease command the server ran, on one clock
//! (`cargo test -p leased-client --test paused -- --nocapture`).

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leased_client::{Error, LeaseOptions, Registry};
use support::{Monitor, Server};

const TTL: Duration = Duration::from_secs(1);
const PAUSE: Duration = Duration::from_millis(2500);

/// The transcript: (time since the watch started, who, what).
type Transcript = Arc<Mutex<Vec<(Duration, &'static str, String)>>>;

#[test]
fn a_worker_paused_past_its_ttl_checks_before_its_next_write_and_sends_none() {
    let server = Server::start();
    let monitor = Monitor::start(&server);
    let started = monitor.started();
    let transcript: Transcript = Arc::default();
    let say = {
        let transcript = transcript.clone();
        move |who: &'static str, what: String| {
            transcript
                .lock()
                .unwrap()
                .push((started.elapsed(), who, what));
        }
    };

    let url = server.url();
    let worker_says = say.clone();
    let (pausing, paused) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let say = |what: String| worker_says("worker-a", what);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let registry = Registry::connect(&url).await.unwrap();
            let options = LeaseOptions::new().ttl(TTL);
            let mut lease = registry.lease("run-7", "worker-a", options).await.unwrap();
            say(format!(
                "acquired {} (token {}), TTL {TTL:?}, heartbeat every {:?}",
                lease.lease_id(),
                lease.token(),
                TTL / 3
            ));
            for step in 0..2 {
                lease.check().expect("held");
                lease.checkpoint(format!("step={step}")).await.unwrap();
                say(format!("check() ok, wrote checkpoint {step}"));
                tokio::time::sleep(Duration::from_millis(600)).await; // the work
            }
            say(format!(
                "paused: the runtime's thread blocked for {PAUSE:?}, {:?} before the deadline",
                lease.remaining()
            ));
            let paused = Instant::now();
            pausing.send(()).unwrap();
            std::thread::sleep(PAUSE);
            say(format!(
                "woke: lost={}, deadline passed {:?} ago",
                lease.is_lost(),
                tokio::time::Instant::now().saturating_duration_since(lease.deadline())
            ));
            let checked = lease.check();
            say(format!("check() before checkpoint 2: {checked:?}"));
            assert!(
                matches!(checked, Err(Error::LeaseLost { .. })),
                "{checked:?}"
            );
            let written = lease.checkpoint("step=2").await;
            say(format!("checkpoint(\"step=2\"): {written:?}"));
            assert!(
                matches!(written, Err(Error::LeaseLost { .. })),
                "{written:?}"
            );
            // The heartbeat task runs now: past the deadline it sends nothing.
            tokio::time::sleep(Duration::from_millis(200)).await;
            say(format!("lost: {:?}", lease.lost_reason()));
            let lease_id = lease.lease_id().to_owned();
            let released = lease.release().await;
            say(format!("release(): {released:?} (the run was taken over)"));
            assert!(!released.unwrap());
            (paused, lease_id)
        })
    });

    // Another worker waits for the run (a blocking acquire), and the
    // server hands it over the moment the paused worker's lease expires.
    paused.recv().expect("the worker pauses");
    let mut con = server.connect();
    let taken: Vec<redis::Value> = redis::cmd("LEASE.ACQUIRE")
        .arg("run-7")
        .arg("worker-b")
        .arg("TTL")
        .arg(30)
        .arg("BLOCK")
        .arg(10_000)
        .arg("WITHDATA")
        .query(&mut con)
        .expect("worker-b takes the run over");
    let field = |name: &str| {
        let at = taken
            .iter()
            .position(|v| *v == redis::Value::BulkString(name.into()));
        at.map(|at| taken[at + 1].clone())
    };
    let token: i64 = redis::from_redis_value(field("fencing_token").unwrap()).unwrap();
    let data: String = redis::from_redis_value(field("data").unwrap()).unwrap();
    say(
        "worker-b",
        format!("took the run over: token {token}, data {data:?}"),
    );
    let (paused, lease_id) = worker.join().unwrap();
    let paused_at = paused - started;
    std::thread::sleep(Duration::from_millis(100));

    let mut lines: Vec<(Duration, &str, String)> = transcript.lock().unwrap().clone();
    let seen = monitor.seen();
    for command in seen.iter().filter(|seen| seen.name().starts_with("LEASE.")) {
        lines.push((command.at, "server ran", command.args.join(" ")));
    }
    lines.sort_by_key(|(at, _, _)| *at);
    println!("--- transcript (seconds since the watch started) ---");
    for (at, who, what) in &lines {
        println!("{:7.3}  {who:<10}  {what}", at.as_secs_f64());
    }
    println!("---");

    let late: Vec<_> = seen
        .iter()
        .filter(|seen| seen.at >= paused_at && seen.args.contains(&lease_id))
        .filter(|seen| seen.name() == "LEASE.SETDATA" || seen.name() == "LEASE.HEARTBEAT")
        .collect();
    assert!(late.is_empty(), "writes after the pause: {late:?}");
    let before: Vec<_> = seen
        .iter()
        .filter(|seen| seen.at < paused_at && seen.args.contains(&lease_id))
        .map(|seen| seen.name().to_owned())
        .collect();
    assert!(
        before
            .iter()
            .filter(|name| *name == "LEASE.SETDATA")
            .count()
            == 2
    );
    assert!(
        before.iter().any(|name| name == "LEASE.HEARTBEAT"),
        "{before:?}"
    );
}
