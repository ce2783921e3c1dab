//! Reasoning ("thinking") in a reply: the part a model writes between `<think>` and
//! `</think>` (Mistral's: `[THINK]` and `[/THINK]`) before its answer, split from the answer.
//!
//! Owns: [`Reasoning`] (whether a model's replies carry such a part, read from its template,
//! and whether a reply starts inside it, read from the rendered prompt), [`SplitReply`] (a
//! finished reply's reasoning and content) and [`ReasoningStream`] (the same split, piece by
//! piece, for a streamed reply).
//!
//! Which models: any whose template mentions `<think>` (Qwen3, QwQ, DeepSeek-R1 and its
//! distills, SmolLM3, ...), `[THINK]` (Magistral, Ministral 3 Reasoning: special tokens,
//! which decoding keeps as text for this, see `tokenizer::PRESERVED_TOKENS`), Seed-OSS's
//! `<seed:think>` … `</seed:think>` and Cohere's `<|START_THINKING|>` … `<|END_THINKING|>`
//! (special tokens kept the same way), Apertus's `<|inner_prefix|>` … `<|inner_suffix|>` (kept
//! the same way), Apriel's `Here are my reasoning steps:` … `[BEGIN FINAL RESPONSE]` (plain
//! text; its prompt writes the first) or Gemma 4's
//! `<|channel>thought` … `<channel|>` (tokens its vocabulary marks user-defined, so decoded as
//! text). Two ways a reply starts:
//! - the model writes `<think>` itself (Qwen3, SmolLM3 in think mode): the reply is reasoning
//!   only if, leading whitespace aside, it begins with the tag;
//! - the prompt ends with `<think>` (QwQ, DeepSeek-R1's later templates): the reply begins
//!   inside the reasoning, and everything up to `</think>` is reasoning. Cut off before the
//!   tag, the whole reply is reasoning.
//!
//! A prompt that ends after `</think>` (Qwen3 with `enable_thinking: false`) starts outside.
//!
//! gpt-oss writes OpenAI's harmony format ([`ThinkTags::Harmony`]; its header and end tokens are
//! special tokens the decoder keeps for this, `tokenizer::HARMONY_TOKENS`): the reply after
//! the prompt's `<|start|>assistant` is `<|channel|>analysis<|message|>` reasoning `<|end|>`,
//! then `<|start|>assistant<|channel|>final<|message|>` and the answer (more analysis messages
//! before it join the reasoning, `\n\n` between). The final message's
//! header is left out of the content (as is a reply's leading `<|channel|>final<|message|>`
//! when it has no analysis); any other message after the reasoning (a tool call:
//! `<|start|>assistant<|channel|>commentary to=functions.…`) stays in the content, for the tool
//! parser.
//!
//! Invariants: the reasoning is trimmed of whitespace and the content of leading whitespace
//! (templates put `\n` around both and re-render them so); the streamed pieces, joined, are
//! exactly what [`Reasoning::split`] gives for the whole text, however the text is cut
//! (tested over every cut); reasoning always comes before content.
//!
//! Counterpart: llama.cpp's `common_chat_parse_reasoning` (`reasoning_format: deepseek`,
//! `thinking_forced_open`); vLLM's `reasoning/deepseek_r1_reasoning_parser.py` and
//! `qwen3_reasoning_parser.py`.

use std::borrow::Cow;

use super::harmony::Header;
use super::tools::partial_suffix;

/// Between the texts of a reply's reasoning parts (harmony's analysis messages).
const THOUGHTS_JOINED: &str = "\n\n";

