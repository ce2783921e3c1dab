//! Tool calls: how a model's template writes them, reading them back out of a reply, and the
//! grammar that forces one.
//!
//! Owns: [`ToolFormat`] (chosen from the template's source, never from the model's name),
//! [`Tool`] (a function the request offers), [`ParsedReply`] (a reply split into text and
//! calls), [`ToolStream`] (a streamed reply's text, held back from the first sign of a call),
//! and the prompt rewriting for templates that know no tools ([`ToolFormat::Injected`]).
//!
//! Formats:
//! - [`ToolFormat::Hermes`]: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`,
//!   any number of them, text around them allowed (Qwen 2.5/3, Hermes, SmolLM3, Granite 4.0
//!   templates). A template that asks for them but renders no `tool_calls` back (SmolLM3's)
//!   gets earlier calls written into their turn's content ([`ToolFormat::prepare`]).
//! - [`ToolFormat::Json`]: the whole reply is `{"name": ..., "parameters": {...}}` (or
//!   `"arguments"`), or a list of them (Llama 3.1–3.3's templates, which answer tools with
//!   `ipython` turns).
//! - [`ToolFormat::Granite`]: Granite 3.x's `<|tool_call|>` (a special token) then a JSON list
//!   of calls; its template renders no `tool_calls`, so earlier calls are written into their
//!   turn's content as the model wrote them ([`ToolFormat::prepare`]).
//! - [`ToolFormat::Mistral`]: Mistral's `[TOOL_CALLS]` (a special token, so not in the
//!   reply's text): a JSON list of calls (Mistral Nemo, Small 3.1), or `name[ARGS]{...}` per
//!   call (Mistral Small 3.2, Devstral, Ministral 3; `[ARGS]` is special too, so the text reads
//!   `name{...}`). Its templates refuse a call id that is not 9 letters and digits, so its ids
//!   are such ([`ToolFormat::call_id`]).
//! - [`ToolFormat::Glm4`]: the function's name alone on the reply's first line, then its
//!   arguments' JSON (GLM-4-0414's and GLM-Z1's templates: `<|assistant|>{{ metadata }}\n{{
//!   content }}`); earlier calls go back as such turns and results as `observation` turns
//!   ([`ToolFormat::prepare`]), which is all those templates render.
//! - [`ToolFormat::GlmXml { compact: false }`]: GLM-4.5's and 4.6's `<tool_call>name` then `<arg_key>k</arg_key>`
//!   `<arg_value>v</arg_value>` pairs, `</tool_call>`, each part on its own line (GLM-4.7's:
//!   `compact`, all on one); a value is raw text where the tool's schema says the argument is a
//!   string, else JSON ([`ToolFormat::parse_for`]).
//! - [`ToolFormat::QwenXml { seed: false }`]: Qwen3-Coder's (and Qwen3.5's, Nemotron 3 Nano's; Seed-OSS's in
//!   `<seed:tool_call>`, each value on its parameter's line: `seed`) `<tool_call>`
//!   `<function=name>` then a `<parameter=k>` block per argument, its value raw text
//!   (`chat::qwen_xml`).
//! - [`ToolFormat::Harmony`]: gpt-oss's harmony messages, a call's header naming
//!   `to=functions.NAME` (`chat::harmony`).
//! - [`ToolFormat::Gemma4`]: Gemma 4's `<|tool_call>call:NAME{key:value,…}<tool_call|>`, its
//!   arguments in Gemma's own notation (strings between `<|"|>` marks; `chat::gemma4`).
//! - [`ToolFormat::Lfm2`]: LFM2's and LFM2.5's `<|tool_call_start|>[name(key='value', n=1),
//!   …]<|tool_call_end|>`, Python-style calls (`chat::lfm2`); earlier calls go into their turn's
//!   content where the template renders no `tool_calls`.
//! - [`ToolFormat::Cohere`]: Cohere's `<|START_ACTION|>[{"tool_call_id": "0", "tool_name":
//!   NAME, "parameters": {…}}, …]<|END_ACTION|>` (`chat::cohere`).
//! - [`ToolFormat::MinimaxXml`]: MiniMax-M2's `<minimax:tool_call>` then `<invoke name="NAME">`
//!   with a `<parameter name="KEY">VALUE</parameter>` line per argument, `</invoke>` (a turn's
//!   calls in one block), its values raw text where the tool's schema says string
//!   (`chat::minimax_xml`).
//! - [`ToolFormat::JsonList`]: a JSON list of calls between two marks after any text: Nemotron
//!   Nano 2's `<TOOLCALL>[{"name": …, "arguments": {…}}]</TOOLCALL>`, Apriel's `<tool_calls>`,
//!   Apertus's `<|tools_prefix|>[{"NAME": {…}}]<|tools_suffix|>` (`chat::json_list`).
//! - [`ToolFormat::DeepSeek`]: DeepSeek-V3.1's `<｜tool▁calls▁begin｜>` list of
//!   `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>` blocks (its template renders no
//!   tools: they are described in the system prompt as its model card does), or (`fenced`)
//!   R1's in llama.cpp's template, `function<｜tool▁sep｜>NAME` and the arguments in a JSON fence
//!   (`chat::deepseek`).
//! - [`ToolFormat::Injected`]: the template renders no tools (or never reads `tools`, as
//!   DeepSeek-R1's distills' renders earlier calls but not the offered tools); hearth describes them in the
//!   system message and asks for the Hermes format, and rewrites earlier calls and results into
//!   text the template can render (as llama.cpp's generic handler does).
//!
//! Invariants: output that is not wholly valid calls stays text (a reply is either calls, with
//! any text around them, or text); arguments are returned as JSON text, as OpenAI does; the
//! forced-call grammar writes JSON the way the templates' `tojson` re-renders it, and the
//! format's special tokens where the vocabulary has them ([`CallMarkers`]: Mistral's
//! `[TOOL_CALLS]`, `[ARGS]`), so a call sent back in the next request's history is the same
//! tokens (the prefix cache holds).
//!
//! Counterpart: llama.cpp's `common/chat.cpp` (`common_chat_params_init_*`, the format
//! detection from the template, the generic handler); vLLM's `tool_parsers/`
//! (`hermes_tool_parser.py`, `llama_tool_parser.py`).

use serde_json::{json, Value};

use super::json_list::ListMarks;
use super::python::dumps;
use super::{Message, Role};
use crate::model::grammar::{json_layout, Grammar};

/// How a model writes a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{json}</tool_call>` blocks.
    Hermes,
    /// The reply is one JSON object (or a list) with `name` and the arguments under `args`
    /// (`"parameters"` for Llama 3.1+, `"arguments"` for Mistral's).
    Json { args: &'static str },
    /// Mistral's: `[TOOL_CALLS]` then a JSON list of calls, or (`named`) the function's name,
    /// `[ARGS]` and its arguments, per call.
    Mistral { named: bool },
    /// GLM-4's: the function's name on the first line, its arguments' JSON after.
    Glm4,
    /// Granite 3.x's: `<|tool_call|>` then a JSON list of calls.
    Granite,
    /// GLM-4.5's: `<tool_call>name`, `<arg_key>`/`<arg_value>` pairs, `</tool_call>`, each on
    /// its own line; `compact` (GLM-4.7's): with nothing between them.
    GlmXml { compact: bool },
    /// gpt-oss's harmony: a commentary message to `functions.NAME` whose body is the arguments.
    Harmony,
    /// Qwen3-Coder's: `<tool_call>`, `<function=NAME>`, a `<parameter=KEY>` block per argument
    /// with its raw value, `</function>`, `</tool_call>` (`chat::qwen_xml`).
    QwenXml { seed: bool },
    /// Gemma 4's: `<|tool_call>call:NAME{key:value,…}<tool_call|>` (`chat::gemma4`).
    Gemma4,
    /// LFM2's: `<|tool_call_start|>[NAME(key=value, …), …]<|tool_call_end|>` (`chat::lfm2`).
    Lfm2,
    /// Cohere's: `<|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}, …]<|END_ACTION|>`
    /// (`chat::cohere`).
    Cohere,
    /// MiniMax-M2's: `<minimax:tool_call>`, an `<invoke name="NAME">` block per call with a
    /// `<parameter name="KEY">` line per argument, `</minimax:tool_call>` (`chat::minimax_xml`).
    MinimaxXml,
    /// A JSON list of calls between the marks of Nemotron Nano 2, Apriel or Apertus
    /// (`chat::json_list`).
    JsonList(ListMarks),
    /// DeepSeek's: `<｜tool▁calls▁begin｜>`, a `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>`
    /// block per call, `<｜tool▁calls▁end｜>` (V3.1's); `fenced`: the head `function`, the name and
    /// the arguments in a JSON fence after the separator (R1's in llama.cpp's template;
    /// `chat::deepseek`).
    DeepSeek { fenced: bool },
    /// The template knows no tools: hearth describes them and asks for the Hermes format.
    Injected,
}

/// A function a request offers the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// The arguments' JSON Schema (`{"type": "object"}` when the request gave none).
    pub parameters: Value,
}

impl Tool {
    /// The tool as OpenAI sends it and templates expect it.
    pub fn to_json(&self) -> Value {
        let mut function = serde_json::Map::new();
        function.insert("name".into(), Value::String(self.name.clone()));
        if let Some(d) = &self.description {
            function.insert("description".into(), Value::String(d.clone()));
        }
        function.insert("parameters".into(), self.parameters.clone());
        json!({"type": "function", "function": Value::Object(function)})
    }
}

/// One call read from a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedCall {
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

/// A reply split into its text and its calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedReply {
    /// The text outside the calls, trimmed.
    pub content: String,
    pub calls: Vec<ParsedCall>,
}

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
/// Mistral's special tokens: before each call, and between a named call's name and arguments.
const TOOL_CALLS: &str = "[TOOL_CALLS]";
const ARGS: &str = "[ARGS]";
/// GLM-4's turn of tool results (and the special token that ends a call).
const OBSERVATION: &str = "<|observation|>";
/// Granite 3.x's marker before its list of calls (a special token in its vocabulary).
const GRANITE_CALL: &str = "<|tool_call|>";
/// GLM-4.5's argument tags.
const ARG_KEY: (&str, &str) = ("<arg_key>", "</arg_key>");
const ARG_VALUE: (&str, &str) = ("<arg_value>", "</arg_value>");

/// The ids of the special tokens a format writes calls with (none: the text alone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallMarkers {
    /// `[TOOL_CALLS]` (`<|tool_call|>`, `<seed:tool_call>`), before each call.
    pub calls: Option<u32>,
    /// `[ARGS]`, between a named call's name and its arguments.
    pub args: Option<u32>,
    /// `</seed:tool_call>`, after each call.
    pub end: Option<u32>,
    /// DeepSeek's `<｜tool▁call▁begin｜>` and `<｜tool▁call▁end｜>`, around each call inside the
    /// list `calls` and `end` open and close.
    pub call: Option<(u32, u32)>,
}

