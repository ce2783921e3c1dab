//! The app's state, apart from any widget: what the window shows and what the user is doing.
//!
//! Owns: [`AppModel`] and its parts ([`ChatView`], [`Streaming`], [`TurnFigures`],
//! [`ModelStatus`]), and how engine events change them ([`AppModel::apply`]). Nothing here
//! draws or blocks; the panels read it and record the user's intents, and `app.rs` carries
//! those out against the engine.
//!
//! Counterpart: the "state separate from the app" split of egui apps (e.g. rerun's
//! `AppState` / `App`).

use std::time::Duration;

use crate::engine::ModelInfo;
use crate::engine::PrefixMatch;
use crate::engine::{Conversation, ConversationId, ConversationSummary, Message, Role};
use crate::engine::{EngineStats, GenerationReport, RequestId};

/// How many recent turns the cache panel charts.
pub const RECENT_TURNS: usize = 30;

/// The model, as the window knows it.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelStatus {
    /// Being loaded (what, for the status line).
    Loading(String),
    Ready(ModelInfo),
    /// Loading failed; the message is shown, the app keeps running.
    Failed(String),
}

/// A model download in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownloadFigures {
    /// The file being downloaded (its path in the repo), or whose weights are being read.
    pub file: String,
    /// The weights are being read from a file on disk (no download): nothing to cancel but
    /// the load.
    pub reading: bool,
    /// Bytes on disk so far (a resumed download starts above zero).
    pub done: u64,
    pub total: u64,
}

impl DownloadFigures {
    /// How much is done, 0..=1.
    pub fn fraction(&self) -> f32 {
        if self.total == 0 {
            1.0
        } else {
            (self.done as f64 / self.total as f64).clamp(0.0, 1.0) as f32
        }
    }
}

/// A reply being generated.
#[derive(Debug, Clone, PartialEq)]
pub struct Streaming {
    pub request: RequestId,
    pub conversation: ConversationId,
    /// The reply's text so far.
    pub text: String,
}

/// The open conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatView {
    pub conversation: Conversation,
    /// The system prompt as being edited (applied with "Apply").
    pub system_prompt: String,
}

/// The figures of one finished turn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TurnFigures {
    pub prompt_tokens: usize,
    pub cached: PrefixMatch,
    pub ttft: Duration,
    pub generated: usize,
    pub tokens_per_second: f64,
}

impl TurnFigures {
    pub fn from_report(r: &GenerationReport) -> Self {
        Self {
            prompt_tokens: r.prompt_tokens,
            cached: r.cached,
            ttft: r.ttft,
            generated: r.tokens.len(),
            tokens_per_second: r.decode_rate(),
        }
    }

    /// Tokens served by the device tier, the host tier (RAM, not counting disk reads) and disk.
    pub fn by_tier(&self) -> (usize, usize, usize) {
        let c = self.cached;
        (
            c.device_tokens,
            c.host_tokens - c.disk_tokens.min(c.host_tokens),
            c.disk_tokens,
        )
    }
}

/// What the engine tells the window, delivered over a channel (see `bridge.rs`).
#[derive(Debug)]
pub enum UiEvent {
    Token {
        request: RequestId,
        text: String,
    },
    Done {
        request: RequestId,
        report: Box<GenerationReport>,
    },
    Failed {
        request: RequestId,
        error: String,
    },
}

/// Everything the window shows.
#[derive(Debug, Clone)]
pub struct AppModel {
    pub model: ModelStatus,
    pub conversations: Vec<ConversationSummary>,
    /// Filters the conversation list (case-insensitive, on titles).
    pub search: String,
    pub open: Option<ChatView>,
    /// The message being written.
    pub draft: String,
    pub streaming: Option<Streaming>,
    /// Finished turns since the app started, newest last (at most [`RECENT_TURNS`]).
    pub turns: Vec<TurnFigures>,
    pub stats: Option<EngineStats>,
    /// Errors to show until dismissed.
    pub errors: Vec<String>,
    /// A rename in progress: the conversation and the new title.
    pub renaming: Option<(ConversationId, String)>,
    /// A delete waiting for confirmation.
    pub confirm_delete: Option<ConversationId>,
    /// An edit of a user message in progress: its index and the new text.
    pub editing: Option<(usize, String)>,
    pub show_cache_panel: bool,
    /// The settings window, while open.
    pub settings: Option<super::panels::settings::SettingsForm>,
    /// A notice to show until dismissed (e.g. "settings saved").
    pub notice: Option<String>,
    /// The model download under way, while the model is loading.
    pub download: Option<DownloadFigures>,
    /// The file dialog is open (its answer has not arrived yet).
    pub picking_file: bool,
}

impl Default for AppModel {
    fn default() -> Self {
        Self {
            model: ModelStatus::Loading(String::new()),
            conversations: Vec::new(),
            search: String::new(),
            open: None,
            draft: String::new(),
            streaming: None,
            turns: Vec::new(),
            stats: None,
            errors: Vec::new(),
            renaming: None,
            confirm_delete: None,
            editing: None,
            show_cache_panel: true,
            settings: None,
            notice: None,
            download: None,
            picking_file: false,
        }
    }
}

impl AppModel {
    /// The conversations whose title matches the search.
    pub fn visible_conversations(&self) -> impl Iterator<Item = &ConversationSummary> {
        let q = self.search.trim().to_lowercase();
        self.conversations
            .iter()
            .filter(move |c| q.is_empty() || c.title.to_lowercase().contains(&q))
    }

