//! How fast our quantized matmul reads its weights, per kernel: bytes of GGUF
//! weights per second for one call, best of five rounds of 40 calls.
//!
//! ```sh
//! cargo run --release --example matmul_bandwidth -- [KIND] [ROWS] [COLS] [T]
//! ```
//!
//! `KIND`: q4_0, q4_1, q5_0, q8_0 (default), q4_k or q6_k; `ROWS` × `COLS` the
//! matrix (default 131072 × 576: 80 MB of Q8_0, more than a desktop's L3, so
//! the figures are memory's); `T` activation rows (default 1, decode). Prints,
//! for each kernel this CPU has (`PackedMatrix::matmul_with`, the same kernel
//! whatever `T` is) and for `matmul` (what the forward calls: one group at a
//! time for decode), the time and GB/s, and a plain sequential read of the
//! same bytes for scale. Threads: `RAYON_NUM_THREADS` (default: every core).
//! The weights are random bytes with every block scale set to 1.0.

use std::time::Instant;

use hearth::ops::qmatmul::{Isa, PackedMatrix, QuantKind};

fn kind_of(name: &str) -> Option<QuantKind> {
    Some(match name {
        "q4_0" => QuantKind::Q4_0,
        "q4_1" => QuantKind::Q4_1,
        "q5_0" => QuantKind::Q5_0,
        "q8_0" => QuantKind::Q8_0,
        "q4_k" => QuantKind::Q4K,
        "q6_k" => QuantKind::Q6K,
        _ => return None,
    })
}

/// Random GGUF blocks with each f16 scale (and K-quant `dmin`) set to 1.0.
fn weights(kind: QuantKind, rows: usize, cols: usize) -> Vec<u8> {
    let (elems, bytes) = (kind.block_elems(), kind.block_bytes());
    let mut raw = vec![0u8; rows * cols / elems * bytes];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for b in raw.iter_mut() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *b = state as u8;
    }
    let one = half::f16::ONE.to_le_bytes();
    for block in raw.chunks_exact_mut(bytes) {
        match kind {
            // Q6_K keeps its `d` last; the others' `d` (and `m` / `dmin`) come first.
            QuantKind::Q6K => block[bytes - 2..].copy_from_slice(&one),
            QuantKind::Q8_0 | QuantKind::Q4_0 | QuantKind::Q5_0 => block[..2].copy_from_slice(&one),
            _ => {
                block[..2].copy_from_slice(&one);
                block[2..4].copy_from_slice(&one);
            }
        }
    }
    raw
}

/// Seconds per call of `f`, best of five rounds.
fn time(mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    let reps = 40;
    (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..reps {
                f();
            }
            start.elapsed().as_secs_f64() / reps as f64
        })
        .fold(f64::MAX, f64::min)
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: usize| -> Result<usize, String> {
        args.get(i).map_or(Ok(default), |s| {
            s.parse().map_err(|e| format!("argument {}: {e}", i + 1))
        })
    };
    let name = args.first().map_or("q8_0", String::as_str);
    let kind = kind_of(name).ok_or(format!("unknown kind {name}"))?;
    let (rows, cols, t) = (arg(1, 131_072)?, arg(2, 576)?, arg(3, 1)?);
    let raw = weights(kind, rows, cols);
    let m = PackedMatrix::pack(kind, &raw, rows, cols).map_err(|e| e.to_string())?;
    let x: Vec<f32> = (0..t * cols).map(|i| ((i * 7919) % 97) as f32 / 97.0 - 0.5).collect();
    let mut out = vec![0f32; t * rows];
    let gb = raw.len() as f64 / 1e9;
    println!(
        "{} {rows} × {cols}, {:.1} MB, {t} activation row(s)",
        kind.name(),
        gb * 1e3
    );
    let words: Vec<u64> = raw
        .chunks_exact(8)
        .map(|c| c.iter().rev().fold(0u64, |a, &b| a << 8 | b as u64))
        .collect();
    let mut sink = 0u64;
    let read = time(|| sink ^= words.iter().fold(0u64, |a, &w| a ^ w));
    println!(
        "| sequential read | {:.3} ms | {:.1} GB/s | ({sink:x})",
        read * 1e3,
        gb / read
    );
    for isa in Isa::available() {
        let secs = time(|| m.matmul_with(isa, &x, t, &mut out));
        println!(
            "| {} kernel | {:.3} ms | {:.1} GB/s |",
            isa.name(),
            secs * 1e3,
            gb / secs
        );
    }
    let secs = time(|| m.matmul(&x, t, &mut out));
    println!("| matmul | {:.3} ms | {:.1} GB/s |", secs * 1e3, gb / secs);
    Ok(())
}
