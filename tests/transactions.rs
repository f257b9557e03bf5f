//! Transactions (`MULTI`, `EXEC`, `DISCARD`) through the `redis` crate,
//! against the real binary: atomic pipelines, aborts while queuing,
//! Redis's errors word for word, acquires that do not block, 20 clients'
//! transactions with nothing between their commands, `WATCH` refused, and
//! a transaction's leases all there after a kill -9 under
//! `appendfsync always`.

mod common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::binary::{Server, data_dir, wait_until};
use common::client::{
    Client, acquire_cmd, error_line, int, lease_or_null, lease_reply, status, text,
};
use common::raw::{exchange, show};
use redis::Value;

const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";
const WATCH_UNSUPPORTED: &str = "ERR WATCH is not supported: leases change only through \
     LEASE.* commands; check a lease with its fencing token (LEASE.VALIDATE) instead";

/// `redis::pipe().atomic()` of acquires of `runs` by `worker`.
fn atomic_acquires(con: &mut Client, runs: &[String], worker: &str) -> redis::RedisResult<Value> {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for run in runs {
        pipe.add_command(acquire_cmd(run, worker, None, None));
    }
    pipe.query(con)
}

/// The fencing tokens of an atomic pipeline's leases, every run acquired.
fn tokens(reply: Value) -> Vec<i64> {
    let Value::Array(leases) = reply else {
        panic!("an atomic pipeline answers an array: {reply:?}")
    };
    leases
        .iter()
        .map(|lease| lease_reply(lease).fencing_token)
        .collect()
}

/// Acquires a free run: its fencing token.
fn take(con: &mut Client, run: &str) -> i64 {
    let lease = con.acquire(run, "w", None, None).expect("a free run");
    lease.fencing_token
}

fn runs(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}-{i}")).collect()
}

#[test]
fn an_atomic_pipeline_of_acquires_returns_every_lease_in_resp2_and_resp3() {
    let server = Server::start();
    for (protocol, mut con) in [("resp2", server.typed()), ("resp3", server.typed_resp3())] {
        let runs = runs(protocol, 5);
        let reply = atomic_acquires(&mut con, &runs, "w").expect("EXEC");
        let Value::Array(leases) = &reply else {
            panic!("{reply:?}")
        };
        for (lease, run) in leases.iter().zip(&runs) {
            assert_eq!(lease_reply(lease).run_id, run.as_bytes());
        }
        let tokens = tokens(reply);
        assert_eq!(tokens.len(), 5);
        assert!(tokens.windows(2).all(|pair| pair[1] == pair[0] + 1));
        // Taken for real: the same runs are held now.
        let again = atomic_acquires(&mut con, &runs, "other").expect("EXEC");
        assert_eq!(again, Value::Array(vec![Value::Nil; 5]));
    }
}

#[test]
fn a_queuing_error_aborts_the_transaction_and_spends_no_token() {
    let server = Server::start();
    let mut con = server.typed();
    let before = take(&mut con, "before");
    let queued = status("QUEUED");
    for bad in [
        &["NOSUCH", "x"][..],
        &["LEASE.ACQUIRE", "only-run"],
        &["CLIENT", "NOSUCH"],
    ] {
        assert_eq!(con.run(&["MULTI"]), Value::Okay);
        assert_eq!(con.run(&["LEASE.ACQUIRE", "a", "w"]), queued);
        let refused = con.error(bad);
        assert!(refused.starts_with("ERR "), "{bad:?}: {refused}");
        // Still queuing: answered QUEUED, though EXEC will run nothing.
        assert_eq!(con.run(&["LEASE.ACQUIRE", "b", "w"]), queued);
        assert_eq!(con.error(&["EXEC"]), EXECABORT);
        // The transaction is over.
        assert_eq!(con.error(&["EXEC"]), "ERR EXEC without MULTI");
    }
    // Through an atomic pipeline, too.
    let mut pipe = redis::pipe();
    pipe.atomic()
        .add_command(acquire_cmd("a", "w", None, None))
        .cmd("NOSUCH");
    let error = pipe.query::<Value>(&mut con).expect_err("EXECABORT");
    // The crate words the abort itself, from the code.
    assert_eq!(error.code(), Some("EXECABORT"), "{}", error_line(&error));
    assert_eq!(con.get("a", None), None);
    assert_eq!(con.get("b", None), None);
    let after = take(&mut con, "after");
    assert_eq!(after, before + 1, "no token was spent");
}

