//! The policy file: TOML read into spanned raw structs, then checked and
//! resolved whole (names to ids, filters compiled, units parsed) into an
//! immutable [`Policy`]. Nothing half-checked escapes: a file with one error
//! gives no policy at all, so a daemon keeps its old one.
//!
//! Two stages because serde alone cannot say *where* a semantically wrong
//! value is: the raw structs keep every value's byte span (`toml::Spanned`),
//! and every check below reports the line of the value it refused.

use crate::error::PolicyError;
use crate::fields::{HideField, SettableField};
use crate::flows::FlowGrant;
pub(crate) use crate::source::valid_interface_name;
use crate::source::Source;
use crate::units;
use ringcap_stages::filter::Target;
use ringcap_stages::{compile, Exclude, Program, SampleMode, Sampling, Snap};
use serde::Deserialize;

use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::{Spanned, Value};

/// Where clients connect when the file does not say (`socket`).
pub const DEFAULT_SOCKET: &str = "/run/ringcapd/ringcapd.sock";
/// Where daemon dumps go when the file does not say (`dump_dir`).
pub const DEFAULT_DUMP_DIR: &str = "/var/lib/ringcapd";
/// The largest snap length (tcpdump's and ringcap's maximum).
pub const MAX_SNAPLEN: u32 = 262_144;
/// What `max_snaplen = "headers"` keeps at most: the protocol headers, never
/// more than this many bytes (ringcap's `--headers-max` default).
pub const HEADERS_MAX: u32 = 256;
/// A client's shared-memory ring when the grant does not say (`ring_size`).
pub const DEFAULT_RING_SIZE: u64 = 64 << 20;
/// The smallest `ring_size` a grant may give.
pub const MIN_RING_SIZE: u64 = 1 << 20;
/// The largest `ring_size` a grant may give: a hard ceiling on what one
/// client can make the daemon allocate.
pub const MAX_RING_SIZE: u64 = 4 << 30;
/// Link type the policy's filters are compiled for (DLT_EN10MB).
pub const ETHERNET: i32 = 1;

/// LINKTYPE_RAW: packets that begin with their IP header (`exclude` runs
/// on every IP layer as one).
pub const RAW_IP: i32 = 101;

/// A user or group named in the file, with the id it resolved to when the
/// policy was loaded (a later rename does not change the grant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// The name as written.
    pub name: String,
    /// The uid or gid.
    pub id: u32,
}

/// Who is asking, as the kernel says (SO_PEERCRED and SO_PEERGROUPS), never
/// as the client says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Peer {
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// The administrator's policy: immutable once loaded.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The control socket's path (`socket`).
    pub socket: PathBuf,
    /// The directory under which daemon dumps are written, one directory per
    /// user (`dump_dir`).
    pub dump_dir: PathBuf,
    /// The Crypto-PAn key file for grants that anonymize (`anonymization_key`).
    pub anonymization_key: Option<PathBuf>,
    /// The grants, in file order (the order they are tried in).
    pub grants: Vec<Grant>,
    /// Where stored captures of each interface are (`[[store]]`), for
    /// retrieval ([`crate::retrieve`]).
    pub stores: Vec<crate::retrieve::Store>,
}

