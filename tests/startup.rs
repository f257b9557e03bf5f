//! Starting the real binary: the readiness line, the config file and the
//! command line, refusals with messages that say what is wrong, and the
//! start-up log.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::binary::{Server, run_to_exit};
use common::client::{acquire, bulk_value, field, pairs};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn write_file(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).expect("write file");
    path.to_path_buf()
}

/// Runs leased with `args` (plus a data directory of its own), expecting
/// it to refuse to start; returns everything it printed.
fn refused(args: &[&str]) -> String {
    let temp = temp();
    let dir = temp.path().join("data");
    let mut all = args.to_vec();
    all.extend(["--dir", dir.to_str().unwrap()]);
    let exited = run_to_exit(&all);
    let output = exited.output();
    assert!(
        !exited.status.success(),
        "{args:?} should fail, exited with {}: {output}",
        exited.status
    );
    assert!(
        !output.contains("Ready to accept connections"),
        "{args:?}: {output}"
    );
    output
}

#[test]
fn port_zero_picks_a_free_port_and_the_readiness_line_names_it() {
    let server = Server::start();
    assert_ne!(server.port, 0);
    let announced = format!("Ready to accept connections on 127.0.0.1:{}", server.port);
    assert!(server.log().contains(&announced), "{}", server.log());
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port))
        .unwrap()
        .get_connection()
        .expect("connect to the announced address");
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn port_zero_with_several_addresses_uses_one_port() {
    let server = Server::start_with(&["--bind", "127.0.0.1", "127.0.0.2"]);
    let port = server.port;
    let announced = format!("Ready to accept connections on 127.0.0.1:{port}, 127.0.0.2:{port}");
    assert!(server.log().contains(&announced), "{}", server.log());
    for host in ["127.0.0.1", "127.0.0.2"] {
        let mut con = redis::Client::open(format!("redis://{host}:{port}/"))
            .unwrap()
            .get_connection()
            .expect("connect to each announced address");
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG");
    }
}

#[test]
fn the_config_file_is_honoured_and_the_command_line_overrides_it() {
    let temp = temp();
    let dir = temp.path().join("data from file");
    let port = common::binary::free_port();
    let file = write_file(
        &temp.path().join("leased.conf"),
        &format!(
            "# a test configuration\n\n   # an indented comment\n\
             port {port}\n\
             \n\
             lease-ttl 2.5\n\
             dir \"{}\"\n\
             loglevel notice\n",
            dir.display()
        ),
    );

    let mut command = Command::new(common::binary::BINARY);
    command.arg(&file);
    let mut server = Server::spawn(command, &dir).expect("starts with the file");
    assert_eq!(server.port, port, "the port comes from the file");
    assert!(dir.is_dir(), "the dir comes from the file");
    let mut con = server.typed();
    let lease = pairs(con.run(&["LEASE.ACQUIRE", "run", "w", "0"]));
    assert_eq!(field(&lease, "expires_at"), bulk_value("2.5"));
    assert_eq!(con.config_get("lease-ttl"), "2.5");
    assert_eq!(con.config_get("port"), port.to_string());
    server.stop();

    let mut command = Command::new(common::binary::BINARY);
    command.arg(&file).args(["--lease-ttl", "7"]);
    let server = Server::spawn(command, &dir).expect("starts with the file and a flag");
    let mut con = server.typed();
    // A new run: the first one's lease survived the restart in the log.
    let lease = pairs(con.run(&["LEASE.ACQUIRE", "run-2", "w", "0"]));
    assert_eq!(field(&lease, "expires_at"), bulk_value("7"));
    assert_eq!(con.config_get("lease-ttl"), "7");
}

#[test]
fn an_unknown_directive_in_the_file_names_it_and_the_line() {
    let temp = temp();
    let file = write_file(
        &temp.path().join("leased.conf"),
        "# comment\n\nport 0\nhash-max-listpack-entries 128\n",
    );
    let path = file.to_str().unwrap();
    let output = refused(&[path]);
    assert!(output.contains("hash-max-listpack-entries"), "{output}");
    assert!(
        output.contains(&format!("{path}:4")),
        "the message should name the file and line 4: {output}"
    );
}

