"""A fake vLLM OpenAI-compatible server: real log shapes, real startup timing shape, scripted failures.

Run as ``python3 -u vllm_sim.py [vLLM serve arguments]`` (PID 1 of the simulator container). Stdlib only,
Python 3.11. Unknown vLLM flags are accepted and ignored. Behaviour is chosen by ``VSIM_*`` environment
variables; see docs/simulator.md for the reference and the ``POST /_sim/fault`` hook.
"""

from __future__ import annotations

import os
import queue
import random
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from types import FrameType

try:
    from supervisor.sim import simengine, simfail, simgen, simhttp, simlog
except ImportError:  # running as /opt/vllm-sim/vllm_sim.py: siblings are top-level modules
    import simengine  # type: ignore[no-redef,import-not-found]
    import simfail  # type: ignore[no-redef,import-not-found]
    import simgen  # type: ignore[no-redef,import-not-found]
    import simhttp  # type: ignore[no-redef,import-not-found]
    import simlog  # type: ignore[no-redef,import-not-found]

SCENARIOS = (
    "ok",
    "fail_gpu_mem_util",
    "fail_oom",
    "fail_kv_insufficient",
    "fail_no_kv",
    "fail_engine_init",
    "fail_worker_exception",
    "die_after_ready",
    "stuck",
    "hang_load",
    "silent_exit",
    "die_on_first_request",
)
#: The scenarios that strike after ready (after VSIM_DIE_AFTER s, or after VSIM_DIE_AFTER_REQUESTS requests).
AFTER_READY = {"die_after_ready": "die", "stuck": "stuck", "silent_exit": "silent_exit"}
MULTI_VALUE = {"--api-key", "--served-model-name"}
KNOWN = {
    "--kv-cache-memory-bytes",
    "--port",
    "--host",
    "--served-model-name",
    "--model",
    "--api-key",
    "--max-model-len",
    "--shutdown-timeout",
    "--max-num-batched-tokens",
}
#: What 0.32 shows as '***' in `non-default args` (redact_sensitive_args); 0.9 and 0.11 print them in clear.
REDACT = {"api_key", "hf_token", "watermark_config"}
NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


#: vLLM's short options (``-tp``, ``-dph``, and ``-O`` with any value attached: ``-O3``, ``-OVALUE``);
#: another single-dash token is an unknown option to argparse (a key value that begins with '-' is one:
#: fixtures 053/054 of tests/fixtures/vllm-logs). The supervisor's masking rule is stricter on ``-O``
#: (core/spec/secrets.py SHORT_OPTION: it masks what may be a key, this parses as vLLM does).
SHORT_OPTION = re.compile(r"-(?:[a-z]{1,3}|O.*)")


class UsageError(ValueError):
    """A bad command line or VSIM_* value."""


class ArgumentError(UsageError):
    """What vLLM's argparse refuses: printed as it prints it (usage line, ``<prog>: error: ...``), exit 2."""


@dataclass(frozen=True)
class SimConfig:
    """Everything the simulator was asked to do, parsed once at start."""

    port: int
    host: str
    model: str
    served: str
    api_keys: tuple[str, ...]
    max_model_len: int
    shutdown_timeout: int
    nondefault: str
    flavor: str
    scenario: str
    load_s: float
    shards: int
    silent_s: float
    die_after: float
    dead_health_s: float
    die_exit_code: int
    kv_tokens: int
    gen_seconds: float
    max_running: int
    prefill_rate: float  # prompt tokens/s (VSIM_PREFILL_TOKENS_PER_S)
    chunk_tokens: int | None  # --max-num-batched-tokens; None: --no-enable-chunked-prefill
    max_tokens_default: int
    hang_interval: float
    stats_interval: float
    term_during_init: str = "ignore"
    die_after_requests: int = 0
    max_positions: int = 0  # VSIM_MAX_POSITIONS: the model's positions; a longer --max-model-len is refused
    max_model_len_given: bool = False
    check_model_dir: bool = False  # VSIM_CHECK_MODEL_DIR=1: --model must be a directory with config.json
    shm_required_mib: int = 0  # VSIM_SHM_REQUIRED_MIB: the engine needs this much free /dev/shm
    answers: simgen.Answers = field(default_factory=simgen.Answers)
    silent_busy: bool = False  # VSIM_SILENT_BUSY=1: the silent phase burns one core (a vision warm-up)
    #: VSIM_SPIN_TRIGGER: a file; while it exists (holding N, empty: 1) and N requests run, the engine
    #: freezes as "stuck" does but burns a core (a hung CUDA kernel's spin-wait; the real vLLM's test
    #: overlay tools/overlays/spin does the same on the same trigger)
    spin_trigger: str = ""
    kv_cache_memory_bytes: int | None = None  # --kv-cache-memory-bytes: the pool is this, not a draw
    weights_gib: float = 15.27  # VSIM_WEIGHTS_GIB: "Model loading took X GiB" and the memory breakdown


