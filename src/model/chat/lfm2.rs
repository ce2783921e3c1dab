//! LFM2's tool calls (Liquid AI's LFM2 and LFM2.5): a list of Python-style calls between
//! `<|tool_call_start|>` and `<|tool_call_end|>`, special tokens of its vocabulary:
//!
//! ```text
//! <|tool_call_start|>[get_weather(city='Paris', days=3), get_time()]<|tool_call_end|>
//! ```
//!
//! A value is a Python literal (`'text'` or `"text"` with Python's escapes, numbers, `True`,
//! `False`, `None`, dicts and lists) or JSON's `true`, `false` and `null`, which the models also
//! write (llama.cpp accepts both). The templates list the offered tools in the system turn
//! (`List of tools: [...]`, LFM2's between `<|tool_list_start|>` and `<|tool_list_end|>`). Only
//! LFM2.5-8B-A1B's renders a turn's `tool_calls` back (`render_tool_calls`: `name(k='v', n=1)`);
//! for the others earlier calls are written into their turn's content as the model writes them
//! ([`history_text`]). Results are `tool` turns, which the templates render (LFM2's between
//! `<|tool_response_start|>` and `<|tool_response_end|>`).
//!
//! Owns reading calls out of a reply ([`parse`]: arguments as JSON text, keys in the model's
//! order), the grammar that forces one ([`forced_call`]) and the text of earlier calls.
//!
//! Invariants: a reply is calls only if every `<|tool_call_start|>` block is a whole list of
//! calls (a missing end mark is a reply cut at its stop, at the very end only); anything else
//! stays text, as the other formats do. A forced call, read back and written again (by
//! [`history_text`] or by LFM2.5-8B-A1B's template), is the same text: strings in single
//! quotes, everything else JSON laid out as the templates' `tojson`.
//!
//! Counterpart: llama.cpp's `common/parsers/lfm2.cpp` (`python_style_tool_calls` with JSON
//! literals allowed).

use serde_json::{Number, Value};

use super::cursor::Cursor;
use super::python::dumps;
use super::tools::{
    is_string_schema, json_value_rule, mark_rule, required_args, string_choice, CallMarkers, ParsedCall, ParsedReply, Tool,
};
use super::ToolCall;

/// Before a list of calls, and after it (special tokens of LFM2's vocabulary).
pub(super) const START: &str = "<|tool_call_start|>";
pub(super) const END: &str = "<|tool_call_end|>";

/// Whether `template` (its Jinja source) is LFM2's: it lists the tools as LFM2's do, or writes
/// LFM2's call marks.
pub(super) fn writes(template: &str) -> bool {
    template.contains("<|tool_list_start|>") || template.contains("List of tools: [") || template.contains(START)
}

/// Whether `template` renders an assistant turn's `tool_calls` itself (LFM2.5-8B-A1B's);
/// the others render content only, so earlier calls go into it ([`history_text`]).
pub(super) fn renders_calls(template: &str) -> bool {
    template.contains("tool_calls")
}

/// The calls in `text`, text around them allowed; `None` when there are none or a block is not a
/// whole list of calls.
pub(super) fn parse(text: &str) -> Option<ParsedReply> {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(START) {
        content.push_str(&rest[..at]);
        let mut r = Reader { s: &rest[at + START.len()..] };
        calls.extend(r.calls()?);
        r.skip_space();
        rest = match r.s.strip_prefix(END) {
            Some(after) => after,
            // Cut at the stop before its end mark: only at the very end.
            None if r.s.is_empty() => "",
            None => return None,
        };
    }
    content.push_str(rest);
    (!calls.is_empty()).then(|| ParsedReply {
        content: content.trim().to_owned(),
        calls,
    })
}

/// A cursor over a list of Python-style calls.
struct Reader<'a> {
    s: &'a str,
}

impl<'a> Cursor<'a> for Reader<'a> {
    fn rest(&mut self) -> &mut &'a str {
        &mut self.s
    }
}

