#!/usr/bin/env python3
"""Checks the `community_id` of ringcap's JSON flow lines (stdin) with
PyPI's `communityid` (Corelight's reference implementation in Python).

Prints a JSON summary {"checked": N, "mismatches": [...]} and exits 1 when
any line's value differs from the one the package computes for its
addresses, protocol and ports (ICMP: type and code).
"""
import json
import sys

import communityid

cid = communityid.CommunityID(seed=0)
checked = 0
bad = []
for line in sys.stdin:
    if not line.strip():
        continue
    f = json.loads(line)
    proto = f["proto"]
    if proto == 1:
        tpl = communityid.FlowTuple.make_icmp(f["src"], f["dst"], f["icmp_type"], f["icmp_code"])
    elif proto == 58:
        tpl = communityid.FlowTuple.make_icmp6(f["src"], f["dst"], f["icmp_type"], f["icmp_code"])
    elif proto == 6:
        tpl = communityid.FlowTuple.make_tcp(f["src"], f["dst"], f["sport"], f["dport"])
    elif proto == 17:
        tpl = communityid.FlowTuple.make_udp(f["src"], f["dst"], f["sport"], f["dport"])
    elif proto == 132:
        tpl = communityid.FlowTuple.make_sctp(f["src"], f["dst"], f["sport"], f["dport"])
    else:
        tpl = communityid.FlowTuple(proto, f["src"], f["dst"])
    want = cid.calc(tpl)
    checked += 1
    if f.get("community_id") != want:
        bad.append({"line": f, "want": want})
print(json.dumps({"checked": checked, "mismatches": bad[:20]}))
sys.exit(1 if bad else 0)
