//! The engine's side of the disk tier: reading cache file hits into the KV cache, and handing
//! finished turns to the background writer.
//!
//! Owns: [`DiskSettings`] and [`DiskTier`] (the model's fingerprint is `persist`'s). At admission,
//! [`DiskTier::prefetch`] looks past the RAM tiers' match in the [`DiskIndex`]; a hit's blocks
//! are imported into the cache manager ([`crate::kv::KvCacheManager::import`]) and read from the
//! file straight into their blocks, each checked against its checksum; the admission that
//! follows finds them as host hits. At the end of a turn that names a conversation,
//! [`DiskTier::save_cache`] copies the blocks the conversation's file does not already hold and
//! queues the write; the reply's text is queued too ([`DiskTier::save_turn`]). Nothing here
//! writes on the engine thread.
//!
//! Invariants: a damaged block is never used: the read stops there, the blocks after it are
//! dropped from the trie, and the file is marked usable only up to it; a file's header is checked
//! again when it is opened (the writer may have replaced it since it was indexed).
//!
//! Counterpart: SGLang HiCache's storage prefetch (`prefetch_from_storage`) and write-back
//! (`write_backup_storage`); LMCache's `retrieve` / `store`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::EngineError;
use crate::kv::{hash_chain, BlockHash, BlockId, ImportPlan, KvCacheManager};
use crate::model::RecurrentState;
use crate::persist::{
    cache_dir, common_blocks, conversations_dir, remove_stale_temps, AfterSave, CacheFile, CacheJob, ConversationId,
    ConversationStore, DiskIndex, DiskStats, Faults, Fingerprint, KvLayout, PersistError, PersistWorker, TurnText,
    WorkerContext,
};
use crate::runtime::KvMemory;

/// Where and how much the disk tier keeps.
#[derive(Debug, Clone)]
pub struct DiskSettings {
    /// The data directory (`conversations/` and `cache/` live under it).
    pub data_dir: PathBuf,
    /// Most bytes of cache files; least recently used ones are deleted past it.
    pub budget_bytes: u64,
    /// Test hook on every write.
    pub faults: Faults,
}

impl DiskSettings {
    pub fn new(data_dir: impl Into<PathBuf>, budget_bytes: u64) -> Self {
        Self {
            data_dir: data_dir.into(),
            budget_bytes,
            faults: Faults::none(),
        }
    }
}

/// Reads the imported blocks from `file` into their blocks: in one pass straight into RAM
/// when they all live in one RAM tier, else block by block. Returns how many leading blocks are
/// good and why the rest are not.
fn read_into(file: &mut CacheFile, memory: &mut KvMemory, import: &ImportPlan) -> (usize, Option<PersistError>) {
    let Some(&(tier, _)) = import.blocks.first() else {
        return (0, None);
    };
    if import.blocks.iter().all(|&(t, _)| t == tier) {
        let ids: Vec<BlockId> = import.blocks.iter().map(|&(_, b)| b).collect();
        // (A failed host-tier copy falls through to `fill_block`, which reports it.)
        if let Ok(Some(dsts)) = memory.blocks_bytes_mut(tier, &ids) {
            return file.read_blocks(import.first_block, dsts);
        }
    }
    for (i, &(tier, b)) in import.blocks.iter().enumerate() {
        let k = import.first_block + i;
        match memory.fill_block(tier, b, |dst| file.read_block(k, dst)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return (i, Some(e)),
            Err(e) => return (i, Some(PersistError::corrupt(file.path(), e.to_string()))),
        }
    }
    (import.blocks.len(), None)
}

/// The disk tier of one engine.
#[derive(Debug)]
pub(crate) struct DiskTier {
    index: Arc<Mutex<DiskIndex>>,
    stats: Arc<Mutex<DiskStats>>,
    store: ConversationStore,
    worker: PersistWorker,
    layout: KvLayout,
    /// 0: no cache files are written.
    budget_bytes: u64,
}

use crate::persist::worker_lock as lock;

