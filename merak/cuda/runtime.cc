#include "merak/cuda/runtime.h"

#include <mutex>
#include <vector>

#include "merak/core/error.h"

namespace merak::cuda {

int device_count(std::string* why) {
  int n = 0;  // left unwritten when the call fails (no driver, no device)
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why)
      *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e) + " (cudaError " +
             std::to_string(int(e)) + ")";
    cudaGetLastError();  // clear the sticky error for later calls
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount: 0 devices";
  return n;
}

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  MERAK_FAIL(what, ": ", cudaGetErrorString(e), " (cudaError ", int(e), ")");
}

cudaStream_t stream(int index) {
  static std::mutex mu;
  static std::vector<cudaStream_t> streams;
  std::lock_guard<std::mutex> lock(mu);
  check(cudaSetDevice(index), "cudaSetDevice");
  if (int(streams.size()) <= index) streams.resize(size_t(index) + 1, nullptr);
  if (!streams[size_t(index)])
    check(cudaStreamCreateWithFlags(&streams[size_t(index)], cudaStreamNonBlocking),
          "cudaStreamCreateWithFlags");
  return streams[size_t(index)];
}

void synchronize(int index) {
  check(cudaStreamSynchronize(stream(index)), "cudaStreamSynchronize");
}

double dense_peak_tflops(int index) {
  int sms = 0, khz = 0, major = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, index), "SM count");
  check(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, index), "clock rate");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index), "architecture");
  const double flop_per_sm_clock = major >= 9 ? 4096 : major == 8 ? 2048 : 1024;
  return double(sms) * double(khz) * 1e3 * flop_per_sm_clock / 1e12;
}

}  // namespace merak::cuda