/// One `[[grant]]`: who may capture where, and under which limits.
#[derive(Debug, Clone)]
pub struct Grant {
    /// 0-based position in the file (texts show it 1-based).
    pub index: usize,
    /// Line of the `[[grant]]` header.
    pub line: usize,
    /// Users it applies to.
    pub users: Vec<Named>,
    /// Groups it applies to (primary or supplementary).
    pub groups: Vec<Named>,
    /// Interfaces it allows; empty = any (`"*"`).
    pub interfaces: Vec<String>,
    /// The framework filter ANDed with every client filter ("" = all).
    pub capture_filter: String,
    /// `capture_filter` compiled for Ethernet frames as in a file
    /// ([`Target::Offline`]), accepting with the largest snap length.
    pub capture_program: Program,
    /// `capture_filter` tests VLAN tags: it runs on frames with their tag
    /// put back (otherwise on the frame as the kernel delivered it).
    pub capture_tagged: bool,
    /// The `exclude` expression ("" = none).
    pub exclude: String,
    /// `exclude` compiled for Ethernet frames and for raw IP, run at every
    /// layer the header walker finds (None when `exclude` is empty).
    pub exclude_rule: Option<Exclude>,
    /// The snap-length cap: `Snap::Bytes(n)`, or `Snap::Headers { max:
    /// HEADERS_MAX }` for "headers"; `Bytes(MAX_SNAPLEN)` when absent.
    pub max_snap: Snap,
    /// Sampling forced on every session (`Sampling::All` when absent or 1:1).
    pub sampling: Sampling,
    /// Fields masked before the client sees a packet.
    pub hide: Vec<HideField>,
    /// Addresses anonymized with Crypto-PAn.
    pub anonymize: bool,
    /// Token-bucket rate in packets per second (None = unlimited).
    pub max_packets_per_second: Option<u64>,
    /// Token-bucket rate in bits per second (None = unlimited).
    pub max_bits_per_second: Option<u64>,
    /// Longest session (None = unlimited).
    pub max_duration: Option<Duration>,
    /// Bytes of daemon dumps kept per user; 0 = daemon dumps not allowed.
    pub dump_quota: u64,
    /// Bytes of each session's shared-memory ring.
    pub ring_size: u64,
    /// Injection rights; None = none.
    pub inject: Option<InjectGrant>,
    /// Flow-record rights (`flows`, `packets`, `max_flows`,
    /// `min_flow_timeout`: see [`crate::flows`]).
    pub flow: FlowGrant,
    /// Retrieval of stored packets (`[grant.retrieve]`); None = not allowed.
    pub retrieve: Option<crate::retrieve::RetrieveGrant>,
}

/// `[grant.inject]`: what a client may send.
#[derive(Debug, Clone)]
pub struct InjectGrant {
    /// Every injected frame must match this filter ("" = any frame).
    pub filter: String,
    /// `filter` compiled: a frame may be sent only if this returns non-zero.
    pub program: Program,
    /// Fields the client may set; the rest comes from the daemon's template.
    pub settable: Vec<SettableField>,
    /// Token-bucket rate in frames per second.
    pub max_packets_per_second: u64,
    /// Token-bucket rate in bits per second (None = frames only).
    pub max_bits_per_second: Option<u64>,
    /// Token-bucket depth in frames (for the bit bucket: this many frames of
    /// the interface's largest size).
    pub burst: u32,
}

type Names = Spanned<Vec<Spanned<String>>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    socket: Option<Spanned<String>>,
    dump_dir: Option<Spanned<String>>,
    anonymization_key: Option<Spanned<String>>,
    #[serde(default)]
    grant: Vec<Spanned<RawGrant>>,
    #[serde(default)]
    store: Vec<Spanned<crate::retrieve::RawStore>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    users: Option<Names>,
    groups: Option<Names>,
    interfaces: Option<Names>,
    capture_filter: Option<Spanned<String>>,
    exclude: Option<Spanned<String>>,
    max_snaplen: Option<Spanned<Value>>,
    sample: Option<Spanned<String>>,
    sample_flows: Option<Spanned<String>>,
    hide: Option<Names>,
    anonymize: Option<Spanned<bool>>,
    max_packets_per_second: Option<Spanned<Value>>,
    max_bits_per_second: Option<Spanned<Value>>,
    max_duration: Option<Spanned<Value>>,
    dump_quota: Option<Spanned<Value>>,
    ring_size: Option<Spanned<Value>>,
    inject: Option<Spanned<RawInject>>,
    flows: Option<Spanned<bool>>,
    packets: Option<Spanned<bool>>,
    max_flows: Option<Spanned<Value>>,
    min_flow_timeout: Option<Spanned<Value>>,
    retrieve: Option<Spanned<crate::retrieve::RawRetrieve>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInject {
    filter: Option<Spanned<String>>,
    settable: Option<Names>,
    max_packets_per_second: Option<Spanned<Value>>,
    max_bits_per_second: Option<Spanned<Value>>,
    burst: Option<Spanned<Value>>,
}

