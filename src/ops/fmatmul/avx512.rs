//! The AVX-512 kernels (F): a strip's sixteen rows in one 512-bit vector.
//!
//! A decode's few rows read four strips as stored, widening each column as it is loaded
//! (`vcvtph2ps`, or BF16's shift), up to four rows a tile (16 sums); a prefill's rows read
//! two strips at a time widened once ([`Panel::widened`]), eight rows a tile (16 sums, 2
//! weight vectors and a broadcast of the 32 registers). The tile itself is `body`'s.

use std::arch::x86_64::*;

use super::body::{rows, stored, Vector, F32};
use super::Panel;

impl Vector for __m512 {
    const PER_STRIP: usize = 1;
    #[inline(always)]
    unsafe fn zero() -> Self {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        _mm512_set1_ps(v)
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        _mm512_storeu_ps(p, self)
    }
    #[inline(always)]
    unsafe fn f16(p: *const u16) -> Self {
        _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
    }
    #[inline(always)]
    unsafe fn bf16(p: *const u16) -> Self {
        let h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p as *const __m256i));
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(h))
    }
    #[inline(always)]
    unsafe fn f32(p: *const f32) -> Self {
        _mm512_loadu_ps(p)
    }
}

/// The panel's strips against every activation row.
///
/// # Safety
/// The CPU must have AVX-512 F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn panel(p: &Panel<'_>, widened: &mut Vec<f32>) {
    let mut s = 0;
    while s < p.strips {
        let left = p.strips - s;
        if p.widens_first() {
            let count = left.min(2);
            let w = p.widened(s, count, widened).as_ptr();
            if count == 2 {
                rows::<__m512, F32, 2, 2, 8>(p, w, s);
            } else {
                rows::<__m512, F32, 1, 1, 8>(p, w, s);
            }
            s += count;
        } else if left >= 4 {
            stored::<__m512, 4, 4, 4>(p, s);
            s += 4;
        } else if left >= 2 {
            stored::<__m512, 2, 2, 4>(p, s);
            s += 2;
        } else {
            stored::<__m512, 1, 1, 4>(p, s);
            s += 1;
        }
    }
}
