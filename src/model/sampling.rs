//! Sampling: choosing the next token id from one row of logits.
//!
//! Owns [`Sampler`] (a seeded RNG plus scratch buffers, one per sequence).
//! [`SamplingParams`] (what the user asked for, validated at the API edge
//! with [`SamplingParams::validate`]) is plain settings data and lives in
//! `config`, so that config defaults and request parameters are one type.
//!
//! The pipeline, in order:
//! 1. `logit_bias` added to its ids' logits (OpenAI's);
//! 2. repetition penalty over the last `repeat_last_n` ids of the history
//!    (each distinct id once: a positive logit is divided by the penalty, a
//!    negative one multiplied, as llama.cpp and HF's
//!    `RepetitionPenaltyLogitsProcessor` do);
//! 3. presence and frequency penalties over the reply so far (OpenAI's: an
//!    id's logit less `count · frequency + presence` when the reply holds it
//!    `count > 0` times; the prompt does not count, as in vLLM);
//! 4. greedy — argmax, the lowest id on ties — when `temperature` is 0;
//! 5. otherwise temperature → top-k → softmax → top-p → min-p (relative to
//!    the most likely token) → one draw from what is left.
//!
//! Invariants:
//! - The same params (seed included), logits and history give the same id.
//! - `sample` never panics: NaN logits count as `-inf`, `+inf` as the largest
//!   finite value; empty logits give id 0; at least one candidate always
//!   survives every filter.
//! - With `top_k` set, no full sort of the vocabulary happens
//!   (`select_nth_unstable_by`, then a sort of the k survivors).
//!
//! Counterparts: llama.cpp `src/llama-sampling.cpp` (`llama_sampler_*`,
//! whose defaults these are); HF `generation/logits_process.py`
//! (`TemperatureLogitsWarper`, `TopKLogitsWarper`, `TopPLogitsWarper`,
//! `MinPLogitsWarper`), whose order (temperature first) we follow; vLLM
//! `v1/sample/sampler.py`.

use std::cmp::Ordering;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use crate::config::{SamplingParams, SamplingParamsError};

/// Picks token ids for one sequence. Holds the RNG, so a sequence's draws
/// depend only on its seed and what it was asked.
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    /// The logits after sanitizing and the repetition penalty.
    logits: Vec<f32>,
    /// (id, value) of the tokens still in the running; value is a scaled
    /// logit, then a probability.
    candidates: Vec<(u32, f32)>,
    /// The distinct ids of the penalty window; then the reply's ids, sorted.
    window: Vec<u32>,
}

