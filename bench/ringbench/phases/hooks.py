"""Phase `hooks`: packet, XDP and netfilter hooks side by side, then the
filtered comparison of issue 30: a filter keeping 10 % of 64 B frames with
the packet hook, XDP with the filter in the program, XDP --monitor, and no
capture at all.
"""

import os
import time

from ..common import log
from ..tools import Ringcap

# trafgen's destination ports run 1024..9215 (dinc, testbed.trafgen_cfg):
# these 819 of 8192 are 10.0 % of the frames.
FILTER_10PCT = "udp dst portrange 1024-1842"


def expected_matches(count):
    return (count // 8192) * 819 + min(count % 8192, 819)


class FilteredRingcap(Ringcap):
    """ringcap with a capture filter (and --monitor for XDP)."""

    def __init__(self, path, hook, monitor=False, expr=FILTER_10PCT):
        super().__init__(path, hook=hook)
        self.monitor = monitor
        self.expr = expr
        self.name = "ringcap-%s%s-f10" % (hook, "-monitor" if monitor else "")

    def argv(self, iface, snaplen, mode, outdir):
        a, stdout = super().argv(iface, snaplen, mode, outdir)
        if self.monitor:
            a.append("--monitor")
        return a + [self.expr], stdout


class HooksPhase:
    """Mixin of Bench."""

    def phase_hooks(self):
        """The three capture hooks side by side on the same traffic (snaplen
        64, to disk): the packet hook (AF_PACKET), XDP and netfilter
        pre-routing (BPF ring buffer). Each at the generator's top rate
        (unpaced: its achievable rate is the kernel's cost on the sender's
        CPU, where veth runs the receive path and the hook) and paced at
        hooks_rate (veth's 256-entry NAPI ring overflows before XDP on
        unpaced bursts, uncounted: loss there is the generator's, see
        iface_dropped)."""
        names = ["ringcap", "ringcap-xdp", "ringcap-netfilter"]
        tools = [self.tools[n] for n in names if self.tools[n].available()]
        if not tools:
            return
        count = self.args.count or self.p.get("hooks_count", 5000)
        reps = self.args.reps or self.p.get("hooks_reps", 1)
        if not os.environ.get("RINGBENCH_HOOKS_FILTER_ONLY"):
            self._hooks_all(tools, count, reps)
        self._hooks_filtered(tools[0].path, count, reps)

    def _hooks_all(self, tools, count, reps):
        for size in self.p.get("hooks_sizes", [64]):
            for rate in (None, self.p.get("hooks_rate", 20000)):
                log("== hooks: %s B, %s, %d packets, snaplen 64, to disk"
                    % (size, "unpaced" if rate is None else "paced %d pps" % rate, count))
                for rep in range(reps):
                    for t in tools:
                        r = self.measure(t, size, 64, "disk", count, rep=rep, rate_pps=rate,
                                         extra=dict(kind="hooks", hook=t.hook or "packet",
                                                    rate_pps=rate))
                        log("  %-18s sent %s written %s lost %s%% cpu %s ns/pkt gen %s pps%s"
                            % (t.name, r["sent"], r["written"], r["lost_pct"],
                               r["cpu_ns_per_pkt"],
                               round(r["sent"] / r["traffic_s"]) if r.get("traffic_s") else "-",
                               " ERROR " + r["error"] if r["error"] else ""))

    def _hooks_filtered(self, path, count, reps):
        """64 B frames unpaced, a filter keeping 10 %, snaplen 64, to disk:
        the generator's rate (the sender CPU's cost of the receive path,
        where veth runs it) and the capture's CPU for the packet hook, XDP
        with the filter in the program, XDP --monitor (every frame dropped
        at the driver after the copy), and the generator alone. Rows have
        kind "hooks-filter"; cpu ns/pkt is per packet *sent* (the capture
        handles only the 10 % kept, but pays for the rest in the kernel)."""
        tools = [FilteredRingcap(path, "packet"), FilteredRingcap(path, "xdp"),
                 FilteredRingcap(path, "xdp", monitor=True)]
        want = expected_matches(count)
        log("== hooks with a filter keeping 10 %% (%s): 64 B, unpaced, %d packets (%d match), "
            "snaplen 64, to disk" % (FILTER_10PCT, count, want))
        for rep in range(reps):
            t0 = time.monotonic()
            sent, secs = self.send(64, count, None)
            rec = dict(kind="hooks-filter", tool="none", hook="none", rep=rep, frame_size=64,
                       sent=sent, traffic_s=round(secs, 4), error=None,
                       gen_pps=round(sent / secs) if secs else None,
                       window_s=round(time.monotonic() - t0, 3))
            self.emit(rec)
            log("  %-26s sent %s gen %s pps" % ("no capture", sent, rec["gen_pps"]))
            self.wait_settled(None, quiet_s=0.5, max_s=5.0)
            for t in tools:
                r = self.measure(t, 64, 64, "disk", count, rep=rep,
                                 extra=dict(kind="hooks-filter", hook=t.name[8:],
                                            expected=want))
                gen = round(r["sent"] / r["traffic_s"]) if r.get("traffic_s") else None
                cpu = (round(r["cpu_s"] * 1e9 / r["sent"], 1)
                       if r.get("cpu_s") is not None and r.get("sent") else None)
                log("  %-26s sent %s written %s (want %d) cpu %s ns/sent pkt "
                    "(%s ns/written) gen %s pps%s"
                    % (t.name, r["sent"], r["written"], want, cpu, r["cpu_ns_per_pkt"], gen,
                       " ERROR " + r["error"] if r["error"] else ""))
