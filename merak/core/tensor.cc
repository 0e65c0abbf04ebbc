#include "merak/core/tensor.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "merak/core/device_backend.h"
#include "merak/core/parallel.h"

namespace merak {

Storage::Storage(size_t nbytes, Device dev) : bytes(nbytes), device(dev) {
  allocator = allocator_for(dev);
  data = allocator->allocate(nbytes);
}

Storage::~Storage() {
  if (data && allocator) allocator->deallocate(data, bytes);
}

namespace {

// A contiguous tensor's description, without storage.
std::shared_ptr<TensorImpl> make_layout(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) MERAK_CHECK(d >= 0, "negative size in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->device = device;
  return impl;
}

std::shared_ptr<TensorImpl> make_impl(const Shape& shape, DType dtype, Device device) {
  auto impl = make_layout(shape, dtype, device);
  int64_t bytes = 0;
  MERAK_CHECK(!__builtin_mul_overflow(numel(shape), int64_t(dtype_size(dtype)), &bytes),
              "a tensor of shape ", shape_str(shape), " in ", dtype_name(dtype),
              " has more bytes than int64 counts");
  if (!device.is_meta()) impl->storage = std::make_shared<Storage>(bytes, device);
  return impl;
}

// Copies elements between two strided layouts of the same shape. The innermost dimension is a
// tight loop on the element size; outer dimensions recurse.
template <typename Word>
void copy_dim(char* dst, const int64_t* dst_st, const char* src, const int64_t* src_st,
              const int64_t* shape, int64_t rank) {
  if (rank == 1) {
    const int64_t n = shape[0], ds = dst_st[0], ss = src_st[0];
    Word* d = reinterpret_cast<Word*>(dst);
    const Word* s = reinterpret_cast<const Word*>(src);
    if (ds == 1 && ss == 1) {
      std::memcpy(d, s, n * sizeof(Word));
    } else {
      for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
    }
    return;
  }
  for (int64_t i = 0; i < shape[0]; ++i)
    copy_dim<Word>(dst + i * dst_st[0] * int64_t(sizeof(Word)), dst_st + 1,
                   src + i * src_st[0] * int64_t(sizeof(Word)), src_st + 1, shape + 1, rank - 1);
}

void strided_copy(const Tensor& dst, const Tensor& src) {
  const int64_t rank = dst.dim();
  if (dst.numel() == 0) return;
  if (!dst.device().is_cpu() || !src.device().is_cpu()) {
    MERAK_CHECK(dst.device() == src.device(), "copy between ", src.device().str(), " and ",
                dst.device().str(), ": use to()");
    device_backend(dst.device().type).strided_copy(dst, src);
    return;
  }
  if (dst.is_contiguous() && src.is_contiguous()) {
    // One core does not reach the memory's bandwidth: large copies are split over the pool.
    constexpr int64_t kBlock = int64_t(4) << 20;
    char* d = static_cast<char*>(dst.raw_data());
    const char* s = static_cast<const char*>(src.raw_data());
    const int64_t bytes = dst.nbytes();
    if (bytes < 2 * kBlock) {
      std::memcpy(d, s, size_t(bytes));
      return;
    }
    parallel_for(0, (bytes + kBlock - 1) / kBlock, 1, [&](int64_t lo, int64_t hi) {
      const int64_t from = lo * kBlock, to = std::min(bytes, hi * kBlock);
      std::memcpy(d + from, s + from, size_t(to - from));
    });
    return;
  }
  Shape shape = dst.shape(), ds = dst.strides(), ss = src.strides();
  if (rank == 0) { shape = {1}; ds = {1}; ss = {1}; }
  char* d = static_cast<char*>(dst.raw_data());
  const char* s = static_cast<const char*>(src.raw_data());
  const int64_t r = int64_t(shape.size());
  const int64_t elem = int64_t(dtype_size(dst.dtype()));
  // Copies the elements whose leading `lead` dims, flattened, index [lo, hi).
  auto copy_rows = [&](int64_t lead, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      int64_t rest = i, doff = 0, soff = 0;
      for (int64_t k = lead; k-- > 0;) {
        const int64_t idx = rest % shape[size_t(k)];
        rest /= shape[size_t(k)];
        doff += idx * ds[size_t(k)];
        soff += idx * ss[size_t(k)];
      }
      char* dd = d + doff * elem;
      const char* sd = s + soff * elem;
      const int64_t* dst_st = ds.data() + lead;
      const int64_t* src_st = ss.data() + lead;
      const int64_t* sh = shape.data() + lead;
      switch (elem) {
        case 1: copy_dim<uint8_t>(dd, dst_st, sd, src_st, sh, r - lead); break;
        case 2: copy_dim<uint16_t>(dd, dst_st, sd, src_st, sh, r - lead); break;
        case 4: copy_dim<uint32_t>(dd, dst_st, sd, src_st, sh, r - lead); break;
        case 8: copy_dim<uint64_t>(dd, dst_st, sd, src_st, sh, r - lead); break;
      }
    }
  };
  // Large copies (a permuted attention input, a concatenation's parts) are split over the pool
  // along their leading dims, enough of them to give every thread a few pieces: the training
  // step's other threads would otherwise wait for one core's copy.
  constexpr int64_t kParallelCopyBytes = int64_t(64) << 10;
  const int64_t threads = num_threads();
  if (threads > 1 && r >= 2 && dst.nbytes() >= kParallelCopyBytes) {
    int64_t lead = 1, rows = shape[0];
    while (rows < 4 * threads && lead < r - 1) rows *= shape[size_t(lead++)];
    if (rows >= 2) {
      parallel_for(0, rows, 1, [&](int64_t lo, int64_t hi) { copy_rows(lead, lo, hi); });
      return;
    }
  }
  copy_rows(0, 0, 1);
}

// The bytes a non-empty view reaches in its storage: [first, last).
std::pair<const char*, const char*> byte_span(const Tensor& t) {
  const char* base = static_cast<const char*>(t.raw_data());
  int64_t lo = 0, hi = 0;
  for (int64_t i = 0; i < t.dim(); ++i) {
    const int64_t reach = (t.shape()[size_t(i)] - 1) * t.strides()[size_t(i)];
    (reach < 0 ? lo : hi) += reach;
  }
  const int64_t elem = int64_t(dtype_size(t.dtype()));
  return {base + lo * elem, base + (hi + 1) * elem};
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || a.device() != b.device()) return false;
  const auto [a0, a1] = byte_span(a);
  const auto [b0, b1] = byte_span(b);
  return a0 < b1 && b0 < a1;
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return Tensor(make_impl(shape, dtype, device));
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype) {
  auto impl = make_layout(shape, dtype, Device::cpu());
  MERAK_CHECK(data != nullptr || merak::numel(shape) == 0, "Tensor::borrow of a null pointer for ",
              shape_str(shape));
  int64_t bytes = 0;
  MERAK_CHECK(!__builtin_mul_overflow(merak::numel(shape), int64_t(dtype_size(dtype)), &bytes),
              "Tensor::borrow of ", shape_str(shape), " in ", dtype_name(dtype),
              ": more bytes than int64 counts");
  impl->storage = std::make_shared<Storage>(data, size_t(bytes), Device::cpu());
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu()) std::memset(t.raw_data(), 0, size_t(t.nbytes()));
  else if (!device.is_meta()) t.fill_(0);
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element to be out of place: [3, 0] narrowed from [3, 4]
  const auto& s = impl().shape;
  int64_t expect = 1;
  for (int64_t i = int64_t(s.size()) - 1; i >= 0; --i) {
    if (s[i] == 1) continue;
    if (impl().strides[i] != expect) return false;
    expect *= s[i];
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype())) + shape_str(shape()) + " " + device().str();
}

