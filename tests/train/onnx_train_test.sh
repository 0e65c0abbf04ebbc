#!/usr/bin/env bash
# merak_train on an imported ONNX network (model.onnx): PyTorch exports the GPT and the BERT that
# Merak builds (python/merak_ref, random weights), and writes the same weights as safetensors.
#   - the imported network trains as the built one started from those weights (model.init_from):
#     every step's loss and gradient norm within 1e-5 relative, GPT and BERT;
#   - in 3D layouts (tensor parallelism found in the imported graph, its weights sliced per
#     rank) the steps equal one process's within 1e-5;
#   - so does an export with fixed input shapes (the micro-batch and train.seq_len), and one whose
#     network reads a label too (the loss reads the same input);
#   - a checkpoint written at (1,2,2) resumes in one process and continues the uninterrupted run;
#   - an export with PyTorch's constant folding (each linear's weight stored transposed under a
#     new name, the LM head's a copy of the embedding's) trains as the export without folding:
#     the head tied to the embedding again (across pipeline stages too), each linear's weight
#     under its module's name in its own layout: the same graph (merak_graph dump), every
#     step's loss and gradient norm equal bit for bit at (1,1,1) and (1,2,2), also with the
#     weights in external data, and its checkpoint exports (merak_export) to the same bytes;
#   - an export whose weights are ONNX external data (a file beside the graph, as exports past
#     2 GiB are saved) trains as the one holding them, at (1,1,1) and (1,2,2): each rank reads
#     its tensors from the data file;
#   - exports in training mode train with their dropout (at rate 0.1 where Merak's models drop):
#     the steps differ from the export without it, evaluation does not drop (the validation loss
#     of the same weights is the one without dropout), and every layout draws the one-process
#     masks: GPT at (1,2,2) and (2,2,1), BERT at (2,1,2) and (1,1,2) (whose dropout of the
#     attention probabilities lies inside the heads' split: each rank draws its heads' masks)
#     within 1e-5;
#   - the plan carries no weights (they would travel once a rank: a dp 4 plan is smaller than
#     the file), each rank loads its pieces from the file;
#   - bad input is exit 2 and one line naming the key or file: a model.vocab that is not the
#     logits' width, a family whose batch or loss does not fit the network, a key that shapes a
#     built model, a missing file; merak_export --names hf-gpt2 and merak_generate refuse an
#     imported network's checkpoint.
set -u
train="$1"
export_tool="$2"
generate="$3"
exporter="$4"
partition="$5"
graph_tool="$6"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
export OMPI_MCA_btl=self,vader
export OMPI_MCA_mpi_yield_when_idle=1
export MERAK_NUM_THREADS=1

/usr/bin/python3 "$exporter" gpt "$tmp" 2 64 4 32 256 > "$tmp/export.log" 2>&1 ||
  fail "PyTorch export (gpt): $(tail -3 "$tmp/export.log")"
/usr/bin/python3 "$exporter" bert "$tmp" 2 64 4 32 264 > "$tmp/export.log" 2>&1 ||
  fail "PyTorch export (bert): $(tail -3 "$tmp/export.log")"
/usr/bin/python3 "$exporter" gpt "$tmp" 2 64 4 32 256 --name gpt-fixed --fixed 2 16 \
  > "$tmp/export.log" 2>&1 || fail "PyTorch export (gpt, fixed): $(tail -3 "$tmp/export.log")"
/usr/bin/python3 "$exporter" gpt "$tmp" 2 64 4 32 256 --name gpt-targets --reads-targets \
  > "$tmp/export.log" 2>&1 || fail "PyTorch export (gpt, targets): $(tail -3 "$tmp/export.log")"
/usr/bin/python3 "$exporter" gpt "$tmp" 2 64 4 32 256 --name gpt-fold --fold \
  > "$tmp/export.log" 2>&1 || fail "PyTorch export (gpt, folded): $(tail -3 "$tmp/export.log")"
/usr/bin/python3 "$exporter" gpt "$tmp" 2 64 4 32 256 --name gpt-fold-ext --fold --external \
  > "$tmp/export.log" 2>&1 ||
  fail "PyTorch export (gpt, folded, external): $(tail -3 "$tmp/export.log")"
