//! `hearth bench`: the benchmarks' options checked, the benchmark model
//! written when none is given, each report printed (and saved as JSON).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use hearth::bench::GpuBenchOptions;
use hearth::config::{AppPaths, Settings};
use hearth::model::select_device;
use hearth::model::testkit::{write_model, TinyModelSpec};

use super::args::BenchCommand;
use super::progress::with_spinner;

// long: one arm per benchmark, each checking its options and building them from its flags.
pub fn run(settings: &Settings, paths: &AppPaths, which: BenchCommand) -> Result<ExitCode> {
    match which {
        BenchCommand::Cache {
            gguf,
            prefix_tokens,
            suffix_tokens,
            repeats,
            json,
        } => {
            let opts = hearth::bench::CacheBenchOptions {
                prefix_tokens,
                suffix_tokens,
                block_size: settings.cache.block_size,
                repeats,
                kv_dtype: settings.cache.kv_dtype,
            };
            let path = bench_model(paths, gguf)?;
            let device = select_device(settings.model.device)?;
            report("benchmarking".into(), json, || {
                hearth::bench::run_cache_bench(&path, &device, opts)
            })
        }
        BenchCommand::Serve {
            gguf,
            requests,
            system_tokens,
            question_tokens,
            reply_tokens,
            concurrency,
            json,
        } => {
            if requests == 0 || concurrency.is_empty() || concurrency.contains(&0) {
                bail!("--requests and every --concurrency level must be at least 1");
            }
            let opts = hearth::bench::ServeBenchOptions {
                requests,
                system_tokens,
                question_tokens,
                max_tokens: reply_tokens,
                concurrency,
            };
            let path = bench_model(paths, gguf)?;
            let device = select_device(settings.model.device)?;
            let label = format!(
                "benchmarking the server ({} runs of {} requests)",
                2 * opts.concurrency.len(),
                opts.requests
            );
            report(label, json, || {
                hearth::bench::run_serve_bench(&path, &device, settings, opts)
            })
        }
        BenchCommand::Agent {
            gguf,
            turns,
            system_tokens,
            result_tokens,
            reply_tokens,
            json,
        } => {
            if turns < 2 || result_tokens == 0 || reply_tokens == 0 {
                bail!("--turns must be at least 2, and --result-tokens and --reply-tokens at least 1");
            }
            let opts = hearth::bench::AgentBenchOptions {
                turns,
                system_tokens,
                result_tokens,
                reply_tokens,
            };
            let path = bench_model(paths, gguf)?;
            let device = select_device(settings.model.device)?;
            report(format!("benchmarking an agent's loop (4 runs of {turns} turns)"), json, || {
                hearth::bench::run_agent_bench(&path, &device, settings, opts)
            })
        }
        BenchCommand::Disk {
            gguf,
            history_tokens,
            question_tokens,
            reply_tokens,
            repeats,
            json,
        } => {
            if history_tokens < settings.cache.block_size || question_tokens == 0 || reply_tokens == 0 {
                bail!("--history-tokens must hold at least one block, and --question-tokens and --reply-tokens at least 1");
            }
            let opts = hearth::bench::DiskBenchOptions {
                history_tokens,
                question_tokens,
                reply_tokens,
                block_size: settings.cache.block_size,
                repeats,
                kv_dtype: settings.cache.kv_dtype,
            };
            let path = bench_model(paths, gguf)?;
            let device = select_device(settings.model.device)?;
            let work = paths
                .data_dir
                .join("bench")
                .join(format!("disk-{}", std::process::id()));
            report("benchmarking the disk tier".into(), json, || {
                hearth::bench::run_disk_bench(&path, &device, &work, opts)
            })
        }
        BenchCommand::Grammar {
            gguf,
            tokens,
            batch,
            repeats,
            json,
        } => grammar(
            settings,
            paths,
            gguf,
            hearth::bench::GrammarBenchOptions { tokens, batch, repeats },
            json,
        ),
        BenchCommand::Gpu {
            gguf,
            ttft_tokens,
            prompt_tokens,
            decode_tokens,
            repeats,
            json,
        } => {
            let opts = GpuBenchOptions {
                ttft_tokens,
                prompt_tokens,
                decode_tokens,
                batches: vec![1, 16],
                repeats,
                block_size: settings.cache.block_size,
                kv_dtype: settings.cache.kv_dtype,
            };
            gpu(settings, paths, gguf, opts, json)
        }
        BenchCommand::Kv {
            gguf,
            prompts,
            tokens,
            json,
        } => kv(settings, paths, gguf, prompts, tokens, json),
        BenchCommand::Devices {
            gguf,
            prompts,
            tokens,
            json,
        } => devices(settings, paths, gguf, prompts, tokens, json),
        BenchCommand::Decode {
            gguf,
            prompt_tokens,
            decode_tokens,
            batch,
            repeats,
            no_reference,
            json,
        } => {
            if batch == 0 || prompt_tokens == 0 {
                bail!("--batch and --prompt-tokens must be at least 1");
            }
            let opts = hearth::bench::BenchOptions {
                prompt_tokens,
                decode_tokens,
                batch,
                repeats,
                reference: !no_reference,
                kv_dtype: settings.cache.kv_dtype(),
            };
            decode(settings, paths, gguf, opts, json)
        }
    }
}

/// `hearth bench decode`: our forward against candle's `quantized_llama` on `gguf`.
fn decode(
    settings: &Settings,
    paths: &AppPaths,
    gguf: Option<PathBuf>,
    opts: hearth::bench::BenchOptions,
    json: Option<PathBuf>,
) -> Result<ExitCode> {
    let path = bench_model(paths, gguf)?;
    let device = select_device(settings.model.device)?;
    report("benchmarking".into(), json, || {
        hearth::bench::run_decode_bench(&path, &device, opts)
    })
}

