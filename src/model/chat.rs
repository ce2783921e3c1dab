//! Chat templates: turning a list of messages into the one prompt string the
//! model was trained on, by rendering the model's own Jinja template.
//!
//! Owns [`ChatTemplate`] (a compiled template plus the BOS/EOS text it may
//! print) and [`ChatMessage`]. The template comes from the GGUF key
//! `tokenizer.chat_template`, from a Hugging Face `tokenizer_config.json`, or,
//! when a model ships none, the ChatML fallback ([`ChatTemplate::chatml`]).
//!
//! Invariants:
//! - The template is parsed once, in [`ChatTemplate::new`]; rendering never
//!   re-parses, and a template that does not parse is an error there, not later.
//! - Rendering is pure: the same messages give the same string (except for
//!   templates that call `strftime_now`).
//! - Nothing a template does can panic: a syntax error, an undefined-variable
//!   misuse or a `raise_exception(..)` all come back as
//!   [`ModelError::ChatTemplate`].
//!
//! The environment mirrors the one `transformers` builds in
//! `apply_chat_template` (an `ImmutableSandboxedEnvironment` with
//! `trim_blocks=True, lstrip_blocks=True`): the variables `messages`,
//! `add_generation_prompt`, `bos_token`, `eos_token`, `tools` and `documents`
//! (both `none`); the functions `raise_exception(msg)` and `strftime_now(fmt)`;
//! a `tojson` filter that writes what Python's `json.dumps` writes (no HTML
//! escaping, `", "` and `": "` separators); and Python string/dict methods
//! (`.strip()`, `.startswith()`, `.items()` ...) through minijinja-contrib's
//! pycompat. `{% generation %}` blocks (transformers' `AssistantTracker`) are
//! rendered as plain blocks.
//!
//! `{% break %}` / `{% continue %}` work (minijinja's `loop_controls`), and
//! map literals keep insertion order as Python's dicts do (`preserve_order`).
//! Known difference from transformers: `strftime_now` formats the current
//! time in UTC (Python uses local time).
//!
//! Counterparts: `transformers` `PreTrainedTokenizerBase.apply_chat_template`
//! and `utils/chat_template_utils.py`; llama.cpp `common/chat.cpp` (minja);
//! vLLM `entrypoints/chat_utils.py`.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use candle_core::quantized::gguf_file::Value as GgufValue;
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{AutoEscape, Environment, Error as JinjaError, ErrorKind, Value};

use super::{tokenizer::Tokenizer, ModelError};

/// The GGUF metadata key holding the model's default chat template.
pub const GGUF_CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// The name the compiled template is stored under in its environment; shows
/// up in error messages as `(in chat:LINE)`.
const TEMPLATE_NAME: &str = "chat";

/// ChatML (`<|im_start|>role\ncontent<|im_end|>\n`), the fallback for models
/// without a template. Same text as llama.cpp's `chatml` built-in.
const CHATML_TEMPLATE: &str = r#"{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- endif -%}"#;

/// Deepest nesting `tojson` writes before giving up (values built from
/// messages are never this deep; the bound keeps a hostile template finite).
const TOJSON_MAX_DEPTH: usize = 256;

/// One turn of a conversation, as OpenAI's and Hugging Face's chat APIs pass it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` (templates may accept others, e.g. `tool`).
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
}

/// A compiled chat template and the special-token text it may print.
#[derive(Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    /// Text of the BOS token (`bos_token` in the template), "" when the model has none.
    bos_token: String,
    /// Text of the EOS token (`eos_token` in the template), "" when the model has none.
    eos_token: String,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_chars", &self.source.len())
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
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
        env.add_template_owned(TEMPLATE_NAME, strip_generation_tags(&source))
            .map_err(|e| ModelError::ChatTemplate(format!("the template does not parse: {}", describe(&e))))?;
        Ok(Self {
            env,
            source,
            bos_token: bos_token.unwrap_or_default(),
            eos_token: eos_token.unwrap_or_default(),
        })
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

    /// The ChatML fallback: `<|im_start|>{role}\n{content}<|im_end|>\n` per
    /// message and `<|im_start|>assistant\n` as the generation prompt.
    pub fn chatml(tok: &Tokenizer) -> Self {
        Self::chatml_with_tokens(tok.bos_token().map(str::to_owned), tok.eos_token().map(str::to_owned))
    }

    /// [`ChatTemplate::chatml`] without a tokenizer.
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
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String, ModelError> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ModelError::ChatTemplate(format!("the template is missing: {}", describe(&e))))?;
        let ctx = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            tools => Value::from(()),
            documents => Value::from(()),
        };
        template.render(ctx).map_err(|e| match raised_message(&e) {
            Some(msg) => ModelError::ChatTemplate(msg.to_owned()),
            None => ModelError::ChatTemplate(format!("the template failed to render: {}", describe(&e))),
        })
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

