// arange: the index sequence 0, 1, ..., n-1 along one dim of x. Models build position ids with it
// from the token tensor, so the ids come from a registry op: on Meta they are a traceable node
// (not a tensor of unknown origin), and they land on whatever device the tokens are on.
#include "merak/ops/functional.h"
#include "merak/ops/op_util.h"

namespace merak::ops {

MERAK_REGISTER_OP(arange) {
  OpDef d;
  d.name = "arange";
  d.doc = "i64 [n] = 0, 1, ..., n-1 with n = x.size(dim); reads only x's shape";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = {{"dim", AttrKind::Int, int64_t(-1)}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const Shape& s = in[0].shape;
    MERAK_CHECK(!s.empty(), "x must have at least one dim, got a scalar");
    const int64_t n = s[size_t(normalize_dim(a.i("dim"), int64_t(s.size())))];
    return std::vector<TensorMeta>{{{n}, DType::I64}};
  };
  // Writes n integers; no floating-point work.
  d.cost = [](const std::vector<TensorMeta>&, const std::vector<TensorMeta>& out, const Attrs&) {
    return OpCost{0, 0, double(out[0].nbytes())};
  };
  d.strided_inputs = true;  // x's values are never read: no reason to copy a strided x
  return d;
}

Tensor arange(const Tensor& x, int64_t dim) {
  static const OpDef& op = def("arange");
  return call1(op, {x}, Attrs().set("dim", dim));
}

}  // namespace merak::ops
