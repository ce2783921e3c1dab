//! Encoder embedding models (BERT's `bert`, with WordPiece or, as XLM-RoBERTa's and bge-m3's,
//! SentencePiece Unigram vocabularies; nomic-embed-text's `nomic-bert`): llama.cpp's ids
//! and vectors on the same files; an input read whole, however long and whatever runs beside
//! it; nothing cached (an encoder's K/V depends on the tokens after it); no text generated.
//!
//! The reference `tests/data/llama-cpp-encoders.json` was recorded once by
//! `scripts/record-llama-embeddings.py --encoders` (llama.cpp version and command inside) on
//! the files `encoder_embeddings_match_llama_cpp` writes into `HEARTH_WRITE_TINY_MODELS=DIR`:
//! `llama-server --embeddings`' unit vectors for token-id inputs and texts, and the ids its
//! `/tokenize` gives each text with special tokens (`[CLS] … [SEP]`). The same run writes the
//! BERT-base-sized files README's encoder benchmark runs.

mod common;

use common::*;
use hearth::config::EngineSettings;
use hearth::engine::{Engine, EngineHandle, Event, GenerateParams, GenerateRequest, GenerationReport};
use hearth::model::pooling::{normalize, Pooling};
use hearth::model::testkit::{TinyModelSpec, WeightType};
use hearth::ops::{BatchLayout, ContiguousBatch};
use serde_json::Value;

/// The reference files: name, spec.
fn reference_models() -> Vec<(&'static str, TinyModelSpec)> {
    vec![
        (
            "tiny-bert-mean-f32.gguf",
            TinyModelSpec::encoder("bert", 1, WeightType::F32),
        ),
        (
            "tiny-bert-cls-q8_0.gguf",
            TinyModelSpec::encoder("bert", 2, WeightType::Q8_0),
        ),
        (
            "tiny-bert-mean-q6_k.gguf",
            TinyModelSpec::encoder("bert", 1, WeightType::Q6K),
        ),
        (
            "tiny-nomic-mean-f32.gguf",
            TinyModelSpec::encoder("nomic-bert", 1, WeightType::F32),
        ),
        (
            "tiny-nomic-mean-q8_0.gguf",
            TinyModelSpec::encoder("nomic-bert", 1, WeightType::Q8_0),
        ),
        (
            "tiny-xlmr-cls-f32.gguf",
            TinyModelSpec::encoder_xlmr(2, WeightType::F32),
        ),
        (
            "tiny-xlmr-mean-q8_0.gguf",
            TinyModelSpec::encoder_xlmr(1, WeightType::Q8_0),
        ),
        (
            "tiny-nomic-moe-mean-f32.gguf",
            TinyModelSpec::encoder_nomic_moe(1, WeightType::F32),
        ),
        (
            "tiny-nomic-moe-mean-q8_0.gguf",
            TinyModelSpec::encoder_nomic_moe(1, WeightType::Q8_0),
        ),
        (
            "tiny-jina-v3-mean-f32.gguf",
            TinyModelSpec::encoder_jina_v3(1, WeightType::F32),
        ),
        (
            "tiny-jina-v3-cls-q8_0.gguf",
            TinyModelSpec::encoder_jina_v3(2, WeightType::Q8_0),
        ),
        (
            "tiny-jina-v2-mean-f32.gguf",
            TinyModelSpec::encoder_jina_v2(1, WeightType::F32, false),
        ),
        (
            "tiny-jina-v2-mean-q8_0.gguf",
            TinyModelSpec::encoder_jina_v2(1, WeightType::Q8_0, false),
        ),
        (
            "tiny-jina-v2-code-mean-f32.gguf",
            TinyModelSpec::encoder_jina_v2(1, WeightType::F32, true),
        ),
        (
            "tiny-modern-bert-mean-f32.gguf",
            TinyModelSpec::encoder_modern_bert(1, WeightType::F32),
        ),
        (
            "tiny-modern-bert-cls-q8_0.gguf",
            TinyModelSpec::encoder_modern_bert(2, WeightType::Q8_0),
        ),
    ]
}

