#!/usr/bin/env python3
"""Writes the seeds of the `read` fuzz target into seeds/ (run from this
directory; the output is committed, this script is how it was made).

Small valid captures of every shape ringcap_format::Reader reads: pcap with
micro- and nanosecond timestamps in both byte orders, pcapng (two interfaces
with different timestamp resolutions, enhanced and simple packet blocks,
two sections of different byte orders). The compressed seeds come from
ringcap's own encoder:
  ringcap capture -r seeds/pcap-ns-le.pcap -w seeds/compressed-ns.rcz
  ringcap capture -r seeds/pcap-us-le.pcap --tstamp-precision micro \
      -w seeds/compressed-us.rcz
"""
import os
import struct


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def eth(t, payload, vlan=None):
    h = bytes.fromhex("020000000002") + bytes.fromhex("020000000001")
    if vlan is not None:
        h += struct.pack("!HH", 0x8100, vlan)
    return h + struct.pack("!H", t) + payload


def ipv4(proto, src, dst, payload):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0, 64, proto, 0,
                    bytes(src), bytes(dst))
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload


def ipv6(nh, src, dst, payload):
    return struct.pack("!IHBB16s16s", 6 << 28, len(payload), nh, 64, bytes(src), bytes(dst)) + payload


def udp(sp, dp, data):
    return struct.pack("!HHHH", sp, dp, 8 + len(data), 0) + data


def tcp(sp, dp, flags, data=b""):
    return struct.pack("!HHIIBBHHH", sp, dp, 1000, 0, 5 << 4, flags, 65535, 0, 0) + data


A = [198, 18, 0, 1]
B = [198, 18, 0, 2]
A6 = [0xFD, 0x52, 0x43] + [0] * 12 + [1]
B6 = [0xFD, 0x52, 0x43] + [0] * 12 + [2]

FRAMES = [
    eth(0x0800, ipv4(17, A, B, udp(40000, 53, b"\x12\x34\x01\x00\x00\x01" + b"\0" * 6))),
    eth(0x0800, ipv4(6, A, B, tcp(40001, 80, 0x02))),
    eth(0x0800, ipv4(6, B, A, tcp(80, 40001, 0x12))),
    eth(0x86DD, ipv6(6, A6, B6, tcp(40002, 443, 0x18, b"hello"))),
    eth(0x0800, ipv4(1, A, B, b"\x08\x00\xf7\xff\x00\x00\x00\x00"), vlan=42),
    eth(0x0806, bytes.fromhex("0001080006040001020000000001c6120001000000000000c6120002")),
]
T0 = 1_764_165_600  # 2025-11-26T14:00:00Z


def pcap(order, nano, frames):
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, 262144, 1)
    for i, f in enumerate(frames):
        frac = (i * 1_234_567) if nano else (i * 1_234)
        out += struct.pack(order + "IIII", T0 + i, frac, len(f), len(f)) + f
    return out


def block(order, t, body):
    body += b"\0" * (-len(body) % 4)
    n = 12 + len(body)
    return struct.pack(order + "II", t, n) + body + struct.pack(order + "I", n)


def opt(order, code, v):
    return struct.pack(order + "HH", code, len(v)) + v + b"\0" * (-len(v) % 4)


def shb(order):
    return block(order, 0x0A0D0D0A,
                 struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1)
                 + opt(order, 4, b"make-seeds.py") + opt(order, 0, b""))


def idb(order, linktype, snaplen, name, tsresol=None, tsoffset=None):
    o = opt(order, 2, name)
    if tsresol is not None:
        o += opt(order, 9, bytes([tsresol]))
    if tsoffset is not None:
        o += opt(order, 14, struct.pack(order + "q", tsoffset))
    o += opt(order, 11, b"\0udp or tcp")
    return block(order, 1, struct.pack(order + "HHI", linktype, 0, snaplen) + o + opt(order, 0, b""))


def epb(order, iface, ticks, f, caplen=None):
    cap = f[: caplen if caplen is not None else len(f)]
    return block(order, 6, struct.pack(order + "IIIII", iface, ticks >> 32, ticks & 0xFFFFFFFF,
                                       len(cap), len(f)) + cap + b"\0" * (-len(cap) % 4) + opt(order, 1, b"c") + opt(order, 0, b""))


def spb(order, f):
    return block(order, 3, struct.pack(order + "I", len(f)) + f)


def pcapng(order):
    out = shb(order)
    out += idb(order, 1, 262144, b"eth0")  # microseconds (default)
    out += idb(order, 1, 64, b"eth1", tsresol=9, tsoffset=1)  # ns, snaplen 64
    for i, f in enumerate(FRAMES):
        us = (T0 + i) * 1_000_000 + i
        ns = (T0 + i) * 1_000_000_000 + i
        out += epb(order, i % 2, us if i % 2 == 0 else ns, f, None if i % 2 == 0 else min(len(f), 64))
    out += spb(order, FRAMES[0])
    # An interface statistics block and a name resolution block, skipped.
    out += block(order, 5, struct.pack(order + "III", 0, T0 >> 0, 0) + opt(order, 0, b""))
    out += block(order, 4, struct.pack(order + "HH", 0, 0))
    return out


def main():
    os.makedirs("seeds", exist_ok=True)
    seeds = {
        "pcap-us-le.pcap": pcap("<", False, FRAMES),
        "pcap-us-be.pcap": pcap(">", False, FRAMES),
        "pcap-ns-le.pcap": pcap("<", True, FRAMES),
        "pcap-ns-be.pcap": pcap(">", True, FRAMES),
        "pcapng-le.pcapng": pcapng("<"),
        "pcapng-be.pcapng": pcapng(">"),
        # Two sections of different byte orders.
        "pcapng-2sections.pcapng": pcapng("<") + pcapng(">"),
    }
    for name, b in seeds.items():
        assert len(b) < 4096, name
        with open(os.path.join("seeds", name), "wb") as f:
            f.write(b)


if __name__ == "__main__":
    main()
