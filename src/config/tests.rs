//! Unit tests of the configuration: the table, the file, the command line
//! and `CONFIG GET`.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use super::directives::{DIRECTIVES, parse_memory};
use super::source::command;
use super::*;
use crate::splitargs::split_args;

fn parse_text(text: &str) -> Result<Config, ConfigError> {
    let mut config = Config::default();
    config.apply_text("test.conf", text.as_bytes())?;
    Ok(config)
}

fn invalid(text: &str) -> String {
    match parse_text(text) {
        Err(error @ ConfigError::Line { .. }) => error.to_string(),
        other => panic!("{text:?} gave {other:?}"),
    }
}

fn conf_file(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

fn args(list: &[&str]) -> Result<Config, ConfigError> {
    Config::from_args(std::iter::once("leased").chain(list.iter().copied()))
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn defaults() {
    let config = Config::default();
    assert_eq!(config.port, 6479);
    assert_eq!(config.bind, vec![ip("127.0.0.1")]);
    assert_eq!(config.dir, PathBuf::from("./data"));
    assert_eq!(config.lease_ttl, 10.0);
    assert_eq!(config.loglevel, LogLevel::Notice);
    assert_eq!(config.logformat, LogFormat::Text);
    assert_eq!(config.logfile, None);
    assert_eq!(config.config_file, None);
}

#[test]
fn no_arguments_give_the_defaults() {
    assert_eq!(args(&[]).unwrap(), Config::default());
}

#[test]
fn file_with_comments_blank_lines_and_any_case() {
    let config = parse_text(
        "# a comment\n\n   # indented comment\nPORT 7000\r\nLease-TTL 2.5\n\tloglevel WARNING  \n",
    )
    .unwrap();
    assert_eq!(config.port, 7000);
    assert_eq!(config.lease_ttl, 2.5);
    assert_eq!(config.loglevel, LogLevel::Warning);
}

#[test]
fn file_with_quotes() {
    let config = parse_text("dir \"/tmp/with space\"\nbind '::1' \"127.0.0.1\"\n").unwrap();
    assert_eq!(config.dir, PathBuf::from("/tmp/with space"));
    assert_eq!(config.bind, vec![ip("::1"), ip("127.0.0.1")]);
    assert_eq!(
        parse_text("dir \"a\\x41\\tb\"").unwrap().dir,
        PathBuf::from("aA\tb")
    );
    assert_eq!(
        parse_text("dir 'it\\'s'").unwrap().dir,
        PathBuf::from("it's")
    );
    assert_eq!(
        parse_text("dir x\"y z\"").unwrap().dir,
        PathBuf::from("xy z")
    );
}

#[test]
fn multi_value_bind_and_later_lines_win() {
    let config = parse_text("bind 127.0.0.1 ::1 10.0.0.1\nport 1\nport 2\n").unwrap();
    assert_eq!(
        config.bind,
        vec![ip("127.0.0.1"), ip("::1"), ip("10.0.0.1")]
    );
    assert_eq!(config.port, 2);
}

#[test]
fn bad_port_names_file_line_and_problem() {
    let expected = "test.conf:3: 'port abc': invalid port (expected an integer from 0 to 65535)";
    assert_eq!(invalid("# c\n\nport abc\n"), expected);
    for bad in ["65536", "-1", "+1", "08", "1.0", "-0", "\" 1\"", "\"\""] {
        let message = invalid(&format!("port {bad}"));
        assert!(message.starts_with("test.conf:1: 'port "), "{message}");
        assert!(message.ends_with("invalid port (expected an integer from 0 to 65535)"));
    }
    assert_eq!(parse_text("port 0").unwrap().port, 0);
    assert_eq!(parse_text("port 65535").unwrap().port, 65535);
}

#[test]
fn bad_bind_names_the_address() {
    assert_eq!(
        invalid("bind 127.0.0.1 localhost"),
        "test.conf:1: 'bind 127.0.0.1 localhost': invalid bind address 'localhost' \
         (expected an IPv4 or IPv6 address)"
    );
    assert!(invalid("bind 1.2.3").contains("'1.2.3'"));
}

#[test]
fn bad_lease_ttl() {
    for bad in [
        "0", "-1", "inf", "-inf", "nan", "abc", "1e999", "\" 1\"", "\"1 \"", "10s",
    ] {
        let message = invalid(&format!("lease-ttl {bad}"));
        assert!(message.starts_with("test.conf:1: 'lease-ttl "), "{message}");
        assert!(
            message.ends_with(
                "invalid lease-ttl (expected a finite number of seconds greater than 0)"
            ),
            "{message}"
        );
    }
    assert_eq!(parse_text("lease-ttl 1e3").unwrap().lease_ttl, 1000.0);
    assert_eq!(parse_text("lease-ttl 0.001").unwrap().lease_ttl, 0.001);
}

#[test]
fn lease_max_skew() {
    assert_eq!(Config::default().lease_max_skew, 60.0);
    assert_eq!(parse_text("lease-max-skew 0").unwrap().lease_max_skew, 0.0);
    assert_eq!(
        parse_text("lease-max-skew 0.5").unwrap().lease_max_skew,
        0.5
    );
    for bad in ["-1", "inf", "nan", "1e999", "60s", "\"\""] {
        assert_eq!(
            invalid(&format!("lease-max-skew {bad}")),
            format!(
                "test.conf:1: 'lease-max-skew {bad}': invalid lease-max-skew \
                 (expected a finite number of seconds, 0 or more)"
            )
        );
    }
}

#[test]
fn lock_delays() {
    let config = Config::default();
    assert_eq!(config.lease_lock_delay, 0.0);
    assert_eq!(config.lease_max_lock_delay, 60.0);
    let config = parse_text("lease-max-lock-delay 0.5\nlease-lock-delay 0.25").unwrap();
    assert_eq!(config.lease_lock_delay, 0.25);
    assert_eq!(config.lease_max_lock_delay, 0.5);
    assert_eq!(
        config.get(b"*lock-delay"),
        [
            ("lease-lock-delay", "0.25".to_owned()),
            ("lease-max-lock-delay", "0.5".to_owned()),
        ]
    );
    for name in ["lease-lock-delay", "lease-max-lock-delay"] {
        for bad in ["-1", "-0.5", "inf", "nan", "1e999", "15s", "\"\""] {
            assert_eq!(
                invalid(&format!("{name} {bad}")),
                format!(
                    "test.conf:1: '{name} {bad}': invalid {name} \
                     (expected a finite number of seconds, 0 or more)"
                )
            );
        }
    }
}

const LOCK_DELAY_OVER_MAX: &str = "lease-lock-delay (90) is greater than \
    lease-max-lock-delay (60), the largest lock delay an acquire may ask for";

#[test]
fn lock_delay_over_max_is_refused_once_everything_is_read() {
    // Line by line the first line would be over the default maximum: the
    // pair is checked only at the end.
    let file = conf_file("lease-lock-delay 90\nlease-max-lock-delay 120\n");
    let path = file.path().to_str().unwrap();
    let config = args(&[path]).unwrap();
    assert_eq!(
        (config.lease_lock_delay, config.lease_max_lock_delay),
        (90.0, 120.0)
    );
    // Equal is fine; so is the command line raising what the file lowered.
    let config = args(&[path, "--lease-max-lock-delay", "90"]).unwrap();
    assert_eq!(config.lease_max_lock_delay, 90.0);
    let file = conf_file("lease-max-lock-delay 10\n");
    let path_low = file.path().to_str().unwrap();
    let config = args(&[
        path_low,
        "--lease-max-lock-delay",
        "60",
        "--lease-lock-delay",
        "30",
    ]);
    assert_eq!(config.unwrap().lease_lock_delay, 30.0);

    let refused = [
        args(&["--lease-lock-delay", "90"]),
        args(&[path, "--lease-max-lock-delay", "60"]),
        args(&[conf_file("lease-max-lock-delay 60\nlease-lock-delay 90")
            .path()
            .to_str()
            .unwrap()]),
    ];
    for result in refused {
        let Err(error @ ConfigError::Conflict { .. }) = result else {
            panic!("lock delay over the maximum accepted: {result:?}");
        };
        assert_eq!(error.to_string(), LOCK_DELAY_OVER_MAX);
        let ConfigError::Conflict { error: inner } = &error else {
            unreachable!()
        };
        assert_eq!(
            inner,
            &DirectiveError::LockDelayOverMax {
                lock_delay: "90".into(),
                max: "60".into()
            }
        );
        assert!(std::error::Error::source(&error).is_some());
    }
    let Err(error) = args(&[
        "--lease-max-lock-delay",
        "0.5",
        "--lease-lock-delay",
        "0.75",
    ]) else {
        panic!("lock delay over the maximum accepted");
    };
    assert_eq!(
        error.to_string(),
        "lease-lock-delay (0.75) is greater than lease-max-lock-delay (0.5), \
         the largest lock delay an acquire may ask for"
    );
}

#[test]
fn config_set_checks_the_lock_delays_after_every_value() {
    let over = format!(
        "CONFIG SET failed (possibly related to argument 'lease-lock-delay') - {LOCK_DELAY_OVER_MAX}"
    );
    assert_eq!(set_error(&["lease-lock-delay", "90"]), over);
    // Named after lease-lock-delay even when the maximum moved below it.
    let config = set(&Config::default(), &["lease-lock-delay", "60"]).unwrap();
    assert_eq!(
        set(&config, &["LEASE-MAX-LOCK-DELAY", "59"])
            .unwrap_err()
            .to_string(),
        "CONFIG SET failed (possibly related to argument 'lease-lock-delay') - \
         lease-lock-delay (60) is greater than lease-max-lock-delay (59), \
         the largest lock delay an acquire may ask for"
    );
    assert_eq!(
        set(&config, &["lease-max-lock-delay", "59"]),
        Err(SetError::Failed {
            name: "lease-lock-delay".into(),
            error: DirectiveError::LockDelayOverMax {
                lock_delay: "60".into(),
                max: "59".into()
            }
        })
    );
    // Both in one command, in either order: only the result counts.
    for pairs in [
        ["lease-lock-delay", "90", "lease-max-lock-delay", "120"],
        ["lease-max-lock-delay", "120", "lease-lock-delay", "90"],
    ] {
        let new = set(&Config::default(), &pairs).unwrap();
        assert_eq!(
            (new.lease_lock_delay, new.lease_max_lock_delay),
            (90.0, 120.0)
        );
        // Lowering both, the maximum first, is fine too.
        let back = set(
            &new,
            &["lease-max-lock-delay", "1", "lease-lock-delay", "1"],
        )
        .unwrap();
        assert_eq!(
            (back.lease_lock_delay, back.lease_max_lock_delay),
            (1.0, 1.0)
        );
    }
    // A value refused on its own is reported before the pair.
    assert_eq!(
        set_error(&["lease-lock-delay", "90", "lease-max-lock-delay", "-1"]),
        "CONFIG SET failed (possibly related to argument 'lease-max-lock-delay') - \
         invalid lease-max-lock-delay (expected a finite number of seconds, 0 or more)"
    );
    // Other directives are not blocked by the check, and nothing changes.
    let old = set(&Config::default(), &["lease-lock-delay", "5"]).unwrap();
    assert_eq!(
        set(&old, &["timeout", "3", "lease-max-lock-delay", "4"])
            .unwrap_err()
            .to_string(),
        "CONFIG SET failed (possibly related to argument 'lease-lock-delay') - \
         lease-lock-delay (5) is greater than lease-max-lock-delay (4), \
         the largest lock delay an acquire may ask for"
    );
    assert_eq!(set(&old, &["timeout", "3"]).unwrap().timeout, 3);
}

#[test]
fn bad_loglevel_and_dir() {
    assert_eq!(
        invalid("loglevel loud"),
        "test.conf:1: 'loglevel loud': invalid loglevel \
         (expected one of: debug, verbose, notice, warning, nothing)"
    );
    assert_eq!(
        invalid("dir \"\""),
        "test.conf:1: 'dir \"\"': invalid dir (expected a non-empty path)"
    );
}

#[test]
fn logging_directives() {
    let config = parse_text("logformat JSON\nlogfile \"/var/log/leased/leased.log\"").unwrap();
    assert_eq!(config.logformat, LogFormat::Json);
    assert_eq!(
        config.logfile,
        Some(PathBuf::from("/var/log/leased/leased.log"))
    );
    assert_eq!(
        config.get(b"logf*"),
        [
            ("logformat", "json".to_owned()),
            ("logfile", "/var/log/leased/leased.log".to_owned()),
        ]
    );
    // The empty string is standard output, as in Redis.
    let config = parse_text("logfile a.log\nlogfile \"\"\nlogformat text").unwrap();
    assert_eq!(config.logfile, None);
    assert_eq!(config.logformat, LogFormat::Text);
    assert_eq!(
        invalid("logformat yaml"),
        "test.conf:1: 'logformat yaml': invalid logformat (expected text or json)"
    );
}

#[test]
fn unknown_directives_including_read_only_ones() {
    assert_eq!(
        invalid("port 1\nhash-max-listpack-entries 128"),
        "test.conf:2: 'hash-max-listpack-entries 128': unknown directive 'hash-max-listpack-entries'"
    );
    assert_eq!(
        invalid("save 900 1"),
        "test.conf:1: 'save 900 1': unknown directive 'save'"
    );
    assert!(invalid("databases 1").contains("unknown directive 'databases'"));
}

#[test]
fn tls_directives() {
    let config = parse_text(
        "tls-port 6380\ntls-cert-file \"/etc/tls/server cert.pem\"\n\
         tls-key-file key.pem\ntls-ca-cert-file ca.pem\ntls-auth-clients OPTIONAL\n\
         tls-cluster YES",
    )
    .unwrap();
    assert_eq!(config.tls_port, 6380);
    assert_eq!(
        config.tls_cert_file,
        Some(PathBuf::from("/etc/tls/server cert.pem"))
    );
    assert_eq!(config.tls_key_file, Some(PathBuf::from("key.pem")));
    assert_eq!(config.tls_ca_cert_file, Some(PathBuf::from("ca.pem")));
    assert_eq!(config.tls_auth_clients, TlsAuthClients::Optional);
    assert!(config.tls_cluster);
    assert_eq!(
        config.get(b"tls-*"),
        [
            ("tls-port", "6380".to_owned()),
            ("tls-cert-file", "/etc/tls/server cert.pem".to_owned()),
            ("tls-key-file", "key.pem".to_owned()),
            ("tls-ca-cert-file", "ca.pem".to_owned()),
            ("tls-auth-clients", "optional".to_owned()),
            ("tls-cluster", "yes".to_owned()),
        ]
    );
    // The empty string unsets a file, as in Redis.
    let config = parse_text("tls-cert-file a.pem\ntls-cert-file \"\"").unwrap();
    assert_eq!(config.tls_cert_file, None);
    assert_eq!(
        parse_text("tls-auth-clients no").unwrap().tls_auth_clients,
        TlsAuthClients::No
    );
    assert!(
        invalid("tls-auth-clients maybe")
            .ends_with("invalid tls-auth-clients (expected yes, no or optional)")
    );
    assert!(!Config::default().tls_cluster);
    assert!(
        !args(&["--tls-cluster", "yes", "--tls-cluster", "no"])
            .unwrap()
            .tls_cluster
    );
    assert_eq!(
        set_error(&["tls-cluster", "yes"]),
        "CONFIG SET failed (possibly related to argument 'tls-cluster') - can't set immutable \
         config"
    );
    assert!(invalid("tls-cluster on").ends_with("invalid tls-cluster (expected yes or no)"));
    assert!(
        invalid("tls-port 65536")
            .ends_with("invalid tls-port (expected an integer from 0 to 65535)")
    );
}

#[test]
fn persistence_directives() {
    let config = parse_text(
        "appendonly no\nappendfsync ALWAYS\nappendfilename log.aof\n\
         auto-aof-rewrite-percentage 0\nauto-aof-rewrite-min-size 1gb\n\
         aof-load-good-prefix yes",
    )
    .unwrap();
    assert!(!config.appendonly);
    assert_eq!(config.appendfsync, FsyncPolicy::Always);
    assert_eq!(config.appendfilename, "log.aof");
    assert_eq!(config.auto_aof_rewrite_percentage, 0);
    assert_eq!(config.auto_aof_rewrite_min_size, 1 << 30);
    assert!(config.aof_load_good_prefix);
    for (size, bytes) in [
        ("100", 100),
        ("1k", 1000),
        ("1KB", 1024),
        ("2m", 2_000_000),
        ("3mb", 3 << 20),
        ("1g", 1_000_000_000),
    ] {
        assert_eq!(parse_memory(size), Some(bytes), "{size}");
    }
    for bad in ["", "mb", "-1mb", "1tb", "1.5mb", "01mb"] {
        assert_eq!(parse_memory(bad), None, "{bad}");
    }
    assert!(invalid("appendonly maybe").contains("invalid appendonly (expected yes or no)"));
    assert!(invalid("appendfsync sometimes").contains("invalid appendfsync"));
    assert!(invalid("appendfilename a/b").contains("invalid appendfilename"));
    assert!(
        invalid("auto-aof-rewrite-percentage -5").contains("invalid auto-aof-rewrite-percentage")
    );
    assert!(
        invalid("auto-aof-rewrite-min-size lots").contains("invalid auto-aof-rewrite-min-size")
    );
}

#[test]
fn wrong_number_of_arguments() {
    assert_eq!(
        invalid("port 1 2"),
        "test.conf:1: 'port 1 2': wrong number of arguments for 'port' (expected 1, got 2)"
    );
    assert_eq!(
        invalid("\n\nbind"),
        "test.conf:3: 'bind': wrong number of arguments for 'bind' (expected at least 1, got 0)"
    );
    assert!(invalid("dir").contains("for 'dir' (expected 1, got 0)"));
}

#[test]
fn unbalanced_quotes_and_bad_utf8() {
    assert_eq!(
        invalid("dir \"/tmp"),
        "test.conf:1: 'dir \"/tmp': unbalanced quotes"
    );
    assert_eq!(
        invalid("dir \"\\xff\""),
        "test.conf:1: 'dir \"\\xff\"': an argument is not valid UTF-8"
    );
}

#[test]
fn errors_are_typed() {
    let Err(ConfigError::Line {
        source,
        line_no,
        line,
        error,
    }) = parse_text("# c\nmaxclients 0")
    else {
        panic!("maxclients 0 was accepted");
    };
    assert_eq!((source.as_str(), line_no), ("test.conf", 2));
    assert_eq!(line, "maxclients 0");
    assert_eq!(
        error,
        DirectiveError::Invalid {
            name: "maxclients",
            expected: "a positive integer"
        }
    );
    let error = parse_text("bind ::1 nowhere").unwrap_err();
    let inner = std::error::Error::source(&error).unwrap();
    assert_eq!(
        inner.to_string(),
        "invalid bind address 'nowhere' (expected an IPv4 or IPv6 address)"
    );
    let Err(ConfigError::CommandLine { name, value, error }) = args(&["--bind", "::1", "x"]) else {
        panic!("--bind x was accepted");
    };
    assert_eq!((name, value.as_str()), ("bind", "::1 x"));
    assert_eq!(
        error,
        DirectiveError::InvalidAddress {
            address: "x".into()
        }
    );
}

#[test]
fn missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.conf");
    let Err(error @ ConfigError::File { .. }) = args(&[path.to_str().unwrap()]) else {
        panic!("a missing file was accepted");
    };
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("can't open config file '{}': ", path.display())),
        "{message}"
    );
}

