// Tensor: a strided view of a Storage. Methods here are raw storage operations (no autograd);
// differentiable ops, views included, live in merak::ops and are recorded by merak::autograd.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "merak/core/allocator.h"
#include "merak/core/device.h"
#include "merak/core/dtype.h"
#include "merak/core/error.h"
#include "merak/core/shape.h"

namespace merak {

// A contiguous block of device memory. Freed through its allocator when the last view goes;
// borrowed memory (no allocator) is left to whoever lent it.
struct Storage {
  Storage(size_t bytes, Device device);
  Storage(void* borrowed, size_t bytes, Device device)
      : data(borrowed), bytes(bytes), device(device) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  Allocator* allocator = nullptr;
};

// The autograd function that produced a tensor. Opaque here; merak::autograd defines it.
struct GradFn {
  virtual ~GradFn() = default;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;  // null for Meta tensors
  int64_t offset = 0;                // in elements
  Shape shape;
  Shape strides;                     // in elements
  DType dtype = DType::F32;
  Device device;
  // Autograd state: set by merak::autograd, read by merak::ops' dispatcher.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<GradFn> grad_fn;
  int output_nr = 0;
  std::string name;  // parameter name, for errors and checkpoints
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Factories. Meta tensors get shape and dtype only.
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32,
                     Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu()) {
    return full(shape, 1.0, dtype, device);
  }
  static Tensor scalar(double value, DType dtype = DType::F32) { return full({}, value, dtype); }
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  // A contiguous CPU tensor over memory it does not own (a shared-memory window, say): the
  // lender keeps it alive and unchanged for as long as the tensor or a view of it is used.
  static Tensor borrow(void* data, const Shape& shape, DType dtype = DType::F32);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t dim() const { return int64_t(impl().shape.size()); }
  int64_t size(int64_t d) const { return impl().shape[normalize_dim(d, dim())]; }
  int64_t numel() const { return merak::numel(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().device; }
  bool is_meta() const { return impl().device.is_meta(); }
  bool is_contiguous() const;
  int64_t nbytes() const { return numel() * int64_t(dtype_size(dtype())); }
  std::string str() const;  // "f32[2, 3] cpu"

  // Element pointers (CPU only), checked against the dtype.
  void* raw_data() const;
  template <typename T>
  T* data() const {
    MERAK_CHECK(dtype_of<T>::value == dtype(), "data<", dtype_name(dtype_of<T>::value),
                ">() on a ", dtype_name(dtype()), " tensor");
    return static_cast<T*>(raw_data());
  }
  // The first element's address on the tensor's device, for device backends (raw_data() is the
  // host's view and refuses device tensors).
  void* device_data() const;
  double item() const;  // value of a one-element tensor, as double (copied to the host)
  template <typename T>
  std::vector<T> to_vector() const;  // row-major copy

  // Views: share storage, never copy.
  Tensor view(const Shape& shape) const;  // -1 allowed; throws if the strides don't allow it
  Tensor permute(const std::vector<int64_t>& order) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor expand(const Shape& shape) const;  // size-1 dims get stride 0
  Tensor unsqueeze(int64_t dim) const;
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;

  // Copies.
  Tensor contiguous() const;  // this tensor if already contiguous, else a row-major copy
  Tensor clone() const;       // always a fresh row-major copy
  void copy_(const Tensor& src) const;  // same shape and dtype; any strides on either side
  Tensor to(Device device) const;  // CPU <-> Meta, and CUDA <-> CPU when that backend is linked
  void fill_(double value) const;

  // A new tensor sharing this one's storage and view, without autograd history.
  Tensor detach() const;

  // Autograd state (used by merak::autograd and nn::Module).
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& set_requires_grad(bool r) { impl().requires_grad = r; return *this; }
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& g) const { impl().grad = g.impl_; }
  const std::shared_ptr<GradFn>& grad_fn() const { return impl().grad_fn; }
  const std::string& name() const { return impl().name; }
  Tensor& set_name(std::string n) { impl().name = std::move(n); return *this; }

  TensorImpl& impl() const {
    MERAK_CHECK(impl_, "use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// The storage offsets (in elements) of a tensor's elements in row-major order: the general path
// for kernels that accept arbitrary strides.
std::vector<int64_t> element_offsets(const Tensor& t);

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  MERAK_CHECK(int64_t(values.size()) == merak::numel(shape), "from_vector: ", values.size(),
              " values for shape ", shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>::value);
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = device().is_cpu() ? contiguous() : to(Device::cpu());
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}

}  // namespace merak
