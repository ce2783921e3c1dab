//! Sentence embeddings through the engine: each pooling equals the same rows of one forward
//! over the whole prompt, however the engine cuts the prompt into chunks; last-token pooling
//! from the prefix cache (device and host tiers, and a cache file after a restart) equals a prefill; mean and first-token pooling
//! never read the cache; and every pooling gives llama.cpp's vectors on the same files.
//!
//! The reference `tests/data/llama-cpp-embeddings.json` was recorded once by
//! `scripts/record-llama-embeddings.py` (llama.cpp version and command inside) on the files
//! `embeddings_match_llama_cpp` writes into `HEARTH_WRITE_TINY_MODELS=DIR`: `llama-server
//! --embeddings`' unit vectors for token-id inputs and for texts it tokenized itself (BOS and
//! EOS as the file says), which hearth tokenizes as its `/v1/embeddings` does; and, on tiny
//! rerankers, `llama-server --rerank`'s scores of a query against four documents.

mod common;

use common::*;
use hearth::config::EngineSettings;
use hearth::engine::{
    ConversationId, DiskSettings, Engine, GenerateParams, GenerateRequest, GenerationReport, Message, Role, SaveTo,
};
use hearth::model::pooling::Pooling;
use hearth::model::testkit::{TinyModelSpec, WeightType};
use hearth::model::pooling::normalize;
use hearth::ops::{BatchLayout, ContiguousBatch};
use serde_json::Value;

/// F32 weights: the engine's rows and the direct forward's differ by float rounding only.
const TOL: f32 = 1e-4;

const POOLINGS: [(u32, Pooling); 3] = [(1, Pooling::Mean), (2, Pooling::Cls), (3, Pooling::Last)];