/// The cross-encoders (rerankers of pooling type rank): name, spec.
fn rerank_models() -> Vec<(&'static str, TinyModelSpec)> {
    vec![
        (
            "tiny-bert-rerank-f32.gguf",
            TinyModelSpec::encoder_reranker(false, WeightType::F32),
        ),
        (
            "tiny-xlmr-rerank-f32.gguf",
            TinyModelSpec::encoder_reranker(true, WeightType::F32),
        ),
        (
            "tiny-xlmr-rerank-q8_0.gguf",
            TinyModelSpec::encoder_reranker(true, WeightType::Q8_0),
        ),
        // K-quants (a Q4_K_M file's `cls.weight`): the head's input rounded as ggml's Q8_K.
        (
            "tiny-xlmr-rerank-q4_k.gguf",
            TinyModelSpec::encoder_reranker(true, WeightType::Q4K),
        ),
        (
            "tiny-bert-rerank-q6_k.gguf",
            TinyModelSpec::encoder_reranker(false, WeightType::Q6K),
        ),
        (
            "tiny-jina-v2-rerank-f32.gguf",
            TinyModelSpec::encoder_jina_v2(4, WeightType::F32, false),
        ),
        (
            "tiny-modern-bert-rerank-mean-f32.gguf",
            TinyModelSpec::encoder_modern_bert(4, WeightType::F32),
        ),
        (
            "tiny-modern-bert-rerank-cls-q8_0.gguf",
            TinyModelSpec::encoder_modern_bert(4, WeightType::Q8_0),
        ),
    ]
}

/// The files of README's encoder benchmark (`scripts/bench-embeddings-vs-llama-cpp.py`), written
/// with the reference files: random weights at BERT-base's size and nomic-embed-text-v2-moe's.
fn bench_models() -> Vec<(&'static str, TinyModelSpec)> {
    vec![
        (
            "bert-base-f16.gguf",
            TinyModelSpec::encoder_base("bert", WeightType::F16),
        ),
        (
            "bert-base-q8_0.gguf",
            TinyModelSpec::encoder_base("bert", WeightType::Q8_0),
        ),
        (
            "nomic-base-f16.gguf",
            TinyModelSpec::encoder_base("nomic-bert", WeightType::F16),
        ),
        (
            "nomic-moe-base-f16.gguf",
            TinyModelSpec::encoder_nomic_moe_base(WeightType::F16),
        ),
        (
            "nomic-moe-base-q8_0.gguf",
            TinyModelSpec::encoder_nomic_moe_base(WeightType::Q8_0),
        ),
    ]
}

fn reference() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/llama-cpp-encoders.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn embed(e: &mut Engine, prompt: &[u32]) -> GenerationReport {
    let pooling = e.model().transformer.hparams().pooling.unwrap();
    e.generate(prompt, &GenerateParams::embedding(pooling), |_| Ok(()))
        .unwrap()
}

/// An engine on the file `spec` writes into `dir` as `name`, checked to be the one recorded in
/// `want` (its size).
fn recorded_engine(dir: &std::path::Path, name: &str, spec: &TinyModelSpec, want: &Value) -> Engine {
    let path = write_tiny(dir, spec, name);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        want["bytes"].as_u64().unwrap(),
        "{name}: not the recorded file"
    );
    engine(&path, true, 64, 0)
}

/// A recorded list of token ids.
fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn vector(r: &GenerationReport) -> Vec<f32> {
    r.embedding.clone().expect("an embedding's report carries its vector")
}