void* Tensor::raw_data() const {
  MERAK_CHECK(!is_meta(), "data access on a Meta tensor ", str());
  MERAK_CHECK(device().is_cpu(), "host data access on a ", device().str(), " tensor");
  return static_cast<char*>(impl().storage->data) + impl().offset * int64_t(dtype_size(dtype()));
}

void* Tensor::device_data() const {
  MERAK_CHECK(!is_meta(), "data access on a Meta tensor ", str());
  return static_cast<char*>(impl().storage->data) + impl().offset * int64_t(dtype_size(dtype()));
}

double Tensor::item() const {
  MERAK_CHECK(numel() == 1, "item() on ", str(), " with ", numel(), " elements");
  if (!device().is_cpu() && !is_meta()) return to(Device::cpu()).item();
  const void* p = raw_data();
  switch (dtype()) {
    case DType::F32: return *static_cast<const float*>(p);
    case DType::F64: return *static_cast<const double*>(p);
    case DType::BF16: return bf16_to_f32(*static_cast<const uint16_t*>(p));
    case DType::F16: return f16_to_f32(*static_cast<const uint16_t*>(p));
    case DType::I32: return *static_cast<const int32_t*>(p);
    case DType::I64: return double(*static_cast<const int64_t*>(p));
    case DType::Bool: return *static_cast<const bool*>(p) ? 1.0 : 0.0;
  }
  return 0;
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  MERAK_CHECK(shape.size() == strides.size(), "as_strided: rank of shape and strides differ");
  auto v = std::make_shared<TensorImpl>();
  v->storage = impl().storage;
  v->offset = offset;
  v->shape = shape;
  v->strides = strides;
  v->dtype = dtype();
  v->device = device();
  return Tensor(v);
}

