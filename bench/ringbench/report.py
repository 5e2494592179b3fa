"""The report: tables from the JSON lines of a run.
"""


from .common import CAP_CPU, GEN_CPU, OFFLINE_FILTER, fmt, median


def _key(r):
    return (r["tool"], r["frame_size"], r["snaplen"], r["mode"], r.get("quota_pct"))


def summarize(recs, idle=None):
    """Median/min/max per (tool, frame, snaplen, mode, quota).  idle: tool -> idle
    record; gives net_ns, the CPU per packet without the tool's fixed costs (idle
    CPU over the measurement window and the cost of stopping)."""
    idle = idle or {}
    groups = {}
    for r in recs:
        if r.get("error") or r.get("written") is None:
            continue
        groups.setdefault(_key(r), []).append(r)
    out = {}
    for k, rs in groups.items():
        ns = [r["cpu_ns_per_pkt"] for r in rs if r["cpu_ns_per_pkt"] is not None]
        lost = [r["lost_pct"] for r in rs]
        net = []
        i = idle.get(k[0])
        if i and i.get("idle_cpu_ms_per_s") is not None:
            for r in rs:
                if r.get("written") and r.get("window_s") is not None:
                    fixed = (i["idle_cpu_ms_per_s"] * r["window_s"] + i["stop_cpu_ms"]) / 1000.0
                    net.append(max(0.0, r["cpu_s"] - fixed) * 1e9 / r["written"])
        out[k] = dict(
            n=len(rs), sent=median([r["sent"] for r in rs]),
            detected=median([r["detected"] for r in rs]),
            written=median([r["written"] for r in rs]),
            dropped=median([r["dropped"] for r in rs]),
            lost=median(lost), lost_min=min(lost), lost_max=max(lost),
            cpu_s=median([r["cpu_s"] for r in rs]),
            ns=median(ns), ns_min=min(ns) if ns else None, ns_max=max(ns) if ns else None,
            net_ns=median(net),
            pps=median([r["pps"] for r in rs]), mbps=median([r["mbps"] for r in rs]),
            ring=rs[-1].get("ring_mib"), src=rs[-1].get("written_source"),
            period=rs[-1].get("cfs_period_us"), ring_bound=rs[-1].get("ring_bound"),
            ring_pkts=rs[-1].get("ring_packets_est"),
            throttled=median([r.get("nr_throttled") for r in rs]),
            offered=median([r["sent"] / r["traffic_s"] for r in rs if r.get("traffic_s")]),
        )
    return out


def table(headers, rows):
    w = [len(h) for h in headers]
    for row in rows:
        for i, c in enumerate(row):
            w[i] = max(w[i], len(c))
    lines = ["| " + " | ".join(h.ljust(w[i]) for i, h in enumerate(headers)) + " |",
             "|" + "|".join("-" * (x + 2) for x in w) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(c.rjust(w[i]) if i >= 4 else c.ljust(w[i])
                                       for i, c in enumerate(row)) + " |")
    return "\n".join(lines)


def _size_key(size):
    return 99999 if isinstance(size, str) else size


def _order(tool):
    names = ["tcpdump", "tcpdump-B", "dumpcap", "netsniff-ng", "stenotype", "stenotype-index", "ringcap",
             "ringcap-ng", "ringcap-zc", "ringcap-t2", "ringcap-B2"]
    return names.index(tool) if tool in names else 99


