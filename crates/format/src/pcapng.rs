//! Writing pcapng (the "PCAP Next Generation" format of the IETF opsawg draft).
//!
//! A pcapng file is a sequence of blocks, each starting with a block type and a
//! total length and ending with the same total length again, all padded to 32-bit
//! boundaries. ringcap writes one section header block (SHB), one interface
//! description block (IDB) per capture interface, then enhanced packet blocks
//! (EPB), and interface statistics blocks (ISB) when it stops. Everything is
//! written in the host's byte order (readers detect it from the SHB) and all
//! timestamps are nanoseconds since the Unix epoch (`if_tsresol` = 9).
//!
//! The header blocks are built into fresh `Vec`s (they are written rarely); the
//! packet block is split into [`write_epb_header`] and [`write_epb_trailer`] so the
//! capture path can copy the packet bytes straight into its output buffer between
//! the two calls.

/// Block type of a section header block.
pub const BT_SHB: u32 = 0x0A0D_0D0A;
/// Block type of an interface description block.
pub const BT_IDB: u32 = 1;
/// Block type of the obsolete packet block (read, never written).
pub const BT_PB: u32 = 2;
/// Block type of a simple packet block (read, never written).
pub const BT_SPB: u32 = 3;
/// Block type of a name resolution block (read and skipped, never written).
pub const BT_NRB: u32 = 4;
/// Block type of an interface statistics block.
pub const BT_ISB: u32 = 5;
/// Block type of an enhanced packet block.
pub const BT_EPB: u32 = 6;
/// Byte-order magic inside the SHB, written in the writer's byte order.
pub const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;

/// Block type of ringcap's padding block: a block type in the range the
/// pcapng draft reserves for local use (most significant bit set), whose body
/// means nothing. Readers skip blocks of types they do not know; tshark,
/// capinfos and tcpdump (libpcap) were checked to skip this one silently,
/// while a custom block (0x0BAD / 0x40000BAD) is shown by tshark 4.0 as a
/// frame of its own and counted by capinfos. The in-place writer of whole
/// TPACKET_V3 ring blocks (`ringcap_source::inplace`) uses it to cover the
/// kernel's block descriptor, the packet headers between packets and the
/// slack up to a page boundary.
pub const BT_PAD: u32 = 0x8052_4350;
/// Smallest padding block: type, total length and the trailing length.
pub const PAD_MIN: usize = 12;

/// Writes a padding block ([`BT_PAD`]) over all of `dst`: its type and total
/// length at the start and the length again at the end. The body is left as
/// it is (readers skip it). Returns false, writing nothing, when `dst` cannot
/// be one block (shorter than [`PAD_MIN`], not a multiple of 4, or longer
/// than a block length can say).
#[inline]
pub fn write_pad_block(dst: &mut [u8]) -> bool {
    let n = dst.len();
    if n < PAD_MIN || !n.is_multiple_of(4) || n > u32::MAX as usize {
        return false;
    }
    dst[0..4].copy_from_slice(&BT_PAD.to_ne_bytes());
    dst[4..8].copy_from_slice(&(n as u32).to_ne_bytes());
    dst[n - 4..].copy_from_slice(&(n as u32).to_ne_bytes());
    true
}

/// A padding block that takes a file of `len` bytes (a multiple of 4) to the
/// next multiple of `page`, zero-filled; empty when it is there already. At
/// least [`PAD_MIN`] bytes, so it may go one `page` further.
pub fn pad_to(len: u64, page: u64) -> Vec<u8> {
    let mut gap = ((page - len % page) % page) as usize;
    if gap == 0 {
        return Vec::new();
    }
    if gap < PAD_MIN {
        gap += page as usize;
    }
    let mut v = vec![0u8; gap];
    write_pad_block(&mut v);
    v
}

/// Offset of the packet data inside an EPB: block type, total length, interface
/// id, timestamp high, timestamp low, captured length, original length.
pub const EPB_DATA_OFFSET: usize = 28;

