use proptest::prelude::*;

use super::*;

fn put(run: &[u8], worker: &[u8], fencing_token: u64, expires_at: f64, ttl: f64) -> Change {
    Change::Put {
        run_id: Bytes::copy_from_slice(run),
        worker_id: Bytes::copy_from_slice(worker),
        fencing_token,
        expires_at,
        ttl,
        acquired_at: None,
        heartbeats: 0,
    }
}

/// A log of `changes`, and its record boundaries: where each record
/// starts, then where the log ends.
fn log_of(changes: &[Change]) -> (Vec<u8>, Vec<u64>) {
    let mut out = BytesMut::from(HEADER);
    let mut bounds = vec![out.len() as u64];
    for change in changes {
        encode(change, &mut out);
        bounds.push(out.len() as u64);
    }
    (out.to_vec(), bounds)
}

fn replay_from(reader: impl Read) -> (Result<Replayed, ReplayError>, Vec<Change>) {
    let mut applied = Vec::new();
    let result = replay(reader, |change| applied.push(change));
    (result, applied)
}

/// Changes as bytes, to compare every bit: `==` on f64 takes -0.0 for
/// 0.0.
fn bits(changes: &[Change]) -> Vec<u8> {
    let mut out = BytesMut::new();
    for change in changes {
        encode(change, &mut out);
    }
    out.to_vec()
}

fn clean(good_len: u64, records: usize) -> Result<Replayed, ReplayError> {
    Ok(Replayed {
        good_len,
        torn_at: None,
        records: records as u64,
    })
}

fn torn(at: u64, records: usize) -> Result<Replayed, ReplayError> {
    Ok(Replayed {
        good_len: at,
        torn_at: Some(at),
        records: records as u64,
    })
}

/// Asserts a `Corrupt` error at `offset` after `records` whole records,
/// and returns its reason.
#[track_caller]
fn assert_corrupt(result: Result<Replayed, ReplayError>, offset: u64, records: usize) -> String {
    match result {
        Err(ReplayError::Corrupt {
            offset: at,
            reason,
            replayed,
        }) => {
            assert_eq!(at, offset, "{reason}");
            assert_eq!(
                replayed,
                Replayed {
                    good_len: offset,
                    torn_at: None,
                    records: records as u64,
                }
            );
            reason
        }
        other => panic!("expected corruption at {offset}, got {other:?}"),
    }
}

/// Frames a hand-built payload, with a checksum that matches it.
fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_le_bytes().to_vec();
    out.extend(crc32fast::hash(payload).to_le_bytes());
    out.extend(payload);
    out
}

/// A Put payload built from the module docs, not by `encode`.
fn put_payload(run: &[u8], worker: &[u8], token: u64, expires_at: f64, ttl: f64) -> Vec<u8> {
    let mut out = vec![1];
    out.extend((run.len() as u32).to_le_bytes());
    out.extend(run);
    out.extend((worker.len() as u32).to_le_bytes());
    out.extend(worker);
    out.extend(token.to_le_bytes());
    out.extend(expires_at.to_bits().to_le_bytes());
    out.extend(ttl.to_bits().to_le_bytes());
    out
}

/// A `Past` payload for run `r`, worker `w`, token 1, with this `end`
/// byte, `expires_at` and `ended_at`.
fn past_payload(end: u8, expires_at: f64, ended_at: f64) -> Vec<u8> {
    let mut out = vec![13];
    out.extend(1u32.to_le_bytes());
    out.extend(b"r");
    out.extend(1u32.to_le_bytes());
    out.extend(b"w");
    out.extend(1u64.to_le_bytes());
    out.extend(1.0f64.to_le_bytes());
    out.extend(expires_at.to_le_bytes());
    out.extend(ended_at.to_le_bytes());
    out.push(end);
    out.extend(7u32.to_le_bytes());
    out
}

fn payload_of(kind: u8, field: [u8; 8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend(field);
    out
}

/// Hands out its data a few bytes per read, cycling through `sizes`,
/// and, if `interrupts`, fails every third read with `Interrupted`, as
/// a pipe or a read cut short by a signal may.
struct Chunked<'a> {
    data: &'a [u8],
    sizes: Vec<usize>,
    reads: usize,
    interrupts: bool,
}

impl<'a> Chunked<'a> {
    fn new(data: &'a [u8], sizes: Vec<usize>, interrupts: bool) -> Chunked<'a> {
        Chunked {
            data,
            sizes,
            reads: 0,
            interrupts,
        }
    }
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.reads += 1;
        if self.interrupts && self.reads.is_multiple_of(3) {
            return Err(ErrorKind::Interrupted.into());
        }
        let n = self.sizes[self.reads % self.sizes.len()]
            .min(buf.len())
            .min(self.data.len());
        let (chunk, rest) = self.data.split_at(n);
        buf[..n].copy_from_slice(chunk);
        self.data = rest;
        Ok(n)
    }
}

