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
mod tests;
