#include "merak/comm/buffer.h"

namespace merak::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

bool comm_dtype(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::I32 ||
         t == DType::I64;
}

Buffer::Buffer(void* data_, int64_t numel_, DType dtype_, Device device_)
    : data(data_), numel(numel_), dtype(dtype_), device(device_) {
  MERAK_CHECK(numel >= 0, "comm buffer: negative element count ", numel);
  MERAK_CHECK(data != nullptr || numel == 0, "comm buffer: null data for ", numel, " elements");
}

Buffer::Buffer(const Tensor& t) : numel(t.numel()), dtype(t.dtype()), device(t.device()), owner(t) {
  MERAK_CHECK(!t.is_meta(), "comm: tensor ", t.str(), " is Meta and has no memory to send");
  MERAK_CHECK(t.is_contiguous(), "comm: tensor ", t.str(),
              " is not contiguous; call .contiguous() and communicate that");
  const TensorImpl& impl = t.impl();
  data = impl.storage ? static_cast<char*>(impl.storage->data) +
                            impl.offset * int64_t(dtype_size(dtype))
                      : nullptr;
  MERAK_CHECK(data != nullptr || numel == 0, "comm: tensor ", t.str(), " has no storage");
}

Buffer Buffer::slice(int64_t offset, int64_t count) const {
  MERAK_CHECK(offset >= 0 && count >= 0 && offset + count <= numel, "comm buffer: slice [",
              offset, ", ", offset + count, ") of ", numel, " elements");
  Buffer b = *this;
  b.data = static_cast<char*>(data) + offset * int64_t(dtype_size(dtype));
  b.numel = count;
  return b;
}

}  // namespace merak::comm