impl Reader<'_> {
    /// `[call, call, …]`, at least one.
    fn calls(&mut self) -> Option<Vec<ParsedCall>> {
        self.sequence("[", "]", Self::call).filter(|calls| !calls.is_empty())
    }

    /// `name(key=value, …)`.
    fn call(&mut self) -> Option<ParsedCall> {
        self.skip_space();
        let name = self.word(super::tools::is_name_char)?.to_owned();
        let args = self.sequence("(", ")", |p| {
            p.skip_space();
            let key = p.word(|c| c.is_alphanumeric() || c == '_')?.to_owned();
            if !p.eat("=") {
                return None;
            }
            Some((key, p.value()?))
        })?;
        Some(ParsedCall {
            name,
            arguments: Value::Object(args.into_iter().collect()).to_string(),
        })
    }

    fn value(&mut self) -> Option<Value> {
        self.skip_space();
        match self.s.chars().next()? {
            q @ ('\'' | '"') => self.string(q).map(Value::String),
            '{' => self.dict(),
            '[' => self.sequence("[", "]", Self::value).map(Value::Array),
            _ => self.scalar(),
        }
    }

    /// A string in `quote`s with Python's escapes. A quote closes it only where a value may end
    /// after it (`,`, `)`, `]`, `}`, `:` or the end): the templates write a string's text as it
    /// is, so one holding the quote (`'it's'`) still reads as the model meant it.
    fn string(&mut self, quote: char) -> Option<String> {
        let s = self.s;
        let body = &s[quote.len_utf8()..];
        let mut out = String::new();
        let mut chars = body.char_indices();
        while let Some((i, c)) = chars.next() {
            if c == quote {
                let after = body[i + c.len_utf8()..].trim_start();
                if after.is_empty() || after.starts_with([',', ')', ']', '}', ':']) {
                    self.s = &body[i + c.len_utf8()..];
                    return Some(out);
                }
                out.push(c);
            } else if c == '\\' {
                let (_, e) = chars.next()?;
                match e {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    '0' => out.push('\0'),
                    '\\' | '\'' | '"' => out.push(e),
                    'u' | 'x' => {
                        let len = if e == 'u' { 4 } else { 2 };
                        let start = chars.next()?.0;
                        let hex = body.get(start..start + len)?;
                        (1..len).try_for_each(|_| chars.next().map(|_| ()))?;
                        out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
                    }
                    // Python keeps an unknown escape as it is.
                    other => {
                        out.push('\\');
                        out.push(other);
                    }
                }
            } else {
                out.push(c);
            }
        }
        None
    }

    /// `{key: value, …}`, keys strings.
    fn dict(&mut self) -> Option<Value> {
        let members = self.sequence("{", "}", |p| {
            p.skip_space();
            let quote = p.s.chars().next().filter(|&c| matches!(c, '\'' | '"'))?;
            let key = p.string(quote)?;
            if !p.eat(":") {
                return None;
            }
            Some((key, p.value()?))
        })?;
        Some(Value::Object(members.into_iter().collect()))
    }

    /// A number, or Python's and JSON's `True`/`true`, `False`/`false`, `None`/`null`.
    fn scalar(&mut self) -> Option<Value> {
        let word = self.word(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '.'))?;
        Some(match word {
            "True" | "true" => Value::Bool(true),
            "False" | "false" => Value::Bool(false),
            "None" | "null" => Value::Null,
            _ => match word.parse::<Number>() {
                Ok(n) => Value::Number(n),
                // Python's `1.` and `.5`.
                Err(_) => Value::Number(Number::from_f64(word.parse::<f64>().ok().filter(|x| x.is_finite())?)?),
            },
        })
    }
}

/// A value as the calls are written back: a string in single quotes (double quotes, escaped as
/// JSON, where it holds one), anything else its JSON as the templates' `tojson` writes it.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) if !s.contains('\'') => format!("'{s}'"),
        other => dumps(other),
    }
}

/// Earlier calls as the model writes them, for templates that render no `tool_calls`.
pub(super) fn history_text(calls: &[ToolCall]) -> String {
    let calls: Vec<String> = calls
        .iter()
        .map(|c| {
            let args = match c.arguments_value() {
                Value::Object(args) => args.iter().map(|(k, v)| format!("{k}={}", value_text(v))).collect::<Vec<_>>(),
                _ => Vec::new(),
            };
            format!("{}({})", c.name, args.join(", "))
        })
        .collect();
    format!("{START}[{}]{END}", calls.join(", "))
}