/// The tags around a reply's reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkTags {
    /// `<think>` … `</think>` (Qwen3, DeepSeek-R1, QwQ, SmolLM3).
    Think,
    /// `[THINK]` … `[/THINK]` (Magistral, Ministral 3 Reasoning).
    Mistral,
    /// Harmony's analysis message, `<|channel|>analysis<|message|>` … `<|end|>` (gpt-oss).
    Harmony,
    /// Gemma 4's thought channel, `<|channel>thought` … `<channel|>`.
    Gemma4,
    /// Seed-OSS's `<seed:think>` … `</seed:think>`.
    Seed,
    /// Cohere's `<|START_THINKING|>` … `<|END_THINKING|>` (Command R7B, Command A).
    Cohere,
    /// Apertus's `<|inner_prefix|>` … `<|inner_suffix|>` (its "deliberation").
    Apertus,
    /// Apriel's: the prompt ends with `Here are my reasoning steps:`, the answer follows
    /// `[BEGIN FINAL RESPONSE]` (plain text, not special tokens).
    Apriel,
}

impl ThinkTags {
    pub fn open(self) -> &'static str {
        match self {
            Self::Think => "<think>",
            Self::Mistral => "[THINK]",
            Self::Harmony => "<|channel|>analysis<|message|>",
            Self::Gemma4 => "<|channel>thought",
            Self::Seed => "<seed:think>",
            Self::Cohere => "<|START_THINKING|>",
            Self::Apertus => "<|inner_prefix|>",
            Self::Apriel => "Here are my reasoning steps:",
        }
    }

    pub fn close(self) -> &'static str {
        match self {
            Self::Think => "</think>",
            Self::Mistral => "[/THINK]",
            Self::Harmony => "<|end|>",
            Self::Gemma4 => "<channel|>",
            Self::Seed => "</seed:think>",
            Self::Cohere => "<|END_THINKING|>",
            Self::Apertus => "<|inner_suffix|>",
            Self::Apriel => "[BEGIN FINAL RESPONSE]",
        }
    }

    /// Where the answer's text starts in `content` (the reply after its reasoning, leading
    /// whitespace dropped, or the whole of a reply without any): past harmony's final-message
    /// header, for the other tags at once.
    fn answer_header(self, content: &str) -> Header {
        match self {
            Self::Harmony => super::harmony::final_header(content),
            Self::Think | Self::Mistral | Self::Gemma4 | Self::Seed | Self::Cohere | Self::Apertus | Self::Apriel => Header::Absent,
        }
    }

    /// Whether `content` (the reply after a closed reasoning part, leading whitespace dropped)
    /// opens another reasoning part: harmony's next analysis message.
    fn reopen(self, content: &str) -> Header {
        match self {
            Self::Harmony => super::harmony::analysis_header(content),
            Self::Think | Self::Mistral | Self::Gemma4 | Self::Seed | Self::Cohere | Self::Apertus | Self::Apriel => Header::Absent,
        }
    }
}

/// How a model's replies carry reasoning: in which tags, starting inside them or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reasoning {
    pub tags: ThinkTags,
    /// The prompt ends with the open tag: the reply begins as reasoning.
    pub starts_open: bool,
}

/// A finished reply split into its reasoning and its content.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SplitReply {
    /// The reasoning, trimmed; `None` when the reply has none (or an empty one).
    pub reasoning: Option<String>,
    pub content: String,
}

impl SplitReply {
    /// `text` split as `reasoning` says; without it (a model that does not think, or
    /// `reasoning_format: none`) the whole text is content.
    pub fn of(reasoning: Option<Reasoning>, text: &str) -> Self {
        let (reasoning, content) = Reasoning::parts(reasoning, text);
        Self {
            reasoning: reasoning.map(Cow::into_owned),
            content: content.to_owned(),
        }
    }
}

impl Reasoning {
    /// The tags `template` (its Jinja source) writes or expects reasoning in, if any (harmony's
    /// by its open tag alone: Phi-3's templates end messages with `<|end|>` too).
    pub fn tags_in_template(template: &str) -> Option<ThinkTags> {
        // Seed's tags before `<think>`'s: `</seed:think>` does not contain `</think>`, but the
        // order keeps the more specific first.
        [ThinkTags::Harmony, ThinkTags::Gemma4, ThinkTags::Mistral, ThinkTags::Seed, ThinkTags::Cohere, ThinkTags::Apertus, ThinkTags::Apriel, ThinkTags::Think].into_iter().find(|&t| {
            template.contains(t.open()) || (t != ThinkTags::Harmony && template.contains(t.close()))
        })
    }

