//! The core property: output with the cache equals output without it, from
//! every tier, for every family. "Without" is an engine with prefix caching
//! off (every prompt prefilled in full); "with" reuses blocks from earlier
//! requests: the same prompt, a shared prefix, a three-turn chat, a prefix
//! demoted to the host tier and promoted back.

mod common;

use common::*;
use hearth::engine::{Engine, GenerationReport};
use hearth::model::hparams::Family;
use hearth::model::testkit::{TinyModelSpec, WeightType};

/// Logits of a cached run and a full prefill differ only by float rounding
/// (the suffix's attention is one matmul over gathered rows instead of part
/// of a larger one). Activations are quantized to 8 bits inside each Q8_0
/// matmul, so a last-bit difference can flip one rounding: such a step stays
/// below `REL` of the largest logit; almost all steps are within `TOL`.
const TOL: f32 = 2e-3;
const REL: f32 = 0.02;
/// With F32 weights nothing is quantized: every step within float rounding.
const F32_TOL: f32 = 1e-4;

/// How close a cached run's logits must be to the full prefill's.
#[derive(Clone, Copy)]
enum Tolerance {
    /// Q8_0 weights: every step within `REL`, almost all within `TOL`.
    Quantized,
    /// Q8_0 weights where the cache holds K/V computed by decode steps (a
    /// chat's earlier replies): a flipped rounding in one reused row shifts
    /// every later step alike, so every step within `REL`.
    QuantizedReplies,
    /// F32 weights: every step within `F32_TOL`.
    Exact,
}

fn assert_same(cached: &GenerationReport, cold: &GenerationReport, what: &str, tol: Tolerance) {
    assert_eq!(cached.tokens, cold.tokens, "{what}: greedy tokens differ");
    assert_eq!(cached.logits.len(), cold.logits.len(), "{what}");
    let mut within = 0;
    for (step, (a, b)) in cached.logits.iter().zip(&cold.logits).enumerate() {
        let d = max_abs_diff(a, b);
        let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(
            d < REL * scale,
            "{what} step {step}: max |diff| {d}, max |logit| {scale}"
        );
        if let Tolerance::Exact = tol {
            assert!(d < F32_TOL, "{what} step {step}: max |diff| {d} with F32 weights");
        }
        within += (d < TOL) as usize;
    }
    let n = cached.logits.len();
    if let Tolerance::Quantized = tol {
        assert!(within * 10 >= n * 9, "{what}: only {within} of {n} steps within {TOL}");
    }
}

fn assert_accounted(e: &Engine, what: &str) {
    assert_blocks_released(&e.cache_stats(), what);
}

struct Pair {
    cached: Engine,
    cold: Engine,
    tol: Tolerance,
}

impl Pair {
    fn new(path: &std::path::Path, device_blocks: usize, host_blocks: usize) -> Self {
        Self {
            cached: engine(path, true, device_blocks, host_blocks),
            cold: engine(path, false, 64, 0),
            tol: Tolerance::Quantized,
        }
    }

    /// Runs `prompt` on both; checks equality; returns the cached report.
    fn run(&mut self, prompt: &[u32], n: usize, what: &str) -> GenerationReport {
        self.run_params(prompt, &greedy(n), what)
    }

    fn run_params(&mut self, prompt: &[u32], params: &hearth::engine::GenerateParams, what: &str) -> GenerationReport {
        let a = self.cached.generate(prompt, params, |_| Ok(())).unwrap();
        let b = self.cold.generate(prompt, params, |_| Ok(())).unwrap();
        assert_eq!(b.cached.tokens, 0, "{what}: the uncached engine hit");
        assert_same(&a, &b, what, self.tol);
        assert_accounted(&self.cached, what);
        a
    }
}

/// A tiny model's name, spec and file; the file is removed when the last is dropped.
type TinyModel = (String, TinyModelSpec, tempfile::TempPath);

/// A tiny Q8_0 model of every family, written into `dir`.
fn models(dir: &std::path::Path) -> impl Iterator<Item = TinyModel> + '_ {
    models_of(dir, WeightType::Q8_0)
}

