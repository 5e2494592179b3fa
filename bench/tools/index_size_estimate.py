#!/usr/bin/env python3
"""What a flow-indirected index would weigh: a design estimate (issue 27).

ringcap's index (format 4) keeps, per key (IPv4/IPv6 address, port, IP
protocol, VLAN), the list of groups of 32 records holding it, LEB128
delta-coded: ~3 postings a packet when every packet's keys are new to its
group, which is what 100,000 uniformly random flows give (1.87 % of the
pcap bytes on the retrieval bench's files; the goal is 1 %). This script
reads one classic pcap of Ethernet/IPv4 TCP/UDP packets (such as the
retrieval phase's `write_files` output) and prints what an index with one
more level would take instead: keys -> flows (5-tuples, numbered in sorted
order) -> groups, with one posting per (flow, group), coded with LEB128 as
today and with bit-level codes (Rice for flow -> group gaps, one parameter
for the file; an Elias-gamma-like code for key -> flow gaps), plus today's
group table (~8 bytes a group).

    bench/tools/index_size_estimate.py FILE.pcap [GROUP_RECORDS]

Measured on a 250 MB file of the retrieval bench's files (`write_files(DIR,
250e6, 1, 100000)`, 2026-11-27; its format-4 index: 1.87 %): flow -> groups
0.567 % (LEB128) / 0.463 % (Rice), key -> flows 0.510 % / 0.297 %, groups
0.067 %: 1.14 % with today's coding, 0.83 % with bit-level codes.

What it leaves out, found by building it (branch `flows-format5`, format 5
with LEB128, 2026-11-27): traffic whose flows rarely repeat. On that
250 MB file the built index took 1.207 % (format 4: 1.866 %), but on 2 M
64-byte packets of 1 M random flows (`pcapgen.write_many_flow_pcap`) it
took 15.29 % against format 4's 7.24 %, and 3x the CPU: each new flow
posts all its keys, where format 4 posts a key once per group. The capture
bench's traffic (random ports and addresses, nearly every packet a new
flow) is of that kind. A flow index must post a flow's first group as
format 4 does and make flows only of what comes back in another group.
"""
import collections
import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from ringbench.pcapgen import pcap_records  # noqa: E402


def leb(n):
    b = 1
    while n >= 128:
        n >>= 7
        b += 1
    return b


def gamma_bits(n):
    """An Elias-gamma-like code of n >= 0 (n + 1 coded)."""
    return 2 * int(math.log2(n + 1)) + 1


def rice_bits(gaps):
    """Bits of `gaps` in a Rice code with the best single parameter."""
    if not gaps:
        return 0
    return min(sum((g >> k) + 1 + k for g in gaps) for k in range(24)) + 5


def packets(path, group_records):
    data = open(path, "rb").read()
    magic = struct.unpack_from("<I", data, 0)[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        sys.exit("%s: not a little-endian classic pcap" % path)
    group, in_group, out = -1, group_records, []
    for p, cap in pcap_records(data):
        if in_group >= group_records:
            group, in_group = group + 1, 0
        in_group += 1
        if cap >= 38 and data[p + 12:p + 14] == b"\x08\x00":
            ip = data[p + 14:p + 34]
            ihl = (ip[0] & 15) * 4
            sport, dport = struct.unpack_from("!HH", data, p + 14 + ihl)
            out.append(((ip[12:16], ip[16:20], ip[9], sport, dport), group))
    return out, group + 1, len(data)


def main():
    path = sys.argv[1]
    group_records = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    pkts, groups, total = packets(path, group_records)
    flows = sorted({f for f, _ in pkts})
    number = {f: i for i, f in enumerate(flows)}
    flow_groups = collections.defaultdict(list)
    for f, g in pkts:
        lst = flow_groups[number[f]]
        if not lst or lst[-1] != g:
            lst.append(g)
    fg_leb, fg_gaps, fg_lens = 0, [], 0
    for i in range(len(flows)):
        lst, prev, gaps = flow_groups[i], -1, []
        for g in lst:
            gaps.append(g - prev - 1)
            prev = g
        fg_leb += leb(len(lst)) + sum(leb(x) for x in gaps)
        fg_gaps += gaps
        fg_lens += gamma_bits(len(lst))
    fg_bits = rice_bits(fg_gaps) + fg_lens
    keys = collections.defaultdict(list)
    for i, (src, dst, proto, sport, dport) in enumerate(flows):
        for k in (("a", src), ("a", dst), ("p", sport), ("p", dport), ("t", proto)):
            keys[k].append(i)
    kf_leb, kf_bits, last = 0, 0, {}
    for k in sorted(keys):
        lst = sorted(set(keys[k]))
        v = int.from_bytes(k[1], "big") if k[0] == "a" else k[1]
        dv = v - last.get(k[0], -1)
        last[k[0]] = v
        prev, gaps = -1, []
        for x in lst:
            gaps.append(x - prev - 1)
            prev = x
        kf_leb += leb(dv) + leb(len(lst)) + sum(leb(x) for x in gaps)
        kf_bits += gamma_bits(dv) + gamma_bits(len(lst)) + sum(min(17, gamma_bits(g)) for g in gaps)
    pct = lambda b: 100.0 * b / total  # noqa: E731
    print("%s: %d packets, %d groups of %d records, %d flows" % (path, len(pkts), groups, group_records, len(flows)))
    print("flow -> groups: LEB128 %.3f %%, Rice %.3f %%" % (pct(fg_leb), pct(fg_bits / 8)))
    print("key -> flows:   LEB128 %.3f %%, gamma %.3f %%" % (pct(kf_leb), pct(kf_bits / 8)))
    print("group table (8 bytes a group): %.3f %%" % pct(groups * 8))
    print("total: LEB128 %.3f %%, bit-level %.3f %%" % (pct(fg_leb + kf_leb + groups * 8), pct((fg_bits + kf_bits) / 8 + groups * 8)))


if __name__ == "__main__":
    main()
