"""The demo: the real daemon supervising the vLLM simulator, healing it through a scripted sequence.

``python -m supervisor.demo`` (the README's demo command runs it after setting the machine up):
start -> ready -> the container is killed -> recovered -> the engine dies with exit code 0 ->
recovered -> repeated failures -> FATAL (circuit breaker) -> reset -> running -> a restart draws a
smaller KV pool (the KV-pool lottery alert). It prints
``supervisorctl status`` after every step, then stops the daemon and removes the container.
The profile and daemon config are the shipped ``profiles/sim-demo.yaml`` and
``profiles/demo.daemon.yaml``, copied into a fresh temporary directory (state, socket, key) with the
simulator's KV pool made controllable (``VSIM_KV_SEQUENCE_FILE``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from supervisor.adapters.control.client import ControlClient
from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.config import load_config
from supervisor.core.errors import ControlError, SupervisorError

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = ROOT / "profiles" / "demo.daemon.yaml"
STEP_TIMEOUT_S = 120.0
#: The simulator's KV pools (tokens): the field's small and big draw of one unchanged config.
KV_POOLS = "557599,1013816"


class DemoFailed(RuntimeError):
    """A step did not reach its expected state in time."""


class Demo:
    """Drives one daemon subprocess through the scripted sequence."""

    def __init__(self, config_path: Path, workdir: Path) -> None:
        self.config = load_config(config_path)
        self.config_path = config_path
        self.workdir = workdir
        self.socket = workdir / "control.sock"
        self.profile = self.config.profiles[0]
        self.name = self.profile.name
        self.docker = DockerAdapter()
        self.proc: subprocess.Popen[bytes] | None = None
        self.t0 = time.monotonic()

    # ---- helpers ----------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        print(f"\n[demo {time.monotonic() - self.t0:6.1f}s] {text}", flush=True)

    def ctl(self, *args: str) -> int:
        """Run the real supervisorctl and show its output."""
        cmd = [sys.executable, "-m", "supervisor.cli", "--socket", str(self.socket), *args]
        print("$ supervisorctl " + " ".join(args), flush=True)
        return subprocess.run(cmd, check=False, timeout=30).returncode

    def status(self) -> dict[str, Any]:
        reply = ControlClient(self.socket, timeout=10).call("status", name=self.name)
        if not reply.get("ok"):
            raise DemoFailed(f"status failed: {reply.get('error')}")
        profiles = reply["data"].get("profiles") or []
        if not profiles:  # an older daemon answered before its first publish: not an answer yet
            raise ControlError(f"the daemon lists no profile {self.name} yet")
        return dict(profiles[0])

    def wait(
        self, what: str, pred: Callable[[dict[str, Any]], bool], timeout: float = STEP_TIMEOUT_S
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise DemoFailed(f"the daemon exited with {self.proc.returncode}")
            try:
                st = self.status()
            except ControlError:
                time.sleep(0.2)
                continue
            line = f"{st['state']}" + (
                f" {st['load_progress']['pct']:.0f}%" if st["load_progress"].get("pct") else ""
            )
            if line != last:
                print(f"    ... {self.name}: {line}", flush=True)
                last = line
            if pred(st):
                return st
            time.sleep(0.2)
        raise DemoFailed(f"timed out waiting for {what}")

    def fault(self, kind: str) -> None:
        req = urllib.request.Request(
            self.profile.base_url + "/_sim/fault",
            data=json.dumps({"kind": kind}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError):
            urllib.request.urlopen(req, timeout=5).close()

    # ---- the sequence -----------------------------------------------------------------------------

    def start_daemon(self) -> None:
        log = (self.workdir / "daemon.log").open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "supervisor",
                "--config",
                str(self.config_path),
                "--state-dir",
                str(self.workdir / "state"),
                "--socket",
                str(self.socket),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def run(self) -> None:
        self.say(f"starting the daemon (config {self.config_path}, daemon log {self.workdir / 'daemon.log'})")
        self.start_daemon()
        st = self.wait("RUNNING", lambda s: s["state"] == "RUNNING")
        self.ctl("status")
        first = st["container_id"]

        kernel = self.kernel_lines()
        if not kernel:  # without the kernel line (not root) the container is killed from outside instead
            self.say(f"killing the model container with SIGKILL (docker kill {self.profile.container.name})")
            self.docker.kill(self.profile.container.name, "SIGKILL")
        st = self.wait("recovery", lambda s: s["state"] == "RUNNING" and s["container_id"] != first)
        self.ctl("status")
        if kernel:
            self.show_kernel_alerts()

        self.say("making the engine die (vLLM then exits with code 0 -- a failure all the same)")
        second = st["container_id"]
        self.fault("die")
        st = self.wait("recovery", lambda s: s["state"] == "RUNNING" and s["container_id"] != second)
        self.ctl("status")

        self.say("repeated failures: killing it again until the circuit breaker opens")
        for _ in range(5):  # bounded: the breaker limit is 3 in the demo config
            current = str(st["container_id"])
            self.docker.kill(self.profile.container.name, "SIGKILL")
            st = self.wait("recovery or FATAL", _recovered_or_fatal(current))
            if st["state"] == "FATAL":
                break
        if st["state"] != "FATAL":
            raise DemoFailed("the breaker did not open")
        rc = self.ctl("status")
        print(f"(supervisorctl status exit code {rc}: 3 means not everything is RUNNING)")

        self.say("an operator re-arms the breaker")
        self.ctl("reset", self.name)
        st = self.wait("RUNNING after reset", lambda s: s["state"] == "RUNNING")
        self.ctl("status")

        self.say("the KV-pool lottery: a restart with the same config draws a much smaller KV cache pool")
        (self.workdir / "kvseq" / "count").write_text("0\n", encoding="utf-8")  # next draw: 557,599 tokens
        current = st["container_id"]
        self.ctl("restart", self.name)
        self.wait("RUNNING again", lambda s: s["state"] == "RUNNING" and s["container_id"] != current)
        self.show_alert("KV pool lottery")
        self.ctl("events", self.name, "-n", "12")
        self.ctl("history", self.name)
        self.say(
            "demo finished: the server was healed three times, then held safely, then re-armed; "
            "the smaller KV pool of the last start was reported"
        )

    def show_alert(self, title: str) -> None:
        """Wait for an alert the daemon raised (``alert.raised`` in its history) and print it."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            reply = ControlClient(self.socket, timeout=10).call("events", name=self.name, n=50)
            for e in reply.get("data", {}).get("events", []) if reply.get("ok") else []:
                f = e.get("fields", {})
                if e.get("name") == "alert.raised" and f.get("title") == title:
                    print(f"[alert] {str(f.get('severity')).upper()}: {f.get('reason')}", flush=True)
                    return
            time.sleep(0.2)
        raise DemoFailed(f"no {title!r} alert")

    def kernel_lines(self) -> bool:
        """As root: write an NV_ERR_NO_MEMORY and an Xid line to the real kernel log (test lines; no GPU is
        involved) so the alerts show how a kernel event is named; True when written."""
        if os.geteuid() != 0:
            self.say(
                "(not root: skipping the kernel-log step; as root the demo writes test lines to /dev/kmsg)"
            )
            return False
        self.say(
            "writing two TEST lines to /dev/kmsg as the NVIDIA driver would (NV_ERR_NO_MEMORY, then Xid 31 "
            "naming the engine): the daemon follows the kernel log and kills the container at once (a host "
            "that runs out of unified memory wedges seconds later), the alert naming the kernel line"
        )
        lines = (
            "<3>NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
            "returned from _memdescAllocInternal(vsup demo) @ mem_desc.c:1353\n",
            f"<4>NVRM: Xid (PCI:0000:0a:00): 31, pid={os.getpid()}, name=VLLM::EngineCor, channel 0x2. "
            "MMU Fault (vsup demo)\n",
        )
        try:
            fd = os.open("/dev/kmsg", os.O_WRONLY)
        except OSError as exc:
            self.say(f"(cannot write /dev/kmsg: {exc.strerror}; skipping the kernel-log step)")
            return False
        try:
            for line in lines:
                os.write(fd, line.encode())
        finally:
            os.close(fd)
        self.wait_event("kernel.xid", lambda e: e["fields"].get("pid") == os.getpid())
        return True

    def wait_event(self, name: str, pred: Callable[[dict[str, Any]], bool], timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = ControlClient(self.socket, timeout=10).call("events", n=200)
            if any(e["name"] == name and pred(e) for e in reply.get("data", {}).get("events", [])):
                return
            time.sleep(0.2)
        raise DemoFailed(f"timed out waiting for the event {name}")

    def show_kernel_alerts(self) -> None:
        reply = ControlClient(self.socket, timeout=10).call("events", name=self.name, n=200)
        for e in reply.get("data", {}).get("events", []):
            f = e.get("fields", {})
            if e["name"] == "alert.raised" and (
                "kernel" in f.get("title", "") or "kernel:" in f.get("reason", "")
            ):
                print(f"    alert [{f.get('severity')}] {f.get('title')}: {f.get('reason')}", flush=True)

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        with contextlib.suppress(SupervisorError):
            self.docker.remove(self.profile.container.name, force=True)


def _recovered_or_fatal(previous: str) -> Callable[[dict[str, Any]], bool]:
    def pred(s: dict[str, Any]) -> bool:
        return bool(s["state"] == "FATAL" or (s["state"] == "RUNNING" and s["container_id"] != previous))

    return pred


def with_kv_lottery(config_path: Path, workdir: Path) -> Path:
    """A copy of the daemon config (in ``workdir``) whose first profile draws its KV pool from a counter
    the demo controls: the simulator takes ``KV_POOLS[count]`` (the last repeats) and counts the start."""
    doc = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    (workdir / "kvseq").mkdir()
    (workdir / "kvseq" / "count").write_text("1\n", encoding="utf-8")  # the usual draw: 1,013,816
    paths = []
    for i, entry in enumerate(doc.get("profiles") or []):
        src = config_path.parent / str(entry)
        prof = yaml.safe_load(src.read_text(encoding="utf-8"))
        if i == 0:
            c = prof["container"]
            c["env"] = {
                **(c.get("env") or {}),
                "VSIM_KV_TOKENS": KV_POOLS,
                "VSIM_KV_SEQUENCE_FILE": "/kvseq/count",
            }
            c["mounts"] = [*(c.get("mounts") or []), f"{workdir / 'kvseq'}:/kvseq"]
        dst = workdir / src.name
        dst.write_text(yaml.safe_dump(prof, sort_keys=False), encoding="utf-8")
        paths.append(str(dst))
    doc["profiles"] = paths
    out = workdir / config_path.name
    out.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m supervisor.demo", description=__doc__.splitlines()[0] if __doc__ else ""
    )
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    p.add_argument("--keep", action="store_true", help="keep the temporary state directory")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="vsup-demo-"))
    os.chmod(workdir, 0o700)
    demo = Demo(with_kv_lottery(args.config.resolve(), workdir), workdir)
    try:
        demo.run()
        return 0
    except (DemoFailed, SupervisorError) as exc:
        print(f"\n[demo] FAILED: {exc}", file=sys.stderr)
        log = workdir / "daemon.log"
        if log.exists():
            print("".join(log.read_text(errors="replace").splitlines(keepends=True)[-30:]), file=sys.stderr)
        return 1
    finally:
        demo.cleanup()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
