"""The frontier command on a tiny task model: every point complete, consistent rules."""

import csv
import json

import pytest
import torch

from kernels.offline import frontier
from kernels.offline.train import save_model, train
from tests.kernels.test_train import tiny_addition

SWEEP = frontier.Sweep(qs=(0.2, 0.5, 0.8, 1.0), kl_thresholds=(1e-2,), act_eps=(0.1,))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("frontier")
    run = train(tiny_addition(tmp, stage1_steps=30, stage2_steps=20))
    yield save_model(run)
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def result(model_dir):
    from kernels.checkpoint import load_checkpoint

    loaded = load_checkpoint(model_dir, device="cpu")
    heldout = frontier.heldout_data(model_dir, loaded, 24)
    return frontier.frontier(loaded, heldout, SWEEP, batch=8, repeats=REPEATS)


REPEATS = 3


def _point(result, rule, setting, policy="best-available"):
    (point,) = [
        p
        for p in result["points"]
        if (p["rule"], p["setting"], p["policy"]) == (rule, setting, policy)
    ]
    return point


def test_every_point_has_every_field_for_every_rule_and_policy(result):
    n_rules = len(SWEEP.qs) + len(SWEEP.kl_thresholds) + 3 + 1 + len(SWEEP.act_eps)  # T = 3

    assert result["metric"] == "exact match" and result["loops"] == 3
    assert len(result["points"]) == n_rules * 3
    assert {p["policy"] for p in result["points"]} == {"best-available", "select", "recompute-kv"}
    assert {p["rule"] for p in result["points"]} == {
        "q-exit",
        "convergence",
        "fixed",
        "ponder",
        "act",
    }
    for p in result["points"]:
        assert set(p) == set(frontier.FIELDS)
        assert 0 <= p["accuracy"] <= 1 and 1 <= p["avg_exit"] <= 3
        assert 0 < p["executed_fraction"] <= 1 and p["latency_ratio"] > 0
        assert p["decode_ms_per_token"] > 0 and p["decode_ratio"] > 0
        assert p["peak_kv_bytes"] > 0


def test_latency_ratios_are_medians_of_repeats_with_their_range(result):
    # full depth is each repeat's baseline: its own ratio is 1, with no spread
    full = _point(result, "q-exit", "q=1.0")
    assert [
        full[f"{kind}_ratio{end}"]
        for kind in ("latency", "decode")
        for end in ("", "_low", "_high")
    ] == [1.0] * 6
    assert result["repeats"] == REPEATS and f"median of {REPEATS} repeats" in result["latency"]
    for p in result["points"]:
        for kind in ("latency", "decode"):
            assert p[f"{kind}_ratio_low"] <= p[f"{kind}_ratio"] <= p[f"{kind}_ratio_high"], p


def test_q_one_is_fixed_full_depth(result):
    for policy in SWEEP.policies:
        full, fixed = (
            _point(result, "q-exit", "q=1.0", policy),
            _point(result, "fixed", "k=3", policy),
        )
        for key in ("accuracy", "loss", "avg_exit", "executed_fraction", "peak_kv_bytes"):
            assert full[key] == fixed[key], (policy, key)
        assert full["executed_fraction"] == 1.0


def test_executed_fraction_rises_with_q(result):
    fractions = [_point(result, "q-exit", f"q={q}")["executed_fraction"] for q in SWEEP.qs]
    depths = [_point(result, "q-exit", f"q={q}")["avg_exit"] for q in SWEEP.qs]

    assert fractions == sorted(fractions) and fractions[0] < fractions[-1]
    assert depths == sorted(depths)
    # select computes every loop whatever the rule
    assert _point(result, "q-exit", "q=0.2", "select")["executed_fraction"] == 1.0


def test_command_writes_json_and_csv_into_the_model_directory(model_dir, result):
    frontier.main([str(model_dir), "--size", "8"])

    stored = json.loads((model_dir / "frontier.json").read_text())
    with (model_dir / "frontier.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(stored["points"]) == len(frontier.rules(frontier.Sweep(), 3)) * 3
    assert rows[0].keys() == set(frontier.FIELDS)
