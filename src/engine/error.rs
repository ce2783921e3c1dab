//! Errors of the `engine` layer, and the kind of each that a front-end maps
//! to a response (an HTTP status, a message in the chat window).

use crate::model::ModelError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The consumer of the streamed text went away (e.g. a closed stdout pipe).
    #[error("output closed: {0}")]
    Output(#[from] std::io::Error),
    #[error(transparent)]
    Kv(#[from] crate::kv::KvError),
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    /// Sampling parameters out of range.
    #[error("invalid sampling parameters: {0}")]
    Sampling(#[from] crate::model::sampling::SamplingParamsError),
    /// A request field the engine cannot honour (named in the message).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The prompt needs more KV blocks than the whole device tier holds, so
    /// it can never run, whatever else finishes.
    #[error(
        "the prompt needs {needed_tokens} tokens of KV cache but the cache's device tier holds only \
         {capacity_tokens}; use a shorter prompt or a larger --kv-pool-mib"
    )]
    CacheTooSmall {
        needed_tokens: usize,
        capacity_tokens: usize,
    },
    /// Too many requests are waiting already.
    #[error("the engine's queue is full ({limit} requests waiting); try again shortly")]
    QueueFull { limit: usize },
    /// The engine thread has stopped (it failed or was shut down).
    #[error("the engine has stopped")]
    Stopped,
    /// A batched forward failed; every request in the batch ends with it.
    #[error("a batched forward failed: {0}")]
    Step(String),
    /// The request was cancelled before it finished.
    #[error("the request was cancelled")]
    Cancelled,
    /// Starting the engine ([`super::launch`]) was cancelled.
    #[error("loading was cancelled")]
    LaunchCancelled,
    /// The request's grammar (a JSON Schema, a Lark grammar) does not compile, or failed.
    #[error(transparent)]
    Grammar(#[from] crate::model::grammar::GrammarError),
    /// Conversations and cache files.
    #[error(transparent)]
    Persist(#[from] crate::persist::PersistError),
}

/// What kind of failure an [`EngineError`] is, for front-ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Something in the request is wrong (bad parameter, empty prompt).
    InvalidRequest,
    /// The prompt does not fit the context or the cache.
    ContextLength,
    /// Too busy now; the same request may succeed later.
    Overloaded,
    /// The engine is gone.
    Unavailable,
    /// The request was cancelled.
    Cancelled,
    /// What the request names does not exist (a conversation).
    NotFound,
    /// A failure inside hearth (model, cache, memory).
    Internal,
}

impl EngineError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Model(ModelError::PromptTooLong { .. }) | Self::CacheTooSmall { .. } => ErrorKind::ContextLength,
            Self::Model(
                ModelError::TokenOutOfRange { .. } | ModelError::Tokenizer(_) | ModelError::ChatTemplate(_),
            )
            | Self::Sampling(_)
            | Self::Grammar(crate::model::grammar::GrammarError::Invalid(_))
            | Self::InvalidRequest(_) => ErrorKind::InvalidRequest,
            Self::Grammar(_) => ErrorKind::Internal,
            Self::QueueFull { .. } => ErrorKind::Overloaded,
            Self::Stopped => ErrorKind::Unavailable,
            Self::Cancelled | Self::LaunchCancelled => ErrorKind::Cancelled,
            Self::Persist(crate::persist::PersistError::NotFound(_)) => ErrorKind::NotFound,
            Self::Persist(crate::persist::PersistError::InvalidId(_) | crate::persist::PersistError::Disabled) => {
                ErrorKind::InvalidRequest
            }
            Self::Persist(_) => ErrorKind::Internal,
            Self::Model(_) | Self::Output(_) | Self::Kv(_) | Self::Runtime(_) | Self::Step(_) => ErrorKind::Internal,
        }
    }
}
