"""One measurement: start a tool in the capture namespace, wait until it is
ready, send, wait until everything settled, stop it, count what it wrote
and the CPU it used; emit the result as one JSON line.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from .common import (Aborted, CAP_CPU, CLK_TCK, fmt, frame_avg_size, log, read_proc_cpu_ns,
                     read_proc_cpu_ticks)
from .testbed import CpuQuota


class Measure:
    """Mixin of Bench: starting, measuring and stopping tools."""

    # ---- one capture measurement -------------------------------------

    def _start(self, tool, snaplen, mode, outdir):
        """Start tool in the capture namespace on CAP_CPU; returns (Popen, lines, threads).
        ip netns exec, taskset-less affinity and stdbuf all exec, so the pid is the tool's."""
        argv, stdout_path = tool.argv(self.env["CAP_IF"], snaplen, mode, outdir)
        lines = []
        ready = threading.Event()

        def reader(stream):
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", "replace")
                lines.append(line)
                if tool.ready_re.search(line):
                    ready.set()

        def preexec():
            os.sched_setaffinity(0, {CAP_CPU})

        stdout = open(stdout_path, "wb") if stdout_path else subprocess.PIPE
        cmd = ["ip", "netns", "exec", self.env["CAP_NS"]] + argv
        try:
            pr = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, preexec_fn=preexec,
                                  start_new_session=True, cwd=outdir)
        finally:
            if stdout_path:
                stdout.close()
        self.children[pr.pid] = pr
        pr.ready_event = ready
        threads = []
        for st in (pr.stdout, pr.stderr):
            if st is not None:
                th = threading.Thread(target=reader, args=(st,), daemon=True)
                th.start()
                threads.append(th)
        return pr, lines, threads

    def _wait_ready(self, tool, pr, lines, timeout=30.0):
        t0 = time.monotonic()
        while not pr.ready_event.wait(0.05):
            pid, status, _ru = os.wait4(pr.pid, os.WNOHANG)
            if pid == pr.pid:
                pr.returncode = os.waitstatus_to_exitcode(status)
                time.sleep(0.1)
                raise RuntimeError("exited with %s before ready: %s"
                                   % (pr.returncode, "".join(lines)[-400:]))
            if time.monotonic() - t0 > timeout:
                raise RuntimeError("not ready after %.0f s: %s" % (timeout, "".join(lines)[-400:]))
        return round(time.monotonic() - t0, 3)

    def _wait_full_speed(self, pr, quiet=0.3, limit=10.0):
        """After the ready line: until the tool has used no CPU for `quiet`
        seconds (clock ticks), at most `limit`; the seconds that took. A tool
        that finishes setting up after it said it was ready (ringcap fills
        its writer's buffer pool on a thread of its own) is then measured at
        full speed, and its start-up work is not counted per packet."""
        t0 = time.monotonic()
        last, t_last = read_proc_cpu_ticks(pr.pid), t0
        while time.monotonic() - t0 < limit:
            time.sleep(0.05)
            now, v = time.monotonic(), read_proc_cpu_ticks(pr.pid)
            if v != last:
                last, t_last = v, now
            elif now - t_last >= quiet:
                break
        return round(max(t_last - t0, 0.0), 3)

    def _reap(self, pr):
        if pr.returncode is None:
            try:
                os.killpg(pr.pid, signal.SIGKILL)
            except OSError:
                pass
            self._wait(pr, 5)
        self.children.pop(pr.pid, None)

    def measure(self, tool, size, snaplen, mode, count, rep=0, quota_pct=None,
                rate_pps=None, extra=None):
        outdir = tempfile.mkdtemp(prefix="%s-" % tool.name, dir=self.work)
        os.chmod(outdir, 0o777)
        rec = dict(kind="quota" if quota_pct else "capture", tool=tool.name,
                   frame_size=size, snaplen=snaplen, mode=mode, quota_pct=quota_pct,
                   rep=rep, sent=None, detected=None, written=None, dropped=None,
                   lost_pct=None, cpu_s=None, cpu_ns_per_pkt=None, pps=None, mbps=None,
                   ring_mib=tool.ring_mib, error=None)
        if extra:
            rec.update(extra)
        if not tool.snaplen_ok:
            rec["snaplen_note"] = "no snaplen option; whole frames kept"
        cg = None
        if quota_pct:
            cg = CpuQuota("ringcap-bench-%s-%s-q%s" % (self.name, tool.name, quota_pct),
                          quota_pct)
            self.cgroups.append(cg)
            rec.update(cgroup_version=cg.version, cfs_period_us=cg.period_us,
                       cfs_quota_us=cg.quota_us)

        rusage = None
        # stress: written to disk like "disk", with the generator on both CPUs.
        stress = mode == "stress"
        mode = "disk" if stress else mode
        pr, lines, threads = self._start(tool, snaplen, mode, outdir)
        try:
            rec["start_s"] = self._wait_ready(tool, pr, lines)
            rec["settle_s"] = self._wait_full_speed(pr)
            time.sleep(0.15)
            if cg:
                cg.attach(pr.pid)
            # ns-precise (schedstat) start point; rusage at exit gives the end point
            # (threads that already exited are only in /proc/PID/stat's ticks)
            cpu_ready = max((read_proc_cpu_ns(pr.pid) or 0) / 1e9,
                            (read_proc_cpu_ticks(pr.pid) or 0) / CLK_TCK)
            t_window = time.monotonic()
            c0, g0 = self.cap_stats(), self.gen_stats()
            sent, secs = self.send(size, count, rate_pps, stress=stress)
            settled = self.wait_settled(pr.pid, quiet_s=tool.quiet_s,
                                        max_s=60.0 if quota_pct else 10.0,
                                        outdir=outdir if quota_pct and mode == "disk" else None)
            c1, g1 = self.cap_stats(), self.gen_stats()
            rec["window_s"] = round(time.monotonic() - t_window, 3)
            os.killpg(pr.pid, signal.SIGINT)
            rusage, status = self._wait(pr, tool.stop_timeout)
            rec["killed"] = status is None
            rec["exit_status"] = status
            rec["settled"] = settled
            for th in threads:
                th.join(timeout=5)
            text = "".join(lines)
            parsed = tool.parse(text, outdir)
            written, src = tool.written(outdir, mode, parsed)
            for k in ("dropped_ring", "dropped_writer", "ring_blocks_high_water", "ring_blocks",
                      "writer_buffer_high_water_bytes", "writer_buffer_bytes"):
                if k in parsed:
                    rec[k] = parsed[k]
            detected = c1["rx_packets"] - c0["rx_packets"]
            cpu_s = rusage.ru_utime + rusage.ru_stime - cpu_ready
            cpu_s = max(cpu_s, 0.0)
            rec.update(
                sent=sent, detected=detected, written=written, written_source=src,
                dropped=parsed.get("dropped"), tool_count=parsed.get("tool_count"),
                iface_dropped=(c1["rx_dropped"] - c0["rx_dropped"])
                + (g1["tx_dropped"] - g0["tx_dropped"]),
                lost_pct=round(100.0 * (sent - (written or 0)) / sent, 4) if sent else None,
                cpu_s=round(cpu_s, 4),
                cpu_total_s=round(rusage.ru_utime + rusage.ru_stime, 4),
                cpu_ns_per_pkt=round(cpu_s * 1e9 / written, 1) if written else None,
                traffic_s=round(secs, 4),
                pps=round((written or 0) / secs, 1) if secs else None,
                mbps=round((written or 0) * frame_avg_size(size) * 8 / secs / 1e6, 2)
                if secs else None,
                max_rss_mib=round(rusage.ru_maxrss / 1024.0, 1),
            )
            if parsed.get("ring_mib"):
                rec["ring_mib"] = parsed["ring_mib"]
            if cg:
                st = cg.stats()
                rec["nr_throttled"] = int(st.get("nr_throttled", 0))
        except Aborted:
            raise
        except Exception as e:  # one failed measurement must not sink the run
            rec["error"] = str(e)[:600]
        finally:
            self._reap(pr)
            if cg:
                cg.remove()
                self.cgroups.remove(cg)
            if not self.args.keep:
                shutil.rmtree(outdir, ignore_errors=True)
        self.emit(rec)
        return rec

    def _wait(self, pr, timeout):
        """wait4 the tool: (rusage, exit status) or (rusage, None) if it had to be killed."""
        t_end = time.monotonic() + timeout
        killed = False
        while True:
            try:
                pid, status, ru = os.wait4(pr.pid, os.WNOHANG)
            except ChildProcessError:
                raise RuntimeError("tool process %d already reaped" % pr.pid)
            if pid == pr.pid:
                pr.returncode = os.waitstatus_to_exitcode(status)
                return ru, (None if killed else pr.returncode)
            now = time.monotonic()
            if now > t_end and not killed:
                try:
                    os.killpg(pr.pid, signal.SIGKILL)
                except OSError:
                    pass
                killed = True
            elif killed and now > t_end + 15:
                raise RuntimeError("tool process %d did not die after SIGKILL" % pr.pid)
            time.sleep(0.02)

    # ---- output ---------------------------------------------------------

    def emit(self, rec):
        rec = dict(rec)
        rec.setdefault("run", self.run_id)
        rec["time"] = round(time.time(), 3)
        self.results.append(rec)
        with open(self.out_path, "a") as f:
            f.write(json.dumps(rec, sort_keys=False) + "\n")
        k = rec.get("kind")
        if k in ("capture", "quota"):
            if rec.get("error"):
                log("  %-11s %5s snap %-5s %-5s q=%-4s rep %d: ERROR %s" % (
                    rec["tool"], rec["frame_size"], rec["snaplen"], rec["mode"],
                    rec["quota_pct"] or "-", rec["rep"], rec["error"][:200]))
            else:
                log("  %-11s %5s snap %-5s %-5s q=%-4s rep %d: sent %d det %d wr %s drop %s "
                    "lost %s%% cpu %.3fs %s ns/pkt %s kpps" % (
                        rec["tool"], rec["frame_size"], rec["snaplen"], rec["mode"],
                        rec["quota_pct"] or "-", rec["rep"], rec["sent"], rec["detected"],
                        rec["written"], rec["dropped"], fmt(rec["lost_pct"], "{:.2f}"),
                        rec["cpu_s"], fmt(rec["cpu_ns_per_pkt"], "{:.0f}"),
                        fmt((rec["pps"] or 0) / 1000, "{:.0f}")))


    # ---- daemon: N clients through ringcapd vs N tcpdump processes ------

    def _spawn_group(self, argv_list, ready_re, timeout=30.0):
        """Start each argv in the capture namespace pinned to CAP_CPU; wait for
        ready_re on each one's stderr; returns the Popen objects."""
        procs = []
        for argv in argv_list:
            lines = []
            ready = threading.Event()

            def reader(stream, lines=lines, ready=ready):
                for raw in iter(stream.readline, b""):
                    line = raw.decode("utf-8", "replace")
                    lines.append(line)
                    if ready_re.search(line):
                        ready.set()

            pr = subprocess.Popen(["ip", "netns", "exec", self.env["CAP_NS"]] + argv,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, start_new_session=True,
                                  preexec_fn=lambda: os.sched_setaffinity(0, {CAP_CPU}))
            self.children[pr.pid] = pr
            th = threading.Thread(target=reader, args=(pr.stderr,), daemon=True)
            th.start()
            pr.lines, pr.ready_event, pr.reader = lines, ready, th
            procs.append(pr)
        t0 = time.monotonic()
        for pr in procs:
            while not pr.ready_event.wait(0.05):
                if pr.poll() is not None or time.monotonic() - t0 > timeout:
                    raise RuntimeError("not ready: %s" % "".join(pr.lines)[-400:])
        return procs

    def _stop_group(self, procs):
        """SIGINT each, wait for it (SIGKILL after 20 s): {pid: CPU seconds of
        its whole life, exit included}."""
        for pr in procs:
            try:
                os.killpg(pr.pid, signal.SIGINT)
            except OSError:
                pass
        cpu = {}
        for pr in procs:
            ru, _ = self._wait(pr, 20)
            cpu[pr.pid] = ru.ru_utime + ru.ru_stime
            self.children.pop(pr.pid, None)
            pr.reader.join(timeout=5)
        return cpu
