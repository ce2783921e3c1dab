//! The sub-4-bit types candle lacks (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
//! TQ1_0, TQ2_0), decoded into Q8_0 at load, as [`super::convert`] decodes the 4-bit ones.
//!
//! Each of these stores groups of 4 or 8 values as an index into a lattice of small integers
//! (a grid, [`super::iq_grids`]) with sign bits, times a scale per 32 or per 16 values
//! (TQ1_0 and TQ2_0: base-3 and 2-bit digits for −1, 0, 1, one scale per 256). How each
//! becomes Q8_0 (an f16 scale and 32 int8 values per 32):
//!
//! - One scale per 32 (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S, TQ1_0, TQ2_0): the values are the
//!   grid's integers with their signs (IQ1_S's `grid ± 1/8` as `8·grid ± 1` over an eighth of
//!   the scale), the scale rounded to f16: relative error at most `2^−11` (none for TQ), as
//!   IQ4_XS's. The values then lie in a 16-entry table (`ops::qmatmul::IQ2`, `IQ3XXS`,
//!   `IQ3S`, which holds IQ1_S's ±1, ±7, ±9 too; TQ's −1, 0, 1 are in `FP4`), and our CPU
//!   kernels keep them as 4-bit indices (`ops::qmatmul::narrow_q8_0`).
//! - Two scales per 32, one per 16 (IQ2_XS, IQ2_S, IQ1_M): the half with the larger scale is
//!   exact (its integers times the largest multiplier that keeps them in int8, over a scale
//!   divided by it); the other half's values are rounded to that scale's steps, an error of at
//!   most half a step, under 0.6% of the block's largest value: small beside these types' own
//!   (2 bits a value), and of the order of the 8-bit activations' rounding.
//!
//! Invariants: one Q8_0 block per 32 values, in ggml's order; any bytes decode (a grid index
//! is always in range: the bit fields are as wide as the grids are long).
//!
//! Counterpart: ggml's `dequantize_row_iq2_xxs` … `dequantize_row_tq2_0` (`ggml-quants.c`),
//! whose values these are (tested against gguf-py's independent decoders).

use half::f16;

use super::iq_grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use super::types::GgmlType;

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// ggml's `ksigns_iq2xs[i]`: the 7 sign bits `i` with an eighth that makes their count even.
fn ksigns(i: u32) -> u8 {
    let i = (i & 127) as u8;
    i | (((i.count_ones() & 1) as u8) << 7)
}

/// Eight grid bytes with the signs of `signs` (bit `j` for byte `j`).
fn signed8(grid: u64, signs: u8) -> [i8; 8] {
    let g = grid.to_le_bytes();
    std::array::from_fn(|j| if signs >> j & 1 == 1 { -(g[j] as i8) } else { g[j] as i8 })
}

/// One Q8_0 block: `scale` (to f16) and its 32 values.
fn block(out: &mut Vec<u8>, scale: f32, q: &[i8; 32]) {
    out.extend_from_slice(&f16::from_f32(scale).to_bits().to_le_bytes());
    out.extend(q.iter().map(|&v| v as u8));
}

/// One Q8_0 block of 32 values whose halves have their own scales: `s[h] · q[16h + j]`
/// (see the module docs: the larger half exact, the other rounded to its steps).
fn two_scale_block(out: &mut Vec<u8>, s: [f32; 2], q: &[i8; 32]) {
    let big = usize::from(s[1].abs() > s[0].abs());
    let half = |h: usize| &q[16 * h..16 * h + 16];
    let top = half(big).iter().map(|v| i32::from(*v).abs()).max().unwrap_or(0).max(1);
    let m = (127 / top).max(1);
    if s[big] == 0.0 {
        return block(out, 0.0, &[0; 32]);
    }
    let ratio = s[1 - big] / s[big] * m as f32;
    let mut v = [0i8; 32];
    for (i, o) in v.iter_mut().enumerate() {
        let x = if i / 16 == big {
            i32::from(q[i]) * m
        } else {
            (f32::from(q[i]) * ratio).round().clamp(-127.0, 127.0) as i32
        };
        *o = x as i8;
    }
    block(out, s[big] / m as f32, &v)
}

