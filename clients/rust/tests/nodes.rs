//! The node list, `-TRYAGAIN` and `-UNCERTAIN`, against a fake server in
//! the test: leased has no cluster mode yet, so these replies are injected
//! here. The fake answers each command as the test's script says (or
//! closes the connection without answering) and records what it got.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leased_client::{Error, LeaseOptions, Registry, RegistryOptions};
use tokio::time::Instant;

/// What the fake does with a command.
enum Answer {
    Reply(Vec<u8>),
    /// Closes the connection without a reply, as if it was cut just after
    /// the command went out.
    Close,
    /// Answers nothing more on this connection for a minute: a network
    /// that drops everything from now on.
    Hang,
}

type Script = dyn Fn(&[String]) -> Answer + Send + Sync;

struct Fake {
    port: u16,
    got: Arc<Mutex<Vec<Vec<String>>>>,
}

impl Fake {
    /// A fake node: the connection set-up, `CONFIG GET lease-ttl` (10) and
    /// `PING` are answered here, everything else by `script`.
    fn start(script: impl Fn(&[String]) -> Answer + Send + Sync + 'static) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let log = got.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (script, log) = (script.clone(), log.clone());
                std::thread::spawn(move || serve(stream, &*script, &log));
            }
        });
        Fake { port, got }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// How many times it got the command `name`.
    fn count(&self, name: &str) -> usize {
        let got = self.got.lock().unwrap();
        got.iter()
            .filter(|args| args[0].eq_ignore_ascii_case(name))
            .count()
    }
}

fn serve(stream: TcpStream, script: &Script, log: &Mutex<Vec<Vec<String>>>) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some(args) = read_command(&mut reader) {
        let answer = match args[0].to_ascii_uppercase().as_str() {
            "CLIENT" | "PING" => Answer::Reply(b"+OK\r\n".to_vec()),
            "CONFIG" => Answer::Reply(array(&[bulk("lease-ttl"), bulk("10")])),
            _ => {
                log.lock().unwrap().push(args.clone());
                script(&args)
            }
        };
        match answer {
            Answer::Reply(bytes) => {
                if writer.write_all(&bytes).is_err() {
                    return;
                }
            }
            Answer::Close => {
                let _ = writer.shutdown(std::net::Shutdown::Both);
                return;
            }
            Answer::Hang => {
                std::thread::sleep(Duration::from_secs(60));
                return;
            }
        }
    }
}

/// One request: an array of bulk strings.
fn read_command(reader: &mut impl BufRead) -> Option<Vec<String>> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let count: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut arg = vec![0; len + 2];
        reader.read_exact(&mut arg).ok()?;
        arg.truncate(len);
        args.push(String::from_utf8_lossy(&arg).into_owned());
    }
    Some(args)
}

fn bulk(text: &str) -> Vec<u8> {
    format!("${}\r\n{text}\r\n", text.len()).into_bytes()
}

fn array(items: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", items.len()).into_bytes();
    for item in items {
        out.extend_from_slice(item);
    }
    out
}

fn int(n: i64) -> Vec<u8> {
    format!(":{n}\r\n").into_bytes()
}

const NIL: &[u8] = b"$-1\r\n";

fn reply(bytes: &[u8]) -> Answer {
    Answer::Reply(bytes.to_vec())
}

/// A lease map in RESP2, with `expired` for `LEASE.GET`.
fn lease(run: &str, worker: &str, token: i64, expired: Option<i64>) -> Vec<u8> {
    let mut items = vec![
        bulk("run_id"),
        bulk(run),
        bulk("worker_id"),
        bulk(worker),
        bulk("lease_id"),
        bulk(&format!("{run}:{worker}:{token}")),
        bulk("fencing_token"),
        int(token),
        bulk("expires_at"),
        bulk("1796434629.64"),
    ];
    if let Some(expired) = expired {
        items.extend([bulk("expired"), int(expired)]);
    }
    array(&items)
}

