// The process grid of a 3D-parallel job: this rank's (dp, pp, tp) coordinates and a
// communicator for each group it belongs to, on the backend the factory makes (MPI or NCCL).
#pragma once

#include <mpi.h>

#include <memory>

#include "merak/comm/communicator.h"
#include "merak/comm/grid_layout.h"
#include "merak/comm/mpi_communicator.h"

namespace merak::comm {

class Grid {
 public:
  // Collective over `world`: every rank calls it with the same shape. The shape is checked
  // against the world size first, so a wrong layout throws (naming world size, dp, pp, tp)
  // before any rank waits on another. Groups are made in a fixed order: world, tp, dp, pp, tied.
  explicit Grid(const GridShape& shape, CommFactory factory = mpi_backend(),
                MPI_Comm world = MPI_COMM_WORLD);
  // The (1, 1, 1) grid of a process running alone: every group is this process, and MPI is
  // neither needed nor started.
  static std::unique_ptr<Grid> single_process();

  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  int rank() const { return rank_; }
  bool first_stage() const { return coord_.pp == 0; }
  bool last_stage() const { return coord_.pp == shape_.pp - 1; }

  Communicator& world() { return *world_; }
  Communicator& tp() { return *tp_; }  // same pp and dp
  Communicator& dp() { return *dp_; }  // same pp and tp
  Communicator& pp() { return *pp_; }  // same dp and tp
  Communicator& axis(Axis a);
  // First and last stage with the same dp and tp (just this rank when pp == 1); null on a
  // middle stage.
  Communicator* tied() { return tied_.get(); }

 private:
  GridShape shape_;
  GridCoord coord_;
  int rank_ = 0;
  Grid() = default;

  std::unique_ptr<Communicator> world_, tp_, dp_, pp_, tied_;
};

}  // namespace merak::comm
