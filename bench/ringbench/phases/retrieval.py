"""Phase `retrieval` (issue 27): finding packets again.

- Capture CPU per packet with the index on (the default: each published
  file is indexed by a background thread of the same process, counted in its
  rusage) and off (`--no-index`), same traffic, same run.
- Rotated files of many flows (>= 100,000, IMIX sizes, TCP and UDP): index
  bytes as a share of pcap bytes, and the CPU to build them (`ringcap index`).
- Selective queries (one flow, one host, one port) over those files: `ringcap
  query` through the index vs `tcpdump -r` of every file, with a warm and a
  cold page cache (sync + drop_caches before each cold run); the packet counts
  must agree. stenographer (stenotype's index + stenoread) is not measured
  here yet: see bench/README.md.
"""

import os
import random
import resource
import shutil
import struct
import subprocess
import time

from ..common import CAP_CPU, IMIX, log
from ..tools import count_pcap

T0_US = 1764000000 * 1000000


def _frame(size, proto, src, dst, sport, dport, i):
    """A `size`-byte Ethernet/IPv4 frame, TCP or UDP (made-up MACs)."""
    l4 = 20 if proto == 6 else 8
    size = max(size, 14 + 20 + l4)
    ip_len = size - 14
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_len, i & 0xffff, 0, 64, proto, 0, src, dst)
    s = sum(struct.unpack("!10H", ip))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    ip = ip[:10] + struct.pack("!H", (~s) & 0xffff) + ip[12:]
    if proto == 6:
        l4h = struct.pack("!HHIIBBHHH", sport, dport, i, 0, 0x50, 0x18, 65535, 0, 0)
    else:
        l4h = struct.pack("!HHHH", sport, dport, ip_len - 20, 0)
    return (bytes.fromhex("025243000002025243000001") + b"\x08\x00" + ip + l4h
            + b"R" * (size - 14 - 20 - l4))


def flow_of(i):
    """Flow i: (proto, src, dst, sport, dport); dport 3306 for 1 flow in 1000."""
    src = bytes([198, 18, (i >> 8) & 0xff, i & 0xff])
    j = (i * 7919) & 0xffff
    dst = bytes([198, 19, j >> 8, j & 0xff])
    proto = 17 if i % 3 == 0 else 6
    sport = 1024 + (i * 31) % 60000
    dport = 3306 if i % 1000 == 7 else (80, 443, 53, 8080, 22, 25, 123)[i % 7]
    return proto, src, dst, sport, dport


