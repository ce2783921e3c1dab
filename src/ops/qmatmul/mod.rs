//! Our quantized matmul on the CPU: `y = x · Wᵀ` for GGUF's hot weight types.
//!
//! Owns the CPU side of every projection of the forward whose weights are
//! Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K (Q4_K_M files mix Q4_K
//! and Q6_K, with Q5_0 and Q8_0 where a row is not a multiple of 256), and
//! Q8_0 whose values all lie in IQ4_NL's or MXFP4's table (what IQ4_NL, IQ4_XS
//! and MXFP4 become at load), kept as 4-bit indices ([`narrow_q8_0`]), and IQ4_XS
//! in its own blocks where the loader carries them ([`QuantKind::Iq4Xs`]).
//! Other types keep candle's `QMatMul`.
//!
//! - [`PackedMatrix::pack`] repacks a GGUF tensor once at load: rows in groups
//!   of eight, interleaved so that eight output rows fill the lanes of one
//!   256-bit vector (`pack`).
//! - [`QuantActs`] quantizes the activations once per call, per row: int8 per
//!   32 values, or per 256 with sub-block sums for the K-quants (`acts`).
//! - [`PackedMatrix::matmul`] splits the row groups across threads
//!   ([`crate::ops::par`]); each
//!   unpacks its group once and runs the integer kernel over the activation
//!   rows four at a time (the tile of a prefill; decode is one row), so each
//!   weight byte is read once per call.
//!
//! Kernels: [`Isa::Avx512Vnni`] and [`Isa::Avx512`] (two groups per 512-bit
//! vector, `avx512`), [`Isa::AvxVnni`] and [`Isa::Avx2`] (AVX2 + FMA + F16C,
//! x86-64-v3, with AVX-VNNI's `vpdpbusd` or without, `avx2`) and
//! [`Isa::Portable`], chosen at run time by [`Isa::detect`] whatever the build
//! targets; they give bit-identical results (exact integer dot products, then
//! the same float steps in the same order). For the pair kernels, `pack` lays
//! two groups' blocks side by side ([`Layout::Pairs`]), so that decode, bound by
//! memory, reads the matrix as one stream; on K-quants the AVX-512 path without
//! VNNI is the faster one (`Path::for_kind`).
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
mod avx512;
mod format;
mod pack;
mod portable;

use std::cell::RefCell;

pub use acts::{round_acts, QuantActs};
pub use format::{narrow_q8_0, QuantKind, FP4, IQ2, IQ3S, IQ3XXS, IQ4NL};
pub use pack::{Layout, PackError, PackedMatrix, GROUP};

use crate::ops::par::{with_scratch, SharedMut};

/// An instruction set our kernels have a path for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust: any CPU.
    Portable,
    /// AVX2, FMA and F16C (x86-64-v3).
    Avx2,
    /// As [`Isa::Avx2`], with AVX-VNNI (Intel Alder Lake and later desktops, AMD Zen 5).
    AvxVnni,
    /// AVX-512 F and BW, with AVX2, FMA and F16C (Skylake-X).
    Avx512,
    /// As [`Isa::Avx512`], with VNNI and VL (Cascade Lake, Ice Lake and later; AMD Zen 4 and later).
    Avx512Vnni,
}

impl Isa {
    /// The fastest path this CPU runs.
    pub fn detect() -> Self {
        [Self::Avx512Vnni, Self::Avx512, Self::AvxVnni, Self::Avx2]
            .into_iter()
            .find(|i| i.supported())
            .unwrap_or(Self::Portable)
    }

    /// Whether this CPU runs this path (std caches the CPUID answers).
    pub fn supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::is_x86_feature_detected as has;
            let avx2 = has!("avx2") && has!("fma") && has!("f16c");
            let avx512 = avx2 && has!("avx512f") && has!("avx512bw");
            match self {
                Self::Portable => true,
                Self::Avx2 => avx2,
                Self::AvxVnni => avx2 && has!("avxvnni"),
                Self::Avx512 => avx512,
                Self::Avx512Vnni => avx512 && has!("avx512vnni") && has!("avx512vl"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Self::Portable
        }
    }

