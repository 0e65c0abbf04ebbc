#include "merak/partition/blocks.h"

#include <cctype>
#include <map>
#include <set>

namespace merak::partition {
namespace {

bool is_number(const std::string& s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// "blocks.7.mlp.fc" -> {"blocks", 7}; false when the path has no numbered component.
bool block_of(const std::string& path, std::string* prefix, int64_t* index) {
  std::string head;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t dot = path.find('.', pos);
    if (dot == std::string::npos) dot = path.size();
    const std::string part = path.substr(pos, dot - pos);
    if (is_number(part) && !head.empty()) {
      *prefix = head;
      *index = std::stoll(part);
      return true;
    }
    head += (head.empty() ? "" : ".") + part;
    pos = dot + 1;
  }
  return false;
}

}  // namespace

Blocks find_blocks(const graph::Graph& g) {
  // The module list with the most numbered children is the block stack.
  std::map<std::string, std::set<int64_t>> lists;
  std::vector<std::string> order;
  for (const graph::Node& n : g.nodes()) {
    std::string prefix;
    int64_t index = 0;
    if (!block_of(n.module_path(), &prefix, &index)) continue;
    if (!lists.count(prefix)) order.push_back(prefix);
    lists[prefix].insert(index);
  }
  std::string best;
  for (const std::string& p : order)
    if (best.empty() || lists[p].size() > lists[best].size()) best = p;
  Blocks b;
  if (best.empty() || lists[best].size() < 2) return b;

  int64_t current = -1, last_node = -1;
  std::set<int64_t> done;
  for (int k = 0; k < g.nodes_size(); ++k) {
    std::string prefix;
    int64_t index = 0;
    if (!block_of(g.nodes(k).module_path(), &prefix, &index) || prefix != best) continue;
    if (index != current) {
      if (done.count(index)) return Blocks{};  // a block resumes after another: not a stack
      done.insert(index);
      current = index;
      b.starts.push_back(k);
    }
    last_node = k;
  }
  b.prefix = best;
  b.end = last_node + 1;
  return b;
}

}  // namespace merak::partition
