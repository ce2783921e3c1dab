//! Errors of the `config` layer.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file exists but cannot be read.
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// A config file named on the command line (`--config`) does not exist.
    #[error(
        "config file {path} does not exist (a file named with --config must exist; only the default one may be absent)"
    )]
    Missing { path: PathBuf },
    /// The config file is larger than any config file could be (`--config /dev/zero`).
    #[error("config file {path} is larger than {limit} bytes; is it really a config file?")]
    TooLarge { path: PathBuf, limit: u64 },
    /// The config file cannot be written.
    #[error("cannot write config file {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    /// The config file is not valid TOML or has unknown keys / wrong types.
    #[error("config file {path} is invalid: {message}")]
    Parse { path: PathBuf, message: String },
    /// A setting has a value outside its range.
    #[error("invalid setting {key} = {value}: {reason}")]
    Invalid {
        key: &'static str,
        value: String,
        reason: String,
    },
    /// A sampling parameter outside its range.
    #[error("invalid setting sampling.{0}")]
    Sampling(#[from] super::SamplingParamsError),
    /// No home directory to derive the platform directories from.
    #[error(
        "cannot determine the platform config/data directories (no home directory?); pass --config and --data-dir"
    )]
    NoHome,
}
