//! From a tokenized prompt to a response: submit to the engine, then stream or collect.
//!
//! Owns: tokenizing off the async threads (a long conversation's template and tokenizer run
//! on tokio's blocking pool; [`chat_prompt`] for the chat-shaped routes), submitting
//! ([`submit`]: the engine validates synchronously, so a bad request gets its status before any
//! stream starts, a grammar that does not compile naming its field), collecting a whole reply for a non-streamed
//! request, and choosing between that and [`super::stream`]. A request's choices (`n` of each
//! prompt, [`super::choices`]) are answered together: a whole response once all have finished,
//! numbering them and counting each prompt once.
//!
//! The [`RequestStream`] is moved into whichever consumes it (the SSE stream, or this
//! module's future for a whole reply); when the client goes, that is dropped and the engine
//! cancels the request.
//!
//! Counterpart: vLLM's `OpenAIServingChat.create_chat_completion` /
//! `chat_completion_full_generator`.

use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::engine::{
    ChatPrompt, EngineHandle, Event, GenerateRequest, GenerationReport, Message, ReasoningStream, RequestStream, SaveTo,
    SplitPiece, SplitReply, TemplateKwargs, Tool,
};

use super::choices::{self, Choice, Echo, Prompt};
use super::params::Plan;
use super::protocol::{chat_completion, text_completion, ChatCompletion, Kind, Logprobs, Meta, TextCompletion};
use super::tools::Shape;
use super::{logprobs, stream, ApiError, AppState};

/// Runs `tokenize` with the engine handle on the blocking pool.
pub(crate) async fn tokenize<F, T, E>(state: &AppState, tokenize: F) -> Result<T, ApiError>
where
    F: FnOnce(&EngineHandle) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: Into<ApiError> + Send + 'static,
{
    let engine = state.engine().clone();
    tokio::task::spawn_blocking(move || tokenize(&engine))
        .await
        .map_err(|e| ApiError::Internal(format!("tokenizing the prompt failed: {e}")))?
        .map_err(Into::into)
}

/// `messages` with `tools` (written in `shape`) through the chat template and `kwargs`, on the
/// blocking pool; a tool whose schema does not compile is a 400 naming it.
pub(crate) async fn chat_prompt(
    state: &AppState,
    messages: Vec<Message>,
    tools: Vec<Tool>,
    shape: Shape,
    kwargs: TemplateKwargs,
) -> Result<ChatPrompt, ApiError> {
    tokenize(state, move |engine| {
        super::chat::check_schemas(engine, &tools, shape, None, None)?;
        Ok::<_, ApiError>(engine.chat_prompt(&messages, &tools, &kwargs)?)
    })
    .await
}

/// Submits `prompt` as `plan` says (saved as `save` says); a grammar that does not compile is a
/// 400 naming the field it came from.
pub(crate) fn submit(state: &AppState, prompt: Vec<u32>, plan: &Plan, save: Option<SaveTo>) -> Result<RequestStream, ApiError> {
    submit_choice(state, prompt, plan, 0, save)
}

/// [`submit`] for choice `index` of the request's `n` ([`Plan::params_for`]).
pub(super) fn submit_choice(
    state: &AppState,
    prompt: Vec<u32>,
    plan: &Plan,
    index: usize,
    save: Option<SaveTo>,
) -> Result<RequestStream, ApiError> {
    state
        .engine()
        .submit(GenerateRequest {
            prompt,
            params: plan.params_for(index),
            save,
        })
        .map_err(|e| super::structured::named(e, plan.grammar_from))
}

/// The header a response carries when its conversation could not be saved (a full disk):
/// `false`, with the reason in [`UNSAVED_REASON_HEADER`]. The text is kept in memory and
/// written when the disk allows; the turn itself is still answered.
pub const SAVED_HEADER: &str = "x-hearth-conversation-saved";
/// Why the conversation could not be saved (ASCII, at most 200 characters).
pub const UNSAVED_REASON_HEADER: &str = "x-hearth-save-error";

/// `response` with the "not saved" headers when `unsaved` gives a reason.
pub(crate) fn mark_unsaved(mut response: Response, unsaved: Option<&str>) -> Response {
    if let Some(reason) = unsaved {
        let ascii: String = reason
            .chars()
            .map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' })
            .take(200)
            .collect();
        let headers = response.headers_mut();
        headers.insert(SAVED_HEADER, axum::http::HeaderValue::from_static("false"));
        if let Ok(v) = axum::http::HeaderValue::from_str(&ascii) {
            headers.insert(UNSAVED_REASON_HEADER, v);
        }
    }
    response
}

/// Submits `prompt` and answers as `plan` says: an SSE stream or a whole
/// response of `kind`'s shape.
pub(crate) async fn respond(
    state: &AppState,
    prompt: Vec<u32>,
    plan: Plan,
    kind: Kind,
    save: Option<SaveTo>,
) -> Result<Response, ApiError> {
    let choices = choices::submit(state, vec![Prompt::ids(prompt)], &plan, save).await?;
    answer(state.engine(), choices, &plan, kind).await
}

