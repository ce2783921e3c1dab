//! The layout of one forward call: sequences packed along the token axis.

use super::OpsError;

/// One sequence's part of a forward call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqChunk {
    /// Tokens of this sequence already in its KV store (the position of the
    /// first new token).
    pub cached: usize,
    /// New tokens of this sequence in this call (at least one).
    pub new: usize,
}

/// Several sequences of different lengths packed into one `[tokens, ...]` batch.
///
/// Sequence `i` owns rows `offset(i) .. offset(i) + seqs[i].new` of every packed
/// tensor; its token `j` sits at position `seqs[i].cached + j`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchLayout {
    seqs: Vec<SeqChunk>,
    offsets: Vec<usize>,
    total: usize,
}

impl BatchLayout {
    /// Builds a layout; every chunk must carry at least one new token.
    pub fn new(seqs: Vec<SeqChunk>) -> Result<Self, OpsError> {
        if seqs.is_empty() {
            return Err(OpsError::Layout("a batch needs at least one sequence".into()));
        }
        let mut offsets = Vec::with_capacity(seqs.len());
        let mut total = 0;
        for (i, s) in seqs.iter().enumerate() {
            if s.new == 0 {
                return Err(OpsError::Layout(format!("sequence {i} has no new tokens")));
            }
            offsets.push(total);
            total += s.new;
        }
        Ok(Self { seqs, offsets, total })
    }

    /// A batch of one sequence.
    pub fn single(cached: usize, new: usize) -> Result<Self, OpsError> {
        Self::new(vec![SeqChunk { cached, new }])
    }

    pub fn seqs(&self) -> &[SeqChunk] {
        &self.seqs
    }

    pub fn len(&self) -> usize {
        self.seqs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// Total new tokens across all sequences (rows of the packed tensors).
    pub fn total_tokens(&self) -> usize {
        self.total
    }

    /// First packed row of sequence `i`.
    pub fn offset(&self, i: usize) -> usize {
        self.offsets[i]
    }

    /// The position of every packed row, for rotary embeddings.
    pub fn positions(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.total);
        for s in &self.seqs {
            out.extend((s.cached..s.cached + s.new).map(|p| p as u32));
        }
        out
    }

    /// The packed row of each sequence's last new token.
    pub fn last_rows(&self) -> Vec<u32> {
        self.seqs
            .iter()
            .zip(&self.offsets)
            .map(|(s, o)| (o + s.new - 1) as u32)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_positions_and_last_rows() {
        let b = BatchLayout::new(vec![
            SeqChunk { cached: 0, new: 3 },
            SeqChunk { cached: 5, new: 1 },
            SeqChunk { cached: 2, new: 2 },
        ])
        .unwrap();
        assert_eq!(b.total_tokens(), 6);
        assert_eq!(b.offset(2), 4);
        assert_eq!(b.positions(), vec![0, 1, 2, 5, 2, 3]);
        assert_eq!(b.last_rows(), vec![2, 3, 5]);
    }

    #[test]
    fn rejects_empty_chunks() {
        assert!(BatchLayout::new(vec![]).is_err());
        assert!(BatchLayout::single(4, 0).is_err());
    }
}