/// Option code ending an option list.
pub const OPT_ENDOFOPT: u16 = 0;
/// Option code of a free-text comment, valid in every block.
pub const OPT_COMMENT: u16 = 1;
/// SHB option: description of the hardware.
pub const SHB_HARDWARE: u16 = 2;
/// SHB option: name of the operating system.
pub const SHB_OS: u16 = 3;
/// SHB option: name of the application that wrote the file.
pub const SHB_USERAPPL: u16 = 4;
/// IDB option: interface name.
pub const IF_NAME: u16 = 2;
/// IDB option: interface description.
pub const IF_DESCRIPTION: u16 = 3;
/// IDB option: timestamp resolution (one byte).
pub const IF_TSRESOL: u16 = 9;
/// IDB option: capture filter (first byte is the filter type, 0 = libpcap string).
pub const IF_FILTER: u16 = 11;
/// IDB option: offset in seconds added to every timestamp of the interface.
pub const IF_TSOFFSET: u16 = 14;
/// ISB option: time the capture started.
pub const ISB_STARTTIME: u16 = 2;
/// ISB option: time the capture ended.
pub const ISB_ENDTIME: u16 = 3;
/// ISB option: packets received by the interface.
pub const ISB_IFRECV: u16 = 4;
/// ISB option: packets the interface dropped.
pub const ISB_IFDROP: u16 = 5;
/// ISB option: packets accepted by the filter.
pub const ISB_FILTERACCEPT: u16 = 6;
/// ISB option: packets the operating system dropped.
pub const ISB_OSDROP: u16 = 7;
/// ISB option: packets delivered to the user (i.e. written).
pub const ISB_USRDELIV: u16 = 8;

/// Longest option value written; longer strings are cut (at a character
/// boundary). A multiple of 4 so that the padded length still fits in 16 bits.
const MAX_OPTION_LEN: usize = 0xFFFC;

/// Rounds `n` up to a multiple of 4.
#[inline]
const fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

/// Appends one option (code, length, value, zero padding).
fn push_option(out: &mut Vec<u8>, code: u16, value: &[u8]) {
    let value = &value[..value.len().min(MAX_OPTION_LEN)];
    out.extend_from_slice(&code.to_ne_bytes());
    out.extend_from_slice(&(value.len() as u16).to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len() + pad4(value.len()) - value.len(), 0);
}

/// Appends a UTF-8 string option; empty strings are left out.
fn push_str_option(out: &mut Vec<u8>, code: u16, s: &str) {
    if s.is_empty() {
        return;
    }
    let mut end = s.len().min(MAX_OPTION_LEN);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    push_option(out, code, &s.as_bytes()[..end]);
}

/// Appends a 64-bit timestamp option as two 32-bit halves (high first).
fn push_ts_option(out: &mut Vec<u8>, code: u16, ts_ns: u64) {
    let mut v = [0u8; 8];
    v[..4].copy_from_slice(&((ts_ns >> 32) as u32).to_ne_bytes());
    v[4..].copy_from_slice(&(ts_ns as u32).to_ne_bytes());
    push_option(out, code, &v);
}

