//! The append-only log's file format: a header, then framed records.
//!
//! # Layout
//!
//! A log file is [`HEADER`] — the 12 bytes `LEASEDLOG`, NUL, the version
//! `1`, newline — followed by zero or more records. Every integer is
//! little-endian, and every `f64` is its IEEE 754 bit pattern stored as a
//! little-endian `u64`.
//!
//! Each record is a frame:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | `len: u32`: the payload's length, from 1 to [`MAX_RECORD_LEN`] |
//! | 4 | `crc: u32`: the CRC-32 of the payload (the IEEE/zlib CRC, as `crc32fast` computes it: `"123456789"` gives `0xCBF43926`) |
//! | `len` | the payload |
//!
//! A payload is one type byte, then that type's fields in this order, with
//! nothing after them:
//!
//! | type | change | fields after the type byte | payload length |
//! |---|---|---|---|
//! | 1 | `Put` | `run_len: u32`, `run_id: run_len bytes`, `worker_len: u32`, `worker_id: worker_len bytes`, `fencing_token: u64`, `expires_at: f64`, `ttl: f64` | 33 + run_len + worker_len |
//! | 2 | `Extend` | `fencing_token: u64`, `expires_at: f64` | 17 |
//! | 3 | `Remove` | `fencing_token: u64` | 9 |
//! | 4 | `Time` | `time: f64` | 9 |
//! | 5 | `LastToken` | `last_token: u64` | 9 |
//! | 6 | `LockDelay` | `fencing_token: u64`, `lock_delay: f64` | 17 |
//! | 7 | `SetData` | `run_len: u32`, `run_id: run_len bytes`, `fencing_token: u64`, `written_at: f64`, `value_len: u32`, `value: value_len bytes` | 25 + run_len + value_len |
//! | 8 | `DelData` | `run_len: u32`, `run_id: run_len bytes` | 5 + run_len |
//! | 9 | `Orphan` | `run_len: u32`, `run_id: run_len bytes`, `at: f64` | 13 + run_len |
//! | 10 | `Beat` | `fencing_token: u64`, `expires_at: f64`, `heartbeats: u32` | 21 |
//! | 11 | `Release` | `fencing_token: u64`, `at: f64` | 17 |
//! | 12 | `Forget` | `run_len: u32`, `run_id: run_len bytes` | 5 + run_len |
//! | 13 | `Past` | `run_len: u32`, `run_id: run_len bytes`, `worker_len: u32`, `worker_id: worker_len bytes`, `fencing_token: u64`, `acquired_at: f64`, `expires_at: f64`, `ended_at: f64`, `end: u8`, `heartbeats: u32` | 46 + run_len + worker_len |
//! | 14 | `Put` with its tenure | as `Put`, then `acquired_at: f64`, `heartbeats: u32` | 45 + run_len + worker_len |
//!
//! A `LockDelay` record follows the `Put` of a lease whose lock delay is
//! not 0 (type 6 came with lock delays; a log without lock delays has
//! none, and reads as it did before). Types 7 to 9 came with run data
//! (`LEASE.SETDATA`): a log without run data has none of them, and a
//! reader that predates them refuses a log that has them as corrupt
//! (an unknown type) rather than loading it without the data.
//! Types 10 to 14 came with tenure history (`LEASE.HISTORY`): an acquire
//! writes a type 14 `Put` (with when it was acquired and, in a snapshot,
//! its heartbeats so far) where it wrote a type 1, a heartbeat a `Beat`
//! (with the lease's heartbeat count) where it wrote an `Extend`, a
//! release one `Release` where it wrote an `Orphan` and a `Remove`, and a
//! reclaim a `Forget` (the run's data and history) where it wrote a
//! `DelData`; a snapshot writes a `Past` per past tenure of a run. Older
//! logs replay as before, a type 1 `Put`'s tenure starting at the
//! registry time of its replay.
//! Ids are arbitrary bytes. Type 0 is never used, so a payload of zeros
//! never decodes; every other type byte is unknown.
//!
//! # Values
//!
//! A record holds only values the registry itself can hold. One that
//! passes its checksum but holds anything else was written by a bug, and
//! replay reports it as corrupt instead of loading a state the registry's
//! rules cannot reach:
//!
//! - `fencing_token` (Put, Extend, Remove): 1 to 2^63-1. Tokens start at 1
//!   and travel as RESP integers.
//! - `last_token`: 0 (nothing issued yet) to 2^63-1.
//! - `expires_at`: any value but NaN and -∞. It is `now + ttl` with both
//!   finite and `ttl > 0`, which can overflow to +∞ but never reach -∞.
//! - `ttl`: finite and greater than 0, as `lease-ttl` and the `TTL` option
//!   require.
//! - `time`: any value but NaN and +∞. Registry time is the latest finite
//!   `now` seen, or -∞ before the first one.
//! - `lock_delay`: finite and greater than 0, as `LOCKDELAY` and
//!   `lease-lock-delay` allow (0 is never written).
//! - `fencing_token` (SetData): 1 to 2^63-1, as a lease's.
//! - `written_at`, `at` (SetData, Orphan, Release): finite (times a
//!   command was evaluated at).
//! - `acquired_at` (Put type 14, Past): any value but NaN and +∞, as
//!   registry time; `expires_at` (Beat, Past) as above.
//! - `end` (Past): 0 released, 1 released-late, 2 expired; `ended_at` is
//!   finite, or the tenure's `expires_at` when it expired.
//!
//! # Reading
//!
//! A reader goes through the file from the start and stops at the first
//! of these:
//!
//! - An empty file is a new log with no records.
//! - A file shorter than the header that is a prefix of it is a log whose
//!   creation was interrupted: torn at offset 0. Any other file that does
//!   not start with the header is not a log (or a version this reader does
//!   not know) and is refused.
//! - At a record boundary (right after the header or a record):
//!   - the end of the file is the clean end of the log;
//!   - 1 to 7 bytes, then the end, is a torn frame header: torn here;
//!   - `len == 0`: if every byte from here to the end of the file is zero,
//!     it is a zero-filled tail, which some file systems leave after a crash
//!     during an append: torn here. Otherwise the record is corrupt;
//!   - `len > MAX_RECORD_LEN`: corrupt, whether or not the file is that
//!     long;
//!   - the file ends before `len` payload bytes: torn here if the bytes that
//!     did arrive could begin a valid payload of length `len` (a known type
//!     byte whose length, fixed or given by the id lengths that are present,
//!     agrees with `len`), and corrupt otherwise;
//!   - all `len` bytes are present but the CRC does not match, or the
//!     payload does not decode as above (unknown type, a length that does
//!     not match its type or ids, a value out of range): corrupt.
//!
//! A torn record is not replayed: the log's good part ends where it
//! starts. A torn append always leaves a prefix of a real frame, or zeros,
//! and both pass the checks above. Checking the bytes of a record that
//! runs past the end against its `len` matters because a damaged `len` can
//! make any record, not only the last one, appear to run past the end; if
//! that counted as torn, one flipped byte would cut off every record after
//! it with only a warning. The type byte and id lengths fix a payload's
//! length, so a changed `len` is always caught.

