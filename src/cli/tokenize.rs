//! `hearth tokenize`: token ids of text, or of each line of a JSON-lines file.

use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

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

/// The longest line `tokenize --jsonl` reads.
const MAX_LINE_BYTES: u64 = 64 << 20;

fn tokenize_jsonl(tokenizer: &Tokenizer, path: &Path, out: &mut impl Write) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Line {
        text: String,
    }
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut reader = std::io::BufReader::new(f);
    let mut buf = Vec::new();
    for n in 0.. {
        buf.clear();
        // One line at most MAX_LINE_BYTES (and a newline): `/dev/zero` ends here instead of
        // filling memory.
        let read = (&mut reader)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if read == 0 {
            break;
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        } else if buf.len() as u64 > MAX_LINE_BYTES {
            bail!("{} line {}: longer than {MAX_LINE_BYTES} bytes", path.display(), n + 1);
        }
        let line =
            std::str::from_utf8(&buf).with_context(|| format!("{} line {}: not UTF-8 text", path.display(), n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Line = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: expected {{\"text\": \"...\"}}", path.display(), n + 1))?;
        let ids = tokenizer.encode(&parsed.text, false)?;
        writeln!(out, "{}", serde_json::to_string(&ids)?)?;
    }
    Ok(())
}
