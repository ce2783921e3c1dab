//! The 4-bit types candle lacks, decoded into Q8_0 at load (the smaller IQ and TQ types:
//! `super::iq`).
//!
//! IQ4_NL, IQ4_XS and MXFP4 store each value as a 4-bit index into a table of
//! 16 integers that fit in 8 bits (`kvalues_iq4nl`, `kvalues_mxfp4`), times
//! a scale per 32 values: a Q8_0 block (an f16 scale and 32 int8 values)
//! holds the same numbers. So a tensor of these types becomes Q8_0 at load
//! and runs on every kernel that runs Q8_0, on the CPU and the GPU alike.
//!
//! - IQ4_NL: the block's f16 scale and its table values: exact.
//! - MXFP4: the scale is a power of two, `2^(e−128)` (E8M0, halved as
//!   llama.cpp's table is doubled), which f16 holds exactly from `2^−24` to
//!   `2^15`; a larger one is brought into range by doubling the values (up to
//!   ×8: `12·8 = 96` still fits), so scales up to `2^18` are exact. A smaller
//!   block (every value under `12·2^−25`, about `4·10^−7`) gets f16's nearest
//!   scale, 0 or `2^−24`; a scale over `2^18` (no weight is so large) is
//!   refused.
//! - IQ4_XS: a block of 256 has an f16 scale `d` and a 6-bit scale `ls` per
//!   32; the Q8_0 block's scale is `d·(ls−32)` rounded to f16 (relative error
//!   at most `2^−11`, under the 8-bit activations' own rounding). A projection
//!   on the CPU takes the file's blocks instead (`super::weight`), and a token
//!   embedding decodes them with [`dequantize_iq4_xs`], exact.
//!
//! Invariants: the output is one Q8_0 block per 32 values, in the same order.
//! The cost is memory: Q8_0 is 8.5 bits a value against 4.25 to 4.5.
//!
//! Counterpart: ggml's `dequantize_row_iq4_nl`, `dequantize_row_iq4_xs`,
//! `dequantize_row_mxfp4` (`ggml-quants.c`).

use half::f16;

use super::types::GgmlType;

pub use crate::ops::qmatmul::{FP4 as KVALUES_MXFP4, IQ4NL as KVALUES_IQ4NL};

const Q8_0_BYTES: usize = 34;

/// Writes one Q8_0 block: scale `d`, values `table[nibble] << shift` of the 16 bytes `qs`
/// (low nibbles are values 0..16, high nibbles 16..32, as in every ggml 4-bit block).
fn q8_block(out: &mut Vec<u8>, d: f16, qs: &[u8], table: &[i8; 16], shift: u32) {
    out.extend_from_slice(&d.to_bits().to_le_bytes());
    let v = |n: u8| ((table[usize::from(n & 0xF)] as i32) << shift) as i8 as u8;
    out.extend(qs.iter().map(|&b| v(b)));
    out.extend(qs.iter().map(|&b| v(b >> 4)));
}

fn f16_at(b: &[u8], at: usize) -> f16 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// The Q8_0 scale and value shift of an MXFP4 block with exponent byte `e`.
fn mxfp4_scale(e: u8) -> Result<(f16, u32), String> {
    let exp = i32::from(e) - 128;
    if exp > 18 {
        return Err(format!("an MXFP4 block scale of 2^{exp}, beyond what a weight can be"));
    }
    // 2^exp = 2^(exp − shift) · 2^shift, with 2^(exp − shift) ≤ 2^15, f16's largest power of two.
    let shift = (exp - 15).clamp(0, 3) as u32;
    Ok((f16::from_f32(2f32.powi(exp - shift as i32)), shift))
}

/// `bytes`, whole blocks of `ty` (IQ4_NL, IQ4_XS, MXFP4 or one of `super::iq`'s), as Q8_0
/// blocks.
pub fn to_q8_0(ty: GgmlType, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let bb = ty.block_bytes();
    if !bytes.len().is_multiple_of(bb) {
        return Err(format!("{} bytes are not whole {ty} blocks", bytes.len()));
    }
    let blocks = bytes.chunks_exact(bb);
    let mut out = Vec::with_capacity(bytes.len() / bb * ty.block_elems() / 32 * Q8_0_BYTES);
    match ty {
        GgmlType::IQ4_NL => {
            for b in blocks {
                q8_block(&mut out, f16_at(b, 0), &b[2..18], &KVALUES_IQ4NL, 0);
            }
        }
        GgmlType::MXFP4 => {
            for b in blocks {
                let (d, shift) = mxfp4_scale(b[0])?;
                q8_block(&mut out, d, &b[1..17], &KVALUES_MXFP4, shift);
            }
        }
        GgmlType::IQ4_XS => {
            for b in blocks {
                let d = f16_at(b, 0).to_f32();
                let scales_h = u16::from_le_bytes([b[2], b[3]]);
                let (scales_l, qs) = (&b[4..8], &b[8..136]);
                for ib in 0..8 {
                    let ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | ((((scales_h >> (2 * ib)) & 3) as u8) << 4);
                    let dl = f16::from_f32(d * (i32::from(ls) - 32) as f32);
                    q8_block(&mut out, dl, &qs[16 * ib..16 * ib + 16], &KVALUES_IQ4NL, 0);
                }
            }
        }
        other if other.is_lattice() => {
            for b in blocks {
                super::iq::to_q8_0(other, b, &mut out)?;
            }
        }
        other => return Err(format!("{other} has no conversion to Q8_0")),
    }
    Ok(out)
}