use std::fmt;
use std::io::{self, BufRead, BufReader, ErrorKind, Read};

use bytes::{BufMut, Bytes, BytesMut};

use crate::registry::{Change, LeaseRecord, MAX_TOKEN, PastTenure, RunRecord, TenureEnd};

/// The first bytes of every log file: a magic word and a format version.
pub const HEADER: &[u8] = b"LEASEDLOG\x001\n";

/// The largest payload a frame may announce: 2 GiB.
///
/// The largest record the server can write today is a `Put` whose two ids
/// are each as long as the largest request argument (512 MiB), about 1 GiB.
/// Twice that leaves room for the argument limit to be raised without
/// changing the format. Reading never allocates more than twice the bytes
/// that have actually arrived, so this bound does not cost memory: it only
/// lets a clearly impossible `len` be reported as corruption at once.
pub const MAX_RECORD_LEN: u32 = 1 << 31;

/// The bytes of a frame before its payload: `len` and `crc`.
pub const FRAME_HEADER_LEN: usize = 8;

const PUT: u8 = 1;
const EXTEND: u8 = 2;
const REMOVE: u8 = 3;
const TIME: u8 = 4;
const LAST_TOKEN: u8 = 5;
const LOCK_DELAY: u8 = 6;
const SET_DATA: u8 = 7;
const DEL_DATA: u8 = 8;
const ORPHAN: u8 = 9;
const BEAT: u8 = 10;
const RELEASE: u8 = 11;
const FORGET: u8 = 12;
const PAST: u8 = 13;
const PUT_TENURE: u8 = 14;

