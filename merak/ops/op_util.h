// Helpers for writing op definitions (merak/ops/defs) and kernels (kernels/<device>).
#pragma once

#include <string>
#include <vector>

#include "merak/core/error.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/registry.h"

namespace merak::ops {

// Cached lookup: `static const OpDef& op = def("add");` in a wrapper.
inline const OpDef& def(const std::string& name) { return Registry::get().at(name); }

// Runs `body` with `scalar_t` bound to float or double according to a floating dtype.
#define MERAK_DISPATCH_FLOAT(dtype, what, ...)                                          \
  [&] {                                                                                 \
    switch (dtype) {                                                                    \
      case ::merak::DType::F32: { using scalar_t = float; return __VA_ARGS__(); }       \
      case ::merak::DType::F64: { using scalar_t = double; return __VA_ARGS__(); }      \
      default: MERAK_FAIL(what, ": dtype ", ::merak::dtype_name(dtype),                 \
                          " not supported (f32, f64)");                                 \
    }                                                                                   \
  }()

// Same for integer index tensors (i32, i64).
#define MERAK_DISPATCH_INDEX(dtype, what, ...)                                          \
  [&] {                                                                                 \
    switch (dtype) {                                                                    \
      case ::merak::DType::I32: { using index_t = int32_t; return __VA_ARGS__(); }      \
      case ::merak::DType::I64: { using index_t = int64_t; return __VA_ARGS__(); }      \
      default: MERAK_FAIL(what, ": index dtype ", ::merak::dtype_name(dtype),            \
                          " not supported (i32, i64)");                                 \
    }                                                                                   \
  }()

// Checks for infer functions; the dispatcher prefixes the op's name to the message.
// The definitions take every floating dtype; a kernel without one (the CPU's for bf16 and f16,
// which CPU training never asks for) fails when called, naming the op and dtype.
inline void expect_floating(const TensorMeta& m, const char* what) {
  MERAK_CHECK(m.dtype == DType::F32 || m.dtype == DType::F64 || m.dtype == DType::BF16 ||
                  m.dtype == DType::F16,
              what, " must be a floating dtype (f32, f64, bf16, f16), got ", dtype_name(m.dtype));
}

// The dtype of what an op keeps for its backward (layer_norm's mean and rstd, the log-sum-exps
// of cross_entropy and sdpa) and of a loss: f32 for 16-bit inputs, as PyTorch's mixed precision
// keeps them (f16 overflows at 65504, below a loss times a 65536 loss scale; bf16's 8-bit
// mantissa would round the lse that the backward exponentiates against), else the input's dtype.
inline DType stat_dtype(DType input) {
  return input == DType::BF16 || input == DType::F16 ? DType::F32 : input;
}

// GELU's `approximate` attribute: "tanh" (GPT-2's form) or "none" (the exact erf form).
inline void check_gelu_mode(const std::string& approximate) {
  MERAK_CHECK(approximate == "tanh" || approximate == "none", "approximate must be \"tanh\" or ",
              "\"none\", got \"", approximate, "\"");
}

inline void expect_rank_at_least(const TensorMeta& m, int64_t rank, const char* what) {
  MERAK_CHECK(int64_t(m.shape.size()) >= rank, what, " needs rank >= ", rank, ", got ",
              shape_str(m.shape));
}

}  // namespace merak::ops
