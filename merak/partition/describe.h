// What a stage holds, in words: module paths with runs of blocks folded ("wte, wpe,
// blocks.0-10"), a block cut in the middle marked "(part)", nodes without a module by op name.
#pragma once

#include <cstdint>
#include <string>

#include "merak/graph/graph.pb.h"
#include "merak/partition/blocks.h"

namespace merak::partition {

std::string describe_stage(const graph::Graph& g, const Blocks& blocks, int64_t first,
                           int64_t end);

}  // namespace merak::partition
