// gather_spans brings every rank's spans to rank 0 alone: rank r has r % 3 spans (rank 0 none,
// and under 4 ranks rank 3 none either), and rank 0 must get them all with their tracks, the
// others nothing. Prints one line a failing
// rank; exit status 1 when any rank failed.
//   trace_gather_main   (under mpirun, any number of ranks)
#include <cstdio>
#include <string>
#include <vector>

#include "merak/comm/grid.h"
#include "merak/comm/mpi_env.h"
#include "merak/runtime/engine_trace.h"

using namespace merak;

int main(int argc, char** argv) {
  comm::MpiSession mpi(&argc, &argv);
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  comm::Grid grid({world, 1, 1}, comm::mpi_backend(comm::CommOptions{60}));
  const int rank = grid.rank();
  std::vector<runtime::TraceSpan> mine;
  auto spans_of = [](int r) { return r % 3; };
  for (int k = 0; k < spans_of(rank); ++k) {
    runtime::TraceSpan s;
    s.name = "F" + std::to_string(k);
    s.category = "compute";
    s.start = rank + 0.1 * k;
    s.end = s.start + 0.05;
    mine.push_back(s);
  }
  const std::vector<runtime::TraceSpan> all = runtime::gather_spans(grid.host(), mine);
  std::string problem;
  if (rank != 0) {
    if (!all.empty()) problem = std::to_string(all.size()) + " spans, want none off rank 0";
  } else {
    size_t at = 0;
    for (int r = 0; r < world && problem.empty(); ++r)
      for (int k = 0; k < spans_of(r) && problem.empty(); ++k, ++at) {
        const bool ok = at < all.size() && all[at].track == r &&
                        all[at].name == "F" + std::to_string(k) &&
                        all[at].start == r + 0.1 * k && all[at].end == r + 0.1 * k + 0.05;
        if (!ok) problem = "span " + std::to_string(at) + " is not rank " + std::to_string(r) +
                           "'s F" + std::to_string(k);
      }
    if (problem.empty() && at != all.size())
      problem = std::to_string(all.size()) + " spans, want " + std::to_string(at);
  }
  if (!problem.empty()) std::printf("FAIL [rank %d] %s\n", rank, problem.c_str());
  int failed = problem.empty() ? 0 : 1;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return failed;
}