impl DiskTier {
    /// Opens the disk tier in `settings.data_dir`: indexes the cache files written for
    /// `fingerprint` (others are reported and left alone) and starts the writer. An unreadable
    /// cache directory leaves the tier empty, with a warning; generation works without it.
    pub(crate) fn open(
        settings: &DiskSettings,
        fingerprint: Fingerprint,
        layout: KvLayout,
    ) -> Result<Self, EngineError> {
        let dir = cache_dir(&settings.data_dir);
        // Temp files of writes a crash cut short are removed (the cache dir's by the scan).
        let conversations = conversations_dir(&settings.data_dir);
        let mut temps_left = remove_stale_temps(&conversations).left.len();
        let index = match DiskIndex::scan(dir.clone(), fingerprint, layout.clone()) {
            Ok((index, report)) => {
                temps_left += report.temps.left.len();
                for (path, why) in &report.ignored {
                    tracing::warn!("ignoring cache file {}: {why}", path.display());
                }
                tracing::info!(
                    "disk tier: {} cache files ({:.1} MiB) in {}",
                    report.indexed,
                    report.bytes as f64 / (1 << 20) as f64,
                    dir.display()
                );
                index
            }
            Err(e) => {
                tracing::warn!("the disk tier starts empty: {e}");
                DiskIndex::new(dir, fingerprint, layout.clone())
            }
        };
        let stats = DiskStats {
            files: index.len(),
            bytes: index.bytes(),
            budget_bytes: settings.budget_bytes,
            stale_temp_files: temps_left,
            ..DiskStats::default()
        };
        let index = Arc::new(Mutex::new(index));
        let stats = Arc::new(Mutex::new(stats));
        let store = ConversationStore::with_faults(conversations, settings.faults.clone());
        let worker = PersistWorker::spawn(WorkerContext {
            index: index.clone(),
            store: store.clone(),
            stats: stats.clone(),
            budget_bytes: settings.budget_bytes,
            faults: settings.faults.clone(),
        })?;
        Ok(Self {
            index,
            stats,
            store,
            worker,
            layout,
            budget_bytes: settings.budget_bytes,
        })
    }

    pub(crate) fn store(&self) -> &ConversationStore {
        &self.store
    }

    pub(crate) fn stats(&self) -> DiskStats {
        let mut stats = lock(&self.stats).clone();
        stats.unsaved = self.store.unsaved();
        stats
    }

    /// Waits for every queued write.
    pub(crate) fn flush(&self) {
        self.worker.flush();
    }

    pub(crate) fn delete_cache(&self, id: ConversationId) {
        self.worker.delete_cache(id);
    }

