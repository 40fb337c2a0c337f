"""``supervisorctl diagnose``: a vLLM log (+ optionally the kernel log) -> what happened and what to do.

The analysis is ``supervisor.core.vllm.diagnosis.diagnose`` (pure). ``read_kernel_log`` is the one host read
(``dmesg`` with a timeout, falling back to ``/dev/kmsg`` read non-blocking). ``run_diagnose`` is what
``supervisorctl diagnose`` calls: it returns (exit code, output text). Exit codes: 0 no problem found,
1 a failure was diagnosed, 2 an input could not be read.

Everything it prints passes the one secret rule (``core/spec/secrets.py``, mask ``<secret>``): the
secret shapes anywhere, plus every value known to be secret: those a line shows in a secret shape
(``--api-key K`` masks a later bare ``K`` too) and, for ``--container``, the container's own secret env
and flag values read from ``docker inspect`` (docs/security.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.host.system import GIB, read_kernel_log, read_meminfo
from supervisor.adapters.store.files import capped_lines
from supervisor.core.errors import HostError, SupervisorError
from supervisor.core.spec.inspect import spec_from_inspect
from supervisor.core.spec.secrets import Redactor, spec_secret_values, text_secret_values
from supervisor.core.vllm.diagnosis import FAILED_OUTCOMES, HOST_RESERVE_GIB, diagnose, fmt
from supervisor.core.vllm.gmu_advice import MemoryFacts


def _fmt_row(label: str, items: list[tuple[str, Any, str]]) -> str | None:
    parts = [f"{name} {fmt(val, unit)}" for name, val, unit in items if val is not None]
    return f"  {label}: " + ", ".join(parts) if parts else None


def render_text(report: dict[str, Any]) -> str:
    """A human-readable rendering of a ``diagnose`` report."""
    v = report["vllm"]
    out = [f"diagnosis: {report['diagnosis']}", ""]
    head = f"vLLM log: outcome {v['outcome']}"
    if v.get("cause"):
        head += f" (cause: {v['cause']})"
    out.append(head)
    rows = [
        _fmt_row("server", [("version", v.get("version"), ""), ("listen", v.get("listen_url"), "")]),
        _fmt_row("process", [("name", v.get("proc"), "")]),
        _fmt_row("load", [("shards", v.get("shards_done"), ""), ("of", v.get("shards_total"), ""),
                          ("weights", v.get("model_load_gib"), " GiB"), ("in", v.get("model_load_s"), " s")]),
        _fmt_row("kv pool", [("tokens", v.get("kv_tokens"), ""),
                             ("max_model_len", v.get("max_model_len"), ""),
                             ("concurrency", v.get("max_concurrency"), "x"),
                             ("available", v.get("available_kv_gib"), " GiB"),
                             ("gpu blocks", v.get("num_gpu_blocks") or v.get("gpu_blocks"), "")]),
        _fmt_row("timing", [("graph capture", v.get("graph_capture_s"), " s"),
                            ("engine init", v.get("init_engine_s"), " s")]),
        _fmt_row("memory", [("free", v.get("free_gib"), " GiB"), ("total", v.get("total_gib"), " GiB"),
                            ("gmu", v.get("util"), ""), ("requested", v.get("requested_gib"), " GiB"),
                            ("kv needed", v.get("needed_kv_gib"), " GiB"),
                            ("est. max_model_len", v.get("estimated_max_model_len"), "")]),
    ]  # fmt: skip
    out.extend(r for r in rows if r)
    events = report["kernel"]["events"]
    out.append("")
    if report["kernel"].get("error"):
        out.append(f"kernel log: not read ({report['kernel']['error']})")
    out.append(f"kernel log: {len(events)} relevant event(s)")
    for e in events[-20:]:
        out.append(f"  {e['kind']:<16} {e['line'][:160]}")
    return "\n".join(out) + "\n"


def _read_lines(path: str | os.PathLike[str]) -> list[str]:
    """Every line of a log file, each cut to LINE_MAX before any analyzer or masker sees it."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        return list(capped_lines(fh))


def container_input(ref: str, docker: DockerAdapter | None = None) -> tuple[list[str], frozenset[str]]:
    """``diagnose --container REF``: the container's whole log and the secret values of its spec
    (env and flags, read from ``docker inspect``; none when it cannot be read back). SupervisorError
    when the log cannot be read."""
    docker = docker or DockerAdapter()
    lines = list(docker.logs(ref, since=None, follow=False))
    try:
        known = spec_secret_values(spec_from_inspect(docker.inspect(ref), ()))
    except SupervisorError:
        known = frozenset()  # the shapes and the log's own secret values still mask
    return lines, known


def redactor_for(texts: Iterable[str], known: Iterable[str] = ()) -> Redactor:
    """The mask of diagnose's output: ``known`` plus every value ``texts`` show in a secret shape."""
    found = {v for text in texts for v in text_secret_values(text)}
    return Redactor(frozenset(found | set(known)))


def _host_memory(gmu: float | None) -> MemoryFacts | None:
    """This host's MemTotal and MemAvailable now (after the failure: about what the start had), the
    field's 15 GiB reserve and ``gmu`` (None: only vLLM's free-memory refusal, naming its gmu, is advised)."""
    try:
        info = read_meminfo()
    except HostError:
        return None
    total, avail = info.get("MemTotal"), info.get("MemAvailable")
    return MemoryFacts(total / GIB if total else None, avail / GIB if avail else None, HOST_RESERVE_GIB, gmu)


def run_diagnose(
    log_file: str | os.PathLike[str] | None,
    kernel_file: str | os.PathLike[str] | None,
    use_kernel: bool,
    as_json: bool,
    log_lines: list[str] | None = None,
    secrets: Iterable[str] = (),
    gmu: float | None = None,
) -> tuple[int, str]:
    """``supervisorctl diagnose``: (exit code, output); 0 fine, 1 failure found, 2 unreadable input.
    The output is masked with ``secrets`` and the secret values the lines show (:func:`redactor_for`)."""
    lines: list[str] = list(log_lines or [])
    try:
        if log_file is not None:
            lines = _read_lines(log_file)
        kernel: list[str] | None = _read_lines(kernel_file) if kernel_file is not None else None
    except OSError as exc:
        return 2, f"diagnose: cannot read {exc.filename}: {exc.strerror}\n"
    kernel_error = None
    if kernel is None and use_kernel:
        try:
            kernel = read_kernel_log()
        except HostError as exc:
            kernel_error = str(exc)
    report = diagnose(lines, kernel, memory=_host_memory(gmu))
    if kernel_error:
        report["kernel"]["error"] = kernel_error
    report = redactor_for([*lines, *(kernel or ())], secrets).data(report)
    bad = report["vllm"]["outcome"] in (*FAILED_OUTCOMES, "engine_dead") or bool(report["kernel"]["events"])
    text = json.dumps(report, indent=2, ensure_ascii=False) + "\n" if as_json else render_text(report)
    return (1 if bad else 0), text
