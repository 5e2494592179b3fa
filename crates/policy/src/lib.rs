//! ringcapd's administrator policy: a TOML file read into an immutable
//! [`Policy`] of [`Grant`]s, the rule that picks the grant for a client, and
//! the rules that hold a client's capture request to that grant.
//!
//! Pure: the only I/O is reading the file ([`Policy::load`]) and resolving
//! user and group names to ids when it is loaded. The daemon loads a policy
//! once (and again on SIGHUP, keeping the old one if the new one has an
//! error). [`decide`] is the one admission point: request in, [`Decision`]
//! (everything enforced for the session) or [`Refusal`] out.
//!
//! # The file
//!
//! ```toml
//! socket = "/run/ringcapd/ringcapd.sock"
//! dump_dir = "/var/lib/ringcapd"
//! anonymization_key = "/etc/ringcapd/anon.key"
//!
//! [[grant]]
//! users = ["alice"]
//! groups = ["netmeasure"]
//! interfaces = ["eth0"]
//! capture_filter = "not port 22"
//! max_snaplen = "headers"
//! sample = "1:1"
//! hide = ["payload", "ip.id"]
//! anonymize = true
//! max_packets_per_second = 200000
//! max_bits_per_second = 500000000
//! max_duration = "1h"
//! dump_quota = "10G"
//! ring_size = "64M"
//! [grant.inject]
//! filter = "udp dst portrange 33434-33534"
//! settable = ["ip.ttl", "ip.id"]
//! max_packets_per_second = 100
//! burst = 10
//! ```
//!
//! Every table refuses keys it does not know, so a misspelled key is an
//! error, not a rule silently not applied. Every error gives the line and
//! column of the offending key or value ([`PolicyError`]).
//!
//! Top level (all optional):
//!
//! | key | meaning | default |
//! | --- | --- | --- |
//! | `socket` | absolute path of the control socket | `/run/ringcapd/ringcapd.sock` |
//! | `dump_dir` | absolute path under which daemon dumps go, a directory per user | `/var/lib/ringcapd` |
//! | `anonymization_key` | absolute path of the Crypto-PAn key file; required if any grant has `anonymize = true` (the file itself is read by the daemon, not here) | none |
//! | `[[grant]]` | a grant; any number, tried in file order | none: everyone is refused |
//! | `[[store]]` | `interface` and `dir`: where root's rotated, indexed captures of an interface are, for retrieval ([`retrieve`]) | none |
//!
//! `[[grant]]`:
//!
//! | key | meaning | default |
//! | --- | --- | --- |
//! | `users` | user names; each must exist (resolved to a uid at load) | `[]` |
//! | `groups` | group names; each must exist (resolved to a gid at load); a client is in a group if it is its primary or a supplementary group | `[]` |
//! | `interfaces` | interface names the grant allows, or `"*"` for any interface | required, non-empty |
//! | `capture_filter` | tcpdump-syntax filter ANDed with every client filter; must compile with libpcap (for Ethernet). It decides on the frame as the kernel delivered it (outer VLAN tag taken out, as a live tcpdump sees it; with the tag put back if the filter itself tests `vlan`), whatever the client's filter tests; like any tcpdump filter it does not look inside tunnels or MPLS (use `exclude` for that) | `""`: every packet |
//! | `exclude` | tcpdump-syntax expression for packets no client may ever see, applied at *every* layer the header walker understands: the outer frame, every IP header behind VLAN/QinQ, MPLS, GRE, VXLAN, IP-in-IP, IPv6 extension headers and authentication headers, the datagram an ICMP error quotes (walked as a packet of its own), and inner Ethernet frames. `exclude = "port 22"` means "never port 22", where `capture_filter = "not port 22"` means "not port 22 as tcpdump reads the outer headers". With a rule set, later fragments of IP datagrams (at any layer) are excluded too: their ports are in another packet. Must compile for Ethernet and for raw IP (so no link-layer terms) | `""`: none |
//! | `max_snaplen` | snap-length cap: bytes from 1 to 262144, or `"headers"`: exactly the protocol headers, at most [`HEADERS_MAX`] (256) bytes | 262144 bytes |
//! | `sample` | packet sampling forced on every session, `"1:N"` (random, in the kernel) | none |
//! | `sample_flows` | flow sampling forced on every session, `"1:N"` (both directions of a flow together); excludes `sample` | none |
//! | `hide` | fields masked before a client sees a packet, from: `eth.addr`, `ip.addr`, `ip.tos`, `ip.id`, `ip.ttl`, `ipv6.flow`, `tcp.port`, `udp.port`, `tcp.seq`, `tcp.window`, `tcp.options`, `icmp.echo`, `payload` ([`HideField`], the vocabulary of `ringcap capture --mask`) | `[]` |
//! | `anonymize` | Crypto-PAn on IPv4/IPv6 addresses (prefix-preserving) | `false` |
//! | `max_packets_per_second` | token-bucket rate of each session (each of a user's sessions, at most 16, has its own), whole number ≥ 1; the bucket holds one second of it and keeps its level across the session's filter changes and reloads; excess is counted, not silently dropped | unlimited |
//! | `max_bits_per_second` | token-bucket rate, a number ≥ 1 or a string with k/M/G/T (powers of 1000), e.g. `"500M"` | unlimited |
//! | `max_duration` | longest session: a string of numbers with units s/m/h/d, e.g. `"90s"`, `"1.5h"`, `"1h30m"` | unlimited |
//! | `dump_quota` | bytes of daemon dumps kept per user (oldest deleted beyond it): a number or a string with K/M/G/T (powers of 1024), e.g. `"10G"`; 0 = daemon dumps not allowed | 0: not allowed |
//! | `ring_size` | each session's shared-memory ring, same size syntax, from 1 MiB to 4 GiB ([`MAX_RING_SIZE`]) | 64 MiB ([`DEFAULT_RING_SIZE`]) |
//! | `flows`, `packets`, `max_flows`, `min_flow_timeout` | flow records (and whether packets too): see [`flows`] | no flow records; packets |
//! | `[grant.inject]` | injection rights | absent: no injection |
//! | `[grant.retrieve]` | retrieval of stored packets ([`retrieve`]: `max_window`, `max_bytes`, `max_queries`, `max_time`) | absent: no retrieval |
//!
//! A grant must name at least one user or group and at least one interface.
//!
//! `[grant.inject]`:
//!
//! | key | meaning | default |
//! | --- | --- | --- |
//! | `filter` | every injected frame must match this tcpdump filter; `""` allows any frame (written out, so never by accident) | required |
//! | `settable` | fields a client may set in its frames, from: `ip.ttl`, `ip.id`, `ip.tos`, `ipv6.hlim`, `ipv6.flow`, `udp.sport`, `udp.dport`, `tcp.sport`, `tcp.dport`, `tcp.seq`, `tcp.flags`, `icmp.id`, `icmp.seq`, `payload` ([`SettableField`]) | `[]` |
//! | `max_packets_per_second` | token-bucket rate of injected frames, ≥ 1; one bucket per user and interface, shared by all of that user's sessions there and charged when a frame leaves (the wire clock, not the times clients ask for): over any window T at most `burst` + rate·T frames leave | required |
//! | `max_bits_per_second` | a second token bucket, on the frames' bits (same syntax as the grant's `max_bits_per_second`); a frame is sent only if both buckets have room | none |
//! | `burst` | token-bucket depth in frames, ≥ 1; the bit bucket holds this many frames of the interface's largest size | 1 |
//!
//! # Which grant applies: first match, default deny
//!
//! [`Policy::grant_for`] tries the grants in file order, like a firewall's
//! rules, and takes the first one that both names the client — its uid is in
//! `users`, or its gid or one of its supplementary groups is in `groups`
//! (identity from the kernel, SO_PEERCRED) — and allows the interface. A
//! grant that names the client but not the interface does not stop the
//! search: a later grant may allow that interface. Grants never merge: the
//! one that applies is the whole of what the client gets. No match: refused.
//! So put narrow grants (a user, one interface) before broad ones (a group,
//! `"*"`).
//!
//! # How a request is combined with its grant ([`decide`])
//!
//! - **Interface**: must be one the grant allows, else refused (rule
//!   `interfaces`).
//! - **Filter**: the client's filter must compile *alone* (else refused with
//!   libpcap's message, rule `filter`). The grant's `capture_filter` and the
//!   client's filter are compiled separately and combined instruction by
//!   instruction ([`Program::and`]): the framework runs first, and only where
//!   it accepts does the client's code run. No client text, however built
//!   ("tcp) or (udp"), is ever parsed together with the framework, so none can
//!   widen it. The text "(framework) and (client)" is kept for display only.
//! - **Snap length**: the narrower of request and cap ([`cap_snap`]): bytes
//!   are the smaller of the two bounds, and the result is headers-only if
//!   either side is. A request above the cap is capped, not refused.
//! - **Sampling**: the stricter of request and forced ([`force_sampling`]):
//!   of the same kind, the larger N; a request without sampling gets the
//!   forced one. Packet sampling cannot stand in for forced flow sampling or
//!   the reverse: such a request is refused (rule `sample` or
//!   `sample_flows`).
//! - **Hide, anonymize, rates, duration, dump quota, ring size**: the grant's,
//!   as they are; the client does not choose them.
//!
//! [`Refusal::rule`] names the rule: a policy key as above, `filter` for the
//! client's own filter, or `default deny` when no grant applies.
//!
//! Grant numbers in texts ([`Policy::describe`], [`Refusal`]'s and
//! [`Decision`]'s `Display`) count from 1, in file order; the `index`
//! fields of the API count from 0.
//!
//! [`Program::and`]: ringcap_stages::Program::and

pub mod admit;
pub mod decide;
mod describe;
pub mod error;
pub mod fields;
pub mod flows;
pub mod policy;
pub mod retrieve;
mod source;
pub mod units;

pub use admit::{cap_snap, combined_filter_text, force_sampling, Refusal, MAX_CLIENT_FILTER_LEN};
pub use decide::decide_retrieve;
pub use decide::{decide, Decision, OpenRequest, MIN_RING};
pub use error::PolicyError;
pub use fields::{HideField, SettableField};
pub use flows::{FlowGrant, FLOW_BYTES};
pub use policy::{
    Grant, InjectGrant, Named, Peer, Policy, DEFAULT_DUMP_DIR, DEFAULT_RING_SIZE, DEFAULT_SOCKET,
    ETHERNET, HEADERS_MAX, MAX_RING_SIZE, MAX_SNAPLEN, MIN_RING_SIZE,
};
pub use retrieve::{Retrieval, RetrieveGrant, RetrieveRequest, Store};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_flows;
