//! IPFIX (RFC 7011) and NetFlow v9 (RFC 3954) messages: a template set
//! first and again every refresh interval, then data sets of flow records,
//! each message at most one datagram long.
//!
//! IPFIX records are RFC 5103 biflows: the forward counters in the standard
//! information elements, the reverse ones in the same elements with the
//! reverse PEN 29305. NetFlow v9 has no enterprise elements, so each biflow
//! goes out as two records, one per direction (the reverse one only when it
//! saw packets). Two templates each, IPv4 (256) and IPv6 (257).

use crate::record::FlowRecord;

/// RFC 5103's private enterprise number for reverse elements.
pub const REVERSE_PEN: u32 = 29305;
/// Template IDs.
pub const TEMPLATE_V4: u16 = 256;
/// Template ID of IPv6 flows.
pub const TEMPLATE_V6: u16 = 257;
/// IPFIX options template of the sampling parameters (RFC 5476 style).
pub const TEMPLATE_SAMPLING: u16 = 258;
/// IPFIX options template of the exporter's statistics (RFC 7011 4.1-4.3).
pub const TEMPLATE_STATS: u16 = 259;

pub use crate::sampling::SamplingReport;

/// The exporter's counters, as the statistics options record carries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatsReport {
    /// exportedMessageTotalCount.
    pub messages: u64,
    /// exportedFlowRecordTotalCount.
    pub records: u64,
    /// observedFlowTotalCount: flows begun.
    pub observed_flows: u64,
    /// ignoredPacketTotalCount: packets in no flow (not IP).
    pub ignored_packets: u64,
    /// notSentFlowTotalCount: records lost (full queues, failed sends).
    pub not_sent: u64,
}

/// Options template fields: (element, length); the first `scope` ones are
/// the scope.
const SAMPLING_OPTIONS: (&[(u16, u16)], u16) = (
    &[
        (302, 8), // selectorId (scope)
        (304, 2), // selectorAlgorithm
        (305, 4), // samplingPacketInterval
        (306, 4), // samplingPacketSpace
        (311, 8), // samplingProbability
    ],
    1,
);
const STATS_OPTIONS: (&[(u16, u16)], u16) = (
    &[
        (149, 4), // observationDomainId (scope)
        (41, 8),  // exportedMessageTotalCount
        (42, 8),  // exportedFlowRecordTotalCount
        (163, 8), // observedFlowTotalCount
        (164, 8), // ignoredPacketTotalCount
        (166, 8), // notSentFlowTotalCount
        (323, 8), // observationTimeMilliseconds
    ],
    1,
);

fn options_len(o: (&[(u16, u16)], u16)) -> usize {
    o.0.iter().map(|f| usize::from(f.1)).sum()
}

pub use crate::encode::Dialect;

/// A field of a template: element ID, length, reverse (PEN 29305).
type Field = (u16, u16, bool);

const IPFIX_V4: &[Field] = &[
    (152, 8, false), // flowStartMilliseconds
    (153, 8, false), // flowEndMilliseconds
    (2, 8, false),   // packetDeltaCount
    (1, 8, false),   // octetDeltaCount
    (2, 8, true),    // reverse packetDeltaCount
    (1, 8, true),    // reverse octetDeltaCount
    (8, 4, false),   // sourceIPv4Address
    (12, 4, false),  // destinationIPv4Address
    (7, 2, false),   // sourceTransportPort
    (11, 2, false),  // destinationTransportPort
    (4, 1, false),   // protocolIdentifier
    // The reverse flags first: nfdump (1.7) keeps one flags field and
    // stores each tcpControlBits it meets in it, the reverse one too (PEN
    // 29305 or not), so the forward one must come last to be what it
    // shows. Collectors that tell them apart do not mind the order.
    (6, 2, true),    // reverse tcpControlBits
    (6, 2, false),   // tcpControlBits
    (58, 2, false),  // vlanId
    (32, 2, false),  // icmpTypeCodeIPv4
    (136, 1, false), // flowEndReason
];

