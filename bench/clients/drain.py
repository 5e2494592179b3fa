"""drain: the Python side of the benchmark's client-loop comparison
(bench/run, clients phase; the same steps as crates/client/examples/drain.rs).

    python3 drain.py SOCKET INTERFACE COUNT
"""

import sys
import time

import ringcap


def main():
    sock, iface, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with ringcap.Session(iface, filter="udp", snaplen=96, socket=sock) as s:
        print("ready", flush=True)
        sys.stdin.readline()
        n = nbytes = 0
        t0 = last = time.monotonic()
        while n < want and time.monotonic() - last < 2.0:
            got = 0
            for p in s.read():
                got += 1
                nbytes += len(p.data)
            n += got
            if got == 0:
                s.wait(0.01)
            else:
                last = time.monotonic()
        print("drained %d packets %d bytes in %.6f s" % (n, nbytes, time.monotonic() - t0), flush=True)


if __name__ == "__main__":
    main()
