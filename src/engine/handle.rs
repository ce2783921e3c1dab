//! The engine thread and the handle front-ends hold.
//!
//! Owns: [`EngineHandle`] (cloneable; tokenizes, validates and submits requests, cancels them,
//! reads stats) and [`RequestStream`] (one request's events). The thread owns the [`Engine`]:
//! it takes commands between steps and runs steps while any request is waiting or running, then
//! sleeps until the next command.
//!
//! Invariants: a request is validated on the caller's thread, so a bad one is refused before it
//! is queued and a front-end can answer with a status, not a stream; dropping a
//! [`RequestStream`] cancels its request (the engine notices within one step and frees
//! everything it held); the queue never holds more than `max_queued` requests waiting for their
//! first step (a [`QueueTicket`] counts each, released whichever way the request leaves the
//! queue); the thread stops when the last handle is gone and no request is left.
//!
//! Counterpart: vLLM's `AsyncLLM` / `EngineCoreClient` over `EngineCore`'s busy loop.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::mpsc as events;

use super::{Engine, EngineError, EngineStats, Event, GenerateRequest, RequestId};
use crate::model::chat::{Message, TemplateKwargs};
use crate::model::chat::tools::{Tool, ToolFormat};
use crate::model::grammar::{Constraint, Grammar};
use crate::model::{ChatPrompt, LoadedModel, ModelError, ModelInfo};
use crate::persist::{ConversationId, ConversationStore, PersistError};

/// The sending half of a request's events.
pub type EventSender = events::UnboundedSender<Event>;

/// Holds one place in the engine's queue until the request is first
/// scheduled, or leaves the queue any other way (dropped with it).
#[derive(Debug)]
pub struct QueueTicket(Arc<AtomicUsize>);

impl QueueTicket {
    /// Takes a place if fewer than `limit` are taken.
    fn take(counter: &Arc<AtomicUsize>, limit: usize) -> Option<Self> {
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1))
            .ok()
            .map(|_| Self(counter.clone()))
    }
}

impl Drop for QueueTicket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request on its way to the engine thread.
#[derive(Debug)]
pub struct Submission {
    pub id: RequestId,
    pub request: GenerateRequest,
    pub events: EventSender,
    pub submitted: Instant,
    pub ticket: Option<QueueTicket>,
    /// The request's grammar, compiled on the submitting thread (`None` without one, or to
    /// compile it when the engine takes the request).
    pub constraint: Option<Constraint>,
}

enum Command {
    Submit(Box<Submission>),
    Cancel(RequestId),
    DeleteCache(ConversationId),
    FlushDisk(mpsc::Sender<()>),
}

struct Shared {
    commands: mpsc::Sender<Command>,
    model: Arc<LoadedModel>,
    /// Tokens the cache's device tier holds (the longest prompt that can run).
    capacity_tokens: usize,
    stats: Arc<Mutex<EngineStats>>,
    queued: Arc<AtomicUsize>,
    max_queued: usize,
    /// Requests refused by `submit`.
    rejected: AtomicU64,
    next_id: AtomicU64,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The conversation store, when the engine has a disk tier.
    store: Option<ConversationStore>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Closing `commands` (dropped after this) ends the thread once its
        // requests are done; nothing waits for it here.
        if let Ok(mut t) = self.thread.lock() {
            t.take();
        }
    }
}

/// A cloneable handle to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineHandle")
            .field("model", &self.shared.model.info.name)
            .finish_non_exhaustive()
    }
}

/// One request's events, in order: [`Event::Token`]s, then one
/// [`Event::Done`] or [`Event::Error`]. Dropping it cancels the request.
#[derive(Debug)]
pub struct RequestStream {
    id: RequestId,
    rx: events::UnboundedReceiver<Event>,
    /// The first event, once [`RequestStream::started`] has waited for it; `recv` gives it
    /// first.
    held: Option<Event>,
}

impl RequestStream {
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// The next event; `None` after the last one.
    pub async fn recv(&mut self) -> Option<Event> {
        match self.held.take() {
            Some(e) => Some(e),
            None => self.rx.recv().await,
        }
    }

    /// The next event, blocking this thread (not for async contexts).
    pub fn blocking_recv(&mut self) -> Option<Event> {
        self.held.take().or_else(|| self.rx.blocking_recv())
    }

    /// The next event if one has arrived.
    pub fn try_recv(&mut self) -> Option<Event> {
        self.held.take().or_else(|| self.rx.try_recv().ok())
    }

