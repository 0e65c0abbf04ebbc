#include "merak/nn/attention.h"

#include "merak/core/philox.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/functional.h"

namespace merak::nn {

SelfAttention::SelfAttention(int64_t hidden, int64_t heads, bool causal, double init_std,
                             double proj_std, double dropout)
    : qkv(add<Linear>("qkv", hidden, 3 * hidden, true, init_std)),
      proj(add<Linear>("proj", hidden, hidden, true, proj_std)),
      hidden_(hidden),
      heads_(heads),
      causal_(causal),
      dropout_(dropout) {
  MERAK_CHECK(heads > 0 && hidden % heads == 0, "attention: hidden ", hidden,
              " is not divisible by heads ", heads);
  MERAK_CHECK(dropout >= 0 && dropout < 1, "attention: dropout probability ", dropout,
              " is outside [0, 1)");
}

void SelfAttention::on_materialize(uint64_t seed) {
  dropout_key_ = philox_key(seed, "attention dropout:" + path());
}

Tensor SelfAttention::forward(const Tensor& x, const Tensor& key_padding_mask) const {
  const ops::ScopeGuard scope(path());
  const int64_t b = x.size(0), t = x.size(1), d = hidden_ / heads_;
  // [B, T, 3C] -> three [B, H, T, D]
  const Tensor fused = ops::reshape(qkv.forward(x), {b, t, 3, heads_, d});
  const std::vector<Tensor> parts = ops::split(fused, {1, 1, 1}, 2);
  auto heads_first = [&](const Tensor& p) {
    return ops::permute(ops::reshape(p, {b, t, heads_, d}), {0, 2, 1, 3});
  };
  ops::AttentionDropout drop;
  if (training() && dropout_ > 0) drop = {dropout_, dropout_key_, rng_stream()};
  const Tensor out = ops::sdpa(heads_first(parts[0]), heads_first(parts[1]),
                               heads_first(parts[2]), key_padding_mask, causal_, 0, drop);
  // [B, H, T, D] -> [B, T, C]
  return proj.forward(ops::reshape(ops::permute(out, {0, 2, 1, 3}), {b, t, hidden_}));
}

}  // namespace merak::nn
