//! The responses `store: true` keeps, for `previous_response_id` and `GET /v1/responses/{id}`.
//!
//! Owns: [`ResponseStore`], a map from response id to the finished response's JSON and the
//! whole conversation it continues (every earlier turn, this request's input and the reply, as
//! chat [`Message`]s), so a request naming it as `previous_response_id` renders the same
//! history the model saw, and the prefix cache serves it. Each entry holds its whole history
//! (not a link to the previous one), so dropping an old entry never breaks a newer chain.
//!
//! Invariants: the store holds at most its budget in bytes ([`DEFAULT_BUDGET`] in a server) (text and JSON, as
//! measured by [`Stored::bytes`]); over it, the oldest entries are dropped first. It lives in
//! memory only: after a restart an id is unknown (404), as in vLLM. The conversations API
//! (`/v1/conversations`) is the durable way to keep a chat.
//!
//! Counterpart: vLLM's in-memory `response_store` and `msg_store` in `serving_responses.py`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::engine::Message;

/// The store's default size: 64 MiB of text.
pub(crate) const DEFAULT_BUDGET: usize = 64 << 20;

/// One stored response.
#[derive(Debug)]
pub(crate) struct Stored {
    /// The response object as it was returned.
    pub response: Value,
    /// The conversation up to and with this response's reply, without `instructions` (which
    /// a later request does not inherit, as OpenAI defines it).
    pub history: Vec<Message>,
}

impl Stored {
    /// Roughly what the entry holds in memory: its texts and its JSON.
    pub fn bytes(&self) -> usize {
        let text: usize = self
            .history
            .iter()
            .map(|m| {
                m.content.len()
                    + m.reasoning_content.as_ref().map_or(0, String::len)
                    + m.tool_calls.iter().map(|c| c.id.len() + c.name.len() + c.arguments.len()).sum::<usize>()
                    + 64
            })
            .sum();
        text + self.response.to_string().len()
    }
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, (Arc<Stored>, usize)>,
    /// Ids, oldest first.
    order: VecDeque<String>,
    bytes: usize,
}

/// Stored responses by id, at most `budget` bytes of them.
#[derive(Debug)]
pub(crate) struct ResponseStore {
    inner: Mutex<Inner>,
    budget: usize,
}

impl Default for ResponseStore {
    fn default() -> Self {
        Self::new(DEFAULT_BUDGET)
    }
}

impl ResponseStore {
    pub fn new(budget: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            budget,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the map consistent (each change is one step).
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `stored` under `id`, dropping the oldest entries over the budget. An entry larger
    /// than the whole budget is not kept (false).
    pub fn insert(&self, id: String, stored: Stored) -> bool {
        let size = stored.bytes();
        if size > self.budget {
            tracing::warn!("response {id} ({size} bytes) is larger than the response store ({} bytes); not stored", self.budget);
            return false;
        }
        let mut inner = self.lock();
        if let Some((_, old)) = inner.entries.remove(&id) {
            inner.bytes -= old;
            inner.order.retain(|o| o != &id);
        }
        while inner.bytes + size > self.budget {
            let Some(oldest) = inner.order.pop_front() else { break };
            if let Some((_, n)) = inner.entries.remove(&oldest) {
                inner.bytes -= n;
                tracing::debug!("response store full: dropped {oldest}");
            }
        }
        inner.bytes += size;
        inner.order.push_back(id.clone());
        inner.entries.insert(id, (Arc::new(stored), size));
        true
    }

    pub fn get(&self, id: &str) -> Option<Arc<Stored>> {
        self.lock().entries.get(id).map(|(s, _)| Arc::clone(s))
    }

    /// Drops `id`; false when it was not stored.
    pub fn remove(&self, id: &str) -> bool {
        let mut inner = self.lock();
        match inner.entries.remove(id) {
            Some((_, n)) => {
                inner.bytes -= n;
                inner.order.retain(|o| o != id);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Role;

    fn entry(text: &str) -> Stored {
        Stored {
            response: serde_json::json!({"id": "x"}),
            history: vec![Message::new(Role::User, text)],
        }
    }

    #[test]
    fn the_oldest_entries_go_first_over_the_budget() {
        let one = entry(&"a".repeat(100)).bytes();
        let store = ResponseStore::new(one * 2 + one / 2);
        assert!(store.insert("r1".into(), entry(&"a".repeat(100))));
        assert!(store.insert("r2".into(), entry(&"b".repeat(100))));
        assert!(store.get("r1").is_some());
        assert!(store.insert("r3".into(), entry(&"c".repeat(100))));
        assert!(store.get("r1").is_none(), "the oldest is dropped");
        assert_eq!(store.get("r2").map(|s| s.history[0].content.clone()), Some("b".repeat(100)));
        assert!(store.get("r3").is_some());
        assert!(store.remove("r2"));
        assert!(!store.remove("r2"));
        assert!(store.get("r2").is_none());
        // Too large for the whole store: not kept, and nothing else is dropped for it.
        assert!(!store.insert("big".into(), entry(&"d".repeat(10 * one))));
        assert!(store.get("r3").is_some());
    }
}
