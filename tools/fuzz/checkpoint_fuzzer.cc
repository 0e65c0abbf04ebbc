// libFuzzer target for reading checkpoints: the input is a step directory's index.json and one
// safetensors shard (rank_00000.safetensors, the name a one-process run writes), joined by
// fuzz_files.h's separator. Whatever the bytes, read_index returns an index or throws, and every
// tensor it names reads back (whole, all in one read_regions, then a part of the first one by
// read_region) or throws; the only errors allowed are CheckpointError and merak::Error. Anything
// else (a crash, a sanitizer report, another exception, a leak, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "merak/checkpoint/reader.h"
#include "merak/checkpoint/store.h"
#include "merak/core/error.h"
#include "tools/fuzz/fuzz_files.h"

namespace {

// Tensors larger than this are left unread: allocating them is the harness's cost, not a bug.
constexpr int64_t kMaxTensorBytes = int64_t(64) << 20;

bool small_enough(const merak::Shape& shape, merak::DType dtype) {
  int64_t bytes = int64_t(merak::dtype_size(dtype));
  for (const int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(bytes, d, &bytes) || bytes > kMaxTensorBytes) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ck = merak::checkpoint;
  const auto parts = merak::fuzz::split_input(data, size, 2);
  merak::fuzz::write_temp("index.json", merak::fuzz::part(parts, 0));
  merak::fuzz::write_temp("rank_00000.safetensors", merak::fuzz::part(parts, 1));
  const std::string& dir = merak::fuzz::TempDir::get().path();
  try {
    const ck::Index index = ck::read_index(dir);
    std::vector<ck::RegionRead> reads;
    for (const auto& [name, entry] : index.tensors) {
      if (!small_enough(entry.shape, entry.dtype)) continue;
      reads.push_back({name, entry.shape, entry.dtype, ck::whole(entry.shape),
                       merak::Tensor::empty(entry.shape, entry.dtype)});
    }
    if (reads.empty()) return 0;
    ck::read_regions(index, reads);
    // A part of the first tensor: its first half along dimension 0, as a box.
    const ck::RegionRead& first = reads[0];
    if (!first.global_shape.empty() && first.global_shape[0] > 1) {
      ck::Region half = ck::whole(first.global_shape);
      half.shape[0] = first.global_shape[0] / 2;
      ck::read_region(index, first.tensor, first.global_shape, first.dtype, half,
                      merak::Tensor::empty(half.shape, first.dtype));
    }
  } catch (const ck::CheckpointError&) {
  } catch (const merak::Error&) {
  }
  return 0;
}
