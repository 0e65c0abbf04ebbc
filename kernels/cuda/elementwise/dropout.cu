// dropout: one Philox4x32-10 block per element, word 0, keyed by the element's index in the
// unsplit tensor, as the CPU kernel draws it.
#include "kernels/cuda/elementwise/dropout.h"

#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/elementwise/loops.cuh"
#include "kernels/cuda/elementwise/philox.cuh"

namespace merak::cuda_kernels {
namespace {

template <typename S>
struct DropoutBody {
  const S* x;
  S* y;
  uint64_t key, stream;
  uint32_t threshold;
  float scale;
  ops::DropoutPiece piece;
  template <typename I>
  __device__ void operator()(I i) const {
    const uint32_t bits = philox_at(key, uint64_t(piece.global(int64_t(i))), stream).v[0];
    y[i] = Storage<S>::store((bits >> 8) >= threshold ? Storage<S>::load(x[i]) * scale : 0.0f);
  }
};

}  // namespace

void launch_dropout(int elem, const void* x, void* y, int64_t n, uint64_t key, uint64_t stream,
                    uint32_t threshold, float scale, const ops::DropoutPiece& piece,
                    cudaStream_t cuda_stream) {
  with_storage(elem, [&]<typename S>() {
    launch_flat(n,
                DropoutBody<S>{static_cast<const S*>(x), static_cast<S*>(y), key, stream,
                               threshold, scale, piece},
                cuda_stream);
  });
}

}  // namespace merak::cuda_kernels