/// A recorded llama.cpp reference in `tests/data`.
fn reference(file: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(file);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The prompt's final rows (after the final norm) from one forward over all of it.
fn direct_rows(path: &std::path::Path, prompt: &[u32]) -> Vec<Vec<f32>> {
    let tf = load_ours(path, 256);
    let mut kv = new_kv(&tf, prompt.len());
    let batch = BatchLayout::single(0, prompt.len()).unwrap();
    let rows: Vec<u32> = (0..prompt.len() as u32).collect();
    let (logits, hidden) = tf
        .forward_outputs(prompt, &batch, &mut ContiguousBatch::new(vec![&mut kv]), &mut [], None, &rows)
        .unwrap();
    assert!(logits.is_none());
    hidden.unwrap().to_vec2().unwrap()
}

fn pooled(rows: &[Vec<f32>], pooling: Pooling) -> Vec<f32> {
    match pooling {
        Pooling::Cls => rows[0].clone(),
        Pooling::Last => rows[rows.len() - 1].clone(),
        Pooling::Mean => {
            let mut sum = vec![0f32; rows[0].len()];
            for r in rows {
                sum.iter_mut().zip(r).for_each(|(s, v)| *s += v);
            }
            sum.iter().map(|s| s / rows.len() as f32).collect()
        }
    }
}

fn embed(e: &mut Engine, prompt: &[u32], pooling: Pooling) -> GenerationReport {
    e.generate(prompt, &GenerateParams::embedding(pooling), |_| Ok(())).unwrap()
}

fn vector(r: &GenerationReport) -> &[f32] {
    r.embedding.as_deref().expect("an embedding's report carries its vector")
}

#[test]
fn every_pooling_equals_the_whole_prompts_forward() {
    let dir = tempfile::tempdir().unwrap();
    for (ty, pooling) in POOLINGS {
        let spec = TinyModelSpec::embedding(ty, WeightType::F32);
        let path = write_tiny(dir.path(), &spec, &format!("embed-{ty}.gguf"));
        let p = prompt(45, spec.vocab.size, ty);
        let want = pooled(&direct_rows(&path, &p), pooling);
        // Whole, and in chunks of 16 (three forwards, the last one short).
        let small = EngineSettings {
            max_batch_tokens: 16,
            max_running: 4,
            ..EngineSettings::default()
        };
        for (what, mut e) in [
            ("whole", engine(&path, false, 64, 0)),
            ("chunked", engine_limits(&path, cache_settings(false, 16), &small, 64, 0)),
        ] {
            let r = embed(&mut e, &p, pooling);
            assert!(r.tokens.is_empty(), "{pooling:?} {what}: an embedding generates nothing");
            assert_eq!(r.prompt_tokens, p.len());
            let got = vector(&r);
            assert_eq!(got.len(), spec.hidden);
            let d = max_abs_diff(got, &want);
            assert!(d < TOL, "{pooling:?} {what}: max |diff| {d}");
            assert_blocks_released(&e.cache_stats(), what);
        }
    }
}

#[test]
fn last_token_pooling_from_the_cache_equals_a_prefill() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::embedding(3, WeightType::Q8_0);
    let path = write_tiny(dir.path(), &spec, "embed-last.gguf");
    let p = prompt(48, spec.vocab.size, 7);
    let mut cold = engine(&path, false, 64, 0);
    let want = embed(&mut cold, &p, Pooling::Last);
    assert_eq!(want.cached.tokens, 0);

    // Device tier: the same input again, every block but the last token's from the cache.
    let mut e = engine(&path, true, 8, 16);
    let first = embed(&mut e, &p, Pooling::Last);
    assert_eq!(vector(&first), vector(&want), "a cold run of the cached engine");
    let again = embed(&mut e, &p, Pooling::Last);
    assert!(again.cached.device_tokens >= 32, "{:?}", again.cached);
    let d = max_abs_diff(vector(&again), vector(&want));
    assert!(d < 2e-3, "device tier: max |diff| {d}");

    // Host tier: four other inputs push its blocks out of the 8-block device pool.
    for salt in [8, 9, 10, 11] {
        embed(&mut e, &prompt(48, spec.vocab.size, salt), Pooling::Last);
    }
    let from_host = embed(&mut e, &p, Pooling::Last);
    assert!(from_host.cached.host_tokens > 0, "{:?}", from_host.cached);
    let d = max_abs_diff(vector(&from_host), vector(&want));
    assert!(d < 2e-3, "host tier: max |diff| {d}");
    assert_blocks_released(&e.cache_stats(), "host tier");

    // A chat request over the same text is served from the blocks the embedding left.
    let chat = e.generate(&p, &greedy(1), |_| Ok(())).unwrap();
    assert!(chat.cached.tokens >= 32, "{:?}", chat.cached);
}

/// Disk tier: a conversation saved on an embedding model leaves its K/V in a cache file; after
/// a restart (a new engine, its RAM tiers empty), a last-token embedding of the same text
/// reads those blocks from the file and equals a prefill's.
#[test]
fn last_token_pooling_from_a_cache_file_equals_a_prefill() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::embedding(3, WeightType::F32);
    let path = write_tiny(dir.path(), &spec, "embed-last-f32.gguf");
    let p = prompt(48, spec.vocab.size, 12);
    let want = embed(&mut engine(&path, false, 64, 0), &p, Pooling::Last);
    let disk = DiskSettings::new(dir.path().join("data"), 1 << 30);

    let mut first = engine(&path, true, 64, 16).with_disk(&disk).unwrap();
    let saved = GenerateRequest {
        prompt: p.clone(),
        params: greedy_exactly(2),
        save: Some(SaveTo {
            conversation: ConversationId::parse("embed-1").unwrap(),
            messages: Some(vec![Message::new(Role::User, "the text")]),
        }),
    };
    first.run(saved, |_| Ok(())).unwrap();
    first.flush_disk();
    assert_eq!(first.stats().disk.unwrap().files_written, 1);
    drop(first);

    let mut second = engine(&path, true, 64, 16).with_disk(&disk).unwrap();
    let from_disk = embed(&mut second, &p, Pooling::Last);
    assert_eq!(from_disk.cached.disk_tokens, 32, "{:?}", from_disk.cached);
    let d = max_abs_diff(vector(&from_disk), vector(&want));
    assert!(d < TOL, "disk tier: max |diff| {d}");
    assert_blocks_released(&second.cache_stats(), "disk tier");
}

