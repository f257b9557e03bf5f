//! TLS on `tls-port`, against the real binary, with certificates each test
//! makes with rcgen: the `redis` crate (blocking and async, RESP2 and
//! RESP3), redis-cli, client certificates, and start-up errors.
//!
//! The three tests that run `redis-cli --tls` need it installed (Debian:
//! `apt-get install redis-tools`) and are marked ignored, with that reason;
//! `cargo test -- --include-ignored` runs them. The rest need only the
//! Rust toolchain.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::binary::{Server, free_port, run_to_exit, wait_until};
use common::client::{run, status};
use common::pki::{ca, leaf};
use rcgen::{ExtendedKeyUsagePurpose, KeyPair};
use redis::{ClientTlsConfig, TlsCertificates, Value};

/// A CA and the files signed by it, in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    /// The CA that signs the server's and the client's certificates.
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    /// A client certificate from a CA the server does not trust.
    stranger_cert: PathBuf,
    stranger_key: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let authority = ca("leased test CA");
        let (server_cert, server_key) = leaf(
            &authority,
            "leased",
            &["localhost", "127.0.0.1"],
            &[ExtendedKeyUsagePurpose::ServerAuth],
        );
        let (client_cert, client_key) = leaf(
            &authority,
            "worker",
            &[],
            &[ExtendedKeyUsagePurpose::ClientAuth],
        );
        let other = ca("another CA");
        let (stranger_cert, stranger_key) = leaf(
            &other,
            "stranger",
            &[],
            &[ExtendedKeyUsagePurpose::ClientAuth],
        );
        Pki {
            ca: write("ca.pem", &authority.pem()),
            server_cert: write("server.pem", &server_cert),
            server_key: write("server.key", &server_key),
            client_cert: write("client.pem", &client_cert),
            client_key: write("client.key", &client_key),
            stranger_cert: write("stranger.pem", &stranger_cert),
            stranger_key: write("stranger.key", &stranger_key),
            dir,
        }
    }

    /// A file in the PKI's directory, for tests that make their own.
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

fn text(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A server with TLS on a free port as well as its plain port.
struct TlsServer {
    server: Server,
    tls_port: u16,
    pki: Pki,
}

impl TlsServer {
    /// The server's certificate and the CA, with `extra` directives.
    fn start(extra: &[&str]) -> TlsServer {
        let pki = Pki::new();
        let mut last_error = String::new();
        // The free port can be taken by someone else before leased binds it.
        for attempt in 0..3 {
            let tls_port = free_port();
            let port = tls_port.to_string();
            let mut args = vec![
                "--tls-port",
                &port,
                "--tls-cert-file",
                arg(&pki.server_cert),
                "--tls-key-file",
                arg(&pki.server_key),
                "--tls-ca-cert-file",
                arg(&pki.ca),
            ];
            args.extend_from_slice(extra);
            let dir = pki.dir.path().join(format!("data-{attempt}"));
            match Server::start_in(&dir, &args) {
                Ok(server) => {
                    return TlsServer {
                        server,
                        tls_port,
                        pki,
                    };
                }
                Err(error) if error.contains("TLS listening socket") => last_error = error,
                Err(error) => panic!("{error}"),
            }
        }
        panic!("no free TLS port: {last_error}");
    }

    fn url(&self, query: &str) -> String {
        format!("rediss://127.0.0.1:{}/{query}", self.tls_port)
    }

    /// A client trusting the test CA, with the given client certificate.
    fn client_with(&self, url: &str, cert: Option<(&Path, &Path)>) -> redis::Client {
        let client_tls = cert.map(|(cert, key)| ClientTlsConfig {
            client_cert: text(cert),
            client_key: text(key),
        });
        let certificates = TlsCertificates {
            client_tls,
            root_cert: Some(text(&self.pki.ca)),
        };
        redis::Client::build_with_tls(url, certificates).unwrap()
    }

    /// A client presenting the certificate the CA signed.
    fn client(&self) -> redis::Client {
        self.client_with(&self.url(""), Some(self.client_cert()))
    }

    fn client_cert(&self) -> (&Path, &Path) {
        (&self.pki.client_cert, &self.pki.client_key)
    }

    fn stranger_cert(&self) -> (&Path, &Path) {
        (&self.pki.stranger_cert, &self.pki.stranger_key)
    }

    fn connect(&self) -> redis::Connection {
        self.client().get_connection().expect("TLS connect")
    }

    /// A PING through a fresh connection.
    fn ping(&self, cert: Option<(&Path, &Path)>) -> redis::RedisResult<String> {
        let client = self.client_with(&self.url(""), cert);
        let mut con = client.get_connection_with_timeout(Duration::from_secs(10))?;
        con.set_read_timeout(Some(Duration::from_secs(10)))?;
        redis::cmd("PING").query(&mut con)
    }

    fn redis_cli(&self, args: &[&str]) -> Output {
        Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.tls_port.to_string()])
            .args(["--tls", "--cacert", arg(&self.pki.ca)])
            .args(args)
            .output()
            .expect("redis-cli is installed (apt-get install redis-tools)")
    }
}

