//! Our float-weight matmul on the CPU: `y = x · Wᵀ` for GGUF's F16, BF16 and F32 weights.
//!
//! Owns the CPU side of every projection whose weights a GGUF stores as F16 or BF16: the
//! files people convert from a checkpoint first (and embedding models ship as). It takes
//! F32 too, but a model's F32 matrices keep candle's (`model::linear::float_kind_of`). candle's `QMatMul` widened such a weight to f32 when the model
//! loaded (twice an F16 file's size in RAM, and twice the bytes each decode step reads)
//! and ran it through `gemm` on 256-bit vectors; here the weights stay as the file stores
//! them and are widened in registers as the kernel goes (F16C's `vcvtph2ps`, a shift for
//! BF16), or once per call into a per-thread panel for a prefill's many rows.
//!
//! - [`FloatMatrix::new`] lays a GGUF tensor out once at load: rows in strips of
//!   [`STRIP`] (16), each strip column by column, so that one column of a strip is one
//!   512-bit vector of f32 (two of 256 bits) across sixteen output rows.
//! - [`FloatMatrix::matmul`] hands panels of [`PANEL`] strips to the threads
//!   ([`crate::ops::par`]); each broadcasts an activation value and multiplies-adds it
//!   into every row of its strips (an outer product per column), for a tile of
//!   activation rows at a time.
//!
//! Invariant: every output element is the same chain of fused multiply-adds, `acc =
//! fma(x[c], w[c], acc)` for `c = 0, 1, … k−1` from `acc = 0`, on every path
//! ([`Isa::Avx512`]'s, [`Isa::Avx2`]'s, the portable one) and for any number of rows in a
//! call, so the paths give the same bits and a token's output does not depend on the
//! batch it ran in (what the prefix cache relies on: a prompt computed in one chunk or
//! several gives the same K/V).
//!
//! Counterpart: llama.cpp's `ggml_vec_dot_f16` and `llamafile_sgemm` (tinyBLAS) for F16
//! and BF16 weights (which round the activations to the weights' type first; we keep them
//! f32), and candle's `QMatMul` over a dequantized tensor.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod body;
mod portable;

use std::cell::RefCell;

use half::{bf16, f16};

use crate::ops::par::{for_ranges, with_scratch, SharedMut};
use crate::ops::qmatmul::Isa;

/// Output rows a strip holds (one 512-bit vector of f32).
pub const STRIP: usize = 16;
/// Strips a unit of the threads' work covers.
pub const PANEL: usize = 4;
/// Up to this many activation rows, a kernel widens the weights as it reads them; past it,
/// each pair of strips is widened once into the thread's panel and every tile reads that.
const DIRECT_ROWS: usize = 4;

/// How a GGUF stores an unquantized matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FloatKind {
    F32,
    F16,
    Bf16,
}

impl FloatKind {
    /// Bytes of one value.
    pub fn size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
        }
    }
}

/// Why a matrix cannot be laid out (the caller keeps candle's matmul).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FloatPackError {
    #[error("{kind:?}: an empty {n}×{k} matrix")]
    Empty { kind: FloatKind, n: usize, k: usize },
    #[error("{kind:?}: {got} bytes for a {n}×{k} matrix, expected {want}")]
    Bytes {
        kind: FloatKind,
        n: usize,
        k: usize,
        got: usize,
        want: usize,
    },
}

/// The values, as the file stores them.
#[derive(Debug, Clone)]
enum Values {
    /// F16 or BF16 bits.
    Half(Vec<u16>),
    F32(Vec<f32>),
}

/// A `[n, k]` float weight matrix laid out in strips for our kernels.
#[derive(Debug, Clone)]
pub struct FloatMatrix {
    kind: FloatKind,
    n: usize,
    k: usize,
    /// `strips × k × STRIP` values: row `r`, column `c` at `((r / 16)·k + c)·16 + r % 16`;
    /// the rows past `n` in the last strip are zero.
    values: Values,
}

