//! The AVX2 kernels (with FMA and F16C): x86-64-v3, chosen at run time.
//!
//! Eight weight rows sit in the eight 32-bit lanes; an activation row's next
//! four int8 values are broadcast to every lane, so one `vpmaddubsw` gives
//! each row's four products in pairs (weights unsigned, activations signed;
//! Q8_0's signed weights use `|w|` with the activation given `w`'s sign), and
//! int16 pairs are summed over as many chunks as cannot saturate before
//! `vpmaddwd` widens them to int32 (multiplying by the K-quants' integer
//! sub-scales in the same instruction). Up to four activation rows share each
//! weight load (the tile of a prefill); decode is the same code with one row.
//! With AVX-VNNI ([`Dot::Vnni`]), or AVX-512 VNNI on 256-bit vectors
//! ([`Dot::Vnni512`]), one `vpdpbusd` replaces `vpmaddubsw` + `vpmaddwd` +
//! the add. The float steps are those of [`super::portable`], so
//! results are identical.

#![allow(clippy::too_many_arguments, clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::acts::QuantActs;
use super::format::QuantKind;
use super::pack::{PackedMatrix, GROUP};

/// Activation rows per tile.
pub(super) const TILE: usize = 4;

/// One 32-value block of a group, unpacked: eight chunk vectors (see [`super::pack`]).
#[inline(always)]
unsafe fn unpack_block(bits: usize, p: *const u8) -> [__m256i; 8] {
    let mut u = [_mm256_setzero_si256(); 8];
    if bits == 8 {
        for (c, u) in u.iter_mut().enumerate() {
            *u = _mm256_loadu_si256(p.add(c * 32) as *const __m256i);
        }
        return u;
    }
    if bits == 2 {
        // Bits 2b..2b+2 of plane h are chunk 4h+b's value.
        let m3 = _mm256_set1_epi8(3);
        for h in 0..2 {
            let v = _mm256_loadu_si256(p.add(32 * h) as *const __m256i);
            u[4 * h] = _mm256_and_si256(v, m3);
            u[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16::<2>(v), m3);
            u[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m3);
            u[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16::<6>(v), m3);
        }
        return u;
    }
    let m0f = _mm256_set1_epi8(0x0F);
    for c in 0..4 {
        let v = _mm256_loadu_si256(p.add(c * 32) as *const __m256i);
        u[c] = _mm256_and_si256(v, m0f);
        u[c + 4] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m0f);
    }
    match bits {
        5 => {
            // Bit c of each byte is chunk c's fifth bit: move it to bit 4.
            let h = _mm256_loadu_si256(p.add(128) as *const __m256i);
            let b4 = _mm256_set1_epi8(0x10);
            u[0] = _mm256_or_si256(u[0], _mm256_and_si256(_mm256_slli_epi16::<4>(h), b4));
            u[1] = _mm256_or_si256(u[1], _mm256_and_si256(_mm256_slli_epi16::<3>(h), b4));
            u[2] = _mm256_or_si256(u[2], _mm256_and_si256(_mm256_slli_epi16::<2>(h), b4));
            u[3] = _mm256_or_si256(u[3], _mm256_and_si256(_mm256_slli_epi16::<1>(h), b4));
            u[4] = _mm256_or_si256(u[4], _mm256_and_si256(h, b4));
            u[5] = _mm256_or_si256(u[5], _mm256_and_si256(_mm256_srli_epi16::<1>(h), b4));
            u[6] = _mm256_or_si256(u[6], _mm256_and_si256(_mm256_srli_epi16::<2>(h), b4));
            u[7] = _mm256_or_si256(u[7], _mm256_and_si256(_mm256_srli_epi16::<3>(h), b4));
        }
        6 => {
            // Bits 2b..2b+2 of plane h are chunk 4h+b's fifth and sixth bits: move them to bits 4-5.
            let b45 = _mm256_set1_epi8(0x30);
            for h in 0..2 {
                let v = _mm256_loadu_si256(p.add(128 + 32 * h) as *const __m256i);
                let c = 4 * h;
                u[c] = _mm256_or_si256(u[c], _mm256_and_si256(_mm256_slli_epi16::<4>(v), b45));
                u[c + 1] = _mm256_or_si256(u[c + 1], _mm256_and_si256(_mm256_slli_epi16::<2>(v), b45));
                u[c + 2] = _mm256_or_si256(u[c + 2], _mm256_and_si256(v, b45));
                u[c + 3] = _mm256_or_si256(u[c + 3], _mm256_and_si256(_mm256_srli_epi16::<2>(v), b45));
            }
        }
        _ => {}
    }
    u
}

