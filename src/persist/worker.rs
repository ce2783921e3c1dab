//! The background writer: cache files and conversation replies are written here, off the engine
//! thread, so saving never delays the next token.
//!
//! Owns: [`PersistWorker`] (a thread and its job queue), [`CacheJob`], [`TurnText`] and the
//! shared [`DiskStats`]. Jobs run in the order they were sent. After each cache file the disk
//! budget is enforced: least recently used cache files are deleted (never a conversation's text).
//!
//! Failures (a full disk, a read-only data directory) never stop generation: the job is dropped,
//! the failure is logged once (until a write succeeds again) and counted in [`DiskStats`], and
//! whatever was saved before stays as it was (every write is atomic).
//!
//! Counterpart: SGLang HiCache's write-back thread and LMCache's async `store`.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::cache_file::{write_cache_file, CacheFile, CacheWrite};
use super::conversation::{Conversation, ConversationSettings, ConversationStore, Message, Role, NEW_CHAT_TITLE};
use super::index::{cache_path, common_blocks, DiskIndex};
use super::{ConversationId, Faults, PersistError};
use crate::kv::BlockHash;

/// Disk-tier figures for stats, shared by the engine (reads, hits) and the writer (writes).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DiskStats {
    /// Cache files indexed (usable by this model).
    pub files: usize,
    pub bytes: u64,
    pub budget_bytes: u64,
    /// Prompt tokens whose K/V was read from cache files.
    pub hit_tokens: u64,
    pub blocks_read: u64,
    pub bytes_read: u64,
    pub files_written: u64,
    pub bytes_written: u64,
    /// Cache files deleted to stay within the budget.
    pub files_evicted: u64,
    /// Blocks found damaged on read (their files are cut short at that block).
    pub damaged_blocks: u64,
    /// Writes that failed (cache files and conversation text).
    pub write_failures: u64,
    /// The latest failure, until a write succeeds again.
    pub last_error: Option<String>,
    /// Temp files of unfinished writes that could not be removed at start.
    pub stale_temp_files: usize,
    /// Conversations kept in memory because they could not be written (a full disk); written
    /// again every few seconds until it works.
    pub unsaved: Vec<super::UnsavedConversation>,
}

/// A cache file to write for conversation `id`.
#[derive(Debug)]
pub struct CacheJob {
    pub id: ConversationId,
    /// The whole token history whose K/V was computed.
    pub tokens: Vec<u32>,
    /// Chain hashes of its full blocks.
    pub hashes: Vec<BlockHash>,
    /// Leading blocks to copy from the conversation's current file (the index said its tokens
    /// match); `fresh` holds the rest.
    pub reuse_blocks: usize,
    pub fresh: Vec<u8>,
    /// A model with recurrent layers: its state after this many of the blocks, to store with
    /// them (format version 4).
    pub state: Option<(usize, Vec<f32>)>,
}

/// What a finished turn adds to a conversation's text.
#[derive(Debug, Clone)]
pub enum TurnText {
    /// The user's message was saved before the turn: append the reply.
    AppendReply { reply: String },
    /// A request that named a conversation (the HTTP API): the conversation becomes `messages`
    /// and the reply.
    Replace { messages: Vec<Message>, reply: String },
}

/// Called once a turn's text is saved (or failed to be).
pub type AfterSave = Box<dyn FnOnce() + Send>;

enum Job {
    Cache(CacheJob),
    Turn(ConversationId, TurnText, AfterSave),
    DeleteCache(ConversationId),
    Flush(mpsc::Sender<()>),
}

/// The writer thread's handle; dropping it finishes the queued jobs and joins the thread.
#[derive(Debug)]
pub struct PersistWorker {
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Everything the writer needs.
#[derive(Debug, Clone)]
pub struct WorkerContext {
    pub index: Arc<Mutex<DiskIndex>>,
    pub store: ConversationStore,
    pub stats: Arc<Mutex<DiskStats>>,
    pub budget_bytes: u64,
    pub faults: Faults,
}

/// Locks `m`, recovering from a poisoned lock (the data is plain figures and an index).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl PersistWorker {
    pub fn spawn(ctx: WorkerContext) -> Result<Self, PersistError> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("hearth-persist".into())
            .spawn(move || run(ctx, rx))
            .map_err(|e| PersistError::io("hearth-persist thread", e))?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    fn send(&self, job: Job) {
        if let Some(tx) = &self.tx {
            if tx.send(job).is_err() {
                tracing::error!("the background writer has stopped; nothing more is saved");
            }
        }
    }

