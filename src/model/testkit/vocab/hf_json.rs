//! The `tokenizer.json` files, written field by field in the shape Hugging
//! Face's converters give these families (Meta-Llama-3, Qwen2, GPT-2,
//! `LlamaConverter` for Llama 2, Gemma 4, and `bert-base-uncased`'s WordPiece), never by
//! serializing a built tokenizer.

use std::collections::HashMap;

use serde_json::{json, Value as Json};

use super::families::Gpt2Family;

/// Llama 3's split, written as in Meta-Llama-3's `tokenizer.json`.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GPT-4o's split (o200k), written as in Phi-4-mini's and Xenova/gpt-4o's `tokenizer.json`.
const GPT4O_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Tekken's split, written as in Mistral-Nemo's `tokenizer.json`.
const TEKKEN_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's split, written as in Qwen2's `tokenizer.json`.
const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A vocabulary's `"vocab"` map: each token's text to its id, in order.
fn vocab_map(tokens: &[String]) -> serde_json::Map<String, Json> {
    tokens.iter().enumerate().map(|(i, t)| (t.clone(), json!(i))).collect()
}

/// One entry of `"added_tokens"`, as HF's converters write it.
fn added_token(id: usize, content: &str, special: bool) -> Json {
    json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
           "normalized": false, "special": special})
}

pub(super) fn gpt2_json(
    pre: &str,
    family: &Gpt2Family,
    model_tokens: &[String],
    merges: &[String],
    first_added: u32,
) -> Json {
    let vocab = vocab_map(model_tokens);
    let added: Vec<Json> = family
        .added
        .iter()
        .enumerate()
        .map(|(i, &(content, special))| added_token(first_added as usize + i, content, special))
        .collect();
    let split = |regex: &str, trim_offsets: bool| {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": trim_offsets, "use_regex": false}
        ]})
    };
    let decoder = json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true});
    match pre {
        "llama-bpe" | "llama3" | "tekken" => {
            let bos = family.bos;
            // Tekken: the special tokens come first in Mistral's files; here after the learned
            // ones, as in every tiny style (ids are the GGUF's either way).
            let regex = if pre == "tekken" { TEKKEN_SPLIT } else { LLAMA3_SPLIT };
            let bos_id = first_added + family.added.iter().position(|&(t, _)| t == bos).unwrap_or(0) as u32;
            json!({
                "version": "1.0", "truncation": null, "padding": null,
                "added_tokens": added,
                "normalizer": null,
                "pre_tokenizer": split(regex, true),
                "post_processor": {"type": "Sequence", "processors": [
                    {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
                    {"type": "TemplateProcessing",
                     "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                     "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                              {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                     "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}
                ]},
                "decoder": decoder,
                "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                          "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
                          "vocab": vocab, "merges": merges}
            })
        }
        // GLM-4: Llama 3's split and ignore_merges, no BOS.
        "glm4" => json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": split(LLAMA3_SPLIT, false),
            "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
            "decoder": decoder,
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
                      "vocab": vocab, "merges": merges}
        }),
        // Phi-4 (cl100k: Llama 3's split) and Phi-4-mini (o200k), as tiktoken converts: plain
        // BPE, no normalizer.
        "dbrx" | "gpt-4o" => json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": split(if pre == "dbrx" { LLAMA3_SPLIT } else { GPT4O_SPLIT }, false),
            "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
            "decoder": decoder,
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                      "vocab": vocab, "merges": merges}
        }),
        "qwen2" => json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": added,
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": split(QWEN2_SPLIT, false),
            "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
            "decoder": decoder,
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
                      "vocab": vocab, "merges": merges}
        }),
        _ => json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
            "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
            "decoder": decoder,
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
                      "vocab": vocab, "merges": merges}
        }),
    }
}

