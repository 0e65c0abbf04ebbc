// How a tensor is split over a tensor-parallel group, and how that split moves through the
// shape-changing ops between a column-parallel and a row-parallel linear.
//
// A split of dim `axis` views it as [outer, parts, inner]: the `parts` units (heads, features,
// vocabulary rows) are divided into tp contiguous groups, one per rank, for every `outer` index.
// The fused QKV output [B, T, 3H] is split as outer 3 (Q, K, V), parts = heads, inner = head
// size. The same split can be written with coarser units (parts / k units of inner * k) when tp
// divides parts / k: the coarsest form a region needs is what tp must divide.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "merak/core/shape.h"
#include "merak/partition/shards.h"

namespace merak::partition {

struct Split {
  int64_t axis = 0;
  int64_t outer = 1, parts = 1, inner = 1;

  bool operator==(const Split& o) const {
    return axis == o.axis && outer == o.outer && parts == o.parts && inner == o.inner;
  }
  // The same division of the same dim, in coarser units (true also when equal).
  bool coarsens(const Split& finer) const {
    return axis == finer.axis && outer == finer.outer && parts * inner == finer.parts * finer.inner &&
           finer.parts % parts == 0;
  }
  // Size of the dim on one rank (tp divides parts).
  int64_t local(int64_t tp) const { return outer * (parts / tp) * inner; }
};

// The split of `from` seen on `to`, a reshape of it (same elements, row-major): the units must
// fall on one dim of `to`, coarsened if they must. nullopt when they cannot.
std::optional<Split> reshape_split(const Shape& from, const Split& s, const Shape& to);

// Rank r's part of a dim split by s: one box per outer index, [offset, offset + length).
std::vector<std::pair<int64_t, int64_t>> split_ranges(const Split& s, int64_t tp, int64_t rank);

// Vocabulary rows of rank r when V rows are spread over tp ranks as evenly as they go (the
// first V % tp ranks take one more): [start, start + count).
std::pair<int64_t, int64_t> vocab_range(int64_t rows, int64_t tp, int64_t rank);

}  // namespace merak::partition
