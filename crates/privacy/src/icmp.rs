//! Addresses outside the IP and Ethernet headers: IPv4 options, IPv6
//! routing and destination options headers, the authentication header,
//! ICMP redirects and router advertisements, ICMPv6 neighbor discovery
//! (RFC 4861) with its options, and MLD (RFC 2710, RFC 3810).
//!
//! They hold the same addresses the IP header does (an ND target is the
//! address being resolved; a redirect names the gateway), so hiding only
//! the IP header's would hand out the real addresses, and with
//! anonymization the map between real and anonymized ones. The ARP
//! counterpart was always masked; this is the rest. When addresses are
//! hidden, a structure here that is not understood (an unknown option,
//! routing type or ND option, the packet a Redirected Header option
//! quotes) is zeroed after its type and length: fail closed.

use crate::fields;
use crate::rewrite::{AddrOp, IpCtx, Rewriter, Work};
use ringcap_wire::icmp::{field as f4, msg_type as t4};
use ringcap_wire::icmpv6::{field as f6, mld_record, msg_type as t6, nd_option as nd};
use ringcap_wire::ip::ip_proto;
use ringcap_wire::ipv6_ext::field as ext;

impl Rewriter {
    pub(crate) fn hides_addresses(&self) -> bool {
        self.ip_op != AddrOp::Keep || self.eth_op != AddrOp::Keep
    }

    /// IPv4 options in `start..end` (RFC 791): record route, loose and
    /// strict source route hold addresses, so may a timestamp option
    /// (flags 1 and 3); other options' data is zeroed.
    pub(crate) fn ipv4_options(&mut self, w: &mut Work<'_>, start: usize, end: usize) {
        let op = self.ip_op;
        if op == AddrOp::Keep {
            return;
        }
        let mut i = start;
        while i < end {
            let Some(t) = w.byte(i) else {
                // Not captured: hidden in the header checksum.
                w.sums.taint(i);
                return;
            };
            match t {
                0 => return, // end of options; the rest is padding
                1 => {
                    i += 1;
                    continue;
                }
                _ => {}
            }
            let len = w.byte(i + 1).map_or(0, usize::from);
            if len < 2 || i + len > end {
                w.zero(i + 1, end - i - 1);
                return;
            }
            match t {
                7 | 131 | 137 => {
                    // Record route: the slots before the pointer are
                    // filled, the others must be empty.
                    let filled = match (t, w.byte(i + 2)) {
                        (7, Some(ptr)) => i + usize::from(ptr).clamp(3, len + 1) - 1,
                        _ => i + len,
                    };
                    let mut a = i + 3;
                    while a + 4 <= filled {
                        self.addr(w, a, 4, op);
                        a += 4;
                    }
                    w.zero(a, (i + len).saturating_sub(a));
                }
                68 if len >= 4 && matches!(w.byte(i + 3).map(|b| b & 0xf), Some(1 | 3)) => {
                    let mut a = i + 4;
                    while a + 8 <= i + len {
                        self.addr(w, a, 4, op);
                        a += 8;
                    }
                    w.zero(a, (i + len).saturating_sub(a));
                }
                68 => {}
                _ => w.zero(i + 2, len - 2),
            }
            i += len;
        }
    }

    /// An IPv6 extension header (or AH) at `off`.
    pub(crate) fn ext(&mut self, w: &mut Work<'_>, off: usize, kind: u8, ip: &mut IpCtx) {
        let Some(len) = w.byte(off + ext::LENGTH) else {
            return;
        };
        if kind == ip_proto::AH {
            // The integrity value covers hidden fields (or is a function of
            // them): never shown.
            let end = (usize::from(len) + 2) * 4;
            w.zero(off + ext::AH_ICV, end.saturating_sub(ext::AH_ICV));
            return;
        }
        let end = off + (usize::from(len) + 1) * 8;
        if kind == ip_proto::IPV6_ROUTING {
            self.routing(w, off, end, ip);
        } else {
            let dst = kind == ip_proto::IPV6_DEST_OPTS;
            self.ipv6_options(w, off + ext::OPTIONS, end, dst, ip);
        }
    }

