#include "merak/graph/initializer_values.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "merak/graph/convert.h"

namespace merak::graph {

bool has_values(const Initializer& init) { return !init.data().empty() || init.has_external(); }

void read_external(const ExternalData& external, void* out, int64_t bytes,
                   const std::string& what) {
  const std::string& path = external.path();
  std::ifstream f(path, std::ios::binary);
  if (!f)
    MERAK_FAIL(what, ": its values are in ", path, ", which cannot be read (",
               std::strerror(errno), ")");
  f.seekg(std::streamoff(external.offset()));
  f.read(static_cast<char*>(out), std::streamsize(bytes));
  MERAK_CHECK(f && f.gcount() == std::streamsize(bytes), what, ": its ", bytes,
              " bytes at offset ", external.offset(), " of ", path,
              " cannot be read (the file is shorter)");
}

Tensor initializer_values(const Initializer& init) {
  if (!has_values(init)) return Tensor();
  const std::string what = "initializer '" + init.name() + "'";
  const Shape shape = fixed_shape(init.type(), what);
  const DType dtype = from_proto(init.type().dtype());
  if (!init.has_external()) return tensor_from_bytes(init.data(), shape, dtype, what);
  const bool transposed = init.external().transposed();
  MERAK_CHECK(!transposed || shape.size() == 2, what, ": transposed external data of ",
              shape_str(shape), " (only a matrix can be)");
  Tensor t = Tensor::empty(transposed ? Shape{shape[1], shape[0]} : shape, dtype);
  if (t.nbytes() > 0) read_external(init.external(), t.raw_data(), t.nbytes(), what);
  return transposed ? t.transpose(0, 1).contiguous() : t;
}

}  // namespace merak::graph
