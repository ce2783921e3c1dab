//! The AVX-512 kernels' body over plain-Rust stand-ins for the intrinsics it
//! names (tests only): each does what Intel's manual says the instruction
//! does, lane by lane, so the body's indexing, lane order and integer steps
//! are checked against the portable kernel on any machine.

#![allow(non_camel_case_types, clippy::needless_range_loop, unused_unsafe)]

use super::super::format::QuantKind;
use super::super::pack::{PackedMatrix, GROUP};
use super::super::{QuantActs, FUSED_MAX_ROWS};
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
/// As the hardware kernel: `w` holds both groups' packed quants, `out` their outputs.
pub(super) unsafe fn run(
    vnni: bool,
    m: &PackedMatrix,
    g: usize,
    w: (&[u8], &[u8]),
    acts: &QuantActs,
    out: (&mut [f32], &mut [f32]),
    unpacked: &mut Vec<u8>,
) {
    if vnni {
        pair::<true>(m, g, w, acts, out, unpacked)
    } else {
        pair::<false>(m, g, w, acts, out, unpacked)
    }
}
