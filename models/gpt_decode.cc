#include "models/gpt_decode.h"

#include "merak/autograd/grad_mode.h"
#include "merak/core/error.h"
#include "merak/ops/functional.h"

namespace merak::models {

namespace {

Tensor ids_tensor(const std::vector<int64_t>& ids, Device device) {
  Tensor t = Tensor::from_vector(ids, {1, int64_t(ids.size())});
  return device.is_cpu() ? t : t.to(device);
}

}  // namespace

std::vector<std::pair<std::string, Shape>> GptDecoder::parameter_shapes(
    const ModelOptions& options) {
  MERAK_CHECK(options.family == "gpt", "gpt decoder: model.family is '", options.family,
              "', not gpt");
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& [name, value] : make_model(options)->named_parameters())
    out.emplace_back(name, value.shape());  // Meta tensors: shapes, no memory
  return out;
}

GptDecoder::GptDecoder(const ModelOptions& options, const std::map<std::string, Tensor>& weights,
                       Device device)
    : options_(options), device_(device) {
  MERAK_CHECK(options.heads > 0 && options.hidden % options.heads == 0, "gpt decoder: hidden ",
              options.hidden, " is not divisible by heads ", options.heads);
  autograd::NoGradGuard no_grad;
  std::map<std::string, Tensor> on_device;
  for (const auto& [name, shape] : parameter_shapes(options)) {
    auto it = weights.find(name);
    MERAK_CHECK(it != weights.end(), "gpt decoder: no weights for '", name, "'");
    const Tensor& w = it->second;
    MERAK_CHECK(w.shape() == shape, "gpt decoder: '", name, "' is ", w.str(), ", the model's is ",
                Tensor::empty(shape, DType::F32, Device::meta()).str());
    Tensor f = w.dtype() == DType::F32 ? w.detach() : ops::cast(w.detach(), DType::F32);
    on_device[name] = f.device() == device ? f.contiguous() : f.contiguous().to(device);
  }
  wte_ = on_device.at("wte.weight");
  wpe_ = on_device.at("wpe.weight");
  ln_f_w_ = on_device.at("ln_f.weight");
  ln_f_b_ = on_device.at("ln_f.bias");
  for (int64_t i = 0; i < options.layers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    auto at = [&](const std::string& n) { return on_device.at(p + n); };
    layers_.push_back({at("ln_1.weight"), at("ln_1.bias"), at("attn.qkv.weight"),
                       at("attn.qkv.bias"), at("attn.proj.weight"), at("attn.proj.bias"),
                       at("ln_2.weight"), at("ln_2.bias"), at("mlp.fc.weight"), at("mlp.fc.bias"),
                       at("mlp.proj.weight"), at("mlp.proj.bias"), Tensor(), Tensor()});
  }
}

Tensor GptDecoder::logits_for(const std::vector<int64_t>& ids) {
  MERAK_CHECK(!ids.empty(), "gpt decoder: no tokens to start from");
  MERAK_CHECK(int64_t(ids.size()) <= options_.max_seq, "gpt decoder: ", ids.size(),
              " tokens exceed model.max_seq ", options_.max_seq);
  length_ = 0;
  for (Layer& l : layers_) l.k = l.v = Tensor();
  return forward(ids);
}

Tensor GptDecoder::next(int64_t id) {
  MERAK_CHECK(length_ > 0, "gpt decoder: next() before logits_for()");
  MERAK_CHECK(length_ < options_.max_seq, "gpt decoder: the context is full (model.max_seq ",
              options_.max_seq, ")");
  return ops::reshape(forward({id}), {options_.vocab});
}

Tensor GptDecoder::forward(const std::vector<int64_t>& ids) {
  autograd::NoGradGuard no_grad;
  const int64_t n = int64_t(ids.size()), c = options_.hidden, h = options_.heads, d = c / h;
  MERAK_CHECK(length_ == 0 || n == 1, "gpt decoder: more than one token after the prefill");
  for (int64_t id : ids)
    MERAK_CHECK(id >= 0 && id < options_.vocab, "gpt decoder: token ", id, " outside vocab ",
                options_.vocab);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = length_ + i;
  // [1, n, C]: token + position embeddings (dropout is the identity at inference).
  Tensor x = ops::add(ops::embedding(wte_, ids_tensor(ids, device_)),
                      ops::embedding(wpe_, ids_tensor(pos, device_)));
  const double eps = options_.ln_eps;
  for (Layer& l : layers_) {
    // Attention: q, k, v [1, H, n, D] as SelfAttention::forward splits them.
    const Tensor fused = ops::reshape(ops::linear(ops::layer_norm(x, l.ln_1_w, l.ln_1_b, eps),
                                                  l.qkv_w, l.qkv_b),
                                      {1, n, 3, h, d});
    const std::vector<Tensor> parts = ops::split(fused, {1, 1, 1}, 2);
    auto heads_first = [&](const Tensor& t) {
      return ops::contiguous(ops::permute(ops::reshape(t, {1, n, h, d}), {0, 2, 1, 3}));
    };
    const Tensor q = heads_first(parts[0]);
    l.k = l.k.defined() ? ops::concat({l.k, heads_first(parts[1])}, 2) : heads_first(parts[1]);
    l.v = l.v.defined() ? ops::concat({l.v, heads_first(parts[2])}, 2) : heads_first(parts[2]);
    // The prefill is causal among its own tokens; one new token attends to every cached one.
    const Tensor att = ops::sdpa(q, l.k, l.v, Tensor(), /*causal=*/n > 1);
    x = ops::add(x, ops::linear(ops::reshape(ops::permute(att, {0, 2, 1, 3}), {1, n, c}),
                                l.proj_w, l.proj_b));
    // MLP: fc -> GELU (tanh) -> proj, as nn::Mlp (the fused linear_gelu op).
    const Tensor hidden = ops::linear_gelu(ops::layer_norm(x, l.ln_2_w, l.ln_2_b, eps), l.fc_w,
                                           l.fc_b, "tanh");
    x = ops::add(x, ops::linear(hidden, l.fc2_w, l.fc2_b));
  }
  length_ += n;
  const Tensor logits = ops::linear(ops::layer_norm(x, ln_f_w_, ln_f_b_, eps), wte_);  // tied
  return ops::reshape(logits, {n, options_.vocab});
}

}  // namespace merak::models
