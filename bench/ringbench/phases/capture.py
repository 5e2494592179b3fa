"""Phases `capture`, `quota` and `idle`: the capture matrix, CPU quotas, idle cost.
"""

import os
import shutil
import signal
import tempfile
import time

from ..common import Aborted, CLK_TCK, log, read_proc_cpu_ns, read_proc_cpu_ticks
from ..testbed import CpuQuota


class CapturePhases:
    """Mixin of Bench."""

    # ---- phases -------------------------------------------------------

    def phase_capture(self, tools):
        p = self.p
        combos = p["combos"] or ([(s, sn, m) for s in p["sizes"] for sn in (64, 65535)
                                  for m in ("count", "disk")]
                                 + [(s, 64, "stress") for s in p["sizes"]])
        log("== capture matrix: %d combos x %d tools x %d reps"
            % (len(combos), len(tools), p["reps"]))
        for (size, snap, mode) in combos:
            count = self.count_for(size)
            for rep in range(p["reps"]):
                for tool in tools:
                    if not tool.eligible(size, snap, mode):
                        continue
                    self.measure(tool, size, snap, mode, count, rep=rep,
                                 rate_pps=p["rate_pps"])

    def count_for(self, size):
        if self.args.count:
            return self.args.count
        n = self.p["count"]
        return n if size in (64, "imix") else max(n // 2, 1000)

    def phase_quota(self, tools):
        p = self.p
        if not CpuQuota.available():
            log("== quota: no cgroup cpu controller, skipped")
            self.emit(dict(kind="note", phase="quota", note="no cgroup cpu controller"))
            return
        cap = self.capacity.get(64) or self.measure_capacity(64)
        pps = cap["pps"]
        base = int(pps * p["quota_seconds"])
        log("== quota: 64 B frames, snaplen 64, to disk; >= %.0f s of traffic at the "
            "%.0f pps capacity; quotas %s" % (p["quota_seconds"], pps, p["quotas"]))
        for tool in tools:
            # Runs must be much longer than the tool's ring can hold, or the
            # ring hides the loss: ring_factor x the ring, up to quota_max_seconds.
            ring_pkts = tool.ring_packets(64, 64)
            count = max(base, p["ring_factor"] * ring_pkts)
            count = min(count, int(pps * max(p["quota_max_seconds"], p["quota_seconds"])))
            if p["quota_max_count"]:
                count = min(count, p["quota_max_count"])
            count = max(count, 1000)
            ring_bound = count < p["ring_factor"] * ring_pkts
            log("  %s: %d packets (ring ~%d packets%s)" % (
                tool.name, count, ring_pkts,
                "; RUN SHORTER THAN %dx THE RING: loss understated" % p["ring_factor"]
                if ring_bound else ""))
            for q in p["quotas"]:
                rec = self.measure(tool, 64, 64, "disk", count, quota_pct=q,
                                   rate_pps=p["rate_pps"],
                                   extra=dict(ring_packets_est=ring_pkts,
                                              ring_bound=ring_bound))
                if rec.get("lost_pct") is not None and rec["lost_pct"] > 40:
                    break  # lower quotas only lose more

    def phase_idle(self, tools):
        """CPU a tool burns with no traffic (polling, timers), plus its shutdown."""
        secs = self.p["idle_seconds"]
        log("== idle: each tool started, %.0f s without traffic, stopped" % secs)
        for tool in tools:
            outdir = tempfile.mkdtemp(prefix="idle-%s-" % tool.name, dir=self.work)
            os.chmod(outdir, 0o777)
            rec = dict(kind="idle", tool=tool.name, seconds=secs, error=None)
            try:
                pr, lines, threads = self._start(tool, 65535, "disk", outdir)
                try:
                    self._wait_ready(tool, pr, lines)
                    self._wait_full_speed(pr)
                    time.sleep(0.2)
                    # Both ends as the larger of schedstat (ns, live threads)
                    # and clock ticks (exited threads included).
                    c0 = max((read_proc_cpu_ns(pr.pid) or 0) / 1e9,
                             (read_proc_cpu_ticks(pr.pid) or 0) / CLK_TCK)
                    time.sleep(secs)
                    c1 = max((read_proc_cpu_ns(pr.pid) or 0) / 1e9,
                             (read_proc_cpu_ticks(pr.pid) or 0) / CLK_TCK)
                    os.killpg(pr.pid, signal.SIGINT)
                    ru, status = self._wait(pr, tool.stop_timeout)
                    total = ru.ru_utime + ru.ru_stime
                    rec.update(idle_cpu_ms_per_s=round((c1 - c0) * 1000.0 / secs, 2),
                               stop_cpu_ms=round(max(0.0, total - c1) * 1000, 1),
                               killed=status is None)
                finally:
                    self._reap(pr)
            except Aborted:
                raise
            except Exception as e:
                rec["error"] = str(e)[:400]
            finally:
                shutil.rmtree(outdir, ignore_errors=True)
            self.emit(rec)
            log("  %-11s %s" % (tool.name, rec["error"] or "idle %.1f ms CPU per s, stop %.0f ms"
                                % (rec["idle_cpu_ms_per_s"], rec["stop_cpu_ms"])))
