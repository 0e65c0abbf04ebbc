// A checkpoint writer to kill: saves steps 1, 2, ... of two 4 MiB tensors (two files a step,
// keep 2) until killed, or kills itself with SIGKILL right after one phase of a step's save;
// `--verify DIR` then loads what `latest` names and checks every value.
//
//   checkpoint_crash write DIR [--kill-at STEP PHASE]   PHASE: pieces, index, publish
//   checkpoint_crash verify DIR                          prints "step N verified"
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "merak/checkpoint/reader.h"
#include "merak/checkpoint/store.h"

using namespace merak;
using namespace merak::checkpoint;

namespace {

const Shape kShape = {1024, 1024};

// Step s's value of element i of tensor k: exact in f32.
float value(int64_t step, int k, int64_t i) { return float((step * 7 + k * 3 + i) % 100003); }

Tensor make(int64_t step, int k) {
  Tensor t = Tensor::empty(kShape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = value(step, k, i);
  return t;
}

[[noreturn]] void die_here(const char* phase, int64_t step) {
  std::printf("killing myself after %s of step %lld\n", phase, static_cast<long long>(step));
  std::fflush(stdout);
  std::raise(SIGKILL);
  std::abort();
}

int write(const std::string& dir, int64_t kill_step, const std::string& kill_phase) {
  for (int64_t step = 1;; ++step) {
    const std::string tmp = begin_step(dir, step);
    std::vector<PieceEntry> entries;
    for (int k = 0; k < 2; ++k) {
      const std::string name = "t" + std::to_string(k);
      const std::vector<Piece> pieces = {{name, kShape, whole(kShape), make(step, k)}};
      for (const PieceEntry& e : write_pieces(tmp, "rank_" + std::to_string(k) + ".safetensors",
                                              pieces))
        entries.push_back(e);
    }
    if (step == kill_step && kill_phase == "pieces") die_here("pieces", step);
    write_index(tmp, step, "", {{"step", std::to_string(step)}}, entries);
    if (step == kill_step && kill_phase == "index") die_here("index", step);
    publish(dir, step);
    if (step == kill_step && kill_phase == "publish") die_here("publish", step);
    point_latest(dir, step);
    prune(dir, 2);
    std::printf("saved %lld\n", static_cast<long long>(step));
    std::fflush(stdout);
  }
}

int verify(const std::string& dir) {
  const Index index = read_index(resolve(dir));
  for (int k = 0; k < 2; ++k) {
    Tensor t = Tensor::empty(kShape);
    read_region(index, "t" + std::to_string(k), kShape, DType::F32, whole(kShape), t);
    const float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (p[i] != value(index.step, k, i)) {
        std::printf("FAIL: step %lld tensor t%d element %lld is %g\n",
                    static_cast<long long>(index.step), k, static_cast<long long>(i), p[i]);
        return 1;
      }
  }
  std::printf("step %lld verified\n", static_cast<long long>(index.step));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: checkpoint_crash write|verify DIR [--kill-at STEP PHASE]\n");
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  try {
    if (mode == "verify") return verify(dir);
    int64_t kill_step = -1;
    std::string phase;
    if (argc == 6 && std::string(argv[3]) == "--kill-at") {
      kill_step = std::atoll(argv[4]);
      phase = argv[5];
    }
    return write(dir, kill_step, phase);
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
}
