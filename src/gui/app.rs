//! The app: carries out what the panels ask for against the engine, and lays the panels out.
//!
//! Owns: [`HearthApp`] (the [`AppModel`], the engine handle once loaded, the [`Bridge`]) and
//! [`Action`], what a panel asks for. Panels only read the model and return actions; this file
//! is the one place that calls the engine's conversation API. Nothing here waits on the engine:
//! sending a message returns a stream whose events come back through the bridge; conversation
//! files are small and read or written in place.
//!
//! Counterpart: the `App` half of egui's "state separate from the app" split.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::bridge::{Bridge, Delivery};
use super::panels::settings::SettingsForm;
use super::{panels, AppModel, ChatView, ModelStatus, Streaming};
use crate::config::{AppPaths, ConfigFile, DevicePool, Settings};
use crate::engine::Cancel;
use crate::engine::{ConversationId, ConversationSettings};
use crate::engine::{EngineError, EngineHandle, GenerateParams, RequestStream};

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
    OpenSettings,
    /// Write the settings window's values to the config file.
    SaveSettings,
    /// Load the settings window's model (and cache sizes) in the background.
    LoadModel,
    /// Stop the model download (its bytes are kept) or the load under way.
    CancelLoad,
    /// Open the file dialog to pick a `.gguf` for the settings window.
    PickModelFile,
}

/// Asks the user for a file; runs on a thread of its own (it may block until they choose).
/// Gets the file to start from.
pub type FilePicker = Arc<dyn Fn(Option<PathBuf>) -> Option<PathBuf> + Send + Sync>;

/// The platform's file dialog, filtered to `.gguf` files.
pub fn native_file_picker() -> FilePicker {
    Arc::new(|start: Option<PathBuf>| {
        let mut dialog = rfd::FileDialog::new()
            .set_title("Choose a GGUF model")
            .add_filter("GGUF model", &["gguf", "GGUF"]);
        if let Some(dir) = start.as_deref().and_then(Path::parent).filter(|d| d.is_dir()) {
            dialog = dialog.set_directory(dir);
        }
        dialog.pick_file()
    })
}

/// The load the app is waiting for.
struct Loading {
    id: u64,
    cancel: Cancel,
}

/// The desktop app.
pub struct HearthApp {
    pub model: AppModel,
    engine: Option<EngineHandle>,
    bridge: Bridge,
    defaults: GenerateParams,
    markdown: egui_commonmark::CommonMarkCache,
    /// The settings the app started with (or last saved), and where files live.
    config: Option<(Settings, AppPaths)>,
    /// The command line's layer that still applies when the settings window reloads the model
    /// (flags of settings the window does not edit, such as the device).
    flags: ConfigFile,
    loading: Option<Loading>,
    /// Numbers loads, so only the latest one's deliveries count.
    loads: u64,
    picker: FilePicker,
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
        max_tokens: settings.reply_tokens(),
        sampling: settings.sampling.clone(),
        stop: Vec::new(),
        ignore_eos: false,
        keep_logits: false,
        logprobs: None,
        grammar: None,
        grammar_after: None,
        prompt_logprobs: None,
        embed: None,
    }
}

fn repaint_of(ctx: &egui::Context) -> super::bridge::Repaint {
    let ctx = ctx.clone();
    Arc::new(move || ctx.request_repaint())
}

impl HearthApp {
    /// The app, loading `settings`' model in the background.
    pub fn new(ctx: &egui::Context, settings: Settings, paths: AppPaths) -> Self {
        let mut app = Self::idle(ctx, default_params(&settings));
        app.start_load(settings, paths);
        app
    }

    fn idle(ctx: &egui::Context, defaults: GenerateParams) -> Self {
        Self {
            model: AppModel::default(),
            engine: None,
            bridge: Bridge::new(repaint_of(ctx)),
            defaults,
            markdown: Default::default(),
            config: None,
            flags: ConfigFile::default(),
            loading: None,
            loads: 0,
            picker: native_file_picker(),
        }
    }

    /// Keeps the command line's `flags` for later reloads, less those of the settings the
    /// window edits (its fields replace them).
    pub fn with_flags(mut self, mut flags: ConfigFile) -> Self {
        flags.model.source = None;
        flags.sampling.temperature = None;
        flags.sampling.top_p = None;
        flags.sampling.top_k = None;
        flags.sampling.max_tokens = None;
        flags.cache.block_size = None;
        flags.cache.kv_dtype = None;
        flags.cache.device_pool_mib = None;
        flags.cache.host_cache_gib = None;
        flags.cache.disk_cache_gib = None;
        flags.paths.data_dir = None;
        self.flags = flags;
        self
    }

    /// Uses `picker` in place of the platform's file dialog (tests).
    pub fn with_file_picker(mut self, picker: FilePicker) -> Self {
        self.picker = picker;
        self
    }

