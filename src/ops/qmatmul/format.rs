//! The GGUF block formats our kernels take, decoded to integers.
//!
//! Every supported type is written as `value = scale · q − min` over integer
//! quants `q`, which is what the kernels compute with:
//!
//! | type | block | `q` | scale, min |
//! |---|---|---|---|
//! | Q4_0 | 32 | 0..15 | `d`, `8·d` |
//! | Q4_1 | 32 | 0..15 | `d`, `−m` |
//! | Q5_0 | 32 | 0..31 | `d`, `16·d` |
//! | Q5_1 | 32 | 0..31 | `d`, `−m` |
//! | Q8_0 | 32 | −127..127 (signed) | `d`, none |
//! | Q4_K | 256 (8 × 32) | 0..15 | `d·sc[j]`, `dmin·mn[j]` (6-bit `sc`, `mn`) |
//! | Q5_K | 256 (8 × 32) | 0..31 | as Q4_K |
//! | Q6_K | 256 (16 × 16) | 0..63 | `d·sc[j]`, `d·32·sc[j]` (signed 8-bit `sc`) |
//! | Q3_K | 256 (16 × 16) | 0..7 | `d·sc[j]`, `d·4·sc[j]` (6-bit scale − 32, signed) |
//! | Q2_K | 256 (16 × 16) | 0..3 | `d·sc[j]`, `dmin·mn[j]` (4-bit `sc`, `mn`) |
//! | Q8_0 of IQ4_NL's values | 32 | 0..15, the value `IQ4NL[q]` | `d`, none |
//! | Q8_0 of MXFP4's values | 32 | 0..15, the value `FP4[q]` | `d`, none |
//! | IQ4_XS | 256 (8 × 32) | 0..15, the value `IQ4NL[q]` | `d·sc[j]` (6-bit scale − 32, signed), none |
//!
//! IQ4_XS is kept in its own form (not as Q8_0 of its values, which would round each
//! `d·sc[j]` to f16): its kernels take the activations per 256 values as ggml's do (`Q8_K`),
//! sum each sub-block's signed dot times its sub-scale in integers, and apply `d` once per
//! 256 values, as `ggml_vec_dot_iq4_xs_q8_K` does.
//!
//! The two Q8_0 kinds above it are Q8_0 blocks (their GGUF bytes are Q8_0's) whose 32 values
//! all lie in one of ggml's 16-entry tables: what IQ4_NL, IQ4_XS and MXFP4
//! tensors become at load (`model::gguf::convert`). [`narrow_q8_0`] finds them;
//! kept as 4-bit indices, they take half Q8_0's memory, and the kernels look
//! each index up (`vpshufb`) and run Q8_0's signed arithmetic on the values.
//!
//! Decoding is exact: these are the integers GGUF stores, so a kernel that
//! sums `q · a` in integers and applies the scales as the table says computes
//! the same dot product as dequantizing first. Layouts follow ggml's
//! `block_q4_0` … `block_q6_K` (and candle's `k_quants.rs`).

use half::f16;

/// `kvalues_iq4nl` (ggml-common.h): IQ4_NL's and IQ4_XS's 16 values.
pub const IQ4NL: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];
/// `kvalues_mxfp4`: E2M1's 16 values, doubled (MXFP4's, with a power-of-two scale).
pub const FP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
/// IQ2_XXS's values: its grid's 8, 25, 43 with either sign (the rest repeats the last).
pub const IQ2: [i8; 16] = [-43, -25, -8, 8, 25, 43, 43, 43, 43, 43, 43, 43, 43, 43, 43, 43];
/// IQ3_XXS's values: its grid's 4, 12, … 52, 62 with either sign.
pub const IQ3XXS: [i8; 16] = [-62, -52, -44, -36, -28, -20, -12, -4, 4, 12, 20, 28, 36, 44, 52, 62];
/// IQ3_S's values: its grid's 1, 3, … 15 with either sign.
pub const IQ3S: [i8; 16] = [-15, -13, -11, -9, -7, -5, -3, -1, 1, 3, 5, 7, 9, 11, 13, 15];

