//! The raw config file: every key optional, unknown keys refused.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ConfigError;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    pub model: ModelSection,
    #[serde(default)]
    pub sampling: SamplingSection,
    #[serde(default)]
    pub hub: HubSection,
    #[serde(default)]
    pub cache: CacheSection,
    #[serde(default)]
    pub engine: EngineSection,
    #[serde(default)]
    pub server: ServerSection,
    #[serde(default)]
    pub paths: PathsSection,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathsSection {
    /// The data directory (conversations, cache files); `--data-dir` and `HEARTH_DATA_DIR` win.
    pub data_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    pub source: Option<String>,
    pub device: Option<String>,
    pub context_length: Option<usize>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingSection {
    pub temperature: Option<f32>,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    pub min_p: Option<f32>,
    pub repeat_penalty: Option<f32>,
    pub repeat_last_n: Option<usize>,
    pub seed: Option<u64>,
    pub max_tokens: Option<usize>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HubSection {
    pub cache_dir: Option<PathBuf>,
    pub offline: Option<bool>,
    /// A hub mirror's address (`$HF_ENDPOINT` otherwise).
    pub endpoint: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSection {
    pub block_size: Option<usize>,
    pub device_pool_mib: Option<u64>,
    pub device_memory_fraction: Option<f64>,
    pub host_cache_gib: Option<f64>,
    pub disk_cache_gib: Option<f64>,
    pub prefix_caching: Option<bool>,
    pub write_through: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSection {
    pub max_running: Option<usize>,
    pub max_batch_tokens: Option<usize>,
    pub max_queued: Option<usize>,
    /// CPU threads for the forward (default: one per physical core).
    pub threads: Option<usize>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub api_key: Option<String>,
    pub max_body_kib: Option<usize>,
}

impl ConfigFile {
    /// Writes the config to `path` atomically (comments in a hand-written file are not kept).
    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        let text = toml::to_string_pretty(self).map_err(|e| ConfigError::Write {
            path: path.into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| ConfigError::Write {
                path: dir.into(),
                source,
            })?;
        }
        let tmp = path.with_extension("toml.tmp");
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|source| {
            let _ = std::fs::remove_file(&tmp);
            ConfigError::Write {
                path: path.into(),
                source,
            }
        })
    }

    /// Reads `path`; a missing file is an empty config (defaults apply).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.into(),
                    source,
                })
            }
        };
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.into(),
            message: e.message().replace('\n', " "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_parses_and_unknown_keys_are_refused() {
        let example = include_str!("../../config.example.toml");
        let cfg = ConfigFile::parse(example, Path::new("config.example.toml")).unwrap();
        assert!(cfg.model.source.is_some());
        let err = ConfigFile::parse("[model]\nsorce = \"x\"\n", Path::new("c.toml")).unwrap_err();
        assert!(err.to_string().contains("sorce"), "{err}");
    }

    #[test]
    fn missing_file_is_empty_config() {
        let cfg = ConfigFile::load(Path::new("/nonexistent/hearth/config.toml")).unwrap();
        assert_eq!(cfg, ConfigFile::default());
    }
}
