// merak/config: every shipped config loads, each kind of mistake is reported on one line naming
// the file and the key, --set overrides apply in order, and to_yaml round-trips.
#include <catch2/catch.hpp>

#include <algorithm>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "merak/config/config.h"
#include "tests/test_files.h"

namespace fs = std::filesystem;
using merak::config::Config;
using merak::config::ConfigError;
using merak::config::load;
using merak::config::model_changes;
using merak::config::parse;
using merak::config::to_yaml;

using namespace merak::testing;  // tests/test_files.h

namespace {

// configs/ inside this test's runfiles.
fs::path configs_dir() {
  return fs::path(runfile("configs"));
}

// A scratch file under Bazel's per-test temporary directory.
fs::path write_temp(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  write_file(path, text);
  return path;
}

// The message parse() fails with; "" (and a test failure) when it does not fail.
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse(yaml, "x.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL_CHECK("no ConfigError for:\n" << yaml);
  return "";
}

void check_same(const Config& a, const Config& b) {
  CHECK(a.model.family == b.model.family);
  CHECK(a.model.layers == b.model.layers);
  CHECK(a.model.hidden == b.model.hidden);
  CHECK(a.model.heads == b.model.heads);
  CHECK(a.model.ffn_hidden == b.model.ffn_hidden);
  CHECK(a.model.max_seq == b.model.max_seq);
  CHECK(a.model.vocab == b.model.vocab);
  CHECK(a.model.type_vocab == b.model.type_vocab);
  CHECK(a.model.dropout == b.model.dropout);
  CHECK(a.model.ln_eps == b.model.ln_eps);
  CHECK(a.model.init_std == b.model.init_std);
  CHECK(a.model.init_from == b.model.init_from);
  CHECK(a.model.onnx == b.model.onnx);
  CHECK(a.data.source == b.data.source);
  CHECK(a.data.files == b.data.files);
  CHECK(a.data.generated_tokens == b.data.generated_tokens);
  CHECK(a.data.mlm_probability == b.data.mlm_probability);
  CHECK(a.data.seed == b.data.seed);
  CHECK(a.optimizer.lr == b.optimizer.lr);
  CHECK(a.optimizer.beta1 == b.optimizer.beta1);
  CHECK(a.optimizer.beta2 == b.optimizer.beta2);
  CHECK(a.optimizer.eps == b.optimizer.eps);
  CHECK(a.optimizer.weight_decay == b.optimizer.weight_decay);
  CHECK(a.optimizer.grad_clip == b.optimizer.grad_clip);
  CHECK(a.schedule.warmup_steps == b.schedule.warmup_steps);
  CHECK(a.schedule.decay == b.schedule.decay);
  CHECK(a.schedule.min_lr == b.schedule.min_lr);
  CHECK(a.train.steps == b.train.steps);
  CHECK(a.train.batch == b.train.batch);
  CHECK(a.train.micro_batch == b.train.micro_batch);
  CHECK(a.train.seq_len == b.train.seq_len);
  CHECK(a.train.log_interval == b.train.log_interval);
  CHECK(a.train.seed == b.train.seed);
  CHECK(a.train.threads == b.train.threads);
  CHECK(a.train.device == b.train.device);
  CHECK(a.train.gpus_share == b.train.gpus_share);
  CHECK(a.train.precision == b.train.precision);
  CHECK(a.train.loss_scale.mode == b.train.loss_scale.mode);
  CHECK(a.train.loss_scale.initial == b.train.loss_scale.initial);
  CHECK(a.train.loss_scale.growth == b.train.loss_scale.growth);
  CHECK(a.train.loss_scale.backoff == b.train.loss_scale.backoff);
  CHECK(a.train.loss_scale.growth_interval == b.train.loss_scale.growth_interval);
  CHECK(a.train.loss_scale.hysteresis == b.train.loss_scale.hysteresis);
  CHECK(a.train.loss_scale.min == b.train.loss_scale.min);
}

struct Shape {
  std::string family;
  int64_t layers, hidden, heads, max_seq, vocab;
};

const std::map<std::string, Shape>& shipped() {
  static const std::map<std::string, Shape> shapes = {
      {"gpt-tiny.yaml", {"gpt", 0, 0, 4, 64, 256}},  // layers/hidden: a range, checked below
      {"gpt-small.yaml", {"gpt", 12, 768, 12, 1024, 50257}},
      {"gpt1.5b.yaml", {"gpt", 48, 1600, 25, 1024, 50257}},
      {"gpt1.3b.yaml", {"gpt", 24, 2048, 16, 2048, 50257}},
      {"gpt2.5b.yaml", {"gpt", 54, 1920, 20, 1024, 50257}},
      {"gpt8.3b.yaml", {"gpt", 72, 3072, 32, 2048, 50257}},
      {"gpt20b.yaml", {"gpt", 44, 6144, 64, 2048, 50257}},
      {"bert-base.yaml", {"bert", 12, 768, 12, 512, 30522}},
      {"bert-large.yaml", {"bert", 24, 1024, 16, 512, 30522}},
      {"bert-tiny.yaml", {"bert", 2, 128, 4, 64, 260}},
  };
  return shapes;
}

std::vector<fs::path> config_files() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(configs_dir())) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  return files;
}

}  // namespace

TEST_CASE("every file in configs/ loads and validates", "[config]") {
  std::set<std::string> names;
  for (const fs::path& path : config_files()) {
    INFO(path.string());
    names.insert(path.filename().string());
    Config c;
    REQUIRE_NOTHROW(c = load(path.string()));
    CHECK(c.path == path.string());
  }
  for (const auto& [name, shape] : shipped()) {
    INFO(name);
    CHECK(names.count(name) == 1);
  }
}