impl Source<'_> {
    fn names(
        &self,
        v: &Option<Names>,
        key: &str,
        lookup: impl Fn(&str) -> nix::Result<Option<u32>>,
    ) -> Result<Vec<Named>, PolicyError> {
        let mut out = Vec::new();
        for name in v.iter().flat_map(|l| l.get_ref()) {
            let what = if key == "users" { "user" } else { "group" };
            match lookup(name.get_ref()) {
                Ok(Some(id)) => out.push(Named {
                    name: name.get_ref().clone(),
                    id,
                }),
                Ok(None) => {
                    return Err(self.err(
                        name.span(),
                        format!(
                            "{key}: no {what} named \"{}\" on this system",
                            name.get_ref()
                        ),
                    ))
                }
                Err(e) => {
                    return Err(self.err(
                        name.span(),
                        format!("{key}: cannot look up {what} \"{}\": {e}", name.get_ref()),
                    ))
                }
            }
        }
        Ok(out)
    }

    /// The `exclude` rule: compiled for Ethernet (the outer frame, inner
    /// Ethernet of tunnels) and for raw IP (every IP layer).
    fn exclude(
        &self,
        v: &Option<Spanned<String>>,
    ) -> Result<(String, Option<Exclude>), PolicyError> {
        let Some(v) = v else {
            return Ok((String::new(), None));
        };
        let text = v.get_ref().trim();
        if text.is_empty() {
            return Ok((String::new(), None));
        }
        let err = |why: String| self.err(v.span(), why);
        let eth = compile(text, ETHERNET, MAX_SNAPLEN, Target::Offline)
            .map_err(|e| err(format!("exclude: libpcap: {}", e.message)))?;
        let raw = compile(text, RAW_IP, MAX_SNAPLEN, Target::Offline).map_err(|e| {
            err(format!(
                "exclude: is applied at every IP layer of a packet too, so it must also compile for raw IP packets (no link-layer terms such as ether, vlan or arp: put those in capture_filter): libpcap: {}",
                e.message
            ))
        })?;
        let rule = Exclude::new(eth, raw)
            .ok_or_else(|| err("exclude: libpcap compiled a program it does not accept".into()))?;
        Ok((text.to_string(), Some(rule)))
    }

    fn filter(
        &self,
        v: &Option<Spanned<String>>,
        key: &str,
    ) -> Result<(String, Program), PolicyError> {
        let text = v.as_ref().map_or("", |v| v.get_ref().as_str());
        match compile(text, ETHERNET, MAX_SNAPLEN, Target::Offline) {
            Ok(p) => Ok((text.to_string(), p)),
            Err(e) => Err(self.err(
                v.as_ref().map_or(0..0, |v| v.span()),
                format!("{key}: libpcap: {}", e.message),
            )),
        }
    }
}

fn lookup_user(name: &str) -> nix::Result<Option<u32>> {
    nix::unistd::User::from_name(name).map(|u| u.map(|u| u.uid.as_raw()))
}

fn lookup_group(name: &str) -> nix::Result<Option<u32>> {
    nix::unistd::Group::from_name(name).map(|g| g.map(|g| g.gid.as_raw()))
}

impl Policy {
    /// Reads and checks a policy file (errors do not repeat its path: the
    /// caller names it).
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| PolicyError::file(format!("cannot read it: {e}")))?;
        Policy::from_toml(&text)
    }

    /// Checks a policy given as TOML text.
    pub fn from_toml(text: &str) -> Result<Policy, PolicyError> {
        let src = Source(text);
        let raw: RawPolicy = toml::from_str(text).map_err(|e| match e.span() {
            Some(span) => src.err(span, e.message()),
            None => PolicyError::file(e.message()),
        })?;
        let anonymization_key = src.path(&raw.anonymization_key, "anonymization_key")?;
        let mut grants = Vec::with_capacity(raw.grant.len());
        for (index, g) in raw.grant.iter().enumerate() {
            grants.push(grant(&src, index, g, anonymization_key.is_some())?);
        }
        Ok(Policy {
            socket: src
                .path(&raw.socket, "socket")?
                .unwrap_or_else(|| DEFAULT_SOCKET.into()),
            dump_dir: src
                .path(&raw.dump_dir, "dump_dir")?
                .unwrap_or_else(|| DEFAULT_DUMP_DIR.into()),
            anonymization_key,
            grants,
            stores: crate::retrieve::stores(&src, &raw.store)?,
        })
    }

    /// The grant that applies to `peer` capturing on `interface`: the first
    /// in file order that names the peer (its uid, its gid or one of its
    /// supplementary groups) and allows the interface. None = refused
    /// (default deny).
    pub fn grant_for(&self, peer: &Peer, interface: &str) -> Option<(usize, &Grant)> {
        self.grants
            .iter()
            .enumerate()
            .find(|(_, g)| g.applies_to(peer) && g.allows_interface(interface))
    }
}

