"""Every config setting does something: each field of a config dataclass is read outside the config package.

A key that is parsed, documented and set in shipped profiles but read by nothing is a defect (a user
tunes it and nothing changes). This walks the AST of ``supervisor/`` (without ``config/``, which
parses, except ``config/policy.py``, which copies fields into the machine's Policy, and ``sim/``, which
is not the supervisor) for attribute reads ``.name`` and class patterns
``case X(name=...)``, and fails for every field of every frozen dataclass in ``supervisor/config/``
that never appears. A name shared by two dataclasses counts for both: the check is conservative.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "supervisor"
CONFIG = PACKAGE / "config"
#: The config sections the machine reads are declared in core (core/settings/), the rest in config/.
SETTINGS = PACKAGE / "core" / "settings"
SKIPPED = (CONFIG, SETTINGS, PACKAGE / "sim")
#: Modules of config/ that hand fields on to the machine (not parsing): their reads count.
WIRING = (CONFIG / "policy.py",)

#: Fields read on purpose only inside the config package (each with the reason).
READ_BY_CONFIG: dict[str, str] = {
    "MetricsConfig.allow_remote": "a parse-time guard: a non-loopback listen address is refused without it",
}
#: Fields other branches are wiring right now (each entry goes once its reader lands: a test says when).
BEING_WIRED: dict[str, str] = {}


def _is_frozen_dataclass(node: ast.ClassDef) -> bool:
    for dec in node.decorator_list:
        if isinstance(dec, ast.Call) and getattr(dec.func, "id", None) == "dataclass":
            return any(
                k.arg == "frozen" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in dec.keywords
            )
    return False


def config_fields() -> dict[str, str]:
    """``Class.field`` -> the module it is declared in, for every frozen dataclass under config/ and
    core/settings/."""
    out: dict[str, str] = {}
    for path in sorted([*CONFIG.glob("*.py"), *SETTINGS.glob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and _is_frozen_dataclass(node):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        out[f"{node.name}.{item.target.id}"] = path.name
    return out


def names_read() -> set[str]:
    """Every attribute name read (or matched by keyword in a class pattern) outside config/ and sim/."""
    seen: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if any(path.is_relative_to(skip) for skip in SKIPPED) and path not in WIRING:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute):
                seen.add(node.attr)
            elif isinstance(node, ast.MatchClass):
                seen.update(node.kwd_attrs)
    return seen


def test_the_walk_finds_config_classes_and_reads() -> None:
    """The scanner sees the config dataclasses and known reads (it cannot pass by finding nothing)."""
    fields = config_fields()
    assert "Profile.base_url" in fields
    assert "ProbeConfig.interval_s" in fields
    assert "MemoryGuardConfig.samples" in fields
    assert len(fields) > 60
    assert {"interval_s", "base_url", "drop_caches_level"} <= names_read()


def test_every_config_field_is_read_outside_the_config_package() -> None:
    """A config dataclass field nothing reads outside supervisor/config/ is a setting that does nothing."""
    seen = names_read()
    unread = sorted(
        f"{key} (config/{module})"
        for key, module in config_fields().items()
        if key.split(".", 1)[1] not in seen and key not in READ_BY_CONFIG and key not in BEING_WIRED
    )
    assert unread == [], "config fields read by nothing (wire them or delete them):\n" + "\n".join(unread)


def test_the_allow_lists_name_real_fields() -> None:
    """Every allow-listed field exists (a stale entry would hide nothing but mislead)."""
    fields = config_fields()
    assert [k for k in (*READ_BY_CONFIG, *BEING_WIRED) if k not in fields] == []


def test_fields_being_wired_are_still_unread() -> None:
    """An entry of BEING_WIRED whose field is now read must leave the list (it would hide a regression)."""
    seen = names_read()
    assert [k for k in BEING_WIRED if k.split(".", 1)[1] in seen] == []