TEST_CASE("shipped configs have the published shapes", "[config]") {
  for (const auto& [name, shape] : shipped()) {
    INFO(name);
    Config c = load((configs_dir() / name).string());
    CHECK(c.model.family == shape.family);
    if (shape.layers != 0) CHECK(c.model.layers == shape.layers);
    if (shape.hidden != 0) CHECK(c.model.hidden == shape.hidden);
    CHECK(c.model.heads == shape.heads);
    CHECK(c.model.max_seq == shape.max_seq);
    CHECK(c.model.vocab == shape.vocab);
    CHECK(c.train.seq_len == c.model.max_seq);
  }
}

TEST_CASE("gpt-tiny and bert-tiny are small CPU runs on generated data", "[config]") {
  Config gpt = load((configs_dir() / "gpt-tiny.yaml").string());
  CHECK(gpt.model.layers >= 2);
  CHECK(gpt.model.layers <= 4);
  CHECK(gpt.model.hidden >= 128);
  CHECK(gpt.model.hidden <= 256);
  CHECK(gpt.data.source == "generated");
  CHECK(gpt.train.batch >= 8);
  CHECK(gpt.train.batch <= 16);
  CHECK(gpt.train.steps >= 150);
  CHECK(gpt.train.steps <= 300);
  CHECK(gpt.optimizer.lr == Approx(1e-3));
  CHECK(gpt.schedule.warmup_steps == 20);
  CHECK(gpt.schedule.decay == "cosine");
  CHECK(gpt.train.log_interval == 10);
  CHECK(gpt.train.device == "cpu");

  Config bert = load((configs_dir() / "bert-tiny.yaml").string());
  CHECK(bert.data.source == "generated");
  CHECK(bert.train.device == "cpu");
}

TEST_CASE("large configs have realistic training sections", "[config]") {
  for (const char* name : {"gpt-small.yaml", "gpt1.5b.yaml", "gpt2.5b.yaml", "gpt8.3b.yaml",
                           "gpt20b.yaml", "bert-base.yaml", "bert-large.yaml"}) {
    INFO(name);
    Config c = load((configs_dir() / name).string());
    CHECK(c.optimizer.lr >= 1.5e-4);
    CHECK(c.optimizer.lr <= 6e-4);
    CHECK(c.schedule.warmup_steps > 0);
    CHECK(c.optimizer.weight_decay == 0.1);
    CHECK(c.optimizer.grad_clip == 1.0);
    CHECK(c.train.steps > c.schedule.warmup_steps);
  }
}

TEST_CASE("an empty file gives the defaults; a file sets only what it names", "[config]") {
  Config defaults;
  defaults.path = "x.yaml";
  check_same(parse("", "x.yaml"), defaults);
  check_same(parse("# nothing but a comment\n", "x.yaml"), defaults);
  check_same(parse("model:\nschedule:\n", "x.yaml"), defaults);  // sections left empty

  Config c = parse("optimizer:\n  lr: 0.01\ntrain:\n  steps: 7\n", "x.yaml");
  Config expected = defaults;
  expected.optimizer.lr = 0.01;
  expected.train.steps = 7;
  check_same(c, expected);
}

TEST_CASE("unknown keys are named, with the closest known key", "[config]") {
  CHECK(error_of("optimizer:\n  lrr: 1\n") ==
        "x.yaml: key 'optimizer.lrr': unknown key (did you mean 'optimizer.lr'?)");
  CHECK(error_of("train:\n  stpes: 1\n") ==
        "x.yaml: key 'train.stpes': unknown key (did you mean 'train.steps'?)");
  CHECK(error_of("model:\n  Layers: 2\n") ==
        "x.yaml: key 'model.Layers': unknown key (did you mean 'model.layers'?)");
  // The right name in the wrong section.
  CHECK(error_of("optimizer:\n  warmup_steps: 5\n") ==
        "x.yaml: key 'optimizer.warmup_steps': unknown key (did you mean "
        "'schedule.warmup_steps'?)");
  CHECK(error_of("model:\n  colour: blue\n") == "x.yaml: key 'model.colour': unknown key");
  CHECK(error_of("optimiser:\n  lr: 1\n") ==
        "x.yaml: key 'optimiser': unknown key (did you mean 'optimizer'?)");
  CHECK(error_of("lr: 0.1\n") == "x.yaml: key 'lr': unknown key (did you mean 'optimizer.lr'?)");
  CHECK(error_of("cluster:\n  gpus: 8\n") == "x.yaml: key 'cluster': unknown key");
  // A bare key that is a parallel-section name.
  CHECK(error_of("hardware:\n  gpus: 8\n") ==
        "x.yaml: key 'hardware': unknown key (did you mean 'parallel.hardware'?)");
}

