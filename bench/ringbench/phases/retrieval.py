"""Phase `retrieval` (issue 27): finding packets again.

- Capture CPU per packet with the index on (the default: the keys are
  taken from the writer's bytes as it writes them, and a thread of the same
  process sorts them and writes each file's index when it is published, all
  counted in the process's rusage) and off (`--no-index`), same traffic,
  same run.
- Rotated files of many flows (>= 100,000, IMIX sizes, TCP and UDP): index
  bytes as a share of pcap bytes, and the CPU to build them (`ringcap index`).
- Selective queries (one flow, one host, one port) over those files: `ringcap
  query` through the index vs `tcpdump -r` of every file, with a warm and a
  cold page cache (sync + drop_caches before each cold run); the packet counts
  must agree.
- stenographer on the same traffic: its server (Debian's `stenographer`,
  running `stenotype` with its index) captures the files replayed by
  tcpreplay over the testbed's veth; its index share, and the same queries
  through `stenocurl /query` (the HTTPS API stenoread uses), cold and warm.
  Its packet counts differ from the files' only by what stenotype dropped.
- Capture to queryable: a live `ringcap capture` into a directory (no
  rotation during the measurement, so every packet is in the file being
  written), bursts of 100 packets, and the time from the end of each burst
  until `ringcap query -d` returns all of them (the query reads the partial
  file up to its last whole record). Goal <= 2 s; stenographer: 1-2 minutes.

Results and what changed between them are in bench/README.md ("Latest
results"); the numbers of the first version (an indexer reading each
published file back, a hash map per key) are kept there too. Where the
goals stand is said next to each run.
"""

import os
import json
import random
import signal
import resource
import shutil
import struct
import subprocess
import time

from ..common import CAP_CPU, IMIX, fmt, log, median
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


