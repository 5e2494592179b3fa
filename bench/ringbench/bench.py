"""The Bench: the testbed, the measurement and every phase in one object, and
the order the phases run in.
"""

import datetime
import os
import time
from pathlib import Path

from .common import CAP_CPU, GEN_CPU, kernel_version, loadavg, log, read_stat_cpu
from .measure import Measure
from .phases.capture import CapturePhases
from .phases.clients import ClientsPhase
from .phases.compress import CompressPhase
from .phases.daemon import DaemonPhase
from .phases.hooks import HooksPhase
from .phases.inject import InjectPhase
from .phases.offline import OfflinePhase
from .phases.privacy import PrivacyPhase
from .phases.retrieval import RetrievalPhase
from .phases.storage import StoragePhase
from .report import print_report
from .testbed import Testbed


class Bench(Testbed, Measure, CapturePhases, HooksPhase, OfflinePhase, PrivacyPhase,
            CompressPhase, InjectPhase, StoragePhase, DaemonPhase, ClientsPhase,
            RetrievalPhase):
    """One run: the phases in order, then the report."""

    def run(self):
        a = self.args
        self.run_id = datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + "-" + a.preset
        out_dir = Path(a.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out_path = str(out_dir / (self.run_id + ".jsonl"))

        tool_names = a.tools.split(",") if a.tools else self.p["tools"]
        tools, skipped = [], {}
        for n in tool_names:
            t = self.tools.get(n)
            if t is None:
                raise SystemExit("unknown tool %r (known: %s)" % (n, ", ".join(self.tools)))
            if t.available():
                tools.append(t)
            else:
                skipped[n] = t.why_unavailable()
        for n, why in skipped.items():
            log("skipping %s: %s" % (n, why))

        load0, st0, t0 = loadavg(), read_stat_cpu(), time.monotonic()
        self.emit(dict(kind="meta", preset=a.preset, kernel=kernel_version(),
                       cpus=os.cpu_count(), loadavg_before=load0,
                       tools=[t.name for t in tools], skipped=skipped,
                       gen_cpu=GEN_CPU, cap_cpu=CAP_CPU, testbed=self.name))
        self.setup()
        log("testbed %s: %s" % (self.name, " ".join("%s=%s" % kv for kv in self.env.items())))
        sizes = sorted({c[0] for c in (self.p["combos"] or [])} | set(self.p["sizes"]),
                       key=lambda s: (isinstance(s, str), s))
        if not a.skip_capture or not a.skip_quota:
            log("== core capacity (no capture running; interface rx_packets)")
            for s in sizes:
                rec = self.measure_capacity(s)
                log("  %5s B: sent %d detected %d in %.2f s = %.0f pps"
                    % (s, rec["sent"], rec["detected"], rec["seconds"], rec["pps"]))
        if not a.skip_capture:
            if self.p["idle_seconds"]:
                self.phase_idle(tools)
            self.phase_capture(tools)
        if not a.skip_quota:
            qnames = self.p["quota_tools"] or ([t.name for t in tools] + ["ringcap-B2"])
            if a.quota_tools:
                qnames = a.quota_tools.split(",")
            qtools = []
            for n in qnames:
                t = self.tools.get(n)
                if t is None:
                    raise SystemExit("unknown tool %r" % n)
                if t.available():
                    qtools.append(t)
                else:
                    log("quota: skipping %s: %s" % (n, t.why_unavailable()))
            self.phase_quota(qtools)
        if not a.skip_offline:
            self.phase_offline(tools)
        if not a.skip_privacy:
            self.phase_privacy()
        if not a.skip_compress:
            self.phase_compress()
        if not a.skip_inject:
            self.phase_inject()
        if not a.skip_hooks:
            self.phase_hooks()
        if not a.skip_storage:
            self.phase_storage()
        if not a.skip_daemon:
            self.phase_daemon()
        if not a.skip_clients:
            self.phase_clients()
        if not a.skip_retrieval:
            self.phase_retrieval()

        load1, st1 = loadavg(), read_stat_cpu()
        dt = st1["total"] - st0["total"]
        steal_pct = 100.0 * (st1["steal"] - st0["steal"]) / dt if dt else 0.0
        noise = dict(kind="noise", loadavg_before=load0, loadavg_after=load1,
                     steal_pct=round(steal_pct, 3),
                     wall_s=round(time.monotonic() - t0, 1))
        self.emit(noise)
        print_report(self.results, noise, self.out_path)
