import json

import torch

from kernels.offline import bench

TINY = bench.Workload(
    prefill_rows=2,
    prefill_len=24,
    decode_prompt=8,
    decode_new=3,
    batch=2,
    requests=4,
    batch_prompt=6,
    batch_new=3,
    qs=(1.0, 0.6),
    repeats=1,
)


def test_every_row_carries_savings_next_to_fidelity():
    # given
    loaded = bench.random_model("test-32", torch.device("cpu"), torch.float32)

    # when
    result = bench.bench_model("random test-32", loaded, TINY, real=False)

    # then
    rows = {(r["q"], r["policy"]): r for r in result["rows"]}
    assert set(rows) == {(q, p) for q in TINY.qs for p in bench.POLICIES}
    full = rows[bench.BASELINE]
    assert full["prefill_executed_fraction"] == 1.0 and full["top1_agreement"] == 1.0
    assert full["prefill_time_ratio"] == 1.0 and full["prefill_kv_ratio"] == 1.0
    skipped = rows[0.6, "best-available"]
    assert skipped["prefill_executed_fraction"] < 1.0
    assert skipped["prefill_flops"] < full["prefill_flops"]
    assert skipped["prefill_peak_kv_bytes"] < full["prefill_peak_kv_bytes"]
    assert rows[0.6, "select"]["prefill_executed_fraction"] == 1.0
    for row in result["rows"]:
        for key in ("avg_exit_loop", "decode1_tokens_per_s", "decode8_tokens_per_s", "loglik_diff"):
            assert row[key] == row[key]  # present and not NaN
    assert any("prefill kept" in line for line in result["goals"])
    # self-speculation at every draft depth below T = 2, against plain in the same run
    (spec,) = result["speculation"]
    assert spec["draft_loops"] == 1 and spec["identical"]
    assert 0 <= spec["acceptance_rate"] <= 1 and spec["decode1_speedup"] > 0
    assert spec["flops_vs_plain"] > 0 and spec["peak_kv_vs_plain"] > 0
    json.dumps(result)


def test_real_text_comes_from_the_standard_library_offline(ouro_tiny):
    rows = bench.token_rows(ouro_tiny, 2, 50, 0, real=True)

    assert [len(r) for r in rows] == [50, 50]
    assert ouro_tiny.tokenizer.decode(rows[0]).isprintable() or "\n" in ouro_tiny.tokenizer.decode(
        rows[0]
    )
    assert rows == bench.token_rows(ouro_tiny, 2, 50, 0, real=True)


def test_the_command_writes_its_table_and_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bench, "QUICK", TINY)
    monkeypatch.setattr(bench, "SHIPPED_MODEL", tmp_path / "absent")
    out = tmp_path / "bench.json"

    code = bench.main(["--quick", "--random", "test-32", "--json", str(out), "--device", "cpu"])

    assert code == 0
    report = json.loads(out.read_text())
    assert report["threads"] == 1 and report["models"][0]["model"] == "random test-32"
    assert "best-available" in capsys.readouterr().out


def test_overhead_bound_models_are_flagged_and_bench_512_is_not():
    tiny = bench.random_model("ouro-tiny", torch.device("cpu"), torch.float32)
    assert any("not meaningful" in line for line in bench.notes(tiny))
    big = bench.random_model("bench-512", torch.device("cpu"), torch.float32)
    assert bench.notes(big) == []
