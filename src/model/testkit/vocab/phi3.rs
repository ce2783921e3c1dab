//! Phi-3's vocabulary in miniature: the SentencePiece style ([`super::VocabStyle::LlamaSpm`])
//! with Phi-3's added tokens after the learned ones, its chat template and a name that says
//! Phi-3, which is what makes llama.cpp strip the whitespace after its special tokens
//! (`LLAMA_TOKEN_ATTR_RSTRIP`, set by name at load) and what its `tokenizer.json` says with
//! `"rstrip": true`.
//!
//! Counterpart: microsoft/Phi-3-mini-4k-instruct's `tokenizer.json` (added tokens 32000..32010)
//! and llama.cpp's converter, which types `<|system|>`-like tokens control or user-defined.

use candle_core::quantized::gguf_file::Value;
use serde_json::{json, Value as Json};

use super::{kv, spm, TinyVocab};

/// Phi-3's added tokens with their GGUF types: control (3), one user-defined (4) here to cover
/// both kinds llama.cpp's rule strips.
const PHI3_ADDED: [(&str, i32); 5] = [
    ("<|endoftext|>", 3),
    ("<|assistant|>", 3),
    ("<|system|>", 4),
    ("<|end|>", 3),
    ("<|user|>", 3),
];

/// What llama.cpp's name test looks for (lowercased: "phi-3" or "phi3").
pub const PHI3_NAME: &str = "Phi-3-mini-4k-instruct (hearth tiny)";

const PHI35_TEMPLATE: &str = include_str!("../../chat/fixtures/phi-3.5-mini-instruct.jinja");

pub(super) fn phi3() -> TinyVocab {
    let mut v = spm(0);
    let first = v.size;
    let mut json: Json = serde_json::from_str(&v.tokenizer_json).expect("the SentencePiece tokenizer.json parses");
    for (key, value) in v.metadata.iter_mut() {
        let Value::Array(items) = value else { continue };
        match key.as_str() {
            "tokenizer.ggml.tokens" => items.extend(PHI3_ADDED.iter().map(|(t, _)| Value::String(t.to_string()))),
            "tokenizer.ggml.scores" => items.extend(PHI3_ADDED.iter().map(|_| Value::F32(0.0))),
            "tokenizer.ggml.token_type" => items.extend(PHI3_ADDED.iter().map(|&(_, ty)| Value::I32(ty))),
            _ => {}
        }
    }
    v.metadata
        .retain(|(k, _)| k != "tokenizer.chat_template" && k != "tokenizer.ggml.eos_token_id");
    v.metadata.extend([
        kv("general.name", Value::String(PHI3_NAME.into())),
        kv("tokenizer.ggml.eos_token_id", Value::U32(first as u32)),
        kv("tokenizer.chat_template", Value::String(PHI35_TEMPLATE.into())),
    ]);
    // As Phi-3's tokenizer.json: every added token strips right but <unk>, <s>, <|endoftext|>;
    // the added ones are not in the model's vocabulary.
    if let Some(added) = json["added_tokens"].as_array_mut() {
        for t in added.iter_mut() {
            t["rstrip"] = json!(t["content"] == "</s>");
        }
        for (i, &(content, ty)) in PHI3_ADDED.iter().enumerate() {
            added.push(
                json!({"id": first + i, "content": content, "single_word": false, "lstrip": false,
                              "rstrip": content != "<|endoftext|>", "normalized": false, "special": ty == 3}),
            );
        }
    }
    v.tokenizer_json = json.to_string();
    v.size = first + PHI3_ADDED.len();
    v
}