#[test]
fn file_errors_name_the_file_path() {
    let file = conf_file("port 1\nport x\n");
    let path = file.path().to_str().unwrap();
    let Err(error @ ConfigError::Line { .. }) = args(&[path]) else {
        panic!("a bad file was accepted");
    };
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("{path}:2: 'port x': ")),
        "{message}"
    );
}

#[test]
fn command_line_overrides_file() {
    let file = conf_file("port 7000\nloglevel debug\nbind 10.0.0.1\n");
    let path = file.path().to_str().unwrap();
    let config = args(&[path, "--port", "7001", "--bind", "127.0.0.1", "::1"]).unwrap();
    assert_eq!(config.port, 7001);
    assert_eq!(config.loglevel, LogLevel::Debug);
    assert_eq!(config.bind, vec![ip("127.0.0.1"), ip("::1")]);
    assert_eq!(config.config_file, Some(PathBuf::from(path)));
}

#[test]
fn command_line_without_a_file() {
    let config = args(&[
        "--lease-ttl",
        "2.5",
        "--dir",
        "/tmp/x",
        "--port",
        "1",
        "--port",
        "2",
    ]);
    let config = config.unwrap();
    assert_eq!(config.lease_ttl, 2.5);
    assert_eq!(config.dir, PathBuf::from("/tmp/x"));
    assert_eq!(config.port, 2);
    assert_eq!(config.config_file, None);
}

