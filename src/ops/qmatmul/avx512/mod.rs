//! The AVX-512 kernels (F + BW, with VNNI where present), chosen at run time.
//!
//! A 512-bit vector holds two groups of eight weight rows (lanes 0-7 group
//! `g`, lanes 8-15 group `g+1`), so each broadcast activation feeds sixteen
//! rows and a call's groups are handed to the threads in pairs; an odd last
//! group runs on the AVX2 kernel. With VNNI, `vpdpbusd` multiplies four
//! unsigned weight bytes by four signed activation bytes and adds them to
//! the 32-bit lane in one instruction (the K-quants then multiply each
//! sub-block's sum by its sub-scale with `vpmulld`); without it, the AVX2
//! kernel's `vpmaddubsw` + `vpmaddwd` steps at twice the width. Integer sums
//! are exact and the float steps are the portable kernel's, so every path
//! gives the same bits.
//!
//! The kernels' body (`body.rs`) is written once over the intrinsics it names
//! and compiled twice: in [`hw`] over `std::arch`, inside functions that
//! enable the features, and in tests in `emu` over plain-Rust ops with the
//! same names and meaning, so the body runs (and is checked against the
//! portable kernel) on machines without AVX-512 too.
//!
//! Counterpart: llama.cpp's `ggml-cpu` repack GEMMs under `__AVX512F__`, which
//! also take two 8-row blocks per 512-bit vector.

use super::acts::QuantActs;
use super::pack::PackedMatrix;

#[cfg(test)]
mod emu;

/// Activation rows per tile.
const TILE: usize = 4;

/// Which pair kernel runs: the CPU's, or (in tests) the emulated body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PairKernel {
    #[cfg(target_arch = "x86_64")]
    Hw { vnni: bool },
    #[cfg(test)]
    Emulated { vnni: bool },
}

impl PairKernel {
    /// Groups `g` and `g+1` (packed: `w`) against every activation row, into
    /// `out` (`t·8` values each); `unpacked` is scratch.
    ///
    /// # Safety
    /// `Hw` needs a CPU with the features its `Isa` names (`Isa::supported`).
    pub(super) unsafe fn run(
        self,
        m: &PackedMatrix,
        g: usize,
        acts: &QuantActs,
        out: (&mut [f32], &mut [f32]),
        unpacked: &mut Vec<u8>,
    ) {
        match self {
            #[cfg(target_arch = "x86_64")]
            Self::Hw { vnni: true } => hw::pair_vnni(m, g, acts, out, unpacked),
            #[cfg(target_arch = "x86_64")]
            Self::Hw { vnni: false } => hw::pair_bw(m, g, acts, out, unpacked),
            #[cfg(test)]
            Self::Emulated { vnni } => emu::run(vnni, m, g, acts, out, unpacked),
        }
    }
}

/// The kernels over `std::arch`.
#[cfg(target_arch = "x86_64")]
mod hw {
    #![allow(clippy::needless_range_loop)]

    use std::arch::x86_64::*;

    use super::super::format::QuantKind;
    use super::super::pack::{PackedMatrix, GROUP};
    use super::super::QuantActs;
    use super::TILE;

    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512i {
        _mm512_loadu_si512(p as *const _)
    }

    #[inline(always)]
    unsafe fn store(p: *mut u8, v: __m512i) {
        _mm512_storeu_si512(p as *mut _, v)
    }

    /// 32 bytes from `p0` (lanes 0-7), 32 from `p1` (lanes 8-15).
    #[inline(always)]
    unsafe fn load2(p0: *const u8, p1: *const u8) -> __m512i {
        let lo = _mm256_loadu_si256(p0 as *const __m256i);
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), _mm256_loadu_si256(p1 as *const __m256i))
    }

    /// A 16-byte table in each 128-bit lane (for `vpshufb`).
    #[inline(always)]
    unsafe fn load_table(t: &[i8; 16]) -> __m512i {
        _mm512_broadcast_i32x4(_mm_loadu_si128(t.as_ptr() as *const __m128i))
    }

    /// Eight f16 from `p0`, eight from `p1`, as f32.
    #[inline(always)]
    unsafe fn load_f16x16(p0: *const u16, p1: *const u16) -> __m512 {
        let lo = _mm_loadu_si128(p0 as *const __m128i);
        let hi = _mm_loadu_si128(p1 as *const __m128i);
        _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi))
    }

    /// Sixteen int8 from `p0`, sixteen from `p1`, as int16.
    #[inline(always)]
    unsafe fn load_i8x16x2_i16(p0: *const i8, p1: *const i8) -> __m512i {
        let lo = _mm_loadu_si128(p0 as *const __m128i);
        let hi = _mm_loadu_si128(p1 as *const __m128i);
        _mm512_cvtepi8_epi16(_mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi))
    }

    /// Lanes 0-7 to `o0`, 8-15 to `o1`.
    #[inline(always)]
    unsafe fn store_halves(v: __m512, o0: *mut f32, o1: *mut f32) {
        _mm256_storeu_ps(o0, _mm512_castps512_ps256(v));
        _mm256_storeu_ps(o1, _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))));
    }

    include!("body.rs");

    /// # Safety
    /// The CPU must have AVX-512 F, BW and VNNI, AVX2, FMA and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn pair_vnni(
        m: &PackedMatrix,
        g: usize,
        acts: &QuantActs,
        out: (&mut [f32], &mut [f32]),
        unpacked: &mut Vec<u8>,
    ) {
        pair::<true>(m, g, acts, out, unpacked)
    }

    /// # Safety
    /// The CPU must have AVX-512 F and BW, AVX2, FMA and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    pub(super) unsafe fn pair_bw(
        m: &PackedMatrix,
        g: usize,
        acts: &QuantActs,
        out: (&mut [f32], &mut [f32]),
        unpacked: &mut Vec<u8>,
    ) {
        pair::<false>(m, g, acts, out, unpacked)
    }
}
