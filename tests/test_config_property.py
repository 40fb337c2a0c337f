"""One property, by generation (issue 39 item 10): every document ``check-config`` accepts starts the
daemon's config objects (the parse and build path the daemon uses, without Docker) and reloads without an
exception escaping; every document it refuses gets problems naming the file, the key path and what is
wrong, and a reload of it keeps the last good configuration.

The documents are generated from the config model itself: the key paths and their types are walked out of
the frozen dataclasses (``Profile``, ``DaemonConfig`` and everything they hold), so a new key is covered
without a new test. Each example is a sound daemon config and profile with one to three keys set to a value
of the key's type or a hostile one (huge numbers, NUL, a lone surrogate, 129-character names, URLs
``urlsplit`` cannot read, the wrong shape); the issue's cases are pinned as explicit examples.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, event, example, given, settings, strategies as st

from supervisor.adapters.secrets import SecretBook
from supervisor.adapters.store.state import Store
from supervisor.config import DaemonConfig, Profile, check_config, container_create_kwargs, load_config
from supervisor.config.policy import policy_for
from supervisor.config.source import TRUST_ENV
from supervisor.core.fleet.reload import reload_plan
from supervisor.core.spec.shape import container_spec_to_yaml_dict
from supervisor.core.vllm.kv_pool import spec_fingerprint
from supervisor.daemon.reload import daemon_keys_changed, read_config

KeyPath = tuple[str, ...]
BASE_PROFILE: dict[str, Any] = {
    "name": "p",
    "container": {
        "name": "vsup-gen",
        "image": "vllm/vllm-openai:v0.11.0",
        "command": ["--model", "/m"],
        "ports": ["127.0.0.1:8000:8000"],
    },
}
#: Values of no particular type: what a hostile or careless file puts anywhere.
HOSTILE: list[object] = [
    None,
    "",
    "\udcff",
    "a\x00b",
    "n" * 129,
    "x" * 70_000,
    10**23,
    2**63,
    -1,
    0,
    1.0e300,
    -1.0e300,
    float("nan"),
    "http://127.0.0.1:99999",
    "http://u:p@[::1:bad/x",
    "9" * 400 + "g",
    [],
    {},
    [[[]]],
    {"k": "v"},
    "../../../etc/shadow",
    True,
]


def _fields(cls: type) -> Iterator[tuple[str, Any]]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        yield f.name, hints[f.name]


def _key_paths(cls: type, prefix: KeyPath = (), depth: int = 0) -> Iterator[tuple[KeyPath, Any]]:
    """Every (key path, type) the dataclass ``cls`` declares, nested dataclasses walked."""
    for name, tp in _fields(cls):
        path = (*prefix, name)
        yield path, tp
        inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)] or [tp]
        for sub in inner:
            if dataclasses.is_dataclass(sub) and isinstance(sub, type) and depth < 3 and sub is not Profile:
                yield from _key_paths(sub, path, depth + 1)


PROFILE_KEYS = sorted(_key_paths(Profile), key=lambda kv: kv[0])
DAEMON_KEYS = sorted(_key_paths(DaemonConfig), key=lambda kv: kv[0])


def _values(tp: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values of type ``tp`` as YAML would hold them (a dataclass: a mapping of its keys), or hostile."""
    hostile = st.sampled_from(HOSTILE)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    typed: st.SearchStrategy[Any]
    if tp is bool:
        typed = st.booleans()
    elif tp is int:
        typed = st.one_of(st.integers(-2, 10_000), st.sampled_from([65535, 65536, 2**31, 10**23]))
    elif tp is float:
        typed = st.one_of(st.floats(-10, 1e6, allow_nan=False), st.sampled_from([1e300, 86_401.0, 3601.0]))
    elif tp is str or tp is Path:
        typed = st.one_of(
            st.text(max_size=12),
            st.sampled_from(["all", "no", "host", "127.0.0.1:8001:8000", "http://127.0.0.1:8000", "/m"]),
        )
    elif origin is typing.Literal:
        typed = st.one_of(st.sampled_from(args), st.text(max_size=5))
    elif origin in (typing.Union, types.UnionType):
        typed = st.one_of(*[_values(a, depth) for a in args])
    elif origin in (tuple, list) and args:
        typed = st.lists(_values(args[0], depth + 1), max_size=2)
    elif origin is dict:
        typed = st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=2)
    elif dataclasses.is_dataclass(tp) and isinstance(tp, type) and depth < 2:
        optional = {name: _values(sub, depth + 1) for name, sub in _fields(tp)}
        typed = st.fixed_dictionaries({}, optional=optional)
    else:
        typed = st.none()
    return st.one_of(typed, typed, hostile)


def _mutation(keys: list[tuple[KeyPath, Any]]) -> st.SearchStrategy[tuple[KeyPath, Any]]:
    return st.sampled_from(keys).flatmap(lambda kv: st.tuples(st.just(kv[0]), _values(kv[1])))


