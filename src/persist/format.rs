//! The cache file format: one file per conversation holding the K/V blocks of its token history.
//!
//! Owns: [`CacheHeader`] (encode, decode with every check), [`KvLayout`], [`Fingerprint`] and the
//! format constants. Everything is little-endian:
//!
//! ```text
//! offset  size            field
//! 0       8               magic "HEARTHKV"
//! 8       4               format version: 1 when every layer has the same heads, 2 when
//!                         they differ, 3 when they are alike and keep K only (V read from
//!                         K: DeepSeek-V2's latent), 4 when they are alike and a recurrent
//!                         state follows the blocks (Qwen3.5's delta nets)
//! 12      4               header_bytes: bytes 0..header_bytes are the header, checksum included
//! 16      16              fingerprint (see `Fingerprint`)
//! 32      4 × 5           layout: block_size, layers, kv_heads, head_dim, dtype (0 = f32,
//!                         1 = f16, 2 = bf16, 3 = q8_0); in version 2 kv_heads and head_dim
//!                         are 0 and the layer table says
//! 52      4               n_tokens: the token history
//! 56      4               n_blocks: full blocks stored (<= n_tokens / block_size)
//! 60      8               payload_offset: where block 0 starts (a multiple of 4096)
//! 68      8 × layers      version 2 only, the layer table: each layer's kv_heads, head_dim
//! 68      16              version 4 only, the state: state_blocks (u32: it is the state after
//!                         that many blocks, 1..=n_blocks), state_floats (u32), xxh3-64 of its
//!                         bytes
//! ...     4 × n_tokens    token ids
//! ...     16 × n_blocks   per block: its chain hash (kv::hash_block), xxh3-64 of its payload
//! ...     8               xxh3-64 of bytes 0..header_bytes-8
//! payload_offset + k × block_bytes: block k, in `runtime::KvMemory`'s block layout
//!     ([layer][K, V][block_size][kv_heads][head_dim], dtype, each layer with its own heads;
//!     version 3: [layer][K]...), block_bytes = the sum over layers of planes (2, or 1 in
//!     version 3) × block_size × kv_heads × (bytes of head_dim values: 4, 2, 2 per value; q8_0
//!     34 per 32)
//! payload_offset + n_blocks × block_bytes: version 4 only, the state: state_floats f32
//!     (hearth's `RecurrentState` buffers in order: per recurrent layer its convolution's last
//!     inputs, then its heads' states)
//! ```
//!
//! Version 2 exists for models whose layers differ (Gemma 4's global layers have fewer, wider
//! heads than its local ones), version 3 for models whose V is read from K (DeepSeek-V2's
//! latent attention: its header is version 1's), version 4 for models with recurrent layers
//! (their state after a block cannot be rebuilt from K/V blocks; version 1's header with the
//! state's entry); every other model's files are written, and read, as version 1 was, so the
//! files of earlier hearths stay valid.
//!
//! Invariants a decoded header satisfies: the magic, the version and the header checksum
//! match; sizes are bounded ([`MAX_TOKENS`]) and consistent with each other and the file's
//! length *before* anything is allocated from them, so no input can make the reader allocate
//! more than the file's own size (and never more than the bounds) or panic. A file shorter than
//! its blocks is still readable up to its last whole block ([`CacheHeader::blocks_present`]).
//!
//! Counterpart: llama.cpp's slot save files (`llama_state_seq_save_file`: magic, version, token
//! count, tokens, then the raw state) and LMCache's disk chunks keyed by chunk hash.

use std::fmt;
use std::path::Path;

use super::PersistError;
use crate::kv::BlockHash;
use crate::ops::{KvShape, LayerKv};

pub const MAGIC: [u8; 8] = *b"HEARTHKV";
/// The newest format this hearth reads and writes (it writes 1 where 2 or 3 is not needed).
pub const FORMAT_VERSION: u32 = 4;
/// Payloads start on a 4 KiB boundary (page-aligned reads).
pub const PAYLOAD_ALIGN: u64 = 4096;
/// Most tokens a cache file may hold (a 16M-token history is far past any context).
pub const MAX_TOKENS: u32 = 1 << 24;
/// Bytes of the fixed part of the header, before the token ids.
pub const FIXED_HEADER_BYTES: usize = 68;
/// Most floats a stored recurrent state may hold (1 GiB).
pub const MAX_STATE_FLOATS: u32 = 1 << 28;
/// Bytes of version 4's state entry.
const STATE_ENTRY_BYTES: usize = 16;
/// Sanity bounds on the layout fields.
const MAX_LAYERS: u32 = 1024;
const MAX_KV_HEADS: u32 = 1024;
const MAX_HEAD_DIM: u32 = 4096;

