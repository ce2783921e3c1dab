//! What every handler shares.
//!
//! Owns: [`AppState`] (cheap to clone: the [`EngineHandle`] and the [`ServerConfig`] behind
//! one `Arc`) and [`ServerConfig`] (the model's names, the request defaults, the API key, the
//! body limit), and the one rule for which `model` names a request may use.
//!
//! Counterpart: vLLM's `app.state` (`OpenAIServingModels` with `served_model_name`s and the
//! engine client).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::config::{SamplingParams, Settings};
use crate::engine::EngineHandle;

use super::ApiError;

/// How the server answers, apart from the engine.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// The id `/v1/models` lists and every response names.
    pub model_id: String,
    /// Other names a request's `model` may use for the same model.
    pub model_aliases: Vec<String>,
    /// Sampling defaults; each request may override the fields it sends.
    pub sampling: SamplingParams,
    /// `max_tokens` when a request sends none; `usize::MAX` (when the settings give none):
    /// until the model ends the reply or the context is full.
    pub max_tokens: usize,
    /// When set, `/v1` routes need `Authorization: Bearer <api_key>`.
    pub api_key: Option<String>,
    /// Largest accepted request body, in bytes (larger ones get 413).
    pub max_body_bytes: usize,
    /// Connections and slow clients ([`super::serve`]).
    pub limits: ConnectionLimits,
    /// `/v1/embeddings`' pooling over the file's own (`--pooling`); `None`: the file's.
    pub pooling: Option<crate::config::Pooling>,
}

/// What a connection may hold: [`super::serve`] enforces them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// A request's headers must arrive within this (a kept-alive connection idle this long is
    /// closed too).
    pub header_timeout: std::time::Duration,
    /// A request body with no new bytes for this long is refused (408).
    pub body_timeout: std::time::Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: super::MAX_CONNECTIONS,
            header_timeout: super::HEADER_TIMEOUT,
            body_timeout: super::BODY_TIMEOUT,
        }
    }
}

impl ServerConfig {
    /// The server's part of `settings`, for the model named `model_name`
    /// ([`crate::engine::ModelInfo::name`]). The model is listed under that
    /// name; `--model` as given (a path or `owner/repo:file.gguf`) and its
    /// file name are accepted too.
    pub fn from_settings(settings: &Settings, model_name: &str) -> Self {
        let source = settings.model.source.trim();
        let file_name = source
            .rsplit(['/', '\\', ':'])
            .next()
            .map(|f| f.split('@').next().unwrap_or(f))
            .unwrap_or(source);
        let mut aliases = Vec::new();
        for alias in [source, file_name, file_name.strip_suffix(".gguf").unwrap_or(file_name)] {
            if !alias.is_empty() && alias != model_name && !aliases.iter().any(|a| a == alias) {
                aliases.push(alias.to_string());
            }
        }
        Self {
            model_id: model_name.to_string(),
            model_aliases: aliases,
            sampling: settings.sampling.clone(),
            max_tokens: settings.reply_tokens(),
            api_key: settings.server.api_key.clone(),
            max_body_bytes: settings.server.max_body_bytes,
            limits: ConnectionLimits::default(),
            pooling: settings.server.pooling,
        }
    }
}

impl ServerConfig {
    /// How `/v1/embeddings` pools `engine`'s model: `--pooling` where given, else the file's;
    /// `None` for a model with neither (a chat model).
    pub fn embedding_pooling(&self, engine: &EngineHandle) -> Option<crate::config::Pooling> {
        self.pooling.or(engine.model().transformer.hparams().pooling)
    }
}

struct Shared {
    engine: EngineHandle,
    config: ServerConfig,
    /// Unix time the server started (the `created` of `/v1/models`).
    started: u64,
    /// The Responses API's stored responses (`previous_response_id`).
    responses: super::responses::store::ResponseStore,
}

/// The engine handle and the server's configuration, shared by every handler.
#[derive(Clone)]
pub struct AppState {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("model_id", &self.shared.config.model_id)
            .finish_non_exhaustive()
    }
}

impl AppState {
    pub fn new(engine: EngineHandle, config: ServerConfig) -> Self {
        Self {
            shared: Arc::new(Shared {
                engine,
                config,
                started: unix_now(),
                responses: super::responses::store::ResponseStore::default(),
            }),
        }
    }

    pub fn engine(&self) -> &EngineHandle {
        &self.shared.engine
    }

    pub fn config(&self) -> &ServerConfig {
        &self.shared.config
    }

    /// The Responses API's stored responses.
    pub(crate) fn responses(&self) -> &super::responses::store::ResponseStore {
        &self.shared.responses
    }

    pub(crate) fn started(&self) -> u64 {
        self.shared.started
    }

    /// The id to answer with for a request's `model`: the loaded model's id
    /// when the request names it, one of its aliases, or nothing.
    pub(crate) fn resolve_model(&self, requested: Option<&str>) -> Result<&str, ApiError> {
        let c = &self.shared.config;
        match requested.map(str::trim) {
            None | Some("") => Ok(&c.model_id),
            Some(m) if m == c.model_id || c.model_aliases.iter().any(|a| a == m) => Ok(&c.model_id),
            Some(m) => Err(ApiError::ModelNotFound(format!(
                "the model `{m}` does not exist; this server serves `{}`",
                c.model_id
            ))),
        }
    }
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigFile;

    #[test]
    fn aliases_are_the_source_and_its_file_name() {
        let settings = |source: &str| {
            let mut cli = ConfigFile::default();
            cli.model.source = Some(source.into());
            Settings::resolve(&ConfigFile::default(), &cli).unwrap()
        };
        let c = ServerConfig::from_settings(&settings("Qwen/Qwen2.5-GGUF:qwen-q4.gguf@main"), "Qwen2.5");
        assert_eq!(c.model_id, "Qwen2.5");
        assert_eq!(
            c.model_aliases,
            vec!["Qwen/Qwen2.5-GGUF:qwen-q4.gguf@main", "qwen-q4.gguf", "qwen-q4"]
        );
        let c = ServerConfig::from_settings(&settings("/models/tiny.gguf"), "tiny");
        assert_eq!(c.model_aliases, vec!["/models/tiny.gguf", "tiny.gguf"]);
    }

    #[test]
    fn without_a_configured_max_tokens_a_reply_runs_until_the_context_is_full() {
        let mut flags = ConfigFile::default();
        let c = ServerConfig::from_settings(&Settings::resolve(&ConfigFile::default(), &flags).unwrap(), "m");
        assert_eq!(c.max_tokens, usize::MAX);
        flags.sampling.max_tokens = Some(100);
        let c = ServerConfig::from_settings(&Settings::resolve(&ConfigFile::default(), &flags).unwrap(), "m");
        assert_eq!(c.max_tokens, 100);
    }
}
