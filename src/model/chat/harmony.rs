//! OpenAI's harmony format (gpt-oss): the final message's header that `chat::reasoning` leaves
//! out of a reply's content, tool calls (reading one out of a reply, the grammar that forces
//! one, where a streamed reply may have begun one), and the history its template takes.
//!
//! A harmony reply is a sequence of messages, each a header and a body: the reasoning
//! (`<|channel|>analysis<|message|>` … `<|end|>`, split off by `chat::reasoning` before this
//! module sees the rest), then either the answer (`<|start|>assistant<|channel|>final<|message|>`
//! …) or a call, whose header names the function:
//! `<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{ARGS}`
//! (or with the recipient before the channel: `<|start|>assistant to=functions.NAME<|channel|>commentary
//! json<|message|>{ARGS}`, which is how gpt-oss's template writes calls back), and generation
//! stops at `<|call|>`. One call per reply, as harmony has it. A preamble the model writes to
//! the user before the call (`<|channel|>commentary<|message|>` … `<|end|>`) is the reply's
//! content.
//!
//! Invariant: a reply is a call only if its call message is wholly valid (a function name, a
//! header of nothing but a channel and a `json` constraint, a JSON object as the body);
//! anything else stays text, as the other formats do.
//!
//! Counterpart: llama.cpp's `common/parsers/gpt-oss.cpp` (its PEG parser and grammar), vLLM's
//! `openai_tool_parser.py` (through `openai_harmony`).

use serde_json::{json, Value};

use super::reasoning::{Reasoning, ThinkTags};
use super::tools::{call_of, is_name_char, named_call_grammar, partial_suffix, ParsedReply, Tool};
use super::{Message, Role};
use crate::model::grammar::Grammar;

/// What a call's header says before the function's name.
const TO_FUNCTIONS: &str = "to=functions.";
const START: &str = "<|start|>";
const ASSISTANT: &str = "<|start|>assistant";
/// What ends every header.
pub(super) const MESSAGE: &str = "<|message|>";
const END: &str = "<|end|>";
const CONSTRAIN: &str = "<|constrain|>";
/// The channels a call or a preamble goes on.
const CHANNELS: [&str; 2] = ["<|channel|>commentary", "<|channel|>analysis"];

/// The final message's channel (its header, and then the answer, follows):
/// `Reasoning::answer_tag`.
pub(super) const FINAL_CHANNEL: &str = "<|channel|>final";

/// Whether a text starts with a header to leave out of the content (`ThinkTags::answer_header`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Header {
    /// It does not (and cannot, whatever follows).
    Absent,
    /// It may: the text so far is the start of one.
    Partial,
    /// It does, this many bytes long.
    Full(usize),
}

/// Another analysis message's header, after the reply's first closed with `<|end|>` (gpt-oss
/// may reason in more than one): `Reasoning` joins their bodies.
pub(super) fn analysis_header(text: &str) -> Header {
    const NEXT: &str = "<|start|>assistant<|channel|>analysis<|message|>";
    if text.starts_with(NEXT) {
        Header::Full(NEXT.len())
    } else if NEXT.starts_with(text) {
        Header::Partial
    } else {
        Header::Absent
    }
}

/// The most bytes between `<|channel|>final` and `<|message|>` (a constraint such as
/// ` <|constrain|>json`).
const CONSTRAINT_MAX: usize = 32;

/// Harmony's final-message header at the start of `text`: `<|start|>assistant` (after an
/// earlier message of the reply), `<|channel|>final`, at most [`CONSTRAINT_MAX`] bytes of
/// constraint without another header token, `<|message|>`.
pub(super) fn final_header(text: &str) -> Header {
    let (mut s, mut used) = (text, 0);
    for part in [ASSISTANT, FINAL_CHANNEL] {
        match s.strip_prefix(part) {
            Some(rest) => {
                (s, used) = (rest, used + part.len());
            }
            None if part.starts_with(s) => return Header::Partial,
            None if part == ASSISTANT => {}
            None => return Header::Absent,
        }
    }
    let constraint_ok = |c: &str| c.len() <= CONSTRAINT_MAX && !c.replace(CONSTRAIN, "").contains("<|");
    match s.find(MESSAGE) {
        Some(at) if constraint_ok(&s[..at]) => Header::Full(used + at + MESSAGE.len()),
        Some(_) => Header::Absent,
        None => {
            // What may still become `<|message|>` (or a constraint token) is not judged yet.
            let held = partial_suffix(s, MESSAGE).max(partial_suffix(s, CONSTRAIN));
            if constraint_ok(&s[..s.len() - held]) {
                Header::Partial
            } else {
                Header::Absent
            }
        }
    }
}

