#include "merak/comm/mpi_env.h"

#include <sys/statvfs.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "merak/core/error.h"

namespace merak::comm {
namespace {

// This process's place on its node, found when MPI starts (MpiSession, collective there) so that
// later questions need no collective: a local size of 0 means not found yet.
NodePlace g_place{0, 0};

NodePlace find_node_place() {
  NodePlace place;
  MPI_Comm node;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
            "node_place: MPI_Comm_split_type");
  MPI_Comm_rank(node, &place.local_rank);
  MPI_Comm_size(node, &place.local_size);
  MPI_Comm_free(&node);
  return place;
}

}  // namespace

bool mpi_running() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int init = 0;
  MPI_Initialized(&init);
  if (!init) {
    // Open MPI's non-blocking all-reduce (libnbc) picks a binomial tree by default, measured 2.4x
    // slower than its blocking all-reduce from 256 KiB up on 2 ranks; Rabenseifner's algorithm
    // (reduce-scatter then all-gather) matches the blocking one. Only a default: a user's own
    // OMPI_MCA_coll_libnbc_iallreduce_algorithm wins. Read by MPI_Init.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*overwrite=*/0);
    int provided = 0;
    check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    owner_ = true;
  }
  check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  g_place = find_node_place();
}

MpiSession::~MpiSession() {
  if (owner_ && mpi_running()) MPI_Finalize();
}

std::string mpi_error_string(int code) {
  // Open MPI's text starts with the class name: "MPI_ERR_TRUNCATE: message truncated".
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, len);
}

void check_mpi(int code, const std::string& what) {
  if (code != MPI_SUCCESS) throw Error(what + ": " + mpi_error_string(code));
}

MPI_Comm one_node_comm(MPI_Comm comm, const std::string& what, std::string* why_not) {
  MPI_Comm node;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
            what + ": MPI_Comm_split_type");
  int node_size = 0, size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_size(comm, &size);
  if (node_size != size) {
    MPI_Comm_free(&node);
    *why_not = "its members are on more than one node";
    return MPI_COMM_NULL;
  }
  return node;
}

bool node_window_fits(MPI_Comm node, int64_t bytes, std::string* why_not) {
  int64_t total = 0;
  check_mpi(MPI_Allreduce(&bytes, &total, 1, MPI_INT64_T, MPI_SUM, node),
            "shared-memory window: MPI_Allreduce");
  const char* dir = std::getenv("OMPI_MCA_osc_sm_backing_directory");
  if (!dir || !*dir) dir = "/dev/shm";
  int rank = 0;
  MPI_Comm_rank(node, &rank);
  int64_t room = -1;  // unknown (no such directory): left to MPI, as before
  struct statvfs fs;
  if (rank == 0 && statvfs(dir, &fs) == 0) room = int64_t(fs.f_bavail) * int64_t(fs.f_frsize);
  check_mpi(MPI_Bcast(&room, 1, MPI_INT64_T, 0, node), "shared-memory window: MPI_Bcast");
  // Groups of this size on the node (the tensor-parallel groups, a stage's replicas) make their
  // windows at the same point of the step or set-up: each must find room for all of them, or
  // each could see room that only one of them gets, and the others die at first touch.
  int members = 1;
  MPI_Comm_size(node, &members);
  // The node's rank count as found when MPI started (never a collective here: only this group
  // is in this call); unknown where MPI was started without MpiSession, then this group alone.
  const int node_ranks = g_place.local_size > 0 ? g_place.local_size : members;
  const int64_t groups = node_ranks > members ? (node_ranks + members - 1) / members : 1;
  // MPI's own bookkeeping and page rounding come on top of the parts.
  const int64_t each = total + (int64_t(1) << 20), need = each * groups;
  if (room < 0 || need <= room) return true;
  const auto mib = [](int64_t b) { return std::to_string((b + (1 << 20) - 1) >> 20); };
  *why_not = std::string(dir) + " has " + std::to_string(room >> 20) + " MiB free, the window " +
             "needs " + mib(each) + " MiB";
  if (groups > 1)
    *why_not += " for each of the node's " + std::to_string(groups) +
                " groups that make theirs at once (" + mib(need) + " MiB)";
  return false;
}

bool unwinding() { return std::uncaught_exceptions() > 0; }

void free_node_window(MPI_Win* window, MPI_Comm* node) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || unwinding()) return;
  if (*window != MPI_WIN_NULL) MPI_Win_free(window);
  if (*node != MPI_COMM_NULL) MPI_Comm_free(node);
}

int world_rank() {
  if (!mpi_running()) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int local_rank() { return node_place().local_rank; }

NodePlace node_place() {
  if (!mpi_running()) return NodePlace();
  if (g_place.local_size == 0) g_place = find_node_place();  // MPI started without MpiSession
  return g_place;
}

void abort_job(const std::string& msg, int code) {
  std::fprintf(stderr, "merak: [rank %d] %s\n", world_rank(), msg.c_str());
  std::fflush(stderr);
  if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace merak::comm