const IPFIX_V6: &[Field] = &[
    (152, 8, false),
    (153, 8, false),
    (2, 8, false),
    (1, 8, false),
    (2, 8, true),
    (1, 8, true),
    (27, 16, false), // sourceIPv6Address
    (28, 16, false), // destinationIPv6Address
    (7, 2, false),
    (11, 2, false),
    (4, 1, false),
    (6, 2, true),
    (6, 2, false),
    (58, 2, false),
    (139, 2, false), // icmpTypeCodeIPv6
    (136, 1, false),
];

const V9_V4: &[Field] = &[
    (152, 8, false),
    (153, 8, false),
    (2, 8, false),
    (1, 8, false),
    (8, 4, false),
    (12, 4, false),
    (7, 2, false),
    (11, 2, false),
    (4, 1, false),
    (6, 1, false), // TCP_FLAGS: one byte in v9
    (58, 2, false),
    (32, 2, false),
];

const V9_V6: &[Field] = &[
    (152, 8, false),
    (153, 8, false),
    (2, 8, false),
    (1, 8, false),
    (27, 16, false),
    (28, 16, false),
    (7, 2, false),
    (11, 2, false),
    (4, 1, false),
    (6, 1, false),
    (58, 2, false),
    (139, 2, false),
];

fn fields(d: Dialect, v6: bool) -> &'static [Field] {
    match (d, v6) {
        (Dialect::Ipfix, false) => IPFIX_V4,
        (Dialect::Ipfix, true) => IPFIX_V6,
        (Dialect::NetflowV9, false) => V9_V4,
        (Dialect::NetflowV9, true) => V9_V6,
    }
}

/// Length of one data record of template `v6` in dialect `d`.
pub fn record_len(d: Dialect, v6: bool) -> usize {
    fields(d, v6).iter().map(|f| usize::from(f.1)).sum()
}

/// Length of one IPFIX data record of this exporter's template `id`.
pub fn ipfix_record_len(id: u16) -> Option<usize> {
    match id {
        TEMPLATE_V4 => Some(record_len(Dialect::Ipfix, false)),
        TEMPLATE_V6 => Some(record_len(Dialect::Ipfix, true)),
        TEMPLATE_SAMPLING => Some(options_len(SAMPLING_OPTIONS)),
        TEMPLATE_STATS => Some(options_len(STATS_OPTIONS)),
        _ => None,
    }
}

const HEADER_LEN: usize = 16;
const V9_HEADER_LEN: usize = 20;

/// Builds messages; hands each finished one to a sender.
pub struct MessageBuilder {
    dialect: Dialect,
    domain: u32,
    max_len: usize,
    buf: Vec<u8>,
    /// Offset of the open data set's header, and its template.
    set: Option<(usize, u16)>,
    /// Records in this message (NetFlow v9's count: templates included).
    records: u32,
    /// Data records in this message (IPFIX sequence numbers count these).
    data_records: u32,
    /// IPFIX: data records sent before; v9: messages sent before.
    sequence: u32,
    templates_due: bool,
    /// Templates go into data messages (UDP: first and every refresh);
    /// else (TCP: once per connection) only [`Self::templates_message`]
    /// makes them.
    templates_inline: bool,
    /// The sampling options record sent with the templates.
    sampling: Option<SamplingReport>,
    /// ms since the exporter started (NetFlow v9's sysUptime).
    uptime_ms: u32,
}

impl MessageBuilder {
    /// A builder for messages of at most `max_len` bytes (at least 512)
    /// in observation domain (v9: source ID) `domain`.
    pub fn new(dialect: Dialect, domain: u32, max_len: usize) -> MessageBuilder {
        let max_len = max_len.clamp(512, 65_535);
        MessageBuilder {
            dialect,
            domain,
            max_len,
            buf: Vec::with_capacity(max_len),
            set: None,
            records: 0,
            data_records: 0,
            sequence: 0,
            templates_due: true,
            templates_inline: true,
            sampling: None,
            uptime_ms: 0,
        }
    }

