"""``benchmarks/device.sh`` runs on CPU as a dry run (its CUDA tests skip), so the script
a GPU runs cannot rot between the times one is lent."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.slow
def test_the_device_script_dry_runs_on_cpu_and_writes_its_figures(tmp_path):
    out = tmp_path / "device.json"
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}

    done = subprocess.run(
        [str(ROOT / "benchmarks" / "device.sh"), "--device", "cpu", "--preset", "bench-512"]
        + ["--quick", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert (report["device"], report["preset"], report["dtype"]) == ("cpu", "bench-512", "float32")
    rows = {row["q"]: row for row in report["kept"]}
    assert set(rows) == {1.0, 0.7}
    for key in ("prefill_kept", "decode1_kept", "decode2_kept", "decode4_kept"):
        assert key in rows[0.7]
    assert rows[0.7]["prefill_executed_fraction"] < 1.0
    assert report["continuous_vs_lockstep"]["ratio"]["median"] > 0
    assert report["host_reads_per_step"]["min"] >= 1
    (speculation,) = report["speculation"]  # draft depth 1, against plain in the same run
    assert speculation["draft_loops"] == 1 and speculation["identical"]
    assert 0 <= speculation["acceptance_rate"] <= 1 and speculation["decode1_speedup"] > 0
