#!/usr/bin/env bash
# Evaluation and TensorBoard through merak_train:
#   - evaluation changes nothing in training: with eval.every on, the training losses and
#     gradient norms are bit for bit those of the same run with it off (the held-out split
#     data.valid_split is applied either way);
#   - a 3D job's validation losses equal the one-process run's within 1e-5 relative, for
#     (2,2,2) 1f1b, (1,2,1) interleaved v2, (1,1,2), (2,1,1) ZeRO-1, and with data.valid files
#     instead of a split (without dropout: training's masks follow the micro-batching, so with
#     it the layouts' training, and so the weights evaluated, differ);
#   - the step line and the metrics line carry the validation loss and perplexity;
#   - --tensorboard writes an event file that an independent reader (tests/metrics/
#     read_events.py: its own framing, CRC-32C and Event descriptor) decodes, holding the
#     metrics file's loss for every step and the validation loss of every evaluation;
#   - eval.every without validation data is a config error naming the key.
set -u
train="$1"
configs="$2"
reader="$3"
python="${PYTHON:-/usr/bin/python3}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
export OMPI_MCA_btl=self,vader
export OMPI_MCA_mpi_yield_when_idle=1
export MERAK_NUM_THREADS=1
small=(--set model.layers=4 --set train.seq_len=32 --set train.log_interval=100
       --set train.steps=6 --set model.dropout=0.1)
split=(--set data.valid_split=0.05)

source "$(dirname "$0")/layout_runs.sh"
# run NAME LAYOUT ARGS...: gpt-tiny (the small settings) on that layout; see run_layout.
run() {
  local name="$1" layout="$2"; shift 2
  run_layout "$name" "$layout" --config "$configs/gpt-tiny.yaml" "${small[@]}" "$@"
}
training() { numbers "$1" 0; }
valid() { sed -n 's/.*"step": \([0-9]*\),.*"valid_loss": \([^,]*\),.*/\1 \2/p' "$1"; }

# Evaluation leaves training alone.
run plain 1,1,1 "${split[@]}"
run one 1,1,1 "${split[@]}" --set eval.every=3 --set eval.batches=2
diff <(training "$tmp/plain.jsonl") <(training "$tmp/one.jsonl") > "$tmp/diff" ||
  fail "evaluation changed training: $(cat "$tmp/diff")"
[ "$(valid "$tmp/one.jsonl" | awk '{print $1}' | tr '\n' ' ')" = "3 6 " ] ||
  fail "want evaluations after steps 3 and 6: $(valid "$tmp/one.jsonl")"
[ -z "$(valid "$tmp/plain.jsonl")" ] || fail "an evaluation without eval.every"
grep -qE '^step +3/6 \| .* \| valid loss [0-9.]+ \(ppl [0-9.]+, ' "$tmp/one.log" ||
  fail "no validation loss in the step line: $(grep '^step' "$tmp/one.log")"
grep -q '"valid_ppl": ' "$tmp/one.jsonl" || fail "no valid_ppl in the metrics"
echo "training unchanged by evaluation; validation: $(valid "$tmp/one.jsonl" | tr '\n' ' ')"

# close A B: every validation loss of run B within 1e-5 relative of run A's.
close() {
  paste <(valid "$tmp/$1.jsonl") <(valid "$tmp/$2.jsonl") |
    awk -v a="$1" -v b="$2" 'NF != 4 || $1 != $3 { print "step mismatch: " $0; bad = 1; next }
      { d = $2 - $4; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2);
        if (r > 1e-5) { print "step " $1 ": " $2 " vs " $4 " (" r ")"; bad = 1 } }
      END { if (NR == 0) { print "no evaluations"; bad = 1 } exit bad }' > "$tmp/close" ||
    fail "$2 against $1: $(cat "$tmp/close")"
  echo "validation $2 = $1 within 1e-5: $(valid "$tmp/$2.jsonl" | tr '\n' ' ')"
}
ev=(--set eval.every=3 --set eval.batches=2 --set model.dropout=0)
run one-nodrop 1,1,1 "${split[@]}" "${ev[@]}"
run 3d 2,2,2 "${split[@]}" "${ev[@]}" --set train.micro_batch=2
close one-nodrop 3d
run interleaved 1,2,1 "${split[@]}" "${ev[@]}" --set parallel.schedule=interleaved \
  --set parallel.virtual_stages=2 --set train.micro_batch=2
close one-nodrop interleaved
run tp 1,1,2 "${split[@]}" "${ev[@]}"
close one-nodrop tp
run zero1 2,1,1 "${split[@]}" "${ev[@]}" --set parallel.zero1=true
close one-nodrop zero1

# Validation files of their own (token shards), one process and (1,2,2).
printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 400) > "$tmp/train.txt"
printf 'A lazy dog sleeps in the warm sun all day. %.0s' $(seq 200) > "$tmp/valid.txt"
files=(--set data.source=text --set "data.files=[$tmp/train.txt]" --set "data.valid=[$tmp/valid.txt]")
run files-one 1,1,1 "${files[@]}" "${ev[@]}"
run files-3d 1,2,2 "${files[@]}" "${ev[@]}"
close files-one files-3d

# TensorBoard: the event file decodes independently and holds the metrics' numbers.
rm -rf "$tmp/tb"
run board 1,1,1 "${split[@]}" "${ev[@]}" --tensorboard "$tmp/tb"
events=$(ls "$tmp"/tb/events.out.tfevents.* 2> /dev/null | head -1)
[ -n "$events" ] || fail "no event file in $tmp/tb"
"$python" "$reader" "$events" > "$tmp/events.txt" || fail "the event file does not decode"
head -1 "$tmp/events.txt" | grep -q $'^version\tbrain.Event:2' || fail "first record: $(head -1 "$tmp/events.txt")"
# The float32 bits of each metrics value, against the event file's.
bits() { "$python" -c 'import struct,sys; print("%08x" % struct.unpack("<I", struct.pack("<f", float(sys.argv[1])))[0])' "$1"; }
while read -r step loss _; do
  want=$(bits "$loss")
  grep -qP "^scalar\t$step\t$want\t[^\t]*\ttrain/loss$" "$tmp/events.txt" ||
    fail "train/loss of step $step ($want) not in the event file"
done < <(training "$tmp/board.jsonl")
while read -r step loss; do
  want=$(bits "$loss")
  grep -qP "^scalar\t$step\t$want\t[^\t]*\tvalid/loss$" "$tmp/events.txt" ||
    fail "valid/loss of step $step ($want) not in the event file"
done < <(valid "$tmp/board.jsonl")
for tag in train/lr train/grad_norm train/tokens_per_s train/mfu train/peak_mem_gib valid/perplexity; do
  [ "$(grep -cP "\t$tag$" "$tmp/events.txt")" -ge 2 ] || fail "no $tag in the event file"
done
echo "tensorboard: $(grep -c '^scalar' "$tmp/events.txt") scalars decoded from $(basename "$events")"

# No validation data: a config error naming the key, before training.
"$train" --config "$configs/gpt-tiny.yaml" --set eval.every=2 > "$tmp/noval.log" 2>&1
code=$?
[ "$code" -eq 2 ] && grep -q "eval.every.*needs validation data" "$tmp/noval.log" ||
  fail "eval.every without validation data: exit $code: $(cat "$tmp/noval.log")"
echo "PASS"
