//! Validated settings: the command line's layer over the config file, each value checked.

use std::path::PathBuf;

use super::file::ConfigFile;
use super::system::total_ram_bytes;
use super::{ConfigError, SamplingParams};

/// The model used when none is configured: small, instruct-tuned, Apache-2.0.
pub const DEFAULT_MODEL: &str = "Qwen/Qwen2.5-0.5B-Instruct-GGUF:qwen2.5-0.5b-instruct-q4_k_m.gguf";

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChoice {
    /// CUDA device 0 when built with `cuda` and a GPU is present, else the CPU.
    Auto,
    Cpu,
    Cuda(usize),
}

impl std::str::FromStr for DeviceChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda(0)),
            other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(Self::Cuda(n)),
                _ => Err("expected auto, cpu, cuda or cuda:N".into()),
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelSettings {
    /// A local `.gguf` path or `owner/repo:file.gguf[@revision]`.
    pub source: String,
    pub device: DeviceChoice,
    /// `None`: the model's trained context, capped (see `model::DEFAULT_CONTEXT_CAP`).
    pub context_length: Option<usize>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct HubSettings {
    /// The Hugging Face hub cache; `None`: `$HF_HUB_CACHE`, `$HF_HOME/hub`, `~/.cache/huggingface/hub`.
    pub cache_dir: Option<PathBuf>,
    /// Never touch the network; use only what the cache holds.
    pub offline: bool,
    /// The hub's address; `None`: `$HF_ENDPOINT`, else `https://huggingface.co`.
    pub endpoint: Option<String>,
}

/// Everything the rest of hearth reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub model: ModelSettings,
    /// Sampling defaults; a request may override each.
    pub sampling: SamplingParams,
    /// Most tokens to generate for one reply, unless a request says otherwise; `None` when
    /// neither the config nor the command line sets it: then a reply goes on until the model
    /// ends it or the context is full, as with OpenAI's API, llama.cpp, Ollama and LM Studio
    /// (a thinking model's reasoning alone often runs past any fixed default).
    pub max_tokens: Option<usize>,
    pub hub: HubSettings,
    pub cache: CacheSettings,
    pub engine: EngineSettings,
    pub server: ServerSettings,
}

/// The scheduler's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineSettings {
    /// Most requests decoding together (one batched forward per step).
    pub max_running: usize,
    /// Most tokens in one step: one per decoding request, the rest for
    /// prompt chunks (chunked prefill), so a long prompt never stalls the
    /// others for longer than one such step.
    pub max_batch_tokens: usize,
    /// Most requests waiting for their first step; more are refused (the
    /// server answers 503 with `Retry-After`).
    pub max_queued: usize,
    /// CPU threads for the forward; `None`: one per physical core.
    pub threads: Option<usize>,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            max_running: 32,
            max_batch_tokens: 512,
            max_queued: 256,
            threads: None,
        }
    }
}

/// `hearth --headless`: where and how the HTTP server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// Loopback unless another address is asked for.
    pub host: std::net::IpAddr,
    pub port: u16,
    /// When set, every `/v1` route needs `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// `/v1/embeddings`' pooling over the file's own (`server.pooling`, `--pooling`).
    pub pooling: Option<super::Pooling>,
}

/// The server's port when none is configured.
pub const DEFAULT_PORT: u16 = 8080;

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            host: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            port: DEFAULT_PORT,
            api_key: None,
            max_body_bytes: 4 << 20,
            pooling: None,
        }
    }
}

/// How big the device tier of the KV cache is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DevicePool {
    /// A fraction of the memory free after the weights are loaded (VRAM on
    /// CUDA, available RAM on the CPU).
    Fraction(f64),
    /// An explicit size.
    Bytes(u64),
    /// Neither was set: [`default_device_fraction`] of the device the model is loaded on,
    /// known only then (`device = "auto"` may pick either).
    Default,
}