TEST_CASE("wrong types are named with what was expected and what was found", "[config]") {
  CHECK(error_of("train:\n  steps: ten\n") ==
        "x.yaml: key 'train.steps': expected an integer, got 'ten'");
  CHECK(error_of("train:\n  batch: 8.5\n") ==
        "x.yaml: key 'train.batch': expected an integer, got '8.5'");
  CHECK(error_of("train:\n  steps: 99999999999999999999\n") ==
        "x.yaml: key 'train.steps': expected an integer, got '99999999999999999999'");
  CHECK(error_of("train:\n  threads: 4294967296\n") ==
        "x.yaml: key 'train.threads': expected a 32-bit integer, got '4294967296'");
  CHECK(error_of("train:\n  steps:\n") ==
        "x.yaml: key 'train.steps': expected an integer, got no value");
  CHECK(error_of("optimizer:\n  lr: [1, 2]\n") ==
        "x.yaml: key 'optimizer.lr': expected a number, got a list");
  CHECK(error_of("optimizer:\n  lr: 1e-3x\n") ==
        "x.yaml: key 'optimizer.lr': expected a number, got '1e-3x'");
  CHECK(error_of("optimizer:\n  lr: inf\n") ==
        "x.yaml: key 'optimizer.lr': expected a number, got 'inf'");
  CHECK(error_of("model:\n  family: {name: gpt}\n") ==
        "x.yaml: key 'model.family': expected a string, got a map");
  CHECK(error_of("train:\n  gpus_share: maybe\n") ==
        "x.yaml: key 'train.gpus_share': expected true or false, got 'maybe'");
  // A key that moved says where it went.
  CHECK(error_of("model:\n  recompute: true\n") ==
        "x.yaml: key 'model.recompute': no longer a model key: recomputation is chosen by "
        "parallel.recompute (none, full, memory, ratio)");
  CHECK(error_of("data:\n  seed: -1\n") ==
        "x.yaml: key 'data.seed': expected a non-negative integer, got '-1'");
  CHECK(error_of("data:\n  files: a.txt\n") ==
        "x.yaml: key 'data.files': expected a list of strings like [a, b], got 'a.txt'");
  CHECK(error_of("data:\n  files: [a.txt, [b.txt]]\n") ==
        "x.yaml: key 'data.files': expected a list of strings, got an item that is a list");
  // A lone carriage return (an old line ending) would end up inside the value (fuzz finding
  // config-crash-cf403126); Windows line endings are line breaks, as they should be.
  CHECK(error_of("parallel:\n  hardware: a100-80g\r  # note\n") ==
        "x.yaml: key 'parallel.hardware': expected a string without control characters, got "
        "byte 0x0d at character 9");
  CHECK(error_of("data:\n  files: [a.txt, \"b\\x01\"]\n") ==
        "x.yaml: key 'data.files': expected a string without control characters, got byte "
        "0x01 at character 2");
  CHECK(parse("parallel:\r\n  hardware: a100-80g\r\n", "x.yaml", {}).parallel.hardware ==
        "a100-80g");
  CHECK(error_of("model: 3\n") == "x.yaml: key 'model': expected a map of keys, got '3'");
  CHECK(error_of("- model\n- train\n") ==
        "x.yaml: expected a map of sections (model, data, optimizer, schedule, train, parallel), "
        "got a "
        "list");
  CHECK(error_of("train:\n  steps: 1\n  steps: 2\n") ==
        "x.yaml: key 'train.steps': given twice (lines 2 and 3)");
  CHECK(error_of("train:\n  steps: 1\ntrain:\n  batch: 2\n") ==
        "x.yaml: key 'train': given twice (lines 1 and 3)");
  // A multi-line value still gives a one-line message.
  CHECK(error_of("train:\n  steps: |\n    ten\n    eleven\n") ==
        "x.yaml: key 'train.steps': expected an integer, got 'ten\\neleven\\n'");
}

