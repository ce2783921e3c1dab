//! Cohere's tool calls (Command R7B, Command A, and Cohere's MoE template): a JSON list of calls
//! between `<|START_ACTION|>` and `<|END_ACTION|>`, special tokens of its vocabulary:
//!
//! ```text
//! <|START_ACTION|>[
//!     {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}
//! ]<|END_ACTION|>
//! ```
//!
//! A reply is either text (Command R7B's between `<|START_RESPONSE|>` and `<|END_RESPONSE|>`,
//! the MoE template's between `<|START_TEXT|>` and `<|END_TEXT|>`: control tokens that decoding
//! leaves out, so the text reads as the answer alone) or calls, after any reasoning between
//! `<|START_THINKING|>` and `<|END_THINKING|>` (`chat::reasoning`). The templates render a turn's
//! `tool_calls` back themselves, numbering the ids across the conversation, and results as a
//! system turn between `<|START_TOOL_RESULT|>` and `<|END_TOOL_RESULT|>`.
//!
//! Owns reading calls out of a reply ([`parse`]: `tool_name` and `parameters`, the model's id
//! dropped) and the grammar that forces one ([`forced_call`]).
//!
//! Invariant: a reply is calls only if every `<|START_ACTION|>` block is a whole, non-empty
//! list of calls (a missing end mark is a reply cut at its stop, at the very end only);
//! anything else stays text, as the other formats do.
//!
//! Counterpart: llama.cpp's `common/parsers/cohere2moe.cpp` (`standard_json_tools` with
//! `tool_name`, `parameters` and a generated `tool_call_id`, wrapped in a list).

use serde_json::json;

use super::tools::{call_of, literal, mark_rule, named_call_grammar, nonempty_json_list, parse_lists_between, CallMarkers, ParsedCall, ParsedReply, Tool};

/// Before a list of calls, and after it (special tokens of Cohere's vocabulary).
pub(super) const START: &str = "<|START_ACTION|>";
pub(super) const END: &str = "<|END_ACTION|>";

/// A forced call's `tool_call_id`: a number (the templates count the conversation's calls from
/// 0), of at most four digits so that a model cannot run on in it.
const ID: &str = "/(0|[1-9][0-9]{0,3})/";

/// How the templates lay out a list of one call around it.
const LIST_OPEN: &str = "[\n    ";
const LIST_CLOSE: &str = "\n]";

/// Whether `template` (its Jinja source) writes calls in this format.
pub(super) fn writes(template: &str) -> bool {
    template.contains(START)
}

/// The calls in `text`, text around them allowed; `None` when there are none or a block is not
/// a whole list of calls.
pub(super) fn parse(text: &str) -> Option<ParsedReply> {
    // A missing end mark: cut at the stop, at the very end only.
    parse_lists_between(text, (START, END), true, block)
}

/// One block's calls: a non-empty JSON list of `{"tool_call_id", "tool_name", "parameters"}`.
fn block(inner: &str) -> Option<Vec<ParsedCall>> {
    nonempty_json_list(inner)?
        .iter()
        .map(|item| {
            let obj = item.as_object()?;
            let name = obj.get("tool_name")?.as_str()?;
            if !name.chars().all(super::tools::is_name_char) {
                return None;
            }
            let mut call = json!({"name": name});
            if let Some(args) = obj.get("parameters") {
                call["parameters"] = args.clone();
            }
            call_of(&call)
        })
        .collect()
}

