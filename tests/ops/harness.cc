#include "tests/ops/harness.h"

#include <cmath>
#include <map>

#include "merak/core/philox.h"
#include "tests/ops/harness_registry.h"

namespace merak::test {

std::map<std::string, std::vector<CaseFactory>>& case_factories() {
  static std::map<std::string, std::vector<CaseFactory>> m;
  return m;
}

CaseRegistrar::CaseRegistrar(const std::string& op, CaseFactory factory) {
  case_factories()[op].push_back(std::move(factory));
}

Tensor rand_f64(const Shape& shape, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::empty(shape, DType::F64);
  double* p = t.data<double>();
  const uint64_t key = philox_key(seed, "harness");
  for (int64_t i = 0; i < t.numel(); ++i) {
    const auto r = philox_at(key, uint64_t(i));
    const double u = (double(r[0]) + double(r[1]) / 4294967296.0) / 4294967296.0;
    p[i] = lo + (hi - lo) * u;
  }
  return t;
}

Tensor rand_int(const Shape& shape, uint64_t seed, int64_t lo, int64_t hi, DType dtype) {
  MERAK_CHECK(hi > lo, "rand_int: empty range");
  Tensor t = Tensor::empty(shape, dtype);
  const uint64_t key = philox_key(seed, "harness-int");
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = lo + int64_t(philox_at(key, uint64_t(i))[0] % uint64_t(hi - lo));
    if (dtype == DType::I32) t.data<int32_t>()[i] = int32_t(v);
    else t.data<int64_t>()[i] = v;
  }
  return t;
}

Tensor rand_bool(const Shape& shape, uint64_t seed, double p_true) {
  Tensor t = Tensor::empty(shape, DType::Bool);
  const uint64_t key = philox_key(seed, "harness-bool");
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<bool>()[i] = uniform01(philox_at(key, uint64_t(i))[0]) < p_true;
  return t;
}

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<double> out(size_t(c.numel()));
  const void* p = c.raw_data();
  for (size_t i = 0; i < out.size(); ++i) {
    switch (c.dtype()) {
      case DType::F32: out[i] = static_cast<const float*>(p)[i]; break;
      case DType::F64: out[i] = static_cast<const double*>(p)[i]; break;
      case DType::BF16: out[i] = bf16_to_f32(static_cast<const uint16_t*>(p)[i]); break;
      case DType::F16: out[i] = f16_to_f32(static_cast<const uint16_t*>(p)[i]); break;
      case DType::I32: out[i] = static_cast<const int32_t*>(p)[i]; break;
      case DType::I64: out[i] = double(static_cast<const int64_t*>(p)[i]); break;
      case DType::Bool: out[i] = static_cast<const bool*>(p)[i] ? 1 : 0; break;
    }
  }
  return out;
}

Tensor make_f64(const Shape& shape, const std::vector<double>& v) {
  return Tensor::from_vector<double>(v, shape);
}

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

int64_t broadcast_source(const std::vector<int64_t>& out_index, const Shape& shape) {
  const size_t lead = out_index.size() - shape.size();
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    flat = flat * shape[d] + (shape[d] == 1 ? 0 : out_index[lead + d]);
  return flat;
}

double gelu_tanh_ref(double x) {
  const double k = std::sqrt(2 / M_PI);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double gelu_erf_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

}  // namespace merak::test
