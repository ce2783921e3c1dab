//! Causal attention of one sequence's new queries over its cached and new keys; and an
//! encoder's, each whole input's queries over all of its keys ([`attend_both_ways`]).
//!
//! Grouped-query attention is done without copying K/V per query head: the
//! `group = heads / kv_heads` query heads that share a K/V head are stacked
//! into one matrix (`[kv_heads, group * new, head_dim]`) and multiplied once.
//! A sliding window ([`Attend::window`]) is a mask over the same keys; a soft cap
//! ([`Attend::softcap`]) bends the scaled scores before the mask; sinks ([`Attend::sinks`])
//! are one more score column per head that the softmax counts and the values do not; ALiBi's
//! slopes ([`Attend::alibi`]) add a bias per head, query and key to the scores after the cap.

use candle_core::{DType, Device, Tensor, D};

use super::{Attend, BatchLayout, OpsError};

/// Attention for one sequence.
///
/// - `q`: `[new, heads, head_dim]`, queries at positions `cached .. cached + new`.
/// - `k`, `v`: `[cached + new, kv_heads, head_dim]`, any row stride (views
///   into a store are fine); key `j` sits at position `j`.
///
/// Returns `[new, heads * head_dim]`.
pub fn attend(q: &Tensor, k: &Tensor, v: &Tensor, cached: usize, how: Attend<'_>) -> Result<Tensor, OpsError> {
    attend_masked(q, k, v, cached, how, true)
}

/// An encoder's attention over a batch of whole inputs (BERT's, `HParams::encoder`): each
/// sequence's queries see every key of that sequence, before and after them. `q` is
/// `[t, heads, head_dim]`, `k` and `v` `[t, kv_heads, head_dim]`, packed per `batch`, whose
/// sequences must all start at their first token (an encoder keeps no K/V). Returns
/// `[t, heads * head_dim]`.
pub fn attend_both_ways(q: &Tensor, k: &Tensor, v: &Tensor, batch: &BatchLayout, how: Attend<'_>) -> Result<Tensor, OpsError> {
    let mut outs = Vec::with_capacity(batch.len());
    for (i, s) in batch.seqs().iter().enumerate() {
        if s.cached > 0 {
            return Err(OpsError::Layout(format!(
                "an encoder reads its whole input at once: sequence {i} has {} tokens before this chunk",
                s.cached
            )));
        }
        let rows = |x: &Tensor| x.narrow(0, batch.offset(i), s.new);
        outs.push(attend_masked(&rows(q)?, &rows(k)?, &rows(v)?, 0, how, false)?);
    }
    Ok(Tensor::cat(&outs, 0)?)
}