    /// Every path this CPU runs, slowest first (tests run them all).
    pub fn available() -> Vec<Self> {
        [Self::Portable, Self::Avx2, Self::AvxVnni, Self::Avx512, Self::Avx512Vnni]
            .into_iter()
            .filter(|i| i.supported())
            .collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Portable => "portable",
            Self::Avx2 => "avx2",
            Self::AvxVnni => "avx-vnni",
            Self::Avx512 => "avx512",
            Self::Avx512Vnni => "avx512-vnni",
        }
    }
}

/// How a call's groups are computed: one at a time, or in pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2(avx2::Dot),
    Pairs(avx512::PairKernel),
}

impl Path {
    /// `isa`'s path (the portable one where this CPU lacks it).
    fn of(isa: Isa) -> Self {
        if !isa.supported() {
            return Self::Portable;
        }
        match isa {
            Isa::Portable => Self::Portable,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => Self::Avx2(avx2::Dot::Madd),
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => Self::Avx2(avx2::Dot::Vnni),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => Self::Pairs(avx512::PairKernel::Hw { vnni: false }),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => Self::Pairs(avx512::PairKernel::Hw { vnni: true }),
            #[cfg(not(target_arch = "x86_64"))]
            _ => Self::Portable,
        }
    }

    /// Groups a unit of the threads' work covers.
    fn span(self) -> usize {
        match self {
            Self::Pairs(_) => 2,
            _ => 1,
        }
    }

    /// The path of a pair kernel's odd last group (bit-identical to the pair's).
    fn single(self) -> Self {
        match self {
            #[cfg(target_arch = "x86_64")]
            Self::Pairs(avx512::PairKernel::Hw { vnni: true }) => Self::Avx2(avx2::Dot::Vnni512),
            #[cfg(target_arch = "x86_64")]
            Self::Pairs(avx512::PairKernel::Hw { vnni: false }) => Self::Avx2(avx2::Dot::Madd),
            #[cfg(test)]
            Self::Pairs(avx512::PairKernel::Emulated { .. }) => Self::Portable,
            other => other,
        }
    }
}

impl Path {
    /// The path a call on `kind`'s weights takes. AVX-512 VNNI's `vpdpbusd`
    /// saves a step per chunk, but the K-quants then scale each sub-block's
    /// int32 sum with `vpmulld`, where the path without it folds the sub-scale
    /// into its `vpmaddwd`; measured on a Zen 4 core
    /// (`examples/matmul_bandwidth.rs`, Q4_K 768 wide, one thread), the VNNI
    /// kernel is the slower on K-quants at every row count (26 against 38 GB/s
    /// at one row, 14.1 against 12.6 ms at 64) and the faster on the others
    /// (Q8_0 four rows: 19.8 against 17.2 GB/s). Both give the same bits.
    fn for_kind(self, kind: QuantKind) -> Self {
        match self {
            #[cfg(target_arch = "x86_64")]
            Self::Pairs(avx512::PairKernel::Hw { vnni: true }) if kind.is_super() => {
                Self::Pairs(avx512::PairKernel::Hw { vnni: false })
            }
            other => other,
        }
    }
}

/// Per-thread scratch: reused from call to call.
#[derive(Default)]
struct Scratch {
    acts: QuantActs,
    /// `[group][row][8]`: each group's outputs, before they are scattered to `[row][n]`.
    out_t: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    /// One group's unpacked quants (on each thread of the pool).
    static UNPACK: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// One matmul ready to run: its activations quantized, its output laid out; the pool's
/// threads take ranges of its units ([`Prepared::run`]).
struct Prepared<'a> {
    matrix: &'a PackedMatrix,
    path: Path,
    acts: &'a QuantActs,
    /// Groups, or pairs of groups for the pair kernels.
    units: usize,
    /// `[group][t][8]` scratch when the groups are not `out`'s own layout.
    staged: Option<SharedMut<'a, f32>>,
    out: SharedMut<'a, f32>,
}

