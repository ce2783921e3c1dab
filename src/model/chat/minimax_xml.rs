//! MiniMax-M2's tool calls (M2, M2.1, M2.5): XML whose argument values are raw text, the calls of
//! one turn in one block:
//!
//! ```text
//! <minimax:tool_call>
//! <invoke name="NAME">
//! <parameter name="KEY">VALUE</parameter>
//! </invoke>
//! </minimax:tool_call>
//! ```
//!
//! Owns reading calls out of a reply ([`parse`]) and the grammar that forces one
//! ([`forced_call`]). A value is the text between its tags (one line break either side
//! dropped, as a model may write them); it is raw text where the tool's schema says the argument
//! is a string, else JSON where it parses (`20` a number, `{"a": 1}` an object), else text, as
//! the template writes them back (`v | tojson` unless `v is string`). The template renders a
//! turn's `tool_calls` back in this layout and results as a `tool` turn of `<response>` blocks,
//! so earlier calls need no rewriting.
//!
//! Invariant: a reply is calls only if every block is a whole list of calls (`<invoke>` blocks
//! of a quoted name and parameter blocks, nothing else; the last may be cut off at the reply's
//! stop); anything else stays text, as the other formats do.
//!
//! Counterpart: vLLM's `tool_parsers/minimax_m2_tool_parser.py`; llama.cpp reads it with its
//! template-derived parser (`common/chat.cpp`'s autoparser).

use super::tools::{
    literal, mark_rule, only_blocks, parse_lists_between, required_args, rule_per_tool, xml_value_rule, CallMarkers, ParsedCall, ParsedReply, Tool, XmlArgs,
};

/// Before a turn's calls and after them.
pub(super) const OPEN: &str = "<minimax:tool_call>";
pub(super) const CLOSE: &str = "</minimax:tool_call>";
/// One call: `<invoke name="NAME">` … `</invoke>`.
const INVOKE: &str = "<invoke name=\"";
const INVOKE_CLOSE: &str = "</invoke>";
/// One argument: `<parameter name="KEY">VALUE</parameter>`.
const PARAMETER: &str = "<parameter name=\"";
const PARAMETER_CLOSE: &str = "</parameter>";

/// Whether `template` (its Jinja source) writes calls in this format.
pub(super) fn writes(template: &str) -> bool {
    template.contains(OPEN) && template.contains("<invoke name=")
}

/// The calls in `text`, text around their blocks allowed; `None` when there are none or a block
/// is not a whole list of calls. A block's missing close tag is a reply cut at its stop, at the
/// very end only.
pub(super) fn parse(text: &str, tools: &[Tool]) -> Option<ParsedReply> {
    parse_lists_between(text, (OPEN, CLOSE), true, |inner| block(inner, tools))
}

/// One block's calls: `<invoke>` blocks and whitespace, at least one; the last one's
/// `</invoke>` may be cut off.
fn block(inner: &str, tools: &[Tool]) -> Option<Vec<ParsedCall>> {
    only_blocks(inner, (INVOKE, INVOKE_CLOSE), |body| call(body, tools))
}

/// One call after its `<invoke name="`: `NAME">`, parameter blocks, and nothing else but
/// whitespace.
fn call(s: &str, tools: &[Tool]) -> Option<ParsedCall> {
    let name_end = s.find("\">")?;
    let mut args = XmlArgs::of(&s[..name_end], tools)?;
    let mut rest = s[name_end + 2..].trim_start();
    while !rest.is_empty() {
        let after = rest.strip_prefix(PARAMETER)?;
        let key_end = after.find("\">")?;
        let key = &after[..key_end];
        let body = &after[key_end + 2..];
        let end = body.find(PARAMETER_CLOSE)?;
        if key.is_empty() || key.contains('"') {
            return None;
        }
        let raw = body[..end].strip_prefix('\n').unwrap_or(&body[..end]);
        args.insert(key, raw.strip_suffix('\n').unwrap_or(raw));
        rest = body[end + PARAMETER_CLOSE.len()..].trim_start();
    }
    args.call()
}

