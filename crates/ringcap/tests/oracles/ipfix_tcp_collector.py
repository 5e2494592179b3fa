#!/usr/bin/env python3
"""A small IPFIX-over-TCP collector written from RFC 7011 alone (no code
shared with ringcap), the test oracle for `--flows ipfix+tcp://`.

Usage: ipfix_tcp_collector.py PORT CONNECTIONS OUT.json

Listens on 127.0.0.1:PORT (prints "ready" once bound), accepts up to
CONNECTIONS connections one after another (each read to its end), and writes
what it found as JSON: per connection, the messages' headers, the templates
(data and options), the decoded data records (element -> integer or address
text, reverse elements keyed "r<ID>"), and every violation of the RFC it
saw (a data set before its template on that connection, a template ID
defined twice on one connection, a length field that lies, a sequence number
that does not count the data records before it).
"""
import ipaddress
import json
import socket
import struct
import sys

ADDR_IES = {8, 12, 27, 28}
REVERSE_PEN = 29305


def read_exact(conn, n):
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def decode_value(ie, raw):
    if ie in ADDR_IES:
        return str(ipaddress.ip_address(raw))
    if ie == 311:  # samplingProbability: float64
        return struct.unpack("!d", raw)[0]
    return int.from_bytes(raw, "big")


def parse_template_records(body, options, templates, conn_out):
    p = 0
    while p + 4 <= len(body):
        tid, count = struct.unpack_from("!HH", body, p)
        p += 4
        scope = 0
        if options:
            (scope,) = struct.unpack_from("!H", body, p)
            p += 2
        fields = []
        for _ in range(count):
            raw, flen = struct.unpack_from("!HH", body, p)
            p += 4
            pen = 0
            if raw & 0x8000:
                (pen,) = struct.unpack_from("!I", body, p)
                p += 4
            fields.append((raw & 0x7FFF, flen, pen))
        if tid in templates:
            conn_out["errors"].append(f"template {tid} defined twice on one connection")
        templates[tid] = fields
        conn_out["templates"].append(
            {"id": tid, "options": options, "scope": scope,
             "fields": [[f[0], f[1], f[2]] for f in fields]})


def handle(conn, conn_out):
    templates = {}
    expected_seq = 0
    while True:
        head = read_exact(conn, 16)
        if head is None:
            return
        version, length, export_time, seq, domain = struct.unpack("!HHIII", head)
        if version != 10 or length < 16:
            conn_out["errors"].append(f"bad header version {version} length {length}")
            return
        body = read_exact(conn, length - 16)
        if body is None:
            conn_out["errors"].append("connection ended inside a message")
            return
        if seq != expected_seq:
            conn_out["errors"].append(f"sequence {seq}, expected {expected_seq}")
        conn_out["messages"].append({"length": length, "seq": seq, "domain": domain})
        off = 0
        data_records = 0
        while off < len(body):
            if off + 4 > len(body):
                conn_out["errors"].append("set header cut")
                break
            set_id, set_len = struct.unpack_from("!HH", body, off)
            if set_len < 4 or off + set_len > len(body):
                conn_out["errors"].append(f"set length {set_len} at {off}")
                break
            sbody = body[off + 4: off + set_len]
            if set_id in (2, 3):
                parse_template_records(sbody, set_id == 3, templates, conn_out)
            elif set_id >= 256:
                fields = templates.get(set_id)
                if fields is None:
                    conn_out["errors"].append(f"data set {set_id} before its template")
                else:
                    rlen = sum(f[1] for f in fields)
                    p = 0
                    while p + rlen <= len(sbody):
                        rec = {"template": set_id}
                        for ie, flen, pen in fields:
                            key = ("r" if pen == REVERSE_PEN else "") + str(ie)
                            rec[key] = decode_value(ie, sbody[p:p + flen])
                            p += flen
                        conn_out["records"].append(rec)
                        data_records += 1
                    if len(sbody) - p >= 4:
                        conn_out["errors"].append("data set with unused bytes")
            off += set_len
        expected_seq = (expected_seq + data_records) % (1 << 32)


def main():
    port, connections, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(4)
    srv.settimeout(60)
    print("ready", flush=True)
    result = []
    for _ in range(connections):
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            break
        conn.settimeout(60)
        conn_out = {"messages": [], "templates": [], "records": [], "errors": []}
        try:
            handle(conn, conn_out)
        except socket.timeout:
            conn_out["errors"].append("timeout")
        conn.close()
        result.append(conn_out)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
