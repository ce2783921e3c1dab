//! Fill-in-the-middle prompts: a code model writes what goes between a prefix and a suffix.
//!
//! Owns: [`Infill`] (the parts of one request) and [`infill_ids`], the prompt in the
//! prefix-suffix-middle order code models are trained on: BOS where the vocabulary adds one,
//! the prefix mark, the prefix (and the request's `prompt`, text the reply must start with),
//! the suffix mark, the suffix, the middle mark; the reply is the middle. With
//! [`Infill::repo_level`], llama.cpp's `/infill` layout: the repository mark and `myproject`,
//! then each extra file as the file mark, its name and its text, then the file mark and
//! `filename` for the file being edited, all before the BOS (as llama.cpp writes it, for
//! Qwen2.5-Coder's repository-level training). The marks come from the vocabulary
//! ([`super::tokenizer::FimTokens`]); a vocabulary without all three has no infill, a clear
//! error. Nothing is cut: a prompt over the context is refused where every prompt is
//! (llama.cpp keeps the prefix's last three quarters of a batch and drops the rest).
//!
//! Counterpart: llama.cpp server's `format_prompt_infill`; Ollama's templates' `.Suffix`.

use super::tokenizer::Tokenizer;
use super::ModelError;

/// One fill-in-the-middle request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Infill {
    /// The text before the gap.
    pub prefix: String,
    /// The text after the gap.
    pub suffix: String,
    /// Text the reply starts with, after the prefix (llama.cpp's `prompt`); usually empty.
    pub prompt: String,
    /// Other files as context: (file name, text), llama.cpp's `input_extra`.
    pub extra: Vec<(String, String)>,
    /// llama.cpp's repository-level layout (its `/infill`); else the plain one (Ollama's
    /// `suffix`, the completions' `suffix`), where `extra` must be empty.
    pub repo_level: bool,
}

/// The prompt's ids for `infill` in `tok`'s vocabulary.
pub fn infill_ids(tok: &Tokenizer, infill: &Infill) -> Result<Vec<u32>, ModelError> {
    let fim = tok.fim();
    let Some((pre, suf, mid)) = fim.marks() else {
        return Err(ModelError::Tokenizer(
            "this model has no fill-in-the-middle tokens (a prefix, a suffix and a middle mark, such as <|fim_prefix|>), so it cannot fill in code; load a code model that has them, such as Qwen2.5-Coder".into(),
        ));
    };
    let text = |t: &str| tok.encode(t, false);
    let mut ids = Vec::new();
    if infill.repo_level {
        if let Some(rep) = fim.rep {
            ids.push(rep);
            ids.extend(text("myproject\n")?);
        }
        for (name, body) in &infill.extra {
            match fim.sep {
                Some(sep) => {
                    ids.push(sep);
                    ids.extend(text(&format!("{name}\n"))?);
                }
                None => ids.extend(text("\n\n--- snippet ---\n\n")?),
            }
            ids.extend(text(body)?);
        }
        if let Some(sep) = fim.sep {
            ids.push(sep);
            ids.extend(text("filename\n")?);
        }
    }
    if let (true, Some(bos)) = (tok.add_bos(), tok.bos_id()) {
        ids.push(bos);
    }
    ids.push(pre);
    ids.extend(text(&infill.prefix)?);
    ids.extend(text(&infill.prompt)?);
    ids.push(suf);
    ids.extend(text(&infill.suffix)?);
    ids.push(mid);
    Ok(ids)
}
