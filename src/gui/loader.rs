//! Loading the model without freezing the window: resolve, load, start the engine with its disk
//! tier, all on a thread of its own; the result arrives over the [`Bridge`](super::Bridge).

use super::bridge::{Delivery, Repaint};
use crate::config::{AppPaths, Settings};
use crate::engine::{DiskSettings, Engine, EngineHandle};
use crate::model::source::{resolve, HubOptions, ModelSource};
use crate::model::{select_device, LoadedModel};

/// Loads `settings`' model and starts its engine, on the calling thread.
pub fn load_engine(settings: &Settings, paths: &AppPaths) -> Result<EngineHandle, String> {
    let source = ModelSource::parse(&settings.model.source).map_err(|e| e.to_string())?;
    let opts = HubOptions::from(&settings.hub);
    let resolved = resolve(&source, &opts).map_err(|e| e.to_string())?;
    let device = select_device(settings.model.device).map_err(|e| e.to_string())?;
    let model = LoadedModel::load(&resolved, &device, settings.model.context_length).map_err(|e| e.to_string())?;
    let engine = Engine::new(model, &settings.cache, &settings.engine).map_err(|e| e.to_string())?;
    let disk = DiskSettings::new(&paths.data_dir, settings.cache.disk_budget_bytes);
    let engine = engine.with_disk(&disk).map_err(|e| e.to_string())?;
    EngineHandle::spawn(engine, settings.engine.max_queued).map_err(|e| e.to_string())
}

/// Starts loading on a background thread; the result is delivered with a repaint.
pub fn spawn_loader(settings: Settings, paths: AppPaths, tx: std::sync::mpsc::Sender<Delivery>, repaint: Repaint) {
    let spawned = std::thread::Builder::new().name("hearth-loader".into()).spawn({
        let tx = tx.clone();
        let repaint = repaint.clone();
        move || {
            let result = load_engine(&settings, &paths);
            let _ = tx.send(Delivery::Loaded(result));
            repaint();
        }
    });
    if let Err(e) = spawned {
        let _ = tx.send(Delivery::Loaded(Err(format!("cannot start the loader thread: {e}"))));
        repaint();
    }
}
