//! The standard commands Redis tooling sends, through the `redis` crate.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::binary::Server;
use common::client::{bulk_value, error, field, pairs, run, text};
use redis::Value;

#[test]
fn ping_echo_select_time() {
    let server = Server::start();
    let mut con = server.connect();
    assert_eq!(run(&mut con, &["PING"]), Value::SimpleString("PONG".into()));
    assert_eq!(run(&mut con, &["PING", "hi"]), bulk_value("hi"));
    assert_eq!(run(&mut con, &["ECHO", "a b"]), bulk_value("a b"));
    assert_eq!(
        error(&mut con, &["PING", "a", "b"]),
        "ERR wrong number of arguments for 'ping' command"
    );
    assert_eq!(
        error(&mut con, &["ECHO"]),
        "ERR wrong number of arguments for 'echo' command"
    );
    assert_eq!(run(&mut con, &["SELECT", "0"]), Value::Okay);
    assert_eq!(
        error(&mut con, &["SELECT", "1"]),
        "ERR DB index is out of range"
    );
    let Value::Array(time) = run(&mut con, &["TIME"]) else {
        panic!("TIME is an array")
    };
    let seconds: u64 = text(&time[0]).parse().unwrap();
    let micros: u64 = text(&time[1]).parse().unwrap();
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(seconds.abs_diff(wall) <= 2 && micros < 1_000_000);
}