pub use crate::config::KvDtype;

/// The shape of a block's payload: the model's K/V heads per layer, the block size, the type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvLayout {
    pub block_size: u32,
    pub dtype: KvDtype,
    pub shape: KvShape,
}

impl KvLayout {
    /// Bytes of one block.
    pub fn block_bytes(&self) -> u64 {
        self.shape
            .iter()
            .map(|l| {
                self.shape.planes() as u64 * u64::from(self.block_size) * l.kv_heads as u64 * self.dtype.row_bytes(l.head_dim) as u64
            })
            .sum()
    }

    /// The format version its files are written in: 1 when every layer is alike, 3 when they
    /// are and keep K only, else 2.
    pub fn version(&self) -> u32 {
        match (self.shape.uniform_layer().is_some(), self.shape.v_from_k()) {
            (true, false) => 1,
            (true, true) => 3,
            (false, _) => 2,
        }
    }

    /// Entries of the layer table its header carries (none in versions 1 and 3).
    fn table_layers(&self) -> usize {
        if self.version() == 2 {
            self.shape.layers()
        } else {
            0
        }
    }

    fn check(&self) -> Result<(), String> {
        let bs = self.block_size;
        if !bs.is_power_of_two() || !(8..=256).contains(&bs) {
            return Err(format!("block size {bs}"));
        }
        if !(1..=MAX_LAYERS as usize).contains(&self.shape.layers()) {
            return Err(format!("{} layers", self.shape.layers()));
        }
        for (i, l) in self.shape.iter().enumerate() {
            if !(1..=MAX_KV_HEADS as usize).contains(&l.kv_heads) || !(1..=MAX_HEAD_DIM as usize).contains(&l.head_dim) {
                return Err(format!("layer {i}: {} heads × {}", l.kv_heads, l.head_dim));
            }
        }
        if self.shape.v_from_k() && self.shape.uniform_layer().is_none() {
            return Err("layers of different shapes that keep K only".into());
        }
        self.shape.check_dtype(self.dtype)
    }
}

/// What makes stored K/V reusable: a 128-bit hash of the model's weights file (which holds its
/// architecture settings, tokenizer and chat template), any separate tokenizer files, the K/V
/// layout and dtype, the block size, and how hearth computes K/V (see
/// `persist::fingerprint`). Two runs agree on it exactly when one's K/V is valid for the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 16]);

impl Fingerprint {
    /// Hashes `parts` (each length-prefixed, so no two lists collide by concatenation).
    pub fn of(parts: &[&[u8]]) -> Self {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for p in parts {
            h.update(&(p.len() as u64).to_le_bytes());
            h.update(p);
        }
        Self(h.digest128().to_le_bytes())
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// One stored block: its chain hash and its payload's checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockEntry {
    pub hash: BlockHash,
    pub checksum: u64,
}

/// A stored recurrent state: the state after `blocks` blocks, `floats` values, their checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateEntry {
    pub blocks: u32,
    pub floats: u32,
    pub checksum: u64,
}

/// A decoded (or to-be-written) cache file header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheHeader {
    pub fingerprint: Fingerprint,
    pub layout: KvLayout,
    pub tokens: Vec<u32>,
    pub blocks: Vec<BlockEntry>,
    pub payload_offset: u64,
    /// Version 4: the recurrent state stored after the blocks.
    pub state: Option<StateEntry>,
}