/// The table kinds, each with its table, in the order [`narrow_q8_0`] tries them.
/// IQ1_S's values (`8·(grid ± 1/8)`: ±1, ±7, ±9) are among IQ3_S's.
const TABLE_KINDS: [(QuantKind, &[i8; 16]); 5] = [
    (QuantKind::Q8Iq4nl, &IQ4NL),
    (QuantKind::Q8Fp4, &FP4),
    (QuantKind::Q8Iq3xxs, &IQ3XXS),
    (QuantKind::Q8Iq3s, &IQ3S),
    (QuantKind::Q8Iq2, &IQ2),
];

/// The weight types with a kernel of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantKind {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
    Q3K,
    Q2K,
    /// Q8_0 blocks whose values are all in [`IQ4NL`].
    Q8Iq4nl,
    /// Q8_0 blocks whose values are all in [`FP4`] (MXFP4's; TQ1_0's and TQ2_0's −1, 0, 1).
    Q8Fp4,
    /// Q8_0 blocks whose values are all in [`IQ3XXS`].
    Q8Iq3xxs,
    /// Q8_0 blocks whose values are all in [`IQ3S`] (IQ3_S's; IQ1_S's too).
    Q8Iq3s,
    /// Q8_0 blocks whose values are all in [`IQ2`] (IQ2_XXS's).
    Q8Iq2,
    /// IQ4_XS's blocks: 4-bit indices into [`IQ4NL`], a signed sub-scale per 32 values and
    /// an f16 scale per 256 (`block_iq4_xs`).
    Iq4Xs,
}

impl QuantKind {
    /// Elements per GGUF block.
    pub const fn block_elems(self) -> usize {
        match self {
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 | Self::Q8Iq4nl | Self::Q8Fp4 | Self::Q8Iq3xxs | Self::Q8Iq3s | Self::Q8Iq2 => 32,
            Self::Q4K | Self::Q5K | Self::Q6K | Self::Q3K | Self::Q2K | Self::Iq4Xs => 256,
        }
    }

    /// Bytes per GGUF block.
    pub const fn block_bytes(self) -> usize {
        match self {
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 | Self::Q8Iq4nl | Self::Q8Fp4 | Self::Q8Iq3xxs | Self::Q8Iq3s | Self::Q8Iq2 => 34,
            Self::Q4K => 144,
            Self::Q5K => 176,
            Self::Q6K => 210,
            Self::Q3K => 110,
            Self::Q2K => 84,
            Self::Iq4Xs => 136,
        }
    }

    /// Bits of each quant as the kernels keep them (2, 4, 5, 6 or 8; Q3_K's 3 in 4).
    pub const fn bits(self) -> usize {
        match self {
            Self::Q4_0 | Self::Q4_1 | Self::Q4K | Self::Q3K => 4,
            Self::Q8Iq4nl | Self::Q8Fp4 | Self::Q8Iq3xxs | Self::Q8Iq3s | Self::Q8Iq2 | Self::Iq4Xs => 4,
            Self::Q2K => 2,
            Self::Q5_0 | Self::Q5_1 | Self::Q5K => 5,
            Self::Q6K => 6,
            Self::Q8_0 => 8,
        }
    }

    /// Signed weights, no min (Q8_0 and the table kinds): the kernels multiply `|w|` by the
    /// activation given `w`'s sign (or `w + 128` by it, then take `128 · Σ a` off).
    pub const fn signed(self) -> bool {
        self.table().is_some() || matches!(self, Self::Q8_0)
    }

