#!/usr/bin/env bash
# Builds the GPU checks here (no GPU needed) and gathers them for a machine that has a GPU but
# not this build's environment: the binaries, the shared libraries they need beyond the C
# runtime and CUDA's own (which the GPU machine has), and Open MPI's runtime (launcher, daemon,
# plugins, help texts, PMIx) for the checks that run under mpirun. Binaries and our libraries
# are stripped, and the whole is packed into one gzip'd tar (DIR.tar.gz), which must stay under
# MAX_MB (default 56): a lent GPU machine takes at most 64 MiB of files with the working tree.
#
#   tools/gpu_bundle.sh [DIR]     (default .gpu_bundle, ignored by git, as is DIR.tar.gz)
# Then on the GPU machine: tools/gpu_check.sh --bundle DIR.tar.gz (or DIR, unpacked)
set -eu
cd "$(dirname "$0")/.."
out="${1:-.gpu_bundle}"
out="${out%/}"
max_mb="${MAX_MB:-56}"
checks=(tools/train/merak_train tests/cuda/cuda_test tests/cuda/nn_kernels_test
        tests/cuda/optim_kernels_test tests/cuda/tp_kernels_test
        tests/op_harness_test tests/comm/comm_suite_nccl tools/bench/bench_cuda
        tools/generate/merak_generate)
targets=()
for t in "${checks[@]}"; do targets+=("//$(dirname "$t"):$(basename "$t")"); done
bazel build --config=ci "${targets[@]}"
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
# Every resolved library outside glibc, libstdc++/libgcc and CUDA's directory.
copy_libs() {  # binary...
  ldd "$@" | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux)[.-]|/usr/local/cuda' |
    xargs -r -I{} cp -Ln {} "$out/lib/"
}
for t in "${checks[@]}"; do
  cp -L "bazel-bin/$t" "$out/bin/"
  copy_libs "bazel-bin/$t"
done
chmod -R u+w "$out"
# PyTorch's export of a small BERT in training mode (dropout 0.1, a key padding mask) for the
# imported-network check, made where PyTorch is (without it, that check reports the export
# missing and the others run).
mkdir -p "$out/onnx"
if /usr/bin/python3 -c 'import torch, onnx' 2> /dev/null; then
  /usr/bin/python3 tests/train/onnx_export.py bert "$out/onnx" 2 64 4 32 264 --dropout 0.1 \
    > "$out/onnx/export.log" 2>&1 || { cat "$out/onnx/export.log" >&2; exit 1; }
  rm "$out/onnx/export.log" "$out/onnx/bert.safetensors"
else
  echo "gpu_bundle: no PyTorch for /usr/bin/python3: the bundle holds no ONNX export" >&2
fi
# Our own binaries and libraries carry symbols nothing there needs (a third of their size).
strip --strip-unneeded "$out"/bin/* "$out"/lib/lib{merak,kernels,tests}_*.so

# Open MPI as Debian lays it out, under a prefix of the bundle's own: gpu_check.sh sets
# OPAL_PREFIX and PMIX_PREFIX to these copies, which Open MPI and PMIx then read instead of
# /usr (their plugins and help texts), and puts their bin on PATH.
ompi_lib=/usr/lib/x86_64-linux-gnu/openmpi/lib
pmix=/usr/lib/x86_64-linux-gnu/pmix2
for need in /usr/bin/orterun /usr/bin/orted "$ompi_lib/openmpi3" /usr/share/openmpi "$pmix/lib"; do
  [ -e "$need" ] || { echo "gpu_bundle: $need is missing (Debian's openmpi-bin)" >&2; exit 1; }
done
ompi_plugins="$out/ompi/lib/x86_64-linux-gnu/openmpi/lib"
mkdir -p "$out/ompi/bin" "$ompi_plugins" "$out/ompi/share" "$out/pmix/lib"
cp -L /usr/bin/orterun /usr/bin/orted "$out/ompi/bin/"
ln -s orterun "$out/ompi/bin/mpirun"
cp -rL "$ompi_lib/openmpi3" "$ompi_plugins/"
cp -rL /usr/share/openmpi "$out/ompi/share/"
cp -rL "$pmix/lib/pmix" "$out/pmix/lib/"
[ -d "$pmix/share" ] && cp -rL "$pmix/share" "$out/pmix/"
# The libraries the launcher, the daemon and the plugins load (libpmix, Open MPI's common
# components, the transports') go with the others.
copy_libs "$out/ompi/bin/orterun" "$out/ompi/bin/orted" "$ompi_plugins"/openmpi3/*.so \
          "$out"/pmix/lib/pmix/*.so

# The newest glibc any file asks for: a GPU machine with an older one cannot load it.
glibc=$(find "$out" -type f \( -name '*.so*' -o -perm -u+x \) -exec objdump -T {} + 2>/dev/null |
        grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n -u | tail -1)
echo "gpu_bundle: needs ${glibc/GLIBC_/glibc >= } (this machine has $(ldd --version | head -1 | awk '{print $NF}'))"

tar czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
mb=$(( $(stat -c %s "$out.tar.gz") / 1048576 ))
echo "gpu_bundle: $out ($(du -sh "$out" | cut -f1) unpacked), $out.tar.gz: $mb MiB"
if [ "$mb" -ge "$max_mb" ]; then
  echo "gpu_bundle: $out.tar.gz is over ${max_mb} MiB: a GPU machine would not take it" >&2
  exit 1
fi