def _is_flag(tok: str) -> bool:
    return tok.startswith("-") and not NUMBER.match(tok)


def parse_argv(argv: list[str]) -> tuple[dict[str, list[str]], dict[str, object]]:
    """vLLM-like argv -> (known flag values, every given argument for the `non-default args` line)."""
    known: dict[str, list[str]] = {}
    given: dict[str, object] = {}
    unrecognized: list[str] = []
    toks = list(argv)
    if toks and toks[0] == "serve":
        toks.pop(0)
    i = 0
    while i < len(toks):
        tok = toks[i]
        i += 1
        if not _is_flag(tok):
            given.setdefault("model_tag", tok)
            known.setdefault("--model", [tok])
            continue
        if not tok.startswith("--") and not SHORT_OPTION.fullmatch(tok.partition("=")[0]):
            unrecognized.append(tok)
            continue
        if tok.startswith("-O") and len(tok) > 2:  # argparse's attached value (0.32: optimization_level)
            given["optimization_level"] = _typed(tok[2:])
            continue
        name, eq, inline = tok.partition("=")
        values: list[str] = [inline] if eq else []
        if not eq:
            while i < len(toks) and not _is_flag(toks[i]):
                values.append(toks[i])
                i += 1
                if name not in MULTI_VALUE:
                    break
        dest = name.lstrip("-").replace("-", "_")
        if name in KNOWN:
            if not values:
                many = "at least one argument" if name in MULTI_VALUE else "one argument"
                raise ArgumentError(f"argument {name}: expected {many}")
            known[name] = known.get(name, []) + values if name in MULTI_VALUE else values
        shown: object = True
        if values:
            shown = [_typed(v) for v in values] if name in MULTI_VALUE else _typed(values[0])
        given[dest] = shown
    if unrecognized:
        raise ArgumentError(f"unrecognized arguments: {' '.join(unrecognized)}")
    return known, given


def _typed(v: str) -> object:
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    return v


def pick_kv_tokens(spec: str, rng: random.Random) -> int:
    """VSIM_KV_TOKENS: "a,b,c" (pick one), "lo-hi" (uniform range) or a single number."""
    s = spec.replace("_", "").strip()
    try:
        if "," in s:
            return rng.choice([int(x) for x in s.split(",") if x.strip()])
        if "-" in s:
            lo, hi = (int(x) for x in s.split("-", 1))
            return rng.randint(min(lo, hi), max(lo, hi))
        return int(s)
    except ValueError as exc:
        raise UsageError(f"VSIM_KV_TOKENS={spec!r}: expected N, a,b,c or lo-hi") from exc


