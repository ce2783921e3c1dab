//! Our forward against candle-transformers' quantized_llama / quantized_qwen2 /
//! quantized_qwen3 / quantized_phi3 on the same random GGUF files: full prompt, token-by-token
//! decode, a packed batch of mixed-length sequences, and greedy continuations.

mod common;

use common::*;
use hearth::model::hparams::Family;
use hearth::model::testkit::{TinyModelSpec, TinyMoe, WeightType};
use hearth::model::Logits;
use hearth::ops::{BatchLayout, ContiguousBatch, SeqChunk, Window};

/// Logits of the two implementations differ by float rounding (rope tables
/// computed differently, another summation order in attention). With f32
/// weights that stays below `TOL` (logits are of order 1-10).
const TOL: f32 = 2e-3;

/// With quantized weights both sides quantize the activations to 8 bits inside
/// each matmul (the same integers: ours follow ggml's Q8_0/Q8_1/Q8_K), but our
/// kernels (`ops::qmatmul`) sum the blocks' float terms in another order than
/// candle's `QMatMul`, so a last-bit difference can flip one rounding in a
/// later layer and move the logits by a quantization step. Every step must
/// stay within this fraction of the largest logit; with f32 weights (the same
/// matmul on both sides) most steps must also be within `TOL`.
const QUANT_REL_TOL: f32 = 0.02;

/// Compares one step's logits; returns whether it was within `TOL`.
fn close(wt: WeightType, a: &[f32], b: &[f32], what: &str) -> bool {
    let d = max_abs_diff(a, b);
    if wt == WeightType::F32 {
        assert!(d < TOL, "{what}: max |diff| {d}");
    } else {
        let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(d < QUANT_REL_TOL * scale, "{what}: max |diff| {d}, max |logit| {scale}");
    }
    d < TOL
}

/// The model of a case. Q8_0 models are shaped so that no matrix is a multiple of 256 values
/// wide: candle (0.11) repacks Q8_0 weights on CPUs with AVX-512 VNNI or AVX-VNNI and then
/// quantizes the activations in blocks of 256 (Q8_K) rather than ggml's 32 (Q8_0), which is
/// not the arithmetic llama.cpp and hearth do; it keeps ggml's for other widths, so the
/// reference is the same on every CPU. (K-quants use Q8_K activations everywhere.)
fn spec(family: Family, wt: WeightType) -> TinyModelSpec {
    let spec = TinyModelSpec::tiny(family, wt);
    if wt != WeightType::Q8_0 {
        return spec;
    }
    TinyModelSpec {
        hidden: 288,
        heads: 9,
        kv_heads: 3,
        head_dim: 32,
        ffn: 544,
        ..spec
    }
}

fn cases() -> Vec<(Family, WeightType)> {
    let mut v = Vec::new();
    for f in [Family::Llama, Family::Qwen2, Family::Qwen3, Family::Phi3] {
        for w in [WeightType::F32, WeightType::Q8_0, WeightType::Q4K] {
            v.push((f, w));
        }
    }
    v
}

#[test]
fn full_prompt_and_decode_match_candle() {
    let dir = tempfile::tempdir().unwrap();
    for (family, wt) in cases() {
        let spec = spec(family, wt);
        let path = write_tiny(dir.path(), &spec, &format!("{family:?}-{wt:?}.gguf"));
        let ours = load_ours(&path, 512);
        let mut theirs = Reference::load(&path, family);
        let vocab = spec.vocab.size;
        let ids = prompt(23, vocab, 1);

        // Whole prompt in one forward.
        let mut kv = new_kv(&ours, 512);
        let a = ours_step(&ours, &mut kv, &ids);
        let b = theirs.forward(&ids, 0);
        let mut within = close(wt, &a, &b, &format!("{family:?} {wt:?} prompt")) as usize;

        // Token by token.
        theirs.clear();
        let mut kv = new_kv(&ours, 512);
        for (pos, id) in ids.iter().enumerate() {
            let a = ours_step(&ours, &mut kv, &[*id]);
            let b = theirs.forward(&[*id], pos);
            within += close(wt, &a, &b, &format!("{family:?} {wt:?} decode step {pos}")) as usize;
        }
        let steps = ids.len() + 1;
        assert!(
            wt != WeightType::F32 || within * 10 >= steps * 9,
            "{family:?} {wt:?}: only {within} of {steps} steps within {TOL}"
        );
    }
}

/// The reference's top-two margin, as a fraction of its largest logit.
fn relative_margin(logits: &[f32]) -> f32 {
    let scale = logits.iter().fold(0f32, |m, x| m.max(x.abs()));
    hearth::bench::margin(logits) / scale
}