/// A reader that fails for good: a disk that returns EIO.
struct Broken;

impl Read for Broken {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(io::Error::other("disk on fire"))
    }
}

/// A dozen records of every kind, small enough to damage exhaustively.
fn varied() -> Vec<Change> {
    vec![
        Change::LastToken(0),
        Change::Time(f64::NEG_INFINITY),
        put(b"run-1", b"worker-a", 1, 10.0, 10.0),
        Change::Time(0.5),
        put(b"", b"", 2, 10.5, 10.0),
        Change::Extend {
            fencing_token: 1,
            expires_at: 20.25,
        },
        put(b"r:1:x", b"\x00\xff:", 3, -3.0, 0.001),
        Change::Remove { fencing_token: 2 },
        Change::Extend {
            fencing_token: 3,
            expires_at: f64::INFINITY,
        },
        Change::LastToken(MAX_TOKEN),
        put(b"run-2", b"w", MAX_TOKEN, 1e300, 1e300),
        Change::Remove {
            fencing_token: MAX_TOKEN,
        },
        Change::Time(1.7e9),
    ]
}

#[test]
fn records_are_laid_out_as_documented() {
    assert_eq!(HEADER, b"LEASEDLOG\x001\n");
    assert_eq!(HEADER.len(), 12);
    // The check value of the CRC the docs name.
    assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);

    let cases: Vec<(Change, Vec<u8>)> = vec![
        (
            put(b"r:1", b"\x00\xff", 1, 10.0, 2.0),
            [
                &[1][..],
                &[3, 0, 0, 0],
                b"r:1",
                &[2, 0, 0, 0],
                &[0x00, 0xff],
                &[1, 0, 0, 0, 0, 0, 0, 0],
                &[0, 0, 0, 0, 0, 0, 0x24, 0x40],
                &[0, 0, 0, 0, 0, 0, 0x00, 0x40],
            ]
            .concat(),
        ),
        (
            Change::Extend {
                fencing_token: 0x0102_0304_0506_0708,
                expires_at: 1.5,
            },
            vec![2, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f],
        ),
        (
            Change::Remove {
                fencing_token: 0x0102,
            },
            vec![3, 2, 1, 0, 0, 0, 0, 0, 0],
        ),
        (Change::Time(-2.5), vec![4, 0, 0, 0, 0, 0, 0, 0x04, 0xc0]),
        (Change::LastToken(7), vec![5, 7, 0, 0, 0, 0, 0, 0, 0]),
    ];
    for (change, payload) in cases {
        let mut out = BytesMut::new();
        encode(&change, &mut out);
        let mut expected = (payload.len() as u32).to_le_bytes().to_vec();
        expected.extend(crc32fast::hash(&payload).to_le_bytes());
        expected.extend(&payload);
        assert_eq!(&out[..], &expected[..], "{change:?}");
        assert_eq!(payload_len(&change), payload.len() as u64);
    }
}

#[test]
fn encode_appends_after_what_is_there() {
    let mut out = BytesMut::from(&b"before"[..]);
    encode(&Change::Time(1.0), &mut out);
    assert_eq!(&out[..6], b"before");
    assert_eq!(out.len(), 6 + FRAME_HEADER_LEN + 9);
}

