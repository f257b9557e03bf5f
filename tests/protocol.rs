//! The wire protocol, driven over TCP against the real binary: exact reply
//! bytes, inline commands, pipelining, split reads, errors, protocol errors,
//! limits on headers, large bursts, QUIT and half-closed connections.

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use common::binary::Server;
use common::client::lease_reply;
use common::raw::{exchange, read_frame, read_to_close, resp, show};
use redis::Value;

// ---- expected replies ----

fn bulk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

#[derive(Clone, Copy, PartialEq)]
enum Proto {
    Resp2,
    Resp3,
}

/// The bytes of a lease map; `expired` is given for LEASE.GET replies.
fn lease(
    proto: Proto,
    run: &str,
    worker: &str,
    token: u64,
    expires_at: &str,
    expired: Option<u8>,
) -> Vec<u8> {
    let pairs = if expired.is_some() { 6 } else { 5 };
    let mut out = match proto {
        Proto::Resp2 => format!("*{}\r\n", pairs * 2),
        Proto::Resp3 => format!("%{pairs}\r\n"),
    }
    .into_bytes();
    for (key, value) in [("run_id", run), ("worker_id", worker)] {
        out.extend(bulk(key.as_bytes()));
        out.extend(bulk(value.as_bytes()));
    }
    out.extend(bulk(b"lease_id"));
    out.extend(bulk(format!("{run}:{worker}:{token}").as_bytes()));
    out.extend(bulk(b"fencing_token"));
    out.extend(format!(":{token}\r\n").as_bytes());
    out.extend(bulk(b"expires_at"));
    match proto {
        Proto::Resp2 => out.extend(bulk(expires_at.as_bytes())),
        Proto::Resp3 => out.extend(format!(",{expires_at}\r\n").as_bytes()),
    }
    if let Some(expired) = expired {
        out.extend(bulk(b"expired"));
        out.extend(format!(":{expired}\r\n").as_bytes());
    }
    out
}

fn lease2(run: &str, worker: &str, token: u64, expires_at: &str) -> Vec<u8> {
    lease(Proto::Resp2, run, worker, token, expires_at, None)
}

fn get2(run: &str, worker: &str, token: u64, expires_at: &str, expired: u8) -> Vec<u8> {
    lease(Proto::Resp2, run, worker, token, expires_at, Some(expired))
}

/// A multibulk request from string arguments.
fn req(args: &[&str]) -> Vec<u8> {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    resp(&args)
}