/// [`attend`], its queries seeing the keys after them too where `causal` is false.
fn attend_masked(q: &Tensor, k: &Tensor, v: &Tensor, cached: usize, how: Attend<'_>, causal: bool) -> Result<Tensor, OpsError> {
    let (new, heads, head_dim) = q.dims3()?;
    let (ctx, kv_heads, k_dim) = k.dims3()?;
    if ctx != cached + new || k_dim != head_dim || v.dims3()? != (ctx, kv_heads, head_dim) {
        return Err(OpsError::Layout(format!(
            "attention shapes disagree: q {:?}, k {:?}, v {:?}, cached {cached}",
            q.dims(),
            k.dims(),
            v.dims()
        )));
    }
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(OpsError::Layout(format!(
            "{heads} query heads cannot share {kv_heads} K/V heads"
        )));
    }
    how.check_per_head(heads)?;
    let group = heads / kv_heads;
    // [heads, new, d] -> [kv_heads, group * new, d]; rows ordered (g, token).
    let q = q
        .transpose(0, 1)?
        .contiguous()?
        .reshape((kv_heads, group * new, head_dim))?;
    // [ctx, kv_heads, d] -> [kv_heads, ctx, d], each head's rows packed (copied into that order
    // unless they are: CUDA's matmul takes no matrix whose rows are further apart than a row).
    let k = packed(&k.transpose(0, 1)?)?;
    let v = packed(&v.transpose(0, 1)?)?;
    let scores = softcap((q.matmul(&k.t()?)? * how.scale)?, how)?;
    // Rows (g, token) of K/V head `kvh` are query head `kvh · group + g`'s: the biases' order.
    let scores = match how.alibi {
        Some(_) => (scores + alibi_biases(new, cached, heads, how, q.device())?.reshape((kv_heads, group * new, ctx))?)?,
        None => scores,
    };
    let scores = if causal && (new > 1 || how.first_visible(cached) > 0) {
        let mask = causal_mask(new, cached, how, q.device())?;
        scores
            .reshape((kv_heads, group, new, ctx))?
            .broadcast_add(&mask)?
            .reshape((kv_heads, group * new, ctx))?
    } else if !causal && how.window.is_some() {
        let mask = both_ways_mask(new, how, q.device())?;
        scores
            .reshape((kv_heads, group, new, ctx))?
            .broadcast_add(&mask)?
            .reshape((kv_heads, group * new, ctx))?
    } else {
        scores
    };
    let probs = match how.sinks {
        // Row (g, token) of K/V head `kvh` belongs to query head `kvh · group + g`.
        Some(sinks) => {
            let column: Vec<f32> = (0..kv_heads * group * new).map(|r| sinks[r / new]).collect();
            let column = Tensor::from_vec(column, (kv_heads, group * new, 1), q.device())?.to_dtype(scores.dtype())?;
            let with = candle_nn::ops::softmax_last_dim(&Tensor::cat(&[&scores, &column], 2)?)?;
            // Packed again without the sink column (CUDA's matmul takes packed rows only).
            with.narrow(2, 0, ctx)?.contiguous()?
        }
        None => candle_nn::ops::softmax_last_dim(&scores)?,
    };
    let out = probs.matmul(&v)?; // [kv_heads, group * new, d]
    let out = out
        .reshape((heads, new, head_dim))?
        .transpose(0, 1)?
        .contiguous()?
        .reshape((new, heads * head_dim))?;
    Ok(out)
}

/// `t` (`[batch, rows, cols]`) itself where each matrix's rows are packed, one after another,
/// whatever the stride between matrices (a prefix of a longer K/V); else a contiguous copy.
fn packed(t: &Tensor) -> Result<Tensor, OpsError> {
    let (_, _, cols) = t.dims3()?;
    match t.stride() {
        [_, row, 1] if *row == cols => Ok(t.clone()),
        _ => Ok(t.contiguous()?),
    }
}

/// `c · tanh(s / c)` of every score when `how` has a soft cap `c`.
fn softcap(scores: Tensor, how: Attend<'_>) -> Result<Tensor, OpsError> {
    match how.softcap {
        Some(c) => soft_cap(&scores, c as f64),
        None => Ok(scores),
    }
}

/// `c · tanh(x / c)` of every element (Gemma 2's soft cap, on attention scores and on logits),
/// `x / c` taken as `x · (1/c)` as the CPU kernel (`fast_math::softcap`) and llama.cpp take it.
pub fn soft_cap(x: &Tensor, c: f64) -> Result<Tensor, OpsError> {
    Ok((x.affine(1.0 / c, 0.0)?.tanh()? * c)?)
}

/// `[heads, new, cached + new]`: ALiBi's bias of each head's query `i` (position `cached + i`)
/// for each key ([`Attend::alibi_bias`]).
fn alibi_biases(new: usize, cached: usize, heads: usize, how: Attend<'_>, device: &Device) -> Result<Tensor, OpsError> {
    let ctx = cached + new;
    let data: Vec<f32> = (0..heads * new * ctx)
        .map(|r| how.alibi_bias(r / (new * ctx), cached + r / ctx % new, r % ctx))
        .collect();
    Ok(Tensor::from_vec(data, (heads, new, ctx), device)?)
}

