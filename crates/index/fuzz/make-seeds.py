#!/usr/bin/env python3
"""Writes the seeds of the `index` fuzz target into seeds/ (run from this
directory with a built ringcap: RINGCAP=path/to/ringcap, default `ringcap`
on PATH; the output is committed, this script is how it was made).

Four small captures, indexed by `ringcap index`: IPv4 TCP/UDP to many
hosts and ports (more than one key block of addresses), IPv6 with VLAN
tags, a pcapng of two sections (two epochs), and 60 interleaved flows whose
hosts and client ports hold the same groups (lists written once, the other
keys referring to them), and one flow with a host in 1 packet of 500
(its packets' positions listed). The captures themselves are not kept, only their indexes.
"""
import os
import shutil
import struct
import subprocess
import tempfile

T0 = 1_764_165_600  # 2025-11-26T14:00:00Z


def eth(t, payload, vlan=None):
    h = bytes.fromhex("020000000002020000000001")
    if vlan is not None:
        h += struct.pack("!HH", 0x8100, vlan)
    return h + struct.pack("!H", t) + payload


def ipv4(proto, src, dst, payload):
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0, 64, proto, 0,
                       bytes(src), bytes(dst)) + payload


def ipv6(nh, src, dst, payload):
    return struct.pack("!IHBB16s16s", 6 << 28, len(payload), nh, 64, bytes(src), bytes(dst)) + payload


def l4(proto, sp, dp):
    if proto == 17:
        return struct.pack("!HHHH", sp, dp, 8, 0)
    return struct.pack("!HHIIBBHHH", sp, dp, 1, 0, 5 << 4, 0x10, 65535, 0, 0)


def v4_frames(n):
    out = []
    for i in range(n):
        proto = (6, 17, 47)[i % 3]
        src = [198, 18, i % 7, 1]
        dst = [198, 19, (i * 37) % 256, (i * 11) % 250 + 1]
        payload = l4(proto, 1024 + i % 40, (53, 80, 443, 123, 8000 + i)[i % 5]) if proto != 47 else b"\0" * 4
        out.append(eth(0x0800, ipv4(proto, src, dst, payload)))
    return out


def v6_frames(n):
    out = []
    for i in range(n):
        src = [0xFD, 0x52, 0x43, 0] + [0] * 11 + [1 + i % 5]
        dst = [0xFD, 0x52, 0x43, 1] + [0] * 10 + [i >> 8, i & 0xFF]
        proto = (6, 17)[i % 2]
        out.append(eth(0x86DD, ipv6(proto, src, dst, l4(proto, 5000 + i % 9, (22, 53, 443)[i % 3])),
                       vlan=(10, 20, 30)[i % 3] if i % 4 else None))
    return out


def flow_frames(n, flows):
    """Flows with hosts and client ports of their own, interleaved: lists
    that other keys share (written once, the others referring to it)."""
    out = []
    for i in range(n):
        f = (i * 7 + i // 13) % flows
        src = [198, 18, 1, f + 1]
        dst = [198, 19, 2, f + 1]
        out.append(eth(0x0800, ipv4(6, src, dst, l4(6, 40000 + f, 443))))
    return out


def rare_host_frames(n, every):
    """One flow, and a host in 1 packet of `every`: a key in enough groups,
    and few enough, to get its packets' positions (index format 6)."""
    out = []
    for i in range(n):
        src = [198, 18, 9, 9] if i % every == 3 else [198, 18, 1, 1]
        out.append(eth(0x0800, ipv4(17, src, [198, 19, 2, 2], l4(17, 4000, 53))))
    return out


def pcap(frames):
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)
    for i, f in enumerate(frames):
        out += struct.pack("<IIII", T0 + i // 10, (i % 10) * 100_000, len(f), len(f)) + f
    return out


def block(t, body):
    body += b"\0" * (-len(body) % 4)
    n = 12 + len(body)
    return struct.pack("<II", t, n) + body + struct.pack("<I", n)


def pcapng_section(frames, t):
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack("<HHI", 1, 0, 0))
    for i, f in enumerate(frames):
        us = (t + i // 10) * 1_000_000 + i
        out += block(6, struct.pack("<IIIII", 0, us >> 32, us & 0xFFFFFFFF, len(f), len(f)) + f)
    return out


def main():
    ringcap = os.environ.get("RINGCAP", "ringcap")
    captures = {
        "v4": pcap(v4_frames(400)),
        "v6-vlan": pcap(v6_frames(300)),
        "shared-lists": pcap(flow_frames(2400, 60)),
        "two-sections": pcapng_section(v4_frames(120), T0) + pcapng_section(v6_frames(120), T0 + 60),
        "positions": pcap(rare_host_frames(40000, 500)),
    }
    os.makedirs("seeds", exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        for name, b in captures.items():
            ext = "pcapng" if name == "two-sections" else "pcap"
            path = os.path.join(d, f"{name}.{ext}")
            with open(path, "wb") as f:
                f.write(b)
            subprocess.run([ringcap, "index", path], check=True, stdout=subprocess.DEVNULL)
            idx = os.path.join(d, f".{name}.{ext}.ringcap-index")
            limit = 16384 if name == "positions" else 4096
            assert os.path.getsize(idx) < limit, (name, os.path.getsize(idx))
            shutil.copyfile(idx, os.path.join("seeds", f"{name}.ringcap-index"))


if __name__ == "__main__":
    main()
