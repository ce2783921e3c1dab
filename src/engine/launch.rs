//! Starting an engine from the settings: the one start-up sequence every
//! front-end uses (`hearth run`, `--headless`, the desktop app's loader). Benchmarks and tests that need exact tier sizes (a
//! cache of 96 blocks, a host tier of 4) build the engine from the same parts
//! `launch` calls (`Engine::with_pool_sizes`, `Engine::with_disk`,
//! `EngineHandle::spawn`) on a model file they wrote.
//!
//! [`launch`] resolves the configured model (downloading it from the hub when
//! it is not cached, with progress), loads it on the configured device, sizes
//! the cache, opens the disk tier in the data dir and spawns the engine
//! thread. Each stage is announced to a [`LaunchProgress`]; a [`Cancel`] set
//! from another thread stops the download (its bytes are kept), the reading
//! of the weights (within a tensor), or discards the model between stages.
//!
//! Counterpart: vLLM's `LLMEngine.from_engine_args` / `AsyncLLM.from_vllm_config`.

use std::path::PathBuf;

use super::{DiskSettings, Engine, EngineError, EngineHandle};
use crate::config::{AppPaths, Settings};
use crate::model::source::{resolve_with, Cancel, DownloadProgress, HubOptions, ModelSource};
use crate::model::gguf::ReadMeter;
use crate::model::{select_device, LoadedModel, ModelError};

/// A stage of [`launch`] after the model's files are resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchStage {
    /// Reading the weights from this GGUF file onto the device.
    Loading(PathBuf),
    /// Building the disk tier's index from the saved cache files' headers.
    IndexingDisk,
}

/// Where [`launch`] reports: a download's bytes ([`DownloadProgress`]), each
/// later stage as it starts, and the weights' reading.
pub trait LaunchProgress: DownloadProgress {
    fn stage(&mut self, _stage: &LaunchStage) {}

    /// The weights are about to be read from the file of the last
    /// [`LaunchStage::Loading`]: `total` bytes of tensor data. A [`LoadMeter`]
    /// returned is told the bytes read so far, from the loading thread, as
    /// they are read.
    fn load_meter(&mut self, _total: u64) -> Option<LoadMeter> {
        None
    }
}

/// Told the bytes of the weights read so far ([`LaunchProgress::load_meter`]).
pub type LoadMeter = Box<dyn Fn(u64) + Send>;

impl LaunchProgress for () {}

/// The configured model, loaded, behind a running engine with its disk tier.
pub fn launch(
    settings: &Settings,
    paths: &AppPaths,
    progress: &mut dyn LaunchProgress,
    cancel: &Cancel,
) -> Result<EngineHandle, EngineError> {
    let source = ModelSource::parse(&settings.model.source)?;
    let resolved = resolve_with(&source, &HubOptions::from(&settings.hub), progress, cancel)?;
    let stop_if_cancelled = || {
        if cancel.is_cancelled() {
            return Err(EngineError::LaunchCancelled);
        }
        Ok(())
    };
    stop_if_cancelled()?;
    let device = select_device(settings.model.device)?;
    progress.stage(&LaunchStage::Loading(resolved.gguf.clone()));
    // The cancel stops the reading within a tensor.
    let load = LoadedModel::load_with(&resolved, &device, settings.model.context_length, |total| {
        let meter = progress.load_meter(total);
        let cancel = cancel.clone();
        Some(Box::new(move |done| {
            if let Some(m) = &meter {
                m(done);
            }
            !cancel.is_cancelled()
        }) as ReadMeter)
    });
    let model = match load {
        Err(ModelError::LoadCancelled) => return Err(EngineError::LaunchCancelled),
        other => other?,
    };
    let i = &model.info;
    tracing::info!(
        "{} ({}, {}, {:.2}B params) on {}, context {}",
        i.name,
        i.architecture,
        i.quantization,
        i.parameters as f64 / 1e9,
        i.device,
        i.context_length
    );
    stop_if_cancelled()?;
    let engine = Engine::new(model, &settings.cache, &settings.engine)?;
    progress.stage(&LaunchStage::IndexingDisk);
    let engine = engine.with_disk(&DiskSettings::new(&paths.data_dir, settings.cache.disk_budget_bytes))?;
    stop_if_cancelled()?;
    EngineHandle::spawn(engine, settings.engine.max_queued)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::config::ConfigFile;
    use crate::model::hparams::Family;
    use crate::model::testkit::{write_model, TinyModelSpec, WeightType};

    /// Records the stages and the load's meter calls; cancels once the reading has begun.
    struct Recorder {
        stages: Vec<LaunchStage>,
        reads: Arc<Mutex<Vec<u64>>>,
        cancel: Cancel,
    }

    impl DownloadProgress for Recorder {
        fn start(&mut self, _: &str, _: u64, _: u64) {}
        fn advance(&mut self, _: u64) {}
        fn finish(&mut self) {}
    }

    impl LaunchProgress for Recorder {
        fn stage(&mut self, stage: &LaunchStage) {
            self.stages.push(stage.clone());
        }

        fn load_meter(&mut self, _total: u64) -> Option<LoadMeter> {
            let (reads, cancel) = (self.reads.clone(), self.cancel.clone());
            Some(Box::new(move |done| {
                reads.lock().unwrap().push(done);
                cancel.cancel();
            }))
        }
    }

    /// A cancel during the weights' reading stops it after the tensor being read: the launch
    /// ends as cancelled, having read one tensor, and no later stage starts.
    #[test]
    fn a_cancel_stops_the_reading_of_the_weights() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.gguf");
        write_model(&TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0), &model).unwrap();
        let mut file = ConfigFile::default();
        file.model.source = Some(model.display().to_string());
        file.model.device = Some("cpu".into());
        let settings = crate::config::Settings::resolve(&file, &ConfigFile::default()).unwrap();
        let paths = AppPaths {
            config_file: dir.path().join("config.toml"),
            data_dir: dir.path().join("data"),
        };
        let cancel = Cancel::new();
        let mut rec = Recorder {
            stages: Vec::new(),
            reads: Arc::new(Mutex::new(Vec::new())),
            cancel: cancel.clone(),
        };
        match launch(&settings, &paths, &mut rec, &cancel) {
            Err(EngineError::LaunchCancelled) => {}
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("the launch went on"),
        }
        assert_eq!(rec.stages, [LaunchStage::Loading(model)]);
        assert_eq!(rec.reads.lock().unwrap().len(), 1);
    }
}