/// The call in `text` (a reply after its reasoning), if it holds one and nothing else that
/// looks like one.
pub(super) fn parse(text: &str) -> Option<ParsedReply> {
    let at = text.find(TO_FUNCTIONS)?;
    let message_start = text[..at].rfind(START).unwrap_or(0);
    if !is_header_rest(text[message_start..at].strip_prefix(ASSISTANT).unwrap_or(&text[message_start..at])) {
        return None;
    }
    let after = &text[at + TO_FUNCTIONS.len()..];
    let name_len = after.find(|c: char| !is_name_char(c)).unwrap_or(after.len());
    let (name, rest) = after.split_at(name_len);
    let body_at = rest.find(MESSAGE)?;
    if name.is_empty() || !is_header_rest(&rest[..body_at]) {
        return None;
    }
    let body = rest[body_at + MESSAGE.len()..].trim();
    let body = body.strip_suffix(END).unwrap_or(body).trim_end();
    let args: Value = serde_json::from_str(body).ok()?;
    if !args.is_object() || body.contains(TO_FUNCTIONS) {
        return None;
    }
    Some(ParsedReply {
        content: message_texts(&text[..message_start]),
        calls: vec![call_of(&json!({"name": name, "arguments": args}))?],
    })
}

/// Whether `s`, a part of a call message's header around the recipient, holds nothing but a
/// channel, a `json` constraint (`<|constrain|>json` or a bare `json`) and spaces.
fn is_header_rest(s: &str) -> bool {
    let s = CHANNELS.iter().find_map(|c| s.trim_start().strip_prefix(c)).unwrap_or(s);
    let s = s.trim();
    let s = s.strip_prefix(CONSTRAIN).unwrap_or(s);
    s.is_empty() || s == "json"
}

/// The bodies of the messages in `text` (a preamble before a call), without their headers,
/// joined; plain text as it is.
fn message_texts(text: &str) -> String {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(MESSAGE) {
        let body = &rest[at + MESSAGE.len()..];
        let end = body.find(END).unwrap_or(body.len());
        out.push(body[..end].trim());
        rest = &body[end..];
    }
    if out.is_empty() {
        text.trim().to_owned()
    } else {
        out.join("\n")
    }
}

/// Where in `text` (a streamed reply after its reasoning) a call may have begun: at the first
/// message header (any could be a call's), or at the end of a piece that may still become one.
/// `None`: no header yet, and `text[..len - held]` may go out.
pub(super) fn call_start(text: &str) -> Result<usize, usize> {
    let first = [START, "<|channel|>"].iter().filter_map(|h| text.find(h)).min();
    match first {
        Some(at) => Ok(at),
        None => Err(partial_suffix(text, START).max(partial_suffix(text, "<|channel|>"))),
    }
}

/// The grammar of a reply that is one call of one of `tools`: the model may reason first (an
/// analysis message), then writes the call on the commentary channel with a `json` constraint,
/// its arguments as gpt-oss's template re-renders them (`tojson`). Harmony's header tokens are
/// special tokens, named as such.
pub(super) fn forced_call(tools: &[Tool]) -> Grammar {
    let calls = named_call_grammar(
        tools,
        "<|channel|> \"commentary to=functions.\" ",
        "\" \" <|constrain|> \"json\" <|message|> ",
    );
    Grammar::Lark(format!(
        "start: analysis? call\n\
         analysis: <|channel|> \"analysis\" <|message|> THOUGHT <|end|> <|start|> \"assistant\"\n\
         THOUGHT: /(?s:.*)/\n\
         {}",
        calls.replacen("start:", "call:", 1)
    ))
}

/// `messages` as gpt-oss's template takes them ([`split_history`]), and an assistant turn with
/// calls and its reasoning keeps the reasoning only (the template refuses both a content and a
/// `thinking` beside calls; llama.cpp drops the content the same way).
pub(super) fn prepare(messages: &[Message]) -> Vec<Message> {
    let mut out = split_history(messages);
    for m in &mut out {
        if m.role == Role::Assistant && !m.tool_calls.is_empty() && m.reasoning_content.is_some() {
            m.content.clear();
        }
    }
    out
}

