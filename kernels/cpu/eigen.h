// Eigen, included once for all CPU kernels. GCC 12 flags Eigen's AVX-512 packet code with false
// maybe-uninitialized / unused-variable warnings; they are silenced here only.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wunused-variable"
#include <Eigen/Dense>
#pragma GCC diagnostic pop
