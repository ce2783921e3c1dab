//! Errors of the persistence layer: conversation files, cache files and the disk tier.
//!
//! Every variant names the file it is about, so a warning can say which file was ignored and why.
//! A damaged or foreign cache file is never fatal to a request: the engine logs the error and
//! recomputes; only the conversation store's errors reach a caller.

use std::path::PathBuf;

use super::ConversationId;

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a hearth cache file (bad magic)", path.display())]
    NotACacheFile { path: PathBuf },
    #[error("{}: cache format version {found}, this hearth reads version {supported}{}", path.display(), if *found > *supported { " (written by a newer hearth)" } else { "" })]
    UnsupportedVersion { path: PathBuf, found: u32, supported: u32 },
    #[error("{}: damaged cache file: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error("{}: block {block} fails its checksum", path.display())]
    BlockChecksum { path: PathBuf, block: usize },
    #[error("{}: block {block} is past the end of the file (truncated)", path.display())]
    MissingBlock { path: PathBuf, block: usize },
    #[error("{}: written with {found} K/V, and the cache now stores {expected} (cache.kv_dtype)", path.display())]
    OtherKvDtype {
        path: PathBuf,
        found: crate::config::KvDtype,
        expected: crate::config::KvDtype,
    },
    #[error("{}: written for another model or cache layout (fingerprint {found}, current {expected})", path.display())]
    Foreign {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("invalid conversation id {0:?}: use 1 to 64 letters, digits, '-' or '_'")]
    InvalidId(String),
    /// A conversation's new version could not be written and is kept in memory.
    #[error("conversation {id} is kept in memory, not saved: {reason}")]
    Unsaved { id: ConversationId, reason: String },
    #[error("no conversation {0}")]
    NotFound(ConversationId),
    #[error("{}: damaged conversation file: {reason}", path.display())]
    BadConversation { path: PathBuf, reason: String },
    #[error("the disk tier is off (no data directory)")]
    Disabled,
}

impl PersistError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Self::Corrupt {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