/// IQ4_XS blocks as f32, as ggml's `dequantize_row_iq4_xs` computes them (`d·(ls − 32)` in
/// f32, exact, times each table value): the values llama.cpp looks a token's embedding up as,
/// where the Q8_0 of [`to_q8_0`] rounds each `d·(ls − 32)` to f16. Appended to `out`; a last
/// partial block is ignored.
pub fn dequantize_iq4_xs(bytes: &[u8], out: &mut Vec<f32>) {
    for b in bytes.chunks_exact(136) {
        let d = f16_at(b, 0).to_f32();
        let sh = u16::from_le_bytes([b[2], b[3]]);
        for ib in 0..8 {
            let ls = i32::from((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (i32::from((sh >> (2 * ib)) & 3) << 4);
            let dl = d * (ls - 32) as f32;
            let qs = &b[8 + 16 * ib..8 + 16 * ib + 16];
            out.extend(qs.iter().map(|&q| dl * f32::from(KVALUES_IQ4NL[usize::from(q & 0xF)])));
            out.extend(qs.iter().map(|&q| dl * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)])));
        }
    }
}

/// The values of Q8_0 blocks `b` (the testkit's and the tests' reading of what [`to_q8_0`]
/// wrote).
pub(crate) fn dequant_q8_0(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(Q8_0_BYTES)
        .flat_map(|blk| {
            let d = f16_at(blk, 0).to_f32();
            blk[2..].iter().map(move |&q| d * q as i8 as f32)
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    /// ggml's `dequantize_row_*`, transcribed (float arithmetic in its order).
    fn ggml_dequant(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
        let mut y = Vec::new();
        for b in bytes.chunks_exact(ty.block_bytes()) {
            match ty {
                GgmlType::IQ4_NL | GgmlType::MXFP4 => {
                    let (d, qs, kv) = if ty == GgmlType::IQ4_NL {
                        (f16_at(b, 0).to_f32(), &b[2..18], &KVALUES_IQ4NL)
                    } else {
                        let e = b[0];
                        let bits = if e < 2 { 0x0020_0000u32 << e } else { u32::from(e - 1) << 23 };
                        (f32::from_bits(bits), &b[1..17], &KVALUES_MXFP4)
                    };
                    let mut blk = [0f32; 32];
                    for j in 0..16 {
                        blk[j] = kv[usize::from(qs[j] & 0xF)] as f32 * d;
                        blk[j + 16] = kv[usize::from(qs[j] >> 4)] as f32 * d;
                    }
                    y.extend(blk);
                }
                GgmlType::IQ4_XS => dequantize_iq4_xs(b, &mut y),
                _ => unreachable!(),
            }
        }
        y
    }

    /// A valid f16 scale of moderate size at byte `at` of every block (random bytes could be NaN).
    fn with_scales(ty: GgmlType, mut b: Vec<u8>, seed: u64) -> Vec<u8> {
        let bb = ty.block_bytes();
        let picks = noise(b.len() / bb, seed);
        for (blk, p) in b.chunks_exact_mut(bb).zip(picks) {
            match ty {
                GgmlType::MXFP4 => blk[0] = 100 + p % 40, // 2^-28 .. 2^11
                _ => blk[..2].copy_from_slice(&f16::from_f32((p as f32 - 128.0) / 4096.0).to_bits().to_le_bytes()),
            }
        }
        b
    }

    #[test]
    fn iq4_nl_and_mxfp4_in_range_are_exact() {
        for ty in [GgmlType::IQ4_NL, GgmlType::MXFP4] {
            let mut raw = with_scales(ty, noise(64 * ty.block_bytes(), 7), 9);
            if ty == GgmlType::MXFP4 {
                // Every exponent from 2^-24 to 2^18, the range held exactly.
                for (i, blk) in raw.chunks_exact_mut(17).enumerate() {
                    blk[0] = 104 + (i % 43) as u8;
                }
            }
            let q8 = to_q8_0(ty, &raw).unwrap();
            assert_eq!(q8.len(), 64 * ty.block_elems() / 32 * 34);
            assert_eq!(dequant_q8_0(&q8), ggml_dequant(ty, &raw), "{ty}");
        }
    }

    #[test]
    fn iq4_xs_is_within_f16_rounding_of_its_scales() {
        let ty = GgmlType::IQ4_XS;
        let raw = with_scales(ty, noise(16 * 136, 3), 5);
        let ours = dequant_q8_0(&to_q8_0(ty, &raw).unwrap());
        let theirs = ggml_dequant(ty, &raw);
        assert_eq!(ours.len(), 16 * 256);
        for (a, b) in ours.iter().zip(&theirs) {
            assert!((a - b).abs() <= b.abs() * 2f32.powi(-11), "{a} vs {b}");
        }
    }

    #[test]
    fn tiny_mxfp4_blocks_round_and_huge_ones_are_refused() {
        let mut blk = vec![0u8; 17];
        blk[1] = 0x7F; // -12 (low nibble 15) and 12 (high nibble 7)
        blk[0] = 100; // 2^-28: 12 · 2^-28 is under f16's smallest step, 2^-24
        let ours = dequant_q8_0(&to_q8_0(GgmlType::MXFP4, &blk).unwrap());
        let theirs = ggml_dequant(GgmlType::MXFP4, &blk);
        assert_eq!(theirs[0], -12.0 * 2f32.powi(-28));
        assert!(ours.iter().zip(&theirs).all(|(a, b)| (a - b).abs() <= 2f32.powi(-24)));
        blk[0] = 147; // 2^19
        assert!(to_q8_0(GgmlType::MXFP4, &blk).unwrap_err().contains("2^19"));
        assert!(to_q8_0(GgmlType::MXFP4, &blk[..16]).is_err());
    }
}
