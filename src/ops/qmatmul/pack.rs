//! Weights repacked once at load: rows in groups of eight, interleaved.
//!
//! The kernels compute eight output rows at once, one per 32-bit SIMD lane, so
//! a group's quants are laid out lane by lane. Unpacked (what the kernels
//! read), a 32-value block of a group is 256 bytes: for each chunk `c` of four
//! values (`0..8`), for each row `r` (`0..8`), that row's four values
//! `4c..4c+4` of the block — one 32-byte vector per chunk whose lane `r` is
//! row `r`'s next four quants. Packed (what is kept in memory), 4-bit quants
//! are two chunks per byte (`c` in the low nibble, `c+4` in the high one), 2-bit
//! quants (Q2_K) four per byte in two 32-byte planes (bits `2b..2b+2` of plane `h`
//! are chunk `4h+b`), the
//! 5th bit of every value of the block is one 32-byte bit plane (bit `c` of
//! byte `4r+j`), the 5th–6th bits two 32-byte planes of bit pairs, and 8-bit
//! quants are stored unpacked. Scales stay f16 as in the file; K-quants'
//! integer sub-scales are kept as `[pair][row][2]` bytes, the order the
//! kernels multiply them in.
//!
//! Groups are ordered for the kernel that will read them ([`Layout`]), so
//! that it reads one stream through memory: on CPUs with AVX-512, whose
//! kernel computes two groups at once, pairs of groups are interleaved block
//! by block (block `b` of group `2i`, then block `b` of group `2i+1`, then
//! block `b+1` of each; an odd last group's blocks follow one another);
//! elsewhere each group's blocks follow one another. The quants and every
//! array of scales are ordered alike ([`PackedMatrix::q_at`],
//! [`PackedMatrix::scale_at`], [`PackedMatrix::sub_at`]), and every kernel
//! reads either layout. (Read as two streams each one group long, the pair
//! kernel's decode, bound by memory, ran at half the speed: the CPU's
//! prefetchers start over on every stream.)
//!
//! Memory is that of the GGUF within a few percent (Q4_K: 4.63 bits a weight
//! against 4.5).

use half::f16;

use super::format::{decode, encode, narrow_q8_0, Decoded, QuantKind};
use super::Isa;

/// Rows per group: one per 32-bit lane of a 256-bit vector.
pub const GROUP: usize = 8;

/// How a packed matrix orders its groups in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Each group's blocks one after another: one stream for the eight-row kernels.
    Groups,
    /// Pairs of groups interleaved block by block: one stream for the AVX-512 pair kernel.
    Pairs,
}

impl Layout {
    /// The layout that `isa`'s kernel reads as one stream.
    pub fn for_isa(isa: Isa) -> Self {
        match isa {
            Isa::Avx512 | Isa::Avx512Vnni => Self::Pairs,
            Isa::Portable | Isa::Avx2 | Isa::AvxVnni => Self::Groups,
        }
    }
}

