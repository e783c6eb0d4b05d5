#!/usr/bin/env bash
# One GPU batch: the GPU tests in a fresh process (the standard order, then the
# distributed and reliability GPU tests first, an order that once failed), then
# detection accuracy on the GPU with the per-image labels radius and radius="auto".
# Needs the evaluation data in .eval_data/ and the Dask wheels in .whl/ (carry both).
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1
echo "=== order that used to fail $(date -u +%T)"
python3 -m pytest -p no:randomly -q -p no:cacheprovider tests/gpu/test_distributed_detect_gpu.py tests/gpu/test_rel_gpu.py 2>&1 | tail -4
echo "=== full GPU suite $(date -u +%T)"
python3 -m pytest -q -p no:cacheprovider tests/gpu tests/core/test_backend.py 2>&1 | tail -8
echo "=== accuracy $(date -u +%T)"
python3 benchmarks/accuracy_detect.py --data .eval_data --backend cupy --modes labels,auto --out "$out/detect_accuracy_gpu.md" 2>&1 | tail -25
echo "=== done $(date -u +%T)"
