#!/usr/bin/env bash
# Builds the GPU checks here (no GPU needed) and gathers them for a machine that has a GPU but
# not this build's environment: the binaries, and the shared libraries they need beyond the C
# runtime and CUDA's own (which the GPU machine has). Prints the bundle's size.
#
#   tools/gpu_bundle.sh [DIR]     (default .gpu_bundle, ignored by git)
# Then on the GPU machine: tools/gpu_check.sh --bundle DIR
set -eu
cd "$(dirname "$0")/.."
out="${1:-.gpu_bundle}"
checks=(tools/train/merak_train tests/cuda/cuda_test tests/cuda/nn_kernels_test
        tests/cuda/optim_kernels_test tests/cuda/tp_kernels_test
        tests/op_harness_test tests/comm/comm_suite_nccl tools/bench/bench_cuda)
targets=()
for t in "${checks[@]}"; do targets+=("//$(dirname "$t"):$(basename "$t")"); done
bazel build --config=ci "${targets[@]}"
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
for t in "${checks[@]}"; do
  cp -L "bazel-bin/$t" "$out/bin/"
  # Every resolved library outside glibc, libstdc++/libgcc and CUDA's directory.
  ldd "bazel-bin/$t" | awk '/=> \// {print $3}' |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux)[.-]|/usr/local/cuda' |
    xargs -r -I{} cp -Ln {} "$out/lib/"
done
du -sh "$out"