impl Grant {
    /// True if the grant rewrites what it delivers (hidden fields,
    /// anonymized addresses): a client's filter is then about packets that
    /// differ from the captured and stored ones.
    pub fn rewrites(&self) -> bool {
        !self.hide.is_empty() || self.anonymize
    }

    /// True if the grant names the peer's uid, gid or a supplementary group.
    pub fn applies_to(&self, peer: &Peer) -> bool {
        self.users.iter().any(|u| u.id == peer.uid)
            || self
                .groups
                .iter()
                .any(|g| g.id == peer.gid || peer.groups.contains(&g.id))
    }

    /// True if the grant allows capturing on `interface`.
    pub fn allows_interface(&self, interface: &str) -> bool {
        self.interfaces.is_empty() || self.interfaces.iter().any(|i| i == interface)
    }
}

fn grant(
    src: &Source,
    index: usize,
    g: &Spanned<RawGrant>,
    have_key: bool,
) -> Result<Grant, PolicyError> {
    let here = g.span();
    let line = PolicyError::at(src.0, here.clone(), "").line;
    let g = g.get_ref();

    let users = src.names(&g.users, "users", lookup_user)?;
    let groups = src.names(&g.groups, "groups", lookup_group)?;
    if users.is_empty() && groups.is_empty() {
        return Err(src.err(
            here,
            "grant: names no one: give users = [...] and/or groups = [...]",
        ));
    }

    let mut interfaces = Vec::new();
    let mut any = false;
    for i in g.interfaces.iter().flat_map(|l| l.get_ref()) {
        if i.get_ref() == "*" {
            any = true;
        } else if valid_interface_name(i.get_ref()) {
            interfaces.push(i.get_ref().clone());
        } else {
            return Err(src.err(
                i.span(),
                format!(
                    "interfaces: \"{}\" is not an interface name (or \"*\" for any)",
                    i.get_ref()
                ),
            ));
        }
    }
    if !any && interfaces.is_empty() {
        return Err(src.err(
            g.interfaces.as_ref().map_or(here, |l| l.span()),
            "interfaces: a grant must name at least one interface, or \"*\" for any",
        ));
    }
    if any {
        interfaces.clear();
    }

    let (capture_filter, capture_program) = src.filter(&g.capture_filter, "capture_filter")?;
    let capture_tagged = ringcap_stages::filter::mentions_vlan(&capture_filter);
    let (exclude, exclude_rule) = src.exclude(&g.exclude)?;

    let max_snap = match &g.max_snaplen {
        None => Snap::Bytes(MAX_SNAPLEN),
        Some(v) => match v.get_ref() {
            Value::String(s) if s == "headers" => Snap::Headers { max: HEADERS_MAX },
            Value::Integer(n) if (1..=i64::from(MAX_SNAPLEN)).contains(n) => Snap::Bytes(*n as u32),
            _ => {
                return Err(src.err(
                    v.span(),
                    format!("max_snaplen: expected a number of bytes from 1 to {MAX_SNAPLEN} or \"headers\""),
                ))
            }
        },
    };

    let ratio = |v: &Spanned<String>, key: &str| {
        Sampling::parse_ratio(v.get_ref()).map_err(|e| src.err(v.span(), format!("{key}: {e}")))
    };
    let sampling = match (&g.sample, &g.sample_flows) {
        (Some(_), Some(f)) => {
            return Err(src.err(
                f.span(),
                "sample_flows: sample and sample_flows exclude each other; give one",
            ))
        }
        (Some(s), None) => match ratio(s, "sample")? {
            1 => Sampling::All,
            n => Sampling::Packets {
                n,
                mode: SampleMode::Random,
            },
        },
        (None, Some(f)) => match ratio(f, "sample_flows")? {
            1 => Sampling::All,
            n => Sampling::Flows { n },
        },
        (None, None) => Sampling::All,
    };

    let mut hide = Vec::new();
    for h in g.hide.iter().flat_map(|l| l.get_ref()) {
        let field = HideField::from_name(h.get_ref()).ok_or_else(|| {
            src.err(
                h.span(),
                format!(
                    "hide: unknown field \"{}\"; known fields: {}",
                    h.get_ref(),
                    HideField::vocabulary()
                ),
            )
        })?;
        if !hide.contains(&field) {
            hide.push(field);
        }
    }

    let anonymize = g.anonymize.as_ref().is_some_and(|a| *a.get_ref());
    if anonymize && !have_key {
        let span = g.anonymize.as_ref().map_or(here.clone(), |a| a.span());
        return Err(src.err(
            span,
            "anonymize: needs anonymization_key (a key file path) at the top of the file",
        ));
    }

    let max_packets_per_second = g
        .max_packets_per_second
        .as_ref()
        .map(|v| src.count(v, "max_packets_per_second", 1))
        .transpose()?;
    let max_bits_per_second = g
        .max_bits_per_second
        .as_ref()
        .map(|v| src.bit_rate(v, "max_bits_per_second"))
        .transpose()?;
    let max_duration = match &g.max_duration {
        None => None,
        Some(v) => {
            let d = match v.get_ref() {
                Value::String(s) => units::parse_duration(s).map_err(|e| src.err(v.span(), format!("max_duration: {e}")))?,
                _ => {
                    return Err(src.err(
                        v.span(),
                        "max_duration: expected a duration string such as \"90s\", \"30m\", \"1.5h\" or \"2d\"",
                    ))
                }
            };
            if d.is_zero() {
                return Err(src.err(v.span(), "max_duration: must be longer than 0"));
            }
            Some(d)
        }
    };
    let dump_quota = g
        .dump_quota
        .as_ref()
        .map(|v| src.size(v, "dump_quota"))
        .transpose()?
        .unwrap_or(0);
    let ring_size = match &g.ring_size {
        None => DEFAULT_RING_SIZE,
        Some(v) => {
            let n = src.size(v, "ring_size")?;
            if !(MIN_RING_SIZE..=MAX_RING_SIZE).contains(&n) {
                return Err(src.err(
                    v.span(),
                    format!(
                        "ring_size: must be from {} to {}",
                        units::format_size(MIN_RING_SIZE),
                        units::format_size(MAX_RING_SIZE)
                    ),
                ));
            }
            n
        }
    };

    let inject = g.inject.as_ref().map(|i| inject(src, i)).transpose()?;
    let flow = crate::flows::parse(
        src.0,
        here.clone(),
        [&g.flows, &g.packets],
        &g.max_flows,
        &g.min_flow_timeout,
    )?;
    let retrieve = g
        .retrieve
        .as_ref()
        .map(|r| crate::retrieve::retrieve_grant(src, r))
        .transpose()?;

    Ok(Grant {
        index,
        line,
        users,
        groups,
        interfaces,
        capture_filter,
        capture_program,
        capture_tagged,
        exclude,
        exclude_rule,
        max_snap,
        sampling,
        hide,
        anonymize,
        max_packets_per_second,
        max_bits_per_second,
        max_duration,
        dump_quota,
        ring_size,
        inject,
        flow,
        retrieve,
    })
}