    /// Reads the saved blocks that extend `prompt`'s cached prefix into the cache (see the
    /// module docs); returns the prompt tokens read, and the file's recurrent state (a model
    /// with recurrent layers) where it follows blocks the prompt now has cached: the hash of
    /// the block it follows, its values.
    pub(crate) fn prefetch(
        &self,
        kv: &mut KvCacheManager,
        memory: &mut KvMemory,
        prompt: &[u32],
    ) -> (usize, Option<(BlockHash, Vec<f32>)>) {
        let bs = kv.config().block_size;
        let max_blocks = prompt.len().saturating_sub(1) / bs;
        let from = kv.cached_blocks(prompt);
        if from >= max_blocks || !kv.config().prefix_caching {
            return (0, None);
        }
        let Some(hit) = lock(&self.index).lookup(prompt, from, max_blocks) else {
            return (0, None);
        };
        let mut file = match CacheFile::open(&hit.path).and_then(|f| {
            f.check_compatible(lock(&self.index).fingerprint(), &self.layout)?;
            Ok(f)
        }) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!("not using cache file: {e}");
                lock(&self.index).remove(&hit.conversation);
                return (0, None);
            }
        };
        let end = hit.blocks.end * bs;
        if file.header().tokens.get(..end) != prompt.get(..end) {
            return (0, None); // replaced since it was indexed; the index catches up after the write
        }
        let import = kv.import(prompt, hit.blocks.start, hit.blocks.end);
        if let Err(e) = memory.execute(&import.plan) {
            tracing::error!("preparing blocks for a disk read failed: {e}");
            if let Some(&(tier, b)) = import.blocks.first() {
                kv.discard(tier, b);
            }
            return (0, None);
        }
        let (read, damaged) = read_into(&mut file, memory, &import);
        if read < import.blocks.len() {
            // The blocks from the first unread one on leave the trie with it.
            let (tier, b) = import.blocks[read];
            kv.discard(tier, b);
        }
        let damaged = damaged.map(|e| {
            (
                import.first_block + read,
                e.to_string(),
                matches!(e, PersistError::BlockChecksum { .. }),
            )
        });
        let now = SystemTime::now();
        let mut index = lock(&self.index);
        index.touch(&hit.conversation, now);
        if let Some((k, why, checksum)) = &damaged {
            tracing::warn!("{why}: using the {k} blocks before it and recomputing the rest");
            index.set_usable(&hit.conversation, *k);
            if *checksum {
                lock(&self.stats).damaged_blocks += 1;
            }
        }
        drop(index);
        let _ = std::fs::File::options()
            .write(true)
            .open(&hit.path)
            .and_then(|f| f.set_modified(now));
        let mut stats = lock(&self.stats);
        stats.hit_tokens += (read * bs) as u64;
        stats.blocks_read += read as u64;
        stats.bytes_read += read as u64 * self.layout.block_bytes();
        drop(stats);
        (read * bs, self.read_state(&mut file, hit.blocks.start + read))
    }

    /// `file`'s recurrent state, where it follows at most `cached` blocks (those the prompt has
    /// cached, whose tokens the file shares): the hash of the block it follows and its values.
    /// A state that fails its checks is not used (a warning says why).
    fn read_state(&self, file: &mut CacheFile, cached: usize) -> Option<(BlockHash, Vec<f32>)> {
        let k = file.header().state?.blocks as usize;
        if k == 0 || k > cached {
            return None;
        }
        let hash = file.header().blocks.get(k - 1)?.hash;
        match file.read_state() {
            Ok(Some((_, floats))) => Some((hash, floats)),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!("not using the recurrent state of a cache file: {e}");
                None
            }
        }
    }

    /// The cache file job of `tokens` (whose K/V is in the device blocks `table`) for
    /// conversation `id`, to queue with [`Self::queue_cache`]. Only the blocks its current file
    /// lacks are copied here.
    pub(crate) fn cache_job(
        &self,
        id: &ConversationId,
        tokens: &[u32],
        table: &[BlockId],
        memory: &KvMemory,
        state: Option<(BlockHash, &RecurrentState)>,
    ) -> Option<CacheJob> {
        if self.budget_bytes == 0 {
            return None;
        }
        let bs = self.layout.block_size as usize;
        let n = (tokens.len() / bs).min(table.len());
        let hashes = hash_chain(&tokens[..n * bs], bs);
        let reuse = lock(&self.index)
            .get(id)
            .map_or(0, |f| common_blocks(&f.tokens, tokens, bs, f.usable_blocks.min(n)));
        let mut fresh = Vec::new();
        if let Err(e) = memory.copy_device_blocks(&table[reuse..n], &mut fresh) {
            tracing::warn!("cannot save the cache of conversation {id}: {e}");
            return None;
        }
        // A recurrent model's latest state copy, where its block is one of these.
        let state = state.and_then(|(hash, st)| {
            let k = hashes.iter().position(|&h| h == hash)?;
            Some((k + 1, st.buffers().flatten().copied().collect()))
        });
        Some(CacheJob {
            id: id.clone(),
            tokens: tokens.to_vec(),
            hashes,
            reuse_blocks: reuse,
            fresh,
            state,
        })
    }

    pub(crate) fn queue_cache(&self, job: CacheJob) {
        self.worker.save_cache(job);
    }

    /// Queues the text of a finished turn; `then` runs once it is saved.
    pub(crate) fn save_turn(&self, id: ConversationId, text: TurnText, then: AfterSave) {
        self.worker.save_turn(id, text, then);
    }
}
