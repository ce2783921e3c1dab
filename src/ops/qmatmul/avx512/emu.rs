//! The AVX-512 kernels' body over plain-Rust stand-ins for the intrinsics it
//! names (tests only): each does what Intel's manual says the instruction
//! does, lane by lane, so the body's indexing, lane order and integer steps
//! are checked against the portable kernel on any machine.

#![allow(non_camel_case_types, clippy::needless_range_loop, unused_unsafe)]

use super::super::format::QuantKind;
use super::super::pack::{PackedMatrix, GROUP};
use super::super::QuantActs;
use super::TILE;

/// 64 bytes, as a 512-bit integer register.
#[derive(Clone, Copy)]
pub struct __m512i([u8; 64]);

/// Sixteen f32, as a 512-bit float register.
#[derive(Clone, Copy)]
pub struct __m512([f32; 16]);

type __mmask64 = u64;

impl __m512i {
    fn i8(&self, i: usize) -> i32 {
        self.0[i] as i8 as i32
    }
    fn u8(&self, i: usize) -> i32 {
        self.0[i] as i32
    }
    fn i16(&self, i: usize) -> i32 {
        i16::from_le_bytes([self.0[2 * i], self.0[2 * i + 1]]) as i32
    }
    fn i32(&self, i: usize) -> i32 {
        i32::from_le_bytes(self.0[4 * i..4 * i + 4].try_into().expect("4 bytes"))
    }
    fn from_i16(f: impl Fn(usize) -> i32) -> Self {
        let mut v = [0u8; 64];
        for i in 0..32 {
            v[2 * i..2 * i + 2].copy_from_slice(&(f(i) as i16).to_le_bytes());
        }
        Self(v)
    }
    fn from_i32(f: impl Fn(usize) -> i32) -> Self {
        let mut v = [0u8; 64];
        for i in 0..16 {
            v[4 * i..4 * i + 4].copy_from_slice(&f(i).to_le_bytes());
        }
        Self(v)
    }
}

fn sat16(v: i32) -> i32 {
    v.clamp(i16::MIN as i32, i16::MAX as i32)
}