Tensor Tensor::view(const Shape& target) const {
  const Shape shape = infer_reshape(target, numel());
  if (is_contiguous()) return as_strided(shape, contiguous_strides(shape), impl().offset);
  // Non-contiguous: walk the old dims from the right in chunks that are contiguous among
  // themselves; each chunk must be covered exactly by a run of new dims, which then get strides
  // relative to the chunk's innermost stride.
  const Shape& os = impl().shape;
  const Shape& ost = impl().strides;
  Shape nst(shape.size(), 1);
  int64_t nd = int64_t(shape.size()) - 1;
  int64_t base = ost.back(), old_count = 1, new_count = 1;
  for (int64_t od = int64_t(os.size()) - 1; od >= 0; --od) {
    old_count *= os[od];
    const bool chunk_ends = od == 0 || (os[od - 1] != 1 && ost[od - 1] != old_count * base);
    if (!chunk_ends) continue;
    while (nd >= 0 && (new_count < old_count || shape[nd] == 1)) {
      nst[nd] = new_count * base;
      new_count *= shape[nd];
      --nd;
    }
    MERAK_CHECK(new_count == old_count, "view ", shape_str(shape), " of ", str(),
                " does not fit its strides; reshape copies instead");
    if (od > 0) {
      base = ost[od - 1];
      old_count = new_count = 1;
    }
  }
  MERAK_CHECK(nd < 0, "view ", shape_str(shape), " of ", str(), " failed");
  return as_strided(shape, nst, impl().offset);
}

Tensor Tensor::permute(const std::vector<int64_t>& order) const {
  MERAK_CHECK(int64_t(order.size()) == dim(), "permute of ", str(), " needs ", dim(), " dims");
  Shape shape(order.size()), strides(order.size());
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t d = normalize_dim(order[i], dim());
    MERAK_CHECK(!seen[d], "permute: dim ", d, " repeated");
    seen[d] = true;
    shape[i] = impl().shape[d];
    strides[i] = impl().strides[d];
  }
  return as_strided(shape, strides, impl().offset);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  std::vector<int64_t> order(dim());
  for (int64_t i = 0; i < dim(); ++i) order[i] = i;
  std::swap(order[normalize_dim(d0, dim())], order[normalize_dim(d1, dim())]);
  return permute(order);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = normalize_dim(d, dim());
  const int64_t n = impl().shape[d];
  MERAK_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow(dim ", d, ", start ",
              start, ", length ", length, ") out of range for ", str());
  Shape shape = impl().shape;
  shape[d] = length;
  return as_strided(shape, impl().strides, impl().offset + start * impl().strides[d]);
}

