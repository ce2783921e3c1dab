//! The command line: its own flags and subcommands; the settings' flags are
//! `ConfigFile`'s (one declaration for the key and its flag).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use hearth::config::ConfigFile;

#[derive(Parser, Debug)]
#[command(
    name = "hearth",
    version,
    about = "Run a quantized LLM locally and keep every conversation warm.",
    // `--temperature -1` is a value (refused by the settings with a reason), not an unknown flag.
    allow_negative_numbers = true
)]
pub struct Cli {
    /// Config file (default: the platform config dir's hearth/config.toml).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The settings' flags (model, sampling, cache, engine, server, data dir): declared once,
    /// beside their config keys, in `hearth::config::ConfigFile`.
    #[command(flatten)]
    pub settings: ConfigFile,
    /// Run the OpenAI-compatible HTTP server instead of the desktop app.
    #[arg(long)]
    pub headless: bool,
    /// More logging on stderr (-v debug, -vv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Generate a completion and stream it to stdout.
    #[command(allow_negative_numbers = true)]
    Run(RunArgs),
    /// Print the token ids of text as a JSON array (no BOS added).
    #[command(allow_negative_numbers = true)]
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
    /// A coding agent's loop through /v1/messages and /v1/responses: TTFT per turn, caching on and off.
    Agent {
        /// A GGUF model; default: the random ~50M-parameter Q8_0 Llama written once into the data dir.
        #[arg(long = "gguf", value_name = "FILE")]
        gguf: Option<PathBuf>,
        /// Requests in the agent's loop.
        #[arg(long, default_value_t = 8)]
        turns: usize,
        #[arg(long, default_value_t = 2048)]
        system_tokens: usize,
        /// Tokens of each tool output sent back (and of the first task).
        #[arg(long, default_value_t = 256)]
        result_tokens: usize,
        /// Tokens generated per turn (greedy, exactly this many).
        #[arg(long, default_value_t = 32)]
        reply_tokens: usize,
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
        /// A GGUF of any supported architecture (the candle reference needs `llama`; else pass --no-reference); default: a random ~50M-parameter Q8_0 model written once into the data dir.
        #[arg(long = "gguf", value_name = "FILE")]
        gguf: Option<PathBuf>,
        #[arg(long, default_value_t = 256)]
        prompt_tokens: usize,
        #[arg(long, default_value_t = 64)]
        decode_tokens: usize,
        /// Sequences decoded together (each with the same prompt); throughputs count them all.
        #[arg(long, default_value_t = 1)]
        batch: usize,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Skip candle-transformers' quantized_llama (the reference timed beside ours).
        #[arg(long)]
        no_reference: bool,
        /// Also write the results as JSON to this file ("-" for stdout, after the table).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Every figure of the CUDA path in one run (needs a CUDA build and device): host-to-device
    /// block copies against a plain pinned copy; prefill and decode at batch 1 and 16 against
    /// candle-transformers' quantized_llama; TTFT of a long prompt cold, from the device, host
    /// and disk tiers. On a random Llama-3.2-1B-shaped Q4_K model written once into the data dir,
    /// plus each --gguf.
    Gpu {
        /// More llama-architecture GGUFs to time prefill and decode on (e.g. SmolLM2-135M Q4_1).
        #[arg(long = "gguf", value_name = "FILE")]
        gguf: Vec<PathBuf>,
        /// The long prompt's tokens for TTFT (the last 64 are the uncached suffix).
        #[arg(long, default_value_t = 8192)]
        ttft_tokens: usize,
        #[arg(long, default_value_t = 512)]
        prompt_tokens: usize,
        #[arg(long, default_value_t = 128)]
        decode_tokens: usize,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Also write the results as JSON to this file ("-" for stdout, after the tables).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Decoding with a JSON-Schema grammar against the same requests without one, batch 1 and 16.
    Grammar {
        /// A GGUF model with a chat template; default: the random ~50M-parameter Q8_0 Llama.
        #[arg(long = "gguf", value_name = "FILE")]
        gguf: Option<PathBuf>,
        /// Tokens generated per request.
        #[arg(long, default_value_t = 128)]
        tokens: usize,
        /// Batch sizes (requests at once), comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = [1, 16])]
        batch: Vec<usize>,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Also write the results as JSON to this file ("-" for stdout, after the table).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Each K/V type (f16, bf16, q8_0) against f32, teacher-forced: logit error, same greedy tokens.
    Kv {
        /// A GGUF model with a chat template; default: the random ~50M-parameter Q8_0 Llama.
        #[arg(long = "gguf", value_name = "FILE")]
        gguf: Option<PathBuf>,
        /// A prompt (a user message); give it several times. Default: four with clear answers.
        #[arg(long = "prompt", value_name = "TEXT")]
        prompts: Vec<String>,
        /// Greedy tokens per prompt (f32 K/V) that every type is compared over.
        #[arg(long, default_value_t = 64)]
        tokens: usize,
        /// Also write the results as JSON to this file ("-" for stdout, after the table).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// This device (--device) against the CPU on the same GGUF: greedy text of each, and
    /// teacher-forced logits. Fails where they pick different tokens and the CPU's choice is
    /// clear (not a near-tie).
    Devices {
        /// A GGUF model with a chat template; default: the random ~50M-parameter Q8_0 Llama.
        #[arg(long = "gguf", value_name = "FILE")]
        gguf: Option<PathBuf>,
        /// A prompt (a user message); give it several times. Default: four with clear answers.
        #[arg(long = "prompt", value_name = "TEXT")]
        prompts: Vec<String>,
        /// Greedy tokens per prompt.
        #[arg(long, default_value_t = 32)]
        tokens: usize,
        /// Also write the results as JSON to this file ("-" for stdout, after the report).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
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

/// A command line clap refused: `--help` and `--version` print and succeed; anything else is one
/// `error:` line naming the flag and the value (clap's own first line, without its usage text)
/// and exit status 1, as every other error of hearth.
pub fn refused(e: clap::Error) -> std::process::ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            std::process::ExitCode::SUCCESS
        }
        // `hearth cache` without its subcommand: the subcommands are the useful answer.
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            std::process::ExitCode::FAILURE
        }
        _ => {
            let text = e.render().to_string();
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid command line");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("error: {first} (see hearth --help)");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        // Duplicate ids or flags, bad defaults: clap's own checks.
        Cli::command().debug_assert();
    }

    #[test]
    fn settings_flags_work_before_and_after_the_subcommand() {
        let cli = Cli::try_parse_from([
            "hearth",
            "--top-k",
            "5",
            "run",
            "-p",
            "x",
            "--temperature",
            "0",
            "-n",
            "3",
        ])
        .unwrap();
        let s = &cli.settings.sampling;
        assert_eq!((s.top_k, s.temperature, s.max_tokens), (Some(5), Some(0.0), Some(3)));
        assert!(matches!(cli.command, Some(Command::Run(_))));
    }
}
