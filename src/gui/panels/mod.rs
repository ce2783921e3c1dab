//! The window's panels. Each reads the [`AppModel`](super::AppModel), edits only its own
//! drafts in it, and pushes what the user asked for as [`Action`](super::Action)s.

pub mod cache;
pub mod chat;
pub mod conversations;
pub mod settings;
pub mod top;
