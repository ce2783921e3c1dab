//! Conversations as files: each one's messages, settings and timestamps, one JSON file each.
//!
//! Owns: [`Conversation`] (its [`Message`]s are `model::chat`'s), [`ConversationSettings`], [`ConversationSummary`] and
//! [`ConversationStore`] (`<data dir>/conversations/<id>.json`).
//!
//! Invariants: every change is written atomically (temp file, fsync, rename) before the call
//! returns, so what a user wrote is on disk before generation starts; read-modify-write changes
//! hold the store's lock, so the engine appending a reply and a user renaming the conversation
//! never lose each other's change. A damaged file is reported and left in place (never
//! overwritten by a guess). The text never depends on the cache file, which can be deleted at any
//! time.
//!
//! Counterpart: LM Studio's and Open WebUI's chat stores; llama.cpp's server keeps none (its
//! slots save only K/V).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::atomic::{write_atomic, Faults};
use super::{now_ms, ConversationId, PersistError};
use crate::config::SamplingParams;
pub use crate::model::chat::{Message, Role};

/// The title of a conversation until its first message names it (see `title_from`).
pub const NEW_CHAT_TITLE: &str = "New chat";

/// Version of the conversation JSON layout.
pub const CONVERSATION_FORMAT: u32 = 1;

/// How a conversation generates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConversationSettings {
    /// Sent before the messages as a system message.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// `None`: the engine's defaults.
    #[serde(default)]
    pub sampling: Option<SamplingParams>,
    #[serde(default)]
    pub max_tokens: Option<usize>,
}

/// A whole conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    #[serde(default = "format_version")]
    pub format: u32,
    pub id: ConversationId,
    pub title: String,
    pub created_ms: u64,
    pub updated_ms: u64,
    #[serde(default)]
    pub settings: ConversationSettings,
    #[serde(default)]
    pub messages: Vec<Message>,
}

fn format_version() -> u32 {
    CONVERSATION_FORMAT
}

impl Conversation {
    /// A new, empty conversation.
    pub fn new(id: ConversationId, title: impl Into<String>, settings: ConversationSettings) -> Self {
        let now = now_ms();
        Self {
            format: CONVERSATION_FORMAT,
            id,
            title: title.into(),
            created_ms: now,
            updated_ms: now,
            settings,
            messages: Vec::new(),
        }
    }

    /// The messages to render for the model: the system prompt (if any, and if the
    /// conversation does not start with its own system message), then every message.
    pub fn prompt_messages(&self) -> Vec<Message> {
        let mut out = Vec::with_capacity(self.messages.len() + 1);
        if let Some(s) = &self.settings.system_prompt {
            if self.messages.first().is_none_or(|m| m.role != Role::System) {
                out.push(Message::system(s.as_str()));
            }
        }
        out.extend(self.messages.iter().cloned());
        out
    }
}

/// A line of the conversation list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConversationSummary {
    pub id: ConversationId,
    pub title: String,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub messages: usize,
}

/// The conversations directory, and the conversations that could not be written to it.
///
/// A change that carries what someone wrote (a message, a reply: [`Self::update_or_keep`]) is
/// never lost to a failed write (a full disk): the new version is kept in memory, read instead
/// of the file by every reader, reported by [`Self::unsaved`], and written by
/// [`Self::retry_unsaved`] (the background writer calls it until it works). Other changes
/// (a title, a new empty conversation) fail as a whole and change nothing.
#[derive(Debug, Clone)]
pub struct ConversationStore {
    dir: PathBuf,
    /// Taken by every change; holds the unsaved conversations.
    lock: Arc<Mutex<Unsaved>>,
    /// The last `updated_ms` this store gave: each change gets a later one, so changes
    /// made within one millisecond still list in the order they were made.
    last_stamp: Arc<AtomicU64>,
    faults: Faults,
}

/// Conversations whose latest version is only in memory, with why the write failed.
type Unsaved = HashMap<ConversationId, (Conversation, String)>;

/// A change made by [`ConversationStore::update_or_keep`].
#[derive(Debug, Clone)]
pub struct Kept {
    pub conversation: Conversation,
    /// `Some(why)` when it could not be written and is kept in memory until a write works.
    pub unsaved: Option<String>,
}

/// A conversation kept in memory because it could not be written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UnsavedConversation {
    pub id: ConversationId,
    pub title: String,
    /// Why the last write failed.
    pub error: String,
}