TEST_CASE("values out of range name the key and the rule", "[config]") {
  struct Case {
    const char* yaml;
    const char* message;
  };
  const Case cases[] = {
      {"model:\n  layers: 0", "key 'model.layers': must be >= 1, got 0"},
      {"model:\n  hidden: 0", "key 'model.hidden': must be >= 1, got 0"},
      {"model:\n  heads: 0", "key 'model.heads': must be >= 1, got 0"},
      {"model:\n  max_seq: 0", "key 'model.max_seq': must be >= 1, got 0"},
      {"model:\n  vocab: -5", "key 'model.vocab': must be >= 1, got -5"},
      {"model:\n  vocab: 4611686018427387904",
       "key 'model.vocab': must be <= 16777216, got 4611686018427387904"},
      {"model:\n  layers: 100000", "key 'model.layers': must be <= 65536, got 100000"},
      {"train:\n  batch: 100000000000", "key 'train.batch': must be <= 16777216, got 100000000000"},
      {"data:\n  generated_tokens: 100000000000000",
       "key 'data.generated_tokens': must be <= 2147483648, got 100000000000000"},
      {"model:\n  hidden: 100\n  heads: 3",
       "key 'model.heads': model.hidden 100 is not divisible by model.heads 3"},
      {"model:\n  ffn_hidden: -1", "key 'model.ffn_hidden': must be >= 0, got -1"},
      {"model:\n  dropout: 1.0", "key 'model.dropout': must be in [0, 1), got 1"},
      {"model:\n  dropout: -0.1", "key 'model.dropout': must be in [0, 1), got -0.1"},
      {"model:\n  family: llama",
       "key 'model.family': must be one of gpt, bert, got 'llama'"},
      {"data:\n  source: txt",
       "key 'data.source': must be one of generated, text, tokens, megatron, got 'txt' (did you "
       "mean 'text'?)"},
      {"data:\n  tokenizer: bpe",
       "key 'data.tokenizer': must be one of byte, gpt2, got 'bpe'"},
      {"data:\n  valid_split: 1",
       "key 'data.valid_split': must be in [0, 1), got 1"},
      {"data:\n  valid: [v.bin]", "key 'data.valid': needs data.source text, tokens or megatron "
       "(the generated corpus has no files)"},
      {"eval:\n  every: 5",
       "key 'eval.every': needs validation data: data.valid (files) or data.valid_split (a "
       "held-out share)"},
      {"eval:\n  batches: 0", "key 'eval.batches': must be >= 1, got 0"},
      {"data:\n  source: tokens",
       "key 'data.files': must name at least one file when data.source is 'tokens'"},
      {"data:\n  source: text\n  files: []",
       "key 'data.files': must name at least one file when data.source is 'text'"},
      {"data:\n  mlm_probability: 0", "key 'data.mlm_probability': must be in (0, 1), got 0"},
      {"data:\n  mlm_probability: 1", "key 'data.mlm_probability': must be in (0, 1), got 1"},
      {"optimizer:\n  lr: 0", "key 'optimizer.lr': must be > 0, got 0"},
      {"optimizer:\n  lr: -0.001", "key 'optimizer.lr': must be > 0, got -0.001"},
      {"optimizer:\n  beta1: 1", "key 'optimizer.beta1': must be in [0, 1), got 1"},
      {"optimizer:\n  beta2: -0.5", "key 'optimizer.beta2': must be in [0, 1), got -0.5"},
      {"optimizer:\n  eps: 0", "key 'optimizer.eps': must be > 0, got 0"},
      {"optimizer:\n  weight_decay: -0.1", "key 'optimizer.weight_decay': must be >= 0, got -0.1"},
      {"optimizer:\n  grad_clip: -1", "key 'optimizer.grad_clip': must be >= 0, got -1"},
      {"schedule:\n  warmup_steps: -1", "key 'schedule.warmup_steps': must be >= 0, got -1"},
      {"schedule:\n  decay: cosin",
       "key 'schedule.decay': must be one of cosine, linear, constant, got 'cosin' (did you "
       "mean 'cosine'?)"},
      {"schedule:\n  min_lr: -1e-5", "key 'schedule.min_lr': must be >= 0, got -1e-05"},
      {"optimizer:\n  lr: 0.001\nschedule:\n  min_lr: 0.01",
       "key 'schedule.min_lr': must be <= optimizer.lr 0.001, got 0.01"},
      {"train:\n  steps: 0", "key 'train.steps': must be >= 1, got 0"},
      {"train:\n  batch: 0", "key 'train.batch': must be >= 1, got 0"},
      {"train:\n  micro_batch: -2", "key 'train.micro_batch': must be >= 0, got -2"},
      {"train:\n  batch: 8\n  micro_batch: 3",
       "key 'train.micro_batch': train.micro_batch 3 does not divide train.batch 8"},
      {"train:\n  seq_len: 0", "key 'train.seq_len': must be >= 1, got 0"},
      {"model:\n  max_seq: 32\ntrain:\n  seq_len: 64",
       "key 'train.seq_len': train.seq_len 64 exceeds model.max_seq 32"},
      {"train:\n  log_interval: 0", "key 'train.log_interval': must be >= 1, got 0"},
      {"train:\n  threads: -1", "key 'train.threads': must be >= 0, got -1"},
      {"train:\n  threads: 1025", "key 'train.threads': must be <= 1024, got 1025"},
      {"train:\n  device: metal", "key 'train.device': must be one of cpu, cuda, got 'metal'"},
      {"train:\n  device: cdua",
       "key 'train.device': must be one of cpu, cuda, got 'cdua' (did you mean 'cuda'?)"},
      {"parallel:\n  pp: 2\n  schedule: interleaved",
       "key 'parallel.virtual_stages': the interleaved schedule runs several model chunks a "
       "rank: needs >= 2, got 1"},
      {"parallel:\n  schedule: interleaved\n  virtual_stages: 2",
       "key 'parallel.schedule': interleaved pipelines over ranks: needs parallel.pp >= 2, got 1"},
      {"parallel:\n  schedule: zb",
       "key 'parallel.schedule': zb moves parameter gradients into the waits of a pipeline: "
       "needs parallel.pp >= 2, got 1"},
      {"parallel:\n  pp: 2\n  virtual_stages: 2",
       "key 'parallel.virtual_stages': only the interleaved schedule has virtual stages "
       "(schedule is 1f1b), got 2"},
      {"train:\n  batch: 6\n  micro_batch: 2\nparallel:\n  pp: 2\n  schedule: interleaved\n"
       "  virtual_stages: 2",
       "key 'parallel.schedule': interleaved needs the micro-batches per replica (3) to be a "
       "multiple of parallel.pp 2"},
  };
  for (const Case& c : cases) {
    INFO(c.yaml);
    CHECK(error_of(c.yaml) == std::string("x.yaml: ") + c.message);
  }
}

TEST_CASE("values on the edge of each range are accepted", "[config]") {
  Config c = parse(
      "model:\n  hidden: 6\n  heads: 3\n  dropout: 0\n  max_seq: 16\n"
      "optimizer:\n  lr: 0.5\n  beta1: 0\n  beta2: 0\n  weight_decay: 0\n  grad_clip: 0\n"
      "schedule:\n  warmup_steps: 0\n  min_lr: 0.5\n  decay: constant\n"
      "data:\n  source: text\n  files: [a.txt]\n  mlm_probability: 0.999\n"
      "train:\n  steps: 1\n  batch: 6\n  micro_batch: 6\n  seq_len: 16\n  threads: 0\n"
      "  device: cuda\n",
      "x.yaml");
  CHECK(c.model.heads == 3);
  CHECK(c.schedule.min_lr == 0.5);
  CHECK(c.data.files == std::vector<std::string>{"a.txt"});
  CHECK(c.train.micro_batch == 6);
  CHECK(c.train.device == "cuda");
  CHECK_NOTHROW(parse("train:\n  micro_batch: 0\n", "x.yaml"));  // 0 = no accumulation
}