#[test]
fn every_variant_round_trips() {
    let every_byte: Vec<u8> = (0..=255).collect();
    let every_byte_reversed: Vec<u8> = (0..=255).rev().collect();
    // Not a repeating pattern of a power-of-two period, so a chunk
    // landing in the wrong place would show.
    let big: Vec<u8> = (0..3usize << 20).map(|i| (i % 251) as u8).collect();
    let changes = vec![
        put(b"", b"", 1, 0.0, 1.0),
        put(b"", b"worker", 1, 0.0, 1.0),
        put(b"run", b"", 1, 0.0, 1.0),
        put(b"run:with:colons", b"worker:a:1", 2, 10.5, 10.0),
        put(&every_byte, &every_byte_reversed, MAX_TOKEN, -3.25, 0.5),
        put(&big, b"w", 7, 1.7e9, 3600.0),
        put(b"r", &big[..1 << 20], 8, f64::MAX, f64::MAX),
        put(b"r", b"w", 9, -f64::MAX, f64::MIN_POSITIVE),
        // now + ttl overflowing; the smallest subnormal TTL.
        put(b"r", b"w", 10, f64::INFINITY, 5e-324),
        put(b"r", b"w", 11, -0.0, 1e-9),
        Change::Extend {
            fencing_token: 1,
            expires_at: -0.0,
        },
        Change::Extend {
            fencing_token: MAX_TOKEN,
            expires_at: f64::INFINITY,
        },
        Change::Extend {
            fencing_token: 2,
            expires_at: 1234.5678,
        },
        Change::Remove { fencing_token: 1 },
        Change::Remove {
            fencing_token: MAX_TOKEN,
        },
        Change::Time(f64::NEG_INFINITY),
        Change::Time(-1e308),
        Change::Time(0.1),
        Change::Time(f64::MAX),
        Change::Time(-0.0),
        Change::Time(5e-324),
        Change::LastToken(0),
        Change::LastToken(1),
        Change::LastToken(MAX_TOKEN),
        Change::SetData {
            run_id: Bytes::new(),
            value: Bytes::new(),
            fencing_token: 1,
            written_at: 0.0,
        },
        Change::SetData {
            run_id: Bytes::from(every_byte.clone()),
            value: Bytes::from(big[..1 << 20].to_vec()),
            fencing_token: MAX_TOKEN,
            written_at: -1.5,
        },
        Change::DelData {
            run_id: Bytes::new(),
        },
        Change::DelData {
            run_id: Bytes::from_static(b"run:1"),
        },
        Change::Orphan {
            run_id: Bytes::from(every_byte_reversed.clone()),
            at: 1.7e9,
        },
    ];
    for change in &changes {
        let (log, _) = log_of(std::slice::from_ref(change));
        let (result, applied) = replay_from(&log[..]);
        assert_eq!(result, clean(log.len() as u64, 1));
        assert_eq!(&applied, std::slice::from_ref(change));
        assert_eq!(bits(&applied), bits(std::slice::from_ref(change)));
    }
    let (log, _) = log_of(&changes);
    let reader = Chunked::new(&log, vec![1, 7, 4096, 3], true);
    let (result, applied) = replay_from(reader);
    assert_eq!(result, clean(log.len() as u64, changes.len()));
    assert_eq!(bits(&applied), bits(&changes));
}

#[test]
fn every_prefix_replays_the_whole_records_in_it() {
    let changes = varied();
    let (log, bounds) = log_of(&changes);
    for cut in 0..=log.len() {
        let prefix = &log[..cut];
        let expected = if cut == 0 {
            clean(0, 0)
        } else if cut < HEADER.len() {
            torn(0, 0)
        } else {
            let records = bounds.iter().rposition(|&b| b <= cut as u64).unwrap();
            let good = bounds[records];
            if good == cut as u64 {
                clean(good, records)
            } else {
                torn(good, records)
            }
        };
        let records = expected.as_ref().unwrap().records as usize;
        for (result, applied) in [
            replay_from(prefix),
            replay_from(Chunked::new(prefix, vec![1], false)),
            replay_from(Chunked::new(prefix, vec![3, 5], true)),
        ] {
            assert_eq!(result, expected, "cut at {cut}");
            assert_eq!(bits(&applied), bits(&changes[..records]), "cut at {cut}");
        }
    }
}

#[test]
fn a_zero_filled_tail_is_torn_at_the_last_record() {
    let changes = varied();
    let (log, _) = log_of(&changes);
    let end = log.len() as u64;
    for zeros in 1..=64 {
        let mut file = log.clone();
        file.resize(log.len() + zeros, 0);
        let (result, applied) = replay_from(&file[..]);
        assert_eq!(result, torn(end, changes.len()), "{zeros} zeros");
        assert_eq!(bits(&applied), bits(&changes));

        let mut file = HEADER.to_vec();
        file.resize(HEADER.len() + zeros, 0);
        let (result, _) = replay_from(&file[..]);
        assert_eq!(result, torn(HEADER.len() as u64, 0), "{zeros} zeros");
    }
    // Longer than the read buffer, read in pieces.
    let mut file = log.clone();
    file.resize(log.len() + (1 << 20), 0);
    let (result, _) = replay_from(Chunked::new(&file, vec![1000, 1], true));
    assert_eq!(result, torn(end, changes.len()));
}

#[test]
fn zeros_followed_by_records_are_corrupt() {
    let changes = varied();
    let (log, bounds) = log_of(&changes);
    for (records, &at) in bounds.iter().enumerate().take(changes.len()) {
        let at_usize = at as usize;
        // Four or more zeros make the frame's whole `len` zero.
        for zeros in 4..=64 {
            let mut file = log[..at_usize].to_vec();
            file.resize(at_usize + zeros, 0);
            file.extend(&log[at_usize..]);
            let (result, applied) = replay_from(&file[..]);
            let reason = assert_corrupt(result, at, records);
            assert!(reason.contains("length 0"), "{reason}");
            assert_eq!(bits(&applied), bits(&changes[..records]));
        }
        // Fewer make a misaligned frame out of the zeros and the next
        // frame's bytes; what that frame decodes to depends on those
        // bytes, so only check that nothing wrong is applied.
        for zeros in 1..4 {
            let mut file = log[..at_usize].to_vec();
            file.resize(at_usize + zeros, 0);
            file.extend(&log[at_usize..]);
            let (result, applied) = replay_from(&file[..]);
            assert!(!matches!(result, Ok(r) if r.records as usize > records));
            assert_eq!(bits(&applied), bits(&changes[..records]));
        }
    }
}

