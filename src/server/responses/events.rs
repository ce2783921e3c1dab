//! A streamed `/v1/responses` request: OpenAI's typed events over SSE.
//!
//! Owns: the event sequence. First `response.created` and `response.in_progress`; then each
//! output item opens with `response.output_item.added` (and `response.content_part.added`),
//! grows with `response.reasoning_text.delta` or `response.output_text.delta` as the model
//! writes, and closes with its `.done` events and `response.output_item.done`; calls (held
//! until the reply ends, as on `/v1/chat/completions`) come as a `function_call` item each,
//! its arguments in one `response.function_call_arguments.delta`; last, `response.completed`
//! (or `response.incomplete` at the token limit) with the whole response and its `usage`. An
//! error after the stream began is an `error` event, then `response.failed`. Each event has
//! `event:` set to its type and a `sequence_number` counting from 0; there is no `[DONE]`.
//!
//! As in [`super::super::stream`], the stream owns the [`RequestStream`]: a client that
//! leaves drops it and the engine cancels the request. A stored response (`store`) is kept
//! when its last event is queued.
//!
//! Counterpart: vLLM's `responses_stream_generator` in `serving_responses.py`; OpenAI's
//! "Streaming events" reference for the Responses API.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, Sse};
use futures_util::Stream;
use serde_json::{json, Value};

use crate::engine::{GenerationReport, Message, Reasoning, ReasoningStream, RequestStream, SplitPiece, ToolStream};

use super::super::generation::{next_piece, Next};
use super::super::stream::{drain, EventSource};
use super::super::params::Plan;
use super::super::{ApiError, AppState};
use super::output::{self, Frame, Reply};

/// The item being written.
#[derive(Debug)]
struct Open {
    kind: Part,
    index: usize,
    id: String,
    text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Reasoning,
    Message,
}

struct State {
    events: RequestStream,
    app: AppState,
    plan: Plan,
    frame: Frame,
    /// The history to store the response with (`store`), without its reply yet.
    keep: Option<Vec<Message>>,
    sequence: u64,
    ready: VecDeque<SseEvent>,
    finished: bool,
    reasoning: Option<ReasoningStream>,
    tools: Option<ToolStream>,
    open: Option<Open>,
    /// The items closed so far.
    output: Vec<Value>,
}

/// The SSE response for `events`.
pub(crate) fn sse(
    app: AppState,
    events: RequestStream,
    plan: Plan,
    frame: Frame,
    keep: Option<Vec<Message>>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let mut state = State {
        events,
        app,
        reasoning: plan.reasoning.map(Reasoning::stream),
        tools: plan.tool_calls.map(|f| ToolStream::with_tools(f, plan.tools.clone())),
        plan,
        frame,
        keep,
        sequence: 0,
        ready: VecDeque::new(),
        finished: false,
        open: None,
        output: Vec::new(),
    };
    let response = state.frame.response("in_progress", Vec::new(), None, None);
    state.send("response.created", json!({"response": response}));
    state.send("response.in_progress", json!({"response": response}));
    drain(state)
}

impl EventSource for State {
    fn pop(&mut self) -> Option<SseEvent> {
        self.ready.pop_front()
    }

    fn finished(&self) -> bool {
        self.finished
    }

    /// Waits for the request's next event and queues what it becomes.
    async fn next(&mut self) {
        match next_piece(&mut self.events, self.reasoning.as_mut()).await {
            Next::Piece(piece) => self.write(piece),
            Next::Done(report) => self.done(&report),
            Next::Failed(e) => self.fail(e),
        }
    }
}

impl State {
    /// Queues the event `kind` with `body`'s fields, its type and its sequence number.
    fn send(&mut self, kind: &str, mut body: Value) {
        if let Some(obj) = body.as_object_mut() {
            obj.insert("type".into(), json!(kind));
            obj.insert("sequence_number".into(), json!(self.sequence));
        }
        self.sequence += 1;
        let data = serde_json::to_string(&body).unwrap_or_else(|e| {
            json!({"type": "error", "message": format!("cannot write an event: {e}")}).to_string()
        });
        self.ready.push_back(SseEvent::default().event(kind).data(data));
    }

    /// Sends a piece of the reply: reasoning to the reasoning item, content (past the tool
    /// call holding) to the message.
    fn write(&mut self, piece: SplitPiece) {
        if !piece.reasoning.is_empty() {
            self.text(Part::Reasoning, &piece.reasoning);
        }
        let content = match &mut self.tools {
            Some(t) => t.push(&piece.content),
            None => piece.content,
        };
        if !content.is_empty() {
            self.text(Part::Message, &content);
        }
    }