/// Appends the Q8_0 blocks of one block `b` of `ty` (one of this module's types) to `out`.
pub(super) fn to_q8_0(ty: GgmlType, b: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    match ty {
        GgmlType::IQ2_XXS => iq2_xxs(b, out),
        GgmlType::IQ2_XS => iq2_xs(b, out),
        GgmlType::IQ2_S => iq2_s(b, out),
        GgmlType::IQ3_XXS => iq3_xxs(b, out),
        GgmlType::IQ3_S => iq3_s(b, out),
        GgmlType::IQ1_S => iq1_s(b, out),
        GgmlType::IQ1_M => iq1_m(b, out),
        GgmlType::TQ1_0 => tq1_0(b, out),
        GgmlType::TQ2_0 => tq2_0(b, out),
        other => return Err(format!("{other} has no conversion to Q8_0")),
    }
    Ok(())
}

fn iq2_xxs(b: &[u8], out: &mut Vec<u8>) {
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let at = 2 + 8 * ib;
        let aux = u32_at(b, at + 4);
        let mut q = [0i8; 32];
        for l in 0..4 {
            let v = signed8(IQ2XXS_GRID[usize::from(b[at + l])], ksigns(aux >> (7 * l)));
            q[8 * l..8 * l + 8].copy_from_slice(&v);
        }
        block(out, d * (0.5 + (aux >> 28) as f32) * 0.25, &q);
    }
}

fn iq2_xs(b: &[u8], out: &mut Vec<u8>) {
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let sc = b[66 + ib];
        let mut q = [0i8; 32];
        for l in 0..4 {
            let x = u16_at(b, 2 + 2 * (4 * ib + l));
            let v = signed8(IQ2XS_GRID[usize::from(x & 511)], ksigns(u32::from(x >> 9)));
            q[8 * l..8 * l + 8].copy_from_slice(&v);
        }
        let s = |nib: u8| d * (0.5 + f32::from(nib)) * 0.25;
        two_scale_block(out, [s(sc & 0xF), s(sc >> 4)], &q);
    }
}

fn iq2_s(b: &[u8], out: &mut Vec<u8>) {
    let d = f16_at(b, 0);
    let (qs, signs, qh, scales) = (&b[2..34], &b[34..66], &b[66..74], &b[74..82]);
    for ib in 0..8 {
        let mut q = [0i8; 32];
        for l in 0..4 {
            let idx = usize::from(qs[4 * ib + l]) | ((usize::from(qh[ib]) << (8 - 2 * l)) & 0x300);
            q[8 * l..8 * l + 8].copy_from_slice(&signed8(IQ2S_GRID[idx], signs[4 * ib + l]));
        }
        let s = |nib: u8| d * (0.5 + f32::from(nib)) * 0.25;
        two_scale_block(out, [s(scales[ib] & 0xF), s(scales[ib] >> 4)], &q);
    }
}

/// Four grid bytes (a `u32` grid's entry) with sign bits `signs >> shift`.
fn signed4(grid: u32, signs: u8, shift: usize) -> [i8; 4] {
    let g = grid.to_le_bytes();
    std::array::from_fn(|j| if signs >> (j + shift) & 1 == 1 { -(g[j] as i8) } else { g[j] as i8 })
}

fn iq3_xxs(b: &[u8], out: &mut Vec<u8>) {
    let d = f16_at(b, 0);
    let (qs, scales_and_signs) = (&b[2..66], &b[66..98]);
    for ib in 0..8 {
        let aux = u32_at(scales_and_signs, 4 * ib);
        let mut q = [0i8; 32];
        for l in 0..4 {
            let signs = ksigns(aux >> (7 * l));
            let (g1, g2) = (IQ3XXS_GRID[usize::from(qs[8 * ib + 2 * l])], IQ3XXS_GRID[usize::from(qs[8 * ib + 2 * l + 1])]);
            q[8 * l..8 * l + 4].copy_from_slice(&signed4(g1, signs, 0));
            q[8 * l + 4..8 * l + 8].copy_from_slice(&signed4(g2, signs, 4));
        }
        block(out, d * (0.5 + (aux >> 28) as f32) * 0.5, &q);
    }
}