/// A tiny model of every family with `weights`, written into `dir`. Gemma 3's layer 0 has an
/// 8-token sliding window, so every prompt here crosses it (cached prefixes included).
///
/// Lazily, one file at a time: each is written when the loop reaches it and removed when the
/// loop moves on (every family's at once were ~600 MB per test, ~1 GB with two tests at once,
/// and CI's disk ran out).
fn models_of(dir: &std::path::Path, weights: WeightType) -> impl Iterator<Item = TinyModel> + '_ {
    // Every family, Qwen3.5's MoE files (recurrent layers with experts), Qwen3-Next's (V
    // heads grouped by Q/K head, the older `ssm_in`), Granite 4.0 H-Tiny's (Mamba-2 layers
    // with experts, rope), Nemotron 3 Super's and LFM2-8B-A1B's (short convolutions with
    // experts), Qwen2 MoE's (experts beside a gated shared one),
    // OLMoE's (whole Q/K norms), Hunyuan's dense and MoE ones (Q/K norms after rope; a shared expert),
    // Phi-2's (parallel blocks of biased LayerNorms and projections, an ungated GELU MLP, logit biases),
    // Falcon 7B's (one K/V head for four query heads, a fused QKV), GPT-NeoX's (parallel blocks
    // whose MLP reads its own norm, a fused QKV bias), StarCoder's (learned positions, one K/V
    // head), BLOOM's (ALiBi, the embedding normalized), the first OLMo's (LayerNorms without
    // weights, Q/K/V clamped), Jais's (ALiBi, a gated MLP with biases, scores by 1/head_dim),
    // DBRX's (experts under unbiased LayerNorms, a fused QKV, Q/K/V clamped), Ling 2.0's
    // (experts in groups, a token choosing among the best ones only), EXAONE's MoE files
    // (sliding-window layers with rope, a global one without, in GLM-4.5's MoE layer),
    // MiniMax-M2's (experts alone in every layer), Falcon-H1's (a Mamba-2 state and K/V in
    // every layer), SmallThinker's (experts routed on the layer's input), Llama 4's (experts
    // weighing their inputs, unweighted Q/K norms, a layer without rope), Nemotron 51B's
    // (`deci`: each layer its own K/V heads, linear attention, layers without attention),
    // OpenELM's (each layer its own query and K/V heads), MiniCPM3's (latent attention over
    // dense layers), Jamba's (Mamba states beside K/V, experts in some layers), AFMoE's
    // (windows, the attention's output gate).
    let specs = Family::ALL
        .into_iter()
        .map(move |family| (format!("{family:?}"), TinyModelSpec::tiny(family, weights)))
        .chain([
            ("Qwen35Moe".to_string(), TinyModelSpec::qwen35_moe(weights)),
            ("Qwen3Next".to_string(), TinyModelSpec::qwen3next(true, weights)),
            ("GraniteHybridMoe".to_string(), TinyModelSpec::granite_hybrid_moe(weights)),
            ("NemotronHMoeLatent".to_string(), TinyModelSpec::nemotron_h_moe(weights, Some(128))),
            ("Lfm2Moe".to_string(), TinyModelSpec::lfm2_moe(weights)),
            ("Qwen2Moe".to_string(), TinyModelSpec::qwen2_moe(weights)),
            ("OlMoE".to_string(), TinyModelSpec::olmoe(weights)),
            ("HunyuanMoe".to_string(), TinyModelSpec::hunyuan_moe(weights)),
            ("HunyuanDense".to_string(), TinyModelSpec::hunyuan_dense(weights)),
            ("Phi2".to_string(), TinyModelSpec::phi2(weights)),
            ("Falcon".to_string(), TinyModelSpec::falcon(weights, false)),
            ("GptNeoX".to_string(), TinyModelSpec::gptneox(weights, true)),
            ("StarCoder".to_string(), TinyModelSpec::gpt2(weights, true)),
            ("Bloom".to_string(), TinyModelSpec::bloom(weights)),
            ("Olmo".to_string(), TinyModelSpec::olmo(weights)),
            ("Jais".to_string(), TinyModelSpec::jais(weights)),
            ("Dbrx".to_string(), TinyModelSpec::dbrx(weights)),
            ("Ling2".to_string(), TinyModelSpec::bailingmoe2(weights)),
            ("ExaoneMoe".to_string(), TinyModelSpec::exaone_moe(weights)),
            ("MinimaxM2".to_string(), TinyModelSpec::minimax_m2(weights)),
            ("FalconH1".to_string(), TinyModelSpec::falcon_h1(weights)),
            ("SmallThinker".to_string(), TinyModelSpec::smallthinker(weights)),
            ("Llama4".to_string(), TinyModelSpec::llama4(weights)),
            ("Deci".to_string(), TinyModelSpec::deci(weights)),
            ("OpenElm".to_string(), TinyModelSpec::openelm(weights)),
            ("MiniCpm3".to_string(), TinyModelSpec::minicpm3(weights)),
            ("Jamba".to_string(), TinyModelSpec::jamba(weights)),
            ("Afmoe".to_string(), TinyModelSpec::afmoe(weights)),
            ("Gemma3n".to_string(), TinyModelSpec::gemma3n_short(weights)),
            ("Mellum".to_string(), TinyModelSpec::mellum(weights)),
            ("Nanbeige".to_string(), TinyModelSpec::nanbeige(weights)),
            ("Bitnet".to_string(), TinyModelSpec::bitnet(weights)),
        ]);
    specs.map(move |(name, spec)| {
        let path = write_tiny(dir, &spec, &format!("{name}-{weights:?}.gguf"));
        (format!("{name} {weights:?}"), spec, tempfile::TempPath::try_from_path(path).unwrap())
    })
}

