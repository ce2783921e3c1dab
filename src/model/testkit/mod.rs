//! Tiny models for tests and benchmarks, written by us, so nothing needs the network.
//!
//! - [`vocab`]: small BPE / SentencePiece vocabularies, as GGUF metadata and as
//!   an equivalent `tokenizer.json`.
//! - [`gguf`]: random GGUF models of each family and quantization ([`gemma4`]: Gemma 4's
//!   layers; [`deepseek2`]: DeepSeek-V2's latent attention; [`qwen35`]: Qwen3.5's gated delta net;
//!   [`layer_shapes`]: Nemotron 51B's and OpenELM's layers of their own shapes; [`jamba`]:
//!   Jamba's Mamba layers; [`bert`]: the encoders, BERT's and nomic-embed-text's).
//! - [`requant`]: those models rewritten in the types candle cannot write (IQ4_NL, IQ4_XS,
//!   MXFP4).
//! - `fake_hub`: a stand-in for the Hugging Face hub on 127.0.0.1, for the download path
//!   (feature `testkit` only: the app never carries it).
//!
//! The models and vocabularies are always built: `hearth bench` writes its benchmark model
//! with them.

pub mod bert;
#[cfg(any(test, feature = "testkit"))]
pub mod fake_hub;
pub mod deepseek2;
pub mod gemma4;
pub mod gguf;
pub mod granite_hybrid;
pub mod jamba;
pub mod layer_shapes;
pub mod lfm2;
pub mod modern_bert;
pub mod nemotron_h;
pub mod qwen35;
pub mod requant;
pub mod vocab;

#[cfg(any(test, feature = "testkit"))]
pub use fake_hub::{FakeHub, SeenRequest};
pub use deepseek2::TinyMla;
pub use gemma4::TinyGemma4;
pub use granite_hybrid::TinyMamba2;
pub use jamba::TinyJamba;
pub use layer_shapes::LayerShape;
pub use qwen35::TinyDeltaNet;
pub use gguf::{llama31_rope_divisors, write_model, TinyGranite, TinyLongRope, TinyModelSpec, TinyMoe, WeightType};
pub use requant::{requantize, split_model};
pub use vocab::{FixtureText, TinyVocab, UnigramFixture, VocabStyle};