/// `messages` with each assistant turn that holds a whole harmony reply as its text (what the
/// desktop app and a saved conversation keep) split into its reasoning and its answer:
/// gpt-oss's template refuses a turn whose content has harmony's headers, and renders the
/// reasoning from `thinking` ([`Message::reasoning_content`]) itself.
pub fn split_history(messages: &[Message]) -> Vec<Message> {
    let harmony = Reasoning {
        tags: ThinkTags::Harmony,
        starts_open: false,
    };
    messages
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if m.role == Role::Assistant && m.content.contains("<|channel|>") {
                let split = harmony.split(&m.content);
                m.content = split.content;
                if m.reasoning_content.is_none() {
                    m.reasoning_content = split.reasoning;
                }
            }
            m
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(text: &str) -> Option<(String, String, String)> {
        let p = parse(text)?;
        let c = p.calls.first()?;
        Some((p.content, c.name.clone(), c.arguments.clone()))
    }

    #[test]
    fn calls_parse_in_either_header_order() {
        let want = Some((String::new(), "weather".to_owned(), "{\"city\":\"Paris\"}".to_owned()));
        // As the model writes it after its reasoning, and with the recipient first, as the
        // template renders calls back.
        assert_eq!(call("<|start|>assistant<|channel|>commentary to=functions.weather <|constrain|>json<|message|>{\"city\": \"Paris\"}"), want);
        assert_eq!(call("<|start|>assistant to=functions.weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}"), want);
        // Without reasoning the reply starts at the channel; a body may end with `<|end|>`.
        assert_eq!(call("<|channel|>commentary to=functions.weather<|message|>{\"city\": \"Paris\"}<|end|>"), want);
        // A preamble to the user is the content.
        let preamble = "<|start|>assistant<|channel|>commentary<|message|>Let me look.<|end|><|start|>assistant<|channel|>commentary to=functions.weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";
        assert_eq!(call(preamble).map(|c| c.0), Some("Let me look.".to_owned()));
    }

    #[test]
    fn anything_not_wholly_a_call_stays_text() {
        for text in [
            "The weather is fine.",
            "<|start|>assistant<|channel|>commentary to=functions.weather <|constrain|>json<|message|>{\"city\": ",
            "<|start|>assistant<|channel|>commentary to=functions.weather <|constrain|>json<|message|>[1, 2]",
            "<|start|>assistant<|channel|>commentary to=functions. <|message|>{}",
            "<|start|>assistant<|channel|>final to=functions.weather<|message|>{}",
            "<|start|>assistant<|channel|>commentary to=functions.weather hello<|message|>{}",
            "I will send to=functions.weather<|message|>{} later",
        ] {
            assert_eq!(parse(text), None, "{text:?}");
        }
    }

    /// The forced grammar over gpt-oss's vocabulary (the tiny one, with harmony's special
    /// tokens): a call written as the model writes it is accepted token by token, with or
    /// without reasoning before it, and parses back; text is not.
    #[test]
    fn the_forced_grammar_takes_a_call_with_or_without_reasoning() {
        use crate::model::grammar::GrammarCompiler;
        use crate::model::testkit::{TinyVocab, VocabStyle};
        use crate::model::tokenizer::Tokenizer;
        let tok = Tokenizer::from_gguf_metadata(&TinyVocab::new(VocabStyle::Harmony).metadata_map()).unwrap();
        let compiler = GrammarCompiler::new(&tok).unwrap();
        let tools = [Tool {
            name: "weather".into(),
            description: None,
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }];
        let grammar = forced_call(&tools);
        let call = "<|channel|>commentary to=functions.weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";
        let reasoned = format!("<|channel|>analysis<|message|>The user wants the weather.\nOk.<|end|><|start|>assistant{call}");
        for (text, ok) in [(call.to_owned(), true), (reasoned, true), ("The weather is fine.".to_owned(), false)] {
            let ids = tok.encode(&text, false).unwrap();
            let mut c = compiler.compile(&grammar).unwrap();
            let mut taken = 0;
            for &id in &ids {
                let mut logits = vec![0f32; tok.vocab_size()];
                c.mask(&mut logits).unwrap();
                if logits[id as usize] == f32::NEG_INFINITY {
                    break;
                }
                c.accept(id).unwrap();
                taken += 1;
            }
            assert_eq!(taken == ids.len(), ok, "{text:?}: {taken} of {} tokens allowed", ids.len());
            if ok {
                // The whole call taken, only an end may follow.
                let mut logits = vec![0f32; tok.vocab_size()];
                c.mask(&mut logits).unwrap();
                let allowed: Vec<usize> = (0..logits.len()).filter(|&i| logits[i] > f32::NEG_INFINITY).collect();
                assert!(allowed.iter().all(|&i| tok.stop_ids().contains(&(i as u32))), "after the call: {allowed:?}");
                let decoded = tok.decode_skip_special(&ids).unwrap();
                let content = crate::model::chat::reasoning::Reasoning {
                    tags: crate::model::chat::reasoning::ThinkTags::Harmony,
                    starts_open: false,
                }
                .split(&decoded)
                .content;
                assert_eq!(parse(&content).unwrap().calls[0].arguments, "{\"city\":\"Paris\"}", "{decoded:?}");
            }
        }
    }

    #[test]
    fn a_stream_holds_from_the_first_header() {
        assert_eq!(call_start("Plain text"), Err(0));
        assert_eq!(call_start("Plain <|sta"), Err(5));
        assert_eq!(call_start("Hi <|start|>assistant"), Ok(3));
        assert_eq!(call_start("<|channel|>commentary"), Ok(0));
    }
}