/// Block `b` of group `g`, unpacked, with a table kind's indices looked up: its values.
#[inline(always)]
unsafe fn unpack_kind(m: &PackedMatrix, g: usize, b: usize) -> [__m256i; 8] {
    let mut u = unpack_block(m.kind.bits(), m.qs.as_ptr().add(m.q_at(g, b)));
    if let Some(t) = m.kind.table() {
        // `vpshufb` looks each byte's low four bits up in the 16 bytes of its 128-bit lane.
        let lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr() as *const __m128i));
        for u in u.iter_mut() {
            *u = _mm256_shuffle_epi8(lut, *u);
        }
    }
    u
}

/// Unpacks group `g`'s packed quants (see [`super::pack`]) into 256 bytes per block (a table
/// kind's as their values).
///
/// # Safety
/// The CPU must have AVX2; `out` holds `k·8` bytes and `g` is a group of `m`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn unpack_group(m: &PackedMatrix, g: usize, out: &mut [u8]) {
    let blocks = out.len() / 256;
    debug_assert!(blocks <= m.k / 32 && g < m.groups());
    for b in 0..blocks {
        let u = unpack_kind(m, g, b);
        let o = out.as_mut_ptr().add(b * 256);
        for (c, u) in u.iter().enumerate() {
            _mm256_storeu_si256(o.add(c * 32) as *mut __m256i, *u);
        }
    }
}

/// Block `b`'s eight chunks: unpacked here from group `g`'s packed quants
/// (`FUSED`, for a few activation rows), or loaded from the group unpacked
/// beforehand (`w`).
#[inline(always)]
unsafe fn block_chunks<const FUSED: bool>(m: &PackedMatrix, g: usize, w: &[u8], b: usize) -> [__m256i; 8] {
    if FUSED {
        unpack_kind(m, g, b)
    } else {
        unpack_block(8, w.as_ptr().add(b * 256))
    }
}

/// Activation row `i`'s four quants of chunk `c`, broadcast to every lane.
#[inline(always)]
unsafe fn bcast(a: *const i8, c: usize) -> __m256i {
    _mm256_set1_epi32(std::ptr::read_unaligned(a.add(4 * c) as *const i32))
}

#[inline(always)]
unsafe fn load_f16x8(p: *const u16) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

/// How int8 products are summed into 32-bit lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dot {
    /// `vpmaddubsw` into int16 pairs, summed over as many chunks as cannot
    /// saturate, then `vpmaddwd` (which also applies the K-quants' sub-scales).
    Madd,
    /// AVX-VNNI's `vpdpbusd`: four products added to the lane in one step; the
    /// K-quants multiply each sub-block's sum by its sub-scale (`vpmulld`).
    Vnni,
    /// The `Vnni` kernel with AVX-512 VNNI's `vpdpbusd` on 256-bit vectors
    /// (AVX512-VL): an odd last group's path beside the AVX-512 VNNI pair
    /// kernel on CPUs without AVX-VNNI (Zen 4, Ice Lake).
    Vnni512,
    /// The `Vnni` kernel with `vpdpbusd` done by `vpmaddubsw` + `vpmaddwd`, exactly (the
    /// unsigned bytes' low seven bits and top bit apart, so no pair of products reaches
    /// int16's limit), so it runs on any AVX2 CPU.
    #[cfg(test)]
    VnniOnAvx2,
}

const MADD: u8 = 0;
const VNNI: u8 = 1;
#[cfg(test)]
const VNNI_ON_AVX2: u8 = 2;
const VNNI_512: u8 = 3;

