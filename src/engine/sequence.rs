//! One request's state inside the engine, from submission to its last event.
//!
//! Owns: [`Sequence`]: the token list (prompt, then every sampled token), how many of them have
//! K/V in the current admission's blocks (`computed`), the sampler, the detokenizer, the stop
//! strings, the request's event channel and its timings.
//!
//! The one rule the scheduler and the step follow: a step feeds `tokens[computed..computed + n]`;
//! when that reaches the end of `tokens`, the step's logits sample the next token, which is
//! appended (so a decode step is the case `n == 1`). A prompt chunk, a decode and the recompute
//! after a preemption are the same operation.
//!
//! Counterpart: vLLM v1's `Request` (`num_computed_tokens`, `all_token_ids`).

use std::time::{Duration, Instant};

use super::handle::{EventSender, QueueTicket};
use super::stop::StopMatcher;
use super::{
    EngineError, Event, GenerateParams, GenerationReport, GrammarDelay, RequestId, StopReason, Submission, TokenLogprob,
    MAX_TOP_LOGPROBS,
};
use crate::kv::{BlockHash, PrefixMatch, SeqId};
use crate::model::pooling::{Pooled, Pooling};
use crate::model::RecurrentState;
use crate::model::sampling::Sampler;
use crate::model::grammar::Constraint;
use crate::model::tokenizer::{Detokenizer, Tokenizer};
use crate::model::LoadedModel;

/// One request in the engine.
#[derive(Debug)]
pub(crate) struct Sequence {
    pub(crate) id: RequestId,
    /// The cache manager's id for the current admission (a new one after each preemption).
    pub(crate) seq: Option<SeqId>,
    pub(crate) prompt_len: usize,
    /// Prompt, then every sampled token.
    pub(crate) tokens: Vec<u32>,
    /// Tokens whose K/V is in the current admission's blocks.
    pub(crate) computed: usize,
    pub(crate) params: GenerateParams,
    sampler: Sampler,
    /// The request's grammar: masks each step's logits, follows each sampled token. The engine
    /// takes it out for a moment to compute a batch's masks in parallel.
    pub(crate) constraint: Option<Constraint>,
    /// The grammar waits for this text in the reply, perhaps only if the first token opens it
    /// ([`GenerateParams::grammar_after`]).
    grammar_waits: Option<GrammarTrigger>,
    /// With a grammar: the step's logits with what it forbids masked, reused from step to step.
    masked: Vec<f32>,
    detok: Detokenizer,
    stop: StopMatcher,
    text: String,
    events: EventSender,
    /// The place in the queue, until the first admission.
    pub(crate) ticket: Option<QueueTicket>,
    submitted: Instant,
    first_scheduled: Option<Instant>,
    first_token: Option<Instant>,
    /// The prefix hit of the first admission.
    cached: Option<PrefixMatch>,
    pub(crate) bookkeeping: Duration,
    pub(crate) preemptions: u32,
    logits: Vec<Vec<f32>>,
    logprobs: Vec<TokenLogprob>,
    /// With `prompt_logprobs`: the scores of prompt tokens 1.. so far (kept across a
    /// preemption, so a recomputed position is not scored twice).
    prompt_scores: Vec<TokenLogprob>,
    /// With `embed`: the prompt's rows pooled so far (each position once, across preemptions).
    pooled: Option<Pooled>,
    /// Where the finished turn is saved.
    pub(crate) save: Option<super::SaveTo>,
    /// Prompt tokens the engine read from the disk tier for this request's admission.
    pub(crate) disk_tokens: usize,
    /// A model with recurrent layers: the state after `computed` tokens (set at each
    /// admission, advanced by each forward).
    pub(crate) recurrent: Option<RecurrentState>,
    /// The copies of that state the last forward took at block boundaries, by the tokens each
    /// covers, until their blocks are committed.
    pub(crate) captured: Vec<(usize, RecurrentState)>,
    /// The latest copy at a committed block boundary, by that block's hash: kept for later
    /// requests when the prompt is done and when the request ends (`engine::states`).
    pub(crate) snapshot: Option<(BlockHash, RecurrentState)>,
    /// A model with recurrent layers: where this admission's prompt stops sharing K/V blocks
    /// with the cache while the cached prefix it takes ends earlier (no copy of the state was
    /// kept there): a prefix an earlier prompt shared (a system prompt, a conversation edited
    /// at an earlier message). A prompt chunk ends there and the copy taken is kept at once, so
    /// the next prompt that shares it starts there (`engine::states`).
    pub(crate) fork_at: Option<usize>,
}