    /// The reasoning of a reply to `rendered`, the prompt as the template wrote it.
    pub fn for_prompt(tags: ThinkTags, rendered: &str) -> Self {
        Self {
            tags,
            starts_open: rendered.trim_end().ends_with(tags.open()),
        }
    }

    /// The tag that ends the reasoning.
    pub fn close_tag(self) -> &'static str {
        self.tags.close()
    }

    /// The text after which the answer starts, where a grammar for it (a response format)
    /// starts: the close tag, or harmony's final channel (`<|channel|>final`), whose header
    /// ends at [`Reasoning::answer_tag_end`].
    pub fn answer_tag(self) -> &'static str {
        match self.tags {
            ThinkTags::Harmony => super::harmony::FINAL_CHANNEL,
            ThinkTags::Think | ThinkTags::Mistral | ThinkTags::Gemma4 | ThinkTags::Seed | ThinkTags::Cohere | ThinkTags::Apertus | ThinkTags::Apriel => self.tags.close(),
        }
    }

    /// What ends the answer's header after [`Reasoning::answer_tag`], whatever comes between:
    /// harmony's `<|message|>` (a constraint such as ` <|constrain|>json` may come first).
    pub fn answer_tag_end(self) -> Option<&'static str> {
        match self.tags {
            ThinkTags::Harmony => Some(super::harmony::MESSAGE),
            ThinkTags::Think | ThinkTags::Mistral | ThinkTags::Gemma4 | ThinkTags::Seed | ThinkTags::Cohere | ThinkTags::Apertus | ThinkTags::Apriel => None,
        }
    }

    /// `text`, a whole reply, split into reasoning and content.
    pub fn split(self, text: &str) -> SplitReply {
        SplitReply::of(Some(self), text)
    }

    /// [`Reasoning::split`] as parts of `text` (nothing copied but the reasoning of a harmony
    /// reply in several analysis messages: the desktop app splits every message each frame);
    /// without `reasoning` the whole text is content.
    pub fn parts(reasoning: Option<Self>, text: &str) -> (Option<Cow<'_, str>>, &str) {
        let Some((r, mut inside)) = reasoning.and_then(|r| Some((r, r.inside(text)?))) else {
            // Harmony without an analysis message: the final message's header goes.
            return match reasoning.map(|r| (r.tags.answer_header(text.trim_start()), text.trim_start())) {
                Some((Header::Full(n), start)) => (None, &start[n..]),
                _ => (None, text),
            };
        };
        let close = r.tags.close();
        let mut thoughts: Vec<&str> = Vec::new();
        let content = loop {
            let (thought, content) = match inside.find(close) {
                Some(at) => (&inside[..at], inside[at + close.len()..].trim_start()),
                None => (inside, ""),
            };
            thoughts.extend(Some(thought.trim()).filter(|t| !t.is_empty()));
            match r.tags.reopen(content) {
                Header::Full(n) => inside = &content[n..],
                Header::Absent | Header::Partial => break content,
            }
        };
        let content = match r.tags.answer_header(content) {
            Header::Full(n) => &content[n..],
            Header::Absent | Header::Partial => content,
        };
        let reasoning = match thoughts.as_slice() {
            [] => None,
            [one] => Some(Cow::Borrowed(*one)),
            many => Some(Cow::Owned(many.join(THOUGHTS_JOINED))),
        };
        (reasoning, content)
    }

    /// Whether `text` (a reply of a model whose replies carry reasoning as `reasoning` says)
    /// has a reasoning part, and whether that part ends with the close tag.
    pub fn section(reasoning: Option<Self>, text: &str) -> Section {
        match reasoning.and_then(|r| Some((r, r.inside(text)?))) {
            None => Section::None,
            Some((r, inside)) if inside.contains(r.tags.close()) => Section::Closed,
            Some(_) => Section::Unclosed,
        }
    }

    /// `text` from where its reasoning begins (after the open tag, or all of it when the
    /// prompt opened the reasoning); `None` when the reply has no reasoning part.
    fn inside(self, text: &str) -> Option<&str> {
        if self.starts_open {
            Some(text)
        } else {
            text.trim_start().strip_prefix(self.tags.open())
        }
    }

    /// A splitter for a streamed reply.
    pub fn stream(self) -> ReasoningStream {
        ReasoningStream {
            tags: self.tags,
            open: self.tags.open(),
            close: self.tags.close(),
            state: if self.starts_open { State::Inside } else { State::Start },
            pending: String::new(),
            reasoning_started: false,
            rejoin: false,
        }
    }
}

