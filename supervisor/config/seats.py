"""Checks across the profiles of one daemon config: seats and host ports.

Profiles of one ``seat`` share a port and a GPU and never run at once (the daemon stops one before it
starts another), so at most one of them may start on its own (``autostart``). Profiles of different
seats (or of none) run side by side, so they must not publish the same host port (or, with the host's
network, listen on the same ``--port``): the second would fail to start every time.
"""

from __future__ import annotations

from collections.abc import Sequence

from supervisor.config.model import Profile
from supervisor.config.reader import Ctx
from supervisor.core.vllm import cmdline

_ANY_ADDRESS = ("", "0.0.0.0", "::")  # noqa: S104 - the wildcard addresses Docker binds


def host_ports(profile: Profile) -> set[tuple[str, str, int]]:
    """(host address, protocol, port) the profile's container takes on the host ("" = every address)."""
    spec = profile.container
    if spec.network_mode == "host":
        return {("", "tcp", cmdline.port(cmdline.argv_of(spec)))}
    return {
        ("" if p.host_ip in _ANY_ADDRESS else p.host_ip, p.protocol, p.host_port)
        for p in spec.ports
        if p.host_port != 0
    }


def _clash(a: tuple[str, str, int], b: tuple[str, str, int]) -> bool:
    same = a[1:] == b[1:]
    return same and (a[0] == b[0] or "" in (a[0], b[0]))


def check_seats(ctx: Ctx, key_path: str, profiles: Sequence[Profile]) -> None:
    """Report two autostart profiles on one seat, and one host port taken by two profiles of different
    seats; each problem names both profile files."""
    autostart: dict[str, Profile] = {}
    for p in profiles:
        if p.seat is None or not p.autostart:
            continue
        first = autostart.setdefault(p.seat, p)
        if first is not p:
            ctx.add(
                key_path,
                f"two autostart profiles on seat {p.seat!r}: {first.source} and {p.source} "
                "(only one of a seat may start on its own: set autostart: false on the others)",
            )
    taken: list[tuple[tuple[str, str, int], Profile]] = []
    for p in profiles:
        for port in sorted(host_ports(p)):
            for other_port, other in taken:
                if other is p or not _clash(port, other_port):
                    continue
                if p.seat is not None and p.seat == other.seat:
                    continue  # one seat: never up at once
                ctx.add(
                    key_path,
                    f"two profiles take host port {port[2]}/{port[1]}: {other.source} and {p.source} "
                    "(they would run at once: put them on one seat, or change a port)",
                )
            taken.append((port, p))