#[test]
fn mean_and_first_token_pooling_never_read_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    for (ty, pooling) in [(1, Pooling::Mean), (2, Pooling::Cls)] {
        let spec = TinyModelSpec::embedding(ty, WeightType::Q8_0);
        let path = write_tiny(dir.path(), &spec, &format!("embed-{ty}.gguf"));
        let p = prompt(40, spec.vocab.size, 3);
        let mut e = engine(&path, true, 64, 0);
        let first = embed(&mut e, &p, pooling);
        let again = embed(&mut e, &p, pooling);
        assert_eq!(again.cached.tokens, 0, "{pooling:?}");
        assert_eq!(vector(&again), vector(&first), "{pooling:?}");
        // It filled the cache all the same: a chat request over the same text hits.
        let chat = e.generate(&p, &greedy(1), |_| Ok(())).unwrap();
        assert!(chat.cached.tokens >= 32, "{pooling:?}: {:?}", chat.cached);
    }
}

#[test]
fn an_embedding_request_generates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::embedding(3, WeightType::Q8_0);
    let path = write_tiny(dir.path(), &spec, "embed.gguf");
    let mut e = engine(&path, true, 64, 0);
    let params = GenerateParams {
        max_tokens: 4,
        ..GenerateParams::embedding(Pooling::Last)
    };
    let err = e.generate(&prompt(8, spec.vocab.size, 1), &params, |_| Ok(())).unwrap_err();
    assert!(err.to_string().contains("max_tokens must be 0"), "{err}");
}

/// The reference files: name, spec.
fn reference_models() -> Vec<(&'static str, TinyModelSpec)> {
    vec![
        ("tiny-embed-mean-f32.gguf", TinyModelSpec::embedding(1, WeightType::F32)),
        ("tiny-embed-cls-f32.gguf", TinyModelSpec::embedding(2, WeightType::F32)),
        ("tiny-embed-last-f32.gguf", TinyModelSpec::embedding(3, WeightType::F32)),
        ("tiny-embed-mean-q8_0.gguf", TinyModelSpec::embedding(1, WeightType::Q8_0)),
        ("tiny-embed-last-q8_0.gguf", TinyModelSpec::embedding(3, WeightType::Q8_0)),
        ("tiny-gemma-embed-f32.gguf", TinyModelSpec::gemma_embedding(WeightType::F32)),
        ("tiny-gemma-embed-q8_0.gguf", TinyModelSpec::gemma_embedding(WeightType::Q8_0)),
    ]
}

