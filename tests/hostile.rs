//! Hostile input from many clients: random bytes, and every cut of a valid
//! pipeline. The server must answer what is complete, close what is not
//! when the client leaves, and go on serving everyone else.

mod common;

use std::io::Write;
use std::net::Shutdown;

use common::binary::Server;
use common::client::run;
use common::raw::{read_to_close, resp, show};
use redis::Value;

/// A small deterministic generator (xorshift64*), so a failure repeats.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> usize {
        (self.next() % n) as usize
    }
}

/// Random bytes, biased towards the bytes RESP gives meaning to, so that
/// the input reaches the decoder's deeper states and not only its first
/// check.
fn garbage(random: &mut Random) -> Vec<u8> {
    const MEANINGFUL: &[u8] = b"*$\r\n0123456789-+: \"'\\x";
    let len = random.below(300);
    (0..len)
        .map(|_| match random.below(3) {
            0 => random.next() as u8,
            _ => MEANINGFUL[random.below(MEANINGFUL.len() as u64)],
        })
        .collect()
}

#[test]
fn random_bytes_from_many_clients_harm_no_one() {
    let server = Server::start();
    let mut bystander = server.connect();
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    for round in 0..300 {
        let mut s = server.raw();
        let input = garbage(&mut random);
        // Some clients vanish mid-stream, the others wait for the end.
        if s.write_all(&input).is_err() {
            continue;
        }
        if round % 2 == 0 {
            let _ = s.shutdown(Shutdown::Write);
            let _ = read_to_close(&mut s);
        }
    }
    assert_eq!(
        run(&mut bystander, &["PING"]),
        Value::SimpleString("PONG".into())
    );
    let value = run(
        &mut bystander,
        &["LEASE.ACQUIRE", "after-garbage", "w", "0"],
    );
    assert_eq!(common::client::lease_reply(&value).run_id, b"after-garbage");
}

#[test]
fn every_cut_of_a_pipeline_answers_its_complete_requests_and_closes() {
    let server = Server::start();
    let requests = [
        resp(&[b"PING"]),
        resp(&[b"ECHO", b"hello\r\nworld"]),
        b"PING inline\r\n".to_vec(),
        resp(&[b"LEASE.GET", b"no-such-run", b"0"]),
    ];
    let replies: [&[u8]; 4] = [
        b"+PONG\r\n",
        b"$12\r\nhello\r\nworld\r\n",
        b"$6\r\ninline\r\n",
        b"$-1\r\n",
    ];
    let stream: Vec<u8> = requests.concat();
    for cut in 0..=stream.len() {
        let mut s = server.raw();
        s.write_all(&stream[..cut]).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        // The replies to the requests wholly inside the cut, then the
        // close: a half request is dropped, never answered or waited for.
        let mut complete = 0;
        let mut expected = Vec::new();
        for (request, reply) in requests.iter().zip(replies) {
            complete += request.len();
            if complete > cut {
                break;
            }
            expected.extend_from_slice(reply);
        }
        let got = read_to_close(&mut s);
        assert_eq!(show(&got), show(&expected), "cut at byte {cut}");
    }
    let mut con = server.connect();
    assert_eq!(run(&mut con, &["PING"]), Value::SimpleString("PONG".into()));
}
