"""One problem found in a config or profile file (:class:`supervisor.core.errors.ConfigError` carries them).

Its own module, not errors.py: a NamedTuple needs ``typing`` at run time, and errors.py is on
``supervisorctl``'s start path, which imports neither ``typing`` nor ``dataclasses``
(tests/test_cli_imports.py).
"""

from __future__ import annotations

from typing import NamedTuple


class ConfigProblem(NamedTuple):
    """One problem in one file: where it is and what is wrong. ConfigError carries a list of them."""

    file: str
    key_path: str
    message: str
    value: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}: {self.key_path}" if self.key_path else self.file
        bad = f" (got {self.value})" if self.value is not None else ""
        return f"{where}: {self.message}{bad}"
