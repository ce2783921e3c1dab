//! A streamed `/api/chat` or `/api/generate` request: one JSON object per line
//! (`application/x-ndjson`), as Ollama streams.
//!
//! Owns: the lines. Each piece of the reply as the model writes it (`message.content` on the
//! chat route, `response` on generate; a thinking model's reasoning in `thinking` beside it);
//! calls (held until the reply ends, as on the OpenAI routes) as one line whose message
//! carries `tool_calls`; then the last line, `done: true` with `done_reason`, the counts and
//! the durations (and generate's `context`). An error after the stream began is a line
//! `{"error": "..."}`, which Ollama's clients raise.
//!
//! The stream owns the [`RequestStream`]: a client that leaves drops it and the engine cancels
//! the request.
//!
//! Counterpart: Ollama's `streamResponse` in `server/routes.go`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use crate::engine::{GenerationReport, Reasoning, ReasoningStream, RequestStream, SplitPiece, ToolStream};

use super::super::generation::{next_piece, Next};
use super::super::params::Plan;
use super::super::reply::Reply;
use super::super::ApiError;
use super::output;

/// Which route's lines: the chat's `message`, or generate's `response` (with the ids its last
/// line gives back as `context`, when it gives them).
pub(crate) enum Route {
    Chat,
    Generate { context: Option<Vec<u32>> },
}

struct State {
    events: RequestStream,
    plan: Plan,
    /// The model's name as the request gave it.
    model: String,
    route: Route,
    started: Instant,
    reasoning: Option<ReasoningStream>,
    tools: Option<ToolStream>,
    ready: VecDeque<Bytes>,
    finished: bool,
}

/// The NDJSON response for `events`.
pub(crate) fn ndjson(events: RequestStream, plan: Plan, model: String, route: Route, started: Instant) -> Response {
    let state = State {
        events,
        reasoning: plan.reasoning.map(Reasoning::stream),
        tools: plan.tool_calls.map(|f| ToolStream::with_tools(f, plan.tools.clone())),
        plan,
        model,
        route,
        started,
        ready: VecDeque::new(),
        finished: false,
    };
    let lines = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(line) = s.ready.pop_front() {
                return Some((Ok::<_, Infallible>(line), s));
            }
            if s.finished {
                return None;
            }
            s.next().await;
        }
    });
    ([(CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(lines)).into_response()
}

/// One object as a line.
pub(crate) fn to_line(v: &Value) -> Bytes {
    let mut text =
        serde_json::to_string(v).unwrap_or_else(|e| json!({"error": format!("cannot write a line: {e}")}).to_string());
    text.push('\n');
    Bytes::from(text)
}

impl State {
    async fn next(&mut self) {
        match next_piece(&mut self.events, self.reasoning.as_mut()).await {
            Next::Piece(piece) => self.write(piece),
            Next::Done(report) => self.done(&report),
            Next::Failed(e) => self.fail(e),
        }
    }

    fn write(&mut self, piece: SplitPiece) {
        let content = match &mut self.tools {
            Some(t) => t.push(&piece.content),
            None => piece.content,
        };
        self.piece(&piece.reasoning, &content);
    }

    /// A line with `reasoning` and `content`, unless both are empty.
    fn piece(&mut self, reasoning: &str, content: &str) {
        if reasoning.is_empty() && content.is_empty() {
            return;
        }
        let mut line = output::line(&self.model);
        match self.route {
            Route::Chat => {
                let mut m = json!({"role": "assistant", "content": content});
                if !reasoning.is_empty() {
                    m["thinking"] = json!(reasoning);
                }
                line.insert("message".into(), m);
            }
            Route::Generate { .. } => {
                line.insert("response".into(), json!(content));
                if !reasoning.is_empty() {
                    line.insert("thinking".into(), json!(reasoning));
                }
            }
        }
        line.insert("done".into(), json!(false));
        self.ready.push_back(to_line(&Value::Object(line)));
    }

    fn done(&mut self, report: &GenerationReport) {
        if let Some(r) = self.reasoning.take() {
            let rest = r.finish();
            self.write(rest);
        }
        if let Some(t) = self.tools.take() {
            let rest = t.finish();
            self.piece("", &rest.content);
        }
        let reply = Reply::of(&self.plan, &report.text);
        let mut last = output::line(&self.model);
        match &self.route {
            Route::Chat => {
                if !reply.calls.is_empty() {
                    let mut line = output::line(&self.model);
                    line.insert(
                        "message".into(),
                        json!({"role": "assistant", "content": "", "tool_calls": output::tool_calls(&reply.calls)}),
                    );
                    line.insert("done".into(), json!(false));
                    self.ready.push_back(to_line(&Value::Object(line)));
                }
                last.insert("message".into(), json!({"role": "assistant", "content": ""}));
            }
            Route::Generate { context } => {
                last.insert("response".into(), json!(""));
                if let Some(ids) = context {
                    last.insert("context".into(), generate_context(ids, report));
                }
            }
        }
        output::finish(&mut last, report, self.started);
        self.ready.push_back(to_line(&Value::Object(last)));
        self.finished = true;
    }

    fn fail(&mut self, error: ApiError) {
        tracing::warn!("streamed Ollama reply failed: {error}");
        let mut line = Map::new();
        line.insert("error".into(), json!(error.body().error.message));
        self.ready.push_back(to_line(&Value::Object(line)));
        self.finished = true;
    }
}

/// `/api/generate`'s `context`: the prompt's ids, then the reply's.
pub(crate) fn generate_context(prompt: &[u32], report: &GenerationReport) -> Value {
    prompt.iter().chain(&report.tokens).copied().collect()
}