    pub fn save_cache(&self, job: CacheJob) {
        self.send(Job::Cache(job));
    }

    /// Saves a turn's text, then calls `then` (whether or not the save worked), so whoever
    /// waits for the turn's end sees the conversation as saved.
    pub fn save_turn(&self, id: ConversationId, text: TurnText, then: AfterSave) {
        self.send(Job::Turn(id, text, then));
    }

    pub fn delete_cache(&self, id: ConversationId) {
        self.send(Job::DeleteCache(id));
    }

    /// Waits until every job sent before this call is done.
    pub fn flush(&self) {
        let (tx, rx) = mpsc::channel();
        self.send(Job::Flush(tx));
        let _ = rx.recv();
    }
}

impl Drop for PersistWorker {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How often conversations kept in memory (a full disk) are written again.
const RETRY_UNSAVED: std::time::Duration = std::time::Duration::from_secs(5);

fn run(ctx: WorkerContext, rx: mpsc::Receiver<Job>) {
    let mut failing = false;
    loop {
        let job = if !ctx.store.has_unsaved() {
            match rx.recv() {
                Ok(job) => job,
                Err(_) => break,
            }
        } else {
            match rx.recv_timeout(RETRY_UNSAVED) {
                Ok(job) => job,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    retry_unsaved(&ctx);
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        };
        let result = match job {
            Job::Cache(job) => write_cache(&ctx, job),
            Job::Turn(id, text, then) => {
                let r = save_turn(&ctx, &id, text);
                then();
                r
            }
            Job::DeleteCache(id) => delete_cache(&ctx, &id),
            Job::Flush(done) => {
                // Whoever flushes (a front-end about to exit) gets one more try at what is kept
                // in memory.
                if ctx.store.has_unsaved() {
                    retry_unsaved(&ctx);
                }
                let _ = done.send(());
                continue;
            }
        };
        let mut stats = lock(&ctx.stats);
        match result {
            Ok(()) => {
                if failing {
                    tracing::info!("saving works again");
                }
                failing = false;
                stats.last_error = None;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!("could not save: {e}; generation goes on, and what was saved before is kept");
                } else {
                    tracing::debug!("could not save: {e}");
                }
                failing = true;
                stats.write_failures += 1;
                stats.last_error = Some(e.to_string());
            }
        }
    }
}

/// Writes the conversations kept in memory again (see `ConversationStore::update_or_keep`).
fn retry_unsaved(ctx: &WorkerContext) {
    let (written, error) = ctx.store.retry_unsaved();
    if written > 0 {
        tracing::info!("saved {written} conversations that were kept in memory");
    }
    let mut stats = lock(&ctx.stats);
    match error {
        Some(e) => {
            stats.write_failures += 1;
            stats.last_error = Some(e.to_string());
        }
        None => stats.last_error = None,
    }
}

fn write_cache(ctx: &WorkerContext, job: CacheJob) -> Result<(), PersistError> {
    let (dir, fingerprint, layout) = {
        let index = lock(&ctx.index);
        (index.dir().to_path_buf(), index.fingerprint(), index.layout().clone())
    };
    std::fs::create_dir_all(&dir).map_err(|e| PersistError::io(&dir, e))?;
    let path = cache_path(&dir, &job.id);
    let bs = layout.block_size as usize;
    let bb = layout.block_bytes() as usize;
    // The previous file, if its leading blocks are the ones the engine did not copy.
    let mut old = None;
    let mut reuse = 0;
    if job.reuse_blocks > 0 {
        match CacheFile::open(&path).and_then(|f| {
            f.check_compatible(fingerprint, &layout)?;
            Ok(f)
        }) {
            Ok(f) => {
                reuse = common_blocks(&f.header().tokens, &job.tokens, bs, job.reuse_blocks).min(f.blocks_present());
                old = Some(f);
            }
            Err(e) => tracing::warn!("cannot reuse the previous cache file: {e}"),
        }
    }
    // Blocks past a gap cannot be stored (a file is one chain from the first block).
    let n = if reuse < job.reuse_blocks {
        reuse
    } else {
        job.hashes.len()
    };
    let fresh = if n > job.reuse_blocks {
        &job.fresh[..(n - job.reuse_blocks) * bb]
    } else {
        &job.fresh[..0]
    };
    let written = write_cache_file(
        &path,
        CacheWrite {
            fingerprint,
            layout,
            tokens: &job.tokens,
            hashes: &job.hashes[..n],
            reuse: old.as_mut().map(|f| (f, reuse)),
            fresh,
            // Not past the blocks this file can hold.
            state: job.state.as_ref().filter(|(k, _)| (1..=n).contains(k)).map(|(k, f)| (*k, f.as_slice())),
        },
        &ctx.faults,
    )?;
    drop(old);
    if let Some(e) = &written.damaged {
        tracing::warn!("{e}: the rewritten cache file ends before it");
    }
    let mut index = lock(&ctx.index);
    index.insert(job.id.clone(), path, &written.header, written.bytes, SystemTime::now());
    let evict = index.over_budget(ctx.budget_bytes, Some(&job.id));
    let mut evicted = 0;
    for id in evict {
        if let Some(f) = index.remove(&id) {
            match std::fs::remove_file(&f.path) {
                Ok(()) => evicted += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!("cannot delete {} to stay within the disk budget: {e}", f.path.display()),
            }
        }
    }
    let (files, bytes) = (index.len(), index.bytes());
    drop(index);
    let mut stats = lock(&ctx.stats);
    stats.files = files;
    stats.bytes = bytes;
    stats.files_written += 1;
    stats.bytes_written += written.bytes;
    stats.files_evicted += evicted;
    Ok(())
}

/// A title from the first user message: its first line, at most 60 characters.
pub fn title_from(messages: &[Message]) -> String {
    let first = messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(|m| m.content.as_str())
        .unwrap_or("");
    let line = first.lines().next().unwrap_or("").trim();
    let mut t: String = line.chars().take(60).collect();
    if line.chars().count() > 60 {
        t.push('…');
    }
    if t.is_empty() {
        NEW_CHAT_TITLE.into()
    } else {
        t
    }
}

fn save_turn(ctx: &WorkerContext, id: &ConversationId, text: TurnText) -> Result<(), PersistError> {
    // What the model wrote is never dropped: a write that fails keeps the conversation in
    // memory, and `retry_unsaved` writes it once the disk allows.
    let kept = match text {
        TurnText::AppendReply { reply } => ctx
            .store
            .update_or_keep(id, None, |c| c.messages.push(Message::new(Role::Assistant, reply)))?,
        TurnText::Replace { messages, reply } => {
            let title = title_from(&messages);
            let new = || Conversation::new(id.clone(), title.clone(), ConversationSettings::default());
            ctx.store.update_or_keep(id, Some(&new), |c| {
                c.messages = messages;
                c.messages.push(Message::new(Role::Assistant, reply));
            })?
        }
    };
    match kept.unsaved {
        None => Ok(()),
        Some(reason) => Err(PersistError::Unsaved { id: id.clone(), reason }),
    }
}

fn delete_cache(ctx: &WorkerContext, id: &ConversationId) -> Result<(), PersistError> {
    let mut index = lock(&ctx.index);
    let path: PathBuf = index
        .remove(id)
        .map(|f| f.path)
        .unwrap_or_else(|| cache_path(index.dir(), id));
    let (files, bytes) = (index.len(), index.bytes());
    drop(index);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(PersistError::io(&path, e)),
    }
    let mut stats = lock(&ctx.stats);
    stats.files = files;
    stats.bytes = bytes;
    Ok(())
}