#[test]
fn redis_crate_pings_and_acquires_over_tls() {
    let tls = TlsServer::start(&[]);
    let mut con = tls.connect();
    assert_eq!(run(&mut con, &["PING"]), status("PONG"));
    assert_eq!(
        common::client::acquire(&mut con, "run-1", "worker-a", 0.0),
        Some(1)
    );
    assert_eq!(
        common::client::acquire(&mut con, "run-1", "worker-b", 1.0),
        None
    );
    let lease = common::client::lease_reply(&run(&mut con, &["LEASE.GET", "run-1", "2"]));
    assert_eq!(lease.worker_id, b"worker-a");
    assert_eq!(lease.fencing_token, 1);
    let port = tls.tls_port.to_string();
    assert_eq!(
        common::client::pairs(run(&mut con, &["CONFIG", "GET", "tls-*"])),
        [
            ("tls-port", port.as_str()),
            ("tls-cert-file", arg(&tls.pki.server_cert)),
            ("tls-key-file", arg(&tls.pki.server_key)),
            ("tls-ca-cert-file", arg(&tls.pki.ca)),
            ("tls-auth-clients", "yes"),
            ("tls-cluster", "no"),
        ]
        .map(|(k, v)| (common::client::bulk_value(k), common::client::bulk_value(v)))
    );
    // The readiness line names the TLS address too, marked as such.
    let log = tls.server.log();
    let ready = log
        .lines()
        .find(|line| line.contains("Ready to accept connections on"))
        .unwrap();
    assert!(
        ready.ends_with(&format!(
            "127.0.0.1:{}, 127.0.0.1:{} (tls)",
            tls.server.port, tls.tls_port
        )),
        "{ready}"
    );
}

#[test]
fn resp3_over_tls() {
    let tls = TlsServer::start(&[]);
    let client = tls.client_with(&tls.url("?protocol=resp3"), Some(tls.client_cert()));
    let mut con = client.get_connection().unwrap();
    let lease = run(&mut con, &["LEASE.ACQUIRE", "run", "w", "0"]);
    assert!(matches!(lease, Value::Map(_)), "{lease:?}");
    assert_eq!(common::client::lease_reply(&lease).fencing_token, 1);
    let hello = common::client::pairs(run(&mut con, &["HELLO"]));
    assert_eq!(common::client::field(&hello, "proto"), Value::Int(3));
}

