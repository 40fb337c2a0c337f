"""The project's own exception tree. Adapters translate library errors into these at their edge.

SupervisorError
├── ConfigError            a config or profile file is invalid (carries every problem found)
├── StateError             a persisted state file is unreadable or corrupt
├── DockerError            anything the Docker engine refused or failed to do
│   ├── EngineUnreachable  the daemon socket does not answer (or timed out)
│   ├── ImageMissing       the image is not present locally
│   ├── ContainerMissing   no container of that name/id
│   ├── NameConflict       a container of that name already exists
│   └── PortInUse          a published port is already bound
├── SnapshotError          a container cannot be snapshotted/restored faithfully (e.g. newline in env)
├── ProbeError             an HTTP probe could not be made (not: it was made and failed)
├── ControlError           the control socket is unreachable, refused, or answered an error
└── HostError              a host operation failed (drop caches, kernel log, lock)
"""

from __future__ import annotations


class SupervisorError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigProblem:
    """One problem in one file: where it is and what is wrong; a value, equal to another with the same fields.
    A plain class, neither a dataclass nor a NamedTuple: this module is on ``supervisorctl``'s start path,
    which imports neither ``dataclasses`` nor ``typing`` (about 3 ms; tests/test_cli_imports.py)."""

    __slots__ = ("file", "key_path", "message", "value")

    def __init__(self, file: str, key_path: str, message: str, value: str | None = None) -> None:
        self.file = file
        self.key_path = key_path
        self.message = message
        self.value = value

    def _fields(self) -> tuple[str, str, str, str | None]:
        return (self.file, self.key_path, self.message, self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigProblem) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return "ConfigProblem(file={!r}, key_path={!r}, message={!r}, value={!r})".format(*self._fields())

    def __str__(self) -> str:
        where = f"{self.file}: {self.key_path}" if self.key_path else self.file
        bad = f" (got {self.value})" if self.value is not None else ""
        return f"{where}: {self.message}{bad}"


class ConfigError(SupervisorError):
    """One or more problems in a config or profile file."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems) or "invalid configuration")


class StateError(SupervisorError):
    """A persisted state file could not be read or parsed."""


class DockerError(SupervisorError):
    """The Docker engine refused or failed an operation."""


class EngineUnreachable(DockerError):
    """The Docker engine does not answer (socket missing, refused, or timed out)."""


class ImageMissing(DockerError):
    """The requested image is not present locally."""


class ContainerMissing(DockerError):
    """No container with that name or id."""


class NameConflict(DockerError):
    """A container with that name already exists."""


class PortInUse(DockerError):
    """A published host port is already in use."""


class SnapshotError(SupervisorError):
    """A container cannot be captured or re-created faithfully."""


class ProbeError(SupervisorError):
    """A probe could not be performed at all."""


class ControlError(SupervisorError):
    """The control socket is unreachable, not permitted, or returned an error."""


class HostError(SupervisorError):
    """A host-level operation failed."""