#[test]
fn bad_command_line_value_names_the_option() {
    let Err(error @ ConfigError::CommandLine { .. }) = args(&["--lease-ttl", "-1"]) else {
        panic!("a negative TTL was accepted");
    };
    let message = error.to_string();
    assert_eq!(
        message,
        "command line: '--lease-ttl -1': invalid lease-ttl \
         (expected a finite number of seconds greater than 0)"
    );
}

#[test]
fn unknown_flag_is_a_clap_error_naming_it() {
    let Err(ConfigError::Args(error)) = args(&["--no-such-thing", "1"]) else {
        panic!("an unknown flag was accepted");
    };
    assert_eq!(error.kind(), clap::error::ErrorKind::UnknownArgument);
    assert!(error.to_string().contains("--no-such-thing"), "{error}");
    let Err(ConfigError::Args(error)) = args(&["--save", ""]) else {
        panic!("--save was accepted");
    };
    assert_eq!(error.kind(), clap::error::ErrorKind::UnknownArgument);
}

#[test]
fn help_and_version_come_from_clap() {
    let Err(ConfigError::Args(help)) = args(&["--help"]) else {
        panic!("--help did not stop");
    };
    assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
    let text = help.to_string();
    for directive in DIRECTIVES {
        assert!(text.contains(&format!("--{}", directive.name)), "{text}");
        assert!(text.contains(directive.help), "{text}");
    }
    let Err(ConfigError::Args(version)) = args(&["--version"]) else {
        panic!("--version did not stop");
    };
    assert_eq!(version.kind(), clap::error::ErrorKind::DisplayVersion);
}

#[test]
fn command_is_well_formed() {
    command().debug_assert();
}

fn names(config: &Config, pattern: &str) -> Vec<&'static str> {
    config
        .get(pattern.as_bytes())
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

#[test]
fn config_get_all_in_table_order() {
    let all = Config::default().get(b"*");
    let expected = [
        ("port", "6479"),
        ("bind", "127.0.0.1"),
        ("tcp-backlog", "511"),
        ("metrics-port", "0"),
        ("dir", "./data"),
        ("lease-ttl", "10"),
        ("lease-retention", "3600"),
        ("lease-max-skew", "60"),
        ("lease-lock-delay", "0"),
        ("lease-max-lock-delay", "60"),
        ("loglevel", "notice"),
        ("logformat", "text"),
        ("logfile", ""),
        ("appendonly", "yes"),
        ("appendfilename", "leased.aof"),
        ("appendfsync", "everysec"),
        ("auto-aof-rewrite-percentage", "100"),
        ("auto-aof-rewrite-min-size", "67108864"),
        ("aof-load-good-prefix", "no"),
        ("io-threads", "1"),
        ("maxclients", "10000"),
        ("requirepass", ""),
        ("protected-mode", "yes"),
        ("timeout", "0"),
        ("slowlog-log-slower-than", "10000"),
        ("slowlog-max-len", "128"),
        ("maxmemory", "0"),
        ("maxmemory-policy", "noeviction"),
        ("proto-max-bulk-len", "536870912"),
        ("client-query-buffer-limit", "1073741824"),
        (
            "client-output-buffer-limit",
            "normal 536870912 134217728 60 pubsub 33554432 8388608 60",
        ),
        ("lease-max-id-len", "1024"),
        ("lease-max-data-len", "65536"),
        ("lease-history-len", "8"),
        ("tls-port", "0"),
        ("tls-cert-file", ""),
        ("tls-key-file", ""),
        ("tls-ca-cert-file", ""),
        ("tls-auth-clients", "yes"),
        ("tls-cluster", "no"),
        ("cluster-enabled", "no"),
        ("cluster-node-id", "0"),
        ("cluster-nodes", ""),
        ("cluster-port", "0"),
        ("cluster-secret", ""),
        ("cluster-join", "no"),
        ("cluster-init-from-single", "no"),
        ("cluster-recover-as-single", "no"),
        ("cluster-max-clock-skew", "500"),
        ("cluster-heartbeat-interval", "100"),
        ("cluster-election-timeout", "600"),
        ("cluster-redirect", "proxy"),
        ("save", ""),
        ("databases", "1"),
    ];
    let all: Vec<(&str, &str)> = all.iter().map(|(n, v)| (*n, v.as_str())).collect();
    assert_eq!(all, expected);
}

#[test]
fn config_get_patterns() {
    let config = Config::default();
    assert_eq!(config.get(b"port"), vec![("port", "6479".to_owned())]);
    assert_eq!(config.get(b"PORT"), vec![("port", "6479".to_owned())]);
    assert_eq!(names(&config, "*ttl*"), ["lease-ttl"]);
    assert_eq!(
        names(&config, "*lock-delay"),
        ["lease-lock-delay", "lease-max-lock-delay"]
    );
    assert_eq!(
        names(&config, "lease-*"),
        [
            "lease-ttl",
            "lease-retention",
            "lease-max-skew",
            "lease-lock-delay",
            "lease-max-lock-delay",
            "lease-max-id-len",
            "lease-max-data-len",
            "lease-history-len"
        ]
    );
    assert_eq!(names(&config, "appendonly"), ["appendonly"]);
    assert_eq!(names(&config, "log*"), ["loglevel", "logformat", "logfile"]);
    assert_eq!(names(&config, "d*"), ["dir", "databases"]);
    assert!(config.get(b"nosuch").is_empty());
    assert!(config.get(b"").is_empty());
}

#[test]
fn config_get_prints_values_as_redis_does() {
    let config = parse_text("bind 127.0.0.1 ::1\nlease-ttl 2.5\nloglevel VERBOSE").unwrap();
    assert_eq!(
        config.get(b"bind"),
        vec![("bind", "127.0.0.1 ::1".to_owned())]
    );
    assert_eq!(
        config.get(b"lease-ttl"),
        vec![("lease-ttl", "2.5".to_owned())]
    );
    assert_eq!(
        config.get(b"loglevel"),
        vec![("loglevel", "verbose".to_owned())]
    );
}