/// `hearth bench grammar`: constrained against unconstrained decoding on `gguf`.
fn grammar(
    settings: &Settings,
    paths: &AppPaths,
    gguf: Option<PathBuf>,
    opts: hearth::bench::GrammarBenchOptions,
    json: Option<PathBuf>,
) -> Result<ExitCode> {
    let path = bench_model(paths, gguf)?;
    let device = select_device(settings.model.device)?;
    report("benchmarking constrained decoding".into(), json, || {
        hearth::bench::run_grammar_bench(&path, &device, settings, opts)
    })
}

/// The prompts `bench kv` and `bench devices` compare over: those given, else four with clear
/// answers; and at least one token each.
fn compared_prompts(prompts: Vec<String>, tokens: usize) -> Result<Vec<String>> {
    if tokens == 0 {
        bail!("--tokens must be at least 1");
    }
    Ok(if prompts.is_empty() {
        hearth::bench::KV_BENCH_PROMPTS.iter().map(|p| p.to_string()).collect()
    } else {
        prompts
    })
}

/// `hearth bench kv`: the K/V types against f32 on `gguf` (default prompts when none given).
fn kv(
    settings: &Settings,
    paths: &AppPaths,
    gguf: Option<PathBuf>,
    prompts: Vec<String>,
    tokens: usize,
    json: Option<PathBuf>,
) -> Result<ExitCode> {
    let prompts = compared_prompts(prompts, tokens)?;
    let path = bench_model(paths, gguf)?;
    let device = select_device(settings.model.device)?;
    let opts = hearth::bench::KvBenchOptions { prompts, tokens };
    report("comparing K/V types".into(), json, || {
        hearth::bench::run_kv_bench(&path, &device, opts)
    })
}

/// `hearth bench devices`: the configured device against the CPU on `gguf`; exit status 1
/// when they disagree where the CPU's choice is clear.
fn devices(
    settings: &Settings,
    paths: &AppPaths,
    gguf: Option<PathBuf>,
    prompts: Vec<String>,
    tokens: usize,
    json: Option<PathBuf>,
) -> Result<ExitCode> {
    let prompts = compared_prompts(prompts, tokens)?;
    let path = bench_model(paths, gguf)?;
    let device = select_device(settings.model.device)?;
    let opts = hearth::bench::DeviceBenchOptions {
        prompts,
        tokens,
        kv_dtype: settings.cache.kv_dtype(),
    };
    let r = with_spinner("comparing the device with the CPU".into(), || {
        hearth::bench::run_device_bench(&path, &device, opts)
    })?;
    print!("{r}");
    write_json(&r, json)?;
    Ok(if r.agrees() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The benchmark model: `gguf` if given, else the random ~50M Q8_0 Llama,
/// written once into the data dir.
fn bench_model(paths: &AppPaths, gguf: Option<PathBuf>) -> Result<PathBuf> {
    match gguf {
        Some(p) => Ok(p),
        None => written_model(paths, "random-llama-50m-ctx8k-q8_0.gguf", TinyModelSpec::bench_50m),
    }
}

/// The random model `spec` describes, written once into the data dir's `bench/` as `name`.
fn written_model(paths: &AppPaths, name: &str, spec: impl FnOnce() -> TinyModelSpec) -> Result<PathBuf> {
    let dir = paths.data_dir.join("bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let p = dir.join(name);
    if !p.exists() {
        let tmp = p.with_extension("gguf.tmp");
        with_spinner(format!("writing the benchmark model to {}", p.display()), || {
            write_model(&spec(), &tmp)
        })?;
        std::fs::rename(&tmp, &p)?;
    }
    Ok(p)
}

/// `hearth bench gpu`: the 1B-shaped Q4_K model (written once) and then `gguf`.
fn gpu(
    settings: &Settings,
    paths: &AppPaths,
    gguf: Vec<PathBuf>,
    opts: GpuBenchOptions,
    json: Option<PathBuf>,
) -> Result<ExitCode> {
    let device = select_device(settings.model.device)?;
    if !device.is_cuda() {
        bail!("bench gpu measures the CUDA path: run it with --device cuda on a build with the cuda feature");
    }
    let mut models = vec![written_model(
        paths,
        "random-llama-1b-ctx16k-q4_k.gguf",
        TinyModelSpec::bench_1b,
    )?];
    models.extend(gguf);
    let work = paths.data_dir.join("bench").join(format!("gpu-{}", std::process::id()));
    // Each section to stderr as it is measured; the whole report to stdout at the end.
    report("benchmarking the CUDA path".into(), json, || {
        hearth::bench::run_gpu_bench(&models, &device, &work, opts, &mut |section| eprintln!("\n{section}"))
    })
}

/// Runs one benchmark under a spinner, prints its report (which prints its own figures and
/// table) and writes it as JSON when asked.
fn report<R, E>(label: String, json: Option<PathBuf>, run: impl FnOnce() -> Result<R, E>) -> Result<ExitCode>
where
    R: std::fmt::Display + serde::Serialize,
    E: std::error::Error + Send + Sync + 'static,
{
    let report = with_spinner(label, run)?;
    print!("{report}");
    write_json(&report, json)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `value` as pretty JSON to `path` ("-": stdout).
fn write_json(value: &impl serde::Serialize, path: Option<PathBuf>) -> Result<()> {
    let Some(path) = path else { return Ok(()) };
    let text = serde_json::to_string_pretty(value)?;
    if path.as_os_str() == "-" {
        println!("{text}");
    } else {
        std::fs::write(&path, text + "\n").with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
