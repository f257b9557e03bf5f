//! Cluster mode with real processes on loopback: three `leased` nodes,
//! each bus link through a proxy of our own (tests/common/proxy.rs) so a
//! test can partition, delay or reset it.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use common::proxy::{Mode, Proxy};

/// An echo server, for the proxy's own test.
fn echo() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut stream = stream;
                let mut buffer = [0; 1024];
                while let Ok(read) = stream.read(&mut buffer) {
                    if read == 0 || stream.write_all(&buffer[..read]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

fn roundtrip(stream: &mut TcpStream, text: &[u8]) -> std::io::Result<Vec<u8>> {
    stream.write_all(text)?;
    let mut back = vec![0; text.len()];
    stream.read_exact(&mut back)?;
    Ok(back)
}

#[test]
fn the_proxy_passes_drops_delays_and_resets() {
    let proxy = Proxy::start(echo());
    let mut stream = TcpStream::connect(proxy.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    assert_eq!(roundtrip(&mut stream, b"one").unwrap(), b"one");

    proxy.set_forth(Mode::Drop);
    let lost = roundtrip(&mut stream, b"two").unwrap_err();
    assert_eq!(lost.kind(), std::io::ErrorKind::WouldBlock, "{lost}");

    proxy.set(Mode::Pass);
    assert_eq!(roundtrip(&mut stream, b"three").unwrap(), b"three");

    proxy.set_back(Mode::Delay(Duration::from_millis(300)));
    let started = std::time::Instant::now();
    assert_eq!(roundtrip(&mut stream, b"four").unwrap(), b"four");
    assert!(started.elapsed() >= Duration::from_millis(300));

    proxy.set(Mode::Pass);
    proxy.reset();
    let mut closed = [0; 1];
    assert_eq!(
        stream.read(&mut closed).unwrap_or(0),
        0,
        "reset closes the link"
    );
    let mut again = TcpStream::connect(proxy.addr).unwrap();
    assert_eq!(roundtrip(&mut again, b"five").unwrap(), b"five");
}