#[test]
fn limit_directives() {
    let config = parse_text(
        "timeout 30\nproto-max-bulk-len 2mb\nclient-query-buffer-limit 1gb\n\
         client-output-buffer-limit NORMAL 1gb 256mb 30\nlease-max-id-len 4096",
    )
    .unwrap();
    assert_eq!(config.timeout, 30);
    assert_eq!(config.proto_max_bulk_len, 2 << 20);
    assert_eq!(config.client_query_buffer_limit, 1 << 30);
    assert_eq!(
        config.client_output_buffer_limit.normal,
        OutputLimit {
            hard: 1 << 30,
            soft: 256 << 20,
            soft_seconds: 30
        }
    );
    assert_eq!(config.lease_max_id_len, 4096);
    for bad in [
        "timeout -1",
        "proto-max-bulk-len 1048575",
        "client-query-buffer-limit 0",
        "client-output-buffer-limit master 32mb 8mb 60",
        "client-output-buffer-limit normal 1mb 1mb",
        "client-output-buffer-limit normal 1mb 1mb x",
        "client-output-buffer-limit normal 1mb 1mb -1",
        "client-output-buffer-limit normal 1mb 1mb 0 pubsub 1mb",
        "lease-max-id-len 1023",
    ] {
        let name = bad.split(' ').next().unwrap();
        assert!(invalid(bad).contains(&format!("invalid {name}")), "{bad}");
    }
}

const MIB: u64 = 1 << 20;

fn output_limit(hard: u64, soft: u64, soft_seconds: u64) -> OutputLimit {
    OutputLimit {
        hard,
        soft,
        soft_seconds,
    }
}

#[test]
fn output_limit_classes_as_in_redis() {
    let default = Config::default().client_output_buffer_limit;
    assert_eq!(
        default,
        OutputLimits {
            normal: output_limit(512 * MIB, 128 * MIB, 60),
            pubsub: output_limit(32 * MIB, 8 * MIB, 60),
        }
    );
    // A class not named keeps its limits, line after line.
    let config = parse_text("client-output-buffer-limit PubSub 1mb 1mb 0").unwrap();
    assert_eq!(config.client_output_buffer_limit.normal, default.normal);
    assert_eq!(
        config.client_output_buffer_limit.pubsub,
        output_limit(MIB, MIB, 0)
    );
    let config = parse_text(
        "client-output-buffer-limit normal 1mb 0 0\n\
         client-output-buffer-limit pubsub 2mb 1mb 5 pubsub 3mb 2mb 6\n",
    )
    .unwrap();
    assert_eq!(
        config.client_output_buffer_limit,
        OutputLimits {
            normal: output_limit(MIB, 0, 0),
            pubsub: output_limit(3 * MIB, 2 * MIB, 6),
        }
    );
    // replica (and slave) is checked, then has no effect.
    for class in ["replica", "SLAVE"] {
        let line = format!("client-output-buffer-limit {class} 256mb 64mb 60");
        assert_eq!(parse_text(&line).unwrap(), Config::default());
    }
    // The command line over the file changes only what it names too.
    let file = conf_file("client-output-buffer-limit pubsub 1mb 1mb 0\n");
    let path = file.path().to_str().unwrap();
    let config = args(&[
        path,
        "--client-output-buffer-limit",
        "normal",
        "0",
        "0",
        "0",
        "replica",
        "1gb",
        "1gb",
        "0",
    ])
    .unwrap();
    assert_eq!(
        config.client_output_buffer_limit,
        OutputLimits {
            normal: output_limit(0, 0, 0),
            pubsub: output_limit(MIB, MIB, 0),
        }
    );
}

#[test]
fn output_limits_are_shown_in_bytes_and_read_back() {
    let config = set(
        &Config::default(),
        &["client-output-buffer-limit", "pubsub 1mb 1mb 0"],
    )
    .unwrap();
    assert_eq!(
        config.client_output_buffer_limit.normal,
        Config::default().client_output_buffer_limit.normal
    );
    let shown = "normal 536870912 134217728 60 pubsub 1048576 1048576 0";
    assert_eq!(
        config.get(b"client-output-buffer-limit"),
        [("client-output-buffer-limit", shown.to_owned())]
    );
    // What CONFIG GET prints, CONFIG SET and the file take back.
    let odd = set(
        &Config::default(),
        &[
            "client-output-buffer-limit",
            "normal 1000 1k 1 pubsub 0 7 3",
        ],
    )
    .unwrap();
    for config in [config, odd] {
        let (_, shown) = config.get(b"client-output-buffer-limit").remove(0);
        let again = set(
            &Config::default(),
            &["client-output-buffer-limit", shown.as_str()],
        );
        assert_eq!(again.as_ref(), Ok(&config), "{shown}");
        let line = format!("client-output-buffer-limit {shown}");
        assert_eq!(parse_text(&line).unwrap(), config, "{shown}");
    }
}

#[test]
fn bad_output_limits_say_what_is_expected() {
    let prefix = "CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') \
                  - invalid client-output-buffer-limit (expected ";
    let syntax = "one or more '<class> <hard> <soft> <soft-seconds>', \
                  the class normal, replica or pubsub)";
    let class = "the class normal, replica, slave or pubsub in \
                 '<class> <hard> <soft> <soft-seconds>')";
    let limits = "sizes and whole seconds in '<class> <hard> <soft> <soft-seconds>', \
                  e.g. 'normal 512mb 128mb 60')";
    for (value, expected) in [
        ("pubsub 1mb 1mb", syntax),
        ("normal 1mb 1mb 0 pubsub", syntax),
        ("512mb 128mb 60", syntax),
        ("master 1mb 1mb 0", class),
        ("normal 1mb 1mb 0 clients 1mb 1mb 0", class),
        ("pubsub 1mb 1mb 0 normal lots 1mb 0", limits),
        ("normal 1mb 1mb -1", limits),
        ("normal 1mb 1.5mb 0", limits),
        ("normal 1mb 1mb 1.5", limits),
        // A replica class is checked though it is not kept.
        ("replica 1mb 1mb x", limits),
    ] {
        assert_eq!(
            set_error(&["client-output-buffer-limit", value]),
            format!("{prefix}{expected}"),
            "{value}"
        );
    }
    // The file gives the same reason; a refused line changes no class, even
    // one it named before the mistake.
    assert!(
        invalid("client-output-buffer-limit normal 1mb 1mb 0 slave 1mb 1mb").ends_with(&format!(
            "invalid client-output-buffer-limit (expected {syntax}"
        ))
    );
    let directive = super::directives::lookup("client-output-buffer-limit").unwrap();
    let mut config = Config::default();
    let words: Vec<String> = ["pubsub", "1mb", "1mb", "0", "normal", "x", "1mb", "0"]
        .map(String::from)
        .to_vec();
    assert!(directive.apply(&mut config, &words).is_err());
    assert_eq!(config, Config::default());
}

#[test]
fn rewrite_writes_every_output_limit_class_on_one_line() {
    let config = set(
        &Config::default(),
        &["client-output-buffer-limit", "pubsub 1mb 1000 0"],
    )
    .unwrap();
    assert_eq!(
        rewritten(&config, ""),
        "# Generated by CONFIG REWRITE\n\
         client-output-buffer-limit normal 512mb 128mb 60 pubsub 1mb 1000 0\n"
    );
    // A Redis-style file with a line per class: the first line takes every
    // class, the later ones are blanked, and the file reads back the same.
    let old = "client-output-buffer-limit normal 0 0 0\n\
               client-output-buffer-limit replica 256mb 64mb 60\n\
               client-output-buffer-limit pubsub 32mb 8mb 60\n";
    let from_file = parse_text(old).unwrap();
    let config = set(
        &from_file,
        &["client-output-buffer-limit", "pubsub 1mb 1000 0"],
    )
    .unwrap();
    let text = rewritten(&config, old);
    assert_eq!(
        text,
        "client-output-buffer-limit normal 0 0 0 pubsub 1mb 1000 0\n\n\n"
    );
    assert_eq!(parse_text(&text).unwrap(), config);
}

fn shipped_conf() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/leased.conf")
}

#[test]
fn shipped_conf_gives_the_defaults() {
    let path = shipped_conf();
    let config = Config::from_args(["leased".as_ref(), path.as_os_str()]).unwrap();
    assert_eq!(config.config_file.as_deref(), Some(path.as_path()));
    assert_eq!(
        Config {
            config_file: None,
            ..config
        },
        Config::default()
    );
}

#[test]
fn shipped_conf_sets_every_directive() {
    let text = std::fs::read_to_string(shipped_conf()).unwrap();
    for directive in DIRECTIVES {
        let set = text.lines().any(|line| {
            let line = line.trim();
            let args = split_args(line.as_bytes()).unwrap_or_default();
            !line.starts_with('#')
                && args
                    .first()
                    .is_some_and(|name| name == directive.name.as_bytes())
        });
        assert!(set, "conf/leased.conf does not set '{}'", directive.name);
    }
}

fn set(config: &Config, args: &[&str]) -> Result<Config, SetError> {
    config.set_args(args)
}

fn set_error(args: &[&str]) -> String {
    match set(&Config::default(), args) {
        Err(error) => error.to_string(),
        Ok(_) => panic!("CONFIG SET {args:?} was accepted"),
    }
}

