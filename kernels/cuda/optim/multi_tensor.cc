// The tensor-level side of the multi-tensor optimizer kernels: checks the lists, cuts them into
// chunk descriptors, uploads those on the device's stream and calls the launchers
// (multi_tensor.cu). Linking it registers the kernels with merak::optim for CUDA tensors.
#include "kernels/cuda/optim/multi_tensor.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/common.h"
#include "kernels/cuda/optim/multi_tensor_kernels.h"
#include "merak/cuda/runtime.h"

namespace merak::cuda_kernels::optim {
namespace {

// ---- argument checks ----------------------------------------------------------------------

// What a call expects of each tensor in its lists.
struct Expect {
  Device device;                  // the first tensor's device, which must be CUDA
  bool any_float = false;         // f32 only, or f32, bf16 and f16
  bool contiguous = true;         // the kernels read a tensor as one flat range
  const Shape* shape = nullptr;   // params[i]'s shape, for a gradient or moment
};

bool meets(const Tensor& t, const Expect& e) {
  if (!t.defined() || !e.device.is_cuda() || t.device() != e.device) return false;
  const DType d = t.dtype();
  if (d != DType::F32 && !(e.any_float && (d == DType::BF16 || d == DType::F16))) return false;
  if (e.shape && t.shape() != *e.shape) return false;
  return !e.contiguous || t.is_contiguous();
}

// Throws naming the call, the list and index of the tensor at fault, what that tensor is and
// what was expected: "adamw_step_cuda: grads[2] is i32[3, 5] cuda:0; expected ...".
void check_tensor(const char* op, const char* list, size_t i, const Tensor& t, const Expect& e) {
  if (meets(t, e)) return;
  const bool strided = t.defined() && !t.is_contiguous();
  MERAK_FAIL(op, ": ", list, "[", i, "] is ", t.str(), strided ? " (not contiguous)" : "",
             "; expected a", e.contiguous ? " contiguous" : "",
             e.any_float ? " f32, bf16 or f16" : " f32", " tensor on ",
             e.device.is_cuda() ? e.device.str() : std::string("a CUDA device"),
             e.shape ? " with params[" + std::to_string(i) + "]'s shape " + shape_str(*e.shape)
                     : std::string());
}

// The device of a list's first tensor (CPU for an undefined one, which check_tensor refuses).
Device first_device(const std::vector<Tensor>& list) {
  return list[0].defined() ? list[0].device() : Device::cpu();
}

// ---- device memory ------------------------------------------------------------------------

// `bytes` of device memory for one call, from the caching allocator. Dropping it once the
// launches are queued is safe: a device's work is ordered on its one stream, so the block is
// only handed out again to work queued after these kernels.
Tensor scratch(int64_t bytes, Device device) {
  return Tensor::empty({bytes > 8 ? (bytes + 7) / 8 : 1}, DType::I64, device);
}

// The descriptors in device memory, copied on the stream. A copy from pageable host memory is
// staged by the driver before cudaMemcpyAsync returns, so `items` may go away at once.
template <typename T>
Tensor upload(const std::vector<T>& items, Device device, cudaStream_t stream) {
  const int64_t bytes = int64_t(items.size() * sizeof(T));
  Tensor table = scratch(bytes, device);
  merak::cuda::check(cudaMemcpyAsync(table.device_data(), items.data(), size_t(bytes),
                                     cudaMemcpyHostToDevice, stream),
                     "cudaMemcpyAsync (chunk descriptors)");
  return table;
}

// One value back from the device, after the work queued before it.
template <typename T>
T read_back(const void* src, cudaStream_t stream, const char* what) {
  T value{};
  merak::cuda::check(cudaMemcpyAsync(&value, src, sizeof(T), cudaMemcpyDeviceToHost, stream),
                     what);
  merak::cuda::check(cudaStreamSynchronize(stream), what);
  return value;
}

char* at_element(const Tensor& t, int64_t offset) {
  return static_cast<char*>(t.device_data()) + offset * int64_t(dtype_size(t.dtype()));
}

// The read-only chunk descriptors of a list of f32/bf16/f16 CUDA tensors. Views are read
// through contiguous copies, kept in `hold` until the launch is queued.
std::vector<ReadChunk> read_chunks(const char* op, const std::vector<Tensor>& tensors,
                                   std::vector<Tensor>& hold) {
  const Expect e{first_device(tensors), /*any_float=*/true, /*contiguous=*/false};
  std::vector<int64_t> numels;
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_tensor(op, "tensors", i, tensors[i], e);
    hold.push_back(tensors[i].is_contiguous() ? tensors[i] : tensors[i].contiguous());
    numels.push_back(tensors[i].numel());
  }
  std::vector<ReadChunk> chunks;
  for (const TensorChunk& c : split_into_chunks(numels)) {
    const Tensor& t = hold[size_t(c.tensor)];
    chunks.push_back({at_element(t, c.offset), c.numel, int(elem_of(t, op))});
  }
  return chunks;
}

}  // namespace