#[test]
fn bad_values_name_the_directive() {
    let temp = temp();
    for (directive, value) in [
        ("port", "abc"),
        ("port", "65536"),
        ("lease-ttl", "0"),
        ("lease-ttl", "-1"),
        ("lease-ttl", "abc"),
        ("loglevel", "loud"),
        ("logformat", "yaml"),
        ("bind", "localhost"),
    ] {
        let file = write_file(
            &temp.path().join("bad.conf"),
            &format!("# line 1\n\n{directive} {value}\n"),
        );
        let path = file.to_str().unwrap();
        let output = refused(&[path]);
        assert!(
            output.contains(directive) && output.contains(&format!("{path}:3")),
            "{directive} {value} in a file: {output}"
        );

        let flag = format!("--{directive}");
        let output = refused(&[&flag, value]);
        assert!(
            output.contains(&flag) && output.contains(value),
            "{flag} {value}: {output}"
        );
    }
}

#[test]
fn an_unknown_flag_is_refused_by_name() {
    let output = refused(&["--no-such-directive", "1"]);
    assert!(output.contains("--no-such-directive"), "{output}");
    // Directives that Redis has but leased cannot set are unknown too.
    let output = refused(&["--hash-max-listpack-entries", "128"]);
    assert!(output.contains("--hash-max-listpack-entries"), "{output}");
}

#[test]
fn a_missing_config_file_is_refused() {
    let temp = temp();
    let missing = temp.path().join("missing.conf");
    let output = refused(&[missing.to_str().unwrap()]);
    assert!(output.contains(missing.to_str().unwrap()), "{output}");
    assert!(output.contains("config file"), "{output}");
}

/// The directives `conf/leased.conf` sets, which documents every one.
fn documented_directives() -> Vec<String> {
    let conf = Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/leased.conf");
    let text = std::fs::read_to_string(conf).expect("conf/leased.conf");
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| line.split_whitespace().next().unwrap().to_string())
        .collect()
}

#[test]
fn help_lists_every_directive() {
    let exited = run_to_exit(&["--help"]);
    assert!(exited.status.success(), "{}", exited.output());
    let help = exited.stdout;
    let directives = documented_directives();
    assert!(directives.len() >= 5, "{directives:?}");
    for directive in &directives {
        assert!(
            help.contains(&format!("--{directive} ")),
            "--help does not list {directive}:\n{help}"
        );
    }
    // And lists nothing the documentation leaves out.
    let listed: Vec<&str> = help
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("--"))
        .filter_map(|option| option.split(' ').next())
        .filter(|name| !["help", "version"].contains(name))
        .collect();
    assert_eq!(listed.len(), directives.len(), "{listed:?}\n{help}");
    for name in listed {
        assert!(
            directives.iter().any(|d| d == name),
            "--help lists --{name}, which conf/leased.conf does not document"
        );
    }

    // Every documented directive is one the server knows.
    let temp = temp();
    let conf = Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/leased.conf");
    let mut command = Command::new(common::binary::BINARY);
    let dir = temp.path().join("data");
    command.arg(&conf).args(["--port", "0", "--dir"]).arg(&dir);
    let server = Server::spawn(command, &dir).expect("starts with conf/leased.conf");
    let mut con = server.typed();
    for directive in &directives {
        // Answered with the directive's name and its value.
        con.config_get(directive);
    }
}

#[test]
fn version_prints_the_version() {
    let exited = run_to_exit(&["--version"]);
    assert!(exited.status.success(), "{}", exited.output());
    assert!(
        exited.stdout.contains(VERSION),
        "--version printed {:?}",
        exited.stdout
    );
}