#[test]
fn same_prompt_twice_and_shared_prefixes() {
    let dir = tempfile::tempdir().unwrap();
    for (f, spec, path) in models(dir.path()) {
        let mut p = Pair::new(&path, 64, 16);
        let v = spec.vocab.size;

        let prompt = prompt(45, v, 1);
        let first = p.run(&prompt, 8, &format!("{f} cold"));
        assert_eq!(first.cached.tokens, 0);
        let second = p.run(&prompt, 8, &format!("{f} same prompt"));
        // 45 tokens: two full blocks of 16 (the last token is always recomputed).
        assert_eq!((second.cached.tokens, second.cached.device_tokens), (32, 32), "{f}");

        // A shared prefix ending mid-block, different suffixes.
        let mut a = prompt[..37].to_vec();
        a.extend(self::prompt(9, v, 2));
        let hit = p.run(&a, 6, &format!("{f} suffix a"));
        assert_eq!(hit.cached.tokens, 32, "{f}");
        let mut b = prompt[..37].to_vec();
        b.extend(self::prompt(20, v, 3));
        let hit = p.run(&b, 6, &format!("{f} suffix b"));
        assert_eq!(hit.cached.tokens, 32, "{f}");

        // Shorter than one block: nothing to reuse, nothing breaks.
        let short = self::prompt(5, v, 4);
        p.run(&short, 5, &format!("{f} short"));
        let again = p.run(&short, 5, &format!("{f} short again"));
        assert_eq!(again.cached.tokens, 0);

        // Exactly one block: the hit stops before the last token.
        let one = self::prompt(16, v, 5);
        p.run(&one, 3, &format!("{f} one block"));
        assert_eq!(p.run(&one, 3, &format!("{f} one block again")).cached.tokens, 0);
        let mut longer = one.clone();
        longer.push(3);
        assert_eq!(p.run(&longer, 3, &format!("{f} one block + 1")).cached.tokens, 16);

        // A prefix no earlier prompt ended at (a shared system prompt): the first prompt's 20
        // tokens, then others. A model with recurrent layers kept no copy of its state after
        // block 0, so the first prompt sharing it computes it all and leaves one there; the
        // next starts from it.
        let recurrent = p.cached.stats().recurrent_states.is_some();
        let shared = |seed| [&prompt[..20], &self::prompt(10, v, seed)[..]].concat();
        let expect = if recurrent { 0 } else { 16 };
        assert_eq!(p.cached.peek(&shared(6)).tokens, expect, "{f}: peek");
        let second = p.run(&shared(6), 4, &format!("{f} shared prefix, second prompt"));
        assert_eq!(second.cached.tokens, expect, "{f}");
        assert_eq!(p.cached.peek(&shared(7)).tokens, 16, "{f}: peek");
        let third = p.run(&shared(7), 4, &format!("{f} shared prefix, third prompt"));
        assert_eq!(third.cached.tokens, 16, "{f}");
    }
}

