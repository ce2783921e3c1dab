//! Everything about the model itself: files, weights, tokenizer, chat
//! template, the transformer forward, and sampling.
//!
//! - [`source`]: where the GGUF comes from (a local path or a hub spec,
//!   resolved through the standard Hugging Face cache).
//! - [`gguf`]: opening a GGUF file with clear errors (not GGUF, truncated),
//!   typed metadata access.
//! - [`hparams`]: the architecture families we run (`llama`, `qwen2`, `qwen3`)
//!   and their hyper-parameters, read from GGUF metadata.
//! - [`Transformer`]: our one forward for every family, differing by small
//!   flags (q/k/v bias, q/k norm, rope style). It owns no KV cache: it writes and
//!   reads K/V through [`crate::ops::KvStore`].
//! - [`tokenizer`]: `tokenizer.json`, or a tokenizer built from the GGUF's own
//!   `tokenizer.ggml.*` metadata.
//! - [`chat`]: the model's chat template rendered with minijinja.
//! - [`sampling`]: greedy, temperature, top-k, top-p, min-p, repetition penalty.
//! - [`testkit`]: tiny random GGUF models and vocabularies for tests and benchmarks.
//!
//! Counterpart: candle-transformers' `quantized_llama.rs` (loading, layer
//! layout), vLLM's `model_executor/models/llama.py` (forward over a packed batch).

mod block_norm;
pub mod chat;
mod delta_net;
mod causal_conv;
mod device;
mod embedding;
mod error;
mod gemma3n;
mod gemma4;
pub mod gguf;
pub mod grammar;
pub mod hparams;
pub mod infill;
mod linear;
mod loaded;
mod mla;
mod moe;
mod rope;
mod mamba;
mod mamba2;
pub mod pooling;
mod short_conv;
pub mod sampling;
pub mod source;
pub mod testkit;
pub mod tokenizer;
mod transformer;

pub use delta_net::{RecurrentSeq, RecurrentState};
pub use device::select_device;
pub use error::ModelError;
pub use loaded::{device_name, kv_shape_of, kv_variant_of, ChatPrompt, LoadedModel, ModelInfo, ModelPurpose, DEFAULT_CONTEXT_CAP};
pub use transformer::{Logits, Transformer};
