//! The decode/prefill benchmark itself.

use std::path::Path;
use std::time::{Duration, Instant};

use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama;

use crate::model::gguf::GgufFile;
use crate::model::{Logits, ModelError, Transformer};
use crate::ops::BatchLayout;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("candle-transformers reference failed: {0}")]
    Reference(#[from] candle_core::Error),
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    #[error(transparent)]
    Client(#[from] super::client::ClientError),
    #[error(transparent)]
    Persist(#[from] crate::persist::PersistError),
    /// The server answered a benchmark request with an error.
    #[error("the server failed a request: {0}")]
    Serve(String),
    /// Options or inputs the benchmark cannot run with.
    #[error("{0}")]
    Invalid(String),
    #[error("the candle-transformers reference (quantized_llama) needs a llama-architecture model; this one is {0} (pass --no-reference)")]
    NotLlama(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BenchOptions {
    pub prompt_tokens: usize,
    pub decode_tokens: usize,
    /// Sequences run together: prefill of `batch` prompts in one forward, then decode steps of
    /// `batch` tokens. Throughputs count every sequence's tokens.
    pub batch: usize,
    pub repeats: usize,
    /// Also time candle-transformers' `quantized_llama` on the file.
    pub reference: bool,
    /// How our paged store keeps K/V.
    pub kv_dtype: crate::config::KvDtype,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            prompt_tokens: 256,
            decode_tokens: 64,
            batch: 1,
            repeats: 3,
            reference: true,
            kv_dtype: crate::config::KvDtype::F16,
        }
    }
}

/// Tokens per second of one implementation.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Throughput {
    /// `None` where the prefill was not timed: candle-transformers' `quantized_llama` cannot
    /// prefill several sequences in one forward (its last-position view is strided, and its
    /// quantized matmul refuses it), so at batch > 1 its cache is filled one position at a time.
    pub prefill_tok_s: Option<f64>,
    pub decode_tok_s: f64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BenchReport {
    pub options: BenchOptions,
    pub model: String,
    pub device: String,
    pub parameters: u64,
    pub quantization: String,
    pub ours: Throughput,
    /// `None` when the reference was not run.
    pub candle: Option<Throughput>,
    /// The instruction set our quantized matmul ran on.
    pub isa: &'static str,
    pub threads: usize,
}

/// The run's figures (model, device, threads, kernels) and then [`BenchReport::table`].
impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "model: {} ({:.1}M parameters, {}), device: {}, batch {}, K/V {}, {} threads, quantized matmul: {}, best of {} runs\n",
            self.model,
            self.parameters as f64 / 1e6,
            self.quantization,
            self.device,
            self.options.batch,
            self.options.kv_dtype,
            self.threads,
            self.isa,
            self.options.repeats
        )?;
        f.write_str(&self.table())
    }
}

impl BenchReport {
    /// A Markdown table, as README carries it.
    pub fn table(&self) -> String {
        let o = &self.ours;
        let cell = |x: Option<f64>, digits: usize| match x {
            Some(x) => format!("{x:.digits$}"),
            None => "not timed".to_string(),
        };
        let head = format!(
            "| implementation | prefill tok/s ({} × {} tokens) | decode tok/s ({} × {} tokens) |\n|---|---:|---:|\n\
             | hearth | {} | {:.1} |\n",
            self.options.batch,
            self.options.prompt_tokens,
            self.options.batch,
            self.options.decode_tokens,
            cell(o.prefill_tok_s, 1),
            o.decode_tok_s,
        );
        let Some(c) = &self.candle else {
            return head;
        };
        let prefill_ratio = o.prefill_tok_s.zip(c.prefill_tok_s).map(|(a, b)| a / b);
        format!(
            "{head}| candle-transformers quantized_llama | {} | {:.1} |\n\
             | ratio hearth / candle | {} | {:.2} |\n",
            cell(c.prefill_tok_s, 1),
            c.decode_tok_s,
            cell(prefill_ratio, 2),
            o.decode_tok_s / c.decode_tok_s,
        )
    }
}

