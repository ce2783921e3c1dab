//! Loading the model without freezing the window: resolve (downloading from the hub with
//! progress), load, start the engine with its disk tier, all on a thread of its own; progress
//! and the result arrive over the [`Bridge`](super::Bridge).
//!
//! Each load has a number; the app only takes deliveries of the load it is waiting for, so a
//! load that was cancelled or replaced by a newer one can never attach its engine.

use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use super::bridge::{Bridge, Delivery, Repaint};
use super::DownloadFigures;
use crate::config::{AppPaths, Settings};
use crate::engine::{launch, Cancel, DownloadProgress, EngineHandle, LaunchProgress};

/// How often download progress is sent to the window at most.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// Loads `settings`' model and starts its engine on the calling thread ([`launch`]). A hub
/// model not in the cache is downloaded, reporting to `progress`; `cancel` stops the download
/// (its bytes are kept) or discards the model once loaded.
pub fn load_engine(
    settings: &Settings,
    paths: &AppPaths,
    progress: &mut dyn LaunchProgress,
    cancel: &Cancel,
) -> Result<EngineHandle, String> {
    launch(settings, paths, progress, cancel).map_err(|e| e.to_string())
}

/// Sends a download's progress to the window, at most every [`PROGRESS_EVERY`].
struct ToWindow {
    load: u64,
    tx: Sender<Delivery>,
    repaint: Repaint,
    figures: Option<DownloadFigures>,
    sent: Option<Instant>,
}

impl ToWindow {
    fn send(&mut self, force: bool) {
        let due = self.sent.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY);
        if let (true, Some(f)) = (force || due, &self.figures) {
            let _ = self.tx.send(Delivery::Progress {
                load: self.load,
                figures: f.clone(),
            });
            (self.repaint)();
            self.sent = Some(Instant::now());
        }
    }
}

impl DownloadProgress for ToWindow {
    fn start(&mut self, file: &str, done: u64, total: u64) {
        self.figures = Some(DownloadFigures {
            file: file.to_owned(),
            done,
            total,
        });
        self.send(true);
    }

    fn advance(&mut self, done: u64) {
        if let Some(f) = self.figures.as_mut() {
            f.done = done;
        }
        self.send(false);
    }

    fn finish(&mut self) {
        if let Some(f) = self.figures.as_mut() {
            f.done = f.total;
        }
        self.send(true);
    }
}

impl LaunchProgress for ToWindow {}

/// Starts load number `load` on a thread of its own; progress and the result are delivered
/// through `bridge`, each with a repaint.
pub fn spawn_loader(
    bridge: &Bridge,
    settings: Settings,
    paths: AppPaths,
    load: u64,
    cancel: Cancel,
) -> std::io::Result<()> {
    bridge.spawn("hearth-loader", move |tx, repaint| {
        let mut progress = ToWindow {
            load,
            tx: tx.clone(),
            repaint: repaint.clone(),
            figures: None,
            sent: None,
        };
        let result = load_engine(&settings, &paths, &mut progress, &cancel);
        Delivery::Loaded { load, result }
    })
}
