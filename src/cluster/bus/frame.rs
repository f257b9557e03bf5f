//! The bus's framing: `[u32 length BE][u32 CRC-32 BE of payload][payload]`,
//! the payload one postcard-encoded message.
//!
//! The length is checked against a limit before anything is buffered, and
//! the payload is read as it arrives rather than allocated up front, so a
//! peer that claims a huge frame costs nothing until it sends the bytes. A
//! CRC mismatch is an error: the stream can no longer be trusted, and the
//! caller closes the connection.

use std::fmt;
use std::io;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest payload a connection takes once the handshake is done:
/// room for a snapshot, which travels as one frame.
pub const MAX_FRAME: u32 = 512 << 20;

/// The largest payload before the peer has proved who it is.
pub const MAX_HANDSHAKE_FRAME: u32 = 4096;

/// Length and CRC, each a big-endian `u32`.
const HEADER: usize = 8;

/// A payload is read this much at a time until it has shown it is real.
const CHUNK: usize = 64 << 10;

#[derive(Debug)]
pub enum FrameError {
    Io(io::Error),
    /// The peer closed the connection between frames.
    Closed,
    TooLong {
        len: u64,
        max: u32,
    },
    Corrupt {
        expected: u32,
        found: u32,
    },
    Encode(postcard::Error),
    Decode(postcard::Error),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Io(error) => write!(f, "{error}"),
            FrameError::Closed => write!(f, "connection closed by peer"),
            FrameError::TooLong { len, max } => {
                write!(f, "frame of {len} bytes is over the limit of {max}")
            }
            FrameError::Corrupt { expected, found } => {
                write!(
                    f,
                    "frame CRC mismatch: header {expected:#010x}, payload {found:#010x}"
                )
            }
            FrameError::Encode(error) => write!(f, "cannot encode message: {error}"),
            FrameError::Decode(error) => write!(f, "cannot decode message: {error}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<io::Error> for FrameError {
    fn from(error: io::Error) -> Self {
        FrameError::Io(error)
    }
}

/// `message` framed: header and payload, ready to write.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    let mut frame = postcard::to_extend(message, vec![0; HEADER]).map_err(FrameError::Encode)?;
    let len = (frame.len() - HEADER) as u64;
    if len > u64::from(MAX_FRAME) {
        return Err(FrameError::TooLong {
            len,
            max: MAX_FRAME,
        });
    }
    let crc = crc32fast::hash(&frame[HEADER..]);
    frame[..4].copy_from_slice(&(len as u32).to_be_bytes());
    frame[4..HEADER].copy_from_slice(&crc.to_be_bytes());
    Ok(frame)
}

/// Writes `message` as one frame and flushes it.
pub async fn write_frame<W, T>(writer: &mut W, message: &T) -> Result<(), FrameError>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    let frame = encode(message)?;
    writer.write_all(&frame).await?;
    writer.flush().await?;
    Ok(())
}

/// Reads one frame's payload, at most `max` bytes, checked against its CRC.
pub async fn read_payload<R>(reader: &mut R, max: u32) -> Result<Vec<u8>, FrameError>
where
    R: AsyncRead + Unpin,
{
    let mut header = [0; HEADER];
    read_header(reader, &mut header).await?;
    let len = u32::from_be_bytes(header[..4].try_into().unwrap());
    let expected = u32::from_be_bytes(header[4..].try_into().unwrap());
    if len > max {
        return Err(FrameError::TooLong {
            len: u64::from(len),
            max,
        });
    }
    let payload = read_exact_growing(reader, len as usize).await?;
    let found = crc32fast::hash(&payload);
    if found != expected {
        return Err(FrameError::Corrupt { expected, found });
    }
    Ok(payload)
}

/// `len` bytes, buffered as they arrive: room for all of them is taken
/// only once the first [`CHUNK`] came, so a length alone allocates little.
async fn read_exact_growing<R>(reader: &mut R, len: usize) -> Result<Vec<u8>, FrameError>
where
    R: AsyncRead + Unpin,
{
    let mut payload = Vec::with_capacity(len.min(CHUNK));
    while payload.len() < len {
        let start = payload.len();
        if start > 0 && payload.capacity() < len {
            payload.reserve_exact(len - start);
        }
        payload.resize(start + (len - start).min(CHUNK), 0);
        reader.read_exact(&mut payload[start..]).await?;
    }
    Ok(payload)
}

/// The header; end of stream before its first byte is a clean close,
/// within it a truncated frame.
async fn read_header<R>(reader: &mut R, header: &mut [u8; HEADER]) -> Result<(), FrameError>
where
    R: AsyncRead + Unpin,
{
    let mut filled = 0;
    while filled < HEADER {
        match reader.read(&mut header[filled..]).await? {
            0 if filled == 0 => return Err(FrameError::Closed),
            0 => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            n => filled += n,
        }
    }
    Ok(())
}

/// Reads one frame and decodes its message.
pub async fn read_frame<R, T>(reader: &mut R, max: u32) -> Result<T, FrameError>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    let payload = read_payload(reader, max).await?;
    postcard::from_bytes(&payload).map_err(FrameError::Decode)
}