/// Answers with a request's choices already submitted (one each), as `plan` says: streamed,
/// each chunk naming its choice, or one response of them all, once every one has finished (the
/// first that fails is the answer, and the others are cancelled).
pub(crate) async fn answer(
    engine: &EngineHandle,
    choices: Vec<Choice>,
    plan: &Plan,
    kind: Kind,
) -> Result<Response, ApiError> {
    let meta = Meta::new(
        match kind {
            Kind::Chat => "chatcmpl",
            Kind::Text => "cmpl",
        },
        &plan.model,
    );
    if plan.stream {
        return Ok(stream::sse(engine.clone(), choices, kind, meta, plan).into_response());
    }
    let (choices, streams): (Vec<_>, Vec<_>) = choices.into_iter().map(|c| ((c.prompt, c.echo), c.events)).unzip();
    let reports = futures_util::future::try_join_all(streams.into_iter().map(collect)).await?;
    let done = choices.iter().zip(&reports);
    let response = match kind {
        Kind::Chat => {
            let parts = done.map(|((p, _), r)| (*p, chat_whole(engine, r, plan, &meta))).collect();
            Json(ChatCompletion::merge(parts).ok_or_else(ended_early)?).into_response()
        }
        Kind::Text => {
            let parts = done.map(|((p, echo), r)| (*p, text_whole(engine, r, plan, echo.as_ref(), &meta))).collect();
            Json(TextCompletion::merge(parts).ok_or_else(ended_early)?).into_response()
        }
    };
    Ok(response)
}

/// The `chat.completion` of one finished choice, as `plan` says.
fn chat_whole(engine: &EngineHandle, report: &GenerationReport, plan: &Plan, meta: &Meta) -> ChatCompletion {
    let reply = SplitReply::of(plan.reasoning, &report.text);
    let parsed = plan.tool_calls.and_then(|format| {
        let mut p = format.parse_for(&reply.content, &plan.tools)?;
        if !plan.parallel_calls {
            p.calls.truncate(1);
        }
        Some((format, p))
    });
    let logprobs = whole_logprobs(engine, report, plan, None, Kind::Chat);
    chat_completion(meta, report, reply, logprobs, parsed, plan.reasoning_tokens(report))
}

/// The `text_completion` of one finished choice (after the prompt it `echo`es), as `plan` says.
fn text_whole(engine: &EngineHandle, report: &GenerationReport, plan: &Plan, echo: Option<&Echo>, meta: &Meta) -> TextCompletion {
    let logprobs = whole_logprobs(engine, report, plan, echo, Kind::Text);
    text_completion(meta, report, logprobs, echo.map(|e| e.text.as_str()))
}

/// A finished choice's `logprobs` when asked for: the `echo`ed prompt's (completions), then the
/// reply's.
fn whole_logprobs(
    engine: &EngineHandle,
    report: &GenerationReport,
    plan: &Plan,
    echo: Option<&Echo>,
    kind: Kind,
) -> Option<Logprobs> {
    plan.params.logprobs.map(|_| {
        let names = logprobs::Names(engine);
        let mut offset = 0;
        let prompt = echo.map(|e| logprobs::echo(&e.ids, &report.prompt_logprobs, &names, &mut offset));
        let reply = logprobs::build(kind, &report.logprobs, &names, &mut offset);
        match prompt {
            Some(prompt) => prompt.then(reply),
            None => reply,
        }
    })
}

/// Waits for the request's end; its report holds the whole text.
pub(crate) async fn collect(mut events: RequestStream) -> Result<Box<GenerationReport>, ApiError> {
    loop {
        match events.recv().await {
            Some(Event::Token { .. }) => {}
            Some(Event::Done(report)) => return Ok(report),
            Some(Event::Error(e)) => return Err(e.into()),
            None => return Err(ended_early()),
        }
    }
}

/// A streamed reply's next step, as the Responses, Anthropic and Ollama streams take it.
pub(crate) enum Next {
    /// Text the model wrote, split into reasoning and content (both may be empty while a
    /// character, a tag or a stop string is held back).
    Piece(SplitPiece),
    Done(Box<GenerationReport>),
    Failed(ApiError),
}

/// Waits for `events`' next event; a token's text is split by `reasoning` where the reply
/// carries any.
pub(crate) async fn next_piece(events: &mut RequestStream, reasoning: Option<&mut ReasoningStream>) -> Next {
    match events.recv().await {
        Some(Event::Token { text, .. }) => Next::Piece(SplitPiece::of(reasoning, text)),
        Some(Event::Done(report)) => Next::Done(report),
        Some(Event::Error(e)) => Next::Failed(e.into()),
        None => Next::Failed(ended_early()),
    }
}

/// The engine dropped a request's channel without its last event.
pub(crate) fn ended_early() -> ApiError {
    ApiError::Internal("the engine ended the request without a result".into())
}
