// Stand-in for CUDA's cuda_bf16.h on the CPU (tests/cuda_kernels_emulated.rs): bfloat16 as
// the top 16 bits of an f32, rounded to nearest even (as CUDA's __float2bfloat16).
#pragma once
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
    uint16_t bits;
};

inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = static_cast<uint32_t>(b.bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline __nv_bfloat16 __float2bfloat16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40)};  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return {static_cast<uint16_t>(u >> 16)};
}