def next_start_index(path: str) -> int:
    """VSIM_KV_SEQUENCE_FILE: how many starts read this counter file before (0 if absent); counts this one.

    The file lives in a directory mounted into every container of one test, so the count survives the
    container being removed and created again (what a supervisor does on every restart).
    """
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read().strip()
        index = int(text) if text else 0
    except FileNotFoundError:
        index = 0
    except (OSError, ValueError) as exc:
        raise UsageError(f"VSIM_KV_SEQUENCE_FILE={path!r}: {exc}") from exc
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(f"{index + 1}\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"VSIM_KV_SEQUENCE_FILE={path!r}: {exc}") from exc
    return index


def kv_tokens_for_start(spec: str, sequence_file: str, rng: random.Random) -> int:
    """The pool of this start: with a sequence file, "a,b,c" is taken in order (the last repeats)."""
    if not sequence_file or "," not in spec:
        return pick_kv_tokens(spec, rng)
    try:
        values = [int(x) for x in spec.replace("_", "").split(",") if x.strip()]
    except ValueError as exc:
        raise UsageError(f"VSIM_KV_TOKENS={spec!r}: expected N, a,b,c or lo-hi") from exc
    if not values:
        raise UsageError(f"VSIM_KV_TOKENS={spec!r}: expected N, a,b,c or lo-hi")
    return values[min(next_start_index(sequence_file), len(values) - 1)]


def _env(env: dict[str, str], key: str, default: str) -> str:
    return env.get(key, "").strip() or default


def _num(env: dict[str, str], key: str, default: float) -> float:
    raw = _env(env, key, str(default))
    try:
        val = float(raw)
    except ValueError as exc:
        raise UsageError(f"{key}={raw!r} is not a number") from exc
    if val < 0:
        raise UsageError(f"{key}={raw!r} must not be negative")
    return val


def load_config(argv: list[str], env: dict[str, str], rng: random.Random) -> SimConfig:
    """Parse the command line and VSIM_* environment (raises UsageError)."""
    known, given = parse_argv(argv)

    def one(flag: str, default: str) -> str:
        return known.get(flag, [default])[0]

    def number(flag: str, default: str, kind: str) -> int:
        raw = one(flag, default)
        try:
            return int(float(raw)) if kind == "float" else int(raw)
        except ValueError as exc:  # argparse's wording (the type function's name)
            raise ArgumentError(f"argument {flag}: invalid {kind} value: {raw!r}") from exc

    port = number("--port", "8000", "int")
    max_len = number("--max-model-len", "32768", "human_readable_int_or_auto")
    shutdown = number("--shutdown-timeout", "0", "float")
    flavor = _env(env, "VSIM_FLAVOR", "v0_32")
    scenario = _env(env, "VSIM_SCENARIO", "ok")
    if flavor not in simlog.FLAVORS:
        raise UsageError(f"VSIM_FLAVOR={flavor!r}: one of {', '.join(simlog.FLAVORS)}")
    if scenario not in SCENARIOS:
        raise UsageError(f"VSIM_SCENARIO={scenario!r}: one of {', '.join(SCENARIOS)}")
    term_during_init = _env(env, "VSIM_TERM_DURING_INIT", "ignore")
    if term_during_init not in ("interrupt", "ignore"):
        raise UsageError(f"VSIM_TERM_DURING_INIT={term_during_init!r}: interrupt or ignore")
    model = one("--model", "facebook/opt-125m")
    pin = known.get("--kv-cache-memory-bytes", [""])[0]
    if pin and not pin.isdigit():
        raise ArgumentError(f"argument --kv-cache-memory-bytes: invalid int value: {pin!r}")
    keys = tuple(known.get("--api-key", [])) or ((env["VLLM_API_KEY"],) if env.get("VLLM_API_KEY") else ())
    return SimConfig(
        port=port,
        host=one("--host", "0.0.0.0"),
        model=model,
        served=one("--served-model-name", model),
        api_keys=keys,
        max_model_len=max(1, max_len),
        shutdown_timeout=max(0, shutdown),
        nondefault=repr(
            {k: "***" if k in REDACT else v for k, v in given.items()}
            if simlog.FLAVORS[flavor].redacts_secret_args
            else given
        ),
        flavor=flavor,
        scenario=scenario,
        load_s=_num(env, "VSIM_LOAD_SECONDS", 2.0),
        shards=max(1, int(_num(env, "VSIM_SHARDS", 4))),
        silent_s=_num(env, "VSIM_SILENT_SECONDS", 0.0),
        die_after=_num(env, "VSIM_DIE_AFTER", 2.0),
        dead_health_s=_num(env, "VSIM_DEAD_HEALTH_SECONDS", 3.0),
        die_exit_code=int(_num(env, "VSIM_DIE_EXIT_CODE", 0)),
        kv_tokens=max(
            1,
            simlog.kv_tokens_of(int(pin))
            if pin
            else kv_tokens_for_start(
                _env(env, "VSIM_KV_TOKENS", "1069759"), env.get("VSIM_KV_SEQUENCE_FILE", "").strip(), rng
            ),
        ),
        gen_seconds=_num(env, "VSIM_GEN_SECONDS", 0.05),
        prefill_rate=max(1.0, _num(env, "VSIM_PREFILL_TOKENS_PER_S", 50_000.0)),
        chunk_tokens=_chunk_tokens(known, given),
        max_running=max(1, int(_num(env, "VSIM_MAX_RUNNING", 4))),
        max_tokens_default=max(1, int(_num(env, "VSIM_MAX_TOKENS_DEFAULT", 16))),
        hang_interval=max(0.1, _num(env, "VSIM_HANG_INTERVAL", 5.0)),
        stats_interval=max(0.5, _num(env, "VSIM_STATS_INTERVAL", 10.0)),
        term_during_init=term_during_init,
        die_after_requests=int(_num(env, "VSIM_DIE_AFTER_REQUESTS", 0)),
        answers=_answers(env),
        max_positions=int(_num(env, "VSIM_MAX_POSITIONS", 0)),
        max_model_len_given="--max-model-len" in known,
        check_model_dir=_env(env, "VSIM_CHECK_MODEL_DIR", "0") == "1",
        shm_required_mib=int(_num(env, "VSIM_SHM_REQUIRED_MIB", 0)),
        silent_busy=_env(env, "VSIM_SILENT_BUSY", "0") == "1",
        spin_trigger=env.get("VSIM_SPIN_TRIGGER", "").strip(),
        kv_cache_memory_bytes=int(pin) if pin else None,
        weights_gib=_num(env, "VSIM_WEIGHTS_GIB", 15.27),
    )


def _chunk_tokens(known: dict[str, list[str]], given: dict[str, object]) -> int | None:
    """The prefill step size: --max-num-batched-tokens (8192 as vLLM's GPU default), None when chunked
    prefill is off (a whole prompt is one step)."""
    if given.get("no_enable_chunked_prefill") is True or given.get("enable_chunked_prefill") is False:
        return None
    try:
        return max(1, int(known.get("--max-num-batched-tokens", ["8192"])[0]))
    except ValueError as exc:
        raise UsageError(f"--max-num-batched-tokens: {exc}") from exc


def _answers(env: dict[str, str]) -> simgen.Answers:
    try:
        return simgen.answers_from_env(env)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _spin_wanted(path: str) -> int | None:
    """The running requests the spin trigger asks for (None: no trigger)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read().strip()
    except OSError:
        return None
    try:
        return max(1, int(text or "1"))
    except ValueError:
        return 1


def _burn_until(stop: threading.Event) -> None:
    """Burn a core until ``stop`` is set (checked every 5 ms)."""
    while not stop.is_set():
        end = time.monotonic() + 0.005
        while time.monotonic() < end:
            pass


def _silent_phase(seconds: float, busy: bool) -> None:
    """The silent phase after the shards: asleep, or spinning one core (real vLLM's vision warm-up keeps
    1-2 cores at 100 % for ~15 min without a log line)."""
    if not busy:
        time.sleep(seconds)
        return
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        for _ in range(10_000):
            x = (x * 31 + 7) % 1_000_003


def _shm_free_mib() -> int:
    """Free MiB of this container's /dev/shm (0 when it cannot be read)."""
    try:
        st = os.statvfs("/dev/shm")  # noqa: S108 - the shared-memory mount vLLM checks, not a temp file
    except OSError:
        return 0
    return int(st.f_bavail * st.f_frsize // 2**20)


class Sim:
    """One simulated vLLM server process: startup script, serving loop, faults and signals."""

    def __init__(self, cfg: SimConfig, rng: random.Random) -> None:
        self.cfg = cfg
        pid = os.getpid()
        self.fmt = simlog.LogFormat(simlog.FLAVORS[cfg.flavor], pid, pid + rng.randint(60, 240))
        self.out_lock = threading.RLock()
        # stuck after N requests: the engine itself freezes as the Nth finishes (no window for a next one)
        stick_after = cfg.die_after_requests if cfg.scenario == "stuck" else 0
        self.engine = simengine.Engine(
            cfg.max_running, cfg.kv_tokens, stick_after, cfg.prefill_rate, cfg.chunk_tokens
        )
        self.pending_signal: str | None = None
        self.lost_terms = 0
        self._spin: threading.Event | None = None  # set to end the spin (VSIM_SPIN_TRIGGER)

    def emit(self, line: simlog.Line) -> None:
        stream = sys.stdout if line[0] == simlog.OUT else sys.stderr
        with self.out_lock:
            try:
                stream.write(line[1] + "\n")
                stream.flush()
            except (OSError, ValueError):
                pass

    def emit_all(self, lines: list[simlog.Line]) -> None:
        for line in lines:
            self.emit(line)

    # ------------------------------------------------------------------ signals
    def _raise_interrupt(self, signum: int, _frame: FrameType | None) -> None:
        self.pending_signal = signal.Signals(signum).name
        raise KeyboardInterrupt("terminated" if signum == signal.SIGTERM else "")

    def _term_during_init(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM while the engine core initialises (VSIM_TERM_DURING_INIT=ignore): the first is lost, as on
        the real 0.32 server (likely its API server's wait in a pyzmq poll, which retries the interrupted
        call over the handler's KeyboardInterrupt); a second one interrupts the start (exit 130), as seen."""
        self.lost_terms += 1
        if self.lost_terms >= 2:
            self._raise_interrupt(signum, frame)

    def _flag_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.pending_signal = signal.Signals(signum).name

    # ------------------------------------------------------------------ startup
    def _refused(self) -> list[str] | None:
        """vLLM 0.32's reason for refusing this configuration (max_model_len, model directory), or None."""
        c = self.cfg
        if c.max_positions and c.max_model_len_given and c.max_model_len > c.max_positions:
            return simfail.max_len_reason(c.max_model_len, c.max_positions)
        if c.check_model_dir and not os.path.isfile(os.path.join(c.model, "config.json")):
            return simfail.no_model_reason(c.model)
        return None

    def _fail(self, kind: str, avail_gib: float) -> int:
        self.emit_all(simfail.startup_failure_lines(self.fmt, kind, self.cfg.max_model_len, avail_gib))
        return 1

    def startup(self) -> int | None:
        """The §4 startup timeline; returns an exit code if startup fails, None when ready to serve."""
        c, f = self.cfg, self.fmt
        self.emit_all(simlog.banner_lines(f, c.nondefault, c.served, c.max_model_len))
        if c.term_during_init == "ignore":
            # Seen on the real 0.32 server as PID 1: a SIGTERM while the engine core initialises is lost
            # (no output, no exit); the server becomes ready as if nothing happened (docs/vllm-facts.md
            # "SIGTERM"). Only a second SIGTERM or SIGKILL (`docker stop`'s, after its grace) ends it.
            signal.signal(signal.SIGTERM, self._term_during_init)
        refused = self._refused()
        if refused is not None:  # vLLM refuses its configuration before any engine starts
            self.emit_all(simfail.config_error_lines(f, refused))
            return 1
        self.emit_all(simlog.engine_init_lines(f, c.model, c.served, c.max_model_len))
        time.sleep(0.1 * c.load_s)
        avail = simlog.kv_gib(c.kv_tokens)
        shm_free = _shm_free_mib()
        if c.shm_required_mib and shm_free < c.shm_required_mib:  # the real check, on the real /dev/shm
            shm = (c.shm_required_mib, shm_free)
            self.emit_all(simfail.startup_failure_lines(f, "fail_shm", c.max_model_len, avail, shm))
            return 1
        if c.scenario in ("fail_gpu_mem_util", "fail_engine_init", "fail_worker_exception"):
            return self._fail(c.scenario, avail)
        per = 0.6 * c.load_s / c.shards
        t_load = time.monotonic()
        self.emit_all(simlog.shard_lines(f, 0, c.shards, 0.0, per))
        stop_at = c.shards // 2 if c.scenario in ("hang_load", "fail_oom") else c.shards
        for i in range(1, stop_at + 1):
            time.sleep(per)
            self.emit_all(simlog.shard_lines(f, i, c.shards, time.monotonic() - t_load, per))
        if c.scenario == "fail_oom":
            return self._fail(c.scenario, avail)
        if c.scenario == "hang_load":
            while True:  # ends only by a signal (KeyboardInterrupt) — like a hung worker
                time.sleep(c.hang_interval)
                self.emit(simlog.hang_line(f))
        load_s = time.monotonic() - t_load
        self.emit_all(simlog.weights_loaded_lines(f, load_s, c.weights_gib))
        _silent_phase(c.silent_s, c.silent_busy)
        t_init = time.monotonic()
        time.sleep(0.15 * c.load_s)
        self.emit_all(simlog.profile_lines(f, avail, c.kv_cache_memory_bytes))
        if c.scenario in ("fail_kv_insufficient", "fail_no_kv"):
            return self._fail(c.scenario, avail)
        self.emit_all(simlog.kv_lines(f, c.kv_tokens, c.max_model_len))
        time.sleep(0.15 * c.load_s)
        init_s = time.monotonic() - t_init
        ready = simlog.engine_ready_lines(f, 0.1 * c.load_s, init_s, c.kv_tokens // 16)
        usage = [] if c.kv_cache_memory_bytes else simlog.usage_lines(f, avail, c.weights_gib)
        self.emit_all(ready[:3] + usage + ready[3:])  # after "Graph capturing finished"
        url = f"http://{c.host}:{c.port}"
        self.emit_all(simlog.server_start_lines(f, url, os.getpid())[:-1])
        return None

    # ------------------------------------------------------------------ serving
    def serve(self, server: ThreadingHTTPServer, ctx: simhttp.Ctx) -> int:
        """After ready: process scripted faults, hook faults and signals until the process should exit."""
        c = self.cfg
        ready_at = time.monotonic()
        scripted = AFTER_READY.get(c.scenario)
        if c.scenario == "stuck" and c.die_after_requests:
            scripted = None  # the engine freezes itself as the Nth request finishes
        fault_at = ready_at + c.die_after if scripted and not c.die_after_requests else None
        dead_since: float | None = None
        next_stats = ready_at + c.stats_interval
        last_stats = (0.0, 0.0, False)
        while True:
            if self.pending_signal:
                return self.shutdown(self.pending_signal, server, ctx)
            now = time.monotonic()
            kind: str | None = None
            code = 0
            if scripted and self._strikes(fault_at, now):
                kind, scripted = scripted, None
            elif dead_since is not None and now - dead_since >= c.dead_health_s:
                self.emit_all(simfail.uvicorn_shutdown_lines(self.fmt, os.getpid()))
                return c.die_exit_code
            else:
                if now >= next_stats:
                    next_stats, last_stats = now + c.stats_interval, self._stats(last_stats)
                self._spin_check()
                try:
                    kind, code = ctx.faults.get(timeout=0.2)
                except queue.Empty:
                    continue
            if kind == "exit":
                return code
            if kind == "silent_exit":
                # a process that ends with no word: no death lines, no uvicorn shutdown (answers in flight
                # are written first, so the Nth request of VSIM_DIE_AFTER_REQUESTS gets its 200)
                ctx.wait_quiet(2.0)
                return c.die_exit_code
            state = self.engine.current_state()
            if kind == "die_first" and state != simengine.DEAD:
                # real 0.32 (fixture 055): the worker dies on the first forward, the request gets its 500,
                # and the server exits 0 at once
                self.engine.set_state(simengine.DEAD)
                self.emit_all(simfail.worker_death_lines(self.fmt))
                ctx.wait_quiet(2.0)
                self.emit_all(simfail.after_worker_death_lines(self.fmt))
                return 0
            if kind == "die" and state != simengine.DEAD:
                self.engine.set_state(simengine.DEAD)
                self.emit_all(simfail.engine_death_lines(self.fmt))
                dead_since = time.monotonic()
            elif kind == "stuck":
                self.engine.stick()

    def _spin_check(self) -> None:
        """VSIM_SPIN_TRIGGER: spin (frozen, a core burning) while the trigger exists and asks for at most the
        running requests; thaw when it goes."""
        path = self.cfg.spin_trigger
        if not path:
            return
        want = _spin_wanted(path)
        if self._spin is not None:
            if want is None:
                self._spin.set()
                self._spin = None
                self.engine.resume()
            return
        if want is not None and self.engine.stick_running(want):
            self._spin = threading.Event()
            threading.Thread(target=_burn_until, args=(self._spin,), daemon=True).start()

    def _strikes(self, fault_at: float | None, now: float) -> bool:
        """True when the scripted after-ready fault is due (by time, or by completed request count)."""
        if self.cfg.die_after_requests:
            return self.engine.completed_requests() >= self.cfg.die_after_requests
        return fault_at is not None and now >= fault_at

    def _stats(self, last: tuple[float, float, bool]) -> tuple[float, float, bool]:
        """The periodic `Avg ... throughput` line, printed by vLLM 0.32's rule: unless both this and the last
        period had no throughput. While stuck the values are frozen: one `0.0 tokens/s` line with the stale
        Running count, then silence (seen on the real server). Takes and returns (gen, prompt, busy)."""
        last_gen, last_prompt, was_busy = last
        snap = self.engine.snapshot()
        gen_d, prompt_d = snap["gen"] - last_gen, snap["prompt"] - last_prompt
        busy = bool(gen_d or prompt_d)
        if busy or was_busy:
            line = simlog.stats_line(
                self.fmt,
                prompt_tps=prompt_d / self.cfg.stats_interval,
                gen_tps=gen_d / self.cfg.stats_interval,
                running=int(snap["running"]),
                waiting=int(snap["waiting"]),
                kv_pct=100 * snap["kv"],
            )
            self.emit(line)
        return snap["gen"], snap["prompt"], busy

    def shutdown(self, signame: str, server: ThreadingHTTPServer, ctx: simhttp.Ctx) -> int:
        """SIGTERM/SIGINT after ready: abort, or drain for up to --shutdown-timeout seconds; exit 0."""
        c = self.cfg
        self.emit_all(
            simfail.shutdown_lines(self.fmt, signame, c.shutdown_timeout, self.engine.inflight(), os.getpid())
        )
        if c.shutdown_timeout > 0 and self.engine.current_state() != simengine.DEAD:
            if self.engine.current_state() != simengine.STUCK:  # a frozen engine core drains nothing
                self.engine.set_state(simengine.DRAINING)
            deadline = time.monotonic() + c.shutdown_timeout
            self.engine.wait_idle(c.shutdown_timeout)
            ctx.wait_quiet(max(0.0, min(2.0, deadline - time.monotonic() + 1.0)))
        self.engine.set_state(simengine.DEAD)  # aborts whatever is still in flight
        self.emit_all(simfail.shutdown_done_lines(self.fmt, os.getpid()))
        server.socket.close()
        return 0

    def run(self) -> int:
        c = self.cfg
        signal.signal(signal.SIGTERM, self._raise_interrupt)
        signal.signal(signal.SIGINT, self._raise_interrupt)
        ctx = simhttp.Ctx(
            fmt=self.fmt,
            engine=self.engine,
            served=c.served,
            model=c.model,
            max_model_len=c.max_model_len,
            api_keys=list(c.api_keys),
            gen_seconds=c.gen_seconds,
            max_tokens_cap=c.max_tokens_default,
            cache=simengine.CacheInfo(c.kv_tokens // 16, c.kv_tokens, c.max_model_len, c.flavor == "v0_32"),
            emit=self.emit,
            answers=c.answers,
            die_on_first_request=c.scenario == "die_on_first_request",
        )
        server = simhttp.QuietThreadingHTTPServer(
            (c.host, c.port), simhttp.make_handler(ctx), bind_and_activate=False
        )
        try:
            server.server_bind()  # bound now, listening only at ready: connections are refused while loading
            code = self.startup()
            if code is not None:
                return code
            signal.signal(signal.SIGTERM, self._flag_signal)
            signal.signal(signal.SIGINT, self._flag_signal)
        except KeyboardInterrupt:
            self.emit_all(simfail.interrupted_lines(self.fmt, self.pending_signal or "SIGINT"))
            return 130
        server.server_activate()
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True).start()
        self.emit(simlog.server_start_lines(self.fmt, "", os.getpid())[-1])
        return self.serve(server, ctx)


def main(argv: list[str] | None = None) -> int:
    env = dict(os.environ)
    seed = env.get("VSIM_SEED", "").strip()
    rng = random.Random(seed) if seed else random.Random()  # noqa: S311 - simulation, not crypto
    try:
        cfg = load_config(list(sys.argv[1:] if argv is None else argv), env, rng)
    except ArgumentError as exc:  # as vLLM's argparse prints it (the real usage block is ~300 lines)
        args = list(sys.argv[1:] if argv is None else argv)
        prog = "vllm serve" if args[:1] == ["serve"] else "api_server.py"
        print(f"usage: {prog} [-h] [options] [model_tag]\n{prog}: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except UsageError as exc:
        print(f"vllm_sim: error: {exc}", file=sys.stderr, flush=True)
        return 2
    return Sim(cfg, rng).run()


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