    /// A builder for a stream (IPFIX over TCP): data messages carry no
    /// templates; [`Self::templates_message`] opens each connection.
    pub fn for_stream(dialect: Dialect, domain: u32, max_len: usize) -> MessageBuilder {
        MessageBuilder {
            templates_due: false,
            templates_inline: false,
            ..MessageBuilder::new(dialect, domain, max_len)
        }
    }

    /// Largest message, bytes.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Sends `s` as an options record (template 258; IPFIX: PSAMP elements,
    /// NetFlow v9: [`crate::v9_options`]) with the templates.
    pub fn set_sampling(&mut self, s: Option<SamplingReport>) {
        self.sampling = s;
    }

    /// A message of the templates alone (and the sampling record, if any),
    /// for the start of a stream; the data messages' sequence numbers are
    /// not changed by it.
    pub fn templates_message(&mut self, export_secs: u32) -> Vec<u8> {
        let mut b = MessageBuilder {
            templates_due: true,
            templates_inline: true,
            buf: Vec::with_capacity(1024),
            set: None,
            records: 0,
            data_records: 0,
            ..*self
        };
        b.start(export_secs);
        let mut out = Vec::new();
        b.flush(export_secs, &mut |m| out = m.to_vec());
        out
    }

    /// IPFIX: adds the exporter's statistics as an options record
    /// (template 259; NetFlow v9 has no such record: nothing is added).
    pub fn add_stats(
        &mut self,
        s: &StatsReport,
        now_ms: u64,
        export_secs: u32,
        send: &mut impl FnMut(&[u8]),
    ) {
        if self.dialect != Dialect::Ipfix {
            return;
        }
        self.open_set(
            TEMPLATE_STATS,
            options_len(STATS_OPTIONS),
            export_secs,
            send,
        );
        let b = &mut self.buf;
        b.extend_from_slice(&self.domain.to_be_bytes());
        for v in [
            s.messages,
            s.records,
            s.observed_flows,
            s.ignored_packets,
            s.not_sent,
            now_ms,
        ] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        self.records += 1;
        self.data_records += 1;
    }

    /// Sends the templates again with the next message.
    pub fn refresh_templates(&mut self) {
        self.templates_due = true;
    }

    /// Adds `r` (two records in NetFlow v9 when both directions saw
    /// packets); full messages go to `send` with `export_secs` (and, for
    /// v9, `uptime_ms`) in their header.
    pub fn add(
        &mut self,
        r: &FlowRecord,
        export_secs: u32,
        uptime_ms: u32,
        send: &mut impl FnMut(&[u8]),
    ) {
        self.uptime_ms = uptime_ms;
        match self.dialect {
            Dialect::Ipfix => self.add_one(r, export_secs, send),
            Dialect::NetflowV9 => {
                self.add_one(&r.forward_half(), export_secs, send);
                if let Some(rev) = r.reverse_half() {
                    self.add_one(&rev, export_secs, send);
                }
            }
        }
    }

    fn add_one(&mut self, r: &FlowRecord, export_secs: u32, send: &mut impl FnMut(&[u8])) {
        let v6 = r.key.v6;
        let template = if v6 { TEMPLATE_V6 } else { TEMPLATE_V4 };
        self.open_set(template, record_len(self.dialect, v6), export_secs, send);
        self.write_record(r);
        self.records += 1;
        self.data_records += 1;
    }

    /// Makes room for a record of `len` bytes in a data set of `template`
    /// (a new message when this one is full, a new set when the open one
    /// is of another template).
    fn open_set(
        &mut self,
        template: u16,
        len: usize,
        export_secs: u32,
        send: &mut impl FnMut(&[u8]),
    ) {
        let set_header = if self.set.is_some_and(|s| s.1 == template) {
            0
        } else {
            4
        };
        if !self.buf.is_empty() && self.buf.len() + set_header + len > self.max_len {
            self.flush(export_secs, send);
        }
        if self.buf.is_empty() {
            self.start(export_secs);
        }
        if self.set.is_none_or(|s| s.1 != template) {
            self.close_set();
            self.set = Some((self.buf.len(), template));
            self.buf.extend_from_slice(&template.to_be_bytes());
            self.buf.extend_from_slice(&[0, 0]);
        }
    }

