//! Tool calls written as a JSON list between two marks, after any text:
//!
//! ```text
//! <TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>      Nemotron Nano 2
//! <tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>  Apriel
//! <|tools_prefix|>[{"get_weather": {"city": "Paris"}}]<|tools_suffix|>                Apertus
//! ```
//!
//! Apertus keys each call by its function's name ([`ListMarks::keyed`]); the others write
//! `name` and `arguments`. The templates render a turn's `tool_calls` back in the same list (the
//! arguments as `tojson` writes them), so earlier calls need no rewriting.
//!
//! Owns [`ListMarks`] (which model's marks, read from the template), reading calls out of a
//! reply ([`parse`]) and the grammar that forces one ([`forced_call`]).
//!
//! Invariant: a reply is calls only if every block between the marks is a whole, non-empty
//! JSON list of calls (a missing end mark is a reply cut at its stop, at the very end only);
//! anything else stays text, as the other formats do.
//!
//! Counterpart: llama.cpp's template-derived parser (`common/chat.cpp`'s autoparser), which
//! reads the same lists from these templates; vLLM's `tool_parsers/` for Apertus and Apriel.

use serde_json::json;

use super::tools::{
    call_of, is_name_char, literal, mark_rule, named_call_grammar, nonempty_json_list, parse_lists_between, CallMarkers, ParsedCall, ParsedReply, Tool,
};

/// Which model's marks a list of calls sits between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListMarks {
    /// NVIDIA Nemotron Nano 2's `<TOOLCALL>` … `</TOOLCALL>`.
    Nemotron,
    /// ServiceNow Apriel's `<tool_calls>` … `</tool_calls>`.
    Apriel,
    /// Apertus's `<|tools_prefix|>` … `<|tools_suffix|>`, each call `{"NAME": {arguments}}`.
    Apertus,
}

impl ListMarks {
    /// The marks `template` (its Jinja source) writes a turn's calls between, if any of these:
    /// an open mark right before the list's `[` (Apertus's template names its marks as
    /// variables, so both marks anywhere) and the close mark.
    pub(super) fn of_template(template: &str) -> Option<Self> {
        [Self::Apertus, Self::Nemotron, Self::Apriel].into_iter().find(|&m| {
            let open = m == Self::Apertus || template.contains(&format!("{}[", m.open()));
            open && template.contains(m.open()) && template.contains(m.close())
        })
    }

    /// Before the list.
    pub fn open(self) -> &'static str {
        match self {
            Self::Nemotron => "<TOOLCALL>",
            Self::Apriel => "<tool_calls>",
            Self::Apertus => "<|tools_prefix|>",
        }
    }

    /// After it.
    pub fn close(self) -> &'static str {
        match self {
            Self::Nemotron => "</TOOLCALL>",
            Self::Apriel => "</tool_calls>",
            Self::Apertus => "<|tools_suffix|>",
        }
    }

    /// Whether a call is `{"NAME": {arguments}}` rather than `{"name": …, "arguments": …}`.
    fn keyed(self) -> bool {
        self == Self::Apertus
    }
}

/// The calls in `text`, text around them allowed; `None` when there are none or a block is not
/// a whole list of calls.
pub(super) fn parse(text: &str, m: ListMarks) -> Option<ParsedReply> {
    parse_lists_between(text, (m.open(), m.close()), true, |inner| list(inner, m.keyed()))
}

/// One block's calls: a non-empty JSON list of calls, nothing else but whitespace.
fn list(inner: &str, keyed: bool) -> Option<Vec<ParsedCall>> {
    nonempty_json_list(inner)?
        .iter()
        .map(|item| {
            let call = match (keyed, item.as_object()) {
                (true, Some(obj)) if obj.len() == 1 => {
                    let (name, args) = obj.iter().next()?;
                    call_of(&json!({"name": name, "arguments": args}))
                }
                (false, Some(_)) => call_of(item),
                _ => None,
            };
            call.filter(|c| c.name.chars().all(is_name_char))
        })
        .collect()
}

