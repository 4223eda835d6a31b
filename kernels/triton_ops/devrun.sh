#!/usr/bin/env bash
# One development pass on a GPU machine, in about 200 s: GPU tests and parallel compilation of every
# tile config side by side, then the timed sweep alone on the GPU. Usage: devrun.sh OUTDIR
out=${1:?usage: devrun.sh OUTDIR}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$out/gpu.txt" 2>&1
(timeout 70 python3 -m pytest -v -m gpu tests/test_triton_ops.py -p no:cacheprovider > "$out/pytest_gpu.log" 2>&1
 echo "pytest exit $?" >> "$out/pytest_gpu.log") &
tests=$!
timeout 70 python3 -m kernels.triton_ops.sweep --out "$out" --precompile 10 --precisions > "$out/precompile.log" 2>&1
echo "precompile exit $? ($(grep -c '^compiled' "$out/precompile.log") compiled, $(grep -c FAILED "$out/precompile.log") failed)"
grep FAILED "$out/precompile.log" | cut -c1-300 | head -5
wait $tests
grep -E "PASSED|FAILED|ERROR|exit" "$out/pytest_gpu.log" | sed 's/tests\/test_triton_ops.py:://' | cut -c1-160 | head -40
timeout 100 python3 -m kernels.triton_ops.sweep --out "$out" --budget-s 6 --precisions > "$out/sweep_stdout.log" 2>&1
echo "sweep exit $?"
grep -E "FAILED|raised" "$out/sweep.log" | cut -c1-250 | head -8
grep -E "^matmul (tf32|bf16)|copy bandwidth" "$out/sweep.log"
grep -A14 '^$' "$out/sweep.log" | head -16
