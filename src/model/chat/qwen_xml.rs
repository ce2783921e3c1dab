//! Qwen3-Coder's tool calls (also Qwen3.5's and Nemotron 3 Nano's templates): XML whose
//! argument values are raw text, one parameter a block:
//!
//! ```text
//! <tool_call>
//! <function=NAME>
//! <parameter=KEY>
//! VALUE
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! Owns reading calls out of a reply ([`parse`]) and the grammar that forces one
//! ([`forced_call`]). A value is the text between the parameter's lines (multi-line code as it
//! is); it is raw text where the tool's schema says the argument is a string, else JSON where it
//! parses (`20` a number, `{"a": 1}` an object), else text, as llama.cpp and vLLM type them.
//! Qwen3-Coder sometimes leaves out `<tool_call>`: a reply with no `<tool_call>` whose
//! `<function=NAME>` … `</function>` blocks are whole calls reads as those calls.
//!
//! Seed-OSS writes the same inside `<seed:tool_call>` … `</seed:tool_call>`, each value on its
//! parameter's line (`<parameter=KEY>VALUE</parameter>`): its [`Dialect`].
//!
//! Invariant: a reply is calls only if every block is a whole call (a name, parameter blocks
//! and nothing else); anything else stays text, as the other formats do.
//!
//! Counterpart: llama.cpp's `common/parsers/qwen3-coder.cpp`, vLLM's
//! `tool_parsers/qwen3coder_tool_parser.py`.

use super::tools::{
    literal, parse_blocks_between, required_args, rule_per_tool, xml_value_rule, CallMarkers, ParsedCall, ParsedReply, Tool, XmlArgs,
};

pub(super) const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
/// Seed-OSS's call wrapper.
pub(super) const SEED_OPEN: &str = "<seed:tool_call>";
pub(super) const SEED_CLOSE: &str = "</seed:tool_call>";

/// Which model's variant of the format: its call wrapper, and whether a value has a line of its
/// own (`<parameter=k>\nVALUE\n</parameter>`, Qwen3-Coder's) or not (Seed-OSS's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Dialect {
    open: &'static str,
    close: &'static str,
    value_lines: bool,
}

impl Dialect {
    /// Qwen3-Coder's (`seed` false) or Seed-OSS's.
    pub(super) fn of(seed: bool) -> Self {
        if seed {
            Self {
                open: SEED_OPEN,
                close: SEED_CLOSE,
                value_lines: false,
            }
        } else {
            Self {
                open: OPEN,
                close: CLOSE,
                value_lines: true,
            }
        }
    }
}
/// A call's function block opens `<function=NAME>` and closes so.
pub(super) const FUNCTION: &str = "<function=";
const FUNCTION_CLOSE: &str = "</function>";
const PARAMETER: &str = "<parameter=";
const PARAMETER_CLOSE: &str = "</parameter>";

/// Whether `template` (its Jinja source) writes calls in this format.
pub(super) fn writes(template: &str) -> bool {
    template.contains(FUNCTION) && template.contains(PARAMETER)
}

/// Whether `template` writes them in Seed-OSS's wrapper.
pub(super) fn seed_writes(template: &str) -> bool {
    template.contains(SEED_OPEN)
}

/// The calls in `text`: the dialect's `<tool_call>` blocks (or, with none, bare `<function=…>`
/// blocks), text around them allowed; `None` when there are none or one is not a whole call.
pub(super) fn parse(text: &str, tools: &[Tool], d: Dialect) -> Option<ParsedReply> {
    if text.contains(d.open) {
        parse_blocks_between(text, (d.open, d.close), true, |inner| call(inner.trim().strip_prefix(FUNCTION)?, tools))
    } else {
        // Cut off in a bare `<function=`: perhaps text that mentions one, so not a call.
        parse_blocks_between(text, (FUNCTION, FUNCTION_CLOSE), false, |inner| call(inner, tools))
    }
}

/// One call after its `<function=`: `NAME>`, parameter blocks, `</function>` (its end may be
/// cut off, or the block's closing tag already taken), and nothing else but whitespace.
fn call(s: &str, tools: &[Tool]) -> Option<ParsedCall> {
    let name_end = s.find('>')?;
    let mut args = XmlArgs::of(s[..name_end].trim(), tools)?;
    let mut rest = s[name_end + 1..].trim_start();
    loop {
        if rest.is_empty() || rest.strip_prefix(FUNCTION_CLOSE).is_some_and(|r| r.trim().is_empty()) {
            break;
        }
        let after = rest.strip_prefix(PARAMETER)?;
        let key_end = after.find('>')?;
        let key = after[..key_end].trim();
        let body = &after[key_end + 1..];
        let end = body.find(PARAMETER_CLOSE)?;
        // Qwen3-Coder's template writes `<parameter=k>\nVALUE\n</parameter>`: one line break each
        // side (Seed-OSS's none, which leaves nothing to strip).
        let raw = body[..end].strip_prefix('\n').unwrap_or(&body[..end]);
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        if key.is_empty() {
            return None;
        }
        args.insert(key, raw);
        rest = body[end + PARAMETER_CLOSE.len()..].trim_start();
    }
    args.call()
}