#[test]
fn a_dir_that_cannot_be_created_stops_the_start() {
    let temp = temp();
    let file = write_file(&temp.path().join("a-file"), "not a directory\n");
    // Even root cannot make a directory inside a regular file, or turn a
    // regular file into one.
    let under_file = file.join("data");
    for dir in [&under_file, &file] {
        let dir = dir.to_str().unwrap();
        let exited = run_to_exit(&["--port", "0", "--dir", dir]);
        let output = exited.output();
        assert!(!exited.status.success(), "--dir {dir}: {output}");
        assert!(
            output.contains(dir),
            "the message should name {dir}: {output}"
        );
        assert!(!output.contains("Ready to accept connections"), "{output}");
    }
}

/// How to run leased as a user whom permission bits stop: directly when
/// this user cannot write to `probe_dir`, or as `nobody` through
/// `setpriv` when this user can (root). None if there is no such way.
#[cfg(unix)]
fn unprivileged_leased(probe_dir: &Path) -> Option<Vec<&'static str>> {
    let probe = probe_dir.join("probe");
    if std::fs::write(&probe, "x").is_err() {
        return Some(vec![common::binary::BINARY]);
    }
    std::fs::remove_file(&probe).unwrap();
    let setpriv = vec![
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        common::binary::BINARY,
    ];
    let works = Command::new(setpriv[0])
        .args(&setpriv[1..])
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    works.then_some(setpriv)
}

#[cfg(unix)]
#[test]
fn a_dir_that_cannot_be_written_stops_the_start() {
    use std::fs::{Permissions, create_dir, set_permissions};
    use std::os::unix::fs::PermissionsExt;
    let temp = temp();
    // Reachable by an unprivileged user, writable only by its owner.
    set_permissions(temp.path(), Permissions::from_mode(0o755)).unwrap();
    let read_only = temp.path().join("read-only");
    create_dir(&read_only).unwrap();
    set_permissions(&read_only, Permissions::from_mode(0o555)).unwrap();
    // A directory where the lock can be taken but nothing else written.
    let lock_only = temp.path().join("lock-only");
    create_dir(&lock_only).unwrap();
    let lock = lock_only.join("leased.lock");
    std::fs::write(&lock, "").unwrap();
    set_permissions(&lock, Permissions::from_mode(0o666)).unwrap();
    set_permissions(&lock_only, Permissions::from_mode(0o555)).unwrap();

    let Some(leased) = unprivileged_leased(&read_only) else {
        eprintln!("skipped: no way to run as a user that permission bits stop");
        return;
    };
    for dir in [&read_only, &read_only.join("data"), &lock_only] {
        let mut command = Command::new(leased[0]);
        command
            .args(&leased[1..])
            .args(["--port", "0", "--dir"])
            .arg(dir);
        let exited = common::binary::run_command_to_exit(command);
        let output = exited.output();
        let dir = dir.to_str().unwrap();
        assert!(!exited.status.success(), "--dir {dir}: {output}");
        assert!(
            output.contains(dir),
            "the message should name {dir}: {output}"
        );
        assert!(!output.contains("Ready to accept connections"), "{output}");
    }
}

#[test]
fn a_port_in_use_stops_the_start_naming_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let output = refused(&["--port", &port]);
    assert!(
        output.contains(&format!("127.0.0.1:{port}")),
        "the message should name the address: {output}"
    );
    drop(taken);
}

