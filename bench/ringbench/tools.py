"""The capture tools under test (ringcap and the anchors): how each is started,
how its own report is read, and independent counters of the records it wrote.
"""

import json
import mmap
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

from .common import CAP_CPU, frame_avg_size


# --------------------------------------------------------------------------
# independent record counters


def count_pcap(path):
    """Number of complete records in a pcap, pcapng or ringcap compressed
    file."""
    size = os.path.getsize(path)
    if size < 20:
        return 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        magic = mm[:4]
        if magic == b"\x89RCZ":
            # Blocks after a 20-byte header: "RCZB", payload length, records.
            off, n = 20, 0
            while off + 24 <= size and mm[off:off + 4] == b"RCZB":
                plen, recs = struct.unpack_from("<II", mm, off + 4)
                if off + 24 + plen > size:
                    break
                n += recs
                off += 24 + plen
            return n
        if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
            endian = "<"
        elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
            endian = ">"
        elif magic == b"\x0a\x0d\x0d\x0a":
            return _count_pcapng(mm, size)
        else:
            raise RuntimeError("%s: not a pcap/pcapng file" % path)
        unpack = struct.Struct(endian + "I").unpack_from
        off, n = 24, 0
        while off + 16 <= size:
            end = off + 16 + unpack(mm, off + 8)[0]
            if end > size:
                break
            n += 1
            off = end
        return n