/// A request's last event, held until the engine has published the stats
/// that count it (so whoever receives it sees those stats).
#[derive(Debug)]
pub(crate) struct LastEvent {
    events: EventSender,
    event: Event,
}

impl LastEvent {
    pub(crate) fn send(self) {
        let _ = self.events.send(self.event);
    }
}

/// What sampling one token led to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sampled {
    /// The request goes on.
    Continue,
    /// The request is done.
    Finished(StopReason),
}

impl Sequence {
    pub(crate) fn new(s: Submission) -> Self {
        let Submission {
            id,
            request,
            events,
            submitted,
            ticket,
            constraint,
        } = s;
        let pooled = request.params.embed.map(|p| Pooled::new(p, request.prompt.len()));
        Self {
            id,
            seq: None,
            prompt_len: request.prompt.len(),
            tokens: request.prompt,
            computed: 0,
            recurrent: None,
            captured: Vec::new(),
            snapshot: None,
            fork_at: None,
            sampler: Sampler::new(request.params.sampling.clone()),
            grammar_waits: request
                .params
                .grammar_after
                .clone()
                .filter(|d| constraint.is_some() && !d.until.is_empty())
                .map(GrammarTrigger::new),
            constraint,
            masked: Vec::new(),
            stop: StopMatcher::new(&request.params.stop),
            params: request.params,
            save: request.save,
            disk_tokens: 0,
            detok: Detokenizer::default(),
            text: String::new(),
            events,
            ticket,
            submitted,
            first_scheduled: None,
            first_token: None,
            cached: None,
            bookkeeping: Duration::ZERO,
            preemptions: 0,
            logits: Vec::new(),
            logprobs: Vec::new(),
            prompt_scores: Vec::new(),
            pooled,
        }
    }

    /// Whether an admission may start from the prefix cache: not for a prompt being scored, nor
    /// for an embedding whose pooling needs rows of every position (or the first).
    pub(crate) fn reads_cache(&self) -> bool {
        self.params.prompt_logprobs.is_none() && self.params.embed.is_none_or(Pooling::reads_cache)
    }

    /// Which rows of this step's chunk of `n` tokens an embedding pools (offsets in the
    /// chunk); none for other requests.
    pub(crate) fn pooled_rows(&self, n: usize) -> std::ops::Range<usize> {
        match &self.pooled {
            Some(p) if self.computed < self.prompt_len => p.pooling().rows(self.computed, n, self.prompt_len),
            _ => 0..0,
        }
    }

    /// Pools the final rows of positions `from..`.
    pub(crate) fn pool(&mut self, from: usize, rows: &[Vec<f32>]) {
        if let Some(p) = &mut self.pooled {
            p.push(from, rows);
        }
    }

