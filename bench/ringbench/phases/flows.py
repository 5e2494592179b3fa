"""Phase `flows`: flow export (issue 28), side by side on the same trace.

One pcap of 64-byte UDP frames over many concurrent flows is turned into
flow records by `ringcap capture -r IN --flows ipfix://` and by softflowd
(`-r IN -v 10`), each exporting to its own nfcapd on 127.0.0.1; the CPU per
packet of each exporter process (its own rusage, pinned to the capture CPU),
the records the collector stored (nfdump), ringcap's export rate (records
per second of its run) and the flow table's memory per flow (peak RSS with a
1 Mi-flow table minus a 1 Ki-flow table, over the difference) are reported.
fprobe reads live interfaces only (no file input), so it is not in this
offline comparison; it is in the live row (flows_live.py): every exporter
on the capture interface while the generator sends at its top rate.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time

from ..common import CAP_CPU, REPO_DIR, log
from ..pcapgen import write_many_flow_pcap
from .flows_live import run_live


def _free_udp_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _pinned():
    os.sched_setaffinity(0, {CAP_CPU})


def _run_rusage(argv, poke=None, timeout=1800):
    """Runs argv pinned to the capture CPU; returns (status, seconds, cpu_s,
    maxrss_kib, stderr) from the child's own rusage (os.wait4). `poke` is
    called every 50 ms while it runs."""
    err = tempfile.TemporaryFile()
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=_pinned)
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            break
        if time.monotonic() - t0 > timeout:
            p.kill()
            pid, status, ru = os.wait4(p.pid, 0)
            break
        if poke:
            poke()
        time.sleep(0.05)
    p.returncode = os.waitstatus_to_exitcode(status)
    secs = time.monotonic() - t0
    err.seek(0)
    text = err.read().decode(errors="replace")
    return p.returncode, secs, ru.ru_utime + ru.ru_stime, ru.ru_maxrss, text


class _Nfcapd:
    def __init__(self, workdir, name):
        self.dir = os.path.join(workdir, "nfcapd-" + name)
        os.makedirs(self.dir, exist_ok=True)
        self.port = _free_udp_port()
        self.p = subprocess.Popen(["nfcapd", "-b", "127.0.0.1", "-p", str(self.port), "-t",
                                   "3600", "-B", "8388608", "-w", self.dir],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                s.bind(("127.0.0.1", self.port))
            except OSError:
                break
            finally:
                s.close()
            time.sleep(0.05)

    def records(self):
        """Stops nfcapd and counts the records it stored (its CPU seconds,
        user+sys, in self.cpu_s)."""
        time.sleep(0.5)
        self.p.terminate()
        t0 = time.monotonic()
        while True:
            pid, status, ru = os.wait4(self.p.pid, os.WNOHANG)
            if pid == self.p.pid:
                break
            if time.monotonic() - t0 > 20:
                self.p.kill()
                pid, status, ru = os.wait4(self.p.pid, 0)
                break
            time.sleep(0.05)
        self.p.returncode = os.waitstatus_to_exitcode(status)
        self.cpu_s = ru.ru_utime + ru.ru_stime
        r = subprocess.run(["nfdump", "-R", self.dir, "-q", "-o", "csv"], capture_output=True,
                           text=True, timeout=600)
        return sum(1 for l in r.stdout.splitlines() if l and l[0].isdigit())


def _udp_rcvbuf_errors():
    """The kernel's count of UDP datagrams dropped at a full receive buffer
    (a collector that fell behind)."""
    with open("/proc/net/snmp") as f:
        rows = [l.split() for l in f if l.startswith("Udp:")]
    return int(rows[1][rows[0].index("RcvbufErrors")])


EXPORT_RATE = REPO_DIR / "target" / "release" / "examples" / "export_rate"


class FlowsPhase:
    """Mixin of Bench."""

    def phase_flows(self):
        rc = self.tools.get("ringcap")
        if not (rc and rc.available()):
            log("flows: skipped (no ringcap)")
            return
        for t in ("nfcapd", "nfdump"):
            if not shutil.which(t):
                log("flows: skipped (%s not installed)" % t)
                return
        npk, nfl = self.p["flows_packets"], self.p["flows_flows"]
        if os.environ.get("RINGBENCH_FLOWS_LIVE_ONLY"):
            run_live(self, npk, 1 << max(10, (npk - 1).bit_length()))
            return
        inp = os.path.join(self.work, "flows-in.pcap")
        write_many_flow_pcap(inp, npk, nfl)
        log("== flows: %d packets over %d flows (64-byte UDP), exporting IPFIX to nfcapd on "
            "127.0.0.1" % (npk, nfl))
        table = 1 << max(10, (2 * nfl - 1).bit_length())
        stats = os.path.join(self.work, "flows-stats.json")
        # Paced as the export-alone row: the flows still open at the end of
        # the file go out at once, and unpaced they outrun nfcapd on a busy
        # machine (a UDP exporter cannot see the collector's drops).
        runs = [("ringcap --flows ipfix", lambda port: [
            rc.path, "capture", "-r", inp, "--flows", "ipfix://127.0.0.1:%d" % port,
            "--flows-pace", "80", "--max-flows", str(table), "--stats-json", stats], None)]
        if shutil.which("softflowd"):
            ctl = os.path.join(self.work, "softflowd.ctl")

            def poke():
                # softflowd reads a file a batch per wake-up of its poll loop.
                subprocess.run(["softflowctl", "-c", ctl, "statistics"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            runs.append(("softflowd -v 10", lambda port: [
                "softflowd", "-r", inp, "-n", "127.0.0.1:%d" % port, "-v", "10", "-d",
                "-m", str(table), "-c", ctl, "-p", os.path.join(self.work, "softflowd.pid")],
                poke))
        else:
            log("  softflowd not installed: ringcap alone")
        for name, mk, poke in runs:
            col = _Nfcapd(self.work, name.split()[0])
            if os.path.exists(stats):
                os.unlink(stats)
            code, secs, cpu, rss, err = _run_rusage(mk(col.port), poke)
            stored = col.records()
            rec = dict(kind="flows", tool=name, packets=npk, flows=nfl, seconds=round(secs, 3),
                       cpu_s=round(cpu, 3), cpu_ns_per_pkt=round(cpu * 1e9 / npk, 1),
                       maxrss_kib=rss, stored=stored)
            if code != 0:
                rec["error"] = "exit %d: %s" % (code, err[-300:])
            if name.startswith("ringcap") and os.path.exists(stats):
                import json
                with open(stats) as f:
                    last = [json.loads(l) for l in f if l.strip()][-1]
                fl = last.get("flows", {})
                rec.update(exported=fl.get("exported"), export_errors=fl.get("export_errors"),
                           records_per_s=round((fl.get("exported") or 0) / secs))
            self.emit(rec)
            log("  %-22s %s" % (name, rec.get("error") or
                                "%.2f s, %.0f ns/pkt CPU, %d records stored by nfcapd"
                                % (secs, rec["cpu_ns_per_pkt"], stored)))
        self._flows_export_alone(nfl)
        # Memory per flow: peak RSS with a big table minus a small one.
        rss = {}
        for n in (1024, 1 << 20):
            code, _, _, kib, err = _run_rusage([rc.path, "capture", "-r", inp, "-c", "1",
                                                "--flows", "json:/dev/null", "--max-flows",
                                                str(n)])
            rss[n] = kib
        per_flow = (rss[1 << 20] - rss[1024]) * 1024.0 / ((1 << 20) - 1024)
        rec = dict(kind="flows-memory", table_flows=1 << 20,
                   rss_kib_big=rss[1 << 20], rss_kib_small=rss[1024],
                   bytes_per_flow=round(per_flow, 1))
        self.emit(rec)
        log("  flow table: %.0f bytes per flow (peak RSS %d KiB with 1 Mi flows, %d KiB with "
            "1 Ki)" % (per_flow, rss[1 << 20], rss[1024]))
        os.unlink(inp)
        # Live: nearly every generated packet is a flow of its own.
        run_live(self, npk, 1 << max(10, (npk - 1).bit_length()))

    def _flows_export_alone(self, nfl):
        """The export path without the file read: crates/flow's export_rate
        example flushes `nfl` one-packet flows from a table into the IPFIX
        exporter, unpaced and paced, each into its own nfcapd; losses are
        the records nfcapd did not store, and the kernel's RcvbufErrors."""
        if not EXPORT_RATE.exists():
            log("  export alone: skipped (cargo build --release -p ringcap-flow --example "
                "export_rate)")
            return
        import json
        for pace in (None, 80_000_000):
            name = "export alone" + (" paced %d MB/s" % (pace // 1_000_000) if pace else "")
            col = _Nfcapd(self.work, "export")
            e0 = _udp_rcvbuf_errors()
            argv = [str(EXPORT_RATE), str(nfl), "ipfix://127.0.0.1:%d" % col.port]
            if pace:
                argv.append(str(pace))
            r = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                               preexec_fn=_pinned)
            e1 = _udp_rcvbuf_errors()
            stored = col.records()
            shutil.rmtree(col.dir, ignore_errors=True)
            rec = dict(kind="flows-export", tool=name, flows=nfl, stored=stored,
                       udp_rcvbuf_errors=e1 - e0, nfcapd_cpu_s=round(col.cpu_s, 3))
            try:
                out = json.loads(r.stdout.strip().splitlines()[-1])
                rec.update(records=out["records"], wall_s=out["export_wall_s"],
                           cpu_s=out["export_cpu_s"], records_per_s=out["records_per_s"],
                           cpu_ns_per_record=round(out["export_cpu_s"] * 1e9
                                                   / max(1, out["records"]), 1))
            except (ValueError, IndexError, KeyError):
                rec["error"] = "exit %d: %s" % (r.returncode, r.stderr[-300:])
            self.emit(rec)
            log("  %-22s %s" % (name, rec.get("error") or
                                "%d records at %.0f/s wall, %.0f ns CPU each; nfcapd stored %d "
                                "(%d datagrams dropped at its socket buffer), its CPU %.2f s"
                                % (rec["records"], rec["records_per_s"], rec["cpu_ns_per_record"],
                                   stored, rec["udp_rcvbuf_errors"], rec["nfcapd_cpu_s"])))
