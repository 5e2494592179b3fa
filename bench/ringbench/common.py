"""Constants and small helpers shared by the whole harness: where things are,
which CPU runs what, /proc readers, number formatting.
"""

import os
import tempfile
import statistics
import sys
from pathlib import Path


BENCH_DIR = Path(__file__).resolve().parent.parent  # bench/
REPO_DIR = BENCH_DIR.parent
TESTBED = BENCH_DIR / "testbed"
DEFAULT_RINGCAP = REPO_DIR / "target" / "release" / "ringcap"

GEN_CPU = 0  # trafgen (and therefore the veth softirq) and this harness
CAP_CPU = 1  # the capture tool
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Offline-mode filter: matches about half of the generated flows (dst ports
# 1024..9215 are generated), so both the filter and the writer do real work.
OFFLINE_FILTER = "udp and dst portrange 1024-5119"

IMIX = [(64, 7), (576, 4), (1500, 1)]  # simple IMIX, 7:4:1
IMIX_AVG = sum(s * n for s, n in IMIX) / sum(n for _, n in IMIX)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Aborted(Exception):
    pass


def on_signal(signum, _frame):
    raise Aborted("signal %d" % signum)


def read_proc_cpu_ticks(pid):
    """utime+stime (clock ticks) of a live process, all its threads."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def read_proc_cpu_ns(pid):
    """CPU time (ns) of all live threads of pid, from /proc/PID/task/*/schedstat."""
    total = 0
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return None
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def read_proc_stat_cpu_ns(pid):
    """CPU time (ns, clock-tick resolution) of pid, threads that have exited
    included (utime + stime of /proc/PID/stat)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1e9 / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def dir_size(path):
    """Bytes of capture output under path (not ringcap's --stats-json file, which
    grows every second on its own)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            if f == "stats.json":
                continue
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def read_net_dev(pid, ifname):
    """Counters of ifname as seen from the network namespace of pid."""
    with open("/proc/%d/net/dev" % pid) as f:
        for line in f:
            if ":" not in line:
                continue
            name, rest = line.split(":", 1)
            if name.strip() == ifname:
                v = [int(x) for x in rest.split()]
                return dict(rx_bytes=v[0], rx_packets=v[1], rx_dropped=v[3],
                            tx_bytes=v[8], tx_packets=v[9], tx_dropped=v[11])
    raise RuntimeError("interface %s not found in netns of pid %d" % (ifname, pid))


def read_stat_cpu():
    with open("/proc/stat") as f:
        parts = f.readline().split()
    vals = [int(x) for x in parts[1:]]
    return dict(total=sum(vals[:8]), steal=vals[7] if len(vals) > 7 else 0)


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, spec="{:.1f}", none="-"):
    if v is None:
        return none
    try:
        return spec.format(v)
    except (ValueError, TypeError):
        return str(v)


def frame_avg_size(size):
    return IMIX_AVG if size == "imix" else float(size)


def kernel_version():
    return os.uname().release


def socket_dir():
    """A fresh directory for a ringcapd socket: under /run (root's, 0755),
    mode 0755 so that nobody reaches the socket. ringcapd refuses a socket
    whose directory, or a parent of it, others may write (the bench's work
    directory is 0777): they could replace the socket. The caller removes it."""
    d = tempfile.mkdtemp(prefix="ringcap-bench-sock-", dir="/run")
    os.chmod(d, 0o755)
    return d
