"""Phase `storage`: the disk (dd, fio) and ringcap's sink writer alone.
"""

import json
import os
import re
import shutil
import subprocess

from ..common import CAP_CPU, log


class StoragePhase:
    """Mixin of Bench."""

    def phase_storage(self):
        mb = self.args.storage_mb or self.p["storage_mb"]
        f = os.path.join(self.work, "dd.bin")
        log("== storage: O_DIRECT sequential write, %d MiB to %s" % (mb, self.work))
        r = subprocess.run(["dd", "if=/dev/zero", "of=" + f, "bs=1M", "count=%d" % mb,
                            "oflag=direct", "conv=fsync"], capture_output=True, text=True)
        rec = dict(kind="storage", tool="dd-odirect", mib=mb)
        m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", r.stderr)
        if r.returncode == 0 and m:
            b, s = int(m.group(1)), float(m.group(2))
            rec.update(bytes=b, seconds=s, mb_per_s=round(b / 1e6 / s, 1))
            log("  dd O_DIRECT: %.0f MB/s" % rec["mb_per_s"])
        else:
            rec["error"] = r.stderr.strip()[-300:]
        self.emit(rec)
        if os.path.exists(f):
            os.unlink(f)
        self.storage_fio(mb)
        rc = self.tools.get("ringcap")
        if not (rc and rc.available()):
            return
        h = subprocess.run([rc.path, "bench-sink", "--help"], capture_output=True, text=True)
        if h.returncode != 0:
            log("  ringcap bench-sink: not available (skipped)")
            self.emit(dict(kind="note", phase="storage", note="ringcap bench-sink not available"))
            return
        for size in (64, 1500):
            for wmode in ("direct", "uring", "buffered"):
                npk = max(1000, int(mb * 1048576 / (size + 16)))
                f = os.path.join(self.work, "sink.pcap")
                rec = dict(kind="storage", tool="ringcap bench-sink", size=size,
                           write_mode=wmode, packets=npk)
                r = subprocess.run([rc.path, "bench-sink", "-w", f, "--packets", str(npk),
                                    "--size", str(size), "--write-mode", wmode],
                                   capture_output=True, text=True, timeout=900,
                                   preexec_fn=lambda: os.sched_setaffinity(0, {CAP_CPU}))
                try:
                    rec.update(json.loads(r.stdout.strip().splitlines()[-1]))
                except (ValueError, IndexError):
                    rec["error"] = "exit %d: %s" % (r.returncode, (r.stdout + r.stderr)[-300:])
                self.emit(rec)
                log("  bench-sink %4d B %-8s %s" % (size, wmode, rec.get("error") or
                    "%.0f MB/s, %.0f ns/pkt CPU" % (rec.get("mb_per_s", 0),
                                                    rec.get("cpu_ns_per_pkt", 0))))
                if os.path.exists(f):
                    os.unlink(f)

    def storage_fio(self, mb):
        """The disk's sustained O_DIRECT sequential write rate: fio, 1 MiB
        writes through io_uring, one in flight (what a synchronous writer
        gets) and 16 (the device's limit), fsync at the end."""
        if not shutil.which("fio"):
            log("  fio: not installed (skipped)")
            self.emit(dict(kind="note", phase="storage", note="fio not installed"))
            return
        f = os.path.join(self.work, "fio.bin")
        for depth in (1, 16):
            rec = dict(kind="storage", tool="fio", mib=mb, iodepth=depth)
            r = subprocess.run(["fio", "--name=seqwrite", "--filename=" + f, "--rw=write",
                                "--bs=1M", "--size=%dM" % mb, "--direct=1",
                                "--ioengine=io_uring", "--iodepth=%d" % depth, "--end_fsync=1",
                                "--output-format=json"], capture_output=True, text=True,
                               timeout=900)
            try:
                w = json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]["write"]
                rec.update(bytes=w["io_bytes"], seconds=round(w["runtime"] / 1e3, 3),
                           mb_per_s=round(w["bw_bytes"] / 1e6, 1))
                log("  fio O_DIRECT 1 MiB x %2d in flight: %.0f MB/s" % (depth, rec["mb_per_s"]))
            except (ValueError, KeyError, IndexError):
                rec["error"] = "exit %d: %s" % (r.returncode, (r.stdout + r.stderr)[-300:])
            self.emit(rec)
            if os.path.exists(f):
                os.unlink(f)
