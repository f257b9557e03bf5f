//! What the real binary logs: text or JSON lines (`logformat`), to standard
//! output or a `logfile`, the start-up facts, and the warnings for risky
//! settings.

mod common;

use std::path::Path;
use std::process::Command;

use common::binary::{Server, log_message, run_to_exit};
use serde_json::Value;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// Starts leased on `conf` (a file written into `temp`) with `args`, and
/// stops it once it serves; returns its output.
fn serve_with_file(temp: &Path, conf: &str, args: &[&str]) -> (Server, String) {
    let dir = temp.join("data");
    let file = temp.join("leased.conf");
    std::fs::write(&file, conf).unwrap();
    let mut command = Command::new(common::binary::BINARY);
    command
        .arg(&file)
        .args(["--port", "0", "--dir"])
        .arg(&dir)
        .args(args);
    let mut server = Server::spawn(command, &dir).expect("starts");
    let mut con = server.connect();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    drop(con);
    server.stop();
    let log = server.log();
    (server, log)
}

/// The start-up facts, as every start logs them, in one format's messages.
fn assert_start_up_facts(messages: &[String], file: &Path, dir: &Path, port: u16) {
    let has = |what: &str| messages.iter().any(|m| m.contains(what));
    let starting = format!(
        "leased {VERSION} starting (pid {}",
        messages
            .iter()
            .find_map(|m| m.split("(pid ").nth(1)?.split(',').next())
            .unwrap_or("?")
    );
    assert!(has(&starting), "no version line: {messages:#?}");
    let config_file = format!("config file: {})", file.display());
    assert!(has(&config_file), "no config file: {messages:#?}");
    let data = format!(
        "Data directory: {}; persistence: appendonly yes, appendfsync everysec",
        dir.display()
    );
    assert!(
        has(&data),
        "no data directory and persistence: {messages:#?}"
    );
    let ready = format!("Ready to accept connections on 127.0.0.1:{port}");
    assert!(
        messages.iter().any(|m| m == &ready),
        "no readiness line with the real port {port}: {messages:#?}"
    );
}

