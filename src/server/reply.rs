//! A finished reply as the front-ends answer with it: reasoning, text and calls.
//!
//! Owns: [`Reply`], read from a reply's text as a [`Plan`] says (the reasoning apart for a
//! model that thinks; calls read in the model's format when tools were offered, only the first
//! without `parallel_tool_calls`), each call with a fresh id; and the assistant [`Message`] it
//! is, for a history a later request continues. `/v1/responses` and `/v1/messages` build their
//! output from it; `/v1/chat/completions` reads the same parts in `protocol.rs`.
//!
//! Counterpart: vLLM's reasoning and tool parsers' `extract_*` results in `serving_*.py`.

use crate::engine::{Message, Role, SplitReply, ToolCall, ToolFormat};

use super::params::Plan;

/// A finished reply, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    /// The reasoning (trimmed), for a model that thinks.
    pub reasoning: Option<String>,
    /// The text outside any calls.
    pub content: String,
    pub calls: Vec<ToolCall>,
}

impl Reply {
    /// `text` split as `plan` says (reasoning apart; calls read when tools were offered, only
    /// the first without `parallel_tool_calls`); each call gets a fresh id in `format`'s shape.
    pub fn of(plan: &Plan, text: &str) -> Self {
        let split = SplitReply::of(plan.reasoning, text);
        let parsed = plan.tool_calls.and_then(|format| format.parse_for(&split.content, &plan.tools).map(|p| (format, p)));
        match parsed {
            Some((format, mut p)) if !p.calls.is_empty() => {
                if !plan.parallel_calls {
                    p.calls.truncate(1);
                }
                Self {
                    reasoning: split.reasoning,
                    content: p.content,
                    calls: p.calls.into_iter().map(|c| with_id(format, c.name, c.arguments)).collect(),
                }
            }
            _ => Self {
                reasoning: split.reasoning,
                content: split.content,
                calls: Vec::new(),
            },
        }
    }

    /// The assistant turn this reply is, for the history a later request continues.
    pub fn message(&self) -> Message {
        let mut m = Message::new(Role::Assistant, self.content.clone());
        m.reasoning_content = self.reasoning.clone();
        m.tool_calls = self.calls.clone();
        m
    }
}

/// A call with a fresh id in `format`'s shape (9 letters and digits for Mistral's templates).
pub(crate) fn with_id(format: ToolFormat, name: String, arguments: String) -> ToolCall {
    ToolCall {
        id: format.call_id(),
        name,
        arguments,
    }
}