impl FloatMatrix {
    /// Lays out `n` rows of `k` values of `kind`, given as the GGUF's little-endian bytes in
    /// row order.
    pub fn new(kind: FloatKind, raw: &[u8], n: usize, k: usize) -> Result<Self, FloatPackError> {
        if n == 0 || k == 0 {
            return Err(FloatPackError::Empty { kind, n, k });
        }
        let want = n * k * kind.size();
        if raw.len() != want {
            return Err(FloatPackError::Bytes {
                kind,
                n,
                k,
                got: raw.len(),
                want,
            });
        }
        let len = n.div_ceil(STRIP) * k * STRIP;
        let at = |r: usize, c: usize| ((r / STRIP) * k + c) * STRIP + r % STRIP;
        let values = match kind {
            FloatKind::F32 => {
                let mut v = vec![0f32; len];
                for (i, b) in raw.chunks_exact(4).enumerate() {
                    v[at(i / k, i % k)] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
                Values::F32(v)
            }
            FloatKind::F16 | FloatKind::Bf16 => {
                let mut v = vec![0u16; len];
                for (i, b) in raw.chunks_exact(2).enumerate() {
                    v[at(i / k, i % k)] = u16::from_le_bytes([b[0], b[1]]);
                }
                Values::Half(v)
            }
        };
        Ok(Self { kind, n, k, values })
    }

    pub fn kind(&self) -> FloatKind {
        self.kind
    }

    /// Output rows (`n`).
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Input columns (`k`).
    pub fn cols(&self) -> usize {
        self.k
    }

    fn strips(&self) -> usize {
        self.n.div_ceil(STRIP)
    }

    /// Bytes this matrix takes in memory (the file's, plus the last strip's padding).
    pub fn bytes(&self) -> usize {
        match &self.values {
            Values::Half(v) => v.len() * 2,
            Values::F32(v) => v.len() * 4,
        }
    }

    /// Appends row `r`'s bytes as the GGUF stores them (the bytes [`new`](Self::new) was
    /// given for it), so a tied embedding can look its rows up here.
    pub fn row_gguf(&self, r: usize, out: &mut Vec<u8>) {
        let (s, lane) = (r / STRIP, r % STRIP);
        let base = s * self.k * STRIP + lane;
        match &self.values {
            Values::Half(v) => (0..self.k).for_each(|c| out.extend_from_slice(&v[base + c * STRIP].to_le_bytes())),
            Values::F32(v) => (0..self.k).for_each(|c| out.extend_from_slice(&v[base + c * STRIP].to_le_bytes())),
        }
    }

    /// `out[i·n + j] = Σ_c x[i·k + c] · W[j, c]` for `t` rows of `x`, on the fastest path
    /// this CPU has.
    pub fn matmul(&self, x: &[f32], t: usize, out: &mut [f32]) {
        self.matmul_with(Isa::detect(), x, t, out)
    }

    /// As [`matmul`](Self::matmul) on a chosen path (one this CPU lacks runs the portable
    /// path); every path gives the same bits.
    pub fn matmul_with(&self, isa: Isa, x: &[f32], t: usize, out: &mut [f32]) {
        assert_eq!(x.len(), t * self.k, "x is not t × k");
        assert_eq!(out.len(), t * self.n, "out is not t × n");
        if t == 0 {
            return;
        }
        let path = Path::of(isa);
        let out = SharedMut::new(out);
        let panels = self.strips().div_ceil(PANEL);
        for_ranges(panels, |range| {
            with_scratch(&WIDENED, |widened| {
                for p in range {
                    self.panel(path, p, x, t, &out, widened);
                }
            })
        });
    }

    /// Panel `p`'s columns of every output row.
    fn panel(&self, path: Path, p: usize, x: &[f32], t: usize, out: &SharedMut<'_, f32>, widened: &mut Vec<f32>) {
        let first = p * PANEL;
        let strips = PANEL.min(self.strips() - first);
        let panel = Panel {
            m: self,
            first,
            strips,
            x,
            t,
            out,
        };
        match path {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Path::Avx512` is only chosen where `Isa::supported` found AVX-512 F.
            Path::Avx512 => unsafe { avx512::panel(&panel, widened) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Path::Avx2` is only chosen where `Isa::supported` found AVX2, FMA, F16C.
            Path::Avx2 => unsafe { avx2::panel(&panel, widened) },
            Path::Portable => portable::panel(&panel, widened),
        }
    }
}

thread_local! {
    /// Strips widened to f32 for a prefill's tiles (on each thread of the pool).
    static WIDENED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Which kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Path {
    fn of(isa: Isa) -> Self {
        if !isa.supported() {
            return Self::Portable;
        }
        match isa {
            Isa::Portable => Self::Portable,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::AvxVnni => Self::Avx2,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 | Isa::Avx512Vnni => Self::Avx512,
            #[cfg(not(target_arch = "x86_64"))]
            _ => Self::Portable,
        }
    }
}

/// One unit of work: strips `first .. first + strips` against every activation row.
struct Panel<'a> {
    m: &'a FloatMatrix,
    first: usize,
    strips: usize,
    x: &'a [f32],
    t: usize,
    out: &'a SharedMut<'a, f32>,
}

/// Where a kernel reads a run of strips from: the matrix as stored, or widened.
#[derive(Clone, Copy)]
enum Source<'a> {
    F16(&'a [u16]),
    Bf16(&'a [u16]),
    F32(&'a [f32]),
}

impl<'a> Panel<'a> {
    /// Strips `s .. s + count` of the panel as stored (each `k × 16` values).
    fn stored(&self, s: usize, count: usize) -> Source<'a> {
        let len = self.m.k * STRIP;
        let range = (self.first + s) * len..(self.first + s + count) * len;
        match (&self.m.values, self.m.kind) {
            (Values::F32(v), _) => Source::F32(&v[range]),
            (Values::Half(v), FloatKind::Bf16) => Source::Bf16(&v[range]),
            (Values::Half(v), _) => Source::F16(&v[range]),
        }
    }

    /// Strips `s .. s + count` as f32: the stored ones for an F32 matrix, else widened
    /// (exactly) into `widened`.
    fn widened<'w>(&self, s: usize, count: usize, widened: &'w mut Vec<f32>) -> &'w [f32]
    where
        'a: 'w,
    {
        match self.stored(s, count) {
            Source::F32(v) => v,
            Source::F16(v) => {
                widened.clear();
                widened.extend(v.iter().map(|&b| f16::from_bits(b).to_f32()));
                widened
            }
            Source::Bf16(v) => {
                widened.clear();
                widened.extend(v.iter().map(|&b| bf16::from_bits(b).to_f32()));
                widened
            }
        }
    }

    /// Writes a tile's sums: `sums[i][g]` is activation row `row + i`'s outputs for strip
    /// `s + g` of the panel (the lanes past `n` dropped).
    fn store<const T: usize, const G: usize>(&self, row: usize, s: usize, sums: &[[[f32; STRIP]; G]; T]) {
        let n = self.m.n;
        for (i, row_sums) in sums.iter().enumerate() {
            for (g, lanes) in row_sums.iter().enumerate() {
                let col = (self.first + s + g) * STRIP;
                let w = STRIP.min(n - col);
                // SAFETY: columns `col .. col + w` belong to this panel, which only this
                // worker computes; rows are the call's own.
                let dst = unsafe { self.out.part((row + i) * n + col, w) };
                dst.copy_from_slice(&lanes[..w]);
            }
        }
    }

    /// Whether this call's tiles read widened strips (a prefill's many rows) rather than
    /// widening as they go (a decode's few).
    fn widens_first(&self) -> bool {
        self.t > DIRECT_ROWS
    }
}

#[cfg(test)]
mod tests;
