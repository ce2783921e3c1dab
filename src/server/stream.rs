//! One request's events as server-sent events.
//!
//! Owns: the SSE body of a streamed completion: per choice (a request's `n`, each chunk
//! naming its choice's `index`, the choices' chunks interleaved as they come): for chat, a first chunk with
//! `delta.role`; one chunk per non-empty piece of text (the engine sends empty pieces while
//! it holds text back, e.g. a possible stop string; those are skipped), a thinking model's
//! reasoning as `delta.reasoning_content` before its `delta.content`; a last chunk with
//! `finish_reason`; then, once every choice has ended, with `include_usage` a chunk with
//! `choices: []` and the usage of all; then `data: [DONE]`. An error after the stream started
//! (any choice's) is sent as `data: {"error": ...}`, then `data: [DONE]`. Comment lines keep
//! idle connections open.
//!
//! The stream owns the [`RequestStream`]s: when the client disconnects, axum drops the body,
//! the `RequestStream`s with it, and the engine cancels the requests.
//!
//! Counterpart: vLLM's `chat_completion_stream_generator`; OpenAI's streaming format.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use serde::Serialize;

use crate::engine::{
    EngineHandle, Event, GenerationReport, Reasoning, ReasoningStream, RequestStream, SplitPiece, TokenLogprob, ToolStream,
};

use super::generation::ended_early;
use super::choices::{Choice, Echo};
use super::params::Plan;
use super::tools::wire_calls;
use super::protocol::{Chunk, Kind, Meta, Usage};
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

/// A streamed response: its choices' chunks as each has them, then (with `include_usage`)
/// the usage of all, then `[DONE]`; a choice that fails ends the response with its error.
struct State {
    choices: Vec<ChoiceState>,
    kind: Kind,
    meta: Meta,
    include_usage: bool,
    /// The response's own last events (usage, an error, `[DONE]`), after every choice's.
    ready: VecDeque<SseEvent>,
    /// `[DONE]` has been queued.
    finished: bool,
}

/// One choice's part of a streamed response.
struct ChoiceState {
    /// Its place among the request's choices, in each of its chunks.
    index: u32,
    /// The request's prompt it answers.
    prompt: usize,
    events: RequestStream,
    kind: Kind,
    meta: Meta,
    /// Chunks ready to send, in order.
    ready: VecDeque<SseEvent>,
    /// The request's last event has been turned into `ready` chunks (or `error`).
    finished: bool,
    /// The finished reply's usage.
    usage: Option<Usage>,
    /// Why the request failed, for the response to send.
    error: Option<ApiError>,
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

/// The SSE response for a request's `choices`, in order.
pub(crate) fn sse(
    engine: EngineHandle,
    choices: Vec<Choice>,
    kind: Kind,
    meta: Meta,
    plan: &Plan,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let choices = choices
        .into_iter()
        .enumerate()
        .map(|(i, c)| ChoiceState::new(u32::try_from(i).unwrap_or(u32::MAX), c, engine.clone(), kind, &meta, plan))
        .collect();
    drain(State {
        choices,
        kind,
        meta,
        include_usage: plan.include_usage,
        ready: VecDeque::new(),
        finished: false,
    })
}

impl EventSource for State {
    fn pop(&mut self) -> Option<SseEvent> {
        self.choices
            .iter_mut()
            .find_map(|c| c.ready.pop_front())
            .or_else(|| self.ready.pop_front())
    }

    fn finished(&self) -> bool {
        self.finished
    }

    /// Waits for the next event of any choice still running and queues what it becomes;
    /// once all have finished (or one failed), the response's last events.
    async fn next(&mut self) {
        if let Some(e) = self.choices.iter_mut().find_map(|c| c.error.take()) {
            tracing::warn!("streamed request failed: {e}");
            self.ready.push_back(json_event(&e.body()));
            return self.end();
        }
        if self.choices.iter().any(|c| !c.finished) {
            let running = self.choices.iter_mut().filter(|c| !c.finished).map(|c| Box::pin(c.next()));
            // Each choice's `next` only awaits its channel, so the ones not chosen lose nothing.
            futures_util::future::select_all(running).await;
            return;
        }
        if self.include_usage {
            let usage = Usage::of_choices(self.choices.iter().filter_map(|c| Some((c.prompt, c.usage?))));
            if let Some(usage) = usage {
                self.ready.push_back(json_event(&self.kind.usage(&self.meta, usage)));
            }
        }
        self.end();
    }
}

impl State {
    fn end(&mut self) {
        self.ready.push_back(SseEvent::default().data("[DONE]"));
        self.finished = true;
    }
}

impl ChoiceState {
    fn new(index: u32, choice: Choice, engine: EngineHandle, kind: Kind, meta: &Meta, plan: &Plan) -> Self {
        let ready = kind.opening(meta).map(|c| json_event(&c.at(index))).into_iter().collect();
        Self {
            index,
            prompt: choice.prompt,
            events: choice.events,
            kind,
            meta: meta.clone(),
            ready,
            finished: false,
            usage: None,
            error: None,
            engine,
            offset: 0,
            tools: plan.tool_calls.map(|f| ToolStream::with_tools(f, plan.tools.clone())),
            parallel_calls: plan.parallel_calls,
            reasoning: plan.reasoning.map(Reasoning::stream),
            counted: (plan.reasoning, plan.reasoning_close),
            echo: choice.echo,
            logprobs: plan.params.logprobs.is_some(),
        }
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
                    self.push(chunk);
                }
            }
            Some(Event::Done(report)) => self.done(&report),
            Some(Event::Error(e)) => self.fail(e.into()),
            None => self.fail(ended_early()),
        }
    }

    /// The reply's end: what was held back, its calls, the last chunk with `finish_reason`.
    fn done(&mut self, report: &GenerationReport) {
        self.send_echo(&report.prompt_logprobs);
        if let Some(r) = self.reasoning.take() {
            let rest = self.hold_calls(r.finish());
            if !rest.is_empty() {
                self.push(Kind::split_piece(&self.meta, rest, None));
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
                self.push(rest);
            }
            if !parsed.calls.is_empty() {
                self.push(Kind::calls(&self.meta, wire_calls(parsed.calls, true, format)));
                finish = "tool_calls";
            }
        }
        let last = self.kind.piece(&self.meta, None, None, Some(finish));
        self.push(last);
        let (reasoning, close) = self.counted;
        let counted = super::params::reasoning_tokens(reasoning, close, &report.text, &report.tokens);
        self.usage = Some(Usage::of(report).with_reasoning(counted));
        self.finished = true;
    }

    /// Queues `chunk` as this choice's.
    fn push(&mut self, chunk: Chunk) {
        self.ready.push_back(json_event(&chunk.at(self.index)));
    }

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
        self.push(chunk);
    }

    fn fail(&mut self, error: ApiError) {
        self.error = Some(error);
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
