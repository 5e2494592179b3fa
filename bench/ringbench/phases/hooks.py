"""Phase `hooks`: packet, XDP and netfilter hooks side by side.
"""


from ..common import log


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