/// A `Put` payload with empty ids: type, two id lengths, token, two times.
const PUT_FIXED_LEN: u64 = 1 + 4 + 4 + 8 + 8 + 8;
/// Type and token, then `expires_at` (Extend) or `lock_delay` (LockDelay).
const EXTEND_LEN: usize = 1 + 8 + 8;
/// Type and one `u64` or `f64`: Remove, Time and LastToken.
const ONE_FIELD_LEN: usize = 1 + 8;
/// A `SetData` payload with an empty run id and value: type, run length,
/// token, `written_at`, value length.
const SET_DATA_FIXED_LEN: u64 = 1 + 4 + 8 + 8 + 4;
/// A `DelData` payload with an empty run id: type, run length.
const DEL_DATA_FIXED_LEN: u64 = 1 + 4;
/// An `Orphan` payload with an empty run id: type, run length, `at`.
const ORPHAN_FIXED_LEN: u64 = 1 + 4 + 8;
/// Type, token, `expires_at` and a heartbeat count: Beat.
const BEAT_LEN: usize = 1 + 8 + 8 + 4;
/// A type 14 `Put`: a type 1's fields, then `acquired_at` and heartbeats.
const PUT_TENURE_FIXED_LEN: u64 = PUT_FIXED_LEN + 8 + 4;
/// A `Past` payload with empty ids: type, two id lengths, token, four
/// times, end, heartbeats.
const PAST_FIXED_LEN: u64 = 1 + 4 + 4 + 8 + 8 + 8 + 8 + 1 + 4;

/// The buffer between the file and the parser: frame headers and small
/// records are served from it, large payloads bypass it.
const READ_BUFFER_LEN: usize = 64 * 1024;

/// The room first made for a payload. A longer one doubles its buffer as
/// its bytes arrive, so a `len` that lies costs no more memory than the
/// bytes really there.
const FIRST_PAYLOAD_CHUNK: usize = 8 * 1024;

/// The payload length of `change`'s record.
pub fn payload_len(change: &Change) -> u64 {
    match change {
        Change::Put {
            run_id,
            worker_id,
            acquired_at,
            ..
        } => {
            let fixed = match acquired_at {
                Some(_) => PUT_TENURE_FIXED_LEN,
                None => PUT_FIXED_LEN,
            };
            fixed + run_id.len() as u64 + worker_id.len() as u64
        }
        Change::Extend { .. } | Change::LockDelay { .. } | Change::Release { .. } => {
            EXTEND_LEN as u64
        }
        Change::Beat { .. } => BEAT_LEN as u64,
        Change::Forget { run_id } => DEL_DATA_FIXED_LEN + run_id.len() as u64,
        Change::Past { run_id, tenure } => {
            PAST_FIXED_LEN + run_id.len() as u64 + tenure.worker_id.len() as u64
        }
        Change::Remove { .. } | Change::Time(_) | Change::LastToken(_) => ONE_FIELD_LEN as u64,
        Change::SetData { run_id, value, .. } => {
            SET_DATA_FIXED_LEN + run_id.len() as u64 + value.len() as u64
        }
        Change::DelData { run_id } => DEL_DATA_FIXED_LEN + run_id.len() as u64,
        Change::Orphan { run_id, .. } => ORPHAN_FIXED_LEN + run_id.len() as u64,
    }
}