/// `[len, len]` additive mask of an encoder's window over a whole input: query `i` sees keys
/// `how.first_visible(i) ..= window.last_visible(i)` (EmbeddingGemma's local layers).
fn both_ways_mask(len: usize, how: Attend<'_>, device: &Device) -> Result<Tensor, OpsError> {
    let mut data = vec![0f32; len * len];
    for i in 0..len {
        let first = how.first_visible(i);
        let last = how.window.and_then(|w| w.last_visible(i)).unwrap_or(usize::MAX);
        for (j, m) in data[i * len..(i + 1) * len].iter_mut().enumerate() {
            if j < first || j > last {
                *m = f32::NEG_INFINITY;
            }
        }
    }
    Ok(Tensor::from_vec(data, (len, len), device)?)
}

/// `[new, cached + new]` additive mask: query `i` (position `cached + i`) sees
/// keys `how.first_visible(cached + i) ..= cached + i`. Built on `device` by tensor ops from
/// each query's first and last visible key: a GPU's prefill chunk (128 queries × 8,192 keys,
/// per layer) is not filled on the host and sent.
fn causal_mask(new: usize, cached: usize, how: Attend<'_>, device: &Device) -> Result<Tensor, OpsError> {
    let ctx = cached + new;
    let position = |n: usize| {
        u32::try_from(n).map_err(|_| OpsError::Layout(format!("position {n} is too large for a mask")))
    };
    let first = (0..new).map(|i| position(how.first_visible(cached + i))).collect::<Result<Vec<_>, _>>()?;
    let last = (0..new).map(|i| position(cached + i)).collect::<Result<Vec<_>, _>>()?;
    let first = Tensor::from_vec(first, (new, 1), device)?;
    let last = Tensor::from_vec(last, (new, 1), device)?;
    let keys = Tensor::arange(0u32, position(ctx)?, device)?.reshape((1, ctx))?;
    let seen = (keys.broadcast_ge(&first)? * keys.broadcast_le(&last)?)?;
    let open = Tensor::zeros((new, ctx), DType::F32, device)?;
    let hidden = Tensor::full(f32::NEG_INFINITY, (new, ctx), device)?;
    Ok(seen.where_cond(&open, &hidden)?)
}