/// `acc + Σ₄ u·s` per 32-bit lane (`u` unsigned, `s` signed, `|s| ≤ 127`; `u ≤ 128` for
/// [`Dot::Madd`], any byte for the others).
#[inline(always)]
unsafe fn dpbusd<const DOT: u8>(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    if DOT == VNNI {
        _mm256_dpbusd_avx_epi32(acc, u, s)
    } else if DOT == VNNI_512 {
        _mm256_dpbusd_epi32(acc, u, s)
    } else if DOT == MADD {
        _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones))
    } else {
        // `Dot::VnniOnAvx2`: `u`'s low seven bits and its top bit apart (`2·128·127` fits int16).
        let lo = _mm256_maddubs_epi16(_mm256_and_si256(u, _mm256_set1_epi8(0x7F)), s);
        let hi = _mm256_maddubs_epi16(_mm256_and_si256(u, _mm256_set1_epi8(-128)), s);
        _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones)))
    }
}

/// Group `g` of `m` against activation rows `i0..i0+R`, into `out[(i0+x)·8 ..]`.
#[inline(always)]
unsafe fn block_tile<const R: usize, const FUSED: bool, const DOT: u8>(
    m: &PackedMatrix,
    g: usize,
    w: &[u8],
    acts: &QuantActs,
    i0: usize,
    out: &mut [f32],
) {
    let nb = m.k / 32;
    debug_assert!((FUSED || w.len() >= nb * 256) && i0 + R <= acts.t);
    let ones = _mm256_set1_epi16(1);
    let eight = _mm256_set1_ps(8.0);
    let sixteen = _mm256_set1_ps(16.0);
    // Chunks of int16 pairs summed before they could saturate (2 · (2^bits − 1) · 127 each).
    let per_madd = if m.kind.bits() == 4 { 8 } else { 4 };
    let a: [*const i8; R] = std::array::from_fn(|x| acts.row_q(i0 + x).as_ptr());
    let mut acc = [_mm256_setzero_ps(); R];
    for b in 0..nb {
        let si = m.scale_at(g, b);
        let dv = load_f16x8(m.d.as_ptr().add(si));
        let u = block_chunks::<FUSED>(m, g, w, b);
        let mut dot = [_mm256_setzero_si256(); R];
        if m.kind.signed() && DOT != MADD {
            // `vpdpbusd` sums into 32 bits, so `w + 128` (`w ^ 0x80`, unsigned) cannot
            // saturate: one instruction per row, then `128 · Σ a` off. The same integers.
            let bias = _mm256_set1_epi8(-128);
            for (c, &wv) in u.iter().enumerate() {
                let wu = _mm256_xor_si256(wv, bias);
                for x in 0..R {
                    dot[x] = dpbusd::<DOT>(dot[x], wu, bcast(a[x], b * 8 + c));
                }
            }
            for x in 0..R {
                let qs = acts.sums.get_unchecked((i0 + x) * nb + b).1;
                dot[x] = _mm256_sub_epi32(dot[x], _mm256_set1_epi32(qs << 7));
            }
        } else if m.kind.signed() {
            for (c, &wv) in u.iter().enumerate() {
                let aw = _mm256_abs_epi8(wv);
                for x in 0..R {
                    let av = _mm256_sign_epi8(bcast(a[x], b * 8 + c), wv);
                    dot[x] = dpbusd::<DOT>(dot[x], aw, av);
                }
            }
        } else if DOT != MADD {
            for (c, &wv) in u.iter().enumerate() {
                for x in 0..R {
                    dot[x] = dpbusd::<DOT>(dot[x], wv, bcast(a[x], b * 8 + c));
                }
            }
        } else {
            let mut p = [_mm256_setzero_si256(); R];
            for (c, &wv) in u.iter().enumerate() {
                for x in 0..R {
                    p[x] = _mm256_add_epi16(p[x], _mm256_maddubs_epi16(wv, bcast(a[x], b * 8 + c)));
                }
                if (c + 1) % per_madd == 0 {
                    for x in 0..R {
                        dot[x] = _mm256_add_epi32(dot[x], _mm256_madd_epi16(p[x], ones));
                        p[x] = _mm256_setzero_si256();
                    }
                }
            }
        }
        let mv = match m.kind {
            QuantKind::Q4_0 => Some(_mm256_mul_ps(dv, eight)),
            QuantKind::Q5_0 => Some(_mm256_mul_ps(dv, sixteen)),
            QuantKind::Q4_1 | QuantKind::Q5_1 => Some(load_f16x8(m.m.as_ptr().add(si))),
            _ => None,
        };
        for x in 0..R {
            let at = (i0 + x) * nb + b;
            let da = _mm256_set1_ps(*acts.d.get_unchecked(at));
            acc[x] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[x]), _mm256_mul_ps(dv, da), acc[x]);
            if let Some(mv) = mv {
                acc[x] = _mm256_fnmadd_ps(mv, _mm256_set1_ps(acts.sums.get_unchecked(at).0), acc[x]);
            }
        }
    }
    for x in 0..R {
        _mm256_storeu_ps(out.as_mut_ptr().add((i0 + x) * GROUP), acc[x]);
    }
}