    /// Routing header: types 0 and 2 (RFC 8200, RFC 6275) are a list of
    /// addresses, type 4 (RFC 8754) a segment list then TLVs.
    fn routing(&mut self, w: &mut Work<'_>, off: usize, end: usize, ip: &mut IpCtx) {
        let (ty, left) = (w.byte(off + ext::ROUTING_TYPE), w.byte(off + ext::SEG_LEFT));
        let addrs_at = off + ext::ROUTING_ADDRS;
        let n = (end - addrs_at) / 16;
        let (addrs, final_dst) = match ty {
            Some(0 | 2) => (n, n.checked_sub(1)),
            Some(4) => {
                let last = w.byte(off + ext::ROUTING_DATA);
                let segs = last.map_or(n, |l| (usize::from(l) + 1).min(n));
                (segs, Some(0))
            }
            _ => (0, None),
        };
        if left.is_some_and(|l| l != 0) {
            match final_dst {
                Some(k) => ip.dst = addrs_at + 16 * k,
                None => ip.dst_unknown = true,
            }
        }
        if self.ip_op == AddrOp::Keep {
            return;
        }
        if ty.is_none() || !matches!(ty, Some(0 | 2 | 4)) {
            let data = off + ext::ROUTING_DATA;
            w.zero(data, end - data);
            return;
        }
        for k in 0..addrs {
            self.addr(w, addrs_at + 16 * k, 16, self.ip_op);
        }
        let rest = addrs_at + 16 * addrs;
        w.zero(rest, end - rest);
    }

    /// Hop-by-hop or destination options: the home address option
    /// (RFC 6275) holds an address (and is the pseudo-header's source);
    /// padding, router alert, jumbo payload and tunnel encapsulation limit
    /// are kept; other options' data is zeroed.
    fn ipv6_options(
        &mut self,
        w: &mut Work<'_>,
        start: usize,
        end: usize,
        dst: bool,
        ip: &mut IpCtx,
    ) {
        let mut i = start;
        while i < end {
            let Some(t) = w.byte(i) else {
                w.sums.taint(i);
                return;
            };
            if t == 0 {
                i += 1;
                continue;
            }
            let Some(len) = w.byte(i + 1).map(usize::from) else {
                w.sums.taint(i);
                return;
            };
            if i + 2 + len > end {
                w.zero(i + 1, end - i - 1);
                return;
            }
            match t {
                0xc9 if dst && len == 16 => {
                    ip.src = i + 2;
                    self.addr(w, i + 2, 16, self.ip_op);
                }
                1 | 4 | 5 | 0xc2 => {}
                _ if self.ip_op != AddrOp::Keep => w.zero(i + 2, len),
                _ => {}
            }
            i += 2 + len;
        }
    }

