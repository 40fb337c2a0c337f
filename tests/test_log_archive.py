"""The failed-start log archive (real files) and the log cursor used by `logs --follow`."""

from __future__ import annotations

import stat
from pathlib import Path

from supervisor.adapters.store.log_archive import LogArchive
from supervisor.daemon.executor.logread import after_cursor, cursor_text, parse_cursor, parse_stamped


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_archive_is_private_rotated_and_capped(tmp_path: Path) -> None:
    """0700 dirs, 0600 files, the newest `keep` archives, each cut to its last `max_bytes`."""
    archive = LogArchive(tmp_path / "logs", keep=3, max_bytes=2048)
    for i in range(5):
        archive.save(
            "p", f"{i:02d}" + "ab" * 31, f"failed_{i}", 1000.0 + i, [f"line {i}.{j}" for j in range(3)]
        )
    big = archive.save("p", "ff" * 32, "failed_oom", 2000.0, (f"{j:05d} " + "x" * 94 for j in range(100)))
    assert _mode(tmp_path / "logs") == 0o700
    assert _mode(tmp_path / "logs" / "p") == 0o700
    files = sorted((tmp_path / "logs" / "p").iterdir())
    assert len(files) == 3
    assert all(_mode(f) == 0o600 for f in files)
    entries = archive.entries("p")
    assert [e.outcome for e in entries] == ["failed_oom", "failed_4", "failed_3"]
    assert big.dropped_bytes > 0
    assert entries[0].dropped_bytes == big.dropped_bytes
    found = archive.read("p", 1)
    assert found is not None
    meta, lines = found
    assert meta.container_id == "ff" * 32
    assert lines[-1].startswith("00099 ")  # the end of the log (where the failure is) is kept
    assert sum(len(ln) + 1 for ln in lines) <= 2048
    second = archive.read("p", 2)
    assert second is not None
    assert second[1] == ["line 4.0", "line 4.1", "line 4.2"]
    assert archive.read("p", 4) is None
    assert archive.read("other", 1) is None


def test_cursor_keeps_nanoseconds_and_drops_seen_lines() -> None:
    """Docker stamps parse to (s, ns); lines at or before the cursor are dropped; pieces keep their stamp."""
    stamp, text = parse_stamped("2024-06-01T12:00:00.000000123Z hello world")
    assert stamp == (1717243200, 123)
    assert text == "hello world"
    assert parse_stamped("no stamp") == (None, "no stamp")
    cur = (1717243200, 123)
    assert parse_cursor(cursor_text(cur)) == cur
    assert parse_cursor("12.5") is None
    lines = [
        "2024-06-01T12:00:00.000000123Z old",
        "2024-06-01T12:00:00.0000002Z new",
        "progress piece",
        "2024-06-01T12:00:01Z later",
    ]
    out, last = after_cursor(lines, cur)
    assert out == ["new", "progress piece", "later"]
    assert last == (1717243201, 0)
    assert after_cursor(lines, None)[0][0] == "old"
