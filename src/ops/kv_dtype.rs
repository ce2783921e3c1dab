//! The element type K/V is stored in, in every tier (device pool, host RAM, cache files), and
//! the conversion from the forward's f32 rows into it.
//!
//! Owns the conversions of [`KvDtype`] (declared in `config`, with its names and sizes):
//! [`KvDtype::encode`] (f32 → stored, once, when K/V is written into a
//! block) and [`KvDtype::decode`] (stored → f32, for tests and comparisons; attention decodes
//! in registers, `row_kernels`).
//!
//! Layouts: `f16` and `bf16` are IEEE half / bfloat16, little-endian, rounded to nearest even;
//! `q8_0` is llama.cpp's: each run of 32 values is one f16 scale `d = max|x| / 127` followed by
//! 32 `i8` `round(x / d)` (34 bytes), so a head's row needs a head size that is a multiple of 32.
//!
//! Invariant: decoding is exact and the same on every path (a half or bfloat16 widens exactly;
//! a `q8_0` value is `q as f32 * d` with one rounding), so attention's portable and SIMD forms
//! give the same bits for every type.
//!
//! Counterpart: llama.cpp's `--cache-type-k/-v` (`f16` by default, `q8_0`), vLLM's
//! `--kv-cache-dtype`.

use half::{bf16, f16};

pub use crate::config::{KvDtype, Q8_0_GROUP, Q8_0_GROUP_BYTES};

impl KvDtype {
    /// Stores `src` into `dst` (`row_bytes(src.len())` bytes).
    ///
    /// Panics if the lengths do not match (or, for `q8_0`, `src` is not whole groups).
    pub fn encode(self, src: &[f32], dst: &mut [u8]) {
        assert_eq!(
            dst.len(),
            self.row_bytes(src.len()),
            "{} values into {} bytes",
            src.len(),
            dst.len()
        );
        match self {
            Self::F32 => {
                for (d, x) in dst.chunks_exact_mut(4).zip(src) {
                    d.copy_from_slice(&x.to_le_bytes());
                }
            }
            Self::F16 => {
                for (d, x) in dst.chunks_exact_mut(2).zip(src) {
                    d.copy_from_slice(&f16::from_f32(*x).to_le_bytes());
                }
            }
            Self::Bf16 => {
                for (d, x) in dst.chunks_exact_mut(2).zip(src) {
                    d.copy_from_slice(&bf16::from_f32(*x).to_le_bytes());
                }
            }
            Self::Q8_0 => {
                assert!(src.len().is_multiple_of(Q8_0_GROUP), "q8_0 rows are whole groups of 32");
                for (g, x) in dst.chunks_exact_mut(Q8_0_GROUP_BYTES).zip(src.chunks_exact(Q8_0_GROUP)) {
                    // llama.cpp's quantize_row_q8_0_ref.
                    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let d = amax / 127.0;
                    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                    g[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
                    for (q, v) in g[2..].iter_mut().zip(x) {
                        *q = ((v * id).round() as i8) as u8;
                    }
                }
            }
        }
    }

    /// Value `i` of a stored row, as attention reads it.
    #[inline(always)]
    pub fn get(self, row: &[u8], i: usize) -> f32 {
        match self {
            Self::F32 => f32::from_le_bytes([row[4 * i], row[4 * i + 1], row[4 * i + 2], row[4 * i + 3]]),
            Self::F16 => f16::from_le_bytes([row[2 * i], row[2 * i + 1]]).to_f32(),
            Self::Bf16 => bf16::from_le_bytes([row[2 * i], row[2 * i + 1]]).to_f32(),
            Self::Q8_0 => {
                let g = &row[i / Q8_0_GROUP * Q8_0_GROUP_BYTES..];
                let d = f16::from_le_bytes([g[0], g[1]]).to_f32();
                f32::from(g[2 + i % Q8_0_GROUP] as i8) * d
            }
        }
    }

    /// The values of a stored row (`dst.len()` of them).
    pub fn decode(self, src: &[u8], dst: &mut [f32]) {
        for (i, d) in dst.iter_mut().enumerate() {
            *d = self.get(src, i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::rand_vec;

    #[test]
    fn round_trips_within_each_types_precision() {
        let x = rand_vec(128, 5);
        for dtype in KvDtype::ALL {
            let mut bytes = vec![0u8; dtype.row_bytes(x.len())];
            dtype.encode(&x, &mut bytes);
            let mut back = vec![0f32; x.len()];
            dtype.decode(&bytes, &mut back);
            let tol = match dtype {
                KvDtype::F32 => 0.0,
                KvDtype::F16 => 1e-3,
                KvDtype::Bf16 => 8e-3,
                KvDtype::Q8_0 => 1.0 / 127.0,
            };
            for (a, b) in x.iter().zip(&back) {
                assert!((a - b).abs() <= tol * a.abs().max(1.0), "{dtype}: {a} -> {b}");
            }
            assert_eq!(dtype.name().parse::<KvDtype>(), Ok(dtype));
            assert_eq!(KvDtype::from_code(dtype.code()), Some(dtype));
        }
        assert_eq!(KvDtype::Q8_0.row_bytes(64), 68);
        assert!(KvDtype::Q8_0.check_head_dim(80).is_err());
        assert!(KvDtype::F16.check_head_dim(80).is_ok());
        assert!("f8".parse::<KvDtype>().is_err());
    }

    #[test]
    fn q8_0_matches_llama_cpp_on_a_known_group() {
        // max |x| = 127 → d = 1; values round half away from zero.
        let mut x = [0f32; 32];
        x[0] = 127.0;
        x[1] = -2.5;
        x[2] = 0.49;
        let mut b = [0u8; 34];
        KvDtype::Q8_0.encode(&x, &mut b);
        assert_eq!(f16::from_le_bytes([b[0], b[1]]).to_f32(), 1.0);
        assert_eq!((b[2] as i8, b[3] as i8, b[4] as i8), (127, -3, 0));
        let zeros = [0f32; 32];
        KvDtype::Q8_0.encode(&zeros, &mut b);
        assert!(b.iter().all(|&v| v == 0));
    }
}