#[test]
fn hello_switches_protocol_and_describes_the_server() {
    let server = Server::start();
    let mut con = server.connect();
    let hello = pairs(run(&mut con, &["HELLO"]));
    assert_eq!(field(&hello, "proto"), Value::Int(2));
    assert_eq!(field(&hello, "server"), bulk_value("leased"));
    assert_eq!(field(&hello, "mode"), bulk_value("standalone"));
    assert_eq!(field(&hello, "role"), bulk_value("master"));
    assert_eq!(field(&hello, "modules"), Value::Array(vec![]));
    let Value::Int(id) = field(&hello, "id") else {
        panic!("id")
    };
    assert_eq!(run(&mut con, &["CLIENT", "ID"]), Value::Int(id));

    assert_eq!(
        error(&mut con, &["HELLO", "4"]),
        "NOPROTO unsupported protocol version"
    );
    assert_eq!(
        error(&mut con, &["HELLO", "3", "AUTH", "someone", "pw"]),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(
        error(&mut con, &["HELLO", "3", "BOGUS"]),
        "ERR Syntax error in HELLO option 'BOGUS'"
    );
    // A failed HELLO changes nothing: still RESP2.
    assert!(matches!(run(&mut con, &["HELLO"]), Value::Array(_)));

    let hello = run(
        &mut con,
        &["HELLO", "3", "AUTH", "default", "any", "SETNAME", "me"],
    );
    let Value::Map(hello) = hello else {
        panic!("HELLO 3 replies with a map: {hello:?}")
    };
    assert_eq!(field(&hello, "proto"), Value::Int(3));
    assert_eq!(run(&mut con, &["CLIENT", "GETNAME"]), bulk_value("me"));
    // RESET goes back to RESP2 and forgets the name.
    assert_eq!(
        run(&mut con, &["RESET"]),
        Value::SimpleString("RESET".into())
    );
    assert_eq!(run(&mut con, &["CLIENT", "GETNAME"]), Value::Nil);
    assert!(matches!(run(&mut con, &["HELLO"]), Value::Array(_)));
}

#[test]
fn auth_without_a_configured_password() {
    let server = Server::start();
    let mut con = server.connect();
    assert!(error(&mut con, &["AUTH", "secret"]).starts_with(
        "ERR AUTH <password> called without any password configured for the default user"
    ));
    assert_eq!(run(&mut con, &["AUTH", "default", "secret"]), Value::Okay);
    assert_eq!(
        error(&mut con, &["AUTH", "alice", "secret"]),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(
        error(&mut con, &["AUTH", "a", "b", "c"]),
        "ERR syntax error"
    );
}

#[test]
fn client_subcommands() {
    let server = Server::start();
    let mut con = server.connect_resp3();
    let mut other = server.connect();
    assert_eq!(run(&mut con, &["CLIENT", "GETNAME"]), Value::Nil);
    assert_eq!(
        run(&mut con, &["CLIENT", "SETNAME", "worker-7"]),
        Value::Okay
    );
    assert_eq!(
        run(&mut con, &["CLIENT", "GETNAME"]),
        bulk_value("worker-7")
    );
    assert_eq!(
        error(&mut con, &["CLIENT", "SETNAME", "has space"]),
        "ERR Client names cannot contain spaces, newlines or special characters."
    );
    assert_eq!(
        run(&mut con, &["CLIENT", "SETINFO", "lib-name", "mylib"]),
        Value::Okay
    );
    assert_eq!(
        error(&mut con, &["CLIENT", "SETINFO", "lib-color", "red"]),
        "ERR Unrecognized option 'lib-color'"
    );
    let Value::Int(id) = run(&mut con, &["CLIENT", "ID"]) else {
        panic!("CLIENT ID is an integer")
    };
    let info = text(&run(&mut con, &["CLIENT", "INFO"]));
    assert!(
        info.starts_with(&format!("id={id} addr=127.0.0.1:")),
        "{info}"
    );
    for part in [
        "name=worker-7",
        "resp=3",
        "lib-name=mylib",
        "db=0",
        "flags=N",
    ] {
        assert!(info.contains(part), "{part} in {info}");
    }
    assert!(info.ends_with('\n'));

    let list = text(&run(&mut other, &["CLIENT", "LIST"]));
    assert_eq!(list.lines().count(), 2, "{list}");
    assert!(list.contains("name=worker-7"), "{list}");
    let only = text(&run(&mut other, &["CLIENT", "LIST", "ID", &id.to_string()]));
    assert_eq!(only.lines().count(), 1);
    assert!(only.starts_with(&format!("id={id} ")));
    assert_eq!(
        text(&run(&mut other, &["CLIENT", "LIST", "TYPE", "pubsub"])),
        ""
    );
    assert_eq!(
        error(&mut other, &["CLIENT", "NOPE"]),
        "ERR unknown subcommand 'NOPE'. Try CLIENT HELP."
    );
    assert!(matches!(run(&mut other, &["CLIENT", "HELP"]), Value::Array(lines) if lines.len() > 4));
}

#[test]
fn the_redis_crate_reports_itself_on_connect() {
    let server = Server::start();
    let mut con = server.connect_resp3();
    let info = text(&run(&mut con, &["CLIENT", "INFO"]));
    assert!(info.contains("lib-name=redis-rs"), "{info}");
    assert!(info.contains("resp=3"), "{info}");
}

#[test]
fn command_introspection_matches_the_table() {
    let server = Server::start();
    let mut con = server.connect();
    let Value::Int(count) = run(&mut con, &["COMMAND", "COUNT"]) else {
        panic!("COUNT is an integer")
    };
    let Value::Array(all) = run(&mut con, &["COMMAND"]) else {
        panic!("COMMAND is an array")
    };
    assert_eq!(all.len() as i64, count);
    let Value::Array(names) = run(&mut con, &["COMMAND", "LIST"]) else {
        panic!("LIST is an array")
    };
    for name in [
        "lease.acquire",
        "lease.get",
        "client|setinfo",
        "command|docs",
        "ping",
    ] {
        assert!(names.contains(&bulk_value(name)), "{name}");
    }

    let info = run(&mut con, &["COMMAND", "INFO", "lease.acquire", "nope"]);
    let Value::Array(info) = info else {
        panic!("{info:?}")
    };
    assert_eq!(info[1], Value::Nil);
    let Value::Array(entry) = &info[0] else {
        panic!("{info:?}")
    };
    assert_eq!(entry.len(), 10);
    assert_eq!(entry[0], bulk_value("lease.acquire"));
    assert_eq!(entry[1], Value::Int(-3));

    let docs = pairs(run(&mut con, &["COMMAND", "DOCS", "LEASE.ACQUIRE"]));
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].0, bulk_value("lease.acquire"));
    let doc = pairs(docs[0].1.clone());
    assert_eq!(field(&doc, "group"), bulk_value("lease"));
    let Value::Array(args) = field(&doc, "arguments") else {
        panic!("arguments")
    };
    let names: Vec<Value> = args
        .iter()
        .map(|arg| field(&pairs(arg.clone()), "name"))
        .collect();
    assert_eq!(
        names,
        [
            bulk_value("run"),
            bulk_value("worker"),
            bulk_value("now"),
            bulk_value("seconds"),
            bulk_value("seconds"),
            bulk_value("ms"),
            bulk_value("withdata")
        ]
    );
    let ttl = pairs(args[3].clone());
    assert_eq!(field(&ttl, "token"), bulk_value("TTL"));
    assert_eq!(
        field(&ttl, "flags"),
        Value::Array(vec![Value::SimpleString("optional".into())])
    );
    // A subcommand can be asked for by its full name.
    let docs = pairs(run(
        &mut con,
        &["COMMAND", "DOCS", "client|setname", "nope"],
    ));
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].0, bulk_value("client|setname"));
}

