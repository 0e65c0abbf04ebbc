// Reading a checkpoint back: regions of its global tensors, whatever layout wrote them.
//
// All the regions a rank wants are read in one call, so the reads can be planned together: every
// piece that overlaps a wanted region is read once (straight into the destination when it is
// exactly the region wanted, as in a resume in the same layout), in chunks that several threads
// read side by side in file order. A single sequential stream leaves a fast disk (NVMe, a
// virtual disk) idle between requests; a few streams over neighbouring chunks keep it busy. Each
// chunk's checksum blocks are summed by the thread that read it, while the bytes are hot.
#pragma once

#include <string>
#include <vector>

#include "merak/checkpoint/store.h"

namespace merak::checkpoint {

// `target`'s elements of tensor `tensor` (of `global_shape` and `dtype`), into `out`:
// contiguous, on the host, target.numel() elements of `dtype`.
struct RegionRead {
  std::string tensor;
  Shape global_shape;
  DType dtype = DType::F32;
  Region target;
  Tensor out;
};

// Fills every read's `out` from the pieces of `index` that overlap it, each piece checked
// against its checksum. A tensor missing, of another global shape or dtype: a CheckpointError
// naming the tensor (and both shapes) before anything is read. A file missing, truncated or
// damaged, or elements no piece holds: a CheckpointError naming the file and the tensor.
void read_regions(const Index& index, const std::vector<RegionRead>& reads);

// One region (read_regions of one read).
void read_region(const Index& index, const std::string& name, const Shape& global_shape,
                 DType dtype, const Region& target, const Tensor& out);

// A CheckpointError naming the first tensor of `index` that is neither one of `parameters` (the
// reading model's, by global name) nor one of their AdamW moments ("<name>.exp_avg" and
// "<name>.exp_avg_sq", as merak/runtime/engine_checkpoint.h saves them): a checkpoint of another
// model, which read_regions would otherwise take the matching part of.
void check_no_other_tensors(const Index& index, const std::vector<std::string>& parameters);

}  // namespace merak::checkpoint
