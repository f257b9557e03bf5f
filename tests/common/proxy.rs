//! A TCP proxy of our own between two cluster nodes, so a test can break
//! one link the way networks break (no tc or iptables here): each
//! direction passes, drops every byte (a silent partition: the sender
//! sees no error, the receiver nothing), or is delayed; and every
//! connection can be reset at once.
//!
//! Threads, not tasks: it serves tests whose servers are separate
//! processes, and it stops when it is dropped (its listener is woken and
//! every pump exits at its next read).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// What a direction of the link does with the bytes it carries.
#[allow(dead_code)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    Pass,
    /// Read and thrown away.
    Drop,
    /// Passed after this long (per read).
    Delay(Duration),
}

#[derive(Debug)]
struct Link {
    /// Towards the target, and back.
    forth: Mutex<Mode>,
    back: Mutex<Mode>,
    /// Both ends of every connection, to reset them.
    open: Mutex<Vec<TcpStream>>,
    stopped: AtomicBool,
}

/// A proxy listening on 127.0.0.1 in front of `target`.
pub struct Proxy {
    pub addr: SocketAddr,
    link: Arc<Link>,
}

#[allow(dead_code)]
impl Proxy {
    pub fn start(target: SocketAddr) -> Proxy {
        Proxy::start_on(0, target)
    }

    /// A proxy on a port chosen by the test (as a node's configuration
    /// names it before the proxy starts).
    pub fn start_on(port: u16, target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("proxy listener");
        let addr = listener.local_addr().expect("proxy address");
        let link = Arc::new(Link {
            forth: Mutex::new(Mode::Pass),
            back: Mutex::new(Mode::Pass),
            open: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
        });
        let accepting = link.clone();
        thread::spawn(move || accept(listener, target, accepting));
        Proxy { addr, link }
    }

    /// Towards the target.
    pub fn set_forth(&self, mode: Mode) {
        *self.link.forth.lock().unwrap() = mode;
    }

    /// From the target back.
    pub fn set_back(&self, mode: Mode) {
        *self.link.back.lock().unwrap() = mode;
    }

    /// Both directions.
    pub fn set(&self, mode: Mode) {
        self.set_forth(mode);
        self.set_back(mode);
    }

    /// Closes every connection through the proxy now (new ones pass).
    pub fn reset(&self) {
        for stream in self.link.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.link.stopped.store(true, Ordering::SeqCst);
        self.reset();
        // Wakes the accept loop so it sees it has stopped.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
    }
}

fn accept(listener: TcpListener, target: SocketAddr, link: Arc<Link>) {
    for incoming in listener.incoming() {
        if link.stopped.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = incoming else { continue };
        let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(1)) else {
            // The target is down: the connecting node sees a closed link.
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
            continue;
        };
        {
            let mut open = link.open.lock().unwrap();
            open.extend(client.try_clone());
            open.extend(server.try_clone());
        }
        let (forth, back) = (link.clone(), link.clone());
        thread::spawn(move || pump(client, server, &forth, |link| *link.forth.lock().unwrap()));
        thread::spawn(move || pump(server2, client2, &back, |link| *link.back.lock().unwrap()));
    }
}

/// Copies `from` to `to` as the direction's mode says, until either end
/// closes.
fn pump(mut from: TcpStream, mut to: TcpStream, link: &Link, mode: impl Fn(&Link) -> Mode) {
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if link.stopped.load(Ordering::SeqCst) {
            break;
        }
        match mode(link) {
            Mode::Pass => {}
            Mode::Drop => continue,
            Mode::Delay(delay) => thread::sleep(delay),
        }
        if to.write_all(&buffer[..read]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