/// Appends one framed record for `change` to `out`.
///
/// # Panics
///
/// If the record would be longer than [`MAX_RECORD_LEN`]: replay would
/// refuse the log, so nothing is written. Request limits keep ids far
/// below that. Debug builds also panic on a value that replay would refuse
/// (see the module docs), so a bug that produces one shows in the tests.
pub fn encode(change: &Change, out: &mut BytesMut) {
    debug_assert!(
        check_values(change).is_ok(),
        "a log record that replay would refuse: {change:?}"
    );
    let len = payload_len(change);
    match change {
        Change::Put {
            run_id,
            worker_id,
            fencing_token,
            expires_at,
            ttl,
            acquired_at,
            heartbeats,
        } => {
            let lease = LeaseRecord {
                run_id,
                worker_id,
                fencing_token: *fencing_token,
                expires_at: *expires_at,
                ttl: *ttl,
                // Its own record: the Put is encoded alone.
                lock_delay: 0.0,
                acquired_at: acquired_at.unwrap_or(0.0),
                heartbeats: *heartbeats,
            };
            encode_put(&lease, acquired_at.is_some(), out)
        }
        Change::Extend {
            fencing_token,
            expires_at,
        } => frame(len, out, |out| {
            out.put_u8(EXTEND);
            out.put_u64_le(*fencing_token);
            out.put_f64_le(*expires_at);
        }),
        Change::Remove { fencing_token } => frame(len, out, |out| {
            out.put_u8(REMOVE);
            out.put_u64_le(*fencing_token);
        }),
        Change::Time(time) => frame(len, out, |out| {
            out.put_u8(TIME);
            out.put_f64_le(*time);
        }),
        Change::LastToken(token) => frame(len, out, |out| {
            out.put_u8(LAST_TOKEN);
            out.put_u64_le(*token);
        }),
        Change::LockDelay {
            fencing_token,
            lock_delay,
        } => frame(len, out, |out| {
            out.put_u8(LOCK_DELAY);
            out.put_u64_le(*fencing_token);
            out.put_f64_le(*lock_delay);
        }),
        Change::SetData {
            run_id,
            value,
            fencing_token,
            written_at,
        } => frame(len, out, |out| {
            out.put_u8(SET_DATA);
            // Lengths fit: the record is at most MAX_RECORD_LEN.
            out.put_u32_le(run_id.len() as u32);
            out.put_slice(run_id);
            out.put_u64_le(*fencing_token);
            out.put_f64_le(*written_at);
            out.put_u32_le(value.len() as u32);
            out.put_slice(value);
        }),
        Change::DelData { run_id } => frame(len, out, |out| {
            out.put_u8(DEL_DATA);
            out.put_u32_le(run_id.len() as u32);
            out.put_slice(run_id);
        }),
        Change::Orphan { run_id, at } => frame(len, out, |out| {
            out.put_u8(ORPHAN);
            out.put_u32_le(run_id.len() as u32);
            out.put_slice(run_id);
            out.put_f64_le(*at);
        }),
        Change::Beat {
            fencing_token,
            expires_at,
            heartbeats,
        } => frame(len, out, |out| {
            out.put_u8(BEAT);
            out.put_u64_le(*fencing_token);
            out.put_f64_le(*expires_at);
            out.put_u32_le(*heartbeats);
        }),
        Change::Release { fencing_token, at } => frame(len, out, |out| {
            out.put_u8(RELEASE);
            out.put_u64_le(*fencing_token);
            out.put_f64_le(*at);
        }),
        Change::Forget { run_id } => frame(len, out, |out| {
            out.put_u8(FORGET);
            out.put_u32_le(run_id.len() as u32);
            out.put_slice(run_id);
        }),
        Change::Past { run_id, tenure } => frame(len, out, |out| {
            out.put_u8(PAST);
            out.put_u32_le(run_id.len() as u32);
            out.put_slice(run_id);
            out.put_u32_le(tenure.worker_id.len() as u32);
            out.put_slice(&tenure.worker_id);
            out.put_u64_le(tenure.fencing_token);
            out.put_f64_le(tenure.acquired_at);
            out.put_f64_le(tenure.expires_at);
            out.put_f64_le(tenure.ended_at);
            out.put_u8(tenure.end as u8);
            out.put_u32_le(tenure.heartbeats);
        }),
    }
}

/// Appends the records of one run's entry borrowed from the registry
/// (what a snapshot writes): its `SetData` when it has data, a `Past` per
/// past tenure, and its `Orphan` when its run has no lease.
///
/// # Panics
///
/// As [`encode`].
pub fn encode_run(run: &RunRecord<'_>, out: &mut BytesMut) {
    for change in run.to_changes() {
        encode(&change, out);
    }
}

/// Appends one framed Put record for a lease borrowed from the registry
/// (what a snapshot writes), without copying its ids first, with its
/// tenure, and its LockDelay record when it has a lock delay.
///
/// # Panics
///
/// As [`encode`].
pub fn encode_lease(lease: &LeaseRecord<'_>, out: &mut BytesMut) {
    debug_assert!(
        check_token(lease.fencing_token).is_ok()
            && check_expires_at(lease.expires_at).is_ok()
            && lease.ttl.is_finite()
            && lease.ttl > 0.0,
        "a log record that replay would refuse: {lease:?}"
    );
    encode_put(lease, true, out);
    if lease.lock_delay > 0.0 {
        encode(
            &Change::LockDelay {
                fencing_token: lease.fencing_token,
                lock_delay: lease.lock_delay,
            },
            out,
        );
    }
}

/// Appends one framed Put record from borrowed ids: type 14, with the
/// lease's tenure, or the older type 1 without it.
fn encode_put(lease: &LeaseRecord<'_>, with_tenure: bool, out: &mut BytesMut) {
    let fixed = if with_tenure {
        PUT_TENURE_FIXED_LEN
    } else {
        PUT_FIXED_LEN
    };
    let len = fixed + lease.run_id.len() as u64 + lease.worker_id.len() as u64;
    frame(len, out, |out| {
        out.put_u8(if with_tenure { PUT_TENURE } else { PUT });
        // Lengths fit: the record is at most MAX_RECORD_LEN.
        out.put_u32_le(lease.run_id.len() as u32);
        out.put_slice(lease.run_id);
        out.put_u32_le(lease.worker_id.len() as u32);
        out.put_slice(lease.worker_id);
        out.put_u64_le(lease.fencing_token);
        out.put_f64_le(lease.expires_at);
        out.put_f64_le(lease.ttl);
        if with_tenure {
            out.put_f64_le(lease.acquired_at);
            out.put_u32_le(lease.heartbeats);
        }
    });
}