#[test]
fn mutable_directives_are_the_runtime_ones() {
    let mutable: Vec<&str> = DIRECTIVES
        .iter()
        .filter(|d| d.is_mutable())
        .map(|d| d.name)
        .collect();
    assert_eq!(
        mutable,
        [
            "lease-ttl",
            "lease-retention",
            "lease-max-skew",
            "lease-lock-delay",
            "lease-max-lock-delay",
            "loglevel",
            "appendfsync",
            "auto-aof-rewrite-percentage",
            "auto-aof-rewrite-min-size",
            "aof-load-good-prefix",
            "maxclients",
            "requirepass",
            "protected-mode",
            "timeout",
            "slowlog-log-slower-than",
            "slowlog-max-len",
            "maxmemory",
            "maxmemory-policy",
            "proto-max-bulk-len",
            "client-query-buffer-limit",
            "client-output-buffer-limit",
            "lease-max-id-len",
            "lease-max-data-len",
            "lease-history-len",
        ]
    );
    assert!(is_sensitive(b"requirepass"));
    assert!(is_sensitive(b"RequirePass"));
    assert!(!is_sensitive(b"port"));
    assert!(!is_sensitive(b"nosuch"));
    assert!(!is_sensitive(b"\xff"));
}

#[test]
fn config_set_returns_the_new_configuration() {
    let old = Config::default();
    let new = set(
        &old,
        &[
            "lease-ttl",
            "2.5",
            "MaxClients",
            "50",
            "loglevel",
            "WARNING",
            "requirepass",
            "with space",
        ],
    )
    .unwrap();
    assert_eq!(new.lease_ttl, 2.5);
    assert_eq!(new.maxclients, 50);
    assert_eq!(new.loglevel, LogLevel::Warning);
    // A one-argument directive takes the value whole, as Redis does.
    assert_eq!(new.requirepass, "with space");
    assert_eq!(old, Config::default());
    assert_eq!(
        Config {
            lease_ttl: 10.0,
            maxclients: 10000,
            loglevel: LogLevel::Notice,
            requirepass: String::new(),
            ..new.clone()
        },
        old
    );
    // The empty string clears the password.
    assert_eq!(set(&new, &["requirepass", ""]).unwrap().requirepass, "");
    assert_eq!(set(&old, &[]).unwrap(), old);
}

#[test]
fn config_set_takes_the_words_of_a_multi_argument_value() {
    let config = set(
        &Config::default(),
        &["client-output-buffer-limit", "normal 1gb  256mb 30"],
    )
    .unwrap();
    assert_eq!(
        config.client_output_buffer_limit,
        OutputLimits {
            normal: OutputLimit {
                hard: 1 << 30,
                soft: 256 << 20,
                soft_seconds: 30
            },
            pubsub: Config::default().client_output_buffer_limit.pubsub,
        }
    );
    assert_eq!(
        set_error(&["client-output-buffer-limit", "normal \"1gb 256mb 30"]),
        "CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') \
         - unbalanced quotes"
    );
    assert_eq!(
        set_error(&["client-output-buffer-limit", ""]),
        "CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') \
         - invalid client-output-buffer-limit (expected one or more '<class> <hard> <soft> \
         <soft-seconds>', the class normal, replica or pubsub)"
    );
}

#[test]
fn config_set_accepts_every_mutable_default() {
    let config = Config::default();
    for directive in DIRECTIVES.iter().filter(|d| d.is_mutable()) {
        let value = directive.default.join(" ");
        assert_eq!(
            set(&config, &[directive.name, &value]),
            Ok(config.clone()),
            "{}",
            directive.name
        );
    }
}

#[test]
fn config_set_errors_have_redis_wording() {
    assert_eq!(
        set_error(&["lease-ttl", "1", "foo", "1", "bar", "2"]),
        "Unknown option or number of arguments for CONFIG SET - 'foo'"
    );
    assert_eq!(
        set_error(&["port", "7000"]),
        "CONFIG SET failed (possibly related to argument 'port') - can't set immutable config"
    );
    assert_eq!(
        set_error(&["lease-ttl", "1", "TLS-Port", "1"]),
        "CONFIG SET failed (possibly related to argument 'TLS-Port') - can't set immutable config"
    );
    assert_eq!(
        set_error(&["save", ""]),
        "CONFIG SET failed (possibly related to argument 'save') - can't set immutable config"
    );
    assert_eq!(
        set_error(&["lease-ttl", "1", "LEASE-TTL", "2"]),
        "CONFIG SET failed (possibly related to argument 'LEASE-TTL') - duplicate parameter"
    );
    // Values are checked after names, and named by the directive.
    assert_eq!(
        set_error(&["MAXCLIENTS", "0"]),
        "CONFIG SET failed (possibly related to argument 'maxclients') - \
         invalid maxclients (expected a positive integer)"
    );
    assert_eq!(
        set_error(&["maxclients", "0", "port", "1"]),
        "CONFIG SET failed (possibly related to argument 'port') - can't set immutable config"
    );
    assert_eq!(
        set_error(&["lease-ttl", "1", "lease-max-skew", "-1", "timeout", "x"]),
        "CONFIG SET failed (possibly related to argument 'lease-max-skew') - \
         invalid lease-max-skew (expected a finite number of seconds, 0 or more)"
    );
    assert_eq!(set_error(&["lease-ttl"]), "syntax error");
    let not_utf8 = Config::default().set(&[(b"requirepass", b"\xff")]);
    assert_eq!(
        not_utf8.unwrap_err().to_string(),
        "CONFIG SET failed (possibly related to argument 'requirepass') - \
         an argument is not valid UTF-8"
    );
}

#[test]
fn config_set_reports_the_first_bad_name() {
    // Whatever comes first decides, as in Redis's single pass over names.
    assert_eq!(
        set_error(&["port", "1", "foo", "1"]),
        "CONFIG SET failed (possibly related to argument 'port') - can't set immutable config"
    );
    assert_eq!(
        set_error(&["foo", "1", "port", "1"]),
        "Unknown option or number of arguments for CONFIG SET - 'foo'"
    );
    assert_eq!(
        set_error(&["timeout", "1", "timeout", "2", "foo", "1"]),
        "CONFIG SET failed (possibly related to argument 'timeout') - duplicate parameter"
    );
    assert_eq!(
        set(&Config::default(), &["foo", "1", "maxclients", "0"]),
        Err(SetError::Unknown { name: "foo".into() })
    );
}

fn rewritten(config: &Config, old: &str) -> String {
    String::from_utf8(config.rewritten(old.as_bytes())).unwrap()
}

/// Reads `path` back as the server would at start-up.
fn reload(path: &Path) -> Config {
    Config::from_args(["leased".as_ref(), path.as_os_str()]).unwrap()
}

/// The directory's entries other than `keep`: left-over temporary files.
fn strays(dir: &Path, keep: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name != keep)
        .collect()
}

#[test]
fn quoting_is_the_inverse_of_split_args() {
    assert_eq!(super::rewrite::quote("plain/path.conf"), "plain/path.conf");
    assert_eq!(super::rewrite::quote(""), "\"\"");
    assert_eq!(super::rewrite::quote("a b"), "\"a b\"");
    assert_eq!(super::rewrite::quote("it's"), "\"it's\"");
    assert_eq!(super::rewrite::quote("é#ü"), "é#ü");
    let mut samples: Vec<String> = (0..128u8).map(|b| format!("a{}b", b as char)).collect();
    samples.extend(["", " ", "\"", "'", "\\", "\\x41", "\"a\" b", "ü ß"].map(String::from));
    for arg in samples {
        let line = format!("name {}", super::rewrite::quote(&arg));
        let args = split_args(line.as_bytes()).unwrap();
        assert_eq!(
            args,
            [b"name".to_vec(), arg.clone().into_bytes()],
            "{arg:?}"
        );
    }
}

#[test]
fn sizes_are_written_in_redis_units_where_exact() {
    use super::directives::format_memory;
    for (bytes, text) in [
        (0, "0"),
        (1000, "1000"),
        (1024, "1kb"),
        (3 << 20, "3mb"),
        (1 << 30, "1gb"),
        ((1 << 30) + 1024, "1048577kb"),
        (i64::MAX as u64, "9223372036854775807"),
        // Past i64::MAX only a unit can say it.
        (10_000_000_000_000_001_000, "10000000000000001k"),
        (18_000_000_000_000_000_000, "17578125000000000kb"),
    ] {
        assert_eq!(format_memory(bytes), text);
        assert_eq!(parse_memory(text), Some(bytes), "{text}");
    }
    // Whatever the reader takes, the writer gives back.
    for digits in ["1", "999", "1023", "9223372036854775807", "18446744073"] {
        for unit in ["", "k", "kb", "m", "mb", "g", "gb"] {
            if let Some(bytes) = parse_memory(&format!("{digits}{unit}")) {
                assert_eq!(parse_memory(&format_memory(bytes)), Some(bytes));
            }
        }
    }
}