/// Starts a block: type and a placeholder for the total length.
fn start_block(block_type: u32, capacity: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(capacity);
    b.extend_from_slice(&block_type.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b
}

/// Ends a block: closes the option list if `options_from` is not the end (some
/// option was written), then fills in both copies of the total length.
fn finish_block(mut b: Vec<u8>, options_from: usize) -> Vec<u8> {
    if b.len() > options_from {
        push_option(&mut b, OPT_ENDOFOPT, &[]);
    }
    let total = (b.len() + 4) as u32;
    b[4..8].copy_from_slice(&total.to_ne_bytes());
    b.extend_from_slice(&total.to_ne_bytes());
    b
}

/// A section header block with the options `shb_os`, `shb_userappl` and
/// `opt_comment` (e.g. the command line; left out when `None`), and a section
/// length of -1 (unknown). Empty strings are left out.
pub fn section_header(os: &str, userappl: &str, comment: Option<&str>) -> Vec<u8> {
    section_header_with_hardware(None, os, userappl, comment)
}

/// Like [`section_header`], with an `shb_hardware` option as well when
/// `hardware` is given.
pub fn section_header_with_hardware(
    hardware: Option<&str>,
    os: &str,
    userappl: &str,
    comment: Option<&str>,
) -> Vec<u8> {
    let mut b = start_block(BT_SHB, 128);
    b.extend_from_slice(&BYTE_ORDER_MAGIC.to_ne_bytes());
    b.extend_from_slice(&1u16.to_ne_bytes());
    b.extend_from_slice(&0u16.to_ne_bytes());
    b.extend_from_slice(&(-1i64).to_ne_bytes());
    let options_from = b.len();
    if let Some(h) = hardware {
        push_str_option(&mut b, SHB_HARDWARE, h);
    }
    push_str_option(&mut b, SHB_OS, os);
    push_str_option(&mut b, SHB_USERAPPL, userappl);
    if let Some(c) = comment {
        push_str_option(&mut b, OPT_COMMENT, c);
    }
    finish_block(b, options_from)
}

/// What an interface description block says about one capture interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterfaceDescription<'a> {
    /// Link-layer type (LINKTYPE_*, e.g. 1 for Ethernet).
    pub linktype: u16,
    /// Snapshot length: no packet of this interface has more captured bytes.
    pub snaplen: u32,
    /// Interface name (`if_name`), e.g. "eth0"; left out when empty.
    pub name: &'a str,
    /// Capture filter as a libpcap filter string (`if_filter`, type 0).
    pub filter: Option<&'a str>,
    /// Free-text description (`if_description`).
    pub description: Option<&'a str>,
}

/// An interface description block with the options `if_name`, `if_description`
/// (if any), `if_tsresol` = 9 (nanoseconds), `if_filter` (type byte 0, a libpcap
/// filter string, if any) and `opt_endofopt`.
pub fn interface_description(idb: &InterfaceDescription) -> Vec<u8> {
    let mut b = start_block(BT_IDB, 96);
    b.extend_from_slice(&idb.linktype.to_ne_bytes());
    b.extend_from_slice(&0u16.to_ne_bytes());
    b.extend_from_slice(&idb.snaplen.to_ne_bytes());
    let options_from = b.len();
    push_str_option(&mut b, IF_NAME, idb.name);
    if let Some(d) = idb.description {
        push_str_option(&mut b, IF_DESCRIPTION, d);
    }
    push_option(&mut b, IF_TSRESOL, &[9]);
    if let Some(f) = idb.filter {
        let mut v = Vec::with_capacity(f.len() + 1);
        v.push(0u8);
        let mut end = f.len().min(MAX_OPTION_LEN - 1);
        while !f.is_char_boundary(end) {
            end -= 1;
        }
        v.extend_from_slice(&f.as_bytes()[..end]);
        push_option(&mut b, IF_FILTER, &v);
    }
    finish_block(b, options_from)
}

/// Bytes an EPB without options takes for `caplen` bytes of packet data:
/// 32 bytes of header and trailer plus the data padded to a multiple of 4.
#[inline]
pub const fn epb_len(caplen: usize) -> usize {
    32 + pad4(caplen)
}

/// Writes a whole EPB header into `dst[..28]`: block type, total length (for a
/// block without options, [`epb_len`]), interface id, timestamp (nanoseconds
/// since the epoch, high and low 32 bits), captured length and original length.
///
/// Panics if `dst` is shorter than 28 bytes (a caller bug, not an input error).
#[inline]
pub fn write_epb_header(dst: &mut [u8], interface_id: u32, ts_ns: u64, caplen: u32, wire_len: u32) {
    let h = &mut dst[..EPB_DATA_OFFSET];
    let total = epb_len(caplen as usize) as u32;
    h[0..4].copy_from_slice(&BT_EPB.to_ne_bytes());
    h[4..8].copy_from_slice(&total.to_ne_bytes());
    h[8..12].copy_from_slice(&interface_id.to_ne_bytes());
    h[12..16].copy_from_slice(&((ts_ns >> 32) as u32).to_ne_bytes());
    h[16..20].copy_from_slice(&(ts_ns as u32).to_ne_bytes());
    h[20..24].copy_from_slice(&caplen.to_ne_bytes());
    h[24..28].copy_from_slice(&wire_len.to_ne_bytes());
}

