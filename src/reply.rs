//! Reply values and their encoding for RESP2 and RESP3.
//!
//! Command handlers return a [`Reply`], a value that knows nothing of the
//! wire; the connection encodes it for the protocol the client chose with
//! `HELLO`. The downgrade rules are Redis's: a map becomes a flat array, a
//! set an array, a double a bulk string of its shortest decimal form, a
//! verbatim string a bulk string, null a null bulk string.
//!
//! The bytes themselves are written by `redis-protocol`'s encoders, except
//! the header lines of RESP3 aggregates (see `Reply::encode_resp3`).

use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::types::BytesFrame as Resp2Frame;
use redis_protocol::resp3::types::{BytesFrame as Resp3Frame, VerbatimStringFormat};

use crate::registry::{Lease, RunData, Tenure};

/// The protocol a connection speaks; `HELLO` switches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Resp2,
    Resp3,
}

impl Protocol {
    /// The number `HELLO` uses for this protocol.
    pub fn version(self) -> i64 {
        match self {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }
}

/// A reply, independent of the protocol it will be encoded in.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// A simple string such as `+OK` or `+PONG`.
    Status(&'static str),
    /// An error line, already in Redis's wording (`ERR ...`, `WRONGPASS ...`).
    Error(String),
    Int(i64),
    Bulk(Bytes),
    /// Null: `_` in RESP3, a null bulk string in RESP2.
    Null,
    /// A double: `,10.5` in RESP3, the bulk string `10.5` in RESP2.
    Double(f64),
    Array(Vec<Reply>),
    /// Key/value pairs in order: a map in RESP3, a flat array in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// A set in RESP3, an array in RESP2.
    Set(Vec<Reply>),
    /// Out-of-band data (pub/sub messages): a push in RESP3, an array in
    /// RESP2.
    Push(Vec<Reply>),
    /// Text such as INFO's: a verbatim `txt` string in RESP3, bulk in RESP2.
    Verbatim(Bytes),
    /// Several replies to one request, one after another: `SUBSCRIBE a b`
    /// answers once per channel. Only at the top, never inside another.
    Replies(Vec<Reply>),
    /// A lease as the lease commands answer with it, kept as its fields
    /// until it is encoded: the core task, which every request goes
    /// through, then does not build the map (see [`Reply::lease_map`]).
    Lease(Box<LeaseReply>),
    /// Bytes written as they are, in either protocol: `SYNC`'s payload
    /// (`$<length>` and the file, with no CRLF after it, as Redis sends
    /// its RDB file). Only at the top, never inside another.
    Raw(Bytes),
}

/// The lease map's contents: `expired` is only in `LEASE.GET`'s.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseReply {
    pub lease: Lease,
    pub expired: Option<bool>,
}

impl Reply {
    pub const OK: Reply = Reply::Status("OK");

    /// An error reply. CR and LF would break the framing, so they become
    /// spaces, as Redis does.
    pub fn error(message: impl Into<String>) -> Reply {
        let mut message = message.into();
        if message.contains(['\r', '\n']) {
            message = message.replace(['\r', '\n'], " ");
        }
        Reply::Error(message)
    }

    pub fn bulk(data: impl Into<Bytes>) -> Reply {
        Reply::Bulk(data.into())
    }

    /// A bulk string holding a static text, without copying it.
    pub fn text(text: &'static str) -> Reply {
        Reply::Bulk(Bytes::from_static(text.as_bytes()))
    }