#[test]
fn discard_applies_nothing() {
    let server = Server::start();
    let mut con = server.typed();
    let before = take(&mut con, "before");
    assert_eq!(con.run(&["MULTI"]), Value::Okay);
    assert_eq!(con.run(&["LEASE.ACQUIRE", "a", "w"]), status("QUEUED"));
    assert_eq!(con.run(&["DISCARD"]), Value::Okay);
    assert_eq!(con.get("a", None), None);
    let after = take(&mut con, "after");
    assert_eq!(after, before + 1);
    assert_eq!(con.error(&["DISCARD"]), "ERR DISCARD without MULTI");
}

#[test]
fn redis_errors_word_for_word() {
    let server = Server::start();
    let mut con = server.typed();
    assert_eq!(con.error(&["EXEC"]), "ERR EXEC without MULTI");
    assert_eq!(con.error(&["DISCARD"]), "ERR DISCARD without MULTI");
    assert_eq!(con.error(&["WATCH", "run"]), WATCH_UNSUPPORTED);
    assert_eq!(con.run(&["UNWATCH"]), Value::Okay);
    assert_eq!(
        con.error(&["MULTI", "x"]),
        "ERR wrong number of arguments for 'multi' command"
    );

    assert_eq!(con.run(&["MULTI"]), Value::Okay);
    // Neither of these aborts the transaction, as in Redis.
    assert_eq!(con.error(&["MULTI"]), "ERR MULTI calls can not be nested");
    assert_eq!(
        con.error(&["WATCH", "run"]),
        "ERR WATCH inside MULTI is not allowed"
    );
    assert_eq!(
        con.error(&["SHUTDOWN"]),
        "ERR Command not allowed inside a transaction"
    );
    assert_eq!(con.error(&["EXEC"]), EXECABORT);

    assert_eq!(con.run(&["MULTI"]), Value::Okay);
    assert_eq!(con.error(&["MULTI"]), "ERR MULTI calls can not be nested");
    assert_eq!(con.run(&["PING"]), status("QUEUED"));
    assert_eq!(con.run(&["UNWATCH"]), status("QUEUED"));
    assert_eq!(
        con.run(&["EXEC"]),
        Value::Array(vec![status("PONG"), Value::Okay])
    );
    // An empty transaction answers the empty array.
    assert_eq!(con.run(&["MULTI"]), Value::Okay);
    assert_eq!(con.run(&["EXEC"]), Value::Array(vec![]));
}

#[test]
fn errors_of_single_commands_are_replies_in_the_array_and_the_rest_run() {
    let server = Server::start();
    let mut con = server.typed();
    assert_eq!(con.run(&["MULTI"]), Value::Okay);
    for words in [
        &["LEASE.ACQUIRE", "a", "w"][..],
        &["LEASE.HEARTBEAT", "a:w:1", "0"],
        &["LEASE.ACQUIRE", "b", "w", "TTL", "0"],
        &["PING", "x", "y"],
        &["ECHO", "hi"],
        &["MONITOR"],
        &["LEASE.ACQUIRE", "c", "w"],
    ] {
        assert_eq!(con.run(words), status("QUEUED"), "{words:?}");
    }
    // The raw reply: the crate would turn the errors in it into its own.
    let exec = redis::cmd("EXEC").get_packed_command();
    let reply = redis::ConnectionLike::req_packed_command(&mut con, &exec);
    let Ok(Value::Array(replies)) = reply else {
        panic!("EXEC answers an array: {reply:?}")
    };
    assert_eq!(replies.len(), 7);
    assert_eq!(lease_reply(&replies[0]).run_id, b"a");
    for (at, reply) in replies.iter().enumerate() {
        let is_error = matches!(reply, Value::ServerError(_));
        assert_eq!(is_error, [1, 2, 3, 5].contains(&at), "{at}: {reply:?}");
    }
    let Value::ServerError(monitor) = &replies[5] else {
        panic!()
    };
    assert_eq!(
        monitor.details(),
        Some("MONITOR isn't allowed for DENY BLOCKING client")
    );
    assert_eq!(replies[4], Value::BulkString(b"hi".to_vec()));
    assert_eq!(lease_reply(&replies[6]).run_id, b"c");
    assert!(con.get("b", None).is_none());
    // Still a normal client, not a monitor.
    con.ping();
}

