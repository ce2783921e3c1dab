// Paged attention over K/V blocks, and writing new K/V into blocks.
//
// The pool stores K/V as T (f32, f16 or bf16: the setting cache.kv_dtype);
// queries, new K/V rows and the output are f32, and every score, softmax and
// sum is computed in f32, as the CPU store does (src/ops/paged.rs). A value
// is rounded to T once, when it is written (round to nearest even, as the
// `half` crate rounds on the CPU, so both pools hold the same bits).
//
// Counterpart: vLLM's reshape_and_cache and paged_attention_v1 kernels. One
// thread block per (query token, head), one pass over the keys with an online
// softmax, so that no buffer grows with the context length.
#include "paged_attention.cuh"

// Writes the K and V rows of `tokens` new tokens into the pool.
//   pool:  the device pool (layout above)
//   k, v:  [tokens, kv_heads, head_dim], contiguous f32
//   slots: [tokens], block * block_size + row for each token
//   v_plane: 1, or 0 where the layer keeps K only and V is read from it (v is then not written)
// grid: tokens; block: any (threads stride over kv_heads * head_dim).
template <typename T>
__device__ void write_kv(T *pool, const float *k, const float *v, const uint32_t *slots, int layer_offset,
                         int block_elems, int block_size, int kv_heads, int head_dim, int v_plane) {
    const int t = blockIdx.x;
    const uint32_t slot = slots[t];
    const uint32_t block = slot / block_size;
    const int row = slot % block_size;
    const int row_elems = kv_heads * head_dim;
    const size_t k_at = plane_offset(block, 0, layer_offset, block_elems, block_size, kv_heads, head_dim) + (size_t)row * row_elems;
    const size_t v_at = plane_offset(block, v_plane, layer_offset, block_elems, block_size, kv_heads, head_dim) + (size_t)row * row_elems;
    for (int i = threadIdx.x; i < row_elems; i += blockDim.x) {
        pool[k_at + i] = from_float<T>(k[(size_t)t * row_elems + i]);
        if (v_plane) pool[v_at + i] = from_float<T>(v[(size_t)t * row_elems + i]);
    }
}

// Copies one sequence's K and V rows out of the pool as f32, in position order, each K/V head's
// rows together, for attention by matrix products (a long prefill, src/ops/cuda_paged.rs).
//   k_out, v_out: [kv_heads, ctx, head_dim] (v_out is not written where v_plane is 0)
//   table:        the sequence's block table, covering positions 0 .. ctx
// grid: ctx; block: any (threads stride over kv_heads * head_dim).
template <typename T>
__device__ void gather_kv(float *k_out, float *v_out, const T *pool, const uint32_t *table, int ctx,
                          int layer_offset, int block_elems, int block_size, int kv_heads, int head_dim,
                          int v_plane) {
    const int p = blockIdx.x;
    const uint32_t b = table[p / block_size];
    const int row_elems = kv_heads * head_dim;
    const size_t row = (size_t)(p % block_size) * row_elems;
    const T *kp = pool + plane_offset(b, 0, layer_offset, block_elems, block_size, kv_heads, head_dim) + row;
    const T *vp = pool + plane_offset(b, v_plane, layer_offset, block_elems, block_size, kv_heads, head_dim) + row;
    for (int i = threadIdx.x; i < row_elems; i += blockDim.x) {
        const size_t at = ((size_t)(i / head_dim) * ctx + p) * head_dim + i % head_dim;
        k_out[at] = to_float(kp[i]);
        if (v_plane) v_out[at] = to_float(vp[i]);
    }
}

// Most values of a head one lane holds: head_dim <= 32 * MAX_DPL (576: DeepSeek-V2's latent of
// 512 values and 64 rotated ones; Gemma 4's global heads are 512).
#define MAX_DPL 18

