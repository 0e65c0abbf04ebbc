#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "merak/core/error.h"
#include "merak/graph/initializer_values.h"
#include "merak/graph/onnx_external_internal.h"
#include "merak/graph/onnx_proto_internal.h"

namespace merak::graph::onnx_detail {
namespace {

// A non-negative decimal count, or nothing.
bool parse_count(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

// True when some '/'-separated part of `path` is "..".
bool climbs(const std::string& path) {
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    if (path.compare(start, end - start, "..") == 0 && end - start == 2) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

bool is_external(const onnx::TensorProto& t) {
  return t.data_location() == onnx::TensorProto::EXTERNAL;
}

ExternalData external_data(const onnx::TensorProto& t, const std::string& model_dir,
                           int64_t bytes) {
  const std::string what = "tensor '" + t.name() + "'";
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& e : t.external_data()) {
    if (e.key() == "location") {
      location = e.value();
    } else if (e.key() == "offset") {
      MERAK_CHECK(parse_count(e.value(), &offset), what, ": external data offset '", e.value(),
                  "' is not a count of bytes");
    } else if (e.key() == "length") {
      MERAK_CHECK(parse_count(e.value(), &length), what, ": external data length '", e.value(),
                  "' is not a count of bytes");
    }  // "checksum" (optional SHA-1) and others: not needed to read the values
  }
  MERAK_CHECK(!location.empty(), what, ": external data without a location");
  MERAK_CHECK(!model_dir.empty(), what, ": its values are in external data ('", location,
              "'), which is found beside the model's file: import the file, not bytes");
  MERAK_CHECK(location[0] != '/' && !climbs(location) && location.find('\0') == std::string::npos,
              what, ": external data location '", location,
              "' is outside the model's directory (it must be a relative path within it)");
  MERAK_CHECK(length < 0 || length == bytes, what, ": external data length ", length,
              ", its type and dims need ", bytes, " bytes");
  const std::string joined = model_dir + "/" + location;
  char* real = ::realpath(joined.c_str(), nullptr);
  if (!real)
    MERAK_FAIL(what, ": its external data ", joined, " cannot be read (", std::strerror(errno),
               ")");
  ExternalData out;
  out.set_path(real);
  std::free(real);
  out.set_offset(offset);
  // A symbolic link must not lead the import out of the directory either.
  const std::string inside = model_dir == "/" ? "/" : model_dir + "/";
  MERAK_CHECK(out.path().compare(0, inside.size(), inside) == 0, what,
              ": external data location '", location, "' leads outside the model's directory (to ",
              out.path(), ")");
  struct stat st;
  if (::stat(out.path().c_str(), &st) != 0)
    MERAK_FAIL(what, ": its external data ", out.path(), " cannot be read (",
               std::strerror(errno), ")");
  MERAK_CHECK(S_ISREG(st.st_mode), what, ": its external data ", out.path(),
              " is not a regular file");
  MERAK_CHECK(offset <= int64_t(st.st_size) && bytes <= int64_t(st.st_size) - offset, what,
              ": its ", bytes, " bytes from offset ", offset, " lie past the end of ", out.path(),
              " (", int64_t(st.st_size), " bytes)");
  return out;
}

std::map<std::string, ExternalData> resolve_external_initializers(onnx::GraphProto& g,
                                                                  const std::string& model_dir,
                                                                  int64_t max_constant_bytes) {
  std::map<std::string, ExternalData> weights;
  int64_t read = 0;  // constants' bytes, within the import's limit
  for (onnx::TensorProto& t : *g.mutable_initializer()) {
    if (!is_external(t)) continue;
    const std::string what = "initializer '" + t.name() + "'";
    const DType dtype = dtype_from_onnx(t.data_type(), what);
    const bool weight = becomes_parameter(t);
    const int64_t limit = (weight ? kMaxValueElements : kMaxConstantBytes) / dtype_size(dtype);
    const int64_t bytes = checked_numel(onnx_dims(t), limit, what) * int64_t(dtype_size(dtype));
    const ExternalData where = external_data(t, model_dir, bytes);
    if (weight) {
      weights[t.name()] = where;
      continue;
    }
    read += bytes;
    MERAK_CHECK(read <= max_constant_bytes, what, ": constants in external data take ", read,
                " bytes so far, over the limit of ", max_constant_bytes,
                " (ImportOptions::max_constant_bytes)");
    std::string values(size_t(bytes), '\0');
    if (bytes > 0) read_external(where, values.data(), bytes, what);
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    t.set_raw_data(std::move(values));
  }
  return weights;
}

}  // namespace merak::graph::onnx_detail