/// A raw connection that reads whole replies.
struct Client {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Client {
    fn new(server: &Server) -> Client {
        let writer = server.raw();
        let reader = BufReader::new(writer.try_clone().unwrap());
        Client { writer, reader }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    fn frame(&mut self) -> Vec<u8> {
        read_frame(&mut self.reader).expect("a reply")
    }

    /// Sends `request` and checks that the next reply is exactly `reply`.
    fn expect(&mut self, request: &[u8], reply: &[u8]) {
        self.send(request);
        self.expect_frame(reply, &show(request));
    }

    fn expect_frame(&mut self, reply: &[u8], context: &str) {
        let got = self.frame();
        assert_eq!(show(&got), show(reply), "reply to {context}");
    }
}

// ---- exact bytes ----

#[test]
fn resp2_lease_replies_are_exact() {
    let server = Server::start();
    let mut c = Client::new(&server);
    let acquired: &[u8] =
        b"*10\r\n$6\r\nrun_id\r\n$5\r\nrun-1\r\n$9\r\nworker_id\r\n$8\r\nworker-a\r\n\
        $8\r\nlease_id\r\n$16\r\nrun-1:worker-a:1\r\n$13\r\nfencing_token\r\n:1\r\n\
        $10\r\nexpires_at\r\n$2\r\n10\r\n";
    c.expect(&req(&["LEASE.ACQUIRE", "run-1", "worker-a", "0"]), acquired);
    // The helper used by the other tests builds the same bytes.
    assert_eq!(lease2("run-1", "worker-a", 1, "10"), acquired);

    let got: &[u8] = b"*12\r\n$6\r\nrun_id\r\n$5\r\nrun-1\r\n$9\r\nworker_id\r\n$8\r\nworker-a\r\n\
        $8\r\nlease_id\r\n$16\r\nrun-1:worker-a:1\r\n$13\r\nfencing_token\r\n:1\r\n\
        $10\r\nexpires_at\r\n$2\r\n10\r\n$7\r\nexpired\r\n:0\r\n";
    c.expect(&req(&["LEASE.GET", "run-1", "5"]), got);
    assert_eq!(get2("run-1", "worker-a", 1, "10", 0), got);

    // Held: null, and no token is used up.
    c.expect(
        &req(&["LEASE.ACQUIRE", "run-1", "worker-b", "5"]),
        b"$-1\r\n",
    );
    c.expect(&req(&["LEASE.GET", "no-such-run", "5"]), b"$-1\r\n");

    // A fractional `now`.
    c.expect(
        &req(&["LEASE.ACQUIRE", "run-2", "worker-b", "10.5"]),
        b"*10\r\n$6\r\nrun_id\r\n$5\r\nrun-2\r\n$9\r\nworker_id\r\n$8\r\nworker-b\r\n\
        $8\r\nlease_id\r\n$16\r\nrun-2:worker-b:2\r\n$13\r\nfencing_token\r\n:2\r\n\
        $10\r\nexpires_at\r\n$4\r\n20.5\r\n",
    );
    // Expiry is inclusive: run-1 expired at 10.
    c.expect(
        &req(&["LEASE.GET", "run-1", "10.5"]),
        &get2("run-1", "worker-a", 1, "10", 1),
    );
    c.expect(
        &req(&["LEASE.GET", "run-2", "20.5"]),
        &get2("run-2", "worker-b", 2, "20.5", 1),
    );
    c.expect(b"PING\r\n", b"+PONG\r\n");
}

#[test]
fn resp3_lease_replies_are_exact() {
    let server = Server::start();
    let mut c = Client::new(&server);
    c.send(&req(&["HELLO", "3"]));
    let hello = c.frame();
    assert!(hello.starts_with(b"%7\r\n"), "{}", show(&hello));
    assert!(
        show(&hello).contains(r"$5\r\nproto\r\n:3\r\n"),
        "{}",
        show(&hello)
    );

    let acquired: &[u8] =
        b"%5\r\n$6\r\nrun_id\r\n$5\r\nrun-1\r\n$9\r\nworker_id\r\n$8\r\nworker-a\r\n\
        $8\r\nlease_id\r\n$16\r\nrun-1:worker-a:1\r\n$13\r\nfencing_token\r\n:1\r\n\
        $10\r\nexpires_at\r\n,10\r\n";
    c.expect(&req(&["LEASE.ACQUIRE", "run-1", "worker-a", "0"]), acquired);
    assert_eq!(
        lease(Proto::Resp3, "run-1", "worker-a", 1, "10", None),
        acquired
    );

    let got: &[u8] = b"%6\r\n$6\r\nrun_id\r\n$5\r\nrun-1\r\n$9\r\nworker_id\r\n$8\r\nworker-a\r\n\
        $8\r\nlease_id\r\n$16\r\nrun-1:worker-a:1\r\n$13\r\nfencing_token\r\n:1\r\n\
        $10\r\nexpires_at\r\n,10\r\n$7\r\nexpired\r\n:0\r\n";
    c.expect(&req(&["LEASE.GET", "run-1", "5"]), got);

    c.expect(&req(&["LEASE.ACQUIRE", "run-1", "worker-b", "5"]), b"_\r\n");
    c.expect(&req(&["LEASE.GET", "no-such-run", "5"]), b"_\r\n");

    c.expect(
        &req(&["LEASE.ACQUIRE", "run-2", "worker-b", "10.5"]),
        b"%5\r\n$6\r\nrun_id\r\n$5\r\nrun-2\r\n$9\r\nworker_id\r\n$8\r\nworker-b\r\n\
        $8\r\nlease_id\r\n$16\r\nrun-2:worker-b:2\r\n$13\r\nfencing_token\r\n:2\r\n\
        $10\r\nexpires_at\r\n,20.5\r\n",
    );
    c.expect(
        &req(&["LEASE.GET", "run-2", "20.5"]),
        &lease(Proto::Resp3, "run-2", "worker-b", 2, "20.5", Some(1)),
    );

    // Each reply is in the protocol in force when its request was read, even
    // when HELLO is pipelined with the commands around it.
    let mut stream = req(&["LEASE.GET", "no-such-run", "5"]);
    stream.extend(req(&["HELLO", "2"]));
    stream.extend(req(&["LEASE.GET", "no-such-run", "5"]));
    stream.extend(b"HELLO 3\r\n");
    stream.extend(req(&["LEASE.GET", "no-such-run", "5"]));
    c.send(&stream);
    c.expect_frame(b"_\r\n", "LEASE.GET in RESP3");
    let hello = c.frame();
    assert!(hello.starts_with(b"*14\r\n"), "{}", show(&hello));
    c.expect_frame(b"$-1\r\n", "LEASE.GET in RESP2");
    assert!(c.frame().starts_with(b"%7\r\n"));
    c.expect_frame(b"_\r\n", "LEASE.GET in RESP3 again");

    // RESET goes back to RESP2, and null with it.
    c.expect(b"RESET\r\n", b"+RESET\r\n");
    c.expect(&req(&["LEASE.GET", "no-such-run", "21"]), b"$-1\r\n");
    c.expect(
        &req(&["LEASE.GET", "run-2", "20.5"]),
        &get2("run-2", "worker-b", 2, "20.5", 1),
    );
}

// ---- inline commands ----

#[test]
fn inline_commands_as_typed_over_telnet() {
    let server = Server::start();
    let mut c = Client::new(&server);
    c.expect(b"PING\r\n", b"+PONG\r\n");
    // `nc` sends a bare LF.
    c.expect(
        b"LEASE.ACQUIRE run-1 worker-a 0\n",
        &lease2("run-1", "worker-a", 1, "10"),
    );
    c.expect(
        b"LEASE.ACQUIRE \"run with space\" 'w' 0\r\n",
        &lease2("run with space", "w", 2, "10"),
    );
    c.expect(
        b"lease.get   \"run with space\"\t0\n",
        &get2("run with space", "w", 2, "10", 0),
    );
    c.expect(b"ECHO 'it\\'s'\r\n", b"$4\r\nit's\r\n");
    c.expect(b"ECHO \"\\x41\\tb\"\r\n", b"$3\r\nA\tb\r\n");
    // Blank lines produce no reply: the next reply is PING's.
    c.expect(b"\r\n\n   \r\n\t\n\r\nPING\r\n", b"+PONG\r\n");

    // Inline and multibulk mixed in one write.
    let mut stream = b"PING\r\n".to_vec();
    stream.extend(req(&["ECHO", "a\r\nb"]));
    stream.extend(b"ECHO \"x y\"\n");
    stream.extend(req(&["LEASE.GET", "run-1", "0"]));
    stream.extend(b"\r\nLEASE.VALIDATE run-1 run-1:worker-a:1 1 0\r\n");
    stream.extend(req(&["PING", "done"]));
    c.send(&stream);
    c.expect_frame(b"+PONG\r\n", "PING");
    c.expect_frame(b"$4\r\na\r\nb\r\n", "ECHO");
    c.expect_frame(b"$3\r\nx y\r\n", "inline ECHO");
    c.expect_frame(&get2("run-1", "worker-a", 1, "10", 0), "LEASE.GET");
    c.expect_frame(b":1\r\n", "inline LEASE.VALIDATE");
    c.expect_frame(b"$4\r\ndone\r\n", "PING done");
}

// ---- pipelining ----

/// 10,000 mixed requests and their replies, in order.
fn mixed_pipeline() -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut requests = Vec::new();
    let mut replies = Vec::new();
    for k in 0..2500u64 {
        let run = format!("run-{k}");
        let worker = format!("w-{}", k % 7);
        let token = k + 1;
        let lease_id = format!("{run}:{worker}:{token}");
        requests.extend(req(&["LEASE.ACQUIRE", &run, &worker, "0"]));
        replies.push(lease2(&run, &worker, token, "10"));
        if k % 3 == 1 {
            // The right id with another token: not extended.
            let wrong = (token + 1).to_string();
            requests.extend(req(&["LEASE.HEARTBEAT", &lease_id, &wrong, "0"]));
            replies.push(b":0\r\n".to_vec());
        } else {
            requests.extend(format!("LEASE.HEARTBEAT {lease_id} {token} 0\r\n").as_bytes());
            replies.push(b":1\r\n".to_vec());
        }
        requests.extend(req(&["LEASE.GET", &run, "0"]));
        replies.push(get2(&run, &worker, token, "10", 0));
        if k % 5 == 0 {
            // Held: null, and no token is used.
            requests.extend(req(&["LEASE.ACQUIRE", &run, "other", "0"]));
            replies.push(b"$-1\r\n".to_vec());
        } else if k % 5 == 1 {
            requests.extend(req(&["PING", &run]));
            replies.push(bulk(run.as_bytes()));
        } else {
            requests.extend(b"PING\r\n");
            replies.push(b"+PONG\r\n".to_vec());
        }
    }
    (requests, replies)
}

#[test]
fn ten_thousand_pipelined_commands_are_answered_in_order() {
    let server = Server::start();
    let (requests, replies) = mixed_pipeline();
    assert_eq!(replies.len(), 10_000);
    let mut c = Client::new(&server);
    let mut writer = c.writer.try_clone().unwrap();
    let sender = std::thread::spawn(move || writer.write_all(&requests));
    for (i, expected) in replies.iter().enumerate() {
        let got = c.frame();
        assert_eq!(show(&got), show(expected), "reply {i}");
    }
    sender.join().unwrap().unwrap();
    c.expect(b"PING\r\n", b"+PONG\r\n");
}

#[test]
fn redis_crate_pipelines_in_resp2_and_resp3() {
    let server = Server::start();
    let mut token = 0;
    for (proto, mut con) in [
        ("resp2", server.connect()),
        ("resp3", server.connect_resp3()),
    ] {
        let mut pipe = redis::pipe();
        for k in 0..1000 {
            let run = format!("{proto}-{k}");
            let id = format!("{run}:w:{}", token + k + 1);
            pipe.cmd("LEASE.ACQUIRE").arg(&run).arg("w").arg(0);
            pipe.cmd("LEASE.HEARTBEAT")
                .arg(&id)
                .arg(token + k + 1)
                .arg(0);
            pipe.cmd("ECHO").arg(&run);
            pipe.cmd("LEASE.ACQUIRE").arg(&run).arg("x").arg(0);
        }
        let values: Vec<Value> = pipe.query(&mut con).unwrap();
        assert_eq!(values.len(), 4000, "{proto}");
        for (k, group) in values.chunks(4).enumerate() {
            let run = format!("{proto}-{k}");
            token += 1;
            let lease = lease_reply(&group[0]);
            assert_eq!(lease.run_id, run.as_bytes(), "{proto} {k}");
            assert_eq!(lease.worker_id, b"w");
            assert_eq!(lease.fencing_token, token as i64, "{proto} {k}");
            assert_eq!(lease.lease_id, format!("{run}:w:{token}").as_bytes());
            assert_eq!(lease.expires_at, 10.0);
            assert_eq!(group[1], Value::Int(1), "{proto} {k}");
            assert_eq!(group[2], Value::BulkString(run.into_bytes()), "{proto} {k}");
            assert_eq!(group[3], Value::Nil, "{proto} {k}");
        }
    }
}

// ---- split reads ----

/// Requests of every kind for `run`, whose lease will get `token`, and the
/// replies they must get.
fn split_pipeline(run: &str, token: u64) -> (Vec<u8>, Vec<u8>) {
    let id = format!("{run}:w:{token}");
    let t = token.to_string();
    let mut requests = Vec::new();
    let mut replies = Vec::new();
    let mut add = |request: &[u8], reply: &[u8]| {
        requests.extend_from_slice(request);
        replies.extend_from_slice(reply);
    };
    add(b"PING\r\n", b"+PONG\r\n");
    add(
        &req(&["LEASE.ACQUIRE", run, "w", "0", "TTL", "2.5"]),
        &lease2(run, "w", token, "2.5"),
    );
    add(
        &resp(&[b"ECHO", b"a\r\nb$3\r\n*1\r\n\0\xff"]),
        &bulk(b"a\r\nb$3\r\n*1\r\n\0\xff"),
    );
    add(
        format!("LEASE.HEARTBEAT {id} {t} 0\n").as_bytes(),
        b":1\r\n",
    );
    add(
        &req(&["LEASE.GET", run, "0"]),
        &get2(run, "w", token, "2.5", 0),
    );
    add(&req(&["LEASE.VALIDATE", run, &id, &t, "0"]), b":1\r\n");
    add(&req(&["LEASE.ACQUIRE", run, "w2", "0"]), b"$-1\r\n");
    // Requests without a reply.
    add(b"\r\n  \n*0\r\n*-1\r\n", b"");
    add(&req(&["LEASE.RELEASE", &id, &t]), b":1\r\n");
    add(&req(&["LEASE.GET", run, "0"]), b"$-1\r\n");
    add(&req(&["ECHO", ""]), b"$0\r\n\r\n");
    add(b"ECHO \"x\\ty\"\r\n", b"$3\r\nx\ty\r\n");
    add(
        &req(&["LEASE.GET"]),
        b"-ERR wrong number of arguments for 'lease.get' command\r\n",
    );
    add(&req(&["PING", run]), &bulk(run.as_bytes()));
    (requests, replies)
}

#[test]
fn split_reads_decode_to_the_same_replies() {
    let server = Server::start();
    for (pass, chunk) in [1usize, 2, 3, 5, 7, 13].into_iter().enumerate() {
        let run = format!("split-{pass}");
        let (requests, replies) = split_pipeline(&run, pass as u64 + 1);
        let mut s = server.raw();
        s.set_nodelay(true).unwrap();
        for (i, piece) in requests.chunks(chunk).enumerate() {
            s.write_all(piece).unwrap();
            s.flush().unwrap();
            if i % 8 == 7 {
                // Let the server read what has arrived so far.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let got = common::raw::read_at_least(&mut s, replies.len());
        assert_eq!(show(&got), show(&replies), "chunks of {chunk}");
        assert_eq!(exchange(&mut s, b"PING\r\n", 7), b"+PONG\r\n");
    }
}

// ---- errors ----

fn command_errors() -> Vec<(Vec<u8>, &'static [u8])> {
    vec![
        (
            req(&["LEASE.ACQUIRE", "run-1"]),
            b"-ERR wrong number of arguments for 'lease.acquire' command\r\n",
        ),
        (
            b"lease.heartbeat id\r\n".to_vec(),
            b"-ERR wrong number of arguments for 'lease.heartbeat' command\r\n",
        ),
        (
            req(&["LEASE.RELEASE", "id", "1", "0"]),
            b"-ERR wrong number of arguments for 'lease.release' command\r\n",
        ),
        (
            req(&["LEASE.GET", "run-1", "0", "0"]),
            b"-ERR wrong number of arguments for 'lease.get' command\r\n",
        ),
        (
            req(&["LEASE.ACQUIRE", "run-1", "w", "soon"]),
            b"-ERR value is not a valid float\r\n",
        ),
        (
            req(&["LEASE.ACQUIRE", "run-1", "w", "inf"]),
            b"-ERR value is not a valid float\r\n",
        ),
        (
            req(&["LEASE.ACQUIRE", "run-1", "w", "0", "TTL", "nan"]),
            b"-ERR value is not a valid float\r\n",
        ),
        (
            req(&["LEASE.ACQUIRE", "run-1", "w", "0", "TTL", "0"]),
            b"-ERR invalid expire time in 'lease.acquire' command\r\n",
        ),
        (
            req(&["LEASE.ACQUIRE", "run-1", "w", "0", "TTL"]),
            b"-ERR syntax error\r\n",
        ),
        (
            req(&["LEASE.ACQUIRE", "run-1", "w", "0", "LEASE", "5"]),
            b"-ERR syntax error\r\n",
        ),
        (
            req(&["LEASE.GET", "run-1", "1e999"]),
            b"-ERR value is not a valid float\r\n",
        ),
        (
            req(&["LEASE.HEARTBEAT", "run-1:w:1", "one", "0"]),
            b"-ERR value is not an integer or out of range\r\n",
        ),
        (
            req(&["LEASE.VALIDATE", "run-1", "run-1:w:1", "01", "0"]),
            b"-ERR value is not an integer or out of range\r\n",
        ),
        (
            req(&["LEASE.RELEASE", "run-1:w:1", "9223372036854775808"]),
            b"-ERR value is not an integer or out of range\r\n",
        ),
        (
            req(&["LEASE.RELEASE", "run-1:w:0", "0"]),
            b"-ERR value is out of range, must be positive\r\n",
        ),
        (
            req(&["LEASE.HEARTBEAT", "run-1:w:1", "-1", "0"]),
            b"-ERR value is out of range, must be positive\r\n",
        ),
        (
            req(&["NO.SUCH", "a", "b"]),
            b"-ERR unknown command 'NO.SUCH', with args beginning with: 'a' 'b' \r\n",
        ),
        (
            b"CLIENT FROB\r\n".to_vec(),
            b"-ERR unknown subcommand 'FROB'. Try CLIENT HELP.\r\n",
        ),
        (req(&["SELECT", "1"]), b"-ERR DB index is out of range\r\n"),
        (
            req(&["HELLO", "4"]),
            b"-NOPROTO unsupported protocol version\r\n",
        ),
    ]
}

#[test]
fn command_errors_never_close_the_connection() {
    let server = Server::start();
    let mut c = Client::new(&server);
    for (request, error) in command_errors() {
        c.expect(&request, error);
        c.expect(b"PING\r\n", b"+PONG\r\n");
    }
    // All of them pipelined in one write, each followed by PING.
    let mut stream = Vec::new();
    for (request, _) in command_errors() {
        stream.extend(request);
        stream.extend(req(&["PING"]));
    }
    c.send(&stream);
    for (request, error) in command_errors() {
        c.expect_frame(error, &show(&request));
        c.expect_frame(b"+PONG\r\n", "PING");
    }
    // None of the refused acquires used up a token.
    c.expect(
        &req(&["LEASE.ACQUIRE", "run-1", "w", "0"]),
        &lease2("run-1", "w", 1, "10"),
    );
}

// ---- protocol errors ----

#[test]
fn protocol_errors_reply_then_close_and_other_clients_go_on() {
    let server = Server::start();
    let mut bystander = Client::new(&server);
    bystander.expect(b"PING\r\n", b"+PONG\r\n");
    // Lines one byte over the 64 KiB limit, with no end in sight.
    let long_inline = vec![b'a'; 64 * 1024 + 1];
    let mut long_count = b"*".to_vec();
    long_count.extend(vec![b'1'; 64 * 1024]);
    let cases: &[(&[u8], &[u8])] = &[
        (
            &long_inline,
            b"-ERR Protocol error: too big inline request\r\n",
        ),
        (
            &long_count,
            b"-ERR Protocol error: too big mbulk count string\r\n",
        ),
        // Refused at the `x`, without waiting for the rest of a line.
        (
            b"*2\r\n$3\r\nfoo\r\nx",
            b"-ERR Protocol error: expected '$', got 'x'\r\n",
        ),
        (
            b"*1\r\n$4\r\nPING!!\r\n",
            b"-ERR Protocol error: expected '\\r\\n' after bulk data\r\n",
        ),
        (
            b"*1\r\nPING\r\n",
            b"-ERR Protocol error: expected '$', got 'P'\r\n",
        ),
        (
            b"*x\r\n",
            b"-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*1\rx",
            b"-ERR Protocol error: expected '\\n' after '\\r' in multibulk length\r\n",
        ),
        (
            b"*1\r\n$-1\r\n",
            b"-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*1\r\n$4\rx",
            b"-ERR Protocol error: expected '\\n' after '\\r' in bulk length\r\n",
        ),
        (
            b"ECHO \"never closed\r\n",
            b"-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
        // Requests before the error are answered; nothing after it runs.
        (
            b"PING\r\n*1\r\n$x\r\n*1\r\n$4\r\nPING\r\n",
            b"+PONG\r\n-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*4\r\n$13\r\nLEASE.ACQUIRE\r\n$3\r\nrun\r\n$1\r\nw\r\n$1\r\n0\r\n*1\r\n:1\r\n",
            b"*10\r\n$6\r\nrun_id\r\n$3\r\nrun\r\n$9\r\nworker_id\r\n$1\r\nw\r\n\
              $8\r\nlease_id\r\n$7\r\nrun:w:1\r\n$13\r\nfencing_token\r\n:1\r\n\
              $10\r\nexpires_at\r\n$2\r\n10\r\n\
              -ERR Protocol error: expected '$', got ':'\r\n",
        ),
    ];
    for (input, reply) in cases {
        let mut s = server.raw();
        s.write_all(input).unwrap();
        let got = read_to_close(&mut s);
        assert_eq!(
            show(&got),
            show(reply),
            "input {}",
            show(&input[..input.len().min(40)])
        );
    }
    // A second client, and the one connected all along, are still served.
    let mut after = Client::new(&server);
    after.expect(b"PING\r\n", b"+PONG\r\n");
    bystander.expect(b"PING\r\n", b"+PONG\r\n");
    // The acquire before the last error took token 1.
    let mut con = server.connect();
    let value: Value = redis::cmd("LEASE.ACQUIRE")
        .arg("after")
        .arg("w")
        .query(&mut con)
        .unwrap();
    assert_eq!(lease_reply(&value).fencing_token, 2);
}

#[test]
fn a_leading_dollar_line_is_an_inline_command() {
    // As in Redis: only `*` starts a multibulk, so `$3` and `foo` are two
    // inline commands, both unknown, and the connection stays open.
    let server = Server::start();
    let mut c = Client::new(&server);
    c.send(b"$3\r\nfoo\r\n");
    c.expect_frame(
        b"-ERR unknown command '$3', with args beginning with: \r\n",
        "$3",
    );
    c.expect_frame(
        b"-ERR unknown command 'foo', with args beginning with: \r\n",
        "foo",
    );
    c.expect(b"PING\r\n", b"+PONG\r\n");
}

#[test]
fn oversized_headers_are_refused_as_soon_as_they_arrive() {
    let server = Server::start();
    let cases: &[(&[u8], &[u8])] = &[
        // A 2^40-byte argument.
        (
            b"*1\r\n$1099511627776\r\n",
            b"-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*2\r\n$4\r\nECHO\r\n$1099511627776\r\n",
            b"-ERR Protocol error: invalid bulk length\r\n",
        ),
        // 10^9 arguments.
        (
            b"*1000000000\r\n",
            b"-ERR Protocol error: invalid multibulk length\r\n",
        ),
    ];
    for (header, reply) in cases {
        let mut s = server.raw();
        // Only the header: the reply must come without any more bytes.
        s.write_all(header).unwrap();
        let got = read_to_close(&mut s);
        assert_eq!(show(&got), show(reply), "header {}", show(header));
        let mut other = Client::new(&server);
        other.expect(b"PING\r\n", b"+PONG\r\n");
    }
}

// ---- large bursts ----

#[test]
fn a_large_argument_arrives_over_many_reads() {
    let server = Server::start();
    let data: Vec<u8> = (0..8usize << 20).map(|i| (i % 251) as u8).collect();
    let mut c = Client::new(&server);
    let mut writer = c.writer.try_clone().unwrap();
    let request = resp(&[b"ECHO", &data]);
    let sender = std::thread::spawn(move || writer.write_all(&request));
    let got = c.frame();
    sender.join().unwrap().unwrap();
    assert!(got == bulk(&data), "the echo differs from the argument");
    c.expect(b"PING\r\n", b"+PONG\r\n");
}

#[test]
fn a_large_burst_written_before_reading_is_served() {
    let server = Server::start();
    let run = "burst-run-0123456789";
    let message = "m".repeat(40);
    let mut setup = Client::new(&server);
    setup.expect(
        &req(&["LEASE.ACQUIRE", run, "w", "0"]),
        &lease2(run, "w", 1, "10"),
    );

    const PAIRS: usize = 200_000;
    let mut pair = req(&["LEASE.GET", run, "0"]);
    pair.extend(req(&["PING", &message]));
    let requests = pair.repeat(PAIRS);
    assert!(requests.len() >= 20 << 20, "{} bytes", requests.len());
    let mut reply = get2(run, "w", 1, "10", 0);
    reply.extend(bulk(message.as_bytes()));

    let mut s = server.raw();
    let mut writer = s.try_clone().unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(writer.write_all(&requests));
    });
    // Nothing is read until every request is written, so the server must
    // go on reading while tens of MiB of replies wait for the client.
    match done_rx.recv_timeout(Duration::from_secs(60)) {
        Ok(result) => result.unwrap(),
        Err(_) => panic!("the writer is stuck: the server stopped reading"),
    }

    let mut got = vec![0u8; reply.len() * PAIRS];
    s.read_exact(&mut got).unwrap();
    if let Some((i, chunk)) = got
        .chunks(reply.len())
        .enumerate()
        .find(|(_, chunk)| *chunk != reply.as_slice())
    {
        panic!("reply pair {i} is {}", show(chunk));
    }
    // Exactly that many: the next reply is this PING's.
    assert_eq!(exchange(&mut s, b"PING\r\n", 7), b"+PONG\r\n");
}

// ---- QUIT and half-close ----

#[test]
fn quit_replies_ok_closes_and_runs_nothing_after_it() {
    let server = Server::start();
    let mut s = server.raw();
    let mut stream = req(&["LEASE.ACQUIRE", "before", "w", "0"]);
    stream.extend(req(&["QUIT"]));
    stream.extend(req(&["LEASE.ACQUIRE", "after", "w", "0"]));
    stream.extend(b"PING\r\n");
    s.write_all(&stream).unwrap();
    let got = read_to_close(&mut s);
    let mut expected = lease2("before", "w", 1, "10");
    expected.extend(b"+OK\r\n");
    assert_eq!(show(&got), show(&expected));

    let mut inline = server.raw();
    inline.write_all(b"quit\r\n").unwrap();
    assert_eq!(read_to_close(&mut inline), b"+OK\r\n");

    let mut c = Client::new(&server);
    c.expect(&req(&["LEASE.GET", "after", "0"]), b"$-1\r\n");
    c.expect(
        &req(&["LEASE.GET", "before", "0"]),
        &get2("before", "w", 1, "10", 0),
    );
    // The acquire after QUIT issued no token.
    c.expect(
        &req(&["LEASE.ACQUIRE", "next", "w", "0"]),
        &lease2("next", "w", 2, "10"),
    );
    c.expect(b"DBSIZE\r\n", b":2\r\n");
}

#[test]
fn a_half_closed_client_still_gets_its_replies() {
    let server = Server::start();
    let mut s = server.raw();
    let mut stream = b"PING\r\n".to_vec();
    let mut expected = b"+PONG\r\n".to_vec();
    stream.extend(req(&["LEASE.ACQUIRE", "hc", "w", "0"]));
    expected.extend(lease2("hc", "w", 1, "10"));
    for i in 0..2000 {
        stream.extend(req(&["LEASE.GET", "hc", "0"]));
        expected.extend(get2("hc", "w", 1, "10", 0));
        let text = i.to_string();
        stream.extend(req(&["ECHO", &text]));
        expected.extend(bulk(text.as_bytes()));
    }
    s.write_all(&stream).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let got = read_to_close(&mut s);
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "replies differ");
}
