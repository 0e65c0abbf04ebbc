#include "tests/cuda/device_check.h"

#include <cmath>
#include <cstdio>
#include <mutex>

namespace merak::device_check {
namespace {

std::mutex fail_mu;
int failed = 0;

}  // namespace

void fail(const std::string& what) {
  std::lock_guard<std::mutex> lock(fail_mu);
  std::printf("FAIL %s\n", what.c_str());
  ++failed;
}

int failures() {
  std::lock_guard<std::mutex> lock(fail_mu);
  return failed;
}

void expect_error(const std::string& label, const std::function<void()>& f,
                  const std::vector<std::string>& parts) {
  try {
    f();
    fail(label + ": no error");
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts)
      if (msg.find(p) == std::string::npos) fail(label + ": error lacks '" + p + "': " + msg);
  }
}

uint64_t next_random(uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return state >> 33;
}

Tensor rand_f32(const Shape& shape, uint64_t seed, float lo, float hi) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.numel() ? t.data<float>() : nullptr;
  uint64_t s = seed * 7919 + 17;
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = lo + (hi - lo) * float(next_random(s) % 1000003) / 1000003.f;
  return t;
}

Tensor rand_ids(const Shape& shape, uint64_t seed, int64_t lo, int64_t hi, DType dtype,
                int ignore_every) {
  Tensor t = Tensor::empty(shape, dtype);
  uint64_t s = seed * 104729 + 3;
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t v = lo + int64_t(next_random(s) % uint64_t(hi - lo));
    if (ignore_every && i % ignore_every == 1) v = -100;
    if (dtype == DType::I32) t.data<int32_t>()[i] = int32_t(v);
    else t.data<int64_t>()[i] = v;
  }
  return t;
}

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu());
  std::vector<double> v(size_t(c.numel()));
  const void* p = c.numel() ? c.raw_data() : nullptr;
  for (size_t i = 0; i < v.size(); ++i) {
    switch (c.dtype()) {
      case DType::F32: v[i] = static_cast<const float*>(p)[i]; break;
      case DType::F64: v[i] = static_cast<const double*>(p)[i]; break;
      case DType::BF16: v[i] = bf16_to_f32(static_cast<const uint16_t*>(p)[i]); break;
      case DType::F16: v[i] = f16_to_f32(static_cast<const uint16_t*>(p)[i]); break;
      case DType::I32: v[i] = static_cast<const int32_t*>(p)[i]; break;
      case DType::I64: v[i] = double(static_cast<const int64_t*>(p)[i]); break;
      case DType::Bool: v[i] = static_cast<const bool*>(p)[i]; break;
    }
  }
  return v;
}

Tensor convert(const Tensor& t, DType to) {
  const std::vector<double> v = values(t);
  Tensor out = Tensor::empty(t.shape(), to);
  for (size_t i = 0; i < v.size(); ++i) {
    const float f = float(v[i]);
    if (to == DType::BF16) static_cast<uint16_t*>(out.raw_data())[i] = f32_to_bf16(f);
    else if (to == DType::F16) static_cast<uint16_t*>(out.raw_data())[i] = f32_to_f16(f);
    else out.data<float>()[i] = f;
  }
  return out;
}

bool floating(const Tensor& t) { return t.defined() && is_floating(t.dtype()); }

std::vector<Tensor> to_device(const std::vector<Tensor>& in, Device d) {
  std::vector<Tensor> out;
  for (const Tensor& t : in) out.push_back(t.defined() ? t.to(d) : t);
  return out;
}

void compare(const std::string& label, const Tensor& want, const Tensor& got, double tol) {
  if (want.shape() != got.shape()) {
    fail(label + ": shape " + shape_str(got.shape()) + ", expected " + shape_str(want.shape()));
    return;
  }
  const std::vector<double> w = values(want), g = values(got);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    double err;
    if (std::isnan(w[i]) || std::isnan(g[i])) err = std::isnan(w[i]) && std::isnan(g[i]) ? 0 : 1e30;
    else if (std::isinf(w[i]) || std::isinf(g[i])) err = w[i] == g[i] ? 0 : 1e30;
    else err = std::fabs(w[i] - g[i]) / (1 + std::fabs(w[i]));
    if (err > worst) {
      worst = err;
      at = i;
    }
  }
  if (worst > tol) {
    char buf[256];
    std::snprintf(buf, sizeof(buf), ": error %.3g at %zu (got %.8g, expected %.8g), tolerance %.3g",
                  worst, at, g[at], w[at], tol);
    fail(label + buf);
  }
}

double tolerance_for(const std::string& op, DType dtype, double f32) {
  const bool grad = op.find("grad") != std::string::npos;
  if (dtype == DType::BF16) return grad ? 6e-2 : 2e-2;
  if (dtype == DType::F16) return grad ? 1e-2 : 4e-3;
  return f32;
}

}  // namespace merak::device_check