/// The grammar of one call of one of `tools`, as the templates write a turn's one call back:
/// the start mark (its special token where the vocabulary has it), `[`, the call's object
/// (`tool_call_id` a number of up to four digits in quotes, `tool_name`, then `parameters` valid against the tool's
/// schema, laid out as `tojson` writes it), `]`, the end mark. A rule per tool
/// ([`named_call_grammar`]'s, the object's closing brace after it).
pub(super) fn forced_call(tools: &[Tool], markers: CallMarkers) -> String {
    let calls = named_call_grammar(
        tools,
        &format!("{} {ID} {} ", literal("{\"tool_call_id\": \""), literal("\", \"tool_name\": \"")),
        &format!("{} ", literal("\", \"parameters\": ")),
    );
    format!(
        "start: {} {} call \"}}\" {} {}\n{}",
        mark_rule(markers.calls, START),
        literal(LIST_OPEN),
        literal(LIST_CLOSE),
        mark_rule(markers.end, END),
        calls.replacen("start:", "call:", 1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::chat::reasoning::{Reasoning, ThinkTags};
    use crate::model::chat::tools::{assert_only_fixtures_are, call_then_result, weather_tool, ToolFormat, ToolStream};
    use crate::model::chat::{ChatTemplate, Message};

    const R7B: &str = include_str!("fixtures/cohere-command-r7b.jinja");
    const MOE: &str = include_str!("fixtures/cohere2-moe.jinja");

    /// Both Cohere templates are this format, with Cohere's reasoning marks; no other fixture
    /// is.
    #[test]
    fn the_templates_are_coheres() {
        for t in [R7B, MOE] {
            assert_eq!(ToolFormat::of_template(t), ToolFormat::Cohere);
            assert_eq!(Reasoning::tags_in_template(t), Some(ThinkTags::Cohere));
        }
        assert_only_fixtures_are(&["cohere"], |f| f == ToolFormat::Cohere);
    }

    /// Several calls in one list and in two blocks, text before them; the model's ids dropped;
    /// anything that is not a whole list of calls stays text.
    #[test]
    fn calls_read_as_json_arguments() {
        let text = "Let me check.<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \
                    \"parameters\": {\"city\": \"Paris\", \"days\": 3}},\n    {\"tool_call_id\": \"1\", \"tool_name\": \
                    \"get_time\", \"parameters\": {}}\n]<|END_ACTION|><|START_ACTION|>[{\"tool_name\": \"note\"}]<|END_ACTION|>";
        let p = ToolFormat::Cohere.parse(text).unwrap();
        assert_eq!(p.content, "Let me check.");
        let calls: Vec<(&str, &str)> = p.calls.iter().map(|c| (c.name.as_str(), c.arguments.as_str())).collect();
        assert_eq!(calls, [("get_weather", r#"{"city":"Paris","days":3}"#), ("get_time", "{}"), ("note", "{}")]);
        // Cut at the stop before the end mark: still the call.
        assert_eq!(parse("<|START_ACTION|>[{\"tool_name\": \"f\", \"parameters\": {\"a\": 1}}]").unwrap().calls.len(), 1);
        for bad in [
            "<|START_ACTION|>[]<|END_ACTION|>",
            "<|START_ACTION|>{\"tool_name\": \"f\"}<|END_ACTION|>",
            "<|START_ACTION|>[{\"name\": \"f\"}]<|END_ACTION|>",
            "<|START_ACTION|>[{\"tool_name\": \"f g\"}]<|END_ACTION|>",
            "<|START_ACTION|>[{\"tool_name\": \"f\", \"parameters\": [1]}]<|END_ACTION|>",
            "<|START_ACTION|>[{\"tool_name\": \"f\"}] trailing<|END_ACTION|>",
            "<|START_ACTION|>[{\"tool_name\": \"f\", \"param",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert_eq!(parse("Just text."), None);
    }

    /// A call read back and rendered by Command R7B's template as history is the call a forced
    /// call writes (the grammar's text around it), then the result in a system turn; the
    /// template's next turn follows.
    #[test]
    fn a_call_renders_back_as_a_forced_call_writes_it() {
        let call_json = r#"{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris", "days": 3}}"#;
        let written = format!("{START}{LIST_OPEN}{call_json}{LIST_CLOSE}{END}");
        let p = parse(&written).unwrap();
        let [call, result] = call_then_result(&p.calls[0].name, &p.calls[0].arguments, "sunny");
        let messages = ToolFormat::Cohere.prepare(&[Message::user("Weather?"), call, result], &[weather_tool()], R7B);
        let t = ChatTemplate::new(R7B.to_owned(), Some("<BOS_TOKEN>".into()), Some("<|END_OF_TURN_TOKEN|>".into())).unwrap();
        let out = t.render_with_tools(&messages, &[weather_tool().to_json()], true).unwrap();
        assert!(out.contains("\"name\": \"get_weather\""), "{out}");
        let turn = format!("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>{written}<|END_OF_TURN_TOKEN|>");
        assert!(out.contains(&turn), "{out}");
        assert!(out.contains("<|START_TOOL_RESULT|>"), "{out}");
        assert!(out.ends_with("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>"), "{out}");
    }

    /// A streamed reply's text goes out until the call's mark, held while it may be one.
    #[test]
    fn a_stream_holds_back_from_the_call() {
        let mut s = ToolStream::with_tools(ToolFormat::Cohere, vec![weather_tool()]);
        let mut out = s.push("Sure. <|START_AC");
        assert_eq!(out, "Sure. ");
        out += &s.push("TION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\", \"days\": 1}}]<|END_ACTION|>");
        assert_eq!(out, "Sure. ");
        let parsed = s.finish();
        assert_eq!(parsed.calls.len(), 1);
        assert_eq!(parsed.calls[0].arguments, r#"{"city":"Rome","days":1}"#);
    }

    /// The forced call's grammar writes the marks as the vocabulary's tokens where it has them,
    /// the list's layout as the template's, the tool's name and its schema.
    #[test]
    fn the_forced_call_grammar_names_the_tool_and_its_schema() {
        let tokens = CallMarkers {
            calls: Some(7),
            args: None,
            end: Some(8),
            ..CallMarkers::default()
        };
        let g = forced_call(&[weather_tool()], tokens);
        assert!(g.starts_with("start: <[7]> \"[\\n    \" call \"}\" \"\\n]\" <[8]>\ncall: c0\n"), "{g}");
        assert!(
            g.contains("c0: \"{\\\"tool_call_id\\\": \\\"\" /(0|[1-9][0-9]{0,3})/ \"\\\", \\\"tool_name\\\": \\\"\" \"get_weather\" \"\\\", \\\"parameters\\\": \" %json {"),
            "{g}"
        );
        let text = forced_call(&[weather_tool()], CallMarkers::default());
        assert!(text.starts_with("start: \"<|START_ACTION|>\" "), "{text}");
    }
}
