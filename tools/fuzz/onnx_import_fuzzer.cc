// libFuzzer target for the ONNX importer: whatever the bytes, import_onnx_bytes returns a graph
// or throws ImportError (merak::Error is caught too, to tell a leaked internal error apart from
// a crash). Anything else (a crash, a sanitizer report, another exception, a leak) is a bug.
// Built outside Bazel with clang by tools/fuzz/build.sh.
#include <cstddef>
#include <cstdint>
#include <string>

#include "merak/core/error.h"
#include "merak/graph/onnx_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  merak::graph::ImportOptions options;
  // The seed corpus's exports call their dynamic axes batch and seq.
  options.dim_params = {{"batch", 2}, {"seq", 5}};
  // The fuzz build caps one constant at 1 MiB (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION); all
  // of them together at 4 MiB here: the same checks, with numbers that keep executions fast
  // (under ASan every large block is a fresh mapping, faulted in page by page).
  options.max_constant_bytes = int64_t(4) << 20;
  try {
    merak::graph::import_onnx_bytes(std::string(reinterpret_cast<const char*>(data), size),
                                    "fuzz.onnx", options);
  } catch (const merak::graph::ImportError&) {
  } catch (const merak::Error&) {
  }
  return 0;
}