def _set(doc: dict[str, Any], path: KeyPath, value: object) -> None:
    here = doc
    for key in path[:-1]:
        nxt = here.get(key)
        if not isinstance(nxt, dict):
            nxt = here[key] = {}
        here = nxt
    here[path[-1]] = value


def _write(tmp: Path, profile: dict[str, Any], daemon: dict[str, Any]) -> tuple[Path, Path]:
    prof, conf = tmp / "p.yaml", tmp / "daemon.yaml"
    prof.write_text(yaml.safe_dump(profile), encoding="ascii")
    conf.write_text(yaml.safe_dump(daemon), encoding="ascii")
    return conf, prof


def _starts_and_reloads(conf: Path, state: Path) -> None:
    """What the daemon does with an accepted config before and besides Docker (daemon/main.py, build.py,
    the store, the fingerprint, the history line), then a reload of the same file."""
    config = dataclasses.replace(load_config(conf), state_dir=state)
    book = SecretBook()
    book.learn_config(config)
    store = Store(state)
    for profile in config.profiles:
        policy_for(profile, config)
        container_create_kwargs(profile.container)
        spec_fingerprint(profile.container, None)
        store.state_path(profile.name)
        spec = book.data(container_spec_to_yaml_dict(profile.container, None))
        store.append_event(
            {"ts": 0.0, "name": "test.spec", "profile": profile.name, "fields": {"spec": spec}}
        )
    new, problems = read_config(config)
    assert new is not None, problems
    reload_plan({p.name: p for p in config.profiles}, {p.name: p for p in new.profiles})
    daemon_keys_changed(config, new)


PINNED = [  # the cases: (file, key path, value)
    ("profile", ("container", "shm_size"), "9" * 400 + "g"),
    ("profile", ("base_url",), "http://127.0.0.1:99999"),
    ("daemon", ("alerts", "channels"), [{"kind": "generic", "url": "http://u:p@[::1:bad/x"}]),
    ("profile", ("container", "env"), {"A": "\udcff"}),
    ("profile", ("name",), "n" * 129),
    ("profile", ("stop", "grace_s"), 1.0e300),
    ("profile", ("probes", "interval_s"), 1.0e300),
    ("profile", ("container", "stop_timeout"), 10**23),
    ("profile", ("container", "ulimits"), [{"name": "nofile", "soft": 10**23}]),
]


@settings(
    max_examples=int(os.environ.get("VSUP_PROPERTY_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    profile_changes=st.lists(_mutation(PROFILE_KEYS), max_size=3),
    daemon_changes=st.lists(_mutation(DAEMON_KEYS), max_size=2),
)
@example(profile_changes=[p[1:] for p in PINNED if p[0] == "profile"][:1], daemon_changes=[])
def test_accepted_documents_start_and_refused_ones_say_where(
    tmp_path_factory: Any,
    profile_changes: list[tuple[KeyPath, Any]],
    daemon_changes: list[tuple[KeyPath, Any]],
) -> None:
    problems = _check(tmp_path_factory.mktemp("gen"), profile_changes, daemon_changes)
    event("refused" if problems else "accepted")


def test_each_pinned_case_is_refused_where_it_is(tmp_path: Path) -> None:
    for i, (file, path, value) in enumerate(PINNED):
        d = tmp_path / str(i)
        d.mkdir()
        changes = [(path, value)]
        problems = _check(d, changes if file == "profile" else [], changes if file == "daemon" else [])
        assert problems, (path, value)


def _check(
    tmp: Path, profile_changes: list[tuple[KeyPath, Any]], daemon_changes: list[tuple[KeyPath, Any]]
) -> list[Any]:
    os.environ[TRUST_ENV] = "1"  # files written by the test; the owner rule has its own tests
    profile = json.loads(json.dumps(BASE_PROFILE))
    daemon: dict[str, Any] = {"state_dir": str(tmp / "state"), "profiles": ["p.yaml"]}
    for path, value in profile_changes:
        _set(profile, path, value)
    for path, value in daemon_changes:
        _set(daemon, path, value)
    conf, prof = _write(tmp, profile, daemon)
    problems = check_config(conf)
    if not problems:
        _starts_and_reloads(conf, tmp / "state")
        return []
    files = (str(conf), str(prof))
    for p in problems:
        # a file the documents name (a profile path that does not exist) is reported under its own path
        assert p.file.partition(":")[0] in files or p.file.startswith((*files, str(tmp))), p
        assert p.message, p
        assert (
            p.key_path
            or p.file != p.file.partition(":")[0]
            or "file" in p.message
            or p.message.startswith(("is ", "cannot", "YAML", "more than", "set "))
        ), p
    touched = {str(prof) for _ in profile_changes} | {str(conf) for _ in daemon_changes}
    assert any(p.file.partition(":")[0] in touched for p in problems) or not touched, problems
    new, why = read_config(dataclasses.replace(DaemonConfig(conf, tmp, tmp, tmp)))
    assert new is None
    assert why
    return problems