#[test]
fn config_get_reports_directives() {
    let server = Server::start_with(&["--lease-ttl", "2.5"]);
    let mut con = server.connect();
    let ttl = pairs(run(&mut con, &["CONFIG", "GET", "lease-ttl"]));
    assert_eq!(ttl, vec![(bulk_value("lease-ttl"), bulk_value("2.5"))]);
    let port = pairs(run(&mut con, &["CONFIG", "GET", "PORT"]));
    assert_eq!(port, vec![(bulk_value("port"), bulk_value("0"))]);
    let all = pairs(run(&mut con, &["CONFIG", "GET", "*"]));
    for key in [
        "port",
        "bind",
        "dir",
        "lease-ttl",
        "loglevel",
        "save",
        "appendonly",
    ] {
        field(&all, key);
    }
    // Several patterns; each parameter once.
    let some = pairs(run(
        &mut con,
        &["CONFIG", "GET", "port", "po*", "nothing-matches"],
    ));
    assert_eq!(some.len(), 1);
    assert_eq!(
        error(&mut con, &["CONFIG", "SET", "port", "1"]),
        "ERR CONFIG SET failed (possibly related to argument 'port') - can't set immutable config"
    );
}

#[test]
fn info_sections_in_redis_format() {
    let server = Server::start();
    let mut con = server.connect();
    let _: Value = redis::cmd("LEASE.ACQUIRE")
        .arg("r")
        .arg("w")
        .arg(0)
        .query(&mut con)
        .unwrap();
    let everything = text(&run(&mut con, &["INFO"]));
    for header in [
        "# Server",
        "# Clients",
        "# Memory",
        "# Persistence",
        "# Stats",
        "# Leases",
    ] {
        assert!(everything.contains(header), "{header} in {everything}");
    }
    for line in everything
        .split("\r\n")
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        assert!(line.contains(':'), "field:value line {line:?}");
    }
    let leases = text(&run(&mut con, &["INFO", "LEASES"]));
    assert!(leases.starts_with("# Leases\r\n"), "{leases}");
    assert!(leases.contains("leases:1\r\n"), "{leases}");
    assert!(leases.contains("last_fencing_token:1\r\n"), "{leases}");
    assert!(!leases.contains("# Server"));
    let two = text(&run(&mut con, &["INFO", "server", "clients"]));
    assert!(two.contains("redis_mode:standalone") && two.contains("connected_clients:1"));
    assert_eq!(text(&run(&mut con, &["INFO", "nosuchsection"])), "");
    assert_eq!(run(&mut con, &["DBSIZE"]), Value::Int(1));
    // RESP3 carries INFO as a verbatim string, as Redis does.
    let mut resp3 = server.connect_resp3();
    assert!(matches!(
        run(&mut resp3, &["INFO", "leases"]),
        Value::VerbatimString { .. }
    ));
}

#[test]
fn unknown_commands_and_quit() {
    let server = Server::start();
    let mut con = server.connect();
    assert_eq!(
        error(&mut con, &["NOSUCHCOMMAND"]),
        "ERR unknown command 'NOSUCHCOMMAND', with args beginning with: "
    );
    // Redis's writes are refused by the keyspace view, not unknown.
    assert_eq!(
        error(&mut con, &["FLUSHALL"]),
        "ERR leases change only through LEASE.* commands: 'flushall' would bypass their fencing tokens"
    );
    assert_eq!(
        error(&mut con, &["GET", "key"]),
        "ERR unknown command 'GET', with args beginning with: 'key' "
    );
    assert_eq!(run(&mut con, &["QUIT"]), Value::Okay);
    assert!(redis::cmd("PING").query::<Value>(&mut con).is_err());
}
