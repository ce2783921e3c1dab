//! Weights repacked once at load: rows in groups of eight, interleaved.
//!
//! The kernels compute eight output rows at once, one per 32-bit SIMD lane, so
//! a group's quants are laid out lane by lane. Unpacked (what the kernels
//! read), a 32-value block of a group is 256 bytes: for each chunk `c` of four
//! values (`0..8`), for each row `r` (`0..8`), that row's four values
//! `4c..4c+4` of the block — one 32-byte vector per chunk whose lane `r` is
//! row `r`'s next four quants. Packed (what is kept in memory), 4-bit quants
//! are two chunks per byte (`c` in the low nibble, `c+4` in the high one), the
//! 5th bit of every value of the block is one 32-byte bit plane (bit `c` of
//! byte `4r+j`), the 5th–6th bits two 32-byte planes of bit pairs, and 8-bit
//! quants are stored unpacked. Scales stay f16 as in the file; K-quants'
//! integer sub-scales are kept as `[pair][row][2]` bytes, the order the
//! kernels multiply them in.
//!
//! Memory is that of the GGUF within a few percent (Q4_K: 4.63 bits a weight
//! against 4.5).

use half::f16;

use super::format::{decode, QuantKind};

/// Rows per group: one per 32-bit lane of a 256-bit vector.
pub const GROUP: usize = 8;

/// A `[n, k]` weight matrix repacked for our kernels.
#[derive(Debug, Clone)]
pub struct PackedMatrix {
    pub(super) kind: QuantKind,
    pub(super) n: usize,
    pub(super) k: usize,
    /// Packed quants, `groups × qbytes_per_group`.
    pub(super) qs: Vec<u8>,
    /// f16 bits of `d`, `groups × scale_blocks × 8`.
    pub(super) d: Vec<u16>,
    /// f16 bits of Q4_1's and Q5_1's `−m` and the K-quants' `dmin` (same shape as `d`; empty otherwise).
    pub(super) m: Vec<u16>,
    /// K-quants' sub-scales, `groups × superblocks × pairs × 8 × 2`.
    pub(super) sc: Vec<i8>,
    /// Q4_K/Q5_K's sub-mins, shaped as `sc`.
    pub(super) mn: Vec<i8>,
}

/// Why a matrix cannot be packed (the caller keeps candle's matmul).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    #[error("{kind:?}: {k} columns are not a multiple of the {block}-value block")]
    Columns { kind: QuantKind, k: usize, block: usize },
    #[error("{kind:?}: {got} bytes for a {n}×{k} matrix, expected {want}")]
    Bytes {
        kind: QuantKind,
        n: usize,
        k: usize,
        got: usize,
        want: usize,
    },
}

impl PackedMatrix {
    /// Packs `n` rows of `k` values of `kind`, given as GGUF block bytes in row order.
    pub fn pack(kind: QuantKind, raw: &[u8], n: usize, k: usize) -> Result<Self, PackError> {
        let be = kind.block_elems();
        if k == 0 || !k.is_multiple_of(be) {
            return Err(PackError::Columns { kind, k, block: be });
        }
        let row_bytes = k / be * kind.block_bytes();
        if raw.len() != n * row_bytes {
            return Err(PackError::Bytes {
                kind,
                n,
                k,
                got: raw.len(),
                want: n * row_bytes,
            });
        }
        let groups = n.div_ceil(GROUP);
        let mut m = PackedMatrix {
            kind,
            n,
            k,
            qs: vec![0; groups * Self::qbytes_per_group_for(kind, k)],
            d: vec![0; groups * Self::scale_blocks_for(kind, k) * GROUP],
            m: Vec::new(),
            sc: Vec::new(),
            mn: Vec::new(),
        };
        if matches!(
            kind,
            QuantKind::Q4_1 | QuantKind::Q5_1 | QuantKind::Q4K | QuantKind::Q5K
        ) {
            m.m = vec![0; m.d.len()];
        }
        let sub_len = groups * m.superblocks() * kind.subs() * GROUP;
        if kind.is_super() {
            m.sc = vec![0; sub_len];
            if kind != QuantKind::Q6K {
                m.mn = vec![0; sub_len];
            }
        }
        let mut unpacked = vec![0u8; GROUP * k];
        for g in 0..groups {
            unpacked.fill(0);
            for r in 0..GROUP {
                let row = g * GROUP + r;
                if row >= n {
                    break;
                }
                let row_raw = &raw[row * row_bytes..(row + 1) * row_bytes];
                for (bi, braw) in row_raw.chunks_exact(kind.block_bytes()).enumerate() {
                    let dec = decode(kind, braw);
                    for e in 0..be {
                        let col = bi * be + e;
                        let (b32, w) = (col / 32, col % 32);
                        unpacked[b32 * 256 + (w / 4) * 32 + r * 4 + w % 4] = dec.q[e];
                    }
                    let si = (g * m.scale_blocks() + bi) * GROUP + r;
                    m.d[si] = dec.d.to_bits();
                    if !m.m.is_empty() {
                        m.m[si] = dec.m.to_bits();
                    }
                    if kind.is_super() {
                        let pairs = kind.subs() / 2;
                        for j in 0..kind.subs() {
                            let at = (((g * m.superblocks() + bi) * pairs + j / 2) * GROUP + r) * 2 + j % 2;
                            m.sc[at] = dec.sc[j];
                            if !m.mn.is_empty() {
                                m.mn[at] = dec.mn[j];
                            }
                        }
                    }
                }
            }
            let qpg = m.qbytes_per_group();
            pack_group(kind, &unpacked, &mut m.qs[g * qpg..(g + 1) * qpg]);
        }
        Ok(m)
    }