    /// A lease reply (see [`Reply::lease_map`]), kept as its fields until
    /// it is encoded.
    pub fn lease(lease: Lease, expired: Option<bool>) -> Reply {
        Reply::Lease(Box::new(LeaseReply { lease, expired }))
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// The map of a lease reply: `run_id`, `worker_id`, `lease_id`,
    /// `fencing_token`, `expires_at`, and `expired` when there is one.
    pub fn lease_map(lease: &Lease, expired: Option<bool>) -> Reply {
        let mut fields = Vec::with_capacity(6);
        fields.push((Reply::text("run_id"), Reply::Bulk(lease.run_id.clone())));
        fields.push((
            Reply::text("worker_id"),
            Reply::Bulk(lease.worker_id.clone()),
        ));
        fields.push((Reply::text("lease_id"), Reply::bulk(lease.lease_id())));
        fields.push((
            Reply::text("fencing_token"),
            Reply::Int(lease.fencing_token as i64),
        ));
        fields.push((Reply::text("expires_at"), Reply::Double(lease.expires_at)));
        if let Some(expired) = expired {
            fields.push((Reply::text("expired"), Reply::Int(i64::from(expired))));
        }
        Reply::Map(fields)
    }

    /// `LEASE.ACQUIRE ... WITHDATA`'s map: the lease map, then `data` and
    /// `data_token` (null and null when the run has no data).
    pub fn lease_with_data(lease: &Lease, data: Option<&RunData>) -> Reply {
        let Reply::Map(mut fields) = Reply::lease_map(lease, None) else {
            unreachable!("a lease map is a map")
        };
        let (value, token) = match data {
            Some(data) => (
                Reply::Bulk(data.value.clone()),
                Reply::Int(data.fencing_token as i64),
            ),
            None => (Reply::Null, Reply::Null),
        };
        fields.push((Reply::text("data"), value));
        fields.push((Reply::text("data_token"), token));
        Reply::Map(fields)
    }

    /// `LEASE.GETDATA`'s map: `value`, `fencing_token` (of the lease that
    /// wrote it), `written_at`.
    pub fn run_data(data: &RunData) -> Reply {
        Reply::Map(vec![
            (Reply::text("value"), Reply::Bulk(data.value.clone())),
            (
                Reply::text("fencing_token"),
                Reply::Int(data.fencing_token as i64),
            ),
            (Reply::text("written_at"), Reply::Double(data.written_at)),
        ])
    }

    /// A tenure in `LEASE.HISTORY`'s reply: `lease_id`, `worker_id`,
    /// `fencing_token`, `acquired_at`, `expires_at`, `ended_at` (null
    /// while active), `end`, `heartbeats`.
    pub fn tenure(tenure: Tenure) -> Reply {
        let ended_at = tenure.ended_at.map_or(Reply::Null, Reply::Double);
        let end = Reply::text(tenure.end_name());
        Reply::Map(vec![
            (Reply::text("lease_id"), Reply::Bulk(tenure.lease_id)),
            (Reply::text("worker_id"), Reply::Bulk(tenure.worker_id)),
            (
                Reply::text("fencing_token"),
                Reply::Int(tenure.fencing_token as i64),
            ),
            (
                Reply::text("acquired_at"),
                Reply::Double(tenure.acquired_at),
            ),
            (Reply::text("expires_at"), Reply::Double(tenure.expires_at)),
            (Reply::text("ended_at"), ended_at),
            (Reply::text("end"), end),
            (
                Reply::text("heartbeats"),
                Reply::Int(i64::from(tenure.heartbeats)),
            ),
        ])
    }

    /// Appends the encoding of this reply for `protocol` to `out`.
    pub fn encode(&self, protocol: Protocol, out: &mut BytesMut) {
        if let Reply::Replies(replies) = self {
            replies.iter().for_each(|reply| reply.encode(protocol, out));
            return;
        }
        if let Reply::Raw(bytes) = self {
            out.extend_from_slice(bytes);
            return;
        }
        match protocol {
            Protocol::Resp2 => match self {
                Reply::Lease(lease) => encode_lease_resp2(lease, out),
                _ => check_encoded(redis_protocol::resp2::encode::extend_encode(
                    out,
                    &self.to_resp2(),
                    false,
                )),
            },
            Protocol::Resp3 => self.encode_resp3(out),
        }
    }

    /// RESP3: aggregates are written here, a header line and then each
    /// member, and only the other values become redis-protocol frames.
    /// The crate's set and map frames are hash collections: hashing an
    /// array or a map member panics, and equal members would be dropped.
    fn encode_resp3(&self, out: &mut BytesMut) {
        match self {
            Reply::Lease(lease) => encode_lease_resp3(lease, out),
            Reply::Array(items) => {
                aggregate_header(out, b'*', items.len());
                items.iter().for_each(|item| item.encode_resp3(out));
            }
            Reply::Set(items) => {
                aggregate_header(out, b'~', items.len());
                items.iter().for_each(|item| item.encode_resp3(out));
            }
            Reply::Push(items) => {
                aggregate_header(out, b'>', items.len());
                items.iter().for_each(|item| item.encode_resp3(out));
            }
            Reply::Map(pairs) => {
                aggregate_header(out, b'%', pairs.len());
                for (key, value) in pairs {
                    key.encode_resp3(out);
                    value.encode_resp3(out);
                }
            }
            _ => check_encoded(redis_protocol::resp3::encode::complete::extend_encode(
                out,
                &self.resp3_scalar(),
                false,
            )),
        }
    }

    fn to_resp2(&self) -> Resp2Frame {
        match self {
            Reply::Status(s) => Resp2Frame::SimpleString(Bytes::from_static(s.as_bytes())),
            Reply::Error(e) => Resp2Frame::Error(e.as_str().into()),
            Reply::Int(i) => Resp2Frame::Integer(*i),
            Reply::Bulk(b) | Reply::Verbatim(b) => Resp2Frame::BulkString(b.clone()),
            Reply::Null => Resp2Frame::Null,
            Reply::Double(d) => Resp2Frame::BulkString(format_double(*d).into()),
            Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => {
                Resp2Frame::Array(items.iter().map(Reply::to_resp2).collect())
            }
            Reply::Map(pairs) => Resp2Frame::Array(
                pairs
                    .iter()
                    .flat_map(|(k, v)| [k.to_resp2(), v.to_resp2()])
                    .collect(),
            ),
            Reply::Lease(lease) => Reply::lease_map(&lease.lease, lease.expired).to_resp2(),
            Reply::Replies(_) | Reply::Raw(_) => {
                unreachable!("several replies, or raw bytes, are written by encode")
            }
        }
    }

    /// The frame of a reply that is not an aggregate (see
    /// [`Reply::encode_resp3`]).
    fn resp3_scalar(&self) -> Resp3Frame {
        match self {
            Reply::Status(s) => Resp3Frame::SimpleString {
                data: Bytes::from_static(s.as_bytes()),
                attributes: None,
            },
            Reply::Error(e) => Resp3Frame::SimpleError {
                data: e.as_str().into(),
                attributes: None,
            },
            Reply::Int(i) => Resp3Frame::Number {
                data: *i,
                attributes: None,
            },
            Reply::Bulk(b) => Resp3Frame::BlobString {
                data: b.clone(),
                attributes: None,
            },
            Reply::Verbatim(b) => Resp3Frame::VerbatimString {
                data: b.clone(),
                format: VerbatimStringFormat::Text,
                attributes: None,
            },
            Reply::Null => Resp3Frame::Null,
            Reply::Double(d) => Resp3Frame::Double {
                data: *d,
                attributes: None,
            },
            Reply::Array(_)
            | Reply::Set(_)
            | Reply::Push(_)
            | Reply::Map(_)
            | Reply::Lease(_)
            | Reply::Replies(_)
            | Reply::Raw(_) => unreachable!("aggregates are written by encode_resp3"),
        }
    }
}

/// Encoding into a growable buffer fails only on frames we never build
/// (e.g. a RESP3 double that is NaN), so a failure is a bug.
fn check_encoded<T, E: std::fmt::Debug>(result: Result<T, E>) {
    if let Err(error) = result {
        panic!("reply could not be encoded: {error:?}");
    }
}

/// The header line of a RESP3 aggregate: its type byte and length.
fn aggregate_header(out: &mut BytesMut, kind: u8, len: usize) {
    out.extend_from_slice(&[kind]);
    out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The lease map in RESP2, the commonest reply there is: a flat array of
/// ten (or twelve) frames borrowed from the lease, with no frame tree to
/// build and free.
fn encode_lease_resp2(reply: &LeaseReply, out: &mut BytesMut) {
    use redis_protocol::resp2::types::BorrowedFrame as Frame;
    let lease = &reply.lease;
    let lease_id = lease.lease_id();
    let expires_at = format_double(lease.expires_at);
    let mut frames = [
        Frame::BulkString(b"run_id"),
        Frame::BulkString(&lease.run_id),
        Frame::BulkString(b"worker_id"),
        Frame::BulkString(&lease.worker_id),
        Frame::BulkString(b"lease_id"),
        Frame::BulkString(&lease_id),
        Frame::BulkString(b"fencing_token"),
        Frame::Integer(lease.fencing_token as i64),
        Frame::BulkString(b"expires_at"),
        Frame::BulkString(expires_at.as_bytes()),
        Frame::BulkString(b"expired"),
        Frame::Null,
    ];
    let len = match reply.expired {
        Some(expired) => {
            frames[11] = Frame::Integer(i64::from(expired));
            12
        }
        None => 10,
    };
    let array = Frame::Array(&frames[..len]);
    if let Err(error) = redis_protocol::resp2::encode::extend_encode_borrowed(out, &array, false) {
        panic!("reply could not be encoded: {error:?}");
    }
}

/// The lease map in RESP3. redis-protocol encodes a borrowed map only from
/// a hash map of frames, which would cost more than the rest of the reply
/// (2.7 µs against 0.9 in RESP2), so the `%` header line is written here
/// and every key and value is encoded by the crate as a borrowed frame.
fn encode_lease_resp3(reply: &LeaseReply, out: &mut BytesMut) {
    use redis_protocol::resp3::types::BorrowedFrame as Frame;
    let blob = |data| Frame::BlobString {
        data,
        attributes: None,
    };
    let number = |data| Frame::Number {
        data,
        attributes: None,
    };
    let lease = &reply.lease;
    let lease_id = lease.lease_id();
    let expires_at = Frame::Double {
        data: lease.expires_at,
        attributes: None,
    };
    let fields: [(&[u8], Frame); 6] = [
        (b"run_id", blob(&lease.run_id)),
        (b"worker_id", blob(&lease.worker_id)),
        (b"lease_id", blob(&lease_id)),
        (b"fencing_token", number(lease.fencing_token as i64)),
        (b"expires_at", expires_at),
        (b"expired", number(reply.expired.map_or(0, i64::from))),
    ];
    let len = if reply.expired.is_some() { 6 } else { 5 };
    aggregate_header(out, b'%', len);
    for (key, value) in &fields[..len] {
        for frame in [&blob(key), value] {
            let encoded =
                redis_protocol::resp3::encode::complete::extend_encode_borrowed(out, frame, false);
            if let Err(error) = encoded {
                panic!("reply could not be encoded: {error:?}");
            }
        }
    }
}

/// The decimal form of a double that RESP2 sends as a bulk string: the
/// shortest text that reads back as the same number (`10`, `10.5`), the
/// same digits `redis-protocol` writes for a RESP3 double.
pub fn format_double(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(reply: &Reply, protocol: Protocol) -> String {
        let mut out = BytesMut::new();
        reply.encode(protocol, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn null_differs_by_protocol() {
        assert_eq!(encoded(&Reply::Null, Protocol::Resp2), "$-1\r\n");
        assert_eq!(encoded(&Reply::Null, Protocol::Resp3), "_\r\n");
    }

    #[test]
    fn doubles_are_bulk_strings_in_resp2() {
        assert_eq!(
            encoded(&Reply::Double(10.0), Protocol::Resp2),
            "$2\r\n10\r\n"
        );
        assert_eq!(
            encoded(&Reply::Double(10.5), Protocol::Resp2),
            "$4\r\n10.5\r\n"
        );
        assert_eq!(encoded(&Reply::Double(10.5), Protocol::Resp3), ",10.5\r\n");
        assert_eq!(encoded(&Reply::Double(10.0), Protocol::Resp3), ",10\r\n");
    }

    #[test]
    fn maps_keep_their_order_and_flatten_in_resp2() {
        let map = Reply::Map(vec![
            (Reply::text("b"), Reply::Int(1)),
            (Reply::text("a"), Reply::Int(2)),
        ]);
        assert_eq!(
            encoded(&map, Protocol::Resp3),
            "%2\r\n$1\r\nb\r\n:1\r\n$1\r\na\r\n:2\r\n"
        );
        assert_eq!(
            encoded(&map, Protocol::Resp2),
            "*4\r\n$1\r\nb\r\n:1\r\n$1\r\na\r\n:2\r\n"
        );
    }

    #[test]
    fn sets_and_verbatim_strings() {
        let set = Reply::Set(vec![Reply::Status("optional")]);
        assert_eq!(encoded(&set, Protocol::Resp3), "~1\r\n+optional\r\n");
        assert_eq!(encoded(&set, Protocol::Resp2), "*1\r\n+optional\r\n");
        let text = Reply::Verbatim(Bytes::from_static(b"a:1"));
        assert_eq!(encoded(&text, Protocol::Resp3), "=7\r\ntxt:a:1\r\n");
        assert_eq!(encoded(&text, Protocol::Resp2), "$3\r\na:1\r\n");
    }

    /// Found by the decode_parse fuzz target: `COMMAND` in RESP3 replies
    /// with sets of subcommand arrays, and a set of arrays made the encoder
    /// panic (redis-protocol's set frame hashes its members, and an array
    /// cannot be hashed), dropping the connection.
    #[test]
    fn sets_and_maps_of_aggregates_encode_in_resp3() {
        let set = Reply::Set(vec![
            Reply::Array(vec![Reply::Int(1), Reply::Set(Vec::new())]),
            Reply::Map(vec![(Reply::text("k"), Reply::Array(Vec::new()))]),
        ]);
        assert_eq!(
            encoded(&set, Protocol::Resp3),
            "~2\r\n*2\r\n:1\r\n~0\r\n%1\r\n$1\r\nk\r\n*0\r\n"
        );
        assert_eq!(
            encoded(&set, Protocol::Resp2),
            "*2\r\n*2\r\n:1\r\n*0\r\n*2\r\n$1\r\nk\r\n*0\r\n"
        );
        // An aggregate as a map key too, and members equal to each other:
        // both are sent as they are, in order, as in RESP2.
        let map = Reply::Map(vec![
            (Reply::Array(vec![Reply::Null]), Reply::Double(1.5)),
            (Reply::text("a"), Reply::Int(1)),
            (Reply::text("a"), Reply::Int(2)),
        ]);
        assert_eq!(
            encoded(&map, Protocol::Resp3),
            "%3\r\n*1\r\n_\r\n,1.5\r\n$1\r\na\r\n:1\r\n$1\r\na\r\n:2\r\n"
        );
        let twice = Reply::Set(vec![Reply::Status("x"), Reply::Status("x")]);
        assert_eq!(encoded(&twice, Protocol::Resp3), "~2\r\n+x\r\n+x\r\n");
    }

    #[test]
    fn command_info_encodes_in_both_protocols() {
        let names = [
            Bytes::from_static(b"client"),
            Bytes::from_static(b"config|get"),
        ];
        for reply in [
            crate::command::docs::info(None),
            crate::command::docs::info(Some(&names)),
            crate::command::docs::docs(&[]),
        ] {
            for protocol in [Protocol::Resp2, Protocol::Resp3] {
                assert!(!encoded(&reply, protocol).is_empty());
            }
        }
    }

    #[test]
    fn errors_never_carry_line_breaks() {
        let reply = Reply::error("ERR bad\r\nthing");
        assert_eq!(encoded(&reply, Protocol::Resp2), "-ERR bad  thing\r\n");
    }

    #[test]
    fn a_lease_reply_encodes_as_its_map_in_both_protocols() {
        let lease = Lease {
            run_id: Bytes::from_static(b"run:1"),
            worker_id: Bytes::from_static(b"w"),
            fencing_token: 42,
            expires_at: 1700000010.5,
        };
        for expired in [None, Some(false), Some(true)] {
            let reply = Reply::Lease(Box::new(LeaseReply {
                lease: lease.clone(),
                expired,
            }));
            let map = Reply::lease_map(&lease, expired);
            for protocol in [Protocol::Resp2, Protocol::Resp3] {
                assert_eq!(encoded(&reply, protocol), encoded(&map, protocol));
            }
        }
        let resp2 = encoded(
            &Reply::Lease(Box::new(LeaseReply {
                lease,
                expired: None,
            })),
            Protocol::Resp2,
        );
        assert_eq!(
            resp2,
            "*10\r\n$6\r\nrun_id\r\n$5\r\nrun:1\r\n$9\r\nworker_id\r\n$1\r\nw\r\n\
              $8\r\nlease_id\r\n$10\r\nrun:1:w:42\r\n$13\r\nfencing_token\r\n:42\r\n\
              $10\r\nexpires_at\r\n$12\r\n1700000010.5\r\n"
        );
    }
}
