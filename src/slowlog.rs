//! The slow log: commands that took at least `slowlog-log-slower-than`
//! microseconds to run, newest first, at most `slowlog-max-len` of them.
//!
//! The time is the command's own execution, as in Redis: for a lease
//! command, the core applying it to the registry; for the others, the
//! connection answering it. Reading the request, waiting for the core and
//! writing to the log or the socket are not counted.
//!
//! Recording takes a lock, but only for a command that was slow; timing the
//! others costs a clock read each (see [`Stopwatch`]).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use bytes::{BufMut, Bytes, BytesMut};

use crate::command;
use crate::reply::Reply;

/// Arguments kept per entry; the rest are summed up in the last one.
const MAX_ARGS: usize = 32;
/// Bytes kept per argument; the rest are summed up after them.
const MAX_ARG_LEN: usize = 128;

#[derive(Debug, Default)]
pub struct SlowLog {
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    /// The id of the next entry: ids count every slow command, kept or not.
    next_id: u64,
    /// Newest first.
    list: VecDeque<Entry>,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    /// Unix time in seconds when it was logged.
    time: u64,
    micros: u64,
    args: Vec<Bytes>,
    /// `ip:port` of the client.
    peer: String,
    /// The client's name, or empty.
    name: Bytes,
}

/// Times commands that run one after another, with one clock read per
/// command (a read costs about 25 ns, a pipelined acquire 2 µs): each
/// lap runs from the end of the one before. The same time goes to the
/// slow log and to `INFO commandstats` and `latencystats`.
pub struct Stopwatch {
    /// From this long a command is slow; `None` when the slow log is off.
    threshold: Option<Duration>,
    last: Instant,
}

impl Stopwatch {
    /// A running stopwatch, for `slowlog-log-slower-than` microseconds
    /// (below 0: the slow log is off, but commands are still timed).
    pub fn start(slower_than: i64) -> Stopwatch {
        Stopwatch {
            threshold: u64::try_from(slower_than).ok().map(Duration::from_micros),
            last: Instant::now(),
        }
    }

    /// The time since the last lap (or the start): what the command that
    /// just ran took.
    pub fn lap(&mut self) -> Duration {
        let now = Instant::now();
        let took = now - self.last;
        self.last = now;
        took
    }

    /// Whether a command that took `took` goes in the slow log.
    pub fn is_slow(&self, took: Duration) -> bool {
        self.threshold.is_some_and(|threshold| took >= threshold)
    }
}

impl SlowLog {
    /// Logs a command that took `took`, sent by the client at `peer`
    /// named `name` (empty for none), dropping the oldest entries beyond
    /// `max_len`.
    pub fn record(
        &self,
        max_len: usize,
        args: &[Bytes],
        took: Duration,
        peer: SocketAddr,
        name: Bytes,
    ) {
        let entry = Entry {
            id: 0,
            time: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            micros: u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            args: shortened(&command::redacted(args)),
            peer: peer.to_string(),
            name,
        };
        let mut entries = self.lock();
        let id = entries.next_id;
        entries.next_id += 1;
        entries.list.push_front(Entry { id, ..entry });
        entries.list.truncate(max_len);
    }

    /// `SLOWLOG GET`: the newest `count` entries (all for `None`), each
    /// `[id, time, microseconds, [args], peer, name]`.
    pub fn get(&self, count: Option<usize>) -> Reply {
        let entries = self.lock();
        let count = count.unwrap_or(usize::MAX);
        Reply::Array(entries.list.iter().take(count).map(Entry::reply).collect())
    }

    pub fn len(&self) -> usize {
        self.lock().list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn reset(&self) {
        self.lock().list.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // An entry is pushed whole or not at all: a panic cannot leave the
        // list half-changed.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Entry {
    fn reply(&self) -> Reply {
        let int = |n: u64| Reply::Int(i64::try_from(n).unwrap_or(i64::MAX));
        Reply::Array(vec![
            int(self.id),
            int(self.time),
            int(self.micros),
            Reply::Array(self.args.iter().cloned().map(Reply::Bulk).collect()),
            Reply::bulk(self.peer.clone()),
            Reply::Bulk(self.name.clone()),
        ])
    }
}

/// At most [`MAX_ARGS`] arguments of at most [`MAX_ARG_LEN`] bytes, as
/// Redis keeps them: what is cut is counted in place of it.
fn shortened(args: &[Bytes]) -> Vec<Bytes> {
    let kept = if args.len() > MAX_ARGS {
        MAX_ARGS - 1
    } else {
        args.len()
    };
    let mut shown: Vec<Bytes> = args[..kept].iter().map(shortened_arg).collect();
    if kept < args.len() {
        let more = args.len() - kept;
        shown.push(Bytes::from(format!("... ({more} more arguments)")));
    }
    shown
}

fn shortened_arg(arg: &Bytes) -> Bytes {
    if arg.len() <= MAX_ARG_LEN {
        // A view of the request's buffer would keep the whole read alive
        // for as long as the entry lives: copy the few bytes instead.
        return Bytes::copy_from_slice(arg);
    }
    let more = arg.len() - MAX_ARG_LEN;
    let mut cut = BytesMut::with_capacity(MAX_ARG_LEN + 32);
    cut.put_slice(&arg[..MAX_ARG_LEN]);
    cut.put_slice(format!("... ({more} more bytes)").as_bytes());
    cut.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_requests_are_cut_as_redis_cuts_them() {
        let args: Vec<Bytes> = (0..40).map(|i| Bytes::from(i.to_string())).collect();
        let shown = shortened(&args);
        assert_eq!(shown.len(), 32);
        assert_eq!(shown[30], Bytes::from("30"));
        assert_eq!(shown[31], Bytes::from("... (9 more arguments)"));

        let exactly: Vec<Bytes> = args[..32].to_vec();
        assert_eq!(shortened(&exactly), exactly);

        let long = Bytes::from(vec![b'x'; 200]);
        let cut = shortened_arg(&long);
        assert!(cut.starts_with(&[b'x'; 128]));
        assert_eq!(&cut[128..], b"... (72 more bytes)");
    }
}