#[test]
fn three_turn_chat_hits_through_the_generated_reply() {
    let dir = tempfile::tempdir().unwrap();
    let runs = [
        (WeightType::F32, Tolerance::Exact),
        (WeightType::Q8_0, Tolerance::QuantizedReplies),
    ];
    for (f, spec, path, tol) in runs.into_iter().flat_map(|(w, tol)| {
        models_of(dir.path(), w).map(move |(f, s, p)| (f, s, p, tol))
    }) {
        let mut p = Pair::new(&path, 64, 16);
        p.tol = tol;
        let v = spec.vocab.size;

        let mut history = prompt(21, v, 10);
        for turn in 0..3 {
            // Replies of exactly 20 tokens (a random model may end its turn
            // at once), so each turn has reply blocks to reuse.
            let r = p.run_params(&history, &greedy_exactly(20), &format!("{f} turn {turn}"));
            assert_eq!(r.tokens.len(), 20, "{f} turn {turn}");
            if turn > 0 {
                // Everything but the last sampled token of the previous reply
                // was committed; the hit covers its full blocks.
                let committed = history.len() - 1;
                assert!(
                    r.cached.tokens >= committed / 16 * 16 - 16,
                    "{f} turn {turn}: {:?}",
                    r.cached
                );
                assert!(
                    r.cached.tokens > 21,
                    "{f} turn {turn}: the reply was not reused: {:?}",
                    r.cached
                );
            }
            history.extend(&r.tokens);
            history.extend(prompt(7, v, 20 + turn as u32));
        }
    }
}

#[test]
fn host_tier_demotion_and_promotion_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    for (f, spec, path) in models(dir.path()) {
        // Five device blocks: one 70-token request fills them, so the next
        // request pushes the previous prefix to the host tier.
        let mut p = Pair::new(&path, 5, 16);
        let v = spec.vocab.size;

        let a = prompt(64, v, 30);
        let b = prompt(64, v, 31);
        p.run(&a, 4, &format!("{f} a cold"));
        p.run(&b, 4, &format!("{f} b pushes a to host"));
        let s = p.cached.cache_stats();
        assert!(s.demotions > 0, "{f}: nothing was demoted: {s:?}");

        let host_hit = p.run(&a, 4, &format!("{f} a from host"));
        assert!(host_hit.cached.host_tokens >= 32, "{f}: {:?}", host_hit.cached);
        assert!(p.cached.cache_stats().promotions > 0);

        // Promoted blocks are device blocks again.
        let device_hit = p.run(&a, 4, &format!("{f} a after promotion"));
        assert!(device_hit.cached.device_tokens >= 32, "{f}: {:?}", device_hit.cached);
        assert_eq!(device_hit.cached.host_tokens, 0, "{f}");
    }
}

#[test]
fn write_through_makes_demotion_free_and_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0);
    let path = write_tiny(dir.path(), &spec, "llama.gguf");
    let mut settings = cache_settings(true, 16);
    settings.write_through = true;
    let mut p = Pair {
        cached: engine_with(&path, settings, 5, 16),
        cold: engine(&path, false, 64, 0),
        tol: Tolerance::Quantized,
    };
    let v = spec.vocab.size;
    let a = prompt(64, v, 40);
    p.run(&a, 4, "a");
    p.run(&prompt(64, v, 41), 4, "b");
    let r = p.run(&a, 4, "a from host");
    assert!(r.cached.host_tokens >= 32, "{:?}", r.cached);
}

