"""Synthetic input files for the offline phases (pcap writers, frames).
"""

import struct

from .common import IMIX


def write_offline_pcap(path, target_bytes):
    """A pcap of UDP frames of IMIX sizes with varied flows, written directly."""
    hdr = struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1)
    templates = []
    for s, n in IMIX:
        templates += [s] * n
    recs = []
    # 4096 distinct records, reused with fresh timestamps
    for i in range(4096):
        s = templates[i % len(templates)]
        dport = 1024 + (i * 7) % 8192
        sport = 10000 + (i * 131) % 50000
        recs.append(udp_frame(s, bytes([198, 18, 0, 1]),
                              bytes([198, 19, (i >> 8) & 0xff, i & 0xff]), i, sport, dport, b"A"))
    n = 0
    written = len(hdr)
    ts = 1700000000 * 1000000
    with open(path, "wb", buffering=1 << 22) as f:
        f.write(hdr)
        rec_hdr = struct.Struct("<IIII")
        while written < target_bytes:
            chunk = []
            for frame in recs:
                ts += 3
                chunk.append(rec_hdr.pack(ts // 1000000, ts % 1000000, len(frame), len(frame)))
                chunk.append(frame)
                written += 16 + len(frame)
                n += 1
            f.write(b"".join(chunk))
    return n


def write_many_flow_pcap(path, n, flows):
    """n 64-byte IPv4/UDP frames, each of one of `flows` random flows
    (198.18/16 -> 198.19/16): a trace with many addresses, for Crypto-PAn."""
    import random
    rnd = random.Random(1)
    recs = []
    for i in range(flows):
        src = bytes([198, 18, rnd.randrange(256), rnd.randrange(256)])
        dst = bytes([198, 19, rnd.randrange(256), rnd.randrange(256)])
        recs.append(udp_frame(64, src, dst, i, 10000 + i % 5000, 53, b"B"))
    rec_hdr = struct.Struct("<IIII")
    ts = 1700000000 * 1000000
    with open(path, "wb", buffering=1 << 22) as f:
        f.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
        chunk = []
        for _ in range(n):
            fr = recs[rnd.randrange(flows)]
            ts += 2
            chunk.append(rec_hdr.pack(ts // 1000000, ts % 1000000, len(fr), len(fr)))
            chunk.append(fr)
            if len(chunk) >= 65536:
                f.write(b"".join(chunk))
                chunk = []
        f.write(b"".join(chunk))


def write_many_address_pcap(path, n, flows):
    """n 64-byte IPv4/UDP frames over `flows` flows whose 2 * flows
    addresses are all distinct and spread wide (sources in 10/8,
    destinations in 64 /8s from 100/8): Crypto-PAn's hard case (issue 30:
    200,000 addresses in 2 M packets), where translation caches of a few
    thousand entries miss. Every flow appears at least once. The file is
    never sent anywhere."""
    import random
    rnd = random.Random(7)
    seen = set()

    def addr(first):
        while True:
            a = bytes([first, rnd.randrange(256), rnd.randrange(256), rnd.randrange(256)])
            if a not in seen:
                seen.add(a)
                return a
    recs = [udp_frame(64, addr(10), addr(100 + (i & 63)), i, 10000 + i % 5000, 53, b"B")
            for i in range(flows)]
    order = list(range(flows)) + [rnd.randrange(flows) for _ in range(max(0, n - flows))]
    rnd.shuffle(order)
    rec_hdr = struct.Struct("<IIII")
    ts = 1700000000 * 1000000
    with open(path, "wb", buffering=1 << 22) as f:
        f.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
        chunk = []
        for k in order:
            fr = recs[k]
            ts += 2
            chunk.append(rec_hdr.pack(ts // 1000000, ts % 1000000, len(fr), len(fr)))
            chunk.append(fr)
            if len(chunk) >= 65536:
                f.write(b"".join(chunk))
                chunk = []
        f.write(b"".join(chunk))
    return len(seen)


def write_tcp_bulk_pcap(path, n):
    """A TCP bulk transfer's frames (data with timestamp options, an ACK
    every two; IP IDs counting, checksums random as a full checksum looks),
    microsecond timestamps with jitter."""
    import random
    rnd = random.Random(2)
    a, b = bytes([198, 18, 0, 1]), bytes([198, 18, 0, 2])
    rec_hdr = struct.Struct("<IIII")
    ts = 1700000000 * 1000000
    seq, ack, ida, idb, tsval, win = 1000, 5000, 100, 900, 77, 500

    def frame(src, dst, ip_id, sport, dport, seq, ack, win, tsv, tse, payload):
        tcp = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xffffffff, ack & 0xffffffff,
                          8 << 4, 0x10, win, rnd.randrange(65536), 0)
        tcp += struct.pack("!BBBBII", 1, 1, 8, 10, tsv, tse)
        ip_len = 20 + len(tcp) + payload
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_len, ip_id & 0xffff, 0x4000, 64, 6, 0,
                         src, dst)
        ip = ip[:10] + struct.pack("!H", _ip_checksum(ip)) + ip[12:]
        f = bytes.fromhex("025243000002025243000001") + b"\x08\x00" + ip + tcp
        return f + b"\0" * payload, 14 + ip_len

    with open(path, "wb", buffering=1 << 22) as f:
        f.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
        i = 0
        while i < n:
            ts += 10 + rnd.randrange(20)
            if rnd.randrange(100) == 0:
                tsval += 1
            fr, wire = frame(a, b, ida, 40000, 5201, seq, ack, 502, tsval, 999, 1448)
            f.write(rec_hdr.pack(ts // 1000000, ts % 1000000, len(fr), wire) + fr)
            seq, ida, i = seq + 1448, ida + 1, i + 1
            if i % 2 == 0 and i < n:
                ts += rnd.randrange(5)
                win = (win + rnd.randrange(3)) & 0xffff
                fr, wire = frame(b, a, idb, 5201, 40000, ack, seq, win, 999, tsval, 0)
                f.write(rec_hdr.pack(ts // 1000000, ts % 1000000, len(fr), wire) + fr)
                idb, i = idb + 1, i + 1


def write_udp_fragment_pcap(path, n):
    """A 1 kHz stream of 8000-byte UDP datagrams fragmented at MTU 1500
    (6 fragments each), first fragments with the UDP header."""
    rec_hdr = struct.Struct("<IIII")
    ts = 1700000000 * 1000000
    src, dst = bytes([198, 18, 1, 1]), bytes([198, 18, 1, 2])
    with open(path, "wb", buffering=1 << 22) as f:
        f.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
        i, ip_id, dgram = 0, 4000, 8008
        while i < n:
            ts += 1000
            off = 0
            while off < dgram and i < n:
                ln = min(dgram - off, 1480)
                frag = (0x2000 if off + ln < dgram else 0) | (off // 8)
                ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + ln, ip_id, frag, 64, 17, 0,
                                 src, dst)
                ip = ip[:10] + struct.pack("!H", _ip_checksum(ip)) + ip[12:]
                body = (struct.pack("!HHHH", 33000, 9000, dgram, 0x1234) + b"d" * (ln - 8)
                        if off == 0 else b"d" * ln)
                fr = bytes.fromhex("025243000002025243000001") + b"\x08\x00" + ip + body
                f.write(rec_hdr.pack(ts // 1000000, ts % 1000000, len(fr), len(fr)) + fr)
                off, i, ts = off + ln, i + 1, ts + 1
            ip_id = (ip_id + 1) & 0xffff


def write_new_flow_pcap(path, n):
    """n 64-byte IPv4/UDP frames, every one a new flow (issue 30): one host
    pair (198.18.0.1 -> 198.19.0.1), a random ephemeral source port
    (32768-60999) and a random destination port each, IP ID 0, no UDP
    checksum, 2 us apart: all that changes is 32 bits of random ports."""
    import random
    rnd = random.Random(4)
    src, dst = bytes([198, 18, 0, 1]), bytes([198, 19, 0, 1])
    rec_hdr = struct.Struct("<IIII")
    ts = 1700000000 * 1000000
    with open(path, "wb", buffering=1 << 22) as f:
        f.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
        chunk = []
        for _ in range(n):
            fr = udp_frame(64, src, dst, 0, rnd.randrange(32768, 61000), rnd.randrange(1, 65536),
                           b"N")
            ts += 2
            chunk.append(rec_hdr.pack(ts // 1000000, ts % 1000000, len(fr), len(fr)))
            chunk.append(fr)
            if len(chunk) >= 65536:
                f.write(b"".join(chunk))
                chunk = []
        f.write(b"".join(chunk))

def compare_ipv4_addresses(a, b):
    """(packets whose IPv4 source and destination are equal, packets) of two
    little-endian pcaps of Ethernet/IPv4 frames, record by record."""
    def addrs(path):
        with open(path, "rb") as f:
            d = f.read()
        return [d[p + 26:p + 34] for p, _ in pcap_records(d)]
    x, y = addrs(a), addrs(b)
    return sum(1 for p, q in zip(x, y) if p == q), max(len(x), len(y))


def pcap_records(data):
    """Each record of a little-endian classic pcap's bytes `data`: where its
    packet starts in `data`, and its captured length."""
    off = 24
    while off + 16 <= len(data):
        cap = struct.unpack_from("<I", data, off + 8)[0]
        yield off + 16, cap
        off += 16 + cap


def udp_frame(size, src, dst, ip_id, sport, dport, fill):
    """A `size`-byte Ethernet/IPv4/UDP frame (made-up MACs, IPv4 checksum
    right, UDP checksum 0), its payload `fill` repeated."""
    ip_len = size - 14
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_len, ip_id & 0xffff, 0, 64, 17, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", _ip_checksum(ip)) + ip[12:]
    udp = struct.pack("!HHHH", sport, dport, ip_len - 20, 0)
    return (bytes.fromhex("025243000002025243000001") + b"\x08\x00" + ip + udp
            + fill * (size - 42))


def _ip_checksum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff
