"""Which container a cgroup names when Docker runs inside a container (a nested machine): the innermost.

The lines are the shapes seen in bench/from_zero.sh's machine (cgroup v1, host cgroup namespace, the inner
engine on the cgroupfs driver): the hierarchies the inner engine manages name
``/docker/<outer>/docker/<inner>``, the unified ``0::`` line (not mounted in the machine) stays at
``/docker/<outer>``. Every case here would
name the outer container, or none, under a "last id named" rule; the single-path forgeries, which the
strict shapes alone already refuse, are in tests/test_kernlog.py.
"""

from __future__ import annotations

import pytest

from supervisor.core.host.attribution import container_id_in, docker_container_chain

OUTER = "93" * 32
INNER = "86" * 32
FORGED = "3f" * 32
V1 = ("name=systemd", "pids", "blkio", "freezer", "devices", "memory", "cpuset", "cpuacct", "cpu")


def _proc_cgroup(v1_path: str, unified_path: str) -> str:
    """``/proc/PID/cgroup`` of a hybrid host: nine v1 hierarchies at one path, the unified one last."""
    lines = [f"{9 - i}:{ctrl}:{v1_path}" for i, ctrl in enumerate(V1)]
    return "\n".join([*lines, f"0::{unified_path}"]) + "\n"


def test_an_inner_containers_process_is_the_inner_container_s() -> None:
    """As read in the nested machine (and on its host): v1 lines nested, the unified line the outer one."""
    text = _proc_cgroup(f"/docker/{OUTER}/docker/{INNER}", f"/docker/{OUTER}")
    assert container_id_in(text) == INNER


def test_one_hierarchy_nested_is_enough() -> None:
    """tests/harness.py's container_cgroup in the nested machine: only the pids hierarchy moves the process
    into ``docker/<id>``; every other line still names the machine's own container."""
    lines = _proc_cgroup(f"/docker/{OUTER}", f"/docker/{OUTER}").splitlines()
    lines[1] = f"8:pids:/docker/{OUTER}/docker/{INNER}"
    assert container_id_in("\n".join(lines)) == INNER


@pytest.mark.parametrize(
    "text",
    [
        f"0::/docker/{OUTER}/docker/{INNER}\n",  # cgroup v2, the host's cgroup namespace
        f"/docker/{OUTER}/docker/{INNER}",  # an OOM killer's task_memcg (printed from the root namespace)
        f"0::/system.slice/docker-{OUTER}.scope/docker/{INNER}\n",  # the outer engine on systemd
        f"4:memory:/system.slice/docker-{OUTER}.scope/system.slice/docker-{INNER}.scope\n0::/system.slice/docker-{OUTER}.scope\n",
        f"4:memory:/docker/{OUTER}/docker/{FORGED}/docker/{INNER}\n0::/docker/{OUTER}\n",  # three deep
    ],
)
def test_the_deepest_docker_shape_wins(text: str) -> None:
    assert container_id_in(text) == INNER


def test_nesting_under_a_configured_cgroup_parent() -> None:
    parents = ("/mine",)
    systemd_inside = f"4:memory:/mine/{OUTER}/mine/docker-{INNER}.scope\n0::/mine/{OUTER}\n"
    assert container_id_in(systemd_inside, parents) == INNER
    assert container_id_in(f"4:memory:/docker/{OUTER}/mine/{INNER}\n0::/docker/{OUTER}\n", parents) == INNER
    assert container_id_in(f"4:memory:/docker/{OUTER}/mine/{INNER}\n0::/docker/{OUTER}\n") == OUTER


@pytest.mark.parametrize(
    "forged",
    [
        f"/user.slice/user-1000.slice/docker/{OUTER}/docker/{FORGED}",  # a shape after a user's own prefix
        f"/docker/{OUTER}/session-3.scope/docker/{FORGED}",  # after a folder of no shape in the container
        f"/docker/{OUTER}/docker/{FORGED}/x",  # a folder of no shape at the end
        f"/docker/{OUTER}/docker-{FORGED}.scope",  # the systemd leaf without its slice
        f"/docker/{OUTER}/docker/{FORGED[:-1]}",  # 63 hex
    ],
)
def test_a_forged_deeper_path_names_nothing_and_does_not_outrank_a_real_one(forged: str) -> None:
    """A real nested line first, then a line that merely looks deeper: the real inner container stands."""
    assert docker_container_chain(forged) == ()
    text = f"9:name=systemd:/docker/{OUTER}/docker/{INNER}\n4:memory:{forged}\n0::/docker/{OUTER}\n"
    assert container_id_in(text) == INNER


def test_the_chain_lists_the_containers_outermost_first() -> None:
    assert docker_container_chain(f"/docker/{OUTER}/docker/{INNER}") == (OUTER, INNER)
    assert docker_container_chain(f"/system.slice/docker-{OUTER}.scope/docker/{INNER}") == (OUTER, INNER)
    assert docker_container_chain(f"/docker/{OUTER}") == (OUTER,)
    assert docker_container_chain("/") == ()
    assert docker_container_chain(f"docker/{OUTER}") == ()
