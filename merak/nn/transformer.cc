#include "merak/nn/transformer.h"

#include "merak/ops/dispatch.h"
#include "merak/ops/functional.h"

namespace merak::nn {

Mlp::Mlp(int64_t hidden, int64_t ffn_hidden, const std::string& approximate, double init_std,
         double proj_std)
    : fc(add<Linear>("fc", hidden, ffn_hidden, true, init_std)),
      proj(add<Linear>("proj", ffn_hidden, hidden, true, proj_std)),
      approximate_(approximate) {}

Tensor Mlp::forward(const Tensor& x) const {
  const ops::ScopeGuard scope(path());
  return proj.forward(fc.forward_gelu(x, approximate_));
}

PreLnBlock::PreLnBlock(const BlockOptions& o)
    : ln_1(add<LayerNorm>("ln_1", o.hidden, o.ln_eps)),
      attn(add<SelfAttention>("attn", o.hidden, o.heads, true, o.init_std, o.proj_std,
                                 o.dropout)),
      ln_2(add<LayerNorm>("ln_2", o.hidden, o.ln_eps)),
      mlp(add<Mlp>("mlp", o.hidden, o.ffn_hidden, "tanh", o.init_std, o.proj_std)),
      attn_drop(add<Dropout>("attn_drop", o.dropout)),
      mlp_drop(add<Dropout>("mlp_drop", o.dropout)) {}

Tensor PreLnBlock::forward(const Tensor& x) const {
  const ops::ScopeGuard scope(path());
  const Tensor h = ops::add(x, attn_drop.forward(attn.forward(ln_1.forward(x))));
  return ops::add(h, mlp_drop.forward(mlp.forward(ln_2.forward(h))));
}

PostLnLayer::PostLnLayer(const BlockOptions& o)
    : attn(add<SelfAttention>("attn", o.hidden, o.heads, false, o.init_std, o.proj_std,
                                 o.dropout)),
      ln_1(add<LayerNorm>("ln_1", o.hidden, o.ln_eps)),
      mlp(add<Mlp>("mlp", o.hidden, o.ffn_hidden, "none", o.init_std, o.proj_std)),
      ln_2(add<LayerNorm>("ln_2", o.hidden, o.ln_eps)),
      attn_drop(add<Dropout>("attn_drop", o.dropout)),
      mlp_drop(add<Dropout>("mlp_drop", o.dropout)) {}

Tensor PostLnLayer::forward(const Tensor& x, const Tensor& key_padding_mask) const {
  const ops::ScopeGuard scope(path());
  const Tensor h =
      ln_1.forward(ops::add(x, attn_drop.forward(attn.forward(x, key_padding_mask))));
  return ln_2.forward(ops::add(h, mlp_drop.forward(mlp.forward(h))));
}

}  // namespace merak::nn