/// 25 greedy tokens each. They must be identical, except that a step where the reference's
/// top two are nearer than the logits' tolerance (a near-tie on a random model, which any
/// change of summation order can flip) may differ: the comparison ends there.
#[test]
fn greedy_continuations_are_identical() {
    let dir = tempfile::tempdir().unwrap();
    for (family, wt) in cases() {
        let spec = spec(family, wt);
        let path = write_tiny(dir.path(), &spec, &format!("{family:?}-{wt:?}.gguf"));
        let ours = load_ours(&path, 512);
        let mut theirs = Reference::load(&path, family);
        let ids = prompt(9, spec.vocab.size, 2);
        let tie = if wt == WeightType::F32 { 1e-3 } else { QUANT_REL_TOL };

        let mut kv = new_kv(&ours, 512);
        let (mut a, mut b) = (ours_step(&ours, &mut kv, &ids), theirs.forward(&ids, 0));
        for step in 0..25 {
            let (next_a, next_b) = (argmax(&a), argmax(&b));
            if next_a != next_b {
                let m = relative_margin(&b);
                assert!(
                    m < tie,
                    "{family:?} {wt:?} step {step}: {next_a} vs {next_b}, margin {m}"
                );
                eprintln!("{family:?} {wt:?}: a near-tie at step {step} (margin {m}) ends the comparison");
                break;
            }
            a = ours_step(&ours, &mut kv, &[next_a]);
            b = theirs.forward(&[next_b], ids.len() + step);
        }
    }
}

#[test]
fn mixed_length_batch_matches_each_sequence_alone() {
    let dir = tempfile::tempdir().unwrap();
    for family in [Family::Llama, Family::Qwen2, Family::Qwen3, Family::Phi3] {
        let spec = spec(family, WeightType::Q8_0);
        let path = write_tiny(dir.path(), &spec, &format!("{family:?}.gguf"));
        let ours = load_ours(&path, 512);
        let mut theirs = Reference::load(&path, family);
        let v = spec.vocab.size;

        // Three sequences: a fresh prompt of 11, a sequence with 6 cached
        // tokens getting 4 more, and one decoding its 9th token.
        let fresh = prompt(11, v, 3);
        let (b_prefix, b_new) = (prompt(6, v, 4), prompt(4, v, 5));
        let (c_prefix, c_new) = (prompt(8, v, 6), vec![17u32]);

        let mut kv_a = new_kv(&ours, 512);
        let mut kv_b = new_kv(&ours, 512);
        let mut kv_c = new_kv(&ours, 512);
        ours_step(&ours, &mut kv_b, &b_prefix);
        ours_step(&ours, &mut kv_c, &c_prefix);

        let batch = BatchLayout::new(vec![
            SeqChunk { cached: 0, new: 11 },
            SeqChunk { cached: 6, new: 4 },
            SeqChunk { cached: 8, new: 1 },
        ])
        .unwrap();
        let packed: Vec<u32> = fresh.iter().chain(&b_new).chain(&c_new).copied().collect();
        let mut store = ContiguousBatch::new(vec![&mut kv_a, &mut kv_b, &mut kv_c]);
        let all = ours.forward(&packed, &batch, &mut store, Logits::All).unwrap();
        let last: Vec<Vec<f32>> = batch
            .last_rows()
            .iter()
            .map(|&r| all.get(r as usize).unwrap().to_vec1().unwrap())
            .collect();
        assert_eq!(all.dims(), &[16, v]);

        let mut expect = Vec::new();
        theirs.clear();
        expect.push(theirs.forward(&fresh, 0));
        theirs.clear();
        theirs.forward(&b_prefix, 0);
        expect.push(theirs.forward(&b_new, 6));
        theirs.clear();
        theirs.forward(&c_prefix, 0);
        expect.push(theirs.forward(&c_new, 8));

        for (i, (a, b)) in last.iter().zip(&expect).enumerate() {
            close(WeightType::Q8_0, a, b, &format!("{family:?} sequence {i}"));
        }

        // Against ours run one sequence at a time: packing must not change a
        // sequence's numbers (rows are quantized and multiplied independently).
        let mut alone = Vec::new();
        let mut kv = new_kv(&ours, 512);
        alone.push(ours_step(&ours, &mut kv, &fresh));
        let mut kv = new_kv(&ours, 512);
        ours_step(&ours, &mut kv, &b_prefix);
        alone.push(ours_step(&ours, &mut kv, &b_new));
        let mut kv = new_kv(&ours, 512);
        ours_step(&ours, &mut kv, &c_prefix);
        alone.push(ours_step(&ours, &mut kv, &c_new));
        for (i, (a, b)) in last.iter().zip(&alone).enumerate() {
            let d = max_abs_diff(a, b);
            assert!(d < 1e-4, "{family:?} sequence {i}: batched vs alone max |diff| {d}");
            assert_eq!(argmax(a), argmax(b));
        }
        assert_eq!((kv_a.len(), kv_b.len(), kv_c.len()), (11, 10, 9));
    }
}

