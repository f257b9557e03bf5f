//! Bytes on the wire: requests in RESP form, replies read frame by frame,
//! for tests of the protocol itself.

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;

/// Sends raw bytes and reads until `expected` bytes have arrived (or the
/// read times out), returning what came back.
#[allow(dead_code)]
pub fn exchange(stream: &mut TcpStream, request: &[u8], expected: usize) -> Vec<u8> {
    stream.write_all(request).unwrap();
    read_at_least(stream, expected)
}

#[allow(dead_code)]
pub fn read_at_least(stream: &mut TcpStream, expected: usize) -> Vec<u8> {
    let mut reply = Vec::new();
    let mut chunk = [0u8; 65536];
    while reply.len() < expected {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
            Err(_) => break,
        }
    }
    reply
}

/// A request in RESP multibulk form.
#[allow(dead_code)]
pub fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one complete RESP2 or RESP3 reply and returns its bytes exactly as
/// they arrived. Fails on end of stream, a timeout, or bytes that do not
/// frame as a reply.
#[allow(dead_code)]
pub fn read_frame(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut frame = Vec::new();
    read_frame_into(reader, &mut frame)?;
    Ok(frame)
}

fn read_frame_into(reader: &mut impl BufRead, frame: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    let start = frame.len();
    if reader.read_until(b'\n', frame)? == 0 {
        return Err(Error::new(ErrorKind::UnexpectedEof, "stream ended"));
    }
    let line = &frame[start..];
    let bad = |what: &str| {
        Error::new(
            ErrorKind::InvalidData,
            format!("{what}: {:?}", line.escape_ascii().to_string()),
        )
    };
    let Some(header) = line.strip_suffix(b"\r\n") else {
        return Err(bad("line without CRLF"));
    };
    let kind = header[0];
    let number = || -> std::io::Result<i64> {
        std::str::from_utf8(&header[1..])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("bad length"))
    };
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(()),
        b'$' | b'=' | b'!' => {
            let Ok(len) = usize::try_from(number()?) else {
                return Ok(()); // $-1
            };
            let data = frame.len();
            frame.resize(data + len + 2, 0);
            reader.read_exact(&mut frame[data..])?;
            if !frame.ends_with(b"\r\n") {
                return Err(Error::new(ErrorKind::InvalidData, "bulk without CRLF"));
            }
            Ok(())
        }
        b'*' | b'~' | b'>' | b'%' => {
            let Ok(count) = usize::try_from(number()?) else {
                return Ok(()); // *-1
            };
            let items = if kind == b'%' { 2 * count } else { count };
            for _ in 0..items {
                read_frame_into(reader, frame)?;
            }
            Ok(())
        }
        _ => Err(bad("unknown reply type")),
    }
}

/// Reads until the server closes the connection, failing if it has not
/// within the socket's read timeout.
#[allow(dead_code)]
pub fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    match stream.read_to_end(&mut all) {
        Ok(_) => all,
        Err(error) => panic!(
            "connection not closed ({error}); received so far: {:?}",
            all.escape_ascii().to_string()
        ),
    }
}

/// Bytes shown readably in assertion messages.
#[allow(dead_code)]
pub fn show(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}
