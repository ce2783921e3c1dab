//! The AVX2 kernels (with FMA and F16C): a strip's sixteen rows in two 256-bit vectors.
//!
//! A decode's few rows read two strips as stored, widened as loaded (`vcvtph2ps`, or
//! BF16's shift), up to two rows a tile (8 sums); a prefill's rows read one strip at a
//! time widened once ([`Panel::widened`]), six rows a tile (12 sums, 2 weight vectors and
//! a broadcast of the 16 registers). The tile itself is `body`'s.

use std::arch::x86_64::*;

use super::body::{rows, stored, Vector, F32};
use super::Panel;

impl Vector for __m256 {
    const PER_STRIP: usize = 2;
    #[inline(always)]
    unsafe fn zero() -> Self {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        _mm256_set1_ps(v)
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        _mm256_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        _mm256_storeu_ps(p, self)
    }
    #[inline(always)]
    unsafe fn f16(p: *const u16) -> Self {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }
    #[inline(always)]
    unsafe fn bf16(p: *const u16) -> Self {
        let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
    }
    #[inline(always)]
    unsafe fn f32(p: *const f32) -> Self {
        _mm256_loadu_ps(p)
    }
}

/// The panel's strips against every activation row.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn panel(p: &Panel<'_>, widened: &mut Vec<f32>) {
    let mut s = 0;
    while s < p.strips {
        if p.widens_first() {
            let w = p.widened(s, 1, widened).as_ptr();
            rows::<__m256, F32, 1, 2, 6>(p, w, s);
            s += 1;
        } else if p.strips - s >= 2 {
            stored::<__m256, 2, 4, 2>(p, s);
            s += 2;
        } else {
            stored::<__m256, 1, 2, 2>(p, s);
            s += 1;
        }
    }
}