impl CallMarkers {
    /// A call's (or a list of calls') `open` and `close` marks as the vocabulary's special
    /// tokens, where `special_id` has them.
    fn around(special_id: impl Fn(&str) -> Option<u32>, open: &str, close: &str) -> Self {
        Self {
            calls: special_id(open),
            end: special_id(close),
            ..Self::default()
        }
    }
}

/// `text` as a string literal of a forced call's Lark grammar (JSON's quoting, which llguidance
/// reads).
pub(super) fn literal(text: &str) -> String {
    dumps(&Value::String(text.to_owned()))
}

/// A mark in a forced call's grammar: its special token where the vocabulary has it (`id`), else
/// its text.
pub(super) fn mark_rule(id: Option<u32>, text: &str) -> String {
    id.map_or_else(|| literal(text), |id| format!("<[{id}]>"))
}

/// Where in `text` (a streamed reply) a call that opens with `mark` may have begun: at the mark,
/// or at the end of a piece that may still become it. `Err(held)`: no call yet, the last `held`
/// bytes must wait.
fn mark_start(text: &str, mark: &str) -> Result<usize, usize> {
    text.find(mark).ok_or_else(|| partial_suffix(text, mark))
}

impl ToolFormat {
    /// Where in `text` (a streamed reply) a call of a format read by its marks may have begun
    /// (`Err(held)`: none yet, the last `held` bytes must wait): one open mark's, or harmony's
    /// and Qwen3-Coder's, which have two.
    fn call_start(self, text: &str) -> Result<usize, usize> {
        match self {
            Self::QwenXml { seed } => super::qwen_xml::call_start(text, super::qwen_xml::Dialect::of(seed)),
            Self::Gemma4 => mark_start(text, super::gemma4::OPEN),
            Self::Lfm2 => mark_start(text, super::lfm2::START),
            Self::Cohere => mark_start(text, super::cohere::START),
            Self::MinimaxXml => mark_start(text, super::minimax_xml::OPEN),
            Self::JsonList(m) => mark_start(text, m.open()),
            Self::DeepSeek { .. } => mark_start(text, super::deepseek::CALLS_BEGIN),
            _ => super::harmony::call_start(text),
        }
    }

    /// The format `template` (its Jinja source) writes tool calls in.
    pub fn of_template(template: &str) -> Self {
        // gpt-oss's writes a call's header as `"<|start|>assistant to=" + "functions." + name`.
        if template.contains("<|channel|>commentary") && template.contains(" to=") {
            Self::Harmony
        } else if super::gemma4::writes(template) {
            Self::Gemma4
        } else if super::lfm2::writes(template) {
            Self::Lfm2
        } else if super::cohere::writes(template) {
            Self::Cohere
        } else if super::minimax_xml::writes(template) {
            Self::MinimaxXml
        } else if let Some(fenced) = super::deepseek::writes(template).filter(|&fenced| !fenced || reads_tools(template)) {
            // (R1's distills' templates write fenced calls but render no tools: `Injected`.)
            Self::DeepSeek { fenced }
        } else if let Some(m) = ListMarks::of_template(template) {
            Self::JsonList(m)
        } else if super::qwen_xml::writes(template) {
            Self::QwenXml {
                seed: super::qwen_xml::seed_writes(template),
            }
        } else if template.contains(ARG_KEY.0) && template.contains(OPEN) {
            // GLM-4.5's and 4.6's write each `<arg_key>` on a line of its own.
            Self::GlmXml {
                compact: !template.contains(&format!("\n{}", ARG_KEY.0)),
            }
        } else if template.contains(GRANITE_CALL) {
            Self::Granite
        } else if template.contains(OBSERVATION) && template.contains("metadata") && !template.contains(OPEN) {
            Self::Glm4
        } else if template.contains(OPEN) {
            Self::Hermes
        } else if template.contains("[TOOL_CALLS]") {
            Self::Mistral {
                named: template.contains("[ARGS]"),
            }
        } else if (template.contains("tool_calls") || template.contains("ipython")) && reads_tools(template) {
            Self::Json {
                args: if template.contains("\"parameters\"") {
                    "parameters"
                } else {
                    "arguments"
                },
            }
        } else {
            Self::Injected
        }
    }

    /// The calls in `text`; `None` when it holds none, or anything that looks like a call but
    /// is not a valid one (then the whole reply is text).
    pub fn parse(self, text: &str) -> Option<ParsedReply> {
        match self {
            Self::Hermes | Self::Injected => parse_hermes(text),
            Self::Json { .. } | Self::Mistral { named: false } | Self::Granite => parse_json(text),
            Self::Mistral { named: true } => parse_named(text),
            Self::Glm4 => parse_glm4(text),
            Self::GlmXml { .. } => parse_glm_xml(text, &[]),
            Self::Harmony => super::harmony::parse(text),
            Self::QwenXml { seed } => super::qwen_xml::parse(text, &[], super::qwen_xml::Dialect::of(seed)),
            Self::Gemma4 => super::gemma4::parse(text),
            Self::Lfm2 => super::lfm2::parse(text),
            Self::Cohere => super::cohere::parse(text),
            Self::MinimaxXml => super::minimax_xml::parse(text, &[]),
            Self::JsonList(m) => super::json_list::parse(text, m),
            Self::DeepSeek { fenced } => super::deepseek::parse(text, fenced),
        }
    }

    /// [`Self::parse`] knowing the offered `tools`: GLM-4.5's, Qwen3-Coder's and MiniMax-M2's values are raw
    /// text where the tool's schema says the argument is a string (`"123"` stays a string), JSON
    /// otherwise (as llama.cpp and vLLM read them); without the tool, JSON where it parses.
    pub fn parse_for(self, text: &str, tools: &[Tool]) -> Option<ParsedReply> {
        match self {
            Self::GlmXml { .. } => parse_glm_xml(text, tools),
            Self::QwenXml { seed } => super::qwen_xml::parse(text, tools, super::qwen_xml::Dialect::of(seed)),
            Self::MinimaxXml => super::minimax_xml::parse(text, tools),
            _ => self.parse(text),
        }
    }

    /// A fresh id for a call the model made: OpenAI's `call_` and 24 hex digits, or for
    /// [`ToolFormat::Mistral`] the 9 letters and digits its templates insist on (as llama.cpp
    /// gives them).
    pub fn call_id(self) -> String {
        match self {
            Self::Mistral { .. } => {
                const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
                (0..9)
                    .map(|_| ALNUM[rand::random_range(0..ALNUM.len())] as char)
                    .collect()
            }
            _ => format!("call_{:016x}{:08x}", rand::random::<u64>(), rand::random::<u32>()),
        }
    }

    /// The special tokens this format's calls are written with, where `special_id` (the
    /// vocabulary's special tokens by text) has them: Mistral's `[TOOL_CALLS]` and `[ARGS]`,
    /// Granite's `<|tool_call|>`, Seed-OSS's `<seed:tool_call>` and `</seed:tool_call>`.
    pub fn markers(self, special_id: impl Fn(&str) -> Option<u32>) -> CallMarkers {
        match self {
            Self::Mistral { named } => CallMarkers {
                calls: special_id(TOOL_CALLS),
                args: if named { special_id(ARGS) } else { None },
                ..CallMarkers::default()
            },
            Self::Granite => CallMarkers {
                calls: special_id(GRANITE_CALL),
                ..CallMarkers::default()
            },
            Self::QwenXml { seed: true } => CallMarkers::around(special_id, super::qwen_xml::SEED_OPEN, super::qwen_xml::SEED_CLOSE),
            Self::Lfm2 => CallMarkers::around(special_id, super::lfm2::START, super::lfm2::END),
            Self::Cohere => CallMarkers::around(special_id, super::cohere::START, super::cohere::END),
            Self::MinimaxXml => CallMarkers::around(special_id, super::minimax_xml::OPEN, super::minimax_xml::CLOSE),
            Self::JsonList(m) => CallMarkers::around(special_id, m.open(), m.close()),
            Self::DeepSeek { .. } => {
                use super::deepseek::{CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP};
                CallMarkers {
                    calls: special_id(CALLS_BEGIN),
                    args: special_id(SEP),
                    end: special_id(CALLS_END),
                    call: special_id(CALL_BEGIN).zip(special_id(CALL_END)),
                }
            }
            _ => CallMarkers::default(),
        }
    }

    /// A grammar whose every output is exactly one call of one of `tools`, in this format,
    /// with the format's special tokens where `markers` has them (as the model writes a call;
    /// decoding leaves them out of the text, so the call parses the same either way).
    pub fn forced_call(self, tools: &[Tool], markers: CallMarkers) -> Grammar {
        let calls: Vec<Value> = tools.iter().map(|t| call_schema(self, t)).collect();
        let mut schema = if calls.len() == 1 {
            calls.into_iter().next().unwrap_or_default()
        } else {
            json!({"anyOf": calls})
        };
        if let Some(obj) = schema.as_object_mut() {
            obj.insert("x-guidance".into(), json_layout());
        }
        match (self, markers.calls) {
            (Self::Mistral { named: false } | Self::Granite, Some(calls)) => {
                Grammar::Lark(format!("start: <[{calls}]> \"[\" call \"]\"\ncall: %json {schema}"))
            }
            (Self::Granite, None) => {
                Grammar::Lark(format!("start: \"{GRANITE_CALL}[\" call \"]\"\ncall: %json {schema}"))
            }
            (Self::Json { .. } | Self::Mistral { named: false }, _) => Grammar::JsonSchema(schema),
            (Self::Mistral { named: true }, _) => {
                let token = |id: Option<u32>| id.map(|id| format!("<[{id}]> ")).unwrap_or_default();
                Grammar::Lark(named_call_grammar(tools, &token(markers.calls), &token(markers.args)))
            }
            (Self::Glm4, _) => Grammar::Lark(named_call_grammar(tools, "", "\"\\n\" ")),
            (Self::GlmXml { compact }, _) => Grammar::Lark(glm_xml_grammar(tools, compact)),
            (Self::QwenXml { seed }, _) => {
                Grammar::Lark(super::qwen_xml::forced_call(tools, super::qwen_xml::Dialect::of(seed), markers))
            }
            (Self::Gemma4, _) => Grammar::Lark(super::gemma4::forced_call(tools)),
            (Self::Lfm2, _) => Grammar::Lark(super::lfm2::forced_call(tools, markers)),
            (Self::Cohere, _) => Grammar::Lark(super::cohere::forced_call(tools, markers)),
            (Self::MinimaxXml, _) => Grammar::Lark(super::minimax_xml::forced_call(tools, markers)),
            (Self::JsonList(m), _) => Grammar::Lark(super::json_list::forced_call(tools, m, markers)),
            (Self::DeepSeek { fenced }, _) => Grammar::Lark(super::deepseek::forced_call(tools, fenced, markers)),
            (Self::Harmony, _) => super::harmony::forced_call(tools),
            (Self::Hermes | Self::Injected, _) => {
                Grammar::Lark(format!("start: \"{OPEN}\\n\" call \"\\n{CLOSE}\"\ncall: %json {schema}"))
            }
        }
    }

