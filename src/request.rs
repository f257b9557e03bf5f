//! Strict decoding of client requests: RESP multibulk and inline commands.
//!
//! The rules are Redis's (`processMultibulkBuffer` and `processInlineBuffer`
//! in networking.c, `string2ll`, `sdssplitargs`). Where Redis trusts the
//! client, this decoder refuses instead: a `\r` ending a header must be
//! followed by `\n`, and bulk data must be followed by exactly `\r\n`, so a
//! client that miscounts a length gets an error rather than a silently
//! misaligned stream.
//!
//! Every verdict on malformed input is taken from a prefix of the byte stream
//! as soon as that prefix has arrived, never from how much else happens to be
//! buffered. The same stream therefore gives the same requests and the same
//! error however the socket reads cut it. (Redis's "too big ... string"
//! checks look at the whole buffer instead, so they depend on read sizes.)

use std::fmt;
use std::ops::Range;

use bytes::{Buf, Bytes, BytesMut};

use crate::number::parse_i64;
use crate::splitargs::split_args;

/// How many argument slots a multibulk reserves before its arguments arrive.
/// The announced count is only a claim, which costs the client nothing to
/// make, so beyond this the vector grows with the arguments really received.
const ARGS_PREALLOC_CAP: usize = 16;

/// Size limits applied while decoding, before anything is buffered.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The longest bulk string (argument) accepted.
    pub max_bulk_len: usize,
    /// The most arguments in one request.
    pub max_args: usize,
    /// The longest inline request line, and the longest header line.
    pub max_inline_len: usize,
    /// Whether the client has yet to authenticate to a server that wants a
    /// password: then, as in Redis 7, a request may have at most
    /// [`UNAUTHENTICATED_MAX_ARGS`] arguments of at most
    /// [`UNAUTHENTICATED_MAX_BULK_LEN`] bytes, so a stranger cannot make the
    /// server buffer much.
    pub unauthenticated: bool,
}

/// Redis's limits for a client that has not authenticated: enough for
/// `AUTH` and `HELLO 3 AUTH user pass SETNAME name`.
pub const UNAUTHENTICATED_MAX_ARGS: usize = 10;
pub const UNAUTHENTICATED_MAX_BULK_LEN: usize = 16384;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_args: 1024 * 1024,
            max_inline_len: 64 * 1024,
            unauthenticated: false,
        }
    }
}

/// Input that cannot be decoded. The connection replies with
/// [`ProtocolError::message`] and closes, as Redis does: the stream cannot be
/// resynchronised after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    /// An inline line longer than `max_inline_len` bytes before its `\n`.
    TooBigInlineRequest,
    /// An inline line with a quote that never closes, or that closes with
    /// something other than whitespace right after it.
    UnbalancedQuotes,
    /// A `*` header line longer than `max_inline_len` bytes before its `\r`.
    TooBigMultibulkCount,
    /// A `*` count that is not a number or is above `max_args`.
    InvalidMultibulkLength,
    /// A `*` count above [`UNAUTHENTICATED_MAX_ARGS`] before authentication.
    UnauthenticatedMultibulkLength,
    /// A `*` header whose `\r` is followed by something other than `\n`.
    MultibulkLengthNotTerminated,
    /// An argument that does not start with `$`; holds the byte found instead.
    ExpectedDollar(u8),
    /// A `$` header line longer than `max_inline_len` bytes before its `\r`.
    TooBigBulkCount,
    /// A `$` length that is not a number, is negative, or is above
    /// `max_bulk_len`.
    InvalidBulkLength,
    /// A `$` length above [`UNAUTHENTICATED_MAX_BULK_LEN`] before
    /// authentication.
    UnauthenticatedBulkLength,
    /// A `$` header whose `\r` is followed by something other than `\n`.
    BulkLengthNotTerminated,
    /// Bulk data not followed by exactly `\r\n`: the announced length was
    /// wrong.
    BulkDataNotTerminated,
}

impl ProtocolError {
    /// The error line in Redis's wording, e.g. `ERR Protocol error: invalid bulk length`.
    pub fn message(&self) -> String {
        let detail = match self {
            ProtocolError::TooBigInlineRequest => "too big inline request",
            ProtocolError::UnbalancedQuotes => "unbalanced quotes in request",
            ProtocolError::TooBigMultibulkCount => "too big mbulk count string",
            ProtocolError::InvalidMultibulkLength => "invalid multibulk length",
            ProtocolError::UnauthenticatedMultibulkLength => "unauthenticated multibulk length",
            ProtocolError::MultibulkLengthNotTerminated => {
                r"expected '\n' after '\r' in multibulk length"
            }
            ProtocolError::ExpectedDollar(found) => {
                return format!(
                    "ERR Protocol error: expected '$', got '{}'",
                    printable(*found)
                );
            }
            ProtocolError::TooBigBulkCount => "too big bulk count string",
            ProtocolError::InvalidBulkLength => "invalid bulk length",
            ProtocolError::UnauthenticatedBulkLength => "unauthenticated bulk length",
            ProtocolError::BulkLengthNotTerminated => r"expected '\n' after '\r' in bulk length",
            ProtocolError::BulkDataNotTerminated => r"expected '\r\n' after bulk data",
        };
        format!("ERR Protocol error: {detail}")
    }
}