impl ConversationStore {
    /// The store in `dir` (created on first write).
    pub fn new(dir: PathBuf) -> Self {
        Self::with_faults(dir, Faults::none())
    }

    /// For tests: every write goes through `faults`.
    pub fn with_faults(dir: PathBuf, faults: Faults) -> Self {
        Self {
            dir,
            lock: Arc::new(Mutex::new(HashMap::new())),
            last_stamp: Arc::new(AtomicU64::new(0)),
            faults,
        }
    }

    /// The `updated_ms` of a change now: the clock, but never before `at_least` and
    /// always after this store's previous stamp.
    fn stamp(&self, at_least: u64) -> u64 {
        let now = now_ms().max(at_least);
        let previous = self
            .last_stamp
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| Some(now.max(last + 1)))
            .unwrap_or_else(|last| last);
        now.max(previous + 1)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of conversation `id`.
    pub fn path(&self, id: &ConversationId) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, Unsaved> {
        super::worker::lock(&self.lock)
    }

    /// Creates a conversation (with a fresh id) and writes it.
    /// When it cannot be written (a full disk) it is kept in memory like
    /// [`Self::update_or_keep`]'s changes: the first message the user is about to send goes into
    /// it.
    pub fn create(&self, title: &str, settings: ConversationSettings) -> Result<Conversation, PersistError> {
        let mut unsaved = self.locked();
        let mut c = Conversation::new(ConversationId::generate(), title, settings);
        c.updated_ms = self.stamp(c.updated_ms);
        self.write_or_keep(&mut unsaved, &c);
        Ok(c)
    }

    /// Conversation `id`: its unsaved version if it has one, else its file.
    pub fn get(&self, id: &ConversationId) -> Result<Conversation, PersistError> {
        let unsaved = self.locked();
        self.current(&unsaved, id)
    }

    /// `id`'s unsaved version, else its file (the caller holds the lock).
    fn current(&self, unsaved: &Unsaved, id: &ConversationId) -> Result<Conversation, PersistError> {
        match unsaved.get(id) {
            Some((c, _)) => Ok(c.clone()),
            None => self.read_file(id),
        }
    }

