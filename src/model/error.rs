//! Errors of the `model` layer. Every variant renders as one line that names
//! the problem and, where there is one, the file.

use std::path::PathBuf;

use crate::ops::OpsError;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The file does not start with the GGUF magic.
    #[error("{path} is not a GGUF file (its first bytes are not \"GGUF\")")]
    NotGguf { path: PathBuf },
    /// The file is a part of a split model other than its first (`NAME-00002-of-00003.gguf`).
    #[error("{path} is part {part} of {count} of a split model; open its first part, {first}")]
    NotFirstPart {
        path: PathBuf,
        part: usize,
        count: usize,
        first: PathBuf,
    },
    /// A part of a split model is not beside its first part.
    #[error("the model is split into {count} files, and part {part}, {path}, is missing: put every part in the same folder")]
    MissingPart { path: PathBuf, part: usize, count: usize },
    /// The file is GGUF but damaged: truncated, or a header that does not parse.
    #[error("{path} is a damaged GGUF file: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// `general.architecture` names a family hearth does not run.
    #[error("unsupported architecture \"{arch}\"; hearth supports: {supported}")]
    UnsupportedArchitecture { arch: String, supported: String },
    /// A metadata key the model needs is absent.
    #[error("GGUF metadata key \"{key}\" is missing")]
    MissingMetadata { key: String },
    /// A metadata key has the wrong type or an impossible value.
    #[error("GGUF metadata key \"{key}\" is invalid: {reason}")]
    BadMetadata { key: String, reason: String },
    /// A tensor the architecture needs is absent.
    #[error("tensor \"{name}\" is missing from the model file")]
    MissingTensor { name: String },
    /// A tensor has a shape the hyper-parameters do not allow.
    #[error("tensor \"{name}\" has shape {actual:?}, expected {expected:?}")]
    BadTensor {
        name: String,
        actual: Vec<usize>,
        expected: Vec<usize>,
    },
    /// The file has a tensor of a part of the architecture hearth does not run.
    #[error("tensor \"{name}\" is not supported: {reason}")]
    UnsupportedTensor { name: String, reason: String },
    /// A tensor is stored in a type hearth has no kernel for (NVFP4, Q1_0, …).
    #[error("tensor \"{name}\" is stored as {ty}, a type hearth cannot run yet; it runs {supported} (a file quantized to one of these, e.g. Q4_K_M or IQ4_XS, works)")]
    UnsupportedTensorType { name: String, ty: String, supported: String },
    /// The tokenizer could not be built or used.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template did not parse or render.
    #[error("chat template: {0}")]
    ChatTemplate(String),
    /// A model spec that is neither an existing file nor `owner/repo:file.gguf`.
    #[error("bad model spec \"{spec}\": {reason}")]
    BadSource { spec: String, reason: String },
    /// Downloading from, or finding in the cache of, the Hugging Face hub failed.
    #[error("cannot get {spec} from the Hugging Face hub: {reason}")]
    Hub { spec: String, reason: String },

    #[error("the download of {spec} was cancelled; {kept} bytes are kept and loading it again resumes from there")]
    Cancelled { spec: String, kept: u64 },
    /// Reading the weights was stopped (`GgufFile::set_meter`).
    #[error("loading was cancelled")]
    LoadCancelled,
    /// The prompt (plus at least one generated token) does not fit the context.
    #[error("prompt is {tokens} tokens but the context holds {context} (at most {max_prompt} prompt tokens)", max_prompt = context.saturating_sub(1))]
    PromptTooLong { tokens: usize, context: usize },
    /// A model with recurrent layers was asked to continue a sequence without its state.
    #[error("a sequence {cached} tokens in needs its recurrent state, which was not given")]
    MissingState { cached: usize },
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab} tokens")]
    TokenOutOfRange { id: u32, vocab: usize },
    /// The requested device cannot be used.
    #[error("device unavailable: {0}")]
    DeviceUnavailable(String),
    #[error("tensor operation failed: {0}")]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Ops(#[from] OpsError),
}

impl ModelError {
    /// [`ModelError::TokenOutOfRange`] for the first of `ids` outside a vocabulary of `vocab`.
    pub fn check_token_ids(ids: &[u32], vocab: usize) -> Result<(), Self> {
        match ids.iter().find(|&&id| id as usize >= vocab) {
            Some(&id) => Err(Self::TokenOutOfRange { id, vocab }),
            None => Ok(()),
        }
    }
}
