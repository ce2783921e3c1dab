//! The code's own rules, checked on its source (docs/architecture.md,
//! "Who may import whom"):
//!
//! - the front-ends (`src/gui/`, `src/server/`) use the crate through
//!   `engine` and `config` only;
//! - `src/kv/` is pure bookkeeping: no candle;
//! - `src/main.rs` stays a thin dispatcher (under 150 lines);
//! - no function in `src/` runs over 120 lines unless a `// long:` comment
//!   right above it says why.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The crate modules a file names as `crate::X` (or `hearth::X`).
fn crate_modules(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for prefix in ["crate::", "hearth::"] {
            let mut rest = line;
            while let Some(i) = rest.find(prefix) {
                let after = &rest[i + prefix.len()..];
                let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                // `crate::{a, b}` names several: take each.
                if name.is_empty() && after.starts_with('{') {
                    let inner = &after[1..after.find('}').unwrap_or(after.len())];
                    for part in inner.split(',') {
                        let part: String = part
                            .trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if !part.is_empty() {
                            out.push((n + 1, part));
                        }
                    }
                }
                rest = &after[name.len()..];
                if !name.is_empty() {
                    out.push((n + 1, name));
                }
            }
        }
    }
    out
}

#[test]
fn front_ends_use_only_engine_and_config() {
    let mut bad = Vec::new();
    for dir in ["gui", "server"] {
        for f in rust_files(&src().join(dir)) {
            let text = std::fs::read_to_string(&f).unwrap();
            for (line, module) in crate_modules(&text) {
                if module != "engine" && module != "config" {
                    bad.push(format!("{}:{line}: crate::{module}", f.display()));
                }
            }
        }
    }
    assert!(bad.is_empty(), "front-ends reach past the engine:\n{}", bad.join("\n"));
}

#[test]
fn kv_does_not_use_candle() {
    let mut bad = Vec::new();
    for f in rust_files(&src().join("kv")) {
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.contains("candle") && !line.trim_start().starts_with("//") {
                bad.push(format!("{}:{}", f.display(), n + 1));
            }
        }
    }
    assert!(bad.is_empty(), "kv uses candle:\n{}", bad.join("\n"));
}

#[test]
fn main_is_thin() {
    let lines = std::fs::read_to_string(src().join("main.rs")).unwrap().lines().count();
    assert!(
        lines < 150,
        "src/main.rs has {lines} lines; commands belong in src/cli/"
    );
}

/// Functions (`fn` at the start of a line, any indentation) and their
/// length up to the closing brace at the same indentation.
fn long_functions(text: &str, limit: usize) -> Vec<(usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        let is_fn = [
            "fn ",
            "pub fn ",
            "pub(crate) fn ",
            "pub(super) fn ",
            "async fn ",
            "pub async fn ",
            "unsafe fn ",
            "pub(super) unsafe fn ",
            "pub unsafe fn ",
        ]
        .iter()
        .any(|p| t.starts_with(p));
        if !is_fn || t.ends_with(';') {
            continue;
        }
        let close = format!("{}}}", " ".repeat(indent));
        let Some(len) = lines[i + 1..].iter().position(|l| *l == close) else {
            continue;
        };
        // A `// long:` comment among the lines just above (docs, attributes) excuses it.
        let excused = lines[..i]
            .iter()
            .rev()
            .take_while(|l| {
                let l = l.trim_start();
                l.starts_with("//") || l.starts_with("#[")
            })
            .any(|l| l.trim_start().starts_with("// long:"));
        if len + 2 > limit && !excused {
            out.push((i + 1, len + 2));
        }
    }
    out
}

#[test]
fn functions_are_short_or_say_why() {
    let mut bad = Vec::new();
    for f in rust_files(&src()) {
        let text = std::fs::read_to_string(&f).unwrap();
        for (line, len) in long_functions(&text, 120) {
            bad.push(format!("{}:{line}: {len} lines", f.display()));
        }
    }
    assert!(
        bad.is_empty(),
        "functions over 120 lines without a `// long:` reason above them:\n{}",
        bad.join("\n")
    );
}
