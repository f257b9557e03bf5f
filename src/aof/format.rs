//! The append-only log's file format: a header, then framed records.
//! (Interface stub: implemented in its own change.)

use std::io::Read;

use bytes::BytesMut;

use crate::registry::Change;

/// The first bytes of every log file: a magic word and a format version.
pub const HEADER: &[u8] = b"LEASEDLOG\x001\n";

/// Appends one framed record for `change` to `out`.
pub fn encode(change: &Change, out: &mut BytesMut) {
    let _ = (change, out);
    todo!()
}

/// How a log's replay ended.
#[derive(Debug, PartialEq, Eq)]
pub struct Replayed {
    /// Bytes of the file that hold the header and whole, valid records.
    pub good_len: u64,
    /// Where an incomplete final record (a torn write) starts, if the file
    /// ends with one; it is not replayed.
    pub torn_at: Option<u64>,
    /// Records replayed.
    pub records: u64,
}

/// Why a log cannot be replayed.
#[derive(Debug, PartialEq, Eq)]
pub enum ReplayError {
    /// The file does not start with [`HEADER`].
    BadHeader,
    /// A whole record that fails its checksum or does not decode, at this
    /// offset; records before it were replayed.
    Corrupt {
        offset: u64,
        reason: String,
        replayed: Replayed,
    },
    /// Reading failed.
    Io(String),
}

/// Reads a whole log, calling `apply` with each record's change in order.
pub fn replay(reader: impl Read, apply: impl FnMut(Change)) -> Result<Replayed, ReplayError> {
    let _ = (reader, apply);
    todo!()
}
