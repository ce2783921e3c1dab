//! The window's panels. Each reads the [`AppModel`](super::AppModel), edits only its own
//! drafts in it, and pushes what the user asked for as [`Action`](super::Action)s.

pub mod cache;
pub mod chat;
pub mod conversations;
pub mod settings;
pub mod top;

/// Bytes as MiB, one decimal.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}
