//! What every integration test shares: the server (the spawned binary, or
//! one in the test's own runtime), one typed client, and raw-socket helpers.
//!
//! - [`binary`]: the real `leased` binary on a free port, for tests of the
//!   process itself (start-up, signals, crashes, logs) and of other
//!   programs driving it.
//! - [`inprocess`]: a server in the test's runtime whose clock follows
//!   tokio's, for tests that need time to pass (`tokio::time::advance`
//!   under paused time, no sleeping).
//! - [`client`]: the typed client, blocking and async.
//! - [`raw`]: requests and replies as bytes.

#![allow(dead_code, unused_imports)]

pub mod binary;
pub mod client;
pub mod inprocess;
pub mod raw;

pub use binary::{
    BINARY, Exited, Server, free_port, log_message, run_command_to_exit, run_to_exit,
};
pub use client::{
    AsyncClient, Client, Lease, LeaseReply, acquire, bulk_value, error, field, lease_reply, pairs,
    run,
};
pub use inprocess::InProcess;
pub use raw::{exchange, read_at_least, read_frame, read_to_close, resp, show};

/// A field of a lease map (RESP2 flat array or RESP3 map); None for null.
pub fn lease_field<'a>(reply: &'a redis::Value, name: &str) -> Option<&'a redis::Value> {
    use redis::Value;
    let is_name = |key: &Value| match key {
        Value::BulkString(key) => key == name.as_bytes(),
        Value::SimpleString(key) => key == name,
        _ => false,
    };
    match reply {
        Value::Nil => None,
        Value::Array(items) => {
            let pairs = items.chunks(2);
            let found = pairs.into_iter().find(|pair| is_name(&pair[0]));
            Some(&found.unwrap_or_else(|| panic!("no {name} in {reply:?}"))[1])
        }
        Value::Map(pairs) => {
            let found = pairs.iter().find(|(key, _)| is_name(key));
            Some(&found.unwrap_or_else(|| panic!("no {name} in {reply:?}")).1)
        }
        other => panic!("not a lease map: {other:?}"),
    }
}
