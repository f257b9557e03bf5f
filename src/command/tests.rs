use super::*;

fn parse_words(words: &[&str]) -> Result<Command, Reply> {
    let args: Vec<Bytes> = words
        .iter()
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect();
    parse(&args)
}

fn error_of(words: &[&str]) -> String {
    match parse_words(words) {
        Err(Reply::Error(message)) => message,
        other => panic!("{words:?} parsed as {other:?}"),
    }
}

fn lease(words: &[&str]) -> Op {
    match parse_words(words) {
        Ok(Command::Lease(command)) => command,
        other => panic!("{words:?} parsed as {other:?}"),
    }
}

fn b(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

#[test]
fn acquire_takes_optional_now_and_ttl_in_any_case() {
    assert_eq!(
        lease(&["LEASE.ACQUIRE", "run-1", "worker-a"]),
        Op::Acquire {
            run_id: b("run-1"),
            worker_id: b("worker-a"),
            now: None,
            ttl: None,
            lock_delay: None,
            with_data: false
        }
    );
    assert_eq!(
        lease(&["lease.acquire", "r", "w", "10.5"]),
        Op::Acquire {
            run_id: b("r"),
            worker_id: b("w"),
            now: Some(10.5),
            ttl: None,
            lock_delay: None,
            with_data: false
        }
    );
    assert_eq!(
        lease(&["Lease.Acquire", "r", "w", "1e3", "ttl", "30"]),
        Op::Acquire {
            run_id: b("r"),
            worker_id: b("w"),
            now: Some(1000.0),
            ttl: Some(30.0),
            lock_delay: None,
            with_data: false
        }
    );
    assert_eq!(
        lease(&["LEASE.ACQUIRE", "", "", "TTL", "0.5"]),
        Op::Acquire {
            run_id: b(""),
            worker_id: b(""),
            now: None,
            ttl: Some(0.5),
            lock_delay: None,
            with_data: false
        }
    );
}

#[test]
fn acquire_errors_are_redis_worded() {
    assert_eq!(
        error_of(&["LEASE.ACQUIRE", "r"]),
        "ERR wrong number of arguments for 'lease.acquire' command"
    );
    assert_eq!(
        error_of(&["LEASE.ACQUIRE", "r", "w", "soon"]),
        "ERR value is not a valid float"
    );
    assert_eq!(
        error_of(&["LEASE.ACQUIRE", "r", "w", "inf"]),
        "ERR value is not a valid float"
    );
    assert_eq!(
        error_of(&["LEASE.ACQUIRE", "r", "w", "1", "TTL"]),
        "ERR syntax error"
    );
    assert_eq!(
        error_of(&["LEASE.ACQUIRE", "r", "w", "1", "EX", "5"]),
        "ERR syntax error"
    );
    assert_eq!(
        error_of(&["LEASE.ACQUIRE", "r", "w", "1", "TTL", "5", "x"]),
        "ERR syntax error"
    );
    assert_eq!(
        error_of(&["LEASE.ACQUIRE", "r", "w", "TTL", "abc"]),
        "ERR value is not a valid float"
    );
    for ttl in ["0", "-1"] {
        assert_eq!(
            error_of(&["LEASE.ACQUIRE", "r", "w", "TTL", ttl]),
            "ERR invalid expire time in 'lease.acquire' command"
        );
    }
}

#[test]
fn tokens_are_positive_integers() {
    assert_eq!(
        lease(&[
            "LEASE.RELEASE",
            "r:w:9223372036854775807",
            "9223372036854775807"
        ]),
        Op::Release {
            lease_id: b("r:w:9223372036854775807"),
            token: i64::MAX as u64
        }
    );
    for token in ["abc", "1.5", "+1", "01", "9223372036854775808", ""] {
        assert_eq!(
            error_of(&["LEASE.RELEASE", "id", token]),
            "ERR value is not an integer or out of range",
            "token {token:?}"
        );
    }
    for token in ["0", "-5"] {
        assert_eq!(
            error_of(&["LEASE.HEARTBEAT", "id", token]),
            "ERR value is out of range, must be positive"
        );
    }
}

#[test]
fn commands_with_positional_now_reject_extra_arguments() {
    assert_eq!(
        lease(&["LEASE.HEARTBEAT", "r:w:1", "1", "5"]),
        Op::Heartbeat {
            lease_id: b("r:w:1"),
            token: 1,
            now: Some(5.0)
        }
    );
    assert_eq!(
        error_of(&["LEASE.HEARTBEAT", "r:w:1", "1", "5", "6"]),
        "ERR wrong number of arguments for 'lease.heartbeat' command"
    );
    assert_eq!(
        error_of(&["LEASE.VALIDATE", "r", "r:w:1", "1", "5", "6"]),
        "ERR wrong number of arguments for 'lease.validate' command"
    );
    assert_eq!(
        error_of(&["LEASE.GET", "r", "5", "6"]),
        "ERR wrong number of arguments for 'lease.get' command"
    );
    assert_eq!(
        error_of(&["LEASE.RELEASE", "r:w:1"]),
        "ERR wrong number of arguments for 'lease.release' command"
    );
    assert_eq!(
        error_of(&["LEASE.GET", "r", "later"]),
        "ERR value is not a valid float"
    );
}

#[test]
fn unknown_commands_quote_their_first_arguments() {
    assert_eq!(
        error_of(&["NOPE", "a", "b"]),
        "ERR unknown command 'NOPE', with args beginning with: 'a' 'b' "
    );
    assert_eq!(
        error_of(&["NOPE"]),
        "ERR unknown command 'NOPE', with args beginning with: "
    );
    let long = "x".repeat(300);
    let message = error_of(&["NOPE", &long, "next"]);
    assert!(message.len() < 300, "{message}");
}

#[test]
fn subcommands_are_checked_like_commands() {
    assert_eq!(
        error_of(&["CLIENT", "NOPE"]),
        "ERR unknown subcommand 'NOPE'. Try CLIENT HELP."
    );
    assert_eq!(
        error_of(&["CLIENT", "SETNAME"]),
        "ERR wrong number of arguments for 'client|setname' command"
    );
    assert_eq!(
        error_of(&["CLIENT"]),
        "ERR wrong number of arguments for 'client' command"
    );
    assert_eq!(
        error_of(&["CONFIG", "GET"]),
        "ERR wrong number of arguments for 'config|get' command"
    );
    assert_eq!(
        error_of(&["CLIENT", "SETINFO", "LIB-COLOR", "red"]),
        "ERR Unrecognized option 'LIB-COLOR'"
    );
    assert_eq!(parse_words(&["COMMAND"]), Ok(Command::CommandInfo(None)));
    assert_eq!(
        parse_words(&["command", "docs", "lease.get"]),
        Ok(Command::CommandDocs(vec![b("lease.get")]))
    );
}

#[test]
fn hello_checks_version_and_options() {
    assert_eq!(
        parse_words(&["HELLO", "3", "AUTH", "default", "pw", "SETNAME", "me"]),
        Ok(Command::Hello {
            protocol: Some(Protocol::Resp3),
            auth: Some((b("default"), b("pw"))),
            set_name: Some(b("me")),
        })
    );
    assert_eq!(
        error_of(&["HELLO", "4"]),
        "NOPROTO unsupported protocol version"
    );
    assert_eq!(
        error_of(&["HELLO", "three"]),
        "ERR Protocol version is not an integer or out of range"
    );
    assert_eq!(
        error_of(&["HELLO", "3", "AUTH", "default"]),
        "ERR Syntax error in HELLO option 'AUTH'"
    );
}

#[test]
fn ping_select_auth_and_shutdown() {
    assert_eq!(parse_words(&["PING"]), Ok(Command::Ping(None)));
    assert_eq!(
        error_of(&["PING", "a", "b"]),
        "ERR wrong number of arguments for 'ping' command"
    );
    assert_eq!(parse_words(&["SELECT", "0"]), Ok(Command::Select));
    assert_eq!(error_of(&["SELECT", "1"]), "ERR DB index is out of range");
    assert_eq!(
        error_of(&["SELECT", "x"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(error_of(&["AUTH", "a", "b", "c"]), "ERR syntax error");
    assert_eq!(
        parse_words(&["SHUTDOWN", "NOSAVE", "now"]),
        Ok(Command::Shutdown)
    );
    assert_eq!(error_of(&["SHUTDOWN", "LATER"]), "ERR syntax error");
}

#[test]
fn syntax_lines_come_from_the_table() {
    let lines: Vec<String> = docs::reference_entries()
        .into_iter()
        .map(|(_, line)| line)
        .collect();
    assert!(lines.contains(
        &"LEASE.ACQUIRE run worker [now] [TTL seconds] [LOCKDELAY seconds] [BLOCK ms] [WITHDATA]".to_string()
    ));
    assert!(lines.contains(&"LEASE.HEARTBEAT lease_id token [now]".to_string()));
    assert!(lines.contains(&"LEASE.VALIDATE run lease_id token [now]".to_string()));
    assert!(lines.contains(&"LEASE.RELEASE lease_id token".to_string()));
    assert!(lines.contains(&"LEASE.GET run [now]".to_string()));
    assert!(lines.contains(
        &"CLIENT LIST [TYPE <NORMAL | MASTER | REPLICA | PUBSUB>] [ID client-id [client-id ...]]"
            .to_string()
    ));
    assert!(lines.contains(&"CLIENT SETINFO <LIB-NAME libname | LIB-VER libver>".to_string()));
    assert!(!lines.contains(&"CLIENT".to_string()));
    assert!(lines.contains(&"SHUTDOWN [NOSAVE | SAVE] [NOW] [FORCE] [ABORT]".to_string()));
    assert!(lines.contains(&"LEASE.SCAN cursor [MATCH pattern] [COUNT count]".to_string()));
    assert!(lines.contains(&"CLIENT KILL <ip:port | filter value [filter value ...]>".to_string()));
    assert!(lines.contains(&"SLOWLOG GET [count]".to_string()));
}

/// The `### ` sections of docs/commands.md: heading and body.
fn reference_sections() -> Vec<(String, String)> {
    let reference =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/commands.md"))
            .expect("docs/commands.md exists");
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in reference.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            sections.push((heading.to_string(), String::new()));
        } else if line.starts_with("## ") {
            sections.push((String::new(), String::new()));
        } else if let Some((_, body)) = sections.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    sections
}

#[test]
fn the_reference_documents_every_command_from_the_table() {
    let sections = reference_sections();
    for (name, syntax) in docs::reference_entries() {
        let Some((_, body)) = sections.iter().find(|(heading, _)| *heading == name) else {
            panic!("docs/commands.md has no `### {name}` section");
        };
        assert!(
            body.contains(&format!("`{syntax}`")),
            "the {name} section lacks the syntax line `{syntax}`"
        );
        for part in ["- Reply", "- Errors", "```"] {
            assert!(body.contains(part), "the {name} section lacks `{part}`");
        }
    }
}

#[test]
fn the_reference_documents_no_command_the_table_lacks() {
    let known: Vec<String> = docs::reference_entries()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    for (heading, _) in reference_sections() {
        // Command headings are upper case; "The lease map" is not one.
        let is_command = !heading.is_empty()
            && heading
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == '.' || c == ' ');
        if is_command {
            assert!(known.contains(&heading), "`### {heading}` is not a command");
        }
    }
}

#[test]
fn run_data_commands_parse_and_check_their_arguments() {
    assert_eq!(
        lease(&["LEASE.ACQUIRE", "r", "w", "5", "withdata", "TTL", "3"]),
        Op::Acquire {
            run_id: b("r"),
            worker_id: b("w"),
            now: Some(5.0),
            ttl: Some(3.0),
            lock_delay: None,
            with_data: true,
        }
    );
    assert_eq!(
        lease(&["LEASE.SETDATA", "r:w:1", "1", "v\0\r\n", "7"]),
        Op::SetData {
            lease_id: b("r:w:1"),
            token: 1,
            value: b("v\0\r\n"),
            now: Some(7.0),
        }
    );
    assert_eq!(
        lease(&["lease.getdata", "r"]),
        Op::GetData { run_id: b("r") }
    );
    assert_eq!(
        lease(&["LEASE.DELDATA", "r:w:1", "1"]),
        Op::DelData {
            lease_id: b("r:w:1"),
            token: 1,
        }
    );
    assert_eq!(
        error_of(&["LEASE.SETDATA", "r:w:1", "x", "v"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        error_of(&["LEASE.SETDATA", "r:w:1", "0", "v"]),
        "ERR value is out of range, must be positive"
    );
    assert_eq!(
        error_of(&["LEASE.SETDATA", "r:w:1", "1", "v", "later"]),
        "ERR value is not a valid float"
    );
    for (args, name) in [
        (&["LEASE.SETDATA", "r:w:1", "1"][..], "lease.setdata"),
        (
            &["LEASE.SETDATA", "r:w:1", "1", "v", "1", "2"][..],
            "lease.setdata",
        ),
        (&["LEASE.GETDATA"][..], "lease.getdata"),
        (&["LEASE.GETDATA", "a", "b"][..], "lease.getdata"),
        (&["LEASE.DELDATA", "r:w:1"][..], "lease.deldata"),
        (&["LEASE.DELDATA", "r:w:1", "1", "2"][..], "lease.deldata"),
    ] {
        assert_eq!(
            error_of(args),
            format!("ERR wrong number of arguments for '{name}' command")
        );
    }
}

#[test]
fn lease_history_takes_a_run_and_a_positive_count() {
    assert_eq!(
        lease(&["LEASE.HISTORY", "r"]),
        Op::History {
            run_id: b("r"),
            count: usize::MAX,
        }
    );
    // Any case, and the last COUNT wins, as Redis's options do.
    assert_eq!(
        lease(&["lease.history", "r", "count", "9", "COUNT", "2"]),
        Op::History {
            run_id: b("r"),
            count: 2,
        }
    );
    for (count, error) in [
        ("0", "ERR value is out of range, must be positive"),
        ("-1", "ERR value is out of range, must be positive"),
        ("x", "ERR value is not an integer or out of range"),
    ] {
        assert_eq!(error_of(&["LEASE.HISTORY", "r", "COUNT", count]), error);
    }
    for args in [
        &["LEASE.HISTORY", "r", "COUNT"][..],
        &["LEASE.HISTORY", "r", "LIMIT", "1"][..],
    ] {
        assert_eq!(error_of(args), "ERR syntax error");
    }
    assert_eq!(
        error_of(&["LEASE.HISTORY"]),
        "ERR wrong number of arguments for 'lease.history' command"
    );
}
