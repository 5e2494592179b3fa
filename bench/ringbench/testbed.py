"""The testbed as the harness drives it: the two namespaces and their veth
(bench/testbed), the generator (trafgen), interface counters, cgroup CPU
quotas, and cleanup of everything started.
"""

import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from .common import (CAP_CPU, GEN_CPU, IMIX, TESTBED, dir_size, log, read_net_dev,
                     read_proc_cpu_ticks)
from .tools import make_tools


# --------------------------------------------------------------------------
# cgroup CPU quota


class CpuQuota:
    """A cgroup with a CPU bandwidth limit (v1 cpu controller, else v2 cpu.max)."""

    MIN_QUOTA_US = 1000  # the kernel refuses smaller quotas

    def __init__(self, name, pct):
        self.pct = pct
        # Shortest period that allows the quota (>= 1 ms quota): 10 ms down
        # to 10%, longer below that (20 ms at 5%, 50 ms at 2%, 100 ms at 1%).
        self.period_us = max(10000, int(math.ceil(self.MIN_QUOTA_US * 100.0 / pct)))
        self.quota_us = int(round(self.period_us * pct / 100.0))
        self.path = None
        v1 = self._v1_mount()
        if v1:
            self.version = 1
            self.path = os.path.join(v1, name)
            os.mkdir(self.path)
            self._w("cpu.cfs_period_us", self.period_us)
            self._w("cpu.cfs_quota_us", self.quota_us)
        else:
            v2 = self._v2_mount()
            if not v2:
                raise RuntimeError("no cgroup cpu controller (v1 cpu or v2 cpu.max) found")
            self.version = 2
            try:
                with open(os.path.join(v2, "cgroup.subtree_control"), "w") as f:
                    f.write("+cpu")
            except OSError:
                pass
            self.path = os.path.join(v2, name)
            os.mkdir(self.path)
            self._w("cpu.max", "%d %d" % (self.quota_us, self.period_us))

    @staticmethod
    def _mounts():
        with open("/proc/mounts") as f:
            return [l.split() for l in f]

    @classmethod
    def _v1_mount(cls):
        for dev, mnt, fstype, opts, *_ in cls._mounts():
            if fstype == "cgroup" and "cpu" in opts.split(","):
                return mnt
        return None

    @classmethod
    def _v2_mount(cls):
        for dev, mnt, fstype, opts, *_ in cls._mounts():
            if fstype == "cgroup2":
                try:
                    with open(os.path.join(mnt, "cgroup.controllers")) as f:
                        if "cpu" in f.read().split():
                            return mnt
                except OSError:
                    pass
        return None

    @classmethod
    def available(cls):
        return bool(cls._v1_mount() or cls._v2_mount())

    def _w(self, fname, value):
        with open(os.path.join(self.path, fname), "w") as f:
            f.write(str(value))

    def attach(self, pid):
        self._w("cgroup.procs", pid)

    def stats(self):
        try:
            with open(os.path.join(self.path, "cpu.stat")) as f:
                return dict(l.split() for l in f if l.strip())
        except OSError:
            return {}

    def remove(self):
        if not self.path:
            return
        for _ in range(50):
            try:
                os.rmdir(self.path)
                self.path = None
                return
            except FileNotFoundError:
                self.path = None
                return
            except OSError:
                time.sleep(0.1)
        log("warning: could not remove cgroup %s" % self.path)


# --------------------------------------------------------------------------
# the testbed


