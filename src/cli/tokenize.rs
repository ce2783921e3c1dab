//! `hearth tokenize`: token ids of text, or of each line of a JSON-lines file.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

use hearth::config::Settings;
use hearth::model::tokenizer::Tokenizer;

use super::args::TokenizeArgs;
use super::start::{load_tokenizer, resolve_model};

pub fn run(settings: &Settings, args: &TokenizeArgs) -> Result<ExitCode> {
    let tokenizer = load_tokenizer(&resolve_model(settings)?)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if let Some(text) = &args.text {
        let ids = tokenizer.encode(text, false)?;
        writeln!(out, "{}", serde_json::to_string(&ids)?)?;
    }
    if let Some(path) = &args.jsonl {
        tokenize_jsonl(&tokenizer, path, &mut out)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn tokenize_jsonl(tokenizer: &Tokenizer, path: &Path, out: &mut impl Write) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Line {
        text: String,
    }
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    for (n, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Line = serde_json::from_str(&line)
            .with_context(|| format!("{} line {}: expected {{\"text\": \"...\"}}", path.display(), n + 1))?;
        let ids = tokenizer.encode(&parsed.text, false)?;
        writeln!(out, "{}", serde_json::to_string(&ids)?)?;
    }
    Ok(())
}
