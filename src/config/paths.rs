//! Where hearth keeps its files.

use std::path::PathBuf;

use super::ConfigError;

/// The config file and the data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppPaths {
    pub config_file: PathBuf,
    pub data_dir: PathBuf,
}

impl AppPaths {
    /// Platform defaults (`directories`), overridden by explicit paths and,
    /// for the data directory, by `data_dir_env` (the value of `HEARTH_DATA_DIR`,
    /// passed in by the caller so nothing here reads global state).
    pub fn resolve(
        config_file: Option<PathBuf>,
        data_dir: Option<PathBuf>,
        data_dir_env: Option<PathBuf>,
    ) -> Result<Self, ConfigError> {
        let dirs = directories::ProjectDirs::from("", "", "hearth");
        let config_file = match config_file {
            Some(p) => p,
            None => dirs
                .as_ref()
                .ok_or(ConfigError::NoHome)?
                .config_dir()
                .join("config.toml"),
        };
        let data_dir = match data_dir.or(data_dir_env) {
            Some(p) => p,
            None => dirs.as_ref().ok_or(ConfigError::NoHome)?.data_dir().to_path_buf(),
        };
        Ok(Self { config_file, data_dir })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_paths_win_over_env_and_defaults() {
        let p = AppPaths::resolve(Some("/a/c.toml".into()), Some("/d".into()), Some("/e".into())).unwrap();
        assert_eq!(p.config_file, PathBuf::from("/a/c.toml"));
        assert_eq!(p.data_dir, PathBuf::from("/d"));
        let p = AppPaths::resolve(Some("/a/c.toml".into()), None, Some("/e".into())).unwrap();
        assert_eq!(p.data_dir, PathBuf::from("/e"));
    }
}
