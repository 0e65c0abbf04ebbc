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

// Dense bf16/f16 tensor-core FLOP per SM per clock (f32 accumulation) of compute capability
// major.minor: 2048 on sm_80 (A100, A30), 1024 on sm_86/89 (A10, A40, L4, L40S), 4096 on sm_90
// (H100, H200), 8192 on sm_100/103 (B200, B300), 1024 on sm_120 (RTX PRO 6000 Blackwell). These
// are the data-center and workstation parts' rates; GeForce cards of sm_86/89/120 run bf16 with
// f32 accumulation at half of it, so their peak is overstated 2x; so is a cut-down part of a
// full architecture (H20 on sm_90). 0 for an architecture not in the table (no guess). Needs no
// GPU. (The build targets sm_80 and sm_90 only: the Blackwell rows wait for kernels built for
// them.)
double tensor_flop_per_sm_clock(int major, int minor);

// Dense bf16/f16 tensor-core peak of device `index` in TFLOP/s: SMs x clock x the rate above.
// The clock is cudaDevAttrClockRate, the maximum boost clock; tensor work runs at or below it
// (an H100 SXM's 1980 MHz against the 1830 MHz of NVIDIA's 989 TFLOP/s), so the peak is an upper
// bound and the MFU divided by it conservative. 0 when the architecture has no known rate; then
// `why`, when given, says which ("no dense tensor-core rate known for NAME (sm_101)").
double dense_peak_tflops(int index, std::string* why = nullptr);

}  // namespace merak::cuda
