//! Writes one of the random benchmark models the testkit describes, for measuring hearth
//! against other runtimes on the same file.
//!
//! ```sh
//! cargo run --release --example random_model -- MODEL PATH
//! ```
//!
//! `MODEL`: `llama-50m` (hearth bench's default, ~50M Q8_0), `llama-1b` (Llama-3.2-1B-shaped
//! Q4_K, the GPU benchmarks'), `qwen3moe-4l` (Qwen3-30B-A3B's layer shape with 4 layers, Q4_K,
//! 1.8 GB: the MoE benchmarks'), `gpt-oss-4l` (gpt-oss-20b's layer shape with 4 layers, Q8_0,
//! 3.6 GB: the gpt-oss benchmarks'), `gemma4-e2b-10l` (Gemma 4 E2B's layer shape with 10 layers and
//! a 32k vocabulary, Q8_0, 0.6 GB: the Gemma 4 benchmarks'), `glm47-flash-4l` (GLM-4.7-Flash's
//! `deepseek2` layer shape with 4 layers, Q4_K: the DeepSeek-V2 benchmarks'), `qwen35-0.8b` (Qwen3.5
//! 0.8B's shape with a 32k vocabulary, Q8_0: the Qwen3.5 benchmarks'), `granite-h-350m` (Granite 4.0
//! H-350M's shape with a 32k vocabulary, Q8_0: the Granite 4.0 hybrid benchmarks'),
//! `lfm2-8b-a1b-4l` (LFM2-8B-A1B's layer shapes with 4 layers and a 32k vocabulary, Q4_K: the LFM2
//! MoE benchmarks'). The weights are random: the files are for speed, and for
//! comparisons teacher-forced on the same tokens, not for text.

use std::path::Path;
use std::process::ExitCode;

use hearth::model::gguf::GgufFile;
use hearth::model::testkit::{write_model, TinyModelSpec};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let spec = match args.first().map(String::as_str) {
        Some("llama-50m") => TinyModelSpec::bench_50m(),
        Some("llama-1b") => TinyModelSpec::bench_1b(),
        Some("qwen3moe-4l") => TinyModelSpec::bench_moe(),
        Some("gpt-oss-4l") => TinyModelSpec::bench_gpt_oss(),
        Some("gemma4-e2b-10l") => TinyModelSpec::bench_gemma4(),
        Some("glm47-flash-4l") => TinyModelSpec::bench_glm47_flash(),
        Some("qwen35-0.8b") => TinyModelSpec::bench_qwen35(),
        Some("granite-h-350m") => TinyModelSpec::bench_granite_hybrid(),
        Some("lfm2-8b-a1b-4l") => TinyModelSpec::bench_lfm2_moe(),
        _ => {
            eprintln!("usage: random_model llama-50m|llama-1b|qwen3moe-4l|gpt-oss-4l|gemma4-e2b-10l|glm47-flash-4l|qwen35-0.8b|granite-h-350m|lfm2-8b-a1b-4l PATH");
            return ExitCode::FAILURE;
        }
    };
    let Some(path) = args.get(1) else {
        eprintln!("usage: random_model llama-50m|llama-1b|qwen3moe-4l|gpt-oss-4l|gemma4-e2b-10l|glm47-flash-4l|qwen35-0.8b|granite-h-350m|lfm2-8b-a1b-4l PATH");
        return ExitCode::FAILURE;
    };
    // The parameters as the file holds them (and as hearth reports them when it loads it).
    match write_model(&spec, Path::new(path)).and_then(|()| GgufFile::open(Path::new(path))) {
        Ok(file) => {
            println!("wrote {path} ({} parameters)", file.parameter_count());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("could not write {path}: {e}");
            ExitCode::FAILURE
        }
    }
}