TEST_CASE("file errors name the file; syntax errors name the line", "[config]") {
  const std::string missing = "/nonexistent-merak-dir/cfg.yaml";
  try {
    load(missing);
    FAIL_CHECK("a missing file loaded");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) ==
          missing + ": cannot read config file (No such file or directory)");
  }
  try {
    load(configs_dir().string());
    FAIL_CHECK("a directory loaded");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) ==
          configs_dir().string() + ": cannot read config file (Is a directory)");
  }

  // Line 3 is indented less than the map it belongs to.
  fs::path bad = write_temp("bad-indent.yaml", "model:\n  layers: 2\n hidden: 3\n");
  try {
    load(bad.string());
    FAIL_CHECK("a file with a syntax error loaded");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.rfind(bad.string() + ": line 3, column ", 0) == 0);
    CHECK(what.find("YAML syntax error") != std::string::npos);
    CHECK(what.find('\n') == std::string::npos);
  }
  const std::string nested = error_of("model:\n  layers: 2\n  hidden: 3: 4\n");
  CHECK(nested.rfind("x.yaml: line 3, column ", 0) == 0);
  CHECK(error_of("model:\n  layers: 2\n---\ntrain:\n  steps: 3\n") ==
        "x.yaml: line 4, column 1: a second YAML document starts here (a config file holds "
        "one)");
  // yaml-cpp's LoadAll never got past a stray ',' after a document (found by fuzzing).
  CHECK(error_of("[a], b") == "x.yaml: line 1, column 4: YAML syntax error: unexpected ','");
  CHECK(error_of(",") == "x.yaml: line 1, column 1: YAML syntax error: unexpected ','");
}

TEST_CASE("--set overrides apply after the file, in order", "[config]") {
  const std::string file = "optimizer:\n  lr: 0.01\n";
  CHECK(parse(file, "x.yaml", {"optimizer.lr=0.03"}).optimizer.lr == 0.03);
  CHECK(parse(file, "x.yaml", {"optimizer.lr=0.03", "optimizer.lr=0.02"}).optimizer.lr == 0.02);
  CHECK(parse(file, "x.yaml", {" train.steps = 5"}).train.steps == 5);

  Config c = parse(file, "x.yaml", {"data.source=text", "data.files=[a.txt,b.txt]"});
  CHECK(c.data.source == "text");
  CHECK(c.data.files == std::vector<std::string>{"a.txt", "b.txt"});
  CHECK(parse(file, "x.yaml", {"train.gpus_share=true"}).train.gpus_share);

  // Validation sees the final values: a later override may repair an earlier one, and an
  // override may make a file's value valid.
  CHECK(parse(file, "x.yaml", {"train.steps=0", "train.steps=3"}).train.steps == 3);
  CHECK(parse("train:\n  seq_len: 128\n", "x.yaml", {"model.max_seq=128"}).train.seq_len ==
        128);

  // Through load() too.
  fs::path path = write_temp("override.yaml", "train:\n  steps: 9\n");
  CHECK(load(path.string(), {"train.steps=11"}).train.steps == 11);
}

TEST_CASE("--set errors name the override", "[config]") {
  CHECK(error_of("", {"optimizer.lrr=1"}) ==
        "x.yaml: --set optimizer.lrr: unknown key (did you mean 'optimizer.lr'?)");
  CHECK(error_of("", {"optimiser.lr=1"}) ==
        "x.yaml: --set optimiser.lr: unknown key (did you mean 'optimizer.lr'?)");
  CHECK(error_of("", {"train.steps=ten"}) ==
        "x.yaml: --set train.steps: expected an integer, got 'ten'");
  CHECK(error_of("", {"train.steps="}) ==
        "x.yaml: --set train.steps: expected an integer, got no value");
  // A string key with nothing after '=' is the empty string (what the shell leaves of
  // checkpoint.dir=""); so is a quoted empty string.
  const Config defaults = parse("checkpoint: {dir: ck}\n", "x.yaml", {});
  CHECK(defaults.checkpoint.dir == "ck");
  for (const char* empty : {"checkpoint.dir=", "checkpoint.dir= ", "checkpoint.dir=\"\""})
    CHECK(parse("checkpoint: {dir: ck}\n", "x.yaml", {empty}).checkpoint.dir.empty());
  CHECK(error_of("", {"train.steps"}) ==
        "x.yaml: --set train.steps: expected KEY=VALUE, like optimizer.lr=3e-4");
  CHECK(error_of("", {"model=1"}) ==
        "x.yaml: --set model: names a section; set one key of it, like model.family");
  const std::string broken = error_of("", {"data.files=[a.txt"});
  CHECK(broken.rfind("x.yaml: --set data.files: cannot read '[a.txt' as YAML: ", 0) == 0);
  CHECK(broken.find('\n') == std::string::npos);
  // A rule broken by an override's value is reported at the override.
  CHECK(error_of("", {"model.heads=5"}) ==
        "x.yaml: --set model.heads: model.hidden 256 is not divisible by model.heads 5");
  CHECK(error_of("", {"optimizer.lr=-1"}) == "x.yaml: --set optimizer.lr: must be > 0, got -1");
  // ... and one the file broke is still reported at the file's key.
  CHECK(error_of("train:\n  steps: 0\n", {"train.batch=4"}) ==
        "x.yaml: key 'train.steps': must be >= 1, got 0");
}