impl Sampler {
    /// A sampler seeded with `params.seed`. `params` are not validated here
    /// (do that at the API edge); out-of-range values degrade gracefully: a
    /// negative or NaN temperature is greedy, `top_p` / `min_p` outside their
    /// ranges act as off (or keep only the top token when `top_p <= 0`), a
    /// non-positive penalty is off.
    pub fn new(params: SamplingParams) -> Self {
        let rng = match params.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        Self {
            params,
            rng,
            logits: Vec::new(),
            candidates: Vec::new(),
            window: Vec::new(),
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The next token id given this step's `logits` (one per vocabulary id)
    /// and the sequence so far (`history`, prompt included, oldest first),
    /// whose ids from `reply_from` on are the reply so far.
    pub fn sample(&mut self, logits: &[f32], history: &[u32], reply_from: usize) -> u32 {
        if logits.is_empty() {
            return 0;
        }
        self.logits.clear();
        self.logits.extend(logits.iter().map(|&l| sanitize(l)));
        for &(id, bias) in &self.params.logit_bias {
            if let Some(l) = self.logits.get_mut(id as usize) {
                // -inf (a grammar's mask) stays -inf.
                *l = sanitize(*l + bias);
            }
        }
        self.apply_repeat_penalty(history);
        self.apply_reply_penalties(history.get(reply_from..).unwrap_or_default());

        if self.params.is_greedy() {
            return argmax(&self.logits);
        }
        self.sample_filtered()
    }

    fn apply_repeat_penalty(&mut self, history: &[u32]) {
        let penalty = self.params.repeat_penalty;
        let n = self.params.repeat_last_n;
        if n == 0 || penalty == 1.0 || !penalty.is_finite() || penalty <= 0.0 {
            return;
        }
        self.window.clear();
        self.window
            .extend_from_slice(&history[history.len().saturating_sub(n)..]);
        self.window.sort_unstable();
        self.window.dedup();
        for &id in &self.window {
            if let Some(l) = self.logits.get_mut(id as usize) {
                *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
            }
        }
    }

    /// OpenAI's presence and frequency penalties over the ids of `reply`.
    fn apply_reply_penalties(&mut self, reply: &[u32]) {
        let (presence, frequency) = (self.params.presence_penalty, self.params.frequency_penalty);
        if (presence == 0.0 && frequency == 0.0) || !presence.is_finite() || !frequency.is_finite() {
            return;
        }
        self.window.clear();
        self.window.extend_from_slice(reply);
        self.window.sort_unstable();
        for run in self.window.chunk_by(|a, b| a == b) {
            if let Some(l) = self.logits.get_mut(run[0] as usize) {
                *l -= run.len() as f32 * frequency + presence;
            }
        }
    }

    /// Temperature → top-k → softmax → top-p → min-p → draw.
    fn sample_filtered(&mut self) -> u32 {
        let p = &self.params;
        let max = self.logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            return argmax(&self.logits);
        }
        // Scaled relative to the max so nothing overflows: every value is <= 0
        // and the best is exactly 0.
        let inv_t = 1.0 / p.temperature;
        self.candidates.clear();
        self.candidates.extend(
            self.logits
                .iter()
                .enumerate()
                .filter(|(_, &l)| l > f32::NEG_INFINITY)
                .map(|(i, &l)| (i as u32, (l - max) * inv_t)),
        );

        // Top-k, then sort (only the k survivors when top-k is on).
        if p.top_k > 0 && p.top_k < self.candidates.len() {
            self.candidates.select_nth_unstable_by(p.top_k - 1, by_value_desc);
            self.candidates.truncate(p.top_k);
        }
        self.candidates.sort_unstable_by(by_value_desc);

        // Softmax (the first value is the max, 0, so exp(0) = 1 is in the sum).
        let mut sum = 0.0f64;
        for c in self.candidates.iter_mut() {
            c.1 = c.1.exp();
            sum += f64::from(c.1);
        }
        for c in self.candidates.iter_mut() {
            c.1 = (f64::from(c.1) / sum) as f32;
        }

        // Top-p: the smallest prefix with cumulative probability >= top_p.
        if p.top_p < 1.0 {
            let mut keep = 1;
            let mut cum = 0.0f64;
            for (i, c) in self.candidates.iter().enumerate() {
                cum += f64::from(c.1);
                keep = i + 1;
                if cum >= f64::from(p.top_p) {
                    break;
                }
            }
            self.candidates.truncate(keep);
        }

        // Min-p: relative to the most likely token (sorted, so a prefix survives).
        if p.min_p > 0.0 && p.min_p < 1.0 {
            let threshold = p.min_p * self.candidates[0].1;
            let keep = self.candidates.iter().take_while(|c| c.1 >= threshold).count().max(1);
            self.candidates.truncate(keep);
        }

        // Draw from what is left (no renormalization needed: scale the draw).
        let total: f64 = self.candidates.iter().map(|c| f64::from(c.1)).sum();
        let mut r = self.rng.random::<f64>() * total;
        for c in &self.candidates {
            r -= f64::from(c.1);
            if r < 0.0 {
                return c.0;
            }
        }
        // Rounding left r a hair above 0: the least likely survivor.
        self.candidates.last().map_or(0, |c| c.0)
    }
}

/// NaN → -inf (never chosen), +inf → the largest finite value (so arithmetic
/// relative to the max stays finite).
fn sanitize(l: f32) -> f32 {
    if l.is_nan() {
        f32::NEG_INFINITY
    } else if l == f32::INFINITY {
        f32::MAX
    } else {
        l
    }
}

/// Index of the largest value, the lowest index on ties; 0 when all are -inf.
pub(crate) fn argmax(values: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in values.iter().enumerate().skip(1) {
        if v > values[best] {
            best = i;
        }
    }
    best as u32
}

/// Larger value first, then lower id (a total order: values are never NaN).
fn by_value_desc(a: &(u32, f32), b: &(u32, f32)) -> Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_k: usize, top_p: f32, min_p: f32, seed: u64) -> SamplingParams {
        SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: Some(seed),
            ..SamplingParams::default()
        }
    }

    /// A pseudo-random logit row, deterministic.
    fn logits(n: usize, salt: u32) -> Vec<f32> {
        (0..n as u32)
            .map(|i| ((i.wrapping_mul(2_654_435_761) ^ salt.wrapping_mul(40_503)) % 1000) as f32 / 100.0)
            .collect()
    }

    fn softmax(l: &[f32]) -> Vec<f64> {
        let m = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f64> = l.iter().map(|&x| f64::from(x - m).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    }

    #[test]
    fn defaults_are_llama_cpp_and_valid() {
        let d = SamplingParams::default();
        assert_eq!((d.temperature, d.top_k, d.top_p, d.min_p), (0.8, 40, 0.95, 0.05));
        assert_eq!((d.repeat_penalty, d.repeat_last_n, d.seed), (1.0, 64, None));
        assert_eq!(d.validate(), Ok(()));
        assert_eq!(SamplingParams::greedy().validate(), Ok(()));
        assert!(SamplingParams::greedy().is_greedy());
    }

    #[test]
    fn validate_rejects_out_of_range() {
        let d = SamplingParams::default();
        let bad = |f: fn(&mut SamplingParams)| {
            let mut p = d.clone();
            f(&mut p);
            p.validate().unwrap_err()
        };
        assert_eq!(bad(|p| p.temperature = -0.1), SamplingParamsError::Temperature(-0.1));
        assert!(matches!(
            bad(|p| p.temperature = f32::NAN),
            SamplingParamsError::Temperature(_)
        ));
        assert_eq!(bad(|p| p.top_p = 0.0), SamplingParamsError::TopP(0.0));
        assert_eq!(bad(|p| p.top_p = 1.5), SamplingParamsError::TopP(1.5));
        assert_eq!(bad(|p| p.min_p = 1.0), SamplingParamsError::MinP(1.0));
        assert_eq!(bad(|p| p.min_p = -0.5), SamplingParamsError::MinP(-0.5));
        assert_eq!(bad(|p| p.repeat_penalty = 0.0), SamplingParamsError::RepeatPenalty(0.0));
        // 2^64: finite as f32, still a client's mistake.
        assert!(matches!(
            bad(|p| p.temperature = 1.8e19),
            SamplingParamsError::Temperature(_)
        ));
        assert!(matches!(
            bad(|p| p.repeat_penalty = 1.8e19),
            SamplingParamsError::RepeatPenalty(_)
        ));
        assert!(SamplingParams {
            temperature: 100.0,
            repeat_penalty: 100.0,
            ..d.clone()
        }
        .validate()
        .is_ok());
        assert_eq!(bad(|p| p.presence_penalty = 2.5), SamplingParamsError::PresencePenalty(2.5));
        assert_eq!(bad(|p| p.frequency_penalty = -2.5), SamplingParamsError::FrequencyPenalty(-2.5));
        assert!(matches!(
            bad(|p| p.frequency_penalty = f32::NAN),
            SamplingParamsError::FrequencyPenalty(_)
        ));
        assert_eq!(
            bad(|p| p.logit_bias = vec![(3, 1.0), (5, -101.0)]),
            SamplingParamsError::LogitBias { id: 5, bias: -101.0 }
        );
        let biased = SamplingParams {
            presence_penalty: -2.0,
            frequency_penalty: 2.0,
            logit_bias: vec![(3, 100.0), (9, -100.0)],
            ..d.clone()
        };
        assert!(biased.validate().is_ok());
        assert_eq!(biased.check_vocab(10), Ok(()));
        let err = biased.check_vocab(9).unwrap_err();
        assert_eq!(err, SamplingParamsError::LogitBiasToken { id: 9, vocab: 9 });
        assert_eq!(
            err.to_string(),
            "logit_bias names token 9, but the model's vocabulary has 9 tokens (ids 0 to 8)"
        );
        assert!(bad(|p| p.top_p = 2.0).to_string().contains("top_p"));
        let msg = SamplingParams { min_p: 2.0, ..d }.validate().unwrap_err().to_string();
        assert_eq!(msg, "min_p must be in [0, 1) (0 = off), got 2");
    }

    #[test]
    fn greedy_is_argmax_lowest_id_on_ties() {
        let mut s = Sampler::new(SamplingParams::greedy());
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9], &[], 0), 1);
        assert_eq!(s.sample(&[1.0, 5.0, 5.0, 0.0], &[], 0), 1);
        let l = logits(1000, 7);
        let expect = l.iter().enumerate().fold(0, |b, (i, &v)| if v > l[b] { i } else { b }) as u32;
        assert_eq!(s.sample(&l, &[], 0), expect);
    }

    #[test]
    fn nan_and_inf_do_not_panic() {
        let mut s = Sampler::new(SamplingParams::greedy());
        assert_eq!(s.sample(&[f32::NAN, 1.0, f32::NAN], &[], 0), 1);
        assert_eq!(s.sample(&[f32::NAN, f32::NAN], &[], 0), 0);
        assert_eq!(s.sample(&[], &[], 0), 0);
        let mut s = Sampler::new(SamplingParams::default());
        for _ in 0..50 {
            assert_eq!(s.sample(&[f32::NAN, 1.0, f32::NEG_INFINITY], &[], 0), 1);
            assert_eq!(s.sample(&[0.0, f32::INFINITY, 3.0], &[], 0), 1);
        }
        assert_eq!(s.sample(&[f32::NAN; 4], &[], 0), 0);
        assert_eq!(s.sample(&[f32::NEG_INFINITY; 4], &[1, 2], 0), 0);
        // Penalty on ids outside the vocabulary is ignored.
        let mut s = Sampler::new(SamplingParams {
            repeat_penalty: 2.0,
            ..SamplingParams::default()
        });
        let _ = s.sample(&[1.0, 2.0], &[7, 1_000_000], 0);
    }

    #[test]
    fn same_seed_same_sequence_different_seed_differs() {
        let rows: Vec<Vec<f32>> = (0..64)
            .map(|k| logits(500, k).iter().map(|x| x / 4.0).collect())
            .collect();
        let run = |seed| {
            let mut s = Sampler::new(params(1.0, 0, 1.0, 0.0, seed));
            rows.iter().map(|r| s.sample(r, &[], 0)).collect::<Vec<u32>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }

    #[test]
    fn top_k_one_is_greedy_at_any_temperature() {
        for (k, t) in [(0u32, 0.5f32), (1, 1.0), (2, 5.0), (3, 100.0)] {
            let l = logits(5000, k);
            let want = Sampler::new(SamplingParams::greedy()).sample(&l, &[], 0);
            let mut s = Sampler::new(params(t, 1, 1.0, 0.0, u64::from(k)));
            for _ in 0..20 {
                assert_eq!(s.sample(&l, &[], 0), want);
            }
        }
    }

    #[test]
    fn tiny_top_p_is_argmax() {
        let l = logits(5000, 3);
        let want = Sampler::new(SamplingParams::greedy()).sample(&l, &[], 0);
        let mut s = Sampler::new(params(2.0, 0, 1e-6, 0.0, 9));
        for _ in 0..50 {
            assert_eq!(s.sample(&l, &[], 0), want);
        }
    }

    #[test]
    fn top_p_keeps_the_nucleus() {
        // probs ~ [0.5, 0.3, 0.2] for ids 2, 0, 1: top_p 0.7 keeps {2, 0}.
        let l: Vec<f32> = [0.3f32, 0.2, 0.5].iter().map(|p| p.ln()).collect();
        let mut s = Sampler::new(params(1.0, 0, 0.7, 0.0, 1));
        let mut seen = [0usize; 3];
        for _ in 0..2000 {
            seen[s.sample(&l, &[], 0) as usize] += 1;
        }
        assert_eq!(seen[1], 0, "{seen:?}");
        assert!(seen[0] > 0 && seen[2] > seen[0], "{seen:?}");
    }

    #[test]
    fn min_p_filters_relative_to_max() {
        // probs ~ [0.6, 0.3, 0.1]: min_p 0.4 → threshold 0.24 keeps ids 0 and 1.
        let l: Vec<f32> = [0.6f32, 0.3, 0.1].iter().map(|p| p.ln()).collect();
        let mut s = Sampler::new(params(1.0, 0, 1.0, 0.4, 5));
        let mut seen = [0usize; 3];
        for _ in 0..3000 {
            seen[s.sample(&l, &[], 0) as usize] += 1;
        }
        assert_eq!(seen[2], 0, "{seen:?}");
        assert!(seen[0] > seen[1] && seen[1] > 0, "{seen:?}");
        // Without min-p, id 2 shows up.
        let mut s = Sampler::new(params(1.0, 0, 1.0, 0.0, 5));
        assert!((0..3000).any(|_| s.sample(&l, &[], 0) == 2));
    }

    #[test]
    fn repetition_penalty_changes_the_argmax() {
        let l = [2.0f32, 1.5, -1.0, -1.2];
        let p = SamplingParams {
            repeat_penalty: 1.5,
            repeat_last_n: 2,
            ..SamplingParams::greedy()
        };
        // Id 0 was just generated: 2.0 / 1.5 = 1.33 < 1.5, so id 1 wins.
        assert_eq!(Sampler::new(p.clone()).sample(&l, &[0], 0), 1);
        // Repeats count once: same answer with id 0 twice.
        assert_eq!(Sampler::new(p.clone()).sample(&l, &[0, 0], 0), 1);
        // Outside the window (last 2 ids): no penalty.
        assert_eq!(Sampler::new(p.clone()).sample(&l, &[0, 3, 3], 0), 0);
        // Negative logits are multiplied: -1.0 * 1.5 = -1.5 < -1.2.
        let neg = [-1.0f32, -1.2];
        assert_eq!(Sampler::new(p.clone()).sample(&neg, &[0], 0), 1);
        // Penalty 1.0 is off.
        let off = SamplingParams {
            repeat_penalty: 1.0,
            ..p
        };
        assert_eq!(Sampler::new(off).sample(&l, &[0], 0), 0);
    }

    #[test]
    fn presence_and_frequency_penalties_count_the_reply_only() {
        let l = [2.0f32, 1.5, 1.0, -1.0];
        let greedy = |presence, frequency| {
            Sampler::new(SamplingParams {
                presence_penalty: presence,
                frequency_penalty: frequency,
                ..SamplingParams::greedy()
            })
        };
        // The prompt holds id 0 four times: it does not count.
        assert_eq!(greedy(1.0, 1.0).sample(&l, &[0, 0, 0, 0], 4), 0);
        // Once in the reply, presence 0.6: 2.0 - 0.6 = 1.4 < 1.5.
        assert_eq!(greedy(0.6, 0.0).sample(&l, &[0, 0], 1), 1);
        // Presence counts an id once: three times, 0.4 off, 1.6 still wins.
        assert_eq!(greedy(0.4, 0.0).sample(&l, &[0, 0, 0], 0), 0);
        // Frequency counts each time: 3 × 0.2 off, 1.4.
        assert_eq!(greedy(0.0, 0.2).sample(&l, &[0, 0, 0], 0), 1);
        assert_eq!(greedy(0.0, 0.2).sample(&l, &[0, 0], 0), 0);
        // Both: 2.0 - (2 × 0.1 + 0.2) = 1.6 > 1.5; four uses, 1.4 < 1.5.
        assert_eq!(greedy(0.2, 0.1).sample(&l, &[0, 0], 0), 0);
        assert_eq!(greedy(0.2, 0.1).sample(&l, &[3, 0, 0, 0, 0], 1), 1);
        // Negative values favour what was said: id 2 once, presence -1.5, 2.5.
        assert_eq!(greedy(-1.5, 0.0).sample(&l, &[2], 0), 2);
        // Ids past the vocabulary are ignored.
        assert_eq!(greedy(2.0, 2.0).sample(&l, &[9, 1_000_000], 0), 0);
    }

    #[test]
    fn logit_bias_is_added_before_anything_and_keeps_a_mask() {
        let l = [2.0f32, 1.5, f32::NEG_INFINITY];
        let greedy = |bias: Vec<(u32, f32)>| {
            Sampler::new(SamplingParams {
                logit_bias: bias,
                ..SamplingParams::greedy()
            })
        };
        assert_eq!(greedy(vec![(1, 1.0)]).sample(&l, &[], 0), 1);
        assert_eq!(greedy(vec![(0, -100.0)]).sample(&l, &[], 0), 1);
        // A masked token (a grammar's -inf) stays masked; ids past the vocabulary are ignored.
        assert_eq!(greedy(vec![(2, 100.0), (9, 100.0)]).sample(&l, &[], 0), 0);
        // Before the repetition penalty: 2.0 + 1.0 = 3.0, divided by 2, 1.5: a tie, id 0.
        let mut s = Sampler::new(SamplingParams {
            logit_bias: vec![(0, 1.0)],
            repeat_penalty: 2.0,
            ..SamplingParams::greedy()
        });
        assert_eq!(s.sample(&[2.0, 1.6], &[0], 1), 1);
        assert_eq!(s.sample(&[2.0, 1.5], &[0], 1), 0);
        // At temperature 1, -100 bans a token in practice.
        let mut s = Sampler::new(SamplingParams {
            logit_bias: vec![(0, -100.0)],
            ..params(1.0, 0, 1.0, 0.0, 3)
        });
        assert!((0..2000).all(|_| s.sample(&[5.0, 0.0, 0.0], &[], 0) != 0));
    }

    #[test]
    fn temperature_one_follows_softmax() {
        let l = [0.0f32, 1.0, 2.0, 0.5, -1.0];
        let want = softmax(&l);
        let mut s = Sampler::new(params(1.0, 0, 1.0, 0.0, 1234));
        let n = 40_000;
        let mut counts = [0usize; 5];
        for _ in 0..n {
            counts[s.sample(&l, &[], 0) as usize] += 1;
        }
        for (i, &c) in counts.iter().enumerate() {
            let got = c as f64 / n as f64;
            assert!((got - want[i]).abs() < 0.015, "id {i}: {got} vs {}", want[i]);
        }
    }

    #[test]
    fn top_k_keeps_only_k() {
        let l = logits(10_000, 11);
        let mut order: Vec<u32> = (0..l.len() as u32).collect();
        order.sort_by(|&a, &b| l[b as usize].total_cmp(&l[a as usize]).then(a.cmp(&b)));
        let top: Vec<u32> = order[..5].to_vec();
        let mut s = Sampler::new(params(50.0, 5, 1.0, 0.0, 77));
        for _ in 0..500 {
            assert!(top.contains(&s.sample(&l, &[], 0)));
        }
    }
}
