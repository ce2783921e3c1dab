//! Conversations through the engine: the operations the desktop app and the HTTP API both offer
//! (list, open, create, rename, set the system prompt, delete, send a message, regenerate the
//! last reply, edit a message and resend), as [`EngineHandle`] methods.
//!
//! Invariants: what the user wrote is on disk before anything is generated (the change is
//! written first, then the reply is submitted); an operation that is refused (an empty title, an
//! edit of a message that is not the user's) writes nothing; a reply is saved by the engine's
//! background writer when it finishes (`GenerateRequest::save`), so a front-end never writes a
//! conversation itself.
//!
//! Counterpart: Open WebUI's chat routes and LM Studio's chat actions; vLLM and llama.cpp's
//! server keep no conversations.

use super::{EngineError, EngineHandle, GenerateParams, GenerateRequest, RequestStream, SaveTo};
use crate::model::chat::{Message, Role};
use crate::persist::{
    title_from, Conversation, ConversationId, ConversationSettings, ConversationSummary, Kept, NEW_CHAT_TITLE,
};

impl EngineHandle {
    /// Every conversation, most recently updated first.
    pub fn list_conversations(&self) -> Result<Vec<ConversationSummary>, EngineError> {
        Ok(self.store()?.list()?)
    }

    /// Conversation `id`, whole.
    pub fn conversation(&self, id: &ConversationId) -> Result<Conversation, EngineError> {
        Ok(self.store()?.get(id)?)
    }

    /// A new, empty conversation titled `title` (trimmed), or [`NEW_CHAT_TITLE`] until its first
    /// message names it when `title` is `None` or blank.
    pub fn create_conversation(
        &self,
        title: Option<&str>,
        settings: ConversationSettings,
    ) -> Result<Conversation, EngineError> {
        let title = title.map(str::trim).filter(|t| !t.is_empty()).unwrap_or(NEW_CHAT_TITLE);
        Ok(self.store()?.create(title, settings)?)
    }

    /// Conversation `id`, created empty (titled [`NEW_CHAT_TITLE`]) when there is none; `true`
    /// when it was created.
    pub fn open_or_create_conversation(&self, id: &ConversationId) -> Result<(Conversation, bool), EngineError> {
        let store = self.store()?;
        let created = std::cell::Cell::new(false);
        let new = || {
            created.set(true);
            Conversation::new(id.clone(), NEW_CHAT_TITLE, ConversationSettings::default())
        };
        let c = store.update(id, Some(&new), |_| {})?;
        Ok((c, created.get()))
    }

    /// Renames conversation `id`; a blank title is refused.
    pub fn rename_conversation(&self, id: &ConversationId, title: &str) -> Result<Conversation, EngineError> {
        let title = title.trim();
        if title.is_empty() {
            return Err(EngineError::InvalidRequest("a title cannot be empty".into()));
        }
        Ok(self.store()?.rename(id, title)?)
    }

    /// Sets (or, with `None` or a blank prompt, clears) the system prompt sent before the
    /// conversation's messages.
    pub fn set_system_prompt(&self, id: &ConversationId, prompt: Option<&str>) -> Result<Conversation, EngineError> {
        let prompt = prompt.map(str::trim).filter(|p| !p.is_empty()).map(str::to_owned);
        Ok(self.store()?.update(id, None, |c| c.settings.system_prompt = prompt)?)
    }

    /// Deletes a conversation: its text, then its cache file.
    pub fn delete_conversation(&self, id: &ConversationId) -> Result<(), EngineError> {
        self.store()?.delete(id)?;
        self.delete_cache(id.clone());
        Ok(())
    }

