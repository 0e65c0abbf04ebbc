#!/usr/bin/env bash
# The GPU checks, in one run that fits a short lease (under 8 minutes on one H200):
#   1. the CUDA runtime tests (transfers, fills, strided copies, allocator reuse);
#   2. the op harness with its CUDA pass: every case of every op run on the GPU against the CPU,
#      and the nn kernels' own checks (bf16/f16 through the launchers, deterministic gradients);
#   3. the NCCL communicator suite on the GPUs present (needs mpirun);
#   4. bf16 matmul TFLOP/s against the device's peak (tools/bench/bench_cuda).
# GPT training steps on the GPU (tokens/s, MFU) are not measured: merak_train does not yet run
# its model on the GPU, which the table says.
#
#   tools/gpu_check.sh                 on a machine set up with tools/setup.sh: builds, then runs
#   tools/gpu_check.sh --bundle DIR    runs binaries made elsewhere by tools/gpu_bundle.sh
set -u
cd "$(dirname "$0")/.."
bundle=""
[ "${1:-}" = "--bundle" ] && bundle="$2"

if [ -n "$bundle" ]; then
  bin="$bundle/bin"
  # CUDA's libraries from the toolkit, or from the nvidia-* Python wheels where those hold them.
  libs="$bundle/lib:/usr/local/cuda/lib64"
  for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for d in "$site"/nvidia/*/lib; do [ -d "$d" ] && libs="$libs:$d"; done
  done
  export LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}"
else
  checks=(tests/cuda/cuda_test tests/cuda/nn_kernels_test tests/op_harness_test
          tests/comm/comm_suite_nccl tools/bench/bench_cuda)
  targets=()
  for t in "${checks[@]}"; do targets+=("//$(dirname "$t"):$(basename "$t")"); done
  bazel build --config=ci "${targets[@]}" || exit 1
  mkdir -p .gpu_check
  for t in "${checks[@]}"; do ln -sf "$PWD/bazel-bin/$t" .gpu_check/; done
  bin=".gpu_check"
fi
nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not available"

status=0
row() { printf '%-34s %s\n' "$1" "$2"; }
summary=()

echo "== CUDA runtime tests"
runtime=$("$bin/cuda_test" 2>&1); rc=$?
echo "$runtime"
if [ "$rc" -ne 0 ]; then summary+=("$(row 'CUDA runtime tests' FAIL)"); status=1
elif grep -q 'SKIPPED (no GPU' <<< "$runtime"; then
  summary+=("$(row 'CUDA runtime tests' 'SKIPPED: no GPU')"); status=1
else summary+=("$(row 'CUDA runtime tests' pass)"); fi

echo "== op harness (CPU and CUDA)"
harness=$("$bin/op_harness_test" 2>&1); rc=$?
echo "$harness" | tail -40
cuda_line=$(grep '^op harness: CUDA' <<< "$harness")
if [ "$rc" -eq 0 ] && grep -q 'run on the GPU' <<< "$cuda_line"; then
  summary+=("$(row 'op harness on CUDA' "pass: ${cuda_line#op harness: CUDA: }")")
else
  summary+=("$(row 'op harness on CUDA' "FAIL (exit $rc): ${cuda_line#op harness: CUDA: }")")
  status=1
fi

echo "== CUDA nn kernels"
nn=$("$bin/nn_kernels_test" 2>&1); rc=$?
echo "$nn" | tail -20
if [ "$rc" -ne 0 ]; then summary+=("$(row 'CUDA nn kernels' FAIL)"); status=1
elif grep -q 'SKIPPED (no GPU' <<< "$nn"; then
  summary+=("$(row 'CUDA nn kernels' 'SKIPPED: no GPU')"); status=1
else summary+=("$(row 'CUDA nn kernels' pass)"); fi

echo "== NCCL communicator suite"
if command -v mpirun > /dev/null; then
  if bash tests/comm/comm_nccl_test.sh "$bin/comm_suite_nccl"; then
    summary+=("$(row 'NCCL communicator suite' pass)")
  else
    summary+=("$(row 'NCCL communicator suite' FAIL)"); status=1
  fi
else
  summary+=("$(row 'NCCL communicator suite' 'not run: no mpirun on this machine')")
fi

echo "== bf16 matmul"
bench=$("$bin/bench_cuda" 2>&1); rc=$?
echo "$bench"
[ "$rc" -ne 0 ] && status=1
summary+=("$(row 'bf16 matmul' "see the table above (exit $rc; target >= 70% of peak)")")
summary+=("$(row 'GPT-2 124M / GPT 1.3B steps (bf16)' 'not run: merak_train has no GPU path yet')")

echo
echo "== GPU check summary"
printf '%s\n' "${summary[@]}"
exit "$status"