    /// Sends what is held, if anything.
    pub fn flush(&mut self, export_secs: u32, send: &mut impl FnMut(&[u8])) {
        if self.buf.is_empty() {
            return;
        }
        self.close_set();
        let len = self.buf.len() as u16;
        match self.dialect {
            Dialect::Ipfix => {
                self.buf[2..4].copy_from_slice(&len.to_be_bytes());
                self.buf[4..8].copy_from_slice(&export_secs.to_be_bytes());
                self.buf[8..12].copy_from_slice(&self.sequence.to_be_bytes());
                self.sequence = self.sequence.wrapping_add(self.data_records);
            }
            Dialect::NetflowV9 => {
                self.buf[2..4].copy_from_slice(&(self.records as u16).to_be_bytes());
                self.buf[4..8].copy_from_slice(&self.uptime_ms.to_be_bytes());
                self.buf[8..12].copy_from_slice(&export_secs.to_be_bytes());
                self.buf[12..16].copy_from_slice(&self.sequence.to_be_bytes());
                self.sequence = self.sequence.wrapping_add(1);
            }
        }
        send(&self.buf);
        self.buf.clear();
        self.records = 0;
        self.data_records = 0;
    }

    /// Starts a message: header, then the templates when due.
    fn start(&mut self, export_secs: u32) {
        match self.dialect {
            Dialect::Ipfix => {
                self.buf.extend_from_slice(&10u16.to_be_bytes());
                self.buf.extend_from_slice(&[0, 0]);
                self.buf.extend_from_slice(&export_secs.to_be_bytes());
                self.buf.extend_from_slice(&[0; 4]);
                self.buf.extend_from_slice(&self.domain.to_be_bytes());
                debug_assert_eq!(self.buf.len(), HEADER_LEN);
            }
            Dialect::NetflowV9 => {
                self.buf.extend_from_slice(&9u16.to_be_bytes());
                self.buf.extend_from_slice(&[0; 14]);
                self.buf.extend_from_slice(&self.domain.to_be_bytes());
                debug_assert_eq!(self.buf.len(), V9_HEADER_LEN);
            }
        }
        if self.templates_due && self.templates_inline {
            self.templates_due = false;
            let at = self.buf.len();
            let set_id: u16 = match self.dialect {
                Dialect::Ipfix => 2,
                Dialect::NetflowV9 => 0,
            };
            self.buf.extend_from_slice(&set_id.to_be_bytes());
            self.buf.extend_from_slice(&[0, 0]);
            for (id, v6) in [(TEMPLATE_V4, false), (TEMPLATE_V6, true)] {
                let f = fields(self.dialect, v6);
                self.buf.extend_from_slice(&id.to_be_bytes());
                self.buf.extend_from_slice(&(f.len() as u16).to_be_bytes());
                for &(ie, len, reverse) in f {
                    let ie = if reverse { ie | 0x8000 } else { ie };
                    self.buf.extend_from_slice(&ie.to_be_bytes());
                    self.buf.extend_from_slice(&len.to_be_bytes());
                    if reverse {
                        self.buf.extend_from_slice(&REVERSE_PEN.to_be_bytes());
                    }
                }
                self.records += 1;
            }
            let set_len = (self.buf.len() - at) as u16;
            self.buf[at + 2..at + 4].copy_from_slice(&set_len.to_be_bytes());
            match (self.dialect, self.sampling) {
                (Dialect::Ipfix, _) => self.write_options_templates(),
                (Dialect::NetflowV9, Some(s)) => {
                    self.records += crate::v9_options::write(&mut self.buf, self.domain, &s);
                }
                (Dialect::NetflowV9, None) => {}
            }
        }
    }

