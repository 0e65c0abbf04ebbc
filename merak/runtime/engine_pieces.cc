#include "merak/runtime/engine_pieces.h"

#include <algorithm>

namespace merak::runtime {

int64_t append_pieces(const std::vector<optim::Param>& params, const std::vector<size_t>& order,
                      int64_t start, int64_t lo, int64_t hi, std::vector<ParamPiece>* out) {
  int64_t at = start;  // where the current parameter begins
  for (size_t k : order) {
    const int64_t end = at + params.at(k).value.numel();
    const int64_t from = std::max(at, lo), to = std::min(end, hi);
    if (from < to) out->push_back({k, from - at, to - from});
    at = end;
  }
  return at;
}

Tensor piece_of(const Tensor& whole, const ParamPiece& piece) {
  return whole.view({whole.numel()}).narrow(0, piece.begin, piece.length);
}

std::unique_ptr<optim::AdamW> piece_adamw(const std::vector<optim::Param>& params,
                                          const std::vector<ParamPiece>& pieces,
                                          optim::AdamWOptions options,
                                          std::vector<Tensor>* values) {
  std::vector<optim::Param> views;
  for (const ParamPiece& piece : pieces) {
    const optim::Param& p = params.at(piece.param);
    values->push_back(piece_of(p.value, piece));
    views.push_back({p.name, values->back(), p.decay});
  }
  return std::make_unique<optim::AdamW>(views, options);
}

std::vector<OptimizerSlice> optimizer_slices(const optim::AdamW& adamw,
                                             const std::vector<ParamPiece>& pieces) {
  MERAK_CHECK(adamw.exp_avg().size() == pieces.size(), "optimizer state: ",
              adamw.exp_avg().size(), " tensors for ", pieces.size(), " pieces");
  std::vector<OptimizerSlice> out;
  for (size_t i = 0; i < pieces.size(); ++i)
    out.push_back({pieces[i].param, pieces[i].begin, pieces[i].length,
                   adamw.exp_avg()[i].view({-1}), adamw.exp_avg_sq()[i].view({-1})});
  return out;
}

}  // namespace merak::runtime