#[test]
fn a_pool_too_small_for_the_prompt_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0);
    let path = write_tiny(dir.path(), &spec, "llama.gguf");
    let mut e = engine(&path, true, 2, 0);
    let err = e
        .generate(&prompt(40, spec.vocab.size, 1), &greedy(2), |_| Ok(()))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("needs 40 tokens of KV cache but the cache's device tier holds only 32"),
        "{err}"
    );
    assert_accounted(&e, "after the refused request");
    // The engine still works for a request that fits.
    e.generate(&prompt(20, spec.vocab.size, 1), &greedy(2), |_| Ok(()))
        .unwrap();
    assert_accounted(&e, "after a request that fits");
}

#[test]
fn memory_split_accounts_for_weights_and_every_kv_block() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::tiny(Family::Qwen2, WeightType::Q8_0);
    let path = write_tiny(dir.path(), &spec, "qwen2.gguf");
    let mut e = engine(&path, true, 32, 8);
    e.generate(&prompt(40, spec.vocab.size, 1), &greedy(3), |_| Ok(()))
        .unwrap();
    let m = e.memory().unwrap();
    let s = e.cache_stats();
    assert_eq!(m.device, "cpu");
    // Q8_0 weights, the tied table counted twice: the rows looked up, the output's copy.
    assert_eq!(m.weights, e.model().transformer.weight_bytes());
    assert!(m.weights > 2 * (spec.vocab.size * spec.hidden / 32 * 34) as u64);
    assert_eq!(m.kv_used + m.kv_cached + m.kv_free, s.device.capacity_bytes());
    assert!(m.kv_cached > 0, "the finished request left cached blocks");
    assert_eq!(m.kv_used, 0);
    assert_eq!(
        m.weights + m.kv_used + m.kv_cached + m.kv_free + m.other + m.free,
        m.total
    );
}

/// Every K/V type: both engines store K/V as `dtype`; the cached one serves prefixes from its
/// device tier and, after demotion, its host tier, and a chat's earlier replies. Greedy tokens
/// are the same as without the cache; logits within `REL` at every step (a stored value is the
/// rounding of a K/V row that a prefill of another length may compute one ulp apart, which can
/// flip the f16 / bf16 / q8_0 rounding: the same effect as Q8_0 weights' activations).
#[test]
fn every_kv_dtype_is_exact_with_the_cache_from_every_tier() {
    use hearth::config::KvDtype;
    let dir = tempfile::tempdir().unwrap();
    for dtype in [KvDtype::F16, KvDtype::Bf16, KvDtype::Q8_0] {
        for (f, spec, path) in models(dir.path()) {
            let f = format!("{f} {dtype}");
            let with = |caching: bool| hearth::config::CacheSettings {
                kv_dtype: Some(dtype),
                ..cache_settings(caching, 16)
            };
            let mut p = Pair {
                cached: engine_with(&path, with(true), 5, 16),
                cold: engine_with(&path, with(false), 64, 0),
                tol: Tolerance::QuantizedReplies,
            };
            let v = spec.vocab.size;
            let a = prompt(64, v, 50);
            p.run(&a, 4, &format!("{f} a cold"));
            let again = p.run(&a, 4, &format!("{f} a from the device tier"));
            assert!(again.cached.device_tokens >= 48, "{f}: {:?}", again.cached);
            p.run(&prompt(64, v, 51), 4, &format!("{f} b pushes a to the host tier"));
            let host = p.run(&a, 4, &format!("{f} a from the host tier"));
            assert!(host.cached.host_tokens >= 32, "{f}: {:?}", host.cached);

            let mut history = prompt(21, v, 52);
            for turn in 0..2 {
                let r = p.run_params(&history, &greedy_exactly(12), &format!("{f} chat turn {turn}"));
                if turn > 0 {
                    assert!(r.cached.tokens > 21, "{f}: the reply was not reused: {:?}", r.cached);
                }
                history.extend(&r.tokens);
                history.extend(prompt(5, v, 60 + turn as u32));
            }
        }
    }
}