fn inject(src: &Source, i: &Spanned<RawInject>) -> Result<InjectGrant, PolicyError> {
    let here = i.span();
    let i = i.get_ref();
    if i.filter.is_none() {
        return Err(src.err(
            here,
            "inject.filter: required: the frames this grant may send (\"\" = any frame)",
        ));
    }
    let (filter, program) = src.filter(&i.filter, "inject.filter")?;
    let mut settable = Vec::new();
    for s in i.settable.iter().flat_map(|l| l.get_ref()) {
        let field = SettableField::from_name(s.get_ref()).ok_or_else(|| {
            src.err(
                s.span(),
                format!(
                    "inject.settable: unknown field \"{}\"; known fields: {}",
                    s.get_ref(),
                    SettableField::vocabulary()
                ),
            )
        })?;
        if !settable.contains(&field) {
            settable.push(field);
        }
    }
    let Some(rate) = &i.max_packets_per_second else {
        return Err(src.err(
            here,
            "inject.max_packets_per_second: required: injection is always rate-limited",
        ));
    };
    let max_packets_per_second = src.count(rate, "inject.max_packets_per_second", 1)?;
    let burst = match &i.burst {
        None => 1,
        Some(b) => {
            let n = src.count(b, "inject.burst", 1)?;
            u32::try_from(n).map_err(|_| src.err(b.span(), "inject.burst: too large"))?
        }
    };
    let max_bits_per_second = i
        .max_bits_per_second
        .as_ref()
        .map(|v| src.bit_rate(v, "inject.max_bits_per_second"))
        .transpose()?;
    Ok(InjectGrant {
        filter,
        program,
        settable,
        max_packets_per_second,
        max_bits_per_second,
        burst,
    })
}
