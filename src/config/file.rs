//! The raw settings: the config file (every key optional, unknown keys refused) and the
//! command-line flags, one struct for both.

use std::path::{Path, PathBuf};

use clap::Args;
use serde::{Deserialize, Serialize};

use super::ConfigError;

// Each setting is declared once, here: a field of its section is its key in `config.toml`
// (serde) and, where it has one, its command-line flag (clap; the doc comment is the flag's
// help). The command line fills a `ConfigFile` of its own that is laid over the file's
// (`layered_over`), and `Settings::resolve` validates the result. Fields marked
// `#[arg(skip)]` have no flag. `config.example.toml` documents every key (a test compares).

/// The largest config file read: far more than every key takes, and a bound on what
/// `--config /dev/zero` can make us read.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// The whole of the file at `path` if it holds at most `limit` bytes, `None` if it holds more
/// (found after reading `limit + 1` bytes, so an endless file such as `/dev/zero` ends too).
pub fn read_limited(path: &Path, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut out = Vec::new();
    std::fs::File::open(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)?;
    Ok((out.len() as u64 <= limit).then_some(out))
}

/// The config file's keys, and the command line's flags for them. Every key is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    #[command(flatten)]
    pub model: ModelSection,
    #[serde(default)]
    #[command(flatten)]
    pub sampling: SamplingSection,
    #[serde(default)]
    #[command(flatten)]
    pub hub: HubSection,
    #[serde(default)]
    #[command(flatten)]
    pub cache: CacheSection,
    #[serde(default)]
    #[command(flatten)]
    pub engine: EngineSection,
    #[serde(default)]
    #[command(flatten)]
    pub server: ServerSection,
    #[serde(default)]
    #[command(flatten)]
    pub paths: PathsSection,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct PathsSection {
    /// Data directory (conversations, caches).
    #[arg(long, global = true, env = "HEARTH_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// Model: a local .gguf file or `owner/repo:file.gguf[@revision]` on the Hugging Face hub.
    #[arg(long = "model", short = 'm', global = true, value_name = "MODEL")]
    pub source: Option<String>,
    /// Device: auto, cpu, cuda or cuda:N.
    #[arg(long, global = true)]
    pub device: Option<String>,
    /// Context length in tokens (prompt plus reply).
    #[arg(long = "ctx-size", global = true, value_name = "N")]
    pub context_length: Option<usize>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct SamplingSection {
    /// Sampling temperature; 0 is greedy.
    #[arg(long, global = true, value_name = "T")]
    pub temperature: Option<f32>,
    /// Keep only the K most likely tokens (0 = off).
    #[arg(long, global = true, value_name = "K")]
    pub top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probabilities sum to P (1.0 = off).
    #[arg(long, global = true, value_name = "P")]
    pub top_p: Option<f32>,
    /// Drop tokens less likely than P times the most likely one (0 = off).
    #[arg(long, global = true, value_name = "P")]
    pub min_p: Option<f32>,
    /// Divide the logits of recently seen tokens by R (1.0 = off).
    #[arg(long, global = true, value_name = "R")]
    pub repeat_penalty: Option<f32>,
    /// How many recent tokens the repeat penalty looks at.
    #[arg(skip)]
    pub repeat_last_n: Option<usize>,
    /// Lower the logits of tokens the reply already holds, once each (-2 to 2; 0 = off).
    #[arg(long, global = true, value_name = "P", allow_negative_numbers = true)]
    pub presence_penalty: Option<f32>,
    /// Lower the logits of tokens the reply already holds, once per use (-2 to 2; 0 = off).
    #[arg(long, global = true, value_name = "F", allow_negative_numbers = true)]
    pub frequency_penalty: Option<f32>,
    /// Random seed (default: a fresh one per request).
    #[arg(long, global = true, value_name = "S")]
    pub seed: Option<u64>,
    /// Most tokens to generate for one reply.
    #[arg(long, short = 'n', global = true, value_name = "N")]
    pub max_tokens: Option<usize>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct HubSection {
    /// The Hugging Face hub cache.
    #[arg(skip)]
    pub cache_dir: Option<PathBuf>,
    /// Use only files already in the Hugging Face cache.
    #[arg(long, global = true, num_args = 0, default_missing_value = "true")]
    pub offline: Option<bool>,
    /// A hub mirror's address (`$HF_ENDPOINT` otherwise).
    #[arg(skip)]
    pub endpoint: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct CacheSection {
    /// KV cache block size in tokens (a power of two, 8-256).
    #[arg(long, global = true, value_name = "TOKENS")]
    pub block_size: Option<usize>,
    /// Size of the KV cache's device tier in MiB (default: a fraction of free memory).
    #[arg(long = "kv-pool-mib", global = true, value_name = "MIB")]
    pub device_pool_mib: Option<u64>,
    /// The device tier as a fraction of the memory free after the weights are loaded.
    #[arg(skip)]
    pub device_memory_fraction: Option<f64>,
    /// Size of the KV cache's host-RAM tier in GiB (0 = off).
    #[arg(long, global = true, value_name = "GIB")]
    pub host_cache_gib: Option<f64>,
    /// Most GiB of cache files (the disk tier) in the data dir; 0 = write none.
    #[arg(long, global = true, value_name = "GIB")]
    pub disk_cache_gib: Option<f64>,
    /// Turn prefix caching off (every prompt is prefilled in full).
    #[arg(
        long = "no-prefix-cache",
        global = true,
        num_args = 0,
        default_missing_value = "false"
    )]
    pub prefix_caching: Option<bool>,
    /// Copy every full block to the host tier at once.
    #[arg(skip)]
    pub write_through: Option<bool>,
    /// How K/V is stored in every tier: f16 (default), bf16, q8_0 or f32.
    #[arg(long, global = true, value_name = "TYPE")]
    pub kv_dtype: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct EngineSection {
    /// Most requests decoding together (one batched forward per step).
    #[arg(long, global = true, value_name = "N")]
    pub max_running: Option<usize>,
    /// Most tokens in one engine step (decodes plus prompt chunks).
    #[arg(long, global = true, value_name = "TOKENS")]
    pub max_batch_tokens: Option<usize>,
    /// Most requests waiting for their first step; more are refused (HTTP 503).
    #[arg(long, global = true, value_name = "N")]
    pub max_queued: Option<usize>,
    /// CPU threads for the forward (default: one per physical core).
    #[arg(long, global = true, value_name = "N")]
    pub threads: Option<usize>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// Address the server listens on (default 127.0.0.1; another needs saying so).
    #[arg(long, global = true, value_name = "IP")]
    pub host: Option<String>,
    /// Port the server listens on (default 8080; 0 picks a free one).
    #[arg(long, global = true)]
    pub port: Option<u16>,
    /// Require `Authorization: Bearer KEY` on the server's /v1 routes.
    #[arg(
        long,
        global = true,
        env = "HEARTH_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub api_key: Option<String>,
    /// Largest request body, in KiB.
    #[arg(skip)]
    pub max_body_kib: Option<usize>,
    /// How /v1/embeddings pools a model's final rows (mean, cls or last), over the pooling type
    /// the GGUF gives (an embedding model's); lets a file without one serve embeddings.
    #[arg(long, global = true, value_name = "mean|cls|last")]
    pub pooling: Option<String>,
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
        Self::read(path, false)
    }

    /// Reads the config file at `path`, which must exist: one named on the command line.
    pub fn load_required(path: &Path) -> Result<Self, ConfigError> {
        Self::read(path, true)
    }

    fn read(path: &Path, required: bool) -> Result<Self, ConfigError> {
        let bytes = match read_limited(path, MAX_CONFIG_BYTES) {
            Ok(Some(b)) => b,
            Ok(None) => {
                return Err(ConfigError::TooLarge {
                    path: path.into(),
                    limit: MAX_CONFIG_BYTES,
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => return Ok(Self::default()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ConfigError::Missing { path: path.into() })
            }
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.into(),
                    source,
                })
            }
        };
        let text = String::from_utf8(bytes).map_err(|e| ConfigError::Parse {
            path: path.into(),
            message: format!("not UTF-8 text ({e})"),
        })?;
        Self::parse(&text, path)
    }

    /// `self` laid over `below`: every key `self` sets wins, the rest come from `below`
    /// (the command line over the file). Key by key, through TOML tables, so a new key needs
    /// nothing here.
    pub fn layered_over(&self, below: &ConfigFile) -> Result<ConfigFile, ConfigError> {
        let layer_error = |e: &dyn std::fmt::Display| ConfigError::Parse {
            path: "(command line over the config file)".into(),
            message: e.to_string(),
        };
        let mut merged = toml::Table::try_from(below).map_err(|e| layer_error(&e))?;
        for (section, keys) in toml::Table::try_from(self).map_err(|e| layer_error(&e))? {
            match (merged.get_mut(&section), keys) {
                (Some(toml::Value::Table(into)), toml::Value::Table(keys)) => into.extend(keys),
                (_, keys) => {
                    merged.insert(section, keys);
                }
            }
        }
        toml::Value::Table(merged).try_into().map_err(|e| layer_error(&e))
    }

    /// Every key (`section.key`) with its command-line flag (`--flag`), if it has one, in the
    /// order the sections declare them.
    pub fn keys_and_flags() -> Vec<(String, Option<String>)> {
        fn section<S: Args + Default + Serialize>(name: &str, out: &mut Vec<(String, Option<String>)>) {
            let cmd = S::augment_args(clap::Command::new("section"));
            let flags: std::collections::HashMap<String, String> = cmd
                .get_arguments()
                .filter_map(|a| Some((a.get_id().to_string(), format!("--{}", a.get_long()?))))
                .collect();
            // The keys come from serde (every field, with or without a flag).
            let keys = match serde_json::to_value(S::default()) {
                Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect::<Vec<_>>(),
                _ => Vec::new(),
            };
            for k in keys {
                let flag = flags.get(&k).cloned();
                out.push((format!("{name}.{k}"), flag));
            }
        }
        let mut out = Vec::new();
        section::<ModelSection>("model", &mut out);
        section::<SamplingSection>("sampling", &mut out);
        section::<HubSection>("hub", &mut out);
        section::<CacheSection>("cache", &mut out);
        section::<EngineSection>("engine", &mut out);
        section::<ServerSection>("server", &mut out);
        section::<PathsSection>("paths", &mut out);
        out
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

    /// `section.key` of every `key = value` line of `config.example.toml`, commented out or
    /// not, and the file with those lines uncommented.
    fn example_keys() -> (Vec<String>, String) {
        let example = include_str!("../../config.example.toml");
        let (mut keys, mut section, mut uncommented) = (Vec::new(), String::new(), String::new());
        for line in example.lines() {
            let bare = line.trim_start_matches('#').trim();
            if let Some(name) = bare.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_owned();
            }
            match bare.split_once(" = ") {
                Some((k, _)) if !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_') => {
                    keys.push(format!("{section}.{k}"));
                    uncommented.push_str(bare);
                }
                _ => uncommented.push_str(line),
            }
            uncommented.push('\n');
        }
        (keys, uncommented)
    }

    #[test]
    fn example_config_names_every_key_the_code_accepts() {
        let (mut named, uncommented) = example_keys();
        let mut accepted: Vec<String> = ConfigFile::keys_and_flags().into_iter().map(|(k, _)| k).collect();
        named.sort();
        accepted.sort();
        assert_eq!(
            named, accepted,
            "config.example.toml and ConfigFile name different keys"
        );
        // Every example value, commented out or not, is one the file accepts.
        ConfigFile::parse(&uncommented, Path::new("config.example.toml (uncommented)")).unwrap();
    }

    #[test]
    fn readme_lists_every_key_with_its_flag() {
        let readme = include_str!("../../README.md");
        for (key, flag) in ConfigFile::keys_and_flags() {
            let row = readme
                .lines()
                .find(|l| l.starts_with(&format!("| `{key}` |")))
                .unwrap_or_else(|| panic!("README's configuration table has no row for {key}"));
            let cell = row.split('|').nth(2).unwrap_or("").trim();
            let want = flag.map(|f| format!("`{f}`")).unwrap_or_else(|| "–".into());
            assert!(
                cell.starts_with(&want),
                "README's row for {key} should give the flag {want}: {row}"
            );
        }
    }

    #[test]
    fn missing_file_is_empty_config() {
        let cfg = ConfigFile::load(Path::new("/nonexistent/hearth/config.toml")).unwrap();
        assert_eq!(cfg, ConfigFile::default());
    }
}