/// Rewrites `{% generation %}` / `{% endgeneration %}` (transformers'
/// `AssistantTracker` extension, which only marks a span) into
/// `{% if true %}` / `{% endif %}`, keeping their whitespace control.
fn strip_generation_tags(source: &str) -> String {
    if !source.contains("generation") {
        return source.to_owned();
    }
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (open, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, close) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[body.len() - 1..]),
            None => (body, ""),
        };
        let replacement = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(r) => {
                out.push_str("{%");
                out.push_str(open);
                out.push(' ');
                out.push_str(r);
                out.push(' ');
                out.push_str(close);
                out.push_str("%}");
            }
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// The message a template passed to `raise_exception`, carried as an error source.
#[derive(Debug)]
struct RaisedByTemplate(String);

impl fmt::Display for RaisedByTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedByTemplate {}

/// The message of a `raise_exception(..)` call somewhere in `e`'s source chain.
fn raised_message(e: &JinjaError) -> Option<&str> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(raised) = c.downcast_ref::<RaisedByTemplate>() {
            return Some(&raised.0);
        }
        cause = c.source();
    }
    None
}

/// `raise_exception(msg)`: aborts rendering with `msg` (transformers raises a
/// `TemplateError(msg)`).
fn raise_exception(msg: String) -> Result<Value, JinjaError> {
    Err(
        JinjaError::new(ErrorKind::InvalidOperation, "the template called raise_exception")
            .with_source(RaisedByTemplate(msg)),
    )
}

/// `strftime_now(fmt)`: the current time formatted like Python's `strftime`
/// (in UTC; see the module docs).
fn strftime_now(fmt: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    strftime(&fmt, secs)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Formats `unix_secs` (UTC) with the common `strftime` directives: `%Y %y %m
/// %d %e %j %H %I %M %S %p %B %b %h %A %a %u %w %F %T %D %%`, and glibc's `%-d`
/// style (no padding). Unknown directives are kept as written.
fn strftime(fmt: &str, unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let secs_of_day = unix_secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (secs_of_day / 3600, secs_of_day % 3600 / 60, secs_of_day % 60);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday; 0 = Monday
    let day_of_year = days - days_from_civil(year, 1, 1) + 1;
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };
    let month_name = MONTHS[(month - 1) as usize];
    let weekday_name = WEEKDAYS[weekday];

    let mut out = String::with_capacity(fmt.len() + 16);
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = chars.next();
        let pad = if spec == Some('-') {
            spec = chars.next();
            false
        } else {
            true
        };
        let num = |n: i64, width: usize| if pad { format!("{n:0width$}") } else { n.to_string() };
        match spec {
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&num(year.rem_euclid(100), 2)),
            Some('m') => out.push_str(&num(month, 2)),
            Some('d') => out.push_str(&num(day, 2)),
            Some('e') => out.push_str(&if pad { format!("{day:2}") } else { day.to_string() }),
            Some('j') => out.push_str(&num(day_of_year, 3)),
            Some('H') => out.push_str(&num(hour, 2)),
            Some('I') => out.push_str(&num(hour12, 2)),
            Some('M') => out.push_str(&num(minute, 2)),
            Some('S') => out.push_str(&num(second, 2)),
            Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('B') => out.push_str(month_name),
            Some('b') | Some('h') => out.push_str(&month_name[..3]),
            Some('A') => out.push_str(weekday_name),
            Some('a') => out.push_str(&weekday_name[..3]),
            Some('u') => out.push_str(&(weekday + 1).to_string()),
            Some('w') => out.push_str(&((weekday + 1) % 7).to_string()),
            Some('F') => out.push_str(&format!("{year}-{month:02}-{day:02}")),
            Some('T') => out.push_str(&format!("{hour:02}:{minute:02}:{second:02}")),
            Some('D') => out.push_str(&format!("{month:02}/{day:02}/{:02}", year.rem_euclid(100))),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                if !pad {
                    out.push('-');
                }
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a civil date (inverse of [`civil_from_days`]).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// How `tojson` lays out its output (Python `json.dumps` arguments).
struct JsonStyle {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

/// `tojson` as transformers defines it: `json.dumps(x, ensure_ascii=False,
/// indent=None, separators=None, sort_keys=False)`; all four are accepted as
/// keyword arguments. Unlike minijinja's built-in, nothing is HTML-escaped.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, JinjaError> {
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_owned()),
            None => {
                let n = i64::try_from(v)?;
                Some(" ".repeat(usize::try_from(n).unwrap_or(0)))
            }
        },
    };
    let (item_sep, key_sep) = match kwargs.get::<Option<Value>>("separators")? {
        Some(v) if !v.is_none() && !v.is_undefined() => {
            let parts: Vec<String> = v.try_iter()?.map(|p| p.to_string()).collect();
            match parts.as_slice() {
                [item, key] => (item.clone(), key.clone()),
                _ => {
                    return Err(JinjaError::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be a pair of strings",
                    ))
                }
            }
        }
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    let style = JsonStyle {
        indent,
        item_sep,
        key_sep,
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&mut out, value, &style, 0)?;
    Ok(Value::from(out))
}

