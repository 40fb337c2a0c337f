"""``bench.compare``'s tables, its per-row JSON files, and the table of rows run one by one.

A real-vLLM row takes minutes per tool and the shared real server may be held ~10 min at a time, so rows
are run one by one (``--only real,ROW``) with ``--save bench/results``: each row becomes one file
``SECTION-ROW.json`` (the row's per-trial figures, the commit it ran on, the load averages around it).
``python -m bench.compare_render bench/results/*.json`` prints the combined markdown tables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _cell(value: float | None, unit: str | None) -> str:
    if unit == "false restarts":
        return "-" if value is None else f"{value:.0f} false"
    if unit in ("false kills", "loads", "loads lost"):  # counts (bench/compare_field.py); "-": not run on it
        return "-" if value is None else f"{value:.0f}"
    return "never" if value is None else f"{value:.1f} s"


def table(section: dict[str, Any], names: tuple[str, ...]) -> str:
    """Markdown table: one row per fault, one column per tool (median, or never), skipped rows marked."""
    units = section.get("units", {})
    head = "| fault | " + " | ".join(f"`{n}`" for n in names) + " |"
    lines = [head, "|---" * (len(names) + 1) + "|"]
    for fault, cells in section["faults"].items():
        runs = section["trials"].get(fault, {})
        row = []
        for n in names:
            done = runs.get(n, [])
            k = sum(1 for x in done if x is not None)
            txt = "error" if runs and not done else _cell(cells.get(n), units.get(fault))
            row.append(txt if not done else f"{txt} ({k}/{len(done)})")
        unit = f" ({units[fault]})" if fault in units else ""
        lines.append(f"| `{fault}`{unit} | " + " | ".join(row) + " |")
    for fault in section.get("skipped", {}):
        lines.append(f"| `{fault}` | " + " | ".join("skipped" for _ in names) + " |")
    return "\n".join(lines)


def commit() -> str:
    """The checkout's commit (``+dirty`` when the tree has changes)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _rows(section: dict[str, Any]) -> dict[str, dict[str, Any]]:
    keys = ("faults", "trials", "units")
    out: dict[str, dict[str, Any]] = {}
    for fault in section.get("faults", {}):
        out[fault] = {k: {fault: section.get(k, {})[fault]} for k in keys if fault in section.get(k, {})}
        out[fault]["details"] = {fault: section.get("details", {}).get(fault)}
    for fault, why in section.get("skipped", {}).items():
        out[fault] = {"skipped": {fault: why}}
    return out


def save_rows(result: dict[str, Any], directory: Path, loads: tuple[float, ...], ran_on: str) -> list[Path]:
    """One JSON file per (section, row) of ``result`` under ``directory``; the paths written.

    ``ran_on``: :func:`commit` when the run began (the code it imported, whatever was committed since).
    """
    directory.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": result["date"],
        "command": result["command"],
        "commit": ran_on,
        "loadavg_before_after": [[round(x, 2) for x in loads], [round(x, 2) for x in os.getloadavg()]],
        "saved": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    written = []
    sections = [("sim", result)] if "sim" in result["sections"] else []
    if result.get("real_vllm") is not None:
        sections.append(("real", result["real_vllm"]))
    for name, section in sections:
        for fault, row in _rows(section).items():
            path = directory / f"{name}-{fault}.json"
            tools = sorted(row.get("faults", {}).get(fault, {}))
            doc = {"section": name, "fault": fault, **meta, **row, "runs": [{**meta, "tools": tools}]}
            if path.exists():  # the same row run again for other tools (--tool): the tools' cells merge
                doc = _merge(json.loads(path.read_text()), doc)
            path.write_text(json.dumps(doc, indent=1) + "\n")
            written.append(path)
    return written


def _merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new``'s tools replace the same tools of ``old``; other tools stay; every run's meta is kept."""
    out = dict(new)
    fault = new["fault"]
    for k in ("faults", "trials", "details"):
        if (
            k in old
            and k in new
            and isinstance(old[k].get(fault), dict)
            and isinstance(new[k].get(fault), dict)
        ):
            out[k] = {fault: {**old[k][fault], **new[k][fault]}}
    if "faults" in old and "faults" not in new:  # a skip does not erase measured cells
        out = {**old, "runs": old.get("runs", [])}
    runs = [*old.get("runs", []), *new["runs"]] if "faults" in new else out["runs"]
    out["runs"] = _owning(runs, sorted(out.get("faults", {}).get(fault, {})))
    out["commit"] = ",".join(dict.fromkeys(r["commit"] for r in out["runs"]))
    return out


def _owning(runs: list[dict[str, Any]], tools: list[str]) -> list[dict[str, Any]]:
    """The runs that still measured some cell of the row: each tool's cell is its newest run's (a run saved
    before runs named their tools counts as having measured every tool)."""
    owner = {t: i for i, r in enumerate(runs) for t in r.get("tools", tools)}
    return [r for i, r in enumerate(runs) if i in owner.values()]


def combine(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """Saved rows -> one section document per section (faults, trials, units, skipped, per-row meta)."""
    out: dict[str, dict[str, Any]] = {}
    for p in sorted(paths):
        row = json.loads(p.read_text())
        sec = out.setdefault(
            row["section"], {"faults": {}, "trials": {}, "units": {}, "skipped": {}, "meta": {}}
        )
        for k in ("faults", "trials", "units", "skipped"):
            sec[k].update(row.get(k, {}))
        sec["meta"][row["fault"]] = {k: row[k] for k in ("commit", "date", "loadavg_before_after")}
    return out


def main(argv: list[str] | None = None) -> int:
    paths = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print("usage: python -m bench.compare_render bench/results/*.json", file=sys.stderr)
        return 2
    for name, sec in combine(paths).items():
        names: list[str] = []
        for cells in sec["faults"].values():
            names += [n for n in cells if n not in names]
        print(f"{name}:\n\n{table(sec, tuple(names))}\n")
        for fault, m in sec["meta"].items():
            print(f"- `{fault}`: commit {m['commit']}, {m['date']}, load average {m['loadavg_before_after']}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