fn _mm512_setzero_si512() -> __m512i {
    __m512i([0; 64])
}
fn _mm512_setzero_ps() -> __m512 {
    __m512([0.0; 16])
}
fn _mm512_set1_epi8(a: i8) -> __m512i {
    __m512i([a as u8; 64])
}
fn _mm512_set1_epi16(a: i16) -> __m512i {
    __m512i::from_i16(|_| a as i32)
}
fn _mm512_set1_epi32(a: i32) -> __m512i {
    __m512i::from_i32(|_| a)
}
fn _mm512_set1_ps(a: f32) -> __m512 {
    __m512([a; 16])
}
fn _mm512_xor_si512(a: __m512i, b: __m512i) -> __m512i {
    __m512i(std::array::from_fn(|i| a.0[i] ^ b.0[i]))
}
fn _mm512_sub_epi32(a: __m512i, b: __m512i) -> __m512i {
    __m512i::from_i32(|i| a.i32(i).wrapping_sub(b.i32(i)))
}
fn _mm512_and_si512(a: __m512i, b: __m512i) -> __m512i {
    __m512i(std::array::from_fn(|i| a.0[i] & b.0[i]))
}
fn _mm512_or_si512(a: __m512i, b: __m512i) -> __m512i {
    __m512i(std::array::from_fn(|i| a.0[i] | b.0[i]))
}
fn _mm512_srli_epi16<const N: u32>(a: __m512i) -> __m512i {
    __m512i::from_i16(|i| if N > 15 { 0 } else { ((a.i16(i) as u16) >> N) as i32 })
}
fn _mm512_slli_epi16<const N: u32>(a: __m512i) -> __m512i {
    __m512i::from_i16(|i| if N > 15 { 0 } else { ((a.i16(i) as u16) << N) as i32 })
}
fn _mm512_slli_epi32<const N: u32>(a: __m512i) -> __m512i {
    __m512i::from_i32(|i| if N > 31 { 0 } else { ((a.i32(i) as u32) << N) as i32 })
}
fn _mm512_srai_epi32<const N: u32>(a: __m512i) -> __m512i {
    __m512i::from_i32(|i| a.i32(i) >> N.min(31))
}
fn _mm512_add_epi16(a: __m512i, b: __m512i) -> __m512i {
    __m512i::from_i16(|i| a.i16(i).wrapping_add(b.i16(i)))
}
fn _mm512_add_epi32(a: __m512i, b: __m512i) -> __m512i {
    __m512i::from_i32(|i| a.i32(i).wrapping_add(b.i32(i)))
}
fn _mm512_mullo_epi32(a: __m512i, b: __m512i) -> __m512i {
    __m512i::from_i32(|i| a.i32(i).wrapping_mul(b.i32(i)))
}
/// Unsigned bytes of `a` times signed bytes of `b`, adjacent pairs summed with saturation to int16.
fn _mm512_maddubs_epi16(a: __m512i, b: __m512i) -> __m512i {
    __m512i::from_i16(|i| sat16(a.u8(2 * i) * b.i8(2 * i) + a.u8(2 * i + 1) * b.i8(2 * i + 1)))
}
/// int16 times int16, adjacent pairs summed to int32.
fn _mm512_madd_epi16(a: __m512i, b: __m512i) -> __m512i {
    __m512i::from_i32(|i| (a.i16(2 * i) * b.i16(2 * i)).wrapping_add(a.i16(2 * i + 1) * b.i16(2 * i + 1)))
}
/// `src` plus, per 32-bit lane, the four unsigned bytes of `a` times the signed bytes of `b`.
fn _mm512_dpbusd_epi32(src: __m512i, a: __m512i, b: __m512i) -> __m512i {
    __m512i::from_i32(|i| (0..4).fold(src.i32(i), |s, j| s.wrapping_add(a.u8(4 * i + j) * b.i8(4 * i + j))))
}
fn _mm512_abs_epi8(a: __m512i) -> __m512i {
    __m512i(std::array::from_fn(|i| (a.0[i] as i8).unsigned_abs()))
}
fn _mm512_movepi8_mask(a: __m512i) -> __mmask64 {
    (0..64).fold(0, |m, i| m | (((a.0[i] >> 7) as u64) << i))
}
fn _mm512_mask_sub_epi8(src: __m512i, k: __mmask64, a: __m512i, b: __m512i) -> __m512i {
    __m512i(std::array::from_fn(|i| {
        if k >> i & 1 == 1 {
            a.0[i].wrapping_sub(b.0[i])
        } else {
            src.0[i]
        }
    }))
}
/// Bytes of `a` picked by `b`, within each 128-bit lane (a set top bit gives zero).
fn _mm512_shuffle_epi8(a: __m512i, b: __m512i) -> __m512i {
    __m512i(std::array::from_fn(|i| {
        let s = b.0[i];
        if s & 0x80 != 0 {
            0
        } else {
            a.0[i / 16 * 16 + (s & 0x0F) as usize]
        }
    }))
}
fn _mm512_cvtepi32_ps(a: __m512i) -> __m512 {
    __m512(std::array::from_fn(|i| a.i32(i) as f32))
}
fn _mm512_mul_ps(a: __m512, b: __m512) -> __m512 {
    __m512(std::array::from_fn(|i| a.0[i] * b.0[i]))
}
fn _mm512_fmadd_ps(a: __m512, b: __m512, c: __m512) -> __m512 {
    __m512(std::array::from_fn(|i| a.0[i].mul_add(b.0[i], c.0[i])))
}
/// `−(a·b) + c`, rounded once.
fn _mm512_fnmadd_ps(a: __m512, b: __m512, c: __m512) -> __m512 {
    __m512(std::array::from_fn(|i| (-a.0[i]).mul_add(b.0[i], c.0[i])))
}