#[test]
fn a_blocking_acquire_inside_multi_does_not_block() {
    let server = Server::start();
    let mut holder = server.typed();
    holder.acquire("held", "holder", None, None).unwrap();
    let mut con = server.typed();
    assert_eq!(con.run(&["MULTI"]), Value::Okay);
    // BLOCK 0 would wait forever outside a transaction.
    let queued = status("QUEUED");
    assert_eq!(
        con.run(&["LEASE.ACQUIRE", "held", "w", "BLOCK", "0"]),
        queued
    );
    assert_eq!(
        con.run(&["LEASE.ACQUIRE", "free", "w", "BLOCK", "0"]),
        queued
    );
    let started = Instant::now();
    let Value::Array(replies) = con.run(&["EXEC"]) else {
        panic!("EXEC answers an array")
    };
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(replies[0], Value::Nil);
    assert_eq!(lease_reply(&replies[1]).run_id, b"free");
    con.ping();
}

/// 20 clients, each running transactions of K acquires at once: the
/// tokens of one transaction are consecutive, so no other client's
/// acquire came between its commands.
#[test]
fn transactions_of_twenty_clients_interleave_nothing() {
    const CLIENTS: usize = 20;
    const K: usize = 8;
    const ROUNDS: usize = 25;
    let server = Arc::new(Server::start());
    let start = Arc::new(Barrier::new(CLIENTS));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let server = server.clone();
            let start = start.clone();
            std::thread::spawn(move || {
                let mut con = server.typed();
                start.wait();
                let mut all = Vec::new();
                for round in 0..ROUNDS {
                    let runs = runs(&format!("c{client}-r{round}"), K);
                    let tokens = tokens(atomic_acquires(&mut con, &runs, "w").expect("EXEC"));
                    assert!(
                        tokens.windows(2).all(|pair| pair[1] == pair[0] + 1),
                        "client {client} round {round}: {tokens:?}"
                    );
                    all.extend(tokens);
                }
                all
            })
        })
        .collect();
    let mut every: Vec<i64> = threads
        .into_iter()
        .flat_map(|thread| thread.join().expect("client thread"))
        .collect();
    every.sort_unstable();
    every.dedup();
    assert_eq!(every.len(), CLIENTS * K * ROUNDS, "every token issued once");
}

#[test]
fn reset_discards_and_quit_closes() {
    let server = Server::start();
    let mut con = server.typed();
    assert_eq!(con.run(&["MULTI"]), Value::Okay);
    assert_eq!(con.run(&["LEASE.ACQUIRE", "a", "w"]), status("QUEUED"));
    assert_eq!(con.run(&["RESET"]), status("RESET"));
    assert_eq!(con.error(&["EXEC"]), "ERR EXEC without MULTI");
    assert_eq!(con.get("a", None), None);

    assert_eq!(con.run(&["MULTI"]), Value::Okay);
    assert_eq!(con.run(&["LEASE.ACQUIRE", "a", "w"]), status("QUEUED"));
    assert_eq!(con.run(&["QUIT"]), Value::Okay);
    let mut other = server.typed();
    assert_eq!(other.get("a", None), None);
}

