//! GGUF conventions of files written by llama.cpp's converter, checked
//! against a from-scratch Hugging Face-style forward (plain Rust loops, no
//! candle ops, no shared code with hearth).
//!
//! - `llama`: `convert_hf_to_gguf.py` permutes the rows of Q and K
//!   (`permute(w, n_head)`: `reshape(n_head, 2, d/2, in).swapaxes(1, 2)`), so
//!   that the rotate-half (NeoX) rope of the HF checkpoint becomes an
//!   interleaved-pairs rope on the GGUF rows. A GGUF llama file must therefore
//!   give the HF model's logits with interleaved rope.
//! - `qwen2`: weights are stored as in HF (no permutation), with q/k/v bias,
//!   and rope rotates halves.

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use hearth::model::gguf::GgufFile;
use hearth::model::{Logits, Transformer};
use hearth::ops::{BatchLayout, ContiguousBatch, ContiguousKv};

const HIDDEN: usize = 64;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 16;
const FFN: usize = 128;
const VOCAB: usize = 96;
const LAYERS: usize = 2;
const BASE: f32 = 10_000.0;
const EPS: f32 = 1e-6;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

/// Row-major `[rows, cols]` weights, as in a HF checkpoint.
struct LayerW {
    attn_norm: Vec<f32>,
    wq: Vec<f32>,
    wk: Vec<f32>,
    wv: Vec<f32>,
    wo: Vec<f32>,
    bias: Option<(Vec<f32>, Vec<f32>, Vec<f32>)>,
    ffn_norm: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    down: Vec<f32>,
}

struct Hf {
    embed: Vec<f32>,
    layers: Vec<LayerW>,
    norm: Vec<f32>,
    output: Vec<f32>,
}

fn random_hf(with_bias: bool) -> Hf {
    let mut r = Lcg(42);
    let s = |n: usize| (3.0 / n as f32).sqrt();
    let layers = (0..LAYERS)
        .map(|_| LayerW {
            attn_norm: r.vec(HIDDEN, 0.1).iter().map(|x| 1.0 + x).collect(),
            wq: r.vec(HEADS * HEAD_DIM * HIDDEN, s(HIDDEN)),
            wk: r.vec(KV_HEADS * HEAD_DIM * HIDDEN, s(HIDDEN)),
            wv: r.vec(KV_HEADS * HEAD_DIM * HIDDEN, s(HIDDEN)),
            wo: r.vec(HIDDEN * HEADS * HEAD_DIM, s(HEADS * HEAD_DIM)),
            bias: with_bias.then(|| {
                (
                    r.vec(HEADS * HEAD_DIM, 0.5),
                    r.vec(KV_HEADS * HEAD_DIM, 0.5),
                    r.vec(KV_HEADS * HEAD_DIM, 0.5),
                )
            }),
            ffn_norm: r.vec(HIDDEN, 0.1).iter().map(|x| 1.0 + x).collect(),
            gate: r.vec(FFN * HIDDEN, s(HIDDEN)),
            up: r.vec(FFN * HIDDEN, s(HIDDEN)),
            down: r.vec(HIDDEN * FFN, s(FFN)),
        })
        .collect();
    Hf {
        embed: r.vec(VOCAB * HIDDEN, 1.0),
        layers,
        norm: r.vec(HIDDEN, 0.1).iter().map(|x| 1.0 + x).collect(),
        output: r.vec(VOCAB * HIDDEN, 3.0 * s(HIDDEN)),
    }
}