    /// Loads `settings`' model in the background (stopping a load under way), and keeps
    /// `settings` as the ones in effect.
    fn start_load(&mut self, settings: Settings, paths: AppPaths) {
        if let Some(old) = self.loading.take() {
            old.cancel.cancel();
        }
        // The old engine stops when its last handle goes (its requests end first).
        self.engine = None;
        self.model.streaming = None;
        self.model.download = None;
        self.model.model = ModelStatus::Loading(settings.model.source.clone());
        self.loads += 1;
        let cancel = Cancel::new();
        self.loading = Some(Loading {
            id: self.loads,
            cancel: cancel.clone(),
        });
        if let Err(e) = super::loader::spawn_loader(&self.bridge, settings.clone(), paths.clone(), self.loads, cancel) {
            self.loading = None;
            self.model.model = ModelStatus::Failed(format!("cannot start the loader thread: {e}"));
        }
        self.config = Some((settings, paths));
    }

    fn is_current(&self, load: u64) -> bool {
        self.loading.as_ref().is_some_and(|l| l.id == load)
    }

    /// Lets the settings window read and write `paths.config_file`, starting from `settings`.
    pub fn with_config(mut self, settings: Settings, paths: AppPaths) -> Self {
        self.config = Some((settings, paths));
        self
    }

    /// The app around a running engine (its conversations are listed at once).
    pub fn with_engine(ctx: &egui::Context, engine: EngineHandle, defaults: GenerateParams) -> Self {
        let mut app = Self::idle(ctx, defaults);
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
        match engine.list_conversations() {
            Ok(list) => self.model.conversations = list,
            Err(e) => self.error(format!("cannot list conversations: {e}")),
        }
    }

