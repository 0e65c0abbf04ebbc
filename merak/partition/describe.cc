#include "merak/partition/describe.h"

#include <algorithm>
#include <vector>

namespace merak::partition {
namespace {

// Block k spans [starts[k], starts[k + 1]) (the last one up to blocks.end).
int64_t block_end(const Blocks& b, size_t k) {
  return k + 1 < b.starts.size() ? b.starts[k + 1] : b.end;
}

}  // namespace

std::string describe_stage(const graph::Graph& g, const Blocks& blocks, int64_t first,
                           int64_t end) {
  struct Item {
    std::string label;
    int64_t block = -1;  // block index, or -1
    bool partial = false;
  };
  std::vector<Item> items;
  for (int64_t k = first; k < end; ++k) {
    Item it;
    if (blocks.found() && k >= blocks.starts.front() && k < blocks.end) {
      const size_t b = size_t(std::upper_bound(blocks.starts.begin(), blocks.starts.end(), k) -
                              blocks.starts.begin() - 1);
      it.block = int64_t(b);
      it.partial = blocks.starts[b] < first || block_end(blocks, b) > end;
    } else {
      const std::string& path = g.nodes(int(k)).module_path();
      it.label = path.empty() ? g.nodes(int(k)).op() : path.substr(0, path.find('.'));
    }
    if (!items.empty() && items.back().block == it.block && items.back().label == it.label)
      continue;
    items.push_back(it);
  }
  // Fold runs of whole consecutive blocks.
  std::vector<std::string> parts;
  for (size_t i = 0; i < items.size();) {
    const Item& it = items[i];
    if (it.block < 0) {
      parts.push_back(it.label);
      ++i;
      continue;
    }
    size_t j = i;
    while (j + 1 < items.size() && items[j + 1].block == items[j].block + 1 &&
           !items[j + 1].partial && !items[j].partial)
      ++j;
    std::string s = blocks.prefix + "." + std::to_string(it.block);
    if (it.partial) s += "(part)";
    if (j > i) {
      s += "-" + std::to_string(items[j].block);
      if (items[j].partial) s += "(part)";
    }
    parts.push_back(s);
    i = j + 1;
  }
  if (parts.size() > 8) {
    const size_t n = parts.size();
    parts = {parts[0], parts[1], parts[2], "...", parts[n - 2], parts[n - 1]};
  }
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace merak::partition