/// Our unit vectors against llama.cpp's on the same files: within float rounding in f32 (K/V
/// f32 on both sides), within the 8-bit activations' rounding in Q8_0.
#[test]
fn embeddings_match_llama_cpp() {
    if let Ok(dir) = std::env::var("HEARTH_WRITE_TINY_MODELS") {
        std::fs::create_dir_all(&dir).unwrap();
        let bench = [
            ("gemma-embed-300m-f16.gguf", TinyModelSpec::gemma_embedding_base(WeightType::F16)),
            ("gemma-embed-300m-q8_0.gguf", TinyModelSpec::gemma_embedding_base(WeightType::Q8_0)),
        ];
        for (name, spec) in reference_models().into_iter().chain(rerank_models()).chain(bench) {
            hearth::model::testkit::write_model(&spec, &std::path::Path::new(&dir).join(name)).unwrap();
        }
        eprintln!("wrote the tiny embedding models, and EmbeddingGemma-300M-sized files for README's benchmark, into {dir}");
        return;
    }
    let data = reference("llama-cpp-embeddings.json");
    let inputs = data["inputs"].as_array().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, spec) in reference_models() {
        let want = &data["models"][name];
        let path = write_tiny(dir.path(), &spec, name);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), want["bytes"].as_u64().unwrap(), "{name}: not the recorded file");
        let mut e = engine(&path, true, 64, 0);
        let pooling = e.model().transformer.hparams().pooling.unwrap();
        let f32_weights = name.ends_with("f32.gguf");
        let mut tokens = 0;
        for (i, (input, theirs)) in inputs.iter().zip(want["embeddings"].as_array().unwrap()).enumerate() {
            let ids: Vec<u32> = match input {
                Value::String(text) => e.model().tokenizer.encode_for_embedding(text).unwrap(),
                ids => ids.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect(),
            };
            tokens += ids.len();
            let mut ours = vector(&embed(&mut e, &ids, pooling)).to_vec();
            normalize(&mut ours);
            let theirs: Vec<f32> = theirs.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
            let (d, cos) = (max_abs_diff(&ours, &theirs), cosine(&ours, &theirs));
            eprintln!("{name} input {i}: max |diff| {d:.2e}, cosine {cos:.7}");
            let tol = if f32_weights { 1e-5 } else { 1e-2 };
            assert!(d < tol, "{name} input {i}: max |diff| {d} (cosine {cos})");
        }
        assert_eq!(tokens as u64, want["prompt_tokens"].as_u64().unwrap(), "{name}: llama.cpp tokenized the texts otherwise");
    }
}

/// Embeddings batched with chat requests (prompts in chunks beside decodes, one forward for
/// all) give what each gives alone, and the chat requests their tokens alone.
#[test]
fn embeddings_batched_with_chat_equal_each_alone() {
    use hearth::engine::{EngineHandle, Event, GenerateRequest};
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::embedding(3, WeightType::F32);
    let path = write_tiny(dir.path(), &spec, "embed-mixed.gguf");
    let mut reqs = Vec::new();
    for i in 0..4u32 {
        reqs.push(GenerateRequest::new(prompt(20 + 9 * i as usize, spec.vocab.size, i), greedy_exactly(6)));
        let pooling = if i % 2 == 0 { Pooling::Mean } else { Pooling::Last };
        reqs.push(GenerateRequest::new(prompt(30 + 7 * i as usize, spec.vocab.size, 10 + i), GenerateParams::embedding(pooling)));
    }
    let alone: Vec<GenerationReport> = reqs
        .iter()
        .map(|r| engine(&path, false, 64, 0).generate(&r.prompt, &r.params, |_| Ok(())).unwrap())
        .collect();
    let limits = EngineSettings {
        max_running: 8,
        max_batch_tokens: 40,
        ..EngineSettings::default()
    };
    let h = EngineHandle::spawn(engine_limits(&path, cache_settings(true, 16), &limits, 96, 0), 64).unwrap();
    let mut streams: Vec<_> = reqs.iter().map(|r| h.submit(r.clone()).unwrap()).collect();
    for (i, (s, want)) in streams.iter_mut().zip(&alone).enumerate() {
        let got = loop {
            match s.blocking_recv() {
                Some(Event::Done(r)) => break r,
                Some(Event::Error(e)) => panic!("request {i}: {e}"),
                Some(Event::Token { .. }) => {}
                None => panic!("request {i} ended without a result"),
            }
        };
        assert_eq!(got.tokens, want.tokens, "request {i}");
        match (&got.embedding, &want.embedding) {
            (Some(a), Some(b)) => {
                let d = max_abs_diff(a, b);
                assert!(d < TOL, "request {i}: max |diff| {d}");
            }
            (None, None) => {}
            _ => panic!("request {i}: an embedding on one side only"),
        }
    }
}

/// The reranker files: name, spec.
fn rerank_models() -> Vec<(&'static str, TinyModelSpec)> {
    vec![
        ("tiny-rerank-f32.gguf", TinyModelSpec::reranker(WeightType::F32)),
        ("tiny-rerank-q8_0.gguf", TinyModelSpec::reranker(WeightType::Q8_0)),
    ]
}

