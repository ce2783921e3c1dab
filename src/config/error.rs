//! Errors of the `config` layer.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file exists but cannot be read.
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
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
