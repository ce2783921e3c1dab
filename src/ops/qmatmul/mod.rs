//! Our quantized matmul on the CPU: `y = x · Wᵀ` for GGUF's hot weight types.
//!
//! Owns the CPU side of every projection of the forward whose weights are
//! Q4_0, Q4_1, Q8_0, Q4_K, Q5_K or Q6_K (Q4_K_M files mix Q4_K and Q6_K).
//! Other types keep candle's `QMatMul`.
//!
//! - [`PackedMatrix::pack`] repacks a GGUF tensor once at load: rows in groups
//!   of eight, interleaved so that eight output rows fill the lanes of one
//!   256-bit vector ([`pack`]).
//! - [`QuantActs`] quantizes the activations once per call, per row: int8 per
//!   32 values, or per 256 with sub-block sums for the K-quants ([`acts`]).
//! - [`PackedMatrix::matmul`] splits the row groups across threads; each
//!   unpacks its group once and runs the integer kernel over the activation
//!   rows four at a time (the tile of a prefill; decode is one row), so each
//!   weight byte is read once per call.
//!
//! Kernels: [`Isa::Avx2`] (AVX2 + FMA + F16C, x86-64-v3) and [`Isa::Portable`],
//! chosen at run time by [`Isa::detect`]; they give bit-identical results
//! (integer dot products, then the same float steps in the same order).
//!
//! Invariants: scratch memory (quantized activations, the unpacked group, the
//! transposed output) is kept per thread and reused from call to call; no
//! call allocates once the sizes have been seen.
//!
//! Counterpart: llama.cpp's `ggml-cpu` repack (`block_q4_0x8`, `block_q4_Kx8`)
//! and `sgemm.cpp` (tinyBLAS), and candle's `quantized::k_quants::matmul`,
//! whose results these match within the activation quantization's rounding.

mod acts;
#[cfg(target_arch = "x86_64")]
mod avx2;
mod format;
mod pack;
mod portable;

use std::cell::RefCell;

pub use acts::QuantActs;
pub use format::QuantKind;
pub use pack::{PackError, PackedMatrix, GROUP};

/// An instruction set our kernels have a path for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust: any CPU.
    Portable,
    /// AVX2, FMA and F16C (x86-64-v3).
    Avx2,
}

impl Isa {
    /// The fastest path this CPU runs.
    pub fn detect() -> Self {
        Self::available().into_iter().last().unwrap_or(Self::Portable)
    }

    /// Every path this CPU runs, slowest first (tests run them all).
    pub fn available() -> Vec<Self> {
        let mut v = vec![Self::Portable];
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
        {
            v.push(Self::Avx2);
        }
        v
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Portable => "portable",
            Self::Avx2 => "avx2",
        }
    }
}

/// `out_t` shared with the pool's workers, each writing its own range.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32, usize);

// SAFETY: workers write disjoint ranges (see `matmul_with`).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// # Safety
    /// No other live reference may overlap `[at, at+len)`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, at: usize, len: usize) -> &mut [f32] {
        assert!(at + len <= self.1, "range outside the output");
        std::slice::from_raw_parts_mut(self.0.add(at), len)
    }
}

