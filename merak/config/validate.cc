#include "merak/config/validate.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "merak/config/suggest.h"
#include "merak/config/value.h"
#include "merak/core/parallel.h"

namespace merak::config::detail {
namespace {

std::string str(double v) { return format_double(v); }
std::string str(int64_t v) { return std::to_string(v); }

// Collects the rules in order; the first broken one is kept.
class Checker {
 public:
  void require(bool ok, const std::string& key, const std::string& message) {
    if (!ok && !problem_) problem_ = Problem{key, message};
  }
  void at_least(int64_t v, int64_t low, const std::string& key) {
    require(v >= low, key, "must be >= " + str(low) + ", got " + str(v));
  }
  void at_most(int64_t v, int64_t high, const std::string& key) {
    require(v <= high, key, "must be <= " + str(high) + ", got " + str(v));
  }
  void positive(double v, const std::string& key) {
    require(v > 0, key, "must be > 0, got " + str(v));
  }
  void non_negative(double v, const std::string& key) {
    require(v >= 0, key, "must be >= 0, got " + str(v));
  }
  // low <= v < high
  void in_half_open(double v, double low, double high, const std::string& key) {
    require(v >= low && v < high, key,
            "must be in [" + str(low) + ", " + str(high) + "), got " + str(v));
  }
  void one_of(const std::string& v, const std::vector<std::string>& allowed,
              const std::string& key) {
    for (const std::string& a : allowed) {
      if (v == a) return;
    }
    std::string list;
    for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
    std::string message = "must be one of " + list + ", got " + quote(v);
    std::string guess = closest(v, allowed);
    if (!guess.empty()) message += " (did you mean '" + guess + "'?)";
    require(false, key, message);
  }
  std::optional<Problem> result() const { return problem_; }