/// The K-quant kernel; see [`block_tile`].
#[inline(always)]
unsafe fn super_tile<const R: usize, const FUSED: bool, const DOT: u8>(
    m: &PackedMatrix,
    g: usize,
    w: &[u8],
    acts: &QuantActs,
    i0: usize,
    out: &mut [f32],
) {
    let kind = m.kind;
    let nsb = m.k / 256;
    debug_assert!((FUSED || w.len() >= nsb * 8 * 256) && i0 + R <= acts.t);
    let pairs = kind.subs() / 2;
    // Chunks of int16 pairs summed before they could saturate: 2 · (2^bits − 1) · 127 each.
    // (IQ4_XS's `|w| · ±a`, up to 2 · 127 · 127, not even two: `signed` below.)
    let per_madd = match kind {
        QuantKind::Q4K => 8,
        QuantKind::Q5K | QuantKind::Q3K | QuantKind::Q2K => 4,
        _ => 2,
    };
    // Q6_K and Q3_K: the offset weighed by the sub-scales (`off`; Q4_K, Q5_K and Q2_K: mins;
    // IQ4_XS: signed values, neither).
    // Q6_K, Q3_K and Q2_K: 16-value sub-blocks, two per 32-value block (`sub16`).
    let off = kind.sub_offset().is_some();
    let signed = kind.signed();
    let sub16 = kind.sub_elems() == 16;
    let dup = [
        _mm256_setr_epi8(
            0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,
        ),
        _mm256_setr_epi8(
            2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15, 2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14,
            15,
        ),
    ];
    let a: [*const i8; R] = std::array::from_fn(|x| acts.row_q(i0 + x).as_ptr());
    let mut acc = [_mm256_setzero_ps(); R];
    for sb in 0..nsb {
        let si = m.scale_at(g, sb);
        let dv = load_f16x8(m.d.as_ptr().add(si));
        let dmv = if off || signed { dv } else { load_f16x8(m.m.as_ptr().add(si)) };
        let pair_at = |p: usize| m.sub_at(g, sb, p);
        let sum_pair = |x: usize, p: usize| *acts.sum_pairs.get_unchecked(((i0 + x) * nsb + sb) * pairs + p);
        let mut isum = [_mm256_setzero_si256(); R];
        let mut msum = [_mm256_setzero_si256(); R];
        for p in (0..pairs).filter(|_| !signed) {
            let mnp = _mm256_cvtepi8_epi16(_mm_loadu_si128(
                if off { m.sc.as_ptr() } else { m.mn.as_ptr() }.add(pair_at(p)) as *const __m128i,
            ));
            for x in 0..R {
                let sums = _mm256_set1_epi32(sum_pair(x, p));
                msum[x] = _mm256_add_epi32(msum[x], _mm256_madd_epi16(mnp, sums));
            }
        }
        for j in 0..8 {
            let b = sb * 8 + j;
            let u = block_chunks::<FUSED>(m, g, w, b);
            // Q4_K/Q5_K: block j is sub-block j (pair j/2, half j%2). Q6_K: block j is
            // sub-blocks 2j and 2j+1 (pair j; chunks 0-3 and 4-7).
            let scp = _mm256_cvtepi8_epi16(_mm_loadu_si128(
                m.sc.as_ptr().add(pair_at(if sub16 { j } else { j / 2 })) as *const __m128i
            ));
            if DOT != MADD {
                // IQ4_XS: each row's sum of this 32-value sub-block (of its pair's two).
                let bsums: [i32; R] = std::array::from_fn(|x| match signed {
                    true => (sum_pair(x, j / 2) >> (16 * (j % 2))) as u16 as i16 as i32,
                    false => 0,
                });
                super_block_vnni::<R, DOT>(kind, &u, scp, &a, (b, j), bsums, &mut isum);
                continue;
            }
            if signed {
                // |w| against the activation given w's sign (see `block_tile`), each chunk's
                // int16 pairs straight into `vpmaddwd` with the sub-scale (32-value sub-blocks).
                let scv = _mm256_shuffle_epi8(scp, dup[j % 2]);
                for (c, &wv) in u.iter().enumerate() {
                    let aw = _mm256_abs_epi8(wv);
                    for x in 0..R {
                        let p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast(a[x], b * 8 + c), wv));
                        isum[x] = _mm256_add_epi32(isum[x], _mm256_madd_epi16(p, scv));
                    }
                }
                continue;
            }
            let mut pp = [_mm256_setzero_si256(); R];
            for (c, &wv) in u.iter().enumerate() {
                for x in 0..R {
                    pp[x] = _mm256_add_epi16(pp[x], _mm256_maddubs_epi16(wv, bcast(a[x], b * 8 + c)));
                }
                if (c + 1) % per_madd == 0 {
                    let half = if sub16 { c / 4 } else { j % 2 };
                    let scv = _mm256_shuffle_epi8(scp, dup[half]);
                    for x in 0..R {
                        isum[x] = _mm256_add_epi32(isum[x], _mm256_madd_epi16(pp[x], scv));
                        pp[x] = _mm256_setzero_si256();
                    }
                }
            }
        }
        for x in 0..R {
            let da = _mm256_set1_ps(*acts.d.get_unchecked((i0 + x) * nsb + sb));
            acc[x] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[x]), _mm256_mul_ps(dv, da), acc[x]);
            if signed {
                continue;
            }
            let ms = match kind {
                QuantKind::Q6K => _mm256_slli_epi32::<5>(msum[x]),
                QuantKind::Q3K => _mm256_slli_epi32::<2>(msum[x]),
                _ => msum[x],
            };
            acc[x] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dmv, da), acc[x]);
        }
    }
    for x in 0..R {
        _mm256_storeu_ps(out.as_mut_ptr().add((i0 + x) * GROUP), acc[x]);
    }
}

