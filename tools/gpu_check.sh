#!/usr/bin/env bash
# The GPU checks, in one run that fits a short lease (under 8 minutes on one H200):
#   1. the CUDA runtime tests (transfers, fills, strided copies, allocator reuse);
#   2. the op harness with its CUDA pass: every case of every op run on the GPU against the CPU,
#      and the nn kernels' own checks (bf16/f16 through the launchers, deterministic gradients);
#      the optimizer kernels (multi-tensor AdamW bit for bit against the CPU, gradient norm,
#      non-finite check);
#   3. the NCCL communicator suite on the GPUs present (needs mpirun);
#   4. bf16 matmul and attention TFLOP/s against the device's peak (tools/bench/bench_cuda);
#   5. GPT training with merak_train (the one engine, (1, 1, 1) layout): GPT-tiny for 50 steps
#      in f32, bf16 and f16 on the GPU against f32 on the CPU (per-step losses within 1e-4 in
#      f32, 1% in bf16 and f16);
#   6. 3D on the GPU: mpirun -np 4 sharing it (device tensors staged over MPI), GPT-tiny at
#      dp 2 x pp 2 and pp 2 x tp 2 in f32 within 1e-5 of the one-process GPU run at each of 20
#      steps, dp 2 x pp 2 in bf16 within 1e-2; one rank on a grid of NCCL communicators;
#   7. checkpoints and sampling on the GPU: GPT-tiny saves at step 3 of 6 from device memory,
#      in the step loop and in the background (checkpoint.async), and resumed on the GPU gives
#      steps 4-6 bit for bit; the GPU's checkpoint resumed on the CPU stays within 1e-5;
#      merak_generate samples from it on the GPU (greedy, 40 tokens; same text as the CPU's?);
#   8. dropout and an imported network, f32 on the GPU against the CPU over 10 steps (within
#      1e-4): GPT-tiny dropping at 0.1, and PyTorch's export of a small BERT in training mode
#      (its key padding mask and attention dropout fused into sdpa), which gpu_bundle.sh made;
#   9. GPT-2 124M (batch 16 x 1024) and GPT 1.3B (batch 8 x 2048) steps in bf16: tokens/s, MFU.
#
# Every part runs under a time limit of its own, cut to what is left of --budget (default 540 s
# for all of them), so one hang cannot take the lease: a part stopped at its limit is a FAIL, one
# that would start with under 10 s left is "not run". Each part's log and the summary table
# (summary.txt) go to --out DIR (default: a temporary folder, printed at the end).
#
#   tools/gpu_check.sh [--out DIR] [--budget S]      on a machine set up with tools/setup.sh
#   tools/gpu_check.sh --bundle DIR.tar.gz [...]     runs binaries made elsewhere by
#                                                    tools/gpu_bundle.sh (or DIR, unpacked)
set -u
cd "$(dirname "$0")/.."
bundle="" logs="" budget=540
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle="$2"; shift ;;
    --out) logs="$2"; shift ;;
    --budget) budget="$2"; shift ;;
    *) echo "usage: tools/gpu_check.sh [--bundle DIR[.tar.gz]] [--out DIR] [--budget SECONDS]"
       exit 2 ;;
  esac
  shift
done
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "gpu_check: --budget wants whole seconds, got $budget"; exit 2; }
if [ -z "$logs" ]; then logs=$(mktemp -d); else mkdir -p "$logs" || exit 2; fi

