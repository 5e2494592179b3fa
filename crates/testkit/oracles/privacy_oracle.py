#!/usr/bin/env python3
"""Test oracle for ringcap's privacy transforms, independent of ringcap's code.

Given the original capture (tcpdump's, as root) and ringcap's rewritten one
of the same packets, it checks with tshark's dissection (PDML: every field
with its byte position) and PyPI's yacryptopan:

* every IPv4/IPv6/ARP address tshark finds (outer, tunnelled, quoted by an
  ICMP error) is yacryptopan's image of the original (or zero when masked),
  MAC addresses are zero when eth.addr is masked, and keep their
  individual/group and universal/local bits when anonymized (broadcast
  and all-zero stay themselves);
* every masked field tshark finds is zero in the rewritten packet;
* no byte changed outside those fields and the checksum fields;
* every checksum tshark verifies as good in the original is good in the
  rewritten packet (IPv4 header, TCP, UDP, ICMP, ICMPv6, GRE).

Prints a JSON summary; exits 1 with the problems listed when any check fails.
"""

import argparse
import ipaddress
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

from yacryptopan import CryptoPAn

ADDR_V4 = {"ip.src", "ip.dst", "arp.src.proto_ipv4", "arp.dst.proto_ipv4", "icmp.redir_gw"}
ADDR_V6 = {"ipv6.src", "ipv6.dst", "ipv6.routing.src.addr", "ipv6.routing.srh.addr",
           "ipv6.routing.mipv6.home_address", "ipv6.opt.mipv6.home_address",
           "icmpv6.nd.ns.target_address", "icmpv6.nd.na.target_address",
           "icmpv6.nd.rd.target_address", "icmpv6.nd.rd.destination_address",
           "icmpv6.mld.multicast_address"}
MACS = {"eth.dst", "eth.src", "arp.src.hw_mac", "arp.dst.hw_mac",
        "icmpv6.opt.linkaddr", "icmpv6.opt.src_linkaddr", "icmpv6.opt.target_linkaddr"}
# Zeroed whenever anything is hidden: an integrity value computed over
# hidden fields.
ZEROED = {"ah.icv"}
CHECKSUMS = {"ip.checksum", "tcp.checksum", "udp.checksum", "icmp.checksum",
             "icmpv6.checksum", "gre.checksum"}
# ringcap mask name -> tshark fields that must read zero.
MASKS = {
    "ip.tos": {"ip.dsfield", "ipv6.tclass"},
    "ip.id": {"ip.id"},
    "ip.ttl": {"ip.ttl", "ipv6.hlim"},
    "ipv6.flow": {"ipv6.flow"},
    "tcp.port": {"tcp.srcport", "tcp.dstport"},
    "udp.port": {"udp.srcport", "udp.dstport"},
    "tcp.seq": {"tcp.seq_raw", "tcp.ack_raw"},
    "tcp.window": {"tcp.window_size_value"},
    "tcp.options": {"tcp.options"},
    "icmp.echo": {"icmp.ident", "icmp.seq", "icmpv6.echo.identifier",
                  "icmpv6.echo.sequence_number"},
}
PREFS = ["-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
         "-o", "udp.check_checksum:TRUE", "-o", "ip.defragment:FALSE",
         "-o", "ipv6.defragment:FALSE"]


def packets(path):
    """Per packet: the list of (name, pos, size, show, value) of its fields."""
    out = subprocess.run(["tshark", "-n", "-r", path, "-T", "pdml"] + PREFS,
                         check=True, capture_output=True).stdout
    root = ET.fromstring(out)
    result = []
    for pkt in root.iter("packet"):
        fields = []
        for pr in pkt.iter("proto"):
            if pr.get("pos") is not None and pr.get("size") is not None:
                names = {f.get("name") for f in pr.iter("field")}
                # A transport header tshark could not dissect to its checksum
                # (cut short, or a bogus TCP data offset).
                # A malformed IP header: the rewrite zeroes from it on.
                if pr.get("name") == "ip" and "ip.bogus_header_length" in names:
                    fields.append(("opaque:", int(pr.get("pos")), 0, "", ""))
                if pr.get("name") in ("tcp", "udp") and pr.get("name") + ".checksum" not in names:
                    fields.append(("short:" + pr.get("name"), int(pr.get("pos")),
                                   int(pr.get("size")), "", ""))
        for f in pkt.iter("field"):
            pos, size = f.get("pos"), f.get("size")
            if pos is None or size is None:
                continue
            fields.append((f.get("name", ""), int(pos), int(size), f.get("show", ""),
                           f.get("value", "")))
        result.append(fields)
    return result


