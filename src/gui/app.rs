//! The app: carries out what the panels ask for against the engine, and lays the panels out.
//!
//! Owns: [`HearthApp`] (the [`AppModel`], the engine handle once loaded, the [`Bridge`]) and
//! [`Action`], what a panel asks for. Panels only read the model and return actions; this file
//! is the one place that calls the engine's conversation API. Nothing here waits on the engine:
//! sending a message returns a stream whose events come back through the bridge; conversation
//! files are small and read or written in place.
//!
//! Counterpart: the `App` half of egui's "state separate from the app" split.

use std::sync::Arc;
use std::time::Duration;

use super::bridge::{Bridge, Delivery};
use super::{panels, AppModel, ChatView, ModelStatus, Streaming};
use crate::config::{AppPaths, Settings};
use crate::engine::{EngineHandle, GenerateParams};
use crate::persist::{ConversationId, ConversationSettings, Message, Role};

/// What a panel asks the app to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    NewConversation,
    Open(ConversationId),
    Rename(ConversationId, String),
    Delete(ConversationId),
    /// Send the draft (a new conversation is created if none is open).
    Send,
    Stop,
    Regenerate,
    /// Replace user message `index` with this text, drop what followed, and reply again.
    ResendEdited(usize, String),
    ApplySystemPrompt,
    DismissError(usize),
}

/// The desktop app.
pub struct HearthApp {
    pub model: AppModel,
    engine: Option<EngineHandle>,
    bridge: Bridge,
    defaults: GenerateParams,
    markdown: egui_commonmark::CommonMarkCache,
}

impl std::fmt::Debug for HearthApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HearthApp")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// Generation defaults from the settings.
pub fn default_params(settings: &Settings) -> GenerateParams {
    GenerateParams {
        max_tokens: settings.max_tokens,
        sampling: settings.sampling.clone(),
        stop: Vec::new(),
        ignore_eos: false,
        keep_logits: false,
    }
}

fn repaint_of(ctx: &egui::Context) -> super::bridge::Repaint {
    let ctx = ctx.clone();
    Arc::new(move || ctx.request_repaint())
}

impl HearthApp {
    /// The app, loading `settings`' model in the background.
    pub fn new(ctx: &egui::Context, settings: Settings, paths: AppPaths) -> Self {
        let bridge = Bridge::new(repaint_of(ctx));
        let (tx, repaint) = bridge.sender();
        let what = settings.model.source.clone();
        let defaults = default_params(&settings);
        super::loader::spawn_loader(settings, paths, tx, repaint);
        Self {
            model: AppModel {
                model: ModelStatus::Loading(what),
                ..AppModel::default()
            },
            engine: None,
            bridge,
            defaults,
            markdown: Default::default(),
        }
    }

    /// The app around a running engine (its conversations are listed at once).
    pub fn with_engine(ctx: &egui::Context, engine: EngineHandle, defaults: GenerateParams) -> Self {
        let mut app = Self {
            model: AppModel::default(),
            engine: None,
            bridge: Bridge::new(repaint_of(ctx)),
            defaults,
            markdown: Default::default(),
        };
        app.attach(engine);
        app
    }

    fn attach(&mut self, engine: EngineHandle) {
        self.model.model = ModelStatus::Ready(engine.model_info().clone());
        self.engine = Some(engine);
        self.refresh_list();
        // Restore the most recent conversation.
        if let Some(id) = self.model.conversations.first().map(|c| c.id.clone()) {
            self.open(&id);
        }
    }

    fn error(&mut self, e: impl std::fmt::Display) {
        self.model.errors.push(e.to_string());
    }

    fn refresh_list(&mut self) {
        let Some(engine) = &self.engine else { return };
        match engine.conversations().and_then(|s| Ok(s.list()?)) {
            Ok(list) => self.model.conversations = list,
            Err(e) => self.error(format!("cannot list conversations: {e}")),
        }
    }

    fn open(&mut self, id: &ConversationId) {
        let Some(engine) = &self.engine else { return };
        match engine.conversations().and_then(|s| Ok(s.get(id)?)) {
            Ok(c) => {
                self.model.open = Some(ChatView {
                    system_prompt: c.settings.system_prompt.clone().unwrap_or_default(),
                    conversation: c,
                });
                self.model.editing = None;
            }
            Err(e) => self.error(e),
        }
    }

    /// Takes what the background threads delivered.
    fn receive(&mut self) {
        for d in self.bridge.drain() {
            match d {
                Delivery::Loaded(Ok(engine)) => self.attach(engine),
                Delivery::Loaded(Err(e)) => self.model.model = ModelStatus::Failed(e),
                Delivery::Event(event) => {
                    if let Some(id) = self.model.apply(event) {
                        self.refresh_list();
                        if self.model.open_id() == Some(&id) {
                            self.open(&id);
                        }
                    }
                }
            }
        }
        if let Some(engine) = &self.engine {
            self.model.stats = Some(engine.stats());
            if let Some(e) = self
                .model
                .stats
                .as_ref()
                .and_then(|s| s.disk.as_ref())
                .and_then(|d| d.last_error.clone())
            {
                let msg = format!("saving failed: {e}");
                if !self.model.errors.contains(&msg) {
                    self.model.errors.push(msg);
                }
            }
        }
    }

