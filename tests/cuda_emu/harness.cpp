// hearth's CUDA kernels (kernels/paged_attention.cu, compiled unchanged as C++ with shim.h)
// run on the CPU, for tests/cuda_kernels_emulated.rs.
//
// Every thread of a thread block is a fiber (ucontext) on one OS thread; the blocks of a
// grid run one after another. __syncthreads is a barrier of the block's fibers and
// __shfl_xor_sync one of the warp's (each lane posts its value, waits for the other lanes,
// reads its partner's, waits again), so a kernel whose threads do not all reach a barrier
// they should deadlocks here, and the emulator says so instead of hanging. Shared memory is
// filled with NaN before each block, so a read of a value no thread wrote shows in the output.
//
// Protocol (little-endian, stdin → stdout), one pool per process:
//   header: i32 dtype (0 f32, 1 f16, 2 bf16), block_elems (values of one block), block_size,
//           heads, blocks, threads
//   then commands (i32):
//     1 attend: i32 layer_offset (values before the layer's K plane in a block), kv_heads,
//               head_dim, v_plane (0: V read from K), writes, tokens, seqs, max_blocks, window;
//               f32 scale, softcap;
//               i32 has_sinks; f32 sinks[heads]; i32 has_alibi; f32 alibi[heads];
//               u32 shared_bytes;
//               u32 slots[tokens], tables[seqs * max_blocks], token_seq[tokens],
//               token_pos[tokens]; f32 q[tokens * heads * head_dim], and where writes is 1
//               k[tokens * kv_heads * head_dim], v[same]
//               → write_kv (grid tokens) where writes is 1, then paged_attention (grid
//               tokens × heads, with the host's shared_bytes); writes f32
//               out[tokens * heads * head_dim]
//     2 pool:   writes the pool's bytes
//     0 end
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

#include "../../kernels/paged_attention.cu"

emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
// The kernels' `extern __shared__ float smem[]`.
float smem[1 << 16];

namespace {

[[noreturn]] void fail(const char *what) {
    std::fprintf(stderr, "cuda emulator: %s\n", what);
    std::exit(2);
}

struct Fiber {
    ucontext_t ctx;
    std::unique_ptr<char[]> stack;
    unsigned tid = 0;
    bool done = false;
};

constexpr size_t STACK = 256 * 1024;
ucontext_t scheduler;
Fiber *current = nullptr;
std::function<void()> kernel;
// Arrivals at barriers, releases and finished threads: a pass over all fibers that changes
// none of these is a deadlock.
unsigned long progress = 0;

struct Barrier {
    unsigned n = 0, count = 0;
    unsigned long generation = 0;
};
Barrier block_barrier;
std::vector<Barrier> warp_barriers;
std::vector<float> exchange;

void yield() { swapcontext(&current->ctx, &scheduler); }

void wait(Barrier &b) {
    const unsigned long g = b.generation;
    ++progress;
    if (++b.count == b.n) {
        b.count = 0;
        ++b.generation;
        return;
    }
    while (b.generation == g) yield();
}

}  // namespace

void __syncthreads() { wait(block_barrier); }

float __shfl_xor_sync(unsigned, float value, int lane_mask) {
    const unsigned t = threadIdx.x, warp = t / 32, lane = t % 32;
    exchange[t] = value;
    wait(warp_barriers[warp]);
    const float got = exchange[warp * 32 + (lane ^ (unsigned)lane_mask)];
    wait(warp_barriers[warp]);
    return got;
}