/// `LEASE.HISTORY run COUNT 1` of a lease with `heartbeats`.
fn history(run: &str, worker: &str, token: i64, heartbeats: i64) -> Vec<u8> {
    array(&[array(&[
        bulk("lease_id"),
        bulk(&format!("{run}:{worker}:{token}")),
        bulk("worker_id"),
        bulk(worker),
        bulk("fencing_token"),
        int(token),
        bulk("acquired_at"),
        bulk("1796434619.64"),
        bulk("expires_at"),
        bulk("1796434629.64"),
        bulk("ended_at"),
        NIL.to_vec(),
        bulk("end"),
        bulk("active"),
        bulk("heartbeats"),
        int(heartbeats),
    ])])
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn ttl(seconds: f64) -> LeaseOptions {
    LeaseOptions::new().ttl(Duration::from_secs_f64(seconds))
}

#[tokio::test]
async fn reads_move_on_to_the_next_node_when_one_cannot_be_reached() {
    let fake = Fake::start(|_| reply(NIL));
    let dead = format!("redis://127.0.0.1:{}/", dead_port());
    let registry = Registry::connect_nodes([dead.clone(), fake.url()])
        .await
        .unwrap();
    assert_eq!(registry.get("run-1").await.unwrap(), None);
    assert_eq!(fake.count("LEASE.GET"), 1);

    let unavailable = Registry::connect_nodes([dead]).await;
    assert!(
        matches!(unavailable, Err(Error::Unavailable { .. })),
        "{:?}",
        unavailable.err()
    );
}

#[tokio::test]
async fn tryagain_is_retried_with_a_growing_pause() {
    let tries = AtomicUsize::new(0);
    let fake = Fake::start(move |_| match tries.fetch_add(1, Ordering::SeqCst) {
        0..3 => reply(b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"),
        _ => reply(NIL),
    });
    let registry = Registry::connect(&fake.url()).await.unwrap();
    let started = Instant::now();
    assert_eq!(registry.get("run-1").await.unwrap(), None);
    assert_eq!(fake.count("LEASE.GET"), 4);
    assert!(started.elapsed() >= Duration::from_millis(10 + 20 + 40));
}

#[tokio::test]
async fn tryagain_for_longer_than_retry_for_is_unavailable() {
    let fake = Fake::start(|_| reply(b"-TRYAGAIN not now\r\n"));
    let options = RegistryOptions {
        retry_for: Duration::from_millis(200),
        ..RegistryOptions::default()
    };
    let registry = Registry::connect_with([fake.url()], options).await.unwrap();
    let started = Instant::now();
    let refused = registry.get("run-1").await;
    assert!(
        matches!(refused, Err(Error::Unavailable { .. })),
        "{refused:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn an_uncertain_acquire_that_took_is_the_lease_and_is_not_sent_again() {
    let fake = Fake::start(|args| match args[0].as_str() {
        "LEASE.ACQUIRE" => reply(b"-UNCERTAIN the write may or may not have been applied\r\n"),
        "LEASE.GET" => reply(&lease("run-1", "worker-a", 5, Some(0))),
        "LEASE.HISTORY" => reply(&history("run-1", "worker-a", 5, 0)),
        "LEASE.GETDATA" => reply(NIL),
        _ => reply(&int(1)),
    });
    let registry = Registry::connect(&fake.url()).await.unwrap();
    let lease = registry
        .lease("run-1", "worker-a", ttl(10.0))
        .await
        .unwrap();
    assert_eq!(lease.token(), 5);
    assert_eq!(lease.lease_id(), "run-1:worker-a:5");
    assert_eq!(fake.count("LEASE.ACQUIRE"), 1);
    assert_eq!(fake.count("LEASE.GET"), 1);
}

#[tokio::test]
async fn an_uncertain_acquire_of_a_heartbeated_lease_is_not_ours() {
    // Another process with our worker id holds the run (its lease has been
    // heartbeated): the acquire did not take, and is sent again.
    let acquires = AtomicUsize::new(0);
    let fake = Fake::start(move |args| match args[0].as_str() {
        "LEASE.ACQUIRE" => match acquires.fetch_add(1, Ordering::SeqCst) {
            0 => reply(b"-UNCERTAIN try later\r\n"),
            _ => reply(NIL),
        },
        "LEASE.GET" => reply(&lease("run-1", "worker-a", 5, Some(0))),
        "LEASE.HISTORY" => reply(&history("run-1", "worker-a", 5, 3)),
        _ => reply(&int(1)),
    });
    let registry = Registry::connect(&fake.url()).await.unwrap();
    let held = registry.lease("run-1", "worker-a", ttl(10.0)).await;
    assert!(matches!(held, Err(Error::RunHeld { .. })), "{held:?}");
    assert_eq!(fake.count("LEASE.ACQUIRE"), 2);
}

#[tokio::test]
async fn an_uncertain_acquire_that_did_not_take_is_sent_again() {
    let acquires = AtomicUsize::new(0);
    let fake = Fake::start(move |args| match args[0].as_str() {
        "LEASE.ACQUIRE" => match acquires.fetch_add(1, Ordering::SeqCst) {
            0 => reply(b"-UNCERTAIN try later\r\n"),
            _ => reply(&lease("run-1", "worker-a", 6, None)),
        },
        "LEASE.GET" => reply(NIL),
        _ => reply(&int(1)),
    });
    let registry = Registry::connect(&fake.url()).await.unwrap();
    let lease = registry
        .lease("run-1", "worker-a", ttl(10.0))
        .await
        .unwrap();
    assert_eq!(lease.token(), 6);
    assert_eq!(fake.count("LEASE.ACQUIRE"), 2);
}

#[tokio::test]
async fn an_acquire_cut_off_after_it_was_sent_is_resolved_on_the_next_node() {
    let first = Fake::start(|args| match args[0].as_str() {
        "LEASE.ACQUIRE" => Answer::Close,
        _ => reply(NIL),
    });
    let second = Fake::start(|args| match args[0].as_str() {
        "LEASE.GET" => reply(&lease("run-1", "worker-a", 8, Some(0))),
        "LEASE.HISTORY" => reply(&history("run-1", "worker-a", 8, 0)),
        "LEASE.GETDATA" => reply(NIL),
        _ => reply(&int(1)),
    });
    let registry = Registry::connect_nodes([first.url(), second.url()])
        .await
        .unwrap();
    let lease = registry
        .lease("run-1", "worker-a", ttl(10.0))
        .await
        .unwrap();
    assert_eq!(lease.token(), 8);
    assert_eq!(
        (first.count("LEASE.ACQUIRE"), second.count("LEASE.ACQUIRE")),
        (1, 0)
    );
    assert_eq!(second.count("LEASE.GET"), 1);
}

#[tokio::test]
async fn an_uncertain_heartbeat_of_a_gone_lease_sets_lost() {
    let fake = Fake::start(|args| match args[0].as_str() {
        "LEASE.ACQUIRE" => reply(&lease("run-1", "worker-a", 3, None)),
        "LEASE.HEARTBEAT" => reply(b"-UNCERTAIN try later\r\n"),
        "LEASE.GET" => reply(NIL),
        _ => reply(&int(1)),
    });
    let registry = Registry::connect(&fake.url()).await.unwrap();
    let lease = registry.lease("run-1", "worker-a", ttl(0.6)).await.unwrap();
    let deadline = lease.deadline();
    tokio::time::timeout(Duration::from_secs(2), lease.lost().cancelled())
        .await
        .expect("lost");
    assert!(
        Instant::now() < deadline,
        "lost at the first heartbeat, not the deadline"
    );
    assert!(lease.lost_reason().unwrap().contains("refused"));
    assert_eq!(fake.count("LEASE.HEARTBEAT"), 1);
}

#[tokio::test]
async fn an_uncertain_heartbeat_of_a_lease_still_shown_moves_no_deadline() {
    let fake = Fake::start(|args| match args[0].as_str() {
        "LEASE.ACQUIRE" => reply(&lease("run-1", "worker-a", 3, None)),
        "LEASE.HEARTBEAT" => reply(b"-UNCERTAIN try later\r\n"),
        "LEASE.GET" => reply(&lease("run-1", "worker-a", 3, Some(0))),
        _ => reply(&int(1)),
    });
    let registry = Registry::connect(&fake.url()).await.unwrap();
    let lease = registry.lease("run-1", "worker-a", ttl(0.6)).await.unwrap();
    let deadline = lease.deadline();
    tokio::time::timeout(Duration::from_secs(2), lease.lost().cancelled())
        .await
        .expect("lost");
    // Never extended; lost a period after the first uncertain heartbeat,
    // after retries.
    assert_eq!(lease.deadline(), deadline);
    assert!(lease.lost_reason().unwrap().contains("heartbeat"));
    assert!(fake.count("LEASE.HEARTBEAT") >= 2);
}

#[tokio::test]
async fn an_uncertain_checkpoint_is_read_back_and_sent_again_only_if_it_did_not_take() {
    let sets = Arc::new(Mutex::new(Vec::<String>::new()));
    let stored = sets.clone();
    let fake = Fake::start(move |args| match args[0].as_str() {
        "LEASE.ACQUIRE" => reply(&lease("run-1", "worker-a", 4, None)),
        "LEASE.SETDATA" => {
            // step=1 takes, but is answered UNCERTAIN; step=2 is answered
            // UNCERTAIN without taking the first time, and stored the next.
            let mut sets = stored.lock().unwrap();
            let answer = match sets.len() {
                0 => reply(b"-UNCERTAIN try later\r\n"),
                1 => {
                    sets.push("(lost)".into());
                    return reply(b"-UNCERTAIN try later\r\n");
                }
                _ => reply(&int(1)),
            };
            sets.push(args[3].clone());
            answer
        }
        "LEASE.GETDATA" => {
            let sets = stored.lock().unwrap();
            match sets.last().map(String::as_str) {
                Some("(lost)") | None => reply(NIL),
                Some(value) => reply(&array(&[
                    bulk("value"),
                    bulk(value),
                    bulk("fencing_token"),
                    int(4),
                    bulk("written_at"),
                    bulk("1796434620"),
                ])),
            }
        }
        _ => reply(&int(1)),
    });
    let registry = Registry::connect(&fake.url()).await.unwrap();
    let mut lease = registry
        .lease("run-1", "worker-a", ttl(10.0))
        .await
        .unwrap();
    lease.checkpoint("step=1").await.unwrap();
    assert_eq!(fake.count("LEASE.SETDATA"), 1);
    lease.checkpoint("step=2").await.unwrap();
    assert_eq!(fake.count("LEASE.SETDATA"), 3);
    assert_eq!(*sets.lock().unwrap(), ["step=1", "(lost)", "step=2"]);
    assert_eq!(lease.data(), Some(&b"step=2"[..]));
}

/// A checkpoint whose reply never comes is not waited for past the
/// deadline (the response timeout is 5 s): the lease is lost then.
#[tokio::test]
async fn a_checkpoint_unanswered_at_the_deadline_is_lost_then() {
    let fake = Fake::start(|args| match args[0].as_str() {
        "LEASE.ACQUIRE" => reply(&lease("run-1", "worker-a", 4, None)),
        "LEASE.SETDATA" => Answer::Hang,
        _ => reply(&int(1)),
    });
    let registry = Registry::connect(&fake.url()).await.unwrap();
    let mut lease = registry.lease("run-1", "worker-a", ttl(0.9)).await.unwrap();
    let deadline = lease.deadline();
    let lost = lease.checkpoint("step=1").await;
    assert!(matches!(lost, Err(Error::LeaseLost { .. })), "{lost:?}");
    assert!(Instant::now() >= deadline);
    assert!(Instant::now() < deadline + Duration::from_millis(500));
    assert!(lease.is_lost());
    assert!(
        lease.lost_reason().unwrap().contains("unanswered"),
        "{lease:?}"
    );
}

/// A follower's `-MOVED` (`cluster-redirect moved`) sends the command to
/// the node it names, and `-CLUSTERDOWN` is retried as `-TRYAGAIN`.
#[tokio::test]
async fn a_moved_goes_to_the_node_it_names_and_clusterdown_is_retried() {
    let downs = Arc::new(AtomicUsize::new(0));
    let seen = downs.clone();
    // The leader: no leader known for its first two commands.
    let leader = Fake::start(move |_| match seen.fetch_add(1, Ordering::SeqCst) {
        0 | 1 => reply(b"-CLUSTERDOWN The cluster is down\r\n"),
        _ => reply(NIL),
    });
    let moved = format!("-MOVED 4178 127.0.0.1:{}\r\n", leader.port);
    let follower = Fake::start(move |_| reply(moved.as_bytes()));
    let registry = Registry::connect_nodes([follower.url(), leader.url()])
        .await
        .unwrap();
    assert_eq!(registry.get("run-42").await.unwrap(), None);
    assert_eq!(follower.count("LEASE.GET"), 1);
    assert_eq!(leader.count("LEASE.GET"), 3);
    // The leader answered last: the next command goes straight to it.
    assert_eq!(registry.get("run-42").await.unwrap(), None);
    assert_eq!(follower.count("LEASE.GET"), 1);
}