#[test]
fn json_lines_carry_timestamp_level_and_message() {
    let temp = temp();
    let (server, log) = serve_with_file(temp.path(), "logformat json\n", &[]);
    let mut messages = Vec::new();
    for line in log.lines() {
        let json: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}\n{log}"));
        let object = json.as_object().expect("a JSON object");
        for key in ["timestamp", "level", "message"] {
            assert!(object[key].is_string(), "{key} in {line}");
        }
        // Flat: the message at the top level, no nesting, no spans.
        assert!(object.values().all(|v| v.is_string()), "{line}");
        messages.push(object["message"].as_str().unwrap().to_owned());
    }
    let file = temp.path().join("leased.conf");
    assert_start_up_facts(&messages, &file, &server.dir, server.port);
    assert!(log.contains(r#""level":"INFO""#), "{log}");
    assert!(
        messages
            .iter()
            .any(|m| m == "leased is now ready to exit, bye bye..."),
        "the shutdown lines are JSON too: {messages:#?}"
    );
}

#[test]
fn text_lines_carry_the_same_facts() {
    let temp = temp();
    let (server, log) = serve_with_file(temp.path(), "logformat text\n", &[]);
    assert!(
        log.lines()
            .all(|line| serde_json::from_str::<Value>(line).is_err()),
        "{log}"
    );
    let ready = log
        .lines()
        .find(|line| line.contains("Ready to accept"))
        .unwrap();
    assert!(ready.contains(" INFO "), "time, level, message: {ready}");
    let messages: Vec<String> = log
        .lines()
        .map(|line| line.split(" INFO ").nth(1).unwrap_or(line).to_owned())
        .collect();
    let file = temp.path().join("leased.conf");
    assert_start_up_facts(&messages, &file, &server.dir, server.port);
    assert!(
        !log.contains(" WARN "),
        "the defaults warn about nothing:\n{log}"
    );
}

#[test]
fn memory_only_is_said_once() {
    let server = Server::start_with(&["--appendonly", "no"]);
    let log = server.log();
    assert!(
        log.contains("persistence: appendonly no (leases in memory only)"),
        "{log}"
    );
    let warnings = log.matches("do not survive a restart").count();
    assert_eq!(warnings, 1, "{log}");
}

/// Each risky setting, what its warning must say, and a word of the fix.
const RISKY: &[(&[&str], &str, &str)] = &[
    (
        &["--bind", "0.0.0.0", "--protected-mode", "no"],
        "protected-mode is no and no password is set",
        "requirepass",
    ),
    (
        &["--bind", "0.0.0.0", "--requirepass", "secret"],
        "without TLS: the password",
        "tls-port",
    ),
    (
        &["--lease-ttl", "0.5"],
        "lease-ttl is 0.5 seconds",
        "Raise lease-ttl",
    ),
    (
        &["--lease-retention", "0"],
        "lease-retention is 0",
        "Set lease-retention",
    ),
    (
        &["--appendonly", "no"],
        "do not survive a restart",
        "'appendonly yes'",
    ),
    (
        &["--appendfsync", "no"],
        "appendfsync is no",
        "'appendfsync everysec'",
    ),
    (
        &["--auto-aof-rewrite-percentage", "0"],
        "never rewritten automatically",
        "BGREWRITEAOF",
    ),
    (
        &["--aof-load-good-prefix", "yes"],
        "aof-load-good-prefix is yes",
        "back to 'no'",
    ),
];

#[test]
fn each_risky_setting_is_warned_about_once_with_its_fix() {
    for (args, what, fix) in RISKY {
        let mut server = Server::start_with(args);
        let log = server.log();
        let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
        assert_eq!(warnings.len(), 1, "{args:?}:\n{log}");
        assert!(warnings[0].contains(what), "{args:?}: {}", warnings[0]);
        assert!(warnings[0].contains(fix), "{args:?}: {}", warnings[0]);
        // Before the server serves, where the start-up is read.
        let ready = log.find("Ready to accept connections").unwrap();
        assert!(log.find(what).unwrap() < ready, "{args:?}:\n{log}");
        server.stop();
    }
}

#[test]
fn a_default_start_warns_about_none_of_them() {
    let mut server = Server::start();
    server.stop();
    let log = server.log();
    for (_, what, _) in RISKY {
        assert!(!log.contains(what), "{what:?} by default:\n{log}");
    }
    assert!(!log.contains("WARN"), "{log}");
}

#[test]
fn logfile_gets_the_lines_and_standard_output_none() {
    let temp = temp();
    let dir = temp.path().join("data");
    let logfile = temp.path().join("leased.log");
    std::fs::write(&logfile, "an older line\n").unwrap();
    let port = common::binary::free_port();
    let mut command = Command::new(common::binary::BINARY);
    command
        .args(["--port", &port.to_string(), "--logformat", "json", "--dir"])
        .arg(&dir)
        .arg("--logfile")
        .arg(&logfile);
    let mut server = Server::spawn_on_port(command, &dir, port).expect("starts");
    let mut con = server.connect();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    let logged: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("logfile")
        .query(&mut con)
        .unwrap();
    assert_eq!(logged, ["logfile", logfile.to_str().unwrap()]);
    drop(con);
    server.stop();
    assert_eq!(server.log(), "", "nothing on standard output or error");

    let text = std::fs::read_to_string(&logfile).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("an older line"), "appended:\n{text}");
    let messages: Vec<String> = lines.map(log_message).collect();
    let ready = format!("Ready to accept connections on 127.0.0.1:{port}");
    assert!(messages.contains(&ready), "{text}");
    assert!(
        messages.contains(&"leased is now ready to exit, bye bye...".to_owned()),
        "{text}"
    );
}

#[test]
fn a_logfile_that_cannot_be_opened_stops_the_start() {
    let temp = temp();
    let logfile = temp.path().join("no-such-dir/leased.log");
    let dir = temp.path().join("data");
    let exited = run_to_exit(&[
        "--port",
        "0",
        "--dir",
        dir.to_str().unwrap(),
        "--logfile",
        logfile.to_str().unwrap(),
    ]);
    let output = exited.output();
    assert!(!exited.status.success(), "{output}");
    assert!(output.contains("logfile"), "{output}");
    assert!(output.contains(logfile.to_str().unwrap()), "{output}");
    assert!(!output.contains("Ready to accept"), "{output}");
}

#[test]
fn a_fatal_error_in_json_mode_is_a_json_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let temp = temp();
    let dir = temp.path().join("data");
    let exited = run_to_exit(&[
        "--port",
        &port,
        "--dir",
        dir.to_str().unwrap(),
        "--logformat",
        "json",
    ]);
    assert!(!exited.status.success(), "{}", exited.output());
    let last = exited.stdout.lines().last().expect("a line");
    let json: Value = serde_json::from_str(last).expect("JSON");
    assert_eq!(json["level"], "ERROR", "{last}");
    let message = json["message"].as_str().unwrap();
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    drop(taken);
    // Nothing but JSON lines on standard output.
    for line in exited.stdout.lines() {
        serde_json::from_str::<Value>(line).expect("JSON");
    }
}