    fn open(&mut self, id: &ConversationId) {
        let Some(engine) = &self.engine else { return };
        match engine.conversation(id) {
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
                Delivery::Progress { load, figures } if self.is_current(load) => {
                    self.model.download = Some(figures);
                }
                Delivery::Progress { .. } => {}
                Delivery::Loaded { load, result } if self.is_current(load) => {
                    self.loading = None;
                    self.model.download = None;
                    match result {
                        Ok(engine) => self.attach(engine),
                        Err(e) => self.model.model = ModelStatus::Failed(e),
                    }
                }
                // A cancelled or replaced load: its engine (if any) stops as it is dropped.
                Delivery::Loaded { .. } => {}
                Delivery::Picked(path) => {
                    self.model.picking_file = false;
                    match (path, self.model.settings.as_mut()) {
                        (Some(path), Some(form)) => form.model_source = path.display().to_string(),
                        (Some(_), None) => {}
                        // rfd says only "no file": the user closed the dialog, or no dialog could
                        // open (it logs why).
                        (None, _) => {
                            self.model.notice = Some(
                                "No file chosen. If no dialog appeared, this desktop has no file-dialog service (xdg-desktop-portal or zenity): type the model's path instead.".into(),
                            )
                        }
                    }
                }
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

    /// The settings window's form, from the current settings.
    fn settings_form(&self) -> Option<SettingsForm> {
        let (s, paths) = self.config.as_ref()?;
        Some(SettingsForm {
            model_source: s.model.source.clone(),
            temperature: s.sampling.temperature,
            top_p: s.sampling.top_p,
            top_k: s.sampling.top_k,
            max_tokens: s.max_tokens,
            block_size: s.cache.block_size,
            kv_dtype: s.cache.kv_dtype,
            host_cache_gib: s.cache.host_bytes as f64 / (1u64 << 30) as f64,
            disk_cache_gib: s.cache.disk_budget_bytes as f64 / (1u64 << 30) as f64,
            kv_pool_mib: match s.cache.device_pool {
                DevicePool::Bytes(b) => b >> 20,
                DevicePool::Fraction(_) | DevicePool::Default => 0,
            },
            data_dir: paths.data_dir.display().to_string(),
        })
    }

    /// The config file with the form's values, and the settings they resolve to.
    fn form_config(&self, form: &SettingsForm) -> Result<(ConfigFile, Settings), String> {
        let (_, paths) = self.config.as_ref().ok_or("no config file")?;
        let mut file = ConfigFile::load(&paths.config_file).map_err(|e| e.to_string())?;
        file.model.source = Some(form.model_source.trim().to_string());
        file.sampling.temperature = Some(form.temperature);
        file.sampling.top_p = Some(form.top_p);
        file.sampling.top_k = Some(form.top_k);
        file.sampling.max_tokens = form.max_tokens;
        file.cache.block_size = Some(form.block_size);
        file.cache.kv_dtype = form.kv_dtype.map(|t| t.name().to_string());
        file.cache.device_pool_mib = (form.kv_pool_mib > 0).then_some(form.kv_pool_mib);
        file.cache.host_cache_gib = Some(form.host_cache_gib);
        file.cache.disk_cache_gib = Some(form.disk_cache_gib);
        let dir = form.data_dir.trim();
        file.paths.data_dir = (!dir.is_empty()).then(|| dir.into());
        let settings = Settings::resolve(&file, &self.flags).map_err(|e| e.to_string())?;
        Ok((file, settings))
    }

    /// Carries out the settings window's actions (they need no engine).
    fn act_on_settings(&mut self, action: &Action) -> bool {
        match action {
            Action::OpenSettings => {
                self.model.settings = self.settings_form();
                if self.model.settings.is_none() {
                    self.error("this window was started without a config file to edit");
                }
            }
            Action::SaveSettings | Action::LoadModel => {
                let Some(form) = self.model.settings.clone() else {
                    return true;
                };
                let (file, settings) = match self.form_config(&form) {
                    Ok(x) => x,
                    Err(e) => {
                        self.error(format!("settings not applied: {e}"));
                        return true;
                    }
                };
                let Some((_, paths)) = self.config.clone() else {
                    return true;
                };
                if *action == Action::SaveSettings {
                    if let Err(e) = file.save(&paths.config_file) {
                        self.error(e);
                        return true;
                    }
                    self.model.notice = Some(format!("Settings saved to {}", paths.config_file.display()));
                }
                self.defaults.sampling = settings.sampling.clone();
                self.defaults.max_tokens = settings.reply_tokens();
                if *action == Action::LoadModel {
                    self.start_load(settings, paths);
                } else {
                    self.config = Some((settings, paths));
                }
            }
            Action::CancelLoad => {
                if let Some(l) = &self.loading {
                    l.cancel.cancel();
                }
            }
            Action::PickModelFile => {
                if self.model.picking_file {
                    return true;
                }
                let start = self
                    .model
                    .settings
                    .as_ref()
                    .map(|f| PathBuf::from(f.model_source.trim()));
                let picker = self.picker.clone();
                match self
                    .bridge
                    .spawn("hearth-file-dialog", move |_, _| Delivery::Picked(picker(start)))
                {
                    Ok(_) => self.model.picking_file = true,
                    Err(e) => self.error(format!("cannot open the file dialog: {e}")),
                }
            }
            _ => return false,
        }
        true
    }

    /// Carries out one action: each is one `EngineHandle` call, then the views are refreshed.
    pub fn act(&mut self, action: Action) {
        if self.act_on_settings(&action) {
            return;
        }
        let Some(engine) = self.engine.clone() else {
            return;
        };
        match action {
            Action::NewConversation => match engine.create_conversation(None, ConversationSettings::default()) {
                Ok(c) => {
                    self.refresh_list();
                    self.open(&c.id);
                }
                Err(e) => self.error(e),
            },
            Action::Open(id) => self.open(&id),
            Action::Rename(id, title) => {
                if let Err(e) = engine.rename_conversation(&id, &title) {
                    return self.error(e);
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
                    None => match engine.create_conversation(None, ConversationSettings::default()) {
                        Ok(c) => c.id,
                        Err(e) => return self.error(e),
                    },
                };
                self.model.draft.clear();
                let sent = engine.send_message(&id, Some(&text), &self.defaults);
                self.stream_reply(&id, sent);
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
                if !self.model.busy() {
                    let sent = engine.regenerate(&id, &self.defaults);
                    self.stream_reply(&id, sent);
                }
            }
            Action::ResendEdited(index, text) => {
                let Some(id) = self.model.open_id().cloned() else {
                    return;
                };
                if self.model.busy() || text.trim().is_empty() {
                    return;
                }
                self.model.editing = None;
                let sent = engine.edit_and_resend(&id, index, &text, &self.defaults);
                self.stream_reply(&id, sent);
            }
            Action::ApplySystemPrompt => {
                let Some(open) = &self.model.open else { return };
                let id = open.conversation.id.clone();
                match engine.set_system_prompt(&id, Some(&open.system_prompt)) {
                    Ok(_) => self.open(&id),
                    Err(e) => self.error(e),
                }
            }
            Action::DismissError(i) => {
                if i < self.model.errors.len() {
                    self.model.errors.remove(i);
                }
            }
            Action::OpenSettings
            | Action::SaveSettings
            | Action::LoadModel
            | Action::CancelLoad
            | Action::PickModelFile => {}
        }
    }

    /// Streams a reply that was just submitted (or shows why it was not) and shows the
    /// conversation as saved.
    fn stream_reply(&mut self, id: &ConversationId, sent: Result<RequestStream, EngineError>) {
        match sent {
            Ok(stream) => {
                self.model.streaming = Some(Streaming {
                    request: stream.id(),
                    conversation: id.clone(),
                    text: String::new(),
                });
                self.bridge.forward(stream);
                self.refresh_list();
            }
            Err(e) => self.error(e),
        }
        self.open(id);
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
        panels::settings::show(ui, &mut self.model, &mut actions);
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

    /// Finishes the saves in flight (one more try at conversations kept in memory) and says on
    /// stderr which could still not be written.
    fn on_exit(&mut self) {
        if let Some(engine) = &self.engine {
            engine.flush_disk();
            for u in engine.stats().disk.map(|d| d.unsaved).unwrap_or_default() {
                tracing::error!(
                    "conversation {} ({}) could not be saved and is lost on exit: {}",
                    u.id,
                    u.title,
                    u.error
                );
            }
        }
    }
}