    /// `messages` as this format's template (`template`, its source) should see them: for
    /// [`ToolFormat::Injected`], the tools described in the system message and earlier calls and
    /// results written as text; for a Hermes template that writes calls but renders no
    /// `tool_calls` back (SmolLM3's: an assistant turn is its content alone), earlier calls
    /// written into their turn's content as the model wrote them, so the model sees them and
    /// the prompt repeats its tokens; for Apriel's, the calls without their ids; for
    /// DeepSeek-V3.1's, which never reads `tools`, the tools described after the system prompt
    /// as its model card does; the others render `tools` and the messages as they are.
    pub fn prepare(self, messages: &[Message], tools: &[Tool], template: &str) -> Vec<Message> {
        match self {
            Self::Injected => {}
            Self::Glm4 => return glm4_history(messages),
            Self::Harmony => return super::harmony::prepare(messages),
            Self::Granite => return with_calls_as_text(messages, granite_text),
            Self::Lfm2 if !super::lfm2::renders_calls(template) => {
                return with_calls_as_text(messages, super::lfm2::history_text)
            }
            Self::Hermes if !template.contains("tool_calls") => return with_calls_as_text(messages, hermes_text),
            // Apriel's template writes each call's id back in every turn but the last, which
            // its model never writes: without them the history renders as the model wrote it
            // (the prefix cache holds through the call).
            Self::JsonList(ListMarks::Apriel) => {
                let mut out = messages.to_vec();
                out.iter_mut().flat_map(|m| m.tool_calls.iter_mut()).for_each(|c| c.id.clear());
                return out;
            }
            // DeepSeek-V3.1's template never reads `tools`: they are described after the
            // system prompt as its model card does (`{system prompt}\n\n{tool_description}`).
            Self::DeepSeek { .. } if !tools.is_empty() && !reads_tools(template) => {
                let mut out = messages.to_vec();
                let described = super::deepseek::describe(tools);
                match out.first_mut() {
                    Some(first) if first.role == Role::System => first.content = format!("{}\n\n{described}", first.content),
                    _ => out.insert(0, Message::system(format!("\n\n{described}"))),
                }
                return out;
            }
            _ => return messages.to_vec(),
        }
        let mut out: Vec<Message> = Vec::with_capacity(messages.len() + 1);
        let described = describe_tools(tools);
        for m in messages {
            let mut m = m.clone();
            if !m.tool_calls.is_empty() {
                calls_into_content(&mut m);
            } else if m.role.is_tool() {
                let response = format!("<tool_response>\n{}\n</tool_response>", m.content);
                // Results in a row are one user turn (templates that insist on alternating
                // roles, such as Gemma's, accept that), as Qwen's template writes them.
                if join_results_turn(&mut out, &response) {
                    continue;
                }
                m.role = Role::User;
                m.content = response;
            } else if m.role == Role::User && join_results_turn(&mut out, &m.content) {
                // The user's words right after results join their turn, as the results and
                // a user message are one turn (Anthropic's `tool_result` blocks and text are one
                // user message): two user turns in a row would break templates that insist on
                // alternating roles.
                continue;
            }
            out.push(m);
        }
        if !tools.is_empty() {
            match out.first_mut() {
                Some(first) if first.role == Role::System => {
                    first.content = format!("{}\n\n{described}", first.content);
                }
                _ => out.insert(0, Message::system(described)),
            }
        }
        out
    }
}

/// The JSON Schema of one call of `tool`: its name and its arguments, in the order the
/// template writes them.
fn call_schema(format: ToolFormat, tool: &Tool) -> Value {
    let args = match format {
        ToolFormat::Json { args } => args,
        ToolFormat::Hermes
        | ToolFormat::Injected
        | ToolFormat::Mistral { .. }
        | ToolFormat::Glm4
        | ToolFormat::GlmXml { .. }
        | ToolFormat::QwenXml { .. }
        | ToolFormat::Gemma4
        | ToolFormat::Lfm2
        | ToolFormat::Cohere
        | ToolFormat::MinimaxXml
        | ToolFormat::JsonList(_)
        | ToolFormat::DeepSeek { .. }
        | ToolFormat::Harmony
        | ToolFormat::Granite => {
            "arguments"
        }
    };
    json!({
        "type": "object",
        "properties": {"name": {"const": tool.name}, args: tool.parameters},
        "required": ["name", args],
        "additionalProperties": false,
    })
}

/// The grammar of one call of one of `tools` written as `before`, the function's name,
/// `between`, its arguments' JSON (Lark items, each ending in a space where not empty): Mistral's
/// named format (`[TOOL_CALLS]name[ARGS]{arguments}`, the markers as special tokens, or nothing
/// where the vocabulary lacks them, as the text reads), GLM-4's (`name`, a newline, the
/// arguments) and harmony's call message (`chat::harmony`). A rule per tool.
pub(super) fn named_call_grammar(tools: &[Tool], before: &str, between: &str) -> String {
    rule_per_tool(tools, |t| {
        let mut schema = t.parameters.clone();
        if let Some(obj) = schema.as_object_mut() {
            obj.insert("x-guidance".into(), json_layout());
        }
        // Tool names are letters, digits, `_`, `-` and `.` (OpenAI's rule, checked when the
        // request is read), so they need no escaping in a Lark string.
        format!("{before}\"{}\" {between}%json {schema}", t.name)
    })
}

/// A Lark grammar whose `start` is one of `tools`' calls, each its own rule (`c0`, `c1`, …)
/// whose items `body` gives.
pub(super) fn rule_per_tool(tools: &[Tool], body: impl Fn(&Tool) -> String) -> String {
    let alternatives: Vec<String> = (0..tools.len()).map(|i| format!("c{i}")).collect();
    let rules: Vec<String> = tools.iter().enumerate().map(|(i, t)| format!("c{i}: {}", body(t))).collect();
    format!("start: {}\n{}", alternatives.join(" | "), rules.join("\n"))
}

/// `messages` with every turn's calls written after its content as `text` writes them, for
/// templates that render no `tool_calls`.
fn with_calls_as_text(messages: &[Message], text: fn(&[super::ToolCall]) -> String) -> Vec<Message> {
    let mut out = messages.to_vec();
    out.iter_mut().for_each(|m| calls_into_content_as(m, text));
    out
}

/// `m`'s calls, if any, written after its content in the Hermes format.
fn calls_into_content(m: &mut Message) {
    calls_into_content_as(m, hermes_text)
}

/// `m`'s calls, if any, written after its content as `text` writes them.
fn calls_into_content_as(m: &mut Message, text: fn(&[super::ToolCall]) -> String) {
    if m.tool_calls.is_empty() {
        return;
    }
    let calls = text(&m.tool_calls);
    m.content = if m.content.is_empty() {
        calls
    } else {
        format!("{}\n{calls}", m.content)
    };
    m.tool_calls.clear();
}

/// Appends `text` (after a newline) to the last message of `out` when that is a user turn of
/// tool results ([`ToolFormat::prepare`] writes them so); `false`, and nothing changed, when it
/// is not.
fn join_results_turn(out: &mut [Message], text: &str) -> bool {
    match out.last_mut().filter(|p| p.role == Role::User && p.content.ends_with("</tool_response>")) {
        Some(prev) => {
            prev.content.push('\n');
            prev.content.push_str(text);
            true
        }
        None => false,
    }
}

/// `messages` as GLM-4's templates render calls and results: each call an assistant turn of its
/// own with the function's name as `metadata` and its arguments' JSON as content (text the
/// turn had before its calls stays a turn of its own before them), each result an
/// `observation` turn.
fn glm4_history(messages: &[Message]) -> Vec<Message> {
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        if m.role.is_tool() {
            let mut result = m.clone();
            result.role = Role::Other("observation".into());
            out.push(result);
            continue;
        }
        if m.tool_calls.is_empty() {
            out.push(m.clone());
            continue;
        }
        if !m.content.trim().is_empty() {
            let mut text = m.clone();
            text.tool_calls.clear();
            out.push(text);
        }
        for c in &m.tool_calls {
            let mut turn = Message::assistant(dumps(&c.arguments_value()));
            turn.created_ms = m.created_ms;
            turn.metadata = Some(c.name.clone());
            out.push(turn);
        }
    }
    out
}

/// Granite 3.x's text of earlier calls: its marker and the list (what the model would have
/// written; the marker is its special token again when the prompt is tokenized).
fn granite_text(calls: &[super::ToolCall]) -> String {
    let list: Vec<Value> = calls.iter().map(|c| json!({"name": c.name, "arguments": c.arguments_value()})).collect();
    format!("{GRANITE_CALL}{}", dumps(&Value::Array(list)))
}

