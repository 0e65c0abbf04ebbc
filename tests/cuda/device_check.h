// What the CUDA kernel checks share: failure counting (they report every failure and exit 1
// rather than stop at the first), host tensors of pseudo-random values, dtype conversion on the
// host, and comparison of a device result with the CPU's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "merak/core/tensor.h"

namespace merak::device_check {

// Prints "FAIL what" and counts it; callable from several threads.
void fail(const std::string& what);
int failures();

// That f throws, with a message holding every one of `parts`.
void expect_error(const std::string& label, const std::function<void()>& f,
                  const std::vector<std::string>& parts);

// A 64-bit LCG step: the checks' inputs are the same on every machine.
uint64_t next_random(uint64_t& state);
// f32 values in [lo, hi).
Tensor rand_f32(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f);
// Integers in [lo, hi) of an index dtype; every `ignore_every`-th one -100 when that is not 0.
Tensor rand_ids(const Shape& shape, uint64_t seed, int64_t lo, int64_t hi, DType dtype,
                int ignore_every = 0);

// Any tensor's values as doubles (copied to the host when needed).
std::vector<double> values(const Tensor& t);
// A tensor's values on the host in `to`: f32, or bf16/f16 rounded to nearest even.
Tensor convert(const Tensor& t, DType to);
bool floating(const Tensor& t);
std::vector<Tensor> to_device(const std::vector<Tensor>& in, Device d);

// Fails unless `got` matches `want` within tol * (1 + |want|) everywhere (NaN and inf must
// match), naming the worst element.
void compare(const std::string& label, const Tensor& want, const Tensor& got, double tol);
// compare's tolerance for op `op` computed in `dtype` against the CPU's f32 result on the same
// rounded inputs: `f32` for f32; for bf16 and f16 a bound set by their 8 and 11 mantissa bits,
// looser for gradients (they chain more roundings).
double tolerance_for(const std::string& op, DType dtype, double f32);

}  // namespace merak::device_check