/// A reply's reasoning part, as [`Reasoning::section`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The reply has no reasoning part.
    None,
    /// The reasoning runs to the end of the reply (cut off before the close tag).
    Unclosed,
    /// The reasoning ends with the close tag; the answer follows.
    Closed,
}

/// Where a streamed reply is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace or a start of the open tag yet: not known whether it reasons.
    Start,
    /// In the reasoning.
    Inside,
    /// Just after the close tag: whitespace is dropped.
    AfterClose,
    /// In the content: everything goes out as it comes.
    Content,
}

/// A piece of a streamed reply, split: the reasoning part comes before the content part.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SplitPiece {
    pub reasoning: String,
    pub content: String,
}

impl SplitPiece {
    /// A piece of a streamed reply as it can go out now: split by `stream` for a model that
    /// thinks ([`ReasoningStream::push`]), all content otherwise.
    pub fn of(stream: Option<&mut ReasoningStream>, piece: String) -> Self {
        match stream {
            Some(s) => s.push(&piece),
            None => Self {
                reasoning: String::new(),
                content: piece,
            },
        }
    }

    pub fn is_empty(&self) -> bool {
        self.reasoning.is_empty() && self.content.is_empty()
    }
}

/// [`Reasoning::split`] piece by piece: text that may still turn out to be a tag, or
/// whitespace that may still turn out to end the reasoning, is held until it is known.
#[derive(Debug)]
pub struct ReasoningStream {
    tags: ThinkTags,
    open: &'static str,
    close: &'static str,
    state: State,
    /// Text received and not yet sent.
    pending: String,
    /// Some reasoning went out (so its leading whitespace is behind it).
    reasoning_started: bool,
    /// An earlier reasoning part went out: the next one's text comes after
    /// [`THOUGHTS_JOINED`].
    rejoin: bool,
}

impl ReasoningStream {
    /// Adds a piece of the reply; returns what can go out now.
    pub fn push(&mut self, piece: &str) -> SplitPiece {
        self.pending.push_str(piece);
        let mut out = SplitPiece::default();
        let (open, close) = (self.open, self.close);
        loop {
            match self.state {
                State::Start => {
                    let start = self.pending.trim_start();
                    if let Some(rest) = start.strip_prefix(open) {
                        self.pending = rest.to_owned();
                        self.state = State::Inside;
                    } else if open.starts_with(start) {
                        return out;
                    } else {
                        match self.tags.answer_header(start) {
                            Header::Full(n) => self.pending = start[n..].to_owned(),
                            Header::Partial => return out,
                            Header::Absent => {}
                        }
                        self.state = State::Content;
                    }
                }
                State::Inside => {
                    if !self.reasoning_started {
                        let trimmed = self.pending.trim_start().len();
                        self.pending.drain(..self.pending.len() - trimmed);
                    }
                    if let Some(at) = self.pending.find(close) {
                        let thought = self.pending[..at].trim_end();
                        if !thought.is_empty() && std::mem::take(&mut self.rejoin) {
                            out.reasoning.push_str(THOUGHTS_JOINED);
                        }
                        self.reasoning_started |= !thought.is_empty();
                        out.reasoning.push_str(thought);
                        self.pending.drain(..at + close.len());
                        self.state = State::AfterClose;
                        continue;
                    }
                    // Hold a possible start of the close tag and the whitespace before it.
                    let held = partial_suffix(&self.pending, close);
                    let safe = self.pending[..self.pending.len() - held].trim_end().len();
                    if safe > 0 && std::mem::take(&mut self.rejoin) {
                        out.reasoning.push_str(THOUGHTS_JOINED);
                    }
                    out.reasoning.push_str(&self.pending[..safe]);
                    self.reasoning_started |= safe > 0;
                    self.pending.drain(..safe);
                    return out;
                }
                State::AfterClose => {
                    let trimmed = self.pending.trim_start().len();
                    self.pending.drain(..self.pending.len() - trimmed);
                    if self.pending.is_empty() {
                        return out;
                    }
                    match self.tags.reopen(&self.pending) {
                        Header::Full(n) => {
                            // Another reasoning part: its text follows the earlier one's.
                            self.pending.drain(..n);
                            self.state = State::Inside;
                            self.rejoin = self.reasoning_started;
                            self.reasoning_started = false;
                            continue;
                        }
                        Header::Partial => return out,
                        Header::Absent => {}
                    }
                    match self.tags.answer_header(&self.pending) {
                        Header::Full(n) => drop(self.pending.drain(..n)),
                        Header::Partial => return out,
                        Header::Absent => {}
                    }
                    self.state = State::Content;
                }
                State::Content => {
                    out.content.push_str(&self.pending);
                    self.pending.clear();
                    return out;
                }
            }
        }
    }