/// Finishes an EPB after the caller has put `caplen` bytes of packet data at
/// `dst[28..28 + caplen]`: writes the zero padding and the trailing total length.
/// `dst` starts at the block start and must hold [`epb_len`]`(caplen)` bytes.
///
/// Panics if `dst` is shorter than that (a caller bug, not an input error).
#[inline]
pub fn write_epb_trailer(dst: &mut [u8], caplen: u32) {
    let caplen = caplen as usize;
    let total = epb_len(caplen);
    let data_end = EPB_DATA_OFFSET + caplen;
    let padded_end = EPB_DATA_OFFSET + pad4(caplen);
    dst[data_end..padded_end].fill(0);
    dst[padded_end..total].copy_from_slice(&(total as u32).to_ne_bytes());
}

/// Counters and times for an interface statistics block. Every `None` option is
/// left out of the block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceStatistics {
    /// Index of the interface (order of the IDBs in the section).
    pub interface_id: u32,
    /// Time the statistics were taken, nanoseconds since the epoch.
    pub ts_ns: u64,
    /// `isb_starttime`: when the capture started, nanoseconds since the epoch.
    pub starttime_ns: Option<u64>,
    /// `isb_endtime`: when the capture ended, nanoseconds since the epoch.
    pub endtime_ns: Option<u64>,
    /// `isb_ifrecv`: packets received from the interface.
    pub ifrecv: Option<u64>,
    /// `isb_ifdrop`: packets dropped by the interface (e.g. ring full).
    pub ifdrop: Option<u64>,
    /// `isb_filteraccept`: packets accepted by the capture filter.
    pub filteraccept: Option<u64>,
    /// `isb_osdrop`: packets dropped by the operating system.
    pub osdrop: Option<u64>,
    /// `isb_usrdeliv`: packets delivered to the user (written to the file).
    pub usrdeliv: Option<u64>,
    /// `opt_comment`: free text.
    pub comment: Option<String>,
}