    /// Tokens generated so far.
    pub(crate) fn generated(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    /// Tokens still to feed before the next sample.
    pub(crate) fn remaining(&self) -> usize {
        self.tokens.len() - self.computed
    }

    /// How many of its next `n` prompt tokens to run in one chunk: up to [`Self::fork_at`] if
    /// it lies ahead, so that a copy of the state is taken there.
    pub(crate) fn chunk(&self, n: usize) -> usize {
        match self.fork_at {
            Some(at) if at > self.computed => n.min(at - self.computed),
            _ => n,
        }
    }

    /// Whether the consumer of the events is gone (the request is to be cancelled).
    pub(crate) fn is_abandoned(&self) -> bool {
        self.events.is_closed()
    }

    /// Records an admission: the cache manager's id, the cached prefix, and the tokens whose
    /// K/V the cache matched (more than the prefix where it could not end there).
    pub(crate) fn admitted(&mut self, seq: SeqId, cached_tokens: usize, matched_tokens: usize, hit: PrefixMatch) {
        self.seq = Some(seq);
        self.computed = cached_tokens;
        self.fork_at = (matched_tokens > cached_tokens).then_some(matched_tokens);
        if self.first_scheduled.is_none() {
            self.first_scheduled = Some(Instant::now());
            self.cached = Some(hit);
        }
        // The first admission leaves the queue for good.
        self.ticket = None;
    }

    /// Time from submission to the first token, once there is one.
    pub(crate) fn ttft(&self) -> Option<Duration> {
        self.first_token.map(|t| t.duration_since(self.submitted))
    }

    /// Whether this step's chunk needs the logits of all its rows (the prompt is being scored
    /// and still has unscored positions).
    pub(crate) fn scores_prompt(&self) -> bool {
        self.params.prompt_logprobs.is_some() && self.prompt_scores.len() + 1 < self.prompt_len
    }

    /// Scores the prompt tokens that `rows` (the logits of positions `from..`) predict: row `j`
    /// gives token `from + j + 1`'s log-probability.
    pub(crate) fn score_prompt(&mut self, from: usize, rows: &[Vec<f32>]) {
        let Some(top) = self.params.prompt_logprobs else {
            return;
        };
        for (j, row) in rows.iter().enumerate() {
            let target = from + j + 1;
            // Only the next unscored token: a recomputed position was scored already.
            if target < self.prompt_len && target == self.prompt_scores.len() + 1 {
                let id = self.tokens[target];
                self.prompt_scores
                    .push(TokenLogprob::from_logits(row, id, top.min(MAX_TOP_LOGPROBS)));
            }
        }
    }

    /// Samples the next token from this step's `logits` and streams it.
    /// `context`: the most tokens a sequence may hold.
    /// With a grammar, only the tokens it allows are candidates (log-probabilities stay those of
    /// the raw logits), and the reply ends when the grammar is complete.
    pub(crate) fn sample(&mut self, logits: Vec<f32>, tok: &Tokenizer, context: usize) -> Result<Sampled, EngineError> {
        if self.params.max_tokens == 0 {
            // A prompt scored and nothing generated (`echo` with `max_tokens: 0`).
            self.first_token.get_or_insert_with(Instant::now);
            return Ok(Sampled::Finished(StopReason::MaxTokens));
        }
        // A model that may open its reasoning: the grammar's tokens or the opening one.
        let opener = self.grammar_waits.as_ref().and_then(|w| w.if_first);
        let masking = match opener {
            Some(_) => self.constraint.as_mut(),
            None => active(&self.grammar_waits, &mut self.constraint),
        };
        let next = match masking {
            None => self.sampler.sample(&logits, &self.tokens, self.prompt_len),
            Some(c) => {
                self.masked.clear();
                self.masked.extend_from_slice(&logits);
                c.mask(&mut self.masked)?;
                if let Some((m, &l)) = opener.and_then(|id| self.masked.get_mut(id as usize).zip(logits.get(id as usize))) {
                    *m = l;
                }
                self.sampler.sample(&self.masked, &self.tokens, self.prompt_len)
            }
        };
        let logprob = self
            .params
            .logprobs
            .map(|n| TokenLogprob::from_logits(&logits, next, n.min(MAX_TOP_LOGPROBS)));
        if self.params.keep_logits {
            self.logits.push(logits);
        }
        let first = self.first_token.is_none();
        self.first_token.get_or_insert_with(Instant::now);
        if !self.params.ignore_eos && tok.stop_ids().contains(&next) {
            return Ok(Sampled::Finished(StopReason::Eos));
        }
        match opener {
            // The reasoning opened: the grammar waits for its end.
            Some(id) if next == id => {
                if let Some(w) = &mut self.grammar_waits {
                    w.if_first = None;
                }
            }
            // No reasoning: the grammar holds from this token.
            Some(_) => self.grammar_waits = None,
            None => {}
        }
        if let Some(c) = active(&self.grammar_waits, &mut self.constraint) {
            c.accept(next)?;
        }
        self.tokens.push(next);
        let piece = self.detok.push(tok, next)?.unwrap_or_default();
        if self.grammar_waits.as_mut().is_some_and(|w| w.seen(&piece)) {
            self.grammar_waits = None;
            if let Some(c) = &mut self.constraint {
                c.allow_leading_blank(GrammarDelay::GAP);
            }
        }
        let text = self.stop.push(&piece);
        self.text.push_str(&text);
        if let Some(lp) = &logprob {
            self.logprobs.push(lp.clone());
        }
        let prompt_logprobs = (first && self.params.prompt_logprobs.is_some()).then(|| self.prompt_scores.clone());
        let _ = self.events.send(Event::Token {
            id: next,
            text,
            logprob,
            prompt_logprobs,
        });
        Ok(if self.stop.stopped() {
            Sampled::Finished(StopReason::StopString)
        } else if self.grammar_waits.is_none() && self.constraint.as_ref().is_some_and(Constraint::is_finished) {
            Sampled::Finished(StopReason::Eos)
        } else if self.generated() >= self.params.max_tokens {
            Sampled::Finished(StopReason::MaxTokens)
        } else if self.tokens.len() > context {
            // The new token would sit at position `context`, past the end.
            Sampled::Finished(StopReason::ContextFull)
        } else {
            Sampled::Continue
        })
    }

    /// Ends the request with a reply: flushes held-back text; returns the
    /// report and the `Done` event to send.
    pub(crate) fn finish(mut self, stop: StopReason, model: &LoadedModel) -> (GenerationReport, LastEvent) {
        let tok = &model.tokenizer;
        let rest = match std::mem::take(&mut self.detok).finish(tok) {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => {
                tracing::warn!("{}: the reply's last characters could not be decoded: {e}", self.id);
                String::new()
            }
        };
        if !self.stop.stopped() {
            let mut tail = self.stop.push(&rest);
            tail.push_str(&self.stop.finish());
            if !tail.is_empty() {
                self.text.push_str(&tail);
                // The held-back text goes out with the last token's id.
                let id = self.tokens.last().copied().unwrap_or_default();
                let _ = self.events.send(Event::Token {
                    id,
                    text: tail,
                    logprob: None,
                    prompt_logprobs: None,
                });
            }
        }
        let now = Instant::now();
        let first = self.first_token.unwrap_or(now);
        let report = GenerationReport {
            id: self.id,
            prompt_tokens: self.prompt_len,
            cached: self.cached.unwrap_or_default(),
            tokens: self.tokens[self.prompt_len..].to_vec(),
            text: std::mem::take(&mut self.text),
            stop,
            stop_string: self.stop.matched().map(str::to_owned),
            queued: self.first_scheduled.unwrap_or(now).duration_since(self.submitted),
            ttft: first.duration_since(self.submitted),
            decode: now.duration_since(first),
            bookkeeping: self.bookkeeping,
            preemptions: self.preemptions,
            logits: std::mem::take(&mut self.logits),
            logprobs: std::mem::take(&mut self.logprobs),
            prompt_logprobs: std::mem::take(&mut self.prompt_scores),
            embedding: self.pooled.as_ref().and_then(Pooled::finish).map(|v| model.transformer.project_pooled(v)),
        };
        let last = LastEvent {
            event: Event::Done(Box::new(report.clone())),
            events: self.events,
        };
        (report, last)
    }

    /// Ends the request with an error; returns the event to send.
    pub(crate) fn fail(self, error: EngineError) -> LastEvent {
        LastEvent {
            events: self.events,
            event: Event::Error(error),
        }
    }

    /// Forgets the current admission (preemption): the tokens stay and are
    /// recomputed, mostly from the cache, at the next admission.
    pub(crate) fn preempted(&mut self) {
        self.seq = None;
        self.computed = 0;
        self.preemptions += 1;
    }
}

/// The grammar, once it applies (it may wait for [`GenerateParams::grammar_after`]).
fn active<'a>(waits: &Option<GrammarTrigger>, constraint: &'a mut Option<Constraint>) -> Option<&'a mut Constraint> {
    match waits {
        Some(_) => None,
        None => constraint.as_mut(),
    }
}

