// A rank's training state as pieces of global tensors, for layout-independent checkpoints
// (merak/checkpoint): a parameter's local tensor is its shard's boxes concatenated along
// concat_dim, and any run of its elements (the whole, or a ZeRO-1 slice) lies in the global
// tensor as a list of regions. The state's tensors are "<parameter>" (f32: the masters under
// mixed precision), "<parameter>.exp_avg" and "<parameter>.exp_avg_sq".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "merak/checkpoint/reader.h"
#include "merak/checkpoint/store.h"
#include "merak/core/tensor.h"
#include "merak/partition/plan.pb.h"

namespace merak::runtime {

// Elements [begin, begin + length) of `shard`'s local tensor, flattened, as regions of the
// global tensor in local order; each run starts at `local_begin` in the local flat tensor.
struct LocalRun {
  checkpoint::Region region;
  int64_t local_begin = 0;
};
std::vector<LocalRun> shard_runs(const partition::ParamShard& shard, int64_t begin,
                                 int64_t length);

// The pieces of tensor `name` that `values` (elements [begin, begin + numel) of the shard's
// local tensor, flattened, f32, any device) hold, on the host (views of host values, copies of
// device ones), appended to *out.
void add_state_pieces(const std::string& name, const partition::ParamShard& shard,
                      const Tensor& values, int64_t begin, std::vector<checkpoint::Piece>* out);
// The reverse: the reads that fill `values` from a checkpoint's pieces of `name`, whatever
// layout wrote them, appended to *out. On the host each reads straight into `values`; from a
// device's values each reads into a host tensor made here, for `place` to take afterwards.
struct StateRead {
  checkpoint::RegionRead read;
  Tensor place;  // on a device: where read.out's values go; undefined on the host
};
void add_state_reads(const std::string& name, const partition::ParamShard& shard,
                     const Tensor& values, int64_t begin, std::vector<StateRead>* out);

}  // namespace merak::runtime
