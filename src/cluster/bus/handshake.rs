//! The handshake that opens every bus connection, and the proof of
//! `cluster-secret` in it.
//!
//! ```text
//! client                              server
//!   Hello { protocol, from, kind }  ->
//!                                   <-  Challenge { server, nonce? }
//!   Proof { mac? }                  ->
//!                                   <-  Welcome | Refused(reason), then close
//! ```
//!
//! A server with a secret sends a fresh random nonce; the client answers
//! HMAC-SHA256(secret, nonce ‖ hello ‖ server id), so the secret never
//! crosses the wire and a proof is good for one connection to one node
//! only. A server without a secret (a loopback cluster) sends no nonce and
//! asks no proof. Only the client proves itself: the server is trusted to
//! be the node at the address in the membership.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncWrite};

use super::frame::{FrameError, MAX_HANDSHAKE_FRAME, read_frame, write_frame};
use super::wire::{Challenge, Hello, PROTOCOL, Proof, Verdict};
use crate::cluster::types::NodeId;

/// Why a handshake failed.
#[derive(Debug)]
pub enum HandshakeError {
    Frame(FrameError),
    /// The server refused us, saying why.
    Refused(String),
    /// Another node answers at the target's address.
    WrongNode {
        expected: NodeId,
        found: NodeId,
    },
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::Frame(error) => write!(f, "handshake: {error}"),
            HandshakeError::Refused(reason) => write!(f, "refused by peer: {reason}"),
            HandshakeError::WrongNode { expected, found } => {
                write!(f, "expected node {expected}, node {found} answered")
            }
        }
    }
}

impl From<FrameError> for HandshakeError {
    fn from(error: FrameError) -> Self {
        HandshakeError::Frame(error)
    }
}

/// The proof of `secret` for this challenge.
pub fn prove(secret: &[u8], nonce: &[u8; 32], hello: &Hello, server: NodeId) -> [u8; 32] {
    // Fixed-width fields, so no two different inputs share an encoding.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(b"leased bus\0");
    mac.update(nonce);
    mac.update(&hello.protocol.to_be_bytes());
    mac.update(&hello.from.to_be_bytes());
    mac.update(&[hello.kind.as_byte()]);
    mac.update(&server.to_be_bytes());
    mac.finalize().into_bytes().into()
}

/// The client's side: says who it is, proves the secret if asked, and
/// returns the server's node id once welcomed.
pub async fn introduce<S>(
    stream: &mut S,
    hello: Hello,
    secret: Option<&[u8]>,
    expected: Option<NodeId>,
) -> Result<NodeId, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    write_frame(stream, &hello).await?;
    let challenge: Challenge = read_frame(stream, MAX_HANDSHAKE_FRAME).await?;
    if let Some(expected) = expected
        && challenge.server != expected
    {
        return Err(HandshakeError::WrongNode {
            expected,
            found: challenge.server,
        });
    }
    // Without a secret the client still answers, with no proof: the
    // server refuses it and logs why, where its operator looks.
    let mac = match (challenge.nonce, secret) {
        (Some(nonce), Some(secret)) => Some(prove(secret, &nonce, &hello, challenge.server)),
        _ => None,
    };
    write_frame(stream, &Proof { mac }).await?;
    match read_frame(stream, MAX_HANDSHAKE_FRAME).await? {
        Verdict::Welcome => Ok(challenge.server),
        Verdict::Refused(reason) => Err(HandshakeError::Refused(reason)),
    }
}

/// Why the server refused a client; the client was told (when the
/// connection still allowed it).
#[derive(Debug)]
pub enum Refusal {
    /// The connection failed or the client spoke nonsense.
    Frame(FrameError),
    /// A well-formed handshake that does not pass.
    Denied(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Frame(error) => write!(f, "{error}"),
            Refusal::Denied(reason) => write!(f, "{reason}"),
        }
    }
}

impl From<FrameError> for Refusal {
    fn from(error: FrameError) -> Self {
        Refusal::Frame(error)
    }
}

/// The server's side: returns the client's [`Hello`] once it passed.
pub async fn admit<S>(
    stream: &mut S,
    server: NodeId,
    secret: Option<&[u8]>,
) -> Result<Hello, Refusal>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let hello: Hello = read_frame(stream, MAX_HANDSHAKE_FRAME).await?;
    let nonce = secret.map(|_| fresh_nonce());
    write_frame(stream, &Challenge { server, nonce }).await?;
    let proof: Proof = read_frame(stream, MAX_HANDSHAKE_FRAME).await?;
    let verdict = judge(&hello, server, secret, nonce.as_ref(), proof.mac.as_ref());
    match verdict {
        Ok(()) => {
            write_frame(stream, &Verdict::Welcome).await?;
            Ok(hello)
        }
        Err(reason) => {
            // Best effort: the client may be gone already.
            let _ = write_frame(stream, &Verdict::Refused(reason.clone())).await;
            Err(Refusal::Denied(reason))
        }
    }
}

/// Whether a client's hello and proof pass; the reason it is told if not.
fn judge(
    hello: &Hello,
    server: NodeId,
    secret: Option<&[u8]>,
    nonce: Option<&[u8; 32]>,
    mac: Option<&[u8; 32]>,
) -> Result<(), String> {
    if hello.protocol != PROTOCOL {
        return Err(format!(
            "bus protocol {} is not supported (this node speaks {PROTOCOL})",
            hello.protocol
        ));
    }
    let (Some(secret), Some(nonce)) = (secret, nonce) else {
        return Ok(());
    };
    let Some(mac) = mac else {
        return Err("cluster-secret required: no proof sent".to_string());
    };
    let expected = prove(secret, nonce, hello, server);
    match bool::from(expected.ct_eq(mac)) {
        true => Ok(()),
        false => Err("cluster-secret proof does not match".to_string()),
    }
}

fn fresh_nonce() -> [u8; 32] {
    let mut nonce = [0; 32];
    getrandom::fill(&mut nonce).expect("the OS's randomness is unavailable");
    nonce
}