    /// The end of the reply: whatever was held, where it belongs.
    pub fn finish(mut self) -> SplitPiece {
        let rest = std::mem::take(&mut self.pending);
        match self.state {
            State::Start | State::Content => SplitPiece {
                reasoning: String::new(),
                content: rest,
            },
            State::Inside => {
                let rest = if self.reasoning_started { rest.trim_end() } else { rest.trim() };
                let joined = if self.rejoin && !rest.is_empty() { THOUGHTS_JOINED } else { "" };
                SplitPiece {
                    reasoning: format!("{joined}{rest}"),
                    content: String::new(),
                }
            }
            // Whitespace, or the start of a header that never finished: as the whole split
            // leaves it.
            State::AfterClose => SplitPiece {
                reasoning: String::new(),
                content: rest,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTSIDE: Reasoning = Reasoning {
        tags: ThinkTags::Think,
        starts_open: false,
    };
    const INSIDE: Reasoning = Reasoning {
        tags: ThinkTags::Think,
        starts_open: true,
    };

    fn split(r: Reasoning, text: &str) -> (Option<String>, String) {
        let s = r.split(text);
        (s.reasoning, s.content)
    }

    fn parts(reasoning: Option<&str>, content: &str) -> (Option<String>, String) {
        (reasoning.map(str::to_owned), content.to_owned())
    }

    #[test]
    fn a_reply_that_opens_the_tag_is_split_at_the_close() {
        let text = "<think>\nThe user greets me.\n</think>\n\nHello!";
        assert_eq!(split(OUTSIDE, text), parts(Some("The user greets me."), "Hello!"));
        // Leading whitespace before the tag is allowed; text before it is not reasoning.
        assert_eq!(split(OUTSIDE, "\n<think>a</think>b"), parts(Some("a"), "b"));
        assert_eq!(split(OUTSIDE, "x <think>a</think>b"), parts(None, "x <think>a</think>b"));
        // An empty reasoning is none (Qwen3's non-thinking turns).
        assert_eq!(split(OUTSIDE, "<think>\n\n</think>\n\nHi"), parts(None, "Hi"));
        // Cut off inside: all reasoning.
        assert_eq!(split(OUTSIDE, "<think>\nstill going"), parts(Some("still going"), ""));
        assert_eq!(split(OUTSIDE, "  plain answer "), parts(None, "  plain answer "));
    }

    /// Gemma 4: its template writes the thought channel; with thinking off the prompt closes an
    /// empty one (the reply starts outside), with it on the model opens its own.
    #[test]
    fn gemma4_thinks_in_its_thought_channel() {
        let template = super::super::template::GEMMA4_TEMPLATE;
        let tags = Reasoning::tags_in_template(template);
        assert_eq!(tags, Some(ThinkTags::Gemma4));
        let off = Reasoning::for_prompt(ThinkTags::Gemma4, "<|turn>model\n<|channel>thought\n<channel|>");
        assert!(!off.starts_open);
        assert_eq!(split(off, "Hello!"), parts(None, "Hello!"));
        let on = Reasoning::for_prompt(ThinkTags::Gemma4, "<|turn>model\n");
        let text = "<|channel>thought\nThe user greets me.<channel|>Hello!";
        assert_eq!(split(on, text), parts(Some("The user greets me."), "Hello!"));
        let mut stream = on.stream();
        let mut got = SplitPiece::default();
        for piece in ["<|chan", "nel>thought\nThe user", " greets me.<chan", "nel|>Hel", "lo!"] {
            let p = stream.push(piece);
            got.reasoning += &p.reasoning;
            got.content += &p.content;
        }
        let p = stream.finish();
        assert_eq!((got.reasoning + &p.reasoning, got.content + &p.content), ("The user greets me.".into(), "Hello!".into()));
    }

    #[test]
    fn a_reply_to_a_prompt_that_opened_the_tag_starts_inside() {
        let think = ThinkTags::Think;
        assert!(Reasoning::for_prompt(think, "<|im_start|>assistant\n<think>\n").starts_open);
        assert!(!Reasoning::for_prompt(think, "<|im_start|>assistant\n<think>\n\n</think>\n\n").starts_open);
        assert!(!Reasoning::for_prompt(think, "<|im_start|>assistant\n").starts_open);
        assert_eq!(split(INSIDE, "Let me see.\n</think>\n\n42"), parts(Some("Let me see."), "42"));
        assert_eq!(split(INSIDE, "no close yet"), parts(Some("no close yet"), ""));
        assert_eq!(split(INSIDE, "</think>42"), parts(None, "42"));
    }

    #[test]
    fn templates_that_think_are_recognised() {
        let tags = |t| Reasoning::tags_in_template(t);
        assert_eq!(tags(include_str!("fixtures/qwen3-0.6b.jinja")), Some(ThinkTags::Think));
        let ministral = include_str!("fixtures/ministral-3-14b-reasoning-2512.jinja");
        assert_eq!(tags(ministral), Some(ThinkTags::Mistral));
        assert_eq!(tags(include_str!("fixtures/qwen2.5-instruct.jinja")), None);
        assert_eq!(tags(include_str!("fixtures/phi-3.5-mini-instruct.jinja")), None);
        assert_eq!(tags(include_str!("fixtures/smollm2-instruct.jinja")), None);
        assert_eq!(tags(include_str!("fixtures/mistral-small-3.2-24b-instruct-2506.jinja")), None);
    }

    /// Apertus deliberates between its own marks, which it writes itself (the prompt ends at
    /// its assistant mark, deliberation on or off); Apriel's prompt opens its reasoning with
    /// `Here are my reasoning steps:`, and the answer follows `[BEGIN FINAL RESPONSE]`. Both
    /// split the same streamed however cut.
    #[test]
    fn apertus_and_apriel_reason_between_their_own_marks() {
        use crate::model::chat::{ChatTemplate, Message, TemplateKwargs};
        let apertus = include_str!("fixtures/apertus-8b-instruct.jinja");
        let apriel = include_str!("fixtures/apriel-1.6-15b-thinker.jinja");
        assert_eq!(Reasoning::tags_in_template(apertus), Some(ThinkTags::Apertus));
        assert_eq!(Reasoning::tags_in_template(apriel), Some(ThinkTags::Apriel));
        let hi = [Message::user("Hi")];
        let template = |source: &str| ChatTemplate::new(source.to_owned(), Some("<s>".into()), Some("</s>".into())).unwrap();
        let mut on = TemplateKwargs::new();
        on.insert("enable_thinking".into(), true.into());
        let prompt = template(apertus).render_with(&hi, &[], &on, true).unwrap();
        assert!(prompt.contains("Deliberation: enabled") && prompt.ends_with("<|assistant_start|>"), "{prompt:?}");
        let r = Reasoning::for_prompt(ThinkTags::Apertus, &prompt);
        assert!(!r.starts_open);
        let reply = "<|inner_prefix|>The user greets me.<|inner_suffix|>Hello!";
        assert_eq!(split(r, reply), parts(Some("The user greets me."), "Hello!"));
        assert_eq!(split(r, "Hello!"), parts(None, "Hello!"));
        check_every_cut(r, reply);
        let prompt = template(apriel).render(&hi, true).unwrap();
        let r = Reasoning::for_prompt(ThinkTags::Apriel, &prompt);
        assert!(r.starts_open, "{prompt:?}");
        let reply = "\n1. The user greets me.\n2. Greet back.\n[BEGIN FINAL RESPONSE]\nHello!";
        assert_eq!(split(r, reply), parts(Some("1. The user greets me.\n2. Greet back."), "Hello!"));
        assert_eq!(split(r, "Cut off in the steps"), parts(Some("Cut off in the steps"), ""));
        check_every_cut(r, reply);
        // The reasoning sent back with the last turn renders before the marker (the template
        // leaves out the prompt's opening line there).
        let mut turn = Message::assistant("Hello!");
        turn.reasoning_content = Some("1. The user greets me.".into());
        let back = template(apriel).render(&[Message::user("Hi"), turn], false).unwrap();
        assert!(back.contains("1. The user greets me.\n[BEGIN FINAL RESPONSE]\nHello!"), "{back:?}");
    }

    /// Streams `text` cut at `cuts` and joins what comes out.
    fn streamed(r: Reasoning, text: &str, cuts: &[usize]) -> SplitPiece {
        let mut s = r.stream();
        let mut all = SplitPiece::default();
        let mut last = 0;
        for &c in cuts.iter().chain(std::iter::once(&text.len())) {
            let piece = s.push(&text[last..c]);
            // Reasoning never follows content.
            assert!(piece.reasoning.is_empty() || all.content.is_empty(), "{text:?} at {cuts:?}");
            all.reasoning.push_str(&piece.reasoning);
            all.content.push_str(&piece.content);
            last = c;
        }
        let end = s.finish();
        all.reasoning.push_str(&end.reasoning);
        all.content.push_str(&end.content);
        all
    }

    const HARMONY: Reasoning = Reasoning {
        tags: ThinkTags::Harmony,
        starts_open: false,
    };

    /// gpt-oss's replies: the analysis is the reasoning, the final message the content without
    /// its header; any other message after the analysis (a tool call) stays content, whole.
    #[test]
    fn harmony_replies_split_into_analysis_and_final() {
        let r = |text| split(HARMONY, text);
        let full = "<|channel|>analysis<|message|>The user greets me.<|end|><|start|>assistant<|channel|>final<|message|>Hello!";
        assert_eq!(r(full), parts(Some("The user greets me."), "Hello!"));
        let constrained = "<|channel|>analysis<|message|>JSON.<|end|><|start|>assistant<|channel|>final <|constrain|>json<|message|>{\"a\": 1}";
        assert_eq!(r(constrained), parts(Some("JSON."), "{\"a\": 1}"));
        assert_eq!(r("<|channel|>final<|message|>Just this."), parts(None, "Just this."));
        let call = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.weather <|constrain|>json<|message|>{}";
        assert_eq!(
            r(call),
            parts(Some("Need weather."), "<|start|>assistant<|channel|>commentary to=functions.weather <|constrain|>json<|message|>{}")
        );
        // Cut off in the analysis, or before the final message's text.
        assert_eq!(r("<|channel|>analysis<|message|>Still thinking"), parts(Some("Still thinking"), ""));
        assert_eq!(r("<|channel|>analysis<|message|>Done.<|end|><|start|>assistant<|channel|>fin"), parts(Some("Done."), "<|start|>assistant<|channel|>fin"));
        // Reasoning in two analysis messages: both, joined (an empty one adds nothing).
        let two = "<|channel|>analysis<|message|>First.<|end|><|start|>assistant<|channel|>analysis<|message|>Second.<|end|><|start|>assistant<|channel|>final<|message|>Hi";
        assert_eq!(r(two), parts(Some("First.\n\nSecond."), "Hi"));
        let empty = "<|channel|>analysis<|message|> <|end|><|start|>assistant<|channel|>analysis<|message|>Only.<|end|>";
        assert_eq!(r(empty), parts(Some("Only."), ""));
        // Plain text is content as it is.
        assert_eq!(r("Hi there"), parts(None, "Hi there"));
        assert_eq!(Reasoning::tags_in_template(include_str!("fixtures/openai-gpt-oss-120b.jinja")), Some(ThinkTags::Harmony));
    }

    #[test]
    fn a_harmony_stream_cut_anywhere_gives_the_whole_split() {
        let texts = [
            "<|channel|>analysis<|message|>The user greets me.<|end|><|start|>assistant<|channel|>final<|message|>Hello <|end|>!",
            "<|channel|>analysis<|message|>JSON.<|end|><|start|>assistant<|channel|>final <|constrain|>json<|message|>{}",
            "<|channel|>final<|message|>Just this.",
            "<|channel|>analysis<|message|>w<|end|><|start|>assistant<|channel|>commentary to=functions.w json<|message|>{}",
            "<|channel|>analysis<|message|>Done.<|end|><|start|>assistant<|channel|>fin",
            "<|channel|>finale is not a header",
            "Plain",
            "<|channel|>analysis<|message|>First.<|end|><|start|>assistant<|channel|>analysis<|message|>Second.<|end|><|start|>assistant<|channel|>final<|message|>Hi",
            "<|channel|>analysis<|message|> <|end|> <|start|>assistant<|channel|>analysis<|message|> Only. <|end|>",
            "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b",
            "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analys",
        ];
        for text in texts {
            check_every_cut(HARMONY, text);
        }
    }

    /// Streams `text` cut in two places everywhere, and char by char: always the whole split.
    fn check_every_cut(r: Reasoning, text: &str) {
        let whole = r.split(text);
        let expect = (whole.reasoning.clone().unwrap_or_default(), whole.content.clone());
        let bounds: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
        for &a in &bounds {
            for &b in bounds.iter().filter(|&&b| b >= a) {
                let got = streamed(r, text, &[a, b]);
                assert_eq!((got.reasoning, got.content), expect, "{text:?} cut at {a}, {b}, {r:?}");
            }
        }
        let got = streamed(r, text, &bounds);
        assert_eq!((got.reasoning, got.content), expect, "{text:?} char by char");
    }

    #[test]
    fn a_stream_cut_anywhere_gives_the_whole_split() {
        let texts = [
            "<think>\nThe user greets me.\n\n</think>\n\nHello <b>there</b>!",
            "\n <think>a </thin b</think>",
            "<thinking is a word",
            "<thi",
            "  ",
            "<think>\n\n</think>\n\nHi </think>",
            "<think>é ü\n</think>ö",
            "Plain answer with </think> in it",
        ];
        let mistral = |t: &str| t.replace("<think>", "[THINK]").replace("</think>", "[/THINK]").replace("</thin", "[/THIN").replace("<thi", "[THI");
        let texts: Vec<(ThinkTags, String)> = texts
            .iter()
            .flat_map(|t| [(ThinkTags::Think, t.to_string()), (ThinkTags::Mistral, mistral(t))])
            .collect();
        let cases = texts.iter().flat_map(|(tags, t)| {
            [false, true].map(|starts_open| {
                let r = Reasoning {
                    tags: *tags,
                    starts_open,
                };
                (r, t.as_str())
            })
        });
        for (r, text) in cases {
            check_every_cut(r, text);
        }
    }
}
