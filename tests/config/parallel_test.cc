// The `parallel` section: its defaults are one process (the (1, 1, 1) layout), every rule names
// its key, the micro-batch arithmetic keeps the global batch the same for every layout, and it
// round-trips through to_yaml.
#include <catch2/catch.hpp>

#include <string>

#include "merak/config/config.h"

using merak::config::Config;
using merak::config::ConfigError;
using merak::config::parse;

namespace {

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse(yaml, "p.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL_CHECK("no ConfigError for:\n" << yaml);
  return "";
}

}  // namespace

TEST_CASE("parallel defaults to one rank", "[config][parallel]") {
  const Config c = parse("train:\n  batch: 8\n  micro_batch: 2\n", "p.yaml");
  CHECK(c.parallel.dp == 1);
  CHECK(c.parallel.pp == 1);
  CHECK(c.parallel.tp == 1);
  CHECK(c.parallel.schedule == "1f1b");
  CHECK(c.parallel.recompute == "none");
  CHECK_FALSE(c.parallel.zero1);
  CHECK(micro_batch_size(c) == 2);
  CHECK(micro_batches_per_replica(c) == 4);
}

TEST_CASE("micro-batches split each replica's share of the global batch", "[config][parallel]") {
  // dp 2 over a batch of 16: 8 sequences a replica; train.micro_batch 2 gives 4 micro-batches.
  Config c =
      parse("train:\n  batch: 16\n  micro_batch: 2\nparallel:\n  dp: 2\n  pp: 2\n", "p.yaml");
  CHECK(micro_batch_size(c) == 2);
  CHECK(micro_batches_per_replica(c) == 4);
  // parallel.micro_batches alone sets the size.
  c = parse("train:\n  batch: 16\nparallel:\n  dp: 4\n  micro_batches: 2\n", "p.yaml");
  CHECK(micro_batch_size(c) == 2);
  CHECK(micro_batches_per_replica(c) == 2);
  // Neither: one micro-batch per replica.
  c = parse("train:\n  batch: 12\nparallel:\n  dp: 3\n", "p.yaml");
  CHECK(micro_batch_size(c) == 4);
  CHECK(micro_batches_per_replica(c) == 1);
  // Both, consistent.
  c = parse("train:\n  batch: 16\n  micro_batch: 4\nparallel:\n  dp: 2\n  micro_batches: 2\n",
            "p.yaml");
  CHECK(micro_batch_size(c) == 4);
}

TEST_CASE("parallel values out of range name the key", "[config][parallel]") {
  CHECK(error_of("parallel:\n  dp: 0\n") == "p.yaml: key 'parallel.dp': must be >= 1, got 0");
  CHECK(error_of("parallel:\n  pp: -2\n") == "p.yaml: key 'parallel.pp': must be >= 1, got -2");
  CHECK(error_of("parallel:\n  tp: 0\n") == "p.yaml: key 'parallel.tp': must be >= 1, got 0");
  CHECK(error_of("checkpoint:\n  every: 10\n") ==
        "p.yaml: key 'checkpoint.every': saves every 10 steps, but checkpoint.dir is empty");
  CHECK(error_of("checkpoint:\n  async: true\n") ==
        "p.yaml: key 'checkpoint.async': saves in the background, but checkpoint.dir is empty");
  CHECK(error_of("checkpoint:\n  dir: ck\n  keep: -1\n") ==
        "p.yaml: key 'checkpoint.keep': must be >= 0, got -1");
  CHECK(error_of("parallel:\n  comm: gloo\n") ==
        "p.yaml: key 'parallel.comm': must be one of auto, nccl, mpi, got 'gloo'");
  CHECK(error_of("parallel:\n  comm_timeout: 0\n") ==
        "p.yaml: key 'parallel.comm_timeout': must be > 0, got 0");
  CHECK(error_of("parallel:\n  comm: nccl\n") ==
        "p.yaml: key 'parallel.comm': nccl carries device memory: it needs train.device: cuda "
        "(the device is cpu)");
  CHECK(error_of("parallel:\n  schedule: 1f1c\n") ==
        "p.yaml: key 'parallel.schedule': must be one of gpipe, 1f1b, shifted, interleaved, zb, got "
        "'1f1c' (did you mean '1f1b'?)");
  CHECK(error_of("parallel:\n  recompute: fulll\n") ==
        "p.yaml: key 'parallel.recompute': must be one of none, full, memory, ratio, got 'fulll' "
        "(did you mean 'full'?)");
  CHECK(error_of("parallel:\n  recompute_ratio: 1.5\n") ==
        "p.yaml: key 'parallel.recompute_ratio': must be in [0, 1], got 1.5");
  CHECK(error_of("parallel:\n  tp_subpipeline: true\n") ==
        "p.yaml: key 'parallel.tp_subpipeline': overlaps tensor-parallel all-reduces: it needs "
        "parallel.tp > 1");
  CHECK(error_of("parallel:\n  bucket_mb: 0\n") ==
        "p.yaml: key 'parallel.bucket_mb': must be in (0, 4096], got 0");
  CHECK(error_of("parallel:\n  micro_batches: -1\n") ==
        "p.yaml: key 'parallel.micro_batches': must be >= 0, got -1");
  CHECK(error_of("parallel:\n  hardware: ''\n") ==
        "p.yaml: key 'parallel.hardware': must name a hardware profile");
  CHECK(error_of("model:\n  heads: 4\nparallel:\n  tp: 3\n") ==
        "p.yaml: key 'parallel.tp': model.heads 4 is not divisible by parallel.tp 3");
  CHECK(error_of("parallel:\n  zero1: maybe\n").find("parallel.zero1") != std::string::npos);
}