    /// Adds `delta` to the open item of `kind`, opening one first if needed.
    fn text(&mut self, kind: Part, delta: &str) {
        if self.open.as_ref().is_none_or(|o| o.kind != kind) {
            self.close("completed");
            self.open_item(kind);
        }
        let Some(open) = &mut self.open else { return };
        open.text.push_str(delta);
        let (index, id) = (open.index, open.id.clone());
        let body = json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta});
        match kind {
            Part::Reasoning => self.send("response.reasoning_text.delta", body),
            Part::Message => {
                let mut body = body;
                body["logprobs"] = json!([]);
                self.send("response.output_text.delta", body)
            }
        }
    }

    fn open_item(&mut self, kind: Part) {
        let index = self.output.len();
        let (id, item, part) = match kind {
            Part::Reasoning => {
                let id = output::item_id("rs");
                let item = json!({"type": "reasoning", "id": id, "summary": [], "content": [], "status": "in_progress"});
                (id, item, json!({"type": "reasoning_text", "text": ""}))
            }
            Part::Message => {
                let id = output::item_id("msg");
                let item = json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []});
                (id, item, output::text_part(""))
            }
        };
        self.send("response.output_item.added", json!({"output_index": index, "item": item}));
        self.send(
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
        );
        self.open = Some(Open {
            kind,
            index,
            id,
            text: String::new(),
        });
    }

    /// Closes the open item (if any) with `status`.
    fn close(&mut self, status: &str) {
        let Some(Open { kind, index, id, text }) = self.open.take() else {
            return;
        };
        let at = json!({"item_id": id, "output_index": index, "content_index": 0});
        let with = |mut v: Value, extra: Value| {
            if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            v
        };
        let item = match kind {
            Part::Reasoning => {
                self.send("response.reasoning_text.done", with(at.clone(), json!({"text": text})));
                let part = json!({"type": "reasoning_text", "text": text});
                self.send("response.content_part.done", with(at, json!({"part": part})));
                output::reasoning_item(&id, &text, status)
            }
            Part::Message => {
                self.send("response.output_text.done", with(at.clone(), json!({"text": text, "logprobs": []})));
                self.send("response.content_part.done", with(at, json!({"part": output::text_part(&text)})));
                output::message_item(&id, &text, status)
            }
        };
        self.send("response.output_item.done", json!({"output_index": index, "item": item}));
        self.output.push(item);
    }

    /// The reply's end: what was held, the calls, the last event, and the stored response.
    fn done(&mut self, report: &GenerationReport) {
        let status = output::status_of(report);
        if let Some(r) = self.reasoning.take() {
            self.write(r.finish());
        }
        let reply = Reply::of(&self.plan, &report.text);
        if let Some(t) = self.tools.take() {
            let rest = t.finish();
            if !rest.content.is_empty() {
                self.text(Part::Message, &rest.content);
            }
        }
        let wrote_message = self.open.as_ref().is_some_and(|o| o.kind == Part::Message)
            || self.output.iter().any(|i| i["type"] == "message");
        if !wrote_message && reply.calls.is_empty() {
            // A reply with no text is still one (empty) message.
            self.close(status);
            self.open_item(Part::Message);
        }
        self.close(status);
        for call in &reply.calls {
            self.call(call, status);
        }
        let usage = output::usage(report, self.plan.reasoning_tokens(report));
        let response = self.frame.response(status, self.output.clone(), Some(usage), None);
        if let Some(history) = self.keep.take() {
            super::keep(&self.app, &self.frame.id, response.clone(), history, &reply);
        }
        let last = if status == "completed" { "response.completed" } else { "response.incomplete" };
        self.send(last, json!({"response": response}));
        self.finished = true;
    }

    /// One `function_call` item, whole.
    fn call(&mut self, call: &crate::engine::ToolCall, status: &str) {
        let index = self.output.len();
        let id = output::item_id("fc");
        let mut added = output::call_item(&id, call, "in_progress");
        added["arguments"] = json!("");
        self.send("response.output_item.added", json!({"output_index": index, "item": added}));
        self.send(
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": index, "delta": call.arguments}),
        );
        self.send(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "name": call.name, "arguments": call.arguments}),
        );
        let item = output::call_item(&id, call, status);
        self.send("response.output_item.done", json!({"output_index": index, "item": item}));
        self.output.push(item);
    }

    fn fail(&mut self, error: ApiError) {
        tracing::warn!("streamed response failed: {error}");
        let body = error.body().error;
        self.close("incomplete");
        self.send(
            "error",
            json!({"code": body.code, "message": body.message, "param": body.param}),
        );
        let failed = json!({"code": "server_error", "message": body.message});
        let response = self.frame.response("failed", self.output.clone(), None, Some(failed));
        self.send("response.failed", json!({"response": response}));
        self.finished = true;
    }
}
