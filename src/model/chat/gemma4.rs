//! Gemma 4's tool calls: a call is `<|tool_call>call:NAME{ARGS}<tool_call|>`, its arguments in
//! Gemma's own notation, as its template's `format_argument` writes them:
//!
//! ```text
//! <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,units:{metric:true}}<tool_call|>
//! ```
//!
//! Keys bare (up to the `:`), strings between `<|"|>` marks, numbers, `true`, `false` and
//! `null` as JSON, objects in braces and lists in brackets, members separated by commas. After
//! its calls the model writes `<|tool_response>` and waits (a stop: `tokenizer::special`); the
//! template writes the results back after the calls in the same turn.
//!
//! Owns reading calls out of a reply ([`parse`]: each call's arguments become JSON text, keys in
//! the model's order) and the grammar that forces one ([`forced_call`]).
//!
//! Invariant: a reply is calls only if every `<|tool_call>` block is a whole call; anything else
//! stays text, as the other formats do.
//!
//! Counterpart: llama.cpp's `common/parsers/gemma4.cpp` (its `gemma4-value` rules).

use serde_json::{Map, Number, Value};

use super::cursor::Cursor;
use super::python::dumps;
use super::tools::{
    is_string_schema, json_value_rule, parse_blocks_between, required_args, string_choice, ParsedCall, ParsedReply, Tool,
};

pub(super) const OPEN: &str = "<|tool_call>";
const CLOSE: &str = "<tool_call|>";
/// What follows the open mark before the function's name.
const CALL: &str = "call:";
/// Gemma's string quote (a token of its own).
const QUOTE: &str = "<|\"|>";

/// Whether `template` (its Jinja source) writes calls in this format.
pub(super) fn writes(template: &str) -> bool {
    template.contains("<|tool_call>call:")
}

/// The calls in `text`, text around them allowed; `None` when there are none or one is not a
/// whole call.
pub(super) fn parse(text: &str) -> Option<ParsedReply> {
    parse_blocks_between(text, (OPEN, CLOSE), false, call)
}

/// One call between the marks: `call:NAME{…}` and nothing else.
fn call(inner: &str) -> Option<ParsedCall> {
    let s = inner.trim().strip_prefix(CALL)?;
    let brace = s.find('{')?;
    let name = s[..brace].trim();
    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || "_-.".contains(c)) {
        return None;
    }
    let mut p = Reader { s: &s[brace..] };
    let args = p.object()?;
    p.skip_space();
    p.s.is_empty().then(|| ParsedCall {
        name: name.to_owned(),
        arguments: Value::Object(args).to_string(),
    })
}

/// A cursor over Gemma's argument notation.
struct Reader<'a> {
    s: &'a str,
}

impl<'a> Cursor<'a> for Reader<'a> {
    fn rest(&mut self) -> &mut &'a str {
        &mut self.s
    }
}

impl Reader<'_> {
    fn value(&mut self) -> Option<Value> {
        self.skip_space();
        if self.eat(QUOTE) {
            let end = self.s.find(QUOTE)?;
            let text = self.s[..end].to_owned();
            self.s = &self.s[end + QUOTE.len()..];
            return Some(Value::String(text));
        }
        match self.s.chars().next()? {
            '{' => self.object().map(Value::Object),
            '[' => self.sequence("[", "]", Self::value).map(Value::Array),
            _ => self.scalar(),
        }
    }

    /// `{key:value,…}`, keys bare.
    fn object(&mut self) -> Option<Map<String, Value>> {
        let members = self.sequence("{", "}", |p| {
            p.skip_space();
            let colon = p.s.find(':')?;
            let key = p.s[..colon].trim();
            if key.is_empty() || key.contains(['}', ',', '{']) {
                return None;
            }
            p.s = &p.s[colon + 1..];
            Some((key.to_owned(), p.value()?))
        })?;
        Some(members.into_iter().collect())
    }

    /// A number, `true`, `false` or `null`: the text up to the next `,`, `}` or `]`.
    fn scalar(&mut self) -> Option<Value> {
        let end = self.s.find([',', '}', ']']).unwrap_or(self.s.len());
        let word = self.s[..end].trim();
        let v = match word {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "null" => Value::Null,
            _ => Value::Number(word.parse::<Number>().ok()?),
        };
        self.s = &self.s[end..];
        Some(v)
    }
}

