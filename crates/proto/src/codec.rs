//! The codec: messages to bytes and, through one function per direction,
//! bytes back to checked messages.
//!
//! # Wire format
//!
//! One message is one `SOCK_SEQPACKET` datagram (the kernel keeps the
//! boundaries, so there is no length prefix to trust or to get wrong):
//!
//! | offset | size | field                                                   |
//! |--------|------|---------------------------------------------------------|
//! | 0      | 4    | magic `b"RCD1"`                                         |
//! | 4      | 2    | protocol version, big-endian, = [`VERSION`] (1)         |
//! | 6      | 2    | kind, big-endian: 1 = request, 2 = response             |
//! | 8      | ≤ 64 KiB | body: one JSON object (UTF-8), see [`crate::messages`] |
//!
//! The design left the last header field "kind/reserved"; it carries the
//! direction so that a response looped back to the daemon (or a request sent
//! to a client) is refused by the header alone instead of by luck of the
//! JSON tags. Big-endian because it is network order and the magic then
//! reads `RCD1 0001 0001` in a hex dump.
//!
//! # Decoding order
//!
//! [`decode_request`] is the daemon's only way from client bytes to a
//! [`Request`]; each step rejects before the next costs anything:
//! 1. size: the body is at most [`MAX_MESSAGE`] bytes, before anything is
//!    parsed;
//! 2. header: length, magic, version, kind;
//! 3. serde_json into the typed message, `deny_unknown_fields` throughout
//!    (serde_json also bounds nesting depth at 128, so no input can overflow
//!    the stack);
//! 4. [`Request::validate`]: every string, list and number within bounds.
//!
//! [`decode_response`] does the same for the client.
//!
//! Encoding does not validate (it cannot fail, so that replying to an error
//! never needs an error path of its own): a sender that builds messages from
//! outside data calls `validate()` first, or relies on the peer refusing.

use serde::Serialize;

use crate::error::ProtoError;
pub use crate::messages::MessageKind;
use crate::messages::{Request, Response};

/// First four bytes of every message.
pub const MAGIC: [u8; 4] = *b"RCD1";

/// The protocol version this crate speaks.
pub const VERSION: u16 = 1;

/// Bytes of the header before the JSON body.
pub const HEADER_LEN: usize = 8;

/// Largest JSON body accepted, in bytes. Bodies over it are refused before
/// parsing.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// Largest datagram (header + body): the receive buffer's size.
pub const MAX_DATAGRAM: usize = HEADER_LEN + MAX_MESSAGE;

/// Encodes a request: header + JSON body. Does not validate and does not
/// enforce the size limit (see the module docs); the peer does both.
pub fn encode_request(request: &Request) -> Vec<u8> {
    encode(MessageKind::Request, request)
}

/// Encodes a response: header + JSON body. Does not validate and does not
/// enforce the size limit (see the module docs); the peer does both.
pub fn encode_response(response: &Response) -> Vec<u8> {
    encode(MessageKind::Response, response)
}

/// Decodes and checks a request: the one function through which client bytes
/// become a [`Request`]. Never panics.
pub fn decode_request(bytes: &[u8]) -> Result<Request, ProtoError> {
    let body = check_header(bytes, MessageKind::Request)?;
    let request: Request = serde_json::from_slice(body).map_err(|e| ProtoError::from_json(&e))?;
    request.validate()?;
    Ok(request)
}

/// Decodes and checks a response: the one function through which daemon
/// bytes become a [`Response`]. Never panics.
pub fn decode_response(bytes: &[u8]) -> Result<Response, ProtoError> {
    let body = check_header(bytes, MessageKind::Response)?;
    let response: Response = serde_json::from_slice(body).map_err(|e| ProtoError::from_json(&e))?;
    response.validate()?;
    Ok(response)
}

fn encode<T: Serialize>(kind: MessageKind, message: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&(kind as u16).to_be_bytes());
    // Serializing these types into a Vec cannot fail: no maps with
    // non-string keys, no I/O, and non-finite floats become `null`.
    serde_json::to_writer(&mut out, message).expect("message types always serialize");
    out
}

/// Checks the size and the header; returns the body.
fn check_header(bytes: &[u8], expected: MessageKind) -> Result<&[u8], ProtoError> {
    // Size first: the bound that protects the daemon applies whatever the
    // bytes are.
    if bytes.len() > MAX_DATAGRAM {
        return Err(ProtoError::TooLarge {
            len: bytes.len() - HEADER_LEN,
        });
    }
    let Some((header, body)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Err(ProtoError::TruncatedHeader { len: bytes.len() });
    };
    let [m0, m1, m2, m3, v0, v1, k0, k1] = *header;
    let magic = [m0, m1, m2, m3];
    if magic != MAGIC {
        return Err(ProtoError::BadMagic { found: magic });
    }
    let version = u16::from_be_bytes([v0, v1]);
    if version != VERSION {
        return Err(ProtoError::UnsupportedVersion {
            found: version,
            expected,
        });
    }
    let kind = u16::from_be_bytes([k0, k1]);
    if kind != expected as u16 {
        return Err(ProtoError::WrongKind {
            found: kind,
            expected,
        });
    }
    Ok(body)
}
