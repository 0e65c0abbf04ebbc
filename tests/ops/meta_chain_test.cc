// Meta first: a GPT-20B-sized forward runs through the registry on Meta tensors, producing
// shapes for tens of billions of elements while the allocator's live bytes do not move.
#include <catch2/catch.hpp>

#include "merak/autograd/grad_mode.h"
#include "merak/ops/functional.h"

using namespace merak;
namespace F = merak::ops;

TEST_CASE("a 20-billion-element op chain on Meta allocates nothing", "[ops][meta]") {
  const int64_t batch = 8, seq = 2048, hidden = 6144, heads = 64, layers = 44, vocab = 50304;
  const Device meta = Device::meta();
  const int64_t live_before = cpu_memory_stats().live_bytes;
  int64_t elements = 0;
  auto count = [&](const Tensor& t) {
    CHECK(t.is_meta());
    elements += t.numel();
    return t;
  };
  auto w = [&](const Shape& s) { return Tensor::empty(s, DType::F32, meta).set_requires_grad(true); };

  Tensor ids = Tensor::empty({batch, seq}, DType::I64, meta);
  Tensor x = count(F::embedding(w({vocab, hidden}), ids));
  for (int64_t l = 0; l < layers; ++l) {
    Tensor h = count(F::layer_norm(x, w({hidden}), w({hidden})));
    Tensor qkv = count(F::linear(h, w({3 * hidden, hidden}), w({3 * hidden})));
    auto parts = F::split(F::reshape(qkv, {batch, seq, 3, heads, hidden / heads}), {1, 1, 1}, 2);
    auto head = [&](const Tensor& t) {
      return F::permute(F::reshape(t, {batch, seq, heads, hidden / heads}), {0, 2, 1, 3});
    };
    Tensor att = count(F::sdpa(head(parts[0]), head(parts[1]), head(parts[2]), Tensor(), true));
    att = F::reshape(F::permute(att, {0, 2, 1, 3}), {batch, seq, hidden});
    x = count(F::add(x, F::linear(att, w({hidden, hidden}), w({hidden}))));
    Tensor m = count(F::layer_norm(x, w({hidden}), w({hidden})));
    m = count(F::gelu(count(F::linear(m, w({4 * hidden, hidden}), w({4 * hidden})))));
    x = count(F::add(x, count(F::linear(m, w({hidden, 4 * hidden}), w({hidden})))));
  }
  Tensor logits = count(F::linear(count(F::layer_norm(x, w({hidden}), w({hidden}))),
                                  w({vocab, hidden})));
  Tensor loss = count(F::cross_entropy(logits, Tensor::empty({batch, seq}, DType::I64, meta)));
  CHECK(loss.shape().empty());
  CHECK(elements > 20'000'000'000LL);
  CHECK(cpu_memory_stats().live_bytes == live_before);
}