def write_files(dirname, total_bytes, nfiles, flows):
    """Rotated pcap files (µs) of `flows` flows, random packets of them."""
    rnd = random.Random(27)
    sizes = []
    for s, n in IMIX:
        sizes += [s] * n
    frames = []
    for i in range(flows):
        proto, src, dst, sport, dport = flow_of(i)
        frames.append(_frame(sizes[i % len(sizes)], proto, src, dst, sport, dport, i))
    hdr = struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1)
    rec = struct.Struct("<IIII")
    per_file = total_bytes // nfiles
    ts = T0_US
    paths, npkts = [], 0
    for f in range(nfiles):
        p = os.path.join(dirname, "cap-%04d.pcap" % f)
        written = len(hdr)
        with open(p, "wb", buffering=1 << 22) as out:
            out.write(hdr)
            while written < per_file:
                chunk = []
                for _ in range(4096):
                    fr = frames[rnd.randrange(flows)]
                    ts += 1
                    chunk.append(rec.pack(ts // 1000000, ts % 1000000, len(fr), len(fr)))
                    chunk.append(fr)
                    written += 16 + len(fr)
                npkts += len(chunk) // 2
                out.write(b"".join(chunk))
        paths.append(p)
    return paths, npkts


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def _run(argv):
    """Runs argv pinned to the capture CPU: (seconds, cpu seconds, result)."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=3600,
                       preexec_fn=lambda: os.sched_setaffinity(0, {CAP_CPU}))
    secs = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    return secs, cpu, r


class RetrievalPhase:
    """Mixin of Bench."""

    def phase_retrieval(self):
        rc = self.tools.get("ringcap")
        if not rc or not rc.available():
            log("== retrieval: skipped (%s)" % (rc.why_unavailable() if rc else "no ringcap"))
            return
        self._retrieval_capture()
        self._retrieval_queries(rc.path)

    def _retrieval_capture(self):
        tools = [self.tools[n] for n in ("ringcap", "ringcap-noindex")
                 if n in self.tools and self.tools[n].available()]
        if len(tools) < 2:
            return
        count = self.args.count or self.p.get("retrieval_count", self.p["count"])
        reps = self.args.reps or self.p.get("retrieval_reps", 1)
        for size in self.p.get("retrieval_sizes", [64, 1500]):
            snap = 64 if size == 64 else 65535
            log("== retrieval: capture CPU with and without the index, %s B, snap %d, "
                "%d packets, to disk" % (size, snap, count))
            for rep in range(reps):
                for t in tools:
                    r = self.measure(t, size, snap, "disk", count, rep=rep,
                                     extra=dict(kind="retrieval_capture",
                                                index=t.name == "ringcap"))
                    log("  %-16s sent %s written %s lost %s%% cpu %s ns/pkt%s"
                        % (t.name, r["sent"], r["written"], r["lost_pct"],
                           r["cpu_ns_per_pkt"], " ERROR " + r["error"] if r["error"] else ""))

    def _retrieval_queries(self, ringcap):
        mb = self.p.get("retrieval_mb", 100)
        nfiles = self.p.get("retrieval_files", 10)
        flows = self.p.get("retrieval_flows", 100000)
        d = os.path.join(self.work, "retrieval")
        os.makedirs(d, exist_ok=True)
        free = shutil.disk_usage(d).free
        if free < 3 * mb * 1000 * 1000:
            mb = max(10, free // 3 // 1000000)
            log("retrieval: only %d MB free, files cut to %d MB" % (free // 1000000, mb))
        t0 = time.monotonic()
        paths, npkts = write_files(d, mb * 1000 * 1000, nfiles, flows)
        pcap_bytes = sum(os.path.getsize(p) for p in paths)
        log("== retrieval: %d files, %d packets of %d flows, %.0f MB (written in %.1f s)"
            % (len(paths), npkts, flows, pcap_bytes / 1e6, time.monotonic() - t0))
        secs, cpu, r = _run([ringcap, "index"] + paths)
        idx = [os.path.join(d, "." + os.path.basename(p) + ".ringcap-index") for p in paths]
        idx_bytes = sum(os.path.getsize(p) for p in idx if os.path.exists(p))
        rec = dict(kind="retrieval_index", files=len(paths), packets=npkts, flows=flows,
                   pcap_bytes=pcap_bytes, index_bytes=idx_bytes,
                   share_pct=round(100.0 * idx_bytes / pcap_bytes, 3),
                   seconds=round(secs, 3), cpu_s=round(cpu, 3),
                   cpu_ns_per_pkt=round(cpu * 1e9 / npkts, 1),
                   error=None if r.returncode == 0 else r.stderr[-300:])
        self.emit(rec)
        log("  index: %d bytes = %.3f%% of the pcap bytes, built in %.2f s (%.0f ns CPU/packet)"
            % (idx_bytes, rec["share_pct"], secs, rec["cpu_ns_per_pkt"]))
        a = flow_of(4242)
        ip = lambda b: ".".join(str(x) for x in b)  # noqa: E731
        queries = [
            ("one flow", "host %s and host %s and port %d and port %d"
             % (ip(a[1]), ip(a[2]), a[3], a[4])),
            ("one host", "host %s" % ip(flow_of(777)[1])),
            ("one port", "port 3306"),
        ]
        out = os.path.join(self.work, "retrieval-out.pcap")
        for label, flt in queries:
            for cache in ("cold", "warm"):
                res = {}
                for tool in ("ringcap", "tcpdump"):
                    if cache == "warm":
                        self._retrieval_query(tool, ringcap, d, paths, flt, out)  # warm-up
                    else:
                        drop_caches()
                    secs, cpu, n, err = self._retrieval_query(tool, ringcap, d, paths, flt, out)
                    res[tool] = (secs, n)
                    self.emit(dict(kind="retrieval", query=label, filter=flt, cache=cache,
                                   tool=tool, seconds=round(secs, 4), cpu_s=round(cpu, 4),
                                   packets=n, pcap_bytes=pcap_bytes, error=err))
                (rs, rn), (ts, tn) = res["ringcap"], res["tcpdump"]
                log("  %-9s %s: ringcap query %.3f s, tcpdump -r %.3f s (%.0fx); %s / %s packets%s"
                    % (label, cache, rs, ts, ts / rs if rs else 0, rn, tn,
                       "" if rn == tn else " MISMATCH"))
        shutil.rmtree(d, ignore_errors=True)

    def _retrieval_query(self, tool, ringcap, d, paths, flt, out):
        """One query: (seconds, cpu seconds, packets, error)."""
        if tool == "ringcap":
            secs, cpu, r = _run([ringcap, "query", "-d", d, "-w", out, flt])
            if r.returncode != 0:
                return secs, cpu, None, r.stderr[-300:]
            return secs, cpu, count_pcap(out), None
        total_s, total_cpu, n = 0.0, 0.0, 0
        for p in paths:
            secs, cpu, r = _run(["tcpdump", "-r", p, "-w", out, flt])
            total_s += secs
            total_cpu += cpu
            if r.returncode != 0:
                return total_s, total_cpu, None, r.stderr[-300:]
            n += count_pcap(out)
        return total_s, total_cpu, n, None


def print_retrieval(results):
    """The retrieval tables (called by report.print_report)."""
    from ..common import median, fmt
    from .. import report
    cap = [r for r in results if r.get("kind") == "retrieval_capture"]
    idx = [r for r in results if r.get("kind") == "retrieval_index"]
    q = [r for r in results if r.get("kind") == "retrieval"]
    if not (cap or idx or q):
        return
    print("\n## Retrieval (issue 27)\n")
    if cap:
        rows = []
        for size in sorted({r["frame_size"] for r in cap}, key=str):
            on = [r["cpu_ns_per_pkt"] for r in cap if r["frame_size"] == size and r["index"]
                  and r.get("cpu_ns_per_pkt") is not None]
            off = [r["cpu_ns_per_pkt"] for r in cap if r["frame_size"] == size
                   and not r["index"] and r.get("cpu_ns_per_pkt") is not None]
            lost = [r["lost_pct"] for r in cap if r["frame_size"] == size
                    and r.get("lost_pct") is not None]
            m_on, m_off = median(on), median(off)
            rows.append([str(size), fmt(m_off, "{:.0f}"), fmt(m_on, "{:.0f}"),
                         fmt(100.0 * (m_on - m_off) / m_off if m_on and m_off else None,
                             "{:+.1f}"), fmt(max(lost) if lost else None, "{:.2f}")])
        print(report.table(["frame", "cpu ns/pkt no index", "cpu ns/pkt index",
                            "overhead %", "max lost %"], rows))
    for r in idx:
        print("\n  %d files, %d packets of %d flows, %.0f MB: index %d bytes = %.3f%%, "
              "built in %.2f s (%.0f ns CPU/packet)%s"
              % (r["files"], r["packets"], r["flows"], r["pcap_bytes"] / 1e6, r["index_bytes"],
                 r["share_pct"], r["seconds"], r["cpu_ns_per_pkt"],
                 " ERROR " + r["error"] if r.get("error") else ""))
    if q:
        rows = []
        for label in dict.fromkeys(r["query"] for r in q):
            for cache in ("cold", "warm"):
                by = {r["tool"]: r for r in q if r["query"] == label and r["cache"] == cache}
                rq, tq = by.get("ringcap"), by.get("tcpdump")
                if not rq or not tq:
                    continue
                rows.append([label, cache, fmt(rq["seconds"], "{:.3f}"),
                             fmt(tq["seconds"], "{:.3f}"),
                             fmt(tq["seconds"] / rq["seconds"] if rq["seconds"] else None,
                                 "{:.0f}"),
                             "%s/%s" % (rq["packets"], tq["packets"])])
        print()
        print(report.table(["query", "cache", "ringcap query s", "tcpdump -r s", "speed-up",
                            "packets (ringcap/tcpdump)"], rows))
