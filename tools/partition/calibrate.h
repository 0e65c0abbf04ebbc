// `merak_partition calibrate`: measures this machine and writes the cpu-local hardware profile.
#pragma once

#include <string>

namespace merak::tools {

// Measures f32 matmul GFLOP/s against the FMA peak, memory bandwidth (a large copy) and
// point-to-point bandwidth and latency (MPI between ranks 0 and 1 when launched by mpirun with
// two or more ranks, else a copy between two threads through shared memory), then writes the
// profile to `out` (rank 0 only). Returns the exit code.
int calibrate(int argc, char** argv, const std::string& out);

}  // namespace merak::tools
