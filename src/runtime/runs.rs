//! Runs of block copies: consecutive `(src, dst)` pairs whose ids both go up by one move as
//! one range. A promotion of a long prefix into freshly allocated blocks is often one or a few
//! runs, and on CUDA one copy of many blocks runs near the bus's speed where a copy per block
//! would not.
//!
//! Invariant: the runs, taken in order, copy exactly the pairs, in the pairs' order (only
//! neighbours in the list are merged), so a plan's order is kept.

use crate::kv::BlockId;

/// `len` blocks from `src ..` to `dst ..`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyRun {
    pub src: usize,
    pub dst: usize,
    pub len: usize,
}

impl CopyRun {
    /// The run's source and destination byte ranges for blocks of `block_len` bytes.
    pub fn bytes(&self, block_len: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let n = self.len * block_len;
        let (s, d) = (self.src * block_len, self.dst * block_len);
        (s..s + n, d..d + n)
    }
}

/// The pairs as runs, merging each pair into the run before it where both ids continue it.
pub fn copy_runs(pairs: &[(BlockId, BlockId)]) -> Vec<CopyRun> {
    let mut runs: Vec<CopyRun> = Vec::new();
    for &(src, dst) in pairs {
        let (src, dst) = (src.0 as usize, dst.0 as usize);
        match runs.last_mut() {
            Some(r) if r.src + r.len == src && r.dst + r.len == dst => r.len += 1,
            _ => runs.push(CopyRun { src, dst, len: 1 }),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(u32, u32)]) -> Vec<(BlockId, BlockId)> {
        p.iter().map(|&(s, d)| (BlockId(s), BlockId(d))).collect()
    }

    #[test]
    fn only_neighbours_continuing_both_ids_merge() {
        let runs = copy_runs(&pairs(&[
            (4, 0),
            (5, 1),
            (6, 2),
            (9, 3),
            (10, 7),
            (11, 8),
            (3, 9),
            (2, 10),
        ]));
        let r = |src, dst, len| CopyRun { src, dst, len };
        assert_eq!(runs, vec![r(4, 0, 3), r(9, 3, 1), r(10, 7, 2), r(3, 9, 1), r(2, 10, 1)]);
        assert_eq!(runs.iter().map(|r| r.len).sum::<usize>(), 8);
        assert!(copy_runs(&[]).is_empty());
        assert_eq!(r(10, 7, 2).bytes(100), (1000..1200, 700..900));
    }
}
