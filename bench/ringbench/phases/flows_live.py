"""The live row of the flows phase (issue 28): each exporter captures the
capture interface of the testbed while the generator sends at its top rate
(64-byte UDP frames whose addresses and ports make nearly every packet a
flow of its own, so the tables hold >= 1 M concurrent flows), and exports
to its own nfcapd in the capture namespace: ringcap (IPFIX), softflowd -i
(IPFIX) and fprobe -i (NetFlow v5, all it speaks).

Every tool gets the same idle timeout (_idle_s: longer than the traffic
lasts, so every flow is still in the table when the last packet comes) and
exports the flows as they idle out, the way each runs in production.
Columns: the CPU of the tool's process while it fills its table (ticks from
just before the first packet until the interface and the tool are quiet)
per packet sent; the CPU of the idle-out export after it, per record
stored; the interface's received packets against the packets of the
records nfcapd stored (`nfdump -I`), and datagrams the collector's socket
dropped (the namespace's UDP RcvbufErrors). The tools are stopped after
the export; what each does on the way out is not measured.
"""

import os
import shutil
import signal
import subprocess
import time

from ..common import CAP_CPU, log, read_proc_cpu_ticks

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _idle_s(npk):
    """An idle timeout longer than `npk` packets take at 100 k packets/s (a
    generator slowed by a busy machine): every flow is still in the table
    when the last packet comes (2 s for the few packets of --tiny)."""
    return max(2, -(-npk // 100_000))


def _snmp_rcvbuf_errors(pid):
    """UDP RcvbufErrors of the network namespace `pid` lives in."""
    with open("/proc/%d/net/snmp" % pid) as f:
        rows = [l.split() for l in f if l.startswith("Udp:")]
    return int(rows[1][rows[0].index("RcvbufErrors")])


def _stored(d):
    """Flows and packets in nfcapd's files under `d` (their stat records)."""
    r = subprocess.run(["nfdump", "-I", "-R", d], capture_output=True, text=True, timeout=300)
    got = {}
    for line in r.stdout.splitlines():
        k, _, v = line.partition(":")
        k = k.strip()
        if k in ("Flows", "Packets"):
            got[k] = got.get(k, 0) + int(v.strip() or 0)
    return got.get("Flows", 0), got.get("Packets", 0)


class _NsCollector:
    """nfcapd on 127.0.0.1:port inside namespace `ns`, writing into work/name."""

    def __init__(self, work, name, ns, port):
        self.dir = os.path.join(work, "nfcapd-live-" + name)
        os.makedirs(self.dir, exist_ok=True)
        self.port = port
        self.p = subprocess.Popen(["ip", "netns", "exec", ns, "nfcapd", "-b", "127.0.0.1", "-p",
                                   str(port), "-t", "3600", "-B", "8388608", "-w", self.dir],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        time.sleep(0.5)

    def stop(self):
        time.sleep(0.5)
        self.p.terminate()
        try:
            self.p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        flows, packets = _stored(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        return flows, packets


def _tools(bench, table, stats, idle):
    """(name, argv after `ip netns exec NS taskset -c CPU`, stop signal)."""
    iface = bench.env["CAP_IF"]
    rc = bench.tools["ringcap"]
    idle = str(idle)
    # A 64 MiB ring and 128-byte snaplen: the headers are all a flow table
    # needs (the default ring is 1 GiB at full snaplen).
    out = [("ringcap --flows ipfix", lambda port: [
        rc.path, "capture", "-i", iface, "-B", "65536", "-s", "128",
        "--flows", "ipfix://127.0.0.1:%d" % port, "--max-flows", str(table),
        "--idle-timeout", idle, "--active-timeout", "600", "--stats-json", stats],
        signal.SIGINT)]
    if shutil.which("softflowd"):
        out.append(("softflowd -i -v 10", lambda port: [
            "softflowd", "-i", iface, "-n", "127.0.0.1:%d" % port, "-v", "10", "-d",
            "-m", str(table), "-t", "udp=" + idle, "-t", "general=" + idle,
            "-t", "expint=1", "-c", os.path.join(bench.work, "softflowd-live.ctl"),
            "-p", os.path.join(bench.work, "softflowd-live.pid")], signal.SIGTERM))
    if shutil.which("fprobe"):
        # -l 2: log to standard error and stay in the foreground; -s 1: look
        # for idle flows every second.
        out.append(("fprobe -i (v5)", lambda port: [
            "fprobe", "-i", iface, "-l", "2", "-d", idle, "-e", "600", "-s", "1", "-p",
            "-q", "100000", "-b", "100000",
            "127.0.0.1:%d" % port], signal.SIGTERM))
    return out


def run_live(bench, npk, table):
    """Emits one `flows-live` record per tool (see the module doc)."""
    ns = bench.env["CAP_NS"]
    anchor = bench.anchors["CAP_NS"]
    stats = os.path.join(bench.work, "flows-live-stats.json")
    log("== flows live: %d packets of 64 B at the generator's top rate, tables of %d flows, "
        "each tool exporting to its own nfcapd in the capture namespace" % (npk, table))
    idle = _idle_s(npk)
    for i, (name, mk, sig) in enumerate(_tools(bench, table, stats, idle)):
        col = _NsCollector(bench.work, name.split()[0], ns, 9995 + i)
        argv = ["ip", "netns", "exec", ns, "taskset", "-c", str(CAP_CPU)] + mk(col.port)
        err_path = os.path.join(bench.work, "flows-live-%d.err" % i)
        err = open(err_path, "w")
        t_start = time.monotonic()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=err, start_new_session=True)
        bench.children[p.pid] = p
        rec = dict(kind="flows-live", tool=name, packets=npk, table_flows=table, idle_s=idle)
        try:
            # Start-up (rings, tables) before the first packet.
            time.sleep(1.5)
            e0 = _snmp_rcvbuf_errors(anchor)
            c0, k0 = bench.cap_stats(), read_proc_cpu_ticks(p.pid)
            sent, secs = bench.send(64, npk)
            bench.wait_settled(pid=p.pid)
            c1, k1 = bench.cap_stats(), read_proc_cpu_ticks(p.pid)
            # The idle timeout, the tools' scan intervals (1 s), the export
            # (of up to millions of records).
            time.sleep(idle + (12 if npk >= 1_000_000 else 3))
            k2 = read_proc_cpu_ticks(p.pid)
            # Peak RSS of the tool itself (rusage's maxrss would carry the
            # harness's own from before the exec).
            with open("/proc/%d/status" % p.pid) as f:
                hwm = [l.split()[1] for l in f if l.startswith("VmHWM:")]
            rec["peak_rss_kib"] = int(hwm[0]) if hwm else None
            if name.startswith("softflowd"):
                # Its own counters (pcap drops among them).
                r = subprocess.run(["softflowctl", "-c", os.path.join(bench.work,
                                    "softflowd-live.ctl"), "statistics"],
                                   capture_output=True, text=True, timeout=10)
                rec["softflowd_stats"] = [l.strip() for l in r.stdout.splitlines()
                                          if "drop" in l.lower() or "packets" in l.lower()][:6]
            os.killpg(p.pid, sig)
            t_stop = time.monotonic()
            while True:
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
                if pid == p.pid:
                    break
                if time.monotonic() - t_stop > 180:
                    os.killpg(p.pid, signal.SIGKILL)
                    pid, status, ru = os.wait4(p.pid, 0)
                    rec["killed"] = True
                    break
                time.sleep(0.05)
            bench.children.pop(p.pid, None)
            stop_s = time.monotonic() - t_stop
            flows, packets = col.stop()
            e1 = _snmp_rcvbuf_errors(anchor)
            received = c1["rx_packets"] - c0["rx_packets"]
            window_s = (k1 - k0) * TICK_S if None not in (k0, k1) else None
            export_s = (k2 - k1) * TICK_S if None not in (k1, k2) else None
            total_s = ru.ru_utime + ru.ru_stime
            rec.update(sent=sent, send_s=round(secs, 3), pps=round(sent / secs),
                       received=received, window_cpu_s=window_s,
                       cpu_ns_per_pkt=round(window_s * 1e9 / sent, 1) if window_s else None,
                       export_cpu_s=export_s,
                       export_cpu_ns_per_record=round(export_s * 1e9 / max(1, flows), 1)
                       if export_s is not None else None,
                       total_cpu_s=round(total_s, 3),
                       stop_s=round(stop_s, 2),
                       stored_flows=flows, stored_packets=packets,
                       udp_rcvbuf_errors=e1 - e0,
                       run_s=round(time.monotonic() - t_start, 1))
            code = os.waitstatus_to_exitcode(status)
            if code not in (0, -int(sig)):
                rec["error"] = "exit %d" % code
        finally:
            if p.returncode is None and bench.children.pop(p.pid, None):
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
                except OSError:
                    pass
            err.close()
        if name.startswith("ringcap") and os.path.exists(stats):
            import json
            with open(stats) as f:
                last = [json.loads(l) for l in f if l.strip()][-1]
            fl = last.get("flows", {})
            rec.update(created=fl.get("created"), exported=fl.get("exported"),
                       evicted_early=fl.get("evicted_early"),
                       export_errors=fl.get("export_errors"),
                       queue_dropped=fl.get("queue_dropped"))
            rec["capture"] = {k: v for k, v in last.items() if isinstance(v, (int, float))}
        if rec.get("error"):
            with open(err_path) as f:
                rec["error"] += ": " + f.read()[-300:]
        bench.emit(rec)
        log("  %-22s %s" % (name, rec.get("error") or (
            "%d sent at %.0f pps, %d received; %.0f ns/pkt CPU filling its table, "
            "%.2f s CPU exporting as flows idled out; nfcapd stored %d flows, %d packets "
            "(%d datagrams dropped at its socket), peak RSS %d MiB"
            % (rec["sent"], rec["pps"], rec["received"], rec["cpu_ns_per_pkt"] or -1,
               rec["export_cpu_s"] or 0, rec["stored_flows"], rec["stored_packets"],
               rec["udp_rcvbuf_errors"], (rec["peak_rss_kib"] or 0) // 1024))))
        if rec.get("softflowd_stats"):
            log("    softflowd says: " + "; ".join(rec["softflowd_stats"]))
