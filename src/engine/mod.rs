//! Turning a prompt into a stream of tokens.
//!
//! For now one request runs at a time on the caller's thread: prefill the
//! prompt in one forward, then decode token by token, sampling each and
//! streaming its text. The engine thread with a request queue, continuous
//! batching and the shared prefix cache replaces the loop's insides later;
//! the shape (prompt ids + params in, text pieces out, a report at the end)
//! stays.
//!
//! Counterpart: the `generate` loop of llama.cpp's `llama-cli`, vLLM's
//! `LLMEngine.step` for a single request.

mod error;
mod generate;

pub use error::EngineError;
pub use generate::{generate, GenerateParams, GenerationReport, StopReason};