/// The rules, applied to one changed byte of record `k`: a changed
/// checksum or payload byte fails the checksum; a changed `len` either
/// is 0 (and real records follow, or the frame's own checksum bytes are
/// not zero), above the maximum, shorter (the checksum fails on fewer
/// bytes), longer but still inside the file (the frame swallows bytes of
/// the next records and the checksum fails), or longer and past the end
/// of the file. The last case would read as a torn tail; the payload's
/// type and id lengths contradict the new `len`, so it is corruption,
/// for the last record and for an earlier one alike.
#[test]
fn every_changed_byte_of_a_record_is_corruption_at_that_record() {
    let changes = varied();
    let (mut log, bounds) = log_of(&changes);
    for k in 0..changes.len() {
        for at in bounds[k] as usize..bounds[k + 1] as usize {
            for mask in 1..=255 {
                log[at] ^= mask;
                let (result, applied) = replay_from(&log[..]);
                log[at] ^= mask;
                let reason = assert_corrupt(result, bounds[k], k);
                assert!(!reason.is_empty());
                assert_eq!(bits(&applied), bits(&changes[..k]));
            }
        }
    }
}

#[test]
fn a_longer_len_on_the_last_record_is_corruption_not_a_torn_tail() {
    let changes = varied();
    let (log, bounds) = log_of(&changes);
    let last = bounds[changes.len() - 1];
    let last_usize = last as usize;
    let len = log.len() - last_usize - FRAME_HEADER_LEN;
    for new_len in [len + 1, len + 100, MAX_RECORD_LEN as usize] {
        let mut file = log.clone();
        file[last_usize..last_usize + 4].copy_from_slice(&(new_len as u32).to_le_bytes());
        let (result, _) = replay_from(&file[..]);
        let reason = assert_corrupt(result, last, changes.len() - 1);
        assert!(reason.contains("runs past the end"), "{reason}");
    }
}

#[test]
fn a_record_running_past_the_end_is_torn_only_if_it_could_be_real() {
    let whole = put_payload(b"run", b"worker", 5, 1.0, 1.0);
    let framed = frame(&whole);
    let file = |frame_bytes: &[u8]| [HEADER, frame_bytes].concat();
    let at = HEADER.len() as u64;

    // A true prefix of the frame, cut anywhere inside the payload.
    for cut in FRAME_HEADER_LEN..framed.len() {
        let (result, applied) = replay_from(&file(&framed[..cut])[..]);
        assert_eq!(result, torn(at, 0));
        assert!(applied.is_empty());
    }

    // An unknown type byte, and the run id's length overrunning `len`.
    let mut unknown = framed.clone();
    unknown[FRAME_HEADER_LEN] = 99;
    let reason = assert_corrupt(replay_from(&file(&unknown[..12])[..]).0, at, 0);
    assert!(reason.contains("unknown record type 99"), "{reason}");
    let mut overrun = framed.clone();
    overrun[FRAME_HEADER_LEN + 1..FRAME_HEADER_LEN + 5].copy_from_slice(&100u32.to_le_bytes());
    let reason = assert_corrupt(replay_from(&file(&overrun[..20])[..]).0, at, 0);
    assert!(reason.contains("100-byte run id"), "{reason}");
    // The worker id's length overrunning it.
    let mut overrun = framed.clone();
    let worker_len_at = FRAME_HEADER_LEN + 1 + 4 + 3;
    overrun[worker_len_at..worker_len_at + 4].copy_from_slice(&100u32.to_le_bytes());
    let reason = assert_corrupt(replay_from(&file(&overrun[..20])[..]).0, at, 0);
    assert!(reason.contains("100-byte worker id"), "{reason}");
    // A put shorter than its fixed fields.
    let mut short = framed.clone();
    short[..4].copy_from_slice(&20u32.to_le_bytes());
    let reason = assert_corrupt(replay_from(&file(&short[..12])[..]).0, at, 0);
    assert!(reason.contains("at least 33"), "{reason}");
}

