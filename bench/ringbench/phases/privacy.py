"""Phase `privacy`: Crypto-PAn, ringcap beside traceanon.
"""

import os
import resource
import shutil
import subprocess
import time

from ..common import CAP_CPU, log
from ..pcapgen import compare_ipv4_addresses, write_many_flow_pcap
from ..tools import count_pcap


class PrivacyPhase:
    """Mixin of Bench."""

    def phase_privacy(self):
        """Crypto-PAn over a many-flow trace, offline, one core: ringcap's
        transform beside libtrace's traceanon on the same file and key; the
        anonymized addresses of the two must agree (two implementations)."""
        n, flows = self.p["privacy_packets"], self.p["privacy_flows"]
        inp = os.path.join(self.work, "privacy-in.pcap")
        write_many_flow_pcap(inp, n, flows)
        key = os.path.join(self.work, "privacy.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        # No zero bytes: traceanon 4.0 reads its key file as a C string, so
        # a key with a zero byte early in it (about 1 run in 9 with random
        # bytes) is a different key there and no address agrees (seen in
        # CI; a key with a zero at byte 5: 0 of 2000 equal, without: 2000).
        os.write(fd, bytes(b % 255 + 1 for b in os.urandom(32)))
        os.close(fd)
        log("== privacy: %d packets over %d flows (%d addresses), Crypto-PAn"
            % (n, flows, 2 * flows))
        rc = self.tools.get("ringcap")
        cmds = []
        if rc and rc.available():
            base = [rc.path, "capture", "-r", inp, "--tstamp-precision", "micro"]
            cmds.append(("ringcap (copy)", lambda o: base + ["-w", o]))
            cmds.append(("ringcap --anonymize", lambda o: base + ["-w", o, "--anonymize", key]))
            cmds.append(("ringcap --anonymize --mask", lambda o: base + [
                "-w", o, "--anonymize", key, "--mask", "ip.ttl,ip.id,udp.port"]))
        if shutil.which("traceanon"):
            cmds.append(("traceanon -s -d", lambda o: [
                "traceanon", "-s", "-d", "-f", key, "pcapfile:" + inp, "pcapfile:" + o]))
        outs = {}
        for name, mk in cmds:
            out = os.path.join(self.work, "privacy-%d.pcap" % len(outs))
            rec = dict(kind="privacy", tool=name, packets=n, flows=flows)
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.monotonic()
            r = subprocess.run(mk(out), capture_output=True, text=True, timeout=1800,
                               preexec_fn=lambda: os.sched_setaffinity(0, {CAP_CPU}))
            secs = time.monotonic() - t0
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if r.returncode != 0:
                rec["error"] = "exit %d: %s" % (r.returncode, r.stderr[-300:])
            else:
                cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
                rec.update(seconds=round(secs, 3), cpu_s=round(cpu, 3),
                           written=count_pcap(out),
                           mpps_per_core=round(n / cpu / 1e6, 2) if cpu > 0 else None,
                           cpu_ns_per_pkt=round(cpu * 1e9 / n, 1))
                outs[name] = out
            self.emit(rec)
            log("  %-28s %s" % (name, rec.get("error") or "%.2f s, %.2f Mpps per CPU second"
                                % (rec["seconds"], rec["mpps_per_core"] or 0)))
        a, t = outs.get("ringcap --anonymize"), outs.get("traceanon -s -d")
        if a and t:
            same, total = compare_ipv4_addresses(a, t)
            rec = dict(kind="privacy-agree", tool="ringcap vs traceanon", packets=total,
                       same_addresses=same)
            self.emit(rec)
            log("  addresses equal in ringcap's and traceanon's output: %d of %d packets"
                % (same, total))
        for o in list(outs.values()) + [inp, key]:
            if os.path.exists(o):
                os.unlink(o)