/// The grammar of one call of one of `tools`: the start mark (its special token where the
/// vocabulary has it), `[NAME(`, each required argument of its schema in the schema's order as
/// `key=value` (`, ` between), `)]`, the end mark. A string's value is in single quotes (one of
/// its `enum` values, or any text without a quote); any other is its JSON under its schema, laid
/// out as `tojson` writes it. A rule per tool.
pub(super) fn forced_call(tools: &[Tool], markers: CallMarkers) -> String {
    let mut rules = Vec::new();
    let mut alternatives = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let mut body = dumps(&Value::String(format!("{}(", t.name)));
        for (n, (k, schema)) in required_args(t).into_iter().enumerate() {
            let key = dumps(&Value::String(format!("{}{k}=", if n > 0 { ", " } else { "" })));
            let value = if is_string_schema(schema) {
                string_rule(schema)
            } else {
                json_value_rule(schema)
            };
            body.push_str(&format!(" {key} {value}"));
        }
        body.push_str(" \")\"");
        alternatives.push(format!("c{i}"));
        rules.push(format!("c{i}: {body}"));
    }
    format!(
        "start: {} \"[\" ({}) \"]\" {}\n{}",
        mark_rule(markers.calls, START),
        alternatives.join(" | "),
        mark_rule(markers.end, END),
        rules.join("\n")
    )
}

