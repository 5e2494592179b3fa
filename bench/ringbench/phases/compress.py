"""Phase `compress`: header compression beside zstd and xz.
"""

import os
import re
import resource
import shutil
import subprocess
from pathlib import Path

from ..common import CAP_CPU, log
from ..pcapgen import (write_many_flow_pcap, write_new_flow_pcap, write_tcp_bulk_pcap,
                       write_udp_fragment_pcap)


class CompressPhase:
    """Mixin of Bench."""

    def phase_compress(self):
        """Header compression (issue 10), offline, one core: each trace cut to
        headers (-s headers, microseconds), then ringcap --format compressed
        beside zstd -19 and xz -9 of the same headers-only pcap, in bytes per
        packet (everything included), the round trip checked byte for byte,
        and ringcap's packets per CPU second (reading the pcap included)."""
        n = self.p["compress_packets"]
        rc = self.tools.get("ringcap")
        if not (rc and rc.available()):
            self.emit(dict(kind="note", phase="compress", note="ringcap not available"))
            return
        log("== compress: %d packets per trace, -s headers, microseconds" % n)
        traces = [("tcp-bulk", write_tcp_bulk_pcap), ("udp-fragments", write_udp_fragment_pcap),
                  ("many-flow", lambda path, n: write_many_flow_pcap(path, n, 2000)),
                  ("new-flow", write_new_flow_pcap)]
        one_core = lambda: os.sched_setaffinity(0, {CAP_CPU})
        for name, make in traces:
            raw = os.path.join(self.work, "compress-%s-raw.pcap" % name)
            hdr = os.path.join(self.work, "compress-%s.pcap" % name)
            rcz = os.path.join(self.work, "compress-%s.rcz" % name)
            back = os.path.join(self.work, "compress-%s-back.pcap" % name)
            make(raw, n)
            rec = dict(kind="compress", trace=name, packets=n)
            base = ["-s", "headers", "--tstamp-precision", "micro"]
            r = subprocess.run([rc.path, "capture", "-r", raw, "-w", hdr] + base,
                               capture_output=True, text=True, timeout=1800)
            if r.returncode != 0:
                rec["error"] = "exit %d: %s" % (r.returncode, r.stderr[-300:])
                self.emit(rec)
                continue
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            r = subprocess.run([rc.path, "capture", "-r", hdr, "--format", "compressed",
                                "-w", rcz] + base, capture_output=True, text=True,
                               timeout=1800, preexec_fn=one_core)
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
            r2 = subprocess.run([rc.path, "capture", "-r", rcz, "-w", back] + base,
                                capture_output=True, text=True, timeout=1800)
            if r.returncode != 0 or r2.returncode != 0:
                rec["error"] = "exit %d/%d: %s" % (r.returncode, r2.returncode,
                                                   (r.stderr + r2.stderr)[-300:])
                self.emit(rec)
                continue
            with open(hdr, "rb") as a, open(back, "rb") as b:
                rec["round_trip_identical"] = a.read() == b.read()
            rec["pcap_bpp"] = round(os.path.getsize(hdr) / n, 2)
            rec["ringcap_bpp"] = round(os.path.getsize(rcz) / n, 2)
            rec["ringcap_mpps_per_core"] = round(n / cpu / 1e6, 2) if cpu > 0 else None
            for tool, args in (("zstd", ["-19", "-c", "-T1"]), ("xz", ["-9", "-c", "-T1"])):
                if shutil.which(tool):
                    z = subprocess.run([tool] + args + [hdr], capture_output=True, timeout=1800)
                    if z.returncode == 0:
                        rec[tool + "_bpp"] = round(len(z.stdout) / n, 2)
            stats = Path(rc.path).resolve().parent / "examples" / "rcz-stats"
            if stats.exists():
                z = subprocess.run([str(stats), hdr], capture_output=True, text=True,
                                   timeout=1800, preexec_fn=one_core)
                m = re.search(r"encode_pps (\d+)", z.stdout)
                if m:
                    rec["encode_mpps"] = round(int(m.group(1)) / 1e6, 2)
            self.emit(rec)
            log("  %-14s pcap %.1f, ringcap %.2f, zstd -19 %s, xz -9 %s B/packet; round trip %s; "
                "%.2f Mpps per core (encode only %s)"
                % (name, rec["pcap_bpp"], rec["ringcap_bpp"], rec.get("zstd_bpp", "-"),
                   rec.get("xz_bpp", "-"), "identical" if rec["round_trip_identical"] else "DIFFERS",
                   rec["ringcap_mpps_per_core"] or 0, rec.get("encode_mpps", "-")))
            for f in (raw, hdr, rcz, back):
                if os.path.exists(f):
                    os.unlink(f)
