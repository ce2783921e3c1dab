// Included before hearth's CUDA kernels (kernels/*.cu) to compile them as plain C++ for the
// CPU emulation in tests/cuda_kernels_emulated.rs: the CUDA keywords become nothing, and the
// built-in variables, __syncthreads and __shfl_xor_sync are the emulator's (harness.cpp),
// which runs every thread of a block as a fiber.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#define __device__
#define __global__
#define __shared__
#define __forceinline__ inline

struct emu_dim3 {
    unsigned x, y, z;
};
extern emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

void __syncthreads();
float __shfl_xor_sync(unsigned mask, float value, int lane_mask);
inline float __expf(float x) { return std::exp(x); }