#[test]
fn async_redis_client_over_tls() {
    let tls = TlsServer::start(&[]);
    let client = tls.client();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let pong: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
        assert_eq!(pong, "PONG");
        // A pipeline of many requests with replies larger than one TLS
        // record: everything comes back, in order.
        let mut pipe = redis::pipe();
        for i in 0..500 {
            pipe.cmd("ECHO").arg(format!("{i:0>20000}"));
        }
        let echoed: Vec<String> = pipe.query_async(&mut con).await.unwrap();
        assert_eq!(echoed.len(), 500);
        for (i, echo) in echoed.iter().enumerate() {
            assert_eq!(*echo, format!("{i:0>20000}"));
        }
    });
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn redis_cli_over_tls_with_a_client_certificate() {
    let tls = TlsServer::start(&[]);
    let out = tls.redis_cli(&[
        "--cert",
        arg(&tls.pki.client_cert),
        "--key",
        arg(&tls.pki.client_key),
        "LEASE.ACQUIRE",
        "run-1",
        "worker-a",
        "0",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "run_id\nrun-1\nworker_id\nworker-a\nlease_id\nrun-1:worker-a:1\nfencing_token\n1\nexpires_at\n10\n"
    );
    // Without a certificate, tls-auth-clients yes turns it away.
    let out = tls.redis_cli(&["PING"]);
    assert_ne!(String::from_utf8_lossy(&out.stdout), "PONG\n", "{out:?}");
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn redis_cli_over_tls_without_client_certificates() {
    let tls = TlsServer::start(&["--tls-auth-clients", "no"]);
    let out = tls.redis_cli(&["PING"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "PONG\n");
    let out = tls.redis_cli(&["--no-raw", "LEASE.ACQUIRE", "run", "w", "0"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"run:w:1\""),
        "{out:?}"
    );
}

#[test]
fn plain_and_tls_ports_serve_at_once() {
    let tls = TlsServer::start(&[]);
    let mut plain = tls.server.connect();
    let mut secure = tls.connect();
    assert_eq!(
        common::client::acquire(&mut plain, "run", "plain", 0.0),
        Some(1)
    );
    let lease = common::client::lease_reply(&run(&mut secure, &["LEASE.GET", "run", "1"]));
    assert_eq!(lease.worker_id, b"plain");
    assert_eq!(
        common::client::acquire(&mut secure, "run2", "secure", 0.0),
        Some(2)
    );
    let lease = common::client::lease_reply(&run(&mut plain, &["LEASE.GET", "run2", "1"]));
    assert_eq!(lease.worker_id, b"secure");

    // Both show in CLIENT LIST, each with its own file descriptor and
    // local address.
    let list = match run(&mut plain, &["CLIENT", "LIST"]) {
        Value::BulkString(text) => String::from_utf8(text).unwrap(),
        other => panic!("{other:?}"),
    };
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 2, "{list}");
    let field = |line: &str, name: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .unwrap()
            .to_string()
    };
    let laddrs: Vec<String> = lines.iter().map(|l| field(l, "laddr")).collect();
    assert!(laddrs.contains(&format!("127.0.0.1:{}", tls.server.port)));
    assert!(laddrs.contains(&format!("127.0.0.1:{}", tls.tls_port)));
    for line in &lines {
        assert!(field(line, "fd").parse::<i32>().unwrap() > 2, "{line}");
    }

    // The plain port does not speak TLS, and the TLS port not plain RESP.
    assert!(
        tls.client_with(
            &format!("rediss://127.0.0.1:{}/", tls.server.port),
            Some(tls.client_cert())
        )
        .get_connection_with_timeout(Duration::from_secs(5))
        .is_err()
    );
    let plain_to_tls = redis::Client::open(format!("redis://127.0.0.1:{}/", tls.tls_port))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
    assert!(plain_to_tls.is_err(), "{plain_to_tls:?}");
}

#[test]
fn auth_clients_yes_needs_a_certificate_from_the_ca() {
    let tls = TlsServer::start(&["--tls-auth-clients", "yes"]);
    assert_eq!(tls.ping(Some(tls.client_cert())).unwrap(), "PONG");
    let without = tls.ping(None);
    assert!(without.is_err(), "{without:?}");
    let stranger = tls.ping(Some(tls.stranger_cert()));
    assert!(stranger.is_err(), "{stranger:?}");
    // The refused ones did not disturb the server.
    assert_eq!(tls.ping(Some(tls.client_cert())).unwrap(), "PONG");
}

#[test]
fn auth_clients_optional_checks_only_certificates_presented() {
    let tls = TlsServer::start(&["--tls-auth-clients", "optional"]);
    assert_eq!(tls.ping(Some(tls.client_cert())).unwrap(), "PONG");
    assert_eq!(tls.ping(None).unwrap(), "PONG");
    let stranger = tls.ping(Some(tls.stranger_cert()));
    assert!(stranger.is_err(), "{stranger:?}");
}

#[test]
fn auth_clients_no_asks_for_no_certificate() {
    let tls = TlsServer::start(&["--tls-auth-clients", "no"]);
    assert_eq!(tls.ping(None).unwrap(), "PONG");
    // One that is presented anyway is not asked for, so not looked at.
    assert_eq!(tls.ping(Some(tls.client_cert())).unwrap(), "PONG");
}

#[test]
fn auth_clients_no_needs_no_ca_file() {
    let pki = Pki::new();
    let port = free_port().to_string();
    let server = Server::start_with(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        arg(&pki.server_cert),
        "--tls-key-file",
        arg(&pki.server_key),
        "--tls-auth-clients",
        "no",
    ]);
    let tls = TlsServer {
        server,
        tls_port: port.parse().unwrap(),
        pki,
    };
    assert_eq!(tls.ping(None).unwrap(), "PONG");
}