def _count_pcapng(mm, size):
    off, n, endian = 0, 0, "<"
    while off + 12 <= size:
        btype_raw = mm[off:off + 4]
        if btype_raw == b"\x0a\x0d\x0d\x0a":
            endian = "<" if mm[off + 8:off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
        btype, blen = struct.unpack_from(endian + "II", mm, off)
        if blen < 12 or off + blen > size:
            break
        if btype in (2, 3, 6):
            n += 1
        off += blen
    return n


def count_stenotype(pkt_dir):
    """Packets in stenotype's packet files: raw TPACKET_V3 blocks of 1 MiB."""
    total = 0
    block = 1 << 20
    for p in sorted(Path(pkt_dir).iterdir()):
        if not p.is_file():
            continue
        size = p.stat().st_size
        with open(p, "rb") as f:
            for off in range(0, size - size % block, block):
                f.seek(off)
                hdr = f.read(16)
                version, _priv, _status, num = struct.unpack("<IIII", hdr)
                if version != 2:
                    break
                total += num
    return total


# --------------------------------------------------------------------------
# tools


class Tool:
    """One capture tool configuration.  argv() gets the run's parameters."""

    name = None
    binary = None
    ready_re = None
    snaplen_ok = True      # honours a snaplen
    count_mode_ok = True   # can write to /dev/null
    ring_mib = None
    stop_timeout = 30.0
    quiet_s = 1.2  # > libpcap's 1 s TPACKET_V3 block timeout (tcpdump -w)

    def eligible(self, frame_size, snaplen, mode):
        if mode == "count" and not self.count_mode_ok:
            return False
        # A tool without a snaplen option still qualifies when the frames are
        # no longer than the snaplen: its output is the same.
        return self.snaplen_ok or snaplen >= (1500 if frame_size == "imix" else frame_size)

    def ring_packets(self, frame_size, snaplen):
        """Rough number of packets the kernel ring holds (TPACKET_V3 ~80 B overhead)."""
        if not self.ring_mib:
            return 0
        per = 80 + min(snaplen, frame_avg_size(frame_size))
        return int(self.ring_mib * 1048576 / per)

    def available(self):
        return shutil.which(self.binary) is not None

    def why_unavailable(self):
        return "%s not installed" % self.binary

    def argv(self, iface, snaplen, mode, outdir):
        """Returns (argv, stdout_path_or_None)."""
        raise NotImplementedError

    def parse(self, text, outdir):
        """Tool's own report -> dict(dropped=, tool_count=, ring_mib=)."""
        return {}

    def written(self, outdir, mode, parsed):
        if mode == "count":
            return parsed.get("tool_count"), "tool"
        files = [p for p in Path(outdir).iterdir() if p.name.startswith("out")]
        return sum(count_pcap(p) for p in files), "file"


def _int(m, g=1):
    return int(m.group(g)) if m else None


class Tcpdump(Tool):
    binary = "tcpdump"
    ready_re = re.compile(r"listening on")

    def __init__(self, buffer_kib=None):
        self.buffer_kib = buffer_kib
        self.name = "tcpdump" if buffer_kib is None else "tcpdump-B"
        # libpcap's default buffer is 2 MiB; with TPACKET_V3 the ring is the buffer.
        self.ring_mib = 2 if buffer_kib is None else buffer_kib / 1024

    def argv(self, iface, snaplen, mode, outdir):
        out = "/dev/null" if mode == "count" else os.path.join(outdir, "out.pcap")
        a = ["tcpdump", "-i", iface, "-n", "-s", str(snaplen), "-w", out]
        if self.buffer_kib:
            a[1:1] = ["-B", str(self.buffer_kib)]
        return a, None

    def parse(self, text, outdir):
        return dict(
            dropped=_int(re.search(r"(\d+) packets? dropped by kernel", text)),
            tool_count=_int(re.search(r"(\d+) packets? captured", text)),
            tool_received=_int(re.search(r"(\d+) packets? received by filter", text)),
        )


class Dumpcap(Tool):
    name = "dumpcap"
    binary = "dumpcap"
    ready_re = re.compile(r"Capturing on")
    ring_mib = 2  # dumpcap -B default

    def argv(self, iface, snaplen, mode, outdir):
        out = "/dev/null" if mode == "count" else os.path.join(outdir, "out.pcap")
        return ["dumpcap", "-i", iface, "-s", str(snaplen), "-P", "-q", "-w", out], None

    def parse(self, text, outdir):
        m = re.search(r"Packets received/dropped on interface '[^']*': (\d+)/(\d+)", text)
        return dict(
            dropped=_int(m, 2), tool_received=_int(m, 1),
            tool_count=_int(re.search(r"Packets captured: (\d+)", text)),
        )


class Netsniff(Tool):
    name = "netsniff-ng"
    binary = "netsniff-ng"
    ready_re = re.compile(r"Running!")
    snaplen_ok = False  # netsniff-ng 0.6 has no snaplen option
    RING = 64  # MiB; its default sizes the ring from the link speed (2.4 GiB on veth)
    ring_mib = RING

    def argv(self, iface, snaplen, mode, outdir):
        out = "/dev/null" if mode == "count" else os.path.join(outdir, "out.pcap")
        # stdbuf: its "Running!" line goes to stdout, block-buffered on a pipe.
        return ["stdbuf", "-oL", "netsniff-ng", "--in", iface, "--out", out,
                "--silent", "--no-sock-mem", "--notouch-irq", "--bind-cpu", str(CAP_CPU),
                "--ring-size", "%dMiB" % self.RING, "--verbose"], None

    def parse(self, text, outdir):
        m = re.search(r"RX,V\d: ([\d.]+) MiB", text)
        return dict(
            dropped=_int(re.search(r"(\d+)\s+packets failed filter \(out of space\)", text)),
            tool_count=_int(re.search(r"(\d+)\s+packets passed filter", text)),
            tool_received=_int(re.search(r"(\d+)\s+packets incoming", text)),
            ring_mib=float(m.group(1)) if m else None,
        )


class Stenotype(Tool):
    name = "stenotype"
    binary = "stenotype"
    ready_re = re.compile(r"starting to process packets")
    snaplen_ok = False
    count_mode_ok = False
    # 1 MiB ring blocks, as many as ringcap's default ring at the same snap
    # length when it writes in place (the bench's default command): 256 MiB,
    # 1 GiB above 512, plus the 256 MiB of the writer buffer it then does
    # not use: like with like. Its default (2048) takes seconds to set up,
    # before the measured window.
    BLOCKS = 256
    WRITER_MIB = 256
    ring_mib = BLOCKS + WRITER_MIB
    stop_timeout = 4.0  # stenotype 1.0.1 can hang in io_getevents on SIGINT
    quiet_s = 2.2       # --blockage_sec=1: partial blocks reach the disk within ~1 s

    def argv(self, iface, snaplen, mode, outdir):
        for d in ("PKT0", "IDX0"):
            os.makedirs(os.path.join(outdir, d), exist_ok=True)
        self.ring_mib = self.BLOCKS * (4 if snaplen > 512 else 1) + self.WRITER_MIB
        return ["stenotype", "-v", "--dir=" + outdir, "--iface=" + iface, "--threads=1",
                "--seccomp=none", "--uid=root", "--gid=root", "--no_watchdogs",
                "--no_index", "--blocks=%d" % self.ring_mib, "--aiops=32",
                "--blockage_sec=1", "--stats_sec=0"], None

    def parse(self, text, outdir):
        # periodic stats line (every 100 blocks): cumulative, so a lower bound
        drops = re.findall(r"Thread \d+ stats: .*?\bdrops=(\d+)", text)
        return dict(dropped=int(drops[-1]) if drops else None)

    def written(self, outdir, mode, parsed):
        return count_stenotype(os.path.join(outdir, "PKT0")), "file"


class StenotypeIndexed(Stenotype):
    """stenotype as it runs by default: indexing what it writes (ringcap's
    default indexes too; `stenotype` above is the `--no_index` line)."""
    name = "stenotype-index"

    def argv(self, iface, snaplen, mode, outdir):
        argv, env = Stenotype.argv(self, iface, snaplen, mode, outdir)
        return [a for a in argv if a != "--no_index"], env


class Ringcap(Tool):
    ready_re = re.compile(r"^capturing on ", re.M)
    quiet_s = 0.5  # drains its ring and writer on SIGINT

    def __init__(self, path, threads=1, buffer_mib=None, hook=None, zero_copy=None,
                 index=True):
        self.path = str(path)
        # False: --no-index (the retrieval phase compares capture CPU with
        # and without the index built for each published file).
        self.index = index
        self.binary = self.path
        self.threads = threads
        self.buffer_mib = buffer_mib
        self.hook = hook
        # None: the default command, `-w DIR/` with no format option (a
        # directory gets pcapng, written from the ring blocks in place where
        # it can be; issue 30). "off"/"on": `-w out.pcapng --format pcapng`
        # through the copy path ("ringcap-ng") or in place ("ringcap-zc",
        # issue 15).
        self.zero_copy = zero_copy
        self.name = "ringcap"
        if hook:
            self.name += "-" + hook
        if zero_copy:
            self.name += "-zc" if zero_copy == "on" else "-ng"
        if threads != 1:
            self.name += "-t%d" % threads
        if buffer_mib:
            self.name += "-B%d" % buffer_mib
        if not index:
            self.name += "-noindex"
        self.ring_mib = buffer_mib or 256  # updated from its "capturing on" line
        self._why = None
        self._checked = None

    def available(self):
        if self._checked is None:
            self._checked = self._available()
        return self._checked

    def _available(self):
        p = Path(self.path)
        if not (p.is_file() and os.access(p, os.X_OK)):
            self._why = "%s not built (cargo build --release -p ringcap)" % self.path
            return False
        try:
            r = subprocess.run([self.path, "capture", "--help"], capture_output=True,
                               text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as e:
            self._why = "ringcap capture --help failed: %s" % e
            return False
        if r.returncode != 0:
            self._why = "ringcap capture --help exited %d" % r.returncode
            return False
        return True

    def why_unavailable(self):
        return self._why or "unavailable"

    def argv(self, iface, snaplen, mode, outdir):
        a = [self.path, "capture", "-i", iface, "-s", str(snaplen),
             "--stats-json", os.path.join(outdir, "stats.json")]
        if self.threads != 1:
            a += ["--threads", str(self.threads)]
        if self.buffer_mib:
            a += ["-B", f"{self.buffer_mib}M"]
        if self.hook:
            a += ["--hook", self.hook]
        if not self.index:
            a += ["--no-index"]
        ext = "pcapng"
        if self.zero_copy:
            a += ["--format", "pcapng"]
        if mode == "count":
            # pcap stream on stdout into /dev/null (it refuses -w /dev/null);
            # ring blocks are written in place only to files.
            return a + ["-w", "-"], "/dev/null"
        if self.zero_copy:
            a += ["--zero-copy", self.zero_copy]
            return a + ["-w", os.path.join(outdir, "out." + ext)], None
        return a + ["-w", os.path.join(outdir, "out") + "/"], None

    def written(self, outdir, mode, parsed):
        if mode == "count":
            return parsed.get("tool_count"), "tool"
        files = []
        for p in Path(outdir).iterdir():
            if not p.name.startswith("out"):
                continue
            if p.is_dir():
                # The files of `-w DIR/`, not their hidden indexes.
                files += [q for q in p.iterdir() if not q.name.startswith(".")]
            else:
                files.append(p)
        return sum(count_pcap(p) for p in files), "file"

    def parse(self, text, outdir):
        res = {}
        m = re.search(r"ring (\d+(?:\.\d+)?) MiB", text)
        if m:
            res["ring_mib"] = float(m.group(1))
        drop_ring = _int(re.search(r"^\s*dropped in the ring\s+(\d+)", text, re.M))
        drop_writer = _int(re.search(r"^\s*dropped by the writer\s+(\d+)", text, re.M))
        if drop_ring is not None or drop_writer is not None:
            res["dropped"] = (drop_ring or 0) + (drop_writer or 0)
        written = _int(re.search(r"^\s*written\s+(\d+)", text, re.M))
        if written is not None:
            res["tool_count"] = written
        try:
            with open(os.path.join(outdir, "stats.json")) as f:
                lines = [l for l in f.read().splitlines() if l.strip()]
            last = json.loads(lines[-1]) if lines else {}
            if last.get("final"):
                res["dropped"] = (last.get("packets_dropped_ring", 0)
                                  + last.get("packets_dropped_writer", 0))
                res["tool_count"] = last.get("packets_written")
                res["stats_final"] = True
                # Who dropped where, and how full each buffer got.
                res["dropped_ring"] = last.get("packets_dropped_ring", 0)
                res["dropped_writer"] = last.get("packets_dropped_writer", 0)
                for k in ("ring_blocks_high_water", "ring_blocks",
                          "writer_buffer_high_water_bytes", "writer_buffer_bytes"):
                    if k in last:
                        res[k] = last[k]
        except (OSError, ValueError, IndexError):
            pass
        return res


def make_tools(ringcap_path):
    tools = [Tcpdump(), Tcpdump(buffer_kib=262144), Dumpcap(), Netsniff(), Stenotype(),
             StenotypeIndexed(), Ringcap(ringcap_path), Ringcap(ringcap_path, threads=2),
             Ringcap(ringcap_path, buffer_mib=2),
             Ringcap(ringcap_path, hook="xdp"), Ringcap(ringcap_path, hook="netfilter"),
             Ringcap(ringcap_path, zero_copy="off"), Ringcap(ringcap_path, zero_copy="on"),
             Ringcap(ringcap_path, index=False)]
    return {t.name: t for t in tools}