fn iq3_s(b: &[u8], out: &mut Vec<u8>) {
    let d = f16_at(b, 0);
    let (qs, qh, signs, scales) = (&b[2..66], &b[66..74], &b[74..106], &b[106..110]);
    for ib in 0..8 {
        let h = usize::from(qh[ib]);
        let mut q = [0i8; 32];
        for l in 0..4 {
            let g1 = IQ3S_GRID[usize::from(qs[8 * ib + 2 * l]) | ((h << (8 - 2 * l)) & 256)];
            let g2 = IQ3S_GRID[usize::from(qs[8 * ib + 2 * l + 1]) | ((h << (7 - 2 * l)) & 256)];
            let s = signs[4 * ib + l];
            q[8 * l..8 * l + 4].copy_from_slice(&signed4(g1, s, 0));
            q[8 * l + 4..8 * l + 8].copy_from_slice(&signed4(g2, s, 4));
        }
        let nib = (scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
        block(out, d * f32::from(1 + 2 * nib), &q);
    }
}

/// Eight values `8·(grid ± 1/8)` of IQ1_S's grid entry `idx` (`minus`: the delta is −1/8).
fn iq1_eight(idx: usize, minus: bool) -> [i8; 8] {
    let g = IQ1S_GRID[idx].to_le_bytes();
    std::array::from_fn(|j| 8 * (g[j] as i8) + if minus { -1 } else { 1 })
}

fn iq1_s(b: &[u8], out: &mut Vec<u8>) {
    let d = f16_at(b, 0);
    let qs = &b[2..34];
    for ib in 0..8 {
        let qh = usize::from(u16_at(b, 34 + 2 * ib));
        let mut q = [0i8; 32];
        for l in 0..4 {
            let idx = usize::from(qs[4 * ib + l]) | (((qh >> (3 * l)) & 7) << 8);
            q[8 * l..8 * l + 8].copy_from_slice(&iq1_eight(idx, qh & 0x8000 != 0));
        }
        // dl · (grid ± 1/8) = (dl / 8) · (8·grid ± 1)
        block(out, d * (2 * ((qh >> 12) & 7) + 1) as f32 / 8.0, &q);
    }
}

fn iq1_m(b: &[u8], out: &mut Vec<u8>) {
    let (qs, qh) = (&b[0..32], &b[32..48]);
    let sc: [u16; 4] = std::array::from_fn(|i| u16_at(b, 48 + 2 * i));
    let bits = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000);
    let d = f16::from_bits(bits).to_f32();
    for ib in 0..8 {
        let (h0, h1) = (usize::from(qh[2 * ib]), usize::from(qh[2 * ib + 1]));
        let q4 = &qs[4 * ib..4 * ib + 4];
        let idx = [
            usize::from(q4[0]) | ((h0 << 8) & 0x700),
            usize::from(q4[1]) | ((h0 << 4) & 0x700),
            usize::from(q4[2]) | ((h1 << 8) & 0x700),
            usize::from(q4[3]) | ((h1 << 4) & 0x700),
        ];
        let minus = [h0 & 0x08 != 0, h0 & 0x80 != 0, h1 & 0x08 != 0, h1 & 0x80 != 0];
        let mut q = [0i8; 32];
        for l in 0..4 {
            q[8 * l..8 * l + 8].copy_from_slice(&iq1_eight(idx[l], minus[l]));
        }
        let s = sc[ib / 2] >> (6 * (ib % 2));
        let dl = |shift: u16| d * (2 * ((s >> shift) & 7) + 1) as f32 / 8.0;
        two_scale_block(out, [dl(0), dl(3)], &q);
    }
}

/// TQ1_0's base-3 digit `n` of byte `x` (ggml's `((uint8)(x·3^n) · 3) >> 8`), as −1, 0 or 1.
fn trit(x: u8, n: u32) -> i8 {
    let q = x.wrapping_mul(3u8.pow(n));
    ((u16::from(q) * 3) >> 8) as i8 - 1
}

fn tq1_0(b: &[u8], out: &mut Vec<u8>) {
    let d = f16_at(b, 52);
    let (qs, qh) = (&b[0..48], &b[48..52]);
    let mut v = Vec::with_capacity(256);
    for n in 0..5 {
        v.extend(qs[..32].iter().map(|&x| trit(x, n)));
    }
    for n in 0..5 {
        v.extend(qs[32..48].iter().map(|&x| trit(x, n)));
    }
    for n in 0..4 {
        v.extend(qh.iter().map(|&x| trit(x, n)));
    }
    for c in v.chunks_exact(32) {
        block(out, d, &std::array::from_fn(|j| c[j]));
    }
}

