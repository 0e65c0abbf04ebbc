// How the members of a node-shared window wait for each other: spin a little, then give the
// core away (members often outnumber cores, and spinning would starve the one being waited on),
// keep MPI's progress engine turning (the awaited member may itself wait for a message this
// process must progress), and end the job after the group's timeout, saying what was awaited.
#pragma once

#include <mpi.h>
#include <sched.h>

#include <chrono>
#include <string>
#include <thread>

#include "merak/comm/communicator.h"
#include "merak/comm/mpi_env.h"
#include "merak/core/error.h"

namespace merak::comm {

// Returns once ready() holds. `kind` names the mechanism ("shared-memory sum"); what() says what
// was awaited, for the timeout's message.
template <typename Ready, typename What>
void wait_on_node(const Communicator& group, MPI_Comm node, const char* kind, Ready ready,
                  What what) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (long spins = 0; !ready(); ++spins) {
    if (spins < 64) continue;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > group.timeout_s())
      abort_job(detail::concat(kind, " over ", group.describe(), ": ", what(), " after ",
                               group.timeout_s(), " s (stuck or dead)"));
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, node, &flag, MPI_STATUS_IGNORE);
    if (waited < 0.01)
      sched_yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Returns once reached(m) holds for every member m of `group`; behind(m) says what member m,
// the first found behind, has not done yet, for the timeout's message.
template <typename Reached, typename Behind>
void wait_for_members(const Communicator& group, MPI_Comm node, const char* kind, Reached reached,
                      Behind behind) {
  int late = -1;
  wait_on_node(
      group, node, kind,
      [&] {
        for (int m = 0; m < group.size(); ++m)
          if (!reached(m)) {
            late = m;
            return false;
          }
        return true;
      },
      [&] { return group.describe_peer(late) + " has not " + behind(); });
}

}  // namespace merak::comm