impl Prepared<'_> {
    /// Computes units `units` (disjoint from every other caller's).
    fn run(&self, units: std::ops::Range<usize>) {
        let m = self.matrix;
        let (span, groups, n) = (self.path.span(), m.groups(), m.n);
        let per_group = self.acts.t * GROUP;
        let first = units.start * span;
        let len = (units.end * span).min(groups) - first;
        let target = self.staged.as_ref().unwrap_or(&self.out);
        // SAFETY: units are handed out disjointly, so each part is one worker's (of `out_t`
        // when staged, else of `out`, which no one else then touches).
        let part = unsafe { target.part(first * per_group, len * per_group) };
        with_scratch(&UNPACK, |u| m.groups_into(self.path, first, self.acts, part, u));
        if self.staged.is_none() {
            return;
        }
        for (gi, group) in part.chunks_exact(per_group).enumerate() {
            let col = (first + gi) * GROUP;
            let w = GROUP.min(n - col);
            for (i, src) in group.chunks_exact(GROUP).enumerate() {
                // SAFETY: columns `col .. col + w` of every row belong to group
                // `first + gi`, which only this worker computes.
                let dst = unsafe { self.out.part(i * n + col, w) };
                // A whole group as a fixed-size copy (inlined, not a `memcpy` call).
                match <&mut [f32; GROUP]>::try_from(&mut *dst) {
                    Ok(dst) => dst.copy_from_slice(src),
                    Err(_) => dst.copy_from_slice(&src[..w]),
                }
            }
        }
    }
}

/// One product of [`matmul_many`]: `out = x · matrixᵀ` over `t` rows.
pub struct MatmulJob<'a> {
    pub matrix: &'a PackedMatrix,
    pub x: &'a [f32],
    pub t: usize,
    pub out: &'a mut [f32],
}

thread_local! {
    /// Per-job scratch of [`matmul_many`] (on the calling thread).
    static MANY: RefCell<Vec<Scratch>> = const { RefCell::new(Vec::new()) };
}