def write_files(dirname, total_bytes, nfiles, flows, snap=None):
    """Rotated pcap files (µs) of `flows` flows, random packets of them;
    with `snap`, the same packets cut to `snap` bytes (the files hold as
    many packets as the whole ones: `total_bytes` counts whole packets)."""
    rnd = random.Random(27)
    sizes = []
    for s, n in IMIX:
        sizes += [s] * n
    frames = []
    for i in range(flows):
        proto, src, dst, sport, dport = flow_of(i)
        frames.append(_frame(sizes[i % len(sizes)], proto, src, dst, sport, dport, i))
    hdr = struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, snap or 65535, 1)
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
                    cut = fr[:snap] if snap else fr
                    chunk.append(rec.pack(ts // 1000000, ts % 1000000, len(cut), len(fr)))
                    chunk.append(cut)
                    written += 16 + len(fr)
                npkts += len(chunk) // 2
                out.write(b"".join(chunk))
        paths.append(p)
    return paths, npkts


def _children(pid):
    """Pids whose parent is `pid`."""
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read()
            except OSError:
                continue
            if int(st[st.rindex(")") + 2:].split()[1]) == pid:
                kids.append(int(d))
    return kids


def _steno_tmp():
    tmp = os.environ.get("TMPDIR", "/tmp")
    return [os.path.join(tmp, f) for f in os.listdir(tmp) if f.startswith("stenographer")]


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


# Every CPU the bench may use (the retrieval phase runs no traffic while it
# queries).
ALL_CPUS = os.sched_getaffinity(0)


def _run(argv, cpus=None):
    """Runs argv on `cpus` (default: pinned to the capture CPU): (seconds,
    cpu seconds, result).

    The child inherits this thread's CPUs, set around the spawn (the thread
    then sleeps on them until the child ends): with a `preexec_fn` Python
    forks its whole heap instead of using vfork, ~13 ms more a spawn here (a
    probe with a 60 MB heap, 2026-11-29: `ringcap --version` 24 ms against
    9-11), counted as the tool's time: once a ringcap query, once a file of
    tcpdump's scan."""
    cpus = cpus or {CAP_CPU}
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    was = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        t0 = time.monotonic()
        r = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
        secs = time.monotonic() - t0
    finally:
        os.sched_setaffinity(0, was)
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
        self._retrieval_queryable(rc.path)
        self._retrieval_queries(rc.path)

    def _retrieval_queryable(self, ringcap):
        rounds = self.p.get("retrieval_queryable_rounds", 5)
        d = os.path.join(self.work, "queryable")
        os.makedirs(d, exist_ok=True)
        log("== retrieval: capture to queryable, %d bursts of 100 packets" % rounds)
        cmd = ["ip", "netns", "exec", self.env["CAP_NS"], ringcap, "capture", "-i",
               self.env["CAP_IF"], "--rotate-packets", "100000000", "-w", d + "/", "udp"]
        pr = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, start_new_session=True, text=True,
                              preexec_fn=lambda: os.sched_setaffinity(0, {CAP_CPU}))
        self.children[pr.pid] = pr
        lags, error = [], None
        out = os.path.join(self.work, "queryable-out.pcap")
        try:
            t_end = time.monotonic() + 30
            while time.monotonic() < t_end:
                line = pr.stderr.readline()
                if not line or "capturing on " in line:
                    break
            if pr.poll() is not None:
                raise RuntimeError("ringcap capture ended: rc %s" % pr.returncode)
            for i in range(rounds):
                self.send(64, 100, rate_pps=20000)
                sent = time.monotonic()
                want = 100 * (i + 1)
                while True:
                    r = subprocess.run([ringcap, "query", "-d", d, "-w", out, "udp"],
                                       capture_output=True, text=True, timeout=60)
                    if r.returncode != 0:
                        raise RuntimeError("ringcap query: " + r.stderr[-300:])
                    got = count_pcap(out)
                    if got >= want:
                        lags.append(time.monotonic() - sent)
                        break
                    if time.monotonic() - sent > 30:
                        raise RuntimeError("%d of %d packets queryable after 30 s" % (got, want))
                    time.sleep(0.02)
        except Exception as e:  # noqa: BLE001 - reported in the row
            error = str(e)[-300:]
        finally:
            try:
                os.killpg(pr.pid, signal.SIGINT)
                pr.wait(timeout=20)
            except Exception:  # noqa: BLE001
                os.killpg(pr.pid, signal.SIGKILL)
                pr.wait()
            self.children.pop(pr.pid, None)
            shutil.rmtree(d, ignore_errors=True)
        lags.sort()
        rec = dict(kind="retrieval_queryable", rounds=len(lags),
                   median_s=round(lags[len(lags) // 2], 3) if lags else None,
                   max_s=round(lags[-1], 3) if lags else None,
                   lags_s=[round(x, 3) for x in lags], error=error)
        self.emit(rec)
        log("  capture to queryable: median %s s, max %s s over %d bursts%s"
            % (rec["median_s"], rec["max_s"], len(lags), " ERROR " + error if error else ""))

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
        log("  index: %d bytes = %.3f%% of the pcap bytes, built in %.2f s (%.0f ns CPU/packet)"
            % (idx_bytes, rec["share_pct"], secs, rec["cpu_ns_per_pkt"]))
        # The same packets cut to headers (snap 96): the index's share of those.
        hd = os.path.join(self.work, "retrieval-headers")
        os.makedirs(hd, exist_ok=True)
        try:
            hpaths, _ = write_files(hd, mb * 1000 * 1000, nfiles, flows, snap=96)
            _, _, hr = _run([ringcap, "index"] + hpaths)
            hidx = sum(os.path.getsize(os.path.join(hd, "." + os.path.basename(p)
                                                    + ".ringcap-index"))
                       for p in hpaths)
            hbytes = sum(os.path.getsize(p) for p in hpaths)
            rec.update(headers_pcap_bytes=hbytes, headers_index_bytes=hidx,
                       headers_share_pct=round(100.0 * hidx / hbytes, 3),
                       headers_error=None if hr.returncode == 0 else hr.stderr[-300:])
            log("  headers only (snap 96): index %d bytes = %.3f%% of %.0f MB"
                % (hidx, rec["headers_share_pct"], hbytes / 1e6))
        except OSError as e:
            rec.update(headers_error=str(e))
        finally:
            shutil.rmtree(hd, ignore_errors=True)
        self.emit(rec)
        a = flow_of(4242)
        ip = lambda b: ".".join(str(x) for x in b)  # noqa: E731
        queries = [
            ("one flow", "host %s and host %s and port %d and port %d"
             % (ip(a[1]), ip(a[2]), a[3], a[4])),
            ("one host", "host %s" % ip(flow_of(777)[1])),
            ("one port", "port 3306"),
        ]
        out = os.path.join(self.work, "retrieval-out.pcap")
        qtools = ["ringcap", "tcpdump"]
        self._steno = None
        try:
            if self._steno_start(ringcap, paths, pcap_bytes):
                qtools.append("stenographer")
        except Exception as e:  # noqa: BLE001 - an anchor that fails is skipped, said so
            log("  stenographer: skipped (%s)" % e)
        try:
            self._retrieval_run_queries(queries, qtools, ringcap, d, paths, out, pcap_bytes)
        finally:
            self._steno_stop()
        shutil.rmtree(d, ignore_errors=True)

    def _retrieval_run_queries(self, queries, qtools, ringcap, d, paths, out, pcap_bytes):
        # Each tool's query is run `reps` times (cold: caches dropped before
        # each; warm: after one warm-up) and the median reported, so that one
        # slow or lucky run does not make the row; every run's time is kept.
        reps = max(1, self.args.reps or self.p.get("retrieval_reps", 1))
        for label, flt in queries:
            for cache in ("cold", "warm"):
                res = {}
                for tool in qtools:
                    if cache == "warm":
                        self._retrieval_query(tool, ringcap, d, paths, flt, out)  # warm-up
                    runs = []
                    for _ in range(reps):
                        if cache == "cold":
                            drop_caches()
                        runs.append(self._retrieval_query(tool, ringcap, d, paths, flt, out))
                    secs = median([r[0] for r in runs])
                    cpu = median([r[1] for r in runs])
                    counts = {r[2] for r in runs}
                    err = next((r[3] for r in runs if r[3]), None)
                    if err is None and len(counts) > 1:
                        err = "packet counts differ between runs: %s" % sorted(counts, key=str)
                    n = runs[-1][2]
                    res[tool] = (secs, n)
                    self.emit(dict(kind="retrieval", query=label, filter=flt, cache=cache,
                                   tool=tool, seconds=round(secs, 4), cpu_s=round(cpu, 4),
                                   runs_s=[round(r[0], 4) for r in runs],
                                   packets=n, pcap_bytes=pcap_bytes, error=err))
                (rs, rn), (ts, tn) = res["ringcap"], res["tcpdump"]
                st = res.get("stenographer")
                log("  %-9s %s: ringcap query %.3f s, tcpdump -r %.3f s (%.0fx); %s / %s packets%s%s%s"
                    % (label, cache, rs, ts, ts / rs if rs else 0, rn, tn,
                       "" if rn == tn else " MISMATCH",
                       "; stenographer %.3f s, %s packets" % st if st else "",
                       " (medians of %d runs)" % reps if reps > 1 else ""))

    def _retrieval_query(self, tool, ringcap, d, paths, flt, out):
        """One query: (seconds, cpu seconds, packets, error)."""
        if tool == "stenographer":
            s = self._steno
            t0 = time.monotonic()
            r = subprocess.run(["ip", "netns", "exec", self.env["CAP_NS"], "env",
                                "STENOGRAPHER_CONFIG=" + s["client_config"], "stenocurl",
                                "/query", "-d", flt, "--silent", "--show-error", "-o", out],
                               capture_output=True, text=True, timeout=900)
            secs = time.monotonic() - t0
            if r.returncode != 0:
                return secs, 0.0, None, r.stderr[-300:]
            return secs, 0.0, count_pcap(out), None
        if tool == "ringcap":
            # Queries run on every CPU, as stenographer's server does and as
            # a user's would: ringcap's reads the files ahead on threads of
            # its own (one fewer than the CPUs); tcpdump has one thread. The
            # CPU seconds are reported beside the wall time.
            secs, cpu, r = _run([ringcap, "query", "-d", d, "-w", out, flt], ALL_CPUS)
            if r.returncode != 0:
                return secs, cpu, None, r.stderr[-300:]
            return secs, cpu, count_pcap(out), None
        total_s, total_cpu, n = 0.0, 0.0, 0
        for p in paths:
            secs, cpu, r = _run(["tcpdump", "-r", p, "-w", out, flt], ALL_CPUS)
            total_s += secs
            total_cpu += cpu
            if r.returncode != 0:
                return total_s, total_cpu, None, r.stderr[-300:]
            n += count_pcap(out)
        return total_s, total_cpu, n, None


    def _steno_start(self, ringcap, paths, pcap_bytes):
        """stenographer's server capturing the files replayed over the veth;
        False (said) when it cannot run here."""
        for b in ("stenographer", "stenotype", "stenocurl", "tcpreplay", "jq", "curl"):
            if not shutil.which(b):
                log("  stenographer: skipped (%s not installed)" % b)
                return False
        top = os.path.join(self.work, "steno")
        for sub in ("pkt", "idx"):
            os.makedirs(os.path.join(top, sub), exist_ok=True)
        certs = os.path.join(top, "certs")
        port = 9000 + os.getpid() % 500
        r = subprocess.run([ringcap, "serve-keys", "--certs", certs, "--port", str(port)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("serve-keys: " + r.stderr[-200:])
        cfg = dict(Threads=[dict(PacketsDirectory=os.path.join(top, "pkt"),
                                 IndexDirectory=os.path.join(top, "idx"),
                                 DiskFreePercentage=1)],
                   StenotypePath=shutil.which("stenotype"), Interface=self.env["CAP_IF"],
                   Port=port, Host="127.0.0.1", CertPath=certs,
                   Flags=["--fileage_sec=10", "--blockage_sec=1", "--seccomp=none",
                          "--uid=root", "--gid=root", "--no_watchdogs", "--aiops=32",
                          "--blocks=256"])
        conf = os.path.join(top, "config")
        with open(conf, "w") as f:
            json.dump(cfg, f)
        subprocess.run(["ip", "netns", "exec", self.env["CAP_NS"], "ip", "link", "set", "lo",
                        "up"], capture_output=True)
        tmp_before = set(_steno_tmp())
        logf = open(os.path.join(top, "server.log"), "w")
        pr = subprocess.Popen(["ip", "netns", "exec", self.env["CAP_NS"], "stenographer",
                               "-config", conf, "-syslog=false"], stdin=subprocess.DEVNULL,
                              stdout=logf, stderr=logf, start_new_session=True)
        self.children[pr.pid] = pr
        self._steno = dict(pr=pr, top=top, tmp_before=tmp_before, client_config=os.path.join(certs, "config"),
                           log=os.path.join(top, "server.log"))
        time.sleep(3)
        if pr.poll() is not None:
            raise RuntimeError("the server exited: " + open(self._steno["log"]).read()[-300:])
        # The same packets, replayed at a pace stenotype keeps up with.
        pps = self.p.get("retrieval_replay_pps", 100000)
        t0 = time.monotonic()
        r = subprocess.run(["ip", "netns", "exec", self.env["GEN_NS"], "tcpreplay", "-q",
                            "--pps=%d" % pps, "-i", self.env["GEN_IF"]] + paths,
                           capture_output=True, text=True, timeout=7200)
        if r.returncode != 0:
            raise RuntimeError("tcpreplay: " + r.stderr[-300:])
        replay_s = time.monotonic() - t0
        # Files rotate every 10 s and are then indexed and picked up.
        time.sleep(25)
        pkt = sum(os.path.getsize(os.path.join(top, "pkt", f))
                  for f in os.listdir(os.path.join(top, "pkt")) if not f.startswith("."))
        idx = sum(os.path.getsize(os.path.join(top, "idx", f))
                  for f in os.listdir(os.path.join(top, "idx")))
        rec = dict(kind="retrieval_steno", replay_s=round(replay_s, 1), replay_pps=pps,
                   blockfile_bytes=pkt, index_bytes=idx, pcap_bytes=pcap_bytes,
                   share_pct=round(100.0 * idx / pcap_bytes, 3))
        self.emit(rec)
        log("  stenographer: replayed in %.1f s at %d pps; blockfiles %.0f MB, index %d bytes "
            "= %.3f%% of the pcap bytes" % (replay_s, pps, pkt / 1e6, idx, rec["share_pct"]))
        return True

    def _steno_stop(self):
        s = self._steno
        if not s:
            return
        pr = s["pr"]
        # The server starts stenotype in a process group of its own: its
        # children are ended by pid too (stenotype 1.0.1 can hang on SIGTERM).
        kids = _children(pr.pid)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for k in kids:
                try:
                    os.kill(k, sig)
                except ProcessLookupError:
                    pass
            if pr.poll() is None:
                try:
                    os.killpg(pr.pid, sig)
                except ProcessLookupError:
                    pass
                try:
                    pr.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            time.sleep(0.5)
        self.children.pop(pr.pid, None)
        # The server's own scratch directories (stenotype's --dir).
        for t in set(_steno_tmp()) - s["tmp_before"]:
            shutil.rmtree(t, ignore_errors=True)
        self._steno = None


def print_retrieval(results):
    """The retrieval tables (called by report.print_report)."""
    from .. import report
    cap = [r for r in results if r.get("kind") == "retrieval_capture"]
    idx = [r for r in results if r.get("kind") == "retrieval_index"]
    q = [r for r in results if r.get("kind") == "retrieval"]
    steno = [r for r in results if r.get("kind") == "retrieval_steno"]
    qable = [r for r in results if r.get("kind") == "retrieval_queryable"]
    if not (cap or idx or q or qable):
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
        if r.get("headers_share_pct") is not None or r.get("headers_error"):
            print("  the same packets cut to headers (snap 96), %s MB: index %s = %s%%%s"
                  % (fmt(r.get("headers_pcap_bytes", 0) / 1e6, "{:.0f}"),
                     r.get("headers_index_bytes"), fmt(r.get("headers_share_pct"), "{:.3f}"),
                     " ERROR " + r["headers_error"] if r.get("headers_error") else ""))
    for r in qable:
        print("\n  capture to queryable (live capture, file being written, `ringcap query -d`): "
              "median %s s, max %s s over %d bursts of 100 packets (goal <= 2 s; "
              "stenographer: 60-120 s)%s"
              % (fmt(r["median_s"], "{:.3f}"), fmt(r["max_s"], "{:.3f}"), r["rounds"],
                 " ERROR " + r["error"] if r.get("error") else ""))
    for r in steno:
        print("  stenographer (same files replayed at %d pps): index %d bytes = %.3f%%, "
              "blockfiles %.0f MB" % (r["replay_pps"], r["index_bytes"], r["share_pct"],
                                     r["blockfile_bytes"] / 1e6))
    if q:
        rows = []
        for label in dict.fromkeys(r["query"] for r in q):
            for cache in ("cold", "warm"):
                by = {r["tool"]: r for r in q if r["query"] == label and r["cache"] == cache}
                rq, tq = by.get("ringcap"), by.get("tcpdump")
                if not rq or not tq:
                    continue
                sq = by.get("stenographer")
                rows.append([label, cache, _secs(rq), fmt(rq.get("cpu_s"), "{:.3f}"), _secs(tq),
                             fmt(tq["seconds"] / rq["seconds"] if rq["seconds"] else None,
                                 "{:.0f}"),
                             _secs(sq) if sq else "-",
                             "%s/%s/%s" % (rq["packets"], tq["packets"],
                                           sq["packets"] if sq else "-")])
        print()
        print(report.table(["query", "cache", "ringcap query s", "its cpu s", "tcpdump -r s",
                            "vs tcpdump", "stenographer s",
                            "packets (ringcap/tcpdump/steno)"], rows))


def _secs(r):
    """A query's median seconds, with the range of its runs when there were
    several: `0.110 [0.104-0.152]`."""
    runs = r.get("runs_s") or []
    if len(runs) > 1:
        return "%s [%.3f-%.3f]" % (fmt(r["seconds"], "{:.3f}"), min(runs), max(runs))
    return fmt(r["seconds"], "{:.3f}")