#[test]
fn rope_freqs_divide_the_frequencies() {
    // Llama 3.1 stores per-frequency divisors in `rope_freqs.weight`. All
    // divisors 2 is the same as linear position scaling by 2, and differs
    // from no scaling.
    let dir = tempfile::tempdir().unwrap();
    let base = TinyModelSpec::tiny(Family::Llama, WeightType::F32);
    let mut freqs = base.clone();
    freqs.rope_freqs = Some(vec![2.0; base.head_dim / 2]);
    let mut linear = base.clone();
    linear.rope_linear_factor = Some(2.0);
    let run = |spec: &TinyModelSpec, name: &str| {
        let tf = load_ours(&write_tiny(dir.path(), spec, name), 512);
        let mut kv = new_kv(&tf, 512);
        ours_step(&tf, &mut kv, &prompt(30, spec.vocab.size, 9))
    };
    let (a, b, c) = (
        run(&freqs, "freqs.gguf"),
        run(&linear, "linear.gguf"),
        run(&base, "base.gguf"),
    );
    assert!(max_abs_diff(&a, &b) < TOL);
    assert!(max_abs_diff(&a, &c) > 0.01);
}

#[test]
fn other_weight_types_match_candle() {
    // Every family was checked above for F32, Q8_0 and Q4_K; the other common
    // GGUF types go through the same QMatMul path, checked here on llama.
    let dir = tempfile::tempdir().unwrap();
    for wt in [WeightType::F16, WeightType::Q4_0, WeightType::Q5K, WeightType::Q6K] {
        let spec = TinyModelSpec::tiny(Family::Llama, wt);
        let path = write_tiny(dir.path(), &spec, &format!("{wt:?}.gguf"));
        let ours = load_ours(&path, 512);
        let mut theirs = Reference::load(&path, Family::Llama);
        let ids = prompt(15, spec.vocab.size, 8);
        let mut kv = new_kv(&ours, 512);
        let a = ours_step(&ours, &mut kv, &ids);
        let b = theirs.forward(&ids, 0);
        close(wt, &a, &b, &format!("{wt:?} prompt"));
        assert_eq!(argmax(&a), argmax(&b), "{wt:?}");
    }
}

/// Gemma 3's local layer (layer 0 of the tiny model, an 8-token window): a prompt within the
/// window sees what a global layer would, a longer one does not; and however the prompt is
/// cut into chunks (whole, in two, token by token), its last logits are the same.
#[test]
fn gemma3_sliding_window_is_a_mask_over_the_cached_positions() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::tiny(Family::Gemma3, WeightType::F32);
    let (window, period) = spec.sliding_window.unwrap();
    let mut wide = spec.clone();
    wide.sliding_window = Some((10_000, period));
    let local = load_ours(&write_tiny(dir.path(), &spec, "g.gguf"), 512);
    let global = load_ours(&write_tiny(dir.path(), &wide, "wide.gguf"), 512);
    assert_eq!(local.hparams().window(0), Some(Window::Sliding(window)));
    assert_eq!(local.hparams().window(1), None);
    let v = spec.vocab.size;

    let short = prompt(window, v, 21);
    let last = |tf: &hearth::model::Transformer, ids: &[u32]| ours_step(tf, &mut new_kv(tf, 512), ids);
    assert!(max_abs_diff(&last(&local, &short), &last(&global, &short)) < TOL);
    let long = prompt(30, v, 22);
    let whole = last(&local, &long);
    assert!(
        max_abs_diff(&whole, &last(&global, &long)) > 0.01,
        "the window must matter"
    );

    let mut kv = new_kv(&local, 512);
    ours_step(&local, &mut kv, &long[..12]);
    let halves = ours_step(&local, &mut kv, &long[12..]);
    let mut kv = new_kv(&local, 512);
    let mut stepwise = Vec::new();
    for t in &long {
        stepwise = ours_step(&local, &mut kv, std::slice::from_ref(t));
    }
    assert!(max_abs_diff(&whole, &halves) < TOL);
    assert!(max_abs_diff(&whole, &stepwise) < TOL);
}

