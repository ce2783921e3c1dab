// Paged attention over K/V blocks, and writing new K/V into blocks.
//
// Counterpart: vLLM's reshape_and_cache and paged_attention_v1 kernels. These
// are written for clarity first: one thread block per (query token, head),
// two passes over the keys (max, then exp-sum and the weighted sum of V), so
// that no shared-memory buffer grows with the context length.
#include "paged_attention.cuh"

// Writes the K and V rows of `tokens` new tokens into the pool.
//   pool:  the device pool (layout above)
//   k, v:  [tokens, kv_heads, head_dim], contiguous
//   slots: [tokens], block * block_size + row for each token
// grid: tokens; block: any (threads stride over kv_heads * head_dim).
template <typename T>
__device__ void write_kv(T *pool, const T *k, const T *v, const uint32_t *slots, int layer, int layers,
                         int block_size, int kv_heads, int head_dim) {
    const int t = blockIdx.x;
    const uint32_t slot = slots[t];
    const uint32_t block = slot / block_size;
    const int row = slot % block_size;
    const int row_elems = kv_heads * head_dim;
    const size_t k_at = plane_offset(block, layer, 0, layers, block_size, kv_heads, head_dim) + (size_t)row * row_elems;
    const size_t v_at = plane_offset(block, layer, 1, layers, block_size, kv_heads, head_dim) + (size_t)row * row_elems;
    for (int i = threadIdx.x; i < row_elems; i += blockDim.x) {
        pool[k_at + i] = k[(size_t)t * row_elems + i];
        pool[v_at + i] = v[(size_t)t * row_elems + i];
    }
}

// Block-wide reductions over a shared scratch of blockDim.x floats.
__device__ float block_max(float x, float *scratch) {
    scratch[threadIdx.x] = x;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]);
        __syncthreads();
    }
    float r = scratch[0];
    __syncthreads();
    return r;
}

__device__ float block_sum(float x, float *scratch) {
    scratch[threadIdx.x] = x;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
        __syncthreads();
    }
    float r = scratch[0];
    __syncthreads();
    return r;
}

// Causal attention of packed query tokens over their sequences' blocks. The
// query token's own K/V must already be in the pool (write_kv first).
//   out:        [tokens, heads, head_dim]
//   q:          [tokens, heads, head_dim]
//   tables:     [seqs, max_blocks] block tables
//   token_seq:  [tokens] which sequence each query token belongs to
//   token_pos:  [tokens] its position; it attends to positions 0 ..= pos
//   window:     0, or a sliding window: it attends to positions pos - window + 1 ..= pos only
// grid: (tokens, heads); block: a power of two (e.g. 128) threads.
// dynamic shared memory: (blockDim.x + head_dim) floats.
template <typename T>
__device__ void paged_attention(T *out, const T *q, const T *pool, const uint32_t *tables, const uint32_t *token_seq,
                                const uint32_t *token_pos, int max_blocks, int layer, int layers, int block_size,
                                int kv_heads, int head_dim, int heads, float scale, int window) {
    extern __shared__ float smem[];
    float *scratch = smem;              // blockDim.x
    float *acc = smem + blockDim.x;     // head_dim
    const int t = blockIdx.x;
    const int h = blockIdx.y;
    const int kvh = h / (heads / kv_heads);
    const uint32_t *table = tables + (size_t)token_seq[t] * max_blocks;
    const int ctx = token_pos[t] + 1;
    const int first = window > 0 && ctx > window ? ctx - window : 0;
    const T *qh = q + ((size_t)t * heads + h) * head_dim;
    const int row_elems = kv_heads * head_dim;

    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) acc[i] = 0.f;

    // Pass 1: the largest score.
    float m = -INFINITY;
    for (int p = first + threadIdx.x; p < ctx; p += blockDim.x) {
        const T *kp = pool + plane_offset(table[p / block_size], layer, 0, layers, block_size, kv_heads, head_dim) +
                      (size_t)(p % block_size) * row_elems + (size_t)kvh * head_dim;
        float s = 0.f;
        for (int i = 0; i < head_dim; ++i) s += to_float(qh[i]) * to_float(kp[i]);
        m = fmaxf(m, s * scale);
    }
    m = block_max(m, scratch);

    // Pass 2: exp-sum and the weighted sum of V (accumulated in shared memory).
    float l = 0.f;
    for (int p = first + threadIdx.x; p < ctx; p += blockDim.x) {
        const uint32_t b = table[p / block_size];
        const size_t row = (size_t)(p % block_size) * row_elems + (size_t)kvh * head_dim;
        const T *kp = pool + plane_offset(b, layer, 0, layers, block_size, kv_heads, head_dim) + row;
        const T *vp = pool + plane_offset(b, layer, 1, layers, block_size, kv_heads, head_dim) + row;
        float s = 0.f;
        for (int i = 0; i < head_dim; ++i) s += to_float(qh[i]) * to_float(kp[i]);
        const float w = __expf(s * scale - m);
        l += w;
        for (int i = 0; i < head_dim; ++i) atomicAdd(&acc[i], w * to_float(vp[i]));
    }
    l = block_sum(l, scratch);
    __syncthreads();
    T *oh = out + ((size_t)t * heads + h) * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) oh[i] = from_float<T>(acc[i] / l);
}

// Copies whole blocks inside one pool: pairs[2 * i] -> pairs[2 * i + 1].
// grid: number of pairs; block: any.
template <typename T> __device__ void copy_blocks(T *pool, const uint32_t *pairs, size_t block_elems) {
    const size_t src = (size_t)pairs[2 * blockIdx.x] * block_elems;
    const size_t dst = (size_t)pairs[2 * blockIdx.x + 1] * block_elems;
    for (size_t i = threadIdx.x; i < block_elems; i += blockDim.x) pool[dst + i] = pool[src + i];
}

#define INSTANTIATE(T, SUFFIX)                                                                                   \
    extern "C" __global__ void write_kv_##SUFFIX(T *pool, const T *k, const T *v, const uint32_t *slots,        \
                                                 int layer, int layers, int block_size, int kv_heads,            \
                                                 int head_dim) {                                                 \
        write_kv<T>(pool, k, v, slots, layer, layers, block_size, kv_heads, head_dim);                          \
    }                                                                                                            \
    extern "C" __global__ void paged_attention_##SUFFIX(                                                         \
        T *out, const T *q, const T *pool, const uint32_t *tables, const uint32_t *token_seq,                   \
        const uint32_t *token_pos, int max_blocks, int layer, int layers, int block_size, int kv_heads,          \
        int head_dim, int heads, float scale, int window) {                                                      \
        paged_attention<T>(out, q, pool, tables, token_seq, token_pos, max_blocks, layer, layers, block_size,   \
                           kv_heads, head_dim, heads, scale, window);                                            \
    }                                                                                                            \
    extern "C" __global__ void copy_blocks_##SUFFIX(T *pool, const uint32_t *pairs, unsigned long long block_elems) { \
        copy_blocks<T>(pool, pairs, (size_t)block_elems);                                                        \
    }

INSTANTIATE(float, f32)
INSTANTIATE(__half, f16)
INSTANTIATE(__nv_bfloat16, bf16)