#[test]
fn rewrite_keeps_comments_and_order() {
    let old = "# leased.conf\n\
               #   an indented example: port 1\n\
               \n\
               PORT 7000\n\
               nosuch 1\n\
               \tLease-TTL 5\n\
               maxclients \"unbalanced\n\
               loglevel debug   \n\
               lease-ttl 6\n\
               \n\
               # the end\n";
    let config = Config {
        port: 7000,
        lease_ttl: 2.5,
        maxclients: 50,
        requirepass: "s3cr3t pass".into(),
        ..Config::default()
    };
    assert_eq!(
        rewritten(&config, old),
        "# leased.conf\n\
         #   an indented example: port 1\n\
         \n\
         port 7000\n\
         # ??? nosuch 1\n\
         lease-ttl 2.5\n\
         # ??? maxclients \"unbalanced\n\
         loglevel notice\n\
         \n\
         \n\
         # the end\n\
         # Generated by CONFIG REWRITE\n\
         maxclients 50\n\
         requirepass \"s3cr3t pass\"\n"
    );
}

#[test]
fn rewrite_signs_appended_lines_once() {
    let config = Config {
        timeout: 30,
        ..Config::default()
    };
    let old = "port 6479\n# Generated by CONFIG REWRITE\nmaxclients 10\n";
    // maxclients is back at its default: its line stays, with the default.
    assert_eq!(
        rewritten(&config, old),
        "port 6479\n# Generated by CONFIG REWRITE\nmaxclients 10000\ntimeout 30\n"
    );
    // An empty file, or none: only what differs from the defaults.
    assert_eq!(
        rewritten(&config, ""),
        "# Generated by CONFIG REWRITE\ntimeout 30\n"
    );
    assert_eq!(rewritten(&Config::default(), ""), "");
    // No newline at the end of the old file: one is added.
    assert_eq!(rewritten(&Config::default(), "# c"), "# c\n");
}

#[test]
fn rewrite_of_the_shipped_conf_changes_only_the_changed_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leased.conf");
    std::fs::copy(shipped_conf(), &path).unwrap();
    let old_text = std::fs::read_to_string(&path).unwrap();
    let config = reload(&path);
    // Unchanged, the file is rewritten byte for byte.
    config.rewrite(&path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), old_text);

    let config = set(
        &config,
        &[
            "lease-ttl",
            "2.5",
            "maxclients",
            "50",
            "requirepass",
            "p \"w\" \\ \t#",
            "client-output-buffer-limit",
            "normal 1gb 0 30",
            "auto-aof-rewrite-min-size",
            "1000",
            "lease-lock-delay",
            "15",
        ],
    )
    .unwrap();
    config.rewrite(&path).unwrap();
    let new_text = std::fs::read_to_string(&path).unwrap();
    let old_lines: Vec<&str> = old_text.lines().collect();
    let new_lines: Vec<&str> = new_text.lines().collect();
    assert_eq!(old_lines.len(), new_lines.len());
    let changed: Vec<&str> = old_lines
        .iter()
        .zip(&new_lines)
        .filter(|(old, new)| old != new)
        .map(|(_, new)| *new)
        .collect();
    assert_eq!(
        changed,
        [
            "requirepass \"p \\\"w\\\" \\\\ \\t#\"",
            "maxclients 50",
            "client-output-buffer-limit normal 1gb 0 30 pubsub 32mb 8mb 60",
            "lease-ttl 2.5",
            "lease-lock-delay 15",
            "auto-aof-rewrite-min-size 1000",
        ]
    );
    assert_eq!(reload(&path), config);
    assert_eq!(strays(dir.path(), "leased.conf"), Vec::<String>::new());
}

#[test]
fn rewrite_reads_back_the_same_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leased.conf");
    std::fs::write(
        &path,
        "# mine\nport 7000\nbind 127.0.0.1\nlease-ttl 1\nlease-ttl 2\nlogfile x.log\n",
    )
    .unwrap();
    let path_arg = path.to_str().unwrap();
    let config = args(&[
        path_arg,
        "--dir",
        "/tmp/a dir",
        "--bind",
        "::1",
        "127.0.0.1",
    ])
    .unwrap();
    let config = set(
        &config,
        &[
            "lease-ttl",
            "0.30000000000000004",
            "lease-retention",
            "1e-7",
            "lease-max-skew",
            "0",
            "lease-lock-delay",
            "0.1",
            "lease-max-lock-delay",
            "0.30000000000000004",
            "requirepass",
            "ünï \"c\u{1}de\"\n\r'",
            "slowlog-log-slower-than",
            "-1",
            "proto-max-bulk-len",
            "1048577",
            "loglevel",
            "nothing",
        ],
    )
    .unwrap();
    config.rewrite(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.starts_with(
            "# mine\nport 7000\nbind ::1 127.0.0.1\nlease-ttl 0.30000000000000004\n\n\
             logfile x.log\n# Generated by CONFIG REWRITE\ndir \"/tmp/a dir\"\n"
        ),
        "{text}"
    );
    assert_eq!(reload(&path), config);
    // The pseudo-directives CONFIG GET answers are never written.
    assert!(
        !text.contains("save") && !text.contains("databases"),
        "{text}"
    );
}

#[test]
fn rewrite_creates_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.conf");
    let config = set(&Config::default(), &["timeout", "5"]).unwrap();
    config.rewrite(&path).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "# Generated by CONFIG REWRITE\ntimeout 5\n"
    );
}

#[test]
fn rewrite_keeps_the_permission_bits() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leased.conf");
    std::fs::write(&path, "port 6479\n").unwrap();
    for mode in [0o600, 0o640, 0o444] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        Config::default().rewrite(&path).unwrap();
        let metadata = std::fs::metadata(&path).unwrap();
        assert_eq!(metadata.permissions().mode() & 0o7777, mode);
    }
    assert_eq!(strays(dir.path(), "leased.conf"), Vec::<String>::new());
}

#[test]
fn rewrite_errors_leave_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    // The parent is a file: the old file cannot even be read.
    let error = Config::default()
        .rewrite(&file.join("leased.conf"))
        .unwrap_err();
    assert_eq!(error.to_string(), "Rewriting config file: Not a directory");
    let RewriteError::Io { path, error: io } = &error;
    assert_eq!(path, &file.join("leased.conf"));
    assert_eq!(io.raw_os_error(), Some(20));
    // A rename that fails (over a directory) removes the temporary file.
    let target = dir.path().join("conf.d");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep"), "x").unwrap();
    let error = super::rewrite::overwrite(&target, b"port 1\n").unwrap_err();
    assert!(
        error.to_string().starts_with("Rewriting config file: "),
        "{error}"
    );
    assert!(!error.to_string().contains("os error"), "{error}");
    assert_eq!(std::fs::read(target.join("keep")).unwrap(), b"x");
    let mut left = strays(dir.path(), "a-file");
    left.sort();
    assert_eq!(left, ["conf.d"]);
}

#[test]
fn maxmemory_takes_a_size_and_noeviction_is_the_only_policy() {
    let config = set(&Config::default(), &["maxmemory", "20mb"]).unwrap();
    assert_eq!(config.maxmemory, 20 << 20);
    let config = set(
        &config,
        &["maxmemory", "0", "maxmemory-policy", "NOEVICTION"],
    )
    .unwrap();
    assert_eq!(config.maxmemory, 0);
    assert_eq!(
        set_error(&["maxmemory", "lots"]),
        "CONFIG SET failed (possibly related to argument 'maxmemory') - invalid maxmemory \
         (expected a size, e.g. 2gb, or 0 for no limit)"
    );
    assert_eq!(
        set_error(&["maxmemory-policy", "allkeys-lru"]),
        "CONFIG SET failed (possibly related to argument 'maxmemory-policy') - invalid \
         maxmemory-policy (expected noeviction: leases are never evicted, so it is the only \
         policy)"
    );
}

// Cluster mode.

/// Three nodes on loopback, this one node 1 on the default port.
const THREE: &str = "1@127.0.0.1:6479 2@127.0.0.1:6480 3@127.0.0.1:6481";

/// `--cluster-enabled yes --cluster-node-id <id> --cluster-nodes <nodes>`
/// and `more`.
fn cluster_args(id: &str, nodes: &str, more: &[&str]) -> Result<Config, ConfigError> {
    let mut list = vec![
        "--cluster-enabled",
        "yes",
        "--cluster-node-id",
        id,
        "--cluster-nodes",
        nodes,
    ];
    list.extend_from_slice(more);
    args(&list)
}

/// The cluster error a start-up with these arguments fails with.
fn cluster_refusal(id: &str, nodes: &str, more: &[&str]) -> ClusterError {
    match cluster_args(id, nodes, more) {
        Err(ConfigError::Conflict {
            error: DirectiveError::Cluster(error),
        }) => error,
        other => panic!("{id} {nodes:?} {more:?} gave {other:?}"),
    }
}

fn member(id: u64, addr: &str, bus: &str) -> ClusterMember {
    ClusterMember {
        id,
        addr: addr.parse().unwrap(),
        bus_addr: bus.parse().unwrap(),
    }
}

