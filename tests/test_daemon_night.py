"""The morning after, on real parts: a real daemon in a mount namespace whose boot id is a file the test
controls, a real NV_ERR_NO_MEMORY line on /dev/kmsg, a SIGKILL of the daemon and its container (the hard
reboot), then a daemon with another boot id: its first message at a real local webhook tells the story
from the flight recorder, and ``history`` ends the run ``wedged`` (counted in the breaker)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_harness import ROOT, DaemonProc
from tests.harness import WebhookReceiver, wait_for
from tests.kmsg_probe import NOMEM, kmsg_writable, write_kmsg
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BOOT_ID = "/proc/sys/kernel/random/boot_id"


class BootDaemon(DaemonProc):
    """A daemon whose /proc/sys/kernel/random/boot_id is ``boot_file`` (a private mount namespace)."""

    def __init__(self, config: Path, workdir: Path, boot_file: Path) -> None:
        super().__init__(config, workdir)
        self.boot_file = boot_file

    def start(self, wait: bool = True, extra_env: dict[str, str] | None = None) -> None:
        log = self.log_path.open("ab")
        env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
        script = f'mount --bind "{self.boot_file}" {BOOT_ID} && exec "$0" "$@"'
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
        self.proc = subprocess.Popen(
            [*cmd, sys.executable, "-m", "supervisor", "--config", str(self.config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
        )
        log.close()
        if wait:
            wait_for(self._answers, 20, message=f"daemon socket {self.socket}")


def _can_unshare(tmp: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = tmp / "probe_boot_id"
    probe.write_text("probe\n")
    script = f'mount --bind "{probe}" {BOOT_ID} && cat {BOOT_ID}'
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, timeout=10, check=False)
    return done.stdout.strip() == b"probe"


def _alerts(webhook: WebhookReceiver) -> list[dict[str, Any]]:
    return [r.json() for r in webhook.received() if r.path.startswith("/alert/")]


@pytest.mark.kmsg  # a memory-error line in the shared kernel log: every daemon's diagnosis reads it
def test_after_a_hard_reboot_the_first_message_tells_the_story(
    world: World, webhook: WebhookReceiver
) -> None:
    """Serving, NV_ERR_NO_MEMORY logged (policy warn: the server lives on), then daemon and container
    SIGKILLed and a new boot id: the daemon.crashed message names the profile and its state, the last
    memory figures and the kernel line; the run ends 'wedged' in history and in the breaker."""
    if not kmsg_writable() or not _can_unshare(world.tmp):
        pytest.skip("needs root: /dev/kmsg writes and a mount namespace (unshare -m)")
    token = f"vsup_night_{uuid.uuid4().hex}"
    boot = world.tmp / "boot_id"
    boot.write_text(f"{uuid.uuid4()}\n")
    world.profile()
    from tests.daemon_harness import write_daemon_config, write_profile

    paths = [write_profile(world.tmp, s, world.res.test_id) for s in world.specs.values()]
    alerts = {"channels": [{"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert/x"}]}
    config = write_daemon_config(world.tmp, paths, extra={"alerts": alerts})
    first = BootDaemon(config, world.tmp, boot)
    world.daemons.append(first)
    first.start()
    first.wait_state("p", "RUNNING", 60)
    wait_for(
        lambda: [e for e in first.events(n=500) if e["name"] == "kernel_log.following"], 30, message="kmsg"
    )
    write_kmsg(NOMEM.format(token=token))
    wait_for(
        lambda: [e for e in first.events(n=2000) if token in str(e["fields"].get("line", ""))],
        10,
        message="kernel event",
    )
    flight = world.tmp / "state" / "flight"

    def recorded() -> bool:  # the kernel line is on disk (the recorder fsyncs at most every 2 s)
        data = b"".join(p.read_bytes() for p in flight.glob("flight.*.jsonl"))
        return token.encode() in data

    wait_for(recorded, 10, message="kernel line in the flight recorder")
    first.kill9()  # the host froze: no clean stop ...
    world.container().kill()  # ... and the reboot took the container down
    boot.write_text(f"{uuid.uuid4()}\n")  # another boot
    second = BootDaemon(config, world.tmp, boot)
    world.daemons.append(second)
    second.start()
    crashed = wait_for(
        lambda: [a for a in _alerts(webhook) if "did not stop cleanly" in a.get("reason", "")],
        30,
        message="daemon.crashed message",
    )[0]
    reason = crashed["reason"]
    print("morning-after message:", reason)
    assert crashed["severity"] == "critical"
    assert reason.startswith("the host went down at about ")
    assert "(rebooted, back " in reason
    assert "while p was RUNNING" in reason
    assert "MemAvailable " in reason
    assert " GiB" in reason
    assert "kernel: NV_ERR_NO_MEMORY at " in reason
    assert token in reason
    assert "the daemon could not act" in reason  # policy warn: no kill
    wedged = wait_for(
        lambda: [
            r for r in second.call("history", name="p", n=20)["data"]["starts"] if r["outcome"] == "wedged"
        ],
        30,
        message="wedged ledger row",
    )
    assert wedged
    st = second.wait_state("p", "RUNNING", 90)  # started over after the reboot
    assert st["breaker"]["emergencies"] >= 1
