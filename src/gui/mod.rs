//! The desktop app (feature `gui`): an egui chat window over the engine that shows what the
//! cache is doing.
//!
//! Owns: [`AppModel`] (`state.rs`: everything the window shows, apart from any widget),
//! [`HearthApp`] (`app.rs`: carries out the panels' [`Action`]s against the engine's
//! conversation API), the panels (`panels/`: conversations, chat, cache, top bar), the
//! [`Bridge`] (`bridge.rs`: engine events over a channel, a repaint on arrival), the model
//! loader (`loader.rs`: a thread of its own, downloading with progress and cancel) and the file
//! dialog (`rfd`, on a thread of its own; tests put their own picker in its place).
//!
//! Invariant: the UI thread never waits on the engine. Requests are submitted (a queue push),
//! their events are read by a thread per request and delivered over a channel the UI drains at
//! the start of each frame; stats are a snapshot behind a mutex the engine updates after each
//! step; the model loads (and downloads) on its own thread; the file dialog runs on another. Errors (a model that fails to load, a full disk) are
//! shown in the window.
//!
//! Counterpart: LM Studio's and Open WebUI's chat windows; egui's "state separate from the app"
//! pattern and its background-work-plus-`request_repaint` recipe.

mod app;
mod bridge;
mod loader;
mod panels;
mod state;

pub use app::{default_params, native_file_picker, Action, FilePicker, HearthApp};
pub use bridge::{Bridge, Delivery, Repaint};
pub use loader::load_engine;
pub use panels::settings::SettingsForm;
pub use state::{AppModel, ChatView, DownloadFigures, ModelStatus, Streaming, TurnFigures, UiEvent, RECENT_TURNS};

use crate::config::{AppPaths, ConfigFile, Settings};

/// The window's icon (`assets/icon.png`, 256×256).
pub const ICON_PNG: &[u8] = include_bytes!("../../assets/icon.png");

/// Opens the window and runs until it is closed. `flags` are the command line's layer of
/// settings, kept for reloads from the settings window.
pub fn run(settings: Settings, paths: AppPaths, flags: ConfigFile) -> Result<(), eframe::Error> {
    let mut viewport = egui::ViewportBuilder::default().with_title("hearth");
    match eframe::icon_data::from_png_bytes(ICON_PNG) {
        Ok(icon) => viewport = viewport.with_icon(icon),
        Err(e) => tracing::warn!("the app icon could not be read: {e}"),
    }
    let options = eframe::NativeOptions {
        viewport: viewport
            .with_inner_size([1200.0, 780.0])
            .with_min_inner_size([720.0, 480.0]),
        ..Default::default()
    };
    eframe::run_native(
        "hearth",
        options,
        Box::new(move |cc| {
            Ok(Box::new(
                HearthApp::new(&cc.egui_ctx, settings, paths).with_flags(flags),
            ))
        }),
    )
}
