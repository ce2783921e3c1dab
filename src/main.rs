//! The `hearth` binary: command line → settings → model → command.
//!
//! Thin on purpose: parsing flags (clap) and printing live here; everything
//! else is a library call. `anyhow` is used only in this file.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

use hearth::config::{AppPaths, ConfigFile, Overrides, Settings};
use hearth::engine::{DiskSettings, Engine, EngineHandle, Event, GenerateParams, GenerateRequest};
use hearth::model::gguf::GgufFile;
use hearth::model::source::{resolve_with, Cancel, DownloadProgress, HubOptions, ModelSource, ResolvedModel};
use hearth::model::tokenizer::Tokenizer;
use hearth::model::{select_device, LoadedModel};
use hearth::persist::{Conversation, ConversationId, Message, Role};

#[derive(Parser, Debug)]
#[command(
    name = "hearth",
    version,
    about = "Run a quantized LLM locally and keep every conversation warm."
)]
struct Cli {
    /// Config file (default: the platform config dir's hearth/config.toml).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Data directory (conversations, caches).
    #[arg(long, global = true, env = "HEARTH_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Model: a local .gguf file or owner/repo:file.gguf[@revision] on the Hugging Face hub.
    #[arg(long, short = 'm', global = true, value_name = "MODEL")]
    model: Option<String>,
    /// Device: auto, cpu, cuda or cuda:N.
    #[arg(long, global = true)]
    device: Option<String>,
    /// Context length in tokens (prompt plus reply).
    #[arg(long = "ctx-size", global = true, value_name = "N")]
    context_length: Option<usize>,
    /// Use only files already in the Hugging Face cache.
    #[arg(long, global = true)]
    offline: bool,
    /// KV cache block size in tokens (a power of two, 8-256).
    #[arg(long, global = true, value_name = "TOKENS")]
    block_size: Option<usize>,
    /// Size of the KV cache's device tier in MiB (default: a fraction of free memory).
    #[arg(long, global = true, value_name = "MIB")]
    kv_pool_mib: Option<u64>,
    /// Size of the KV cache's host-RAM tier in GiB (0 = off).
    #[arg(long, global = true, value_name = "GIB")]
    host_cache_gib: Option<f64>,
    /// Most GiB of cache files (the disk tier) in the data dir; 0 = write none.
    #[arg(long, global = true, value_name = "GIB")]
    disk_cache_gib: Option<f64>,
    /// Turn prefix caching off (every prompt is prefilled in full).
    #[arg(long, global = true)]
    no_prefix_cache: bool,
    /// Most requests decoding together (one batched forward per step).
    #[arg(long, global = true, value_name = "N")]
    max_running: Option<usize>,
    /// Most tokens in one engine step (decodes plus prompt chunks).
    #[arg(long, global = true, value_name = "TOKENS")]
    max_batch_tokens: Option<usize>,
    /// Most requests waiting for their first step; more are refused (HTTP 503).
    #[arg(long, global = true, value_name = "N")]
    max_queued: Option<usize>,
    /// CPU threads for the forward (default: one per physical core).
    #[arg(long, global = true, value_name = "N")]
    threads: Option<usize>,
    /// Run the OpenAI-compatible HTTP server instead of the desktop app.
    #[arg(long)]
    headless: bool,
    /// Address the server listens on (default 127.0.0.1; another needs saying so).
    #[arg(long, global = true, value_name = "IP")]
    host: Option<String>,
    /// Port the server listens on (default 8080; 0 picks a free one).
    #[arg(long, global = true)]
    port: Option<u16>,
    /// Require `Authorization: Bearer KEY` on the server's /v1 routes.
    #[arg(
        long,
        global = true,
        env = "HEARTH_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    api_key: Option<String>,
    /// More logging on stderr (-v debug, -vv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate a completion and stream it to stdout.
    Run(RunArgs),
    /// Print the token ids of text as a JSON array (no BOS added).
    Tokenize(TokenizeArgs),
    /// The disk tier's cache files: list, verify, prune.
    Cache {
        #[command(subcommand)]
        which: CacheCommand,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

#[derive(Args, Debug)]
struct RunArgs {
    /// A prompt; give it several times to run several prompts in turn, sharing the cache.
    #[arg(long, short = 'p', required_unless_present = "prompt_file")]
    prompt: Vec<String>,
    /// A file whose whole text is one prompt; may be given several times (run after the --prompt ones).
    #[arg(long, value_name = "FILE")]
    prompt_file: Vec<PathBuf>,
    /// Most tokens to generate.
    #[arg(long, short = 'n')]
    max_tokens: Option<usize>,
    /// Sampling temperature; 0 is greedy.
    #[arg(long)]
    temperature: Option<f32>,
    #[arg(long)]
    top_p: Option<f32>,
    #[arg(long)]
    top_k: Option<usize>,
    #[arg(long)]
    min_p: Option<f32>,
    #[arg(long)]
    repeat_penalty: Option<f32>,
    #[arg(long)]
    seed: Option<u64>,
    /// Wrap the prompt in the model's chat template as a user turn.
    #[arg(long)]
    chat: bool,
    /// Continue (or start) this saved conversation: each prompt is a user message, and the
    /// reply and the K/V cache are saved in the data dir. Implies --chat.
    #[arg(long, value_name = "ID")]
    conversation: Option<String>,
}

#[derive(Subcommand, Debug)]
enum CacheCommand {
    /// Every cache file: conversation, size, tokens, last use, whether it fits the current model.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Read every block of every cache file and check its checksum.
    Verify,
    /// Delete least recently used cache files until they fit a budget (conversations are kept).
    Prune {
        /// The budget in GiB (default: the configured disk_cache_gib).
        #[arg(long, value_name = "GIB")]
        to_gib: Option<f64>,
        /// Also delete every file the current model cannot use (other models, damaged headers).
        #[arg(long)]
        foreign: bool,
        /// Show what would be deleted, delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
struct TokenizeArgs {
    /// Text to tokenize.
    #[arg(long)]
    text: Option<String>,
    /// A JSON-lines file of {"text": ...}; prints one array per line.
    #[arg(long, value_name = "FILE")]
    jsonl: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// The OpenAI server under concurrent load: requests sharing a system prompt, caching on and off.
    Serve {
        /// A GGUF model; default: the random ~50M-parameter Q8_0 Llama written once into the data dir.
        #[arg(long = "gguf", value_name = "FILE")]
        gguf: Option<PathBuf>,
        #[arg(long, default_value_t = 200)]
        requests: usize,
        #[arg(long, default_value_t = 512)]
        system_tokens: usize,
        #[arg(long, default_value_t = 64)]
        question_tokens: usize,
        /// Tokens generated per request (greedy; fewer if the model ends its reply).
        #[arg(long, default_value_t = 64)]
        reply_tokens: usize,
        /// Client concurrency levels, comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = [1, 4, 16])]
        concurrency: Vec<usize>,
        /// Also write the results as JSON to this file ("-" for stdout, after the table).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// The disk tier: the next turn after a restart (history from its cache file) vs uncached; cache file read speed.
    Disk {
        /// A GGUF model; default: the random ~50M-parameter Q8_0 Llama written once into the data dir.
        #[arg(long = "gguf", value_name = "FILE")]
        gguf: Option<PathBuf>,
        /// Tokens of the saved conversation.
        #[arg(long, default_value_t = 4096)]
        history_tokens: usize,
        #[arg(long, default_value_t = 64)]
        question_tokens: usize,
        #[arg(long, default_value_t = 16)]
        reply_tokens: usize,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Also write the results as JSON to this file ("-" for stdout, after the table).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Prefill and decode tokens/s: our forward against candle-transformers' quantized_llama.
    Decode {
        /// A llama-architecture GGUF; default: a random ~50M-parameter Q8_0 model written once into the data dir.
        #[arg(long = "gguf", value_name = "FILE")]
        gguf: Option<PathBuf>,
        #[arg(long, default_value_t = 256)]
        prompt_tokens: usize,
        #[arg(long, default_value_t = 64)]
        decode_tokens: usize,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Skip candle-transformers' quantized_llama (the reference timed beside ours).
        #[arg(long)]
        no_reference: bool,
    },
    /// Time to first token for a long shared prefix: cold, device hit, host hit, caching off.
    Cache {
        /// A GGUF model; default: the random ~50M-parameter Q8_0 Llama written once into the data dir.
        #[arg(long = "gguf", value_name = "FILE")]
        gguf: Option<PathBuf>,
        #[arg(long, default_value_t = 2048)]
        prefix_tokens: usize,
        #[arg(long, default_value_t = 32)]
        suffix_tokens: usize,
        #[arg(long, default_value_t = 2)]
        repeats: usize,
        /// Also write the results as JSON to this file ("-" for stdout, after the table).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    // Before anything else: a binary built for another CPU says so instead of dying of SIGILL.
    let missing = hearth::runtime::cpu::missing_features();
    if !missing.is_empty() {
        eprintln!("error: {}", hearth::runtime::cpu::unsupported_cpu_message(&missing));
        return ExitCode::FAILURE;
    }
    let cli = Cli::parse();
    init_logging(cli.verbose);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, without repeating a cause the
/// message already includes.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if out.contains(&s) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    out.replace('\n', " ")
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "hearth=info,warn",
        1 => "hearth=debug,info",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}

fn run(cli: Cli) -> Result<ExitCode> {
    let mut paths = AppPaths::resolve(cli.config.clone(), cli.data_dir.clone(), None)?;
    let file = ConfigFile::load(&paths.config_file)?;
    // The config file's data dir, unless --data-dir or HEARTH_DATA_DIR said otherwise.
    if let (None, Some(dir)) = (&cli.data_dir, &file.paths.data_dir) {
        paths.data_dir = dir.clone();
    }
    let mut overrides = Overrides {
        model: cli.model.clone(),
        device: cli.device.clone(),
        context_length: cli.context_length,
        hub_offline: cli.offline.then_some(true),
        block_size: cli.block_size,
        device_pool_mib: cli.kv_pool_mib,
        host_cache_gib: cli.host_cache_gib,
        disk_cache_gib: cli.disk_cache_gib,
        prefix_caching: cli.no_prefix_cache.then_some(false),
        max_running: cli.max_running,
        max_batch_tokens: cli.max_batch_tokens,
        max_queued: cli.max_queued,
        threads: cli.threads,
        host: cli.host.clone(),
        port: cli.port,
        api_key: cli.api_key.clone(),
        ..Default::default()
    };
    // The thread pool's size is fixed when it starts: set it before any command runs.
    // (A settings error here is reported by the command that resolves them.)
    if let Ok(s) = Settings::resolve(&file, &overrides) {
        let n = hearth::runtime::cpu::use_threads(s.engine.threads);
        tracing::debug!("{n} CPU threads");
    }
    match cli.command {
        Some(_) if cli.headless => bail!("--headless runs the HTTP server and takes no subcommand"),
        None if cli.headless => {
            let settings = Settings::resolve(&file, &overrides)?;
            cmd_headless(&settings, &paths)
        }
        None => {
            let settings = Settings::resolve(&file, &overrides)?;
            cmd_gui(settings, paths, overrides)
        }
        Some(Command::Run(args)) => {
            overrides.temperature = args.temperature;
            overrides.top_p = args.top_p;
            overrides.top_k = args.top_k;
            overrides.min_p = args.min_p;
            overrides.repeat_penalty = args.repeat_penalty;
            overrides.seed = args.seed;
            overrides.max_tokens = args.max_tokens;
            let settings = Settings::resolve(&file, &overrides)?;
            let mut prompts = args.prompt.clone();
            for path in &args.prompt_file {
                prompts.push(
                    std::fs::read_to_string(path)
                        .with_context(|| format!("cannot read prompt file {}", path.display()))?,
                );
            }
            let conversation = args.conversation.as_deref().map(ConversationId::parse).transpose()?;
            cmd_run(&settings, &paths, &prompts, args.chat, conversation)
        }
        Some(Command::Cache { which }) => {
            let settings = Settings::resolve(&file, &overrides)?;
            cmd_cache(&settings, &paths, which)
        }
        Some(Command::Tokenize(args)) => {
            let settings = Settings::resolve(&file, &overrides)?;
            cmd_tokenize(&settings, &args)
        }
        Some(Command::Bench {
            which:
                BenchCommand::Cache {
                    gguf,
                    prefix_tokens,
                    suffix_tokens,
                    repeats,
                    json,
                },
        }) => {
            let settings = Settings::resolve(&file, &overrides)?;
            let opts = hearth::bench::CacheBenchOptions {
                prefix_tokens,
                suffix_tokens,
                block_size: settings.cache.block_size,
                repeats,
            };
            cmd_bench_cache(&settings, &paths, gguf, opts, json)
        }
        Some(Command::Bench {
            which:
                BenchCommand::Serve {
                    gguf,
                    requests,
                    system_tokens,
                    question_tokens,
                    reply_tokens,
                    concurrency,
                    json,
                },
        }) => {
            let settings = Settings::resolve(&file, &overrides)?;
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
            cmd_bench_serve(&settings, &paths, gguf, opts, json)
        }
        Some(Command::Bench {
            which:
                BenchCommand::Disk {
                    gguf,
                    history_tokens,
                    question_tokens,
                    reply_tokens,
                    repeats,
                    json,
                },
        }) => {
            let settings = Settings::resolve(&file, &overrides)?;
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
            cmd_bench_disk(&settings, &paths, gguf, opts, json)
        }
        Some(Command::Bench {
            which:
                BenchCommand::Decode {
                    gguf,
                    prompt_tokens,
                    decode_tokens,
                    repeats,
                    no_reference,
                },
        }) => {
            let settings = Settings::resolve(&file, &overrides)?;
            let opts = hearth::bench::BenchOptions {
                prompt_tokens,
                decode_tokens,
                repeats,
                reference: !no_reference,
            };
            cmd_bench_decode(&settings, &paths, gguf, opts)
        }
    }
}

/// `hearth`: the desktop app (the model loads inside the window).
#[cfg(feature = "gui")]
fn cmd_gui(settings: Settings, paths: AppPaths, overrides: Overrides) -> Result<ExitCode> {
    hearth::gui::run(settings, paths, overrides).map_err(|e| {
        anyhow::anyhow!(
            "the window could not be opened: {e} (without a desktop, `hearth --headless` serves the HTTP API and `hearth run` works in a terminal)"
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(feature = "gui"))]
fn cmd_gui(_settings: Settings, _paths: AppPaths, _overrides: Overrides) -> Result<ExitCode> {
    bail!("this hearth was built without the desktop app (feature `gui`); use `hearth run --prompt TEXT`, or `hearth --headless` for the HTTP server (see `hearth --help`)")
}

fn resolve_model(settings: &Settings) -> Result<ResolvedModel> {
    let source = ModelSource::parse(&settings.model.source)?;
    let opts = HubOptions::from(&settings.hub);
    let mut progress = BarProgress(None);
    let resolved = resolve_with(&source, &opts, &mut progress, &Cancel::new());
    if let Some(pb) = progress.0.take() {
        pb.abandon();
    }
    Ok(resolved?)
}

/// A hub download's progress as a bar on stderr (Ctrl-C stops it; the next run resumes).
struct BarProgress(Option<indicatif::ProgressBar>);

impl DownloadProgress for BarProgress {
    fn start(&mut self, file: &str, done: u64, total: u64) {
        let pb = bytes_bar(total, &format!("downloading {file}"));
        pb.set_position(done);
        self.0 = Some(pb);
    }

    fn advance(&mut self, done: u64) {
        if let Some(pb) = &self.0 {
            pb.set_position(done);
        }
    }

    fn finish(&mut self) {
        if let Some(pb) = self.0.take() {
            pb.finish_and_clear();
        }
    }
}

/// Runs `work` with a spinner showing `msg` on stderr.
fn with_spinner<T>(msg: String, work: impl FnOnce() -> T) -> T {
    let pb = indicatif::ProgressBar::new_spinner();
    pb.set_message(msg);
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    let out = work();
    pb.finish_and_clear();
    out
}

/// Resolves and loads the configured model (with a spinner) and logs what it is.
fn load_model(settings: &Settings) -> Result<LoadedModel> {
    let resolved = resolve_model(settings)?;
    let device = select_device(settings.model.device)?;
    let model = with_spinner(format!("loading {}", resolved.gguf.display()), || {
        LoadedModel::load(&resolved, &device, settings.model.context_length)
    })?;
    let i = &model.info;
    tracing::info!(
        "{} ({}, {}, {:.2}B params) on {}, context {}",
        i.name,
        i.architecture,
        i.quantization,
        i.parameters as f64 / 1e9,
        i.device,
        i.context_length
    );
    Ok(model)
}

/// The engine with its disk tier in the data dir, on the engine thread.
fn start_engine(settings: &Settings, paths: &AppPaths, model: LoadedModel) -> Result<EngineHandle> {
    let engine = Engine::new(model, &settings.cache, &settings.engine)?;
    let disk = DiskSettings::new(&paths.data_dir, settings.cache.disk_budget_bytes);
    let engine = with_spinner("indexing saved conversations".into(), || engine.with_disk(&disk))?;
    Ok(EngineHandle::spawn(engine, settings.engine.max_queued)?)
}

fn cmd_run(
    settings: &Settings,
    paths: &AppPaths,
    prompts: &[String],
    chat: bool,
    conversation: Option<ConversationId>,
) -> Result<ExitCode> {
    let model = load_model(settings)?;
    let chat = chat || conversation.is_some();
    // Tokenize every prompt before generating, so a bad one fails first.
    let all_ids = prompts
        .iter()
        .map(|p| model.prompt_ids(p, chat))
        .collect::<Result<Vec<_>, _>>()?;
    for ids in &all_ids {
        model.check_prompt_fits(ids.len())?;
    }
    let handle = start_engine(settings, paths, model)?;
    let params = GenerateParams {
        max_tokens: settings.max_tokens,
        sampling: settings.sampling.clone(),
        stop: Vec::new(),
        ignore_eos: false,
        keep_logits: false,
    };
    if let Some(id) = &conversation {
        let store = handle.conversations()?;
        if !store.exists(id) {
            let title = hearth::persist::title_from(&[Message::new(Role::User, prompts[0].clone())]);
            store.update(
                id,
                Some(&|| Conversation::new(id.clone(), title.clone(), Default::default())),
                |_| {},
            )?;
            eprintln!("conversation {id}: new");
        }
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for (n, (ids, text)) in all_ids.into_iter().zip(prompts).enumerate() {
        // One prompt at a time, in order; each shares the cache with the ones before.
        let mut stream = match &conversation {
            Some(id) => handle.send_message(id, Some(text), &params)?,
            None => handle.submit(GenerateRequest::new(ids, params.clone()))?,
        };
        let report = loop {
            match stream.blocking_recv() {
                Some(Event::Token { text, .. }) => {
                    // A closed stdout ends here; dropping the stream cancels the request.
                    out.write_all(text.as_bytes())?;
                    out.flush()?;
                }
                Some(Event::Done(report)) => break report,
                Some(Event::Error(e)) => return Err(e.into()),
                None => bail!("the engine stopped unexpectedly"),
            }
        };
        writeln!(out)?;
        out.flush()?;
        let c = report.cached;
        eprintln!(
            "prompt {}: {} tokens, {} cached (device {}, host {}, of which disk {}); first token {:.0} ms; {} generated ({:?}), {:.1} tok/s",
            n + 1,
            report.prompt_tokens,
            c.tokens,
            c.device_tokens,
            c.host_tokens,
            c.disk_tokens,
            report.ttft.as_secs_f64() * 1e3,
            report.tokens.len(),
            report.stop,
            report.decode_rate()
        );
    }
    // The reply and the cache file are written in the background: wait for them.
    handle.flush_disk();
    Ok(ExitCode::SUCCESS)
}

/// `hearth --headless`: the OpenAI-compatible server until Ctrl-C or SIGTERM.
fn cmd_headless(settings: &Settings, paths: &AppPaths) -> Result<ExitCode> {
    use hearth::server::{serve, shutdown_signal, AppState, ServerConfig};
    let server = &settings.server;
    // The host is loopback unless the command line or the config asked for
    // another; say what that means without a key.
    if !server.host.is_loopback() && server.api_key.is_none() {
        tracing::warn!(
            "listening on {} without an API key: anyone who can reach this address can use the model (set --api-key or HEARTH_API_KEY)",
            server.host
        );
    }
    // Bind before the (slow) model load, so a taken port fails at once.
    let addr = std::net::SocketAddr::new(server.host, server.port);
    let listener = std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    listener.set_nonblocking(true)?;
    let model = load_model(settings)?;
    let config = ServerConfig::from_settings(settings, &model.info.name);
    let handle = start_engine(settings, paths, model)?;
    let saver = handle.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let local = listener.local_addr()?;
        eprintln!(
            "hearth: serving {} at http://{local}/v1 (Ctrl-C to stop)",
            config.model_id
        );
        let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            shutdown_signal().await;
            eprintln!("hearth: stopping; waiting for requests in flight (Ctrl-C again to stop now)");
            let _ = stopping_tx.send(());
        };
        let force = async move {
            if stopping_rx.await.is_ok() {
                shutdown_signal().await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            served = serve(listener, AppState::new(handle, config), shutdown) => {
                served.context("the server failed")?;
            }
            _ = force => eprintln!("hearth: stopped with requests in flight"),
        }
        Ok::<_, anyhow::Error>(())
    })?;
    // Finish the saves of the last turns before exiting.
    saver.flush_disk();
    Ok(ExitCode::SUCCESS)
}

fn load_tokenizer(resolved: &ResolvedModel) -> Result<Tokenizer> {
    let file = GgufFile::open(&resolved.gguf)?;
    let md = file.metadata();
    Ok(match &resolved.tokenizer_json {
        Some(p) => Tokenizer::from_file(p, Some(md))?,
        None => Tokenizer::from_gguf_metadata(md)?,
    })
}

fn cmd_tokenize(settings: &Settings, args: &TokenizeArgs) -> Result<ExitCode> {
    let tokenizer = load_tokenizer(&resolve_model(settings)?)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if let Some(text) = &args.text {
        let ids = tokenizer.encode(text, false)?;
        writeln!(out, "{}", serde_json::to_string(&ids)?)?;
    }
    if let Some(path) = &args.jsonl {
        tokenize_jsonl(&tokenizer, path, &mut out)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn tokenize_jsonl(tokenizer: &Tokenizer, path: &Path, out: &mut impl Write) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Line {
        text: String,
    }
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    for (n, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Line = serde_json::from_str(&line)
            .with_context(|| format!("{} line {}: expected {{\"text\": \"...\"}}", path.display(), n + 1))?;
        let ids = tokenizer.encode(&parsed.text, false)?;
        writeln!(out, "{}", serde_json::to_string(&ids)?)?;
    }
    Ok(())
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

fn cmd_bench_cache(
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

fn cmd_bench_disk(
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

fn cmd_bench_serve(
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

fn cmd_bench_decode(
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

/// The fingerprint and layout the configured model's cache files must have, without loading
/// its weights (its files are hashed, with a progress bar).
fn current_fingerprint(settings: &Settings) -> Result<(hearth::persist::Fingerprint, hearth::persist::KvLayout)> {
    let resolved = resolve_model(settings)?;
    let shape = hearth::model::kv_shape_of(&resolved.gguf)?;
    let layout = hearth::engine::kv_layout(shape, settings.cache.block_size);
    let device = hearth::model::device_name(&select_device(settings.model.device)?);
    let files = resolved.files();
    let total: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    let pb = bytes_bar(total, "hashing the model");
    let fp = hearth::engine::fingerprint(&files, &device, &layout, &mut |done| pb.set_position(done))?;
    pb.finish_and_clear();
    Ok((fp, layout))
}

fn bytes_bar(total: u64, msg: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(total);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(msg.to_string());
    pb
}

fn ago(secs_since_epoch: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let s = now.saturating_sub(secs_since_epoch);
    match s {
        0..=119 => format!("{s}s ago"),
        120..=7199 => format!("{}m ago", s / 60),
        7200..=172_799 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86400),
    }
}

fn cmd_cache(settings: &Settings, paths: &AppPaths, which: CacheCommand) -> Result<ExitCode> {
    use hearth::persist::{cache_dir, inspect, prune_plan, CacheFile, EntryStatus};
    let dir = cache_dir(&paths.data_dir);
    let current = match current_fingerprint(settings) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!(
                "note: the configured model is not available ({}); every file shows as foreign",
                one_line(&e)
            );
            None
        }
    };
    let entries = inspect(&dir, current)?;
    let store = hearth::persist::ConversationStore::new(hearth::persist::conversations_dir(&paths.data_dir));
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    match which {
        CacheCommand::List { json } => {
            if json {
                println!("{}", serde_json::to_string_pretty(&entries)?);
                return Ok(ExitCode::SUCCESS);
            }
            println!("{}: {} cache files", dir.display(), entries.len());
            if entries.is_empty() {
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "{:<28} {:>10} {:>8} {:>11} {:>9}  {:<12} title",
                "conversation", "MiB", "tokens", "blocks", "last use", "status"
            );
            for e in &entries {
                let title = store
                    .get(&e.conversation)
                    .map(|c| c.title)
                    .unwrap_or_else(|_| "(no text)".into());
                let status = match &e.status {
                    EntryStatus::Usable => "ok".to_string(),
                    EntryStatus::Foreign => "other model".to_string(),
                    EntryStatus::Unreadable(why) => format!("unreadable: {why}"),
                };
                println!(
                    "{:<28} {:>10.1} {:>8} {:>5}/{:<5} {:>9}  {:<12} {}",
                    e.conversation.as_str(),
                    mib(e.bytes),
                    e.tokens,
                    e.blocks_present,
                    e.blocks,
                    ago(e.last_used_secs),
                    status,
                    title
                );
            }
            let total: u64 = entries.iter().map(|e| e.bytes).sum();
            println!(
                "total {:.1} MiB of a {:.1} MiB budget",
                mib(total),
                mib(settings.cache.disk_budget_bytes)
            );
            Ok(ExitCode::SUCCESS)
        }
        CacheCommand::Verify => {
            let total: u64 = entries.iter().map(|e| e.bytes).sum();
            let pb = bytes_bar(total, "verifying");
            let mut bad = 0;
            let mut report = Vec::new();
            for e in &entries {
                let result = CacheFile::open(&e.path).and_then(|mut f| {
                    let present = f.blocks_present();
                    let n = f.verify(|b| pb.inc(b))?;
                    Ok((n, present))
                });
                match result {
                    Ok((n, _)) => report.push(format!("ok        {} ({n} blocks)", e.conversation)),
                    Err(err) => {
                        bad += 1;
                        report.push(format!("DAMAGED   {}: {err}", e.conversation));
                    }
                }
            }
            pb.finish_and_clear();
            for line in report {
                println!("{line}");
            }
            println!("{} files checked, {bad} damaged", entries.len());
            Ok(if bad == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        CacheCommand::Prune {
            to_gib,
            foreign,
            dry_run,
        } => {
            let budget = match to_gib {
                Some(g) if !(g >= 0.0 && g.is_finite()) => bail!("--to-gib must be 0 or positive"),
                Some(g) => (g * (1u64 << 30) as f64) as u64,
                None => settings.cache.disk_budget_bytes,
            };
            let plan = prune_plan(&entries, budget, foreign);
            let pb = indicatif::ProgressBar::new(plan.len() as u64);
            let mut freed = 0;
            for e in &plan {
                if dry_run {
                    println!("would delete {} ({:.1} MiB)", e.conversation, mib(e.bytes));
                } else {
                    match std::fs::remove_file(&e.path) {
                        Ok(()) => {
                            freed += e.bytes;
                            pb.println(format!("deleted {} ({:.1} MiB)", e.conversation, mib(e.bytes)));
                        }
                        Err(err) => pb.println(format!("cannot delete {}: {err}", e.path.display())),
                    }
                }
                pb.inc(1);
            }
            pb.finish_and_clear();
            let total: u64 = entries.iter().map(|e| e.bytes).sum();
            println!(
                "{} of {} files {}, {:.1} MiB freed; {:.1} MiB left (budget {:.1} MiB); conversations are kept",
                plan.len(),
                entries.len(),
                if dry_run { "to delete" } else { "deleted" },
                mib(freed),
                mib(total - freed),
                mib(budget)
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
