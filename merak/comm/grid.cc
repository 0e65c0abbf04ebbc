#include "merak/comm/grid.h"

#include "merak/comm/mpi_env.h"
#include "merak/comm/self_communicator.h"

namespace merak::comm {

namespace {

// Splits `world` into the groups that share `color`, ordered by `key`; MPI_UNDEFINED leaves
// this rank out (null communicator).
std::unique_ptr<Communicator> split(MPI_Comm world, int color, int key, const std::string& name,
                                    const CommFactory& factory) {
  MPI_Comm group;
  check_mpi(MPI_Comm_split(world, color, key, &group), "grid: MPI_Comm_split for '" + name + "'");
  if (group == MPI_COMM_NULL) return nullptr;
  return factory(group, name);
}

}  // namespace

Grid::Grid(const GridShape& shape, CommFactory factory, MPI_Comm world, GridOptions options)
    : shape_(shape) {
  int world_size = 0;
  check_mpi(MPI_Comm_size(world, &world_size), "grid: MPI_Comm_size");
  check_grid(shape_, world_size);
  check_mpi(MPI_Comm_rank(world, &rank_), "grid: MPI_Comm_rank");
  coord_ = grid_coord(shape_, rank_);
  const GridCoord c = coord_;
  const GridShape s = shape_;

  MPI_Comm dup;
  check_mpi(MPI_Comm_dup(world, &dup), "grid: MPI_Comm_dup");
  world_ = factory(dup, "world");
  if (world_->memory() != DeviceType::CPU) {
    MPI_Comm control;
    check_mpi(MPI_Comm_dup(world, &control), "grid: MPI_Comm_dup");
    host_ = std::make_unique<MpiCommunicator>(control, "host", world_->options());
  }
  // Color = the position along the other two axes; key = the position along this one.
  tp_ = split(world, c.pp * s.dp + c.dp, c.tp, "tp", factory);
  if (s.tp > 1) {
    // Decided by every member alike (the same options; NodeCommunicator::wrap is collective).
    std::string why_not = "turned off";
    if (options.tp_shared_memory) {
      if (auto* mpi = dynamic_cast<MpiCommunicator*>(tp_.get())) {
        tp_.release();
        tp_ = NodeCommunicator::wrap(std::unique_ptr<MpiCommunicator>(mpi), &why_not);
      } else {
        why_not = std::string("the ") + tp_->backend() + " backend";
      }
    }
    const std::string backend = tp_->backend();
    tp_transport_ = dynamic_cast<NodeCommunicator*>(tp_.get()) ? "shared memory"
                    : backend == "mpi" ? "MPI all-reduce (not shared memory: " + why_not + ")"
                                       : backend_name(*tp_) + " all-reduce";
  }
  dp_ = split(world, c.pp * s.tp + c.tp, c.dp, "dp", factory);
  pp_ = split(world, c.dp * s.tp + c.tp, c.pp, "pp", factory);
  const bool holds_tied = c.pp == 0 || c.pp == s.pp - 1;
  tied_ = split(world, holds_tied ? c.dp * s.tp + c.tp : MPI_UNDEFINED, c.pp, "tied", factory);
}

std::unique_ptr<Grid> Grid::single_process() {
  std::unique_ptr<Grid> g(new Grid());
  g->shape_ = {1, 1, 1};
  g->coord_ = {0, 0, 0};
  g->rank_ = 0;
  g->world_ = std::make_unique<SelfCommunicator>("world");
  g->tp_ = std::make_unique<SelfCommunicator>("tp");
  g->dp_ = std::make_unique<SelfCommunicator>("dp");
  g->pp_ = std::make_unique<SelfCommunicator>("pp");
  g->tied_ = std::make_unique<SelfCommunicator>("tied");
  return g;
}

Communicator& Grid::axis(Axis a) {
  switch (a) {
    case Axis::DP: return dp();
    case Axis::PP: return pp();
    case Axis::TP: return tp();
  }
  MERAK_FAIL("grid: unknown axis");
}

}  // namespace merak::comm