/// `y = W x` for row-major `W: [rows, x.len()]`.
fn matvec(w: &[f32], x: &[f32]) -> Vec<f32> {
    w.chunks(x.len())
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

fn rmsnorm(x: &[f32], g: &[f32]) -> Vec<f32> {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (ms + EPS).sqrt();
    x.iter().zip(g).map(|(v, g)| v * inv * g).collect()
}

/// HF `rotate_half` rope on one head vector at `pos`.
fn rope_half(x: &mut [f32], pos: usize) {
    let half = x.len() / 2;
    for i in 0..half {
        let theta = pos as f32 * BASE.powf(-((2 * i) as f32) / x.len() as f32);
        let (c, s) = (theta.cos(), theta.sin());
        let (a, b) = (x[i], x[i + half]);
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
    }
}

/// The HF model's logits for the last of `ids`.
fn hf_forward(m: &Hf, ids: &[u32]) -> Vec<f32> {
    let mut xs: Vec<Vec<f32>> = ids
        .iter()
        .map(|&i| m.embed[i as usize * HIDDEN..][..HIDDEN].to_vec())
        .collect();
    let group = HEADS / KV_HEADS;
    for l in &m.layers {
        let mut qs = Vec::new();
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        for (pos, x) in xs.iter().enumerate() {
            let h = rmsnorm(x, &l.attn_norm);
            let (mut q, mut k, mut v) = (matvec(&l.wq, &h), matvec(&l.wk, &h), matvec(&l.wv, &h));
            if let Some((bq, bk, bv)) = &l.bias {
                q.iter_mut().zip(bq).for_each(|(a, b)| *a += b);
                k.iter_mut().zip(bk).for_each(|(a, b)| *a += b);
                v.iter_mut().zip(bv).for_each(|(a, b)| *a += b);
            }
            q.chunks_mut(HEAD_DIM).for_each(|h| rope_half(h, pos));
            k.chunks_mut(HEAD_DIM).for_each(|h| rope_half(h, pos));
            qs.push(q);
            ks.push(k);
            vs.push(v);
        }
        for t in 0..xs.len() {
            let mut attn = vec![0f32; HEADS * HEAD_DIM];
            for h in 0..HEADS {
                let kvh = h / group;
                let q = &qs[t][h * HEAD_DIM..][..HEAD_DIM];
                let scores: Vec<f32> = (0..=t)
                    .map(|j| {
                        let k = &ks[j][kvh * HEAD_DIM..][..HEAD_DIM];
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() / (HEAD_DIM as f32).sqrt()
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f32::MIN, f32::max);
                let e: Vec<f32> = scores.iter().map(|s| (s - mx).exp()).collect();
                let z: f32 = e.iter().sum();
                for (j, p) in e.iter().enumerate() {
                    let v = &vs[j][kvh * HEAD_DIM..][..HEAD_DIM];
                    for d in 0..HEAD_DIM {
                        attn[h * HEAD_DIM + d] += p / z * v[d];
                    }
                }
            }
            let o = matvec(&l.wo, &attn);
            xs[t].iter_mut().zip(&o).for_each(|(a, b)| *a += b);
        }
        for x in xs.iter_mut() {
            let h = rmsnorm(x, &l.ffn_norm);
            let g = matvec(&l.gate, &h);
            let u = matvec(&l.up, &h);
            let a: Vec<f32> = g.iter().zip(&u).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
            let d = matvec(&l.down, &a);
            x.iter_mut().zip(&d).for_each(|(a, b)| *a += b);
        }
    }
    let last = rmsnorm(&xs[xs.len() - 1], &m.norm);
    matvec(&m.output, &last)
}

/// llama.cpp's `permute(w, n_head)` on the rows of a `[n_head * d, in]` matrix.
fn permute_rows(w: &[f32], n_head: usize, cols: usize) -> Vec<f32> {
    let d = w.len() / cols / n_head;
    let mut out = vec![0f32; w.len()];
    for h in 0..n_head {
        for i in 0..d / 2 {
            for j in 0..2 {
                let src = h * d + j * (d / 2) + i;
                let dst = h * d + 2 * i + j;
                out[dst * cols..][..cols].copy_from_slice(&w[src * cols..][..cols]);
            }
        }
    }
    out
}

fn write_gguf(path: &std::path::Path, m: &Hf, arch: &str, permute: bool) {
    let t = |data: &[f32], shape: &[usize]| {
        QTensor::quantize(
            &Tensor::from_vec(data.to_vec(), shape, &Device::Cpu).unwrap(),
            GgmlDType::F32,
        )
        .unwrap()
    };
    let mut ts: Vec<(String, QTensor)> = vec![
        ("token_embd.weight".into(), t(&m.embed, &[VOCAB, HIDDEN])),
        ("output_norm.weight".into(), t(&m.norm, &[HIDDEN])),
        ("output.weight".into(), t(&m.output, &[VOCAB, HIDDEN])),
    ];
    for (i, l) in m.layers.iter().enumerate() {
        let n = |s: &str| format!("blk.{i}.{s}");
        let (wq, wk) = if permute {
            (
                permute_rows(&l.wq, HEADS, HIDDEN),
                permute_rows(&l.wk, KV_HEADS, HIDDEN),
            )
        } else {
            (l.wq.clone(), l.wk.clone())
        };
        ts.push((n("attn_norm.weight"), t(&l.attn_norm, &[HIDDEN])));
        ts.push((n("attn_q.weight"), t(&wq, &[HEADS * HEAD_DIM, HIDDEN])));
        ts.push((n("attn_k.weight"), t(&wk, &[KV_HEADS * HEAD_DIM, HIDDEN])));
        ts.push((n("attn_v.weight"), t(&l.wv, &[KV_HEADS * HEAD_DIM, HIDDEN])));
        ts.push((n("attn_output.weight"), t(&l.wo, &[HIDDEN, HEADS * HEAD_DIM])));
        if let Some((bq, bk, bv)) = &l.bias {
            ts.push((n("attn_q.bias"), t(bq, &[HEADS * HEAD_DIM])));
            ts.push((n("attn_k.bias"), t(bk, &[KV_HEADS * HEAD_DIM])));
            ts.push((n("attn_v.bias"), t(bv, &[KV_HEADS * HEAD_DIM])));
        }
        ts.push((n("ffn_norm.weight"), t(&l.ffn_norm, &[HIDDEN])));
        ts.push((n("ffn_gate.weight"), t(&l.gate, &[FFN, HIDDEN])));
        ts.push((n("ffn_up.weight"), t(&l.up, &[FFN, HIDDEN])));
        ts.push((n("ffn_down.weight"), t(&l.down, &[HIDDEN, FFN])));
    }
    let u = |x: usize| Value::U32(x as u32);
    let md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (format!("{arch}.context_length"), u(256)),
        (format!("{arch}.embedding_length"), u(HIDDEN)),
        (format!("{arch}.block_count"), u(LAYERS)),
        (format!("{arch}.feed_forward_length"), u(FFN)),
        (format!("{arch}.attention.head_count"), u(HEADS)),
        (format!("{arch}.attention.head_count_kv"), u(KV_HEADS)),
        (format!("{arch}.attention.layer_norm_rms_epsilon"), Value::F32(EPS)),
        (format!("{arch}.rope.freq_base"), Value::F32(BASE)),
    ];
    let mut f = std::fs::File::create(path).unwrap();
    let md_r: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_r: Vec<(&str, &QTensor)> = ts.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut f, &md_r, &t_r).unwrap();
}