/// The grammar of one call of one of `tools`, as the templates write a turn's one call back: the
/// open mark (its special token where `markers` has it), `[`, the call's object (its name, then
/// its arguments valid against the tool's schema, laid out as `tojson` writes them), `]`, the
/// close mark. A rule per tool ([`named_call_grammar`]'s, the object's closing brace after it).
pub(super) fn forced_call(tools: &[Tool], m: ListMarks, markers: CallMarkers) -> String {
    let (before, between) = if m.keyed() { ("{\"", "\": ") } else { ("{\"name\": \"", "\", \"arguments\": ") };
    let calls = named_call_grammar(tools, &format!("{} ", literal(before)), &format!("{} ", literal(between)));
    format!(
        "start: {} \"[\" call \"}}]\" {}\n{}",
        mark_rule(markers.calls, m.open()),
        mark_rule(markers.end, m.close()),
        calls.replacen("start:", "call:", 1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::chat::tools::{assert_only_fixtures_are, call_then_result, weather_tool, ToolFormat, ToolStream};
    use crate::model::chat::{ChatTemplate, Message};

    /// llama.cpp's copies (`models/templates/`) of the three models' templates.
    const NEMOTRON: &str = include_str!("fixtures/nvidia-nemotron-nano-v2.jinja");
    const APRIEL: &str = include_str!("fixtures/apriel-1.6-15b-thinker.jinja");
    const APERTUS: &str = include_str!("fixtures/apertus-8b-instruct.jinja");

    /// Each template is its list format; no other fixture is one.
    #[test]
    fn the_templates_write_lists_between_their_marks() {
        for (t, m) in [(NEMOTRON, ListMarks::Nemotron), (APRIEL, ListMarks::Apriel), (APERTUS, ListMarks::Apertus)] {
            assert_eq!(ToolFormat::of_template(t), ToolFormat::JsonList(m));
        }
        assert_only_fixtures_are(&["nvidia-nemotron-nano-v2", "apriel", "apertus"], |f| matches!(f, ToolFormat::JsonList(_)));
    }

    /// A call the model made, sent back as history, renders in the list the model writes, which
    /// parses into the same call; then the result, and the prompt for the next turn.
    #[test]
    fn each_template_renders_calls_in_the_list_that_parses_back() {
        let cases = [
            (NEMOTRON, ListMarks::Nemotron, "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}]</TOOLCALL>"),
            // (Apriel's template would add the call's id in every turn but the last: hearth
            // leaves the ids out, as the model writes its calls.)
            (APRIEL, ListMarks::Apriel, "<tool_calls>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}]</tool_calls>"),
            (APERTUS, ListMarks::Apertus, "<|tools_prefix|>[{\"get_weather\": {\"city\": \"Paris\", \"days\": 3}}]<|tools_suffix|>"),
        ];
        for (source, m, written) in cases {
            let t = ChatTemplate::new(source.to_owned(), Some("<s>".into()), Some("</s>".into())).unwrap();
            let [call, result] = call_then_result("get_weather", r#"{"city": "Paris", "days": 3}"#, "sunny");
            let history = [Message::user("Weather?"), call, result];
            let format = ToolFormat::JsonList(m);
            let out = t.render_with_tools(&format.prepare(&history, &[weather_tool()], source), &[weather_tool().to_json()], true).unwrap();
            assert!(out.contains(written), "{m:?}: {out}");
            assert!(out.contains("sunny"), "{m:?}: {out}");
            let p = format.parse(written).unwrap();
            assert_eq!((p.calls[0].name.as_str(), p.calls[0].arguments.as_str()), ("get_weather", r#"{"city":"Paris","days":3}"#), "{m:?}");
        }
    }

    /// Several calls in a list, text before it; a reply cut at its stop; Apriel's ids dropped;
    /// anything that is not a whole list of calls stays text.
    #[test]
    fn calls_read_as_json_arguments() {
        let text = "Checking.\n<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {}}]</TOOLCALL>";
        let p = parse(text, ListMarks::Nemotron).unwrap();
        assert_eq!(p.content, "Checking.");
        let calls: Vec<(&str, &str)> = p.calls.iter().map(|c| (c.name.as_str(), c.arguments.as_str())).collect();
        assert_eq!(calls, [("get_weather", r#"{"city":"Paris"}"#), ("get_time", "{}")]);
        let cut = "<tool_calls>[{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"c1\"}]";
        assert_eq!(parse(cut, ListMarks::Apriel).unwrap().calls[0].arguments, r#"{"a":1}"#);
        let keyed = "<|tools_prefix|>[{\"f\": {\"a\": 1}}, {\"g\": {}}]<|tools_suffix|>";
        assert_eq!(parse(keyed, ListMarks::Apertus).unwrap().calls[1].name, "g");
        for (bad, m) in [
            ("<TOOLCALL>[]</TOOLCALL>", ListMarks::Nemotron),
            ("<TOOLCALL>{\"name\": \"f\"}</TOOLCALL>", ListMarks::Nemotron),
            ("<TOOLCALL>[{\"name\": \"f g\"}]</TOOLCALL>", ListMarks::Nemotron),
            ("<TOOLCALL>[{\"name\": \"f\"}] trailing</TOOLCALL>", ListMarks::Nemotron),
            ("<tool_calls>[{\"name\": \"f\", \"argu", ListMarks::Apriel),
            ("<|tools_prefix|>[{\"f\": {}, \"g\": {}}]<|tools_suffix|>", ListMarks::Apertus),
            ("<|tools_prefix|>[{\"f\": [1]}]<|tools_suffix|>", ListMarks::Apertus),
            ("<|tools_prefix|>[{\"name\": \"f\", \"arguments\": {}}]<|tools_suffix|>", ListMarks::Apertus),
            ("Just text.", ListMarks::Apriel),
        ] {
            assert_eq!(parse(bad, m), None, "{bad:?}");
        }
    }

    /// A streamed reply's text goes out until the open mark may have begun, then is held.
    #[test]
    fn a_stream_holds_back_from_the_list() {
        let mut s = ToolStream::with_tools(ToolFormat::JsonList(ListMarks::Nemotron), vec![weather_tool()]);
        assert_eq!(s.push("Sure. <TOOL"), "Sure. ");
        assert_eq!(s.push("CALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 1}}]</TOOLCALL>"), "");
        assert_eq!(s.finish().calls[0].arguments, r#"{"city":"Rome","days":1}"#);
    }

    /// The forced call's grammar writes the marks as the vocabulary's tokens where it has them,
    /// the call's object as the template writes it (named or keyed), the tool's schema.
    #[test]
    fn the_forced_call_grammar_writes_one_call_in_the_list() {
        let tokens = CallMarkers { calls: Some(7), args: None, end: Some(8), ..CallMarkers::default() };
        let g = forced_call(&[weather_tool()], ListMarks::Apertus, tokens);
        assert!(g.starts_with("start: <[7]> \"[\" call \"}]\" <[8]>\ncall: c0\n"), "{g}");
        assert!(g.contains("c0: \"{\\\"\" \"get_weather\" \"\\\": \" %json {"), "{g}");
        let g = forced_call(&[weather_tool()], ListMarks::Nemotron, CallMarkers::default());
        assert!(g.starts_with("start: \"<TOOLCALL>\" \"[\" call \"}]\" \"</TOOLCALL>\"\n"), "{g}");
        assert!(g.contains("c0: \"{\\\"name\\\": \\\"\" \"get_weather\" \"\\\", \\\"arguments\\\": \" %json {"), "{g}");
    }
}