/// An interface statistics block with the options given in `s` (`isb_starttime`,
/// `isb_endtime`, `isb_ifrecv`, `isb_ifdrop`, `isb_filteraccept`, `isb_osdrop`,
/// `isb_usrdeliv`, `opt_comment`), in that order. Timestamps are nanoseconds, the
/// resolution of ringcap's interfaces, split into high and low 32 bits.
pub fn interface_statistics(s: &InterfaceStatistics) -> Vec<u8> {
    let mut b = start_block(BT_ISB, 128);
    b.extend_from_slice(&s.interface_id.to_ne_bytes());
    b.extend_from_slice(&((s.ts_ns >> 32) as u32).to_ne_bytes());
    b.extend_from_slice(&(s.ts_ns as u32).to_ne_bytes());
    let options_from = b.len();
    if let Some(t) = s.starttime_ns {
        push_ts_option(&mut b, ISB_STARTTIME, t);
    }
    if let Some(t) = s.endtime_ns {
        push_ts_option(&mut b, ISB_ENDTIME, t);
    }
    let counters = [
        (ISB_IFRECV, s.ifrecv),
        (ISB_IFDROP, s.ifdrop),
        (ISB_FILTERACCEPT, s.filteraccept),
        (ISB_OSDROP, s.osdrop),
        (ISB_USRDELIV, s.usrdeliv),
    ];
    for (code, value) in counters {
        if let Some(v) = value {
            push_option(&mut b, code, &v.to_ne_bytes());
        }
    }
    if let Some(c) = &s.comment {
        push_str_option(&mut b, OPT_COMMENT, c);
    }
    finish_block(b, options_from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], i: usize) -> u32 {
        u32::from_ne_bytes(b[i..i + 4].try_into().unwrap())
    }

    /// Every block: length a multiple of 4, both length fields equal the size.
    fn check_framing(b: &[u8]) {
        assert_eq!(b.len() % 4, 0);
        assert_eq!(u32_at(b, 4) as usize, b.len());
        assert_eq!(u32_at(b, b.len() - 4) as usize, b.len());
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn shb_bytes() {
        let b = section_header("Linux", "ringcap", Some("ringcap -i eth0"));
        check_framing(&b);
        #[rustfmt::skip]
        let want: Vec<u8> = vec![
            0x0a, 0x0d, 0x0d, 0x0a, // block type
            76, 0, 0, 0,            // total length
            0x4d, 0x3c, 0x2b, 0x1a, // byte-order magic
            1, 0, 0, 0,             // version 1.0
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // section length -1
            3, 0, 5, 0, b'L', b'i', b'n', b'u', b'x', 0, 0, 0, // shb_os
            4, 0, 7, 0, b'r', b'i', b'n', b'g', b'c', b'a', b'p', 0, // shb_userappl
            1, 0, 15, 0, b'r', b'i', b'n', b'g', b'c', b'a', b'p', b' ', b'-', b'i', b' ',
            b'e', b't', b'h', b'0', 0, // opt_comment
            0, 0, 0, 0, // opt_endofopt
            76, 0, 0, 0, // total length
        ];
        assert_eq!(b, want);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn shb_without_options_and_with_hardware() {
        let b = section_header("", "", None);
        #[rustfmt::skip]
        assert_eq!(b, vec![
            0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 28, 0, 0, 0,
        ]);
        let b = section_header_with_hardware(Some("x86_64"), "", "", None);
        check_framing(&b);
        #[rustfmt::skip]
        assert_eq!(&b[24..], &[
            2, 0, 6, 0, b'x', b'8', b'6', b'_', b'6', b'4', 0, 0,
            0, 0, 0, 0,
            44, 0, 0, 0,
        ]);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn idb_bytes() {
        let b = interface_description(&InterfaceDescription {
            linktype: 1,
            snaplen: 262144,
            name: "eth0",
            filter: Some("tcp"),
            description: Some("uplink"),
        });
        check_framing(&b);
        #[rustfmt::skip]
        assert_eq!(b, vec![
            1, 0, 0, 0,       // block type
            60, 0, 0, 0,      // total length
            1, 0, 0, 0,       // linktype 1, reserved
            0, 0, 4, 0,       // snaplen 262144
            2, 0, 4, 0, b'e', b't', b'h', b'0', // if_name
            3, 0, 6, 0, b'u', b'p', b'l', b'i', b'n', b'k', 0, 0, // if_description
            9, 0, 1, 0, 9, 0, 0, 0, // if_tsresol = 9
            11, 0, 4, 0, 0, b't', b'c', b'p', // if_filter, libpcap string
            0, 0, 0, 0,       // opt_endofopt
            60, 0, 0, 0,      // total length
        ]);
        let b = interface_description(&InterfaceDescription {
            linktype: 113,
            snaplen: 65535,
            name: "any",
            filter: None,
            description: None,
        });
        #[rustfmt::skip]
        assert_eq!(b, vec![
            1, 0, 0, 0, 40, 0, 0, 0, 113, 0, 0, 0, 0xff, 0xff, 0, 0,
            2, 0, 3, 0, b'a', b'n', b'y', 0,
            9, 0, 1, 0, 9, 0, 0, 0,
            0, 0, 0, 0,
            40, 0, 0, 0,
        ]);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn epb_bytes() {
        let data = [0xaa, 0xbb, 0xcc, 0xdd, 0xee];
        let mut b = vec![0x55u8; epb_len(data.len())];
        assert_eq!(b.len(), 40);
        let ts = 0x0001_0203_0405_0607u64;
        write_epb_header(&mut b, 2, ts, 5, 1514);
        b[EPB_DATA_OFFSET..EPB_DATA_OFFSET + 5].copy_from_slice(&data);
        write_epb_trailer(&mut b, 5);
        #[rustfmt::skip]
        assert_eq!(b, vec![
            6, 0, 0, 0,               // block type
            40, 0, 0, 0,              // total length
            2, 0, 0, 0,               // interface id
            0x03, 0x02, 0x01, 0x00,   // ts high
            0x07, 0x06, 0x05, 0x04,   // ts low
            5, 0, 0, 0,               // caplen
            0xea, 0x05, 0, 0,         // original length 1514
            0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0, 0, 0, // data + padding
            40, 0, 0, 0,              // total length
        ]);
    }

    #[test]
    fn epb_lengths() {
        assert_eq!(epb_len(0), 32);
        assert_eq!(epb_len(1), 36);
        assert_eq!(epb_len(4), 36);
        assert_eq!(epb_len(60), 92);
        assert_eq!(epb_len(61), 96);
        for caplen in 0..20u32 {
            let mut b = vec![0xffu8; epb_len(caplen as usize)];
            write_epb_header(&mut b, 0, 1, caplen, caplen);
            b[28..28 + caplen as usize].fill(7);
            write_epb_trailer(&mut b, caplen);
            check_framing(&b);
            assert!(b[28 + caplen as usize..b.len() - 4].iter().all(|&x| x == 0));
        }
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn isb_bytes() {
        let s = InterfaceStatistics {
            interface_id: 1,
            ts_ns: 0x0000_0001_0000_0002,
            starttime_ns: Some(0x0000_0003_0000_0004),
            endtime_ns: None,
            ifrecv: Some(100),
            ifdrop: Some(2),
            filteraccept: None,
            osdrop: Some(3),
            usrdeliv: Some(98),
            comment: Some("hi".to_string()),
        };
        let b = interface_statistics(&s);
        check_framing(&b);
        #[rustfmt::skip]
        assert_eq!(b, vec![
            5, 0, 0, 0,       // block type
            96, 0, 0, 0,      // total length
            1, 0, 0, 0,       // interface id
            1, 0, 0, 0,       // ts high
            2, 0, 0, 0,       // ts low
            2, 0, 8, 0, 3, 0, 0, 0, 4, 0, 0, 0, // isb_starttime
            4, 0, 8, 0, 100, 0, 0, 0, 0, 0, 0, 0, // isb_ifrecv
            5, 0, 8, 0, 2, 0, 0, 0, 0, 0, 0, 0,   // isb_ifdrop
            7, 0, 8, 0, 3, 0, 0, 0, 0, 0, 0, 0,   // isb_osdrop
            8, 0, 8, 0, 98, 0, 0, 0, 0, 0, 0, 0,  // isb_usrdeliv
            1, 0, 2, 0, b'h', b'i', 0, 0,         // opt_comment
            0, 0, 0, 0,       // opt_endofopt
            96, 0, 0, 0,      // total length
        ]);
        let b = interface_statistics(&InterfaceStatistics::default());
        #[rustfmt::skip]
        assert_eq!(b, vec![5, 0, 0, 0, 24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 24, 0, 0, 0]);
    }

    #[test]
    fn long_strings_are_cut_to_fit() {
        let long = "é".repeat(40_000); // 80 000 bytes
        let b = section_header(&long, "x", Some(&long));
        check_framing(&b);
        let idb = interface_description(&InterfaceDescription {
            linktype: 1,
            snaplen: 0,
            name: &long,
            filter: Some(&long),
            description: Some(&long),
        });
        check_framing(&idb);
        // Option lengths stay within 16 bits and strings stay valid UTF-8.
        let len = u16::from_ne_bytes([b[26], b[27]]) as usize;
        assert!(len <= MAX_OPTION_LEN);
        assert!(std::str::from_utf8(&b[28..28 + len]).is_ok());
    }

    #[test]
    fn padding_blocks() {
        for len in [0u64, 4, 8, 100, 4084, 4088, 4092, 4096, 8000] {
            let pad = pad_to(len, 4096);
            assert_eq!((len + pad.len() as u64) % 4096, 0, "{len}");
            if !pad.is_empty() {
                check_framing(&pad);
                assert!(pad.len() >= PAD_MIN);
                assert_eq!(&pad[..4], &BT_PAD.to_ne_bytes());
            }
        }
        let mut small = [0u8; 8];
        assert!(!write_pad_block(&mut small));
        let mut odd = [0u8; 14];
        assert!(!write_pad_block(&mut odd));
        assert_eq!(odd, [0; 14]);
    }
}