    pub fn kind(&self) -> QuantKind {
        self.kind
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Input columns.
    pub fn cols(&self) -> usize {
        self.k
    }

    pub(super) fn groups(&self) -> usize {
        self.n.div_ceil(GROUP)
    }

    /// Blocks with their own f16 scale per row: 32-value blocks, or 256-value superblocks.
    pub(super) fn scale_blocks(&self) -> usize {
        Self::scale_blocks_for(self.kind, self.k)
    }

    fn scale_blocks_for(kind: QuantKind, k: usize) -> usize {
        k / kind.block_elems()
    }

    pub(super) fn superblocks(&self) -> usize {
        if self.kind.is_super() {
            self.k / 256
        } else {
            0
        }
    }

    /// Packed bytes of one 32-value block of a group.
    pub(super) const fn qbytes_per_block(kind: QuantKind) -> usize {
        32 * kind.bits()
    }

    pub(super) fn qbytes_per_group(&self) -> usize {
        Self::qbytes_per_group_for(self.kind, self.k)
    }

    fn qbytes_per_group_for(kind: QuantKind, k: usize) -> usize {
        k / 32 * Self::qbytes_per_block(kind)
    }

    /// Bytes this matrix takes in memory.
    pub fn bytes(&self) -> usize {
        self.qs.len() + 2 * (self.d.len() + self.m.len()) + self.sc.len() + self.mn.len()
    }
}

/// Packs one group's unpacked quants (`256` bytes per 32-value block) into `out`.
fn pack_group(kind: QuantKind, unpacked: &[u8], out: &mut [u8]) {
    let bpb = PackedMatrix::qbytes_per_block(kind);
    for (u, o) in unpacked.chunks_exact(256).zip(out.chunks_exact_mut(bpb)) {
        if kind.bits() == 8 {
            o.copy_from_slice(u);
            continue;
        }
        for c in 0..4 {
            for p in 0..32 {
                o[c * 32 + p] = (u[c * 32 + p] & 0xF) | ((u[(c + 4) * 32 + p] & 0xF) << 4);
            }
        }
        match kind.bits() {
            5 => {
                for p in 0..32 {
                    o[128 + p] = (0..8).fold(0u8, |acc, c| acc | (((u[c * 32 + p] >> 4) & 1) << c));
                }
            }
            6 => {
                for h in 0..2 {
                    for p in 0..32 {
                        o[128 + h * 32 + p] =
                            (0..4).fold(0u8, |acc, b| acc | (((u[(4 * h + b) * 32 + p] >> 4) & 3) << (2 * b)));
                    }
                }
            }
            _ => {}
        }
    }
}

/// The portable unpack: one group's packed quants back to 256 bytes per block.
pub(super) fn unpack_group_portable(kind: QuantKind, packed: &[u8], out: &mut [u8]) {
    let bpb = PackedMatrix::qbytes_per_block(kind);
    for (o, p) in out.chunks_exact_mut(256).zip(packed.chunks_exact(bpb)) {
        if kind.bits() == 8 {
            o.copy_from_slice(p);
            continue;
        }
        for c in 0..4 {
            for i in 0..32 {
                o[c * 32 + i] = p[c * 32 + i] & 0xF;
                o[(c + 4) * 32 + i] = p[c * 32 + i] >> 4;
            }
        }
        match kind.bits() {
            5 => {
                for c in 0..8 {
                    for i in 0..32 {
                        o[c * 32 + i] |= ((p[128 + i] >> c) & 1) << 4;
                    }
                }
            }
            6 => {
                for c in 0..8 {
                    let (h, b) = (c / 4, c % 4);
                    for i in 0..32 {
                        o[c * 32 + i] |= ((p[128 + h * 32 + i] >> (2 * b)) & 3) << 4;
                    }
                }
            }
            _ => {}
        }
    }
}

/// f16 bits to f32 (exact).
#[inline]
pub(super) fn h2f(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}