#[test]
fn cluster_defaults_are_a_single_node() {
    let config = Config::default();
    assert!(!config.cluster_enabled);
    assert_eq!(config.cluster_node_id, 0);
    assert_eq!(config.cluster_nodes, Vec::new());
    assert_eq!(config.cluster_port, 0);
    assert_eq!(config.cluster_secret, "");
    assert_eq!(config.cluster_max_clock_skew, 500);
    assert_eq!(config.cluster_heartbeat_interval, 100);
    assert_eq!(config.cluster_election_timeout, 600);
    assert_eq!(config.cluster_redirect, ClusterRedirect::Proxy);
    assert_eq!(config.cluster(), Ok(None));
    // Nodes listed but the cluster off: still a single node, unchecked.
    let config = args(&["--cluster-nodes", "5@10.0.0.1:1"]).unwrap();
    assert_eq!(config.cluster(), Ok(None));
}

#[test]
fn a_cluster_from_the_file() {
    let config = parse_text(&format!(
        "cluster-enabled yes\ncluster-node-id 2\ncluster-nodes \"{THREE}\"\nport 6480\n\
         cluster-max-clock-skew 250\ncluster-heartbeat-interval 50\n\
         cluster-election-timeout 400\ncluster-redirect MOVED\n"
    ))
    .unwrap();
    let cluster = config.cluster().unwrap().unwrap();
    assert_eq!(
        cluster,
        ClusterConfig {
            node_id: 2,
            members: vec![
                member(1, "127.0.0.1:6479", "127.0.0.1:16479"),
                member(2, "127.0.0.1:6480", "127.0.0.1:16480"),
                member(3, "127.0.0.1:6481", "127.0.0.1:16481"),
            ],
            secret: None,
            max_clock_skew: Duration::from_millis(250),
            heartbeat_interval: Duration::from_millis(50),
            election_timeout: Duration::from_millis(400),
            redirect: ClusterRedirect::Moved,
            join: false,
            init_from_single: false,
        }
    );
    assert_eq!(cluster.me(), &cluster.members[1]);
    let peers: Vec<u64> = cluster.peers().map(|peer| peer.id).collect();
    assert_eq!(peers, [1, 3]);
}

#[test]
fn cluster_nodes_hosts_ports_and_bus_ports() {
    let nodes = "3@[::1]:7003 1@localhost:7001@9001 2@127.0.0.2:7002";
    let config = cluster_args("1", nodes, &["--port", "7001"]).unwrap();
    // As written (localhost kept), in the order given.
    assert_eq!(show(&config, "cluster-nodes"), nodes);
    assert_eq!(config.cluster_nodes[1].ip, ip("127.0.0.1"));
    assert_eq!(config.cluster_nodes[1].host, "localhost");
    assert_eq!(config.cluster_nodes[1].bus_port, Some(9001));
    // In id order, each bus on its client port + 10000 unless given.
    assert_eq!(
        config.cluster().unwrap().unwrap().members,
        [
            member(1, "127.0.0.1:7001", "127.0.0.1:9001"),
            member(2, "127.0.0.2:7002", "127.0.0.2:17002"),
            member(3, "[::1]:7003", "[::1]:17003"),
        ]
    );
    // One argument or several, on the command line and in the file.
    let split = args(&[
        "--cluster-nodes",
        "3@[::1]:7003",
        "1@localhost:7001@9001",
        "2@127.0.0.2:7002",
    ])
    .unwrap();
    assert_eq!(split.cluster_nodes, config.cluster_nodes);
    let file = parse_text(&format!("cluster-nodes {nodes}")).unwrap();
    assert_eq!(file.cluster_nodes, config.cluster_nodes);
    // Names and addresses in any case; a cluster-port that agrees.
    let config = cluster_args(
        "1",
        "1@LocalHost:7001@9001",
        &["--port", "7001", "--cluster-port", "9001"],
    )
    .unwrap();
    assert_eq!(config.cluster_nodes[0].host, "localhost");
    assert!(config.cluster().unwrap().is_some());
}

fn show(config: &Config, name: &str) -> String {
    config.get(name.as_bytes())[0].1.clone()
}

#[test]
fn bad_cluster_nodes_say_what_an_entry_is() {
    const ENTRY: &str = "(expected entries id@host:port[@busport] separated by spaces: the \
                         id a positive integer, the host an IPv4 address, an IPv6 address in \
                         brackets or localhost, the ports from 1 to 65535)";
    for entry in [
        "127.0.0.1:6479",
        "0@127.0.0.1:6479",
        "-1@127.0.0.1:6479",
        "x@127.0.0.1:6479",
        "1@127.0.0.1",
        "1@127.0.0.1:0",
        "1@127.0.0.1:65536",
        "1@127.0.0.1:+80",
        "1@::1:6479",
        "1@[::1]6479",
        "1@[nohost]:6479",
        "1@example.com:6479",
        "1@127.0.0.1:6479@",
        "1@127.0.0.1:6479@0",
        "1@127.0.0.1:6479@1@2",
    ] {
        assert_eq!(
            invalid(&format!("cluster-nodes \"2@127.0.0.1:1 {entry}\"")),
            format!(
                "test.conf:1: 'cluster-nodes \"2@127.0.0.1:1 {entry}\"': invalid cluster-nodes {ENTRY}"
            ),
            "{entry}"
        );
    }
    assert_eq!(
        invalid("cluster-nodes 1@127.0.0.1:1 1@127.0.0.1:2"),
        "test.conf:1: 'cluster-nodes 1@127.0.0.1:1 1@127.0.0.1:2': invalid cluster-nodes \
         (expected each node's id once)"
    );
}

#[test]
fn bad_cluster_values() {
    for (line, expected) in [
        ("cluster-enabled maybe", "yes or no"),
        (
            "cluster-node-id -1",
            "a positive integer, this node's id in cluster-nodes (0: none)",
        ),
        ("cluster-port 65536", "an integer from 0 to 65535"),
        (
            "cluster-max-clock-skew 0",
            "a whole number of milliseconds, from 1 to 86400000",
        ),
        (
            "cluster-heartbeat-interval 1.5",
            "a whole number of milliseconds, from 1 to 86400000",
        ),
        (
            "cluster-election-timeout 86400001",
            "a whole number of milliseconds, from 1 to 86400000",
        ),
        ("cluster-redirect ask", "proxy or moved"),
    ] {
        let name = line.split(' ').next().unwrap();
        assert_eq!(
            invalid(line),
            format!("test.conf:1: '{line}': invalid {name} (expected {expected})")
        );
    }
}

#[test]
fn a_cluster_needs_an_id_and_nodes_that_hold_it() {
    assert_eq!(cluster_refusal("0", THREE, &[]), ClusterError::NoNodeId);
    assert_eq!(cluster_refusal("1", "", &[]), ClusterError::NoNodes);
    let error = cluster_refusal("4", "3@127.0.0.1:3 1@127.0.0.1:6479", &[]);
    assert_eq!(
        error,
        ClusterError::NotAMember {
            id: 4,
            ids: vec![1, 3]
        }
    );
    assert_eq!(
        error.to_string(),
        "cluster-node-id 4 is not in cluster-nodes (its ids: 1, 3)"
    );
    assert_eq!(
        ClusterError::NoNodeId.to_string(),
        "cluster-enabled yes needs cluster-node-id: this node's id in cluster-nodes"
    );
    assert_eq!(
        ClusterError::NoNodes.to_string(),
        "cluster-enabled yes needs cluster-nodes: every node's id@host:port (its client \
         address), this node's included, the same on every node"
    );
    // The file says it too, after reading everything.
    let file = conf_file("cluster-enabled yes\ncluster-nodes 1@127.0.0.1:6479\n");
    let error = args(&[file.path().to_str().unwrap()]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "cluster-enabled yes needs cluster-node-id: this node's id in cluster-nodes"
    );
    // Given last, the id makes the file good.
    let config = args(&[file.path().to_str().unwrap(), "--cluster-node-id", "1"]).unwrap();
    assert_eq!(config.cluster().unwrap().unwrap().node_id, 1);
}

#[test]
fn this_nodes_entry_holds_its_port() {
    let error = cluster_refusal("2", THREE, &[]);
    assert_eq!(
        error,
        ClusterError::PortMismatch {
            id: 2,
            listed: 6480,
            port: 6479
        }
    );
    assert_eq!(
        error.to_string(),
        "cluster-nodes gives node 2 (this node) the client port 6480, but port is 6479: \
         each entry is its node's client address"
    );
    // A port the system picks cannot be the one the others know.
    assert!(matches!(
        cluster_refusal("1", THREE, &["--port", "0"]),
        ClusterError::PortMismatch { port: 0, .. }
    ));
}