    /// Continues conversation `id`: saves the user's `message` (if any) at once, then generates
    /// the assistant's reply to the whole conversation. A conversation still titled
    /// [`NEW_CHAT_TITLE`] is named after its first message. `defaults` are the sampling settings
    /// and `max_tokens` unless the conversation's settings override them. When the reply
    /// finishes, it is appended to the conversation and the conversation's cache file is
    /// written, both in the background.
    ///
    /// If the user's message cannot be saved (a full disk), it is kept in memory (listed in
    /// [`crate::persist::DiskStats::unsaved`]), the reply is generated anyway, and the whole
    /// conversation is written with it when it finishes, or later when the disk allows.
    pub fn send_message(
        &self,
        id: &ConversationId,
        message: Option<&str>,
        defaults: &GenerateParams,
    ) -> Result<RequestStream, EngineError> {
        let store = self.store()?;
        let Some(text) = message else {
            return self.reply(store.get(id)?, false, defaults);
        };
        let m = Message::user(text);
        let add = |c: &mut Conversation| {
            if c.title == NEW_CHAT_TITLE && !c.messages.iter().any(|m| m.role == Role::User) {
                c.title = title_from(std::slice::from_ref(&m));
            }
            c.messages.push(m.clone());
        };
        // A write that fails keeps the message in memory (shown as not saved, written again
        // when the disk allows); the reply is generated either way.
        let kept = store.update_or_keep(id, None, add)?;
        self.reply(kept.conversation, kept.unsaved.is_some(), defaults)
    }

    /// Writes `messages` as conversation `id`'s whole text now, creating it (titled from them)
    /// when new: what a chat request naming a `conversation_id` sends is on disk before its
    /// reply is generated, and stays there if the client leaves. The reply, when it finishes,
    /// is saved with them again ([`SaveTo::messages`]). When the write fails (a full disk) the
    /// text is kept in memory and written later, and [`Kept::unsaved`] says why. `Ok(None)`
    /// when conversations are off (no data dir): nothing is saved then, the reply included.
    pub fn save_messages(&self, id: &ConversationId, messages: &[Message]) -> Result<Option<Kept>, EngineError> {
        let Ok(store) = self.store() else {
            return Ok(None);
        };
        let title = title_from(messages);
        let new = || Conversation::new(id.clone(), title.clone(), ConversationSettings::default());
        Ok(Some(
            store.update_or_keep(id, Some(&new), |c| c.messages = messages.to_vec())?,
        ))
    }

    /// Why conversation `id` is only in memory (its last write failed), if it is.
    pub fn unsaved_reason(&self, id: &ConversationId) -> Option<String> {
        self.store().ok()?.unsaved_reason(id)
    }

    /// Generates the last reply of conversation `id` again: drops it (when the conversation ends
    /// with one) and replies to what is left.
    pub fn regenerate(&self, id: &ConversationId, defaults: &GenerateParams) -> Result<RequestStream, EngineError> {
        let c = self.store()?.try_update(id, |c| {
            if c.messages.last().is_some_and(|m| m.role == Role::Assistant) {
                c.messages.pop();
            }
            if c.messages.is_empty() {
                return Err(EngineError::InvalidRequest(
                    "the conversation has no message to reply to".into(),
                ));
            }
            Ok(())
        })?;
        self.reply(c, false, defaults)
    }

    /// Replaces the user's message at `index` with `text`, drops everything after it, and
    /// generates a new reply. Refused (nothing written) when `index` is not a user message or
    /// `text` is blank.
    pub fn edit_and_resend(
        &self,
        id: &ConversationId,
        index: usize,
        text: &str,
        defaults: &GenerateParams,
    ) -> Result<RequestStream, EngineError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(EngineError::InvalidRequest("an edited message cannot be empty".into()));
        }
        let c = self.store()?.try_update(id, |c| {
            if c.messages.get(index).is_none_or(|m| m.role != Role::User) {
                return Err(EngineError::InvalidRequest(format!(
                    "message {index} is not one of the user's messages"
                )));
            }
            c.messages.truncate(index);
            c.messages.push(Message::user(text));
            Ok(())
        })?;
        self.reply(c, false, defaults)
    }

    /// Submits the assistant's reply to `conversation` as saved (or, with `rewrite`, as given:
    /// the writer then saves the whole conversation with the reply).
    fn reply(
        &self,
        conversation: Conversation,
        rewrite: bool,
        defaults: &GenerateParams,
    ) -> Result<RequestStream, EngineError> {
        let prompt = self.tokenize_chat(&conversation.prompt_messages())?;
        let mut params = defaults.clone();
        if let Some(s) = &conversation.settings.sampling {
            params.sampling = s.clone();
        }
        if let Some(n) = conversation.settings.max_tokens {
            params.max_tokens = n;
        }
        self.submit(GenerateRequest {
            prompt,
            params,
            save: Some(SaveTo {
                conversation: conversation.id,
                messages: rewrite.then_some(conversation.messages),
            }),
        })
    }
}
