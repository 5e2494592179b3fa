"""A hostile (or broken) sensor for `ringcap query --sensor` tests.

Serves HTTPS on 127.0.0.1 with the server certificate `ringcap serve-keys`
made (client certificates required, as `ringcap serve` does), answers every
request the way MODE says, and prints its port on the first line of stdout.
Every loop that sends is bounded (count and time): a client that stops
reading ends it.

    python3 fake_sensor.py CERTS MODE [ARG]
"""
import socket
import ssl
import struct
import sys
import threading
import time

certs, mode = sys.argv[1], sys.argv[2]
arg = int(sys.argv[3]) if len(sys.argv) > 3 else 0
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(certs + "/server_cert.pem", certs + "/server_key.pem")
ctx.load_verify_locations(certs + "/ca_cert.pem")
ctx.verify_mode = ssl.CERT_REQUIRED
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(8)
print(ls.getsockname()[1], flush=True)
T0 = 1_700_000_000
END = time.monotonic() + 60  # nothing here runs longer


def pcap_header(linktype=1, snap=262144):
    return struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, snap, linktype)


def record(sec, data):
    return struct.pack("<IIII", sec, 0, len(data), len(data)) + data


def block(kind, body):
    body += b"\0" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack("<II", kind, n) + body + struct.pack("<I", n)


def option(code, value):
    return struct.pack("<HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def shb():
    return block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))


def idb(linktype, opts=b""):
    return block(1, struct.pack("<HHI", linktype, 0, 262144) + opts + option(9, b"\x09") + b"\0" * 4)


def epb(iface, ts_ns, data):
    return block(6, struct.pack("<IIIII", iface, ts_ns >> 32, ts_ns & 0xFFFFFFFF, len(data), len(data)) + data)


def chunk(c, b):
    c.sendall(b"%x\r\n" % len(b) + b + b"\r\n")


OK = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
ETHER = bytes.fromhex("025243000002025243000001") + b"\x08\x00"
RAW_IP = bytes.fromhex("45000014" "00000000" "40060000" "c6120001" "c6130001")


def good(n):
    return pcap_header() + b"".join(record(T0 + i, ETHER + bytes([i % 256]) * 46) for i in range(n))


def answer(c):
    if mode == "endless_error":
        c.sendall(b"HTTP/1.1 500 Internal Server Error\r\ntransfer-encoding: chunked\r\n\r\n")
        while time.monotonic() < END:
            chunk(c, b"A" * 65536)
    elif mode == "escapes":
        b = b"\x1b[2J\x1b]0;title\x07 sensor b: 0 packets\n" + "\u202e\u2066\u200b".encode()
        c.sendall(b"HTTP/1.1 403 Forbidden\r\ncontent-length: %d\r\n\r\n" % len(b) + b)
        time.sleep(1)
    elif mode == "good":
        c.sendall(OK)
        chunk(c, good(arg))
        c.sendall(b"0\r\n\r\n")
        time.sleep(1)
    elif mode == "stall":
        c.sendall(OK)
        chunk(c, pcap_header())
        time.sleep(30)
    elif mode == "cut":
        c.sendall(OK)
        chunk(c, good(3))
        time.sleep(0.5)
        c.close()
    elif mode == "big_record":
        c.sendall(OK)
        chunk(c, pcap_header(snap=1 << 28) + struct.pack("<IIII", T0, 0, arg, arg))
        sent = 0
        while sent < arg and time.monotonic() < END:
            n = min(1 << 20, arg - sent)
            chunk(c, b"\0" * n)
            sent += n
        c.sendall(b"0\r\n\r\n")
        time.sleep(1)
    elif mode == "interface_flood":
        c.sendall(OK)
        chunk(c, shb())
        big = idb(1, option(2, b"N" * 65000) + option(3, b"D" * 65000))
        while time.monotonic() < END:
            chunk(c, big * 16)
    elif mode == "many_interfaces":
        c.sendall(OK)
        chunk(c, shb() + idb(1) * arg + epb(0, T0 * 10**9, ETHER + b"\0" * 46))
        c.sendall(b"0\r\n\r\n")
        time.sleep(1)
    elif mode == "link_type":
        c.sendall(OK)
        chunk(c, pcap_header(linktype=arg) + record(T0, ETHER + b"\x11" * 46))
        c.sendall(b"0\r\n\r\n")
        time.sleep(1)
    elif mode == "small_interface_flood":
        # Interface blocks of 20 bytes, just under 8 MiB of them, then a packet.
        c.sendall(OK)
        chunk(c, shb())
        small = block(1, struct.pack("<HHI", 1, 0, 262144))
        for _ in range(((8 << 20) - 4096) // (len(small) * 4096)):
            chunk(c, small * 4096)
        chunk(c, epb(0, T0 * 10**9, ETHER + b"\0" * 46))
        c.sendall(b"0\r\n\r\n")
        time.sleep(1)
    elif mode == "two_link_types":
        c.sendall(OK)
        body = shb() + idb(1) + idb(101)
        body += epb(0, T0 * 10**9, ETHER + b"\xee" * 46)
        body += epb(1, (T0 + 1) * 10**9, RAW_IP)
        chunk(c, body)
        c.sendall(b"0\r\n\r\n")
        time.sleep(1)


def handle(s):
    try:
        c = ctx.wrap_socket(s, server_side=True)
        req = b""
        while b"\r\n\r\n" not in req:
            got = c.recv(65536)
            if not got:
                return
            req += got
        answer(c)
    except (OSError, ssl.SSLError):
        pass  # the client hung up: what these tests want of it
    finally:
        s.close()


while time.monotonic() < END:
    ls.settimeout(max(0.1, END - time.monotonic()))
    try:
        s, _ = ls.accept()
    except OSError:
        break
    threading.Thread(target=handle, args=(s,), daemon=True).start()