TEST_CASE("the global batch must split evenly over replicas and micro-batches",
          "[config][parallel]") {
  CHECK(error_of("train:\n  batch: 10\nparallel:\n  dp: 4\n") ==
        "p.yaml: key 'parallel.dp': train.batch 10 is not divisible by parallel.dp 4");
  CHECK(error_of("train:\n  batch: 16\nparallel:\n  dp: 2\n  micro_batches: 3\n") ==
        "p.yaml: key 'parallel.micro_batches': 3 micro-batches do not divide the 8 sequences "
        "each data-parallel replica takes");
  CHECK(error_of("train:\n  batch: 16\n  micro_batch: 2\nparallel:\n  dp: 2\n"
                 "  micro_batches: 2\n") ==
        "p.yaml: key 'parallel.micro_batches': 2 micro-batches of the 8 sequences a replica "
        "takes hold 4 each, but train.micro_batch is 2");
  CHECK(error_of("train:\n  batch: 16\n  micro_batch: 8\nparallel:\n  dp: 4\n") ==
        "p.yaml: key 'train.micro_batch': train.micro_batch 8 does not divide the 4 sequences "
        "each of the 4 data-parallel replicas takes");
  // --set is named where the value came from.
  CHECK(error_of("train:\n  batch: 16\n", {"parallel.dp=3"}) ==
        "p.yaml: --set parallel.dp: train.batch 16 is not divisible by parallel.dp 3");
}

TEST_CASE("the parallel section round-trips through to_yaml", "[config][parallel]") {
  Config c;
  c.path = "p.yaml";
  c.train.batch = 32;
  c.parallel = {2, 4, 2, "shifted", 1, 4, "ratio", 0.25, true, 0.5, true, "h200", false};
  c.parallel.tp_shared_memory = false;
  c.parallel.comm = "mpi";
  c.parallel.comm_timeout = 7.5;
  const std::string text = to_yaml(c);
  INFO(text);
  const Config back = parse(text, "p.yaml");
  CHECK(back.parallel.dp == 2);
  CHECK(back.parallel.pp == 4);
  CHECK(back.parallel.tp == 2);
  CHECK(back.parallel.schedule == "shifted");
  CHECK(back.parallel.micro_batches == 4);
  CHECK(back.parallel.recompute == "ratio");
  CHECK(back.parallel.recompute_ratio == 0.25);
  CHECK(back.parallel.zero1);
  CHECK(back.parallel.bucket_mb == 0.5);
  CHECK(back.parallel.tp_subpipeline);
  CHECK(back.parallel.hardware == "h200");
  CHECK(back.parallel.comm == "mpi");
  CHECK(back.parallel.comm_timeout == 7.5);
  CHECK(!back.parallel.dp_shared_memory);
  CHECK(!back.parallel.tp_shared_memory);
  CHECK(to_yaml(back) == text);
  // Interleaved, with its virtual stages.
  c.parallel = {2, 4, 2, "interleaved", 3, 4, "none", 1.0, false, 1.0, false, "cpu-local"};
  const Config inter = parse(to_yaml(c), "p.yaml");
  CHECK(inter.parallel.schedule == "interleaved");
  CHECK(inter.parallel.virtual_stages == 3);
}

TEST_CASE("ZeRO-1 over 16-bit replicas is refused, naming both keys", "[config][parallel]") {
  const std::string bf16 = "train:\n  batch: 8\n  device: cuda\n  precision: bf16\n";
  CHECK(error_of(bf16 + "parallel:\n  dp: 2\n  zero1: true\n") ==
        "p.yaml: key 'parallel.zero1': ZeRO-1 is not supported with train.precision bf16 over "
        "data-parallel replicas yet (parallel.dp 2): set parallel.zero1: false, or "
        "train.precision: f32");
  CHECK(error_of(bf16, {"parallel.dp=2", "parallel.zero1=true", "train.precision=f16"})
            .find("--set parallel.zero1: ZeRO-1 is not supported with train.precision f16") !=
        std::string::npos);
  // One replica has nothing to shard; f32 replicas have ZeRO-1.
  CHECK(parse(bf16 + "parallel:\n  zero1: true\n", "p.yaml").parallel.zero1);
  CHECK(parse("train:\n  batch: 8\nparallel:\n  dp: 2\n  zero1: true\n", "p.yaml")
            .parallel.zero1);
}

TEST_CASE("rules on a key left to the search wait for its value", "[config][parallel]") {
  // pp auto holds the placeholder 1: zb and interleaved are for the search to pair with a pp.
  CHECK(parse("parallel:\n  pp: auto\n  schedule: zb\n", "p.yaml").parallel.schedule == "zb");
  const Config il = parse("train:\n  batch: 16\n  micro_batch: auto\nparallel:\n  pp: auto\n"
                          "  schedule: interleaved\n  virtual_stages: auto\n",
                          "p.yaml");
  CHECK(il.parallel.schedule == "interleaved");
  // With schedule auto, virtual stages may be fixed for the interleaved candidates.
  CHECK(parse("parallel:\n  schedule: auto\n  virtual_stages: 2\n", "p.yaml")
            .parallel.virtual_stages == 2);
  // A fixed pp is still checked.
  CHECK(error_of("parallel:\n  schedule: zb\n") ==
        "p.yaml: key 'parallel.schedule': zb moves parameter gradients into the waits of a "
        "pipeline: needs parallel.pp >= 2, got 1");
}