/// A string argument's rule: one of its schema's `enum` (or its `const`) in single quotes, else
/// any text without one in them.
fn string_rule(schema: &Value) -> String {
    string_choice(schema, |v| (!v.contains('\'')).then(|| format!("'{v}'"))).unwrap_or_else(|| "\"'\" /[^']*/ \"'\"".to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::chat::tools::{assert_only_fixtures_are, call_then_result, ToolFormat, ToolStream};
    use crate::model::chat::{ChatTemplate, Message, ToolCall};

    const LFM2_8B_A1B: &str = include_str!("fixtures/lfm2-8b-a1b.jinja");
    const LFM25_8B_A1B: &str = include_str!("fixtures/lfm2.5-8b-a1b.jinja");
    const LFM25_INSTRUCT: &str = include_str!("fixtures/lfm2.5-instruct.jinja");

    fn weather() -> Tool {
        Tool {
            name: "get_weather".into(),
            description: Some("The weather in a city.".into()),
            parameters: json!({"type": "object", "properties": {
                "city": {"type": "string"}, "days": {"type": "integer"},
                "units": {"type": "string", "enum": ["C", "F"]}},
                "required": ["city", "days"]}),
        }
    }

    fn args(call: &ParsedCall) -> Value {
        serde_json::from_str(&call.arguments).unwrap()
    }

    /// Every LFM2 template is this format; none of the other fixtures is.
    #[test]
    fn the_templates_are_lfm2s() {
        for t in [LFM2_8B_A1B, LFM25_8B_A1B, LFM25_INSTRUCT] {
            assert_eq!(ToolFormat::of_template(t), ToolFormat::Lfm2);
        }
        assert!(renders_calls(LFM25_8B_A1B));
        assert!(!renders_calls(LFM2_8B_A1B) && !renders_calls(LFM25_INSTRUCT));
        assert_only_fixtures_are(&["lfm2"], |f| f == ToolFormat::Lfm2);
    }

    /// Calls with every kind of value, Python's and JSON's literals, text before them, several in
    /// one list and in two blocks; anything that is not a whole list of calls stays text.
    #[test]
    fn calls_read_as_json_arguments() {
        let text = "Let me check.<|tool_call_start|>[get_weather(city='Paris', days=3, units=\"C\"), \
                    get_time()]<|tool_call_end|> <|tool_call_start|>[note(text='it's \\'fine\\'\\n', \
                    tags=['a', \"b\"], meta={'k': None, \"n\": -1.5e2}, ok=True, no=false, x=null, y=.5)]<|tool_call_end|>";
        let p = parse(text).unwrap();
        assert_eq!(p.content, "Let me check.");
        let names: Vec<&str> = p.calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["get_weather", "get_time", "note"]);
        assert_eq!(p.calls[0].arguments, r#"{"city":"Paris","days":3,"units":"C"}"#);
        assert_eq!(p.calls[1].arguments, "{}");
        assert_eq!(
            args(&p.calls[2]),
            json!({"text": "it's 'fine'\n", "tags": ["a", "b"], "meta": {"k": null, "n": -150.0},
                   "ok": true, "no": false, "x": null, "y": 0.5})
        );
        // Cut at the stop before the end mark: still the call.
        assert_eq!(parse("<|tool_call_start|>[f(a=1)]").unwrap().calls.len(), 1);
        for bad in [
            "<|tool_call_start|>[get_weather(city=Paris)]<|tool_call_end|>",
            "<|tool_call_start|>[get_weather(city='Paris',)]<|tool_call_end|>",
            "<|tool_call_start|>[]<|tool_call_end|>",
            "<|tool_call_start|>get_weather()<|tool_call_end|>",
            "<|tool_call_start|>[(a=1)]<|tool_call_end|>",
            "<|tool_call_start|>[f(a=1)] trailing<|tool_call_end|>",
            "<|tool_call_start|>[f(a=1)] then text",
            "<|tool_call_start|>[f(a='Pa",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert_eq!(parse("Just text, f(a=1)."), None);
    }

    /// A call read back and rendered as history is the call the model wrote: by LFM2.5-8B-A1B's
    /// template from `tool_calls`, by hearth into the turn's content for the templates that
    /// render none; the tools are listed in the system turn and the result follows as a `tool`
    /// turn (LFM2's between its response marks).
    #[test]
    fn a_call_renders_back_as_the_model_wrote_it() {
        let written = "<|tool_call_start|>[get_weather(city='Paris', days=3, units='C')]<|tool_call_end|>";
        let p = parse(written).unwrap();
        let [call, result] = call_then_result(&p.calls[0].name, &p.calls[0].arguments, "sunny");
        let messages = [Message::user("Weather?"), call, result];
        for (template, listed, response) in [
            (LFM2_8B_A1B, "List of tools: <|tool_list_start|>[{\"type\": \"function\"", "<|tool_response_start|>sunny<|tool_response_end|>"),
            (LFM25_8B_A1B, "List of tools: [{\"type\": \"function\"", "sunny"),
            (LFM25_INSTRUCT, "List of tools: [{\"type\": \"function\"", "sunny"),
        ] {
            let t = ChatTemplate::new(template.to_owned(), Some("<|startoftext|>".into()), Some("<|im_end|>".into())).unwrap();
            let prepared = ToolFormat::Lfm2.prepare(&messages, &[weather()], template);
            let out = t.render_with_tools(&prepared, &[weather().to_json()], true).unwrap();
            assert!(out.starts_with(&format!("<|startoftext|><|im_start|>system\n{listed}")), "{out}");
            assert!(
                out.ends_with(&format!(
                    "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n{written}<|im_end|>\n\
                     <|im_start|>tool\n{response}<|im_end|>\n<|im_start|>assistant\n"
                )),
                "{out}"
            );
        }
    }

    /// Strings with a quote are written in double quotes; other values as JSON.
    #[test]
    fn history_text_writes_python_literals_that_parse_back() {
        let call = ToolCall {
            id: "c".into(),
            name: "f".into(),
            arguments: r#"{"s":"it's","n":2,"b":true,"z":null,"l":[1,"x"],"o":{"k":"v"}}"#.into(),
        };
        let text = history_text(std::slice::from_ref(&call));
        assert_eq!(
            text,
            r#"<|tool_call_start|>[f(s="it's", n=2, b=true, z=null, l=[1, "x"], o={"k": "v"})]<|tool_call_end|>"#
        );
        assert_eq!(parse(&text).unwrap().calls[0].arguments, call.arguments);
    }

    /// A streamed reply's text goes out until the call's mark, held while it may be one.
    #[test]
    fn a_stream_holds_back_from_the_call() {
        let mut s = ToolStream::with_tools(ToolFormat::Lfm2, vec![weather()]);
        let mut out = s.push("Sure. <|tool_call");
        assert_eq!(out, "Sure. ");
        out += &s.push("_start|>[get_weather(city='Rome', days=1)]<|tool_call_end|>");
        assert_eq!(out, "Sure. ");
        let parsed = s.finish();
        assert_eq!(parsed.calls.len(), 1);
        assert_eq!(parsed.calls[0].arguments, r#"{"city":"Rome","days":1}"#);
    }

    /// The forced call's grammar writes the marks as the vocabulary's tokens where it has them,
    /// the required arguments in the schema's order, strings in single quotes.
    #[test]
    fn the_forced_call_grammar_names_every_required_argument() {
        let tokens = CallMarkers {
            calls: Some(7),
            args: None,
            end: Some(8),
            ..CallMarkers::default()
        };
        let g = forced_call(&[weather()], tokens);
        assert!(g.starts_with("start: <[7]> \"[\" (c0) \"]\" <[8]>\nc0: \"get_weather(\" \"city=\" \"'\" /[^']*/ \"'\" \", days=\" %json"), "{g}");
        assert!(g.ends_with(" \")\""), "{g}");
        let text = forced_call(&[weather()], CallMarkers::default());
        assert!(text.starts_with("start: \"<|tool_call_start|>\" \"[\" (c0) \"]\" \"<|tool_call_end|>\""), "{text}");
        assert_eq!(string_rule(&json!({"enum": ["C", "F"]})), r#"("'C'" | "'F'")"#);
    }
}
