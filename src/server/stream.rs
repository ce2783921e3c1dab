//! One request's events as server-sent events.
//!
//! Owns: the SSE body of a streamed completion: for chat, a first chunk with
//! `delta.role`; one chunk per non-empty piece of text (the engine sends empty pieces while
//! it holds text back, e.g. a possible stop string; those are skipped), a thinking model's
//! reasoning as `delta.reasoning_content` before its `delta.content`; a last chunk with
//! `finish_reason`; with `include_usage` a chunk with `choices: []` and `usage`; then
//! `data: [DONE]`. An error after the stream started is sent as `data: {"error": ...}`, then
//! `data: [DONE]`. Comment lines keep idle connections open.
//!
//! The stream owns the [`RequestStream`]: when the client disconnects, axum drops the body,
//! the `RequestStream` with it, and the engine cancels the request.
//!
//! Counterpart: vLLM's `chat_completion_stream_generator`; OpenAI's streaming format.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use serde::Serialize;

use crate::engine::{EngineHandle, Event, Reasoning, ReasoningStream, RequestStream, SplitPiece, TokenLogprob, ToolStream};

use super::generation::ended_early;
use super::params::{Echo, Plan};
use super::tools::wire_calls;
use super::protocol::{Kind, Meta, Usage};
use super::{logprobs, ApiError};

/// How often an idle stream sends a comment line.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// A streamed reply as each API's SSE body keeps it (this module's chunks, `/v1/responses`'
/// and `/v1/messages`' typed events): events ready to send, and the engine's events that
/// become them.
pub(super) trait EventSource: Send + 'static {
    /// The next event ready to send.
    fn pop(&mut self) -> Option<SseEvent>;
    /// The request's last event has been turned into ready events.
    fn finished(&self) -> bool;
    /// Waits for the request's next event and queues what it becomes.
    fn next(&mut self) -> impl Future<Output = ()> + Send;
}

