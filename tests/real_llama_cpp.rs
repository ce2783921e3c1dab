//! hearth against llama.cpp on two real models: SmolLM2-135M-Instruct Q4_1 (`llama`) and
//! Gemma 3 270M Q4_K_M (`gemma3`, sliding-window layers; one prompt is 2,289 tokens, over four
//! of its 512-token windows).
//!
//! The references in `tests/data/llama-cpp-*.json` were recorded once by
//! `scripts/record-llama-references.py` (llama.cpp version and commands inside): for raw-text
//! and chat prompts, llama.cpp's prompt tokens, rendered chat text, 32 greedy tokens and the
//! top 10 log-probabilities at each of them, with K/V f32 (flash attention off, so f32 is really
//! f32) and with llama.cpp's default K/V (f16).
//!
//! On the CPU by default; with `HEARTH_TEST_DEVICE=cuda` (a `cuda` build) on the GPU, against
//! the same references and tolerances.
//!
//! Checked per prompt, against the run with the same K/V type on our side (f32; f16, our
//! default too): our tokens equal llama.cpp's; our rendered chat text equals its (after the BOS
//! text, which llama.cpp strips from what it shows); teacher-forced on llama.cpp's tokens, our
//! log-probabilities of its top 10 are within `LOGPROB_TOL`, and our greedy pick is llama.cpp's
//! at every position, or, where its own top two are within `NEAR_TIE` (a near-tie that any
//! change of float order flips), one of that pair: those positions are printed.

mod common;

use std::path::Path;

use common::llama_ref::AgainstLlama;
use hearth::bench::teacher_forced_logits;
use hearth::config::KvDtype;
use hearth::model::chat::{Message, Role};
use hearth::model::source::{resolve, ModelSource};
use hearth::model::LoadedModel;
use serde_json::Value;

/// Largest difference allowed between our log-probability of one of llama.cpp's top tokens
/// and its own. Both quantize activations to 8 bits before the quantized matmuls, in different
/// blocks and orders; the largest seen on these files is 0.94 (Gemma, f16 K/V).
const LOGPROB_TOL: f64 = 1.25;
/// The tokens compared: llama.cpp's top 10 down to this log-probability (p ≈ 3·10⁻⁴). Further
/// down, both sides' tails are noise (SmolLM2 f16 differs by 1.5 at log p = −14).
const COMPARED_ABOVE: f64 = -8.0;
/// llama.cpp's top-two log-probability gap under which either pick is right
/// (llama.cpp's f16 K/V path rounds Q to f16 too, so its f16 run sits further from ours.)
const NEAR_TIE: f64 = 0.5;

fn check_model(test: &str, file: &str, reference: &str) {
    let Some(path) = common::real::real_model(test, file) else {
        return;
    };
    let data: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(reference)).unwrap(),
    )
    .unwrap();
    let resolved = resolve(&ModelSource::Local(path), &Default::default()).unwrap();
    let device = common::real::test_device();
    let model = LoadedModel::load(&resolved, &device, None).unwrap();
    for (run, dtype) in [("f32", KvDtype::F32), ("default", KvDtype::DEFAULT)] {
        let cases = data["runs"][run]["cases"].as_array().unwrap();
        let context = format!("{file} K/V {dtype} on {device:?} (llama.cpp {run})");
        let mut seen = AgainstLlama::default();
        for (ci, case) in cases.iter().enumerate() {
            let what = format!("{context} prompt {ci}");
            let expect_ids: Vec<u32> = serde_json::from_value(case["prompt_ids"].clone()).unwrap();
            let ids = match case["kind"].as_str().unwrap() {
                "raw" => model.prompt_ids(case["text"].as_str().unwrap(), false).unwrap(),
                _ => {
                    let messages: Vec<Message> = case["messages"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|m| Message::new(Role::parse(m["role"].as_str().unwrap()), m["content"].as_str().unwrap()))
                        .collect();
                    let rendered = model.chat_template.render(&messages, true).unwrap();
                    // llama.cpp shows the text without the BOS the tokenizer adds anyway.
                    let bos = model.chat_template.bos_token();
                    let shown = match model.tokenizer.add_bos() {
                        true => rendered.strip_prefix(bos).unwrap_or(&rendered),
                        false => &rendered,
                    };
                    assert_eq!(shown, case["rendered"].as_str().unwrap(), "{what}: rendered chat text");
                    model.chat_ids(&messages).unwrap()
                }
            };
            assert_eq!(ids, expect_ids, "{what}: prompt tokens");

            let tokens: Vec<u32> = serde_json::from_value(case["tokens"].clone()).unwrap();
            let logits = teacher_forced_logits(&model.transformer, &ids, &tokens, dtype).unwrap();
            for (i, (row, top)) in logits.iter().zip(case["top_logprobs"].as_array().unwrap()).enumerate() {
                let top: Vec<(usize, f64)> = serde_json::from_value(top.clone()).unwrap();
                // llama.cpp's own greedy pick is its top log-probability (its sampled token
                // differs only where `ignore_eos` kept it from ending the reply).
                seen.position(&context, &format!("prompt {ci} token {i}"), row, &top, COMPARED_ABOVE, NEAR_TIE);
            }
        }
        eprintln!(
            "{file} K/V {dtype}: {} prompts; largest log-probability difference {:.3} ({}); near-ties taken the other way: {}",
            cases.len(),
            seen.worst.0,
            seen.worst.1,
            seen.ties_line()
        );
        assert!(seen.worst.0 < LOGPROB_TOL, "{}", seen.worst.1);
    }
}

#[test]
fn smollm2_matches_llama_cpp() {
    check_model(
        "smollm2_matches_llama_cpp",
        common::real::SMOLLM2,
        "llama-cpp-smollm2.json",
    );
}

#[test]
fn gemma3_matches_llama_cpp() {
    check_model(
        "gemma3_matches_llama_cpp",
        common::real::GEMMA3,
        "llama-cpp-gemma3.json",
    );
}
