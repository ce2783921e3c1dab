//! The block hash chain: a stable, documented hash of one full block chained to its parent.
//!
//! Owns: [`hash_block`] and the [`BlockHasher`] signature the manager is generic over (tests pass a
//! degenerate hasher to force collisions).
//!
//! The algorithm is part of the on-disk cache format and must never change silently (a test pins
//! known values):
//!
//! ```text
//! FNV-1a, 64 bit: offset basis 0xcbf29ce484222325, prime 0x100000001b3.
//! h = offset basis
//! for each byte b of  u64_le(parent.0, or ROOT_SEED = 0x6865_6172_7468_6b76 for the first block)
//!                     ++ u32_le(token) for each token of the block, in order:
//!     h = (h XOR b) * prime   (mod 2^64)
//! ```
//!
//! It depends only on those bytes: not on the process, the platform's endianness or the Rust
//! version (unlike `std::hash`). The block size is not hashed: it is part of a cache file's
//! fingerprint, and within one cache every hashed block is full.
//!
//! Invariant: a hash only *proposes* a match. The trie confirms every hit by comparing tokens, so a
//! collision can cost a cache miss but never returns someone else's K/V.
//!
//! Counterpart: vLLM v1's `hash_block_tokens` (`hash((parent_hash, tokens, extra_keys))`) and its
//! `NONE_HASH` seed for the first block.

use super::BlockHash;

/// A block hasher: `(hash of the parent block, or None for the first block; tokens) -> hash`.
pub type BlockHasher = fn(Option<BlockHash>, &[u32]) -> BlockHash;

/// Stands in for the parent hash of a sequence's first block ("hearthkv" read as a big-endian
/// u64; like any parent hash it is fed little-endian).
pub const ROOT_SEED: u64 = 0x6865_6172_7468_6b76;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The hash of one full block of `tokens` whose parent block hashed to `parent` (see the module
/// docs for the exact algorithm).
pub fn hash_block(parent: Option<BlockHash>, tokens: &[u32]) -> BlockHash {
    let seed = parent.map_or(ROOT_SEED, |p| p.0);
    let mut h = fnv1a(FNV_OFFSET, &seed.to_le_bytes());
    for t in tokens {
        h = fnv1a(h, &t.to_le_bytes());
    }
    BlockHash(h)
}

/// The chain hashes of `tokens`' full blocks of `block_size`, in order (a trailing partial block
/// has none). What the trie keys its nodes by and what a cache file stores per block.
pub fn hash_chain(tokens: &[u32], block_size: usize) -> Vec<BlockHash> {
    let mut parent = None;
    tokens
        .chunks_exact(block_size.max(1))
        .map(|b| {
            let h = hash_block(parent, b);
            parent = Some(h);
            h
        })
        .collect()
}

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values computed by an independent implementation (Python); if this fails, every cache file
    /// written so far is invalid.
    #[test]
    fn known_values_are_pinned() {
        let first = hash_block(None, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(first, BlockHash(0xcb96_146d_5ad9_253e));
        let second = hash_block(Some(first), &[9, 10, 11, 12, 13, 14, 15, 16]);
        assert_eq!(second, BlockHash(0xd391_b531_74d1_5e89));
        assert_eq!(hash_block(None, &[]), BlockHash(0xb899_bc47_817a_c036));
    }

    #[test]
    fn chain_and_tokens_both_matter() {
        let a = hash_block(None, &[1, 2]);
        let b = hash_block(None, &[2, 1]);
        assert_ne!(a, b);
        assert_ne!(hash_block(Some(a), &[5]), hash_block(Some(b), &[5]));
        assert_ne!(hash_block(None, &[5]), hash_block(Some(a), &[5]));
        assert_eq!(hash_block(Some(a), &[5]), hash_block(Some(a), &[5]));
        let chain = hash_chain(&[1, 2, 5, 9], 2);
        assert_eq!(chain, vec![a, hash_block(Some(a), &[5, 9])]);
        assert_eq!(hash_chain(&[1, 2, 5], 2), vec![a]);
    }
}
