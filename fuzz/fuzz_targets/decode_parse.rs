//! Arbitrary bytes through request decoding, command parsing and reply
//! encoding. Nothing may panic, and the decoder must reach the same
//! requests and the same verdict however the stream is cut into reads,
//! and whether it decodes all it can or one request at a time.
//!
//! Input: 4 control bytes (limits, and the read sizes), then the stream.

#![no_main]

use bytes::{Bytes, BytesMut};
use leased::command::{self, Command};
use leased::reply::{Protocol, Reply};
use leased::request::{Limits, ProtocolError, RequestDecoder};
use libfuzzer_sys::fuzz_target;

type Outcome = (Vec<Vec<Bytes>>, Result<(), ProtocolError>);

/// Feeds `stream` in reads of the sizes `reads` cycles through.
fn feed(limits: Limits, stream: &[u8], reads: &[usize], one_at_a_time: bool) -> Outcome {
    let mut decoder = RequestDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut requests = Vec::new();
    let mut at = 0;
    let mut sizes = reads.iter().cycle();
    while at < stream.len() {
        let end = (at + sizes.next().copied().unwrap_or(stream.len())).min(stream.len());
        buf.extend_from_slice(&stream[at..end]);
        at = end;
        let result = loop {
            let before = requests.len();
            let result = if one_at_a_time {
                decoder.decode_one(&mut buf, &mut requests)
            } else {
                decoder.decode(&mut buf, &mut requests)
            };
            if result.is_err() || !one_at_a_time || requests.len() == before {
                break result;
            }
        };
        if result.is_err() {
            return (requests, result);
        }
    }
    (requests, Ok(()))
}

/// Small limits from a control byte, so the limit checks are reached.
fn limits(control: u8) -> Limits {
    if control & 1 == 0 {
        return Limits::default();
    }
    Limits {
        max_bulk_len: usize::from(control >> 4) * 8,
        max_args: usize::from(control >> 2 & 3) * 4 + 1,
        max_inline_len: usize::from(control >> 5) * 16 + 2,
        unauthenticated: control & 2 != 0,
    }
}

fn encode(reply: &Reply) {
    for protocol in [Protocol::Resp2, Protocol::Resp3] {
        let mut out = BytesMut::new();
        reply.encode(protocol, &mut out);
        assert!(!out.is_empty(), "an empty encoding of {reply:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((control, stream)) = data.split_first_chunk::<4>() else {
        return;
    };
    let limits = limits(control[0]);
    let whole = feed(limits, stream, &[stream.len().max(1)], false);
    let reads = [
        usize::from(control[1]) + 1,
        usize::from(control[2] % 7) + 1,
        usize::from(control[3]) * 3 + 1,
    ];
    assert_eq!(whole, feed(limits, stream, &reads, false), "cut into reads");
    assert_eq!(whole, feed(limits, stream, &reads, true), "one at a time");
    if let Err(error) = &whole.1 {
        encode(&Reply::error(error.message()));
    }
    for args in whole.0 {
        match command::parse(&args) {
            Ok(Command::Lease(op)) => {
                std::hint::black_box(op.oversized_id(1024));
            }
            Ok(_) => {}
            Err(reply) => encode(&reply),
        }
    }
});