/// The Hermes text of earlier calls (what the model would have written).
fn hermes_text(calls: &[super::ToolCall]) -> String {
    calls
        .iter()
        .map(|c| {
            let call = json!({"name": c.name, "arguments": c.arguments_value()});
            format!("{OPEN}\n{}\n{CLOSE}", dumps(&call))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The system text that offers `tools` to a model whose template does not.
fn describe_tools(tools: &[Tool]) -> String {
    let mut text = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools {
        text.push('\n');
        text.push_str(&dumps(&t.to_json()));
    }
    text.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments \
         within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \
         \"arguments\": <args-json-object>}\n</tool_call>",
    );
    text
}

/// `{"name": ..., "arguments"|"parameters": {...}}` as a call; `None` otherwise.
pub(super) fn call_of(v: &Value) -> Option<ParsedCall> {
    let obj = v.as_object()?;
    let name = obj.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let args = match obj.get("arguments").or_else(|| obj.get("parameters")) {
        None => json!({}),
        // Some models write the arguments as a JSON string, as OpenAI sends them.
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok().filter(Value::is_object)?,
        Some(v) if v.is_object() => v.clone(),
        Some(_) => return None,
    };
    Some(ParsedCall {
        name: name.to_owned(),
        arguments: args.to_string(),
    })
}

fn parse_hermes(text: &str) -> Option<ParsedReply> {
    parse_blocks(text, |inner| call_of(&serde_json::from_str::<Value>(inner.trim()).ok()?))
}

/// The calls between `<tool_call>` and `</tool_call>` in `text`, each block's inside read by
/// `call` (any that is not a call: `None`), and the text around them, trimmed. A missing close
/// tag is tolerated at the very end (a reply cut at the stop token).
fn parse_blocks(text: &str, call: impl Fn(&str) -> Option<ParsedCall>) -> Option<ParsedReply> {
    parse_blocks_between(text, (OPEN, CLOSE), true, call)
}

/// [`parse_blocks`] between the tags `open` and `close`; a missing close tag at the end is a
/// call cut off only where `cut_off` says so (else the reply is text).
pub(super) fn parse_blocks_between(
    text: &str,
    tags: (&str, &str),
    cut_off: bool,
    call: impl Fn(&str) -> Option<ParsedCall>,
) -> Option<ParsedReply> {
    parse_lists_between(text, tags, cut_off, |inner| call(inner).map(|c| vec![c]))
}

/// `inner`, whitespace aside, as a non-empty JSON list (of calls, for the formats that write
/// their calls as one: Cohere's, `chat::json_list`'s); `None` otherwise.
pub(super) fn nonempty_json_list(inner: &str) -> Option<Vec<Value>> {
    match serde_json::from_str::<Value>(inner.trim()).ok()? {
        Value::Array(items) if !items.is_empty() => Some(items),
        _ => None,
    }
}

/// `inner`, whitespace aside, as blocks between `open` and `close` and nothing else, at least
/// one, each block's inside read by `call` (MiniMax-M2's `<invoke>` blocks, DeepSeek's calls in
/// their list); the last block's `close` may be missing (the reply was cut at its stop).
pub(super) fn only_blocks(inner: &str, (open, close): (&str, &str), call: impl Fn(&str) -> Option<ParsedCall>) -> Option<Vec<ParsedCall>> {
    let mut calls = Vec::new();
    let mut rest = inner.trim_start();
    while !rest.is_empty() {
        let after = rest.strip_prefix(open)?;
        let (body, next) = match after.find(close) {
            Some(end) => (&after[..end], &after[end + close.len()..]),
            None => (after, ""),
        };
        calls.push(call(body)?);
        rest = next.trim_start();
    }
    (!calls.is_empty()).then_some(calls)
}

/// [`parse_blocks_between`] where a block holds a list of calls (Cohere's), each block's inside
/// read by `calls_of`.
pub(super) fn parse_lists_between(
    text: &str,
    (open, close): (&str, &str),
    cut_off: bool,
    calls_of: impl Fn(&str) -> Option<Vec<ParsedCall>>,
) -> Option<ParsedReply> {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(open) {
        content.push_str(&rest[..start]);
        let after = &rest[start + open.len()..];
        let (inner, next) = match after.find(close) {
            Some(end) => (&after[..end], &after[end + close.len()..]),
            None if cut_off => (after, ""),
            None => return None,
        };
        calls.extend(calls_of(inner)?);
        rest = next;
    }
    content.push_str(rest);
    (!calls.is_empty()).then(|| ParsedReply {
        content: content.trim().to_owned(),
        calls,
    })
}

fn parse_json(text: &str) -> Option<ParsedReply> {
    let body = text.trim();
    let body = strip_call_tag(body);
    if !body.starts_with('{') && !body.starts_with('[') {
        return None;
    }
    let calls = match serde_json::from_str::<Value>(body).ok()? {
        Value::Array(items) if !items.is_empty() => items.iter().map(call_of).collect::<Option<Vec<_>>>()?,
        v => vec![call_of(&v)?],
    };
    Some(ParsedReply {
        content: String::new(),
        calls,
    })
}

/// Mistral's named calls as their text reads: `name{...}` one after another (whitespace
/// between allowed), and nothing else.
fn parse_named(text: &str) -> Option<ParsedReply> {
    let mut rest = text.trim();
    let mut calls = Vec::new();
    while !rest.is_empty() {
        let name_len = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
        let (name, after) = rest.split_at(name_len);
        if name.is_empty() || !after.starts_with('{') {
            return None;
        }
        let mut values = serde_json::Deserializer::from_str(after).into_iter::<Value>();
        let args = values.next()?.ok()?;
        let used = values.byte_offset();
        calls.push(call_of(&json!({"name": name, "arguments": args}))?);
        rest = after[used..].trim_start();
    }
    (!calls.is_empty()).then(|| ParsedReply {
        content: String::new(),
        calls,
    })
}

/// The grammar of one GLM-4.5 call of one of `tools`: `<tool_call>name`, then each required
/// argument of its schema in the schema's order as `<arg_key>k</arg_key>` and
/// `<arg_value>v</arg_value>` (a line each, as GLM-4.5's template writes them; all on one line
/// when `compact`, as GLM-4.7's), `</tool_call>`; a
/// string argument's value is text without `<`, any other its JSON under its schema. A rule per
/// tool.
fn glm_xml_grammar(tools: &[Tool], compact: bool) -> String {
    let nl = if compact { "" } else { "\n" };
    rule_per_tool(tools, |t| {
        let mut body = format!("\"{OPEN}{}\" ", t.name);
        for (k, schema) in required_args(t) {
            let key = dumps(&Value::String(format!("{nl}{}{k}{}{nl}{}", ARG_KEY.0, ARG_KEY.1, ARG_VALUE.0)));
            let value = if is_string_schema(schema) {
                string_value_rule(schema)
            } else {
                json_value_rule(schema)
            };
            body.push_str(&format!("{key} {value} \"{}\" ", ARG_VALUE.1));
        }
        body.push_str(&dumps(&Value::String(format!("{nl}{CLOSE}"))));
        body
    })
}

/// A string argument's value in GLM-4.5's grammar: one of its `enum` (or its `const`) values,
/// else any text without `<`.
pub(super) fn string_value_rule(schema: &Value) -> String {
    string_choice(schema, |v| Some(v.to_owned())).unwrap_or_else(|| "/[^<]*/".to_owned())
}

/// A Lark choice of a string argument's `enum` (or `const`) values, each written by `quote`
/// (`None`: a value it cannot write); `None` unless every value is a string it writes.
pub(super) fn string_choice(schema: &Value, quote: impl Fn(&str) -> Option<String>) -> Option<String> {
    let values: Vec<&Value> = match (schema.get("enum"), schema.get("const")) {
        (Some(Value::Array(items)), _) => items.iter().collect(),
        (_, Some(v)) => vec![v],
        _ => Vec::new(),
    };
    let literals = values
        .iter()
        .map(|v| v.as_str().and_then(&quote).map(|text| dumps(&Value::String(text))))
        .collect::<Option<Vec<String>>>()?;
    (!literals.is_empty()).then(|| format!("({})", literals.join(" | ")))
}

/// Whether a property's schema is a string's (`"type": "string"`, or an `enum`/`const` of
/// strings only).
pub(super) fn is_string_schema(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "string",
        Some(_) => false,
        None => ["enum", "const"].iter().any(|k| match schema.get(*k) {
            Some(Value::Array(items)) => !items.is_empty() && items.iter().all(Value::is_string),
            Some(v) => v.is_string(),
            None => false,
        }),
    }
}

/// GLM-4.5's calls: `<tool_call>name`, `<arg_key>`/`<arg_value>` pairs (whitespace between),
/// `</tool_call>`, any number, text around them allowed. A value is raw text where `tools`
/// says the argument is a string, else JSON where it parses, else text.
fn parse_glm_xml(text: &str, tools: &[Tool]) -> Option<ParsedReply> {
    parse_blocks(text, |inner| glm_xml_call(inner, tools))
}

/// One GLM-4.5 call's inside: its name, then its argument pairs and nothing else.
fn glm_xml_call(inner: &str, tools: &[Tool]) -> Option<ParsedCall> {
    let name_end = inner.find(ARG_KEY.0).unwrap_or(inner.len());
    let name = inner[..name_end].trim();
    let mut args = XmlArgs::of(name, tools)?;
    let mut rest = inner[name_end..].trim_start();
    while !rest.is_empty() {
        let (key, after) = between(rest, ARG_KEY)?;
        let (raw, after) = between(after.trim_start(), ARG_VALUE)?;
        args.insert(key.trim(), raw);
        rest = after.trim_start();
    }
    args.call()
}

/// The arguments of a call in a format that writes each value as raw text (GLM-4.5's,
/// Qwen3-Coder's): typed by the offered tool's schema, raw text for a string argument (even
/// one that reads as JSON), JSON where it parses for the others (all of them without the tool),
/// else text.
pub(super) struct XmlArgs<'a> {
    name: &'a str,
    props: Option<&'a serde_json::Map<String, Value>>,
    args: serde_json::Map<String, Value>,
}

impl<'a> XmlArgs<'a> {
    /// A call of `name` (`None` unless it is a function name) among `tools`.
    pub(super) fn of(name: &'a str, tools: &'a [Tool]) -> Option<Self> {
        if name.is_empty() || !name.chars().all(is_name_char) {
            return None;
        }
        let props = tools
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| t.parameters.get("properties"))
            .and_then(Value::as_object);
        Some(Self {
            name,
            props,
            args: serde_json::Map::new(),
        })
    }

    /// Argument `key` with the raw text `raw`. Python's `True`, `False` and `None` (what a
    /// template rendered by Python writes for them, so what the model learned) read as JSON's.
    pub(super) fn insert(&mut self, key: &str, raw: &str) {
        let is_string = self.props.and_then(|p| p.get(key)).is_some_and(is_string_schema);
        let python = match raw.trim() {
            "True" => Some(Value::Bool(true)),
            "False" => Some(Value::Bool(false)),
            "None" => Some(Value::Null),
            _ => None,
        };
        let value = match (serde_json::from_str::<Value>(raw), python) {
            (Ok(v), _) if !is_string => v,
            (_, Some(v)) if !is_string => v,
            _ => Value::String(raw.to_owned()),
        };
        self.args.insert(key.to_owned(), value);
    }

    pub(super) fn call(self) -> Option<ParsedCall> {
        call_of(&json!({"name": self.name, "arguments": Value::Object(self.args)}))
    }
}

/// Whether `template` reads the `tools` variable at all (a word `tools`, not `tool_calls`): one
/// that renders earlier calls but never the offered tools (DeepSeek-R1's distills') would leave
/// the model unaware of them, so hearth describes them itself ([`ToolFormat::Injected`]).
fn reads_tools(template: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    template.match_indices("tools").any(|(at, _)| {
        !word(template[..at].chars().next_back()) && !word(template[at + "tools".len()..].chars().next())
    })
}

/// The Lark rule of one argument's value in the XML formats whose values are raw text
/// (Qwen3-Coder's, MiniMax-M2's): a string's as text without `</` (code with `<` in it passes), a
/// string enum's as one of its values, any other as its JSON under `schema`.
pub(super) fn xml_value_rule(schema: &Value) -> String {
    if !is_string_schema(schema) {
        return json_value_rule(schema);
    }
    match string_value_rule(schema).as_str() {
        "/[^<]*/" => r"/([^<]|<[^\/])*/".to_owned(),
        literals => literals.to_owned(),
    }
}