def print_report(results, noise, out_path):
    meta = next((r for r in results if r["kind"] == "meta"), {})
    print()
    print("# ringcap bench — %s, kernel %s, %s CPUs (generator+softirq on CPU %d, capture on "
          "CPU %d)" % (meta.get("preset"), meta.get("kernel"), meta.get("cpus"), GEN_CPU, CAP_CPU))
    if meta.get("skipped"):
        print("skipped tools: " + "; ".join("%s (%s)" % kv for kv in meta["skipped"].items()))
    caps = [r for r in results if r["kind"] == "capacity"]
    if caps:
        print("\n## Core capacity (trafgen on CPU %d, no capture; interface rx_packets)\n"
              % GEN_CPU)
        print(table(["frame", "sent", "detected", "seconds", "pps"],
                    [[str(r["frame_size"]), str(r["sent"]), str(r["detected"]),
                      "%.2f" % r["seconds"], "%.0f" % r["pps"]] for r in caps]))
    drecs = [r for r in results if r["kind"] == "daemon" and not r.get("error")]
    if drecs:
        print("\n## Daemon: N clients through ringcapd vs N tcpdump (each client's filter "
              "matches every frame; CPU = every process involved)\n")
        print(table(["how", "clients", "frame", "snap", "sent", "detected", "lost",
                     "gen kpps", "cpu s", "ns/delivered", "ring B/delivered",
                     "file B/delivered", "daemon MiB idle/busy"],
                    [[r["how"], str(r["clients"]), str(r["frame_size"]), str(r["snaplen"]),
                      str(r["sent"]), str(r["detected"]), str(r["lost"]),
                      "%.0f" % (r["gen_pps"] / 1000), "%.3f" % r["cpu_s"],
                      fmt(r["cpu_ns_per_delivered"], "{:.0f}"),
                      fmt(r.get("ring_bytes_per_delivered"), "{:.1f}"),
                      fmt(r.get("file_bytes_per_delivered"), "{:.1f}"),
                      ("%s/%s" % (r.get("daemon_rss_mib"), r.get("daemon_rss_mib_busy")))
                      if r["how"] != "tcpdump" else "-"] for r in drecs]))
        if any(r["how"] == "ringcapd-z" for r in drecs):
            print("\nringcapd-z: --compress; each client keeps the daemon's compressed blocks "
                  "as they come (--format compressed --tstamp-precision nano), decoding nothing.")
        if any(r["how"] == "tcpdump-lib" for r in drecs):
            print("\ntcpdump-lib: unmodified tcpdump as nobody through ringcapd (`ringcap run`, "
                  "libringcap_pcap.so); its CPU includes the daemon's.")
    idle = {r["tool"]: r for r in results if r["kind"] == "idle" and not r.get("error")}
    caprecs = [r for r in results if r["kind"] == "capture"]
    errs = [r for r in results if r["kind"] in ("capture", "quota") and r.get("error")]
    if caprecs:
        s = summarize(caprecs, idle)
        print("\n## Capture (median of %s; ns/pkt and lost%% as median [min–max])\n"
              % ("/".join(sorted({str(v["n"]) for v in s.values()})) or "-"))
        rows = []
        keys = sorted(s, key=lambda k: (_size_key(k[1]), k[2], k[3], _order(k[0])))
        for k in keys:
            v = s[k]
            rows.append([k[0], str(k[1]), str(k[2]), k[3], fmt(v["ring"], "{:g}"),
                         "%d" % v["sent"], "%d" % v["detected"],
                         "%d%s" % (v["written"], "*" if v["src"] == "tool" else ""),
                         fmt(v["dropped"], "{:.0f}"),
                         "%s [%s–%s]" % (fmt(v["lost"], "{:.2f}"), fmt(v["lost_min"], "{:.2f}"),
                                         fmt(v["lost_max"], "{:.2f}")),
                         fmt(v["cpu_s"], "{:.3f}"),
                         "%s [%s–%s]" % (fmt(v["ns"], "{:.0f}"), fmt(v["ns_min"], "{:.0f}"),
                                         fmt(v["ns_max"], "{:.0f}")),
                         fmt(v["net_ns"], "{:.0f}"),
                         fmt(v["pps"] / 1000 if v["pps"] else None, "{:.0f}"),
                         fmt(v["mbps"], "{:.0f}")])
        print(table(["tool", "frame", "snap", "mode", "ring MiB", "sent", "detected",
                     "written", "dropped", "lost %", "cpu s", "cpu ns/pkt", "net ns/pkt", "kpps",
                     "Mbit/s"],
                    rows))
        print("\n(* written = the tool's own count: count-only mode writes to /dev/null; "
              "net ns/pkt = cpu ns/pkt without the tool's idle CPU and stop cost from the "
              "Idle table)")
        # ratio lines
        ratios = []
        groups = sorted({k[1:4] for k in s}, key=lambda g: (_size_key(g[0]), g[1], g[2]))
        for g in groups:
            for variant in ("ringcap", "ringcap-ng", "ringcap-zc"):
                rc = s.get((variant,) + g + (None,))
                if not rc or not rc["ns"]:
                    continue
                parts = []
                for k in keys:
                    if k[1:4] == g and not k[0].startswith("ringcap") and s[k]["ns"]:
                        parts.append("%s %.2f" % (k[0], rc["ns"] / s[k]["ns"]))
                if parts:
                    ratios.append("  %s B snap %s %s: %s cpu ns/pkt ÷ anchor: %s"
                                  % (g[0], g[1], g[2], variant, ", ".join(parts)))
        if ratios:
            print("\nRatio (same run; < 1 means ringcap uses less CPU per packet):")
            print("\n".join(ratios))
        bufs = [r for r in caprecs if r["tool"].startswith("ringcap") and "ring_blocks" in r]
        if bufs:
            print("\nringcap, where it dropped and how full its buffers got (max over reps):\n")
            rows = []
            for k in sorted({(r["tool"], r["frame_size"], r["snaplen"], r["mode"]) for r in bufs},
                            key=lambda k: (_size_key(k[1]), k[2], k[3], _order(k[0]))):
                rr = [r for r in bufs if (r["tool"], r["frame_size"], r["snaplen"], r["mode"]) == k]
                mx = lambda f: max(r.get(f) or 0 for r in rr)
                rows.append([k[0], str(k[1]), str(k[2]), k[3], "%d" % mx("dropped_ring"),
                             "%d" % mx("dropped_writer"),
                             "%d / %d" % (mx("ring_blocks_high_water"), mx("ring_blocks")),
                             "%d / %d" % (mx("writer_buffer_high_water_bytes") >> 20,
                                          mx("writer_buffer_bytes") >> 20)])
            print(table(["tool", "frame", "snap", "mode", "dropped ring", "dropped writer",
                         "ring high water (blocks)", "writer high water (MiB)"], rows))
        ready, settle = {}, {}
        for r in caprecs:
            if r.get("start_s") is not None:
                k = (r["tool"], r["snaplen"], r.get("ring_mib"))
                ready.setdefault(k, []).append(r["start_s"])
                if r.get("settle_s") is not None:
                    settle.setdefault(k, []).append(r["settle_s"])
        if ready:
            print("\n## Time to ready (start to the tool's own ready line, seconds: median "
                  "[min–max] over the capture runs; ring = the tool's buffer; full speed = "
                  "further seconds until the tool used no CPU for 0.3 s)\n")
            print(table(["tool", "snap", "ring MiB", "runs", "ready s", "full speed +s"],
                        [[k[0], str(k[1]), fmt(k[2], "{:g}"), str(len(v)),
                          "%s [%s–%s]" % (fmt(median(v), "{:.2f}"), fmt(min(v), "{:.2f}"),
                                          fmt(max(v), "{:.2f}")),
                          fmt(median(settle[k]) if settle.get(k) else None, "{:.2f}")]
                         for k, v in sorted(ready.items(),
                                            key=lambda kv: (_order(kv[0][0]), str(kv[0][1])))]))
    qrecs = [r for r in results if r["kind"] == "quota"]
    if qrecs:
        s = summarize(qrecs)
        print("\n## CPU quota (64 B frames, snaplen 64, to disk; cgroup cfs quota)\n")
        rows = []
        for k in sorted(s, key=lambda k: (_order(k[0]), -k[4])):
            v = s[k]
            rows.append([k[0], "%g%%" % k[4], str(v["period"] // 1000) + " ms",
                         fmt(v["ring"], "{:g}"),
                         "%d%s" % (v["sent"], " (!)" if v["ring_bound"] else ""),
                         "%.0f" % (v["sent"] / v["ring_pkts"]) if v["ring_pkts"] else "-",
                         "%d" % v["written"],
                         fmt(v["dropped"], "{:.0f}"), fmt(v["lost"], "{:.3f}"),
                         fmt(v["ns"], "{:.0f}"), fmt(v["offered"] / 1000, "{:.0f}"),
                         fmt(v["pps"] / 1000, "{:.0f}"),
                         fmt(v["throttled"], "{:.0f}")])
        print(table(["tool", "quota", "period", "ring MiB", "sent", "sent/ring", "written",
                     "dropped", "lost %", "cpu ns/pkt", "offered kpps", "kpps", "throttled"],
                    rows))
        if any(v["ring_bound"] for v in s.values()):
            print("(!) run shorter than 10x what the ring holds: the ring hides part of the loss")
        print()
        for tool in sorted({k[0] for k in s}, key=_order):
            for label, limit in (("lossless", 0.0), ("< 0.1% loss", 0.1)):
                ok = [k for k in s if k[0] == tool and s[k]["lost"] <= limit]
                if ok:
                    k = min(ok, key=lambda k: k[4])
                    v = s[k]
                    print("  %-11s smallest quota %-12s %g%% at %.0f kpps -> projects to "
                          "%.2f Mpps on a full core" % (tool, label, k[4], v["pps"] / 1000,
                                                        v["pps"] / (k[4] / 100.0) / 1e6))
                else:
                    print("  %-11s smallest quota %-12s none among those run" % (tool, label))
    idle = [r for r in results if r["kind"] == "idle"]
    if idle:
        print("\n## Idle (no traffic: CPU the tool burns waiting, and to stop)\n")
        print(table(["tool", "seconds", "idle CPU ms/s", "stop CPU ms"],
                    [[r["tool"], "%g" % r["seconds"], fmt(r.get("idle_cpu_ms_per_s"), "{:.1f}"),
                      fmt(r.get("stop_cpu_ms"), "{:.0f}")] for r in idle]))
    offl = [r for r in results if r["kind"] == "offline"]
    if offl:
        print("\n## Offline (-r IN -w OUT '%s'; input in page cache)\n" % OFFLINE_FILTER)
        print(table(["tool", "input MB", "packets", "written", "seconds", "cpu s", "MB/s",
                     "kpps"],
                    [[r["tool"], "%.0f" % (r["input_bytes"] / 1e6), str(r["input_packets"]),
                      str(r.get("written", "-")), fmt(r.get("seconds"), "{:.2f}"),
                      fmt(r.get("cpu_s"), "{:.2f}"), fmt(r.get("mb_per_s"), "{:.0f}"),
                      fmt((r.get("pps") or 0) / 1000 if r.get("pps") else None, "{:.0f}")]
                     for r in offl]))
        for r in offl:
            if r.get("error"):
                print("  %s: ERROR %s" % (r["tool"], r["error"]))
    priv = [r for r in results if r["kind"] == "privacy"]
    if priv:
        print("\n## Privacy (-r IN -w OUT, Crypto-PAn, one core)\n")
        print(table(["trace", "packets", "addresses", "tool", "seconds", "cpu s",
                     "ns/pkt (CPU)", "Mpps per core"],
                    [[r.get("trace", "many flows"), str(r["packets"]),
                      str(r.get("addresses", 2 * r["flows"])), r["tool"],
                      fmt(r.get("seconds"), "{:.2f}"), fmt(r.get("cpu_s"), "{:.2f}"),
                      fmt(r.get("cpu_ns_per_pkt"), "{:.0f}"),
                      fmt(r.get("mpps_per_core"), "{:.2f}")] for r in priv]))
        for r in priv:
            if r.get("error"):
                print("  %s: ERROR %s" % (r["tool"], r["error"]))
        for r in results:
            if r["kind"] == "privacy-agree":
                print("\n  %s: ringcap's and traceanon's anonymized addresses equal in %d of %d "
                      "packets" % (r.get("trace", "many flows"), r["same_addresses"],
                                   r["packets"]))
            if r["kind"] == "privacy-ratio":
                print("\n  %s: traceanon / ringcap = %.1fx wall, %.1fx CPU (%s; goal >= 10x)"
                      % (r["trace"], r["wall_ratio"], r["cpu_ratio"], r["tool"]))
    fl = [r for r in results if r["kind"] == "flows"]
    if fl:
        print("\n## Flows (-r IN, IPFIX to nfcapd on 127.0.0.1; %d packets over %d flows, "
              "one core)\n" % (fl[0]["packets"], fl[0]["flows"]))
        print(table(["tool", "seconds", "cpu s", "ns/pkt (CPU)", "peak RSS MiB",
                     "records stored", "records/s exported"],
                    [[r["tool"], fmt(r.get("seconds"), "{:.2f}"), fmt(r.get("cpu_s"), "{:.2f}"),
                      fmt(r.get("cpu_ns_per_pkt"), "{:.0f}"),
                      fmt((r.get("maxrss_kib") or 0) / 1024, "{:.0f}"),
                      str(r.get("stored", "-")), fmt(r.get("records_per_s"), "{:.0f}")]
                     for r in fl]))
        for r in fl:
            if r.get("error"):
                print("  %s: ERROR %s" % (r["tool"], r["error"]))
        for r in results:
            if r["kind"] == "flows-memory":
                print("  flow table memory: %.0f bytes per flow (peak RSS, 1 Mi-flow table "
                      "minus 1 Ki)" % r["bytes_per_flow"])
    live = [r for r in results if r["kind"] == "flows-live"]
    if live:
        print("\n## Flows live (-i, 64 B frames at the generator's top rate, nearly every "
              "packet a new flow; each tool into its own nfcapd)\n")
        print(table(["tool", "sent", "pps", "received", "ns/pkt filling (CPU)",
                     "export CPU s", "stored flows", "stored packets", "collector drops",
                     "peak RSS MiB"],
                    [[r["tool"], str(r.get("sent", "-")), fmt(r.get("pps"), "{:.0f}"),
                      str(r.get("received", "-")), fmt(r.get("cpu_ns_per_pkt"), "{:.0f}"),
                      fmt(r.get("export_cpu_s"), "{:.2f}"), str(r.get("stored_flows", "-")),
                      str(r.get("stored_packets", "-")), str(r.get("udp_rcvbuf_errors", "-")),
                      fmt((r.get("peak_rss_kib") or 0) / 1024, "{:.0f}")] for r in live]))
        for r in live:
            if r.get("error"):
                print("  %s: ERROR %s" % (r["tool"], r["error"]))
    cmp_ = [r for r in results if r["kind"] == "compress"]
    if cmp_:
        print("\n## Header compression (-s headers, microseconds; bytes per packet, everything "
              "included; Mpps per core of ringcap -r pcap --format compressed)\n")
        print(table(["trace", "pcap", "ringcap", "zstd -19", "xz -9", "round trip",
                     "Mpps/core", "encode only"],
                    [[r["trace"], fmt(r.get("pcap_bpp"), "{:.1f}"),
                      fmt(r.get("ringcap_bpp"), "{:.2f}"), fmt(r.get("zstd_bpp"), "{:.2f}"),
                      fmt(r.get("xz_bpp"), "{:.2f}"),
                      {True: "identical", False: "DIFFERS"}.get(r.get("round_trip_identical"), "-"),
                      fmt(r.get("ringcap_mpps_per_core"), "{:.2f}"),
                      fmt(r.get("encode_mpps"), "{:.2f}")] for r in cmp_]))
        for r in cmp_:
            if r.get("error"):
                print("  %s: ERROR %s" % (r["trace"], r["error"]))
    inj = [r for r in results if r["kind"] == "inject"]
    if inj:
        print("\n## Injection (ringcap inject as root, 1000 frames/s; error = kernel transmit "
              "timestamp - requested time)\n")
        print(table(["frames", "sent", "missed", "early", "median us", "p99 us", "max us"],
                    [[str(r["frames"]), str(r.get("sent", "-")), str(r.get("missed", "-")),
                      str(r.get("early", "-")), fmt(r.get("err_median_us"), "{:.1f}"),
                      fmt(r.get("err_p99_us"), "{:.1f}"), fmt(r.get("err_max_us"), "{:.1f}")]
                     for r in inj]))
        for r in inj:
            if r.get("error"):
                print("  inject: ERROR %s" % r["error"])
    cl = [r for r in results if r["kind"] == "clients"]
    if cl:
        best = {}
        for r in cl:
            if r.get("pps") and r["pps"] > best.get(r["client"], 0):
                best[r["client"]] = r["pps"]
        rust = best.get("rust")
        print("\n## Client libraries (a full session ring drained as nobody; 64 B, snap 96; "
              "best of the rounds)\n")
        rows = []
        for c in ("rust", "c", "python"):
            rs = [r for r in cl if r["client"] == c]
            if not rs:
                continue
            ok = sorted(r["pps"] for r in rs if r.get("pps"))
            rows.append([c, str(rs[0]["packets"]), "%d/%d" % (len(ok), len(rs)),
                         fmt(best.get(c), "{:.0f}"), fmt(ok[len(ok) // 2] if ok else None, "{:.0f}"),
                         fmt(best[c] / rust if rust and c in best else None, "{:.2f}")])
        print(table(["client", "packets", "rounds ok", "best packets/s", "median packets/s",
                     "best vs Rust"], rows))
        for r in cl:
            if r.get("error"):
                print("  %s: ERROR %s" % (r["client"], r["error"]))
    hk = [r for r in results if r["kind"] == "hooks"]
    if hk:
        print("\n## Capture hooks (snaplen 64, to disk; medians over repetitions; gen pps = "
              "trafgen's achieved rate, the sender CPU's cost of the receive path + hook)\n")
        groups = {}
        for r in hk:
            groups.setdefault((r["frame_size"], r.get("rate_pps") or 0, r["hook"]), []).append(r)
        rows = []
        for (size, rate, hook), rs in sorted(groups.items(), key=lambda kv: (
                _size_key(kv[0][0]), kv[0][1], ["packet", "xdp", "netfilter"].index(kv[0][2])
                if kv[0][2] in ("packet", "xdp", "netfilter") else 9)):
            ok = [r for r in rs if not r.get("error")]
            gen = [r["sent"] / r["traffic_s"] for r in ok if r.get("traffic_s")]
            rows.append([hook, str(size), "unpaced" if not rate else str(rate),
                         "%d/%d" % (len(ok), len(rs)),
                         fmt(median([r["cpu_ns_per_pkt"] for r in ok
                                     if r.get("cpu_ns_per_pkt") is not None]), "{:.0f}"),
                         fmt(median([r["lost_pct"] for r in ok if r.get("lost_pct") is not None]),
                             "{:.2f}"),
                         fmt(median([r.get("dropped") or 0 for r in ok]), "{:.0f}"),
                         fmt(median([r.get("iface_dropped") or 0 for r in ok]), "{:.0f}"),
                         fmt(median(gen), "{:.0f}")])
        print(table(["hook", "frame", "rate", "ok", "cpu ns/pkt", "lost %", "dropped (tool)",
                     "iface dropped", "gen pps"], rows))
        for r in hk:
            if r.get("error"):
                print("  %s %s: ERROR %s" % (r["tool"], r["frame_size"], r["error"]))
    hf = [r for r in results if r["kind"] == "hooks-filter"]
    if hf:
        print("\n## Hooks with a filter keeping 10 % (64 B, unpaced, snaplen 64, to disk; "
              "medians; cpu per packet sent, the capture keeps a tenth)\n")
        order = ["none", "packet-f10", "xdp-f10", "xdp-monitor-f10"]
        groups = {}
        for r in hf:
            groups.setdefault(r["hook"], []).append(r)
        base = None
        rows = []
        for hook in sorted(groups, key=lambda h: order.index(h) if h in order else 9):
            ok = [r for r in groups[hook] if not r.get("error")]
            gen = median([r["sent"] / r["traffic_s"] for r in ok if r.get("traffic_s")])
            if hook == "packet-f10":
                base = gen
            cpu = median([r["cpu_s"] * 1e9 / r["sent"] for r in ok
                          if r.get("cpu_s") is not None and r.get("sent")])
            kept = median([100.0 * (r.get("written") or 0) / r["expected"] for r in ok
                           if r.get("expected")])
            rows.append([hook, "%d/%d" % (len(ok), len(groups[hook])), fmt(gen, "{:.0f}"),
                         fmt(cpu, "{:.0f}"), fmt(kept, "{:.2f}")])
        for row in rows:
            g = float(row[2]) if row[2] not in ("-", "") else None
            row.append(fmt(g / base if g and base else None, "{:.2f}"))
        print(table(["capture", "ok", "gen pps", "cpu ns/sent pkt", "written % of matches",
                     "gen vs packet"], rows))
        for r in hf:
            if r.get("error"):
                print("  %s: ERROR %s" % (r["tool"], r["error"]))
    stor = [r for r in results if r["kind"] == "storage"]
    if stor:
        print("\n## Storage\n")
        for r in stor:
            if r.get("error"):
                print("  %s: ERROR %s" % (r["tool"], r["error"]))
            elif r["tool"] == "dd-odirect":
                print("  dd if=/dev/zero bs=1M oflag=direct: %d MiB in %.2f s = %.0f MB/s"
                      % (r["mib"], r["seconds"], r["mb_per_s"]))
            elif r["tool"] == "fio":
                print("  fio --rw=write --bs=1M --direct=1 --ioengine=io_uring --iodepth=%d: "
                      "%d MiB in %.2f s = %.0f MB/s" % (r["iodepth"], r["mib"], r["seconds"],
                                                        r["mb_per_s"]))
            else:
                print("  %s --size %d --write-mode %s: %d packets, %.0f MB/s, %.0f ns/pkt CPU"
                      % (r["tool"], r["size"], r["write_mode"], r["packets"],
                         r.get("mb_per_s", 0), r.get("cpu_ns_per_pkt", 0)))
    from .phases.retrieval import print_retrieval
    print_retrieval(results)
    if errs:
        print("\n## Errors\n")
        for r in errs:
            print("  %s %s snap %s %s q=%s rep %s: %s" % (r["tool"], r["frame_size"],
                  r["snaplen"], r["mode"], r.get("quota_pct"), r["rep"], r["error"][:300]))
    print("\nNoise: loadavg before %s, after %s; steal %.2f%% of CPU time; wall %.0f s"
          % (" ".join("%.2f" % x for x in noise["loadavg_before"]),
             " ".join("%.2f" % x for x in noise["loadavg_after"]),
             noise["steal_pct"], noise["wall_s"]))
    print("Results: %s" % out_path)