namespace {

void entry() {
    kernel();
    current->done = true;
    ++progress;
    swapcontext(&current->ctx, &scheduler);
}

// Runs `body` for every thread of a grid of (gx, gy) blocks of `threads` threads.
void launch(unsigned gx, unsigned gy, unsigned threads, size_t shared_bytes, std::function<void()> body) {
    if (threads == 0 || threads % 32 != 0) fail("threads per block must be whole warps");
    if (shared_bytes > sizeof(smem)) fail("more shared memory than the emulator has");
    static std::vector<Fiber> fibers;
    if (fibers.size() < threads) fibers.resize(threads);
    for (auto &f : fibers)
        if (!f.stack) f.stack.reset(new char[STACK]);
    kernel = std::move(body);
    blockDim = {threads, 1, 1};
    gridDim = {gx, gy, 1};
    warp_barriers.assign(threads / 32, Barrier{32});
    exchange.assign(threads, 0.f);
    for (unsigned by = 0; by < gy; ++by) {
        for (unsigned bx = 0; bx < gx; ++bx) {
            for (size_t i = 0; i < shared_bytes / sizeof(float); ++i) smem[i] = NAN;
            block_barrier = Barrier{threads};
            for (auto &w : warp_barriers) w = Barrier{32};
            for (unsigned t = 0; t < threads; ++t) {
                Fiber &f = fibers[t];
                f.tid = t;
                f.done = false;
                getcontext(&f.ctx);
                f.ctx.uc_stack.ss_sp = f.stack.get();
                f.ctx.uc_stack.ss_size = STACK;
                f.ctx.uc_link = nullptr;
                makecontext(&f.ctx, entry, 0);
            }
            blockIdx = {bx, by, 0};
            for (unsigned running = threads; running > 0;) {
                const unsigned long before = progress;
                running = 0;
                for (unsigned t = 0; t < threads; ++t) {
                    Fiber &f = fibers[t];
                    if (f.done) continue;
                    current = &f;
                    threadIdx = {f.tid, 0, 0};
                    swapcontext(&scheduler, &f.ctx);
                    running += !f.done;
                }
                if (running > 0 && progress == before) fail("deadlock: threads wait at a barrier others never reach");
            }
        }
    }
}

template <typename T> void read(T *p, size_t n) {
    if (n && std::fread(p, sizeof(T), n, stdin) != n) fail("short input");
}
template <typename T> std::vector<T> read_vec(size_t n) {
    std::vector<T> v(n);
    read(v.data(), n);
    return v;
}
int read_i32() {
    int x;
    read(&x, 1);
    return x;
}

template <typename T>
void attend(std::vector<unsigned char> &pool, int block_elems, int block_size, int heads, unsigned threads) {
    const int layer_offset = read_i32(), kv_heads = read_i32(), head_dim = read_i32(), v_plane = read_i32();
    const int writes = read_i32();
    const int tokens = read_i32(), seqs = read_i32(), max_blocks = read_i32(), window = read_i32();
    if (layer_offset < 0 || kv_heads <= 0 || head_dim <= 0 || layer_offset >= block_elems || (v_plane & ~1))
        fail("bad layer");
    float scale, softcap;
    read(&scale, 1);
    read(&softcap, 1);
    const int has_sinks = read_i32();
    auto sinks = read_vec<float>(heads);
    const int has_alibi = read_i32();
    auto alibi = read_vec<float>(heads);
    uint32_t shared;
    read(&shared, 1);
    if (tokens < 0 || seqs < 0 || max_blocks < 0) fail("negative sizes");
    const size_t t = tokens, row = (size_t)kv_heads * head_dim, qrow = (size_t)heads * head_dim;
    auto slots = read_vec<uint32_t>(t);
    auto tables = read_vec<uint32_t>((size_t)seqs * max_blocks);
    auto token_seq = read_vec<uint32_t>(t);
    auto token_pos = read_vec<uint32_t>(t);
    auto q = read_vec<float>(t * qrow);
    std::vector<float> out(t * qrow, NAN);
    T *p = reinterpret_cast<T *>(pool.data());
    if (writes) {
        auto k = read_vec<float>(t * row);
        auto v = read_vec<float>(t * row);
        launch(tokens, 1, threads, 0, [&] {
            write_kv<T>(p, k.data(), v.data(), slots.data(), layer_offset, block_elems, block_size, kv_heads, head_dim,
                        v_plane);
        });
    }
    launch(tokens, heads, threads, shared, [&] {
        paged_attention<T>(out.data(), q.data(), p, tables.data(), token_seq.data(), token_pos.data(), max_blocks,
                           layer_offset, block_elems, block_size, kv_heads, head_dim, heads, scale, window, softcap,
                           sinks.data(), has_sinks, alibi.data(), has_alibi, v_plane);
    });
    std::fwrite(out.data(), sizeof(float), out.size(), stdout);
    std::fflush(stdout);
}

template <typename T> int serve(int block_elems, int block_size, int heads, int blocks, unsigned threads) {
    std::vector<unsigned char> pool((size_t)blocks * block_elems * sizeof(T));
    for (;;) {
        switch (read_i32()) {
        case 0:
            return 0;
        case 1:
            attend<T>(pool, block_elems, block_size, heads, threads);
            break;
        case 2:
            std::fwrite(pool.data(), 1, pool.size(), stdout);
            std::fflush(stdout);
            break;
        default:
            fail("unknown command");
        }
    }
}

}  // namespace

int main() {
    const int dtype = read_i32(), block_elems = read_i32(), block_size = read_i32(), heads = read_i32(),
              blocks = read_i32(), threads = read_i32();
    if (block_elems <= 0 || block_size <= 0 || heads <= 0 || blocks <= 0 || threads <= 0) fail("bad header");
    switch (dtype) {
    case 0:
        return serve<float>(block_elems, block_size, heads, blocks, threads);
    case 1:
        return serve<__half>(block_elems, block_size, heads, blocks, threads);
    case 2:
        return serve<__nv_bfloat16>(block_elems, block_size, heads, blocks, threads);
    default:
        fail("unknown dtype");
    }
}