/// Shows an offending byte inside a one-line error reply.
fn printable(byte: u8) -> String {
    match byte {
        // Redis's error replies turn CR and LF into spaces so that the reply
        // stays one line; do the same.
        b'\r' | b'\n' => " ".to_owned(),
        b' ' => " ".to_owned(),
        b if b.is_ascii_graphic() => char::from(b).to_string(),
        // Redis would print the raw byte, which can be a control character or
        // not UTF-8 at all; a hex escape keeps the line readable.
        b => format!("\\x{b:02x}"),
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for ProtocolError {}

/// Decodes requests from a connection's read buffer, keeping the state of a
/// partial request between reads so a large request is never rescanned.
///
/// The state refers to positions in the buffer, which holds the partial
/// request from its first byte: between calls the caller may only append to
/// the buffer.
#[derive(Debug, Default)]
pub struct RequestDecoder {
    limits: Limits,
    state: State,
}

/// Where the decoder is within the request at the front of the buffer.
#[derive(Debug, Default)]
enum State {
    /// Nothing of the next request has been examined.
    #[default]
    Start,
    /// In an inline line, whose first `scanned` bytes hold no `\n`.
    Inline { scanned: usize },
    /// In a `*` header line, whose first `scanned` bytes hold no `\r`.
    Count { scanned: usize },
    /// Past the `*` header, collecting the arguments.
    Args(Multibulk),
    /// A protocol error was found; nothing after it can be trusted.
    Failed(ProtocolError),
}

/// A multibulk request whose header has been read.
#[derive(Debug)]
struct Multibulk {
    /// How many arguments the `*` header announced (at most `max_args`).
    expected: usize,
    /// Where each argument received so far lies in the buffer; turned into
    /// slices only when the request is complete and leaves the buffer.
    args: Vec<Range<usize>>,
    /// Where the next argument's `$` header starts or, once that header has
    /// been read, where its data starts.
    next: usize,
    /// The current argument's length, once its header has been read.
    bulk_len: Option<usize>,
    /// How many bytes of the current `$` header hold no `\r`, so a header
    /// trickling in byte by byte is not searched again from its start.
    scanned: usize,
}

/// What one step of decoding achieved.
enum Progress {
    /// A complete request left the buffer; empty when it had no arguments.
    Request(Vec<Bytes>),
    /// The request at the front of the buffer needs more bytes.
    Incomplete,
}

/// The outcome of looking for the byte that ends a line.
enum Scan {
    /// Found at this position in the buffer.
    Found(usize),
    /// Not among the bytes buffered so far, and the line may still end.
    Incomplete,
    /// The line is already longer than allowed.
    TooLong,
}

/// Looks for `end` in the line that starts at `start` in `buf`, a line that
/// may hold at most `max` bytes before `end`. The line's first `*scanned`
/// bytes are known not to be `end`; the count is advanced past every byte
/// examined, and never past `max + 1`, however much is buffered after the
/// line.
fn scan_line(buf: &[u8], start: usize, scanned: &mut usize, end: u8, max: usize) -> Scan {
    let stop = start.saturating_add(max).saturating_add(1).min(buf.len());
    let from = start + *scanned;
    if from < stop {
        if let Some(i) = buf[from..stop].iter().position(|&b| b == end) {
            return Scan::Found(from + i);
        }
        *scanned = stop - start;
    }
    if *scanned > max {
        Scan::TooLong
    } else {
        Scan::Incomplete
    }
}

impl RequestDecoder {
    pub fn new(limits: Limits) -> RequestDecoder {
        RequestDecoder {
            limits,
            state: State::Start,
        }
    }

    /// Decodes every complete request at the front of `buf`, removes their
    /// bytes from it and appends each request's arguments to `out`. Stops at
    /// an incomplete request (resumed by the next call) or at a protocol
    /// error; requests decoded before the error are in `out`. Empty
    /// requests (a blank inline line, `*0`, `*-1`) produce nothing.
    ///
    /// Arguments are slices of the bytes removed from `buf`, except inline
    /// arguments whose quotes or escapes make them differ from their source.
    /// After an error every later call returns the same error.
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        out: &mut Vec<Vec<Bytes>>,
    ) -> Result<(), ProtocolError> {
        self.decode_up_to(buf, out, usize::MAX)
    }

    /// [`RequestDecoder::decode`], but stops after the first non-empty
    /// request, so the limits can change before the next is decoded (an
    /// `AUTH` lifts the unauthenticated ones).
    pub fn decode_one(
        &mut self,
        buf: &mut BytesMut,
        out: &mut Vec<Vec<Bytes>>,
    ) -> Result<(), ProtocolError> {
        self.decode_up_to(buf, out, 1)
    }

    /// The limits for the requests decoded from now on. A request already
    /// partly decoded keeps the verdicts it had on its headers.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    fn decode_up_to(
        &mut self,
        buf: &mut BytesMut,
        out: &mut Vec<Vec<Bytes>>,
        max_requests: usize,
    ) -> Result<(), ProtocolError> {
        if let State::Failed(error) = &self.state {
            return Err(error.clone());
        }
        let mut decoded = 0;
        loop {
            match self.step(buf) {
                Ok(Progress::Request(args)) => {
                    if !args.is_empty() {
                        out.push(args);
                        decoded += 1;
                        if decoded == max_requests {
                            return Ok(());
                        }
                    }
                }
                Ok(Progress::Incomplete) => return Ok(()),
                Err(error) => {
                    self.state = State::Failed(error.clone());
                    return Err(error);
                }
            }
        }
    }

    /// Advances through the request at the front of `buf` until it is
    /// complete or needs more bytes.
    fn step(&mut self, buf: &mut BytesMut) -> Result<Progress, ProtocolError> {
        let limits = self.limits;
        loop {
            match &mut self.state {
                State::Start => match buf.first() {
                    None => return Ok(Progress::Incomplete),
                    // The `*` is not a `\r`, so the header scan starts past it.
                    Some(b'*') => self.state = State::Count { scanned: 1 },
                    Some(_) => self.state = State::Inline { scanned: 0 },
                },
                State::Inline { scanned } => {
                    let newline = match scan_line(buf, 0, scanned, b'\n', limits.max_inline_len) {
                        Scan::Found(at) => at,
                        Scan::Incomplete => return Ok(Progress::Incomplete),
                        Scan::TooLong => return Err(ProtocolError::TooBigInlineRequest),
                    };
                    let line_len = match buf[..newline].last() {
                        Some(b'\r') => newline - 1,
                        _ => newline,
                    };
                    // Split before consuming, so a refused line stays where it was.
                    let args =
                        split_args(&buf[..line_len]).ok_or(ProtocolError::UnbalancedQuotes)?;
                    buf.advance(newline + 1);
                    self.state = State::Start;
                    // Inline requests are typed by people: copies cost nothing here.
                    let args = args.into_iter().map(Bytes::from).collect();
                    return Ok(Progress::Request(args));
                }
                State::Count { scanned } => {
                    let cr = match scan_line(buf, 0, scanned, b'\r', limits.max_inline_len) {
                        Scan::Found(at) => at,
                        Scan::Incomplete => return Ok(Progress::Incomplete),
                        Scan::TooLong => return Err(ProtocolError::TooBigMultibulkCount),
                    };
                    let count =
                        parse_i64(&buf[1..cr]).ok_or(ProtocolError::InvalidMultibulkLength)?;
                    // Refused on the header alone, before a single argument is awaited.
                    let expected = match usize::try_from(count) {
                        Ok(n) if limits.unauthenticated && n > UNAUTHENTICATED_MAX_ARGS => {
                            return Err(ProtocolError::UnauthenticatedMultibulkLength);
                        }
                        Ok(n) if n <= limits.max_args => n,
                        Ok(_) => return Err(ProtocolError::InvalidMultibulkLength),
                        // Redis takes any count below 1 as an empty request.
                        Err(_) => 0,
                    };
                    match buf.get(cr + 1) {
                        None => {
                            *scanned = cr;
                            return Ok(Progress::Incomplete);
                        }
                        Some(b'\n') => {}
                        Some(_) => return Err(ProtocolError::MultibulkLengthNotTerminated),
                    }
                    if expected == 0 {
                        buf.advance(cr + 2);
                        self.state = State::Start;
                        return Ok(Progress::Request(Vec::new()));
                    }
                    self.state = State::Args(Multibulk {
                        expected,
                        args: Vec::with_capacity(expected.min(ARGS_PREALLOC_CAP)),
                        next: cr + 2,
                        bulk_len: None,
                        scanned: 0,
                    });
                }
                State::Args(request) => {
                    if !request.collect(buf, &limits)? {
                        return Ok(Progress::Incomplete);
                    }
                    let frame = buf.split_to(request.next).freeze();
                    let args = request
                        .args
                        .iter()
                        .map(|range| frame.slice(range.clone()))
                        .collect();
                    self.state = State::Start;
                    return Ok(Progress::Request(args));
                }
                State::Failed(error) => return Err(error.clone()),
            }
        }
    }
}

