"""The KV-pool lottery logic with the field sequence (1,013,816 / 557,599 / 557,599 tokens), plain values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from supervisor.adapters.store.state import Store
from supervisor.core.spec.secrets import secret_env_names
from supervisor.core.vllm.kv_pool import (
    KvVerdict,
    bad_streak,
    baseline,
    config_fingerprint,
    earlier_draws,
    ledger_fields,
    redraw_decision,
    redraw_message,
    sparkline,
    verdict,
)

BIG, SMALL = 1_013_816, 557_599
FP = "0123456789ab"
IMAGE = "sha256:4f1c0d8e9a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d"
CMD = ("vllm", "serve", "/models/q", "--gpu-memory-utilization", "0.73", "--max-num-seqs", "8")


def rows_of(tokens: list[int | None], fp: str = FP, outcome: str = "ready") -> list[dict[str, Any]]:
    """Ledger rows, oldest first, one per start (container ids c0, c1, ...)."""
    return [
        {"ts": 1000.0 + i, "profile": "m", "outcome": outcome if t is not None else "failed_oom",
         "kv_tokens": t, "container_id": f"c{i}", "fingerprint": fp}
        for i, t in enumerate(tokens)
    ]  # fmt: skip


def verdicts(tokens: list[int]) -> list[tuple[int | None, str | None]]:
    """(baseline, message) per start of a sequence, judged as the daemon would after writing its row."""
    rows = rows_of(list(tokens))
    out: list[tuple[int | None, str | None]] = []
    for i, t in enumerate(tokens):
        recent = earlier_draws(rows, FP, exclude=f"c{i}")
        base = baseline(rows, FP, exclude=f"c{i}")
        v = verdict(t, base, None, 20.0, bad_streak(recent, base, 20.0))
        out.append((base, v.message if v else None))
    return out


def test_field_sequence_three_big_then_small() -> None:
    """Three 1,013,816 pools then 557,599: only the 4th warns, -45 % against its earlier starts."""
    assert verdicts([BIG, BIG, BIG, SMALL]) == [
        (None, None),
        (BIG, None),
        (BIG, None),
        (BIG, "KV pool lottery: 557,599 tokens, baseline 1,013,816 (-45 %)"),
    ]


def test_field_sequence_big_small_small_small_alerts_on_every_bad_draw() -> None:
    """1,013,816 then 557,599 three times: each bad draw alerts against the best earlier one (-45 %) and
    says how many bad starts came in a row (a median baseline went quiet from the 4th start on)."""
    assert verdicts([BIG, SMALL, SMALL, SMALL]) == [
        (None, None),
        (BIG, "KV pool lottery: 557,599 tokens, baseline 1,013,816 (-45 %)"),
        (BIG, "KV pool lottery: 557,599 tokens, baseline 1,013,816 (-45 %); 2 bad starts in a row"),
        (BIG, "KV pool lottery: 557,599 tokens, baseline 1,013,816 (-45 %); 3 bad starts in a row"),
    ]


def test_a_good_draw_ends_the_streak() -> None:
    assert bad_streak((SMALL, SMALL, BIG, SMALL), BIG, 20.0) == 2
    assert bad_streak((BIG, SMALL), BIG, 20.0) == 0
    assert bad_streak((SMALL,), None, 20.0) == 0


def test_baseline_ignores_current_later_failed_and_other_configs() -> None:
    """Only earlier draws of the same fingerprint count; failures, later rows and other configs do not."""
    rows = rows_of([BIG, None, SMALL, 2_000_000])
    rows[2]["fingerprint"] = "other"
    assert baseline(rows, FP, exclude="c2") == BIG  # c1 failed, c2 is the current, c3 is later
    assert baseline(rows, FP) == 2_000_000  # current row not written yet: all are earlier (the best)
    assert baseline(rows, "other") == SMALL
    assert baseline(rows, None, exclude="c3") == BIG  # None: any fingerprint
    assert baseline(rows, FP, exclude="c0") is None
    assert baseline([], FP) is None


def test_baseline_counts_redrawn_and_start_id_and_window() -> None:
    """A redrawn start is a draw; start_id beats container_id; only the newest `window` draws count."""
    rows = rows_of([SMALL, SMALL, BIG, BIG, BIG])
    rows[0]["outcome"] = "redrawn"
    rows[4]["start_id"] = "s-now"
    assert baseline(rows, FP, exclude="s-now") == BIG
    assert earlier_draws(rows, FP, exclude="s-now") == (BIG, BIG, SMALL, SMALL)  # newest first
    assert baseline(rows, FP, exclude="s-now", window=2) == BIG
    assert baseline(rows[:2], FP, window=1) == SMALL  # a lucky draw ages out of the window
    rows[1]["kv_tokens"] = True  # junk in an old file is skipped
    assert baseline(rows, FP, exclude="s-now", window=3) == BIG


def test_rows_without_new_fields_match_only_without_fingerprint() -> None:
    """Older ledger rows (no fingerprint) start no baseline for a fingerprinted config, but count for None."""
    rows = [{"ts": 1.0, "profile": "m", "outcome": "ready", "kv_tokens": BIG}]
    assert baseline(rows, FP) is None
    assert baseline(rows, None) == BIG


def test_judge_floor_drop_and_quiet_cases() -> None:
    """The floor wins and names the baseline; a drop within warn_drop_pct or a growth is quiet."""
    floor = verdict(SMALL, BIG, 900_000, 20.0)
    assert floor is not None
    assert floor.change_pct == pytest.approx(-45.0, abs=0.01)
    assert floor == KvVerdict(
        "below_floor",
        SMALL,
        BIG,
        900_000,
        floor.change_pct,
        "KV pool below floor: 557,599 tokens, floor 900,000, baseline 1,013,816 (-45 %)",
    )
    assert floor.event == "kv_pool.below_floor"
    first = verdict(SMALL, None, 900_000, 20.0)
    assert first is not None
    assert first.message == "KV pool below floor: 557,599 tokens, floor 900,000"
    drop = verdict(SMALL, BIG, 500_000, 20.0)
    assert drop is not None
    assert (drop.kind, drop.event) == ("drop", "kv_pool.lottery")
    assert verdict(SMALL, BIG, None, 50.0) is None  # 45 % is within 50 %
    assert verdict(800, 1000, None, 20.0) is None  # exactly 20 % is not "more than"
    assert verdict(799, 1000, None, 20.0) is not None
    assert verdict(BIG, SMALL, None, 20.0) is None  # a bigger pool never warns
    assert verdict(None, BIG, 900_000, 20.0) is None
    assert verdict(SMALL, None, None, 20.0) is None  # first start, no floor
    assert verdict(SMALL, BIG, 0, 100.0) is None  # floor 0 and 100 % disable both checks


def test_fingerprint_ignores_env_order_and_secret_values() -> None:
    """Env order and a rotated secret keep the fingerprint; a changed flag, image or secret name do not."""
    env = {"VLLM_USE_V1": "1", "HF_TOKEN": "hf_old", "OPENAI_API_KEY": "k1"}
    secrets = secret_env_names(env)
    assert secrets == {"HF_TOKEN", "OPENAI_API_KEY"}
    fp = config_fingerprint(IMAGE, CMD, env, secrets)
    assert len(fp) == 12
    assert set(fp) <= set("0123456789abcdef")
    reordered = dict(reversed(list(env.items())))
    assert config_fingerprint(IMAGE, CMD, reordered, secrets) == fp
    rotated = env | {"HF_TOKEN": "hf_new", "OPENAI_API_KEY": "k2"}
    assert config_fingerprint(IMAGE, CMD, rotated, secret_env_names(rotated)) == fp
    assert config_fingerprint(IMAGE, CMD, rotated, ()) != fp  # unmasked, the value counts
    assert config_fingerprint(IMAGE, CMD, env | {"VLLM_USE_V1": "0"}, secrets) != fp
    assert config_fingerprint(IMAGE + "0", CMD, env, secrets) != fp
    other_cmd = (*CMD[:4], "0.74", *CMD[5:])
    assert config_fingerprint(IMAGE, other_cmd, env, secrets) != fp
    renamed = {k if k != "HF_TOKEN" else "HUGGING_FACE_HUB_TOKEN": v for k, v in env.items()}
    assert config_fingerprint(IMAGE, CMD, renamed, secret_env_names(renamed)) != fp


def test_fingerprint_masks_api_key_flag_and_declared_names() -> None:
    """--api-key values in the command and names declared secret are masked."""
    a = config_fingerprint(IMAGE, (*CMD, "--api-key", "sk-1"), {}, ())
    assert a == config_fingerprint(IMAGE, (*CMD, "--api-key", "sk-2"), {}, ())
    b = config_fingerprint(IMAGE, (*CMD, "--api-key=sk-1"), {}, ())
    assert b == config_fingerprint(IMAGE, (*CMD, "--api-key=sk-2"), {}, ())
    assert secret_env_names({"VLLM_API_KEY": "x", "MODEL_AUTH": "y"}, ["MODEL_AUTH"]) == {
        "VLLM_API_KEY",
        "MODEL_AUTH",
    }
    assert secret_env_names({"VLLM_MAX_TOKENS": "8", "KEYBOARD": "us"}) == frozenset()


def test_redraw_decisions() -> None:
    """A pool under min_tokens is redrawn up to max_redraws times in a row, then served with a warning."""
    assert redraw_decision(SMALL, 900_000, 0, 2) == "redraw"
    assert redraw_decision(SMALL, 900_000, 1, 2) == "redraw"
    assert redraw_decision(SMALL, 900_000, 2, 2) == "give_up"
    assert redraw_decision(SMALL, 900_000, 0, 0) == "give_up"
    assert redraw_decision(BIG, 900_000, 2, 2) == "accept"
    assert redraw_decision(900_000, 900_000, 0, 2) == "accept"
    assert redraw_decision(SMALL, None, 0, 2) == "accept"
    assert redraw_decision(None, 900_000, 0, 2) == "accept"
    assert redraw_message("redraw", SMALL, 900_000, 0) == (
        "KV pool redraw 1: 557,599 tokens is below kv_pool.min_tokens 900,000; restarting to draw again"
    )
    assert redraw_message("give_up", SMALL, 900_000, 2) == (
        "KV pool below kv_pool.min_tokens after 2 redraws: 557,599 tokens, minimum 900,000; serving anyway"
    )


def test_field_sequence_with_redraws() -> None:
    """min_tokens 900,000 and max_redraws 2 over the field draws: redraw, redraw, then give up and serve."""
    decisions: list[str] = []
    for redraws, tokens in enumerate([SMALL, SMALL, SMALL]):
        decisions.append(redraw_decision(tokens, 900_000, redraws, 2))
        if decisions[-1] != "redraw":
            break
    assert decisions == ["redraw", "redraw", "give_up"]


def test_ledger_fields_keys() -> None:
    """The extra ledger keys the history view reads."""
    assert ledger_fields(fingerprint=FP, gmu=0.73, image_id=IMAGE, kv_gib=52.1, model_gib=17.3) == {
        "fingerprint": FP,
        "gmu": 0.73,
        "image_id": IMAGE,
        "kv_gib": 52.1,
        "model_gib": 17.3,
    }
    assert ledger_fields(fingerprint=None, gmu=None, image_id=None, kv_gib=None, model_gib=None,
                         start_id="s1")["start_id"] == "s1"  # fmt: skip


def test_sparkline() -> None:
    """Scaled from 0 to the largest; None is a dot; a halved pool is about half height."""
    assert sparkline([BIG, BIG, BIG, SMALL]) == "███▅"
    assert sparkline([BIG, None, SMALL, SMALL]) == "█·▅▅"
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([0, 0]) == "▁▁"
    assert sparkline([None]) == "·"
    assert sparkline([]) == ""


def test_field_sequence_through_the_real_ledger(tmp_path: Path) -> None:
    """Rows appended to a real starts.jsonl (old rows without the new keys first) give the same verdicts."""
    store = Store(tmp_path / "state")
    store.append_start({"profile": "m", "outcome": "ready", "kv_tokens": 2_000_000})  # an old-format row
    for i, tokens in enumerate([BIG, SMALL, SMALL]):
        extra = ledger_fields(fingerprint=FP, gmu=0.73, image_id=IMAGE, kv_gib=None, model_gib=None)
        store.append_start({"profile": "m", "outcome": "ready", "kv_tokens": tokens, "container_id": f"c{i}"}
                           | extra)  # fmt: skip
    rows = store.read_starts("m")
    found = []
    for i, t in enumerate([BIG, SMALL, SMALL]):
        best = baseline(rows, FP, exclude=f"c{i}")
        found.append(verdict(t, best, None, 20.0, bad_streak(earlier_draws(rows, FP, f"c{i}"), best, 20.0)))
    assert [v.message if v else None for v in found] == [
        None,
        "KV pool lottery: 557,599 tokens, baseline 1,013,816 (-45 %)",
        "KV pool lottery: 557,599 tokens, baseline 1,013,816 (-45 %); 2 bad starts in a row",
    ]
