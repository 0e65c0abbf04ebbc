#include "merak/comm/shared_array.h"

#include <atomic>
#include <cstring>

#include "merak/comm/mpi_env.h"
#include "merak/core/error.h"

namespace merak::comm {

std::unique_ptr<SharedArray> SharedArray::create(Communicator& group, int64_t floats,
                                                 std::string* why_not) {
  MERAK_CHECK(floats >= 0, "shared array over ", group.describe(), ": ", floats, " floats");
  const MpiCommunicator* mpi = as_mpi(group, why_not);
  if (!mpi) return nullptr;
  MPI_Comm node = one_node_comm(mpi->mpi_comm(), group.describe(), why_not);
  if (node == MPI_COMM_NULL) return nullptr;
  const MPI_Aint bytes = group.rank() == 0 ? MPI_Aint(floats) * MPI_Aint(sizeof(float)) : 0;
  if (!node_window_fits(node, bytes, why_not)) {
    MPI_Comm_free(&node);
    return nullptr;
  }
  std::unique_ptr<SharedArray> array(new SharedArray(group, floats));
  array->node_ = node;
  void* base = nullptr;
  check_mpi(MPI_Win_allocate_shared(bytes, sizeof(float), MPI_INFO_NULL, node, &base,
                                    &array->window_),
            group.describe() + ": MPI_Win_allocate_shared of " + std::to_string(bytes) +
                " bytes");
  MPI_Aint size = 0;
  int unit = 0;
  void* held = nullptr;
  check_mpi(MPI_Win_shared_query(array->window_, 0, &size, &unit, &held),
            group.describe() + ": MPI_Win_shared_query");
  array->data_ = static_cast<float*>(held);
  if (bytes > 0) std::memset(base, 0, size_t(bytes));  // taken now (node_window_fits)
  return array;
}

SharedArray::~SharedArray() { free_node_window(&window_, &node_); }

void SharedArray::barrier() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  group_.barrier();
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace merak::comm