if [ -n "$bundle" ]; then
  if [ -f "$bundle" ]; then  # the packed bundle: unpacked beside the other temporary files
    unpacked=$(mktemp -d)
    trap 'rm -rf "$unpacked"' EXIT
    tar xzf "$bundle" -C "$unpacked" || { echo "gpu_check: cannot unpack $bundle"; exit 1; }
    bundle=$(find "$unpacked" -mindepth 1 -maxdepth 1 -type d | head -1)  # .gpu_bundle
  fi
  [ -x "$bundle/bin/merak_train" ] || { echo "gpu_check: $bundle holds no bin/merak_train"; exit 1; }
  bin="$bundle/bin" onnx="$bundle/onnx"
  # CUDA's libraries from the toolkit, or from the nvidia-* Python wheels where those hold them.
  libs="$bundle/lib:/usr/local/cuda/lib64"
  for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for d in "$site"/nvidia/*/lib; do [ -d "$d" ] && libs="$libs:$d"; done
  done
  export LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}"
  # The bundle's own Open MPI (the version its binaries were linked against), relocated: its
  # launcher first on PATH, its plugins and help texts found through these prefixes.
  if [ -d "$bundle/ompi" ]; then
    export OPAL_PREFIX="$bundle/ompi" PMIX_PREFIX="$bundle/pmix" PATH="$bundle/ompi/bin:$PATH"
  fi
else
  # The same binaries and libraries a GPU machine without this environment gets.
  tools/gpu_bundle.sh .gpu_check || exit 1
  bin=".gpu_check/bin" onnx=".gpu_check/onnx"
  export LD_LIBRARY_PATH=".gpu_check/lib:${LD_LIBRARY_PATH:-}"
fi
nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not available"

status=0
row() { printf '%-34s %s\n' "$1" "$2"; }
summary=()
deadline=$((SECONDS + budget))
# Runs a part's command under the smaller of its own limit and the time left: exit 124 when it
# was stopped there, 125 when too little time was left to start it.
limited() {  # seconds command...
  local want="$1" left=$((deadline - SECONDS))
  shift
  [ "$left" -lt 10 ] && return 125
  timeout -k 5 "$((want < left ? want : left))" "$@"
}
# The summary's wording for a part that did not finish: empty for any other exit code.
cut_short() {  # exit code
  case "$1" in
    124) echo "FAIL: stopped at its time limit" ;;
    125) echo "not run: out of the check's time budget" ;;
  esac
}

# A device test binary: pass, FAIL, or (without a GPU) SKIPPED, which is not a pass.
device_test() {  # title binary
  echo "== $1"
  local out rc
  out=$(limited 120 "$bin/$2" 2>&1); rc=$?
  echo "$out" > "$logs/$2.log"
  echo "$out" | tail -20
  if [ -n "$(cut_short "$rc")" ]; then summary+=("$(row "$1" "$(cut_short "$rc")")"); status=1
  elif [ "$rc" -ne 0 ]; then summary+=("$(row "$1" FAIL)"); status=1
  elif grep -q 'SKIPPED (no GPU' <<< "$out"; then
    summary+=("$(row "$1" 'SKIPPED: no GPU')"); status=1
  else summary+=("$(row "$1" pass)"); fi
}

device_test 'CUDA runtime tests' cuda_test

echo "== op harness (CPU and CUDA)"
harness=$(limited 300 "$bin/op_harness_test" 2>&1); rc=$?
echo "$harness" > "$logs/op_harness.log"
echo "$harness" | tail -40
cuda_line=$(grep '^op harness: CUDA' <<< "$harness")
if [ -n "$(cut_short "$rc")" ]; then
  summary+=("$(row 'op harness on CUDA' "$(cut_short "$rc")")"); status=1
elif [ "$rc" -eq 0 ] && grep -q 'run on the GPU' <<< "$cuda_line"; then
  summary+=("$(row 'op harness on CUDA' "pass: ${cuda_line#op harness: CUDA: }")")
else
  summary+=("$(row 'op harness on CUDA' "FAIL (exit $rc): ${cuda_line#op harness: CUDA: }")")
  status=1
fi

device_test 'CUDA nn kernels' nn_kernels_test
device_test 'CUDA optimizer kernels' optim_kernels_test
device_test 'CUDA tensor-parallel kernels' tp_kernels_test

echo "== NCCL communicator suite"
if command -v mpirun > /dev/null; then
  limited 300 bash tests/comm/comm_nccl_test.sh "$bin/comm_suite_nccl" > "$logs/nccl_suite.log" 2>&1
  rc=$?
  tail -20 "$logs/nccl_suite.log"
  why=$(cut_short "$rc")
  if [ "$rc" -eq 0 ]; then summary+=("$(row 'NCCL communicator suite' pass)")
  else summary+=("$(row 'NCCL communicator suite' "${why:-FAIL (exit $rc)}")"); status=1
  fi
else
  summary+=("$(row 'NCCL communicator suite' 'not run: no mpirun on this machine')")
fi

echo "== bf16 matmul and attention"
bench=$(limited 180 "$bin/bench_cuda" 2>&1); rc=$?
echo "$bench" | tee "$logs/bench_cuda.log"
[ "$rc" -ne 0 ] && status=1
why=$(cut_short "$rc")
summary+=("$(row 'bf16 matmul, attention' "${why:+$why; }see the tables above (exit $rc; \
targets: matmul >= 70%, attention forward at head dim 128 >= 50% of peak)")")

echo "== GPT training on the GPU"
tiny() {  # device precision: 50 steps of GPT-tiny, per-step metrics in $logs/<device>-<precision>
  limited 120 "$bin/merak_train" --config configs/gpt-tiny.yaml --set train.steps=50 \
    --set train.device="$1" --set train.precision="$2" --metrics "$logs/$1-$2.jsonl" \
    > "$logs/$1-$2.log" 2>&1
}
# A metrics file's per-step losses, from step $2 (default 1) on.
losses() {
  sed -n 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/p' "$1" |
    awk -v from="${2:-1}" '$1 >= from {print $2}'
}
# The largest relative difference between two runs' losses from step $4 (default 1) on, or
# "missing" unless each has $3 of them; status 1 when it is above the tolerance $5.
worst_difference() {  # reference other steps from tolerance
  local worst
  worst=$(paste <(losses "$1" "$4") <(losses "$2" "$4") | awk -v want="$3" '
    {d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d; n++}
    END {if (n != want) print "missing"; else printf "%.2e", w}')
  echo "$worst"
  [ "$worst" != missing ] && awk -v w="$worst" -v t="$5" 'BEGIN {exit !(w <= t)}'
}
if tiny cpu f32; then
  for p in f32 bf16 f16; do
    tolerance=0.01
    [ "$p" = f32 ] && tolerance=0.0001
    if tiny cuda "$p"; then
      verdict=pass
      worst=$(worst_difference "$logs/cpu-f32.jsonl" "$logs/cuda-$p.jsonl" 50 1 "$tolerance") ||
        { verdict=FAIL; status=1; }
      skipped=$(grep -c 'step skipped' "$logs/cuda-$p.log")
      summary+=("$(row "GPT-tiny $p on GPU vs f32 CPU" "$verdict: largest per-step loss \
difference $worst over 50 steps (target $tolerance); $skipped steps skipped")")
    else
      why=$(cut_short "$?")
      tail -5 "$logs/cuda-$p.log"
      summary+=("$(row "GPT-tiny $p on GPU" "${why:-FAIL: $(tail -1 "$logs/cuda-$p.log")}")")
      status=1
    fi
  done
else
  why=$(cut_short "$?")
  summary+=("$(row 'GPT-tiny on the CPU' "${why:-FAIL: $(tail -1 "$logs/cpu-f32.log")}")")
  status=1
fi
# 3D on GPUs: the engine's layouts against the one-process GPU run, GPT-tiny for 20 steps. Four
# ranks share the one GPU (train.gpus_share), their groups staged through host memory
# (parallel.comm: auto picks MPI where ranks share a GPU); then one rank whose groups are NCCL
# communicators of one member (mpirun -np 1: a grid, not the single process).
echo "== 3D training on the GPU"
run3d() {  # name ranks precision overrides...: 20 steps, metrics in $logs/<name>.jsonl
  local name="$1" np="$2" p="$3"; shift 3
  local launch=(limited 240)
  [ "$np" -gt 0 ] && launch+=(mpirun --allow-run-as-root --oversubscribe -np "$np")
  "${launch[@]}" "$bin/merak_train" --config configs/gpt-tiny.yaml --set train.steps=20 \
    --set train.device=cuda --set train.precision="$p" --set train.gpus_share=true \
    --metrics "$logs/$name.jsonl" "$@" > "$logs/$name.log" 2>&1
}
compare3d() {  # title reference name tolerance
  local worst verdict=pass
  worst=$(worst_difference "$logs/$2.jsonl" "$logs/$3.jsonl" 20 1 "$4") ||
    { verdict=FAIL; status=1; tail -5 "$logs/$3.log"; }
  grep -E '^  (data|tensor)|^peak' "$logs/$3.log"
  summary+=("$(row "$1" "$verdict: largest per-step loss difference $worst over 20 steps \
(target $4)")")
}
if ! command -v mpirun > /dev/null; then
  summary+=("$(row '3D on the GPU' 'not run: no mpirun on this machine')"); status=1
elif run3d one-f32 0 f32 && run3d one-bf16 0 bf16; then
  run3d dp2pp2-f32 4 f32 --set parallel.dp=2 --set parallel.pp=2
  compare3d "dp2 x pp2 f32, 4 ranks on 1 GPU" one-f32 dp2pp2-f32 1e-5
  run3d pp2tp2-f32 4 f32 --set parallel.pp=2 --set parallel.tp=2
  compare3d "pp2 x tp2 f32, 4 ranks on 1 GPU" one-f32 pp2tp2-f32 1e-5
  run3d dp2pp2-bf16 4 bf16 --set parallel.dp=2 --set parallel.pp=2
  compare3d "dp2 x pp2 bf16, 4 ranks on 1 GPU" one-bf16 dp2pp2-bf16 1e-2
  run3d nccl1-f32 1 f32 --set parallel.comm=nccl
  compare3d "NCCL grid of one rank, f32" one-f32 nccl1-f32 1e-5
  grep -q "^  groups talk over NCCL$" "$logs/nccl1-f32.log" ||
    { summary+=("$(row 'NCCL grid of one rank' 'FAIL: its groups were not NCCL')"); status=1; }
else
  why=$(cut_short "$?")
  summary+=("$(row '3D on the GPU' \
    "${why:-FAIL: the one-process reference: $(tail -1 "$logs/one-f32.log")}")")
  status=1
fi

# Checkpoints written from device memory, read back into it, and on the CPU; sampling.
echo "== checkpoints and sampling on the GPU"
ckpt() {  # name device overrides...: 6 steps of GPT-tiny in f32, metrics in $logs/<name>.jsonl
  local name="$1" device="$2"; shift 2
  limited 120 "$bin/merak_train" --config configs/gpt-tiny.yaml --set train.steps=6 \
    --set train.device="$device" --metrics "$logs/$name.jsonl" "$@" > "$logs/$name.log" 2>&1
}
# Steps 4-6 as "step loss grad_norm" at full precision.
late_steps() {
  sed -n 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2 \3/p' "$1" |
    awk '$1 >= 4'
}
ck="$logs/ck"
for mode in false true; do
  title="GPU checkpoint (async $mode)"
  rm -rf "$ck-$mode"
  if ! ckpt "save-$mode" cuda --set checkpoint.dir="$ck-$mode" --set checkpoint.every=3 \
         --set checkpoint.async="$mode"; then
    why=$(cut_short "$?")
    summary+=("$(row "$title" "${why:-FAIL: saving: $(tail -1 "$logs/save-$mode.log")}")")
    status=1; continue
  fi
  if ! ckpt "resume-$mode" cuda --resume "$ck-$mode/step_000000003"; then
    why=$(cut_short "$?")
    summary+=("$(row "$title" "${why:-FAIL: resuming: $(tail -1 "$logs/resume-$mode.log")}")")
    status=1; continue
  fi
  if [ "$(late_steps "$logs/resume-$mode.jsonl" | wc -l)" -eq 3 ] &&
     diff <(late_steps "$logs/save-$mode.jsonl") <(late_steps "$logs/resume-$mode.jsonl") \
       > "$logs/resume-$mode.diff"; then
    summary+=("$(row "$title" "pass: steps 4-6 resumed bit for bit")")
  else
    summary+=("$(row "$title" "FAIL: the resumed steps differ ($logs/resume-$mode.diff)")")
    status=1
  fi
done
if [ ! -d "$ck-false/step_000000003" ]; then
  summary+=("$(row "GPU checkpoint resumed on the CPU" "not run: no checkpoint from the GPU")")
  status=1
elif ckpt resume-cpu cpu --resume "$ck-false/step_000000003"; then
  verdict=pass
  worst=$(worst_difference "$logs/save-false.jsonl" "$logs/resume-cpu.jsonl" 3 4 1e-5) ||
    { verdict=FAIL; status=1; }
  summary+=("$(row "GPU checkpoint resumed on the CPU" "$verdict: largest loss difference \
$worst over steps 4-6 (target 1e-5)")")
else
  why=$(cut_short "$?")
  summary+=("$(row "GPU checkpoint resumed on the CPU" \
    "${why:-FAIL: $(tail -1 "$logs/resume-cpu.log")}")"); status=1
fi
sample() {  # device: greedy text from the synchronous run's checkpoint into $logs/sample-<device>
  limited 60 "$bin/merak_generate" --checkpoint "$ck-false" --prompt "The " --max-tokens 40 \
    --temperature 0 --device "$1" > "$logs/sample-$1.out" 2> "$logs/sample-$1.err"
}
if [ ! -d "$ck-false/step_000000006" ]; then
  summary+=("$(row "merak_generate on the GPU" "not run: no checkpoint from the GPU")"); status=1
elif sample cuda && sample cpu; then
  same=no
  cmp -s "$logs/sample-cuda.out" "$logs/sample-cpu.out" && same=yes
  summary+=("$(row "merak_generate on the GPU" "pass: $(tail -1 "$logs/sample-cuda.err" | \
sed 's/^merak_generate: //'); same text as the CPU's: $same")")
else
  why=$(cut_short "$?")
  summary+=("$(row "merak_generate on the GPU" \
    "${why:-FAIL: $(cat "$logs/sample-cuda.err" "$logs/sample-cpu.err" 2> /dev/null | tail -1)}")")
  status=1
fi

# Dropout masks are drawn by each element's index, so the GPU's steps are the CPU's.
echo "== dropout and an imported network on the GPU"
on_both() {  # title name overrides...: 10 f32 steps on the CPU, then the GPU; losses compared
  local title="$1" name="$2" device worst verdict=pass
  shift 2
  for device in cpu cuda; do
    if ! limited 60 "$bin/merak_train" "$@" --set train.steps=10 --set train.device="$device" \
           --metrics "$logs/$name-$device.jsonl" > "$logs/$name-$device.log" 2>&1; then
      why=$(cut_short "$?")
      summary+=("$(row "$title" "${why:-FAIL on $device: $(tail -1 "$logs/$name-$device.log")}")")
      status=1
      return
    fi
  done
  worst=$(worst_difference "$logs/$name-cpu.jsonl" "$logs/$name-cuda.jsonl" 10 1 1e-4) ||
    { verdict=FAIL; status=1; }
  summary+=("$(row "$title" "$verdict: largest per-step loss difference $worst over 10 steps \
(target 1e-4)")")
}
on_both "GPT-tiny, dropout 0.1, GPU vs CPU" dropout --config configs/gpt-tiny.yaml \
  --set model.dropout=0.1
if [ -f "$onnx/bert.onnx" ]; then
  printf 'model: {family: bert, onnx: "%s", vocab: 264}\ntrain: {batch: 8, seq_len: 16}\n' \
    "$(realpath "$onnx/bert.onnx")" > "$logs/onnx-bert.yaml"
  on_both "imported BERT (ONNX), GPU vs CPU" onnx-bert --config "$logs/onnx-bert.yaml"
else
  summary+=("$(row "imported BERT (ONNX), GPU vs CPU" "not run: no export in $onnx")"); status=1
fi

big() {  # name config overrides...: a few bf16 steps, tokens/s and MFU from merak_train's summary
  local name="$1" config="$2"; shift 2
  local out rc
  out=$(limited 240 "$bin/merak_train" --config "$config" --set train.device=cuda \
        --set train.precision=bf16 --set train.log_interval=1 "$@" 2>&1)
  rc=$?
  echo "$out" > "$logs/$(basename "$config" .yaml)-bf16.log"
  echo "$out" | tail -4
  if [ -n "$(cut_short "$rc")" ]; then
    summary+=("$(row "$name (bf16)" "$(cut_short "$rc")")"); status=1
    return
  fi
  local done_line
  done_line=$(grep '^done:' <<< "$out")
  if [ -z "$done_line" ]; then
    summary+=("$(row "$name (bf16)" "FAIL: $(tail -1 <<< "$out")")"); status=1
    return
  fi
  local tps mfu
  tps=$(sed -n 's/.* | \([0-9]*\) tok\/s.*/\1/p' <<< "$done_line")
  mfu=$(sed -n 's/.*(\([0-9]*\)% of peak).*/\1/p' <<< "$done_line")
  local verdict=pass
  [ "${mfu:-0}" -ge 50 ] || { verdict="below target"; status=1; }
  summary+=("$(row "$name (bf16)" "$verdict: $tps tok/s, MFU $mfu% (target >= 50%)")")
}
big "GPT-2 124M, batch 16 x 1024" configs/gpt-small.yaml --set train.steps=12 \
    --set train.batch=16 --set train.micro_batch=16 --set schedule.warmup_steps=2
big "GPT 1.3B, batch 8 x 2048" configs/gpt1.3b.yaml --set train.steps=8 \
    --set schedule.warmup_steps=2

echo
echo "== GPU check summary"
printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
echo "logs: $logs ($((SECONDS)) s in all)"
exit "$status"
