"""Capture packets through ringcapd as an unprivileged user.

A thin ctypes binding over libringcap.so (the C client of ringcapd, see
include/ringcap.h): no compiler and no build step, so ``pip install`` works on
any machine that has the library. Packets come out of the session's shared
memory ring in batches (one library call copies thousands of packets into a
buffer); iterating a session turns them into :class:`Packet` objects.

    import ringcap
    with ringcap.Session("eth0", filter="udp", snaplen=96) as s:
        for p in s:                       # until the session ends
            print(p.timestamp_ns, p.wire_len, len(p.data))

``p.data`` is ``bytes``: scapy (``Ether(p.data)``) and dpkt
(``dpkt.ethernet.Ethernet(p.data)``) take it as it is.

The library is found through ``$RINGCAP_LIB`` (a path to libringcap.so), else
the dynamic linker's search path (``scripts/install-capi`` installs it in
/usr/local/lib).
"""

import ctypes
import ctypes.util
import os
import struct

__all__ = ["Session", "Packet", "InjectReport", "RingcapError", "RefusedError", "library"]
__version__ = "0.1.0"

ERRBUF = 1024
# One batch: up to this many packets or this many bytes (a whole packet of the
# largest snap length always fits).
BATCH_PACKETS = 65536
BATCH_BYTES = 8 << 20

OK = 0
ERR_ARG = -1
ERR_IO = -2
ERR_REFUSED = -3
ERR_DAEMON = -4
ERR_PROTOCOL = -5
ERR_ENDED = -6
ERR_INTERNAL = -7
ERR_TOO_SMALL = -8
ERR_BUSY = -9

FORMAT_PCAP = 0
FORMAT_PCAPNG = 1

# ringcap_inject_report.status
INJECT_STATUS = {0: "sent", 1: "missed", 2: "refused", 3: "failed"}
REASON_SIZE = 128
# Frames per ringcap_inject call (the library splits them for the daemon).
INJECT_BATCH = 1024


class RingcapError(Exception):
    """A libringcap call failed: ``code`` is its RINGCAP_ERR_* value."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class RefusedError(RingcapError):
    """The daemon's policy refused the request."""


class _Options(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("snaplen", ctypes.c_uint32),
        ("headers_only", ctypes.c_uint32),
        ("sample_packets", ctypes.c_uint32),
        ("sample_flows", ctypes.c_uint32),
        ("format", ctypes.c_uint32),
        ("count", ctypes.c_uint64),
        ("duration_s", ctypes.c_double),
        ("socket_path", ctypes.c_char_p),
        ("interfaces", ctypes.c_char_p),
        ("filter", ctypes.c_char_p),
        ("dump", ctypes.c_uint32),
        ("inject_only", ctypes.c_uint32),
        ("rotate_seconds", ctypes.c_uint64),
        ("rotate_packets", ctypes.c_uint64),
        ("rotate_bytes", ctypes.c_uint64),
        ("compress", ctypes.c_uint32),
    ]


_STATS_FIELDS = (
    "seen_by_interface",
    "filter_accepted",
    "sampled_out",
    "rate_limited",
    "dropped_ring",
    "dropped_client",
    "delivered",
    "bytes_delivered",
)


class _Stats(ctypes.Structure):
    _fields_ = [(f, ctypes.c_uint64) for f in _STATS_FIELDS]

    def as_dict(self):
        return {f: getattr(self, f) for f in _STATS_FIELDS}


