#include "merak/config/fields.h"

namespace merak::config::detail {

std::vector<Field> fields_of(Config& c) {
  ModelConfig& m = c.model;
  DataConfig& d = c.data;
  OptimizerConfig& o = c.optimizer;
  ScheduleConfig& s = c.schedule;
  TrainConfig& t = c.train;
  ParallelConfig& p = c.parallel;
  CheckpointConfig& k = c.checkpoint;
  EvalConfig& e = c.eval;
  return {
      {"model", "family", &m.family},
      {"model", "layers", &m.layers},
      {"model", "hidden", &m.hidden},
      {"model", "heads", &m.heads},
      {"model", "ffn_hidden", &m.ffn_hidden},
      {"model", "max_seq", &m.max_seq},
      {"model", "vocab", &m.vocab},
      {"model", "type_vocab", &m.type_vocab},
      {"model", "dropout", &m.dropout},
      {"model", "ln_eps", &m.ln_eps},
      {"model", "init_std", &m.init_std},
      {"model", "init_from", &m.init_from},
      {"model", "onnx", &m.onnx},

      {"data", "source", &d.source},
      {"data", "files", &d.files},
      {"data", "valid", &d.valid},
      {"data", "valid_split", &d.valid_split},
      {"data", "tokenizer", &d.tokenizer},
      {"data", "vocab", &d.vocab},
      {"data", "merges", &d.merges},
      {"data", "generated_tokens", &d.generated_tokens},
      {"data", "mlm_probability", &d.mlm_probability},
      {"data", "seed", &d.seed},

      {"optimizer", "lr", &o.lr},
      {"optimizer", "beta1", &o.beta1},
      {"optimizer", "beta2", &o.beta2},
      {"optimizer", "eps", &o.eps},
      {"optimizer", "weight_decay", &o.weight_decay},
      {"optimizer", "grad_clip", &o.grad_clip},

      {"schedule", "warmup_steps", &s.warmup_steps},
      {"schedule", "decay", &s.decay},
      {"schedule", "min_lr", &s.min_lr},

      {"train", "steps", &t.steps},
      {"train", "batch", &t.batch},
      {"train", "micro_batch", &t.micro_batch},
      {"train", "seq_len", &t.seq_len},
      {"train", "log_interval", &t.log_interval},
      {"train", "seed", &t.seed},
      {"train", "threads", &t.threads},
      {"train", "device", &t.device},
      {"train", "gpus_share", &t.gpus_share},
      {"train", "precision", &t.precision},
      {"train", "loss_scale.mode", &t.loss_scale.mode},
      {"train", "loss_scale.initial", &t.loss_scale.initial},
      {"train", "loss_scale.growth", &t.loss_scale.growth},
      {"train", "loss_scale.backoff", &t.loss_scale.backoff},
      {"train", "loss_scale.growth_interval", &t.loss_scale.growth_interval},
      {"train", "loss_scale.hysteresis", &t.loss_scale.hysteresis},
      {"train", "loss_scale.min", &t.loss_scale.min},

      {"parallel", "dp", &p.dp},
      {"parallel", "pp", &p.pp},
      {"parallel", "tp", &p.tp},
      {"parallel", "schedule", &p.schedule},
      {"parallel", "virtual_stages", &p.virtual_stages},
      {"parallel", "micro_batches", &p.micro_batches},
      {"parallel", "recompute", &p.recompute},
      {"parallel", "recompute_ratio", &p.recompute_ratio},
      {"parallel", "zero1", &p.zero1},
      {"parallel", "bucket_mb", &p.bucket_mb},
      {"parallel", "dp_shared_memory", &p.dp_shared_memory},
      {"parallel", "dp_shared_params", &p.dp_shared_params},
      {"parallel", "tp_shared_memory", &p.tp_shared_memory},
      {"parallel", "tp_subpipeline", &p.tp_subpipeline},
      {"parallel", "hardware", &p.hardware},
      {"parallel", "comm", &p.comm},
      {"parallel", "comm_timeout", &p.comm_timeout},

      {"checkpoint", "dir", &k.dir},
      {"checkpoint", "every", &k.every},
      {"checkpoint", "keep", &k.keep},
      {"checkpoint", "async", &k.async},

      {"eval", "every", &e.every},
      {"eval", "batches", &e.batches},
  };
}

const std::vector<std::string>& section_names() {
  static const std::vector<std::string> names = {"model", "data", "optimizer", "schedule",
                                                 "train", "parallel", "checkpoint",
                                                 "eval"};
  return names;
}

}  // namespace merak::config::detail