    /// Reads conversation `id`'s file.
    fn read_file(&self, id: &ConversationId) -> Result<Conversation, PersistError> {
        let path = self.path(id);
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(PersistError::NotFound(id.clone())),
            Err(e) => return Err(PersistError::io(&path, e)),
        };
        let c: Conversation = serde_json::from_slice(&text).map_err(|e| PersistError::BadConversation {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if c.id != *id {
            return Err(PersistError::BadConversation {
                path,
                reason: format!("it holds conversation {}", c.id),
            });
        }
        Ok(c)
    }

    /// Whether conversation `id` exists.
    pub fn exists(&self, id: &ConversationId) -> bool {
        self.locked().contains_key(id) || self.path(id).exists()
    }

    /// Whether any conversation is kept in memory because it could not be written.
    pub fn has_unsaved(&self) -> bool {
        !self.locked().is_empty()
    }

    /// Why conversation `id` is only in memory (its last write failed), if it is.
    pub fn unsaved_reason(&self, id: &ConversationId) -> Option<String> {
        self.locked().get(id).map(|(_, why)| why.clone())
    }

    /// The conversations kept in memory because they could not be written.
    pub fn unsaved(&self) -> Vec<UnsavedConversation> {
        let mut out: Vec<_> = self
            .locked()
            .iter()
            .map(|(id, (c, error))| UnsavedConversation {
                id: id.clone(),
                title: c.title.clone(),
                error: error.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// Writes every unsaved conversation again; those written are dropped from memory. Returns
    /// how many were written, and the first error of those still unsaved.
    pub fn retry_unsaved(&self) -> (usize, Option<PersistError>) {
        let mut unsaved = self.locked();
        let mut written = 0;
        let mut first_error = None;
        let ids: Vec<ConversationId> = unsaved.keys().cloned().collect();
        for id in ids {
            let Some((c, _)) = unsaved.get(&id) else { continue };
            match self.write(c) {
                Ok(()) => {
                    unsaved.remove(&id);
                    written += 1;
                }
                Err(e) => {
                    if let Some((_, why)) = unsaved.get_mut(&id) {
                        *why = e.to_string();
                    }
                    first_error.get_or_insert(e);
                }
            }
        }
        (written, first_error)
    }

    /// Every readable conversation, most recently updated first; damaged files are skipped
    /// with a warning.
    pub fn list(&self) -> Result<Vec<ConversationSummary>, PersistError> {
        let unsaved = self.locked();
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => Some(rd),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(PersistError::io(&self.dir, e)),
        };
        let mut out = Vec::new();
        for entry in rd.into_iter().flatten() {
            let path = entry.map_err(|e| PersistError::io(&self.dir, e))?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let Some(id) = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| ConversationId::parse(s).ok())
            else {
                continue;
            };
            if unsaved.contains_key(&id) {
                continue;
            }
            match self.read_file(&id) {
                Ok(c) => out.push(ConversationSummary {
                    id: c.id,
                    title: c.title,
                    created_ms: c.created_ms,
                    updated_ms: c.updated_ms,
                    messages: c.messages.len(),
                }),
                Err(e) => tracing::warn!("skipping a conversation: {e}"),
            }
        }
        out.extend(unsaved.values().map(|(c, _)| ConversationSummary {
            id: c.id.clone(),
            title: c.title.clone(),
            created_ms: c.created_ms,
            updated_ms: c.updated_ms,
            messages: c.messages.len(),
        }));
        out.sort_by(|a, b| b.updated_ms.cmp(&a.updated_ms).then_with(|| a.id.cmp(&b.id)));
        Ok(out)
    }

    /// Applies `change` to conversation `id` (created by `create_if_missing` when it does not
    /// exist) and writes it; returns the new version. If the write fails nothing changes (an
    /// unsaved version stays the one in memory).
    pub fn update(
        &self,
        id: &ConversationId,
        create_if_missing: Option<&dyn Fn() -> Conversation>,
        change: impl FnOnce(&mut Conversation),
    ) -> Result<Conversation, PersistError> {
        let mut unsaved = self.locked();
        let c = self.changed(&unsaved, id, create_if_missing, change)?;
        self.write(&c)?;
        unsaved.remove(id);
        Ok(c)
    }

    /// [`Self::update`] for a change that carries what someone wrote: when the write fails, the
    /// new version is kept in memory (and written later by [`Self::retry_unsaved`]) instead of
    /// being lost, and [`Kept::unsaved`] says why. Errors only when there is nothing to change
    /// (no such conversation, a damaged file).
    pub fn update_or_keep(
        &self,
        id: &ConversationId,
        create_if_missing: Option<&dyn Fn() -> Conversation>,
        change: impl FnOnce(&mut Conversation),
    ) -> Result<Kept, PersistError> {
        let mut unsaved = self.locked();
        let c = self.changed(&unsaved, id, create_if_missing, change)?;
        let why = self.write_or_keep(&mut unsaved, &c);
        Ok(Kept {
            conversation: c,
            unsaved: why,
        })
    }

    /// Writes `c`; when that fails, keeps it in memory (the caller holds the lock) and returns
    /// why. A written conversation is no longer unsaved.
    fn write_or_keep(&self, unsaved: &mut Unsaved, c: &Conversation) -> Option<String> {
        match self.write(c) {
            Ok(()) => {
                unsaved.remove(&c.id);
                None
            }
            Err(e) => {
                let why = e.to_string();
                tracing::warn!(
                    "conversation {} is kept in memory, not saved: {why}; it is written again when the disk allows",
                    c.id
                );
                unsaved.insert(c.id.clone(), (c.clone(), why.clone()));
                Some(why)
            }
        }
    }

    /// `id`'s current version (created when missing and allowed) with `change` applied.
    fn changed(
        &self,
        unsaved: &Unsaved,
        id: &ConversationId,
        create_if_missing: Option<&dyn Fn() -> Conversation>,
        change: impl FnOnce(&mut Conversation),
    ) -> Result<Conversation, PersistError> {
        let mut c = match (self.current(unsaved, id), create_if_missing) {
            (Ok(c), _) => c,
            (Err(PersistError::NotFound(_)), Some(new)) => new(),
            (Err(e), _) => return Err(e),
        };
        change(&mut c);
        c.updated_ms = self.stamp(c.updated_ms);
        Ok(c)
    }

    /// Like [`Self::update`] for an existing conversation, but `change` may refuse: then nothing
    /// is written and its error comes back.
    pub fn try_update<E: From<PersistError>>(
        &self,
        id: &ConversationId,
        change: impl FnOnce(&mut Conversation) -> Result<(), E>,
    ) -> Result<Conversation, E> {
        let mut unsaved = self.locked();
        let mut c = self.current(&unsaved, id)?;
        change(&mut c)?;
        c.updated_ms = self.stamp(c.updated_ms);
        self.write(&c)?;
        unsaved.remove(id);
        Ok(c)
    }

    /// Renames conversation `id`.
    pub fn rename(&self, id: &ConversationId, title: &str) -> Result<Conversation, PersistError> {
        self.update(id, None, |c| c.title = title.to_string())
    }

    /// Appends `message` to conversation `id`.
    pub fn append(&self, id: &ConversationId, message: Message) -> Result<Conversation, PersistError> {
        self.update(id, None, |c| c.messages.push(message))
    }

    /// Deletes conversation `id`'s file.
    pub fn delete(&self, id: &ConversationId) -> Result<(), PersistError> {
        let mut unsaved = self.locked();
        let was_unsaved = unsaved.remove(id).is_some();
        let path = self.path(id);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && was_unsaved => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(PersistError::NotFound(id.clone())),
            Err(e) => Err(PersistError::io(&path, e)),
        }
    }

    fn write(&self, c: &Conversation) -> Result<(), PersistError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| PersistError::io(&self.dir, e))?;
        let text = serde_json::to_vec_pretty(c).map_err(|e| PersistError::BadConversation {
            path: self.path(&c.id),
            reason: e.to_string(),
        })?;
        write_atomic(&self.path(&c.id), &text, &self.faults)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_within_one_millisecond_list_in_the_order_made() {
        let dir = tempfile::tempdir().unwrap();
        let store = ConversationStore::new(dir.path().join("conversations"));
        // Far more changes than milliseconds pass: stamps must still increase.
        let made: Vec<_> = (0..30)
            .map(|i| store.create(&format!("c{i}"), ConversationSettings::default()).unwrap().id)
            .collect();
        store.rename(&made[3], "touched").unwrap();
        let listed: Vec<_> = store.list().unwrap().into_iter().map(|c| c.id).collect();
        let mut want: Vec<_> = made.iter().rev().filter(|id| **id != made[3]).cloned().collect();
        want.insert(0, made[3].clone());
        assert_eq!(listed, want);
    }