TEST_CASE("to_yaml writes every key and reads back to the same config", "[config]") {
  // Every field away from its default, strings that need quoting, and a double that only
  // survives with full precision.
  Config c;
  c.model = {"bert", 3, 48, 6, 40, 100, 99, 3, 0.25, 1e-12, 0.01};
  c.data.source = "tokens";
  c.data.files = {"a b.txt", "x: y.bin", "~", "[z]", "#c", "null", "yes", "-", "a,b", "é"};
  c.data.generated_tokens = 12345;
  c.data.mlm_probability = 0.2;
  c.data.seed = 18446744073709551615ull;
  c.optimizer = {0.1 + 0.2, 0.8, 0.9, 1e-7, 0.05, 0.5};
  c.schedule = {17, "linear", 1e-9};
  c.train.steps = 1000;
  c.train.batch = 24;
  c.train.micro_batch = 4;
  c.train.seq_len = 96;
  c.train.log_interval = 7;
  c.train.seed = 99;
  c.train.threads = 3;
  c.train.device = "cuda";
  c.train.gpus_share = true;
  c.train.precision = "f16";
  c.train.loss_scale = {"dynamic", 1024, 4, 0.25, 50, 3, 0.5};
  c.path = "orig.yaml";

  const std::string text = to_yaml(c);
  INFO(text);
  Config back = parse(text, "orig.yaml");
  check_same(back, c);
  CHECK(to_yaml(back) == text);

  // Every key, section by section, read with yaml-cpp directly.
  const std::map<std::string, std::set<std::string>> keys = {
      {"model",
       {"family", "layers", "hidden", "heads", "ffn_hidden", "max_seq", "vocab", "type_vocab",
        "dropout", "ln_eps", "init_std", "init_from", "onnx"}},
      {"data",
       {"source", "files", "valid", "valid_split", "tokenizer", "vocab", "merges",
        "generated_tokens", "mlm_probability", "seed"}},
      {"optimizer", {"lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"}},
      {"schedule", {"warmup_steps", "decay", "min_lr"}},
      {"train",
       {"steps", "batch", "micro_batch", "seq_len", "log_interval", "seed", "threads", "device",
        "gpus_share", "precision", "loss_scale"}},
      {"parallel",
       {"dp", "pp", "tp", "schedule", "micro_batches", "recompute", "recompute_ratio", "zero1",
        "bucket_mb", "tp_subpipeline", "hardware", "virtual_stages",
        "dp_shared_memory", "dp_shared_params", "tp_shared_memory", "comm",
        "comm_timeout"}},
      {"checkpoint", {"dir", "every", "keep", "async"}},
      {"eval", {"every", "batches"}},
  };
  YAML::Node root = YAML::Load(text);
  REQUIRE(root.IsMap());
  std::map<std::string, std::set<std::string>> found;
  for (const auto& section : root) {
    for (const auto& item : section.second) {
      found[section.first.Scalar()].insert(item.first.Scalar());
    }
  }
  CHECK(found == keys);
  // The loss-scale group is a map nested in train.
  const YAML::Node group = root["train"]["loss_scale"];
  REQUIRE(group.IsMap());
  std::set<std::string> group_keys;
  for (const auto& item : group) group_keys.insert(item.first.Scalar());
  CHECK(group_keys == std::set<std::string>{"mode", "initial", "growth", "backoff",
                                            "growth_interval", "hysteresis", "min"});
  CHECK(group["initial"].Scalar() == "1024");
  CHECK(group["hysteresis"].Scalar() == "3");
}

TEST_CASE("every shipped config round-trips through to_yaml", "[config]") {
  for (const fs::path& path : config_files()) {
    INFO(path.string());
    Config c = load(path.string());
    const std::string text = to_yaml(c);
    Config back = parse(text, path.string());
    check_same(back, c);
    CHECK(to_yaml(back) == text);
  }
}

TEST_CASE("train.precision: f32 by default, 16-bit only on cuda", "[config][precision]") {
  CHECK(parse("", "x.yaml").train.precision == "f32");
  for (const char* p : {"f32", "bf16", "f16"}) {
    INFO(p);
    CHECK(parse(std::string("train:\n  device: cuda\n  precision: ") + p + "\n", "x.yaml")
              .train.precision == p);
  }
  CHECK(error_of("train:\n  device: cuda\n  precision: fp16\n") ==
        "x.yaml: key 'train.precision': must be one of f32, bf16, f16, got 'fp16' (did you mean "
        "'f16'?)");
  CHECK(error_of("train:\n  device: cuda\n  precision: float64\n") ==
        "x.yaml: key 'train.precision': must be one of f32, bf16, f16, got 'float64'");
  CHECK(error_of("train:\n  precision: 16\n") ==
        "x.yaml: key 'train.precision': must be one of f32, bf16, f16, got '16' (did you mean "
        "'f16'?)");
  // The CPU path computes in f32 only (device cpu is the default).
  CHECK(error_of("train:\n  precision: bf16\n") ==
        "x.yaml: key 'train.precision': 16-bit compute (bf16) is for train.device: cuda; CPU "
        "training keeps f32");
  CHECK(error_of("train:\n  device: cpu\n  precision: f16\n") ==
        "x.yaml: key 'train.precision': 16-bit compute (f16) is for train.device: cuda; CPU "
        "training keeps f32");
  // At the override that asked for it; and an override may move the run to cuda.
  CHECK(error_of("", {"train.precision=f16"}) ==
        "x.yaml: --set train.precision: 16-bit compute (f16) is for train.device: cuda; CPU "
        "training keeps f32");
  CHECK(parse("train:\n  precision: bf16\n", "x.yaml", {"train.device=cuda"}).train.precision ==
        "bf16");
}

TEST_CASE("train.loss_scale: a nested map of f16's dynamic loss scaling", "[config][precision]") {
  const std::string f16 = "train:\n  device: cuda\n  precision: f16\n";
  Config d = parse(f16, "x.yaml");
  CHECK(d.train.loss_scale.mode == "dynamic");
  CHECK(d.train.loss_scale.initial == 65536);
  CHECK(d.train.loss_scale.growth == 2);
  CHECK(d.train.loss_scale.backoff == 0.5);
  CHECK(d.train.loss_scale.growth_interval == 1000);
  CHECK(d.train.loss_scale.hysteresis == 2);
  CHECK(d.train.loss_scale.min == 1);

  Config c = parse(f16 +
                       "  loss_scale:\n    initial: 4096\n    growth_interval: 500\n"
                       "    hysteresis: 1\n    min: 0.25\n",
                   "x.yaml");
  CHECK(c.train.loss_scale.initial == 4096);
  CHECK(c.train.loss_scale.growth_interval == 500);
  CHECK(c.train.loss_scale.hysteresis == 1);
  CHECK(c.train.loss_scale.min == 0.25);
  CHECK(c.train.loss_scale.growth == 2);  // unnamed keys keep their defaults
  Config flow = parse(f16 + "  loss_scale: {mode: static, initial: 128}\n", "x.yaml");
  CHECK(flow.train.loss_scale.mode == "static");
  CHECK(flow.train.loss_scale.initial == 128);
  CHECK(parse(f16 + "  loss_scale:\n", "x.yaml").train.loss_scale.initial == 65536);
  // --set reaches into the group.
  Config set = parse(f16, "x.yaml",
                     {"train.loss_scale.backoff=0.25", "train.loss_scale.mode=static",
                      "train.loss_scale.mode=dynamic"});
  CHECK(set.train.loss_scale.backoff == 0.25);
  CHECK(set.train.loss_scale.mode == "dynamic");
  // Defaults written out in full (as to_yaml does) are fine for every precision.
  const std::string spelled =
      "  loss_scale: {mode: dynamic, initial: 65536, growth: 2, backoff: 0.5, growth_interval: "
      "1000, hysteresis: 2, min: 1}\n";
  CHECK_NOTHROW(parse("train:\n" + spelled, "x.yaml"));
  CHECK_NOTHROW(parse("train:\n  device: cuda\n  precision: bf16\n" + spelled, "x.yaml"));
}

