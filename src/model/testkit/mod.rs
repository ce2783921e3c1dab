//! Tiny models for tests and benchmarks, written by us, so nothing needs the network.
//!
//! - [`vocab`]: small BPE / SentencePiece vocabularies, as GGUF metadata and as
//!   an equivalent `tokenizer.json`.
//! - [`gguf`]: random GGUF models of each family and quantization.

pub mod gguf;
pub mod vocab;

pub use gguf::{write_model, TinyModelSpec, WeightType};
pub use vocab::{TinyVocab, VocabStyle};