/usr/bin/python3 "$exporter" gpt "$tmp" 2 64 4 32 256 --name gpt-ext --external \
  > "$tmp/export.log" 2>&1 || fail "PyTorch export (gpt, external): $(tail -3 "$tmp/export.log")"
for family in gpt bert; do
  vocab=$([ "$family" = gpt ] && echo 256 || echo 264)
  /usr/bin/python3 "$exporter" "$family" "$tmp" 2 64 4 32 "$vocab" --name "$family-drop" \
    --dropout 0.1 > "$tmp/export.log" 2>&1 ||
    fail "PyTorch export ($family, dropout): $(tail -3 "$tmp/export.log")"
done

common="train: {steps: 12, batch: 8, micro_batch: 2, seq_len: 16, log_interval: 100}
optimizer: {lr: 3e-3}"
# config NAME MODEL: NAME.yaml, the model section MODEL with the common sections.
config() { printf 'model: %s\n%s\n' "$2" "$common" > "$tmp/$1.yaml"; }
built="layers: 2, hidden: 64, heads: 4, max_seq: 32"
config gpt-onnx "{family: gpt, onnx: $tmp/gpt.onnx, vocab: 256}"
config gpt-built "{family: gpt, $built, vocab: 256, init_from: $tmp/gpt.safetensors}"
config gpt-fresh "{family: gpt, $built, vocab: 256}"
config bert-onnx "{family: bert, onnx: $tmp/bert.onnx, vocab: 264}"
config bert-built "{family: bert, $built, vocab: 264, init_from: $tmp/bert.safetensors}"
config gpt-drop "{family: gpt, onnx: $tmp/gpt-drop.onnx, vocab: 256}"
config bert-drop "{family: bert, onnx: $tmp/bert-drop.onnx, vocab: 264}"