/// Sends `request` on a new raw connection; the replies must be `expected`.
fn raw_replies(server: &Server, request: &[u8], expected: &[u8]) {
    let mut stream = server.raw();
    let got = exchange(&mut stream, request, expected.len());
    assert_eq!(show(&got), show(expected));
}

#[test]
fn a_subscribed_resp2_client_cannot_multi() {
    let server = Server::start();
    raw_replies(
        &server,
        b"SUBSCRIBE ch\r\nMULTI\r\n",
        b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n-ERR Can't execute 'multi': \
        only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this \
        context\r\n",
    );
}

#[test]
fn subscribing_inside_a_transaction_answers_one_element_per_command() {
    let server = Server::start();
    // Subscribed after EXEC: PING answers as a subscriber's does.
    raw_replies(
        &server,
        b"MULTI\r\nSUBSCRIBE a b\r\nEXEC\r\nPING\r\n",
        b"+OK\r\n+QUEUED\r\n*1\r\n*2\r\n\
        *3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n\
        *3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n\
        *2\r\n$4\r\npong\r\n$0\r\n\r\n",
    );
}

#[test]
fn an_unauthenticated_client_gets_noauth() {
    let server = Server::start_with(&["--requirepass", "pw"]);
    let mut con = server.typed();
    assert_eq!(con.error(&["MULTI"]), "NOAUTH Authentication required.");
    assert_eq!(con.error(&["EXEC"]), "NOAUTH Authentication required.");
}

#[test]
fn client_list_shows_a_client_in_a_transaction() {
    let server = Server::start();
    let mut con = server.typed();
    let id = int(&con.run(&["CLIENT", "ID"])).to_string();
    let mut observer = server.typed();
    let line = |observer: &mut Client| {
        let list = text(&observer.run(&["CLIENT", "LIST", "ID", &id]));
        list.trim_end().to_string()
    };
    assert!(line(&mut observer).contains(" flags=N "));
    assert!(line(&mut observer).contains(" multi=-1 "));
    assert_eq!(con.run(&["MULTI"]), Value::Okay);
    assert_eq!(con.run(&["PING"]), status("QUEUED"));
    assert_eq!(con.run(&["PING"]), status("QUEUED"));
    // The connection publishes its state once its replies are written.
    wait_until(Duration::from_secs(5), || {
        let line = line(&mut observer);
        match line.contains(" flags=x ") && line.contains(" multi=2 ") {
            true => Ok(()),
            false => Err(line),
        }
    });
    con.run(&["EXEC"]);
    wait_until(Duration::from_secs(5), || {
        let line = line(&mut observer);
        match line.contains(" flags=N ") && line.contains(" multi=-1 ") {
            true => Ok(()),
            false => Err(line),
        }
    });
}

/// With `appendfsync always` the transaction's acquires are logged with
/// one write and fsync before EXEC's reply: killed right after it, the
/// server has every lease after restarting.
#[test]
fn a_transactions_leases_survive_a_kill_right_after_exec() {
    let (_temp, dir) = data_dir();
    let args = ["--appendfsync", "always"];
    let mut server = Server::start_in(&dir, &args).unwrap();
    let mut con = server.typed();
    let runs = runs("durable", 50);
    let issued = tokens(atomic_acquires(&mut con, &runs, "w").expect("EXEC"));
    server.kill9();
    let server = Server::start_in(&dir, &args).unwrap();
    let mut con = server.typed();
    for (run, token) in runs.iter().zip(issued) {
        let lease = con.get(run, Some(0.0)).expect("the lease survived");
        assert_eq!(lease.fencing_token, token);
    }
    let next: Value = acquire_cmd("next", "w", None, None)
        .query(&mut con)
        .unwrap();
    assert!(lease_or_null(&next).is_some());
}
