// The process grid of a 3D-parallel job: this rank's (dp, pp, tp) coordinates and a
// communicator for each group it belongs to, on the backend the factory makes (MPI or NCCL).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "merak/comm/communicator.h"
#include "merak/comm/grid_layout.h"
#include "merak/comm/mpi_communicator.h"
#include "merak/comm/node_communicator.h"

namespace merak::comm {

// Transports chosen once, when the grid is built.
struct GridOptions {
  // The tp group as a NodeCommunicator where its members share a node: its f32 all-reduces
  // through shared memory (with the MPI factory only).
  bool tp_shared_memory = false;
};

class Grid {
 public:
  // Collective over `world`: every rank calls it with the same shape. The shape is checked
  // against the world size first, so a wrong layout throws (naming world size, dp, pp, tp)
  // before any rank waits on another. Groups are made in a fixed order: world, tp, dp, pp, tied.
  explicit Grid(const GridShape& shape, CommFactory factory = mpi_backend(),
                MPI_Comm world = MPI_COMM_WORLD, GridOptions options = {});
  // The (1, 1, 1) grid of a process running alone: every group is this process, and MPI is
  // neither needed nor started.
  static std::unique_ptr<Grid> single_process();

  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  int rank() const { return rank_; }
  bool first_stage() const { return coord_.pp == 0; }
  bool last_stage() const { return coord_.pp == shape_.pp - 1; }

  Communicator& world() { return *world_; }
  // The job's control channel, over host memory: agreement, the plan, losses and norms, timings,
  // traces. world() itself when that carries host memory, else MPI over the same ranks.
  Communicator& host() { return host_ ? *host_ : *world_; }
  Communicator& tp() { return *tp_; }  // same pp and dp
  Communicator& dp() { return *dp_; }  // same pp and tp
  Communicator& pp() { return *pp_; }  // same dp and tp
  Communicator& axis(Axis a);
  // First and last stage with the same dp and tp (just this rank when pp == 1); null on a
  // middle stage.
  Communicator* tied() { return tied_.get(); }
  // How the tp group's all-reduces travel, for reports: "shared memory" or "MPI all-reduce (not
  // shared memory: why)"; "" for a group of one.
  const std::string& tp_transport() const { return tp_transport_; }

 private:
  GridShape shape_;
  GridCoord coord_;
  int rank_ = 0;
  Grid() = default;

  std::unique_ptr<Communicator> world_, tp_, dp_, pp_, tied_;
  std::unique_ptr<Communicator> host_;  // null: world_ is of host memory
  std::string tp_transport_;
};

}  // namespace merak::comm
