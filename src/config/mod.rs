//! Settings: the TOML config file, overridden by command-line flags.
//!
//! Two stages, as ripgrep does it: [`ConfigFile`] is the raw file (every key
//! optional), [`Overrides`] the raw flags; [`Settings::resolve`] merges them
//! (flags win) and validates into [`Settings`], which the rest of hearth
//! reads. Every key is documented in `config.example.toml`.
//!
//! Where things live comes from [`AppPaths`] (the platform's config and data
//! directories via `directories`; `--config`, `--data-dir` and
//! `HEARTH_DATA_DIR` override them).

mod error;
mod file;
mod paths;
mod sampling;
mod settings;
mod system;

pub use error::ConfigError;
pub use file::{CacheSection, ConfigFile, ModelSection, PathsSection, SamplingSection};
pub use paths::AppPaths;
pub use sampling::{SamplingParams, SamplingParamsError};
pub use settings::{
    default_device_fraction, default_host_bytes, CacheSettings, DeviceChoice, DevicePool, EngineSettings, HubSettings,
    ModelSettings, Overrides, ServerSettings, Settings, DEFAULT_DISK_BUDGET_GIB, DEFAULT_MAX_TOKENS, DEFAULT_MODEL,
    DEFAULT_PORT,
};
pub use system::{available_ram_bytes, total_ram_bytes};