/// The KV cache's shape and sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheSettings {
    /// Tokens per block: a power of two from 8 to 256.
    pub block_size: usize,
    pub device_pool: DevicePool,
    /// The host-RAM tier; 0 disables it.
    pub host_bytes: u64,
    /// Off: nothing is reused between requests (for comparison).
    pub prefix_caching: bool,
    /// Copy every committed block to the host tier at once.
    pub write_through: bool,
    /// Most bytes of cache files on disk (the disk tier); least recently used files are
    /// deleted past it. 0 writes no cache files (conversations are still saved).
    pub disk_budget_bytes: u64,
    /// How K/V is stored; `None`: [`super::KvDtype::DEFAULT`] (f16).
    pub kv_dtype: Option<super::KvDtype>,
}

impl CacheSettings {
    /// The K/V type: the setting, or the default (the same on every device).
    pub fn kv_dtype(&self) -> super::KvDtype {
        self.kv_dtype.unwrap_or(super::KvDtype::DEFAULT)
    }
}

/// The disk tier's default budget: 20 GiB.
pub const DEFAULT_DISK_BUDGET_GIB: f64 = 20.0;

/// The default device-tier fraction: of free VRAM on CUDA (vLLM's
/// `--gpu-memory-utilization`), of available RAM on the CPU.
pub fn default_device_fraction(cuda: bool) -> f64 {
    if cuda {
        0.9
    } else {
        0.25
    }
}

/// The default host tier: a tenth of the machine's RAM, at most 16 GiB.
pub fn default_host_bytes(total_ram: u64) -> u64 {
    (total_ram / 10).min(16 << 30)
}


fn invalid(key: &'static str, value: impl ToString, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        key,
        value: value.to_string(),
        reason: reason.into(),
    }
}

impl Settings {
    /// [`Settings::max_tokens`] as a reply's limit: unset, `usize::MAX` (the context ends the
    /// reply first).
    pub fn reply_tokens(&self) -> usize {
        self.max_tokens.unwrap_or(usize::MAX)
    }

    /// Lays the command line's `flags` over `file` (a flag wins over its key) and validates
    /// every value; an error names the key.
    pub fn resolve(file: &ConfigFile, flags: &ConfigFile) -> Result<Self, ConfigError> {
        let c = flags.layered_over(file)?;
        let model = model_settings(&c)?;
        let (sampling, max_tokens) = sampling_settings(&c)?;
        Ok(Self {
            cache: cache_settings(&c)?,
            engine: engine_settings(&c)?,
            server: server_settings(&c)?,
            hub: hub_settings(&c)?,
            model,
            sampling,
            max_tokens,
        })
    }
}

fn model_settings(c: &ConfigFile) -> Result<ModelSettings, ConfigError> {
    let device_str = c.model.device.clone().unwrap_or_else(|| "auto".into());
    let device = device_str
        .parse()
        .map_err(|reason: String| invalid("model.device", &device_str, &reason))?;
    let context_length = c.model.context_length;
    if context_length == Some(0) {
        return Err(invalid("model.context_length", 0, "must be at least 1"));
    }
    let source = c.model.source.clone().unwrap_or_else(|| DEFAULT_MODEL.into());
    if source.trim().is_empty() {
        return Err(invalid(
            "model.source",
            "\"\"",
            "must name a .gguf file or owner/repo:file.gguf",
        ));
    }
    Ok(ModelSettings {
        source,
        device,
        context_length,
    })
}