/// Our ids and unit vectors against llama.cpp's on the same files: the same ids for every text,
/// vectors within float rounding in f32, within the 8-bit activations' rounding in Q8_0.
#[test]
fn encoder_embeddings_match_llama_cpp() {
    if let Ok(dir) = std::env::var("HEARTH_WRITE_TINY_MODELS") {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, spec) in reference_models().into_iter().chain(rerank_models()).chain(bench_models()) {
            hearth::model::testkit::write_model(&spec, &std::path::Path::new(&dir).join(name)).unwrap();
        }
        eprintln!("wrote the tiny encoders and the benchmark files (BERT-base-sized, nomic-embed-text-v2-moe-sized) into {dir}");
        return;
    }
    let data = reference();
    let inputs = data["inputs"].as_array().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, spec) in reference_models() {
        let want = &data["models"][name];
        let mut e = recorded_engine(dir.path(), name, &spec, want);
        let mut their_tokens = want["tokens"].as_array().unwrap().iter();
        let mut tokens = 0;
        for (i, (input, theirs)) in inputs.iter().zip(want["embeddings"].as_array().unwrap()).enumerate() {
            let ids: Vec<u32> = match input {
                Value::String(text) => {
                    let ids = e.model().tokenizer.encode_for_embedding(text).unwrap();
                    let theirs = ids_of(their_tokens.next().unwrap());
                    assert_eq!(ids, theirs, "{name}: {text:?} tokenized otherwise than by llama.cpp");
                    ids
                }
                ids => ids_of(ids),
            };
            tokens += ids.len();
            let mut ours = vector(&embed(&mut e, &ids));
            normalize(&mut ours);
            let theirs: Vec<f32> = theirs
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            let (d, cos) = (max_abs_diff(&ours, &theirs), cosine(&ours, &theirs));
            eprintln!("{name} input {i}: max |diff| {d:.2e}, cosine {cos:.7}");
            let tol = if name.ends_with("f32.gguf") { 1e-4 } else { 2e-2 };
            assert!(d < tol, "{name} input {i}: max |diff| {d} (cosine {cos})");
        }
        assert_eq!(
            tokens as u64,
            want["prompt_tokens"].as_u64().unwrap(),
            "{name}: llama.cpp counted other tokens"
        );
    }
}

/// Cross-encoders (BERT's head: one logit; XLM-RoBERTa's, bge-reranker's: a dense layer, tanh,
/// one logit; ModernBERT's: a dense layer, GELU, a LayerNorm, one logit) score each document
/// against the query as llama.cpp does: the pair's prompt (`[CLS] q … d [SEP]`, `<s> q </s></s>
/// d </s>`) read whole, its first row (or ModernBERT's mean of rows, where the file says so)
/// through the head, the raw logit the score; the same tokens counted.
#[test]
fn cross_encoder_scores_match_llama_cpp() {
    let data = reference();
    let rerank = &data["rerank"];
    let query = rerank["query"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, spec) in rerank_models() {
        let want = &rerank["models"][name];
        let mut e = recorded_engine(dir.path(), name, &spec, want);
        let hp = e.model().transformer.hparams();
        // ModernBERT's head may pool the rows' mean (`classifier.pooling_type`).
        let pooling = if name.contains("rerank-mean") { Pooling::Mean } else { Pooling::Cls };
        assert_eq!((hp.rank.map(|r| r.labels), hp.rank_pooling()), (Some(1), pooling));
        let mut tokens = 0;
        let mut scores = Vec::new();
        let documents = rerank["documents"].as_array().unwrap();
        for (i, (doc, theirs)) in documents.iter().zip(want["scores"].as_array().unwrap()).enumerate() {
            let ids = e.model().rank_ids(query, doc.as_str().unwrap()).unwrap();
            tokens += ids.len();
            let row = e
                .generate(&ids, &GenerateParams::embedding(pooling), |_| Ok(()))
                .unwrap()
                .embedding
                .unwrap();
            let ours = e.model().transformer.rank_score(&row).unwrap();
            let theirs = theirs.as_f64().unwrap() as f32;
            eprintln!("{name} document {i}: ours {ours:.6}, llama.cpp {theirs:.6}");
            // (A raw logit, not a unit vector: BERT's GELU, which ggml looks up in an f16 table,
            // moves it by up to 7·10⁻⁴ in f32. In Q8_0 the trunk's rounding, which leaves unit
            // vectors within 1.5·10⁻³ of llama.cpp's, reaches the logit enlarged, most through
            // ModernBERT's head, whose LayerNorm divides by the spread of the dense layer's
            // output, and BERT's, a logit of the normed row without a tanh.)
            let tol = match (name.ends_with("f32.gguf"), name.contains("modern-bert") || name.contains("bert-rerank")) {
                (true, _) => 1e-3,
                (false, false) => 2e-2,
                (false, true) => 3e-2,
            };
            assert!((ours - theirs).abs() < tol, "{name} document {i}: {ours} against {theirs}");
            scores.push(ours);
        }
        assert_eq!(
            tokens as u64,
            want["prompt_tokens"].as_u64().unwrap(),
            "{name}: llama.cpp built the pairs' prompts otherwise"
        );
        let spread = scores.iter().fold(f32::MIN, |m, s| m.max(*s)) - scores.iter().fold(f32::MAX, |m, s| m.min(*s));
        assert!(spread > 0.05, "{name}: scores {scores:?}");
        // The documents in llama.cpp's order.
        let order = |s: &[f32]| {
            let mut idx: Vec<usize> = (0..s.len()).collect();
            idx.sort_by(|a, b| s[*b].total_cmp(&s[*a]));
            idx
        };
        let theirs: Vec<f32> = want["scores"].as_array().unwrap().iter().map(|s| s.as_f64().unwrap() as f32).collect();
        assert_eq!(order(&scores), order(&theirs), "{name}: ranked otherwise");
    }
}