class _InjectFrame(ctypes.Structure):
    _fields_ = [
        ("tag", ctypes.c_uint64),
        ("at_ns", ctypes.c_uint64),
        ("tolerance_ns", ctypes.c_uint64),
        ("data", ctypes.c_char_p),
        ("len", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class _InjectReport(ctypes.Structure):
    _fields_ = [
        ("tag", ctypes.c_uint64),
        ("requested_ns", ctypes.c_uint64),
        ("sent_ns", ctypes.c_uint64),
        ("status", ctypes.c_int32),
        ("reserved", ctypes.c_uint32),
        ("reason", ctypes.c_char * REASON_SIZE),
    ]


class InjectReport:
    """What became of one injected frame: ``tag`` (yours), ``requested_ns``,
    ``sent_ns`` (the kernel's transmit timestamp; None if it did not leave),
    ``status`` ("sent", "missed", "refused" or "failed") and ``reason``
    (why not sent; "" if sent)."""

    __slots__ = ("tag", "requested_ns", "sent_ns", "status", "reason")

    def __init__(self, tag, requested_ns, sent_ns, status, reason):
        self.tag = tag
        self.requested_ns = requested_ns
        self.sent_ns = sent_ns
        self.status = status
        self.reason = reason

    def __repr__(self):
        return (
            f"InjectReport(tag={self.tag}, requested_ns={self.requested_ns}, "
            f"sent_ns={self.sent_ns}, status={self.status!r}, reason={self.reason!r})"
        )


# struct ringcap_pkthdr { uint64_t ts_ns; uint32_t caplen; uint32_t wire_len; }
_PKTHDR = struct.Struct("=QII")
assert _PKTHDR.size == 16

_lib = None


def library():
    """The loaded libringcap (a ctypes.CDLL), loading it on first use."""
    global _lib
    if _lib is not None:
        return _lib
    path = os.environ.get("RINGCAP_LIB") or ctypes.util.find_library("ringcap") or "libringcap.so"
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise RingcapError(
            ERR_IO,
            f"cannot load libringcap ({path}): {e}; install it with scripts/install-capi "
            "or set RINGCAP_LIB",
        ) from None
    p, i, sz, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
    sig = {
        "ringcap_options_init_sized": (None, [ctypes.POINTER(_Options), sz]),
        "ringcap_open": (i, [ctypes.POINTER(_Options), ctypes.POINTER(p), cp, sz]),
        "ringcap_close": (i, [p, ctypes.POINTER(_Stats), cp, sz]),
        "ringcap_stop": (i, [p, ctypes.POINTER(_Stats), cp, sz]),
        "ringcap_get_stats": (i, [p, ctypes.POINTER(_Stats), cp, sz]),
        "ringcap_setfilter": (i, [p, cp, cp, sz]),
        "ringcap_checkpoint": (i, [p, cp, sz]),
        "ringcap_flush": (i, [p, cp, sz]),
        "ringcap_wait": (i, [p, i, cp, sz]),
        "ringcap_ended": (i, [p, cp, sz, cp, sz]),
        "ringcap_read_batch": (i, [p, p, sz, p, sz, cp, sz]),
        "ringcap_next_batch": (i, [p, i, p, sz, p, sz, cp, sz]),
        "ringcap_describe": (i, [p, cp, sz]),
        "ringcap_next_dump": (i, [p, cp, sz, cp, sz]),
        "ringcap_inject": (i, [p, ctypes.POINTER(_InjectFrame), sz, cp, sz]),
        "ringcap_inject_reports": (i, [p, ctypes.POINTER(_InjectReport), sz, cp, sz]),
        "ringcap_version": (cp, []),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    _lib = lib
    return lib


def _text(v, what):
    if v is None:
        return None
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    raise TypeError(f"{what}: str expected, got {type(v).__name__}")


class Packet:
    """One packet: ``timestamp_ns`` (since the epoch), ``wire_len`` (length
    on the wire) and ``data`` (the bytes your grant lets you have)."""

    __slots__ = ("timestamp_ns", "wire_len", "data")

    def __init__(self, timestamp_ns, wire_len, data):
        self.timestamp_ns = timestamp_ns
        self.wire_len = wire_len
        self.data = data

    def __repr__(self):
        return f"Packet(timestamp_ns={self.timestamp_ns}, wire_len={self.wire_len}, data=<{len(self.data)} bytes>)"

    def __eq__(self, other):
        if not isinstance(other, Packet):
            return NotImplemented
        return (self.timestamp_ns, self.wire_len, self.data) == (
            other.timestamp_ns,
            other.wire_len,
            other.data,
        )


class Session:
    """A capture session on ringcapd (pktd: wire_init ... wire_done).

    ``interface``: a name or a list of names. ``filter``: tcpdump syntax (the
    daemon ANDs it with your grant's). ``snaplen``: bytes to keep (None:
    whole packets); ``headers=True`` keeps exactly the protocol headers (at
    most ``snaplen``). ``sample_packets``/``sample_flows``: keep 1 in N.
    ``count``/``duration``: end the session after that many packets/seconds.
    ``dump=True``: the daemon writes dump files (``rotate_*``) instead of
    delivering packets. ``inject_only=True``: a session that only sends
    (``inject``), capturing nothing. ``compress=True``: the daemon hands
    the stream over compressed (per-flow header compression, a few bytes a
    packet in the shared ring instead of whole records); the library decodes
    it, so the packets are the same (``describe()`` then says "compressed
    stream"; ignored in dump mode). ``socket``: the daemon's socket
    (default ``$RINGCAP_DAEMON``, else /run/ringcapd/ringcapd.sock).
    """

    def __init__(
        self,
        interface,
        filter="",
        snaplen=None,
        headers=False,
        sample_packets=0,
        sample_flows=0,
        count=0,
        duration=0.0,
        socket=None,
        dump=False,
        format="pcap",
        rotate_seconds=0,
        rotate_packets=0,
        rotate_bytes=0,
        inject_only=False,
        compress=False,
    ):
        lib = library()
        if not isinstance(interface, (str, bytes)):
            interface = ",".join(interface)
        o = _Options()
        lib.ringcap_options_init_sized(ctypes.byref(o), ctypes.sizeof(o))
        self._keep = [_text(interface, "interface"), _text(filter, "filter"), _text(socket, "socket")]
        o.interfaces, o.filter, o.socket_path = self._keep
        o.snaplen = snaplen or 0
        o.headers_only = 1 if headers else 0
        o.sample_packets = sample_packets
        o.sample_flows = sample_flows
        o.count = count
        o.duration_s = float(duration)
        o.dump = 1 if dump else 0
        o.inject_only = 1 if inject_only else 0
        o.compress = 1 if compress else 0
        o.format = {"pcap": FORMAT_PCAP, "pcapng": FORMAT_PCAPNG}[format]
        o.rotate_seconds, o.rotate_packets, o.rotate_bytes = rotate_seconds, rotate_packets, rotate_bytes
        self._lib = lib
        self._err = ctypes.create_string_buffer(ERRBUF)
        self._s = ctypes.c_void_p()
        self._check(lib.ringcap_open(ctypes.byref(o), ctypes.byref(self._s), self._err, ERRBUF))
        self._hdrs = ctypes.create_string_buffer(BATCH_PACKETS * _PKTHDR.size)
        self._buf = ctypes.create_string_buffer(BATCH_BYTES)
        self._hdrview = memoryview(self._hdrs).cast("B")
        self._bufview = memoryview(self._buf).cast("B")
        self._final = None

    # -- plumbing ---------------------------------------------------------

    def _check(self, rc):
        if rc >= 0:
            return rc
        msg = self._err.value.decode(errors="replace")
        cls = RefusedError if rc == ERR_REFUSED else RingcapError
        raise cls(rc, msg)

    def _handle(self):
        if not self._s:
            raise RingcapError(ERR_ARG, "the session is closed")
        return self._s

    # -- the calls ----------------------------------------------------------

    def describe(self):
        """The settings the daemon applied, in words."""
        buf = ctypes.create_string_buffer(2048)
        self._lib.ringcap_describe(self._handle(), buf, len(buf))
        return buf.value.decode(errors="replace")

    def stats(self):
        """The session's counters, a dict (pktd: wire_stats)."""
        st = _Stats()
        self._check(self._lib.ringcap_get_stats(self._handle(), ctypes.byref(st), self._err, ERRBUF))
        return st.as_dict()

    def setfilter(self, filter):
        """Replace your filter; the grant's is still ANDed (pktd: wire_setfilter)."""
        self._check(self._lib.ringcap_setfilter(self._handle(), _text(filter, "filter"), self._err, ERRBUF))

    def checkpoint(self):
        """Dump mode: start a new dump file now (pktd: wire_checkpoint)."""
        self._check(self._lib.ringcap_checkpoint(self._handle(), self._err, ERRBUF))

    def flush(self):
        """Ask the daemon to push out what it holds (pktd: wire_flush)."""
        self._check(self._lib.ringcap_flush(self._handle(), self._err, ERRBUF))

    def wait(self, timeout=0.1):
        """Wait up to ``timeout`` seconds for packets (pktd: wire_activity);
        True if packets may be ready or the session may have ended."""
        ms = max(0, int(timeout * 1000))
        return self._check(self._lib.ringcap_wait(self._handle(), ms, self._err, ERRBUF)) == 1

    def ended(self):
        """Why the session ended, or None while it runs."""
        why = ctypes.create_string_buffer(512)
        if self._check(self._lib.ringcap_ended(self._handle(), why, len(why), self._err, ERRBUF)):
            return why.value.decode(errors="replace")
        return None

    def next_dump(self):
        """Dump mode: the name of the next completed dump file, or None."""
        name = ctypes.create_string_buffer(512)
        if self._check(self._lib.ringcap_next_dump(self._handle(), name, len(name), self._err, ERRBUF)):
            return name.value.decode()
        return None

    def inject(self, frames, tolerance_ns=1_000_000):
        """Queue frames to send at their times (pktd: wire_inject), under your
        grant's [grant.inject] rules. ``frames``: an iterable of ``bytes``
        (send now) or ``(data, at_ns)`` / ``(data, at_ns, tag)`` tuples, where
        ``at_ns`` is CLOCK_REALTIME nanoseconds (``time.time_ns()``; 0: now)
        and ``tag`` defaults to the frame's index in ``frames``. A frame later
        than ``tolerance_ns`` is reported missed, not sent. Every frame gets
        exactly one report (``inject_reports``). Returns the tags."""
        tags = []
        items = []
        for i, f in enumerate(frames):
            if isinstance(f, (bytes, bytearray, memoryview)):
                data, at_ns, tag = bytes(f), 0, i
            else:
                data, at_ns, tag = bytes(f[0]), int(f[1]), int(f[2]) if len(f) > 2 else i
            items.append((data, at_ns, tag))
            tags.append(tag)
        for start in range(0, len(items), INJECT_BATCH):
            chunk = items[start : start + INJECT_BATCH]
            arr = (_InjectFrame * len(chunk))()
            for k, (data, at_ns, tag) in enumerate(chunk):
                arr[k].tag, arr[k].at_ns, arr[k].tolerance_ns = tag, at_ns, tolerance_ns
                arr[k].data, arr[k].len = data, len(data)
            self._check(self._lib.ringcap_inject(self._handle(), arr, len(chunk), self._err, ERRBUF))
        return tags

    def inject_reports(self):
        """The transmit reports ready now (a list of :class:`InjectReport`,
        oldest first; empty if none yet: poll every few milliseconds)."""
        out = []
        arr = (_InjectReport * 256)()
        while True:
            n = self._check(self._lib.ringcap_inject_reports(self._handle(), arr, 256, self._err, ERRBUF))
            for r in arr[:n]:
                out.append(
                    InjectReport(
                        r.tag,
                        r.requested_ns,
                        r.sent_ns or None,
                        INJECT_STATUS.get(r.status, "failed"),
                        r.reason.decode(errors="replace"),
                    )
                )
            if n < 256:
                return out

    def _batch(self, wait_ms=None):
        """Copies the packets there now into the session's arrays and
        returns how many; with ``wait_ms``, waits that long when none are
        there, and returns None once the session is over and everything was
        read (the library's session loop decides)."""
        args = (self._hdrs, BATCH_PACKETS, self._buf, BATCH_BYTES, self._err, ERRBUF)
        if wait_ms is None:
            return self._check(self._lib.ringcap_read_batch(self._handle(), *args))
        rc = self._lib.ringcap_next_batch(self._handle(), wait_ms, *args)
        return None if rc == ERR_ENDED else self._check(rc)

    def read(self):
        """The packets there now, as a list (without waiting)."""
        return list(self._unpack(self._batch()))

    def _unpack(self, n):
        if not n:
            return
        off = 0
        buf = self._bufview
        # One copy of the batch's bytes, then one slice per packet.
        hdrs = list(_PKTHDR.iter_unpack(self._hdrview[: n * 16]))
        total = sum(h[1] for h in hdrs)
        data = buf[:total].tobytes()
        for ts, cap, wl in hdrs:
            end = off + cap
            yield Packet(ts, wl, data[off:end])
            off = end

    def packets(self, idle_timeout=None):
        """Yields packets until the session ends (and every packet delivered
        before the end was read), or, with ``idle_timeout`` seconds, until
        none came for that long."""
        idle = 0.0
        step = 0.1 if idle_timeout is None else min(0.1, idle_timeout)
        while True:
            n = self._batch(max(1, int(step * 1000)))
            if n is None:
                return
            if n:
                idle = 0.0
                yield from self._unpack(n)
                continue
            idle += step
            if idle_timeout is not None and idle >= idle_timeout:
                return

    def __iter__(self):
        return self.packets()

    def stop(self):
        """End the session and wait until the daemon has; returns the final
        counters. Packets delivered before the end can still be iterated."""
        if self._final is None:
            st = _Stats()
            self._check(self._lib.ringcap_stop(self._handle(), ctypes.byref(st), self._err, ERRBUF))
            self._final = st.as_dict()
        return self._final

    def close(self):
        """End the session (if it runs) and free it; returns the final
        counters (pktd: wire_done). Unread packets are discarded."""
        if not self._s:
            return self._final
        st = _Stats()
        s, self._s = self._s, ctypes.c_void_p()
        rc = self._lib.ringcap_close(s, ctypes.byref(st), self._err, ERRBUF)
        self._check(rc)
        self._final = st.as_dict()
        return self._final

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            if self._s:
                self._lib.ringcap_close(self._s, None, None, 0)
        except Exception:
            pass
