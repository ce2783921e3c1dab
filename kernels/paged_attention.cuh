// Shared helpers for hearth's paged K/V kernels.
//
// Pool layout (the same as the CPU pool in src/ops/paged.rs): one block holds
// `block_size` tokens of every layer, K and V, each layer with its own heads
// (Gemma 4's global layers have fewer, wider ones):
//
//   pool[block * block_elems + layer_offset + kv * block_size * kv_heads * head_dim
//        + row * kv_heads * head_dim + kv_head * head_dim + i]
//
// where block_elems is a block's values and layer_offset where the layer's K plane
// starts in it (the host's PagedLayout gives both), so one block is one contiguous
// range and moves between tiers in one copy.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16(x);
}

// Offset of the start of one layer's K (kv = 0) or V (kv = 1) plane in `block`.
__device__ __forceinline__ size_t plane_offset(uint32_t block, int kv, int layer_offset, int block_elems,
                                               int block_size, int kv_heads, int head_dim) {
    return (size_t)block * block_elems + layer_offset + (size_t)kv * block_size * kv_heads * head_dim;
}