    /// IPFIX options templates (set 3): the exporter's statistics, and the
    /// sampling parameters with their record when sampling is on.
    fn write_options_templates(&mut self) {
        let at = self.buf.len();
        self.buf.extend_from_slice(&3u16.to_be_bytes());
        self.buf.extend_from_slice(&[0, 0]);
        let mut list = vec![(TEMPLATE_STATS, STATS_OPTIONS)];
        if self.sampling.is_some() {
            list.push((TEMPLATE_SAMPLING, SAMPLING_OPTIONS));
        }
        for (id, (fields, scope)) in list {
            self.buf.extend_from_slice(&id.to_be_bytes());
            self.buf
                .extend_from_slice(&(fields.len() as u16).to_be_bytes());
            self.buf.extend_from_slice(&scope.to_be_bytes());
            for &(ie, len) in fields {
                self.buf.extend_from_slice(&ie.to_be_bytes());
                self.buf.extend_from_slice(&len.to_be_bytes());
            }
            self.records += 1;
        }
        let set_len = (self.buf.len() - at) as u16;
        self.buf[at + 2..at + 4].copy_from_slice(&set_len.to_be_bytes());
        if let Some(s) = self.sampling {
            let at = self.buf.len();
            self.buf.extend_from_slice(&TEMPLATE_SAMPLING.to_be_bytes());
            self.buf.extend_from_slice(&[0, 0]);
            // One selector: its ID is 1.
            self.buf.extend_from_slice(&1u64.to_be_bytes());
            self.buf.extend_from_slice(&s.algorithm.to_be_bytes());
            self.buf.extend_from_slice(&s.interval.to_be_bytes());
            self.buf.extend_from_slice(&s.space.to_be_bytes());
            self.buf
                .extend_from_slice(&s.probability.to_bits().to_be_bytes());
            let set_len = (self.buf.len() - at) as u16;
            self.buf[at + 2..at + 4].copy_from_slice(&set_len.to_be_bytes());
            self.records += 1;
            self.data_records += 1;
        }
    }

    fn close_set(&mut self) {
        if let Some((at, _)) = self.set.take() {
            let len = (self.buf.len() - at) as u16;
            self.buf[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
        }
    }

    fn write_record(&mut self, r: &FlowRecord) {
        crate::encode::record(self.dialect, r, &mut self.buf);
    }
}

/// A record laid out by walking its template's fields: the definition
/// [`crate::encode::record`] (the one used, written out by hand for speed)
/// is tested against.
#[cfg(test)]
pub(crate) fn write_record_by_template(dialect: Dialect, r: &FlowRecord, b: &mut Vec<u8>) {
    for &(ie, len, reverse) in fields(dialect, r.key.v6) {
        let d = if reverse { &r.rev } else { &r.fwd };
        match (ie, len) {
            (152, _) => b.extend_from_slice(&(r.start_ns / 1_000_000).to_be_bytes()),
            (153, _) => b.extend_from_slice(&(r.end_ns / 1_000_000).to_be_bytes()),
            (2, _) => b.extend_from_slice(&d.packets.to_be_bytes()),
            (1, _) => b.extend_from_slice(&d.octets.to_be_bytes()),
            (8, _) => b.extend_from_slice(&r.key.src[..4]),
            (12, _) => b.extend_from_slice(&r.key.dst[..4]),
            (27, _) => b.extend_from_slice(&r.key.src),
            (28, _) => b.extend_from_slice(&r.key.dst),
            (7, _) => b.extend_from_slice(&r.key.sport.to_be_bytes()),
            (11, _) => b.extend_from_slice(&r.key.dport.to_be_bytes()),
            (4, _) => b.push(r.key.proto),
            (6, 1) => b.push(d.tcp_flags as u8),
            (6, _) => b.extend_from_slice(&d.tcp_flags.to_be_bytes()),
            (58, _) => b.extend_from_slice(&r.key.vlan.to_be_bytes()),
            (32, _) | (139, _) => b.extend_from_slice(&r.icmp.to_be_bytes()),
            (136, _) => b.push(r.reason as u8),
            _ => b.extend(std::iter::repeat_n(0u8, usize::from(len))),
        }
    }
}