/// The rules of any value in Gemma's notation (arguments without a simpler schema).
const VALUE_RULES: &str = r#"gv: gstr | gobj | garr | GNUM | "true" | "false" | "null"
gstr: "<|\"|>" /([^<]|<[^|])*/ "<|\"|>"
gobj: "{" (gkv ("," gkv)*)? "}"
gkv: /[A-Za-z0-9_\-.]+/ ":" gv
garr: "[" (gv ("," gv)*)? "]"
GNUM: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/"#;

/// The grammar of one call of one of `tools`, as the template writes calls back: `<|tool_call>`,
/// `call:NAME{`, each required argument of its schema in the template's (sorted) order, `}`,
/// `<tool_call|>`. A string argument's value is `<|"|>` text `<|"|>`; a number, integer or
/// boolean one its JSON under its schema (the same text here); any other a value in Gemma's
/// notation. A rule per tool.
pub(super) fn forced_call(tools: &[Tool]) -> String {
    let mut rules = Vec::new();
    let mut alternatives = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let mut body = dumps(&Value::String(format!("{OPEN}{CALL}{}{{", t.name)));
        let mut args = required_args(t);
        args.sort_by(|a, b| a.0.cmp(b.0));
        for (n, (k, schema)) in args.into_iter().enumerate() {
            let key = dumps(&Value::String(format!("{}{k}:", if n > 0 { "," } else { "" })));
            let value = if is_string_schema(schema) {
                string_rule(schema)
            } else if matches!(schema.get("type").and_then(Value::as_str), Some("integer" | "number" | "boolean")) {
                json_value_rule(schema)
            } else {
                "gv".to_owned()
            };
            body.push_str(&format!(" {key} {value}"));
        }
        body.push_str(&format!(" {}", dumps(&Value::String(format!("}}{CLOSE}")))));
        alternatives.push(format!("c{i}"));
        rules.push(format!("c{i}: {body}"));
    }
    format!("start: {}\n{}\n{VALUE_RULES}", alternatives.join(" | "), rules.join("\n"))
}