    /// The table a 4-bit index is looked up in (the table kinds).
    pub const fn table(self) -> Option<&'static [i8; 16]> {
        match self {
            Self::Q8Iq4nl | Self::Iq4Xs => Some(&IQ4NL),
            Self::Q8Fp4 => Some(&FP4),
            Self::Q8Iq3xxs => Some(&IQ3XXS),
            Self::Q8Iq3s => Some(&IQ3S),
            Self::Q8Iq2 => Some(&IQ2),
            _ => None,
        }
    }

    /// The K-quants and IQ4_XS: one float scale per 256 values, integer sub-scales.
    pub const fn is_super(self) -> bool {
        matches!(self, Self::Q4K | Self::Q5K | Self::Q6K | Self::Q3K | Self::Q2K | Self::Iq4Xs)
    }

    /// Q4_K, Q5_K and Q2_K: an integer min per sub-block, times `dmin`.
    pub const fn sub_mins(self) -> bool {
        matches!(self, Self::Q4K | Self::Q5K | Self::Q2K)
    }

    /// Q4_1, Q5_1 and the K-quants with sub-mins: a second f16 per block (`−m` or `dmin`).
    pub const fn has_m(self) -> bool {
        matches!(self, Self::Q4_1 | Self::Q5_1) || self.sub_mins()
    }

    /// Q6_K and Q3_K: 16-value sub-blocks whose signed sub-scale also weighs a fixed offset
    /// (`q − 32`, `q − 4`), in place of Q4_K's and Q5_K's separate mins.
    pub const fn sub_offset(self) -> Option<i32> {
        match self {
            Self::Q6K => Some(32),
            Self::Q3K => Some(4),
            _ => None,
        }
    }

    /// Elements per sub-block with its own integer scale (K-quants only).
    pub const fn sub_elems(self) -> usize {
        match self {
            Self::Q6K | Self::Q3K | Self::Q2K => 16,
            _ => 32,
        }
    }

    /// Integer sub-scales per 256-value block (K-quants only).
    pub const fn subs(self) -> usize {
        256 / self.sub_elems()
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q4K => "Q4_K",
            Self::Q5K => "Q5_K",
            Self::Q6K => "Q6_K",
            Self::Q3K => "Q3_K",
            Self::Q2K => "Q2_K",
            Self::Q8Iq4nl => "Q8_0 (IQ4_NL values)",
            Self::Q8Fp4 => "Q8_0 (MXFP4 values)",
            Self::Q8Iq3xxs => "Q8_0 (IQ3_XXS values)",
            Self::Q8Iq3s => "Q8_0 (IQ3_S values)",
            Self::Q8Iq2 => "Q8_0 (IQ2_XXS values)",
            Self::Iq4Xs => "IQ4_XS",
        }
    }
}

/// One GGUF block decoded: quants in element order and its scales.
#[derive(Debug, Clone)]
pub struct Decoded {
    /// `q` per element (`block_elems` of them); Q8_0's are `i8` stored as `u8`.
    pub q: [u8; 256],
    /// Q4_0/Q4_1/Q8_0: `d`. K-quants: `d`.
    pub d: f16,
    /// Q4_1/Q5_1: `−m`. Q4_K/Q5_K/Q2_K: `dmin`. Otherwise unused (zero).
    pub m: f16,
    /// K-quants and IQ4_XS: the integer scale of each sub-block (Q6_K's, Q3_K's and IQ4_XS's
    /// are signed).
    pub sc: [i8; 16],
    /// Q4_K/Q5_K: the integer min of each sub-block.
    pub mn: [i8; 16],
}