/// The records of one commit round, as the log writes them: every change
/// in order, except registry time. The registry records a `Time` change
/// whenever a command moves time, which would double the log's records;
/// time only ever grows and no other record depends on it, so a round
/// writes it once, after its other records, as the round's latest. A
/// replay of the log then ends at the same state however the commands were
/// grouped into rounds.
#[derive(Debug)]
pub struct Round {
    records: BytesMut,
    /// The latest time of the round's `Time` changes, not yet written.
    time: f64,
}

impl Default for Round {
    fn default() -> Round {
        Round {
            records: BytesMut::new(),
            time: f64::NEG_INFINITY,
        }
    }
}

impl Round {
    pub fn push(&mut self, change: &Change) {
        match change {
            Change::Time(time) => self.time = self.time.max(*time),
            _ => encode(change, &mut self.records),
        }
    }

    /// Writes the round's time after its records; nothing if no change of
    /// the round moved it.
    pub fn close(&mut self) {
        if self.time > f64::NEG_INFINITY {
            encode(&Change::Time(self.time), &mut self.records);
            self.time = f64::NEG_INFINITY;
        }
    }

    /// Whether the round has nothing to write, time included.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.time == f64::NEG_INFINITY
    }

    /// The encoded records (the time only once [`Round::close`] wrote it).
    pub fn bytes(&self) -> &[u8] {
        &self.records
    }

    pub fn clear(&mut self) {
        self.records.clear();
        self.time = f64::NEG_INFINITY;
    }
}

/// Frames the `len`-byte payload that `write` appends: length, checksum,
/// payload.
fn frame(len: u64, out: &mut BytesMut, write: impl FnOnce(&mut BytesMut)) {
    assert!(
        len <= u64::from(MAX_RECORD_LEN),
        "a {len}-byte log record is longer than MAX_RECORD_LEN"
    );
    // At most 2^31, so it fits a u32 and, on every target, a usize.
    let len = len as usize;
    out.reserve(FRAME_HEADER_LEN + len);
    let start = out.len();
    out.put_u32_le(len as u32);
    // The checksum, filled in once the payload is there to hash.
    out.put_u32_le(0);
    write(out);
    let payload_at = start + FRAME_HEADER_LEN;
    debug_assert_eq!(out.len() - payload_at, len);
    let crc = crc32fast::hash(&out[payload_at..]);
    out[start + 4..payload_at].copy_from_slice(&crc.to_le_bytes());
}