/// Several matmuls as one split of work: every job's units in one list that the pool's
/// threads take ranges of, so small products (a mixture of experts' few rows each) cost one
/// wake-up of the pool, not one each. Each job's numbers are those [`PackedMatrix::matmul`]
/// gives it: the same kernels on the same quantized activations.
pub fn matmul_many(jobs: &mut [MatmulJob<'_>]) {
    for j in jobs.iter() {
        assert_eq!(j.x.len(), j.t * j.matrix.k, "x is not t × k");
        assert_eq!(j.out.len(), j.t * j.matrix.n, "out is not t × n");
    }
    with_scratch(&MANY, |scratch| {
        if scratch.len() < jobs.len() {
            scratch.resize_with(jobs.len(), Scratch::default);
        }
        let isa = Isa::detect();
        let prepared: Vec<Prepared<'_>> = jobs
            .iter_mut()
            .zip(scratch.iter_mut())
            .filter(|(j, _)| j.t > 0)
            .map(|(j, s)| {
                let path = Path::of(isa).for_kind(j.matrix.kind);
                j.matrix.prepare(path, j.x, j.t, s, &mut *j.out)
            })
            .collect();
        // Job i's units are `starts[i] .. starts[i + 1]` of the whole list.
        let mut starts = vec![0usize];
        for p in &prepared {
            starts.push(starts[starts.len() - 1] + p.units);
        }
        let total = starts[starts.len() - 1];
        crate::ops::par::for_ranges(total, |range| {
            for (i, p) in prepared.iter().enumerate() {
                let (lo, hi) = (range.start.max(starts[i]), range.end.min(starts[i + 1]));
                if lo < hi {
                    p.run(lo - starts[i]..hi - starts[i]);
                }
            }
        });
        drop(prepared);
        // Decode's few rows keep their scratch for the next call; a prefill's (hundreds of
        // jobs' staged outputs at once) is given back rather than held for good.
        if jobs.iter().map(|j| j.t).sum::<usize>() > MANY_KEEP_ROWS {
            scratch.clear();
        }
    })
}

/// [`matmul_many`] keeps its per-job scratch between calls up to this many rows in all.
const MANY_KEEP_ROWS: usize = 64;

impl PackedMatrix {
    /// `out[i·n + j] = Σ_k x[i·k_cols + k] · W[j, k]` for `t` rows of `x`, on the
    /// fastest path this CPU has.
    pub fn matmul(&self, x: &[f32], t: usize, out: &mut [f32]) {
        self.matmul_on(Path::of(Isa::detect()).for_kind(self.kind), x, t, out)
    }

    /// As [`matmul`](Self::matmul) on a chosen path, its own kernel whatever the
    /// weights' kind (an unavailable one runs the portable path).
    pub fn matmul_with(&self, isa: Isa, x: &[f32], t: usize, out: &mut [f32]) {
        self.matmul_on(Path::of(isa), x, t, out)
    }

    fn matmul_on(&self, path: Path, x: &[f32], t: usize, out: &mut [f32]) {
        assert_eq!(x.len(), t * self.k, "x is not t × k");
        assert_eq!(out.len(), t * self.n, "out is not t × n");
        if t == 0 {
            return;
        }
        with_scratch(&SCRATCH, |s| {
            let job = self.prepare(path, x, t, s, out);
            crate::ops::par::for_ranges(job.units, |units| job.run(units));
        })
    }

    /// Quantizes `x` into `scratch` and lays out where the groups go (see [`Prepared`]).
    fn prepare<'a>(
        &'a self,
        path: Path,
        x: &[f32],
        t: usize,
        scratch: &'a mut Scratch,
        out: &'a mut [f32],
    ) -> Prepared<'a> {
        let Scratch { acts, out_t } = scratch;
        acts.quantize(self.kind, x, t, self.k);
        let groups = self.groups();
        // With one row and whole groups, `[group][1][8]` is `out` itself; otherwise each
        // worker computes its groups into its part of `out_t`, then moves them to their
        // columns of `out` while they are in L1.
        let direct = t == 1 && self.n.is_multiple_of(GROUP);
        let staged = (!direct).then(|| {
            out_t.resize(groups * t * GROUP, 0.0);
            SharedMut::new(out_t.as_mut_slice())
        });
        Prepared {
            matrix: self,
            path,
            acts,
            // Ranges of units (a group, or a pair of them) go to the pool's threads.
            units: groups.div_ceil(path.span()),
            staged,
            out: SharedMut::new(out),
        }
    }

    /// Groups `first..` (as many as `out` holds, `t·8` values each) into `out`.
    fn groups_into(&self, path: Path, first: usize, acts: &QuantActs, out: &mut [f32], unpacked: &mut Vec<u8>) {
        let per_group = acts.t * GROUP;
        let count = out.len() / per_group;
        let mut gi = 0;
        while gi < count {
            let g = first + gi;
            let out = &mut out[gi * per_group..];
            match path {
                Path::Pairs(kernel) if gi + 1 < count => {
                    let (o0, o1) = out[..2 * per_group].split_at_mut(per_group);
                    // SAFETY: a `Hw` kernel is only in a `Path` where `Isa::supported` found
                    // its features; both groups exist and `o0`, `o1` hold their outputs.
                    unsafe { kernel.run(self, g, acts, (o0, o1), unpacked) };
                    gi += 2;
                }
                _ => {
                    self.group_into(path.single(), g, acts, &mut out[..per_group], unpacked);
                    gi += 1;
                }
            }
        }
    }

    /// Group `g` against every activation row, into `out` (`t·8` values).
    fn group_into(&self, path: Path, g: usize, acts: &QuantActs, out: &mut [f32], unpacked: &mut Vec<u8>) {
        match path {
            #[cfg(target_arch = "x86_64")]
            Path::Avx2(dot) => {
                // SAFETY: `Path::Avx2` is only used where `Isa::supported` found AVX2, FMA
                // and F16C (and AVX-VNNI for `Dot::Vnni`); `out` holds the group's outputs.
                unsafe {
                    if self.unpacks_in_registers(acts.t) {
                        avx2::group::<true>(dot, self, g, &[], acts, out)
                    } else {
                        unpacked.resize(self.k * GROUP, 0);
                        avx2::unpack_group(self, g, unpacked);
                        avx2::group::<false>(dot, self, g, unpacked, acts, out)
                    }
                }
            }
            _ => {
                unpacked.resize(self.k * GROUP, 0);
                pack::unpack_group_portable(self, g, unpacked);
                pack::look_up(self.kind, unpacked);
                portable::group(self, g, unpacked, acts, out)
            }
        }
    }
}

/// Up to this many activation rows, blocks are unpacked in registers as the kernel goes.
const FUSED_MAX_ROWS: usize = 4;

impl PackedMatrix {
    /// Whether a call over `t` activation rows unpacks each block in registers as
    /// the kernel goes (a few rows, as in decode; 8-bit quants, which are stored
    /// unpacked), rather than a group once beforehand, reused by every tile of rows
    /// (a prefill). The same on every SIMD path.
    fn unpacks_in_registers(&self, t: usize) -> bool {
        t <= FUSED_MAX_ROWS || self.kind.bits() == 8
    }
}

#[cfg(test)]
mod tests;