source "$(dirname "$0")/layout_runs.sh"
# run NAME LAYOUT CONFIG ARGS...: run_layout with $tmp/CONFIG.
run() {
  local name="$1" layout="$2" cfg="$3"; shift 3
  run_layout "$name" "$layout" --config "$tmp/$cfg" "$@"
}
# close WHAT A B FROM: A's steps from FROM on match B's within 1e-5 relative (loss and norm).
close() {
  local what="$1" a="$2" b="$3" from="$4"
  local out
  out=$(join <(numbers "$tmp/$a.jsonl" "$from") <(numbers "$tmp/$b.jsonl" "$from") | awk '
    function rel(x, y) { d = x - y; if (d < 0) d = -d; s = y < 0 ? -y : y; return d / (s > 1e-30 ? s : 1) }
    { n++; r = rel($2, $4); if (rel($3, $5) > r) r = rel($3, $5); if (r > worst) worst = r }
    END { printf "%d %.2e", n, worst; exit !(n > 0 && worst <= 1e-5) }') ||
    fail "$what: $a vs $b: steps and worst relative difference: $out"
  echo "$what: $out (steps compared, worst relative difference), last: $(numbers "$tmp/$a.jsonl" 12)"
}
# same WHAT A B: A's steps are B's, loss and gradient norm bit for bit.
same() {
  local a b
  a=$(numbers "$tmp/$2.jsonl" 1)
  b=$(numbers "$tmp/$3.jsonl" 1)
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "$1: $2 vs $3: $(diff <(echo "$a") <(echo "$b") | head -4)"
  echo "$1: $(wc -l <<< "$a") steps, equal bit for bit"
}

run gpt-built 1,1,1 gpt-built.yaml
run gpt-onnx 1,1,1 gpt-onnx.yaml --set checkpoint.dir="$tmp/ck-onnx" --set checkpoint.every=12
grep -q "gpt-onnx.yaml | $tmp/gpt.onnx imported, gpt's loss | 0.12M parameters" "$tmp/gpt-onnx.log" ||
  fail "the header: $(head -2 "$tmp/gpt-onnx.log")"
close "imported GPT = built GPT from the same weights" gpt-onnx gpt-built 1
# The weights are the file's: a built GPT from its own initialisation starts elsewhere.
run gpt-fresh 1,1,1 gpt-fresh.yaml
first() { numbers "$tmp/$1.jsonl" 1 | head -1 | cut -d' ' -f2; }
[ "$(first gpt-fresh)" != "$(first gpt-onnx)" ] || fail "the imported run starts where a fresh one does"
run gpt-fixed 1,1,1 gpt-onnx.yaml --set model.onnx="$tmp/gpt-fixed.onnx"
close "imported GPT of fixed shapes = the dynamic export" gpt-fixed gpt-onnx 1
# The layout search gives an export of fixed shapes the micro-batch it takes.
run gpt-fixed-auto 1,1,1 gpt-onnx.yaml --set model.onnx="$tmp/gpt-fixed.onnx" \
  --set train.micro_batch=auto
grep -q "^chosen: dp 1, pp 1, tp 1, micro-batch 2," "$tmp/gpt-fixed-auto.log" ||
  fail "micro_batch auto with a fixed export: $(grep -E '^chosen|error' "$tmp/gpt-fixed-auto.log")"
close "imported GPT of fixed shapes, micro-batch auto" gpt-fixed-auto gpt-onnx 1
run gpt-targets 1,1,1 gpt-onnx.yaml --set model.onnx="$tmp/gpt-targets.onnx"
close "imported GPT reading the targets = the built GPT" gpt-targets gpt-built 1
run bert-built 1,1,1 bert-built.yaml
run bert-onnx 1,1,1 bert-onnx.yaml
close "imported BERT = built BERT from the same weights" bert-onnx bert-built 1

run gpt-122 1,2,2 gpt-onnx.yaml --set checkpoint.dir="$tmp/ck" --set checkpoint.every=6
close "imported GPT at (1,2,2) = one process" gpt-122 gpt-onnx 1
run gpt-221 2,2,1 gpt-onnx.yaml --set parallel.schedule=interleaved --set parallel.virtual_stages=2
close "imported GPT at (2,2,1) interleaved = one process" gpt-221 gpt-onnx 1
run bert-212 2,1,2 bert-onnx.yaml
close "imported BERT at (2,1,2) = one process" bert-212 bert-onnx 1
out=$("$partition" --config "$tmp/gpt-onnx.yaml" --dp 4 -o "$tmp/plan.pb" 2>&1) ||
  fail "merak_partition --dp 4: $out"
plan_bytes=$(stat -c %s "$tmp/plan.pb")
file_bytes=$(stat -c %s "$tmp/gpt.onnx")
[ "$plan_bytes" -gt 0 ] && [ "$plan_bytes" -lt "$file_bytes" ] ||
  fail "the dp 4 plan holds $plan_bytes bytes, the network's file $file_bytes"
echo "the dp 4 plan: $plan_bytes bytes; the network's file: $file_bytes bytes"
run gpt-resumed 1,1,1 gpt-onnx.yaml --resume "$tmp/ck/step_000000006"
grep -q "resumed from .*step_000000006: step 6 done" "$tmp/gpt-resumed.log" ||
  fail "no resume line: $(head -5 "$tmp/gpt-resumed.log")"
close "imported GPT saved at (1,2,2) step 6, resumed at (1,1,1)" gpt-resumed gpt-onnx 7

# Constant folding's copy of the tied embedding is tied again, and each linear's transposed
# weight is its module's weight again: the network is the unfolded export's, node for node.
for net in gpt gpt-fold; do
  out=$("$graph_tool" import "$tmp/$net.onnx" -o "$tmp/$net.pb" --dim batch=2 --dim seq=16 2>&1) ||
    fail "merak_graph import $net.onnx: $out"
  "$graph_tool" dump "$tmp/$net.pb" | grep -v "\.onnx\"$" > "$tmp/$net.dump"  # less the file's name
done
cmp -s "$tmp/gpt-fold.dump" "$tmp/gpt.dump" ||
  fail "the folded export's graph: $(diff "$tmp/gpt-fold.dump" "$tmp/gpt.dump" | head -c 600)"
echo "the folded export imports as the unfolded one: the same $(wc -l < "$tmp/gpt.dump") lines of graph"
run gpt-fold 1,1,1 gpt-onnx.yaml --set model.onnx="$tmp/gpt-fold.onnx" \
  --set checkpoint.dir="$tmp/ck-fold" --set checkpoint.every=12
grep -q "gpt-fold.onnx imported, gpt's loss | 0.12M parameters" "$tmp/gpt-fold.log" ||
  fail "the folded export's parameters: $(head -1 "$tmp/gpt-fold.log")"
same "imported GPT exported with constant folding = without" gpt-fold gpt-onnx
for ck in onnx fold; do
  out=$("$export_tool" --checkpoint "$tmp/ck-$ck" -o "$tmp/exported-$ck.safetensors" 2>&1) ||
    fail "merak_export of the $ck run: $out"
done
header() { head -c 400 "$1" | tr -c '[:print:]' ' '; }  # a safetensors file's names, shapes
cmp -s "$tmp/exported-fold.safetensors" "$tmp/exported-onnx.safetensors" ||
  fail "the folded export's trained weights are not the unfolded one's: $(header \
    "$tmp/exported-fold.safetensors") against $(header "$tmp/exported-onnx.safetensors")"
echo "the folded and unfolded exports' trained weights: the same" \
  "$(stat -c %s "$tmp/exported-fold.safetensors") bytes"
run gpt-fold-122 1,2,2 gpt-onnx.yaml --set model.onnx="$tmp/gpt-fold.onnx"
same "imported GPT exported with constant folding, at (1,2,2)" gpt-fold-122 gpt-122
run gpt-fold-ext 1,1,1 gpt-onnx.yaml --set model.onnx="$tmp/gpt-fold-ext.onnx"
same "imported GPT exported with constant folding, weights in external data" gpt-fold-ext gpt-onnx

# External data: the graph's file is small, the weights beside it; training is the same.
ext_graph=$(stat -c %s "$tmp/gpt-ext.onnx")
ext_data=$(stat -c %s "$tmp/gpt-ext.data")
[ "$ext_graph" -lt $((ext_data / 10)) ] ||
  fail "the external export's graph holds $ext_graph bytes, its data $ext_data"
run gpt-ext 1,1,1 gpt-onnx.yaml --set model.onnx="$tmp/gpt-ext.onnx"
close "imported GPT with external data = the export holding its weights" gpt-ext gpt-onnx 1
run gpt-ext-122 1,2,2 gpt-onnx.yaml --set model.onnx="$tmp/gpt-ext.onnx"
close "imported GPT with external data at (1,2,2) = one process" gpt-ext-122 gpt-onnx 1
echo "external data: the graph $ext_graph bytes, the weights $ext_data bytes"

# Training-mode exports: the dropout acts in training, not in evaluation, alike in every layout.
run gpt-drop 1,1,1 gpt-drop.yaml
[ "$(first gpt-drop)" != "$(first gpt-onnx)" ] ||
  fail "the export with dropout trains as the one without: first loss $(first gpt-drop)"
echo "GPT's first loss with dropout $(first gpt-drop), without $(first gpt-onnx)"
# With weights that do not move (a learning rate below f32's resolution), the validation loss
# of the export with dropout is the one without: evaluation does not drop.
still=(--set optimizer.lr=1e-30 --set train.steps=2 --set data.valid_split=0.05
       --set eval.every=2 --set eval.batches=2)
run gpt-drop-still 1,1,1 gpt-drop.yaml "${still[@]}"
run gpt-onnx-still 1,1,1 gpt-onnx.yaml "${still[@]}"
valid() { sed -n 's/.*"step": 2,.*"valid_loss": \([^,]*\),.*/\1/p' "$tmp/$1.jsonl"; }
[ -n "$(valid gpt-drop-still)" ] && [ "$(valid gpt-drop-still)" = "$(valid gpt-onnx-still)" ] ||
  fail "validation loss with dropout '$(valid gpt-drop-still)', without '$(valid gpt-onnx-still)'"
echo "validation loss of the same weights with and without dropout: $(valid gpt-drop-still)"
run gpt-drop-122 1,2,2 gpt-drop.yaml
close "imported GPT with dropout at (1,2,2) = one process" gpt-drop-122 gpt-drop 1
run gpt-drop-221 2,2,1 gpt-drop.yaml
close "imported GPT with dropout at (2,2,1) = one process" gpt-drop-221 gpt-drop 1
run bert-drop 1,1,1 bert-drop.yaml
[ "$(first bert-drop)" != "$(first bert-onnx)" ] || fail "BERT's dropout does not act"
run bert-drop-212 2,1,2 bert-drop.yaml
close "imported BERT with dropout at (2,1,2) = one process" bert-drop-212 bert-drop 1
run bert-drop-112 1,1,2 bert-drop.yaml
close "imported BERT with dropout at (1,1,2) = one process" bert-drop-112 bert-drop 1

# A rank that cannot read the file (a node without it: here a rank started in a directory that
# lacks the relative path) stops the job with the one line; none waits for it.
mkdir -p "$tmp/with" "$tmp/without"
cp "$tmp/gpt.onnx" "$tmp/with/net.onnx"
sed "s#onnx: $tmp/gpt.onnx#onnx: net.onnx#" "$tmp/gpt-onnx.yaml" > "$tmp/relative.yaml"
train_path=$(realpath "$train")  # each rank starts in its own directory
out=$(timeout $((120 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe \
      -np 1 --wdir "$tmp/with" "$train_path" --config "$tmp/relative.yaml" --set parallel.dp=2 : \
      -np 1 --wdir "$tmp/without" "$train_path" --config "$tmp/relative.yaml" \
      --set parallel.dp=2 2>&1)
code=$?
[ "$code" -eq 2 ] && grep -q "key 'model.onnx': net.onnx: cannot read" <<< "$out" ||
  fail "a rank without the file: exit $code: $out"
echo "a rank without the file: exit 2: $(grep "cannot read" <<< "$out" | head -1)"

# bad CONFIG PATTERN ARGS...: exit 2 and a line matching PATTERN.
bad() {
  local cfg="$1" want="$2"; shift 2
  local out code
  out=$("$train" --config "$tmp/$cfg" "$@" 2>&1)
  code=$?
  [ "$code" -eq 2 ] || fail "$cfg $*: exit $code, want 2: $out"
  grep -q -- "$want" <<< "$out" || fail "$cfg $*: want '$want', got: $out"
  echo "refused ($*): $(grep -- "$want" <<< "$out" | head -1)"
}
bad gpt-onnx.yaml "key 'model.vocab': 300, but the output 'logits' of $tmp/gpt.onnx has 256 classes (set model.vocab: 256)" \
  --set model.vocab=300
bad gpt-onnx.yaml "key 'model.onnx': $tmp/gpt.onnx: the network has 1 output; bert's loss takes 2" \
  --set model.family=bert --set model.vocab=256
bad bert-onnx.yaml "key 'model.onnx': $tmp/bert.onnx: .*input 'segment_ids' is not a field of gpt's batch (tokens, targets)" \
  --set model.family=gpt
bad gpt-onnx.yaml "model.layers: shapes a model Merak builds, but model.onnx names a network" \
  --set model.layers=6
bad gpt-onnx.yaml "key 'model.onnx': $tmp/none.onnx: " --set model.onnx="$tmp/none.onnx"
bad gpt-onnx.yaml "key 'model.onnx': $tmp/gpt.onnx: .*out of range.*(its inputs bound to micro-batch 2 x train.seq_len 33)" \
  --set train.seq_len=33
bad gpt-onnx.yaml "key 'model.onnx': $tmp/gpt-fixed.onnx: input 'tokens' has a fixed dim 0 of 2, the given shape \[4, 16\] differs" \
  --set model.onnx="$tmp/gpt-fixed.onnx" --set train.micro_batch=4
out=$("$export_tool" --checkpoint "$tmp/ck" -o "$tmp/x.safetensors" --names hf-gpt2 2>&1)
[ $? -eq 2 ] && grep -q "holds the network imported from $tmp/gpt.onnx" <<< "$out" ||
  fail "merak_export --names hf-gpt2: $out"
"$export_tool" --checkpoint "$tmp/ck" -o "$tmp/merak.safetensors" > "$tmp/export.out" 2>&1 ||
  fail "merak_export --names merak: $(cat "$tmp/export.out")"
out=$("$generate" --checkpoint "$tmp/ck" --prompt hi 2>&1)
[ $? -eq 2 ] && grep -q "holds the network imported from $tmp/gpt.onnx" <<< "$out" ||
  fail "merak_generate: $out"
echo "ok"