/// XLM-RoBERTa's SentencePiece Unigram vocabulary (bge-m3's) as llama.cpp tokenizes it, on
/// the fixture's texts (full-width letters, ligatures, a decomposed accent, other spaces,
/// deleted zero-width characters, unknown letters, CJK): `<s>`, the text's ids, `</s>`.
#[test]
fn unigram_vocabulary_tokenizes_as_llama_cpp() {
    let data = reference();
    let dir = tempfile::tempdir().unwrap();
    let name = "tiny-xlmr-cls-f32.gguf";
    let path = write_tiny(dir.path(), &TinyModelSpec::encoder_xlmr(2, WeightType::F32), name);
    let e = engine(&path, true, 64, 0);
    let recorded = data["models"][name]["unigram_tokens"].as_array().unwrap();
    assert!(recorded.len() > 10);
    for r in recorded {
        let text = r["text"].as_str().unwrap();
        let ours = e.model().tokenizer.encode_for_embedding(text).unwrap();
        assert_eq!(ours, ids_of(&r["tokens"]), "{text:?}");
    }
}

/// The rows an encoder pools from one direct forward over all of `prompt`.
fn direct_rows(path: &std::path::Path, prompt: &[u32]) -> Vec<Vec<f32>> {
    let tf = load_ours(path, 128);
    let mut kv = new_kv(&tf, prompt.len());
    let batch = BatchLayout::single(0, prompt.len()).unwrap();
    let rows: Vec<u32> = (0..prompt.len() as u32).collect();
    let (_, hidden) = tf
        .forward_outputs(
            prompt,
            &batch,
            &mut ContiguousBatch::new(vec![&mut kv]),
            &mut [],
            None,
            &rows,
        )
        .unwrap();
    hidden.unwrap().to_vec2().unwrap()
}

fn mean(rows: &[Vec<f32>]) -> Vec<f32> {
    let mut sum = vec![0f32; rows[0].len()];
    for r in rows {
        sum.iter_mut().zip(r).for_each(|(s, v)| *s += v);
    }
    sum.iter().map(|s| s / rows.len() as f32).collect()
}