    /// Waits for the request's first event (its prompt has then been computed, and its full
    /// blocks are in the prefix cache for requests admitted after), keeping it for `recv`.
    /// False when that event is an error or the request ended without one.
    pub async fn started(&mut self) -> bool {
        if self.held.is_none() {
            self.held = self.rx.recv().await;
        }
        matches!(self.held, Some(Event::Token { .. } | Event::Done(_)))
    }
}

impl EngineHandle {
    /// Starts the engine thread with `engine`. At most `max_queued` requests
    /// may wait for their first step; more are refused with
    /// [`EngineError::QueueFull`].
    pub fn spawn(mut engine: Engine, max_queued: usize) -> Result<Self, EngineError> {
        let model = engine.model_arc();
        let capacity_tokens = engine.capacity_tokens();
        let store = engine.conversations().cloned();
        let stats = Arc::new(Mutex::new(engine.stats()));
        engine.publish_to(stats.clone());
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("hearth-engine".into())
            .spawn(move || engine_loop(engine, rx))?;
        Ok(Self {
            shared: Arc::new(Shared {
                commands: tx,
                model,
                capacity_tokens,
                stats,
                queued: Arc::new(AtomicUsize::new(0)),
                max_queued,
                rejected: AtomicU64::new(0),
                next_id: AtomicU64::new(0),
                thread: Mutex::new(Some(thread)),
                store,
            }),
        })
    }

    /// The loaded model (weights, tokenizer, chat template, info).
    pub fn model(&self) -> &LoadedModel {
        &self.shared.model
    }

