#!/usr/bin/env bash
# The engine on a GPU, in at most 8 minutes on one H200: the CUDA tests, then the engine
# bench on a real-shape Ouro (random weights made on the device), one JSON.
#
#   benchmarks/device.sh [--device cuda] [--preset ouro-1.4b] [--dtype DTYPE]
#                        [--json device.json] [--quick]
#
# (DTYPE: bfloat16 on CUDA, float32 elsewhere, unless given)
#
# CI runs it as a dry run on CPU: benchmarks/device.sh --device cpu --preset bench-512 --quick
# kernels/ needs only torch and safetensors (and the tests pytest): it runs with the
# machine's own python3 (PYTHON to choose another).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
device=cuda preset=ouro-1.4b dtype=() json=device.json quick=()
while (($#)); do
    case $1 in
        --device) device=$2; shift 2 ;;
        --preset) preset=$2; shift 2 ;;
        --dtype) dtype=(--dtype "$2"); shift 2 ;;
        --json) json=$2; shift 2 ;;
        --quick) quick=(--quick); shift ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
# the CUDA tests (marked gpu; they skip themselves without CUDA), from the files that
# hold them: they need neither the suite's Django plugin and top-level conftest nor the
# training tests' tokenizers and transformers (which a bare GPU machine lacks)
timeout 180 "$PYTHON" -m pytest -m gpu -q -p no:cacheprovider -p no:django \
    --confcutdir tests/kernels tests/kernels/test_engine.py tests/kernels/test_gpu.py
timeout 360 "$PYTHON" -m kernels.offline.device_bench --device "$device" --preset "$preset" \
    --json "$json" "${dtype[@]}" "${quick[@]}"
