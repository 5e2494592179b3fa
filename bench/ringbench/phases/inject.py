"""Phase `inject`: send-time error of ringcap inject.
"""

import json
import os
import struct
import subprocess

from ..common import CAP_CPU, log
from ..pcapgen import udp_frame


class InjectPhase:
    """Mixin of Bench."""

    def phase_inject(self):
        """`ringcap inject` as root on the capture end: frames 1 ms apart,
        the send-time error (kernel transmit timestamp - requested time) per
        frame from its report: median, p99, max; missed frames."""
        rc = self.tools.get("ringcap")
        if not rc or not rc.available():
            return
        n = self.p.get("inject_frames", 1000)
        inp = os.path.join(self.work, "inject.pcap")
        frame = udp_frame(64, bytes([198, 18, 254, 1]), bytes([198, 18, 254, 2]), 0, 40000, 9,
                          b"I")
        with open(inp, "wb") as f:
            f.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
            for i in range(n):
                ts = 1700000000 * 1000000 + i * 1000
                f.write(struct.pack("<IIII", ts // 1000000, ts % 1000000, len(frame), len(frame)))
                f.write(frame)
        report = os.path.join(self.work, "inject.jsonl")
        log("== inject: %d frames at 1000/s with ringcap inject (root) on the capture end" % n)
        rec = dict(kind="inject", tool="ringcap inject", frames=n, rate_pps=1000, error=None)
        r = subprocess.run(["ip", "netns", "exec", self.env["CAP_NS"], "taskset", "-c",
                            str(CAP_CPU), rc.path, "inject", "-i", self.env["CAP_IF"], "-r", inp,
                            "--start", "+0.2", "--tolerance", "100", "--report", report],
                           capture_output=True, text=True, timeout=60 + n / 500)
        if not os.path.exists(report):
            rec["error"] = "exit %d: %s" % (r.returncode, r.stderr[-300:])
        else:
            with open(report) as f:
                reps = [json.loads(l) for l in f if l.strip()]
            errs = sorted(x["sent_ns"] - x["requested_ns"] for x in reps if x.get("sent_ns"))
            rec.update(reports=len(reps), sent=sum(1 for x in reps if x["status"] == "sent"),
                       missed=sum(1 for x in reps if x["status"] == "missed"),
                       early=sum(1 for e in errs if e < 0))
            if errs:
                rec.update(err_median_us=round(errs[len(errs) // 2] / 1000, 1),
                           err_p99_us=round(errs[len(errs) * 99 // 100] / 1000, 1),
                           err_max_us=round(errs[-1] / 1000, 1))
            os.unlink(report)
        os.unlink(inp)
        self.emit(rec)
        log("  %s" % (rec["error"] or "%d sent, %d missed; sent - requested: median %s us, p99 %s us, "
                       "max %s us" % (rec["sent"], rec["missed"], rec.get("err_median_us"),
                                      rec.get("err_p99_us"), rec.get("err_max_us"))))