#[test]
fn a_huge_len_fails_at_once_without_allocating_it() {
    let good = frame(&payload_of(4, 1.0f64.to_le_bytes()));
    let at = (HEADER.len() + good.len()) as u64;
    for len in [0xFFFF_FFF0, u32::MAX, MAX_RECORD_LEN + 1] {
        let mut file = [HEADER, &good[..]].concat();
        file.extend(len.to_le_bytes());
        file.extend([0xAB; 4]);
        file.extend([1, 2, 3]);
        let (result, applied) = replay_from(&file[..]);
        let reason = assert_corrupt(result, at, 1);
        assert!(reason.contains("above the maximum"), "{reason}");
        assert_eq!(applied, [Change::Time(1.0)]);
    }
    // The largest allowed `len` on a tiny file is a torn tail, found
    // by reading the few bytes there, not by reserving 2 GiB.
    let mut file = HEADER.to_vec();
    file.extend(MAX_RECORD_LEN.to_le_bytes());
    file.extend([0xAB; 4]);
    let (result, _) = replay_from(&file[..]);
    assert_eq!(result, torn(HEADER.len() as u64, 0));
    // A put prefix that claims a 1 GiB run id in a 2 GiB record.
    file.push(1);
    file.extend((1u32 << 30).to_le_bytes());
    file.extend([b'x'; 100]);
    let (result, _) = replay_from(&file[..]);
    assert_eq!(result, torn(HEADER.len() as u64, 0));
}

#[test]
fn a_payload_buffer_grows_with_the_bytes_that_arrive() {
    let mut buf = Vec::new();
    read_payload(&mut &[7u8; 100][..], MAX_RECORD_LEN as usize, &mut buf).unwrap();
    assert_eq!(buf, [7; 100]);
    assert!(
        buf.capacity() <= 2 * FIRST_PAYLOAD_CHUNK,
        "{}",
        buf.capacity()
    );

    let data = vec![1u8; 1 << 20];
    let mut buf = Vec::new();
    read_payload(&mut &data[..], MAX_RECORD_LEN as usize, &mut buf).unwrap();
    assert_eq!(buf.len(), 1 << 20);
    assert!(buf.capacity() <= 4 << 20, "{}", buf.capacity());

    // It reads exactly `len` bytes, leaving the next record's.
    let data: Vec<u8> = (1..=20).collect();
    let mut reader = &data[..];
    read_payload(&mut reader, 5, &mut buf).unwrap();
    assert_eq!(buf, [1, 2, 3, 4, 5]);
    assert_eq!(reader.len(), 15);
}

#[test]
fn headers() {
    let (log, _) = log_of(&varied());
    assert_eq!(replay_from(&b""[..]).0, clean(0, 0));
    // A header whose write was cut short.
    for cut in 1..HEADER.len() {
        assert_eq!(replay_from(&HEADER[..cut]).0, torn(0, 0), "cut at {cut}");
    }
    assert_eq!(replay_from(HEADER).0, clean(HEADER.len() as u64, 0));

    let bad: [&[u8]; 7] = [
        b"LEASEDLOG\x002\n",
        b"LEASEDLOG\x000\n",
        b"LEASEDLOG\x001\r\n",
        b"leasedlog\x001\n",
        b"REDIS0011",
        b"LEASEDLOX",
        // Zeros are only a torn tail after a record boundary: an
        // all-zero file is not a log.
        &[0; 12],
    ];
    for header in bad {
        let file = [header, &log[HEADER.len()..]].concat();
        assert_eq!(replay_from(&file[..]).0, Err(ReplayError::BadHeader));
        assert_eq!(replay_from(header).0, Err(ReplayError::BadHeader));
    }
    let mut file = log.clone();
    for at in 0..HEADER.len() {
        for mask in 1..=255 {
            file[at] ^= mask;
            assert_eq!(replay_from(&file[..]).0, Err(ReplayError::BadHeader));
            assert_eq!(replay_from(&file[..=at]).0, Err(ReplayError::BadHeader));
            file[at] ^= mask;
        }
    }
}

