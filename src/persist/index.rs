//! The disk tier's index: which saved blocks exist, found by block-hash chain.
//!
//! Owns: [`DiskIndex`]. Built at startup from cache file headers alone ([`DiskIndex::scan`]:
//! no payload is read), then kept current by the background writer as files are written and
//! evicted. A lookup ([`DiskIndex::lookup`]) continues where the RAM tiers' match ended: it
//! finds files whose block at that position has the prompt's chain hash, confirms the hit by
//! comparing tokens (a hash only proposes, as in the trie), and picks the file covering the
//! most blocks.
//!
//! Files for another model or layout, or whose header is damaged, are not indexed: they are
//! listed in the [`ScanReport`] with the reason, and stay on disk for `hearth cache` to show or
//! prune. The index never holds payloads, only tokens and hashes.
//!
//! The disk budget: [`DiskIndex::over_budget`] names the least recently used files to delete.
//! Only cache files are ever deleted; a conversation's text lives elsewhere.
//!
//! Counterpart: LMCache's `LocalDiskBackend` index (chunk hash → file), SGLang's HiCache storage
//! backend `exists()` / `batch_get`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::cache_file::{CacheFile, CACHE_EXT};
use super::format::{CacheHeader, Fingerprint, KvLayout};
use super::{ConversationId, PersistError};
use crate::kv::{hash_chain, BlockHash};

/// One indexed cache file.
#[derive(Debug, Clone)]
pub struct IndexedFile {
    pub path: PathBuf,
    pub tokens: Arc<[u32]>,
    pub hashes: Vec<BlockHash>,
    /// Leading blocks believed good: present in the file and not yet found damaged.
    pub usable_blocks: usize,
    pub bytes: u64,
    pub last_used: SystemTime,
}

/// A disk hit: blocks `blocks` of `path` extend the RAM tiers' match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskHit {
    pub conversation: ConversationId,
    pub path: PathBuf,
    /// Block indices (= positions in the prompt) to read.
    pub blocks: std::ops::Range<usize>,
}

/// What [`DiskIndex::scan`] found.
#[derive(Debug, Default)]
pub struct ScanReport {
    pub indexed: usize,
    pub bytes: u64,
    /// Files not indexed, each with why (foreign, damaged, unreadable).
    pub ignored: Vec<(PathBuf, PersistError)>,
    /// Temp files of writes that never finished, removed (or not) at the scan.
    pub temps: super::temps::TempSweep,
}

/// The disk tier's index.
#[derive(Debug)]
pub struct DiskIndex {
    dir: PathBuf,
    fingerprint: Fingerprint,
    layout: KvLayout,
    files: HashMap<ConversationId, IndexedFile>,
    /// Chain hash of block k → the files holding it at position k.
    by_hash: HashMap<BlockHash, Vec<(ConversationId, usize)>>,
}

/// Whole blocks at the start of `saved` and `tokens` whose tokens are equal, at most
/// `max_blocks`: how much of a saved history a token sequence can reuse.
pub fn common_blocks(saved: &[u32], tokens: &[u32], block_size: usize, max_blocks: usize) -> usize {
    let limit = max_blocks.saturating_mul(block_size);
    let common = saved.iter().zip(tokens).take(limit).take_while(|(a, b)| a == b).count();
    common / block_size.max(1)
}

/// The cache file of conversation `id` in `dir`.
pub fn cache_path(dir: &Path, id: &ConversationId) -> PathBuf {
    dir.join(format!("{id}.{CACHE_EXT}"))
}

/// Cache files in `dir` (`*.hkv`) with their conversation ids; other names are skipped.
pub fn list_cache_files(dir: &Path) -> Result<Vec<(ConversationId, PathBuf)>, PersistError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(PersistError::io(dir, e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| PersistError::io(dir, e))?;
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some(CACHE_EXT) {
            continue;
        }
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if let Ok(id) = ConversationId::parse(stem) {
            out.push((id, path));
        }
    }
    out.sort();
    Ok(out)
}

impl DiskIndex {
    /// An empty index of `dir` for files written with `fingerprint` and `layout`.
    pub fn new(dir: PathBuf, fingerprint: Fingerprint, layout: KvLayout) -> Self {
        Self {
            dir,
            fingerprint,
            layout,
            files: HashMap::new(),
            by_hash: HashMap::new(),
        }
    }

