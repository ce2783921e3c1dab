//! From the engine thread to the window: events over a channel, and a repaint on arrival.
//!
//! Owns: [`Bridge`]. Each request's [`RequestStream`] is read on a small thread of its own
//! (blocking there, never on the UI thread), which turns its events into [`UiEvent`]s, sends
//! them, and asks for a repaint. The UI thread takes whatever has arrived at the start of each
//! frame with [`Bridge::drain`], which never waits.
//!
//! Model loading and the file dialog use the same path: their threads send progress and results
//! and ask for a repaint.
//!
//! Counterpart: egui's recommended pattern for background work (a channel plus
//! `Context::request_repaint`), as in rerun's and egui's own demos.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;

use super::{DownloadFigures, UiEvent};
use crate::engine::{EngineHandle, Event, RequestStream};

/// Asks the window to draw another frame (`egui::Context::request_repaint`).
pub type Repaint = Arc<dyn Fn() + Send + Sync>;

/// What the background threads send.
pub enum Delivery {
    Event(UiEvent),
    /// How far load number `load`'s download has come.
    Progress {
        load: u64,
        figures: DownloadFigures,
    },
    /// Load number `load`'s result.
    Loaded {
        load: u64,
        result: Result<EngineHandle, String>,
    },
    /// The file dialog's answer (`None`: closed without a choice).
    Picked(Option<PathBuf>),
}

/// The channel from background threads to the UI thread.
pub struct Bridge {
    tx: mpsc::Sender<Delivery>,
    rx: mpsc::Receiver<Delivery>,
    repaint: Repaint,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bridge")
    }
}

impl Bridge {
    pub fn new(repaint: Repaint) -> Self {
        let (tx, rx) = mpsc::channel();
        Self { tx, rx, repaint }
    }

    /// A sender for a background thread; each send should be followed by `Bridge::repaint`.
    pub fn sender(&self) -> (mpsc::Sender<Delivery>, Repaint) {
        (self.tx.clone(), self.repaint.clone())
    }

    /// Runs `work` on a thread of its own named `name`, delivering what it returns with a
    /// repaint; `work` gets the sender and the repaint for deliveries on the way (progress).
    pub fn spawn(
        &self,
        name: &str,
        work: impl FnOnce(&mpsc::Sender<Delivery>, &Repaint) -> Delivery + Send + 'static,
    ) -> std::io::Result<()> {
        let (tx, repaint) = self.sender();
        std::thread::Builder::new().name(name.into()).spawn(move || {
            let last = work(&tx, &repaint);
            let _ = tx.send(last);
            repaint();
        })?;
        Ok(())
    }

    /// Reads `stream` on its own thread until its last event, delivering each.
    pub fn forward(&self, mut stream: RequestStream) {
        let (tx, repaint) = self.sender();
        let request = stream.id();
        let spawned = std::thread::Builder::new()
            .name(format!("hearth-ui-{request}"))
            .spawn(move || {
                while let Some(e) = stream.blocking_recv() {
                    let event = match e {
                        Event::Token { text, .. } => UiEvent::Token { request, text },
                        Event::Done(report) => UiEvent::Done { request, report },
                        Event::Error(e) => UiEvent::Failed {
                            request,
                            error: e.to_string(),
                        },
                    };
                    if tx.send(Delivery::Event(event)).is_err() {
                        return; // the window is gone; dropping the stream cancels the request
                    }
                    repaint();
                }
            });
        if let Err(e) = spawned {
            let _ = self.tx.send(Delivery::Event(UiEvent::Failed {
                request,
                error: format!("cannot start a thread for the reply: {e}"),
            }));
        }
    }

    /// Everything that has arrived, without waiting.
    pub fn drain(&self) -> Vec<Delivery> {
        self.rx.try_iter().collect()
    }
}
