//! Engine statistics: the one snapshot the GUI, `/metrics` and benchmarks read.
//!
//! Owns: [`EngineStats`] (cache occupancy and counters, the memory split, the scheduler's queue,
//! request counters and latency histograms) and [`Histogram`] (fixed buckets, Prometheus
//! semantics: `counts[i]` observations were `<= bounds[i]`, cumulative).
//!
//! The engine thread publishes a fresh snapshot after every step and every command, so reading
//! stats never waits for a step.
//!
//! Counterpart: vLLM's `SchedulerStats` / `IterationStats` and its Prometheus logger.

use std::time::Duration;

use crate::kv::CacheStats;
use crate::runtime::MemorySplit;

/// A histogram with fixed upper bounds (Prometheus `le` buckets).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Histogram {
    /// Upper bounds, ascending; an implicit `+Inf` bucket follows.
    pub bounds: Vec<f64>,
    /// Cumulative counts: `counts[i]` observations were `<= bounds[i]`.
    pub counts: Vec<u64>,
    /// All observations (the `+Inf` bucket).
    pub count: u64,
    pub sum: f64,
}

impl Histogram {
    pub fn new(bounds: &[f64]) -> Self {
        Self {
            bounds: bounds.to_vec(),
            counts: vec![0; bounds.len()],
            count: 0,
            sum: 0.0,
        }
    }

    pub fn observe(&mut self, value: f64) {
        for (b, c) in self.bounds.iter().zip(&mut self.counts) {
            if value <= *b {
                *c += 1;
            }
        }
        self.count += 1;
        self.sum += value;
    }

    /// Mean of the observations (0 before the first).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }
}

/// Buckets of the time-to-first-token histogram, in seconds.
pub const TTFT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Buckets of the per-request decode speed histogram, in tokens per second.
pub const TOKENS_PER_SECOND_BUCKETS: &[f64] = &[1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0];

/// Requests by how they ended, since the engine started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RequestCounters {
    /// Accepted by the engine.
    pub submitted: u64,
    /// Refused at submission: invalid, over the context or the cache, or the
    /// queue was full.
    pub rejected: u64,
    /// Finished with a reply.
    pub finished: u64,
    /// Cancelled (explicitly, or their consumer went away).
    pub cancelled: u64,
    /// Ended with an error.
    pub failed: u64,
    /// Times a running request was preempted to free blocks.
    pub preemptions: u64,
}

/// A snapshot of the engine.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EngineStats {
    /// The KV cache: occupancy per tier, hits, copies, evictions.
    pub cache: CacheStats,
    /// How the device's memory divides (weights, KV tiers, the rest); `None`
    /// if the device could not be asked.
    pub memory: Option<MemorySplit>,
    /// Requests accepted and not yet admitted (or preempted and waiting to
    /// run again).
    pub waiting: usize,
    /// Requests admitted and holding KV blocks.
    pub running: usize,
    pub requests: RequestCounters,
    /// Prompt tokens of finished-or-not requests at submission.
    pub prompt_tokens: u64,
    /// Tokens sampled.
    pub generated_tokens: u64,
    /// Engine steps (batched forwards) run.
    pub steps: u64,
    /// Time to first token, seconds.
    pub ttft_seconds: Histogram,
    /// Decode speed per finished request, tokens per second.
    pub decode_tokens_per_second: Histogram,
    /// Time spent in forwards.
    #[serde(serialize_with = "secs")]
    pub busy: Duration,
    /// The disk tier (cache files, reads, writes, failures); `None` without one.
    pub disk: Option<crate::persist::DiskStats>,
    /// How K/V is stored, in every tier.
    pub kv_dtype: crate::config::KvDtype,
    /// Bytes one cached token takes (every layer's K and V).
    pub kv_bytes_per_token: u64,
    /// A model with recurrent layers: the copies of its state kept for cached prefixes
    /// (`engine::states`); `None` for other models.
    pub recurrent_states: Option<StateCacheStats>,
}

/// The state copies a recurrent model keeps: how many, their bytes, the budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StateCacheStats {
    pub copies: usize,
    pub bytes: u64,
    pub budget_bytes: u64,
}

impl EngineStats {
    /// Cached tokens one GiB holds.
    pub fn tokens_per_gib(&self) -> u64 {
        (1u64 << 30) / self.kv_bytes_per_token.max(1)
    }
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl EngineStats {
    pub fn new(cache: CacheStats, kv_dtype: crate::config::KvDtype, kv_bytes_per_token: u64) -> Self {
        Self {
            cache,
            kv_dtype,
            kv_bytes_per_token,
            memory: None,
            disk: None,
            recurrent_states: None,
            waiting: 0,
            running: 0,
            requests: RequestCounters::default(),
            prompt_tokens: 0,
            generated_tokens: 0,
            steps: 0,
            ttft_seconds: Histogram::new(TTFT_BUCKETS),
            decode_tokens_per_second: Histogram::new(TOKENS_PER_SECOND_BUCKETS),
            busy: Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut h = Histogram::new(&[1.0, 2.0, 5.0]);
        for v in [0.5, 1.0, 1.5, 3.0, 7.0] {
            h.observe(v);
        }
        assert_eq!(h.counts, vec![2, 3, 4]);
        assert_eq!(h.count, 5);
        assert!((h.sum - 13.0).abs() < 1e-9);
        assert!((h.mean() - 2.6).abs() < 1e-9);
    }
}