#[test]
fn payloads_that_pass_their_checksum_but_do_not_decode_are_corrupt() {
    let valid = put_payload(b"run", b"w", 3, 10.0, 10.0);
    let mut trailing = valid.clone();
    trailing.push(0);
    let mut run_overrun = valid.clone();
    run_overrun[1..5].copy_from_slice(&100u32.to_le_bytes());
    let mut worker_overrun = valid.clone();
    worker_overrun[8..12].copy_from_slice(&7u32.to_le_bytes());
    let nan = f64::NAN.to_le_bytes();
    let extend = |token: u64, expires_at: f64| {
        let mut out = payload_of(2, token.to_le_bytes());
        out.extend(expires_at.to_le_bytes());
        out
    };
    let lock_delay = |token: u64, seconds: f64| {
        let mut out = payload_of(6, token.to_le_bytes());
        out.extend(seconds.to_le_bytes());
        out
    };
    let too_big = MAX_TOKEN + 1;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![0; 9], "unknown record type 0"),
        (payload_of(15, [0; 8]), "unknown record type 15"),
        (
            payload_of(10, [0; 8]),
            "a beat record is 21 bytes long, not 9",
        ),
        (
            payload_of(11, [1; 8]),
            "a release record is 17 bytes long, not 9",
        ),
        (
            [
                &payload_of(11, 1u64.to_le_bytes())[..],
                &f64::NAN.to_le_bytes(),
            ]
            .concat(),
            "at is NaN",
        ),
        (past_payload(3, 5.0, 5.0), "tenure end 3 is not 0, 1 or 2"),
        (past_payload(2, 5.0, 6.0), "an expired tenure ended at 6"),
        (past_payload(0, 5.0, f64::INFINITY), "ended_at is inf"),
        (
            [&past_payload(0, 5.0, 6.0)[..], &[0]].concat(),
            "is 48 bytes long, not 49",
        ),
        (
            payload_of(6, [1; 8]),
            "lock-delay record is 17 bytes long, not 9",
        ),
        (lock_delay(1, 0.0), "lock delay is 0"),
        (lock_delay(1, -2.0), "lock delay is -2"),
        (lock_delay(1, f64::NAN), "lock delay is NaN"),
        (lock_delay(0, 1.0), "fencing token 0 "),
        (vec![255], "unknown record type 255"),
        (extend(1, 1.0)[..16].to_vec(), "17 bytes long, not 16"),
        (
            [&extend(1, 1.0)[..], &[0]].concat(),
            "17 bytes long, not 18",
        ),
        (
            payload_of(3, [1; 8])[..8].to_vec(),
            "remove record is 9 bytes long, not 8",
        ),
        (
            [&payload_of(4, [0; 8])[..], &[0]].concat(),
            "time record is 9 bytes long, not 10",
        ),
        (vec![5], "last-token record is 9 bytes long, not 1"),
        (
            put_payload(b"", b"", 1, 1.0, 1.0)[..32].to_vec(),
            "at least 33",
        ),
        (run_overrun, "100-byte run id"),
        (worker_overrun, "7-byte worker id"),
        (trailing, "is 37 bytes long, not 38"),
        (put_payload(b"r", b"w", 0, 1.0, 1.0), "fencing token 0 "),
        (
            put_payload(b"r", b"w", too_big, 1.0, 1.0),
            "9223372036854775808",
        ),
        (
            put_payload(b"r", b"w", u64::MAX, 1.0, 1.0),
            "18446744073709551615",
        ),
        (
            put_payload(b"r", b"w", 1, f64::NAN, 1.0),
            "expires_at is NaN",
        ),
        (
            put_payload(b"r", b"w", 1, f64::NEG_INFINITY, 1.0),
            "expires_at is -inf",
        ),
        (put_payload(b"r", b"w", 1, 1.0, 0.0), "ttl is 0"),
        (put_payload(b"r", b"w", 1, 1.0, -0.0), "ttl is -0"),
        (put_payload(b"r", b"w", 1, 1.0, -1.0), "ttl is -1"),
        (put_payload(b"r", b"w", 1, 1.0, f64::INFINITY), "ttl is inf"),
        (put_payload(b"r", b"w", 1, 1.0, f64::NAN), "ttl is NaN"),
        (extend(0, 1.0), "fencing token 0 "),
        (extend(too_big, 1.0), "9223372036854775808"),
        (extend(1, f64::NAN), "expires_at is NaN"),
        (extend(1, f64::NEG_INFINITY), "expires_at is -inf"),
        (payload_of(3, 0u64.to_le_bytes()), "fencing token 0 "),
        (payload_of(3, too_big.to_le_bytes()), "9223372036854775808"),
        (payload_of(4, nan), "registry time is NaN"),
        (
            payload_of(4, f64::INFINITY.to_le_bytes()),
            "registry time is inf",
        ),
        (
            payload_of(5, too_big.to_le_bytes()),
            "last token 9223372036854775808",
        ),
    ];
    let good = frame(&valid);
    let at = (HEADER.len() + good.len()) as u64;
    for (payload, expected) in cases {
        let bad = frame(&payload);
        // Last in the file, and followed by a good record.
        for after in [&[][..], &good[..]] {
            let file = [HEADER, &good, &bad, after].concat();
            let (result, applied) = replay_from(&file[..]);
            let reason = assert_corrupt(result, at, 1);
            assert!(reason.contains(expected), "{reason:?} for {payload:?}");
            assert_eq!(applied, [put(b"run", b"w", 3, 10.0, 10.0)]);
        }
    }
}

#[test]
fn read_errors_are_reported() {
    let changes = varied();
    let (log, bounds) = log_of(&changes);
    for cut in [
        0,
        5,
        HEADER.len(),
        bounds[1] as usize,
        bounds[3] as usize + 2,
        log.len(),
    ] {
        let (result, applied) = replay_from(log[..cut].chain(Broken));
        match result {
            Err(ReplayError::Io(message)) => assert!(message.contains("disk on fire")),
            other => panic!("cut at {cut}: {other:?}"),
        }
        let records = bounds.iter().rposition(|&b| b <= cut as u64).unwrap_or(0);
        assert_eq!(bits(&applied), bits(&changes[..records]));
    }
    // While checking that a zero length runs to the end in zeros.
    let mut file = log.clone();
    file.resize(log.len() + 100, 0);
    let (result, _) = replay_from(file.chain(Broken));
    assert!(matches!(result, Err(ReplayError::Io(_))), "{result:?}");
}

