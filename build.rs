//! Compiles the CUDA kernels in `kernels/` to PTX when the `cuda` feature is
//! on; does nothing otherwise.
//!
//! - `NVCC`: the compiler (default: `nvcc` on PATH, else `$CUDA_ROOT/bin/nvcc`).
//! - `CUDA_COMPUTE_CAP`: target compute capability, e.g. `90` (default: asked
//!   of `nvidia-smi`, else 80).
//! - `CUDA_NVCC_FLAGS`: extra flags, split on whitespace.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    for var in ["NVCC", "CUDA_ROOT", "CUDA_PATH", "CUDA_COMPUTE_CAP", "CUDA_NVCC_FLAGS"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let kernels = Path::new("kernels");
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(kernels).expect("kernels/ exists") {
        let path = entry.expect("readable kernels/ entry").path();
        match path.extension().and_then(|e| e.to_str()) {
            Some("cu") => {
                println!("cargo::rerun-if-changed={}", path.display());
                sources.push(path);
            }
            Some("cuh") => println!("cargo::rerun-if-changed={}", path.display()),
            _ => {}
        }
    }
    sources.sort();
    let nvcc = nvcc();
    let cap = compute_cap();
    let extra: Vec<String> = env::var("CUDA_NVCC_FLAGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    for src in &sources {
        let stem = src
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("kernel file names are UTF-8");
        let ptx = out_dir.join(format!("{stem}.ptx"));
        let status = Command::new(&nvcc)
            .args([
                "--ptx",
                &format!("-arch=sm_{cap}"),
                "-O3",
                "-std=c++17",
                "--use_fast_math",
            ])
            .args(&extra)
            .arg("-o")
            .arg(&ptx)
            .arg(src)
            .status()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {} ({e}); install the CUDA toolkit or set NVCC",
                    nvcc.display()
                )
            });
        assert!(status.success(), "nvcc failed on {}", src.display());
    }
}

fn nvcc() -> PathBuf {
    if let Some(p) = env::var_os("NVCC") {
        return PathBuf::from(p);
    }
    if Command::new("nvcc").arg("--version").output().is_ok() {
        return PathBuf::from("nvcc");
    }
    for root in ["CUDA_ROOT", "CUDA_PATH"] {
        if let Some(r) = env::var_os(root) {
            let p = PathBuf::from(r).join("bin").join("nvcc");
            if p.exists() {
                return p;
            }
        }
    }
    PathBuf::from("/usr/local/cuda/bin/nvcc")
}

fn compute_cap() -> String {
    if let Ok(cap) = env::var("CUDA_COMPUTE_CAP") {
        return cap.replace('.', "");
    }
    let smi = Command::new("nvidia-smi")
        .args(["--query-gpu=compute_cap", "--format=csv,noheader"])
        .output();
    if let Ok(out) = smi {
        if let Some(line) = String::from_utf8_lossy(&out.stdout).lines().next() {
            let cap = line.trim().replace('.', "");
            if !cap.is_empty() {
                return cap;
            }
        }
    }
    "80".into()
}
