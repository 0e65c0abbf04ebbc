// Grid coordinates and groups, on the running job: every communicator must hold exactly the
// hand-listed ranks, in coordinate order, and actually connect them.
#include <algorithm>

#include "merak/comm/grid.h"
#include "tests/comm/layouts.h"
#include "tests/comm/suite.h"

namespace merak::comm::test {

namespace {

// The groups of a layout for a world that is not 8 ranks (single-GPU and other NCCL runs),
// by enumerating every rank with the grid's definition rank = (pp*dp + dp_i)*tp + tp_i.
LayoutTable enumerate_layout(const GridShape& s) {
  LayoutTable t;
  t.shape = s;
  auto at = [&](int d, int p, int q) { return (p * s.dp + d) * s.tp + q; };
  for (int r = 0; r < s.size(); ++r)
    t.coords.push_back({(r / s.tp) % s.dp, r / (s.tp * s.dp), r % s.tp});
  for (int p = 0; p < s.pp; ++p)
    for (int d = 0; d < s.dp; ++d) {
      std::vector<int> g;
      for (int q = 0; q < s.tp; ++q) g.push_back(at(d, p, q));
      t.tp.push_back(g);
    }
  for (int p = 0; p < s.pp; ++p)
    for (int q = 0; q < s.tp; ++q) {
      std::vector<int> g;
      for (int d = 0; d < s.dp; ++d) g.push_back(at(d, p, q));
      t.dp.push_back(g);
    }
  for (int d = 0; d < s.dp; ++d)
    for (int q = 0; q < s.tp; ++q) {
      std::vector<int> g;
      for (int p = 0; p < s.pp; ++p) g.push_back(at(d, p, q));
      t.pp.push_back(g);
      t.tied.push_back(s.pp == 1 ? g : std::vector<int>{g.front(), g.back()});
    }
  return t;
}

std::vector<LayoutTable> layouts_for(int world) {
  if (world == 8) return hand_layouts();
  std::vector<LayoutTable> out;
  for (int dp = 1; dp <= world; ++dp)
    for (int pp = 1; dp * pp <= world; ++pp)
      if (world % (dp * pp) == 0) out.push_back(enumerate_layout({dp, pp, world / (dp * pp)}));
  return out;
}

std::string str(const std::vector<int>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "}";
}

// The communicator's members, by its bookkeeping and by gathering every member's world rank.
void check_group(Ctx& c, Communicator* comm, const std::vector<int>& want,
                 const std::string& what) {
  if (want.empty()) {
    c.checks.expect(comm == nullptr, what + ": a middle stage has no tied group");
    return;
  }
  if (!comm) {
    c.checks.expect(false, what + ": no communicator");
    return;
  }
  c.checks.expect(comm->world_ranks() == want,
                  what + ": members " + str(comm->world_ranks()) + ", want " + str(want));
  const int index = int(std::find(want.begin(), want.end(), c.rank) - want.begin());
  c.checks.expect(comm->rank() == index && comm->size() == int(want.size()),
                  detail::concat(what, ": rank ", comm->rank(), " of ", comm->size(), ", want ",
                                 index, " of ", want.size()));
  KitArray in(c.kit, DType::I32, 1), out(c.kit, DType::I32, comm->size());
  HostArray mine(DType::I32, 1);
  mine.set(0, c.rank);
  in.upload(mine);
  comm->all_gather(in.buffer(), out.buffer());
  c.checks.expect_array(out.download(), [&](int64_t i) { return want[i]; },
                        what + ": world ranks gathered over the group");
}

}  // namespace

void case_grid(Ctx& c) {
  for (const LayoutTable& t : layouts_for(c.world)) {
    Grid g(t.shape, c.kit.factory(c.options));
    const std::string at = "layout (" + t.shape.str() + ")";
    const GridCoord& k = g.coord();
    const GridCoord& w = t.coords[c.rank];
    c.checks.expect(k == w && g.rank() == c.rank,
                    detail::concat(at, ": coordinates (dp ", k.dp, ", pp ", k.pp, ", tp ", k.tp,
                                   "), want (dp ", w.dp, ", pp ", w.pp, ", tp ", w.tp, ")"));
    c.checks.expect(g.first_stage() == (w.pp == 0) && g.last_stage() == (w.pp == t.shape.pp - 1),
                    at + ": first/last stage");
    check_group(c, &g.tp(), group_of(t.tp, c.rank), at + " tp");
    check_group(c, &g.dp(), group_of(t.dp, c.rank), at + " dp");
    check_group(c, &g.pp(), group_of(t.pp, c.rank), at + " pp");
    check_group(c, g.tied(), group_of(t.tied, c.rank), at + " tied");
    std::vector<int> all(c.world);
    for (int r = 0; r < c.world; ++r) all[r] = r;
    check_group(c, &g.world(), all, at + " world");
    c.checks.expect(&g.axis(Axis::TP) == &g.tp() && &g.axis(Axis::DP) == &g.dp() &&
                        &g.axis(Axis::PP) == &g.pp(),
                    at + ": axis()");
  }
}

void case_world_size_error(Ctx& c) {
  const std::string world = "world size " + std::to_string(c.world);
  // Rank 0 alone asks for a wrong grid. Were anything collective done before the check, it
  // would wait for the other ranks, who never come: the suite would time out here.
  if (c.rank == 0 && c.world != 12) {
    c.checks.expect_error([&] { Grid g({2, 2, 3}, c.kit.factory(c.options)); },
                          {world, "dp 2", "pp 2", "tp 3", "(= 12)"},
                          "Grid(2,2,3) on rank 0 alone");
  }
  // Every rank, a layout one pipeline stage too deep.
  c.checks.expect_error([&] { Grid g({c.world, 2, 1}, c.kit.factory(c.options)); },
                        {world, "dp " + std::to_string(c.world), "pp 2", "tp 1"},
                        "Grid(world, 2, 1) on every rank");
  // The job is still in step: a grid that fits works.
  Grid g({1, 1, c.world}, c.kit.factory(c.options));
  g.world().barrier();
  c.checks.expect(g.tp().size() == c.world, "a valid grid after the errors");
}

}  // namespace merak::comm::test