fn sampling_settings(c: &ConfigFile) -> Result<(SamplingParams, Option<usize>), ConfigError> {
    let d = SamplingParams::default();
    let f = &c.sampling;
    let sampling = SamplingParams {
        temperature: f.temperature.unwrap_or(d.temperature),
        top_k: f.top_k.unwrap_or(d.top_k),
        top_p: f.top_p.unwrap_or(d.top_p),
        min_p: f.min_p.unwrap_or(d.min_p),
        repeat_penalty: f.repeat_penalty.unwrap_or(d.repeat_penalty),
        repeat_last_n: f.repeat_last_n.unwrap_or(d.repeat_last_n),
        presence_penalty: f.presence_penalty.unwrap_or(d.presence_penalty),
        frequency_penalty: f.frequency_penalty.unwrap_or(d.frequency_penalty),
        logit_bias: Vec::new(),
        seed: f.seed,
    };
    sampling.validate()?;
    if f.max_tokens == Some(0) {
        return Err(invalid("sampling.max_tokens", 0, "must be at least 1"));
    }
    Ok((sampling, f.max_tokens))
}

fn hub_settings(c: &ConfigFile) -> Result<HubSettings, ConfigError> {
    let endpoint = match c.hub.endpoint.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(e) if e.starts_with("http://") || e.starts_with("https://") => Some(e.to_owned()),
        Some(e) => return Err(invalid("hub.endpoint", e, "give an http:// or https:// address")),
    };
    Ok(HubSettings {
        cache_dir: c.hub.cache_dir.clone(),
        offline: c.hub.offline.unwrap_or(false),
        endpoint,
    })
}

fn cache_settings(c: &ConfigFile) -> Result<CacheSettings, ConfigError> {
    let c = &c.cache;
    let block_size = c.block_size.unwrap_or(16);
    if !(8..=256).contains(&block_size) || !block_size.is_power_of_two() {
        return Err(invalid(
            "cache.block_size",
            block_size,
            "must be a power of two from 8 to 256",
        ));
    }
    let device_pool = match (c.device_pool_mib, c.device_memory_fraction) {
        (Some(0), _) => return Err(invalid("cache.device_pool_mib", 0, "must be at least 1")),
        (Some(mib), _) => DevicePool::Bytes(mib << 20),
        (None, Some(f)) if !(f > 0.0 && f <= 1.0) => {
            return Err(invalid("cache.device_memory_fraction", f, "must be in (0, 1]"))
        }
        (None, Some(f)) => DevicePool::Fraction(f),
        (None, None) => DevicePool::Default,
    };
    let host_bytes = match c.host_cache_gib {
        Some(g) if !(g >= 0.0 && g.is_finite()) => {
            return Err(invalid("cache.host_cache_gib", g, "must be 0 (off) or positive"))
        }
        Some(g) => (g * (1u64 << 30) as f64) as u64,
        None => default_host_bytes(total_ram_bytes().unwrap_or(8 << 30)),
    };
    let disk_budget_bytes = match c.disk_cache_gib {
        Some(g) if !(g >= 0.0 && g.is_finite()) => {
            return Err(invalid(
                "cache.disk_cache_gib",
                g,
                "must be 0 (no cache files) or positive",
            ))
        }
        Some(g) => (g * (1u64 << 30) as f64) as u64,
        None => (DEFAULT_DISK_BUDGET_GIB * (1u64 << 30) as f64) as u64,
    };
    let kv_dtype = match c.kv_dtype.as_deref() {
        None => None,
        Some(name) => Some(
            name.parse()
                .map_err(|reason: String| invalid("cache.kv_dtype", name, &reason))?,
        ),
    };
    Ok(CacheSettings {
        kv_dtype,
        disk_budget_bytes,
        block_size,
        device_pool,
        host_bytes,
        prefix_caching: c.prefix_caching.unwrap_or(true),
        write_through: c.write_through.unwrap_or(false),
    })
}