/// Block `b` (the `j`-th of its superblock) of a 256-value kind on the `vpdpbusd` paths: each
/// sub-block's int32 dot times its sub-scale (from `scp`, the block's pair or pairs of int16
/// sub-scales, sign-extended), into `isum`. A signed kind's (IQ4_XS's) values go in as
/// `w + 128` (see [`block_tile`]) and `128 · Σ a` of the sub-block (`bsums`) comes off: its
/// signed dot, exact.
#[inline(always)]
unsafe fn super_block_vnni<const R: usize, const DOT: u8>(
    kind: QuantKind,
    u: &[__m256i; 8],
    scp: __m256i,
    a: &[*const i8; R],
    (b, j): (usize, usize),
    bsums: [i32; R],
    isum: &mut [__m256i; R],
) {
    let (signed, sub16) = (kind.signed(), kind.sub_elems() == 16);
    let halves = if sub16 { 2 } else { 1 };
    for h in 0..halves {
        let half = if sub16 { h } else { j % 2 };
        let sc32 = if half == 0 {
            _mm256_srai_epi32::<16>(_mm256_slli_epi32::<16>(scp))
        } else {
            _mm256_srai_epi32::<16>(scp)
        };
        let mut bd = [_mm256_setzero_si256(); R];
        for c in h * 8 / halves..(h + 1) * 8 / halves {
            let wv = if signed { _mm256_xor_si256(u[c], _mm256_set1_epi8(-128)) } else { u[c] };
            for x in 0..R {
                bd[x] = dpbusd::<DOT>(bd[x], wv, bcast(a[x], b * 8 + c));
            }
        }
        for x in 0..R {
            if signed {
                bd[x] = _mm256_sub_epi32(bd[x], _mm256_set1_epi32(bsums[x] << 7));
            }
            isum[x] = _mm256_add_epi32(isum[x], _mm256_mullo_epi32(bd[x], sc32));
        }
    }
}

