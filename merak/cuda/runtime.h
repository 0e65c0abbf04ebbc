// The CUDA device runtime the backend shares: device discovery, error checks, and the stream
// each device's work goes to (one per device: kernels, copies and the caching allocator's reuse
// are ordered on it).
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace merak::cuda {

// How many GPUs this process can use: 0 when there is none or the runtime cannot start (then
// `why`, when given, holds what the runtime said: "cudaGetDeviceCount: ... (error 35)").
int device_count(std::string* why = nullptr);

// Throws merak::Error "`what`: <message> (cudaError <code>)" unless e is cudaSuccess.
void check(cudaError_t e, const char* what);

// The stream of device `index`, created on first use; the device is made current.
cudaStream_t stream(int index);
void synchronize(int index);

// Dense bf16/f16 tensor-core peak of device `index` in TFLOP/s: SMs x clock x FLOP per SM per
// clock of its architecture (Ampere 2048, Hopper 4096). What MFU and "of peak" divide by.
double dense_peak_tflops(int index);

}  // namespace merak::cuda