    /// The bytes token `id` stands for in text ([`crate::model::tokenizer::Tokenizer::token_bytes`]).
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        self.shared.model.tokenizer.token_bytes(id)
    }

    pub fn model_info(&self) -> &ModelInfo {
        &self.shared.model.info
    }

    /// Token ids of raw text as a prompt (BOS per the tokenizer's rule).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, EngineError> {
        Ok(self.shared.model.prompt_ids(text, false)?)
    }

    /// Token ids of raw text, with the tokenizer's BOS (per its rule) only when `add_special`.
    pub fn tokenize_text(&self, text: &str, add_special: bool) -> Result<Vec<u32>, EngineError> {
        let tok = &self.shared.model.tokenizer;
        Ok(tok.encode(text, add_special && tok.add_bos())?)
    }

    /// Token ids of raw text as an embedding's input: BOS and EOS as the file says
    /// ([`crate::model::tokenizer::Tokenizer::encode_for_embedding`]).
    pub fn tokenize_for_embedding(&self, text: &str) -> Result<Vec<u32>, EngineError> {
        Ok(self.shared.model.tokenizer.encode_for_embedding(text)?)
    }

    /// A reranker's prompt for `query` and `document` (the file's rerank template, or query and
    /// document between BOS and EOS).
    pub fn tokenize_rerank(&self, query: &str, document: &str) -> Result<Vec<u32>, EngineError> {
        Ok(self.shared.model.rank_ids(query, document)?)
    }

    /// The text of token ids, special tokens included; an id outside the vocabulary is an
    /// error naming it.
    pub fn detokenize(&self, ids: &[u32]) -> Result<String, EngineError> {
        let tok = &self.shared.model.tokenizer;
        ModelError::check_token_ids(ids, tok.vocab_size())?;
        Ok(tok.decode(ids)?)
    }

    /// Token ids of a conversation through the chat template, ready for the
    /// assistant's reply.
    pub fn tokenize_chat(&self, messages: &[Message]) -> Result<Vec<u32>, EngineError> {
        Ok(self.shared.model.chat_ids(messages)?)
    }

    /// [`Self::tokenize_chat`] with `tools` offered to the model.
    pub fn tokenize_chat_with_tools(&self, messages: &[Message], tools: &[Tool]) -> Result<Vec<u32>, EngineError> {
        Ok(self.shared.model.chat_ids_with_tools(messages, tools)?)
    }

    /// A chat request's prompt: `messages`, `tools` offered (none: the plain template) and
    /// `kwargs` as further template variables; with how the reply carries reasoning.
    pub fn chat_prompt(&self, messages: &[Message], tools: &[Tool], kwargs: &TemplateKwargs) -> Result<ChatPrompt, EngineError> {
        Ok(self.shared.model.chat_prompt(messages, tools, kwargs)?)
    }

    /// The id of the token whose text is exactly `text`, if the vocabulary has one.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.shared.model.tokenizer.token_to_id(text)
    }

    /// The grammar that forces one call of one of `tools`, as the model writes calls.
    pub fn forced_call(&self, tools: &[Tool]) -> Grammar {
        self.shared.model.forced_call(tools)
    }

    /// How the model's template writes tool calls.
    pub fn tool_format(&self) -> ToolFormat {
        self.shared.model.tool_format()
    }

    /// Compiles `grammar` for this model (the first one builds the compiler over the whole
    /// vocabulary); what does not compile is [`EngineError::Grammar`].
    pub fn check_grammar(&self, grammar: &Grammar) -> Result<(), EngineError> {
        Ok(self.shared.model.grammar()?.check(grammar)?)
    }

    /// How many requests may wait for their first step at once (more are refused with
    /// [`EngineError::QueueFull`]).
    pub fn max_queued(&self) -> usize {
        self.shared.max_queued
    }

    /// Validates `request` and queues it. Errors (nothing queued): an empty
    /// prompt or one over the context, parameters out of range, a full queue,
    /// a stopped engine.
    pub fn submit(&self, request: GenerateRequest) -> Result<RequestStream, EngineError> {
        let model = &self.shared.model;
        let accepted = super::core::validate(model, self.shared.capacity_tokens, &request)
            .and_then(|()| super::core::constraint_for(model, &request))
            .and_then(|constraint| {
                QueueTicket::take(&self.shared.queued, self.shared.max_queued)
                    .map(|ticket| (ticket, constraint))
                    .ok_or(EngineError::QueueFull {
                        limit: self.shared.max_queued,
                    })
            });
        let (ticket, constraint) = accepted.inspect_err(|_| {
            self.shared.rejected.fetch_add(1, Ordering::Relaxed);
        })?;
        let id = RequestId(self.shared.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = events::unbounded_channel();
        let submission = Submission {
            id,
            request,
            events: tx,
            submitted: Instant::now(),
            ticket: Some(ticket),
            constraint,
        };
        self.shared
            .commands
            .send(Command::Submit(Box::new(submission)))
            .map_err(|_| EngineError::Stopped)?;
        Ok(RequestStream { id, rx, held: None })
    }

    /// Cancels a request; its stream then ends with [`EngineError::Cancelled`].
    /// Unknown or finished ids are ignored.
    pub fn cancel(&self, id: RequestId) {
        let _ = self.shared.commands.send(Command::Cancel(id));
    }

    /// The latest snapshot (published after every step), with the requests
    /// refused at submission.
    pub fn stats(&self) -> EngineStats {
        let mut s = match self.shared.stats.lock() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        s.requests.rejected = self.shared.rejected.load(Ordering::Relaxed);
        // Live, not as of the engine's last step: the background writer saves kept
        // conversations while the engine is idle.
        if let (Some(disk), Ok(store)) = (s.disk.as_mut(), self.store()) {
            disk.unsaved = store.unsaved();
        }
        s
    }

    /// The conversation store; an error without a disk tier. Front-ends use the conversation
    /// methods (`conversations.rs`), not the store.
    pub(super) fn store(&self) -> Result<&ConversationStore, EngineError> {
        self.shared
            .store
            .as_ref()
            .ok_or(EngineError::Persist(PersistError::Disabled))
    }

    /// Asks the engine thread to delete conversation `id`'s cache file.
    pub(super) fn delete_cache(&self, id: ConversationId) {
        let _ = self.shared.commands.send(Command::DeleteCache(id));
    }

    /// Waits until the engine's queued saves (cache files, conversation text) are on disk.
    pub fn flush_disk(&self) {
        let (tx, rx) = mpsc::channel();
        if self.shared.commands.send(Command::FlushDisk(tx)).is_ok() {
            let _ = rx.recv();
        }
    }

    /// Requests waiting for their first step, as counted for the queue limit.
    pub fn queued(&self) -> usize {
        self.shared.queued.load(Ordering::Acquire)
    }

    /// Whether the engine thread is still running.
    pub fn is_running(&self) -> bool {
        self.shared
            .thread
            .lock()
            .map(|t| t.as_ref().is_some_and(|t| !t.is_finished()))
            .unwrap_or(false)
    }
}

/// Steps while there is work; sleeps on the command channel otherwise. The
/// engine publishes its stats itself, after every step and cancel.
fn engine_loop(mut engine: Engine, rx: mpsc::Receiver<Command>) {
    let apply = |engine: &mut Engine, c: Command| match c {
        Command::Submit(s) => engine.add_request(*s),
        Command::Cancel(id) => {
            engine.cancel(id);
        }
        Command::DeleteCache(id) => engine.delete_cache(id),
        Command::FlushDisk(done) => {
            engine.flush_disk();
            let _ = done.send(());
        }
    };
    let mut open = true;
    loop {
        if !engine.has_work() {
            if !open {
                break;
            }
            match rx.recv() {
                Ok(c) => apply(&mut engine, c),
                Err(_) => break,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(c) => apply(&mut engine, c),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        engine.step();
    }
    tracing::debug!("engine thread stopped");
}
