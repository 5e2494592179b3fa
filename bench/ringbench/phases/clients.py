"""Phase `clients`: the Rust, C and Python client read loops.
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from ..common import Aborted, socket_dir, BENCH_DIR, CAP_CPU, REPO_DIR, log


class ClientsPhase:
    """Mixin of Bench."""

    def phase_clients(self):
        """The client libraries' read loops side by side: the Rust client
        (crates/client/examples/drain.rs), the C library's callback loop
        (bench/clients/drain.c, ringcap_dispatch) and the Python iterator
        (bench/clients/drain.py), each as nobody through ringcapd. The
        session's ring is filled first (the client waits), then the client
        drains it, pinned to the capture CPU: packets/s."""
        rel = Path(self.args.ringcap).resolve().parent
        ringcapd, lib = rel / "ringcapd", rel / "libringcap.so"
        rust = rel / "examples" / "drain"
        missing = [str(x) for x in (ringcapd, lib, rust) if not x.exists()]
        if missing:
            log("clients: skipped: not built: %s (cargo build --release --workspace --examples)"
                % ", ".join(missing))
            return
        count = self.p.get("clients_count", 1000000)
        # A drain takes tens of milliseconds: a few rounds, the best kept.
        rounds = self.p.get("clients_rounds", 3)
        outdir = tempfile.mkdtemp(prefix="clients-", dir=self.work)
        os.chmod(outdir, 0o755)
        cexe = os.path.join(outdir, "drain")
        r = subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-I", str(REPO_DIR / "crates/capi/include"),
                            str(BENCH_DIR / "clients" / "drain.c"), "-o", cexe, "-L", str(rel),
                            "-Wl,-rpath," + str(rel), "-lringcap"], capture_output=True, text=True)
        kinds = [("rust", [str(rust)])]
        if r.returncode == 0:
            kinds.append(("c", [cexe]))
        else:
            log("clients: C side not built: %s" % r.stderr[-300:])
        kinds.append(("python", ["env", "PYTHONPATH=%s" % (REPO_DIR / "python"),
                                 "RINGCAP_LIB=%s" % lib, "PYTHONDONTWRITEBYTECODE=1",
                                 "/usr/bin/python3", str(BENCH_DIR / "clients" / "drain.py")]))
        sockdir = socket_dir()
        sock = os.path.join(sockdir, "ringcapd.sock")
        policy = os.path.join(outdir, "policy.toml")
        with open(policy, "w") as f:
            f.write('socket = "%s"\ndump_dir = "%s"\n[[grant]]\nusers = ["nobody"]\n'
                    'interfaces = ["%s"]\nring_size = "512M"\n'
                    % (sock, os.path.join(outdir, "dumps"), self.env["CAP_IF"]))
        log("== clients: %d packets (64 B, snap 96) drained from a full session ring by the "
            "Rust, C and Python clients as nobody" % count)
        daemon = self._spawn_group([[str(ringcapd), "--config", policy]],
                                   re.compile(r"listening on"))[0]
        try:
            for kind, argv in [k for k in kinds for _ in range(rounds)]:
                rec = dict(kind="clients", client=kind, packets=count, error=None)
                pr = None
                try:
                    pr = subprocess.Popen(
                        ["ip", "netns", "exec", self.env["CAP_NS"], "setpriv", "--reuid", "nobody",
                         "--regid", "nogroup", "--clear-groups", "--inh-caps=-all"] + argv
                        + [sock, self.env["CAP_IF"], str(count)],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True, start_new_session=True,
                        preexec_fn=lambda: os.sched_setaffinity(0, {CAP_CPU}))
                    self.children[pr.pid] = pr
                    line = pr.stdout.readline()
                    if line.strip() != "ready":
                        raise RuntimeError("not ready: %s%s" % (line, pr.stderr.read()[-300:]))
                    sent, _ = self.send(64, count)
                    self.wait_settled(quiet_s=1.2)
                    pr.stdin.write("go\n")
                    pr.stdin.flush()
                    out, err = pr.communicate(timeout=120)
                    m = re.search(r"drained (\d+) packets (\d+) bytes in ([\d.]+) s", out)
                    if not m:
                        raise RuntimeError("no result: %s %s" % (out[-200:], err[-300:]))
                    n, secs = int(m.group(1)), float(m.group(3))
                    # The loop is CPU-bound on its own core: packets/s of
                    # wall time is its cost.
                    rec.update(sent=sent, drained=n, seconds=secs,
                               pps=round(n / secs) if secs else None)
                except Aborted:
                    raise
                except Exception as e:
                    rec["error"] = str(e)[:600]
                finally:
                    if pr is not None:
                        if pr.poll() is None:
                            os.killpg(pr.pid, signal.SIGKILL)
                            pr.wait()
                        self.children.pop(pr.pid, None)
                self.emit(rec)
                log("  %-6s %s" % (kind, rec["error"] or "%d of %d packets in %.3f s = %.0f packets/s"
                                   % (rec["drained"], rec["sent"], rec["seconds"], rec["pps"])))
        finally:
            self._stop_group([daemon])
            shutil.rmtree(sockdir, ignore_errors=True)
            if not self.args.keep:
                shutil.rmtree(outdir, ignore_errors=True)
