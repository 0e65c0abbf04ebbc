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

// Whether an exception is unwinding the stack. A failure on one rank unwinds through destructors
// that would make collective calls (freeing a window, waiting for a Work) while its peers wait
// elsewhere: those calls never return, and the error never reaches the catch that ends the job
// with its message (abort_job). Destructors skip such calls while unwinding and leak what they
// hold: the job is about to end.
bool unwinding();

// Whether the members' parts of a new shared-memory window, `bytes` for this member (those a
// grown window adds, for a regrowth), fit in the free space of the file system Open MPI backs
// windows with (OMPI_MCA_osc_sm_backing_directory, or /dev/shm): otherwise false, with the
// reason in *why_not. A window too big for it fails to be made (MPI_ERR_INTERN) or, made, kills
// the process at first touch (SIGBUS); a small /dev/shm is common (64 MiB in a Docker
// container). Collective over `node`: every member gets the same answer. Untouched pages take
// no space, so a window is filled once made, for the next check to count it. Groups like
// `node`'s (as many as fill the node) may make theirs at the same time, so the room must hold
// that many: otherwise each could see room that only one of them gets.
bool node_window_fits(MPI_Comm node, int64_t bytes, std::string* why_not);

// Frees a shared-memory window and the node communicator it was made on (either may be null),
// unless MPI has already been finalised (then there is nothing left to free) or an exception is
// unwinding (MPI_Win_free is collective: see unwinding()).
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
// Found when MPI starts (MpiSession); where MPI was started otherwise, the first call is
// collective over MPI_COMM_WORLD.
NodePlace node_place();

// Prints "merak: [rank R] <msg>" as one line on stderr, then MPI_Abort(MPI_COMM_WORLD, code),
// so mpirun ends every rank with a non-zero status (3: a failure; 2: bad input). Without MPI
// running it exits the process with that code.
[[noreturn]] void abort_job(const std::string& msg, int code = 3);

}  // namespace merak::comm