/// Group `g` of `m` against every activation row, tile by tile, into `out`.
#[inline(always)]
unsafe fn tiles<const FUSED: bool, const DOT: u8>(m: &PackedMatrix, g: usize, w: &[u8], acts: &QuantActs, out: &mut [f32]) {
    let mut i0 = 0;
    while i0 < acts.t {
        let r = (acts.t - i0).min(TILE);
        match (m.kind.is_super(), r) {
            (false, 4) => block_tile::<4, FUSED, DOT>(m, g, w, acts, i0, out),
            (false, 3) => block_tile::<3, FUSED, DOT>(m, g, w, acts, i0, out),
            (false, 2) => block_tile::<2, FUSED, DOT>(m, g, w, acts, i0, out),
            (false, _) => block_tile::<1, FUSED, DOT>(m, g, w, acts, i0, out),
            (true, 4) => super_tile::<4, FUSED, DOT>(m, g, w, acts, i0, out),
            (true, 3) => super_tile::<3, FUSED, DOT>(m, g, w, acts, i0, out),
            (true, 2) => super_tile::<2, FUSED, DOT>(m, g, w, acts, i0, out),
            (true, _) => super_tile::<1, FUSED, DOT>(m, g, w, acts, i0, out),
        }
        i0 += r;
    }
}

/// Group `g` of `m` against every activation row, into `out` (`t·8` values);
/// `w` holds the group's packed quants (`FUSED`) or its unpacked ones.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C, AVX-VNNI for [`Dot::Vnni`], AVX-512
/// VNNI and VL for [`Dot::Vnni512`].
pub(super) unsafe fn group<const FUSED: bool>(
    dot: Dot,
    m: &PackedMatrix,
    g: usize,
    w: &[u8],
    acts: &QuantActs,
    out: &mut [f32],
) {
    match dot {
        Dot::Madd => group_madd::<FUSED>(m, g, w, acts, out),
        Dot::Vnni => group_vnni::<FUSED>(m, g, w, acts, out),
        Dot::Vnni512 => group_vnni512::<FUSED>(m, g, w, acts, out),
        #[cfg(test)]
        Dot::VnniOnAvx2 => group_vnni_on_avx2::<FUSED>(m, g, w, acts, out),
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_madd<const FUSED: bool>(m: &PackedMatrix, g: usize, w: &[u8], acts: &QuantActs, out: &mut [f32]) {
    tiles::<FUSED, MADD>(m, g, w, acts, out)
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn group_vnni<const FUSED: bool>(m: &PackedMatrix, g: usize, w: &[u8], acts: &QuantActs, out: &mut [f32]) {
    tiles::<FUSED, VNNI>(m, g, w, acts, out)
}

#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
unsafe fn group_vnni512<const FUSED: bool>(m: &PackedMatrix, g: usize, w: &[u8], acts: &QuantActs, out: &mut [f32]) {
    tiles::<FUSED, VNNI_512>(m, g, w, acts, out)
}

#[cfg(test)]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_vnni_on_avx2<const FUSED: bool>(
    m: &PackedMatrix,
    g: usize,
    w: &[u8],
    acts: &QuantActs,
    out: &mut [f32],
) {
    tiles::<FUSED, VNNI_ON_AVX2>(m, g, w, acts, out)
}