/// A mixture of experts whose experts are all the same MLP computes the dense model (the
/// chosen weights sum to 1), whatever the router picks: Qwen3 MoE against Qwen3, and Mixtral's
/// layout (`llama` with `expert_count`) against Llama, each against candle-transformers'
/// dense reference too, over a prompt and decode steps; both loaded with distinct experts
/// route tokens to different experts and so compute something else.
#[test]
fn moe_with_identical_experts_is_the_dense_model() {
    let dir = tempfile::tempdir().unwrap();
    for (dense_family, moe_family) in [(Family::Qwen3, Family::Qwen3Moe), (Family::Llama, Family::Llama)] {
        for wt in [WeightType::F32, WeightType::Q8_0] {
            let dense = spec(dense_family, wt);
            let what = format!("{moe_family:?} {wt:?}");
            let moe = |identical| TinyModelSpec {
                family: moe_family,
                moe: Some(TinyMoe {
                    experts: 4,
                    used: 2,
                    identical,
                }),
                ..dense.clone()
            };
            let dense_path = write_tiny(dir.path(), &dense, &format!("{what}-dense.gguf"));
            let same = load_ours(&write_tiny(dir.path(), &moe(true), &format!("{what}-same.gguf")), 512);
            let mixed = load_ours(&write_tiny(dir.path(), &moe(false), &format!("{what}-mixed.gguf")), 512);
            assert_eq!(same.hparams().moe.as_ref().map(|m| (m.experts, m.experts_used)), Some((4, 2)));
            let ours = load_ours(&dense_path, 512);
            let mut theirs = Reference::load(&dense_path, dense_family);
            let ids = prompt(19, dense.vocab.size, 31);

            let (mut kv_moe, mut kv_dense) = (new_kv(&same, 512), new_kv(&ours, 512));
            let a = ours_step(&same, &mut kv_moe, &ids);
            let b = ours_step(&ours, &mut kv_dense, &ids);
            assert!(max_abs_diff(&a, &b) < 1e-3, "{what} prompt: {}", max_abs_diff(&a, &b));
            close(wt, &a, &theirs.forward(&ids, 0), &format!("{what} prompt vs candle"));
            let mut next = argmax(&a);
            for step in 0..6 {
                let a = ours_step(&same, &mut kv_moe, &[next]);
                let b = ours_step(&ours, &mut kv_dense, &[next]);
                assert!(max_abs_diff(&a, &b) < 1e-3, "{what} step {step}: {}", max_abs_diff(&a, &b));
                close(wt, &a, &theirs.forward(&[next], ids.len() + step), &format!("{what} step {step} vs candle"));
                next = argmax(&a);
            }

            let c = ours_step(&mixed, &mut new_kv(&mixed, 512), &ids);
            let b = ours_step(&ours, &mut new_kv(&ours, 512), &ids);
            assert!(max_abs_diff(&c, &b) > 0.1, "{what}: distinct experts changed nothing");
        }
    }
}

/// Gemma 3's rope scaling (linear ×8 on the 4B and larger) is the global layers' only; its
/// local layers rotate unscaled, as llama.cpp and Hugging Face do. With every layer local the
/// scaled file computes exactly what the unscaled one does; with the tiny model's global layer
/// it does not.
#[test]
fn gemma3_rope_scaling_spares_the_local_layers() {
    let dir = tempfile::tempdir().unwrap();
    let base = TinyModelSpec::tiny(Family::Gemma3, WeightType::F32);
    let scaled = |spec: &TinyModelSpec| TinyModelSpec {
        rope_linear_factor: Some(8.0),
        ..spec.clone()
    };
    // Period 0: every layer local (a window wider than the prompts).
    let all_local = TinyModelSpec {
        sliding_window: Some((10_000, 0)),
        ..base.clone()
    };
    let ids = prompt(30, base.vocab.size, 41);
    let run = |spec: &TinyModelSpec, name: &str| {
        let tf = load_ours(&write_tiny(dir.path(), spec, name), 512);
        ours_step(&tf, &mut new_kv(&tf, 512), &ids)
    };
    let (a, b) = (run(&all_local, "local.gguf"), run(&scaled(&all_local), "local8.gguf"));
    assert_eq!(max_abs_diff(&a, &b), 0.0);
    let (c, d) = (run(&base, "mixed.gguf"), run(&scaled(&base), "mixed8.gguf"));
    assert!(max_abs_diff(&c, &d) > 0.01, "the global layer's scaling must matter");
}