unsafe fn load(p: *const u8) -> __m512i {
    __m512i(std::ptr::read_unaligned(p as *const [u8; 64]))
}
unsafe fn store(p: *mut u8, v: __m512i) {
    std::ptr::write_unaligned(p as *mut [u8; 64], v.0)
}
unsafe fn load2(p0: *const u8, p1: *const u8) -> __m512i {
    let mut v = [0u8; 64];
    v[..32].copy_from_slice(std::slice::from_raw_parts(p0, 32));
    v[32..].copy_from_slice(std::slice::from_raw_parts(p1, 32));
    __m512i(v)
}
unsafe fn load_table(t: &[i8; 16]) -> __m512i {
    __m512i(std::array::from_fn(|i| t[i % 16] as u8))
}
unsafe fn load_f16x16(p0: *const u16, p1: *const u16) -> __m512 {
    let (lo, hi) = (std::slice::from_raw_parts(p0, 8), std::slice::from_raw_parts(p1, 8));
    __m512(std::array::from_fn(|i| super::super::pack::h2f(if i < 8 { lo[i] } else { hi[i - 8] })))
}
unsafe fn load_i8x16x2_i16(p0: *const i8, p1: *const i8) -> __m512i {
    let (lo, hi) = (std::slice::from_raw_parts(p0, 16), std::slice::from_raw_parts(p1, 16));
    __m512i::from_i16(|i| if i < 16 { lo[i] } else { hi[i - 16] } as i32)
}
unsafe fn store_halves(v: __m512, o0: *mut f32, o1: *mut f32) {
    std::slice::from_raw_parts_mut(o0, 8).copy_from_slice(&v.0[..8]);
    std::slice::from_raw_parts_mut(o1, 8).copy_from_slice(&v.0[8..]);
}

include!("body.rs");

/// The emulated pair kernel, with or without VNNI.
///
/// # Safety
/// As the hardware kernel: groups `g` and `g+1` exist, `out` holds their outputs.
pub(super) unsafe fn run(
    vnni: bool,
    m: &PackedMatrix,
    g: usize,
    acts: &QuantActs,
    out: (&mut [f32], &mut [f32]),
    unpacked: &mut Vec<u8>,
) {
    if vnni {
        pair::<true>(m, g, acts, out, unpacked)
    } else {
        pair::<false>(m, g, acts, out, unpacked)
    }
}

/// The stand-ins against the real instructions, where AVX2 has them at 256
/// bits (each half of a 512-bit stand-in must be what the 256-bit instruction
/// gives), on any CPU with AVX2: the emulation is only as good as this.
#[cfg(target_arch = "x86_64")]
mod against_avx2 {
    use std::arch::x86_64 as hw;

    use super::*;
    use crate::ops::qmatmul::Isa;

    fn bytes(seed: u32) -> __m512i {
        __m512i(std::array::from_fn(|i| {
            let h = (i as u32 ^ seed.wrapping_mul(0x9E37_79B9)).wrapping_mul(0x85EB_CA6B);
            (h >> 13) as u8
        }))
    }

    fn floats(seed: u32) -> __m512 {
        let b = bytes(seed);
        // Finite values of every magnitude and sign (exponent bits kept in range).
        __m512(std::array::from_fn(|i| {
            let bits = u32::from_le_bytes(b.0[4 * i..4 * i + 4].try_into().expect("4 bytes"));
            f32::from_bits(bits & 0xBFFF_FFFF)
        }))
    }

    unsafe fn halves(a: __m512i, b: __m512i, f: impl Fn(hw::__m256i, hw::__m256i) -> hw::__m256i) -> [u8; 64] {
        let mut out = [0u8; 64];
        for h in 0..2 {
            let x = hw::_mm256_loadu_si256(a.0[32 * h..].as_ptr() as *const hw::__m256i);
            let y = hw::_mm256_loadu_si256(b.0[32 * h..].as_ptr() as *const hw::__m256i);
            hw::_mm256_storeu_si256(out[32 * h..].as_mut_ptr() as *mut hw::__m256i, f(x, y));
        }
        out
    }

    unsafe fn halves_ps(a: __m512, b: __m512, c: __m512, f: impl Fn(hw::__m256, hw::__m256, hw::__m256) -> hw::__m256) -> [u32; 16] {
        let mut out = [0f32; 16];
        for h in 0..2 {
            let l = |v: &__m512| hw::_mm256_loadu_ps(v.0[8 * h..].as_ptr());
            hw::_mm256_storeu_ps(out[8 * h..].as_mut_ptr(), f(l(&a), l(&b), l(&c)));
        }
        out.map(f32::to_bits)
    }

    fn bits(v: __m512) -> [u32; 16] {
        v.0.map(f32::to_bits)
    }