/// A tiny mean-pooled f32 encoder of `arch` written into `dir`.
fn f32_encoder(dir: &std::path::Path, arch: &'static str) -> std::path::PathBuf {
    write_tiny(
        dir,
        &TinyModelSpec::encoder(arch, 1, WeightType::F32),
        &format!("{arch}.gguf"),
    )
}

/// Each token sees the ones after it: changing the last token changes the first row (a causal
/// model's first row would not move).
#[test]
fn an_encoder_attends_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    for arch in ["bert", "nomic-bert"] {
        let path = f32_encoder(dir.path(), arch);
        let a = direct_rows(&path, &[2, 40, 41, 42, 3]);
        let b = direct_rows(&path, &[2, 40, 41, 43, 3]);
        let d = max_abs_diff(&a[0], &b[0]);
        assert!(d > 1e-3, "{arch}: the first row did not see the change after it ({d})");
    }
}

/// Through the engine, with a step budget smaller than the inputs and several inputs queued
/// together, every input is read whole: each vector equals one forward over all of it, alone
/// or beside others; the same input again is computed again (nothing is cached: the prefix
/// cache is off for an encoder), with the same vector.
#[test]
fn an_encoder_reads_each_input_whole() {
    let dir = tempfile::tempdir().unwrap();
    for arch in ["bert", "nomic-bert"] {
        let path = f32_encoder(dir.path(), arch);
        let limits = EngineSettings {
            max_running: 4,
            max_batch_tokens: 16,
            ..EngineSettings::default()
        };
        let mut e = engine_limits(&path, cache_settings(true, 16), &limits, 64, 0);
        let prompts: Vec<Vec<u32>> = [50usize, 7, 90]
            .iter()
            .map(|&n| (0..n as u32).map(|i| 5 + (i * 37 + n as u32) % 200).collect())
            .collect();
        let want: Vec<Vec<f32>> = prompts.iter().map(|p| mean(&direct_rows(&path, p))).collect();
        let alone: Vec<Vec<f32>> = prompts.iter().map(|p| vector(&embed(&mut e, p))).collect();
        let again = embed(&mut e, &prompts[0]);
        assert_eq!(again.cached.tokens, 0, "{arch}: an encoder's input came from the cache");
        assert!(max_abs_diff(&vector(&again), &want[0]) < 1e-4);
        let h = EngineHandle::spawn(e, 64).unwrap();
        let params = GenerateParams::embedding(Pooling::Mean);
        let mut streams: Vec<_> = prompts
            .iter()
            .map(|p| h.submit(GenerateRequest::new(p.clone(), params.clone())).unwrap())
            .collect();
        for (i, (s, p)) in streams.iter_mut().zip(&prompts).enumerate() {
            let together = loop {
                match s.blocking_recv() {
                    Some(Event::Done(r)) => break r,
                    Some(Event::Error(e)) => panic!("{arch} input {i}: {e}"),
                    Some(Event::Token { .. }) => {}
                    None => panic!("{arch} input {i} ended without a result"),
                }
            };
            let d = max_abs_diff(&alone[i], &want[i]);
            assert!(
                d < 1e-4,
                "{arch} input {i} ({} tokens) alone: off the whole forward by {d}",
                p.len()
            );
            let d = max_abs_diff(&vector(&together), &want[i]);
            assert!(
                d < 1e-4,
                "{arch} input {i} ({} tokens) beside the others: off the whole forward by {d}",
                p.len()
            );
        }
    }
}

/// A request for text is refused, naming the reason; the engine serves embeddings after it.
#[test]
fn an_encoder_generates_no_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_tiny(
        dir.path(),
        &TinyModelSpec::encoder("bert", 1, WeightType::F32),
        "bert.gguf",
    );
    let mut e = engine(&path, true, 64, 0);
    let err = e
        .generate(&[2, 40, 41], &GenerateParams::greedy(4), |_| Ok(()))
        .unwrap_err();
    assert!(err.to_string().contains("serves embeddings only"), "{err}");
    assert_eq!(vector(&embed(&mut e, &[2, 40, 41, 3])).len(), 256);
}
