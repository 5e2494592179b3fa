//! ringcapd's control plane: the messages between the daemon and its
//! unprivileged clients, their codec, and the Unix socket that carries them.
//!
//! The daemon is a security boundary and this crate is where client bytes
//! cross it. Every byte a client sends is hostile until
//! [`decode_request`] (the one function that turns bytes into a
//! [`Request`]) has checked the size, the header, the JSON against the types
//! (`deny_unknown_fields` everywhere) and every value against its bounds
//! ([`Request::validate`]). It never panics, whatever the input; a fuzz target
//! (`crates/proto/fuzz`) and a mutation test drive it to keep it so.
//!
//! Modules:
//! - [`messages`]: the [`Request`] and [`Response`] types (what may be said);
//! - [`codec`]: the 8-byte header + JSON body wire format, encode and decode;
//! - [`validate`]: the bounds on every value (names, filters, numbers);
//! - [`transport`]: `SOCK_SEQPACKET` send/recv with SCM_RIGHTS descriptors,
//!   the only module that does I/O;
//! - [`flows`]: flow records through the daemon (the request, the settings
//!   in force, and the binary flow chunks of the ring);
//! - [`error`]: [`ProtoError`], why bytes were refused, in words.
//!
//! A round trip, client side:
//!
//! ```
//! use ringcap_proto::*;
//!
//! let (client, daemon) = transport::pair().unwrap();
//! let request = Request::SetFilter { filter: "tcp port 80".into(), program: None };
//! transport::send(&client, &encode_request(&request), &[]).unwrap();
//!
//! let mut buf = Box::new([0u8; MAX_DATAGRAM]);
//! let (len, fds) = transport::recv(&daemon, &mut buf).unwrap().unwrap();
//! let fds: [_; 0] = transport::expect_fds(fds).unwrap(); // requests carry none
//! assert_eq!(decode_request(&buf[..len]).unwrap(), request);
//! ```
//!
//! The design sketch called this layer "length-prefixed"; with
//! `SOCK_SEQPACKET` the kernel keeps the message boundaries, so the length is
//! the datagram's and there is no prefix a client could lie about.

pub mod codec;
pub mod error;
pub mod flows;
pub mod messages;
pub mod transport;
pub mod validate;

pub use codec::{
    decode_request, decode_response, encode_request, encode_response, MessageKind, HEADER_LEN,
    MAGIC, MAX_DATAGRAM, MAX_MESSAGE, VERSION,
};
pub use error::ProtoError;
pub use flows::{decode_flow_chunk, FlowEntry, FlowRequest, FlowSettings};
pub use messages::{
    DumpFile, DumpRequest, Effective, FilterProgram, InjectFrame, InjectReport, InjectStatus,
    OutputFormat, Request, Response, RingInfo, SampleRequest, SessionCounters, SessionInfo,
    SnapRequest, ENDED_AS_ASKED,
};
pub use transport::{
    ACCEPTED_FDS, ACCEPTED_FD_CONSUMER, ACCEPTED_FD_EVENT, ACCEPTED_FD_RING, DUMP_FDS, MAX_FDS,
    RETRIEVING_FDS,
};
