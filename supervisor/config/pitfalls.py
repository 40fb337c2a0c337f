"""Settings that are valid but known to hurt a 7x24 vLLM server (docs/field-notes.md, docs/vllm-facts.md):
``check-config`` prints each as a warning and the daemon logs it at start; none stops a start.

- a bind source under /tmp or /var/tmp: /tmp is emptied at every boot (and a daemon run with
  ``PrivateTmp=yes`` sees an empty one), so a start after a reboot stops in PREFLIGHT ("does not exist");
- no ``shm_size`` and no ``ipc_mode: host``: Docker's default /dev/shm is 64 MB, and vLLM's engine fails to
  start (or fails under load) without more;
- no ``log_config``: the json-file log of a container that runs for months grows without bound.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from supervisor.config.model import Profile

#: Emptied at boot (tmpfiles.d), or private to a unit with PrivateTmp=yes.
PRIVATE_TMP_DIRS = (PurePosixPath("/tmp"), PurePosixPath("/var/tmp"))  # noqa: S108 - paths we warn about


def profile_pitfalls(profile: Profile) -> list[tuple[str, str]]:
    """(key path, warning) for each pitfall of ``profile``."""
    c = profile.container
    out: list[tuple[str, str]] = []
    for i, m in enumerate(c.mounts):
        if m.type != "bind":
            continue
        src = PurePosixPath(m.source)
        if any(src == d or d in src.parents for d in PRIVATE_TMP_DIRS):
            out.append(
                (
                    f"container.mounts[{i}]",
                    f"bind source {m.source} is under /tmp: emptied at every boot (and PrivateTmp=yes hides "
                    "it from a daemon): a start after a reboot stops with 'does not exist'; move it, e.g. "
                    "to /etc/vllm-supervisor/profiles/NAME.files/ (supervisorctl init does)",
                )
            )
    if c.shm_size is None and c.ipc_mode != "host":
        out.append(
            (
                "container.shm_size",
                "neither shm_size nor ipc_mode: host: Docker's default /dev/shm is 64 MB, too small for vLLM "
                "(set shm_size, e.g. 16g, or ipc_mode: host)",
            )
        )
    if c.log_config is None:
        out.append(
            (
                "container.log_config",
                "no log_config: the container's json-file log grows for as long as it runs "
                "(set e.g. {type: json-file, config: {max-size: 100m, max-file: '5'}})",
            )
        )
    return out
