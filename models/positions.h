// Position ids 0..T-1 (i64 [T]) for tokens [B, T], on the tokens' device. They come from the
// registry's arange op, so a trace records them as a node instead of meeting a Meta tensor of
// unknown origin, and the graph executor rebuilds them.
#pragma once

#include "merak/core/tensor.h"
#include "merak/ops/functional.h"

namespace merak::models {

inline Tensor positions(const Tensor& tokens) { return ops::arange(tokens, 1); }

}  // namespace merak::models