Tensor Tensor::expand(const Shape& target) const {
  MERAK_CHECK(int64_t(target.size()) >= dim(), "expand ", str(), " to ", shape_str(target));
  const int64_t lead = int64_t(target.size()) - dim();
  Shape strides(target.size(), 0);
  for (int64_t i = 0; i < dim(); ++i) {
    const int64_t s = impl().shape[i], t = target[lead + i];
    MERAK_CHECK(s == t || s == 1, "expand ", str(), " to ", shape_str(target));
    strides[lead + i] = s == t ? impl().strides[i] : 0;
  }
  return as_strided(target, strides, impl().offset);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = normalize_dim(d, dim() + 1);
  Shape shape = impl().shape, strides = impl().strides;
  const int64_t st = d < dim() ? strides[d] * shape[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, st);
  return as_strided(shape, strides, impl().offset);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  if (!is_meta()) strided_copy(out, *this);
  return out;
}

void Tensor::copy_(const Tensor& src) const {
  MERAK_CHECK(shape() == src.shape() && dtype() == src.dtype(), "copy_ from ", src.str(),
              " into ", str());
  if (is_meta() || src.is_meta()) return;
  // A source that shares bytes with the destination (m.copy_(m.transpose(0, 1)), a shifted view)
  // would be overwritten while it is read: copied out first.
  strided_copy(*this, overlaps(*this, src) ? src.clone() : src);
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  if (target.is_meta()) return empty(shape(), dtype(), target);
  MERAK_CHECK(!is_meta(), "cannot move a Meta tensor (it has no data) to ", target.str());
  // Made contiguous on its own device first, then moved as bytes.
  const Tensor src = contiguous();
  Tensor out = empty(shape(), dtype(), target);
  if (numel() == 0) return out;
  const DeviceType backend = target.is_cpu() ? device().type : target.type;
  device_backend(backend).copy_bytes(out.device_data(), target, src.device_data(), device(),
                                     size_t(nbytes()));
  return out;
}

void Tensor::fill_(double value) const {
  if (is_meta()) return;
  MERAK_CHECK(is_contiguous(), "fill_ on a non-contiguous tensor");
  if (!device().is_cpu()) {
    device_backend(device().type).fill(*this, value);
    return;
  }
  const int64_t n = numel();
  void* p = raw_data();
  switch (dtype()) {
    case DType::F32: std::fill_n(static_cast<float*>(p), n, float(value)); break;
    case DType::F64: std::fill_n(static_cast<double*>(p), n, value); break;
    case DType::BF16: std::fill_n(static_cast<uint16_t*>(p), n, f32_to_bf16(float(value))); break;
    case DType::F16: std::fill_n(static_cast<uint16_t*>(p), n, f32_to_f16(float(value))); break;
    case DType::I32: std::fill_n(static_cast<int32_t*>(p), n, int32_t(value)); break;
    case DType::I64: std::fill_n(static_cast<int64_t*>(p), n, int64_t(value)); break;
    case DType::Bool: std::fill_n(static_cast<bool*>(p), n, value != 0); break;
  }
}

Tensor Tensor::detach() const {
  return as_strided(shape(), strides(), impl().offset);
}

std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> out(size_t(t.numel()));
  const Shape& shape = t.shape();
  const Shape& st = t.strides();
  const int64_t rank = t.dim();
  std::vector<int64_t> idx(rank, 0);
  int64_t off = t.impl().offset;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = off;
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) { off += st[d]; break; }
      off -= st[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace merak