#[test]
fn requirepass_over_tls() {
    let tls = TlsServer::start(&["--requirepass", "s3cret"]);
    let mut con = tls.connect();
    assert_eq!(
        common::client::error(&mut con, &["PING"]),
        "NOAUTH Authentication required."
    );
    assert_eq!(run(&mut con, &["AUTH", "s3cret"]), Value::Okay);
    assert_eq!(run(&mut con, &["PING"]), status("PONG"));
    for query in ["", "?protocol=resp3"] {
        let url = format!("rediss://:s3cret@127.0.0.1:{}/{query}", tls.tls_port);
        let mut con = tls
            .client_with(&url, Some(tls.client_cert()))
            .get_connection()
            .unwrap();
        assert!(
            common::client::acquire(&mut con, query, "w", 0.0).is_some(),
            "{url}"
        );
    }
}

#[test]
fn tls_clients_count_toward_maxclients() {
    let tls = TlsServer::start(&["--maxclients", "1"]);
    let mut first = tls.connect();
    assert_eq!(run(&mut first, &["PING"]), status("PONG"));
    let refused = tls.ping(Some(tls.client_cert()));
    assert!(refused.is_err(), "{refused:?}");
    let mut plain = tls.server.raw();
    let reply = common::raw::read_to_close(&mut plain);
    assert_eq!(reply, b"-ERR max number of clients reached\r\n");
    drop(first);
    // Once the first has gone, a new one gets in.
    wait_until(Duration::from_secs(10), || {
        let ping = tls.ping(Some(tls.client_cert()));
        ping.map_err(|error| format!("never let in: {error:?}"))
    });
}

/// A TLS client turned away by `maxclients` reads why: the error comes
/// over TLS, as the reply to its first request. (The `redis` crate only
/// reports the closed connection, so redis-cli reads it.)
#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn redis_cli_over_tls_reads_the_maxclients_error() {
    let tls = TlsServer::start(&["--maxclients", "1"]);
    let mut first = tls.connect();
    assert_eq!(run(&mut first, &["PING"]), status("PONG"));
    let out = tls.redis_cli(&[
        "--cert",
        arg(&tls.pki.client_cert),
        "--key",
        arg(&tls.pki.client_key),
        "PING",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        "ERR max number of clients reached",
        "{out:?}"
    );
}

