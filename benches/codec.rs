//! Benches of the wire side: request decoding, command parsing and reply
//! encoding, on the requests and replies of ordinary lease traffic.
//!
//! Decoding is measured as a connection does it: the request bytes are
//! appended to a read buffer that is reused (standing in for the socket
//! read), every complete request in it is decoded, and the decoded
//! arguments are dropped again. A pipeline of 16 puts 16 requests in one
//! read. Parsing takes one request's arguments (prepared untimed) to a
//! typed command. Encoding appends a reply to a reused write buffer.

use std::hint::black_box;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use leased::command::{self, Command};
use leased::registry::Lease;
use leased::registry::Op;
use leased::reply::{Protocol, Reply};
use leased::request::{Limits, RequestDecoder};

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How many requests one read holds in the pipelined benches.
const PIPELINE: usize = 16;

/// The RESP2 multibulk a client sends for `args`.
fn multibulk(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

const ACQUIRE: [&[u8]; 3] = [b"LEASE.ACQUIRE", b"run:123456", b"worker-12"];
const HEARTBEAT: [&[u8]; 3] = [
    b"LEASE.HEARTBEAT",
    b"run:123456:worker-12:1234567",
    b"1234567",
];

fn decode_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1500));
    for (name, args) in [("acquire", ACQUIRE), ("heartbeat", HEARTBEAT)] {
        let one = multibulk(&args);
        for count in [1, PIPELINE] {
            let read = one.repeat(count);
            group.throughput(Throughput::Elements(count as u64));
            let id = if count == 1 {
                format!("{name}/single")
            } else {
                format!("{name}/pipeline_{count}")
            };
            group.bench_function(id, |b| {
                let mut decoder = RequestDecoder::new(Limits::default());
                let mut buf = BytesMut::with_capacity(16 * 1024);
                let mut requests = Vec::new();
                b.iter(|| {
                    buf.extend_from_slice(&read);
                    decoder
                        .decode(&mut buf, &mut requests)
                        .expect("a valid request");
                    assert_eq!(requests.len(), count);
                    black_box(&requests);
                    requests.clear();
                })
            });
        }
    }
    group.finish();
}

fn parse_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1500));
    for (name, args) in [("acquire", ACQUIRE), ("heartbeat", HEARTBEAT)] {
        // Arguments as the decoder hands them over: slices of one read.
        let read = Bytes::from(multibulk(&args));
        let mut decoded = Vec::new();
        RequestDecoder::new(Limits::default())
            .decode(&mut BytesMut::from(&read[..]), &mut decoded)
            .expect("a valid request");
        let request = decoded.pop().expect("one request");
        group.bench_function(name, |b| {
            b.iter(|| {
                let parsed = command::parse(&request);
                assert!(matches!(
                    parsed,
                    Ok(Command::Lease(Op::Acquire { .. } | Op::Heartbeat { .. }))
                ));
                parsed
            })
        });
    }
    group.finish();
}

fn encode_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("encode");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1500));
    // An acquire's reply as the core builds it, with an `expires_at` of the
    // shape the server's clock gives (wall-clock seconds with a fraction,
    // plus the TTL).
    let lease = Lease {
        run_id: Bytes::from_static(b"run:123456"),
        worker_id: Bytes::from_static(b"worker-12"),
        fencing_token: 1_234_567,
        expires_at: 1_764_748_810.251_234_5,
    };
    let replies = [
        ("acquire_lease", Reply::lease(lease.clone(), None)),
        ("int", Reply::Int(1)),
        ("ok", Reply::OK),
        ("null", Reply::Null),
    ];
    for (name, reply) in &replies {
        for (protocol, label) in [(Protocol::Resp2, "resp2"), (Protocol::Resp3, "resp3")] {
            group.bench_function(format!("{name}/{label}"), |b| {
                let mut out = BytesMut::with_capacity(16 * 1024);
                b.iter(|| {
                    out.clear();
                    reply.encode(protocol, &mut out);
                    black_box(&out);
                })
            });
        }
    }
    // Building that reply from the registry's lease (the lease id is
    // formatted here), which the core does before the connection encodes.
    group.bench_function("acquire_lease/build", |b| {
        b.iter(|| Reply::lease(black_box(lease.clone()), None))
    });
    group.finish();
}

criterion_group!(benches, decode_benches, parse_benches, encode_benches);
criterion_main!(benches);
