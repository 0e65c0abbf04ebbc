// The MPI job around the communicators: start-up and shutdown, turning MPI error codes into
// messages, and ending the job with a message when it cannot go on.
#pragma once

#include <mpi.h>

#include <string>

namespace merak::comm {

// Initialises MPI unless it already is (MPI_THREAD_SERIALIZED), makes MPI_COMM_WORLD return
// errors instead of aborting without text, and finalises on destruction if it initialised.
// Destroy every Grid and communicator before it.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool owner_ = false;
};

// MPI_Error_string of an MPI error code: "MPI_ERR_TRUNCATE: message truncated".
std::string mpi_error_string(int code);

// Throws merak::Error "<what>: <MPI error text>" unless code is MPI_SUCCESS.
void check_mpi(int code, const std::string& what);

// The members of `comm` (`what` names it in errors) as one node's communicator, in the same
// order, to free with MPI_Comm_free; MPI_COMM_NULL, with the reason in *why_not, when they are
// on more than one node. Collective; every member gets the same answer.
MPI_Comm one_node_comm(MPI_Comm comm, const std::string& what, std::string* why_not);

// Frees a shared-memory window and the node communicator it was made on (either may be null),
// unless MPI has already been finalised (then there is nothing left to free).
void free_node_window(MPI_Win* window, MPI_Comm* node);

bool mpi_running();  // initialised and not yet finalised
int world_rank();  // rank in MPI_COMM_WORLD; 0 before MPI_Init
// The rank among the processes on this node (for choosing a GPU).
int local_rank();
// This process's place among the processes of its node: (0, 1) without MPI running.
struct NodePlace {
  int local_rank = 0;
  int local_size = 1;
};
NodePlace node_place();  // collective over MPI_COMM_WORLD when MPI runs

// Prints "merak: [rank R] <msg>" as one line on stderr, then MPI_Abort(MPI_COMM_WORLD, 3), so
// mpirun ends every rank with a non-zero status. Without MPI running it exits the process.
[[noreturn]] void abort_job(const std::string& msg);

}  // namespace merak::comm
