#!/usr/bin/env bash
# One device run, in the order build -> check -> time, so that one GPU
# run gives every number at once. Run from the repository root on a CUDA
# machine (CuPy, pytest; PyTorch for the ConvRBM peer):
#
#   bash benchmarks/device_check.sh OUT_DIR [tests] [detect] [accuracy] [segment] [features]
#
#   tests     `ivote info` (compiles and self-tests a kernel) and every GPU test
#   detect    bench_detect.py: all four sizes with the per-pass profile
#   accuracy  accuracy_detect.py on the GPU (needs the data in .eval_data/)
#   segment   bench_segment.py (GPU and peers)
#   features  bench_convrbm.py: 128^3, 32 filters of 5^3, 9^3 and 13^3, stride 1
#   speed     the GPU tests of components, transfers and segmentation, bench_components.py (1x
#             graph with the pinned-copy sweep, 512^3 mask), bench_segment.py --gpu-only with the
#             library's kernels and with the kernel sweep, then every GPU test (at most 180 s)
#   components  the GPU tests of components and transfers, bench_components.py (1x and 10x graphs,
#             512^3 mask), then the other GPU tests (those `speed` runs first left out; at most 330 s)
#
# Each part writes its table to OUT_DIR/<part>.md and its log to the terminal.
set -uo pipefail
out=${1:?usage: device_check.sh OUT_DIR [parts...]}
shift
mkdir -p "$out"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
parts=${*:-tests detect segment features}
status=0
for part in $parts; do
  echo "=== $part ($(date -u +%H:%M:%S))"
  case $part in
    tests)
      python3 -m ivote.cli info || status=1
      python3 -m pytest tests/gpu tests/core/test_backend.py -q -p no:cacheprovider 2>&1 | tail -15
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
    detect) python3 benchmarks/bench_detect.py --repeat 5 --profile --out "$out/detect.md" || status=1 ;;
    accuracy) python3 benchmarks/accuracy_detect.py --data .eval_data --out "$out/detect_accuracy_gpu.md" || status=1 ;;
    segment) python3 benchmarks/bench_segment.py --out "$out/segment.md" || status=1 ;;
    features)
      python3 benchmarks/bench_convrbm.py --no-numpy --case 128x128x128:9:1 --case 128x128x128:5:1 \
        --case 128x128x128:13:1 --out "$out/features.md" || status=1 ;;
    speed)
      python3 -m ivote.cli info || status=1
      python3 -m pytest tests/gpu/test_components_gpu.py tests/gpu/test_backend_gpu.py tests/gpu/test_segment_gpu.py \
        tests/gpu/test_segment_dim3d_gpu.py tests/gpu/test_segment_connect_gpu.py -q -p no:cacheprovider 2>&1 \
        | tee "$out/speed_tests.txt" | tail -25
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      python3 benchmarks/bench_components.py --no-10x --stage-sweep --repeat 7 --out "$out/components.md" || status=1
      python3 benchmarks/bench_segment.py --gpu-only --out "$out/segment.md" || status=1
      python3 benchmarks/bench_segment.py --gpu-only --march-sweep --out "$out/segment_sweep.md" || status=1
      timeout 180 python3 -m pytest tests/gpu -q -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.txt" | tail -15
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
    components)
      python3 -m pytest tests/gpu/test_components_gpu.py tests/gpu/test_backend_gpu.py \
        tests/gpu/test_segment_connect_gpu.py -q -p no:cacheprovider 2>&1 | tee "$out/components_tests.txt" | tail -25
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      python3 benchmarks/bench_components.py --repeat 7 --out "$out/components.md" || status=1
      timeout 330 python3 -m pytest tests/gpu -q -p no:cacheprovider --ignore=tests/gpu/test_components_gpu.py \
        --ignore=tests/gpu/test_backend_gpu.py --ignore=tests/gpu/test_segment_gpu.py \
        --ignore=tests/gpu/test_segment_dim3d_gpu.py --ignore=tests/gpu/test_segment_connect_gpu.py 2>&1 \
        | tee "$out/gpu_tests.txt" | tail -15
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
    *) echo "unknown part: $part"; status=1 ;;
  esac
done
exit $status
