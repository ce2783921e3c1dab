//! `hearth` with no subcommand: the desktop app.

use std::process::ExitCode;

use anyhow::Result;

use hearth::config::{AppPaths, ConfigFile, Settings};

/// `hearth`: the desktop app (the model loads inside the window).
#[cfg(feature = "gui")]
pub fn run(settings: Settings, paths: AppPaths, flags: ConfigFile) -> Result<ExitCode> {
    hearth::gui::run(settings, paths, flags).map_err(|e| {
        anyhow::anyhow!(
            "the window could not be opened: {e} (without a desktop, `hearth --headless` serves the HTTP API and `hearth run` works in a terminal)"
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(feature = "gui"))]
pub fn run(_settings: Settings, _paths: AppPaths, _flags: ConfigFile) -> Result<ExitCode> {
    anyhow::bail!("this hearth was built without the desktop app (feature `gui`); use `hearth run --prompt TEXT`, or `hearth --headless` for the HTTP server (see `hearth --help`)")
}
