//! The CPU hearth runs on: what it was built for, and how many threads to use.
//!
//! `cargo build --release` builds for the building machine's CPU
//! (`.cargo/config.toml`: `target-cpu=native`), so candle's kernels, which pick
//! their SIMD code at compile time, use it. Such a binary may contain
//! instructions another CPU lacks; [`missing_features`] compares what the
//! build assumed with what this CPU has, so `main` can say so in one line
//! instead of dying of SIGILL. Our own kernels ([`crate::ops::qmatmul`])
//! choose at run time and do not depend on the build.
//!
//! Threads: candle's ops and ours run on rayon's global pool, whose size is
//! fixed by `RAYON_NUM_THREADS` when it starts; [`use_threads`] sets it
//! before any pool exists. The default is one thread per physical core (the
//! hyperthread pairs share the SIMD units the kernels saturate).

/// Target features this binary was compiled to assume that the running CPU lacks.
pub fn missing_features() -> Vec<&'static str> {
    #[allow(unused_mut)]
    let mut missing = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! check {
            ($($f:tt),*) => {$(
                if cfg!(target_feature = $f) && !std::is_x86_feature_detected!($f) {
                    missing.push($f);
                }
            )*};
        }
        check!(
            "sse3",
            "ssse3",
            "sse4.1",
            "sse4.2",
            "popcnt",
            "avx",
            "avx2",
            "fma",
            "f16c",
            "bmi1",
            "bmi2",
            "lzcnt",
            "movbe",
            "avx512f",
            "avx512bw",
            "avx512vl",
            "avx512dq",
            "avx512cd",
            "avx512vnni"
        );
    }
    #[cfg(target_arch = "aarch64")]
    {
        macro_rules! check {
            ($($f:tt),*) => {$(
                if cfg!(target_feature = $f) && !std::arch::is_aarch64_feature_detected!($f) {
                    missing.push($f);
                }
            )*};
        }
        check!("neon", "dotprod", "i8mm");
    }
    missing
}

/// The line `main` prints when [`missing_features`] is not empty.
pub fn unsupported_cpu_message(missing: &[&str]) -> String {
    format!(
        "this hearth binary was built for a CPU with {} and this CPU lacks {}; build it on this \
         machine (`cargo build --release`) or use a portable build \
         (RUSTFLAGS=\"-C target-cpu=x86-64-v3\" for AVX2 CPUs, \"-C target-cpu=x86-64\" for any x86-64)",
        missing.join(", "),
        if missing.len() == 1 { "it" } else { "them" }
    )
}

/// Threads when none are configured: one per physical core the process may
/// run on (or `RAYON_NUM_THREADS` when set).
pub fn default_threads() -> usize {
    candle_core::utils::get_num_threads()
}

/// Sizes the thread pool candle and our kernels share: `threads`, or
/// [`default_threads`]. Must run before anything uses rayon (first thing in
/// `main`, while the process has one thread); later calls change nothing.
pub fn use_threads(threads: Option<usize>) -> usize {
    let n = threads.unwrap_or_else(default_threads).max(1);
    // Safe in edition 2021 and sound here: `main` calls this before spawning any thread.
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_build_runs_here() {
        // The test binary was built for this machine: nothing may be missing.
        assert_eq!(missing_features(), Vec::<&str>::new());
    }

    #[test]
    fn the_message_names_the_features_and_the_fix() {
        let m = unsupported_cpu_message(&["avx2", "fma"]);
        assert!(
            m.contains("avx2, fma") && m.contains("them") && m.contains("target-cpu=x86-64-v3"),
            "{m}"
        );
    }

    #[test]
    fn default_threads_is_at_least_one() {
        assert!(default_threads() >= 1);
    }
}