    /// The header an ICMP error's quoted datagram has after its IP header,
    /// at `off`, in a message ending at `end` (`w.limit`). The walk takes 8
    /// bytes for it, whatever it is, and stops: of those 8, what is not the
    /// header's own is zeroed, and so is what follows, unless it is the
    /// payload of a header the rewrite understands (TCP, SCTP, an echo,
    /// UDP that cannot be VXLAN), since it may hold anything (a tunnel's
    /// inner headers, another quote).
    pub(crate) fn quoted_transport(
        &mut self,
        w: &mut Work<'_>,
        off: usize,
        proto: u8,
        end: usize,
        later_fragment: bool,
    ) {
        if later_fragment && self.mask.has(fields::PAYLOAD) {
            // The 8 bytes of a later fragment are its payload.
            w.zero(off, 8);
        }
        let own = match proto {
            ip_proto::IPV4 | ip_proto::IPV6 => {
                // A tunnel's inner IP header.
                w.limit = off + 8;
                self.ip_fields(w, off, proto == ip_proto::IPV6);
                w.limit = end;
                8
            }
            // 4 bytes, and a word each for checksum, key and sequence number.
            ip_proto::GRE => w
                .frame
                .get(off)
                .map_or(4, |&f| 4 + 4 * (f & 0xb0).count_ones() as usize),
            ip_proto::HOP_BY_HOP | ip_proto::IPV6_ROUTING | ip_proto::IPV6_DEST_OPTS => {
                if self.hides_addresses() {
                    // Options or routing data, not walked here.
                    w.zero(off + 2, 6);
                }
                8
            }
            ip_proto::TCP
            | ip_proto::UDP
            | ip_proto::ICMP
            | ip_proto::ICMPV6
            | ip_proto::SCTP
            | ip_proto::ESP
            | ip_proto::AH => 8,
            _ => 0,
        };
        if own < 8 {
            w.zero(off + own, 8 - own);
        }
        // UDP to VXLAN's port (any port when ports are hidden) with the I
        // flag may carry a frame.
        let vxlan = (self.mask.has(fields::UDP_PORT)
            || w.frame.get(off + 2..off + 4) == Some(&[0x12, 0xb5]))
            && w.frame.get(off + 8).is_none_or(|f| f & 0x08 != 0);
        let understood = match (proto, w.frame.get(off)) {
            (ip_proto::TCP | ip_proto::SCTP, _) => true,
            (ip_proto::ICMP, Some(0 | 8)) | (ip_proto::ICMPV6, Some(128 | 129)) => true,
            (ip_proto::UDP, _) => !vxlan,
            _ => false,
        };
        if !understood {
            w.zero(off + 8, end.saturating_sub(off + 8));
        }
    }

    /// ICMP: a redirect's gateway (type 5), a router advertisement's
    /// addresses (type 9, RFC 1256).
    pub(crate) fn icmp4(&mut self, w: &mut Work<'_>, off: usize) {
        let m = self.mask;
        let ty = w.byte(off);
        if m.has(fields::ICMP_ECHO) && matches!(ty, Some(t4::ECHO_REPLY | t4::ECHO_REQUEST)) {
            w.zero_field(off, f4::ECHO_IDENT);
            w.zero_field(off, f4::ECHO_SEQNO);
        }
        let op = self.ip_op;
        if op == AddrOp::Keep {
            return;
        }
        match ty {
            Some(t4::REDIRECT) => self.addr_field(w, off, f4::GATEWAY, op),
            Some(t4::ROUTER_ADVERT) => {
                let entries = off + f4::RA_ENTRIES;
                w.sums.taint(entries);
                let (n, size) = (
                    w.byte(off + f4::RA_NUM_ADDRS),
                    w.byte(off + f4::RA_ENTRY_SIZE),
                );
                let (Some(n), Some(size)) = (n, size) else {
                    return;
                };
                let size = usize::from(size) * 4;
                if size < 4 {
                    w.zero(entries, w.limit.saturating_sub(entries).min(0xffff));
                    return;
                }
                for k in 0..usize::from(n) {
                    self.addr(w, entries + k * size, 4, op);
                }
            }
            _ => {}
        }
    }