/// How a log's replay ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Clone, Debug, PartialEq, Eq)]
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

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::BadHeader => f.write_str(
                "not a leased append-only log, or one of a version this server cannot read \
                 (the file does not start with the expected header)",
            ),
            ReplayError::Corrupt { offset, reason, .. } => {
                write!(f, "corrupt record at offset {offset}: {reason}")
            }
            ReplayError::Io(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for ReplayError {}

/// Reads a whole log, calling `apply` with each record's change in order.
pub fn replay(reader: impl Read, mut apply: impl FnMut(Change)) -> Result<Replayed, ReplayError> {
    let mut reader = BufReader::with_capacity(READ_BUFFER_LEN, reader);
    let io_error = |offset: u64| {
        move |e: io::Error| ReplayError::Io(format!("reading the log at offset {offset}: {e}"))
    };

    let mut header = [0; HEADER.len()];
    let got = read_full(&mut reader, &mut header).map_err(io_error(0))?;
    if header[..got] != HEADER[..got] {
        return Err(ReplayError::BadHeader);
    }
    let mut replayed = Replayed {
        good_len: 0,
        torn_at: None,
        records: 0,
    };
    if got < HEADER.len() {
        // Empty, or a header whose write did not finish.
        replayed.torn_at = (got > 0).then_some(0);
        return Ok(replayed);
    }
    replayed.good_len = HEADER.len() as u64;

    // One buffer for every payload, so small records do not allocate.
    let mut payload = Vec::new();
    loop {
        let offset = replayed.good_len;
        let torn = |mut replayed: Replayed| {
            replayed.torn_at = Some(offset);
            Ok(replayed)
        };
        let corrupt = |reason: String, replayed: Replayed| {
            Err(ReplayError::Corrupt {
                offset,
                reason,
                replayed,
            })
        };

        let mut frame = [0; FRAME_HEADER_LEN];
        let got = read_full(&mut reader, &mut frame).map_err(io_error(offset))?;
        if got == 0 {
            return Ok(replayed);
        }
        if got < FRAME_HEADER_LEN {
            return torn(replayed);
        }
        let [l0, l1, l2, l3, c0, c1, c2, c3] = frame;
        let len = u32::from_le_bytes([l0, l1, l2, l3]);
        let crc = u32::from_le_bytes([c0, c1, c2, c3]);

        if len == 0 {
            if crc == 0 && zeros_to_end(&mut reader).map_err(io_error(offset))? {
                return torn(replayed);
            }
            return corrupt(
                "a record of length 0 that is not part of a zero-filled tail".into(),
                replayed,
            );
        }
        if len > MAX_RECORD_LEN {
            return corrupt(
                format!("record length {len} is above the maximum of {MAX_RECORD_LEN}"),
                replayed,
            );
        }
        // At most 2^31: a usize on every target.
        let len = len as usize;
        read_payload(&mut reader, len, &mut payload).map_err(io_error(offset))?;
        if payload.len() < len {
            return match check_shape(&payload, len) {
                Ok(()) => torn(replayed),
                Err(reason) => corrupt(
                    format!(
                        "{reason}; the record runs past the end of the file, \
                         but its length was damaged, not torn"
                    ),
                    replayed,
                ),
            };
        }
        let actual = crc32fast::hash(&payload);
        if actual != crc {
            return corrupt(
                format!("checksum mismatch (stored {crc:#010x}, computed {actual:#010x})"),
                replayed,
            );
        }
        match decode(&payload) {
            Ok(change) => apply(change),
            Err(reason) => return corrupt(reason, replayed),
        }
        replayed.records += 1;
        replayed.good_len = offset + (FRAME_HEADER_LEN + len) as u64;
    }
}

/// Fills `buf` unless the input ends first; returns the bytes read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            // A signal, not an error: std's own read loops retry too.
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Reads up to `len` bytes into `buf`, fewer if the input ends first.
///
/// The buffer grows as the bytes arrive instead of being sized from `len`,
/// which is only a claim until they are there: it never holds more than
/// twice the bytes read, plus [`FIRST_PAYLOAD_CHUNK`].
fn read_payload(reader: &mut impl Read, len: usize, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    while buf.len() < len {
        let filled = buf.len();
        let room = (len - filled).min(filled.max(FIRST_PAYLOAD_CHUNK));
        buf.resize(filled + room, 0);
        let got = read_full(reader, &mut buf[filled..])?;
        buf.truncate(filled + got);
        if got < room {
            break;
        }
    }
    Ok(())
}

/// Whether every byte from here to the end of the input is zero. Stops at
/// the first one that is not, so zeros in the middle of a large log are
/// found without reading the rest of it.
fn zeros_to_end(reader: &mut impl BufRead) -> io::Result<bool> {
    loop {
        let chunk = match reader.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(true);
        }
        if chunk.iter().any(|&b| b != 0) {
            return Ok(false);
        }
        let n = chunk.len();
        reader.consume(n);
    }
}

/// The little-endian `u32` at `at`, if those bytes are there.
fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let field = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(field.try_into().ok()?))
}

/// Checks that a payload of `len` bytes that begins with `start` (all of
/// it, or the part that arrived) can be valid: a known type, and a length
/// that agrees with it and with whatever id lengths are in `start`.
fn check_shape(start: &[u8], len: usize) -> Result<(), String> {
    let Some(&kind) = start.first() else {
        return Ok(());
    };
    let (name, expected) = match kind {
        PUT => return check_put_shape(start, len as u64, PUT_FIXED_LEN),
        PUT_TENURE => return check_put_shape(start, len as u64, PUT_TENURE_FIXED_LEN),
        SET_DATA => {
            let value = Some((16, "value"));
            return check_ids_shape(start, len as u64, "set-data", SET_DATA_FIXED_LEN, value);
        }
        DEL_DATA => {
            return check_ids_shape(start, len as u64, "del-data", DEL_DATA_FIXED_LEN, None);
        }
        ORPHAN => return check_ids_shape(start, len as u64, "orphan", ORPHAN_FIXED_LEN, None),
        FORGET => return check_ids_shape(start, len as u64, "forget", DEL_DATA_FIXED_LEN, None),
        PAST => {
            let worker = Some((0, "worker id"));
            return check_ids_shape(start, len as u64, "past", PAST_FIXED_LEN, worker);
        }
        BEAT => ("a beat", BEAT_LEN),
        RELEASE => ("a release", EXTEND_LEN),
        EXTEND => ("an extend", EXTEND_LEN),
        LOCK_DELAY => ("a lock-delay", EXTEND_LEN),
        REMOVE => ("a remove", ONE_FIELD_LEN),
        TIME => ("a time", ONE_FIELD_LEN),
        LAST_TOKEN => ("a last-token", ONE_FIELD_LEN),
        other => return Err(format!("unknown record type {other}")),
    };
    if len != expected {
        return Err(format!("{name} record is {expected} bytes long, not {len}"));
    }
    Ok(())
}

