//! The command line: flags, subcommands, and the settings overrides they make.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use hearth::config::Overrides;

#[derive(Parser, Debug)]
#[command(
    name = "hearth",
    version,
    about = "Run a quantized LLM locally and keep every conversation warm."
)]
pub struct Cli {
    /// Config file (default: the platform config dir's hearth/config.toml).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory (conversations, caches).
    #[arg(long, global = true, env = "HEARTH_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Model: a local .gguf file or owner/repo:file.gguf[@revision] on the Hugging Face hub.
    #[arg(long, short = 'm', global = true, value_name = "MODEL")]
    pub model: Option<String>,
    /// Device: auto, cpu, cuda or cuda:N.
    #[arg(long, global = true)]
    pub device: Option<String>,
    /// Context length in tokens (prompt plus reply).
    #[arg(long = "ctx-size", global = true, value_name = "N")]
    pub context_length: Option<usize>,
    /// Use only files already in the Hugging Face cache.
    #[arg(long, global = true)]
    pub offline: bool,
    /// KV cache block size in tokens (a power of two, 8-256).
    #[arg(long, global = true, value_name = "TOKENS")]
    pub block_size: Option<usize>,
    /// Size of the KV cache's device tier in MiB (default: a fraction of free memory).
    #[arg(long, global = true, value_name = "MIB")]
    pub kv_pool_mib: Option<u64>,
    /// Size of the KV cache's host-RAM tier in GiB (0 = off).
    #[arg(long, global = true, value_name = "GIB")]
    pub host_cache_gib: Option<f64>,
    /// Most GiB of cache files (the disk tier) in the data dir; 0 = write none.
    #[arg(long, global = true, value_name = "GIB")]
    pub disk_cache_gib: Option<f64>,
    /// Turn prefix caching off (every prompt is prefilled in full).
    #[arg(long, global = true)]
    pub no_prefix_cache: bool,
    /// Most requests decoding together (one batched forward per step).
    #[arg(long, global = true, value_name = "N")]
    pub max_running: Option<usize>,
    /// Most tokens in one engine step (decodes plus prompt chunks).
    #[arg(long, global = true, value_name = "TOKENS")]
    pub max_batch_tokens: Option<usize>,
    /// Most requests waiting for their first step; more are refused (HTTP 503).
    #[arg(long, global = true, value_name = "N")]
    pub max_queued: Option<usize>,
    /// CPU threads for the forward (default: one per physical core).
    #[arg(long, global = true, value_name = "N")]
    pub threads: Option<usize>,
    /// Run the OpenAI-compatible HTTP server instead of the desktop app.
    #[arg(long)]
    pub headless: bool,
    /// Address the server listens on (default 127.0.0.1; another needs saying so).
    #[arg(long, global = true, value_name = "IP")]
    pub host: Option<String>,
    /// Port the server listens on (default 8080; 0 picks a free one).
    #[arg(long, global = true)]
    pub port: Option<u16>,
    /// Require `Authorization: Bearer KEY` on the server's /v1 routes.
    #[arg(
        long,
        global = true,
        env = "HEARTH_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub api_key: Option<String>,
    /// More logging on stderr (-v debug, -vv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
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
pub struct RunArgs {
    /// A prompt; give it several times to run several prompts in turn, sharing the cache.
    #[arg(long, short = 'p', required_unless_present = "prompt_file")]
    pub prompt: Vec<String>,
    /// A file whose whole text is one prompt; may be given several times (run after the --prompt ones).
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Vec<PathBuf>,
    /// Most tokens to generate.
    #[arg(long, short = 'n')]
    pub max_tokens: Option<usize>,
    /// Sampling temperature; 0 is greedy.
    #[arg(long)]
    pub temperature: Option<f32>,
    #[arg(long)]
    pub top_p: Option<f32>,
    #[arg(long)]
    pub top_k: Option<usize>,
    #[arg(long)]
    pub min_p: Option<f32>,
    #[arg(long)]
    pub repeat_penalty: Option<f32>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Wrap the prompt in the model's chat template as a user turn.
    #[arg(long)]
    pub chat: bool,
    /// Continue (or start) this saved conversation: each prompt is a user message, and the
    /// reply and the K/V cache are saved in the data dir. Implies --chat.
    #[arg(long, value_name = "ID")]
    pub conversation: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum CacheCommand {
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
pub struct TokenizeArgs {
    /// Text to tokenize.
    #[arg(long)]
    pub text: Option<String>,
    /// A JSON-lines file of {"text": ...}; prints one array per line.
    #[arg(long, value_name = "FILE")]
    pub jsonl: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
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

impl Cli {
    /// The settings the global flags override.
    pub fn overrides(&self) -> Overrides {
        let mut o = Overrides {
            model: self.model.clone(),
            device: self.device.clone(),
            context_length: self.context_length,
            hub_offline: self.offline.then_some(true),
            block_size: self.block_size,
            device_pool_mib: self.kv_pool_mib,
            host_cache_gib: self.host_cache_gib,
            disk_cache_gib: self.disk_cache_gib,
            prefix_caching: self.no_prefix_cache.then_some(false),
            max_running: self.max_running,
            max_batch_tokens: self.max_batch_tokens,
            max_queued: self.max_queued,
            threads: self.threads,
            host: self.host.clone(),
            port: self.port,
            api_key: self.api_key.clone(),
            ..Default::default()
        };
        if let Some(Command::Run(args)) = &self.command {
            o.temperature = args.temperature;
            o.top_p = args.top_p;
            o.top_k = args.top_k;
            o.min_p = args.min_p;
            o.repeat_penalty = args.repeat_penalty;
            o.seed = args.seed;
            o.max_tokens = args.max_tokens;
        }
        o
    }
}
