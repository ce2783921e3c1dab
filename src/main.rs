//! The `hearth` binary: command line → settings → model → command.
//!
//! Thin on purpose, like ripgrep's: `main` checks the CPU, parses the
//! command line, starts logging and hands over to [`cli::dispatch`]; each
//! command lives in its own file under `src/cli/`. Errors come back as
//! `anyhow` chains (the binary's error type; the library's are `thiserror`
//! enums) and are printed on one line.

mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Before anything else: a binary built for another CPU says so instead of dying of SIGILL.
    let missing = hearth::runtime::cpu::missing_features();
    if !missing.is_empty() {
        eprintln!("error: {}", hearth::runtime::cpu::unsupported_cpu_message(&missing));
        return ExitCode::FAILURE;
    }
    let cli = match cli::args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return cli::args::refused(e),
    };
    init_logging(cli.verbose);
    match cli::dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, without repeating a cause the
/// message already includes.
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if out.contains(&s) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    out.replace('\n', " ")
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "hearth=info,warn",
        1 => "hearth=debug,info",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}
