//! Errors of the `ops` layer.

/// What can go wrong while writing K/V or computing attention.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// A tensor operation failed inside candle.
    #[error("tensor operation failed: {0}")]
    Candle(#[from] candle_core::Error),
    /// The batch layout and the tensors passed with it disagree.
    #[error("batch layout mismatch: {0}")]
    Layout(String),
    /// A store was asked to hold more tokens than it was sized for.
    #[error("KV store full: {needed} tokens needed, capacity {capacity}")]
    CapacityExceeded { needed: usize, capacity: usize },
}