/// The required arguments of `tool`'s schema, in the schema's order, each with its schema: what
/// a forced call of an XML format writes.
pub(super) fn required_args(tool: &Tool) -> Vec<(&String, &Value)> {
    let required: Vec<&str> = match tool.parameters.get("required").and_then(Value::as_array) {
        Some(r) => r.iter().filter_map(Value::as_str).collect(),
        None => Vec::new(),
    };
    let props = tool.parameters.get("properties").and_then(Value::as_object);
    props.into_iter().flatten().filter(|(k, _)| required.contains(&k.as_str())).collect()
}

/// A Lark rule item for JSON valid under `schema`, laid out as the templates' `tojson` writes it.
pub(super) fn json_value_rule(schema: &Value) -> String {
    let mut schema = schema.clone();
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("x-guidance".into(), json_layout());
    }
    format!("%json {schema}")
}

/// `text` starting with `open`: what lies before `close`, and what follows it.
fn between<'a>(text: &'a str, (open, close): (&str, &str)) -> Option<(&'a str, &'a str)> {
    let inner = text.strip_prefix(open)?;
    let end = inner.find(close)?;
    Some((&inner[..end], &inner[end + close.len()..]))
}

/// GLM-4's call: a function's name alone on the first line (spaces around it allowed), then one
/// JSON object, its arguments, and nothing else.
fn parse_glm4(text: &str) -> Option<ParsedReply> {
    let (name, args) = text.trim().split_once('\n')?;
    let name = name.trim();
    if name.is_empty() || !name.chars().all(is_name_char) {
        return None;
    }
    let args = serde_json::from_str::<Value>(args.trim()).ok()?;
    Some(ParsedReply {
        content: String::new(),
        calls: vec![call_of(&json!({"name": name, "arguments": args}))?],
    })
}

/// A character of a function name (OpenAI's rule, which the server checks a request's tools by).
pub(super) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// A streamed reply's text when tools are offered: text goes out as it comes until a call may
/// have begun, then everything is held for [`ToolStream::finish`] to parse.
#[derive(Debug)]
pub struct ToolStream {
    format: ToolFormat,
    /// Everything so far.
    text: String,
    /// How much of `text` went out as content.
    sent: usize,
    /// A call began: nothing more goes out until the end.
    holding: bool,
    /// The offered tools, whose schemas type GLM-4.5's and Qwen3-Coder's values
    /// ([`ToolFormat::parse_for`]).
    tools: Vec<Tool>,
}

impl ToolStream {
    pub fn new(format: ToolFormat) -> Self {
        Self::with_tools(format, Vec::new())
    }

    /// A stream whose calls are read knowing the offered `tools`.
    pub fn with_tools(format: ToolFormat, tools: Vec<Tool>) -> Self {
        Self {
            format,
            text: String::new(),
            sent: 0,
            holding: false,
            tools,
        }
    }

    /// The format the calls are parsed in.
    pub fn format(&self) -> ToolFormat {
        self.format
    }

    /// Adds a piece of the reply; returns the text that can go out as content now.
    pub fn push(&mut self, piece: &str) -> String {
        self.text.push_str(piece);
        if self.holding {
            return String::new();
        }
        let safe = match self.format {
            ToolFormat::Hermes | ToolFormat::Injected | ToolFormat::GlmXml { .. } => match self.text[self.sent..].find(OPEN) {
                Some(at) => {
                    self.holding = true;
                    self.sent + at
                }
                None => self.text.len() - partial_suffix(&self.text[self.sent..], OPEN),
            },
            ToolFormat::Mistral { named: true } => {
                let start = self.text.trim_start();
                let name_len = start.find(|c: char| !is_name_char(c)).unwrap_or(start.len());
                if name_len == start.len() {
                    // Only a name (or nothing) yet: it may still become a call.
                    self.sent
                } else if name_len > 0 && start[name_len..].starts_with('{') {
                    self.holding = true;
                    self.sent
                } else {
                    self.text.len()
                }
            }
            ToolFormat::QwenXml { .. }
            | ToolFormat::Harmony
            | ToolFormat::Gemma4
            | ToolFormat::Lfm2
            | ToolFormat::Cohere
            | ToolFormat::MinimaxXml
            | ToolFormat::JsonList(_)
            | ToolFormat::DeepSeek { .. } => match self.format.call_start(&self.text[self.sent..]) {
                Ok(at) => {
                    self.holding = true;
                    self.sent + at
                }
                Err(held) => self.text.len() - held,
            },
            ToolFormat::Glm4 => {
                let start = self.text.trim_start();
                let line_end = start.find('\n');
                let first = start[..line_end.unwrap_or(start.len())].trim_end();
                match line_end {
                    // Words with spaces, or punctuation: text.
                    _ if !first.chars().all(is_name_char) => self.text.len(),
                    // Only a name (or nothing) yet: it may still become a call.
                    None => self.sent,
                    Some(at) => {
                        let rest = start[at..].trim_start();
                        if first.is_empty() || !(rest.is_empty() || rest.starts_with('{')) {
                            self.text.len()
                        } else {
                            self.holding = rest.starts_with('{');
                            self.sent
                        }
                    }
                }
            }
            ToolFormat::Json { .. } | ToolFormat::Mistral { named: false } | ToolFormat::Granite => {
                let start = self.text.trim_start();
                if may_be_json_call(start) {
                    // A reply that is (or may still become) a JSON call: hold it all.
                    self.holding = !start.is_empty() && !is_partial_call_tag(start);
                    self.sent
                } else {
                    self.text.len()
                }
            }
        };
        let out = self.text[self.sent..safe].to_owned();
        self.sent = safe;
        out
    }

    /// The end of the reply: the calls, if what was held parses as calls (`content` is the
    /// text not yet sent), else the held text as content and no calls.
    pub fn finish(self) -> ParsedReply {
        let rest = self.text[self.sent..].to_owned();
        match self.format.parse_for(&self.text, &self.tools) {
            Some(parsed) => ParsedReply {
                content: parsed_rest(&self.text[..self.sent], &parsed.content),
                calls: parsed.calls,
            },
            None => ParsedReply {
                content: rest,
                calls: Vec::new(),
            },
        }
    }
}

/// Llama 3.1's marker before a call (a special token, so usually not in the text at all).
const PYTHON_TAG: &str = "<|python_tag|>";

/// `text` trimmed, without a leading marker of a JSON call (Llama 3.1's python tag, Granite's
/// `<|tool_call|>`), trimmed again.
fn strip_call_tag(text: &str) -> &str {
    let text = text.trim();
    [PYTHON_TAG, GRANITE_CALL]
        .iter()
        .find_map(|tag| text.strip_prefix(tag))
        .map_or(text, str::trim)
}

/// Whether `start` is (a start of) a JSON call's marker and nothing more.
fn is_partial_call_tag(start: &str) -> bool {
    [PYTHON_TAG, GRANITE_CALL].iter().any(|tag| tag.starts_with(start))
}

/// Whether a reply that starts with `start` (trimmed) may be a JSON call: an object, a list of
/// objects, the python tag, or too little to tell.
fn may_be_json_call(start: &str) -> bool {
    let start = strip_call_tag(start);
    if start.is_empty() || start.starts_with('{') || is_partial_call_tag(start) {
        return true;
    }
    match start.strip_prefix('[') {
        Some(rest) => {
            let rest = rest.trim_start();
            rest.is_empty() || rest.starts_with('{')
        }
        None => false,
    }
}

/// The part of a parsed reply's trimmed text that was not streamed already.
fn parsed_rest(sent: &str, content: &str) -> String {
    let sent = sent.trim();
    content.strip_prefix(sent).unwrap_or("").to_owned()
}

/// The length of the longest end of `text` that is a proper start of `tag`.
pub(super) fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}

/// The assistant's call of `name` with `arguments` (id `c1`) and the tool's `result` after it,
/// the history the formats' tests render back.
#[cfg(test)]
pub(super) fn call_then_result(name: &str, arguments: &str, result: &str) -> [Message; 2] {
    let mut call = Message::assistant("");
    call.tool_calls = vec![super::ToolCall {
        id: "c1".into(),
        name: name.into(),
        arguments: arguments.into(),
    }];
    let mut answer = Message::new(Role::parse("tool"), result);
    answer.tool_call_id = Some("c1".into());
    [call, answer]
}

/// A weather tool (a string and an integer, both required), for the formats' tests.
#[cfg(test)]
pub(super) fn weather_tool() -> Tool {
    Tool {
        name: "get_weather".into(),
        description: Some("The weather in a city.".into()),
        parameters: json!({"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"]}),
    }
}

/// Asserts that of the template fixtures exactly those whose file names start with one of
/// `prefixes` are read as a format `is_format` accepts.
#[cfg(test)]
pub(super) fn assert_only_fixtures_are(prefixes: &[&str], is_format: impl Fn(ToolFormat) -> bool) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/model/chat/fixtures");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let source = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(is_format(ToolFormat::of_template(&source)), prefixes.iter().any(|p| name.starts_with(p)), "{name}");
    }
}