/// The grammar of one call of one of `tools`, as the template writes a turn's one call back:
/// the wrapper (its special tokens where `markers` has them), `<invoke name="NAME">`, each
/// required argument of its schema in the schema's order as a parameter line, `</invoke>`, the
/// wrapper's end. A string argument's value is text without `</` (code with `<` in it passes),
/// any other its JSON under its schema. A rule per tool.
pub(super) fn forced_call(tools: &[Tool], markers: CallMarkers) -> String {
    let (open, close) = (mark_rule(markers.calls, OPEN), mark_rule(markers.end, CLOSE));
    rule_per_tool(tools, |t| {
        let mut body = format!("{open} {}", literal(&format!("\n{INVOKE}{}\">\n", t.name)));
        for (k, schema) in required_args(t) {
            let value = xml_value_rule(schema);
            let key = literal(&format!("{PARAMETER}{k}\">"));
            body.push_str(&format!(" {key} {value} {}", literal(&format!("{PARAMETER_CLOSE}\n"))));
        }
        body.push_str(&format!(" {} {close}", literal(&format!("{INVOKE_CLOSE}\n"))));
        body
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::model::chat::reasoning::{Reasoning, ThinkTags};
    use crate::model::chat::tools::{assert_only_fixtures_are, call_then_result, write_tool, ToolFormat, ToolStream};
    use crate::model::chat::{ChatTemplate, Message};

    /// llama.cpp's copy (`models/templates/MiniMax-M2.jinja`) of MiniMax-M2's template.
    const TEMPLATE: &str = include_str!("fixtures/minimax-m2.jinja");

    /// The template is this format, with `<think>` reasoning that its prompt opens; no other
    /// fixture is this format.
    #[test]
    fn the_template_is_minimaxs() {
        assert_eq!(ToolFormat::of_template(TEMPLATE), ToolFormat::MinimaxXml);
        assert_eq!(Reasoning::tags_in_template(TEMPLATE), Some(ThinkTags::Think));
        assert_only_fixtures_are(&["minimax"], |f| f == ToolFormat::MinimaxXml);
    }

    /// A call the model made, sent back as history, renders in the XML the model writes (values
    /// raw where strings, JSON otherwise), which parses into the same call; the result renders
    /// as a `tool` turn and the prompt opens the reasoning.
    #[test]
    fn the_template_renders_calls_in_the_xml_that_parses_back() {
        let t = ChatTemplate::new(TEMPLATE.to_owned(), Some("]~!b[".into()), Some("[e~[".into())).unwrap();
        let arguments = r#"{"path": "src/main.rs", "content": "fn main() {\n    if a < b {}\n}", "lines": 3, "opts": {"x": [1, 2]}}"#;
        let [said, result] = call_then_result("write_file", arguments, "written");
        let history = [Message::user("Write it."), said, result];
        let messages = ToolFormat::MinimaxXml.prepare(&history, &[write_tool()], TEMPLATE);
        let out = t.render_with_tools(&messages, &[write_tool().to_json()], true).unwrap();
        let written = "<minimax:tool_call>\n<invoke name=\"write_file\">\n<parameter name=\"path\">src/main.rs</parameter>\n\
                       <parameter name=\"content\">fn main() {\n    if a < b {}\n}</parameter>\n<parameter name=\"lines\">3</parameter>\n\
                       <parameter name=\"opts\">{\"x\": [1, 2]}</parameter>\n</invoke>\n</minimax:tool_call>";
        assert!(out.contains(&format!("]~b]ai\n\n{written}[e~[\n")), "{out}");
        assert!(out.contains("]~b]tool\n<response>written</response>[e~[\n"), "{out}");
        assert!(out.contains("<tool>{\"name\": \"write_file\""), "{out}");
        assert!(out.ends_with("]~b]ai\n<think>\n"), "{out}");
        assert!(Reasoning::for_prompt(ThinkTags::Think, &out).starts_open);
        let p = ToolFormat::MinimaxXml.parse_for(written, &[write_tool()]).unwrap();
        let args: Value = serde_json::from_str(&p.calls[0].arguments).unwrap();
        assert_eq!(args, json!({"path": "src/main.rs", "content": "fn main() {\n    if a < b {}\n}", "lines": 3, "opts": {"x": [1, 2]}}));
    }

    /// Values are raw text for string arguments (even ones that read as JSON), JSON for the
    /// others where it parses; several calls in a block, text before it; a reply cut at its
    /// stop; anything malformed stays text.
    #[test]
    fn calls_parse_by_the_tools_schemas() {
        let text = "I'll write it.\n<minimax:tool_call>\n<invoke name=\"write_file\">\n<parameter name=\"path\">123</parameter>\n\
                    <parameter name=\"content\">{\"a\": 1}</parameter>\n<parameter name=\"lines\">20</parameter>\n\
                    <parameter name=\"opts\">\n{\"x\": true}\n</parameter>\n<parameter name=\"mode\">w</parameter>\n</invoke>\n\
                    <invoke name=\"list_dir\">\n</invoke>\n</minimax:tool_call>";
        let p = parse(text, &[write_tool()]).unwrap();
        assert_eq!(p.content, "I'll write it.");
        let args: Value = serde_json::from_str(&p.calls[0].arguments).unwrap();
        assert_eq!(args, json!({"path": "123", "content": "{\"a\": 1}", "lines": 20, "opts": {"x": true}, "mode": "w"}));
        assert_eq!((p.calls[1].name.as_str(), p.calls[1].arguments.as_str()), ("list_dir", "{}"));
        // Without the schemas, JSON where it parses.
        let args: Value = serde_json::from_str(&parse(text, &[]).unwrap().calls[0].arguments).unwrap();
        assert_eq!((&args["path"], &args["mode"]), (&json!(123), &json!("w")));
        // Cut off at the stop after the last parameter.
        let cut = "<minimax:tool_call>\n<invoke name=\"write_file\">\n<parameter name=\"path\">a.txt</parameter>\n";
        assert_eq!(parse(cut, &[write_tool()]).unwrap().calls[0].arguments, "{\"path\":\"a.txt\"}");
        for bad in [
            "<minimax:tool_call>\n</minimax:tool_call>",
            "<minimax:tool_call>\n<invoke name=\"two words\">\n</invoke>\n</minimax:tool_call>",
            "<minimax:tool_call>\n<invoke name=\"f\">\nstray\n</invoke>\n</minimax:tool_call>",
            "<minimax:tool_call>\n<invoke name=\"f\">\n<parameter name=\"a\">no close\n</invoke>\n</minimax:tool_call>",
            "<minimax:tool_call>\n<invoke name=\"f\">\n</invoke>\ntrailing\n</minimax:tool_call>",
            "<minimax:tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</minimax:tool_call>",
            "<invoke name=\"f\">\n</invoke>",
            "plain text",
        ] {
            assert_eq!(parse(bad, &[]), None, "{bad:?}");
        }
    }

    /// Streamed: text goes out until `<minimax:tool_call>` may have begun, then all is held and
    /// read with the schemas at the end.
    #[test]
    fn a_stream_holds_from_where_a_call_may_begin() {
        let mut s = ToolStream::with_tools(ToolFormat::MinimaxXml, vec![write_tool()]);
        assert_eq!(s.push("Writing.\n<mini"), "Writing.\n");
        assert_eq!(s.push("max:tool_call>\n<invoke name=\"write_file\">\n<parameter name=\"path\">7</parameter>\n"), "");
        assert_eq!(s.push("</invoke>\n</minimax:tool_call>"), "");
        let done = s.finish();
        // (The text before the call went out already.)
        assert_eq!((done.content.as_str(), done.calls[0].arguments.as_str()), ("", "{\"path\":\"7\"}"));
        let mut s = ToolStream::with_tools(ToolFormat::MinimaxXml, vec![write_tool()]);
        assert_eq!(s.push("a <min"), "a ");
        assert_eq!(s.push("us> b"), "<minus> b");
    }

    /// The forced call writes each required argument on its line: strings as text without `</`,
    /// the others as JSON under their schemas; the wrapper as special tokens where the
    /// vocabulary has them. Its text, with a string value, parses back into the call.
    #[test]
    fn the_forced_call_writes_each_required_argument() {
        let mut t = write_tool();
        t.parameters["required"] = json!(["path", "lines", "mode"]);
        let g = forced_call(std::slice::from_ref(&t), CallMarkers::default());
        let head = "start: c0\nc0: \"<minimax:tool_call>\" \"\\n<invoke name=\\\"write_file\\\">\\n\" \
                    \"<parameter name=\\\"path\\\">\" /([^<]|<[^\\/])*/ \"</parameter>\\n\"";
        assert!(g.starts_with(head), "{g}");
        assert!(g.contains("\"<parameter name=\\\"lines\\\">\" %json {") && g.contains("\"<parameter name=\\\"mode\\\">\" (\"a\" | \"w\")"), "{g}");
        assert!(!g.contains("content") && g.ends_with("\"</invoke>\\n\" \"</minimax:tool_call>\""), "{g}");
        let markers = CallMarkers { calls: Some(7), args: None, end: Some(8), ..CallMarkers::default() };
        let g = forced_call(&[write_tool()], markers);
        assert!(g.starts_with("start: c0\nc0: <[7]> \"\\n<invoke") && g.ends_with("\"</invoke>\\n\" <[8]>"), "{g}");
        let text = "<minimax:tool_call>\n<invoke name=\"write_file\">\n<parameter name=\"path\">a.rs</parameter>\n\
                    <parameter name=\"content\">x</parameter>\n</invoke>\n</minimax:tool_call>";
        assert_eq!(parse(text, &[write_tool()]).unwrap().calls[0].arguments, "{\"path\":\"a.rs\",\"content\":\"x\"}");
    }
}