 private:
  std::optional<Problem> problem_;
};

// train.loss_scale: in range under f16; elsewhere left at its defaults, so that a value set for
// nothing is reported instead of ignored. (to_yaml writes the defaults, which read back.)
void check_loss_scale(const TrainConfig& t, Checker& k) {
  const LossScaleConfig& l = t.loss_scale;
  const LossScaleConfig d;
  const std::string p = "train.loss_scale.";
  // Every key with whether it differs from its default; the first two apply in static mode.
  const std::vector<std::pair<std::string, bool>> keys = {
      {p + "mode", l.mode != d.mode},
      {p + "initial", l.initial != d.initial},
      {p + "growth", l.growth != d.growth},
      {p + "backoff", l.backoff != d.backoff},
      {p + "growth_interval", l.growth_interval != d.growth_interval},
      {p + "hysteresis", l.hysteresis != d.hysteresis},
      {p + "min", l.min != d.min},
  };
  if (t.precision != "f16") {
    for (const auto& [key, changed] : keys) {
      k.require(!changed, key,
                "sets f16 loss scaling, but train.precision is " + t.precision +
                    " (only f16 needs a loss scale)");
    }
    return;
  }
  k.one_of(l.mode, {"dynamic", "static"}, p + "mode");
  // The scaler computes in f32: a value must neither overflow nor flush to 0 there.
  auto f32_positive = [](double v) {
    return v > 0 && v <= std::numeric_limits<float>::max() && static_cast<float>(v) > 0;
  };
  k.require(f32_positive(l.initial), p + "initial",
            "must be > 0 and within f32's range, got " + str(l.initial));
  if (l.mode == "static") {
    for (size_t i = 2; i < keys.size(); ++i) {
      k.require(!keys[i].second, keys[i].first,
                "is for train.loss_scale.mode: dynamic only (static keeps "
                "train.loss_scale.initial)");
    }
    return;
  }
  k.require(l.growth > 1 && f32_positive(l.growth), p + "growth",
            "must be > 1 and within f32's range, got " + str(l.growth));
  const float backoff = static_cast<float>(l.backoff);  // 1 - 1e-9 would round to 1
  k.require(backoff > 0 && backoff < 1, p + "backoff",
            "must be in (0, 1), got " + str(l.backoff));
  k.at_least(l.growth_interval, 1, p + "growth_interval");
  k.at_least(l.hysteresis, 1, p + "hysteresis");
  k.require(f32_positive(l.min), p + "min",
            "must be > 0 and within f32's range, got " + str(l.min));
  k.require(l.min <= l.initial, p + "min",
            "must be <= train.loss_scale.initial " + str(l.initial) + ", got " + str(l.min));
}

}  // namespace

std::optional<Problem> first_problem(const Config& c) {
  Checker k;
  const ModelConfig& m = c.model;
  k.one_of(m.family, {"gpt", "bert"}, "model.family");
  k.at_least(m.layers, 1, "model.layers");
  k.at_least(m.hidden, 1, "model.hidden");
  k.at_least(m.heads, 1, "model.heads");
  if (m.hidden >= 1 && m.heads >= 1) {
    k.require(m.hidden % m.heads == 0, "model.heads",
              "model.hidden " + str(m.hidden) + " is not divisible by model.heads " +
                  str(m.heads));
  }
  k.at_least(m.ffn_hidden, 0, "model.ffn_hidden");
  k.at_least(m.max_seq, 1, "model.max_seq");
  k.at_least(m.vocab, 1, "model.vocab");
  k.at_least(m.type_vocab, 1, "model.type_vocab");
  // kMaxWidth, kMaxDepth: config.h.
  k.at_most(m.layers, kMaxDepth, "model.layers");
  k.at_most(m.heads, kMaxDepth, "model.heads");
  for (const auto& [v, key] : {std::pair{m.hidden, "model.hidden"},
                               {m.ffn_hidden, "model.ffn_hidden"},
                               {m.max_seq, "model.max_seq"},
                               {m.vocab, "model.vocab"},
                               {m.type_vocab, "model.type_vocab"}})
    k.at_most(v, kMaxWidth, key);
  k.in_half_open(m.dropout, 0, 1, "model.dropout");
  k.positive(m.ln_eps, "model.ln_eps");
  k.positive(m.init_std, "model.init_std");
  if (!m.onnx.empty()) {
    // An imported network has its own shape and weights: a key that would shape or initialise a
    // built one is reported, not ignored.
    const ModelConfig d;
    const std::pair<bool, const char*> built_only[] = {
        {m.layers != d.layers, "model.layers"},
        {m.hidden != d.hidden, "model.hidden"},
        {m.heads != d.heads, "model.heads"},
        {m.ffn_hidden != d.ffn_hidden, "model.ffn_hidden"},
        {m.max_seq != d.max_seq, "model.max_seq"},
        {m.type_vocab != d.type_vocab, "model.type_vocab"},
        {m.dropout != d.dropout, "model.dropout"},
        {m.ln_eps != d.ln_eps, "model.ln_eps"},
        {m.init_std != d.init_std, "model.init_std"}};
    for (const auto& [changed, key] : built_only)
      k.require(!changed, key,
                "shapes a model Merak builds, but model.onnx names a network (" + m.onnx +
                    ") that has its own");
  }

  const DataConfig& d = c.data;
  k.one_of(d.source, {"generated", "text", "tokens", "megatron"}, "data.source");
  k.one_of(d.tokenizer, {"byte", "gpt2"}, "data.tokenizer");
  k.require(d.valid.empty() || d.source != "generated", "data.valid",
            "needs data.source text, tokens or megatron (the generated corpus has no files)");
  k.require(d.valid_split >= 0 && d.valid_split < 1, "data.valid_split",
            "must be in [0, 1), got " + str(d.valid_split));
  k.require(d.valid.empty() || d.valid_split == 0, "data.valid_split",
            "is for data without data.valid; both are set");
  const EvalConfig& e = c.eval;
  k.at_least(e.every, 0, "eval.every");
  k.at_least(e.batches, 1, "eval.batches");
  k.require(e.every == 0 || !d.valid.empty() || d.valid_split > 0, "eval.every",
            "needs validation data: data.valid (files) or data.valid_split (a held-out share)");
  k.require(d.source == "generated" || !d.files.empty(), "data.files",
            "must name at least one file when data.source is '" + d.source + "'");
  k.at_least(d.generated_tokens, 1, "data.generated_tokens");
  k.at_most(d.generated_tokens, int64_t(1) << 31, "data.generated_tokens");  // held in memory
  k.require(d.mlm_probability > 0 && d.mlm_probability < 1, "data.mlm_probability",
            "must be in (0, 1), got " + str(d.mlm_probability));

  const OptimizerConfig& o = c.optimizer;
  k.positive(o.lr, "optimizer.lr");
  k.in_half_open(o.beta1, 0, 1, "optimizer.beta1");
  k.in_half_open(o.beta2, 0, 1, "optimizer.beta2");
  k.positive(o.eps, "optimizer.eps");
  k.non_negative(o.weight_decay, "optimizer.weight_decay");
  k.non_negative(o.grad_clip, "optimizer.grad_clip");

  const ScheduleConfig& s = c.schedule;
  k.at_least(s.warmup_steps, 0, "schedule.warmup_steps");
  k.one_of(s.decay, {"cosine", "linear", "constant"}, "schedule.decay");
  k.non_negative(s.min_lr, "schedule.min_lr");
  k.require(s.min_lr <= o.lr, "schedule.min_lr",
            "must be <= optimizer.lr " + str(o.lr) + ", got " + str(s.min_lr));

  const TrainConfig& t = c.train;
  k.at_least(t.steps, 1, "train.steps");
  k.at_least(t.batch, 1, "train.batch");
  k.at_most(t.batch, kMaxWidth, "train.batch");
  k.at_least(t.micro_batch, 0, "train.micro_batch");
  if (t.batch >= 1 && t.micro_batch >= 1) {
    k.require(t.batch % t.micro_batch == 0, "train.micro_batch",
              "train.micro_batch " + str(t.micro_batch) + " does not divide train.batch " +
                  str(t.batch));
  }
  k.at_least(t.seq_len, 1, "train.seq_len");
  k.require(t.seq_len <= m.max_seq || !m.onnx.empty(), "train.seq_len",
            "train.seq_len " + str(t.seq_len) + " exceeds model.max_seq " + str(m.max_seq));
  k.at_least(t.log_interval, 1, "train.log_interval");
  k.at_least(t.threads, 0, "train.threads");
  k.at_most(t.threads, kThreadLimit, "train.threads");
  k.one_of(t.device, {"cpu", "cuda"}, "train.device");
  k.one_of(t.precision, {"f32", "bf16", "f16"}, "train.precision");
  // The CPU kernels compute in f32 only.
  k.require(t.device != "cpu" || t.precision == "f32", "train.precision",
            "16-bit compute (" + t.precision +
                ") is for train.device: cuda; CPU training keeps f32");
  check_loss_scale(t, k);

  const ParallelConfig& p = c.parallel;
  // A key left to the layout search holds a placeholder until the search picks its value; the
  // rules tying it to other keys are checked on every candidate instead (the search runs them).
  const auto is_auto = [&p](const std::string& key) {
    return std::find(p.auto_keys.begin(), p.auto_keys.end(), key) != p.auto_keys.end();
  };
  const bool pp_auto = is_auto("parallel.pp");
  k.at_least(p.dp, 1, "parallel.dp");
  k.at_least(p.pp, 1, "parallel.pp");
  k.at_least(p.tp, 1, "parallel.tp");
  k.one_of(p.schedule, {"gpipe", "1f1b", "shifted", "interleaved", "zb"}, "parallel.schedule");
  k.at_least(p.virtual_stages, 1, "parallel.virtual_stages");
  // Interleaving cuts the model into pp x virtual_stages chunks, a rank holding every pp-th.
  if (p.schedule == "interleaved") {
    k.require(p.virtual_stages >= 2 || is_auto("parallel.virtual_stages"),
              "parallel.virtual_stages",
              "the interleaved schedule runs several model chunks a rank: needs >= 2, got " +
                  str(p.virtual_stages));
    k.require(p.pp >= 2 || pp_auto, "parallel.schedule",
              "interleaved pipelines over ranks: needs parallel.pp >= 2, got " + str(p.pp));
    k.require(!p.tp_subpipeline, "parallel.tp_subpipeline",
              "is not combined with the interleaved schedule");
  } else if (!is_auto("parallel.schedule")) {
    if (p.schedule == "zb")
      k.require(p.pp >= 2 || pp_auto, "parallel.schedule",
                "zb moves parameter gradients into the waits of a pipeline: needs parallel.pp "
                ">= 2, got " + str(p.pp));
    k.require(p.virtual_stages == 1, "parallel.virtual_stages",
              "only the interleaved schedule has virtual stages (schedule is " + p.schedule +
                  "), got " + str(p.virtual_stages));
  }
  k.at_least(p.micro_batches, 0, "parallel.micro_batches");
  k.one_of(p.recompute, {"none", "full", "memory", "ratio"}, "parallel.recompute");
  k.require(p.bucket_mb > 0 && p.bucket_mb <= 4096, "parallel.bucket_mb",
            "must be in (0, 4096], got " + str(p.bucket_mb));
  k.require(p.recompute_ratio >= 0 && p.recompute_ratio <= 1, "parallel.recompute_ratio",
            "must be in [0, 1], got " + str(p.recompute_ratio));
  k.require(!p.hardware.empty(), "parallel.hardware", "must name a hardware profile");
  k.one_of(p.comm, {"auto", "nccl", "mpi"}, "parallel.comm");
  k.positive(p.comm_timeout, "parallel.comm_timeout");
  const CheckpointConfig& ck = c.checkpoint;
  k.at_least(ck.every, 0, "checkpoint.every");
  k.at_least(ck.keep, 0, "checkpoint.keep");
  k.require(ck.every == 0 || !ck.dir.empty(), "checkpoint.every",
            "saves every " + str(ck.every) + " steps, but checkpoint.dir is empty");
  k.require(!ck.async || !ck.dir.empty(), "checkpoint.async",
            "saves in the background, but checkpoint.dir is empty");
  k.require(p.comm != "nccl" || t.device == "cuda", "parallel.comm",
            "nccl carries device memory: it needs train.device: cuda (the device is " + t.device +
                ")");
  // The replicas of a 16-bit run each keep full f32 masters and moments: the data-parallel
  // engine has no ZeRO-1 over them yet (runtime/data_parallel.cc refuses it at start-up).
  k.require(!p.zero1 || t.precision == "f32" || p.dp <= 1, "parallel.zero1",
            "ZeRO-1 is not supported with train.precision " + t.precision +
                " over data-parallel replicas yet (parallel.dp " + str(p.dp) +
                "): set parallel.zero1: false, or train.precision: f32");
  k.require(!p.tp_subpipeline || p.tp > 1, "parallel.tp_subpipeline",
            "overlaps tensor-parallel all-reduces: it needs parallel.tp > 1");
  // Tensor parallelism splits attention by heads (vocabulary splits may be uneven).
  // (An imported network's heads are found in its graph: the partitioner says when they do not
  // divide.)
  if (p.tp >= 1 && m.heads >= 1 && m.onnx.empty())
    k.require(m.heads % p.tp == 0, "parallel.tp",
              "model.heads " + str(m.heads) + " is not divisible by parallel.tp " + str(p.tp));
  // The global batch is the same for every layout: each replica takes batch / dp sequences in
  // micro-batches of one size.
  if (t.batch >= 1 && p.dp >= 1 && t.micro_batch >= 0 && p.micro_batches >= 0) {
    k.require(t.batch % p.dp == 0, "parallel.dp",
              "train.batch " + str(t.batch) + " is not divisible by parallel.dp " + str(p.dp));
    const int64_t replica = t.batch / p.dp;
    if (t.batch % p.dp == 0 && p.micro_batches > 0) {
      k.require(replica % p.micro_batches == 0, "parallel.micro_batches",
                str(p.micro_batches) + " micro-batches do not divide the " + str(replica) +
                    " sequences each data-parallel replica takes");
      if (replica % p.micro_batches == 0 && t.micro_batch > 0)
        k.require(replica / p.micro_batches == t.micro_batch, "parallel.micro_batches",
                  str(p.micro_batches) + " micro-batches of the " + str(replica) +
                      " sequences a replica takes hold " + str(replica / p.micro_batches) +
                      " each, but train.micro_batch is " + str(t.micro_batch));
    } else if (t.batch % p.dp == 0 && t.micro_batch > 0) {
      k.require(replica % t.micro_batch == 0, "train.micro_batch",
                "train.micro_batch " + str(t.micro_batch) + " does not divide the " +
                    str(replica) + " sequences each of the " + str(p.dp) +
                    " data-parallel replicas takes");
    }
    // Interleaving sends micro-batches through the ranks in groups of pp.
    if (p.schedule == "interleaved" && p.pp >= 2 && t.batch % p.dp == 0 && !pp_auto &&
        !is_auto("parallel.dp") && !is_auto("train.micro_batch")) {
      const int64_t size = p.micro_batches > 0 ? replica / std::max<int64_t>(1, p.micro_batches)
                           : t.micro_batch > 0 ? t.micro_batch
                                               : replica;
      const int64_t count = size > 0 ? replica / size : 0;
      k.require(count % p.pp == 0, "parallel.schedule",
                "interleaved needs the micro-batches per replica (" + str(count) +
                    ") to be a multiple of parallel.pp " + str(p.pp));
    }
    // The sub-pipelined mode runs each micro-batch as two halves.
    if (p.tp_subpipeline && t.batch % p.dp == 0) {
      const int64_t size = p.micro_batches > 0 ? replica / std::max<int64_t>(1, p.micro_batches)
                           : t.micro_batch > 0 ? t.micro_batch
                                               : replica;
      k.require(size % 2 == 0, "parallel.tp_subpipeline",
                "cuts each micro-batch in two, but micro-batches hold " + str(size) +
                    " sequences (needs an even number)");
    }
  }
  return k.result();
}

}  // namespace merak::config::detail
