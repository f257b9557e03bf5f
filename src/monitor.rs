//! `MONITOR`: every command the server runs, streamed to the clients that
//! asked, one status line each in Redis's format:
//!
//! ```text
//! +1733331234.123456 [0 127.0.0.1:50312] "LEASE.ACQUIRE" "run-1" "w"
//! ```
//!
//! Connections publish the lines of the commands they run on a broadcast
//! channel; each monitoring connection copies them into its output. Nothing
//! is formatted while nobody monitors.

use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use bytes::Bytes;
use tokio::sync::broadcast;

use crate::command;

/// Lines held for monitors that have yet to take them. A monitor that
/// falls further behind is disconnected, as Redis disconnects a client
/// whose output passes its limit.
const BACKLOG: usize = 16 * 1024;

#[derive(Debug)]
pub struct Monitors {
    lines: broadcast::Sender<Bytes>,
    /// Monitoring connections, so that publishing costs one atomic load
    /// when there are none.
    count: Arc<AtomicUsize>,
}

impl Default for Monitors {
    fn default() -> Self {
        Monitors {
            lines: broadcast::channel(BACKLOG).0,
            count: Arc::default(),
        }
    }
}

/// One monitoring connection's subscription; dropping it ends it.
#[derive(Debug)]
pub struct MonitorFeed {
    pub lines: broadcast::Receiver<Bytes>,
    count: Arc<AtomicUsize>,
}

impl Drop for MonitorFeed {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Monitors {
    pub fn subscribe(&self) -> MonitorFeed {
        self.count.fetch_add(1, Ordering::Relaxed);
        MonitorFeed {
            lines: self.lines.subscribe(),
            count: self.count.clone(),
        }
    }

    /// Whether anyone is monitoring.
    pub fn active(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// Publishes a command run by the client at `addr`.
    pub fn publish(&self, addr: SocketAddr, args: &[Bytes]) {
        // No monitor left since the caller looked: nobody to tell.
        let _ = self.lines.send(line(addr, args));
    }
}

/// The status line for a command, time-stamped now; passwords redacted.
fn line(addr: SocketAddr, args: &[Bytes]) -> Bytes {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let mut out = String::with_capacity(64);
    let _ = write!(
        out,
        "+{}.{:06} [0 {addr}]",
        now.as_secs(),
        now.subsec_micros()
    );
    for arg in command::redacted(args).iter() {
        out.push(' ');
        quote(&mut out, arg);
    }
    out.push_str("\r\n");
    Bytes::from(out)
}

/// An argument in double quotes with Redis's escapes (`sdscatrepr`), so a
/// binary id cannot break the line.
fn quote(out: &mut String, arg: &[u8]) {
    out.push('"');
    for &byte in arg {
        match byte {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            b' '..=b'~' => out.push(byte as char),
            _ => {
                let _ = write!(out, "\\x{byte:02x}");
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&[u8]]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::copy_from_slice(w)).collect()
    }

    fn text(line: &Bytes) -> &str {
        std::str::from_utf8(line).unwrap()
    }

    #[test]
    fn lines_quote_and_escape_every_argument() {
        let addr: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let line = line(addr, &args(&[b"LEASE.GET", b"a \"b\"\n\x01\xff\\"]));
        let line = text(&line);
        assert!(line.starts_with('+'));
        assert!(
            line.ends_with(
                " [0 127.0.0.1:5000] \"LEASE.GET\" \"a \\\"b\\\"\\n\\x01\\xff\\\\\"\r\n"
            )
        );
        let stamp = &line[1..line.find(' ').unwrap()];
        let (secs, micros) = stamp.split_once('.').unwrap();
        assert!(secs.parse::<u64>().unwrap() > 1_600_000_000);
        assert_eq!(micros.len(), 6);
    }

    #[test]
    fn passwords_are_redacted() {
        let addr: SocketAddr = "[::1]:7".parse().unwrap();
        let auth = line(addr, &args(&[b"auth", b"default", b"secret"]));
        assert!(text(&auth).ends_with("[0 [::1]:7] \"auth\" \"(redacted)\" \"(redacted)\"\r\n"));
        let hello = line(
            addr,
            &args(&[b"HELLO", b"3", b"SETNAME", b"me", b"AUTH", b"u", b"secret"]),
        );
        assert!(text(&hello).ends_with(
            "\"HELLO\" \"3\" \"SETNAME\" \"me\" \"AUTH\" \"(redacted)\" \"(redacted)\"\r\n"
        ));
        assert!(!text(&hello).contains("secret"));
    }

    #[tokio::test]
    async fn monitors_count_while_subscribed() {
        let monitors = Monitors::default();
        assert!(!monitors.active());
        let mut feed = monitors.subscribe();
        assert!(monitors.active());
        monitors.publish("127.0.0.1:1".parse().unwrap(), &args(&[b"PING"]));
        let line = feed.lines.recv().await.unwrap();
        assert!(text(&line).ends_with("\"PING\"\r\n"));
        drop(feed);
        assert!(!monitors.active());
    }
}
