// The one training loop in one process: the (1, 1, 1) layout of the engine, without MPI.
#include <catch2/catch.hpp>

#include <cmath>

#include "merak/comm/grid.h"
#include "merak/config/config.h"
#include "merak/train/progress.h"
#include "merak/train/trainer.h"

using namespace merak;

namespace {
config::Config tiny(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"model.layers=2",  "model.hidden=64", "model.heads=4",
                                   "train.batch=8",   "train.seq_len=32", "train.steps=40",
                                   "optimizer.lr=3e-3", "schedule.warmup_steps=5",
                                   "data.generated_tokens=100000"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return config::parse("model: {family: gpt}\n", "tiny.yaml", sets);
}

// The parameters a trainer's engine holds, by name, as host values.
std::map<std::string, std::vector<float>> values(train::Trainer& t) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, p] : t.engine().parameters()) out[name] = p.to_vector<float>();
  return out;
}
}  // namespace

TEST_CASE("training the tiny GPT lowers the loss", "[train]") {
  const auto grid = comm::Grid::single_process();
  train::Trainer trainer(tiny(), *grid);
  CHECK(grid->world().size() == 1);
  CHECK(std::string(grid->world().backend()) == "self");
  double first = 0, last = 0;
  for (int i = 0; i < 40; ++i) {
    const train::StepStats s = trainer.step();
    CHECK(s.step == i + 1);
    CHECK(std::isfinite(s.loss));
    CHECK(s.seconds > 0);
    if (i == 0) first = s.loss;
    last = s.loss;
  }
  CHECK(first > 5.0);       // ~log(256) at init
  CHECK(last < first - 1.5);
  CHECK(trainer.steps_done() == 40);
}

TEST_CASE("micro-batches accumulate to the same step as one full batch", "[train]") {
  const auto grid = comm::Grid::single_process();
  train::Trainer full(tiny(), *grid);
  train::Trainer micro(tiny({"train.micro_batch=2"}), *grid);
  CHECK(micro.engine().micro_batches() == 4);
  for (int i = 0; i < 3; ++i) {
    const auto a = full.step(), b = micro.step();
    CHECK(b.loss == Approx(a.loss).epsilon(1e-5));
    CHECK(b.grad_norm == Approx(a.grad_norm).epsilon(1e-4));
  }
  const auto pa = values(full), pb = values(micro);
  REQUIRE(pa.size() == pb.size());
  for (const auto& [name, va] : pa) {
    const std::vector<float>& vb = pb.at(name);
    for (size_t j = 0; j < va.size(); ++j) REQUIRE(vb[j] == Approx(va[j]).margin(1e-5));
  }
}

TEST_CASE("recomputation changes no number", "[train]") {
  const auto grid = comm::Grid::single_process();
  // GPipe holds every micro-batch of the step at once: the one stage recomputes under "full"
  // (under 1F1B it would hold one at a time, and recomputing would save nothing).
  train::Trainer plain(tiny({"train.micro_batch=2", "parallel.schedule=gpipe"}), *grid);
  train::Trainer again(
      tiny({"train.micro_batch=2", "parallel.schedule=gpipe", "parallel.recompute=full"}), *grid);
  train::Trainer one_f_one_b(tiny({"train.micro_batch=2", "parallel.recompute=full"}), *grid);
  CHECK_FALSE(plain.engine().recomputes());
  CHECK(again.engine().recomputes());
  CHECK_FALSE(one_f_one_b.engine().recomputes());
  for (int i = 0; i < 3; ++i) {
    const auto a = plain.step(), b = again.step();
    CHECK(b.loss == a.loss);
    CHECK(b.grad_norm == a.grad_norm);
  }
}

TEST_CASE("a token id not below model.vocab is refused, naming where it is", "[train]") {
  const auto grid = comm::Grid::single_process();
  // The generated corpus is bytes of English words: its first id of 100 or more is a lower-case
  // letter from 'd' (100) to 'z' (122) near the start.
  CHECK_THROWS_WITH(
      train::Trainer(tiny({"model.vocab=100"}), *grid),
      Catch::Matches("the generated corpus: token [0-9]+: token id 1[0-2][0-9] is not below the "
                     "vocabulary of 100 \\(model.vocab in tiny.yaml\\).*"));
}

TEST_CASE("the tiny BERT trains on MLM + NSP", "[train][bert]") {
  const auto grid = comm::Grid::single_process();
  train::Trainer trainer(config::parse(
      "model: {family: bert, vocab: 260}\n", "bert.yaml",
      {"model.layers=2", "model.hidden=64", "model.heads=4", "train.batch=8",
       "train.seq_len=32", "train.steps=30", "optimizer.lr=2e-3", "data.generated_tokens=100000"}), *grid);
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    const auto s = trainer.step();
    if (i == 0) first = s.loss;
    last = s.loss;
  }
  CHECK(last < first - 1.0);
}