    /// Why conversation `id` is only in memory (its last write failed: a full disk), if it is.
    pub fn unsaved(&self, id: &ConversationId) -> Option<&str> {
        let disk = self.stats.as_ref()?.disk.as_ref()?;
        disk.unsaved.iter().find(|u| u.id == *id).map(|u| u.error.as_str())
    }

    pub fn open_id(&self) -> Option<&ConversationId> {
        self.open.as_ref().map(|c| &c.conversation.id)
    }

    /// Whether a reply is being generated.
    pub fn busy(&self) -> bool {
        self.streaming.is_some()
    }

    /// The last finished turn.
    pub fn last_turn(&self) -> Option<&TurnFigures> {
        self.turns.last()
    }

    /// Prompt tokens served from the cache over all turns since the app started.
    pub fn hit_rate(&self) -> Option<f64> {
        let prompt: usize = self.turns.iter().map(|t| t.prompt_tokens).sum();
        let cached: usize = self.turns.iter().map(|t| t.cached.tokens).sum();
        (prompt > 0).then(|| cached as f64 / prompt as f64)
    }

    /// Applies one engine event. Returns the conversation whose saved text changed (to reload).
    pub fn apply(&mut self, event: UiEvent) -> Option<ConversationId> {
        let ours = |s: &Option<Streaming>, r: RequestId| s.as_ref().is_some_and(|s| s.request == r);
        match event {
            UiEvent::Token { request, text } => {
                if let Some(s) = self.streaming.as_mut().filter(|s| s.request == request) {
                    s.text.push_str(&text);
                }
                None
            }
            UiEvent::Done { request, report } => {
                if !ours(&self.streaming, request) {
                    return None;
                }
                let s = self.streaming.take()?;
                self.turns.push(TurnFigures::from_report(&report));
                if self.turns.len() > RECENT_TURNS {
                    self.turns.remove(0);
                }
                // Shown at once; the saved conversation (reloaded by the caller) agrees.
                if let Some(open) = self.open.as_mut().filter(|o| o.conversation.id == s.conversation) {
                    open.conversation
                        .messages
                        .push(Message::new(Role::Assistant, report.text.clone()));
                }
                Some(s.conversation)
            }
            UiEvent::Failed { request, error } => {
                if ours(&self.streaming, request) {
                    let s = self.streaming.take();
                    if error != crate::engine::EngineError::Cancelled.to_string() {
                        self.errors.push(error);
                    }
                    return s.map(|s| s.conversation);
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::StopReason;

    fn report(text: &str, cached: PrefixMatch) -> GenerationReport {
        GenerationReport {
            id: RequestId(1),
            prompt_tokens: 100,
            cached,
            tokens: vec![1, 2, 3],
            text: text.into(),
            stop: StopReason::Eos,
            stop_string: None,
            queued: Duration::ZERO,
            ttft: Duration::from_millis(20),
            decode: Duration::from_millis(100),
            bookkeeping: Duration::ZERO,
            preemptions: 0,
            logits: Vec::new(),
            logprobs: Vec::new(),
            prompt_logprobs: Vec::new(),
            embedding: None,
        }
    }

    #[test]
    fn events_stream_into_the_open_conversation() {
        let id = ConversationId::parse("c").unwrap();
        let mut m = AppModel {
            open: Some(ChatView {
                conversation: Conversation::new(id.clone(), "t", Default::default()),
                system_prompt: String::new(),
            }),
            streaming: Some(Streaming {
                request: RequestId(1),
                conversation: id.clone(),
                text: String::new(),
            }),
            ..AppModel::default()
        };
        assert!(m.busy());
        m.apply(UiEvent::Token {
            request: RequestId(2),
            text: "not ours".into(),
        });
        m.apply(UiEvent::Token {
            request: RequestId(1),
            text: "Hel".into(),
        });
        m.apply(UiEvent::Token {
            request: RequestId(1),
            text: "lo".into(),
        });
        assert_eq!(m.streaming.as_ref().unwrap().text, "Hello");
        let cached = PrefixMatch {
            tokens: 64,
            device_tokens: 16,
            host_tokens: 48,
            disk_tokens: 32,
        };
        assert_eq!(
            m.apply(UiEvent::Done {
                request: RequestId(1),
                report: Box::new(report("Hello", cached))
            }),
            Some(id)
        );
        assert!(!m.busy());
        assert_eq!(m.open.as_ref().unwrap().conversation.messages.len(), 1);
        assert_eq!(m.last_turn().unwrap().by_tier(), (16, 16, 32));
        assert_eq!(m.hit_rate(), Some(0.64));
    }

    #[test]
    fn search_filters_titles_and_cancel_is_not_an_error() {
        let mut m = AppModel::default();
        for (i, t) in ["Rust lifetimes", "Dinner plans", "rusty bike"].iter().enumerate() {
            m.conversations.push(ConversationSummary {
                id: ConversationId::parse(&format!("c{i}")).unwrap(),
                title: t.to_string(),
                created_ms: 0,
                updated_ms: 0,
                messages: 0,
            });
        }
        m.search = " RUST".into();
        assert_eq!(m.visible_conversations().count(), 2);
        m.streaming = Some(Streaming {
            request: RequestId(5),
            conversation: ConversationId::parse("c0").unwrap(),
            text: "x".into(),
        });
        m.apply(UiEvent::Failed {
            request: RequestId(5),
            error: crate::engine::EngineError::Cancelled.to_string(),
        });
        assert!(m.errors.is_empty() && !m.busy());
    }
}