/// A tool whose arguments take code (the XML formats' tests): `path` and `content` strings
/// (required), an integer, an object, and a string enum.
#[cfg(test)]
pub(super) fn write_tool() -> Tool {
    Tool {
        name: "write_file".into(),
        description: Some("Writes a file.".into()),
        parameters: json!({"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}, "lines": {"type": "integer"},
            "opts": {"type": "object"}, "mode": {"enum": ["a", "w"]}}, "required": ["path", "content"]}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: ToolFormat = ToolFormat::Json { args: "parameters" };

    fn tool(name: &str) -> Tool {
        Tool {
            name: name.into(),
            description: None,
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }
    }

    #[test]
    fn formats_come_from_the_template() {
        let qwen = include_str!("fixtures/qwen2.5-instruct.jinja");
        assert_eq!(ToolFormat::of_template(qwen), ToolFormat::Hermes);
        let smol = include_str!("fixtures/smollm2-instruct.jinja");
        assert_eq!(ToolFormat::of_template(smol), ToolFormat::Injected);
        let llama31 = "{% if tools %}{% endif %}{% for m in messages %}{% if m.role == 'ipython' %}{% endif %}{{ '\"parameters\": ' }}{% endfor %}";
        assert_eq!(ToolFormat::of_template(llama31), ToolFormat::Json { args: "parameters" });
        let gpt_oss = include_str!("fixtures/openai-gpt-oss-120b.jinja");
        assert_eq!(ToolFormat::of_template(gpt_oss), ToolFormat::Harmony);
        // No other template of the fixtures is harmony's.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/model/chat/fixtures");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let source = std::fs::read_to_string(&path).unwrap();
            let harmony = ToolFormat::of_template(&source) == ToolFormat::Harmony;
            assert_eq!(harmony, source == gpt_oss, "{}", path.display());
        }
    }

    #[test]
    fn hermes_calls_parse_and_anything_else_stays_text() {
        let text = "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        let p = ToolFormat::Hermes.parse(text).unwrap();
        assert_eq!(p.content, "Let me look.");
        assert_eq!(
            p.calls,
            vec![ParsedCall {
                name: "weather".into(),
                arguments: "{\"city\":\"Paris\"}".into()
            }]
        );
        let two = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>";
        let p = ToolFormat::Hermes.parse(two).unwrap();
        assert_eq!(p.calls.len(), 2);
        assert_eq!(p.calls[1].arguments, "{\"x\":1}");
        for not_calls in [
            "plain text",
            "<tool_call>{\"name\": \"a\", \"arguments\": {}</tool_call>",
            "<tool_call>{\"arguments\": {}}</tool_call>",
            "<tool_call>{\"name\": \"a\", \"arguments\": [1]}</tool_call>",
            "<tool_call>{\"name\": \"a\"}</tool_call> <tool_call>oops</tool_call>",
        ] {
            assert_eq!(ToolFormat::Hermes.parse(not_calls), None, "{not_calls}");
        }
        // A reply cut before its close tag still counts.
        assert!(ToolFormat::Hermes.parse("<tool_call>{\"name\": \"a\", \"arguments\": {}}").is_some());
    }

    #[test]
    fn json_calls_parse() {
        let p = JSON
            .parse("{\"name\": \"weather\", \"parameters\": {\"city\": \"Oslo\"}}")
            .unwrap();
        assert_eq!(p.calls[0].name, "weather");
        assert_eq!(p.calls[0].arguments, "{\"city\":\"Oslo\"}");
        assert_eq!(JSON.parse("The answer is {1}"), None);
        assert_eq!(JSON.parse("{\"a\": 1}"), None);
    }

    #[test]
    fn a_stream_holds_back_from_the_first_sign_of_a_call() {
        let mut s = ToolStream::new(ToolFormat::Hermes);
        let mut out = String::new();
        for piece in ["Sure", ", <tool", "_ca", "ll>\n{\"name\": \"w\", ", "\"arguments\": {}}\n</tool_call>"] {
            out.push_str(&s.push(piece));
        }
        assert_eq!(out, "Sure, ");
        let end = s.finish();
        assert_eq!(end.calls.len(), 1);
        assert_eq!(end.content, "");
        // A tag that never completes goes out as text.
        let mut s = ToolStream::new(ToolFormat::Hermes);
        let mut out = s.push("a <tool");
        out.push_str(&s.push("box> b"));
        assert_eq!(out, "a <toolbox> b");
        // Held text that is no call comes back as content.
        let mut s = ToolStream::new(ToolFormat::Hermes);
        assert_eq!(s.push("x <tool_call> nonsense"), "x ");
        let end = s.finish();
        assert_eq!((end.content.as_str(), end.calls.len()), ("<tool_call> nonsense", 0));
        let mut s = ToolStream::new(JSON);
        assert_eq!(s.push("  "), "");
        assert_eq!(s.push("{\"name\": \"w\", \"parameters\": {}}"), "");
        assert_eq!(s.finish().calls.len(), 1);
        let mut s = ToolStream::new(JSON);
        assert_eq!(s.push("Hello"), "Hello");
        let mut s = ToolStream::new(JSON);
        assert_eq!(s.push("[1] is a citation"), "[1] is a citation");
        let mut s = ToolStream::new(JSON);
        assert_eq!(s.push("<b>bold</b>"), "<b>bold</b>");
        let mut s = ToolStream::new(JSON);
        assert_eq!(s.push("[ {\"name\": \"w\", \"arguments\": {}}]"), "");
        assert_eq!(s.finish().calls.len(), 1);
    }

    #[test]
    fn the_forced_grammar_names_each_tool() {
        let none = CallMarkers::default();
        match ToolFormat::Hermes.forced_call(&[tool("a"), tool("b")], none) {
            Grammar::Lark(text) => {
                assert!(text.starts_with("start: \"<tool_call>\\n\" call"), "{text}");
                assert!(text.contains("\"anyOf\""), "{text}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(JSON.forced_call(&[tool("a")], none), Grammar::JsonSchema(_)));
    }

    /// A template written like Llama 3.1's (calls as `{"name", "parameters"}` JSON, results as
    /// `ipython` turns): a call parsed from a reply renders back to the same text.
    #[test]
    fn a_json_call_renders_back_as_the_model_wrote_it() {
        let template = concat!(
            "{%- if tools %}{{ tools | length }} tools{% endif -%}",
            "{%- for m in messages -%}",
            "{%- if m.role == 'assistant' and m.tool_calls -%}",
            "<|start_header_id|>assistant<|end_header_id|>\n\n",
            "{% for tc in m.tool_calls -%}",
            "{{ '{\"name\": \"' + tc.function.name + '\", \"parameters\": ' + (tc.function.arguments | tojson) + '}' }}",
            "{%- endfor -%}<|eot_id|>",
            "{%- elif m.role == 'tool' -%}<|start_header_id|>ipython<|end_header_id|>\n\n{{ m.content }}<|eot_id|>",
            "{%- else -%}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>",
            "{%- endif -%}{%- endfor -%}"
        );
        let format = ToolFormat::of_template(template);
        assert_eq!(format, JSON);
        let written = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": [1, 2]}}";
        let parsed = format.parse(written).unwrap();
        let mut m = Message::assistant("");
        m.tool_calls = parsed
            .calls
            .into_iter()
            .map(|c| super::super::ToolCall {
                id: "call_1".into(),
                name: c.name,
                arguments: c.arguments,
            })
            .collect();
        let t = super::super::ChatTemplate::new(template.to_owned(), None, None).unwrap();
        let rendered = t.render_with_tools(&[Message::user("hi"), m], &[tool("get_weather").to_json()], false).unwrap();
        assert!(rendered.ends_with(&format!("assistant<|end_header_id|>\n\n{written}<|eot_id|>")), "{rendered}");
    }

    #[test]
    fn injected_tools_rewrite_the_history_as_text() {
        let history = [Message::user("hi"), call("call_1"), result("call_1"), result("call_1")];
        let msgs = ToolFormat::Injected.prepare(&history, &[tool("weather")], "");
        assert_eq!(msgs.len(), 4, "two results in a row are one turn: {msgs:?}");
        assert_eq!(msgs[3].content, "<tool_response>\nsunny\n</tool_response>\n<tool_response>\nsunny\n</tool_response>");
        assert_eq!(msgs[0].role, Role::System);
        assert!(msgs[0].content.contains("<tools>\n{\"type\": \"function\""), "{}", msgs[0].content);
        assert_eq!(
            msgs[2].content,
            "<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
        );
        assert_eq!(msgs[3].role, Role::User);
    }

    /// Gemma's templates know no tools and refuse two user turns in a row (and Gemma 2's a
    /// system message): a history of a call, its result and the user's next words renders,
    /// the result and those words one user turn, the tools' description in the first.
    #[test]
    fn injected_tools_render_through_gemmas_alternating_templates() {
        let history = [
            Message::system("Be brief."),
            Message::user("hi"),
            call("call_1"),
            result("call_1"),
            Message::user("and tomorrow?"),
        ];
        for source in [include_str!("fixtures/google-gemma-2-2b-it.jinja"), super::super::template::GEMMA3_TEMPLATE] {
            assert_eq!(ToolFormat::of_template(source), ToolFormat::Injected);
            let msgs = ToolFormat::Injected.prepare(&history, &[tool("weather")], source);
            let t = super::super::ChatTemplate::new(source.to_owned(), Some("<bos>".into()), None).unwrap();
            let out = t.render(&msgs, true).unwrap();
            assert!(out.starts_with("<bos><start_of_turn>user\nBe brief.\n"), "{out}");
            assert!(out.contains("<tools>"), "{out}");
            assert!(
                out.ends_with(
                    "<start_of_turn>user\n<tool_response>\nsunny\n</tool_response>\nand tomorrow?<end_of_turn>\n\
                     <start_of_turn>model\n"
                ),
                "{out}"
            );
        }
    }

    /// DeepSeek-R1's distills' template (llama.cpp's copy) renders earlier calls in its own
    /// tokens but never the offered tools: hearth describes them in the system text (which the
    /// template writes first) and writes the history's calls and results as that text, so the
    /// model sees the tools and what it called.
    #[test]
    fn a_template_that_never_reads_the_tools_gets_them_described() {
        let src = include_str!("fixtures/deepseek-r1-distill-qwen-32b.jinja");
        assert!(src.contains("tool_calls") && !reads_tools(src));
        assert_eq!(ToolFormat::of_template(src), ToolFormat::Injected);
        assert!(reads_tools("{% if tools %}") && reads_tools("{{ custom_tools }}{{ tools | length }}"));
        assert!(!reads_tools("{{ custom_tools }} toolset mytools"));
        let history = [Message::user("Weather in Paris?"), call("c1"), result("c1")];
        let msgs = ToolFormat::Injected.prepare(&history, &[tool("weather")], src);
        let t = super::super::ChatTemplate::new(src.to_owned(), Some("<｜begin▁of▁sentence｜>".into()), None).unwrap();
        let out = t.render(&msgs, true).unwrap();
        assert!(out.starts_with("<｜begin▁of▁sentence｜># Tools\n"), "{out}");
        assert!(out.contains("\"name\": \"weather\""), "{out}");
        assert!(out.contains("<｜Assistant｜><tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"), "{out}");
        assert!(out.contains("<tool_response>\nsunny\n</tool_response>"), "{out}");
    }

    #[test]
    fn a_hermes_template_that_renders_no_calls_gets_them_in_the_content() {
        // SmolLM3's official template offers tools and asks for `<tool_call>` blocks, but
        // renders an assistant turn as its content alone (and a tool result as a user turn).
        let smol_like = "{%- for m in messages -%}<|im_start|>{{ m.role }}\n{{ m.content if m.content is string else '' }}<|im_end|>\n{%- endfor -%}\
                         {%- if tools %}For each function call, return <tool_call></tool_call>{% endif -%}";
        assert_eq!(ToolFormat::of_template(smol_like), ToolFormat::Hermes);
        let mut thinking = call("call_1");
        thinking.content = "Let me look.".into();
        let mut result = Message::new(Role::parse("tool"), "sunny");
        result.tool_call_id = Some("call_1".into());
        let history = [Message::user("hi"), thinking, result.clone()];
        let msgs = ToolFormat::Hermes.prepare(&history, &[tool("weather")], smol_like);
        assert_eq!(
            msgs[1].content,
            "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
        );
        assert!(msgs[1].tool_calls.is_empty());
        assert_eq!((msgs.len(), &msgs[2]), (3, &result), "results and the rest stay as they are");
        // A template that renders `tool_calls` itself (Qwen's) gets the messages as they are.
        let qwen = include_str!("fixtures/qwen2.5-instruct.jinja");
        assert_eq!(ToolFormat::Hermes.prepare(&history, &[tool("weather")], qwen), history.to_vec());
    }

    fn call(id: &str) -> Message {
        let mut m = Message::assistant("");
        m.tool_calls.push(super::super::ToolCall {
            id: id.into(),
            name: "weather".into(),
            arguments: "{\"city\":\"Paris\"}".into(),
        });
        m
    }

    fn result(id: &str) -> Message {
        let mut m = Message::new(Role::parse("tool"), "sunny");
        m.tool_call_id = Some(id.into());
        m
    }

    /// Mistral's real templates (verbatim, `fixtures/`): their format, and a conversation with a
    /// call and its result renders with the ids `call_id` makes, where OpenAI-style ids are
    /// refused by those that check them.
    #[test]
    fn mistral_templates_take_their_calls_and_ids() {
        let cases = [
            (include_str!("fixtures/mistral-nemo-instruct-2407.jinja"), false, "[TOOL_CALLS][{\"name\": \"weather\"", true),
            (include_str!("fixtures/mistral-small-3.2-24b-instruct-2506.jinja"), true, "[TOOL_CALLS]weather[CALL_ID]", true),
            (include_str!("fixtures/devstral-small-2507-unsloth.jinja"), true, "[TOOL_CALLS]weather[ARGS]{", false),
            (include_str!("fixtures/ministral-3-14b-reasoning-2512.jinja"), true, "[TOOL_CALLS]weather[ARGS]{", false),
        ];
        for (i, (src, named, expect, checks_ids)) in cases.into_iter().enumerate() {
            let format = ToolFormat::of_template(src);
            assert_eq!(format, ToolFormat::Mistral { named }, "template {i}");
            let id = format.call_id();
            assert!(id.len() == 9 && id.chars().all(|c| c.is_ascii_alphanumeric()), "{id}");
            assert_ne!(id, format.call_id());
            let t = super::super::ChatTemplate::new(src.to_owned(), Some("<s>".into()), Some("</s>".into())).unwrap();
            let tools = [tool("weather").to_json()];
            let history = |id: &str| [Message::user("Weather in Paris?"), call(id), result(id)];
            let rendered = t.render_with_tools(&history(&id), &tools, true).unwrap();
            assert!(rendered.contains(expect) && rendered.contains("sunny"), "template {i}: {rendered}");
            let openai_id = ToolFormat::Hermes.call_id();
            assert_eq!(t.render_with_tools(&history(&openai_id), &tools, true).is_err(), checks_ids, "template {i}");
        }
    }

    #[test]
    fn mistral_named_calls_parse_and_anything_else_stays_text() {
        let f = ToolFormat::Mistral { named: true };
        let p = f.parse("weather{\"city\": \"Paris\"}").unwrap();
        assert_eq!(
            p.calls,
            vec![ParsedCall {
                name: "weather".into(),
                arguments: "{\"city\":\"Paris\"}".into()
            }]
        );
        let two = f.parse(" a{} b_2{\"x\": [1, {\"y\": \"}\"}]}\n").unwrap();
        assert_eq!(two.calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["a", "b_2"]);
        assert_eq!(two.calls[1].arguments, "{\"x\":[1,{\"y\":\"}\"}]}");
        for text in ["Hello there", "weather{not json", "weather{} and then text", "{\"city\": 1}", "weather [1]", ""] {
            assert_eq!(f.parse(text), None, "{text:?}");
        }
        // The list form (Mistral Nemo) reads as JSON.
        let nemo = ToolFormat::Mistral { named: false };
        let p = nemo.parse("[{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}]").unwrap();
        assert_eq!(p.calls[0].name, "weather");
    }

    #[test]
    fn mistral_named_stream_holds_a_leading_name_until_it_is_told() {
        let f = ToolFormat::Mistral { named: true };
        let mut s = ToolStream::new(f);
        assert_eq!(s.push("wea"), "");
        assert_eq!(s.push("ther"), "");
        assert_eq!(s.push("{\"city\": "), "");
        assert_eq!(s.push("\"Paris\"}"), "");
        let done = s.finish();
        assert_eq!((done.content.as_str(), done.calls.len()), ("", 1));

        let mut s = ToolStream::new(f);
        assert_eq!(s.push("Hello"), "");
        assert_eq!(s.push(" world"), "Hello world");
        assert_eq!(s.push("{x}"), "{x}");
        let done = s.finish();
        assert!(done.calls.is_empty() && done.content.is_empty());
    }

    #[test]
    fn mistral_forced_call_is_a_name_then_its_arguments() {
        let named = ToolFormat::Mistral { named: true };
        let list = ToolFormat::Mistral { named: false };
        let tools = [tool("weather"), tool("time")];
        let Grammar::Lark(g) = named.forced_call(&tools, CallMarkers::default()) else {
            panic!("not a Lark grammar")
        };
        assert!(g.starts_with("start: c0 | c1\n"), "{g}");
        assert!(g.contains("c0: \"weather\" %json {") && g.contains("c1: \"time\" %json {"), "{g}");
        assert!(matches!(list.forced_call(&tools[..1], CallMarkers::default()), Grammar::JsonSchema(_)));
        // With the vocabulary's special tokens, the call is written as the model writes it.
        let ids = |t: &str| match t {
            "[TOOL_CALLS]" => Some(9),
            "[ARGS]" => Some(32),
            _ => None,
        };
        let markers = named.markers(ids);
        assert_eq!(markers, CallMarkers { calls: Some(9), args: Some(32), end: None, ..CallMarkers::default() });
        let Grammar::Lark(g) = named.forced_call(&tools, markers) else {
            panic!("not a Lark grammar")
        };
        assert!(g.contains("c0: <[9]> \"weather\" <[32]> %json {"), "{g}");
        assert_eq!(list.markers(ids), CallMarkers { calls: Some(9), args: None, end: None, ..CallMarkers::default() });
        let Grammar::Lark(g) = list.forced_call(&tools[..1], list.markers(ids)) else {
            panic!("not a Lark grammar")
        };
        assert!(g.starts_with("start: <[9]> \"[\" call \"]\"\ncall: %json {"), "{g}");
        assert_eq!(ToolFormat::Hermes.markers(ids), CallMarkers::default());
    }

    /// GLM-Z1-9B-0414's template (as a public project quotes it, pretty-printed: the same
    /// statements as the model's `tokenizer_config.json`), in `fixtures/`.
    const GLM_Z1: &str = include_str!("fixtures/glm-z1-9b-0414.jinja");

    #[test]
    fn glm4_calls_parse_and_anything_else_stays_text() {
        assert_eq!(ToolFormat::of_template(GLM_Z1), ToolFormat::Glm4);
        let f = ToolFormat::Glm4;
        let p = f.parse("weather\n{\"city\": \"Paris\"}").unwrap();
        assert_eq!(p.calls, vec![ParsedCall { name: "weather".into(), arguments: "{\"city\":\"Paris\"}".into() }]);
        assert!(p.content.is_empty());
        // Space around the name (its template writes one after it), a leading newline.
        assert_eq!(f.parse("\n weather \n {\"city\": \"Paris\"}\n").unwrap().calls[0].name, "weather");
        for text in ["\nHello there", "Hello\nworld", "weather\n{\"city\": 1} and more", "two words\n{}", "weather {}", "weather\n[1]"] {
            assert_eq!(f.parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn glm4_stream_holds_a_first_line_that_may_be_a_name() {
        let f = ToolFormat::Glm4;
        let mut s = ToolStream::new(f);
        assert_eq!(s.push("wea"), "");
        assert_eq!(s.push("ther\n"), "");
        assert_eq!(s.push("{\"city\": "), "");
        assert_eq!(s.push("\"Paris\"}"), "");
        let done = s.finish();
        assert_eq!((done.content.as_str(), done.calls.len()), ("", 1));
        // A reply: out as soon as its first line is not a name, or what follows a name is not
        // JSON.
        let mut s = ToolStream::new(f);
        assert_eq!(s.push("\n"), "");
        assert_eq!(s.push("Hello"), "");
        assert_eq!(s.push(" there"), "\nHello there");
        assert_eq!(s.push("\n{x}"), "\n{x}");
        let mut s = ToolStream::new(f);
        assert_eq!(s.push("Sure\n"), "");
        assert_eq!(s.push("I can"), "Sure\nI can");
        let done = s.finish();
        assert!(done.calls.is_empty() && done.content.is_empty());
    }

    #[test]
    fn glm4_forced_call_is_a_name_a_newline_and_its_arguments() {
        let tools = [tool("weather"), tool("time")];
        let Grammar::Lark(g) = ToolFormat::Glm4.forced_call(&tools, CallMarkers::default()) else {
            panic!("not a Lark grammar")
        };
        assert!(g.starts_with("start: c0 | c1\n"), "{g}");
        assert!(g.contains("c0: \"weather\" \"\\n\" %json {") && g.contains("c1: \"time\" \"\\n\" %json {"), "{g}");
    }

    /// A call and its result go back through GLM's template as it renders them: the call an
    /// assistant turn with the name as `metadata` and the arguments as content, the result an
    /// `observation` turn; text beside the calls a turn of its own. The tools are listed by the
    /// template.
    #[test]
    fn glm4_history_renders_calls_and_results_as_its_template_writes_them() {
        let t = super::super::ChatTemplate::new(GLM_Z1.to_owned(), None, Some("<|endoftext|>".into())).unwrap();
        let mut said = call("c1");
        said.content = "Let me look.".into();
        let history = [Message::user("Weather in Paris?"), said, result("c1")];
        let prepared = ToolFormat::Glm4.prepare(&history, &[tool("weather")], GLM_Z1);
        let roles: Vec<&str> = prepared.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "assistant", "observation"]);
        assert_eq!((prepared[2].metadata.as_deref(), prepared[2].content.as_str()), (Some("weather"), "{\"city\": \"Paris\"}"));
        let out = t.render_with_tools(&prepared, &[tool("weather").to_json()], true).unwrap();
        assert!(out.starts_with("[gMASK]<sop><|system|>\n"), "{out}");
        assert!(out.contains("# 可用工具\n## weather\n\n{\n    \"name\": \"weather\""), "{out}");
        assert!(
            out.ends_with(
                "<|user|>\nWeather in Paris?<|assistant|>\nLet me look.<|assistant|>weather\n{\"city\": \"Paris\"}\
                 <|observation|>\nsunny<|assistant|>\n<think>"
            ),
            "{out}"
        );
        // Without the preparation the template would drop both (it renders no `tool` role and no
        // `tool_calls`).
        let raw = t.render_with_tools(&history, &[tool("weather").to_json()], true).unwrap();
        assert!(!raw.contains("sunny") && !raw.contains("Paris\"}"), "{raw}");
    }

    /// GLM-4.6's template as llama.cpp keeps it (`models/templates/GLM-4.6.jinja`, verbatim):
    /// its `<arg_key>`/`<arg_value>` calls; a conversation with a call and its result renders
    /// through it in that format, which parses back into the call.
    #[test]
    fn glm46_template_renders_calls_and_results_in_its_own_format() {
        let src = include_str!("fixtures/glm-4.6.jinja");
        assert_eq!(ToolFormat::of_template(src), ToolFormat::GlmXml { compact: false });
        let t = super::super::ChatTemplate::new(src.to_owned(), None, Some("<|endoftext|>".into())).unwrap();
        let history = [Message::user("Weather in Paris?"), call("c1"), result("c1")];
        let out = t.render_with_tools(&history, &[tool("weather").to_json()], true).unwrap();
        assert!(out.starts_with("[gMASK]<sop><|system|>\n# Tools\n"), "{out}");
        assert!(
            out.contains("<|assistant|>\n<think></think>\n<tool_call>weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"),
            "{out}"
        );
        assert!(out.ends_with("<|observation|>\n<tool_response>\nsunny\n</tool_response><|assistant|>"), "{out}");
        assert_eq!(ToolFormat::Hermes.parse("<tool_call>weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"), None);
        let written = "<tool_call>weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>";
        let p = ToolFormat::GlmXml { compact: false }.parse_for(written, &[tool("weather")]).unwrap();
        assert_eq!(p.calls, vec![ParsedCall { name: "weather".into(), arguments: "{\"city\":\"Paris\"}".into() }]);
    }

    /// GLM-4.7-Flash's template as llama.cpp keeps it (`models/templates/GLM-4.7-Flash.jinja`,
    /// verbatim): the same format with nothing between its parts, which renders, parses back and
    /// is what a forced call writes; the prompt ends inside the reasoning.
    #[test]
    fn glm47_template_writes_calls_compactly() {
        let src = include_str!("fixtures/glm-4.7-flash.jinja");
        let f = ToolFormat::of_template(src);
        assert_eq!(f, ToolFormat::GlmXml { compact: true });
        let t = super::super::ChatTemplate::new(src.to_owned(), None, Some("<|endoftext|>".into())).unwrap();
        let history = [Message::user("Weather in Paris?"), call("c1"), result("c1")];
        let out = t.render_with_tools(&history, &[tool("weather").to_json()], true).unwrap();
        let written = "<tool_call>weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>";
        assert!(out.contains(&format!("<|assistant|></think>{written}")), "{out}");
        assert!(out.ends_with("<|observation|><tool_response>sunny</tool_response><|assistant|><think>"), "{out}");
        let p = f.parse_for(written, &[tool("weather")]).unwrap();
        assert_eq!(p.calls, vec![ParsedCall { name: "weather".into(), arguments: "{\"city\":\"Paris\"}".into() }]);
        let mut w = tool("weather");
        w.parameters = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
        let Grammar::Lark(g) = f.forced_call(&[w], CallMarkers::default()) else { panic!("not a Lark grammar") };
        assert!(g.contains("\"<tool_call>weather\" \"<arg_key>city</arg_key><arg_value>\""), "{g}");
        assert!(g.ends_with("\"</arg_value>\" \"</tool_call>\""), "{g}");
    }

    /// Seed-OSS's template as llama.cpp keeps it (`models/templates/ByteDance-Seed-OSS.jinja`,
    /// verbatim): Qwen3-Coder's XML inside `<seed:tool_call>`, each value on its parameter's
    /// line, which renders, parses back and is what a forced call writes; its reasoning tags.
    #[test]
    fn seed_oss_template_writes_calls_in_its_wrapper() {
        let src = include_str!("fixtures/bytedance-seed-oss.jinja");
        let f = ToolFormat::of_template(src);
        assert_eq!(f, ToolFormat::QwenXml { seed: true });
        assert_eq!(super::super::reasoning::Reasoning::tags_in_template(src), Some(super::super::reasoning::ThinkTags::Seed));
        let t = super::super::ChatTemplate::new(src.to_owned(), None, Some("<seed:eos>".into())).unwrap();
        let history = [Message::user("Weather in Paris?"), call("c1"), result("c1")];
        let out = t.render_with_tools(&history, &[tool("weather").to_json()], true).unwrap();
        let written = "<seed:tool_call>\n<function=weather>\n<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call>";
        assert!(out.contains(&format!("<seed:bos>assistant\n{written}<seed:eos>")), "{out}");
        assert!(out.ends_with("<seed:bos>tool\nsunny<seed:eos><seed:bos>assistant\n"), "{out}");
        let p = f.parse_for(&format!("Checking.\n{written}"), &[tool("weather")]).unwrap();
        assert_eq!(p.content, "Checking.");
        assert_eq!(p.calls, vec![ParsedCall { name: "weather".into(), arguments: "{\"city\":\"Paris\"}".into() }]);
        let mut w = tool("weather");
        w.parameters = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
        let Grammar::Lark(g) = f.forced_call(&[w], CallMarkers::default()) else { panic!("not a Lark grammar") };
        assert!(g.contains("\"<seed:tool_call>\" \"\\n<function=weather>\\n\" \"<parameter=city>\""), "{g}");
        assert!(g.ends_with("\"</parameter>\\n\" \"</function>\\n\" \"</seed:tool_call>\""), "{g}");
    }

    /// GLM-4.5's values: raw text for a string argument (even one that reads as JSON), JSON
    /// for the others; several calls with text around them; anything malformed stays text.
    #[test]
    fn glm_xml_calls_parse_by_the_tools_schemas() {
        let t = Tool {
            name: "write".into(),
            description: None,
            parameters: json!({"type": "object", "properties": {
                "path": {"type": "string"}, "content": {"type": "string"}, "mode": {"enum": ["a", "w"]},
                "lines": {"type": "integer"}, "opts": {"type": "object"}}}),
        };
        let text = "Writing.\n<tool_call>write\n<arg_key>path</arg_key>\n<arg_value>123</arg_value>\n\
                    <arg_key>content</arg_key>\n<arg_value>{\"a\": 1}</arg_value>\n<arg_key>mode</arg_key>\n<arg_value>w</arg_value>\n\
                    <arg_key>lines</arg_key>\n<arg_value>42</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{\"x\": true}</arg_value>\n\
                    </tool_call>\n<tool_call>write\n</tool_call>";
        let p = ToolFormat::GlmXml { compact: false }.parse_for(text, std::slice::from_ref(&t)).unwrap();
        assert_eq!(p.content, "Writing.");
        let args: Value = serde_json::from_str(&p.calls[0].arguments).unwrap();
        assert_eq!(args, json!({"path": "123", "content": "{\"a\": 1}", "mode": "w", "lines": 42, "opts": {"x": true}}));
        assert_eq!(p.calls[1].arguments, "{}");
        // Without the schemas, JSON where it parses.
        let p = ToolFormat::GlmXml { compact: false }.parse(text).unwrap();
        let args: Value = serde_json::from_str(&p.calls[0].arguments).unwrap();
        assert_eq!((&args["path"], &args["mode"]), (&json!(123), &json!("w")));
        for bad in ["<tool_call>two words\n</tool_call>", "<tool_call>f\n<arg_key>a</arg_key>stray</tool_call>", "<tool_call>f\n<arg_key>a</arg_key>\n</tool_call>"] {
            assert_eq!(ToolFormat::GlmXml { compact: false }.parse(bad), None, "{bad:?}");
        }
        // Streamed: held from `<tool_call>`, read with the schemas at the end.
        let mut s = ToolStream::with_tools(ToolFormat::GlmXml { compact: false }, vec![t]);
        assert_eq!(s.push("Writing.\n<tool"), "Writing.\n");
        assert_eq!(s.push("_call>write\n<arg_key>path</arg_key><arg_value>7</arg_value></tool_call>"), "");
        let done = s.finish();
        assert_eq!(done.calls[0].arguments, "{\"path\":\"7\"}");
    }

    /// GLM-4.5's forced call: the required arguments, strings as text, the others as JSON.
    #[test]
    fn glm_xml_forced_call_writes_each_required_argument() {
        let mut t = tool("weather");
        t.parameters = json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "note": {"type": "string"}}, "required": ["city", "days"]});
        let Grammar::Lark(g) = ToolFormat::GlmXml { compact: false }.forced_call(&[t], CallMarkers::default()) else {
            panic!("not a Lark grammar")
        };
        assert!(g.starts_with("start: c0\nc0: \"<tool_call>weather\" \"\\n<arg_key>city</arg_key>\\n<arg_value>\" /[^<]*/ \"</arg_value>\" "), "{g}");
        assert!(g.contains("\"\\n<arg_key>days</arg_key>\\n<arg_value>\" %json {") && !g.contains("note"), "{g}");
        assert!(g.ends_with("\"</arg_value>\" \"\\n</tool_call>\""), "{g}");
    }

    /// Granite 3.x's forced call: its `<|tool_call|>` token, where the vocabulary has it, then a
    /// list of one call; a stream holds from the marker.
    #[test]
    fn granite_forced_call_and_stream() {
        let f = ToolFormat::Granite;
        let ids = |t: &str| (t == "<|tool_call|>").then_some(49_154);
        assert_eq!(f.markers(ids), CallMarkers { calls: Some(49_154), args: None, end: None, ..CallMarkers::default() });
        let Grammar::Lark(g) = f.forced_call(&[tool("weather")], f.markers(ids)) else {
            panic!("not a Lark grammar")
        };
        assert!(g.starts_with("start: <[49154]> \"[\" call \"]\"\ncall: %json {"), "{g}");
        let Grammar::Lark(g) = f.forced_call(&[tool("weather")], CallMarkers::default()) else {
            panic!("not a Lark grammar")
        };
        assert!(g.starts_with("start: \"<|tool_call|>[\" call \"]\""), "{g}");
        let mut s = ToolStream::new(f);
        assert_eq!(s.push("<|tool_"), "");
        assert_eq!(s.push("call|>[{\"name\": \"weather\", "), "");
        assert_eq!(s.push("\"arguments\": {}}]"), "");
        assert_eq!(s.finish().calls.len(), 1);
        let mut s = ToolStream::new(f);
        assert_eq!(s.push("Sunny"), "Sunny");
    }
}
