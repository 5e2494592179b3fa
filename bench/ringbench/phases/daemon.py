"""Phase `daemon`: N clients through ringcapd beside N tcpdump processes.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..common import Aborted, socket_dir, fmt, log, read_proc_cpu_ns, read_proc_stat_cpu_ns
from ..tools import count_pcap


class DaemonPhase:
    """Mixin of Bench."""

    def measure_daemon(self, how, n, size, snaplen, count, ringcapd):
        """n captures of the same traffic, each with its own filter that every
        generated frame matches: through ringcapd (how == "ringcapd") or as n
        tcpdump processes run as root, or (how == "tcpdump-lib") as n unmodified
        tcpdump processes run as nobody through ringcapd with `ringcap run`
        (libringcap_pcap.so). Loss, the generator's achieved rate,
        the CPU of every process involved per delivered packet, and (ringcapd)
        the daemon's resident memory."""
        outdir = tempfile.mkdtemp(prefix="daemon-%s-%d-" % (how, n), dir=self.work)
        os.chmod(outdir, 0o777)
        rec = dict(kind="daemon", how=how, clients=n, frame_size=size, snaplen=snaplen,
                   error=None)
        procs, daemon, sockdir = [], None, None
        filters = ["udp and not dst port %d" % (60000 + i) for i in range(n)]
        try:
            if how != "tcpdump":
                sockdir = socket_dir()
                sock = os.path.join(sockdir, "ringcapd.sock")
                policy = os.path.join(outdir, "policy.toml")
                with open(policy, "w") as f:
                    f.write('socket = "%s"\ndump_dir = "%s"\n[[grant]]\nusers = ["nobody"]\n'
                            'interfaces = ["%s"]\nring_size = "16M"\n'
                            % (sock, os.path.join(outdir, "dumps"), self.env["CAP_IF"]))
                daemon = self._spawn_group([[ringcapd, "--config", policy]],
                                           re.compile(r"listening on"))[0]
                # ringcapd-z: the compressed stream kept as it is, in
                # compressed files (the clients decode nothing).
                z = how == "ringcapd-z"
                nobody = ["setpriv", "--reuid", "nobody", "--regid", "nogroup",
                          "--clear-groups", "--inh-caps=-all", self.args.ringcap]
                if how == "tcpdump-lib":
                    argv = [nobody + ["run", "--daemon=" + sock, "--", "tcpdump", "-i",
                                      self.env["CAP_IF"], "-n", "-s", str(snaplen),
                                      "-w", os.path.join(outdir, "c%d.pcap" % i), filters[i]]
                            for i in range(n)]
                    ready = re.compile(r"listening on")
                else:
                    argv = [nobody + ["capture", "--daemon=" + sock, "-i", self.env["CAP_IF"],
                                      "-s", str(snaplen),
                                      "-w", os.path.join(outdir, "c%d.pcap" % i),
                                      "--stats-json", os.path.join(outdir, "c%d.json" % i)]
                            + (["--compress", "--format", "compressed", "--tstamp-precision",
                                "nano"] if z else []) + [filters[i]]
                            for i in range(n)]
                    ready = re.compile(r"capturing on")
                procs = self._spawn_group(argv, ready)
                rec["daemon_rss_mib"] = self._rss_mib(daemon.pid)
            else:
                argv = [["tcpdump", "-i", self.env["CAP_IF"], "-n", "-s", str(snaplen),
                         "-w", os.path.join(outdir, "c%d.pcap" % i), filters[i]]
                        for i in range(n)]
                procs = self._spawn_group(argv, re.compile(r"listening on"))
            time.sleep(0.3)
            cpu0 = {pr.pid: read_proc_cpu_ns(pr.pid) or 0 for pr in procs}
            if daemon:
                # Its hub thread ends with the last session: count exited threads.
                cpu0[daemon.pid] = read_proc_stat_cpu_ns(daemon.pid) or 0
            c0 = self.cap_stats()
            sent, secs = self.send(size, count)
            self.wait_settled(quiet_s=1.2)
            c1 = self.cap_stats()
            if daemon:
                rec["daemon_rss_mib_busy"] = self._rss_mib(daemon.pid)
                # Bytes the daemon put into the clients' rings (the memory
                # traffic of delivery), from its own session counters.
                st = subprocess.run([self.args.ringcap, "stats", "--daemon=" + sock, "--json"],
                                    capture_output=True, text=True, timeout=20)
                ring_bytes = sum(json.loads(l)["counters"]["bytes_delivered"]
                                 for l in st.stdout.splitlines() if l.strip())
                rec["ring_bytes"] = ring_bytes
            # The clients' CPU until they have exited (their last writes
            # included), and the daemon's until it has ended their sessions.
            cpu1 = {pid: s * 1e9 for pid, s in self._stop_group(procs).items()}
            if daemon:
                time.sleep(0.5)
                cpu1[daemon.pid] = read_proc_stat_cpu_ns(daemon.pid) or 0
            written = [count_pcap(os.path.join(outdir, "c%d.pcap" % i)) for i in range(n)]
            detected = c1["rx_packets"] - c0["rx_packets"]
            cpu = sum(cpu1[p] - cpu0[p] for p in cpu1) / 1e9
            delivered = sum(w or 0 for w in written)
            rec.update(sent=sent, detected=detected, written=written,
                       lost=sum(detected - (w or 0) for w in written),
                       gen_pps=round(sent / secs, 1) if secs else None,
                       cpu_s=round(cpu, 4),
                       cpu_daemon_s=round((cpu1[daemon.pid] - cpu0[daemon.pid]) / 1e9, 4)
                       if daemon else None,
                       cpu_ns_per_delivered=round(cpu * 1e9 / delivered, 1) if delivered else None)
            if "ring_bytes" in rec and delivered:
                rec["ring_bytes_per_delivered"] = round(rec["ring_bytes"] / delivered, 2)
            if delivered:
                files = sum(os.path.getsize(os.path.join(outdir, "c%d.pcap" % i))
                            for i in range(n))
                rec["file_bytes_per_delivered"] = round(files / delivered, 2)
        except Aborted:
            raise
        except Exception as e:
            rec["error"] = str(e)[:600]
        finally:
            if procs:
                for pr in procs:
                    if pr.returncode is None:
                        self._reap(pr)
            if daemon is not None:
                self._stop_group([daemon])
            if sockdir:
                shutil.rmtree(sockdir, ignore_errors=True)
            if not self.args.keep:
                shutil.rmtree(outdir, ignore_errors=True)
        self.emit(rec)
        if rec["error"]:
            log("  %-8s x%-2d: ERROR %s" % (how, n, rec["error"][:300]))
        else:
            log("  %-8s x%-2d: sent %d det %d lost %d gen %.0f kpps cpu %.3fs %s ns/delivered%s"
                % (how, n, rec["sent"], rec["detected"], rec["lost"], rec["gen_pps"] / 1000,
                   rec["cpu_s"], fmt(rec["cpu_ns_per_delivered"], "{:.0f}"),
                   " daemon rss %.1f/%.1f MiB, ring %s B/delivered"
                   % (rec["daemon_rss_mib"], rec["daemon_rss_mib_busy"],
                      rec.get("ring_bytes_per_delivered"))
                   if how != "tcpdump" else ""))
        return rec

    @staticmethod
    def _rss_mib(pid):
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return round(int(line.split()[1]) / 1024.0, 1)
        except OSError:
            pass
        return None

    def daemon_runs(self, n):
        runs = []
        for item in self.args.daemon_runs.split(","):
            how, _, k = item.strip().partition(":")
            if how not in ("ringcapd", "ringcapd-z", "tcpdump", "tcpdump-lib"):
                raise SystemExit("--daemon-runs: unknown %r (ringcapd, ringcapd-z, tcpdump, "
                                 "tcpdump-lib)" % how)
            try:
                runs.append((how, n if k in ("", "N") else int(k)))
            except ValueError:
                raise SystemExit("--daemon-runs: %r is not a client count" % k)
        return runs

    def phase_daemon(self):
        ringcapd = str(Path(self.args.ringcap).resolve().parent / "ringcapd")
        if not os.access(ringcapd, os.X_OK):
            log("daemon: skipped: no ringcapd next to %s" % self.args.ringcap)
            return
        n = self.p.get("daemon_clients", 12)
        count = self.args.count or self.p.get("daemon_count", self.p["count"])
        log("== daemon: %d clients through ringcapd vs %d tcpdump (64 B, snap 96)" % (n, n))
        for rep in range(self.args.reps or 1):
            for how, k in self.daemon_runs(n):
                self.measure_daemon(how, k, 64, 96, count, ringcapd)