/// Per-thread scratch: reused from call to call.
#[derive(Default)]
struct Scratch {
    acts: QuantActs,
    /// `[group][row][8]`: each group's outputs, before they are scattered to `[row][n]`.
    out_t: Vec<f32>,
    /// One group's unpacked quants.
    unpacked: Vec<u8>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    static UNPACK: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl PackedMatrix {
    /// `out[i·n + j] = Σ_k x[i·k_cols + k] · W[j, k]` for `t` rows of `x`, on the
    /// fastest path this CPU has.
    pub fn matmul(&self, x: &[f32], t: usize, out: &mut [f32]) {
        self.matmul_with(Isa::detect(), x, t, out)
    }

    /// As [`matmul`](Self::matmul) on a chosen path (an unavailable one runs the portable path).
    pub fn matmul_with(&self, isa: Isa, x: &[f32], t: usize, out: &mut [f32]) {
        let isa = if Isa::available().contains(&isa) {
            isa
        } else {
            Isa::Portable
        };
        assert_eq!(x.len(), t * self.k, "x is not t × k");
        assert_eq!(out.len(), t * self.n, "out is not t × n");
        if t == 0 {
            return;
        }
        SCRATCH.with(|cell| {
            // A call from inside another's worker (not done today) gets scratch of its own.
            let mut fresh = Scratch::default();
            let mut held = cell.try_borrow_mut();
            let s: &mut Scratch = match held.as_deref_mut() {
                Ok(s) => s,
                Err(_) => &mut fresh,
            };
            s.acts.quantize(self.kind, x, t, self.k);
            let groups = self.groups();
            // With one row and whole groups, `[group][1][8]` is `out` itself.
            let direct = t == 1 && self.n % GROUP == 0;
            if !direct {
                s.out_t.resize(groups * t * GROUP, 0.0);
            }
            let out_t: &mut [f32] = if direct { out } else { &mut s.out_t };
            let acts = &s.acts;
            let per_group = t * GROUP;
            let pool = candle_core::utils::barrier_pool();
            if groups <= 1 || candle_core::utils::get_num_threads() == 1 {
                self.groups_into(isa, 0, acts, out_t, &mut s.unpacked);
            } else {
                // Workers take ranges of groups from a shared cursor (candle's barrier pool:
                // spinning workers, so a decode step's many small matmuls start in
                // microseconds); each range's outputs are its own part of `out_t`.
                let shared = SharedOut(out_t.as_mut_ptr(), out_t.len());
                pool.execute_chunked(groups, |range| {
                    // SAFETY: ranges handed out by `execute_chunked` are disjoint, so each
                    // worker writes only `[range.start·t·8, range.end·t·8)`, inside `out_t`,
                    // which outlives the call (it returns after every worker is done).
                    let out = unsafe { shared.slice(range.start * per_group, range.len() * per_group) };
                    UNPACK.with(|u| match u.try_borrow_mut() {
                        Ok(mut u) => self.groups_into(isa, range.start, acts, out, &mut u),
                        Err(_) => self.groups_into(isa, range.start, acts, out, &mut Vec::new()),
                    })
                });
            }
            if !direct {
                for i in 0..t {
                    let row = &mut out[i * self.n..(i + 1) * self.n];
                    for (g, dst) in row.chunks_mut(GROUP).enumerate() {
                        let at = (g * t + i) * GROUP;
                        dst.copy_from_slice(&s.out_t[at..at + dst.len()]);
                    }
                }
            }
        })
    }

    /// Groups `first..` (as many as `out` holds, `t·8` values each) into `out`.
    fn groups_into(&self, isa: Isa, first: usize, acts: &QuantActs, out: &mut [f32], unpacked: &mut Vec<u8>) {
        let per_group = acts.t * GROUP;
        let qpg = self.qbytes_per_group();
        unpacked.resize(self.k * GROUP, 0);
        for (gi, out) in out.chunks_mut(per_group).enumerate() {
            let g = first + gi;
            let packed = &self.qs[g * qpg..(g + 1) * qpg];
            let w: &[u8] = if self.kind.bits() == 8 {
                packed
            } else {
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `Isa::Avx2` is only used where `Isa::available` found AVX2.
                    Isa::Avx2 => unsafe { avx2::unpack_group(self.kind, packed, unpacked) },
                    _ => pack::unpack_group_portable(self.kind, packed, unpacked),
                }
                unpacked
            };
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => self.avx2_group(g, w, acts, out),
                _ => portable::group(self, g, w, acts, out),
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn avx2_group(&self, g: usize, w: &[u8], acts: &QuantActs, out: &mut [f32]) {
        let mut i0 = 0;
        while i0 < acts.t {
            let r = (acts.t - i0).min(avx2::TILE);
            // SAFETY: AVX2, FMA and F16C were detected (`Isa::available`); `w` holds the
            // group's `k·8` unpacked quants and `out` its `t·8` outputs.
            unsafe {
                match (self.kind.is_super(), r) {
                    (false, 4) => avx2::block_tile::<4>(self, g, w, acts, i0, out),
                    (false, 3) => avx2::block_tile::<3>(self, g, w, acts, i0, out),
                    (false, 2) => avx2::block_tile::<2>(self, g, w, acts, i0, out),
                    (false, _) => avx2::block_tile::<1>(self, g, w, acts, i0, out),
                    (true, 4) => avx2::super_tile::<4>(self, g, w, acts, i0, out),
                    (true, 3) => avx2::super_tile::<3>(self, g, w, acts, i0, out),
                    (true, 2) => avx2::super_tile::<2>(self, g, w, acts, i0, out),
                    (true, _) => avx2::super_tile::<1>(self, g, w, acts, i0, out),
                }
            }
            i0 += r;
        }
    }
}

#[cfg(test)]
mod tests;
