//! The binary's commands: `src/main.rs` parses the command line and hands it
//! here; each command is one file.
//!
//! | file | what |
//! |---|---|
//! | [`args`] | the flags and subcommands (clap); the settings' flags are `ConfigFile`'s |
//! | [`start`] | resolving and loading the model, starting the engine |
//! | [`progress`] | spinners and byte bars on stderr |
//! | [`run`], [`headless`], [`gui`], [`tokenize`], [`cache`], [`bench`] | one command each |
//!
//! Commands call the library and print; `anyhow` (this binary's error type)
//! is used here and in `main.rs` only, the library has a `thiserror` enum per
//! layer.

pub mod args;
mod bench;
mod cache;
mod gui;
mod headless;
mod progress;
mod run;
mod start;
mod tokenize;

use std::process::ExitCode;

use anyhow::{bail, Result};

use hearth::config::{AppPaths, ConfigFile, Settings};

use args::{Cli, Command};

/// Settings from the config file and the command line, then the command.
pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    let config_file = AppPaths::resolve(cli.config.clone(), None, None)?.config_file;
    // A file named with --config must exist; only the default location may be absent.
    let file = if cli.config.is_some() {
        ConfigFile::load_required(&config_file)?
    } else {
        ConfigFile::load(&config_file)?
    };
    // The data dir: --data-dir or HEARTH_DATA_DIR, else the config file's, else the platform's.
    let data_dir = cli
        .settings
        .paths
        .data_dir
        .clone()
        .or_else(|| file.paths.data_dir.clone());
    let paths = AppPaths::resolve(Some(config_file), data_dir, None)?;
    let flags = cli.settings.clone();
    let settings = Settings::resolve(&file, &flags);
    // The thread pool's size is fixed when it starts: set it before any command runs.
    // (A settings error is reported just below.)
    if let Ok(s) = &settings {
        let n = hearth::runtime::cpu::use_threads(s.engine.threads);
        tracing::debug!("{n} CPU threads");
    }
    if cli.headless && cli.command.is_some() {
        bail!("--headless runs the HTTP server and takes no subcommand");
    }
    let settings = settings?;
    match cli.command {
        None if cli.headless => headless::run(&settings, &paths),
        None => gui::run(settings, paths, flags),
        Some(Command::Run(args)) => run::run(&settings, &paths, &args),
        Some(Command::Cache { which }) => cache::run(&settings, &paths, which),
        Some(Command::Tokenize(args)) => tokenize::run(&settings, &args),
        Some(Command::Bench { which }) => bench::run(&settings, &paths, which),
    }
}

/// After the last flush: says, on stderr, which conversations could not be written and are
/// lost with this process (their text was kept in memory while hearth ran).
pub fn report_unsaved(handle: &hearth::engine::EngineHandle) {
    for u in handle.stats().disk.map(|d| d.unsaved).unwrap_or_default() {
        eprintln!(
            "error: conversation {} ({}) could not be saved and is lost on exit: {}",
            u.id, u.title, u.error
        );
    }
}
