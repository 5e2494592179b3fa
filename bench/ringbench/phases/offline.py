"""Phase `offline`: reading, filtering and writing a pcap file.
"""

import os
import resource
import shutil
import subprocess
import time

from ..common import CAP_CPU, OFFLINE_FILTER, log
from ..pcapgen import write_offline_pcap
from ..tools import count_pcap


class OfflinePhase:
    """Mixin of Bench."""

    def phase_offline(self, tools_avail):
        mb = self.args.offline_mb or self.p["offline_mb"]
        inp = os.path.join(self.work, "offline-in.pcap")
        t0 = time.monotonic()
        npkts = write_offline_pcap(inp, mb * 1000 * 1000)
        gen_s = time.monotonic() - t0
        size = os.path.getsize(inp)
        log("== offline: %s packets, %.0f MB input (written in %.1f s), filter '%s'"
            % (npkts, size / 1e6, gen_s, OFFLINE_FILTER))
        cmds = []
        if shutil.which("tcpdump"):
            cmds.append(("tcpdump", lambda o: ["tcpdump", "-r", inp, "-w", o, OFFLINE_FILTER]))
        rc = self.tools.get("ringcap")
        if rc and rc.available():
            cmds.append(("ringcap", lambda o: [rc.path, "capture", "-r", inp, "-w", o,
                                               OFFLINE_FILTER]))
        if shutil.which("editcap"):
            cmds.append(("editcap (copy, no filter)", lambda o: ["editcap", "-F", "pcap", inp, o]))
        for name, mk in cmds:
            out = os.path.join(self.work, "offline-out.pcap")
            if os.path.exists(out):
                os.unlink(out)
            rec = dict(kind="offline", tool=name, input_bytes=size, input_packets=npkts,
                       filter=None if name.startswith("editcap") else OFFLINE_FILTER)
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.monotonic()
            r = subprocess.run(mk(out), capture_output=True, text=True, timeout=1800,
                               preexec_fn=lambda: os.sched_setaffinity(0, {CAP_CPU}))
            secs = time.monotonic() - t0
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if r.returncode != 0:
                rec["error"] = ("exit %d: %s" % (r.returncode, r.stderr[-300:]))
            else:
                written = count_pcap(out)
                cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
                rec.update(seconds=round(secs, 3), cpu_s=round(cpu, 3), written=written,
                           mb_per_s=round(size / 1e6 / secs, 1),
                           pps=round(npkts / secs, 1),
                           cpu_ns_per_pkt=round(cpu * 1e9 / npkts, 1))
            self.emit(rec)
            log("  %-26s %s" % (name, rec.get("error") or "%.2f s, %.0f MB/s, %.0f kpps, "
                                "%d written" % (rec["seconds"], rec["mb_per_s"],
                                                rec["pps"] / 1000, rec["written"])))
            if os.path.exists(out):
                os.unlink(out)
        os.unlink(inp)