TEST_CASE("train.loss_scale errors name the key", "[config][precision]") {
  const std::string f16 = "train:\n  device: cuda\n  precision: f16\n  loss_scale:\n";
  struct Case {
    std::string yaml;
    const char* message;
  };
  const Case cases[] = {
      {f16 + "    mode: adaptive\n",
       "key 'train.loss_scale.mode': must be one of dynamic, static, got 'adaptive'"},
      {f16 + "    initial: 0\n",
       "key 'train.loss_scale.initial': must be > 0 and within f32's range, got 0"},
      {f16 + "    initial: 1e39\n",
       "key 'train.loss_scale.initial': must be > 0 and within f32's range, got 1e+39"},
      {f16 + "    growth: 1\n",
       "key 'train.loss_scale.growth': must be > 1 and within f32's range, got 1"},
      {f16 + "    backoff: 1\n", "key 'train.loss_scale.backoff': must be in (0, 1), got 1"},
      {f16 + "    backoff: 0\n", "key 'train.loss_scale.backoff': must be in (0, 1), got 0"},
      {f16 + "    growth_interval: 0\n",
       "key 'train.loss_scale.growth_interval': must be >= 1, got 0"},
      {f16 + "    hysteresis: 0\n", "key 'train.loss_scale.hysteresis': must be >= 1, got 0"},
      {f16 + "    min: 0\n",
       "key 'train.loss_scale.min': must be > 0 and within f32's range, got 0"},
      {f16 + "    initial: 512\n    min: 1024\n",
       "key 'train.loss_scale.min': must be <= train.loss_scale.initial 512, got 1024"},
      // Static mode keeps `initial`: the dynamic rules' keys would be ignored.
      {f16 + "    mode: static\n    growth_interval: 10\n",
       "key 'train.loss_scale.growth_interval': is for train.loss_scale.mode: dynamic only "
       "(static keeps train.loss_scale.initial)"},
      // Only f16 is scaled: a value set under f32 or bf16 would do nothing.
      {"train:\n  loss_scale:\n    initial: 1024\n",
       "key 'train.loss_scale.initial': sets f16 loss scaling, but train.precision is f32 (only "
       "f16 needs a loss scale)"},
      {"train:\n  device: cuda\n  precision: bf16\n  loss_scale:\n    mode: static\n",
       "key 'train.loss_scale.mode': sets f16 loss scaling, but train.precision is bf16 (only "
       "f16 needs a loss scale)"},
      {"train:\n  device: cuda\n  precision: bf16\n  loss_scale: {hysteresis: 4}\n",
       "key 'train.loss_scale.hysteresis': sets f16 loss scaling, but train.precision is bf16 "
       "(only f16 needs a loss scale)"},
      // Reading the group.
      {f16 + "    intial: 1024\n",
       "key 'train.loss_scale.intial': unknown key (did you mean 'train.loss_scale.initial'?)"},
      {"train:\n  los_scale:\n    initial: 1024\n",
       "key 'train.los_scale': unknown key (did you mean 'train.loss_scale'?)"},
      {"train:\n  loss_scale: dynamic\n",
       "key 'train.loss_scale': expected a map of keys (mode, initial, growth, backoff, "
       "growth_interval, hysteresis, min), got 'dynamic'"},
      {f16 + "    initial: big\n", "key 'train.loss_scale.initial': expected a number, got 'big'"},
      {f16 + "    initial: 1\n    initial: 2\n",
       "key 'train.loss_scale.initial': given twice (lines 5 and 6)"},
      {f16 + "    initial: 1\n  loss_scale:\n    min: 1\n",
       "key 'train.loss_scale': given twice (lines 4 and 6)"},
  };
  for (const Case& c : cases) {
    INFO(c.yaml);
    CHECK(error_of(c.yaml) == std::string("x.yaml: ") + c.message);
  }
  CHECK(error_of("", {"train.loss_scale=dynamic"}) ==
        "x.yaml: --set train.loss_scale: names a group of keys; set one of them, like "
        "train.loss_scale.mode");
  CHECK(error_of("", {"train.loss_scale.initial=2048"}) ==
        "x.yaml: --set train.loss_scale.initial: sets f16 loss scaling, but train.precision is "
        "f32 (only f16 needs a loss scale)");
  CHECK(error_of("", {"train.loss_scale.intial=2"}) ==
        "x.yaml: --set train.loss_scale.intial: unknown key (did you mean "
        "'train.loss_scale.initial'?)");
}

