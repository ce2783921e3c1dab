// Stand-in for CUDA's cuda_fp16.h on the CPU (tests/cuda_kernels_emulated.rs): __half as
// IEEE binary16 bits, converted through the compiler's _Float16 (round to nearest even, as
// CUDA's __float2half and the `half` crate round).
#pragma once
#include <cstdint>
#include <cstring>

struct __half {
    uint16_t bits;
};

inline float __half2float(__half h) {
    _Float16 f;
    std::memcpy(&f, &h.bits, 2);
    return static_cast<float>(f);
}

inline __half __float2half(float x) {
    _Float16 f = static_cast<_Float16>(x);
    __half h;
    std::memcpy(&h.bits, &f, 2);
    return h;
}