/// Plain reference: per head, softmax(softcap(q k^T * scale) + ALiBi + mask, beside the head's sink) v,
/// with K/V repeated per query head. Used by tests to check [`attend`].
pub fn attend_reference(q: &Tensor, k: &Tensor, v: &Tensor, cached: usize, how: Attend<'_>) -> Result<Tensor, OpsError> {
    let (new, heads, head_dim) = q.dims3()?;
    let (ctx, kv_heads, _) = k.dims3()?;
    how.check_per_head(heads)?;
    let group = heads / kv_heads;
    let alibi = match how.alibi {
        Some(_) => Some(alibi_biases(new, cached, heads, how, q.device())?),
        None => None,
    };
    let mut outs = Vec::with_capacity(heads);
    for h in 0..heads {
        let qh = q.narrow(1, h, 1)?.squeeze(1)?; // [new, d]
        let kh = k.narrow(1, h / group, 1)?.squeeze(1)?.contiguous()?; // [ctx, d]
        let vh = v.narrow(1, h / group, 1)?.squeeze(1)?.contiguous()?;
        let s = softcap((qh.contiguous()?.matmul(&kh.t()?)? * how.scale)?, how)?;
        let s = match &alibi {
            Some(b) => (s + b.get(h)?)?,
            None => s,
        };
        let s = s.broadcast_add(&causal_mask(new, cached, how, q.device())?)?;
        let p = match how.sinks {
            Some(sinks) => {
                let sink = Tensor::full(sinks[h], (new, 1), q.device())?;
                candle_nn::ops::softmax(&Tensor::cat(&[&s, &sink], 1)?, D::Minus1)?.narrow(1, 0, ctx)?
            }
            None => candle_nn::ops::softmax(&s, D::Minus1)?,
        };
        outs.push(p.matmul(&vh)?.unsqueeze(1)?); // [new, 1, d]
    }
    Ok(Tensor::cat(&outs, 1)?.reshape((new, heads * head_dim))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Window;

    fn rand(shape: (usize, usize, usize), seed: u64) -> Tensor {
        let n = shape.0 * shape.1 * shape.2;
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let data: Vec<f32> = (0..n)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((x >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
            })
            .collect();
        Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar()
            .unwrap()
    }

    #[test]
    fn matches_reference_for_gqa_prefill_and_decode() {
        for (new, cached, heads, kv_heads) in [(5, 0, 4, 2), (1, 7, 4, 1), (3, 4, 6, 6), (1, 0, 2, 2)] {
            let d = 8;
            let q = rand((new, heads, d), 1);
            let k = rand((cached + new, kv_heads, d), 2);
            let v = rand((cached + new, kv_heads, d), 3);
            let sink_logits: Vec<f32> = (0..heads).map(|h| h as f32 * 0.7 - 1.0).collect();
            let slopes: Vec<f32> = (0..heads).map(|h| 0.5f32.powi(h as i32 + 1)).collect();
            let (sliding, chunked) = (Window::Sliding, Window::Chunked);
            for window in [None, Some(sliding(1)), Some(sliding(3)), Some(sliding(100)), Some(chunked(1)), Some(chunked(3)), Some(chunked(100))] {
                for (softcap, sinks, alibi) in [
                    (None, None, None),
                    (Some(0.4), None, None),
                    (None, Some(&sink_logits[..]), None),
                    (Some(0.4), None, Some(&slopes[..])),
                ] {
                    let how = Attend {
                        scale: 0.3,
                        window,
                        softcap,
                        sinks,
                        alibi,
                    };
                    let a = attend(&q, &k, &v, cached, how).unwrap();
                    let r = attend_reference(&q, &k, &v, cached, how).unwrap();
                    assert!(
                        max_diff(&a, &r) < 1e-5,
                        "new {new} cached {cached} heads {heads}/{kv_heads} window {window:?} softcap {softcap:?} sinks {sinks:?} alibi {alibi:?}"
                    );
                }
            }
        }
    }

    /// One key of score `s` beside a sink of logit `σ`: the output is the value times
    /// `e^s / (e^s + e^σ)`, the sink's share going to no value at all.
    #[test]
    fn a_sink_takes_its_share_of_the_softmax_and_gives_no_value() {
        let q = Tensor::from_vec(vec![1.0f32, 2.0], (1, 1, 2), &Device::Cpu).unwrap();
        let k = Tensor::from_vec(vec![0.5f32, 0.25], (1, 1, 2), &Device::Cpu).unwrap();
        let v = Tensor::from_vec(vec![3.0f32, -4.0], (1, 1, 2), &Device::Cpu).unwrap();
        let (scale, sink) = (0.5f32, 0.8f32);
        let s = (1.0 * 0.5 + 2.0 * 0.25) * scale;
        let share = s.exp() / (s.exp() + sink.exp());
        let how = Attend {
            sinks: Some(&[sink]),
            ..Attend::causal(scale as f64)
        };
        let got = attend(&q, &k, &v, 0, how).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!((got[0] - 3.0 * share).abs() < 1e-6 && (got[1] + 4.0 * share).abs() < 1e-6, "{got:?}");
        let plain = attend(&q, &k, &v, 0, Attend::causal(scale as f64)).unwrap();
        assert_eq!(plain.flatten_all().unwrap().to_vec1::<f32>().unwrap(), vec![3.0, -4.0]);
    }

    /// ALiBi, worked by hand: a query at position 2 over three keys weighs key `k` by the
    /// softmax of `scale · q·k − m · (2 − k)`, its head's slope `m` pulling it toward the near
    /// keys; each head by its own slope.
    #[test]
    fn alibi_biases_each_head_toward_near_keys_by_its_slope() {
        let q = Tensor::from_vec(vec![1f32, 0.0, 1.0, 0.0], (1, 2, 2), &Device::Cpu).unwrap();
        let k = Tensor::from_vec(vec![2f32, 0.0, 1.0, 0.0, 0.0, 0.0], (3, 1, 2), &Device::Cpu).unwrap();
        let v = Tensor::from_vec(vec![1f32, 0.0, 0.0, 1.0, 1.0, 1.0], (3, 1, 2), &Device::Cpu).unwrap();
        let (scale, slopes) = (0.5f64, [0.25f32, 2.0]);
        let want = |m: f64| {
            let s: Vec<f64> = [2.0, 1.0, 0.0].iter().enumerate().map(|(k, dot)| dot * scale - m * (2 - k) as f64).collect();
            let e: Vec<f64> = s.iter().map(|x| x.exp()).collect();
            let z: f64 = e.iter().sum();
            [(e[0] + e[2]) / z, (e[1] + e[2]) / z].map(|x| x as f32)
        };
        let how = Attend {
            alibi: Some(&slopes),
            ..Attend::causal(scale)
        };
        let got = attend(&q, &k, &v, 2, how).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let want: Vec<f32> = slopes.iter().flat_map(|&m| want(m as f64)).collect();
        assert!(got.iter().zip(&want).all(|(g, w)| (g - w).abs() < 1e-6), "{got:?} vs {want:?}");
        // Wrong-length slopes are refused.
        let short = Attend {
            alibi: Some(&slopes[..1]),
            ..Attend::causal(scale)
        };
        assert!(attend(&q, &k, &v, 2, short).is_err());
    }

    #[test]
    fn a_window_sees_exactly_its_last_positions() {
        // A decoded row at position 9 with a window of 4 equals attention over keys 6..=9 alone.
        let (cached, d, w) = (9, 8, 4);
        let q = rand((1, 2, d), 4);
        let k = rand((cached + 1, 1, d), 5);
        let v = rand((cached + 1, 1, d), 6);
        let windowed = attend(
            &q,
            &k,
            &v,
            cached,
            Attend {
                window: Some(Window::Sliding(w)),
                ..Attend::causal(0.5)
            },
        )
        .unwrap();
        let (ks, vs) = (
            k.narrow(0, cached + 1 - w, w).unwrap(),
            v.narrow(0, cached + 1 - w, w).unwrap(),
        );
        let alone = attend(&q, &ks, &vs, w - 1, Attend::causal(0.5)).unwrap();
        assert!(max_diff(&windowed, &alone) < 1e-6);
        let full = attend(&q, &k, &v, cached, Attend::causal(0.5)).unwrap();
        assert!(max_diff(&windowed, &full) > 1e-3, "the window changes the result");
    }

    /// Chunks of 4 over a prompt of 10: the row at position 9 equals attention over keys 8..=9
    /// alone, the row at 8 (its chunk's first) is its own value, the row at 3 sees all of
    /// 0..=3, as without chunks.
    #[test]
    fn a_chunk_sees_its_own_chunk_up_to_itself() {
        let (n, d, c) = (10, 8, 4);
        let q = rand((n, 2, d), 7);
        let k = rand((n, 1, d), 8);
        let v = rand((n, 1, d), 9);
        let how = Attend {
            window: Some(Window::Chunked(c)),
            ..Attend::causal(0.5)
        };
        let chunked = attend(&q, &k, &v, 0, how).unwrap();
        let full = attend(&q, &k, &v, 0, Attend::causal(0.5)).unwrap();
        let row = |t: &Tensor, i: usize| t.narrow(0, i, 1).unwrap();
        let alone = attend(&row(&q, 9), &k.narrow(0, 8, 2).unwrap(), &v.narrow(0, 8, 2).unwrap(), 1, Attend::causal(0.5)).unwrap();
        assert!(max_diff(&row(&chunked, 9), &alone) < 1e-6);
        let own_value = row(&v, 8).flatten_all().unwrap().repeat(2).unwrap().reshape((1, 2 * d)).unwrap();
        assert!(max_diff(&row(&chunked, 8), &own_value) < 1e-6);
        assert!(max_diff(&row(&chunked, 3), &row(&full, 3)) < 1e-6);
        assert!(max_diff(&row(&chunked, 9), &row(&full, 9)) > 1e-3, "the chunk changes the result");
        // Decoding position 9 over the cached rest gives the prefill's row.
        let decoded = attend(&row(&q, 9), &k, &v, 9, how).unwrap();
        assert!(max_diff(&decoded, &row(&chunked, 9)) < 1e-6);
    }

    /// One query over three keys, worked by hand in f64: the weights are the softmax of
    /// `c · tanh(scale · q·k / c)`, and differ from the uncapped ones.
    #[test]
    fn a_soft_cap_bends_each_score_by_tanh() {
        let q = Tensor::from_vec(vec![2f32, -1.0], (1, 1, 2), &Device::Cpu).unwrap();
        let k = Tensor::from_vec(vec![1f32, 0.0, 0.5, 2.0, -1.0, 1.5], (3, 1, 2), &Device::Cpu).unwrap();
        let v = Tensor::from_vec(vec![1f32, 0.0, 0.0, 1.0, 2.0, 2.0], (3, 1, 2), &Device::Cpu).unwrap();
        let (scale, cap) = (0.8f64, 1.2f64);
        let expect = |capped: bool| {
            let s: Vec<f64> = [2.0, -1.0, -3.5]
                .iter()
                .map(|dot: &f64| dot * scale)
                .map(|s| if capped { cap * (s / cap).tanh() } else { s })
                .collect();
            let e: Vec<f64> = s.iter().map(|x| x.exp()).collect();
            let z: f64 = e.iter().sum();
            let v = [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]];
            [0, 1].map(|j| (0..3).map(|i| e[i] / z * v[i][j]).sum::<f64>() as f32)
        };
        let how = Attend {
            softcap: Some(cap as f32),
            ..Attend::causal(scale)
        };
        for (how, capped) in [(how, true), (Attend::causal(scale), false)] {
            let got = attend(&q, &k, &v, 2, how).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let want = expect(capped);
            assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6), "{got:?} vs {want:?} (capped {capped})");
        }
        assert!((expect(true)[1] - expect(false)[1]).abs() > 0.1, "the cap must matter here");
    }

    /// The mask hides exactly the keys before a query's first visible one and after the query,
    /// for every kind of window.
    #[test]
    fn the_mask_hides_what_each_query_does_not_see() {
        let windows = [None, Some(Window::Sliding(5)), Some(Window::Chunked(4))];
        for window in windows {
            for (new, cached) in [(1, 0), (7, 0), (6, 9), (1, 13)] {
                let how = Attend {
                    window,
                    ..Attend::causal(1.0)
                };
                let expect: Vec<Vec<f32>> = (0..new)
                    .map(|i| {
                        let first = how.first_visible(cached + i);
                        let seen = |j: usize| j >= first && j <= cached + i;
                        (0..cached + new).map(|j| if seen(j) { 0.0 } else { f32::NEG_INFINITY }).collect()
                    })
                    .collect();
                let mask = causal_mask(new, cached, how, &Device::Cpu).unwrap().to_vec2::<f32>().unwrap();
                assert_eq!(mask, expect, "{window:?}, {new} new after {cached}");
            }
        }
    }

    /// A prefix of longer K/V (rows packed, matrices further apart) is used as it is; a view
    /// whose rows are spread is copied.
    #[test]
    fn packed_keeps_prefixes_and_copies_spread_rows() {
        let kv = rand((2, 10, 4), 3);
        let prefix = kv.narrow(1, 0, 6).unwrap();
        assert!(!prefix.is_contiguous());
        assert_eq!(packed(&prefix).unwrap().stride(), prefix.stride());
        let spread = kv.transpose(0, 1).unwrap();
        assert!(packed(&spread).unwrap().is_contiguous());
        assert_eq!(
            packed(&spread).unwrap().to_vec3::<f32>().unwrap(),
            spread.to_vec3::<f32>().unwrap()
        );
    }

    #[test]
    fn rejects_mismatched_shapes() {
        let q = rand((2, 4, 8), 1);
        let k = rand((3, 2, 8), 2);
        assert!(attend(&q, &k, &k, 0, Attend::causal(1.0)).is_err());
    }
}