fn ours(path: &std::path::Path, ids: &[u32]) -> Vec<f32> {
    let mut f = GgufFile::open(path).unwrap();
    let tf = Transformer::from_gguf(&mut f, &Device::Cpu, 256).unwrap();
    let mut kv = ContiguousKv::new(tf.kv_shape(), candle_core::DType::F32, &Device::Cpu, 256);
    let batch = BatchLayout::single(0, ids.len()).unwrap();
    let l = tf
        .forward(
            ids,
            &batch,
            &mut ContiguousBatch::new(vec![&mut kv]),
            Logits::LastPerSequence,
        )
        .unwrap();
    l.flatten_all().unwrap().to_vec1().unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

const IDS: [u32; 9] = [5, 17, 3, 88, 41, 41, 0, 63, 12];

#[test]
fn llama_gguf_with_converter_permutation_equals_the_hf_model() {
    let dir = tempfile::tempdir().unwrap();
    let hf = random_hf(false);
    let expect = hf_forward(&hf, &IDS);
    let permuted = dir.path().join("llama.gguf");
    write_gguf(&permuted, &hf, "llama", true);
    let d = max_diff(&ours(&permuted, &IDS), &expect);
    assert!(d < 1e-3, "permuted llama vs HF: {d}");

    // Without the converter's permutation the llama reading is wrong: the
    // check above is not vacuous.
    let unpermuted = dir.path().join("llama-raw.gguf");
    write_gguf(&unpermuted, &hf, "llama", false);
    assert!(max_diff(&ours(&unpermuted, &IDS), &expect) > 1e-2);
}

#[test]
fn qwen2_gguf_unpermuted_with_bias_equals_the_hf_model() {
    let dir = tempfile::tempdir().unwrap();
    let hf = random_hf(true);
    let expect = hf_forward(&hf, &IDS);
    let path = dir.path().join("qwen2.gguf");
    write_gguf(&path, &hf, "qwen2", false);
    let d = max_diff(&ours(&path, &IDS), &expect);
    assert!(d < 1e-3, "qwen2 vs HF: {d}");
}