#[test]
fn errors_name_the_offset() {
    let error = ReplayError::Corrupt {
        offset: 1234,
        reason: "checksum mismatch".into(),
        replayed: Replayed {
            good_len: 1234,
            torn_at: None,
            records: 5,
        },
    };
    assert_eq!(
        error.to_string(),
        "corrupt record at offset 1234: checksum mismatch"
    );
}

fn finite() -> impl Strategy<Value = f64> {
    use prop::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
    prop_oneof![
        POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO,
        -1e10..1e10f64,
        Just(f64::MAX),
        Just(-f64::MAX),
    ]
}

fn token() -> impl Strategy<Value = u64> {
    prop_oneof![Just(1), Just(MAX_TOKEN), 1..=MAX_TOKEN]
}

fn id() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..48).prop_map(Bytes::from)
}

fn expires_at() -> impl Strategy<Value = f64> {
    prop_oneof![finite(), Just(f64::INFINITY)]
}

/// A type 14 `Put`'s `acquired_at` and heartbeats, or none (type 1).
fn tenure_start() -> impl Strategy<Value = Option<(f64, u32)>> {
    let acquired_at = prop_oneof![finite(), Just(f64::NEG_INFINITY)];
    prop::option::of((acquired_at, any::<u32>()))
}

fn past_tenure() -> impl Strategy<Value = PastTenure> {
    let end = prop::sample::select(TenureEnd::ALL.to_vec());
    (
        id(),
        token(),
        finite(),
        expires_at(),
        end,
        finite(),
        any::<u32>(),
    )
        .prop_map(
            |(worker_id, fencing_token, acquired_at, expires_at, end, released_at, heartbeats)| {
                PastTenure {
                    worker_id,
                    fencing_token,
                    acquired_at,
                    expires_at,
                    end,
                    ended_at: if end == TenureEnd::Expired {
                        expires_at
                    } else {
                        released_at
                    },
                    heartbeats,
                }
            },
        )
}

fn change() -> impl Strategy<Value = Change> {
    use prop::num::f64::{NORMAL, POSITIVE, SUBNORMAL};
    let ttl = prop_oneof![POSITIVE | NORMAL | SUBNORMAL, 0.001..1e6f64];
    prop_oneof![
        (id(), id(), token(), expires_at(), ttl, tenure_start()).prop_map(
            |(run_id, worker_id, fencing_token, expires_at, ttl, tenure)| Change::Put {
                run_id,
                worker_id,
                fencing_token,
                expires_at,
                ttl,
                acquired_at: tenure.map(|(at, _)| at),
                heartbeats: tenure.map_or(0, |(_, beats)| beats),
            }
        ),
        (token(), expires_at(), any::<u32>()).prop_map(
            |(fencing_token, expires_at, heartbeats)| Change::Beat {
                fencing_token,
                expires_at,
                heartbeats,
            }
        ),
        (token(), finite()).prop_map(|(fencing_token, at)| Change::Release { fencing_token, at }),
        id().prop_map(|run_id| Change::Forget { run_id }),
        (id(), past_tenure()).prop_map(|(run_id, tenure)| Change::Past { run_id, tenure }),
        (token(), expires_at()).prop_map(|(fencing_token, expires_at)| Change::Extend {
            fencing_token,
            expires_at,
        }),
        token().prop_map(|fencing_token| Change::Remove { fencing_token }),
        prop_oneof![finite(), Just(f64::NEG_INFINITY)].prop_map(Change::Time),
        (0..=MAX_TOKEN).prop_map(Change::LastToken),
    ]
}