fn check_put_shape(start: &[u8], len: u64, fixed: u64) -> Result<(), String> {
    check_ids_shape(start, len, "put", fixed, Some((0, "worker id")))
}

/// The shape of a record that starts with a run id: `fixed` bytes besides
/// its variable parts, and optionally a second length-prefixed part
/// (`Put`'s worker id, `SetData`'s value) whose length follows `gap` bytes
/// of fixed fields after the run id.
fn check_ids_shape(
    start: &[u8],
    len: u64,
    kind: &str,
    fixed: u64,
    second: Option<(usize, &str)>,
) -> Result<(), String> {
    let a = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    if len < fixed {
        return Err(format!(
            "{a} {kind} record is at least {fixed} bytes long, not {len}"
        ));
    }
    let Some(run_len) = u32_at(start, 1) else {
        return Ok(());
    };
    let run_len = u64::from(run_len);
    if fixed + run_len > len {
        return Err(format!(
            "a {run_len}-byte run id does not fit in a {len}-byte {kind} record"
        ));
    }
    let Some((gap, what)) = second else {
        let expected = fixed + run_len;
        if expected != len {
            return Err(format!(
                "{a} {kind} record with a {run_len}-byte run id is {expected} bytes long, not {len}"
            ));
        }
        return Ok(());
    };
    // Below len, so it fits a usize.
    let Some(second_len) = u32_at(start, 5 + run_len as usize + gap) else {
        return Ok(());
    };
    let second_len = u64::from(second_len);
    let expected = fixed + run_len + second_len;
    if expected > len {
        return Err(format!(
            "a {second_len}-byte {what} does not fit in a {len}-byte {kind} record"
        ));
    }
    if expected < len {
        return Err(format!(
            "{a} {kind} record with a {run_len}-byte run id and a {second_len}-byte {what} \
             is {expected} bytes long, not {len}"
        ));
    }
    Ok(())
}

