//! What `hearth cache list | verify | prune` show and do, as data (the CLI prints it).
//!
//! Owns: [`CacheEntry`] (one cache file: size, tokens, blocks, last use, whether it fits the
//! current model), [`prune_plan`] (which files to delete to fit a budget), [`prune`] (deleting
//! them) and [`verify`] (every block of a file checked).
//!
//! Invariant: only cache files are ever chosen for deletion; conversation files are not even
//! listed here.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::cache_file::CacheFile;
use super::format::{Fingerprint, KvLayout};
use super::index::list_cache_files;
use super::{ConversationId, PersistError};

/// Whether a cache file can be used by the current model.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "reason")]
pub enum EntryStatus {
    /// Written for this model and layout.
    Usable,
    /// Written for another model or layout (or the current one is unknown).
    Foreign,
    /// Written for this model with K/V stored as another type (`cache.kv_dtype`).
    OtherKvDtype(crate::config::KvDtype),
    /// Its header cannot be read (damaged, truncated header, unknown version).
    Unreadable(String),
}

/// One cache file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CacheEntry {
    pub conversation: ConversationId,
    pub path: PathBuf,
    pub bytes: u64,
    pub tokens: usize,
    /// Blocks the header lists.
    pub blocks: usize,
    /// Blocks wholly present in the file.
    pub blocks_present: usize,
    /// Seconds since the Unix epoch of the last use (the file's modification time).
    pub last_used_secs: u64,
    pub fingerprint: Option<String>,
    #[serde(flatten)]
    pub status: EntryStatus,
}

/// Every cache file in `dir`, least recently used first, judged against `current` (the
/// running model's fingerprint and layout; `None` when it is unknown).
pub fn inspect(dir: &Path, current: Option<(Fingerprint, KvLayout)>) -> Result<Vec<CacheEntry>, PersistError> {
    let mut out = Vec::new();
    for (id, path) in list_cache_files(dir)? {
        let meta = std::fs::metadata(&path).map_err(|e| PersistError::io(&path, e))?;
        let last_used_secs = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let mut e = CacheEntry {
            conversation: id,
            path: path.clone(),
            bytes: meta.len(),
            tokens: 0,
            blocks: 0,
            blocks_present: 0,
            last_used_secs,
            fingerprint: None,
            status: EntryStatus::Foreign,
        };
        match CacheFile::open(&path) {
            Ok(f) => {
                let h = f.header();
                e.tokens = h.tokens.len();
                e.blocks = h.blocks.len();
                e.blocks_present = f.blocks_present();
                e.fingerprint = Some(h.fingerprint.to_string());
                if let Some((fp, layout)) = &current {
                    match f.check_compatible(*fp, layout) {
                        Ok(()) => e.status = EntryStatus::Usable,
                        Err(PersistError::OtherKvDtype { found, .. }) => e.status = EntryStatus::OtherKvDtype(found),
                        Err(_) => {}
                    }
                }
            }
            Err(err) => e.status = EntryStatus::Unreadable(err.to_string()),
        }
        out.push(e);
    }
    out.sort_by_key(|e| (e.last_used_secs, e.conversation.clone()));
    Ok(out)
}

/// The files to delete so the rest fit in `budget` bytes: with `foreign`, every file that is
/// not usable first; then usable ones, least recently used first. `entries` as [`inspect`]
/// returns them.
pub fn prune_plan(entries: &[CacheEntry], budget: u64, foreign: bool) -> Vec<&CacheEntry> {
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    let mut out = Vec::new();
    if foreign {
        for e in entries.iter().filter(|e| e.status != EntryStatus::Usable) {
            total -= e.bytes;
            out.push(e);
        }
    }
    for e in entries {
        if total <= budget {
            break;
        }
        if out.iter().any(|o| o.path == e.path) {
            continue;
        }
        total -= e.bytes;
        out.push(e);
    }
    out
}

/// Deletes the cache files of `plan` (from [`prune_plan`]), telling `each` how every deletion
/// went; returns the bytes freed. Conversations' text is never touched.
pub fn prune(plan: &[&CacheEntry], mut each: impl FnMut(&CacheEntry, Result<(), PersistError>)) -> u64 {
    let mut freed = 0;
    for e in plan {
        match std::fs::remove_file(&e.path) {
            Ok(()) => {
                freed += e.bytes;
                each(e, Ok(()));
            }
            Err(err) => each(e, Err(PersistError::io(&e.path, err))),
        }
    }
    freed
}

/// Reads every block of `entry`'s file and checks its checksum (`progress` gets the bytes read
/// as they go); the number of blocks checked, or the first damage found.
pub fn verify(entry: &CacheEntry, progress: impl FnMut(u64)) -> Result<usize, PersistError> {
    CacheFile::open(&entry.path)?.verify(progress)
}