/// The SSE body that sends `source`'s events in order, waiting for more until it has
/// finished; comment lines keep an idle connection open. Dropping it (the client left) drops
/// `source`, and with it the request's stream.
pub(super) fn drain<S: EventSource>(source: S) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let stream = futures_util::stream::unfold(source, |mut s| async move {
        loop {
            if let Some(event) = s.pop() {
                return Some((Ok(event), s));
            }
            if s.finished() {
                return None;
            }
            s.next().await;
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

struct State {
    events: RequestStream,
    kind: Kind,
    meta: Meta,
    include_usage: bool,
    /// Events ready to send, in order.
    ready: VecDeque<SseEvent>,
    /// The request's last event has been turned into `ready` events.
    finished: bool,
    /// For token names in `logprobs`.
    engine: EngineHandle,
    /// Characters of the reply streamed so far (the completions' `text_offset`).
    offset: usize,
    /// With tools offered: the reply's text, held from the first sign of a call.
    tools: Option<ToolStream>,
    /// Send every call the reply holds, or only the first (`parallel_tool_calls: false`).
    parallel_calls: bool,
    /// A model that thinks: the reply's reasoning split from its content (which alone goes
    /// on to `tools`).
    reasoning: Option<ReasoningStream>,
    /// How the reply's reasoning is split and its close tag's token, to count its tokens.
    counted: (Option<Reasoning>, Option<u32>),
    /// The prompt to echo before the first piece of the reply (the completions' `echo`).
    echo: Option<Echo>,
    /// Whether the chunks carry logprobs.
    logprobs: bool,
}

/// The SSE response for `events`.
pub(crate) fn sse(
    engine: EngineHandle,
    events: RequestStream,
    kind: Kind,
    meta: Meta,
    plan: &Plan,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let ready: VecDeque<SseEvent> = kind.opening(&meta).iter().map(json_event).collect();
    let state = State {
        engine,
        offset: 0,
        events,
        kind,
        meta,
        include_usage: plan.include_usage,
        tools: plan.tool_calls.map(|f| ToolStream::with_tools(f, plan.tools.clone())),
        parallel_calls: plan.parallel_calls,
        reasoning: plan.reasoning.map(Reasoning::stream),
        counted: (plan.reasoning, plan.reasoning_close),
        echo: plan.echo.clone(),
        logprobs: plan.params.logprobs.is_some(),
        ready,
        finished: false,
    };
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
        match self.events.recv().await {
            Some(Event::Token {
                text,
                logprob,
                prompt_logprobs,
                ..
            }) => {
                self.send_echo(prompt_logprobs.as_deref().unwrap_or_default());
                let piece = self.split(text);
                // With logprobs every token gets its chunk (its text may still be held back).
                let logprobs = logprob.map(|lp| {
                    logprobs::build(
                        self.kind,
                        std::slice::from_ref(&lp),
                        &logprobs::Names(&self.engine),
                        &mut self.offset,
                    )
                });
                if !piece.is_empty() || logprobs.is_some() {
                    let chunk = match self.kind {
                        Kind::Chat => Kind::split_piece(&self.meta, piece, logprobs),
                        Kind::Text => self.kind.piece(&self.meta, Some(piece.content), logprobs, None),
                    };
                    self.ready.push_back(json_event(&chunk));
                }
            }
            Some(Event::Done(report)) => {
                self.send_echo(&report.prompt_logprobs);
                if let Some(r) = self.reasoning.take() {
                    let rest = self.hold_calls(r.finish());
                    if !rest.is_empty() {
                        self.ready.push_back(json_event(&Kind::split_piece(&self.meta, rest, None)));
                    }
                }
                let mut finish = report.stop.finish_reason();
                if let Some(t) = self.tools.take() {
                    let format = t.format();
                    let mut parsed = t.finish();
                    if !self.parallel_calls {
                        parsed.calls.truncate(1);
                    }
                    if !parsed.content.is_empty() {
                        let rest = self.kind.piece(&self.meta, Some(parsed.content), None, None);
                        self.ready.push_back(json_event(&rest));
                    }
                    if !parsed.calls.is_empty() {
                        let calls = Kind::calls(&self.meta, wire_calls(parsed.calls, true, format));
                        self.ready.push_back(json_event(&calls));
                        finish = "tool_calls";
                    }
                }
                let last = self.kind.piece(&self.meta, None, None, Some(finish));
                self.ready.push_back(json_event(&last));
                if self.include_usage {
                    let (reasoning, close) = self.counted;
                    let counted = super::params::reasoning_tokens(reasoning, close, &report.text, &report.tokens);
                    let usage = self.kind.usage(&self.meta, Usage::of(&report).with_reasoning(counted));
                    self.ready.push_back(json_event(&usage));
                }
                self.end();
            }
            Some(Event::Error(e)) => self.fail(e.into()),
            None => self.fail(ended_early()),
        }
    }
}

impl State {
    /// A piece of the reply as it can go out now: reasoning apart, and content held while it
    /// may be a tool call.
    fn split(&mut self, text: String) -> SplitPiece {
        let piece = SplitPiece::of(self.reasoning.as_mut(), text);
        self.hold_calls(piece)
    }

    /// `piece` with its content passed through the tool-call holding, when tools are offered.
    fn hold_calls(&mut self, mut piece: SplitPiece) -> SplitPiece {
        if let Some(t) = &mut self.tools {
            piece.content = t.push(&piece.content);
        }
        piece
    }

    /// The echoed prompt, once, before anything of the reply.
    fn send_echo(&mut self, scored: &[TokenLogprob]) {
        let Some(echo) = self.echo.take() else {
            return;
        };
        let lps = self
            .logprobs
            .then(|| logprobs::echo(&echo.ids, scored, &logprobs::Names(&self.engine), &mut self.offset));
        let chunk = self.kind.piece(&self.meta, Some(echo.text), lps, None);
        self.ready.push_back(json_event(&chunk));
    }

    fn fail(&mut self, error: ApiError) {
        tracing::warn!("streamed request failed: {error}");
        self.ready.push_back(json_event(&error.body()));
        self.end();
    }

    fn end(&mut self) {
        self.ready.push_back(SseEvent::default().data("[DONE]"));
        self.finished = true;
    }
}

/// `data: <json>`; a value that cannot be written becomes an error event.
fn json_event<T: Serialize>(value: &T) -> SseEvent {
    match serde_json::to_string(value) {
        Ok(json) => SseEvent::default().data(json),
        Err(e) => {
            let body = ApiError::Internal(format!("cannot write a chunk: {e}")).body();
            SseEvent::default().data(serde_json::to_string(&body).unwrap_or_else(|_| "{\"error\":{}}".into()))
        }
    }
}