fn engine_settings(c: &ConfigFile) -> Result<EngineSettings, ConfigError> {
    let e = &c.engine;
    let de = EngineSettings::default();
    let engine = EngineSettings {
        max_running: e.max_running.unwrap_or(de.max_running),
        max_batch_tokens: e.max_batch_tokens.unwrap_or(de.max_batch_tokens),
        max_queued: e.max_queued.unwrap_or(de.max_queued),
        threads: e.threads,
    };
    if engine.threads == Some(0) {
        return Err(invalid(
            "engine.threads",
            0,
            "must be at least 1 (leave it unset for one per physical core)",
        ));
    }
    if engine.max_running == 0 {
        return Err(invalid("engine.max_running", 0, "must be at least 1"));
    }
    if engine.max_queued == 0 {
        return Err(invalid(
            "engine.max_queued",
            0,
            "must be at least 1 (with no room to queue, every request would be refused)",
        ));
    }
    if engine.max_batch_tokens < engine.max_running {
        return Err(invalid(
            "engine.max_batch_tokens",
            engine.max_batch_tokens,
            "must be at least engine.max_running (every running request decodes one token per step)",
        ));
    }
    Ok(engine)
}

fn server_settings(c: &ConfigFile) -> Result<ServerSettings, ConfigError> {
    let sv = &c.server;
    let ds = ServerSettings::default();
    let host = match sv.host.as_ref() {
        None => ds.host,
        Some(h) if h == "localhost" => ds.host,
        Some(h) => h
            .parse()
            .map_err(|_| invalid("server.host", h, "must be an IP address such as 127.0.0.1 or ::1"))?,
    };
    if sv.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
        return Err(invalid(
            "server.api_key",
            "\"\"",
            "must not be empty (leave it unset for no key)",
        ));
    }
    let max_body_bytes = match sv.max_body_kib {
        Some(0) => return Err(invalid("server.max_body_kib", 0, "must be at least 1")),
        Some(k) => k << 10,
        None => ds.max_body_bytes,
    };
    let pooling = match sv.pooling.as_deref() {
        None => None,
        Some(name) => Some(
            name.parse()
                .map_err(|reason: String| invalid("server.pooling", name, &reason))?,
        ),
    };
    Ok(ServerSettings {
        host,
        port: sv.port.unwrap_or(ds.port),
        api_key: sv.api_key.clone(),
        max_body_bytes,
        pooling,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::path::Path;

    /// The command line's layer, parsed by clap from `args` (the flags are the fields').
    fn flags(args: &[&str]) -> ConfigFile {
        #[derive(Parser)]
        struct Flags {
            #[command(flatten)]
            settings: ConfigFile,
        }
        Flags::try_parse_from(std::iter::once("hearth").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
            .settings
    }

    #[test]
    fn cli_overrides_file_and_defaults_fill_the_rest() {
        let file = ConfigFile::parse(
            "[model]\nsource = \"a.gguf\"\ndevice = \"cpu\"\n[sampling]\ntemperature = 0.5\ntop_k = 7\n",
            Path::new("c.toml"),
        )
        .unwrap();
        let cli = flags(&["--model", "b.gguf", "--temperature", "0"]);
        let s = Settings::resolve(&file, &cli).unwrap();
        assert_eq!(s.model.source, "b.gguf");
        assert_eq!(s.model.device, DeviceChoice::Cpu);
        assert_eq!(s.sampling.temperature, 0.0);
        assert_eq!(s.sampling.top_k, 7);
        assert_eq!(s.sampling.top_p, 0.95);
    }

    #[test]
    fn default_model_and_bad_values() {
        let s = Settings::resolve(&ConfigFile::default(), &ConfigFile::default()).unwrap();
        assert_eq!(s.model.source, DEFAULT_MODEL);
        assert_eq!((s.max_tokens, s.reply_tokens()), (None, usize::MAX));
        let s = Settings::resolve(&ConfigFile::default(), &flags(&["--max-tokens", "7"])).unwrap();
        assert_eq!((s.max_tokens, s.reply_tokens()), (Some(7), 7));
        assert_eq!(s.model.device, DeviceChoice::Auto);
        for cli in [
            flags(&["--temperature=-1"]),
            flags(&["--top-p", "0"]),
            flags(&["--device", "tpu"]),
            flags(&["--max-tokens", "0"]),
            flags(&["--ctx-size", "0"]),
        ] {
            assert!(Settings::resolve(&ConfigFile::default(), &cli).is_err(), "{cli:?}");
        }
        assert_eq!("cuda:1".parse::<DeviceChoice>(), Ok(DeviceChoice::Cuda(1)));
        for cli in [
            flags(&["--block-size", "12"]),
            flags(&["--block-size", "512"]),
            flags(&["--kv-pool-mib", "0"]),
            flags(&["--host-cache-gib=-1"]),
        ] {
            assert!(Settings::resolve(&ConfigFile::default(), &cli).is_err(), "{cli:?}");
        }
    }

    #[test]
    fn cache_settings_from_file_and_flags() {
        let file = ConfigFile::parse(
            "[cache]\nblock_size = 32\ndevice_memory_fraction = 0.5\nhost_cache_gib = 0.5\nwrite_through = true\n",
            Path::new("c.toml"),
        )
        .unwrap();
        let s = Settings::resolve(&file, &ConfigFile::default()).unwrap();
        assert_eq!(s.cache.block_size, 32);
        assert_eq!(s.cache.device_pool, DevicePool::Fraction(0.5));
        assert_eq!(s.cache.host_bytes, 512 << 20);
        assert!(s.cache.write_through && s.cache.prefix_caching);
        let cli = flags(&["--kv-pool-mib", "64", "--no-prefix-cache"]);
        let s = Settings::resolve(&file, &cli).unwrap();
        assert_eq!(s.cache.device_pool, DevicePool::Bytes(64 << 20));
        assert!(!s.cache.prefix_caching);
        let d = Settings::resolve(&ConfigFile::default(), &ConfigFile::default()).unwrap();
        assert_eq!(d.cache.block_size, 16);
        assert_eq!(d.cache.device_pool, DevicePool::Default);
    }

    #[test]
    fn flags_fill_the_same_keys_as_the_file() {
        // Each flag lands on its key, and a flag wins over the file's value for that key only.
        let f = flags(&["-m", "x.gguf", "--offline", "--threads", "3", "--port", "9", "-n", "7"]);
        assert_eq!(f.model.source.as_deref(), Some("x.gguf"));
        assert_eq!(
            (f.hub.offline, f.engine.threads, f.server.port),
            (Some(true), Some(3), Some(9))
        );
        assert_eq!(f.sampling.max_tokens, Some(7));
        assert_eq!(flags(&[]).hub.offline, None, "an absent flag leaves the file's value");
        let file = ConfigFile::parse("[server]\nport = 1\nmax_body_kib = 2\n", Path::new("c.toml")).unwrap();
        let s = Settings::resolve(&file, &f).unwrap();
        assert_eq!((s.server.port, s.server.max_body_bytes), (9, 2 << 10));
        assert!(s.hub.offline);
        let err = Settings::resolve(&file, &flags(&["--max-running", "0"])).unwrap_err();
        assert!(err.to_string().contains("engine.max_running"), "{err}");
    }

    #[test]
    fn pooling_is_read_and_checked() {
        let file = ConfigFile::parse("[server]\npooling = \"mean\"\n", Path::new("c.toml")).unwrap();
        let s = Settings::resolve(&file, &flags(&[])).unwrap();
        assert_eq!(s.server.pooling, Some(super::super::Pooling::Mean));
        let s = Settings::resolve(&file, &flags(&["--pooling", "last"])).unwrap();
        assert_eq!(s.server.pooling, Some(super::super::Pooling::Last));
        assert_eq!(Settings::resolve(&ConfigFile::default(), &flags(&[])).unwrap().server.pooling, None);
        let err = Settings::resolve(&file, &flags(&["--pooling", "rank"])).unwrap_err();
        assert!(err.to_string().contains("server.pooling"), "{err}");
    }
}
