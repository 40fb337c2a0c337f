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

TYPE_CHECKING = False  # not typing's: supervisorctl starts without it (tests/test_cli_imports.py)
if TYPE_CHECKING:
    from supervisor.core.problems import ConfigProblem


class SupervisorError(Exception):
    """Base of every error this project raises on purpose."""


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