/// The text a grammar waits for (and the text it waits for after that one), the end of the
/// reply so far (as much as could still hold the start of the awaited text), and, before the
/// first token, the token that opens the wait.
#[derive(Debug)]
struct GrammarTrigger {
    text: String,
    then: Option<String>,
    tail: String,
    if_first: Option<u32>,
}

impl GrammarTrigger {
    fn new(delay: GrammarDelay) -> Self {
        Self {
            text: delay.until,
            then: delay.then.filter(|t| !t.is_empty()),
            tail: String::new(),
            if_first: delay.if_first,
        }
    }

    /// Adds a piece of the reply; whether the text (and the one after it) has now appeared.
    fn seen(&mut self, piece: &str) -> bool {
        self.tail.push_str(piece);
        while let Some(at) = self.tail.find(&self.text) {
            match self.then.take() {
                None => return true,
                Some(then) => {
                    self.tail.drain(..at + self.text.len());
                    self.text = then;
                }
            }
        }
        let mut keep = self.tail.len().saturating_sub(self.text.len());
        while !self.tail.is_char_boundary(keep) {
            keep += 1;
        }
        self.tail.drain(..keep);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::{GrammarDelay, GrammarTrigger};

    fn trigger(text: &str) -> GrammarTrigger {
        GrammarTrigger::new(GrammarDelay {
            until: text.into(),
            then: None,
            if_first: None,
        })
    }

    #[test]
    fn a_trigger_with_a_second_text_waits_for_it_after_the_first() {
        let two = |until: &str, then: &str| {
            GrammarTrigger::new(GrammarDelay {
                until: until.into(),
                then: Some(then.into()),
                if_first: None,
            })
        };
        // Harmony's final header, with a constraint between the channel and the message.
        let mut t = two("<|channel|>final", "<|message|>");
        for piece in ["<|channel|>", "analysis", "<|message|>", "x", "<|end|>", "<|start|>", "assistant", "<|channel|>", "final"] {
            assert!(!t.seen(piece), "{piece}");
        }
        assert!(!t.seen(" "));
        assert!(!t.seen("<|constrain|>"));
        assert!(!t.seen("json"));
        assert!(t.seen("<|message|>"));
        // Both in one piece, and the second not before the first.
        assert!(two("a", "b").seen("xaxb"));
        assert!(!two("a", "b").seen("bxa"));
        let mut t = two("ab", "ab");
        assert!(!t.seen("a"));
        assert!(!t.seen("b"));
        assert!(t.seen("ab"));
    }

    #[test]
    fn a_trigger_is_seen_across_pieces_and_between_multibyte_characters() {
        let mut t = trigger("</think>");
        assert!(!t.seen("é ü </th"));
        assert!(!t.seen("ink"));
        assert!(t.seen(">\n\n"));
        let mut t = trigger("ab");
        assert!(!t.seen("ééa"));
        assert!(t.seen("b"));
        let mut t = trigger("x");
        assert!(!t.seen("日本"));
        assert!(t.seen("語x"));
    }
}