proptest! {
    #[test]
    fn random_logs_replay_in_order_through_small_reads(
        changes in prop::collection::vec(change(), 0..40),
        sizes in prop::collection::vec(1usize..24, 1..8),
        interrupts: bool,
    ) {
        let (log, _) = log_of(&changes);
        let (result, applied) = replay_from(Chunked::new(&log, sizes, interrupts));
        prop_assert_eq!(result, clean(log.len() as u64, changes.len()));
        prop_assert_eq!(bits(&applied), bits(&changes));
    }

    #[test]
    fn garbage_after_the_header_never_panics(
        garbage in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let file = [HEADER, &garbage].concat();
        let (result, applied) = replay_from(&file[..]);
        match result {
            Ok(replayed) => {
                prop_assert_eq!(replayed.records as usize, applied.len());
                match replayed.torn_at {
                    Some(at) => {
                        prop_assert_eq!(at, replayed.good_len);
                        prop_assert!(at < file.len() as u64);
                    }
                    None => prop_assert_eq!(replayed.good_len, file.len() as u64),
                }
            }
            Err(ReplayError::Corrupt { offset, replayed, .. }) => {
                prop_assert_eq!(offset, replayed.good_len);
                prop_assert_eq!(replayed.torn_at, None);
                prop_assert_eq!(replayed.records as usize, applied.len());
            }
            Err(other) => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn damaged_logs_apply_only_the_records_before_the_damage(
        changes in prop::collection::vec(change(), 1..12),
        damage in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let (original, bounds) = log_of(&changes);
        let mut log = original.clone();
        let records_len = log.len() - HEADER.len();
        for (at, mask) in damage {
            log[HEADER.len() + at.index(records_len)] ^= mask;
        }
        let (_, applied) = replay_from(&log[..]);
        // Two masks on one byte can cancel out.
        let intact = match log.iter().zip(&original).position(|(a, b)| a != b) {
            Some(first) => bounds.iter().rposition(|&b| b <= first as u64).unwrap(),
            None => changes.len(),
        };
        prop_assert!(applied.len() <= intact);
        prop_assert_eq!(bits(&applied), bits(&changes[..applied.len()]));
    }
}

#[test]
fn run_data_records_are_laid_out_as_documented() {
    let cases = [
        (
            Change::SetData {
                run_id: Bytes::from_static(b"r"),
                value: Bytes::from_static(b"vv"),
                fencing_token: 3,
                written_at: 2.0,
            },
            [
                &[7][..],
                &[1, 0, 0, 0],
                b"r",
                &[3, 0, 0, 0, 0, 0, 0, 0],
                &[0, 0, 0, 0, 0, 0, 0, 0x40],
                &[2, 0, 0, 0],
                b"vv",
            ]
            .concat(),
        ),
        (
            Change::DelData {
                run_id: Bytes::from_static(b"ab"),
            },
            vec![8, 2, 0, 0, 0, b'a', b'b'],
        ),
        (
            Change::Orphan {
                run_id: Bytes::from_static(b"a"),
                at: 2.0,
            },
            vec![9, 1, 0, 0, 0, b'a', 0, 0, 0, 0, 0, 0, 0, 0x40],
        ),
    ];
    for (change, payload) in cases {
        let mut out = BytesMut::new();
        encode(&change, &mut out);
        assert_eq!(&out[FRAME_HEADER_LEN..], &payload[..], "{change:?}");
        assert_eq!(payload_len(&change), payload.len() as u64);
        // Every cut inside the payload is a torn record, not corruption.
        let file = [HEADER, &out[..]].concat();
        for cut in HEADER.len() + FRAME_HEADER_LEN..file.len() {
            let (result, applied) = replay_from(&file[..cut]);
            assert_eq!(
                result,
                torn(HEADER.len() as u64, 0),
                "{change:?} cut at {cut}"
            );
            assert!(applied.is_empty());
        }
    }
}

#[test]
fn run_data_records_with_bad_lengths_or_values_are_corrupt() {
    let set = |run: &[u8], token: u64, at: f64, value: &[u8]| {
        [
            &[7][..],
            &(run.len() as u32).to_le_bytes(),
            run,
            &token.to_le_bytes(),
            &at.to_le_bytes(),
            &(value.len() as u32).to_le_bytes(),
            value,
        ]
        .concat()
    };
    let mut value_overrun = set(b"r", 1, 1.0, b"v");
    value_overrun[22..26].copy_from_slice(&9u32.to_le_bytes());
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (set(b"r", 0, 1.0, b"v"), "fencing token 0 "),
        (set(b"r", 1, f64::NAN, b"v"), "written_at is NaN"),
        (set(b"r", 1, f64::INFINITY, b"v"), "written_at is inf"),
        (value_overrun, "set-data record"),
        (vec![8, 5, 0, 0, 0, b'a'], "5-byte run id"),
        (vec![8, 1, 0, 0, 0, b'a', b'b'], "a del-data record"),
        (
            [&[9, 1, 0, 0, 0, b'a'][..], &f64::NAN.to_le_bytes()].concat(),
            "at is NaN",
        ),
        (vec![9, 0, 0, 0], "an orphan record is at least 13 bytes"),
    ];
    let at = HEADER.len() as u64;
    for (payload, expected) in cases {
        let file = [HEADER, &frame(&payload)].concat();
        let (result, applied) = replay_from(&file[..]);
        let reason = assert_corrupt(result, at, 0);
        assert!(reason.contains(expected), "{reason:?} for {payload:?}");
        assert!(applied.is_empty());
    }
}
