"""scapy through libringcap_pcap.so (issue 29): run unmodified scapy with
`conf.use_pcap = True` under `ringcap run`, as an unprivileged user.

  scapy_client.py sniff IFACE FILTER COUNT OUT.pcap
      sniff() COUNT packets matching FILTER (30 s at most) and write them.
      Prints "sniffing" on stderr once scapy's capture is open.
  scapy_client.py send IFACE IN.pcap
      send every frame of IN.pcap with scapy's libpcap socket, 2 ms apart;
      one line per frame: "I sent" or "I refused MESSAGE" (libpcap's error).
"""

import sys
import time

from scapy.config import conf

conf.use_pcap = True

from scapy.all import rdpcap, sniff, wrpcap  # noqa: E402
from scapy.libs.winpcapy import pcap_geterr  # noqa: E402


def do_sniff(iface, flt, count, out):
    got = sniff(
        iface=iface,
        filter=flt,
        count=count,
        timeout=30,
        started_callback=lambda: print("sniffing", file=sys.stderr, flush=True),
    )
    wrpcap(out, got, linktype=1)
    print(f"got {len(got)}", flush=True)


def do_send(iface, path):
    sock = conf.L2socket(iface=iface)
    for i, frame in enumerate(rdpcap(path)):
        n = sock.send(bytes(frame))
        if n == len(frame):
            print(f"{i} sent", flush=True)
        else:
            err = pcap_geterr(sock.pcap_fd.pcap).decode(errors="replace")
            print(f"{i} refused {err}", flush=True)
        time.sleep(0.002)
    sock.close()


if __name__ == "__main__":
    if sys.argv[1] == "sniff":
        do_sniff(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif sys.argv[1] == "send":
        do_send(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
