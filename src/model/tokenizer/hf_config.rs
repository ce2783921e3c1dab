//! The few facts hearth reads from a `tokenizer_config.json` lying beside a
//! `tokenizer.json`: `bos_token`, `eos_token`, `add_bos_token`.
//!
//! The file is optional. A missing file gives the default (all `None`); a file
//! that does not parse is warned about and ignored, since `tokenizer.json`
//! alone still tokenizes correctly. Token fields may be a string or an
//! AddedToken object (`{"content": ...}`), as transformers writes either.
//!
//! Counterpart: transformers' `PreTrainedTokenizerBase.from_pretrained`
//! reading `tokenizer_config.json`.

use std::path::Path;

/// Special-token names and the BOS flag from `tokenizer_config.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HfTokenizerConfig {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub add_bos_token: Option<bool>,
}

impl HfTokenizerConfig {
    /// Reads `tokenizer_config.json` from the directory of `tokenizer_json`.
    pub fn beside(tokenizer_json: &Path) -> Self {
        let Some(dir) = tokenizer_json.parent() else {
            return Self::default();
        };
        let path = dir.join("tokenizer_config.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Self::default(),
            Err(e) => {
                tracing::warn!("ignoring {}: {e}", path.display());
                return Self::default();
            }
        };
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(json) => Self::from_json(&json),
            Err(e) => {
                tracing::warn!("ignoring {}: not valid JSON: {e}", path.display());
                Self::default()
            }
        }
    }

    pub fn from_json(json: &serde_json::Value) -> Self {
        let token = |key: &str| match json.get(key) {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(obj @ serde_json::Value::Object(_)) => obj.get("content").and_then(|c| c.as_str()).map(str::to_string),
            _ => None,
        };
        Self {
            bos_token: token("bos_token"),
            eos_token: token("eos_token"),
            add_bos_token: json.get("add_bos_token").and_then(serde_json::Value::as_bool),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_objects_and_nulls() {
        let json = serde_json::json!({
            "bos_token": null,
            "eos_token": {"content": "<|im_end|>", "special": true},
            "add_bos_token": false,
        });
        let c = HfTokenizerConfig::from_json(&json);
        assert_eq!(
            c,
            HfTokenizerConfig {
                bos_token: None,
                eos_token: Some("<|im_end|>".into()),
                add_bos_token: Some(false)
            }
        );
        let c = HfTokenizerConfig::from_json(&serde_json::json!({"bos_token": "<s>"}));
        assert_eq!(c.bos_token.as_deref(), Some("<s>"));
        assert_eq!(c.add_bos_token, None);
    }

    #[test]
    fn missing_or_broken_files_give_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let tj = dir.path().join("tokenizer.json");
        assert_eq!(HfTokenizerConfig::beside(&tj), HfTokenizerConfig::default());
        std::fs::write(dir.path().join("tokenizer_config.json"), "{ not json").unwrap();
        assert_eq!(HfTokenizerConfig::beside(&tj), HfTokenizerConfig::default());
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"add_bos_token": true}"#).unwrap();
        assert_eq!(HfTokenizerConfig::beside(&tj).add_bos_token, Some(true));
    }
}