/// A reranker's scores (the rerank template's prompt, the last row through the classifier
/// head, the softmax's first label) against llama.cpp's on the same files.
#[test]
fn rerank_scores_match_llama_cpp() {
    let data = reference("llama-cpp-embeddings.json");
    let rerank = &data["rerank"];
    let query = rerank["query"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, spec) in rerank_models() {
        let want = &rerank["models"][name];
        let path = write_tiny(dir.path(), &spec, name);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), want["bytes"].as_u64().unwrap(), "{name}: not the recorded file");
        let mut e = engine(&path, true, 64, 0);
        assert_eq!(e.model().transformer.hparams().rank.map(|r| r.labels), Some(2));
        let mut tokens = 0;
        let mut scores = Vec::new();
        for (i, (doc, theirs)) in rerank["documents"].as_array().unwrap().iter().zip(want["scores"].as_array().unwrap()).enumerate() {
            let ids = e.model().rank_ids(query, doc.as_str().unwrap()).unwrap();
            tokens += ids.len();
            let row = vector(&embed(&mut e, &ids, Pooling::Last)).to_vec();
            let ours = e.model().transformer.rank_score(&row).unwrap();
            let theirs = theirs.as_f64().unwrap() as f32;
            eprintln!("{name} document {i}: ours {ours:.6}, llama.cpp {theirs:.6}");
            let tol = if name.ends_with("f32.gguf") { 1e-5 } else { 1e-2 };
            assert!((ours - theirs).abs() < tol, "{name} document {i}: {ours} against {theirs}");
            scores.push(ours);
        }
        assert_eq!(tokens as u64, want["prompt_tokens"].as_u64().unwrap(), "{name}: llama.cpp tokenized the prompts otherwise");
        // The scores are spread: the test tells documents apart.
        let spread = scores.iter().fold(0f32, |m, s| m.max(*s)) - scores.iter().fold(1f32, |m, s| m.min(*s));
        assert!(spread > 0.05, "{name}: scores {scores:?}");
    }
}

/// The real SmolLM2-135M-Instruct Q4_1 file (a chat model, pooled as `--pooling` would have it):
/// our mean- and last-token-pooled unit vectors of three texts against llama.cpp's
/// (`tests/data/llama-cpp-embeddings-real.json`, `scripts/record-llama-embeddings.py --real`),
/// K/V f32 on both sides; the 4-bit weights' 8-bit activations round apart, so compared by
/// cosine similarity.
#[test]
fn a_real_models_embeddings_match_llama_cpp() {
    let Some(path) = common::real::real_model("a_real_models_embeddings_match_llama_cpp", common::real::SMOLLM2) else {
        return;
    };
    let data = reference("llama-cpp-embeddings-real.json");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), data["bytes"].as_u64().unwrap(), "not the recorded file");
    let mut e = engine(&path, true, 64, 0);
    for (name, pooling) in [("mean", Pooling::Mean), ("last", Pooling::Last)] {
        let want = &data["pooling"][name];
        let mut tokens = 0;
        for (i, (text, theirs)) in data["texts"].as_array().unwrap().iter().zip(want["embeddings"].as_array().unwrap()).enumerate() {
            let ids = e.model().tokenizer.encode_for_embedding(text.as_str().unwrap()).unwrap();
            tokens += ids.len();
            let mut ours = vector(&embed(&mut e, &ids, pooling)).to_vec();
            normalize(&mut ours);
            let theirs: Vec<f32> = theirs.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
            let cos = cosine(&ours, &theirs);
            eprintln!("{name} text {i}: cosine {cos:.6}, max |diff| {:.2e}", max_abs_diff(&ours, &theirs));
            assert!(cos > 0.999, "{name} text {i}: cosine {cos}");
        }
        assert_eq!(tokens as u64, want["prompt_tokens"].as_u64().unwrap(), "{name}: llama.cpp tokenized the texts otherwise");
    }
}