fn write_json(out: &mut String, value: &Value, style: &JsonStyle, depth: usize) -> Result<(), JinjaError> {
    if depth > TOJSON_MAX_DEPTH {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            "tojson: value is nested too deeply",
        ));
    }
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if value.is_integer() {
                out.push_str(&value.to_string());
            } else {
                out.push_str(&python_float_repr(f64::try_from(value.clone())?));
            }
        }
        ValueKind::String => write_json_str(out, value.as_str().unwrap_or_default(), style.ensure_ascii),
        ValueKind::Bytes => write_json_str(
            out,
            &String::from_utf8_lossy(value.as_bytes().unwrap_or_default()),
            style.ensure_ascii,
        ),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, '[', ']', items.len(), style, depth, |out, i| {
                write_json(out, &items[i], style, depth + 1)
            })?;
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                let key = match key.as_str() {
                    Some(s) => s.to_owned(),
                    None if key.is_none() => "null".to_owned(),
                    None => key.to_string(),
                };
                entries.push((key, item));
            }
            if style.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_container(out, '{', '}', entries.len(), style, depth, |out, i| {
                write_json_str(out, &entries[i].0, style.ensure_ascii);
                out.push_str(&style.key_sep);
                write_json(out, &entries[i].1, style, depth + 1)
            })?;
        }
        _ => {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!("tojson: cannot serialize a value of kind {}", value.kind()),
            ))
        }
    }
    Ok(())
}

/// Writes `len` items between `open` and `close`, Python `json.dumps` style.
fn write_container(
    out: &mut String,
    open: char,
    close: char,
    len: usize,
    style: &JsonStyle,
    depth: usize,
    mut item: impl FnMut(&mut String, usize) -> Result<(), JinjaError>,
) -> Result<(), JinjaError> {
    out.push(open);
    if len == 0 {
        out.push(close);
        return Ok(());
    }
    for i in 0..len {
        if i > 0 {
            out.push_str(&style.item_sep);
        }
        if let Some(indent) = &style.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth + 1));
        }
        item(out, i)?;
    }
    if let Some(indent) = &style.indent {
        out.push('\n');
        out.push_str(&indent.repeat(depth));
    }
    out.push(close);
    Ok(())
}

