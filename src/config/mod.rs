//! Settings: the TOML config file, overridden by command-line flags.
//!
//! Two stages, as ripgrep does it: [`ConfigFile`] holds raw values (every key
//! optional), once from the file and once from the command line (its fields
//! are the flags, through clap); [`Settings::resolve`] lays the flags over the
//! file (a flag wins over its key) and validates into [`Settings`], which the
//! rest of hearth reads. A setting is declared once, as a field of a
//! `ConfigFile` section with its flag (if any) beside it; then it is validated
//! in `settings.rs`. Every key is documented in `config.example.toml` (a test
//! compares).
//!
//! Where things live comes from [`AppPaths`] (the platform's config and data
//! directories via `directories`; `--config`, `--data-dir` and
//! `HEARTH_DATA_DIR` override them).

mod error;
mod file;
mod kv_dtype;
mod paths;
mod pooling;
mod sampling;
mod settings;
mod system;

pub use error::ConfigError;
pub use file::{
    read_limited, CacheSection, ConfigFile, EngineSection, HubSection, ModelSection, PathsSection, SamplingSection,
    ServerSection, MAX_CONFIG_BYTES,
};
pub use kv_dtype::{KvDtype, Q8_0_GROUP, Q8_0_GROUP_BYTES};
pub use paths::AppPaths;
pub use pooling::Pooling;
pub use sampling::{SamplingParams, SamplingParamsError};
pub use settings::{
    default_device_fraction, default_host_bytes, CacheSettings, DeviceChoice, DevicePool, EngineSettings, HubSettings,
    ModelSettings, ServerSettings, Settings, DEFAULT_DISK_BUDGET_GIB, DEFAULT_MODEL, DEFAULT_PORT,
};
pub use system::{available_ram_bytes, total_ram_bytes};
