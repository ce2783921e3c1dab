//! A streamed `/v1/messages` request: Anthropic's events over SSE.
//!
//! Owns: the event sequence. `message_start` (the message with no content; `usage` counts the
//! whole prompt as `input_tokens` until the end says how much of it the cache served), `ping`,
//! then each content block: `content_block_start`, `content_block_delta`s (`thinking_delta`
//! for a thinking model's reasoning, `text_delta` for the text) as the model writes, and
//! `content_block_stop`; calls (held until the reply ends, as on the OpenAI routes) as one
//! `tool_use` block each, its `input` in one `input_json_delta`; then `message_delta` with
//! `stop_reason`, `stop_sequence` and the final `usage`, and `message_stop`. An error after the
//! stream began is an `error` event. Each event's `event:` line is its type.
//!
//! The stream owns the [`RequestStream`]: a client that leaves drops it and the engine cancels
//! the request.
//!
//! Counterpart: Anthropic's "Streaming Messages" reference; llama.cpp server's
//! `to_json_anthropic_stream`.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, Sse};
use futures_util::Stream;
use serde_json::{json, Value};

use crate::engine::{GenerationReport, Reasoning, ReasoningStream, RequestStream, SplitPiece, ToolStream};

use super::super::generation::{next_piece, Next};
use super::super::stream::{drain, EventSource};
use super::super::params::Plan;
use super::super::reply::Reply;
use super::super::ApiError;
use super::output;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
}

struct State {
    events: RequestStream,
    plan: Plan,
    ready: VecDeque<SseEvent>,
    finished: bool,
    reasoning: Option<ReasoningStream>,
    tools: Option<ToolStream>,
    /// The block being written, and its index.
    open: Option<(Block, usize)>,
    /// Blocks started so far.
    started: usize,
}

/// The SSE response for `events`: message `id`, its prompt `prompt_tokens` long.
pub(crate) fn sse(
    events: RequestStream,
    plan: Plan,
    id: String,
    prompt_tokens: usize,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let mut state = State {
        events,
        reasoning: plan.reasoning.map(Reasoning::stream),
        tools: plan.tool_calls.map(|f| ToolStream::with_tools(f, plan.tools.clone())),
        ready: VecDeque::new(),
        finished: false,
        open: None,
        started: 0,
        plan,
    };
    let message = json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": state.plan.model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
        "usage": {"input_tokens": prompt_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0},
    });
    state.send("message_start", json!({"message": message}));
    state.send("ping", json!({}));
    drain(state)
}

impl EventSource for State {
    fn pop(&mut self) -> Option<SseEvent> {
        self.ready.pop_front()
    }

    fn finished(&self) -> bool {
        self.finished
    }

    async fn next(&mut self) {
        match next_piece(&mut self.events, self.reasoning.as_mut()).await {
            Next::Piece(piece) => self.write(piece),
            Next::Done(report) => self.done(&report),
            Next::Failed(e) => self.fail(e),
        }
    }
}

impl State {
    /// Queues the event `kind` with `body`'s fields and its type.
    fn send(&mut self, kind: &str, mut body: Value) {
        if let Some(obj) = body.as_object_mut() {
            obj.insert("type".into(), json!(kind));
        }
        let data = serde_json::to_string(&body).unwrap_or_else(|e| {
            json!({"type": "error", "error": {"type": "api_error", "message": format!("cannot write an event: {e}")}}).to_string()
        });
        self.ready.push_back(SseEvent::default().event(kind).data(data));
    }

    fn write(&mut self, piece: SplitPiece) {
        if !piece.reasoning.is_empty() {
            self.delta(Block::Thinking, &piece.reasoning);
        }
        let content = match &mut self.tools {
            Some(t) => t.push(&piece.content),
            None => piece.content,
        };
        if !content.is_empty() {
            self.delta(Block::Text, &content);
        }
    }

    /// Adds `text` to the open block of `kind`, starting one first if needed.
    fn delta(&mut self, kind: Block, text: &str) {
        let index = match self.open {
            Some((open, index)) if open == kind => index,
            _ => {
                self.stop_block();
                let block = match kind {
                    Block::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
                    Block::Text => json!({"type": "text", "text": ""}),
                };
                self.start_block(block)
            }
        };
        self.open = Some((kind, index));
        let delta = match kind {
            Block::Thinking => json!({"type": "thinking_delta", "thinking": text}),
            Block::Text => json!({"type": "text_delta", "text": text}),
        };
        self.send("content_block_delta", json!({"index": index, "delta": delta}));
    }

    /// Starts `block`; returns its index.
    fn start_block(&mut self, block: Value) -> usize {
        let index = self.started;
        self.started += 1;
        self.send("content_block_start", json!({"index": index, "content_block": block}));
        index
    }

    fn stop_block(&mut self) {
        if let Some((kind, index)) = self.open.take() {
            if kind == Block::Thinking {
                self.send("content_block_delta", json!({"index": index, "delta": {"type": "signature_delta", "signature": ""}}));
            }
            self.send("content_block_stop", json!({"index": index}));
        }
    }

    fn done(&mut self, report: &GenerationReport) {
        if let Some(r) = self.reasoning.take() {
            self.write(r.finish());
        }
        if let Some(t) = self.tools.take() {
            let rest = t.finish();
            if !rest.content.is_empty() {
                self.delta(Block::Text, &rest.content);
            }
        }
        self.stop_block();
        let reply = Reply::of(&self.plan, &report.text);
        for call in &reply.calls {
            let index = self.start_block(output::tool_use(call, json!({})));
            let partial = output::input(call).to_string();
            self.send("content_block_delta", json!({"index": index, "delta": {"type": "input_json_delta", "partial_json": partial}}));
            self.send("content_block_stop", json!({"index": index}));
        }
        let (stop_reason, stop_sequence) = output::stop(report, !reply.calls.is_empty());
        self.send(
            "message_delta",
            json!({"delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence}, "usage": output::usage(report)}),
        );
        self.send("message_stop", json!({}));
        self.finished = true;
    }

    fn fail(&mut self, error: ApiError) {
        tracing::warn!("streamed message failed: {error}");
        self.stop_block();
        let body = super::error_body(&error);
        self.send("error", body);
        self.finished = true;
    }
}