    /// Indexes every compatible cache file in `dir` from its header.
    pub fn scan(dir: PathBuf, fingerprint: Fingerprint, layout: KvLayout) -> Result<(Self, ScanReport), PersistError> {
        let mut index = Self::new(dir, fingerprint, layout.clone());
        let mut report = ScanReport {
            temps: super::temps::remove_stale_temps(&index.dir),
            ..ScanReport::default()
        };
        for (id, path) in list_cache_files(&index.dir)? {
            let opened = CacheFile::open(&path).and_then(|f| {
                f.check_compatible(fingerprint, &layout)?;
                Ok(f)
            });
            match opened {
                Ok(f) => {
                    let last_used = std::fs::metadata(&path)
                        .and_then(|m| m.modified())
                        .unwrap_or(SystemTime::UNIX_EPOCH);
                    let present = f.blocks_present();
                    if present < f.header().blocks.len() {
                        tracing::warn!(
                            "{}: truncated: {} of {} blocks present; using those",
                            path.display(),
                            present,
                            f.header().blocks.len()
                        );
                    }
                    report.indexed += 1;
                    report.bytes += f.len();
                    let (len, header) = (f.len(), f.header().clone());
                    index.insert(id.clone(), path, &header, len, last_used);
                    index.set_usable(&id, present);
                }
                Err(e) => report.ignored.push((path, e)),
            }
        }
        Ok((index, report))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    pub fn layout(&self) -> &KvLayout {
        &self.layout
    }

    /// Indexed files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Bytes of all indexed files.
    pub fn bytes(&self) -> u64 {
        self.files.values().map(|f| f.bytes).sum()
    }

    pub fn get(&self, id: &ConversationId) -> Option<&IndexedFile> {
        self.files.get(id)
    }

    pub fn files(&self) -> impl Iterator<Item = (&ConversationId, &IndexedFile)> {
        self.files.iter()
    }

    /// Adds (or replaces) `id`'s file.
    pub fn insert(
        &mut self,
        id: ConversationId,
        path: PathBuf,
        header: &CacheHeader,
        bytes: u64,
        last_used: SystemTime,
    ) {
        self.remove(&id);
        let hashes: Vec<BlockHash> = header.blocks.iter().map(|b| b.hash).collect();
        for (k, h) in hashes.iter().enumerate() {
            self.by_hash.entry(*h).or_default().push((id.clone(), k));
        }
        self.files.insert(
            id,
            IndexedFile {
                path,
                tokens: header.tokens.as_slice().into(),
                usable_blocks: hashes.len(),
                hashes,
                bytes,
                last_used,
            },
        );
    }

    /// Forgets `id`'s file (it was deleted or replaced).
    pub fn remove(&mut self, id: &ConversationId) -> Option<IndexedFile> {
        let f = self.files.remove(id)?;
        for h in &f.hashes {
            if let Some(v) = self.by_hash.get_mut(h) {
                v.retain(|(i, _)| i != id);
                if v.is_empty() {
                    self.by_hash.remove(h);
                }
            }
        }
        Some(f)
    }

    /// Limits `id`'s file to its first `blocks` blocks (a later one was found damaged).
    pub fn set_usable(&mut self, id: &ConversationId, blocks: usize) {
        if let Some(f) = self.files.get_mut(id) {
            f.usable_blocks = f.usable_blocks.min(blocks);
        }
    }

    /// Marks `id`'s file as just used (its blocks were read).
    pub fn touch(&mut self, id: &ConversationId, now: SystemTime) {
        if let Some(f) = self.files.get_mut(id) {
            f.last_used = now;
        }
    }

    /// The longest run of saved blocks continuing `tokens`' match at block `from` (the blocks
    /// before it are already cached in RAM), at most up to block `max_blocks`. `None` when no
    /// file extends the match.
    pub fn lookup(&self, tokens: &[u32], from: usize, max_blocks: usize) -> Option<DiskHit> {
        let bs = self.layout.block_size as usize;
        if from >= max_blocks || self.files.is_empty() {
            return None;
        }
        let hash = *hash_chain(tokens.get(..(from + 1) * bs)?, bs).last()?;
        let candidates = self.by_hash.get(&hash)?;
        let mut best: Option<(usize, &ConversationId)> = None;
        for (id, k) in candidates {
            if *k != from {
                continue;
            }
            let Some(f) = self.files.get(id) else { continue };
            let blocks = common_blocks(&f.tokens, tokens, bs, f.usable_blocks.min(max_blocks));
            if blocks > from && best.is_none_or(|(b, _)| blocks > b) {
                best = Some((blocks, id));
            }
        }
        let (blocks, id) = best?;
        let f = self.files.get(id)?;
        Some(DiskHit {
            conversation: id.clone(),
            path: f.path.clone(),
            blocks: from..blocks,
        })
    }

    /// Files to delete, least recently used first, so the rest fit in `budget` bytes (never
    /// `keep`, the file just written).
    pub fn over_budget(&self, budget: u64, keep: Option<&ConversationId>) -> Vec<ConversationId> {
        let mut total = self.bytes();
        if total <= budget {
            return Vec::new();
        }
        let mut by_age: Vec<(&ConversationId, &IndexedFile)> = self.files.iter().collect();
        by_age.sort_by_key(|(id, f)| (f.last_used, (*id).clone()));
        let mut out = Vec::new();
        for (id, f) in by_age {
            if total <= budget {
                break;
            }
            if Some(id) == keep {
                continue;
            }
            total -= f.bytes;
            out.push(id.clone());
        }
        out
    }
}
