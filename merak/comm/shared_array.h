// One array of floats that every member of a communicator on one node reads and writes in place:
// an MPI shared-memory window held by member 0. Data-parallel replicas on a CPU host keep their
// parameters in one, so an update one member writes is everyone's without a copy. Nothing here
// orders the members' accesses except barrier(), which also makes each member's writes visible
// to all.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "merak/comm/mpi_communicator.h"

namespace merak::comm {

class SharedArray {
 public:
  // Collective over `group`. Null, with the reason in *why_not, when `group` is not an MPI
  // group or its members are on more than one node. Member 0 zeroes the array after it is
  // made: the members call barrier() before anyone writes to it.
  static std::unique_ptr<SharedArray> create(Communicator& group, int64_t floats,
                                             std::string* why_not);
  ~SharedArray();
  SharedArray(const SharedArray&) = delete;
  SharedArray& operator=(const SharedArray&) = delete;

  float* data() const { return data_; }
  int64_t floats() const { return floats_; }
  // This member's share of the array's memory (member 0 holds it; the members use it alike).
  int64_t bytes() const { return floats_ * int64_t(sizeof(float)) / group_.size(); }
  // Every member has reached this point (the group's barrier), and what each wrote before it is
  // visible to all.
  void barrier();

 private:
  SharedArray(Communicator& group, int64_t floats) : group_(group), floats_(floats) {}

  Communicator& group_;  // its barrier times out like the group's other collectives
  int64_t floats_ = 0;
  float* data_ = nullptr;
  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Win window_ = MPI_WIN_NULL;
};

}  // namespace merak::comm
