//! Sampling parameters: what a user or request asks of the sampler.
//!
//! Plain data with llama.cpp's defaults and range checks; the sampler itself
//! is `model::sampling::Sampler`. The config file's `[sampling]` section
//! fills the defaults, and each request may override them.

/// Below this temperature sampling is greedy.
const GREEDY_TEMPERATURE: f32 = 1e-6;

/// How the next token is chosen. `Default` is llama.cpp's defaults.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// Divides the logits before the softmax: < 1 sharpens, > 1 flattens;
    /// 0 means greedy (argmax). Default 0.8.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 = off. Default 40.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probabilities sum to
    /// at least `top_p` (nucleus sampling); in (0, 1], 1.0 = off. Default 0.95.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the most likely
    /// token's; in [0, 1), 0.0 = off. Default 0.05.
    pub min_p: f32,
    /// Penalty for ids seen in the last `repeat_last_n` tokens; > 0,
    /// 1.0 = off. Default 1.0 (llama.cpp's default since it turned it off).
    pub repeat_penalty: f32,
    /// How many of the most recent history ids the penalty looks at; 0 = off.
    /// Default 64.
    pub repeat_last_n: usize,
    /// OpenAI's presence penalty: subtracted once from the logit of every id the reply holds
    /// so far; in [-2, 2], 0 = off (the default).
    pub presence_penalty: f32,
    /// OpenAI's frequency penalty: subtracted from an id's logit once per time the reply holds
    /// it so far; in [-2, 2], 0 = off (the default).
    pub frequency_penalty: f32,
    /// OpenAI's `logit_bias`: (token id, value in [-100, 100]) added to that id's logit before
    /// anything else. Per request only; empty by default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logit_bias: Vec<(u32, f32)>,
    /// Seed of the sampler's RNG; the same seed gives the same draws.
    /// `None` (the default): a fresh random seed for each sampler.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: None,
        }
    }
}

/// The largest temperature and repetition penalty accepted: beyond these a distribution is
/// uniform (or a repeated token impossible) to f32 precision anyway, and values like 2^64
/// are a client's mistake, not a setting.
pub const MAX_TEMPERATURE: f32 = 100.0;
pub const MAX_REPEAT_PENALTY: f32 = 100.0;
/// OpenAI's ranges: presence and frequency penalties in [-2, 2], a logit bias in [-100, 100].
pub const MAX_OPENAI_PENALTY: f32 = 2.0;
pub const MAX_LOGIT_BIAS: f32 = 100.0;

/// A [`SamplingParams`] field outside its range.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum SamplingParamsError {
    #[error("temperature must be a number in [0, 100] (0 = greedy), got {0}")]
    Temperature(f32),
    #[error("top_p must be in (0, 1] (1 = off), got {0}")]
    TopP(f32),
    #[error("min_p must be in [0, 1) (0 = off), got {0}")]
    MinP(f32),
    #[error("repeat_penalty must be a number in (0, 100] (1 = off), got {0}")]
    RepeatPenalty(f32),
    #[error("presence_penalty must be a number in [-2, 2] (0 = off), got {0}")]
    PresencePenalty(f32),
    #[error("frequency_penalty must be a number in [-2, 2] (0 = off), got {0}")]
    FrequencyPenalty(f32),
    #[error("logit_bias of token {id} must be a number in [-100, 100], got {bias}")]
    LogitBias { id: u32, bias: f32 },
    #[error("logit_bias names token {id}, but the model's vocabulary has {vocab} tokens (ids 0 to {})", vocab.saturating_sub(1))]
    LogitBiasToken { id: u32, vocab: usize },
}

impl SamplingParams {
    /// Always the most likely token (after the repetition penalty, which is off here).
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: None,
        }
    }

    /// Whether these params always pick the argmax.
    pub fn is_greedy(&self) -> bool {
        self.temperature.is_nan() || self.temperature <= GREEDY_TEMPERATURE || self.top_k == 1
    }

    /// Checks every field's range; the first one out of range is the error.
    pub fn validate(&self) -> Result<(), SamplingParamsError> {
        if !(self.temperature >= 0.0 && self.temperature <= MAX_TEMPERATURE) {
            return Err(SamplingParamsError::Temperature(self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplingParamsError::TopP(self.top_p));
        }
        if !(self.min_p >= 0.0 && self.min_p < 1.0) {
            return Err(SamplingParamsError::MinP(self.min_p));
        }
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty <= MAX_REPEAT_PENALTY) {
            return Err(SamplingParamsError::RepeatPenalty(self.repeat_penalty));
        }
        if !within(self.presence_penalty, MAX_OPENAI_PENALTY) {
            return Err(SamplingParamsError::PresencePenalty(self.presence_penalty));
        }
        if !within(self.frequency_penalty, MAX_OPENAI_PENALTY) {
            return Err(SamplingParamsError::FrequencyPenalty(self.frequency_penalty));
        }
        if let Some(&(id, bias)) = self.logit_bias.iter().find(|&&(_, b)| !within(b, MAX_LOGIT_BIAS)) {
            return Err(SamplingParamsError::LogitBias { id, bias });
        }
        Ok(())
    }

    /// Checks that every [`SamplingParams::logit_bias`] id is one of the model's `vocab` ids.
    pub fn check_vocab(&self, vocab: usize) -> Result<(), SamplingParamsError> {
        match self.logit_bias.iter().find(|&&(id, _)| id as usize >= vocab) {
            Some(&(id, _)) => Err(SamplingParamsError::LogitBiasToken { id, vocab }),
            None => Ok(()),
        }
    }
}

/// Whether `v` is in [-limit, limit] (never NaN).
fn within(v: f32, limit: f32) -> bool {
    (-limit..=limit).contains(&v)
}
