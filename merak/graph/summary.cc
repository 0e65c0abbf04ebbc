#include "merak/graph/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "merak/graph/convert.h"
#include "merak/ops/dispatch.h"

namespace merak::graph {
namespace {

ops::TensorMeta meta_of(const TensorType& type, const std::map<std::string, int64_t>& bindings,
                        const std::string& what) {
  return {bind_shape(type, bindings, what), from_proto(type.dtype()), true};
}

// 1.23e+12 -> "1.23 T"
std::string si(double v) {
  const char* units[] = {"", " K", " M", " G", " T", " P", " E"};
  int u = 0;
  while (std::abs(v) >= 1000 && u < 6) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g%s", v, units[u]);
  return buf;
}

}  // namespace

Summary summarize(const Model& model, const std::map<std::string, int64_t>& bindings) {
  const Graph& g = model.graph();
  Summary s;
  s.name = g.name();
  s.nodes = g.nodes_size();
  std::map<std::string, ops::TensorMeta> types;
  for (const Initializer& init : g.initializers()) {
    const ops::TensorMeta m = meta_of(init.type(), bindings, "initializer '" + init.name() + "'");
    (init.trainable() ? s.parameters : s.constants) += m.numel();
    types[init.name()] = m;
  }
  for (const ValueInfo& in : g.inputs()) {
    const ops::TensorMeta m = meta_of(in.type(), bindings, "graph input '" + in.name() + "'");
    types[in.name()] = m;
    const DType t = m.dtype;
    if (s.tokens == 0 && (t == DType::I32 || t == DType::I64)) s.tokens = m.numel();
  }
  auto tokens = model.metadata().find("tokens");
  if (tokens != model.metadata().end()) {
    char* end = nullptr;
    s.tokens = std::strtoll(tokens->second.c_str(), &end, 10);
    MERAK_CHECK(!tokens->second.empty() && *end == '\0' && s.tokens > 0, "metadata 'tokens' = '",
                tokens->second, "' is not a positive integer");
  }

  for (const Node& node : g.nodes()) {
    ++s.ops[node.op()];
    const std::string where = "node '" + node.name() + "' (op '" + node.op() + "')";
    const ops::OpDef* op = ops::Registry::get().find(node.op());
    MERAK_CHECK(op, where, ": not a registry op");
    std::vector<ops::TensorMeta> in;
    for (const std::string& name : node.inputs()) {
      if (name.empty()) {
        in.push_back({{}, DType::F32, false});
        continue;
      }
      auto it = types.find(name);
      MERAK_CHECK(it != types.end(), where, ": input '", name, "' is not defined before it");
      in.push_back(it->second);
    }
    try {
      const ops::Attrs attrs = ops::complete_attrs(*op, attrs_of(node));
      const ops::OpCost c = ops::cost(*op, in, attrs);
      s.fwd_flops += c.fwd_flops;
      s.bwd_flops += c.bwd_flops;
      s.bytes += c.bytes;
      const std::vector<ops::TensorMeta> out = ops::infer(*op, in, attrs);
      MERAK_CHECK(out.size() == size_t(node.outputs_size()), "the op gives ", out.size(),
                  " outputs, the node names ", node.outputs_size());
      for (size_t k = 0; k < out.size(); ++k) types[node.outputs(int(k))] = out[k];
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
  }
  return s;
}

std::string format_summary(const Summary& s) {
  std::ostringstream os;
  os << "graph '" << s.name << "': " << s.nodes << " nodes, " << s.parameters << " parameters ("
     << si(double(s.parameters)) << ")";
  if (s.constants) os << ", " << s.constants << " constant elements";
  os << "\n";
  if (s.tokens > 0) {
    os << "FLOPs per token (forward + backward): " << si(s.flops_per_token()) << " (forward "
       << si(s.fwd_flops / double(s.tokens)) << ", backward " << si(s.bwd_flops / double(s.tokens))
       << "; batch of " << s.tokens << " tokens)\n";
  } else {
    os << "FLOPs per step: forward " << si(s.fwd_flops) << ", backward " << si(s.bwd_flops)
       << " (tokens unknown)\n";
  }
  std::vector<std::pair<std::string, int64_t>> ops(s.ops.begin(), s.ops.end());
  std::stable_sort(ops.begin(), ops.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  os << "ops (" << ops.size() << " kinds):\n";
  for (const auto& [name, n] : ops) {
    char line[96];
    std::snprintf(line, sizeof line, "  %-20s %8lld\n", name.c_str(), (long long)n);
    os << line;
  }
  return os.str();
}

}  // namespace merak::graph