    /// ICMPv6: neighbor discovery (133 to 137) and MLD (130 to 132, 143).
    pub(crate) fn icmp6(&mut self, w: &mut Work<'_>, off: usize) {
        let ty = w.byte(off);
        if self.mask.has(fields::ICMP_ECHO) && matches!(ty, Some(t6::ECHO_REQUEST | t6::ECHO_REPLY))
        {
            w.zero_field(off, f6::ECHO_IDENT);
            w.zero_field(off, f6::ECHO_SEQNO);
        }
        if !self.hides_addresses() {
            return;
        }
        let op = self.ip_op;
        let options = match ty {
            Some(t6::ROUTER_SOLICIT) => off + f6::RS_OPTIONS,
            Some(t6::ROUTER_ADVERT) => off + f6::RA_OPTIONS,
            Some(t6::NEIGHBOR_SOLICIT | t6::NEIGHBOR_ADVERT) => {
                self.addr_field(w, off, f6::ND_TARGET, op);
                off + f6::NS_NA_OPTIONS
            }
            Some(t6::REDIRECT) => {
                self.addr_field(w, off, f6::ND_TARGET, op);
                self.addr_field(w, off, f6::REDIRECT_DST, op);
                off + f6::REDIRECT_OPTIONS
            }
            Some(t6::MLD_QUERY..=t6::MLD_DONE) => {
                self.addr_field(w, off, f6::MLD_ADDR, op);
                // An MLDv2 query: its sources.
                if ty == Some(t6::MLD_QUERY) {
                    if let Some(n) = w.msg_word(off, f6::MLD_QUERY_NUM_SRCS) {
                        self.addr_list(w, off + f6::MLD_QUERY_SRCS, usize::from(n));
                    }
                }
                return;
            }
            Some(t6::MLDV2_REPORT) => return self.mldv2_report(w, off),
            _ => return,
        };
        // The options are hidden in the checksum even where not captured.
        w.sums.taint(options);
        self.nd_options(w, options);
    }

    /// `n` IPv6 addresses from `at`, as far as captured (past that they
    /// are hidden in the checksum, which [`Work::write`] notes once).
    fn addr_list(&mut self, w: &mut Work<'_>, at: usize, n: usize) {
        for k in 0..n {
            let a = at + 16 * k;
            self.addr(w, a, 16, self.ip_op);
            if a >= w.frame.len().min(w.limit) {
                return;
            }
        }
    }

    /// ND options from `i` to the end of the message.
    fn nd_options(&mut self, w: &mut Work<'_>, mut i: usize) {
        let end = w.limit.min(w.frame.len());
        while i + 2 <= end {
            let (t, l) = (w.frame[i], usize::from(w.frame[i + 1]) * 8);
            if l == 0 {
                w.zero(i + 2, end - i - 2);
                return;
            }
            match t {
                // Source / target link-layer address: Ethernet's 6 bytes.
                nd::SOURCE_LL | nd::TARGET_LL if l == 8 => {
                    self.mac(w, i + nd::LL_ADDR.start, self.eth_op)
                }
                nd::PREFIX_INFO if l == 32 => self.addr_field(w, i, nd::PREFIX, self.ip_op),
                nd::ROUTE_INFO if l <= 24 => {
                    let p = nd::ROUTE_PREFIX;
                    self.addr(w, i + p, l.saturating_sub(p), self.ip_op)
                }
                nd::RDNSS => {
                    let mut a = i + nd::RDNSS_ADDRS;
                    while a + 16 <= i + l {
                        self.addr(w, a, 16, self.ip_op);
                        a += 16;
                    }
                }
                nd::MTU | nd::NONCE => {}
                // The Redirected Header's quoted packet, longer link-layer
                // addresses, options not understood.
                _ => w.zero(i + 2, l - 2),
            }
            i += l;
        }
    }

    /// MLDv2 report (RFC 3810): records of a group address and sources.
    fn mldv2_report(&mut self, w: &mut Work<'_>, off: usize) {
        let mut r = off + f6::MLD_REPORT_RECORDS;
        w.sums.taint(r);
        let op = self.ip_op;
        let Some(records) = w.msg_word(off, f6::MLD_REPORT_NUM_RECORDS) else {
            return;
        };
        for _ in 0..records {
            let (Some(aux), Some(n)) = (
                w.byte(r + mld_record::AUX_LEN),
                w.msg_word(r, mld_record::NUM_SRCS),
            ) else {
                return;
            };
            let n = usize::from(n);
            self.addr_field(w, r, mld_record::ADDR, op);
            self.addr_list(w, r + mld_record::SRCS, n);
            let aux_at = r + mld_record::SRCS + 16 * n;
            let aux = usize::from(aux) * 4;
            w.zero(aux_at, aux);
            r = aux_at + aux;
            if r >= w.limit.min(w.frame.len()) {
                return;
            }
        }
    }
}