/// A string argument's rule: one of its schema's `enum` (or its `const`) in Gemma's quotes, else
/// any text in them.
fn string_rule(schema: &Value) -> String {
    string_choice(schema, |v| Some(format!("{QUOTE}{v}{QUOTE}"))).unwrap_or_else(|| "gstr".to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::chat::tools::{call_then_result, ToolFormat, ToolStream};
    use crate::model::chat::{ChatTemplate, Message};

    const TEMPLATE: &str = crate::model::chat::template::GEMMA4_TEMPLATE;

    fn weather() -> Tool {
        Tool {
            name: "get_weather".into(),
            description: Some("The weather in a city.".into()),
            parameters: json!({"type": "object", "properties": {
                "city": {"type": "string"}, "days": {"type": "integer"},
                "units": {"type": "object", "properties": {"metric": {"type": "boolean"}}}},
                "required": ["city", "days"]}),
        }
    }

    /// Calls with every kind of value, text around them, several in a row; anything that is not
    /// a whole call stays text.
    #[test]
    fn calls_read_as_json_arguments() {
        assert_eq!(ToolFormat::of_template(TEMPLATE), ToolFormat::Gemma4);
        let text = "Let me check.<|tool_call>call:get_weather{city:<|\"|>Paris, \"FR\"<|\"|>,days:3,\
                    units:{metric:true,scale:-1.5e2},tags:[<|\"|>a<|\"|>,null,[]],note:{}}<tool_call|>\
                    <|tool_call>call:get_time{}<tool_call|>";
        let p = ToolFormat::Gemma4.parse(text).unwrap();
        assert_eq!(p.content, "Let me check.");
        assert_eq!(p.calls.len(), 2);
        assert_eq!(p.calls[0].name, "get_weather");
        let args: Value = serde_json::from_str(&p.calls[0].arguments).unwrap();
        assert_eq!(
            args,
            json!({"city": "Paris, \"FR\"", "days": 3, "units": {"metric": true, "scale": -150.0}, "tags": ["a", null, []], "note": {}})
        );
        assert_eq!((p.calls[1].name.as_str(), p.calls[1].arguments.as_str()), ("get_time", "{}"));
        for bad in [
            "<|tool_call>call:get_weather{city:Paris}<tool_call|>",
            "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,}<tool_call|>",
            "<|tool_call>call:{}<tool_call|>",
            "<|tool_call>get_weather{}<tool_call|>",
            "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>} trailing<tool_call|>",
            "<|tool_call>call:get_weather{city:<|\"|>Pa",
        ] {
            assert_eq!(ToolFormat::Gemma4.parse(bad), None, "{bad:?}");
        }
        assert_eq!(ToolFormat::Gemma4.parse("Just text."), None);
    }

    /// A call read back and rendered by the template as history is the call the model wrote
    /// (keys in sorted order, as the template writes them), then the result in the same turn;
    /// the template's next turn follows the result.
    #[test]
    fn a_call_renders_back_as_the_model_wrote_it() {
        let written = "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|>";
        let p = ToolFormat::Gemma4.parse(written).unwrap();
        let [call, result] = call_then_result(&p.calls[0].name, &p.calls[0].arguments, "sunny");
        let t = ChatTemplate::new(TEMPLATE.to_owned(), Some("<bos>".into()), Some("<eos>".into())).unwrap();
        let out = t
            .render_with_tools(&[Message::user("Weather?"), call, result], &[weather().to_json()], true)
            .unwrap();
        assert!(out.contains("<|tool>declaration:get_weather{description:<|\"|>The weather in a city.<|\"|>"), "{out}");
        assert!(
            out.ends_with(&format!(
                "<|turn>user\nWeather?<turn|>\n<|turn>model\n{written}<|tool_response>response:get_weather{{value:<|\"|>sunny<|\"|>}}<tool_response|>"
            )),
            "{out}"
        );
    }

    /// A streamed reply's text goes out until the call's mark, held while it may be one.
    #[test]
    fn a_stream_holds_back_from_the_call() {
        let mut s = ToolStream::with_tools(ToolFormat::Gemma4, vec![weather()]);
        let mut out = s.push("Sure. <|tool");
        assert_eq!(out, "Sure. ");
        out += &s.push("_call>call:get_weather{city:<|\"|>Rome<|\"|>,days:1}<tool_call|>");
        assert_eq!(out, "Sure. ");
        let parsed = s.finish();
        assert_eq!(parsed.calls.len(), 1);
        assert_eq!(parsed.calls[0].arguments, r#"{"city":"Rome","days":1}"#);
    }

    /// The forced call's grammar writes the required arguments sorted, strings in Gemma's
    /// quotes (an enum's values as they are).
    #[test]
    fn the_forced_call_grammar_names_every_required_argument() {
        let g = forced_call(&[weather()]);
        assert!(g.starts_with("start: c0\nc0: \"<|tool_call>call:get_weather{\" \"city:\" gstr \",days:\" %json"), "{g}");
        assert!(g.contains("\"}<tool_call|>\""), "{g}");
        let unit = json!({"enum": ["C", "F"]});
        assert_eq!(string_rule(&unit), r#"("<|\"|>C<|\"|>" | "<|\"|>F<|\"|>")"#);
    }
}