TEST_CASE("model.onnx: the keys of a built network are refused, its own rules not applied",
          "[config]") {
  const std::string onnx = "model:\n  onnx: net.onnx\n";
  const Config c = parse(onnx + "  vocab: 50257\ntrain:\n  seq_len: 1024\nparallel:\n  tp: 8\n",
                         "x.yaml");
  // The graph, not model.max_seq or model.heads, decides the longest sequence and the tp.
  CHECK(c.model.onnx == "net.onnx");
  CHECK(c.train.seq_len == 1024);
  CHECK(c.parallel.tp == 8);
  CHECK(error_of("train:\n  seq_len: 1024\nparallel:\n  tp: 8\n") ==
        "x.yaml: key 'train.seq_len': train.seq_len 1024 exceeds model.max_seq 64");
  for (const std::string key : {"layers: 2", "hidden: 64", "heads: 2", "ffn_hidden: 64",
                                "max_seq: 128", "type_vocab: 3", "dropout: 0.1",
                                "ln_eps: 1e-6", "init_std: 0.01"}) {
    INFO(key);
    CHECK(error_of(onnx + "  " + key + "\n") ==
          "x.yaml: key 'model." + key.substr(0, key.find(':')) +
              "': shapes a model Merak builds, but model.onnx names a network (net.onnx) that "
              "has its own");
  }
  CHECK(error_of(onnx, {"model.layers=2"}) ==
        "x.yaml: --set model.layers: shapes a model Merak builds, but model.onnx names a "
        "network (net.onnx) that has its own");
}

TEST_CASE("auto leaves layout keys to the search; a value given later fixes one", "[config]") {
  using merak::config::kAutoKeys;
  using Keys = std::vector<std::string>;
  CHECK(parse("", "x.yaml").parallel.auto_keys.empty());
  CHECK(parse("parallel: auto\n", "x.yaml").parallel.auto_keys == kAutoKeys);
  CHECK(parse("", "x.yaml", {"parallel=auto"}).parallel.auto_keys == kAutoKeys);
  const Config some = parse("parallel:\n  tp: auto\n  dp: auto\n  hardware: a100-80g\n"
                            "train:\n  micro_batch: auto\n",
                            "x.yaml");
  CHECK(some.parallel.auto_keys == Keys{"parallel.dp", "parallel.tp", "train.micro_batch"});
  CHECK(some.parallel.hardware == "a100-80g");
  CHECK(some.parallel.dp == 1);  // a placeholder until the search runs
  // --set fixes a key the file left to auto, or leaves one more to it.
  const Config fixed =
      parse("parallel: auto\n", "x.yaml", {"parallel.tp=2", "parallel.zero1=true"});
  CHECK(fixed.parallel.tp == 2);
  CHECK(fixed.parallel.zero1);
  CHECK(std::count(fixed.parallel.auto_keys.begin(), fixed.parallel.auto_keys.end(),
                   "parallel.tp") == 0);
  CHECK(fixed.parallel.auto_keys.size() == kAutoKeys.size() - 2);
  CHECK(parse("parallel:\n  pp: 2\n", "x.yaml", {"parallel.pp=auto"}).parallel.auto_keys ==
        Keys{"parallel.pp"});
  // auto is for the layout keys only.
  CHECK(error_of("optimizer:\n  lr: auto\n").find("key 'optimizer.lr'") != std::string::npos);
  // `parallel: auto` leaves a layout key given a value as it is, before it or after it.
  for (const char* yaml : {"train:\n  batch: 16\n  micro_batch: 4\nparallel: auto\n",
                           "parallel: auto\ntrain:\n  batch: 16\n  micro_batch: 4\n"}) {
    INFO(yaml);
    const Config c = parse(yaml, "x.yaml");
    CHECK(c.train.micro_batch == 4);
    CHECK(c.parallel.auto_keys.size() == kAutoKeys.size() - 1);
    CHECK(std::count(c.parallel.auto_keys.begin(), c.parallel.auto_keys.end(),
                     "train.micro_batch") == 0);
  }
  const Config set_later = parse("parallel:\n  tp: 2\n", "x.yaml", {"parallel=auto"});
  CHECK(set_later.parallel.tp == 2);
  CHECK(set_later.parallel.auto_keys.size() == kAutoKeys.size() - 1);
}

TEST_CASE("model_changes names the keys that make another model, with both values", "[config]") {
  const Config base = parse("model:\n  hidden: 128\n  heads: 4\n", "a.yaml");
  CHECK(model_changes(base, base).empty());
  // Dropout, the initialisation and anything outside model are free to change on a resume.
  const Config tuned = parse("model:\n  hidden: 128\n  heads: 4\n  dropout: 0.1\n"
                             "  init_std: 0.01\noptimizer:\n  lr: 1.0e-3\n", "b.yaml");
  CHECK(model_changes(base, tuned).empty());
  // An imported network's file may move: its tensors are checked by name and shape as they load.
  CHECK(model_changes(parse("model:\n  onnx: a/net.onnx\n", "a.yaml"),
                      parse("model:\n  onnx: /b/net.onnx\n", "b.yaml"))
            .empty());
  // ffn_hidden 0 means 4 * hidden: writing the width out is the same model.
  CHECK(model_changes(base, parse("model:\n  hidden: 128\n  heads: 4\n  ffn_hidden: 512\n",
                                  "c.yaml")).empty());
  const auto changes = model_changes(base, parse("model:\n  hidden: 64\n  heads: 4\n  vocab: 300\n"
                                                 "  ln_eps: 1.0e-6\n", "d.yaml"));
  REQUIRE(changes.size() == 3);
  CHECK(changes[0].key == "model.hidden");
  CHECK(changes[0].before == "128");
  CHECK(changes[0].after == "64");
  CHECK(changes[1].key == "model.vocab");
  CHECK(changes[1].before == "256");
  CHECK(changes[1].after == "300");
  CHECK(changes[2].key == "model.ln_eps");
}