/// Runs the benchmark on the GGUF at `path` (llama-architecture when the reference is timed too).
pub fn run_decode_bench(path: &Path, device: &Device, opts: BenchOptions) -> Result<BenchReport, BenchError> {
    let mut file = GgufFile::open(path)?;
    let arch = crate::model::gguf::md_str(file.metadata(), "general.architecture")?.to_string();
    if opts.reference && arch != "llama" {
        return Err(BenchError::NotLlama(arch));
    }
    let total = opts.prompt_tokens + opts.decode_tokens + 1;
    let ours = Transformer::from_gguf(&mut file, device, total)?;
    let parameters = file.parameter_count();
    let quantization = file.dominant_dtype();
    let mut reader = std::fs::File::open(path).map_err(|source| ModelError::Io {
        path: path.into(),
        source,
    })?;
    let mut theirs = if opts.reference {
        let content = candle_core::quantized::gguf_file::Content::read(&mut reader)?;
        Some(quantized_llama::ModelWeights::from_gguf(content, &mut reader, device)?)
    } else {
        None
    };

    let vocab = ours.hparams().vocab_size as u32;
    // Deterministic, spread-out prompt ids.
    let prompt: Vec<u32> = (0..opts.prompt_tokens as u32)
        .map(|i| (i * 7919 + 13) % vocab)
        .collect();

    let batch = opts.batch.max(1);
    let mut best_ours = (None, Duration::MAX);
    let mut best_theirs = (None, Duration::MAX);
    let best = |(p, d): (Option<Duration>, Duration), (q, e): (Option<Duration>, Duration)| {
        (p.into_iter().chain(q).min(), d.min(e))
    };
    for _ in 0..opts.repeats.max(1) {
        let r = run_ours(&ours, &prompt, opts.decode_tokens, batch, opts.kv_dtype)?;
        best_ours = best(best_ours, (Some(r.0), r.1));
        if let Some(theirs) = theirs.as_mut() {
            best_theirs = best(
                best_theirs,
                run_theirs(theirs, &prompt, opts.decode_tokens, batch, device)?,
            );
        }
    }
    let tput = |(p, d): (Option<Duration>, Duration)| Throughput {
        prefill_tok_s: p.map(|p| (batch * opts.prompt_tokens) as f64 / p.as_secs_f64()),
        decode_tok_s: (batch * opts.decode_tokens) as f64 / d.as_secs_f64(),
    };
    Ok(BenchReport {
        options: opts,
        model: path
            .file_name()
            .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned()),
        device: crate::model::device_name(device),
        parameters,
        quantization,
        ours: tput(best_ours),
        candle: theirs.is_some().then(|| tput(best_theirs)),
        isa: crate::ops::qmatmul::Isa::detect().name(),
        threads: candle_core::utils::get_num_threads(),
    })
}

/// Each row's argmax: the next token of each sequence.
fn argmax_rows(logits: &Tensor) -> Result<Vec<u32>, candle_core::Error> {
    let rows = logits.dims().first().copied().unwrap_or(1);
    logits.reshape((rows, ()))?.argmax(1)?.to_vec1::<u32>()
}

/// Ours through the paged block store that `hearth run` uses (blocks of 16, on the model's
/// device): `batch` copies of `prompt` prefilled in one forward, then decoded together.
fn run_ours(
    tf: &Transformer,
    prompt: &[u32],
    decode: usize,
    batch: usize,
    kv_dtype: crate::config::KvDtype,
) -> Result<(Duration, Duration), BenchError> {
    let (mut memory, tables) = super::sequences(tf, kv_dtype, prompt.len() + decode + 1, batch)?;
    let tables: Vec<&[crate::kv::BlockId]> = tables.iter().map(Vec::as_slice).collect();
    let layout = |cached: usize, new: usize| {
        BatchLayout::new(vec![crate::ops::SeqChunk { cached, new }; batch]).map_err(ModelError::from)
    };
    let ids: Vec<u32> = prompt.iter().copied().cycle().take(prompt.len() * batch).collect();
    let mut states = super::fresh_states(tf, batch);
    let t0 = Instant::now();
    let logits = tf.forward_with(
        &ids,
        &layout(0, prompt.len())?,
        memory.store(&tables).as_mut(),
        &mut states,
        Logits::LastPerSequence,
    )?;
    let mut next = argmax_rows(&logits)?;
    let prefill = t0.elapsed();
    let t1 = Instant::now();
    for i in 0..decode {
        let logits = tf.forward_with(
            &next,
            &layout(prompt.len() + i, 1)?,
            memory.store(&tables).as_mut(),
            &mut states,
            Logits::LastPerSequence,
        )?;
        next = argmax_rows(&logits)?;
    }
    Ok((prefill, t1.elapsed()))
}

/// candle-transformers' model on the same ids: prefill timed at batch 1; at batch > 1 its
/// cache is filled one position at a time (see [`Throughput::prefill_tok_s`]) and only the
/// decode is timed.
fn run_theirs(
    m: &mut quantized_llama::ModelWeights,
    prompt: &[u32],
    decode: usize,
    batch: usize,
    device: &Device,
) -> Result<(Option<Duration>, Duration), BenchError> {
    m.clear_kv_cache();
    let t0 = Instant::now();
    let (mut next, prefill) = if batch == 1 {
        let logits = m.forward(&Tensor::new(prompt, device)?.unsqueeze(0)?, 0)?;
        (argmax_rows(&logits)?, Some(t0.elapsed()))
    } else {
        let mut logits = None;
        for (pos, &id) in prompt.iter().enumerate() {
            let input = Tensor::new(vec![id; batch].as_slice(), device)?.unsqueeze(1)?;
            logits = Some(m.forward(&input, pos)?);
        }
        let Some(logits) = logits else {
            return Err(BenchError::Invalid("an empty prompt".into()));
        };
        (argmax_rows(&logits)?, None)
    };
    let t1 = Instant::now();
    for i in 0..decode {
        let input = Tensor::new(next.as_slice(), device)?.unsqueeze(1)?;
        let logits = m.forward(&input, prompt.len() + i)?;
        next = argmax_rows(&logits)?;
    }
    Ok((prefill, t1.elapsed()))
}