/// Reads fields off the front of a payload.
struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.rest.len() {
            // check_shape runs first, so this is only a second line of
            // defence against a mistake here.
            return Err("the record ends inside a field".into());
        }
        let (field, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(field)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let field = self.take(N)?;
        field
            .try_into()
            .map_err(|_| "the record ends inside a field".into())
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn f64(&mut self) -> Result<f64, String> {
        Ok(f64::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn end(&mut self) -> Result<TenureEnd, String> {
        let [end] = self.array()?;
        TenureEnd::ALL
            .get(usize::from(end))
            .copied()
            .ok_or_else(|| format!("tenure end {end} is not 0, 1 or 2"))
    }

    /// A u32-length-prefixed id.
    fn id(&mut self) -> Result<Bytes, String> {
        let len = u32::from_le_bytes(self.array()?);
        let len =
            usize::try_from(len).map_err(|_| String::from("an id too long for this machine"))?;
        Ok(Bytes::copy_from_slice(self.take(len)?))
    }
}

/// Decodes a whole payload whose checksum matched.
fn decode(payload: &[u8]) -> Result<Change, String> {
    check_shape(payload, payload.len())?;
    let Some((&kind, rest)) = payload.split_first() else {
        return Err("an empty record".into());
    };
    let mut fields = Fields { rest };
    let change = match kind {
        PUT | PUT_TENURE => Change::Put {
            run_id: fields.id()?,
            worker_id: fields.id()?,
            fencing_token: fields.u64()?,
            expires_at: fields.f64()?,
            ttl: fields.f64()?,
            acquired_at: match kind {
                PUT => None,
                _ => Some(fields.f64()?),
            },
            heartbeats: match kind {
                PUT => 0,
                _ => fields.u32()?,
            },
        },
        EXTEND => Change::Extend {
            fencing_token: fields.u64()?,
            expires_at: fields.f64()?,
        },
        REMOVE => Change::Remove {
            fencing_token: fields.u64()?,
        },
        TIME => Change::Time(fields.f64()?),
        LAST_TOKEN => Change::LastToken(fields.u64()?),
        LOCK_DELAY => Change::LockDelay {
            fencing_token: fields.u64()?,
            lock_delay: fields.f64()?,
        },
        SET_DATA => Change::SetData {
            run_id: fields.id()?,
            fencing_token: fields.u64()?,
            written_at: fields.f64()?,
            value: fields.id()?,
        },
        DEL_DATA => Change::DelData {
            run_id: fields.id()?,
        },
        ORPHAN => Change::Orphan {
            run_id: fields.id()?,
            at: fields.f64()?,
        },
        BEAT => Change::Beat {
            fencing_token: fields.u64()?,
            expires_at: fields.f64()?,
            heartbeats: fields.u32()?,
        },
        RELEASE => Change::Release {
            fencing_token: fields.u64()?,
            at: fields.f64()?,
        },
        FORGET => Change::Forget {
            run_id: fields.id()?,
        },
        PAST => Change::Past {
            run_id: fields.id()?,
            tenure: PastTenure {
                worker_id: fields.id()?,
                fencing_token: fields.u64()?,
                acquired_at: fields.f64()?,
                expires_at: fields.f64()?,
                ended_at: fields.f64()?,
                end: fields.end()?,
                heartbeats: fields.u32()?,
            },
        },
        other => return Err(format!("unknown record type {other}")),
    };
    if !fields.rest.is_empty() {
        return Err("bytes after the record's last field".into());
    }
    check_values(&change)?;
    Ok(change)
}

/// Checks the ranges listed in the module docs.
fn check_values(change: &Change) -> Result<(), String> {
    match *change {
        Change::Put {
            fencing_token,
            expires_at,
            ttl,
            acquired_at,
            ..
        } => {
            check_token(fencing_token)?;
            check_expires_at(expires_at)?;
            if let Some(acquired_at) = acquired_at {
                check_acquired_at(acquired_at)?;
            }
            if !(ttl.is_finite() && ttl > 0.0) {
                return Err(format!(
                    "ttl is {ttl}: not a finite number of seconds above 0"
                ));
            }
            Ok(())
        }
        Change::Extend {
            fencing_token,
            expires_at,
        } => {
            check_token(fencing_token)?;
            check_expires_at(expires_at)
        }
        Change::Remove { fencing_token } => check_token(fencing_token),
        Change::Time(time) => {
            if time.is_nan() || time == f64::INFINITY {
                return Err(format!(
                    "registry time is {time}: not a time the registry can have"
                ));
            }
            Ok(())
        }
        Change::LastToken(token) => {
            if token > MAX_TOKEN {
                return Err(format!("last token {token} is above 2^63-1"));
            }
            Ok(())
        }
        Change::LockDelay {
            fencing_token,
            lock_delay,
        } => {
            check_token(fencing_token)?;
            if !(lock_delay.is_finite() && lock_delay > 0.0) {
                return Err(format!(
                    "lock delay is {lock_delay}: not a finite number of seconds above 0"
                ));
            }
            Ok(())
        }
        Change::SetData {
            fencing_token,
            written_at,
            ..
        } => {
            check_token(fencing_token)?;
            check_finite("written_at", written_at)
        }
        Change::DelData { .. } | Change::Forget { .. } => Ok(()),
        Change::Orphan { at, .. } => check_finite("at", at),
        Change::Beat {
            fencing_token,
            expires_at,
            ..
        } => {
            check_token(fencing_token)?;
            check_expires_at(expires_at)
        }
        Change::Release { fencing_token, at } => {
            check_token(fencing_token)?;
            check_finite("at", at)
        }
        Change::Past { ref tenure, .. } => check_past(tenure),
    }
}

fn check_past(tenure: &PastTenure) -> Result<(), String> {
    check_token(tenure.fencing_token)?;
    check_acquired_at(tenure.acquired_at)?;
    check_expires_at(tenure.expires_at)?;
    if tenure.end == TenureEnd::Expired {
        if tenure.ended_at.to_bits() != tenure.expires_at.to_bits() {
            return Err(format!(
                "an expired tenure ended at {}, not at its expires_at {}",
                tenure.ended_at, tenure.expires_at
            ));
        }
        return Ok(());
    }
    check_finite("ended_at", tenure.ended_at)
}

/// Registry time when a lease was acquired: never NaN or +∞.
fn check_acquired_at(acquired_at: f64) -> Result<(), String> {
    if acquired_at.is_nan() || acquired_at == f64::INFINITY {
        return Err(format!(
            "acquired_at is {acquired_at}: not a time the registry can have"
        ));
    }
    Ok(())
}

fn check_finite(what: &str, time: f64) -> Result<(), String> {
    if !time.is_finite() {
        return Err(format!("{what} is {time}: not a finite time"));
    }
    Ok(())
}

fn check_token(token: u64) -> Result<(), String> {
    if !(1..=MAX_TOKEN).contains(&token) {
        return Err(format!("fencing token {token} is not from 1 to 2^63-1"));
    }
    Ok(())
}

fn check_expires_at(expires_at: f64) -> Result<(), String> {
    if expires_at.is_nan() || expires_at == f64::NEG_INFINITY {
        return Err(format!(
            "expires_at is {expires_at}: not a time a lease can expire at"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
