//! Starting up: the configured model resolved (downloaded when missing),
//! loaded, and the engine started with its disk tier.

use anyhow::Result;

use hearth::config::{AppPaths, Settings};
use hearth::engine::{launch, EngineHandle};
use hearth::model::gguf::GgufFile;
use hearth::model::source::{resolve_with, Cancel, HubOptions, ModelSource, ResolvedModel};
use hearth::model::tokenizer::Tokenizer;

use super::progress::BarProgress;

/// The configured model's files: local, in the hub cache, or downloaded (with a bar).
pub fn resolve_model(settings: &Settings) -> Result<ResolvedModel> {
    let source = ModelSource::parse(&settings.model.source)?;
    let opts = HubOptions::from(&settings.hub);
    let mut progress = BarProgress::default();
    Ok(resolve_with(&source, &opts, &mut progress, &Cancel::new())?)
}

/// The configured model's files if they are on this machine already (a local GGUF, or the hub
/// cache), never downloading: for commands that only compare with the model (`hearth cache`).
pub fn resolve_model_locally(settings: &Settings) -> Result<ResolvedModel> {
    let source = ModelSource::parse(&settings.model.source)?;
    let opts = HubOptions {
        offline: true,
        ..HubOptions::from(&settings.hub)
    };
    let mut progress = BarProgress::default();
    Ok(resolve_with(&source, &opts, &mut progress, &Cancel::new())?)
}

/// The configured model loaded behind a running engine ([`launch`]), with progress on stderr.
pub fn start(settings: &Settings, paths: &AppPaths) -> Result<EngineHandle> {
    let mut progress = BarProgress::default();
    Ok(launch(settings, paths, &mut progress, &Cancel::new())?)
}

/// The model's tokenizer alone, without its weights.
pub fn load_tokenizer(resolved: &ResolvedModel) -> Result<Tokenizer> {
    let file = GgufFile::open(&resolved.gguf)?;
    let md = file.metadata();
    Ok(match &resolved.tokenizer_json {
        Some(p) => Tokenizer::from_file(p, Some(md))?,
        None => Tokenizer::from_gguf_metadata(md)?,
    })
}
