"""tools/venv_copy.py: scripts/setup's copied project venv runs its scripts wherever the checkout is."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tools.venv_copy import bad_interpreters, relocate, rewrite

CACHE = "/var/cache/vllm-supervisor/project-venv/k/venv"


def test_a_new_root_that_ends_with_the_old_one_is_not_rewritten_twice() -> None:
    # CI, 2026-12-04: cache made from /work/main, checkout at /check/work/main
    text = f"#!{CACHE}/bin/python\n"
    assert rewrite(text, CACHE, "/check/work/main/.venv", "/work/main", "/check/work/main") == (
        "#!/check/work/main/.venv/bin/python\n"
    )


def test_the_old_checkout_is_replaced_only_where_it_is_that_path() -> None:
    text = "/work/main\n'/work/main/supervisor'\nfile:///work/main2\n/work/main/x\n"
    assert rewrite(text, CACHE, "/n/.venv", "/work/main", "/check/work/main") == (
        "/check/work/main\n'/check/work/main/supervisor'\nfile:///work/main2\n/check/work/main/x\n"
    )


def test_a_copied_venv_runs_its_scripts_from_a_checkout_under_the_old_path(tmp_path: Path) -> None:
    old_root = tmp_path / "work" / "main"
    cache_venv = tmp_path / "cache" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(cache_venv)], check=True, timeout=60)
    script = cache_venv / "bin" / "where"
    script.write_text(f"#!{cache_venv}/bin/python\nimport sys\nprint(sys.prefix)\n", encoding="utf-8")
    script.chmod(0o755)
    site = next(cache_venv.glob("lib/python3*/site-packages"))
    (site / "project.pth").write_text(f"{old_root}\n", encoding="utf-8")

    new_root = tmp_path / "check" / str(old_root).lstrip("/")  # ends with the old checkout's path
    new_venv = new_root / ".venv"
    new_root.mkdir(parents=True)
    shutil.copytree(cache_venv, new_venv, symlinks=True)

    assert relocate(new_venv, str(cache_venv), str(old_root), str(new_root)) == []
    where = str(new_venv / "bin" / "where")
    out = subprocess.run([where], capture_output=True, text=True, check=True, timeout=30)
    assert out.stdout.strip() == str(new_venv)
    new_site = next(new_venv.glob("lib/python3*/site-packages"))
    assert (new_site / "project.pth").read_text(encoding="utf-8") == f"{new_root}\n"


def test_a_script_naming_a_missing_interpreter_is_reported(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ok").write_text(f"#!{sys.executable}\n", encoding="utf-8")
    (bin_dir / "broken").write_text("#!/nonexistent/venv/bin/python\n", encoding="utf-8")
    (bin_dir / "data").write_text("not a script\n", encoding="utf-8")
    assert bad_interpreters(tmp_path) == ["broken: /nonexistent/venv/bin/python"]


def test_the_command_line_exits_1_on_a_broken_venv_and_2_on_bad_usage(tmp_path: Path) -> None:
    from tools.venv_copy import main

    (tmp_path / "bin").mkdir()
    assert main(["check", str(tmp_path)]) == 0
    (tmp_path / "bin" / "broken").write_text("#!/nonexistent/python\n", encoding="utf-8")
    assert main(["check", str(tmp_path)]) == 1
    assert main(["relocate", str(tmp_path)]) == 2
