#include "merak/runtime/engine_split.h"

#include "merak/ops/functional.h"

namespace merak::runtime {

std::vector<std::map<std::string, Tensor>> split_halves(const std::map<std::string, Tensor>& inputs,
                                                        int rank) {
  MERAK_CHECK(!inputs.empty(), "rank ", rank, ": sub-pipelined tensor parallelism splits the ",
              "stage's inputs, and it has none");
  const int64_t batch = inputs.begin()->second.dim() > 0 ? inputs.begin()->second.size(0) : 0;
  std::vector<std::map<std::string, Tensor>> halves(2);
  for (const auto& [name, t] : inputs) {
    MERAK_CHECK(t.dim() > 0 && t.size(0) == batch && batch >= 2 && batch % 2 == 0, "rank ", rank,
                ": sub-pipelined tensor parallelism cuts every stage input in two along the ",
                "batch (dim 0), but '", name, "' is ", t.str(), " and '", inputs.begin()->first,
                "' has ", batch, " rows");
    const std::vector<Tensor> parts = ops::split(t, {batch / 2, batch / 2}, 0);
    halves[0][name] = parts[0];
    halves[1][name] = parts[1];
  }
  return halves;
}

std::vector<Tensor> join_halves(const std::vector<std::vector<Tensor>>& halves, int loss_output) {
  MERAK_CHECK(halves.size() == 2 && halves[0].size() == halves[1].size(),
              "join_halves: expected the outputs of two halves");
  std::vector<Tensor> out;
  for (size_t i = 0; i < halves[0].size(); ++i) {
    const Tensor &a = halves[0][i], &b = halves[1][i];
    if (int(i) == loss_output)
      out.push_back(ops::add(a, b));
    else
      out.push_back(ops::concat({a, b}, 0));
  }
  return out;
}

}  // namespace merak::runtime