fn tq2_0(b: &[u8], out: &mut Vec<u8>) {
    let d = f16_at(b, 64);
    for j in [0, 32] {
        for l in 0..4 {
            let q: [i8; 32] = std::array::from_fn(|m| ((b[j + m] >> (2 * l)) & 3) as i8 - 1);
            block(out, d, &q);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gguf::convert::dequant_q8_0;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// Random blocks of every type decode to the values gguf-py (llama.cpp's own Python
    /// decoders, independent of ggml's C) gives them (`scripts/record-iq-dequant-fixture.py`):
    /// exactly for TQ, within the f16 rounding of a scale for the types with one scale per 32,
    /// and within 0.6% of each block's largest value for those with one per 16.
    #[test]
    fn blocks_decode_to_gguf_pys_values() {
        let fixture: serde_json::Value = serde_json::from_str(include_str!("fixtures/iq-dequant.json")).unwrap();
        let types = fixture.as_object().unwrap();
        assert_eq!(types.len(), 9);
        for (name, case) in types {
            let ty = (0..64).filter_map(GgmlType::from_id).find(|t| t.name() == *name).unwrap();
            assert!(ty.is_lattice(), "{ty}");
            let raw = unhex(case["hex"].as_str().unwrap());
            let want: Vec<f32> = case["values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
            let mut q8 = Vec::new();
            for b in raw.chunks_exact(ty.block_bytes()) {
                to_q8_0(ty, b, &mut q8).unwrap();
            }
            let got = dequant_q8_0(&q8);
            assert_eq!(got.len(), want.len(), "{ty}");
            let two_scales = ty.has_half_block_scales();
            for (i, (g, w)) in got.chunks(32).zip(want.chunks(32)).enumerate() {
                let top = w.iter().fold(0f32, |m, x| m.max(x.abs()));
                assert!(top > 0.0, "{ty} block {i}");
                for (a, b) in g.iter().zip(w) {
                    let tol = match ty {
                        GgmlType::TQ1_0 | GgmlType::TQ2_0 => 0.0,
                        _ if two_scales => top * 0.006 + b.abs() * 2f32.powi(-11),
                        _ => b.abs() * 2f32.powi(-11),
                    };
                    assert!((a - b).abs() <= tol, "{ty} block {i}: {a} against {b}");
                }
            }
            // The one-scale types' values lie in a table our kernels keep in 4 bits.
            let kind = crate::ops::qmatmul::narrow_q8_0(&q8);
            assert_eq!(kind.table().is_some(), !two_scales, "{ty}: {kind:?}");
        }
    }

    /// Halves with the same scale are both exact; a half with a smaller one is rounded to the
    /// larger's steps.
    #[test]
    fn a_block_with_two_scales_keeps_the_larger_half_exact() {
        let q: [i8; 32] = std::array::from_fn(|i| [43, -25, 8, -8][i % 4]);
        let mut out = Vec::new();
        two_scale_block(&mut out, [0.5, 0.5], &q);
        two_scale_block(&mut out, [0.1, 0.7], &q);
        two_scale_block(&mut out, [0.0, 0.0], &q);
        let v = dequant_q8_0(&out);
        for i in 0..32 {
            assert_eq!(v[i], 0.5 * f32::from(q[i]));
        }
        for i in 16..32 {
            assert!((v[32 + i] - 0.7 * f32::from(q[i])).abs() <= 0.7 * 43.0 * 2f32.powi(-11), "{i}");
        }
        for i in 0..16 {
            // Steps of 0.7 / 2 (43 · 2 fits in int8, 43 · 3 does not).
            assert!((v[32 + i] - 0.1 * f32::from(q[i])).abs() <= 0.35 / 2.0 + 1e-3, "{i}: {}", v[32 + i]);
        }
        assert!(v[64..].iter().all(|&x| x == 0.0));
    }

    /// ggml's sign table: 7 bits and a parity bit.
    #[test]
    fn ksigns_are_ggmls() {
        let ggml: [u8; 8] = [0x00, 0x81, 0x82, 0x03, 0x84, 0x05, 0x06, 0x87];
        assert_eq!((0..8).map(ksigns).collect::<Vec<_>>(), ggml);
        assert_eq!(ksigns(127), 0xFF);
    }
}
