//! Loading the model without freezing the window: resolve (downloading from the hub with
//! progress), load, start the engine with its disk tier, all on a thread of its own; progress
//! and the result arrive over the [`Bridge`](super::Bridge).
//!
//! Each load has a number; the app only takes deliveries of the load it is waiting for, so a
//! load that was cancelled or replaced by a newer one can never attach its engine.

use std::cell::RefCell;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use super::bridge::{Bridge, Delivery, Repaint};
use super::DownloadFigures;
use crate::config::{AppPaths, Settings};
use crate::engine::{launch, Cancel, DownloadProgress, EngineHandle, LaunchProgress, LaunchStage, LoadMeter};

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
    /// The file of the last [`LaunchStage::Loading`].
    loading: Option<String>,
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
            reading: false,
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

impl LaunchProgress for ToWindow {
    fn stage(&mut self, stage: &LaunchStage) {
        if let LaunchStage::Loading(path) = stage {
            self.loading = path.file_name().map(|n| n.to_string_lossy().into_owned());
        }
    }

    /// The weights' reading as figures of their own, sent from the loading thread at most every
    /// [`PROGRESS_EVERY`] (and at the end).
    fn load_meter(&mut self, total: u64) -> Option<LoadMeter> {
        // A sender of its own (the meter lives on the loading thread), throttled as downloads are.
        let meter = RefCell::new(ToWindow {
            load: self.load,
            tx: self.tx.clone(),
            repaint: self.repaint.clone(),
            figures: Some(DownloadFigures {
                file: self.loading.clone().unwrap_or_default(),
                reading: true,
                done: 0,
                total,
            }),
            sent: None,
            loading: None,
        });
        Some(Box::new(move |done| {
            let mut w = meter.borrow_mut();
            if let Some(f) = w.figures.as_mut() {
                f.done = done.min(total);
            }
            w.send(done >= total);
        }))
    }
}

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
            loading: None,
        };
        let result = load_engine(&settings, &paths, &mut progress, &cancel);
        Delivery::Loaded { load, result }
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    /// The weights' reading reaches the window as figures of their own (the file's name,
    /// `reading`), at most every [`PROGRESS_EVERY`] and always at the end, each with a repaint.
    #[test]
    fn reading_the_weights_reaches_the_window_as_loading_figures() {
        let (tx, rx) = std::sync::mpsc::channel();
        let repaints = Arc::new(AtomicUsize::new(0));
        let counted = repaints.clone();
        let mut w = ToWindow {
            load: 7,
            tx,
            repaint: Arc::new(move || {
                counted.fetch_add(1, Ordering::SeqCst);
            }),
            figures: None,
            sent: None,
            loading: None,
        };
        w.stage(&LaunchStage::Loading(PathBuf::from("/models/big-00001-of-00002.gguf")));
        let meter = w.load_meter(1000).unwrap();
        meter(10);
        meter(20); // within PROGRESS_EVERY of the first: not sent
        meter(1000);
        let got: Vec<DownloadFigures> = rx
            .try_iter()
            .map(|d| match d {
                Delivery::Progress { load: 7, figures } => figures,
                _ => panic!("not load 7's progress"),
            })
            .collect();
        let want = |done| DownloadFigures {
            file: "big-00001-of-00002.gguf".into(),
            reading: true,
            done,
            total: 1000,
        };
        assert_eq!(got, [want(10), want(1000)]);
        assert_eq!(repaints.load(Ordering::SeqCst), 2);
    }
}
