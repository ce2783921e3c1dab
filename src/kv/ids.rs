//! Newtype ids of the KV cache and the two memory tiers.
//!
//! Owns: [`BlockId`] (a slot of one tier's pool), [`SeqId`] (a running sequence, chosen by the
//! engine), [`BlockHash`] (the chained hash of one full block) and [`Tier`].
//!
//! Invariants: a `BlockId` is only meaningful together with its tier (device block 3 and host
//! block 3 are different memory); it is always `< capacity` of that tier's pool. Ids are plain
//! data: `Copy`, ordered, hashable, cheap to log.
//!
//! Counterpart: vLLM v1's `KVCacheBlock.block_id` and `BlockHash`, SGLang's device/host indices
//! (`TreeNode.value` / `host_value`).

use std::fmt;

/// Index of one block in one tier's pool (`0..capacity`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct BlockId(pub u32);

impl BlockId {
    /// The id as an index into per-block arrays.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for BlockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "block {}", self.0)
    }
}

/// A sequence (one request's prompt plus its generated tokens), named by the engine.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct SeqId(pub u64);

impl fmt::Display for SeqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seq {}", self.0)
    }
}

/// Chained hash of one full block: see [`hash_block`](super::hash_block).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct BlockHash(pub u64);

impl fmt::Display for BlockHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Where a block lives.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, serde::Serialize)]
pub enum Tier {
    /// The pool the forward reads (VRAM, or the CPU device's memory).
    Device,
    /// The overflow tier in host RAM: blocks here must be promoted before a forward reads them.
    Host,
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tier::Device => "device",
            Tier::Host => "host",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_display_and_order() {
        assert_eq!(BlockId(3).to_string(), "block 3");
        assert_eq!(SeqId(9).to_string(), "seq 9");
        assert_eq!(BlockHash(0xab).to_string(), "00000000000000ab");
        assert_eq!(Tier::Host.to_string(), "host");
        assert!(BlockId(1) < BlockId(2));
        assert_eq!(BlockId(7).index(), 7);
    }
}
