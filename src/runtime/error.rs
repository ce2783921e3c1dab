//! Errors of the `runtime` layer.

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The device pool cannot hold one sequence of the full context.
    #[error(
        "the KV cache's device pool holds {blocks} blocks ({tokens} tokens), fewer than one full context of {context} tokens; use a smaller --ctx-size or a larger pool (cache.device_pool_mib / device_memory_fraction)"
    )]
    PoolTooSmall {
        blocks: usize,
        tokens: usize,
        context: usize,
    },
    /// An explicit pool size larger than the memory there is.
    #[error("the KV cache's {tier} tier was asked for {asked} bytes but only {available} are available")]
    NotEnoughMemory {
        tier: &'static str,
        asked: u64,
        available: u64,
    },
    /// The device (CUDA) refused an allocation or a copy.
    #[error("device memory: {0}")]
    Device(String),
    /// A plan names a block outside its tier.
    #[error("copy plan names {tier} block {block}, but the tier has {capacity} blocks")]
    BadBlock {
        tier: &'static str,
        block: u32,
        capacity: usize,
    },
}