/// A `[n, k]` weight matrix repacked for our kernels.
#[derive(Debug, Clone)]
pub struct PackedMatrix {
    pub(super) kind: QuantKind,
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) layout: Layout,
    /// Packed quants, `groups × qbytes_per_group`, in `layout`'s order ([`Self::q_at`]).
    pub(super) qs: Vec<u8>,
    /// f16 bits of `d`, `groups × scale_blocks × 8` ([`Self::scale_at`]).
    pub(super) d: Vec<u16>,
    /// f16 bits of Q4_1's and Q5_1's `−m` and the K-quants' `dmin` (same shape as `d`; empty otherwise).
    pub(super) m: Vec<u16>,
    /// K-quants' sub-scales, `groups × superblocks × pairs × 8 × 2` ([`Self::sub_at`]).
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
    /// Packs `n` rows of `k` values of `kind`, given as GGUF block bytes in row order,
    /// in the layout of this CPU's fastest kernel.
    pub fn pack(kind: QuantKind, raw: &[u8], n: usize, k: usize) -> Result<Self, PackError> {
        Self::pack_as(kind, raw, n, k, Layout::for_isa(Isa::detect()))
    }

    /// As [`pack`](Self::pack), in a chosen layout (every kernel reads either).
    ///
    /// Q8_0 blocks whose values all lie in IQ4_NL's or MXFP4's table are kept as 4-bit
    /// indices into it ([`super::format::narrow_q8_0`]): the same numbers in half the memory.
    pub fn pack_as(kind: QuantKind, raw: &[u8], n: usize, k: usize, layout: Layout) -> Result<Self, PackError> {
        let kind = if kind == QuantKind::Q8_0 { narrow_q8_0(raw) } else { kind };
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
            layout,
            qs: vec![0; groups * Self::qbytes_per_group_for(kind, k)],
            d: vec![0; groups * Self::scale_blocks_for(kind, k) * GROUP],
            m: Vec::new(),
            sc: Vec::new(),
            mn: Vec::new(),
        };
        if kind.has_m() {
            m.m = vec![0; m.d.len()];
        }
        let sub_len = groups * m.superblocks() * kind.subs() * GROUP;
        if kind.is_super() {
            m.sc = vec![0; sub_len];
            if kind.sub_mins() {
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
                    let si = m.scale_at(g, bi) + r;
                    m.d[si] = dec.d.to_bits();
                    if !m.m.is_empty() {
                        m.m[si] = dec.m.to_bits();
                    }
                    if kind.is_super() {
                        for j in 0..kind.subs() {
                            let at = m.sub_at(g, bi, j / 2) + r * 2 + j % 2;
                            m.sc[at] = dec.sc[j];
                            if !m.mn.is_empty() {
                                m.mn[at] = dec.mn[j];
                            }
                        }
                    }
                }
            }
            let bpb = Self::qbytes_per_block(kind);
            for (b, u) in unpacked.chunks_exact(256).enumerate() {
                let at = m.q_at(g, b);
                pack_block(kind, u, &mut m.qs[at..at + bpb]);
            }
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

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Where block `b` of group `g` sits among the `(group, block)` units of an
    /// array holding `per_group` blocks per group, in this matrix's layout.
    fn unit(&self, g: usize, b: usize, per_group: usize) -> usize {
        match self.layout {
            Layout::Groups => g * per_group + b,
            Layout::Pairs => {
                // A pair's blocks alternate; an odd last group's follow one another.
                let lanes = if (g | 1) < self.groups() { 2 } else { 1 };
                (g & !1) * per_group + b * lanes + (g & 1)
            }
        }
    }

    /// Offset in `qs` of group `g`'s 32-value block `b` (`qbytes_per_block` bytes).
    pub(super) fn q_at(&self, g: usize, b: usize) -> usize {
        self.unit(g, b, self.k / 32) * Self::qbytes_per_block(self.kind)
    }

    /// Index in `d` (and `m`) of group `g`'s first row in scale block `b`.
    pub(super) fn scale_at(&self, g: usize, b: usize) -> usize {
        self.unit(g, b, self.scale_blocks()) * GROUP
    }

    /// Index in `sc` (and `mn`) of group `g`'s `[row][2]` sub-scales of pair `p`
    /// in superblock `sb`.
    pub(super) fn sub_at(&self, g: usize, sb: usize, p: usize) -> usize {
        (self.unit(g, sb, self.superblocks()) * (self.kind.subs() / 2) + p) * GROUP * 2
    }

    fn qbytes_per_group_for(kind: QuantKind, k: usize) -> usize {
        k / 32 * Self::qbytes_per_block(kind)
    }

    /// Appends row `r`'s GGUF blocks to `out`: the bytes [`pack`](Self::pack) was given for
    /// it, exactly (the packed form keeps every quant, scale and sub-scale; test). So a
    /// tied embedding can look its rows up here instead of keeping the file's copy too.
    pub fn row_gguf(&self, r: usize, out: &mut Vec<u8>) {
        let kind = self.kind;
        let (g, lane, be) = (r / GROUP, r % GROUP, kind.block_elems());
        let mut unpacked = vec![0u8; self.k / 32 * 256];
        unpack_group_portable(self, g, &mut unpacked);
        let mut block = vec![0u8; kind.block_bytes()];
        for bi in 0..self.k / be {
            let mut dec = Decoded {
                q: [0; 256],
                d: f16::from_bits(self.d[self.scale_at(g, bi) + lane]),
                m: self.m.get(self.scale_at(g, bi) + lane).map_or(f16::ZERO, |&m| f16::from_bits(m)),
                sc: [0; 16],
                mn: [0; 16],
            };
            for e in 0..be {
                let col = bi * be + e;
                let (b32, w) = (col / 32, col % 32);
                dec.q[e] = unpacked[b32 * 256 + (w / 4) * 32 + lane * 4 + w % 4];
            }
            if kind.is_super() {
                for j in 0..kind.subs() {
                    let at = self.sub_at(g, bi, j / 2) + lane * 2 + j % 2;
                    dec.sc[j] = self.sc[at];
                    dec.mn[j] = self.mn.get(at).copied().unwrap_or(0);
                }
            }
            encode(kind, &dec, &mut block);
            out.extend_from_slice(&block);
        }
    }

    /// Bytes this matrix takes in memory.
    pub fn bytes(&self) -> usize {
        self.qs.len() + 2 * (self.d.len() + self.m.len()) + self.sc.len() + self.mn.len()
    }
}

/// Packs one block of a group, unpacked (`u`: 256 bytes), into `o`.
fn pack_block(kind: QuantKind, u: &[u8], o: &mut [u8]) {
    if kind.bits() == 8 {
        o.copy_from_slice(u);
        return;
    }
    if kind.bits() == 2 {
        // Two bytes planes: bits 2b..2b+2 of plane h are chunk 4h+b's value.
        for h in 0..2 {
            for p in 0..32 {
                o[h * 32 + p] = (0..4).fold(0u8, |acc, b| acc | ((u[(4 * h + b) * 32 + p] & 3) << (2 * b)));
            }
        }
        return;
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

/// The portable unpack: group `g`'s packed quants back to 256 bytes per block.
pub(super) fn unpack_group_portable(m: &PackedMatrix, g: usize, out: &mut [u8]) {
    let (kind, bpb) = (m.kind, PackedMatrix::qbytes_per_block(m.kind));
    for (b, o) in out.chunks_exact_mut(256).enumerate() {
        let p = &m.qs[m.q_at(g, b)..][..bpb];
        if kind.bits() == 8 {
            o.copy_from_slice(p);
            continue;
        }
        if kind.bits() == 2 {
            for c in 0..8 {
                for i in 0..32 {
                    o[c * 32 + i] = (p[(c / 4) * 32 + i] >> (2 * (c % 4))) & 3;
                }
            }
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

/// A table kind's unpacked indices (`u`, from [`unpack_group_portable`]) as their values.
pub(super) fn look_up(kind: QuantKind, u: &mut [u8]) {
    if let Some(t) = kind.table() {
        for q in u {
            *q = t[usize::from(*q & 0xF)] as u8;
        }
    }
}

/// f16 bits to f32 (exact).
#[inline]
pub(super) fn h2f(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}
