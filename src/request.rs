//! Strict decoding of client requests: RESP multibulk and inline commands.
//! (Interface stub: implemented in its own change.)

use bytes::{Bytes, BytesMut};

/// Size limits applied while decoding, before anything is buffered.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The longest bulk string (argument) accepted.
    pub max_bulk_len: usize,
    /// The most arguments in one request.
    pub max_args: usize,
    /// The longest inline request line, and the longest header line.
    pub max_inline_len: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_args: 1024 * 1024,
            max_inline_len: 64 * 1024,
        }
    }
}

/// Input that cannot be decoded. The connection replies with
/// [`ProtocolError::message`] and closes, as Redis does: the stream cannot be
/// resynchronised after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    Placeholder,
}

impl ProtocolError {
    /// The error line in Redis's wording, e.g. `ERR Protocol error: invalid bulk length`.
    pub fn message(&self) -> String {
        todo!()
    }
}

/// Decodes requests from a connection's read buffer, keeping the state of a
/// partial request between reads so a large request is never rescanned.
#[derive(Debug, Default)]
pub struct RequestDecoder {
    limits: Limits,
}

impl RequestDecoder {
    pub fn new(limits: Limits) -> RequestDecoder {
        RequestDecoder { limits }
    }

    /// Decodes every complete request at the front of `buf`, removes their
    /// bytes from it and appends each request's arguments to `out`. Stops at
    /// an incomplete request (resumed by the next call) or at a protocol
    /// error; requests decoded before the error are in `out`. Empty
    /// requests (a blank inline line, `*0`, `*-1`) produce nothing.
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        out: &mut Vec<Vec<Bytes>>,
    ) -> Result<(), ProtocolError> {
        let _ = (buf, out, self.limits);
        todo!()
    }
}