/// The checksum of a stored state's bytes.
pub fn state_checksum(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// The checksum of a block's payload.
pub fn block_checksum(payload: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(payload)
}

/// Bytes of a header with these counts and a layer table of `table_layers` entries (0 in
/// versions 1, 3 and 4), with version 4's state entry where `state`.
pub fn header_bytes(n_tokens: usize, n_blocks: usize, table_layers: usize, state: bool) -> u64 {
    let entry = if state { STATE_ENTRY_BYTES as u64 } else { 0 };
    FIXED_HEADER_BYTES as u64 + 8 * table_layers as u64 + entry + 4 * n_tokens as u64 + 16 * n_blocks as u64 + 8
}

/// The header's bytes for `layout` (with a state entry where `state`), rounded up to
/// [`PAYLOAD_ALIGN`].
pub fn payload_offset_for(layout: &KvLayout, n_tokens: usize, n_blocks: usize, state: bool) -> u64 {
    header_bytes(n_tokens, n_blocks, layout.table_layers(), state).div_ceil(PAYLOAD_ALIGN) * PAYLOAD_ALIGN
}

/// The largest header any valid file can have.
fn max_header_bytes() -> u64 {
    header_bytes(MAX_TOKENS as usize, MAX_TOKENS as usize / 8, MAX_LAYERS as usize, true)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl CacheHeader {
    pub fn block_bytes(&self) -> u64 {
        self.layout.block_bytes()
    }

    /// Bytes of the header, checksum included.
    pub fn header_len(&self) -> u64 {
        header_bytes(self.tokens.len(), self.blocks.len(), self.layout.table_layers(), self.state.is_some())
    }

    /// The format version the header is written in: its layout's, or 4 with a state.
    pub fn version(&self) -> u32 {
        if self.state.is_some() {
            4
        } else {
            self.layout.version()
        }
    }

    /// Where the stored state starts: after the last block.
    pub fn state_offset(&self) -> u64 {
        self.payload_offset + self.blocks.len() as u64 * self.block_bytes()
    }

    /// The file's full length.
    pub fn file_len(&self) -> u64 {
        self.state_offset() + self.state.map_or(0, |s| 4 * u64::from(s.floats))
    }

    /// Offset of block `k`'s payload.
    pub fn block_offset(&self, k: usize) -> u64 {
        self.payload_offset + k as u64 * self.block_bytes()
    }

    /// Blocks wholly inside a file of `file_len` bytes.
    pub fn blocks_present(&self, file_len: u64) -> usize {
        let bb = self.block_bytes().max(1);
        let whole = file_len.saturating_sub(self.payload_offset) / bb;
        (whole.min(self.blocks.len() as u64)) as usize
    }

    /// The header's bytes, checksum included (`payload_offset` must leave room for them).
    pub fn encode(&self) -> Vec<u8> {
        let n = self.header_len() as usize;
        let mut b = Vec::with_capacity(n);
        b.extend_from_slice(&MAGIC);
        let l = &self.layout;
        b.extend_from_slice(&self.version().to_le_bytes());
        b.extend_from_slice(&(n as u32).to_le_bytes());
        b.extend_from_slice(&self.fingerprint.0);
        // Versions 1 and 3: the one shape; version 2: zeros here, the table below.
        let one = l.shape.uniform_layer().map_or((0, 0), |s| (s.kv_heads as u32, s.head_dim as u32));
        let layers = l.shape.layers() as u32;
        for v in [l.block_size, layers, one.0, one.1, l.dtype.code()] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&(self.tokens.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.blocks.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.payload_offset.to_le_bytes());
        if l.version() == 2 {
            for s in l.shape.iter() {
                b.extend_from_slice(&(s.kv_heads as u32).to_le_bytes());
                b.extend_from_slice(&(s.head_dim as u32).to_le_bytes());
            }
        }
        if let Some(st) = &self.state {
            b.extend_from_slice(&st.blocks.to_le_bytes());
            b.extend_from_slice(&st.floats.to_le_bytes());
            b.extend_from_slice(&st.checksum.to_le_bytes());
        }
        for t in &self.tokens {
            b.extend_from_slice(&t.to_le_bytes());
        }
        for e in &self.blocks {
            b.extend_from_slice(&e.hash.0.to_le_bytes());
            b.extend_from_slice(&e.checksum.to_le_bytes());
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// Reads and checks the header of `file` (whose length is `file_len`), reading nothing past
    /// it. `path` is for messages.
    pub fn read(file: &mut impl std::io::Read, file_len: u64, path: &Path) -> Result<Self, PersistError> {
        let corrupt = |r: String| PersistError::corrupt(path, r);
        if file_len < 16 {
            return Err(if file_len == 0 {
                corrupt("the file is empty".into())
            } else {
                corrupt(format!("{file_len} bytes: too short for a header"))
            });
        }
        let mut head = [0u8; 16];
        file.read_exact(&mut head).map_err(|e| PersistError::io(path, e))?;
        if head[..8] != MAGIC {
            return Err(PersistError::NotACacheFile { path: path.into() });
        }
        let version = u32_at(&head, 8);
        if !(1..=FORMAT_VERSION).contains(&version) {
            return Err(PersistError::UnsupportedVersion {
                path: path.into(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let n = u64::from(u32_at(&head, 12));
        if n < header_bytes(0, 0, 0, false) || n > max_header_bytes() {
            return Err(corrupt(format!("header size {n}")));
        }
        if n > file_len {
            return Err(corrupt(format!(
                "header of {n} bytes in a file of {file_len} (truncated)"
            )));
        }
        // n is bounded by the file's length and by max_header_bytes(): safe to allocate.
        let mut b = vec![0u8; n as usize];
        b[..16].copy_from_slice(&head);
        file.read_exact(&mut b[16..]).map_err(|e| PersistError::io(path, e))?;
        Self::decode(&b, path)
    }

    /// Decodes a whole header (`b` is exactly `header_bytes` long).
    pub fn decode(b: &[u8], path: &Path) -> Result<Self, PersistError> {
        let corrupt = |r: String| PersistError::corrupt(path, r);
        let n = b.len();
        if n < header_bytes(0, 0, 0, false) as usize {
            return Err(corrupt(format!("header size {n}")));
        }
        if b[..8] != MAGIC {
            return Err(PersistError::NotACacheFile { path: path.into() });
        }
        let want = u64_at(b, n - 8);
        if xxhash_rust::xxh3::xxh3_64(&b[..n - 8]) != want {
            return Err(corrupt("the header fails its checksum".into()));
        }
        let mut fp = [0u8; 16];
        fp.copy_from_slice(&b[16..32]);
        let dtype_code = u32_at(b, 48);
        let dtype = KvDtype::from_code(dtype_code).ok_or_else(|| corrupt(format!("K/V dtype {dtype_code}")))?;
        let layout = decode_layout(b, dtype).map_err(corrupt)?;
        layout.check().map_err(corrupt)?;
        let with_state = u32_at(b, 8) == 4;
        let table_end = FIXED_HEADER_BYTES + 8 * layout.table_layers();
        let n_tokens = u32_at(b, 52);
        let n_blocks = u32_at(b, 56);
        let payload_offset = u64_at(b, 60);
        if n_tokens > MAX_TOKENS {
            return Err(corrupt(format!("{n_tokens} tokens")));
        }
        if u64::from(n_blocks) * u64::from(layout.block_size) > u64::from(n_tokens) {
            return Err(corrupt(format!("{n_blocks} blocks for {n_tokens} tokens")));
        }
        if header_bytes(n_tokens as usize, n_blocks as usize, layout.table_layers(), with_state) != n as u64 {
            return Err(corrupt(format!("header size {n} does not match its counts")));
        }
        if !payload_offset.is_multiple_of(PAYLOAD_ALIGN)
            || payload_offset < n as u64
            || payload_offset > n as u64 + (1 << 30)
        {
            return Err(corrupt(format!("payload offset {payload_offset}")));
        }
        let state = if with_state {
            let st = StateEntry {
                blocks: u32_at(b, table_end),
                floats: u32_at(b, table_end + 4),
                checksum: u64_at(b, table_end + 8),
            };
            if st.blocks == 0 || st.blocks > n_blocks || st.floats == 0 || st.floats > MAX_STATE_FLOATS {
                return Err(corrupt(format!(
                    "a state of {} floats after {} of {n_blocks} blocks",
                    st.floats, st.blocks
                )));
            }
            Some(st)
        } else {
            None
        };
        let tok_start = table_end + if with_state { STATE_ENTRY_BYTES } else { 0 };
        let tok_end = tok_start + 4 * n_tokens as usize;
        let tokens = b[tok_start..tok_end]
            .chunks_exact(4)
            .map(|c| u32_at(c, 0))
            .collect();
        let blocks = b[tok_end..n - 8]
            .chunks_exact(16)
            .map(|c| BlockEntry {
                hash: BlockHash(u64_at(c, 0)),
                checksum: u64_at(c, 8),
            })
            .collect();
        Ok(Self {
            fingerprint: Fingerprint(fp),
            layout,
            tokens,
            blocks,
            payload_offset,
            state,
        })
    }
}

/// The layout fields of header `b` (checksummed, at least the fixed part long): version 1's
/// (and 3's) one shape, or version 2's layer table, which must lie inside `b`.
fn decode_layout(b: &[u8], dtype: KvDtype) -> Result<KvLayout, String> {
    let (version, layers) = (u32_at(b, 8), u32_at(b, 36));
    let (kv_heads, head_dim) = (u32_at(b, 40) as usize, u32_at(b, 44) as usize);
    if layers == 0 || layers > MAX_LAYERS {
        return Err(format!("{layers} layers"));
    }
    if !(1..=FORMAT_VERSION).contains(&version) {
        return Err(format!("format version {version}"));
    }
    let shape = if version == 1 || version == 4 {
        KvShape::uniform(layers as usize, kv_heads, head_dim)
    } else if version == 3 {
        KvShape::uniform(layers as usize, kv_heads, head_dim).with_v_from_k()
    } else {
        if (kv_heads, head_dim) != (0, 0) {
            return Err(format!("a version {version} header with one shape ({kv_heads} heads × {head_dim})"));
        }
        let end = FIXED_HEADER_BYTES + 8 * layers as usize;
        if end + 8 > b.len() {
            return Err(format!("a table of {layers} layers in a header of {} bytes", b.len()));
        }
        KvShape::per_layer(
            b[FIXED_HEADER_BYTES..end]
                .chunks_exact(8)
                .map(|c| LayerKv {
                    kv_heads: u32_at(c, 0) as usize,
                    head_dim: u32_at(c, 4) as usize,
                })
                .collect(),
        )
    };
    let layout = KvLayout {
        block_size: u32_at(b, 32),
        dtype,
        shape,
    };
    if version == 2 && layout.version() == 1 {
        return Err("a version 2 header whose layers are all alike".into());
    }
    Ok(layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> CacheHeader {
        let tokens: Vec<u32> = (0..37).collect();
        CacheHeader {
            fingerprint: Fingerprint::of(&[b"model"]),
            layout: KvLayout {
                block_size: 16,
                dtype: KvDtype::F32,
                shape: KvShape::uniform(2, 1, 4),
            },
            blocks: (0..2)
                .map(|k| BlockEntry {
                    hash: BlockHash(k),
                    checksum: k * 7,
                })
                .collect(),
            payload_offset: 4096,
            tokens,
            state: None,
        }
    }

    /// `b`, `h` encoded, decodes and reads back as `h`, and with any one byte flipped fails.
    fn reads_back_and_catches_every_flip(h: &CacheHeader, b: &[u8]) {
        let p = Path::new("x.hkv");
        assert_eq!(&CacheHeader::decode(b, p).unwrap(), h);
        assert_eq!(&CacheHeader::read(&mut &b[..], h.file_len(), p).unwrap(), h);
        for i in 0..b.len() {
            let mut bad = b.to_vec();
            bad[i] ^= 0x10;
            assert!(CacheHeader::decode(&bad, p).is_err(), "byte {i}");
        }
    }

    #[test]
    fn encode_decode_round_trip_and_every_flipped_byte_is_caught() {
        let h = sample();
        let b = h.encode();
        assert_eq!(b.len() as u64, header_bytes(37, 2, 0, false));
        reads_back_and_catches_every_flip(&h, &b);
        assert_eq!(h.blocks_present(h.file_len()), 2);
        assert_eq!(h.blocks_present(h.file_len() - 1), 1);
        assert_eq!(h.blocks_present(10), 0);
    }

    /// A layout whose layers differ is written as version 2 with its layer table, read back
    /// whole, and every flipped byte caught; a uniform one stays version 1, as files were
    /// before.
    #[test]
    fn mixed_layers_write_version_2() {
        let mut h = sample();
        assert_eq!(h.encode()[8], 1);
        let layer = |kv_heads, head_dim| LayerKv { kv_heads, head_dim };
        h.layout.shape = KvShape::per_layer(vec![layer(2, 4), layer(1, 8), layer(2, 4)]);
        h.payload_offset = payload_offset_for(&h.layout, 37, 2, false);
        let b = h.encode();
        assert_eq!(b[8], 2);
        assert_eq!(b.len() as u64, header_bytes(37, 2, 3, false));
        assert_eq!(h.block_bytes(), 2 * 16 * (8 + 8 + 8) * 4);
        reads_back_and_catches_every_flip(&h, &b);
        // A version 2 header of alike layers is not one this hearth writes.
        h.layout.shape = KvShape::per_layer(vec![layer(2, 4); 3]);
        let mut b = h.encode();
        assert_eq!(b[8], 1);
        b[8] = 2;
        let n = b.len();
        let sum = xxhash_rust::xxh3::xxh3_64(&b[..n - 8]);
        b[n - 8..].copy_from_slice(&sum.to_le_bytes());
        assert!(CacheHeader::decode(&b, Path::new("x.hkv")).is_err());
    }

    /// A header with a recurrent state is written as version 4 (version 1's with the state's
    /// entry), read back whole, and every flipped byte caught; the state follows the blocks and
    /// counts in the file's length; a state past the blocks, or of no values, is refused.
    #[test]
    fn a_recurrent_state_writes_version_4() {
        let mut h = sample();
        h.state = Some(StateEntry {
            blocks: 2,
            floats: 100,
            checksum: 42,
        });
        h.payload_offset = payload_offset_for(&h.layout, 37, 2, true);
        let b = h.encode();
        assert_eq!(b[8], 4);
        assert_eq!(b.len() as u64, header_bytes(37, 2, 0, true));
        reads_back_and_catches_every_flip(&h, &b);
        assert_eq!(h.state_offset(), 4096 + 2 * h.block_bytes());
        assert_eq!(h.file_len(), h.state_offset() + 400);
        for bad in [(3, 100), (0, 100), (1, 0)] {
            let mut h2 = h.clone();
            h2.state = Some(StateEntry {
                blocks: bad.0,
                floats: bad.1,
                checksum: 42,
            });
            assert!(CacheHeader::decode(&h2.encode(), Path::new("x.hkv")).is_err(), "{bad:?}");
        }
    }

    /// A layout that keeps K only is written as version 3 (version 1's header), its blocks
    /// half as long, read back whole, and every flipped byte caught.
    #[test]
    fn k_only_layers_write_version_3() {
        let mut h = sample();
        let full = h.block_bytes();
        h.layout.shape = h.layout.shape.clone().with_v_from_k();
        h.payload_offset = payload_offset_for(&h.layout, 37, 2, false);
        let b = h.encode();
        assert_eq!((b[8], b.len() as u64), (3, header_bytes(37, 2, 0, false)));
        assert_eq!(h.block_bytes() * 2, full);
        reads_back_and_catches_every_flip(&h, &b);
        let layer = |kv_heads, head_dim| LayerKv { kv_heads, head_dim };
        let mixed = KvShape::per_layer(vec![layer(2, 4), layer(1, 8)]).with_v_from_k();
        assert!(KvLayout { shape: mixed, ..h.layout.clone() }.check().is_err());
    }

    #[test]
    fn versions_and_magic() {
        let mut b = sample().encode();
        b[8] = 5;
        let e = CacheHeader::read(&mut b.as_slice(), 1 << 20, Path::new("x")).unwrap_err();
        assert!(matches!(e, PersistError::UnsupportedVersion { found: 5, .. }), "{e}");
        assert!(e.to_string().contains("newer hearth"), "{e}");
        b[0] = b'X';
        let e = CacheHeader::read(&mut b.as_slice(), 1 << 20, Path::new("x")).unwrap_err();
        assert!(matches!(e, PersistError::NotACacheFile { .. }), "{e}");
        let e = CacheHeader::read(&mut [].as_slice(), 0, Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
    }
}