#[test]
fn silent_and_plaintext_clients_do_not_hold_up_tls_clients() {
    let tls = TlsServer::start(&[]);
    let connect = || {
        let stream = TcpStream::connect(("127.0.0.1", tls.tls_port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream
    };
    // Says nothing: its handshake waits in its own task.
    let silent = connect();
    // Plaintext RESP where a ClientHello should be: dropped at once.
    let mut garbage = connect();
    garbage
        .write_all(&common::raw::resp(&[b"PING"]))
        .expect("write plaintext");
    let mut reply = Vec::new();
    let _ = garbage.read_to_end(&mut reply);
    assert!(!reply.windows(4).any(|w| w == b"PONG"), "{reply:?}");

    let mut con = tls.connect();
    assert_eq!(run(&mut con, &["PING"]), status("PONG"));
    assert_eq!(tls.ping(Some(tls.client_cert())).unwrap(), "PONG");
    // The plaintext one is gone; the silent one is still connected, and
    // listed as a client that has sent nothing (as Redis lists a connection
    // from its accept). Looked up by address: the ping's client may or may
    // not have been closed yet.
    let list = run(&mut con, &["CLIENT", "LIST"]);
    let Value::BulkString(list) = list else {
        panic!("{list:?}")
    };
    let list = String::from_utf8(list).unwrap();
    let line = |stream: &TcpStream| {
        let addr = format!("addr={} ", stream.local_addr().unwrap());
        list.lines()
            .find(|line| line.contains(&addr))
            .map(str::to_owned)
    };
    assert_eq!(line(&garbage), None, "{list}");
    let silent_line = line(&silent).unwrap_or_else(|| panic!("{list}"));
    assert!(silent_line.contains(" cmd=NULL "), "{silent_line}");
    assert!(list.contains("cmd=client|list"), "{list}");
    drop(silent);
}

/// Runs leased with `args` expecting it to refuse to start; returns its
/// output.
fn refused(args: &[&str]) -> String {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("data");
    let mut all = vec!["--port", "0", "--dir", arg(&dir)];
    all.extend_from_slice(args);
    let exited = run_to_exit(&all);
    let output = exited.output();
    assert!(!exited.status.success(), "{args:?} started:\n{output}");
    assert!(
        !output.contains("Ready to accept connections"),
        "{args:?}:\n{output}"
    );
    output
}

#[test]
fn misconfigured_tls_stops_the_start_naming_directive_and_file() {
    let pki = Pki::new();
    let port = free_port().to_string();
    let cert = arg(&pki.server_cert);
    let key = arg(&pki.server_key);
    let base = ["--tls-port", &port];

    let output = refused(&base);
    assert!(
        output.contains("tls-port is set but tls-cert-file is not"),
        "{output}"
    );
    let output = refused(&[&base[..], &["--tls-cert-file", cert]].concat());
    assert!(
        output.contains("tls-port is set but tls-key-file is not"),
        "{output}"
    );
    let with_keys = [&base[..], &["--tls-cert-file", cert, "--tls-key-file", key]].concat();

    // Client certificates are checked by default, so a CA is needed.
    for auth in ["yes", "optional"] {
        let output = refused(&[&with_keys[..], &["--tls-auth-clients", auth]].concat());
        assert!(
            output.contains(&format!(
                "tls-auth-clients is {auth} but tls-ca-cert-file is not set"
            )),
            "{output}"
        );
        assert!(output.contains("'tls-auth-clients no'"), "{output}");
    }
    let output = refused(&with_keys);
    assert!(output.contains("tls-ca-cert-file is not set"), "{output}");

    let missing = pki.dir.path().join("missing.pem");
    let not_pem = pki.file("notes.txt", "not a certificate\n");
    let bad_base64 = pki.file(
        "bad.pem",
        "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
    );
    let not_a_cert = pki.file(
        "junk.pem",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    );
    let other_key = pki.file("other.key", &KeyPair::generate().unwrap().serialize_pem());
    let cases: Vec<(Vec<&str>, Vec<String>)> = vec![
        (
            vec!["--tls-cert-file", arg(&missing), "--tls-key-file", key],
            vec![format!("cannot read tls-cert-file '{}'", missing.display())],
        ),
        (
            vec!["--tls-cert-file", arg(&not_pem), "--tls-key-file", key],
            vec![format!(
                "tls-cert-file '{}' holds no PEM certificate",
                not_pem.display()
            )],
        ),
        (
            vec!["--tls-cert-file", arg(&bad_base64), "--tls-key-file", key],
            vec![format!(
                "tls-cert-file '{}' is not valid PEM",
                bad_base64.display()
            )],
        ),
        (
            vec!["--tls-cert-file", arg(&not_a_cert), "--tls-key-file", key],
            vec![format!("tls-cert-file '{}'", not_a_cert.display())],
        ),
        (
            vec!["--tls-cert-file", cert, "--tls-key-file", arg(&missing)],
            vec![format!("cannot read tls-key-file '{}'", missing.display())],
        ),
        (
            // A certificate where the key should be.
            vec!["--tls-cert-file", cert, "--tls-key-file", cert],
            vec![format!(
                "tls-key-file '{}' holds no unencrypted PEM private key",
                cert
            )],
        ),
        (
            vec!["--tls-cert-file", cert, "--tls-key-file", arg(&other_key)],
            vec![
                "do not make a usable certificate".to_string(),
                arg(&other_key).to_string(),
            ],
        ),
    ];
    for (files, expected) in cases {
        let args = [&base[..], &files, &["--tls-auth-clients", "no"]].concat();
        let output = refused(&args);
        for text in expected {
            assert!(output.contains(&text), "{args:?}: wanted {text}:\n{output}");
        }
    }

    for (ca_file, expected) in [
        (
            arg(&missing),
            format!("cannot read tls-ca-cert-file '{}'", missing.display()),
        ),
        (
            arg(&not_pem),
            format!(
                "tls-ca-cert-file '{}' holds no PEM certificate",
                not_pem.display()
            ),
        ),
        (
            arg(&not_a_cert),
            format!("tls-ca-cert-file '{}'", not_a_cert.display()),
        ),
    ] {
        let args = [&with_keys[..], &["--tls-ca-cert-file", ca_file]].concat();
        let output = refused(&args);
        assert!(output.contains(&expected), "{args:?}: {output}");
    }

    // The same checks for the config file.
    let conf = pki.file(
        "leased.conf",
        &format!("tls-port {port}\ntls-cert-file {cert}\ntls-key-file {key}\n"),
    );
    let output = refused(&[arg(&conf)]);
    assert!(output.contains("tls-ca-cert-file is not set"), "{output}");
}

#[test]
fn tls_port_zero_reads_no_tls_files() {
    // tls-port 0 (the default) is off: the other directives are kept for
    // CONFIG GET but not read.
    let server = Server::start_with(&[
        "--tls-cert-file",
        "/nonexistent/cert.pem",
        "--tls-key-file",
        "/nonexistent/key.pem",
    ]);
    let mut con = server.connect();
    assert_eq!(run(&mut con, &["PING"]), status("PONG"));
    assert!(!server.log().contains("(tls)"), "{}", server.log());
}

#[test]
fn tls_port_in_use_stops_the_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let pki = Pki::new();
    let output = refused(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        arg(&pki.server_cert),
        "--tls-key-file",
        arg(&pki.server_key),
        "--tls-auth-clients",
        "no",
    ]);
    assert!(
        output.contains(&format!(
            "Could not create server TLS listening socket 127.0.0.1:{port}"
        )),
        "{output}"
    );
}