#[test]
fn the_start_up_log_names_version_and_dir_and_warns_about_leases() {
    let temp = temp();
    let dir = temp.path().join("data");
    let mut server = Server::start_in(&dir, &[]).expect("starts");
    let log = server.log();
    assert!(
        log.lines()
            .any(|line| line.contains("leased") && line.contains(VERSION)),
        "no line names the version {VERSION}:\n{log}"
    );
    assert!(
        log.contains(dir.to_str().unwrap()),
        "no line names the data directory:\n{log}"
    );
    assert!(
        log.lines().any(|line| line.contains(dir.to_str().unwrap())
            && line.contains("persistence: appendonly yes, appendfsync everysec")),
        "no line names the data directory and the persistence mode:\n{log}"
    );
    let aof = dir.join("leased.aof");
    assert!(
        log.lines()
            .any(|line| line.contains("Loaded") && line.contains(aof.to_str().unwrap())),
        "no line names the append-only log:\n{log}"
    );
    assert!(!log.contains("do not survive a restart"), "{log}");
    server.stop();

    // Without the log, the server warns that leases will not survive.
    let mut server = Server::start_in(&dir, &["--appendonly", "no"]).expect("starts");
    let log = server.log();
    let warning = log
        .lines()
        .find(|line| line.contains("do not survive a restart"))
        .unwrap_or_else(|| panic!("no warning that leases do not survive:\n{log}"));
    assert!(
        warning.contains("WARN"),
        "not logged as a warning: {warning}"
    );
    server.stop();
}

#[test]
fn a_relative_dir_is_logged_as_an_absolute_path() {
    let temp = temp();
    let cwd = temp.path().canonicalize().unwrap();
    let mut command = Command::new(common::binary::BINARY);
    command
        .current_dir(&cwd)
        .args(["--port", "0", "--dir", "relative/data"]);
    let server = Server::spawn(command, &cwd.join("relative/data")).expect("starts");
    let expected = cwd.join("relative/data");
    assert!(
        expected.is_dir(),
        "the dir is relative to the working directory"
    );
    let log = server.log();
    assert!(log.contains(expected.to_str().unwrap()), "{log}");
}

/// Starts with `--loglevel level` on a port chosen here (the readiness line
/// may be hidden), checks that it serves, stops it and returns its log.
fn serve_at_loglevel(level: &str) -> String {
    let temp = temp();
    let dir = temp.path().join("data");
    let port = common::binary::free_port();
    let mut command = Command::new(common::binary::BINARY);
    command
        .args(["--port", &port.to_string(), "--loglevel", level])
        // Without the log there is a warning to see.
        .args(["--appendonly", "no", "--dir"])
        .arg(&dir);
    let mut server = Server::spawn_on_port(command, &dir, port).expect("starts");
    let mut con = server.typed();
    assert_eq!(acquire(&mut con, "run", "w", 0.0), Some(1));
    assert_eq!(con.config_get("loglevel"), level);
    drop(con);
    server.stop();
    server.log()
}

#[test]
fn loglevel_warning_serves_and_logs_only_the_warning() {
    let log = serve_at_loglevel("warning");
    assert!(log.contains("do not survive a restart"), "{log}");
    // Notice-level lines are gone (Redis's "Ready to accept connections"
    // is a notice too, so it may be hidden as well).
    for notice in ["Data directory", VERSION, "Shutting down"] {
        assert!(
            !log.contains(notice),
            "{notice:?} at loglevel warning:\n{log}"
        );
    }
}

#[test]
fn loglevel_nothing_serves_silently() {
    let log = serve_at_loglevel("nothing");
    assert_eq!(log, "", "output at loglevel nothing");
}

/// The listen queue the kernel reports for a listening port, as `ss`
/// prints it (the Send-Q column of a listening socket).
fn listen_queue(port: u16) -> u32 {
    let output = Command::new("ss")
        .args(["-Hltn", &format!("sport = :{port}")])
        .output()
        .expect("ss (Debian: iproute2)");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let columns: Vec<&str> = text.split_whitespace().collect();
    columns
        .get(2)
        .and_then(|queue| queue.parse().ok())
        .unwrap_or_else(|| panic!("no listening socket on {port}: {text:?}"))
}

#[test]
#[ignore = "needs ss (Debian: apt-get install iproute2); run with --include-ignored"]
fn tcp_backlog_sets_the_listen_queue() {
    let default = Server::start();
    let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(u32::MAX);
    assert_eq!(listen_queue(default.port), 511.min(somaxconn));
    let small = Server::start_with(&["--tcp-backlog", "64"]);
    assert_eq!(listen_queue(small.port), 64);
}