    #[test]
    fn create_list_rename_append_delete() {
        let dir = tempfile::tempdir().unwrap();
        let store = ConversationStore::new(dir.path().join("conversations"));
        assert!(store.list().unwrap().is_empty());
        let a = store
            .create(
                "first",
                ConversationSettings {
                    system_prompt: Some("be brief".into()),
                    ..Default::default()
                },
            )
            .unwrap();
        let b = store.create("second", ConversationSettings::default()).unwrap();
        store.append(&a.id, Message::new(Role::User, "hi")).unwrap();
        let list = store.list().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].id, a.id, "most recently updated first");
        store.rename(&b.id, "renamed").unwrap();
        assert_eq!(store.get(&b.id).unwrap().title, "renamed");
        let got = store.get(&a.id).unwrap();
        assert_eq!(got.messages.len(), 1);
        assert_eq!(
            got.prompt_messages()
                .iter()
                .map(|m| (m.role.clone(), m.content.as_str()))
                .collect::<Vec<_>>(),
            vec![(Role::System, "be brief"), (Role::User, "hi")]
        );
        store.delete(&b.id).unwrap();
        assert!(matches!(store.get(&b.id), Err(PersistError::NotFound(_))));
        assert!(matches!(store.delete(&b.id), Err(PersistError::NotFound(_))));
        // a damaged file is skipped by list and reported by get, never rewritten
        std::fs::write(store.path(&b.id), b"{not json").unwrap();
        assert_eq!(store.list().unwrap().len(), 1);
        assert!(matches!(store.get(&b.id), Err(PersistError::BadConversation { .. })));
        assert!(store.append(&b.id, Message::new(Role::User, "x")).is_err());
        assert_eq!(std::fs::read(store.path(&b.id)).unwrap(), b"{not json");
    }

    #[test]
    fn a_failed_write_keeps_the_previous_version() {
        let dir = tempfile::tempdir().unwrap();
        let ok = ConversationStore::new(dir.path().to_path_buf());
        let c = ok.create("t", ConversationSettings::default()).unwrap();
        ok.append(&c.id, Message::new(Role::User, "kept")).unwrap();
        let full = ConversationStore::with_faults(
            dir.path().to_path_buf(),
            Faults::new(|_| Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "disk full"))),
        );
        assert!(full.append(&c.id, Message::new(Role::User, "lost")).is_err());
        let got = ok.get(&c.id).unwrap();
        assert_eq!(got.messages.len(), 1);
        assert_eq!(got.messages[0].content, "kept");
    }
}
