"""The frontier command on a tiny task model: every point complete, consistent rules."""

import csv
import json

import pytest
import torch

from kernels.engine import Engine
from kernels.offline import frontier, tasks
from kernels.offline.evaluate_task import solve
from kernels.offline.train import save_model, train
from kernels.rules import QExit
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
    assert len(result["points"]) == n_rules * 5
    assert {p["policy"] for p in result["points"]} == {
        "best-available",
        "select",
        "recompute-kv",
        "exit-kv",
        "first-loop-kv",
    }
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
    assert len(rows) == len(stored["points"]) == len(frontier.rules(frontier.Sweep(), 3)) * 5
    assert rows[0].keys() == set(frontier.FIELDS)
    assert {p["policy"] for p in stored["oracle"]} == set(frontier.POLICIES)


def test_depth_only_refreshes_the_depth_sections_and_keeps_the_points(model_dir, result):
    # given a stored frontier whose depth sections are gone
    path = model_dir / "frontier.json"
    frontier.write(result, path)
    stored = json.loads(path.read_text())
    for key in ("oracle", "calibration", "policies", "settling"):
        stored.pop(key, None)
    path.write_text(json.dumps(stored))

    # when
    frontier.main([str(model_dir), "--depth-only"])

    # then the points are the stored ones, and the depth sections are back for 24 sequences
    again = json.loads(path.read_text())
    assert again["points"] == stored["points"]
    assert again["settling"]["positions"] == int(
        frontier.heldout_data(model_dir, _loaded(model_dir), 24).mask.sum()
    )
    assert len(again["calibration"]) == len(frontier.rules(frontier.Sweep(), 3))


# -- how much depth was needed: settling loops, the oracle, calibration -----------------------
def _loaded(model_dir):
    from kernels.checkpoint import load_checkpoint

    return load_checkpoint(model_dir, device="cpu")


@pytest.fixture(scope="module")
def depth(model_dir):
    loaded = _loaded(model_dir)
    heldout = frontier.heldout_data(model_dir, loaded, 24)
    return loaded, heldout, frontier.depth_needed(loaded, heldout, SWEEP, q=0.5, batch=8)


def test_the_oracle_exits_each_position_at_its_settling_loop(depth):
    # given the settling loops of the held-out data, from every loop's top-1
    loaded, heldout, found = depth
    settle, full = frontier.settling_loops(loaded, heldout.ids, batch=8)

    # when the engine runs the oracle (best-available), and each position is prefilled
    # alone at its settling loop with a fixed rule: exit = settle
    run = solve(loaded, heldout.ids, heldout.mask, QExit(1.0), batch=8, planned=settle)

    # then each scored position exited at its settling loop, and the point is that run
    assert torch.equal(run["exit"], settle[heldout.mask].view(len(settle), -1))
    (oracle,) = [p for p in found["oracle"] if p["policy"] == "best-available"]
    assert oracle["avg_exit"] == round(settle[heldout.mask].float().mean().item(), 3)
    assert oracle["executed_fraction"] == round(run["executed_fraction"], 4)
    assert oracle["accuracy"] == heldout.accuracy(run)
    # and a settling loop is where the top-1 stops changing: exiting there under select
    # writes full depth's top-1 (checked position by position on one sequence)
    engine = Engine(loaded.model, QExit(1.0), "select", top_k=1)
    trace = engine.prefill(heldout.ids[:1, :-1]).trace
    assert trace is not None
    for position, loop in enumerate(settle[0].tolist()):
        top1 = trace.top_ids[:, position, 0].tolist()
        assert top1[loop - 1 :] == [top1[-1]] * (len(top1) - loop + 1)
        assert loop == 1 or top1[loop - 2] != top1[-1]
    assert torch.equal(full[0], trace.top_ids[-1, :, 0])


def test_the_oracle_agrees_with_full_depth_exactly_under_select_and_below_when_skipping(depth):
    _, _, found = depth
    oracle = {p["policy"]: p for p in found["oracle"]}

    assert set(oracle) == set(SWEEP.policies)
    assert oracle["select"]["agreement"] == 1.0
    assert oracle["select"]["executed_fraction"] == 1.0
    for policy in ("best-available", "recompute-kv", "exit-kv", "first-loop-kv"):
        assert 0 <= oracle[policy]["agreement"] <= 1.0
        assert oracle[policy]["executed_fraction"] < 1.0
    # and "how far below" is the share of scored positions whose top-1 full depth writes
    loaded, heldout, _ = depth
    settle, full = frontier.settling_loops(loaded, heldout.ids, batch=8)
    run = solve(
        loaded, heldout.ids, heldout.mask, QExit(1.0), policy="exit-kv", batch=8, planned=settle
    )
    agree = (run["pred"] == full[heldout.mask].view(len(full), -1)).float().mean().item()
    assert oracle["exit-kv"]["agreement"] == round(agree, 4)


def test_calibration_shares_add_up_and_match_a_direct_count(depth):
    # given the tiny task model's calibration rows and its settling loops
    loaded, heldout, found = depth
    settle, full = frontier.settling_loops(loaded, heldout.ids, batch=8)
    b = len(settle)
    settle, full = settle[heldout.mask].view(b, -1), full[heldout.mask].view(b, -1)

    for row in found["calibration"]:
        # then the shares add up to 1 over every scored position
        assert row["after"] + row["at"] + row["before"] == row["positions"] == settle.numel()
        total = row["after_share"] + row["at_share"] + row["before_share"]
        assert total == pytest.approx(1.0, abs=1e-12)
        # and match a count made directly from the rule's own run
        rule = dict((s, r) for r, s in frontier.rules(SWEEP, 3))[row["setting"]]
        run = solve(loaded, heldout.ids, heldout.mask, rule, batch=8)
        exits = run["exit"]
        assert row["after"] == int((exits > settle).sum())
        assert row["before"] == int((exits < settle).sum())
        assert row["wasted_loops"] == int((exits - settle).clamp(min=0).sum())
        changed = (exits < settle) & (run["pred"] != full)
        assert row["before_changed"] == int(changed.sum())
        # and by difficulty (hops) they count the positions that have one (not newlines)
        levels = tasks.position_levels(heldout.problems)
        for name, sel in (("after", exits > settle), ("at", exits == settle)):
            assert sum(level[name] for level in row["by_level"]) == int((sel & (levels >= 0)).sum())


def test_a_fixed_rule_at_one_loop_never_exits_after_settling(depth):
    _, _, found = depth
    (one,) = [row for row in found["calibration"] if row["setting"] == "k=1"]
    (full,) = [row for row in found["calibration"] if row["setting"] == "q=1.0"]

    assert one["after"] == 0 and one["wasted_loops"] == 0
    assert full["before"] == 0  # full depth never exits before the last loop
    assert [row["default"] for row in found["calibration"] if row["default"]]