class Testbed:
    """Namespaces, traffic and counters; every process the harness started."""

    def __init__(self, args, preset):
        self.args = args
        self.p = preset
        self.name = args.name or ("rb%x" % (os.getpid() & 0xfffff))[:8]
        self.env = None
        self.anchors = {}
        self.children = {}      # pid -> Popen, everything we started and must end
        self.cgroups = []
        self.work = None
        self.results = []
        self.capacity = {}
        self.out_path = None
        self.tools = make_tools(args.ringcap)

    # ---- lifecycle ----------------------------------------------------

    def setup(self):
        self.work = tempfile.mkdtemp(prefix="ringcap-bench-", dir=self.args.workdir)
        os.chmod(self.work, 0o777)  # tcpdump drops privileges to its own user
        r = subprocess.run([str(TESTBED), "up", self.name], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("testbed up failed: %s" % r.stderr.strip())
        self.env = dict(l.split("=", 1) for l in r.stdout.split() if "=" in l)
        for key in ("GEN_NS", "CAP_NS"):
            ns = self.env[key]
            # Long-lived (bounded) sleepers: /proc/<pid>/net/dev of these shows
            # the counters of their namespace without spawning a process per read.
            pr = subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "7200"],
                                  stdin=subprocess.DEVNULL, start_new_session=True)
            self.children[pr.pid] = pr
            self.anchors[key] = pr.pid
        time.sleep(0.1)
        for key, ifkey in (("GEN_NS", "GEN_IF"), ("CAP_NS", "CAP_IF")):
            read_net_dev(self.anchors[key], self.env[ifkey])

    def cleanup(self):
        for pid, pr in list(self.children.items()):
            if pr.returncode is None:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
                try:
                    os.waitpid(pid, 0)
                except OSError:
                    pass
        self.children.clear()
        for cg in self.cgroups:
            cg.remove()
        self.cgroups.clear()
        if self.env is not None or self.name:
            subprocess.run([str(TESTBED), "down", self.name], capture_output=True)
        if self.work and not self.args.keep:
            shutil.rmtree(self.work, ignore_errors=True)

    # ---- counters -----------------------------------------------------

    def cap_stats(self):
        return read_net_dev(self.anchors["CAP_NS"], self.env["CAP_IF"])

    def gen_stats(self):
        return read_net_dev(self.anchors["GEN_NS"], self.env["GEN_IF"])

    # ---- traffic ------------------------------------------------------

    def trafgen_cfg(self, size):
        path = os.path.join(self.work, "trafgen-%s.cfg" % size)
        if os.path.exists(path):
            return path
        e = self.env
        sizes = [(s, n) for s, n in IMIX] if size == "imix" else [(int(size), 1)]
        blocks = []
        for s, n in sizes:
            payload = s - 42  # eth 14 + ipv4 20 + udp 8; frame_size excludes FCS
            blk = ("{\n"
                   "  eth(da=%s, sa=%s),\n"
                   "  ipv4(sa=%s, da=198.19.0.0, da[2]=drnd(), da[3]=dinc(), id=drnd(), ttl=64),\n"
                   "  udp(sp=drnd(), dp=dinc(1024, 9215), csum=0),\n"
                   "  fill(0x41, %d)\n"
                   "}\n") % (e["CAP_MAC"], e["GEN_MAC"], e["GEN_IP"], payload)
            blocks += [blk] * n
        with open(path, "w") as f:
            f.write("".join(blocks))
        return path

    def send(self, size, count, rate_pps=None, timeout=None, stress=False):
        """trafgen in the gen namespace on CPU 0 (stress: on CPUs 0 and 1, so
        the capture tool shares its CPU with a generator); returns (sent, seconds)."""
        cpus = "%d,%d" % (GEN_CPU, CAP_CPU) if stress else str(GEN_CPU)
        cmd = ["ip", "netns", "exec", self.env["GEN_NS"], "taskset", "-c", cpus,
               "trafgen", "--no-sock-mem", "--notouch-irq", "--cpus", "2" if stress else "1",
               "--out", self.env["GEN_IF"], "--in", self.trafgen_cfg(size),
               "--num", str(int(count))]
        if rate_pps:
            # trafgen 0.6.8's --rate does not pace short runs; --gap does
            # (sendto(2) per packet, so the top rate is lower than TX_RING's).
            cmd += ["--gap", "%dns" % int(1e9 / rate_pps)]
        if timeout is None:
            est = count / (rate_pps or 50000.0)
            timeout = 30 + 3 * est
        t0 = time.monotonic()
        pr = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        self.children[pr.pid] = pr
        try:
            out, _ = pr.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            log("warning: trafgen exceeded %.0f s, interrupting" % timeout)
            os.killpg(pr.pid, signal.SIGINT)
            try:
                out, _ = pr.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(pr.pid, signal.SIGKILL)
                out, _ = pr.communicate()
        finally:
            self.children.pop(pr.pid, None)
        secs = time.monotonic() - t0
        m = re.search(r"(\d+) packets outgoing", out or "")
        sent = int(m.group(1)) if m else None
        if pr.returncode != 0 or sent is None:
            raise RuntimeError("trafgen failed (rc %s): %s" % (pr.returncode, (out or "")[-500:]))
        return sent, secs

    def wait_settled(self, pid=None, quiet_s=1.2, max_s=10.0, outdir=None):
        """Until the capture interface's rx counter has been still for quiet_s and
        the tool (if any) is done: no CPU used for 0.3 s (clock ticks), or, with
        outdir (quota runs, where a throttled tool's CPU use is sparse), its
        output has not grown for 1.5 s."""
        t_end = time.monotonic() + max_s
        last_rx = self.cap_stats()["rx_packets"]
        t_rx = time.monotonic()
        probe = (lambda: dir_size(outdir)) if outdir else (lambda: read_proc_cpu_ticks(pid))
        need = 1.5 if outdir else 0.3
        last_p = probe() if pid else None
        t_p = time.monotonic()
        while time.monotonic() < t_end:
            time.sleep(0.1)
            now = time.monotonic()
            rx = self.cap_stats()["rx_packets"]
            if rx != last_rx:
                last_rx, t_rx = rx, now
            if pid:
                v = probe()
                if v != last_p:
                    last_p, t_p = v, now
            if now - t_rx >= quiet_s and (not pid or now - t_p >= need):
                return True
        return False

    def measure_capacity(self, size):
        count = self.p["capacity_count"]
        rate = self.p["rate_pps"]
        c0, g0 = self.cap_stats(), self.gen_stats()
        sent, secs = self.send(size, count, rate)
        self.wait_settled(quiet_s=0.3)
        c1, g1 = self.cap_stats(), self.gen_stats()
        detected = c1["rx_packets"] - c0["rx_packets"]
        rec = dict(kind="capacity", frame_size=size, sent=sent, detected=detected,
                   iface_dropped=(c1["rx_dropped"] - c0["rx_dropped"])
                   + (g1["tx_dropped"] - g0["tx_dropped"]),
                   seconds=round(secs, 4), pps=round(detected / secs, 1) if secs else None)
        self.capacity[size] = rec
        self.emit(rec)
        return rec
