//! The manager's record of one running sequence.
//!
//! Owns: [`SeqState`] and [`Chain`] (where the sequence's next full block hangs in the trie).
//!
//! Invariants: `blocks.len() == ceil(reserved / block_size)`; `committed <= reserved`; with prefix
//! caching, `partial` holds exactly the `committed % block_size` tokens of the block being filled.
//! Every block in `blocks` holds one device reference for this sequence, and every block in
//! `host_pins` one host reference.
//!
//! Counterpart: vLLM v1's `req_to_blocks` / `num_cached_block` of `KVCacheManager`, SGLang's
//! `Req.last_node`.

use super::trie::NodeId;
use super::BlockId;

/// Where the next full block of a sequence attaches in the trie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chain {
    /// No full block yet: the next one is a first block.
    Root,
    /// Under this node (its last full block, or an equal node committed by another sequence).
    /// Checked for liveness before use: the node may have been evicted meanwhile.
    Node(NodeId),
    /// The chain left the trie (a hash collision, or its node was evicted): the rest of this
    /// sequence is not cached.
    Broken,
}

/// One running sequence.
#[derive(Debug, Clone)]
pub(crate) struct SeqState {
    /// The block table: token `p` lives in `blocks[p / block_size]`.
    pub(crate) blocks: Vec<BlockId>,
    /// Tokens the blocks have room for (`start`'s prompt plus every `allocate`).
    pub(crate) reserved: usize,
    /// Tokens whose K/V is written (the cached prefix plus every `commit`).
    pub(crate) committed: usize,
    pub(crate) chain: Chain,
    /// Tokens of the block being filled (prefix caching only).
    pub(crate) partial: Vec<u32>,
    /// Host blocks pinned as sources of this sequence's promotions, released by `free`.
    pub(crate) host_pins: Vec<BlockId>,
}