std::vector<TensorChunk> split_into_chunks(const std::vector<int64_t>& numels,
                                           int64_t chunk_numel) {
  MERAK_CHECK(chunk_numel > 0, "split_into_chunks: chunk size must be > 0, got ", chunk_numel);
  std::vector<TensorChunk> chunks;
  for (size_t i = 0; i < numels.size(); ++i) {
    MERAK_CHECK(numels[i] >= 0, "split_into_chunks: tensor ", i, " has ", numels[i],
                " elements");
    for (int64_t at = 0; at < numels[i]; at += chunk_numel)
      chunks.push_back({int64_t(i), at, std::min(chunk_numel, numels[i] - at)});
  }
  return chunks;
}

void adamw_step_cuda(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     const std::vector<Tensor>& m, const std::vector<Tensor>& v,
                     const AdamWCoefficients& c) {
  const char* op = "adamw_step_cuda";
  MERAK_CHECK(grads.size() == params.size() && m.size() == params.size() &&
                  v.size() == params.size(),
              op, ": the lists differ in length: ", params.size(), " params, ", grads.size(),
              " grads, ", m.size(), " m, ", v.size(), " v");
  if (params.empty()) return;
  const Device device = first_device(params);
  std::vector<int64_t> numels;
  for (size_t i = 0; i < params.size(); ++i) {
    check_tensor(op, "params", i, params[i], {device});
    const Shape& shape = params[i].shape();
    check_tensor(op, "grads", i, grads[i], {device, /*any_float=*/true, true, &shape});
    check_tensor(op, "m", i, m[i], {device, false, true, &shape});
    check_tensor(op, "v", i, v[i], {device, false, true, &shape});
    numels.push_back(params[i].numel());
  }
  std::vector<AdamWChunk> chunks;
  for (const TensorChunk& ch : split_into_chunks(numels)) {
    const size_t i = size_t(ch.tensor);
    chunks.push_back({reinterpret_cast<float*>(at_element(params[i], ch.offset)),
                      at_element(grads[i], ch.offset),
                      reinterpret_cast<float*>(at_element(m[i], ch.offset)),
                      reinterpret_cast<float*>(at_element(v[i], ch.offset)), ch.numel,
                      int(elem_of(grads[i], op))});
  }
  if (chunks.empty()) return;
  const AdamWScalars s{c.grad_scale,    c.decay,
                       c.beta1,         c.one_minus_beta1,
                       c.beta2,         c.one_minus_beta2,
                       c.bias_correction2_sqrt, c.eps,
                       c.neg_step_size};
  const cudaStream_t stream = stream_of(params[0]);
  const Tensor table = upload(chunks, device, stream);
  launch_adamw(static_cast<const AdamWChunk*>(table.device_data()), int64_t(chunks.size()), s,
               stream);
  check_launch("adamw kernel");
}

double sum_of_squares_cuda(const std::vector<Tensor>& tensors) {
  const char* op = "sum_of_squares_cuda";
  if (tensors.empty()) return 0.0;
  std::vector<Tensor> hold;
  const std::vector<ReadChunk> chunks = read_chunks(op, tensors, hold);
  if (chunks.empty()) return 0.0;
  const Device device = tensors[0].device();
  const cudaStream_t stream = stream_of(tensors[0]);
  const Tensor table = upload(chunks, device, stream);
  const int64_t count = int64_t(chunks.size());
  // The chunk sums, then the total in one more double.
  const Tensor work = scratch(sum_of_squares_scratch_bytes(count) + 8, device);
  double* total = static_cast<double*>(work.device_data()) + count;
  launch_sum_of_squares(static_cast<const ReadChunk*>(table.device_data()), count,
                        work.device_data(), total, stream);
  check_launch("sum of squares kernels");
  return read_back<double>(total, stream, "sum_of_squares_cuda: reading the result");
}

bool all_finite_cuda(const std::vector<Tensor>& tensors) {
  const char* op = "all_finite_cuda";
  if (tensors.empty()) return true;
  std::vector<Tensor> hold;
  const std::vector<ReadChunk> chunks = read_chunks(op, tensors, hold);
  if (chunks.empty()) return true;
  const Device device = tensors[0].device();
  const cudaStream_t stream = stream_of(tensors[0]);
  const Tensor table = upload(chunks, device, stream);
  const Tensor flag = scratch(sizeof(int), device);
  merak::cuda::check(cudaMemsetAsync(flag.device_data(), 0, sizeof(int), stream),
                     "all_finite_cuda: clearing the flag");
  launch_find_nonfinite(static_cast<const ReadChunk*>(table.device_data()),
                        int64_t(chunks.size()), static_cast<int*>(flag.device_data()), stream);
  check_launch("non-finite check kernel");
  return read_back<int>(flag.device_data(), stream, "all_finite_cuda: reading the flag") == 0;
}

namespace {

// merak/optim calls these for CUDA tensors. Registration touches no CUDA API, so binaries with
// this library start on a machine without a GPU.
struct Registration {
  Registration() {
    merak::optim::DeviceOptimizer kernels;
    kernels.adamw = adamw_step_cuda;
    kernels.sum_of_squares = sum_of_squares_cuda;
    kernels.all_finite = all_finite_cuda;
    merak::optim::register_device_optimizer(DeviceType::CUDA, kernels);
  }
} registration;

}  // namespace
}  // namespace merak::cuda_kernels::optim
