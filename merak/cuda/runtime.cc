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

double tensor_flop_per_sm_clock(int major, int minor) {
  // From NVIDIA's dense (non-sparse) bf16 figures: A100 312 TF = 108 SMs x 1.41 GHz x 2048;
  // A10 125 TF = 72 x 1.695 GHz x 1024; A40 150 TF = 84 x 1.74 GHz x 1024; L40S 362 TF ~ 142 x
  // 2.52 GHz x 1024; H100 SXM 989 TF = 132 x 1.83 GHz x 4096; B200 2.25 PF = 148 x 1.86 GHz x
  // 8192; RTX PRO 6000 Blackwell 504 TF = 188 x 2.617 GHz x 1024.
  switch (major * 10 + minor) {
    case 80: return 2048;
    case 86: case 89: return 1024;
    case 90: return 4096;
    case 100: case 103: return 8192;
    case 120: return 1024;
    default: return 0;  // e.g. Jetson (8.7, 11.0) and GB10 (12.1): no published rate checked
  }
}

double dense_peak_tflops(int index, std::string* why) {
  int sms = 0, khz = 0, major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, index), "SM count");
  check(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, index), "clock rate");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index), "architecture");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index), "architecture");
  const double flop_per_sm_clock = tensor_flop_per_sm_clock(major, minor);
  if (flop_per_sm_clock == 0 && why) {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
    *why = std::string("no dense tensor-core rate known for ") + prop.name + " (sm_" +
           std::to_string(major) + std::to_string(minor) + ")";
  }
  return double(sms) * double(khz) * 1e3 * flop_per_sm_clock / 1e12;
}

}  // namespace merak::cuda