#[test]
fn bus_ports_stay_below_65536_and_agree_with_cluster_port() {
    let error = cluster_refusal("1", "1@127.0.0.1:6479 2@127.0.0.1:60000", &[]);
    assert_eq!(error, ClusterError::BusPortTooHigh { id: 2, port: 60000 });
    assert_eq!(
        error.to_string(),
        "node 2's bus port would be its client port 60000 + 10000, above 65535: give it \
         one in cluster-nodes (2@host:60000@busport)"
    );
    // Given, it may be anything.
    assert!(cluster_args("1", "1@127.0.0.1:6479 2@127.0.0.1:60000@6000", &[]).is_ok());
    // This node's own, too high.
    assert_eq!(
        cluster_refusal("1", "1@127.0.0.1:55536", &["--port", "55536"]),
        ClusterError::BusPortTooHigh { id: 1, port: 55536 }
    );
    let error = cluster_refusal("1", THREE, &["--cluster-port", "17000"]);
    assert_eq!(
        error,
        ClusterError::ClusterPortMismatch {
            id: 1,
            cluster_port: 17000,
            bus_port: 16479
        }
    );
    assert_eq!(
        error.to_string(),
        "cluster-port is 17000, but cluster-nodes gives node 1 (this node) the bus port \
         16479: the other nodes find it there, so write it there (1@host:port@17000) on \
         every node"
    );
    // The default, said out loud, is fine.
    assert!(cluster_args("1", THREE, &["--cluster-port", "16479"]).is_ok());
}

#[test]
fn no_two_cluster_listeners_share_an_address() {
    let error = cluster_refusal("1", "1@127.0.0.1:6479 2@127.0.0.1:16479", &[]);
    assert_eq!(
        error,
        ClusterError::AddressTwice {
            address: "127.0.0.1:16479".parse().unwrap()
        }
    );
    assert_eq!(
        error.to_string(),
        "cluster-nodes uses 127.0.0.1:16479 twice: every node's client and bus addresses \
         must differ"
    );
    assert!(matches!(
        cluster_refusal("1", "1@127.0.0.1:6479 2@localhost:6479", &[]),
        ClusterError::AddressTwice { .. }
    ));
    // One port on two machines is fine (with a secret: they are not loopback).
    let nodes = "1@127.0.0.1:6479 2@10.0.0.2:6479 3@10.0.0.3:6479";
    assert!(cluster_args("1", nodes, &["--cluster-secret", "s"]).is_ok());
}

#[test]
fn a_cluster_beyond_loopback_needs_a_secret() {
    let nodes = "1@127.0.0.1:6479 2@10.0.0.2:6479 3@[fe80::1]:6479";
    let error = cluster_refusal("1", nodes, &[]);
    assert_eq!(
        error,
        ClusterError::NeedsSecret {
            address: ip("10.0.0.2")
        }
    );
    assert_eq!(
        error.to_string(),
        "cluster-nodes names 10.0.0.2, which is not a loopback address: set cluster-secret \
         (the same on every node), since the bus refuses peers without it"
    );
    assert_eq!(error.directive(), "cluster-secret");
    let config = cluster_args("1", nodes, &["--cluster-secret", "s3cret"]).unwrap();
    assert_eq!(
        config.cluster().unwrap().unwrap().secret.as_deref(),
        Some("s3cret")
    );
    // Loopback only: no secret needed, and one given is still used.
    let config = cluster_args("1", THREE, &["--cluster-secret", "x"]).unwrap();
    assert_eq!(
        config.cluster().unwrap().unwrap().secret.as_deref(),
        Some("x")
    );
}

#[test]
fn the_election_timeout_is_at_least_three_heartbeats() {
    let error = match args(&["--cluster-heartbeat-interval", "400"]) {
        Err(ConfigError::Conflict {
            error: DirectiveError::Cluster(error),
        }) => error,
        other => panic!("accepted: {other:?}"),
    };
    assert_eq!(
        error,
        ClusterError::ElectionTimeoutTooShort {
            election_timeout: 600,
            heartbeat_interval: 400
        }
    );
    assert_eq!(
        error.to_string(),
        "cluster-election-timeout (600 ms) is less than 3 times cluster-heartbeat-interval \
         (400 ms): followers would depose a leader that is alive"
    );
    // Exactly three is enough, in either order of the lines.
    let config = parse_text("cluster-election-timeout 150\ncluster-heartbeat-interval 50\n");
    assert_eq!(config.unwrap().cluster(), Ok(None));
    assert!(args(&["--cluster-election-timeout", "299"]).is_err());
    assert!(args(&["--cluster-election-timeout", "300"]).is_ok());
}

#[test]
fn the_cluster_secret_is_hidden_like_requirepass() {
    assert!(is_sensitive(b"cluster-secret"));
    assert!(is_sensitive(b"CLUSTER-SECRET"));
    assert!(!is_sensitive(b"cluster-nodes"));
    let request: Vec<bytes::Bytes> = ["CONFIG", "SET", "cluster-secret", "s3cret"]
        .into_iter()
        .map(|word| bytes::Bytes::from_static(word.as_bytes()))
        .collect();
    let shown = crate::command::redacted(&request);
    assert_eq!(&shown[2][..], b"cluster-secret");
    assert_eq!(&shown[3][..], b"(redacted)");
}

#[test]
fn cluster_directives_are_start_up_only() {
    let config = cluster_args("1", THREE, &["--cluster-secret", "x"]).unwrap();
    for (name, value) in [
        ("cluster-enabled", "no"),
        ("cluster-node-id", "2"),
        ("cluster-nodes", "1@127.0.0.1:1"),
        ("cluster-port", "1"),
        ("cluster-secret", "y"),
        ("cluster-max-clock-skew", "1"),
        ("cluster-heartbeat-interval", "1"),
        ("cluster-election-timeout", "5000"),
        ("cluster-redirect", "moved"),
    ] {
        assert_eq!(
            set(&config, &[name, value]).unwrap_err().to_string(),
            format!(
                "CONFIG SET failed (possibly related to argument '{name}') - can't set \
                 immutable config"
            )
        );
    }
    // Other directives still change on a cluster node.
    assert_eq!(set(&config, &["lease-ttl", "5"]).unwrap().lease_ttl, 5.0);
}

#[test]
fn config_get_and_rewrite_keep_the_cluster_settings() {
    let nodes = "1@127.0.0.1:6479@7000 2@[::1]:6480 3@localhost:6481";
    let config = cluster_args(
        "1",
        nodes,
        &[
            "--cluster-secret",
            "a secret",
            "--cluster-redirect",
            "moved",
            "--cluster-election-timeout",
            "2000",
        ],
    )
    .unwrap();
    let shown: Vec<(&str, String)> = config.get(b"cluster-*");
    assert_eq!(
        shown,
        [
            ("cluster-enabled", "yes".to_owned()),
            ("cluster-node-id", "1".to_owned()),
            ("cluster-nodes", nodes.to_owned()),
            ("cluster-port", "0".to_owned()),
            ("cluster-secret", "a secret".to_owned()),
            ("cluster-join", "no".to_owned()),
            ("cluster-init-from-single", "no".to_owned()),
            ("cluster-recover-as-single", "no".to_owned()),
            ("cluster-max-clock-skew", "500".to_owned()),
            ("cluster-heartbeat-interval", "100".to_owned()),
            ("cluster-election-timeout", "2000".to_owned()),
            ("cluster-redirect", "moved".to_owned()),
        ]
    );
    let text = rewritten(&config, "# mine\ncluster-nodes \"1@127.0.0.1:1\"\n");
    assert_eq!(
        text,
        format!(
            "# mine\ncluster-nodes {nodes}\n# Generated by CONFIG REWRITE\n\
             cluster-enabled yes\ncluster-node-id 1\ncluster-secret \"a secret\"\n\
             cluster-election-timeout 2000\ncluster-redirect moved\n"
        )
    );
    assert_eq!(parse_text(&text).unwrap(), config);
    // The default, rewritten over a line that set it, reads back too.
    let text = rewritten(&Config::default(), "cluster-nodes 1@127.0.0.1:1\n");
    assert_eq!(text, "cluster-nodes \"\"\n");
    assert_eq!(parse_text(&text).unwrap(), Config::default());
}

#[test]
fn help_lists_the_cluster_directives() {
    let help = command().render_long_help().to_string();
    for name in [
        "--cluster-enabled <yes|no>",
        "--cluster-node-id <ID>",
        "--cluster-nodes <ID@HOST:PORT[@BUSPORT]>",
        "--cluster-secret <SECRET>",
        "--cluster-election-timeout <MILLISECONDS>",
    ] {
        assert!(help.contains(name), "{name} not in {help}");
    }
}

/// The three files docs/cluster.md starts a cluster with form one: the
/// same members, each file one of them, in its own directory.
#[test]
fn the_shipped_cluster_files_make_one_cluster_of_three() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut members = Vec::new();
    let mut dirs = Vec::new();
    for id in 1..=3u64 {
        let path = root.join(format!("conf/cluster/node{id}.conf"));
        let config = args(&[path.to_str().unwrap()]).unwrap();
        let cluster = config.cluster().unwrap().expect("cluster-enabled");
        assert_eq!(cluster.node_id, id);
        assert_eq!(cluster.me().addr.port(), config.port);
        members.push(cluster.members.clone());
        dirs.push(config.dir.clone());
    }
    assert!(members.windows(2).all(|pair| pair[0] == pair[1]));
    assert_eq!(members[0].len(), 3);
    dirs.dedup();
    assert_eq!(dirs.len(), 3, "each node has its own data directory");
}
