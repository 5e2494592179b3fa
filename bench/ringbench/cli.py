"""ringcap benchmark harness (stdlib only).

Runs ringcap and the anchor tools (tcpdump, dumpcap, netsniff-ng, stenotype)
side by side on the same generated traffic, between two network namespaces
joined by a veth pair (see bench/testbed), and prints tables.  One JSON object
per measurement goes to bench/results/<timestamp>-<preset>.jsonl.

    bench/run            quick preset (< 5 minutes)
    bench/run --full     every frame size, snaplen, mode, tool and quota
    bench/run --tiny     a few thousand packets, one repetition (self-test)

See bench/README.md for what each column means and the caveats.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import time

from .bench import Bench
from .common import (Aborted, BENCH_DIR, DEFAULT_RINGCAP, GEN_CPU, on_signal, loadavg, log,
                     read_stat_cpu)
from .presets import PRESETS
from .report import print_report


# Debian packages of the generator and the anchors: binary -> package.
APT_TOOLS = {"trafgen": "netsniff-ng", "netsniff-ng": "netsniff-ng", "tcpdump": "tcpdump",
             "dumpcap": "tshark", "editcap": "tshark", "stenotype": "stenographer",
             "taskset": "util-linux", "ethtool": "ethtool", "ip": "iproute2", "fio": "fio"}


def install_anchors():
    """apt-get install the packages of whichever tools are missing (one apt at a time)."""
    missing = sorted({pkg for b, pkg in APT_TOOLS.items() if not shutil.which(b)})
    if not missing or not shutil.which("apt-get") or not shutil.which("debconf-set-selections"):
        return
    log("installing from apt: %s" % " ".join(missing))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["debconf-set-selections"], input="wireshark-common "
                   "wireshark-common/install-setuid boolean false\n", text=True, env=env,
                   capture_output=True)
    r = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + missing,
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        r = subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
        r = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends"]
                           + missing, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        log("apt-get install failed (the missing tools are skipped): %s"
            % r.stderr.strip()[-300:])
    # The stenographer package starts its daemon; the benchmark runs stenotype itself.
    if shutil.which("systemctl"):
        subprocess.run(["systemctl", "stop", "stenographer"], capture_output=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--full", dest="preset", action="store_const", const="full")
    g.add_argument("--tiny", dest="preset", action="store_const", const="tiny")
    g.add_argument("--quick", dest="preset", action="store_const", const="quick")
    ap.set_defaults(preset="quick")
    ap.add_argument("--no-install", action="store_true",
                    help="do not apt-get install missing tools (anchors are then skipped)")
    ap.add_argument("--force", action="store_true",
                    help="run even if the 1-minute load average is above 0.5")
    ap.add_argument("--tools", help="comma-separated tool names (default: the preset's)")
    ap.add_argument("--count", type=int, help="packets per capture measurement")
    ap.add_argument("--reps", type=int, help="repetitions per measurement")
    ap.add_argument("--combos",
                    help="capture matrix as FRAME:SNAP:MODE,... (e.g. 64:64:disk; default: "
                         "the preset's)")
    ap.add_argument("--quotas", help="comma-separated CPU quota percentages")
    ap.add_argument("--quota-seconds", type=float, help="traffic per quota run (at capacity)")
    ap.add_argument("--quota-tools", help="comma-separated tools for the quota phase")
    ap.add_argument("--offline-mb", type=int)
    ap.add_argument("--storage-mb", type=int)
    ap.add_argument("--skip-capture", action="store_true")
    ap.add_argument("--skip-quota", action="store_true")
    ap.add_argument("--skip-offline", action="store_true")
    ap.add_argument("--skip-storage", action="store_true")
    ap.add_argument("--skip-daemon", action="store_true")
    ap.add_argument("--skip-privacy", action="store_true")
    ap.add_argument("--skip-flows", action="store_true")
    ap.add_argument("--skip-inject", action="store_true")
    ap.add_argument("--skip-clients", action="store_true")
    ap.add_argument("--skip-hooks", action="store_true")
    ap.add_argument("--skip-compress", action="store_true")
    ap.add_argument("--skip-retrieval", action="store_true")
    ap.add_argument("--only-retrieval", action="store_true",
                    help="run only the retrieval phase (issue 27)")
    ap.add_argument("--only-flows", action="store_true",
                    help="run only the flows phase (issue 28)")
    ap.add_argument("--ringcap", default=os.environ.get("RINGCAP", str(DEFAULT_RINGCAP)),
                    help="ringcap binary (default: target/release/ringcap)")
    ap.add_argument("--name", help="testbed name (1-8 alphanumerics; default unique)")
    ap.add_argument("--out-dir", default=str(BENCH_DIR / "results"),
                    help="where the JSON lines file goes (default bench/results)")
    ap.add_argument("--workdir", default="/var/tmp",
                    help="parent of the temp dir for capture files (must be a real disk)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (debugging)")
    ap.add_argument("--daemon-runs", default="ringcapd:1,ringcapd:N,ringcapd-z:N,tcpdump:N,tcpdump-lib:1,tcpdump:1",
                    help="daemon phase: comma-separated HOW:CLIENTS (N = the preset's count)")
    ap.add_argument("--report", metavar="JSONL",
                    help="only print the tables of an earlier run's results file")
    args = ap.parse_args()

    if args.only_flows:
        for k in ("capture", "quota", "offline", "storage", "daemon", "privacy", "inject",
                  "clients", "hooks", "compress", "retrieval"):
            setattr(args, "skip_" + k, True)
    if args.only_retrieval:
        for k in ("capture", "quota", "offline", "storage", "daemon", "privacy", "inject",
                  "clients", "hooks", "compress"):
            setattr(args, "skip_" + k, True)

    if args.report:
        with open(args.report) as f:
            results = [json.loads(l) for l in f if l.strip()]
        noise = next((r for r in results if r.get("kind") == "noise"), None)
        if noise is None:
            noise = dict(loadavg_before=[0, 0, 0], loadavg_after=[0, 0, 0], steal_pct=0,
                         wall_s=0)
        print_report(results, noise, args.report)
        return 0

    if os.geteuid() != 0:
        raise SystemExit("bench/run: must run as root (namespaces, cgroups, capture)")
    if not args.no_install:
        install_anchors()
    for b in ("ip", "taskset", "trafgen", "ethtool"):
        if not shutil.which(b):
            raise SystemExit("bench/run: %s not found" % b)
    if os.cpu_count() < 2:
        raise SystemExit("bench/run: needs at least 2 CPUs")

    preset = dict(PRESETS[args.preset])
    if args.reps:
        preset["reps"] = args.reps
    if args.combos:
        try:
            preset["combos"] = [
                (int(f) if f != "imix" else f, int(sn), m)
                for f, sn, m in (c.split(":") for c in args.combos.split(","))]
        except ValueError:
            raise SystemExit("bench/run: --combos wants FRAME:SNAP:MODE,... (e.g. 64:64:disk)")
        if any(m not in ("disk", "count", "stress") for _, _, m in preset["combos"]):
            raise SystemExit("bench/run: --combos modes are disk, count and stress")
        preset["sizes"] = list(dict.fromkeys(f for f, _, _ in preset["combos"]))
    if args.quotas:
        preset["quotas"] = [float(x) if "." in x else int(x) for x in args.quotas.split(",")]
    if args.quota_seconds:
        preset["quota_seconds"] = args.quota_seconds

    la = loadavg()
    st = read_stat_cpu()
    time.sleep(0.5)
    st2 = read_stat_cpu()
    steal_now = 100.0 * (st2["steal"] - st["steal"]) / max(1, st2["total"] - st["total"])
    log("load average %s, steal %.1f%% (over 0.5 s)" % (" ".join("%.2f" % x for x in la),
                                                       steal_now))
    if la[0] > 0.5 and not args.force:
        raise SystemExit("bench/run: machine busy (1-min load average %.2f > 0.5); "
                         "refusing to run (use --force to run anyway)" % la[0])

    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, on_signal)
    # This harness shares CPU 0 with trafgen; CPU 1 is the capture tool's.
    os.sched_setaffinity(0, {GEN_CPU})

    bench = Bench(args, preset)
    try:
        bench.run()
    except Aborted as e:
        log("bench/run: aborted (%s), cleaning up" % e)
        return 130
    finally:
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        bench.cleanup()
    return 0
