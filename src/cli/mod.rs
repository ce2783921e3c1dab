//! The binary's commands: `src/main.rs` parses the command line and hands it
//! here; each command is one file.
//!
//! | file | what |
//! |---|---|
//! | [`args`] | the flags and subcommands (clap), and the settings overrides they make |
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
    let mut paths = AppPaths::resolve(cli.config.clone(), cli.data_dir.clone(), None)?;
    let file = ConfigFile::load(&paths.config_file)?;
    // The config file's data dir, unless --data-dir or HEARTH_DATA_DIR said otherwise.
    if let (None, Some(dir)) = (&cli.data_dir, &file.paths.data_dir) {
        paths.data_dir = dir.clone();
    }
    let overrides = cli.overrides();
    let settings = Settings::resolve(&file, &overrides);
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
        None => gui::run(settings, paths, overrides),
        Some(Command::Run(args)) => run::run(&settings, &paths, &args),
        Some(Command::Cache { which }) => cache::run(&settings, &paths, which),
        Some(Command::Tokenize(args)) => tokenize::run(&settings, &args),
        Some(Command::Bench { which }) => bench::run(&settings, &paths, which),
    }
}