impl Multibulk {
    /// Reads arguments from where the last call stopped; true once all the
    /// announced arguments are in.
    fn collect(&mut self, buf: &[u8], limits: &Limits) -> Result<bool, ProtocolError> {
        while self.args.len() < self.expected {
            match self.bulk_len {
                None => {
                    let Some(&first) = buf.get(self.next) else {
                        return Ok(false);
                    };
                    if first != b'$' {
                        return Err(ProtocolError::ExpectedDollar(first));
                    }
                    let cr = match scan_line(
                        buf,
                        self.next,
                        &mut self.scanned,
                        b'\r',
                        limits.max_inline_len,
                    ) {
                        Scan::Found(at) => at,
                        Scan::Incomplete => return Ok(false),
                        Scan::TooLong => return Err(ProtocolError::TooBigBulkCount),
                    };
                    // Refused on the header alone: the data is never awaited.
                    let len = parse_i64(&buf[self.next + 1..cr]);
                    if limits.unauthenticated
                        && len.is_some_and(|n| n > UNAUTHENTICATED_MAX_BULK_LEN as i64)
                    {
                        return Err(ProtocolError::UnauthenticatedBulkLength);
                    }
                    let len = len
                        .and_then(|n| usize::try_from(n).ok())
                        .filter(|&n| n <= limits.max_bulk_len)
                        .ok_or(ProtocolError::InvalidBulkLength)?;
                    match buf.get(cr + 1) {
                        None => {
                            self.scanned = cr - self.next;
                            return Ok(false);
                        }
                        Some(b'\n') => {}
                        Some(_) => return Err(ProtocolError::BulkLengthNotTerminated),
                    }
                    self.bulk_len = Some(len);
                    self.next = cr + 2;
                    self.scanned = 0;
                }
                Some(len) => {
                    let data_end = self.next.saturating_add(len);
                    if buf.len() < data_end.saturating_add(2) {
                        return Ok(false);
                    }
                    if &buf[data_end..data_end + 2] != b"\r\n" {
                        return Err(ProtocolError::BulkDataNotTerminated);
                    }
                    self.args.push(self.next..data_end);
                    self.next = data_end + 2;
                    self.bulk_len = None;
                }
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What feeding a stream produced: the requests, the last result, and
    /// the bytes left in the buffer.
    #[derive(Debug, PartialEq)]
    struct Outcome {
        requests: Vec<Vec<Bytes>>,
        result: Result<(), ProtocolError>,
        leftover: Vec<u8>,
    }

    /// Feeds `stream` to a fresh decoder in chunks ending at `cuts` (sorted
    /// positions), decoding after each chunk as the connection does, and
    /// stopping at the first error.
    fn feed_cut(limits: Limits, stream: &[u8], cuts: &[usize]) -> Outcome {
        let mut decoder = RequestDecoder::new(limits);
        let mut buf = BytesMut::new();
        let mut requests = Vec::new();
        let mut start = 0;
        for &end in cuts.iter().chain(std::iter::once(&stream.len())) {
            let end = end.clamp(start, stream.len());
            buf.extend_from_slice(&stream[start..end]);
            start = end;
            if let Err(error) = decoder.decode(&mut buf, &mut requests) {
                return Outcome {
                    requests,
                    result: Err(error),
                    leftover: buf.to_vec(),
                };
            }
        }
        Outcome {
            requests,
            result: Ok(()),
            leftover: buf.to_vec(),
        }
    }

    fn feed(limits: Limits, stream: &[u8]) -> Outcome {
        feed_cut(limits, stream, &[])
    }

    fn feed_bytewise(limits: Limits, stream: &[u8]) -> Outcome {
        let cuts: Vec<usize> = (1..stream.len()).collect();
        feed_cut(limits, stream, &cuts)
    }

    fn request(args: &[&[u8]]) -> Vec<Bytes> {
        args.iter().map(|a| Bytes::copy_from_slice(a)).collect()
    }

    /// The requests a stream of complete, valid requests must decode to.
    fn decodes_to(stream: &[u8], expected: &[Vec<Bytes>]) {
        let outcome = feed(Limits::default(), stream);
        assert_eq!(
            outcome.result,
            Ok(()),
            "stream {:?}",
            stream.escape_ascii().to_string()
        );
        assert_eq!(
            outcome.requests,
            expected,
            "stream {:?}",
            stream.escape_ascii().to_string()
        );
        assert!(outcome.leftover.is_empty());
    }

    /// The error a stream must fail with, whether it arrives at once or byte
    /// by byte, with the requests before the error decoded.
    fn fails_with(limits: Limits, stream: &[u8], before: &[Vec<Bytes>], error: ProtocolError) {
        for outcome in [feed(limits, stream), feed_bytewise(limits, stream)] {
            let shown = stream.escape_ascii().to_string();
            assert_eq!(outcome.result, Err(error.clone()), "stream {shown:?}");
            assert_eq!(outcome.requests, before, "stream {shown:?}");
        }
    }

    fn incomplete(limits: Limits, stream: &[u8]) {
        let outcome = feed(limits, stream);
        let shown = stream.escape_ascii().to_string();
        assert_eq!(outcome.result, Ok(()), "stream {shown:?}");
        assert!(outcome.requests.is_empty(), "stream {shown:?}");
        assert_eq!(outcome.leftover, stream, "stream {shown:?}");
    }

    fn small(max_inline_len: usize, max_args: usize, max_bulk_len: usize) -> Limits {
        Limits {
            max_bulk_len,
            max_args,
            max_inline_len,
            unauthenticated: false,
        }
    }

    fn args(words: &[&str]) -> Vec<Bytes> {
        words
            .iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    #[test]
    fn unauthenticated_clients_get_redis_smaller_limits() {
        let strict = Limits {
            unauthenticated: true,
            ..Limits::default()
        };
        let ten = format!("*10\r\n{}", "$1\r\na\r\n".repeat(10));
        assert_eq!(feed(strict, ten.as_bytes()).requests.len(), 1);
        fails_with(
            strict,
            b"*11\r\n",
            &[],
            ProtocolError::UnauthenticatedMultibulkLength,
        );
        let longest = format!("*1\r\n$16384\r\n{}\r\n", "x".repeat(16384));
        assert_eq!(feed(strict, longest.as_bytes()).requests.len(), 1);
        fails_with(
            strict,
            b"*2\r\n$4\r\nAUTH\r\n$16385\r\n",
            &[],
            ProtocolError::UnauthenticatedBulkLength,
        );
        assert_eq!(
            ProtocolError::UnauthenticatedBulkLength.message(),
            "ERR Protocol error: unauthenticated bulk length"
        );
        // The usual limits still apply beyond them.
        fails_with(
            strict,
            b"*x\r\n",
            &[],
            ProtocolError::InvalidMultibulkLength,
        );
    }

    #[test]
    fn decode_one_stops_after_a_request_so_limits_can_change() {
        let strict = Limits {
            unauthenticated: true,
            ..Limits::default()
        };
        let mut decoder = RequestDecoder::new(strict);
        let mut stream = BytesMut::from(&b"\r\nAUTH pw\r\n*1\r\n$16385\r\n"[..]);
        let mut out = Vec::new();
        decoder.decode_one(&mut stream, &mut out).unwrap();
        // The blank line counts for nothing; AUTH is the one request.
        assert_eq!(out, vec![args(&["AUTH", "pw"])]);
        assert_eq!(&stream[..], b"*1\r\n$16385\r\n");
        decoder.set_limits(Limits::default());
        out.clear();
        decoder.decode_one(&mut stream, &mut out).unwrap();
        assert!(out.is_empty(), "the 16385-byte argument is awaited");
    }

    // ---- multibulk ----

    #[test]
    fn multibulk_request() {
        decodes_to(
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n",
            &[request(&[b"SET", b"k", b"value"])],
        );
    }

    #[test]
    fn bulk_data_may_hold_cr_lf_and_any_byte() {
        let data: &[u8] = b"a\r\nb\rc\n\0\xff*$\r\n";
        let mut stream = format!("*2\r\n$4\r\nECHO\r\n${}\r\n", data.len()).into_bytes();
        stream.extend_from_slice(data);
        stream.extend_from_slice(b"\r\n");
        decodes_to(&stream, &[request(&[b"ECHO", data])]);
    }

    #[test]
    fn empty_bulk_strings() {
        decodes_to(
            b"*3\r\n$0\r\n\r\n$1\r\nx\r\n$0\r\n\r\n",
            &[request(&[b"", b"x", b""])],
        );
    }

    #[test]
    fn zero_and_negative_counts_are_empty_requests() {
        decodes_to(
            b"*0\r\n*-1\r\n*-9223372036854775808\r\n*1\r\n$4\r\nPING\r\n*0\r\n",
            &[request(&[b"PING"])],
        );
    }

    #[test]
    fn multibulk_count_is_parsed_like_string2ll() {
        let limits = Limits::default();
        for header in [
            &b"*\r\n"[..],
            b"*+1\r\n",
            b"*01\r\n",
            b"*00\r\n",
            b"* 1\r\n",
            b"*1 \r\n",
            b"*-\r\n",
            b"*-0\r\n",
            b"*-01\r\n",
            b"*1a\r\n",
            b"*0x1\r\n",
            b"*9223372036854775808\r\n",
            b"*-9223372036854775809\r\n",
            b"*123456789012345678901\r\n",
        ] {
            fails_with(limits, header, &[], ProtocolError::InvalidMultibulkLength);
        }
    }

    #[test]
    fn multibulk_count_above_max_args_is_refused() {
        let limits = small(64, 3, 64);
        let ok = b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n";
        assert_eq!(feed(limits, ok).requests, [request(&[b"a", b"b", b"c"])]);
        fails_with(
            limits,
            b"*4\r\n",
            &[],
            ProtocolError::InvalidMultibulkLength,
        );
        fails_with(
            limits,
            b"*9223372036854775807\r\n",
            &[],
            ProtocolError::InvalidMultibulkLength,
        );
    }

    #[test]
    fn bulk_length_is_parsed_like_string2ll() {
        let limits = Limits::default();
        for header in [
            &b"$\r\n"[..],
            b"$+1\r\n",
            b"$01\r\n",
            b"$-1\r\n",
            b"$-0\r\n",
            b"$-5\r\n",
            b"$ 1\r\n",
            b"$1 \r\n",
            b"$1x\r\n",
            b"$99999999999999999999\r\n",
        ] {
            let mut stream = b"*1\r\n".to_vec();
            stream.extend_from_slice(header);
            fails_with(limits, &stream, &[], ProtocolError::InvalidBulkLength);
        }
    }

    #[test]
    fn bulk_length_above_max_bulk_len_is_refused() {
        let limits = small(64, 8, 5);
        let ok = b"*1\r\n$5\r\nabcde\r\n";
        assert_eq!(feed(limits, ok).requests, [request(&[b"abcde"])]);
        fails_with(
            limits,
            b"*1\r\n$6\r\n",
            &[],
            ProtocolError::InvalidBulkLength,
        );
    }

    #[test]
    fn argument_must_start_with_dollar() {
        let limits = Limits::default();
        fails_with(
            limits,
            b"*1\r\n:1\r\n",
            &[],
            ProtocolError::ExpectedDollar(b':'),
        );
        // Refused on its first byte: the rest of the line is not awaited.
        fails_with(
            limits,
            b"*2\r\n$1\r\na\r\nX",
            &[],
            ProtocolError::ExpectedDollar(b'X'),
        );
        // A request that announced too few arguments runs into the next one.
        fails_with(
            limits,
            b"*2\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n",
            &[],
            ProtocolError::ExpectedDollar(b'*'),
        );
        fails_with(
            limits,
            b"*1\r\n\r\n",
            &[],
            ProtocolError::ExpectedDollar(b'\r'),
        );
    }

    #[test]
    fn header_cr_must_be_followed_by_lf() {
        let limits = Limits::default();
        incomplete(limits, b"*1\r");
        fails_with(
            limits,
            b"*1\rX",
            &[],
            ProtocolError::MultibulkLengthNotTerminated,
        );
        fails_with(
            limits,
            b"*0\r\r\n",
            &[],
            ProtocolError::MultibulkLengthNotTerminated,
        );
        incomplete(limits, b"*1\r\n$1\r");
        fails_with(
            limits,
            b"*1\r\n$1\rXa\r\n",
            &[],
            ProtocolError::BulkLengthNotTerminated,
        );
        fails_with(
            limits,
            b"*1\r\n$1\r\r\na\r\n",
            &[],
            ProtocolError::BulkLengthNotTerminated,
        );
    }

    #[test]
    fn bulk_data_must_be_followed_by_crlf() {
        let limits = Limits::default();
        incomplete(limits, b"*1\r\n$3\r\nabc");
        incomplete(limits, b"*1\r\n$3\r\nabc\r");
        for stream in [
            &b"*1\r\n$3\r\nabcX\n"[..],
            b"*1\r\n$3\r\nabc\rX",
            b"*1\r\n$3\r\nabc\n\r",
            b"*1\r\n$3\r\nabcd\r\n",
            b"*1\r\n$3\r\nab\r\nX",
            b"*2\r\n$0\r\nx\r\n$0\r\n\r\n",
        ] {
            fails_with(limits, stream, &[], ProtocolError::BulkDataNotTerminated);
        }
    }

    #[test]
    fn too_big_mbulk_count_string() {
        let limits = small(4, 10_000, 64);
        // A header line of exactly the limit is fine.
        assert_eq!(feed(limits, b"*100\r\n").result, Ok(()));
        fails_with(limits, b"*1000", &[], ProtocolError::TooBigMultibulkCount);
        // The verdict does not depend on whether the `\r` was already read.
        fails_with(
            limits,
            b"*1000\r\n",
            &[],
            ProtocolError::TooBigMultibulkCount,
        );
        let mut garbage = b"*".to_vec();
        garbage.resize(Limits::default().max_inline_len + 1, b'a');
        incomplete(Limits::default(), &garbage[..garbage.len() - 1]);
        fails_with(
            Limits::default(),
            &garbage,
            &[],
            ProtocolError::TooBigMultibulkCount,
        );
    }

    #[test]
    fn too_big_bulk_count_string() {
        let limits = small(4, 10, 10_000);
        let ok = b"*1\r\n$100\r\n";
        assert_eq!(feed(limits, ok).result, Ok(()));
        fails_with(limits, b"*1\r\n$1000", &[], ProtocolError::TooBigBulkCount);
        fails_with(
            limits,
            b"*1\r\n$1000\r\n",
            &[],
            ProtocolError::TooBigBulkCount,
        );
        let mut garbage = b"*1\r\n$".to_vec();
        garbage.resize(4 + Limits::default().max_inline_len + 1, b'7');
        incomplete(Limits::default(), &garbage[..garbage.len() - 1]);
        fails_with(
            Limits::default(),
            &garbage,
            &[],
            ProtocolError::TooBigBulkCount,
        );
    }

    #[test]
    fn huge_bulk_header_is_refused_after_the_header_alone() {
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut out = Vec::new();
        let mut buf = BytesMut::from(&b"*1\r\n$1099511627776\r\n"[..]);
        let capacity = buf.capacity();
        assert_eq!(
            decoder.decode(&mut buf, &mut out),
            Err(ProtocolError::InvalidBulkLength)
        );
        assert!(out.is_empty());
        assert_eq!(buf.capacity(), capacity, "nothing reserved for the data");
    }

    /// Feeds `stream` byte by byte and returns the position of the byte
    /// that drew the error.
    fn error_position(stream: &[u8]) -> Option<usize> {
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut out = Vec::new();
        let mut buf = BytesMut::new();
        stream.iter().position(|&b| {
            buf.extend_from_slice(&[b]);
            decoder.decode(&mut buf, &mut out).is_err()
        })
    }

    #[test]
    fn huge_headers_are_refused_at_their_cr() {
        let bulk = b"*1\r\n$1099511627776\r\n";
        assert_eq!(error_position(bulk), Some(bulk.len() - 2));
        let multibulk = b"*1000000000\r\n";
        assert_eq!(error_position(multibulk), Some(multibulk.len() - 2));
    }

    #[test]
    fn huge_multibulk_header_is_refused_after_the_header_alone() {
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut out = Vec::new();
        let mut buf = BytesMut::from(&b"*1000000000\r\n"[..]);
        assert_eq!(
            decoder.decode(&mut buf, &mut out),
            Err(ProtocolError::InvalidMultibulkLength)
        );
        assert!(out.is_empty());
    }

    #[test]
    fn announced_argument_count_is_not_preallocated() {
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut out = Vec::new();
        let mut buf = BytesMut::from(&b"*1048576\r\n"[..]);
        assert_eq!(decoder.decode(&mut buf, &mut out), Ok(()));
        match &decoder.state {
            State::Args(request) => {
                assert_eq!(request.expected, 1_048_576);
                assert!(request.args.capacity() <= ARGS_PREALLOC_CAP);
            }
            other => panic!("unexpected state {other:?}"),
        }
    }

    #[test]
    fn partial_multibulk_keeps_its_progress() {
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut out = Vec::new();
        let mut buf = BytesMut::from(&b"*3\r\n$1\r\na\r\n$2\r\nb"[..]);
        decoder.decode(&mut buf, &mut out).unwrap();
        assert!(out.is_empty());
        match &decoder.state {
            State::Args(request) => {
                assert_eq!(request.args, vec![Range { start: 8, end: 9 }]);
                assert_eq!(request.next, 15);
                assert_eq!(request.bulk_len, Some(2));
            }
            other => panic!("unexpected state {other:?}"),
        }
        buf.extend_from_slice(b"c\r\n$1");
        decoder.decode(&mut buf, &mut out).unwrap();
        match &decoder.state {
            State::Args(request) => {
                assert_eq!(request.args, [8..9, 15..17]);
                assert_eq!(request.next, 19);
                assert_eq!(request.bulk_len, None);
                assert_eq!(
                    request.scanned, 2,
                    "the header's bytes are not searched again"
                );
            }
            other => panic!("unexpected state {other:?}"),
        }
        buf.extend_from_slice(b"\r\nd\r\n");
        decoder.decode(&mut buf, &mut out).unwrap();
        assert_eq!(out, [request(&[b"a", b"bc", b"d"])]);
        assert!(buf.is_empty());
    }

    #[test]
    fn big_bulk_in_small_reads() {
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut stream = format!("*2\r\n$3\r\nSET\r\n${}\r\n", data.len()).into_bytes();
        stream.extend_from_slice(&data);
        stream.extend_from_slice(b"\r\n");
        let cuts: Vec<usize> = (1..stream.len()).step_by(1000).collect();
        let outcome = feed_cut(Limits::default(), &stream, &cuts);
        assert_eq!(outcome.result, Ok(()));
        assert_eq!(outcome.requests, [request(&[b"SET", &data])]);
    }

    #[test]
    fn multibulk_arguments_are_slices_of_the_buffer() {
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut out = Vec::new();
        let mut buf = BytesMut::from(&b"*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n"[..]);
        let base = buf.as_ptr() as usize;
        decoder.decode(&mut buf, &mut out).unwrap();
        assert_eq!(out[0][0].as_ptr() as usize, base + 8);
        assert_eq!(out[0][1].as_ptr() as usize, base + 18);
    }

    // ---- inline ----

    #[test]
    fn inline_request() {
        decodes_to(b"PING\r\n", &[request(&[b"PING"])]);
        decodes_to(b"SET k v\n", &[request(&[b"SET", b"k", b"v"])]);
        decodes_to(b"  SET \t k   v \t\r\n", &[request(&[b"SET", b"k", b"v"])]);
    }

    #[test]
    fn blank_inline_lines_produce_nothing() {
        decodes_to(b"\r\n\n   \t \r\n\x0b\x0c\n", &[]);
    }

    #[test]
    fn only_the_trailing_cr_is_stripped_and_inner_crs_separate() {
        decodes_to(b"a\rb\r\r\n", &[request(&[b"a", b"b"])]);
    }

    #[test]
    fn inline_line_may_end_without_cr() {
        decodes_to(b"a b\nc\r\n", &[request(&[b"a", b"b"]), request(&[b"c"])]);
    }

    #[test]
    fn double_quote_escapes() {
        decodes_to(
            b"ECHO \"a\\nb\\rc\\td\\be\\af\\\\g\\\"h\\qi\"\r\n",
            &[request(&[b"ECHO", b"a\nb\rc\td\x08e\x07f\\g\"hqi"])],
        );
    }

    #[test]
    fn hex_escapes() {
        decodes_to(
            b"\"\\x41\\x7a\\x00\\xfF\\xAb\"\r\n",
            &[request(&[b"Az\0\xff\xab"])],
        );
        // Without two hex digits, `\x` is just an escaped `x`.
        decodes_to(
            b"\"\\xZZ\" \"\\x4\" \"\\x4g\"\r\n",
            &[request(&[b"xZZ", b"x4", b"x4g"])],
        );
    }

    #[test]
    fn single_quotes_only_escape_a_single_quote() {
        decodes_to(
            b"'a\\'b' 'c\\nd' 'e\"f' 'g\\\\h'\r\n",
            &[request(&[b"a'b", b"c\\nd", b"e\"f", b"g\\\\h"])],
        );
    }

    #[test]
    fn backslash_outside_quotes_is_literal() {
        decodes_to(b"a\\nb \\x41\r\n", &[request(&[b"a\\nb", b"\\x41"])]);
    }

    #[test]
    fn quotes_may_start_inside_an_argument() {
        decodes_to(
            b"foo\"bar baz\" a'b c' x\"\\x41\"\r\n",
            &[request(&[b"foobar baz", b"ab c", b"xA"])],
        );
    }

    #[test]
    fn empty_quotes_are_empty_arguments() {
        decodes_to(b"\"\" ''\r\n", &[request(&[b"", b""])]);
    }

    #[test]
    fn closing_quote_may_be_followed_by_any_c_whitespace() {
        decodes_to(
            b"\"a\"\tb \"c\"\x0bd 'e'\x0cf \"g\"\r\n",
            &[request(&[b"a", b"b", b"c", b"d", b"e", b"f", b"g"])],
        );
    }

    #[test]
    fn vertical_tab_and_form_feed_are_skipped_between_but_kept_inside_arguments() {
        decodes_to(
            b"\x0ba\x0bb\x0cc d\r\n",
            &[request(&[b"a\x0bb\x0cc", b"d"])],
        );
    }

    #[test]
    fn nul_ends_an_inline_line_as_in_a_c_string() {
        decodes_to(
            b"a b\0c d\r\ne\r\n",
            &[request(&[b"a", b"b"]), request(&[b"e"])],
        );
        decodes_to(b"\0x\r\n", &[]);
        fails_with(
            Limits::default(),
            b"\"a\0b\"\r\n",
            &[],
            ProtocolError::UnbalancedQuotes,
        );
    }

    #[test]
    fn high_bytes_are_ordinary_argument_bytes() {
        decodes_to(
            b"\xff\x80 \xc3\xa9\r\n",
            &[request(&[b"\xff\x80", b"\xc3\xa9"])],
        );
    }

    #[test]
    fn unbalanced_quotes() {
        for line in [
            &b"ECHO \"abc\r\n"[..],
            b"ECHO 'abc\r\n",
            b"ECHO \"abc\"def\r\n",
            b"ECHO 'abc'def\r\n",
            b"ECHO \"abc\"\"\r\n",
            b"ECHO \"abc\\\"\r\n",
            b"ECHO \"\\\r\n",
            b"ECHO 'abc\\'\r\n",
            b"\"\n",
        ] {
            fails_with(
                Limits::default(),
                line,
                &[],
                ProtocolError::UnbalancedQuotes,
            );
        }
    }

    #[test]
    fn refused_inline_line_is_left_in_the_buffer() {
        let outcome = feed(Limits::default(), b"PING\r\n\"x\r\nPING\r\n");
        assert_eq!(outcome.result, Err(ProtocolError::UnbalancedQuotes));
        assert_eq!(outcome.requests, [request(&[b"PING"])]);
        assert_eq!(outcome.leftover, b"\"x\r\nPING\r\n");
    }

    #[test]
    fn too_big_inline_request() {
        let limits = small(8, 8, 8);
        assert_eq!(
            feed(limits, b"12345678\n").requests,
            [request(&[b"12345678"])]
        );
        // The limit counts every byte before the `\n`, a trailing `\r` too.
        assert_eq!(
            feed(limits, b"1234567\r\n").requests,
            [request(&[b"1234567"])]
        );
        incomplete(limits, b"12345678");
        fails_with(
            limits,
            b"123456789",
            &[],
            ProtocolError::TooBigInlineRequest,
        );
        fails_with(
            limits,
            b"12345678\r\n",
            &[],
            ProtocolError::TooBigInlineRequest,
        );
        fails_with(
            limits,
            b"123456789\n",
            &[],
            ProtocolError::TooBigInlineRequest,
        );
        let long = vec![b'a'; Limits::default().max_inline_len + 1];
        fails_with(
            Limits::default(),
            &long,
            &[],
            ProtocolError::TooBigInlineRequest,
        );
    }

    #[test]
    fn partial_inline_line_is_scanned_once() {
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut out = Vec::new();
        let mut buf = BytesMut::from(&b"SET key"[..]);
        decoder.decode(&mut buf, &mut out).unwrap();
        assert!(matches!(decoder.state, State::Inline { scanned: 7 }));
        buf.extend_from_slice(b" value\r\n");
        decoder.decode(&mut buf, &mut out).unwrap();
        assert_eq!(out, [request(&[b"SET", b"key", b"value"])]);
    }

    // ---- streams and errors ----

    #[test]
    fn pipelined_mix_of_inline_and_multibulk() {
        decodes_to(
            b"PING\r\n*2\r\n$4\r\nECHO\r\n$3\r\na\r\n\r\n\r\n*0\r\nECHO \"x y\"\n*-1\r\n*1\r\n$4\r\nQUIT\r\n",
            &[
                request(&[b"PING"]),
                request(&[b"ECHO", b"a\r\n"]),
                request(&[b"ECHO", b"x y"]),
                request(&[b"QUIT"]),
            ],
        );
    }

    #[test]
    fn incomplete_request_stays_in_the_buffer() {
        let outcome = feed(Limits::default(), b"PING\r\n*1\r\n$4\r\nPI");
        assert_eq!(outcome.result, Ok(()));
        assert_eq!(outcome.requests, [request(&[b"PING"])]);
        assert_eq!(outcome.leftover, b"*1\r\n$4\r\nPI");
    }

    #[test]
    fn requests_before_an_error_are_decoded() {
        fails_with(
            Limits::default(),
            b"PING\r\n*1\r\n$4\r\nECHO\r\n*1\r\n$x\r\n*1\r\n$4\r\nPING\r\n",
            &[request(&[b"PING"]), request(&[b"ECHO"])],
            ProtocolError::InvalidBulkLength,
        );
    }

    #[test]
    fn decoder_stays_failed_after_an_error() {
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut out = Vec::new();
        let mut buf = BytesMut::from(&b"*x\r\n"[..]);
        let error = Err(ProtocolError::InvalidMultibulkLength);
        assert_eq!(decoder.decode(&mut buf, &mut out), error);
        buf.clear();
        buf.extend_from_slice(b"PING\r\n");
        assert_eq!(decoder.decode(&mut buf, &mut out), error);
        assert!(out.is_empty());
    }

    #[test]
    fn error_messages() {
        let cases = [
            (
                ProtocolError::TooBigInlineRequest,
                "ERR Protocol error: too big inline request",
            ),
            (
                ProtocolError::UnbalancedQuotes,
                "ERR Protocol error: unbalanced quotes in request",
            ),
            (
                ProtocolError::TooBigMultibulkCount,
                "ERR Protocol error: too big mbulk count string",
            ),
            (
                ProtocolError::InvalidMultibulkLength,
                "ERR Protocol error: invalid multibulk length",
            ),
            (
                ProtocolError::MultibulkLengthNotTerminated,
                r"ERR Protocol error: expected '\n' after '\r' in multibulk length",
            ),
            (
                ProtocolError::ExpectedDollar(b':'),
                "ERR Protocol error: expected '$', got ':'",
            ),
            (
                ProtocolError::ExpectedDollar(b' '),
                "ERR Protocol error: expected '$', got ' '",
            ),
            (
                ProtocolError::ExpectedDollar(b'\r'),
                "ERR Protocol error: expected '$', got ' '",
            ),
            (
                ProtocolError::ExpectedDollar(b'\n'),
                "ERR Protocol error: expected '$', got ' '",
            ),
            (
                ProtocolError::ExpectedDollar(0),
                r"ERR Protocol error: expected '$', got '\x00'",
            ),
            (
                ProtocolError::ExpectedDollar(0xff),
                r"ERR Protocol error: expected '$', got '\xff'",
            ),
            (
                ProtocolError::TooBigBulkCount,
                "ERR Protocol error: too big bulk count string",
            ),
            (
                ProtocolError::InvalidBulkLength,
                "ERR Protocol error: invalid bulk length",
            ),
            (
                ProtocolError::BulkLengthNotTerminated,
                r"ERR Protocol error: expected '\n' after '\r' in bulk length",
            ),
            (
                ProtocolError::BulkDataNotTerminated,
                r"ERR Protocol error: expected '\r\n' after bulk data",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.message(), message);
            assert_eq!(error.to_string(), message);
            assert!(!message.contains(['\r', '\n']));
        }
    }

    // ---- chunking ----

    /// A request as a client might send it.
    #[derive(Clone, Debug)]
    enum Sent {
        Multibulk(Vec<Vec<u8>>),
        Inline {
            args: Vec<String>,
            lead: String,
            sep: String,
            crlf: bool,
        },
        NullMultibulk,
    }

    impl Sent {
        fn encode(&self, stream: &mut Vec<u8>) {
            match self {
                Sent::Multibulk(args) => {
                    stream.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
                    for arg in args {
                        stream.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
                        stream.extend_from_slice(arg);
                        stream.extend_from_slice(b"\r\n");
                    }
                }
                Sent::Inline {
                    args,
                    lead,
                    sep,
                    crlf,
                } => {
                    stream.extend_from_slice(lead.as_bytes());
                    stream.extend_from_slice(args.join(sep).as_bytes());
                    stream.extend_from_slice(if *crlf { b"\r\n" } else { b"\n" });
                }
                Sent::NullMultibulk => stream.extend_from_slice(b"*-1\r\n"),
            }
        }

        fn expected(&self) -> Option<Vec<Bytes>> {
            let args: Vec<Bytes> = match self {
                Sent::Multibulk(args) => args.iter().map(|a| Bytes::copy_from_slice(a)).collect(),
                Sent::Inline { args, .. } => args
                    .iter()
                    .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                    .collect(),
                Sent::NullMultibulk => Vec::new(),
            };
            (!args.is_empty()).then_some(args)
        }
    }

    fn any_arg() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..40),
            // Bytes that look like protocol, to catch a decoder that peeks into data.
            prop::collection::vec(prop::sample::select(&b"\r\n$*0-"[..]), 0..10),
        ]
    }

    fn any_sent() -> impl Strategy<Value = Sent> {
        prop_oneof![
            4 => prop::collection::vec(any_arg(), 0..6).prop_map(Sent::Multibulk),
            3 => (
                prop::collection::vec("[A-Za-z0-9_.:-]{1,12}", 0..5),
                "[ \t]{0,2}",
                "[ \t]{1,3}",
                any::<bool>(),
            )
                .prop_map(|(args, lead, sep, crlf)| Sent::Inline { args, lead, sep, crlf }),
            1 => Just(Sent::NullMultibulk),
        ]
    }

    fn encode_all(sent: &[Sent]) -> (Vec<u8>, Vec<Vec<Bytes>>) {
        let mut stream = Vec::new();
        for s in sent {
            s.encode(&mut stream);
        }
        (stream, sent.iter().filter_map(Sent::expected).collect())
    }

    /// Input made of protocol-like pieces, mostly malformed.
    fn any_garbage() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            (0..4u8).prop_map(|n| format!("*{n}\r\n").into_bytes()),
            (0..7u8).prop_map(|n| format!("${n}\r\n").into_bytes()),
            Just(b"*".to_vec()),
            Just(b"$".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"\r".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"\"".to_vec()),
            Just(b"'".to_vec()),
            Just(b"\\".to_vec()),
            Just(b"\\x4".to_vec()),
            Just(b" ".to_vec()),
            Just(b"-".to_vec()),
            Just(b"\0".to_vec()),
            "[0-9]{1,3}".prop_map(String::into_bytes),
            "[a-z]{1,3}".prop_map(String::into_bytes),
            any::<u8>().prop_map(|b| vec![b]),
        ];
        prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
    }

    fn cut_points(len: usize, picks: &[prop::sample::Index]) -> Vec<usize> {
        let mut cuts: Vec<usize> = picks.iter().map(|i| i.index(len + 1)).collect();
        cuts.sort_unstable();
        cuts
    }

    proptest! {
        #[test]
        fn chunking_does_not_change_the_requests(
            sent in prop::collection::vec(any_sent(), 0..12),
            picks in prop::collection::vec(any::<prop::sample::Index>(), 0..30),
        ) {
            let (stream, expected) = encode_all(&sent);
            let cuts = cut_points(stream.len(), &picks);
            let outcome = feed_cut(Limits::default(), &stream, &cuts);
            prop_assert_eq!(outcome.result, Ok(()));
            prop_assert_eq!(outcome.requests, expected);
            prop_assert!(outcome.leftover.is_empty());
        }

    }

    proptest! {
        // Malformed input has many more shapes than valid input.
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn chunking_does_not_change_the_outcome_of_any_input(
            garbage in any_garbage(),
            picks in prop::collection::vec(any::<prop::sample::Index>(), 0..30),
        ) {
            let limits = small(12, 3, 5);
            let whole = feed(limits, &garbage);
            let chunked = feed_cut(limits, &garbage, &cut_points(garbage.len(), &picks));
            prop_assert_eq!(&whole.requests, &chunked.requests);
            prop_assert_eq!(&whole.result, &chunked.result);
            if whole.result.is_ok() {
                prop_assert_eq!(&whole.leftover, &chunked.leftover);
            }
        }

    }

    proptest! {
        #[test]
        fn any_bytes_survive_a_double_quoted_inline_argument(
            args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..30), 1..4),
        ) {
            let mut line = Vec::new();
            for arg in &args {
                line.push(b'"');
                for &b in arg {
                    match b {
                        b'"' => line.extend_from_slice(b"\\\""),
                        b'\\' => line.extend_from_slice(b"\\\\"),
                        b'\n' => line.extend_from_slice(b"\\n"),
                        b'\r' => line.extend_from_slice(b"\\r"),
                        b'\t' => line.extend_from_slice(b"\\t"),
                        0x20..=0x7e => line.push(b),
                        _ => line.extend_from_slice(format!("\\x{b:02X}").as_bytes()),
                    }
                }
                line.extend_from_slice(b"\" ");
            }
            line.extend_from_slice(b"\r\n");
            let outcome = feed(Limits::default(), &line);
            prop_assert_eq!(outcome.result, Ok(()));
            let expected: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
            prop_assert_eq!(outcome.requests, vec![expected]);
        }
    }

    /// A small stream with every kind of request, cut in every possible place.
    fn mixed_stream() -> (Vec<u8>, Vec<Vec<Bytes>>) {
        encode_all(&[
            Sent::Inline {
                args: vec!["PING".into()],
                lead: String::new(),
                sep: " ".into(),
                crlf: true,
            },
            Sent::Multibulk(vec![b"ECHO".to_vec(), b"a\r\nb".to_vec(), Vec::new()]),
            Sent::Multibulk(Vec::new()),
            Sent::NullMultibulk,
            Sent::Inline {
                args: Vec::new(),
                lead: " ".into(),
                sep: " ".into(),
                crlf: false,
            },
            Sent::Inline {
                args: vec!["SET".into(), "k".into(), "v".into()],
                lead: "\t".into(),
                sep: " \t".into(),
                crlf: false,
            },
            Sent::Multibulk(vec![b"$1\r\n*".to_vec(), b"\0\xff".to_vec()]),
        ])
    }

    #[test]
    fn every_single_split_point() {
        let (stream, expected) = mixed_stream();
        for cut in 0..=stream.len() {
            let outcome = feed_cut(Limits::default(), &stream, &[cut]);
            assert_eq!(outcome.result, Ok(()), "cut at {cut}");
            assert_eq!(outcome.requests, expected, "cut at {cut}");
            assert!(outcome.leftover.is_empty(), "cut at {cut}");
        }
    }

    #[test]
    fn every_pair_of_split_points() {
        let (stream, expected) = mixed_stream();
        for first in 0..=stream.len() {
            for second in first..=stream.len() {
                let outcome = feed_cut(Limits::default(), &stream, &[first, second]);
                assert_eq!(outcome.requests, expected, "cuts at {first}, {second}");
                assert!(outcome.leftover.is_empty(), "cuts at {first}, {second}");
            }
        }
    }

    #[test]
    fn byte_by_byte() {
        let (stream, expected) = mixed_stream();
        let outcome = feed_bytewise(Limits::default(), &stream);
        assert_eq!(outcome.result, Ok(()));
        assert_eq!(outcome.requests, expected);
    }
}