/// A JSON string literal escaped as Python's `json.dumps` does.
fn write_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A float as Python's `repr` writes it (`1.0`, `0.1`, `1e+16`, `1.5e-07`, `NaN`).
fn python_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if x.fract() == 0.0 && x.abs() < 1e16 {
        return format!("{x:.1}");
    }
    let debug = format!("{x:?}");
    match debug.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => debug,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(pairs: &[(&str, &str)]) -> Vec<ChatMessage> {
        pairs.iter().map(|(r, c)| ChatMessage::new(*r, *c)).collect()
    }

    fn template(source: &str, bos: &str, eos: &str) -> ChatTemplate {
        ChatTemplate::new(source.to_owned(), Some(bos.to_owned()), Some(eos.to_owned())).unwrap()
    }

    /// Qwen2.5-Instruct's `chat_template` (tokenizer_config.json), verbatim.
    const QWEN25: &str = r#"{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;

    /// Meta-Llama-3-8B-Instruct's `chat_template`, verbatim.
    const LLAMA3: &str = r#"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"#;

    /// Llama-2-chat's `chat_template` (the `[INST]` format), verbatim.
    const LLAMA2: &str = r#"{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"#;

    /// Mistral-7B-Instruct-v0.1's `chat_template`, verbatim.
    const MISTRAL: &str = r#"{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"#;

    /// SmolLM2-Instruct's `chat_template`, verbatim (the newlines inside the
    /// string literals are real newlines, as in the JSON's `\n`).
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn qwen25_default_system_and_generation_prompt() {
        let t = template(QWEN25, "", "<|im_end|>");
        let out = t.render(&msgs(&[("user", "Hello!")]), true).unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n\
             <|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn qwen25_own_system_and_multi_turn() {
        let t = template(QWEN25, "", "<|im_end|>");
        let conv = msgs(&[
            ("system", "Be brief."),
            ("user", "Hi"),
            ("assistant", "Hello."),
            ("user", "2+2?"),
        ]);
        let out = t.render(&conv, false).unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
             <|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
        );
    }

    #[test]
    fn llama3_bos_trim_and_headers() {
        let t = template(LLAMA3, "<|begin_of_text|>", "<|eot_id|>");
        let out = t
            .render(&msgs(&[("system", "  You are terse. "), ("user", "Hi\n")]), true)
            .unwrap();
        assert_eq!(
            out,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>\
             <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
    }

    #[test]
    fn llama2_system_block_strip_and_eos() {
        let t = template(LLAMA2, "<s>", "</s>");
        let conv = msgs(&[
            ("system", "Sys"),
            ("user", "Hi"),
            ("assistant", " Hello\n"),
            ("user", " Bye "),
        ]);
        let out = t.render(&conv, false).unwrap();
        assert_eq!(
            out,
            "<s>[INST] <<SYS>>\nSys\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye [/INST]"
        );
    }

    #[test]
    fn llama2_raise_exception_on_bad_alternation() {
        let t = template(LLAMA2, "<s>", "</s>");
        let err = t.render(&msgs(&[("user", "a"), ("user", "b")]), false).unwrap_err();
        match err {
            ModelError::ChatTemplate(msg) => {
                assert_eq!(
                    msg,
                    "Conversation roles must alternate user/assistant/user/assistant/..."
                )
            }
            other => panic!("unexpected error {other:?}"),
        }
    }

    #[test]
    fn mistral_inst_format_and_role_errors() {
        let t = template(MISTRAL, "<s>", "</s>");
        let out = t
            .render(&msgs(&[("user", "Hi"), ("assistant", "Hello"), ("user", "Bye")]), true)
            .unwrap();
        assert_eq!(out, "<s>[INST] Hi [/INST]Hello</s> [INST] Bye [/INST]");
        let err = t.render(&msgs(&[("system", "x")]), false).unwrap_err();
        assert!(err.to_string().contains("Conversation roles must alternate"), "{err}");
    }

    #[test]
    fn smollm2_injects_default_system() {
        let t = template(SMOLLM2, "<|im_start|>", "<|im_end|>");
        let out = t.render(&msgs(&[("user", "Hello")]), true).unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
             <|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
        );
        let out = t.render(&msgs(&[("system", "S"), ("user", "U")]), false).unwrap();
        assert_eq!(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n");
    }

    #[test]
    fn chatml_fallback() {
        let t = ChatTemplate::chatml_with_tokens(None, None);
        let out = t.render(&msgs(&[("system", "S"), ("user", "U")]), true).unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            t.render(&msgs(&[("user", "U")]), false).unwrap(),
            "<|im_start|>user\nU<|im_end|>\n"
        );
        assert_eq!(t.source(), CHATML_TEMPLATE);
    }

    #[test]
    fn trim_and_lstrip_blocks_like_hf() {
        // trim_blocks drops the newline after a block tag; lstrip_blocks drops
        // the indentation before one; no trailing newline is kept.
        let src = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}\n";
        let t = template(src, "", "");
        assert_eq!(
            t.render(&msgs(&[("user", "a"), ("assistant", "b"), ("user", "c")]), false)
                .unwrap(),
            "[a]\n[c]\n"
        );
    }

    #[test]
    fn missing_tokens_are_empty_strings_and_tools_is_none() {
        let t = ChatTemplate::new(
            "[{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ tools is defined }}]".into(),
            None,
            None,
        )
        .unwrap();
        // Booleans print as Python does.
        assert_eq!(t.render(&[], false).unwrap(), "[||True|True]");
    }

    #[test]
    fn python_methods_work() {
        let src = "{{ messages[0].content.strip().upper() }}|{{ messages[0].content.strip().startswith('he') }}|{{ 'a,b'.split(',') | length }}";
        let t = template(src, "", "");
        assert_eq!(t.render(&msgs(&[("user", "  hello ")]), false).unwrap(), "HELLO|True|2");
    }

    #[test]
    fn loop_controls_work() {
        let t = template(
            "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{{ m.content }}{% endfor %}",
            "",
            "",
        );
        assert_eq!(
            t.render(&msgs(&[("user", "a"), ("assistant", "b"), ("user", "c")]), false)
                .unwrap(),
            "ab"
        );
    }

    #[test]
    fn tojson_matches_python_json_dumps() {
        let t = template(r#"{{ {"b": [1, 2.5, none, true], "a": "x\"<é>\n"} | tojson }}"#, "", "");
        // Map keys keep insertion order, as Python's dicts do (minijinja's
        // `preserve_order` feature).
        assert_eq!(
            t.render(&[], false).unwrap(),
            r#"{"b": [1, 2.5, null, true], "a": "x\"<é>\n"}"#
        );
        let t = template(r#"{{ {"k": [1, {}]} | tojson(indent=2) }}"#, "", "");
        assert_eq!(t.render(&[], false).unwrap(), "{\n  \"k\": [\n    1,\n    {}\n  ]\n}");
        let t = template(
            r#"{{ {"b": 1, "a": "é"} | tojson(sort_keys=true, ensure_ascii=true) }}"#,
            "",
            "",
        );
        assert_eq!(t.render(&[], false).unwrap(), r#"{"a": "\u00e9", "b": 1}"#);
        let t = template("{{ messages | tojson }}", "", "");
        assert_eq!(
            t.render(&msgs(&[("user", "hi")]), false).unwrap(),
            r#"[{"role": "user", "content": "hi"}]"#
        );
    }

    #[test]
    fn python_float_repr_cases() {
        assert_eq!(python_float_repr(1.0), "1.0");
        assert_eq!(python_float_repr(0.1), "0.1");
        assert_eq!(python_float_repr(1e16), "1e+16");
        assert_eq!(python_float_repr(1.5e-7), "1.5e-07");
        assert_eq!(python_float_repr(f64::NAN), "NaN");
    }

    #[test]
    fn strftime_formats_known_dates() {
        // 2024-07-26 13:05:09 UTC, a Friday.
        let secs = days_from_civil(2024, 7, 26) * 86_400 + 13 * 3600 + 5 * 60 + 9;
        assert_eq!(strftime("%d %b %Y", secs), "26 Jul 2024");
        assert_eq!(
            strftime("%A %B %-d, %Y %H:%M:%S %p %I %j %%", secs),
            "Friday July 26, 2024 13:05:09 PM 01 208 %"
        );
        assert_eq!(strftime("%F %T %q", 0), "1970-01-01 00:00:00 %q");
        assert_eq!(civil_from_days(days_from_civil(2000, 2, 29)), (2000, 2, 29));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        // strftime_now is callable from a template.
        let tpl = template("{{ strftime_now('%Y') | length }}", "", "");
        assert_eq!(tpl.render(&[], false).unwrap(), "4");
    }

    #[test]
    fn generation_tags_render_as_plain_blocks() {
        let src = "{% for m in messages %}{%- generation -%}<{{ m.content }}>{%- endgeneration -%}{% endfor %}";
        let t = template(src, "", "");
        assert_eq!(
            t.render(&msgs(&[("user", "a"), ("user", "b")]), false).unwrap(),
            "<a><b>"
        );
        assert_eq!(t.source(), src);
    }

    #[test]
    fn broken_template_is_an_error_not_a_panic() {
        for src in [
            "{% for m in messages %}",
            "{{ messages[0 }}",
            "{% if %}{% endif %}",
            "{% endfor %}",
        ] {
            match ChatTemplate::new(src.to_owned(), None, None) {
                Err(ModelError::ChatTemplate(msg)) => {
                    assert!(msg.contains("does not parse") && msg.contains("at line 1"), "{msg}")
                }
                other => panic!("{src:?} gave {other:?}"),
            }
        }
        // Errors at render time: attribute of undefined, unknown filter call.
        let t = template("{{ nothing.here }}", "", "");
        assert!(matches!(t.render(&[], false), Err(ModelError::ChatTemplate(_))));
        let t = template("{{ messages[5].content }}", "", "");
        assert!(matches!(t.render(&[], false), Err(ModelError::ChatTemplate(_))));
    }

    #[test]
    fn tokenizer_config_string_list_and_absent() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokenizer_config.json");
        let hello = msgs(&[("user", "hi")]);

        // A list of named templates: `default` is taken; BOS/EOS from the config.
        let config = serde_json::json!({
            "bos_token": {"content": "<s>", "lstrip": false},
            "eos_token": "</s>",
            "chat_template": [
                {"name": "tool_use", "template": "tools"},
                {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"}
            ]
        });
        std::fs::write(&p, config.to_string()).unwrap();
        let t = ChatTemplate::from_tokenizer_config_with_tokens(&p, None, None)
            .unwrap()
            .unwrap();
        assert_eq!(t.render(&hello, false).unwrap(), "<s>hi</s>");
        // Token text given by the tokenizer wins over the config's.
        let t = ChatTemplate::from_tokenizer_config_with_tokens(&p, Some("<B>".into()), None)
            .unwrap()
            .unwrap();
        assert_eq!(t.render(&hello, false).unwrap(), "<B>hi</s>");

        // No template named default: an error that lists the names.
        std::fs::write(&p, r#"{"chat_template": [{"name": "tool_use", "template": "x"}]}"#).unwrap();
        let err = ChatTemplate::from_tokenizer_config_with_tokens(&p, None, None).unwrap_err();
        assert!(err.to_string().contains("tool_use"), "{err}");

        // A plain string.
        std::fs::write(&p, r#"{"chat_template": "[{{ messages | length }}]"}"#).unwrap();
        let t = ChatTemplate::from_tokenizer_config_with_tokens(&p, None, None)
            .unwrap()
            .unwrap();
        assert_eq!(t.render(&hello, false).unwrap(), "[1]");

        // Absent: None, unless chat_template.jinja sits beside it.
        std::fs::write(&p, r#"{"eos_token": "</s>"}"#).unwrap();
        assert!(ChatTemplate::from_tokenizer_config_with_tokens(&p, None, None)
            .unwrap()
            .is_none());
        std::fs::write(dir.path().join("chat_template.jinja"), "J{{ eos_token }}").unwrap();
        let t = ChatTemplate::from_tokenizer_config_with_tokens(&p, None, None)
            .unwrap()
            .unwrap();
        assert_eq!(t.render(&hello, false).unwrap(), "J</s>");

        // Not JSON, or no file: errors naming the file.
        std::fs::write(&p, "{not json").unwrap();
        let err = ChatTemplate::from_tokenizer_config_with_tokens(&p, None, None).unwrap_err();
        assert!(err.to_string().contains("tokenizer_config.json"), "{err}");
        let missing = dir.path().join("nope.json");
        assert!(matches!(
            ChatTemplate::from_tokenizer_config_with_tokens(&missing, None, None),
            Err(ModelError::Io { .. })
        ));
    }
}