def read_pcap(path):
    """Frames of a pcap file (any byte order, us or ns)."""
    import struct
    data = open(path, "rb").read()
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    off = 24
    frames = []
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        frames.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return frames


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("original")
    ap.add_argument("rewritten")
    ap.add_argument("--key", required=True)
    ap.add_argument("--anonymize", default="")
    ap.add_argument("--mask", default="")
    a = ap.parse_args()
    key = bytes.fromhex(open(a.key).read().strip())
    cp = CryptoPAn(key)
    anon = set(filter(None, a.anonymize.split(",")))
    mask = set(filter(None, a.mask.split(",")))

    orig_frames, new_frames = read_pcap(a.original), read_pcap(a.rewritten)
    orig_pdml, new_pdml = packets(a.original), packets(a.rewritten)
    problems = []
    stats = {"packets": len(orig_frames), "addresses_checked": 0, "masked_checked": 0,
             "checksums_good_before": 0, "checksums_good_after": 0, "bytes_changed": 0}
    if len(orig_frames) != len(new_frames):
        problems.append(f"{len(orig_frames)} packets in the original, {len(new_frames)} rewritten")
    for i, (o, n) in enumerate(zip(orig_frames, new_frames)):
        if len(o) != len(n):
            problems.append(f"packet {i}: length {len(o)} became {len(n)}")
            continue
        allowed = set()
        ofields = orig_pdml[i]
        nfields = new_pdml[i]
        for name, pos, size, show, value in ofields:
            span = range(pos, pos + size)
            if pos + size > len(o):
                continue
            if name in ADDR_V4 or name in ADDR_V6:
                allowed.update(span)
                if "ip.addr" in mask:
                    want = bytes(size)
                elif "ip.addr" in anon:
                    addr = ipaddress.ip_address(o[pos:pos + size])
                    want = ipaddress.ip_address(cp.anonymize(str(addr))).packed
                else:
                    want = o[pos:pos + size]
                stats["addresses_checked"] += 1
                if n[pos:pos + size] != want:
                    problems.append(f"packet {i}: {name} at {pos} is {n[pos:pos+size].hex()}, want {want.hex()} (from {o[pos:pos+size].hex()})")
            elif name in MACS:
                if "eth.addr" in mask:
                    allowed.update(span)
                    stats["masked_checked"] += 1
                    if any(n[pos:pos + size]):
                        problems.append(f"packet {i}: {name} at {pos} not zeroed")
                elif "eth.addr" in anon:
                    allowed.update(span)
                    # An image keeps the group and local bits; broadcast stays.
                    stats["addresses_checked"] += 1
                    was, now = o[pos:pos + size], n[pos:pos + size]
                    if size == 6 and was in (b"\xff" * 6, b"\0" * 6) and now != was:
                        problems.append(f"packet {i}: {name} at {pos}: {was.hex()} became {now.hex()}")
                    elif size == 6 and (was[0] & 3) != (now[0] & 3):
                        problems.append(f"packet {i}: {name} at {pos}: group/local bits of {was.hex()} changed in {now.hex()}")
            elif name in CHECKSUMS:
                allowed.update(span)
            elif name == "opaque:":
                allowed.update(range(pos, len(o)))
                if any(n[pos:]):
                    problems.append(f"packet {i}: bytes after a malformed IP header at {pos} not zeroed")
            elif name in ZEROED:
                allowed.update(span)
                if any(n[pos:pos + size]):
                    problems.append(f"packet {i}: {name} at {pos} not zeroed")
            elif name.startswith("short:"):
                # Fixed fields of a header tshark could not dissect: masked
                # ones must read zero, as far as they were captured.
                proto = name[6:]
                fixed = {"tcp.port": (0, 4), "tcp.seq": (4, 12), "tcp.window": (14, 16),
                         "udp.port": (0, 4)}
                top = min(pos + (20 if proto == "tcp" else 8), pos + size, len(o))
                allowed.update(range(pos, top))
                for m, (a0, a1) in fixed.items():
                    if m in mask and m.startswith(proto):
                        stats["masked_checked"] += 1
                        if any(n[pos + a0:min(pos + a1, top)]):
                            problems.append(f"packet {i}: {m} of a short {proto} header not zeroed")
            for m in mask:
                if name in MASKS.get(m, ()):
                    allowed.update(span)
        # Masked fields read zero in the rewritten dissection.
        for name, pos, size, show, value in nfields:
            for m in mask:
                if name in MASKS.get(m, ()):
                    stats["masked_checked"] += 1
                    try:
                        v = int(show, 0)
                    except ValueError:
                        v = int(value or "0", 16)
                    if name == "tcp.options":
                        v = int(value or "0", 16)
                    if v != 0:
                        problems.append(f"packet {i}: masked {name} reads {show!r}")
        changed = [j for j in range(len(o)) if o[j] != n[j]]
        stats["bytes_changed"] += len(changed)
        stray = [j for j in changed if j not in allowed]
        if stray:
            problems.append(f"packet {i}: bytes {stray[:8]} changed outside the rewritten fields")
        # Checksums tshark found good before must be good after.
        good_before = [(nm, p) for nm, p, s, sh, v in ofields if nm.endswith("checksum.status") and sh == "1"]
        good_after = {(nm, p) for nm, p, s, sh, v in nfields if nm.endswith("checksum.status") and sh == "1"}
        bad_after = [(nm, p) for nm, p, s, sh, v in nfields if nm.endswith("checksum.status") and sh == "0"]
        stats["checksums_good_before"] += len(good_before)
        stats["checksums_good_after"] += len(good_after)
        for g in good_before:
            if g not in good_after:
                problems.append(f"packet {i}: {g[0]} at {g[1]} good before, not after")
        for b in bad_after:
            problems.append(f"packet {i}: {b[0]} at {b[1]} bad after the rewrite")
    stats["problems"] = len(problems)
    print(json.dumps(stats))
    for p in problems[:50]:
        print(p, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