TEST_CASE("a rank's device: its node-local GPU, or a one-line error naming the key", "[train]") {
  const config::Config cpu = tiny();
  CHECK(train::choose_device(cpu, 0, 0, 1, 0, "") == Device::cpu());
  const config::Config cuda = tiny({"train.device=cuda"});
  CHECK(train::choose_device(cuda, 11, 3, 4, 8, "") == Device::cuda(3));
  CHECK_THROWS_WITH(train::choose_device(cuda, 0, 0, 1, 0, "cudaGetDeviceCount: no driver (35)"),
                    "tiny.yaml: key 'train.device': cuda, but no CUDA device was found "
                    "(cudaGetDeviceCount: no driver (35))");
  // A layout with more ranks on a node than it has GPUs: the ranks left without one say so,
  // with both counts; the others have theirs (the job agrees on the first error).
  const config::Config eight = tiny({"train.device=cuda", "parallel.dp=2", "parallel.pp=2",
                                     "parallel.tp=2"});
  CHECK(train::choose_device(eight, 3, 3, 8, 4, "") == Device::cuda(3));
  CHECK_THROWS_WITH(train::choose_device(eight, 5, 5, 8, 4, ""),
                    "tiny.yaml: key 'parallel': dp 2 x pp 2 x tp 2 puts 8 ranks on a node with 4 "
                    "GPUs: rank 5 (local rank 5) has none (train.device: cuda; "
                    "train.gpus_share: true lets ranks share them)");
  // ... unless they may share: round robin.
  const config::Config shared = tiny({"train.device=cuda", "parallel.dp=2", "parallel.pp=2",
                                      "parallel.tp=2", "train.gpus_share=true"});
  CHECK(train::choose_device(shared, 5, 5, 8, 4, "") == Device::cuda(1));
}

TEST_CASE("a GPU job's transport: NCCL with a GPU a rank, MPI through the host when ranks share",
          "[train]") {
  const config::Config cuda = tiny({"train.device=cuda", "parallel.dp=2", "parallel.pp=2"});
  CHECK(train::gpu_transport(cuda, 4, 8) == "nccl");
  CHECK(train::gpu_transport(cuda, 4, 4) == "nccl");
  CHECK(train::gpu_transport(cuda, 4, 1) == "mpi");  // auto: NCCL cannot share a GPU
  const config::Config mpi = tiny({"train.device=cuda", "parallel.comm=mpi"});
  CHECK(train::gpu_transport(mpi, 4, 8) == "mpi");
  const config::Config nccl = tiny({"train.device=cuda", "parallel.comm=nccl"});
  CHECK(train::gpu_transport(nccl, 2, 2) == "nccl");
  CHECK_THROWS_WITH(train::gpu_transport(nccl, 4, 1),
                    "tiny.yaml: key 'parallel.comm': nccl needs a GPU a rank, but 4 ranks share "
                    "this node's 1 GPU (parallel.comm: mpi, or auto, stages their messages "
                    "through host memory)");
  // Nodes that chose differently (one with fewer GPUs than ranks) refuse the job, naming the
  // first rank that differs from rank 0 and the key.
  CHECK(train::mixed_transports(cuda, {"nccl", "nccl", "nccl"}).empty());
  CHECK(train::mixed_transports(cuda, {"mpi"}).empty());
  CHECK(train::mixed_transports(cuda, {"nccl", "nccl", "mpi", "nccl"}) ==
        "tiny.yaml: key 'parallel.comm': auto chose nccl on the node of rank 0 but mpi on the "
        "node of rank 2 (mpi where a node's ranks outnumber its GPUs): set parallel.comm: mpi, or "
        "give every node a GPU a rank");
}

TEST_CASE("the metrics line keeps 9 significant digits, 17 for loss and gradient norm",
          "[train]") {
  merak::train::StepStats s;
  s.step = 7;
  s.loss = 2.0 / 3.0;
  s.grad_norm = 1.0 / 7.0;
  s.lr = 1.23456789e-4;
  s.tokens = 1234567.891;
  s.seconds = 1.0;
  s.model_flops = 9.87654321e12;
  const std::string line = merak::train::json_line(merak::train::report(s, 100.0));
  INFO(line);
  CHECK_THAT(line, Catch::Contains("\"loss\": 0.66666666666666663"));
  CHECK_THAT(line, Catch::Contains("\"grad_norm\": 0.14285714285714285"));
  CHECK_THAT(line, Catch::Contains("\"lr\": 0.000123456789"));
  CHECK_THAT(line, Catch::Contains("\"tokens_per_s\": 1234567.89"));
  CHECK_THAT(line, Catch::Contains("\"gflops\": 9876.54321"));
  CHECK_THAT(line, Catch::Contains("\"peak_fraction\": 98.7654321"));
}