__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Causal attention of packed query tokens over their sequences' blocks. The
// query token's own K/V must already be in the pool (write_kv first).
//   out:        [tokens, heads, head_dim] f32
//   q:          [tokens, heads, head_dim] f32
//   tables:     [seqs, max_blocks] block tables
//   token_seq:  [tokens] which sequence each query token belongs to
//   token_pos:  [tokens] its position; it attends to positions 0 ..= pos
//   window:     0; or n > 0, a sliding window: it attends to positions pos - n + 1 ..= pos only;
//               or -n, chunks of n (Llama 4): it attends to (pos / n) * n ..= pos only
//   softcap:    0, or a soft cap c: each scaled score s becomes c * tanh(s / c) (Gemma 2)
//   sinks:      [heads] sink logits, read when has_sinks is 1 (gpt-oss): the softmax counts
//               one more score, sinks[h], whose value is 0 (its maximum taken over it too)
//   alibi:      [heads] ALiBi slopes, read when has_alibi is 1 (BLOOM, MPT, Refact): the score
//               of position p gains alibi[h] * -(pos - p) after the soft cap
//   v_plane:    1, or 0 where the layer keeps K only and V is read from K's rows
// grid: (tokens, heads); block: whole warps (e.g. 256 threads), head_dim <= 32 * MAX_DPL.
// dynamic shared memory: warps * (2 + head_dim) floats.
//
// One pass with an online softmax, as flash-decoding does: warp w takes positions
// first + w, first + w + warps, ...; its 32 lanes split the head's values (lane i holds
// values i, i + 32, ...), so each K or V row is read in coalesced pieces, the score is a
// warp sum, and each lane keeps its own running max, sum and weighted sum of V with no
// shared-memory atomics. The warps' partial results are merged at the end.
template <typename T>
__device__ void paged_attention(float *out, const float *q, const T *pool, const uint32_t *tables,
                                const uint32_t *token_seq, const uint32_t *token_pos, int max_blocks, int layer_offset,
                                int block_elems, int block_size, int kv_heads, int head_dim, int heads, float scale,
                                int window, float softcap, const float *sinks, int has_sinks, const float *alibi,
                                int has_alibi, int v_plane) {
    extern __shared__ float smem[];
    const int warps = blockDim.x / 32;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    float *warp_m = smem;                 // warps
    float *warp_l = smem + warps;         // warps
    float *warp_acc = smem + 2 * warps;   // warps * head_dim
    const int t = blockIdx.x;
    const int h = blockIdx.y;
    const int kvh = h / (heads / kv_heads);
    const uint32_t *table = tables + (size_t)token_seq[t] * max_blocks;
    const int ctx = token_pos[t] + 1;
    const int first = window < 0 ? (ctx - 1) / -window * -window : window > 0 && ctx > window ? ctx - window : 0;
    const float *qh = q + ((size_t)t * heads + h) * head_dim;
    const int row_elems = kv_heads * head_dim;

    float qv[MAX_DPL], acc[MAX_DPL];
#pragma unroll
    for (int j = 0; j < MAX_DPL; ++j) {
        const int i = j * 32 + lane;
        qv[j] = i < head_dim ? qh[i] * scale : 0.f;
        acc[j] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    for (int p = first + warp; p < ctx; p += warps) {
        const uint32_t b = table[p / block_size];
        const size_t row = (size_t)(p % block_size) * row_elems + (size_t)kvh * head_dim;
        const T *kp = pool + plane_offset(b, 0, layer_offset, block_elems, block_size, kv_heads, head_dim) + row;
        const T *vp = pool + plane_offset(b, v_plane, layer_offset, block_elems, block_size, kv_heads, head_dim) + row;
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < MAX_DPL; ++j) {
            const int i = j * 32 + lane;
            if (i < head_dim) s += qv[j] * to_float(kp[i]);
        }
        s = warp_sum(s);
        if (softcap > 0.f) s = softcap * tanhf(s / softcap);
        if (has_alibi) s += alibi[h] * -(float)(ctx - 1 - p);
        const float m_new = fmaxf(m, s);
        const float c = __expf(m - m_new);
        const float w = __expf(s - m_new);
        l = l * c + w;
#pragma unroll
        for (int j = 0; j < MAX_DPL; ++j) {
            const int i = j * 32 + lane;
            if (i < head_dim) acc[j] = acc[j] * c + w * to_float(vp[i]);
        }
        m = m_new;
    }
    if (lane == 0) {
        warp_m[warp] = m;
        warp_l[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < MAX_DPL; ++j) {
        const int i = j * 32 + lane;
        if (i < head_dim) warp_acc[warp * head_dim + i] = acc[j];
    }
    __syncthreads();
    // Merge: every position was seen by exactly one warp; a warp that saw none has
    // m = -inf and weight 0 (position pos itself is always seen, so the max is finite).
    float big = -INFINITY;
    for (int w = 0; w < warps; ++w) big = fmaxf(big, warp_m[w]);
    if (has_sinks) big = fmaxf(big, sinks[h]);
    float total = 0.f;
    for (int w = 0; w < warps; ++w) total += warp_l[w] * __expf(warp_m[w] - big);
    if (has_sinks) total += __expf(sinks[h] - big);
    float *oh = out + ((size_t)t * heads + h) * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        float sum = 0.f;
        for (int w = 0; w < warps; ++w) sum += warp_acc[w * head_dim + i] * __expf(warp_m[w] - big);
        oh[i] = sum / total;
    }
}

#define INSTANTIATE(T, SUFFIX)                                                                                   \
    extern "C" __global__ void write_kv_##SUFFIX(T *pool, const float *k, const float *v, const uint32_t *slots, \
                                                 int layer_offset, int block_elems, int block_size, int kv_heads, \
                                                 int head_dim, int v_plane) {                                    \
        write_kv<T>(pool, k, v, slots, layer_offset, block_elems, block_size, kv_heads, head_dim, v_plane);     \
    }                                                                                                            \
    extern "C" __global__ void paged_attention_##SUFFIX(                                                         \
        float *out, const float *q, const T *pool, const uint32_t *tables, const uint32_t *token_seq,                   \
        const uint32_t *token_pos, int max_blocks, int layer_offset, int block_elems, int block_size,            \
        int kv_heads, int head_dim, int heads, float scale, int window, float softcap, const float *sinks,       \
        int has_sinks, const float *alibi, int has_alibi, int v_plane) {                                         \
        paged_attention<T>(out, q, pool, tables, token_seq, token_pos, max_blocks, layer_offset, block_elems,   \
                           block_size, kv_heads, head_dim, heads, scale, window, softcap, sinks, has_sinks,      \
                           alibi, has_alibi, v_plane);                                                           \
    }                                                                                                            \
    extern "C" __global__ void gather_kv_##SUFFIX(float *k_out, float *v_out, const T *pool,                     \
                                                  const uint32_t *table, int ctx, int layer_offset,               \
                                                  int block_elems, int block_size, int kv_heads, int head_dim,    \
                                                  int v_plane) {                                                  \
        gather_kv<T>(k_out, v_out, pool, table, ctx, layer_offset, block_elems, block_size, kv_heads, head_dim,  \
                     v_plane);                                                                                    \
    }

INSTANTIATE(float, f32)
INSTANTIATE(__half, f16)
INSTANTIATE(__nv_bfloat16, bf16)