fn f16_at(b: &[u8], at: usize) -> f16 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` of a
/// Q4_K/Q5_K block's 12 scale bytes.
fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// Decodes one block of `kind` from its `block_bytes` bytes.
pub fn decode(kind: QuantKind, b: &[u8]) -> Decoded {
    debug_assert_eq!(b.len(), kind.block_bytes());
    let mut out = Decoded {
        q: [0; 256],
        d: f16::ZERO,
        m: f16::ZERO,
        sc: [0; 16],
        mn: [0; 16],
    };
    match kind {
        QuantKind::Q4_0 | QuantKind::Q4_1 => {
            out.d = f16_at(b, 0);
            let qs = if kind == QuantKind::Q4_1 {
                out.m = -f16_at(b, 2);
                &b[4..20]
            } else {
                &b[2..18]
            };
            for (j, &byte) in qs.iter().enumerate() {
                out.q[j] = byte & 0xF;
                out.q[j + 16] = byte >> 4;
            }
        }
        QuantKind::Q5_0 | QuantKind::Q5_1 => {
            out.d = f16_at(b, 0);
            let at = if kind == QuantKind::Q5_1 {
                out.m = -f16_at(b, 2);
                4
            } else {
                2
            };
            let qh = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
            for (j, &byte) in b[at + 4..at + 20].iter().enumerate() {
                out.q[j] = (byte & 0xF) | ((((qh >> j) & 1) as u8) << 4);
                out.q[j + 16] = (byte >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
            }
        }
        QuantKind::Q8_0 => {
            out.d = f16_at(b, 0);
            out.q[..32].copy_from_slice(&b[2..34]);
        }
        QuantKind::Q8Iq4nl | QuantKind::Q8Fp4 | QuantKind::Q8Iq3xxs | QuantKind::Q8Iq3s | QuantKind::Q8Iq2 => {
            out.d = f16_at(b, 0);
            let table = kind.table().unwrap_or(&IQ4NL);
            for (q, &v) in out.q.iter_mut().zip(&b[2..34]) {
                // Only blocks `narrow_q8_0` accepted come here: every value is in the table.
                *q = table.iter().position(|&t| t == v as i8).unwrap_or(0) as u8;
            }
        }
        QuantKind::Q4K | QuantKind::Q5K => {
            out.d = f16_at(b, 0);
            out.m = f16_at(b, 2);
            let scales = &b[4..16];
            let (qh, qs) = if kind == QuantKind::Q5K {
                (Some(&b[16..48]), &b[48..176])
            } else {
                (None, &b[16..144])
            };
            for j in 0..8 {
                let (sc, mn) = scale_min_k4(j, scales);
                out.sc[j] = sc as i8;
                out.mn[j] = mn as i8;
            }
            for chunk in 0..4 {
                let q = &qs[32 * chunk..32 * chunk + 32];
                for l in 0..32 {
                    let (mut lo, mut hi) = (q[l] & 0xF, q[l] >> 4);
                    if let Some(qh) = qh {
                        lo |= ((qh[l] >> (2 * chunk)) & 1) << 4;
                        hi |= ((qh[l] >> (2 * chunk + 1)) & 1) << 4;
                    }
                    out.q[64 * chunk + l] = lo;
                    out.q[64 * chunk + 32 + l] = hi;
                }
            }
        }
        QuantKind::Q2K => decode_q2k(b, &mut out),
        QuantKind::Q3K => decode_q3k(b, &mut out),
        QuantKind::Iq4Xs => decode_iq4xs(b, &mut out),
        QuantKind::Q6K => {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            out.d = f16_at(b, 208);
            for (j, &s) in sc.iter().enumerate() {
                out.sc[j] = s as i8;
            }
            for half in 0..2 {
                let (ql, qh) = (&ql[64 * half..], &qh[32 * half..]);
                let y = &mut out.q[128 * half..];
                for l in 0..32 {
                    y[l] = (ql[l] & 0xF) | ((qh[l] & 3) << 4);
                    y[l + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
                    y[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                    y[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                }
            }
        }
    }
    out
}

/// Q2_K's block into `out` (see [`decode`]).
fn decode_q2k(b: &[u8], out: &mut Decoded) {
    // ggml's block_q2_K: scales[16] (scale low nibble, min high), qs[64], d, dmin. Value
    // e: sub-block e/16, two bits at shift 2·j of qs[32n + e%32] (n = e/128, j = e%128/32).
    let (s, qs) = (&b[0..16], &b[16..80]);
    out.d = f16_at(b, 80);
    out.m = f16_at(b, 82);
    for (i, &v) in s.iter().enumerate() {
        out.sc[i] = (v & 0xF) as i8;
        out.mn[i] = (v >> 4) as i8;
    }
    for (e, q) in out.q.iter_mut().enumerate() {
        let (n, j, l) = (e / 128, e % 128 / 32, e % 32);
        *q = (qs[32 * n + l] >> (2 * j)) & 3;
    }
}

/// Q3_K's block into `out` (see [`decode`]).
fn decode_q3k(b: &[u8], out: &mut Decoded) {
    // ggml's block_q3_K: hmask[32], qs[64], scales[12], d. Value e: sub-block e/16, its
    // low two bits at shift 2·j of qs[32n + e%32], its third in hmask[e%32] bit 4n + j
    // (n = e/128, j = e%128/32); the value is q − 4 with q = low | third << 2.
    let (hm, qs, s) = (&b[0..32], &b[32..96], &b[96..108]);
    out.d = f16_at(b, 108);
    for (i, sc) in out.sc.iter_mut().enumerate() {
        let low = if i < 8 { s[i] & 0xF } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        *sc = (low | (high << 4)) as i8 - 32;
    }
    for (e, q) in out.q.iter_mut().enumerate() {
        let (n, j, l) = (e / 128, e % 128 / 32, e % 32);
        let low = (qs[32 * n + l] >> (2 * j)) & 3;
        let third = (hm[l] >> (4 * n + j)) & 1;
        *q = low | (third << 2);
    }
}

/// IQ4_XS's block into `out` (see [`decode`]).
fn decode_iq4xs(b: &[u8], out: &mut Decoded) {
    // ggml's block_iq4_xs: d, scales_h (2 bits of sub-block j at 2j), scales_l[4] (4 bits of
    // sub-block j at 4·(j%2) of byte j/2), qs[128] (sub-block j: 16 bytes, low nibbles its
    // values 0..16, high 16..32); the value is `IQ4NL[q]·d·(ls − 32)`.
    out.d = f16_at(b, 0);
    let (sh, sl, qs) = (u16::from_le_bytes([b[2], b[3]]), &b[4..8], &b[8..136]);
    for (j, sc) in out.sc.iter_mut().take(8).enumerate() {
        let ls = ((sl[j / 2] >> (4 * (j % 2))) & 0xF) | ((((sh >> (2 * j)) & 3) as u8) << 4);
        *sc = ls as i8 - 32;
    }
    for (j, q) in qs.chunks_exact(16).enumerate() {
        for (l, &byte) in q.iter().enumerate() {
            out.q[32 * j + l] = byte & 0xF;
            out.q[32 * j + 16 + l] = byte >> 4;
        }
    }
}

/// The bytes of a decoded IQ4_XS block ([`decode_iq4xs`]'s inverse).
fn encode_iq4xs(dec: &Decoded, b: &mut [u8]) {
    put_f16(b, 0, dec.d);
    let mut sh = 0u16;
    b[4..8].fill(0);
    for j in 0..8 {
        let ls = (dec.sc[j] as i32 + 32) as u8 & 63;
        b[4 + j / 2] |= (ls & 0xF) << (4 * (j % 2));
        sh |= u16::from(ls >> 4) << (2 * j);
    }
    b[2..4].copy_from_slice(&sh.to_le_bytes());
    for j in 0..8 {
        for l in 0..16 {
            b[8 + 16 * j + l] = (dec.q[32 * j + l] & 0xF) | ((dec.q[32 * j + 16 + l] & 0xF) << 4);
        }
    }
}

fn put_f16(b: &mut [u8], at: usize, x: f16) {
    b[at..at + 2].copy_from_slice(&x.to_bits().to_le_bytes());
}

/// The GGUF bytes of a decoded block: [`decode`]'s inverse. Every bit of every supported
/// block is one of `decode`'s outputs (quants, scales, the K-quants' 6-bit sub-scales), so
/// `encode(decode(b)) == b` for any bytes `b`.
pub fn encode(kind: QuantKind, dec: &Decoded, b: &mut [u8]) {
    debug_assert_eq!(b.len(), kind.block_bytes());
    let q = &dec.q;
    match kind {
        QuantKind::Q4_0 | QuantKind::Q4_1 | QuantKind::Q5_0 | QuantKind::Q5_1 => {
            put_f16(b, 0, dec.d);
            let mut at = 2;
            if matches!(kind, QuantKind::Q4_1 | QuantKind::Q5_1) {
                put_f16(b, 2, -dec.m);
                at = 4;
            }
            if matches!(kind, QuantKind::Q5_0 | QuantKind::Q5_1) {
                let qh = (0..32).fold(0u32, |acc, j| acc | (((q[j] >> 4) & 1) as u32) << j);
                b[at..at + 4].copy_from_slice(&qh.to_le_bytes());
                at += 4;
            }
            for j in 0..16 {
                b[at + j] = (q[j] & 0xF) | ((q[j + 16] & 0xF) << 4);
            }
        }
        QuantKind::Q8_0 => {
            put_f16(b, 0, dec.d);
            b[2..34].copy_from_slice(&q[..32]);
        }
        QuantKind::Q8Iq4nl | QuantKind::Q8Fp4 | QuantKind::Q8Iq3xxs | QuantKind::Q8Iq3s | QuantKind::Q8Iq2 => {
            put_f16(b, 0, dec.d);
            let table = kind.table().unwrap_or(&IQ4NL);
            for (o, &i) in b[2..34].iter_mut().zip(&q[..32]) {
                *o = table[usize::from(i & 0xF)] as u8;
            }
        }
        QuantKind::Q4K | QuantKind::Q5K => {
            put_f16(b, 0, dec.d);
            put_f16(b, 2, dec.m);
            let s = &mut b[4..16];
            s.fill(0);
            for j in 0..8 {
                let (sc, mn) = (dec.sc[j] as u8 & 63, dec.mn[j] as u8 & 63);
                if j < 4 {
                    s[j] |= sc;
                    s[j + 4] |= mn;
                } else {
                    s[j + 4] = (sc & 0xF) | ((mn & 0xF) << 4);
                    s[j - 4] |= (sc >> 4) << 6;
                    s[j] |= (mn >> 4) << 6;
                }
            }
            let qs_at = if kind == QuantKind::Q5K {
                let qh = &mut b[16..48];
                qh.fill(0);
                for chunk in 0..4 {
                    for l in 0..32 {
                        qh[l] |= ((q[64 * chunk + l] >> 4) & 1) << (2 * chunk);
                        qh[l] |= ((q[64 * chunk + 32 + l] >> 4) & 1) << (2 * chunk + 1);
                    }
                }
                48
            } else {
                16
            };
            for chunk in 0..4 {
                for l in 0..32 {
                    b[qs_at + 32 * chunk + l] = (q[64 * chunk + l] & 0xF) | ((q[64 * chunk + 32 + l] & 0xF) << 4);
                }
            }
        }
        QuantKind::Q2K => {
            for (o, (&sc, &mn)) in b[..16].iter_mut().zip(dec.sc.iter().zip(&dec.mn)) {
                *o = (sc as u8 & 0xF) | ((mn as u8 & 0xF) << 4);
            }
            b[16..80].fill(0);
            for (e, &q) in q.iter().enumerate() {
                let (n, j, l) = (e / 128, e % 128 / 32, e % 32);
                b[16 + 32 * n + l] |= (q & 3) << (2 * j);
            }
            put_f16(b, 80, dec.d);
            put_f16(b, 82, dec.m);
        }
        QuantKind::Q3K => {
            b[..108].fill(0);
            for (i, &sc) in dec.sc.iter().enumerate() {
                let u = (sc as i32 + 32) as u8 & 63;
                if i < 8 {
                    b[96 + i] |= u & 0xF;
                } else {
                    b[96 + i - 8] |= (u & 0xF) << 4;
                }
                b[96 + 8 + i % 4] |= (u >> 4) << (2 * (i / 4));
            }
            for (e, &q) in q.iter().enumerate() {
                let (n, j, l) = (e / 128, e % 128 / 32, e % 32);
                b[32 + 32 * n + l] |= (q & 3) << (2 * j);
                b[l] |= ((q >> 2) & 1) << (4 * n + j);
            }
            put_f16(b, 108, dec.d);
        }
        QuantKind::Iq4Xs => encode_iq4xs(dec, b),
        QuantKind::Q6K => {
            for (j, &s) in dec.sc.iter().enumerate() {
                b[192 + j] = s as u8;
            }
            put_f16(b, 208, dec.d);
            for half in 0..2 {
                let y = &q[128 * half..];
                for l in 0..32 {
                    b[64 * half + l] = (y[l] & 0xF) | ((y[l + 64] & 0xF) << 4);
                    b[64 * half + l + 32] = (y[l + 32] & 0xF) | ((y[l + 96] & 0xF) << 4);
                    b[128 + 32 * half + l] =
                        (y[l] >> 4) | ((y[l + 32] >> 4) << 2) | ((y[l + 64] >> 4) << 4) | ((y[l + 96] >> 4) << 6);
                }
            }
        }
    }
}

/// The kind to pack Q8_0 blocks `raw` as: the first table kind (`TABLE_KINDS`) whose table
/// holds every value (the same numbers in 4 bits), else Q8_0. Stops once no table can.
pub fn narrow_q8_0(raw: &[u8]) -> QuantKind {
    let mut fits = [true; TABLE_KINDS.len()];
    for block in raw.chunks_exact(34) {
        for &v in &block[2..] {
            for (fit, (_, table)) in fits.iter_mut().zip(&TABLE_KINDS) {
                *fit &= table.contains(&(v as i8));
            }
        }
        if !fits.contains(&true) {
            return QuantKind::Q8_0;
        }
    }
    fits.iter().zip(&TABLE_KINDS).find(|(fit, _)| **fit).map_or(QuantKind::Q8_0, |(_, (kind, _))| *kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any bytes, decoded and encoded again, are the same bytes, for every kind.
    #[test]
    fn encode_inverts_decode() {
        let kinds = [
            QuantKind::Q4_0,
            QuantKind::Q4_1,
            QuantKind::Q5_0,
            QuantKind::Q5_1,
            QuantKind::Q8_0,
            QuantKind::Q4K,
            QuantKind::Q5K,
            QuantKind::Q6K,
            QuantKind::Q3K,
            QuantKind::Q2K,
            QuantKind::Iq4Xs,
        ];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for kind in kinds {
            for _ in 0..64 {
                let raw: Vec<u8> = (0..kind.block_bytes())
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        (x >> 32) as u8
                    })
                    .collect();
                let mut back = vec![0u8; raw.len()];
                encode(kind, &decode(kind, &raw), &mut back);
                assert_eq!(back, raw, "{kind:?}");
            }
        }
    }

    /// Q8_0 blocks of a table's values decode to indices and encode back to the same bytes;
    /// one value outside every table keeps a tensor Q8_0.
    #[test]
    fn table_kinds_round_trip_and_are_found_only_when_exact() {
        for (kind, table) in TABLE_KINDS {
            let mut raw = Vec::new();
            for blk in 0..4u8 {
                raw.extend_from_slice(&f16::from_f32(0.01 * f32::from(blk + 1)).to_bits().to_le_bytes());
                raw.extend((0..32).map(|i| table[(i * 7 + usize::from(blk)) % 16] as u8));
            }
            assert_eq!(narrow_q8_0(&raw), kind);
            for b in raw.chunks_exact(34) {
                let mut back = vec![0u8; 34];
                encode(kind, &decode(kind, b), &mut back);
                // MXFP4's two zeros (+0, −0) are one byte value: the same bytes either way.
                assert_eq!(back, b, "{kind:?}");
            }
            raw[100] = 127;
            assert_eq!(narrow_q8_0(&raw), QuantKind::Q8_0);
        }
    }
}