    /// Carries out one action.
    pub fn act(&mut self, action: Action) {
        let Some(engine) = self.engine.clone() else {
            return;
        };
        let store = match engine.conversations() {
            Ok(s) => s.clone(),
            Err(e) => return self.error(e),
        };
        match action {
            Action::NewConversation => match store.create("New chat", ConversationSettings::default()) {
                Ok(c) => {
                    self.refresh_list();
                    self.open(&c.id);
                }
                Err(e) => self.error(e),
            },
            Action::Open(id) => self.open(&id),
            Action::Rename(id, title) => {
                let title = title.trim();
                if title.is_empty() {
                    return self.error("a title cannot be empty");
                }
                if let Err(e) = store.rename(&id, title) {
                    self.error(e);
                }
                self.model.renaming = None;
                self.refresh_list();
                if self.model.open_id() == Some(&id) {
                    self.open(&id);
                }
            }
            Action::Delete(id) => {
                if let Err(e) = engine.delete_conversation(&id) {
                    self.error(e);
                }
                self.model.confirm_delete = None;
                if self.model.open_id() == Some(&id) {
                    self.model.open = None;
                }
                self.refresh_list();
            }
            Action::Send => {
                let text = self.model.draft.trim().to_string();
                if text.is_empty() || self.model.busy() {
                    return;
                }
                let id = match self.model.open_id() {
                    Some(id) => id.clone(),
                    None => {
                        let title = crate::persist::title_from(&[Message::new(Role::User, text.clone())]);
                        match store.create(&title, ConversationSettings::default()) {
                            Ok(c) => c.id,
                            Err(e) => return self.error(e),
                        }
                    }
                };
                if self
                    .model
                    .open
                    .as_ref()
                    .is_some_and(|o| o.conversation.messages.is_empty())
                {
                    let title = crate::persist::title_from(&[Message::new(Role::User, text.clone())]);
                    let _ = store.update(&id, None, |c| {
                        if c.title == "New chat" {
                            c.title = title;
                        }
                    });
                }
                self.model.draft.clear();
                self.reply(&engine, &id, Some(&text));
            }
            Action::Stop => {
                if let Some(s) = &self.model.streaming {
                    engine.cancel(s.request);
                }
            }
            Action::Regenerate => {
                let Some(id) = self.model.open_id().cloned() else {
                    return;
                };
                if self.model.busy() {
                    return;
                }
                let dropped = store.update(&id, None, |c| {
                    if c.messages.last().is_some_and(|m| m.role == Role::Assistant) {
                        c.messages.pop();
                    }
                });
                match dropped {
                    Ok(_) => self.reply(&engine, &id, None),
                    Err(e) => self.error(e),
                }
            }
            Action::ResendEdited(index, text) => {
                let Some(id) = self.model.open_id().cloned() else {
                    return;
                };
                if self.model.busy() || text.trim().is_empty() {
                    return;
                }
                let edited = store.update(&id, None, |c| {
                    if index < c.messages.len() && c.messages[index].role == Role::User {
                        c.messages.truncate(index);
                        c.messages.push(Message::new(Role::User, text.trim()));
                    }
                });
                self.model.editing = None;
                match edited {
                    Ok(_) => self.reply(&engine, &id, None),
                    Err(e) => self.error(e),
                }
            }
            Action::ApplySystemPrompt => {
                let Some(open) = &self.model.open else { return };
                let id = open.conversation.id.clone();
                let prompt = open.system_prompt.trim().to_string();
                match store.update(&id, None, |c| {
                    c.settings.system_prompt = (!prompt.is_empty()).then_some(prompt);
                }) {
                    Ok(_) => self.open(&id),
                    Err(e) => self.error(e),
                }
            }
            Action::DismissError(i) => {
                if i < self.model.errors.len() {
                    self.model.errors.remove(i);
                }
            }
        }
    }

    /// Sends `message` (or nothing: reply to the conversation as saved) and streams the reply.
    fn reply(&mut self, engine: &EngineHandle, id: &ConversationId, message: Option<&str>) {
        match engine.send_message(id, message, &self.defaults) {
            Ok(stream) => {
                self.model.streaming = Some(Streaming {
                    request: stream.id(),
                    conversation: id.clone(),
                    text: String::new(),
                });
                self.bridge.forward(stream);
                self.refresh_list();
                self.open(id);
            }
            Err(e) => {
                self.error(e);
                self.open(id);
            }
        }
    }

    /// One frame: take what arrived, draw, carry out what the user asked for.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        self.receive();
        let mut actions = Vec::new();
        panels::top::show(ui, &mut self.model, &mut actions);
        if self.model.show_cache_panel {
            panels::cache::show(ui, &self.model);
        }
        panels::conversations::show(ui, &mut self.model, &mut actions);
        panels::chat::show(ui, &mut self.model, &mut self.markdown, &mut actions);
        for a in actions {
            self.act(a);
        }
        // Keep the cache panel live while idle; tokens repaint on arrival.
        ui.ctx().request_repaint_after(Duration::from_millis(500));
    }
}

impl eframe::App for HearthApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        HearthApp::ui(self, ui);
    }
}