/// Where in `text` (a streamed reply) a call may have begun: at `<tool_call>` or `<function=`,
/// or at the end of a piece that may still become one. `Err(held)`: no call yet, and the last
/// `held` bytes must wait.
pub(super) fn call_start(text: &str, d: Dialect) -> Result<usize, usize> {
    match [d.open, FUNCTION].iter().filter_map(|m| text.find(m)).min() {
        Some(at) => Ok(at),
        None => Err(super::tools::partial_suffix(text, d.open).max(super::tools::partial_suffix(text, FUNCTION))),
    }
}

/// The grammar of one call of one of `tools`, as the template writes calls back: the dialect's
/// `<tool_call>`, `<function=NAME>`, each required argument of its schema in the schema's order
/// as a parameter block, `</function>`, `</tool_call>`. A string argument's value is text
/// without `</` (code with `<` in it passes), any other its JSON under its schema. A rule per
/// tool. The wrapper is written as its special tokens where `markers` has them (Seed-OSS's),
/// as the model writes it.
pub(super) fn forced_call(tools: &[Tool], d: Dialect, markers: CallMarkers) -> String {
    let nl = if d.value_lines { "\n" } else { "" };
    let (open, close) = match (markers.calls, markers.end) {
        (Some(o), Some(c)) => (format!("<[{o}]> "), format!(" <[{c}]>")),
        _ => (literal(d.open) + " ", format!(" {}", literal(d.close))),
    };
    rule_per_tool(tools, |t| {
        let mut body = format!("{open}{}", literal(&format!("\n{FUNCTION}{}>\n", t.name)));
        for (k, schema) in required_args(t) {
            let key = literal(&format!("{PARAMETER}{k}>{nl}"));
            let value = xml_value_rule(schema);
            let end = literal(&format!("{nl}{PARAMETER_CLOSE}\n"));
            body.push_str(&format!(" {key} {value} {end}"));
        }
        body.push_str(&format!(" {}{close}", literal(&format!("{FUNCTION_CLOSE}\n"))));
        body
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::model::chat::tools::{write_tool, ToolFormat, ToolStream};
    use crate::model::chat::{ChatTemplate, Message, ToolCall};

    const TEMPLATE: &str = include_str!("fixtures/qwen3-coder-30b-a3b-instruct.jinja");

    /// The template (llama.cpp's copy of Qwen3-Coder's) is recognised, and a call renders back
    /// in the XML the model writes, which parses into the same call.
    #[test]
    fn the_template_renders_calls_in_the_xml_that_parses_back() {
        assert_eq!(ToolFormat::of_template(TEMPLATE), ToolFormat::QwenXml { seed: false });
        assert_eq!(ToolFormat::of_template(include_str!("fixtures/qwen3-0.6b.jinja")), ToolFormat::Hermes);
        let t = ChatTemplate::new(TEMPLATE.to_owned(), None, Some("<|im_end|>".into())).unwrap();
        let mut said = Message::assistant(String::new());
        said.tool_calls = vec![ToolCall {
            id: "c1".into(),
            name: "write_file".into(),
            arguments: "{\"content\": \"fn main() {\\n    if a < b {}\\n}\", \"lines\": 3, \"path\": \"src/main.rs\"}".into(),
        }];
        let history = [Message::user("Write it."), said];
        let out = t.render_with_tools(&history, &[write_tool().to_json()], false).unwrap();
        let written = "<tool_call>\n<function=write_file>\n<parameter=content>\nfn main() {\n    if a < b {}\n}\n</parameter>\n\
                       <parameter=lines>\n3\n</parameter>\n<parameter=path>\nsrc/main.rs\n</parameter>\n</function>\n</tool_call>";
        assert!(out.contains(&format!("<|im_start|>assistant\n{written}<|im_end|>")), "{out}");
        assert!(out.contains("<name>write_file</name>") && out.contains("<parameter=example_parameter_1>"), "{out}");
        let p = ToolFormat::QwenXml { seed: false }.parse_for(written, &[write_tool()]).unwrap();
        let args: Value = serde_json::from_str(&p.calls[0].arguments).unwrap();
        assert_eq!(args, json!({"content": "fn main() {\n    if a < b {}\n}", "lines": 3, "path": "src/main.rs"}));
    }

    /// Values are raw text for string arguments (even ones that read as JSON), JSON for the
    /// others where it parses; several calls, text before them, a call without `<tool_call>`;
    /// anything malformed stays text.
    #[test]
    fn calls_parse_by_the_tools_schemas() {
        let text = "I'll write it.\n<tool_call>\n<function=write_file>\n<parameter=path>\n123\n</parameter>\n\
                    <parameter=content>\n{\"a\": 1}\n</parameter>\n<parameter=lines>\n20\n</parameter>\n\
                    <parameter=opts>\n{\"x\": true}\n</parameter>\n<parameter=mode>\nw\n</parameter>\n</function>\n</tool_call>\n\
                    <tool_call>\n<function=list_dir>\n</function>\n</tool_call>";
        let p = parse(text, &[write_tool()], Dialect::of(false)).unwrap();
        assert_eq!(p.content, "I'll write it.");
        let args: Value = serde_json::from_str(&p.calls[0].arguments).unwrap();
        assert_eq!(args, json!({"path": "123", "content": "{\"a\": 1}", "lines": 20, "opts": {"x": true}, "mode": "w"}));
        assert_eq!((p.calls[1].name.as_str(), p.calls[1].arguments.as_str()), ("list_dir", "{}"));
        // Python's spellings (a template rendered by Python writes `True`) where not a string.
        let py = "<tool_call>\n<function=write_file>\n<parameter=opts>\nTrue\n</parameter>\n<parameter=path>\nNone\n</parameter>\n</function>\n</tool_call>";
        assert_eq!(parse(py, &[write_tool()], Dialect::of(false)).unwrap().calls[0].arguments, "{\"opts\":true,\"path\":\"None\"}");
        // Without the schemas, JSON where it parses.
        let args: Value = serde_json::from_str(&parse(text, &[], Dialect::of(false)).unwrap().calls[0].arguments).unwrap();
        assert_eq!((&args["path"], &args["mode"]), (&json!(123), &json!("w")));
        // Qwen3-Coder leaving out `<tool_call>`; a reply cut off after the last parameter.
        let bare = "<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n</function>";
        assert_eq!(parse(bare, &[write_tool()], Dialect::of(false)).unwrap().calls[0].arguments, "{\"path\":\"a.txt\"}");
        let cut = "<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n";
        assert_eq!(parse(cut, &[write_tool()], Dialect::of(false)).unwrap().calls[0].name, "write_file");
        for bad in [
            "<tool_call>\n<function=two words>\n</function>\n</tool_call>",
            "<tool_call>\n<function=f>\nstray\n</function>\n</tool_call>",
            "<tool_call>\n<function=f>\n<parameter=a>\nno close\n</function>\n</tool_call>",
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
            "plain text",
        ] {
            assert_eq!(parse(bad, &[], Dialect::of(false)), None, "{bad:?}");
        }
    }

    /// Streamed: text goes out until `<tool_call>` or `<function=` may have begun, then all is
    /// held and read with the schemas at the end.
    #[test]
    fn a_stream_holds_from_where_a_call_may_begin() {
        let mut s = ToolStream::with_tools(ToolFormat::QwenXml { seed: false }, vec![write_tool()]);
        assert_eq!(s.push("Writing.\n<tool"), "Writing.\n");
        assert_eq!(s.push("_call>\n<function=write_file>\n<parameter=path>\n7\n</parameter>\n"), "");
        assert_eq!(s.push("</function>\n</tool_call>"), "");
        let done = s.finish();
        assert_eq!(done.calls[0].arguments, "{\"path\":\"7\"}");
        let mut s = ToolStream::with_tools(ToolFormat::QwenXml { seed: false }, vec![write_tool()]);
        assert_eq!(s.push("#include <functional> and <func"), "#include <functional> and ");
        assert_eq!(s.push("tion=write_file>\n"), "");
        let done = s.finish();
        assert!(done.calls.is_empty() && done.content == "<function=write_file>\n", "{done:?}");
    }

    /// The forced call writes each required argument: strings as text without `</`, the others
    /// as JSON under their schemas.
    #[test]
    fn the_forced_call_writes_each_required_argument() {
        let mut t = write_tool();
        t.parameters["required"] = json!(["path", "lines", "mode"]);
        let g = forced_call(&[t], Dialect::of(false), CallMarkers::default());
        assert!(g.starts_with("start: c0\nc0: \"<tool_call>\" \"\\n<function=write_file>\\n\" \"<parameter=path>\\n\" /([^<]|<[^\\/])*/ \"\\n</parameter>\\n\""), "{g}");
        assert!(g.contains("\"<parameter=lines>\\n\" %json {") && g.contains("\"<parameter=mode>\\n\" (\"a\" | \"w\")"), "{g}");
        assert!(!g.contains("content") && g.ends_with("\"</function>\\n\" \"</tool_call>\""), "{g}");
        // Seed-OSS's wrapper as its special tokens, where the vocabulary has them.
        let markers = CallMarkers { calls: Some(7), args: None, end: Some(8), ..CallMarkers::default() };
        let g = forced_call(&[write_tool()], Dialect::of(true), markers);
        assert!(g.starts_with("start: c0\nc0: <[7]> \"\\n<function=write_file>\\n\" \"<parameter=path>\" "), "{g}");
        assert!(g.ends_with("\"</parameter>\\n\" \"</function>\\n\" <[8]>"), "{g}");
    }
}
