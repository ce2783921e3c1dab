//! Errors of the `engine` layer.

use crate::model::ModelError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The consumer of the streamed text went away (e.g. a closed stdout pipe).
    #[error("output closed: {0}")]
    Output(#[from] std::io::Error),
    /// Sampling parameters out of range.
    #[error(transparent)]
    Kv(#[from] crate::kv::KvError),
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    #[error("invalid sampling parameters: {0}")]
    Sampling(#[from] crate::model::sampling::SamplingParamsError),
}