    #[test]
    fn the_stand_ins_match_the_avx2_instructions() {
        if !Isa::Avx2.supported() {
            return;
        }
        for seed in 0..300 {
            let (a, b) = (bytes(seed), bytes(seed + 7919));
            // Bytes ≤ 127 as the unsigned operand, where `vpmaddubsw` pairs cannot saturate.
            let small = _mm512_and_si512(a, _mm512_set1_epi8(0x7F));
            let (x, y, z) = (floats(seed), floats(seed + 104_729), floats(seed + 1_299_709));
            // SAFETY: the CPU has AVX2 and FMA (checked above); every pointer is in bounds.
            unsafe {
                let ones = hw::_mm256_set1_epi16(1);
                assert_eq!(_mm512_maddubs_epi16(a, b).0, halves(a, b, |p, q| hw::_mm256_maddubs_epi16(p, q)));
                assert_eq!(_mm512_madd_epi16(a, b).0, halves(a, b, |p, q| hw::_mm256_madd_epi16(p, q)));
                assert_eq!(_mm512_add_epi16(a, b).0, halves(a, b, |p, q| hw::_mm256_add_epi16(p, q)));
                assert_eq!(_mm512_add_epi32(a, b).0, halves(a, b, |p, q| hw::_mm256_add_epi32(p, q)));
                assert_eq!(_mm512_mullo_epi32(a, b).0, halves(a, b, |p, q| hw::_mm256_mullo_epi32(p, q)));
                assert_eq!(_mm512_shuffle_epi8(a, b).0, halves(a, b, |p, q| hw::_mm256_shuffle_epi8(p, q)));
                assert_eq!(_mm512_and_si512(a, b).0, halves(a, b, |p, q| hw::_mm256_and_si256(p, q)));
                assert_eq!(_mm512_or_si512(a, b).0, halves(a, b, |p, q| hw::_mm256_or_si256(p, q)));
                assert_eq!(_mm512_abs_epi8(a).0, halves(a, b, |p, _| hw::_mm256_abs_epi8(p)));
                assert_eq!(_mm512_srli_epi16::<3>(a).0, halves(a, b, |p, _| hw::_mm256_srli_epi16::<3>(p)));
                assert_eq!(_mm512_slli_epi16::<4>(a).0, halves(a, b, |p, _| hw::_mm256_slli_epi16::<4>(p)));
                assert_eq!(_mm512_slli_epi32::<16>(a).0, halves(a, b, |p, _| hw::_mm256_slli_epi32::<16>(p)));
                assert_eq!(_mm512_srai_epi32::<16>(a).0, halves(a, b, |p, _| hw::_mm256_srai_epi32::<16>(p)));
                // `vpdpbusd` is `vpmaddubsw` + `vpmaddwd` + add where no pair saturates.
                let dot = halves(small, a, |p, q| hw::_mm256_madd_epi16(hw::_mm256_maddubs_epi16(p, q), ones));
                let want = __m512i(dot);
                assert_eq!(_mm512_dpbusd_epi32(b, small, a).0, _mm512_add_epi32(want, b).0);
                // Masked negation by the sign of `b` is `vpsignb` wherever `b` is not zero.
                let neg = _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(b), _mm512_setzero_si512(), a);
                let sign = halves(a, b, |p, q| hw::_mm256_sign_epi8(p, q));
                for i in (0..64).filter(|&i| b.0[i] != 0) {
                    assert_eq!(neg.0[i], sign[i], "byte {i}");
                }
                let mut cvt = [0f32; 16];
                for h in 0..2 {
                    let v = hw::_mm256_loadu_si256(a.0[32 * h..].as_ptr() as *const hw::__m256i);
                    hw::_mm256_storeu_ps(cvt[8 * h..].as_mut_ptr(), hw::_mm256_cvtepi32_ps(v));
                }
                assert_eq!(bits(_mm512_cvtepi32_ps(a)), cvt.map(f32::to_bits));
                assert_eq!(bits(_mm512_mul_ps(x, y)), halves_ps(x, y, z, |p, q, _| hw::_mm256_mul_ps(p, q)));
                assert_eq!(bits(_mm512_fmadd_ps(x, y, z)), halves_ps(x, y, z, |p, q, r| hw::_mm256_fmadd_ps(p, q, r)));
                assert_eq!(bits(_mm512_fnmadd_ps(x, y, z)), halves_ps(x, y, z, |p, q, r| hw::_mm256_fnmadd_ps(p, q, r)));
            }
        }
    }
}