/// transformers' `generate_merges(vocab, vocab_scores)`, step for step:
/// candidates per token in id order, each token's sorted by (left id, right
/// id), then a stable sort by (score, left length, right length), descending.
fn hf_generate_merges(tokens: &[String], scores: &[f32]) -> Vec<(String, String)> {
    let vocab: HashMap<&str, usize> = tokens.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();
    let mut merges: Vec<(&str, &str, f32)> = Vec::new();
    for (merge, &score) in tokens.iter().zip(scores) {
        let mut local: Vec<(&str, &str, f32)> = Vec::new();
        for (index, _) in merge.char_indices().skip(1) {
            let (l, r) = merge.split_at(index);
            if vocab.contains_key(l) && vocab.contains_key(r) {
                local.push((l, r, score));
            }
        }
        local.sort_by_key(|&(l, r, _)| (vocab[l], vocab[r]));
        merges.extend(local);
    }
    let key = |&(l, r, s): &(&str, &str, f32)| (s, l.chars().count(), r.chars().count());
    merges.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        kb.0.total_cmp(&ka.0).then(kb.1.cmp(&ka.1)).then(kb.2.cmp(&ka.2))
    });
    merges
        .into_iter()
        .map(|(l, r, _)| (l.to_string(), r.to_string()))
        .collect()
}

pub(super) fn spm_json(tokens: &[String], scores: &[f32]) -> Json {
    let vocab = vocab_map(tokens);
    // LlamaConverter gives <unk>, <s>, </s> a score of 0.
    let mut vocab_scores = scores.to_vec();
    vocab_scores[..3].fill(0.0);
    let merges: Vec<Json> = hf_generate_merges(tokens, &vocab_scores)
        .into_iter()
        .map(|(l, r)| json!([l, r]))
        .collect();
    let added: Vec<Json> = ["<unk>", "<s>", "</s>"]
        .iter()
        .enumerate()
        .map(|(i, content)| added_token(i, content, true))
        .collect();
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
        ]},
        "pre_tokenizer": null,
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}
        ]},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                  "vocab": vocab, "merges": merges}
    })
}

/// Gemma 4's `tokenizer.json`: spaces become `▁` (no prefix), the text splits into runs of
/// newlines and the rest, BPE over each with the merges in order (a run that is a token taken
/// whole) and byte fallback, every control and user-defined token an added one.
pub(super) fn gemma4_json(tokens: &[String], types: &[i32], merges: &[String]) -> Json {
    let vocab = vocab_map(tokens);
    let bos = tokens.iter().position(|t| t == "<bos>").unwrap_or(0);
    let merges: Vec<Json> = merges
        .iter()
        .filter_map(|m| m.split_once(' '))
        .map(|(l, r)| json!([l, r]))
        .collect();
    let added: Vec<Json> = tokens
        .iter()
        .zip(types)
        .enumerate()
        .filter(|(_, (_, &ty))| matches!(ty, 2..=4))
        .map(|(i, (content, &ty))| added_token(i, content, ty != 4))
        .collect();
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\n+"}, "behavior": "Isolated", "invert": false},
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<bos>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<bos>": {"id": "<bos>", "ids": [bos], "tokens": ["<bos>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"}
        ]},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": true,
                  "vocab": vocab, "merges": merges}
    })
}

/// BERT's `tokenizer.json` (as `bert-base-uncased`'s): WordPiece over `##` continuations,
/// BERT's normalizer and pre-tokenizer, `[CLS] $A [SEP]`, the WordPiece decoder.
pub(super) fn bert_json(pieces: &[String], specials: &[&str]) -> Json {
    let vocab = vocab_map(pieces);
    let added: Vec<Json> = specials
        .iter()
        .enumerate()
        .map(|(i, s)| added_token(i, s, true))
        .collect();
    let id = |t: &str| specials.iter().position(|s| *s == t);
    let (cls, sep) = (id("[CLS]"), id("[SEP]"));
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                       "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [cls], "tokens": ["[CLS]"]},
                               "[SEP]": {"id": "[SEP]", "ids": [sep], "tokens": ["[SEP]"]}}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_merge_order_matches_python() {
        // generate_merges on a toy vocab, checked by hand against the Python.
        let tokens: Vec<String> = ["a", "b", "c", "ab", "bc", "abc"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let scores = [0.0, 0.0, 0.0, -1.0, -2.0, -3.0];
        let m = hf_generate_merges(&tokens, &scores);
        let pairs: Vec<(&str, &str)> = m.iter().map(|(l, r)| (l.as_str(), r.as_str())).collect();
        assert_eq!(pairs, [("a", "b"), ("b", "c"), ("ab", "c"), ("a", "bc")]);
    }
}
