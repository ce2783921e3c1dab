//! `hearth bench`: the benchmarks' options checked, the benchmark model
//! written when none is given, each report printed (and saved as JSON).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use hearth::config::{AppPaths, Settings};
use hearth::model::select_device;

use super::args::BenchCommand;
use super::progress::with_spinner;

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
            };
            cache(settings, paths, gguf, opts, json)
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
            serve(settings, paths, gguf, opts, json)
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
            };
            disk(settings, paths, gguf, opts, json)
        }
        BenchCommand::Decode {
            gguf,
            prompt_tokens,
            decode_tokens,
            repeats,
            no_reference,
        } => {
            let opts = hearth::bench::BenchOptions {
                prompt_tokens,
                decode_tokens,
                repeats,
                reference: !no_reference,
            };
            decode(settings, paths, gguf, opts)
        }
    }
}

/// The benchmark model: `gguf` if given, else the random ~50M Q8_0 Llama,
/// written once into the data dir.
fn bench_model(paths: &AppPaths, gguf: Option<PathBuf>) -> Result<PathBuf> {
    use hearth::model::testkit::{write_model, TinyModelSpec};
    if let Some(p) = gguf {
        return Ok(p);
    }
    let dir = paths.data_dir.join("bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let p = dir.join("random-llama-50m-ctx8k-q8_0.gguf");
    if !p.exists() {
        let tmp = p.with_extension("gguf.tmp");
        with_spinner(format!("writing the benchmark model to {}", p.display()), || {
            write_model(&TinyModelSpec::bench_50m(), &tmp)
        })?;
        std::fs::rename(&tmp, &p)?;
    }
    Ok(p)
}

fn cache(
    settings: &Settings,
    paths: &AppPaths,
    gguf: Option<PathBuf>,
    opts: hearth::bench::CacheBenchOptions,
    json: Option<PathBuf>,
) -> Result<ExitCode> {
    let path = bench_model(paths, gguf)?;
    let device = select_device(settings.model.device)?;
    let report = with_spinner("benchmarking".into(), || {
        hearth::bench::run_cache_bench(&path, &device, opts)
    })?;
    println!(
        "model: {} ({:.1}M parameters), device: {}, prefix {} + suffix {} tokens, block size {}, best of {} runs\n",
        path.display(),
        report.parameters as f64 / 1e6,
        report.device,
        opts.prefix_tokens,
        opts.suffix_tokens,
        opts.block_size,
        opts.repeats
    );
    print!("{}", report.table());
    write_json(&report, json)?;
    Ok(ExitCode::SUCCESS)
}

fn disk(
    settings: &Settings,
    paths: &AppPaths,
    gguf: Option<PathBuf>,
    opts: hearth::bench::DiskBenchOptions,
    json: Option<PathBuf>,
) -> Result<ExitCode> {
    let path = bench_model(paths, gguf)?;
    let device = select_device(settings.model.device)?;
    let work = paths
        .data_dir
        .join("bench")
        .join(format!("disk-{}", std::process::id()));
    let report = with_spinner("benchmarking the disk tier".into(), || {
        hearth::bench::run_disk_bench(&path, &device, &work, opts)
    })?;
    println!(
        "model: {} ({:.1}M parameters), device: {}, a {}-token conversation + {}-token reply, then a {}-token \
         message; block size {}, best of {} runs\n",
        path.display(),
        report.parameters as f64 / 1e6,
        report.device,
        opts.history_tokens,
        opts.reply_tokens,
        opts.question_tokens,
        opts.block_size,
        opts.repeats
    );
    print!("{}", report.table());
    write_json(&report, json)?;
    Ok(ExitCode::SUCCESS)
}

fn serve(
    settings: &Settings,
    paths: &AppPaths,
    gguf: Option<PathBuf>,
    opts: hearth::bench::ServeBenchOptions,
    json: Option<PathBuf>,
) -> Result<ExitCode> {
    let path = bench_model(paths, gguf)?;
    let device = select_device(settings.model.device)?;
    let runs = 2 * opts.concurrency.len();
    let report = with_spinner(
        format!("benchmarking the server ({runs} runs of {} requests)", opts.requests),
        || hearth::bench::run_serve_bench(&path, &device, settings, opts.clone()),
    )?;
    println!(
        "model: {} ({:.1}M parameters), device: {}, {} requests: {}-token system prompt + {}-token question, \
         up to {} reply tokens; max_running {}, max_batch_tokens {}\n",
        path.display(),
        report.parameters as f64 / 1e6,
        report.device,
        opts.requests,
        opts.system_tokens,
        opts.question_tokens,
        opts.max_tokens,
        report.max_running,
        report.max_batch_tokens
    );
    print!("{}", report.table());
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

fn decode(
    settings: &Settings,
    paths: &AppPaths,
    gguf: Option<PathBuf>,
    opts: hearth::bench::BenchOptions,
) -> Result<ExitCode> {
    let path = bench_model(paths, gguf)?;
    let device = select_device(settings.model.device)?;
    let report = with_spinner("benchmarking".into(), || {
        hearth::bench::run_decode_bench(&path, &device, opts)
    })?;
    println!(
        "model: {} ({:.1}M parameters, {}), device: {}, {} threads, quantized matmul: {}, best of {} runs\n",
        path.display(),
        report.parameters as f64 / 1e6,
        report.quantization,
        hearth::model::device_name(&device),
        report.threads,
        report.isa,
        opts.repeats
    );
    print!("{}", report.table());
    Ok(ExitCode::SUCCESS)
}
