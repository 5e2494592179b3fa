"""A small reader of classic pcap files (µs or ns), for comparing with tcpdump."""

import struct


def read_pcap(path):
    """[(timestamp_ns, wire_len, data)] of a pcap file."""
    b = open(path, "rb").read()
    magic = struct.unpack_from("<I", b, 0)[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        e = "<"
    else:
        magic = struct.unpack_from(">I", b, 0)[0]
        e = ">"
        assert magic in (0xA1B2C3D4, 0xA1B23C4D), f"{path}: not a pcap file"
    scale = 1 if magic == 0xA1B23C4D else 1000
    out = []
    off = 24
    rec = struct.Struct(e + "IIII")
    while off + 16 <= len(b):
        sec, frac, cap, wire = rec.unpack_from(b, off)
        off += 16
        assert off + cap <= len(b), f"{path}: a record runs past the end"
        out.append((sec * 1_000_000_000 + frac * scale, wire, b[off : off + cap]))
        off += cap
    assert off == len(b), f"{path}: {len(b) - off} stray bytes at the end"
    return out
