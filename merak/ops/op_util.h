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
inline void expect_floating(const TensorMeta& m, const char* what) {
  MERAK_CHECK(m.dtype == DType::F32 || m.dtype == DType::F64, what, " must be f32 or f64, got ",
              dtype_name(m.dtype));
}
inline void expect_rank_at_least(const TensorMeta& m, int64_t rank, const char* what) {
  MERAK_CHECK(int64_t(m.shape.size()) >= rank, what, " needs rank >= ", rank, ", got ",
              shape_str(m.shape));
}

}  // namespace merak::ops
