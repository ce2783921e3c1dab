//! DeepSeek's tool calls: a list of calls between special tokens, each call its head, a
//! separator and its arguments:
//!
//! ```text
//! <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//! ```
//!
//! as DeepSeek-V3.1 (and V3.1-Terminus) writes them, or (`fenced`) as DeepSeek-R1 and V3-0324
//! write them in llama.cpp's template for them, the head the call's type and the arguments
//! in a JSON fence after the function's name:
//!
//! ```text
//! <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
//! ```json
//! {"city": "Paris"}
//! ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//! ```
//!
//! V3.1's template renders earlier calls and their results but never the offered tools: hearth
//! describes them in the system prompt in the words of DeepSeek's model card ([`describe`], as
//! vLLM's tool template for V3.1 does). R1's distills' templates render calls the fenced way but
//! no tools, and their models never learnt to call: they stay `ToolFormat::Injected`.
//!
//! Owns: the marks, reading calls out of a reply ([`parse`]), the grammar that forces one
//! ([`forced_call`]) and the tools' description ([`describe`]).
//!
//! Invariant: a reply is calls only if every block in every list is a whole call (a missing end
//! mark is a reply cut at its stop, at the very end only); anything else stays text, as the
//! other formats do.
//!
//! Counterpart: llama.cpp's DeepSeek handling (`common/chat.cpp`); vLLM's
//! `deepseekv31_tool_parser.py` and `deepseekv3_tool_parser.py`.

use serde_json::{json, Value};

use super::python::dumps;
use super::tools::{call_of, is_name_char, literal, mark_rule, named_call_grammar, only_blocks, parse_lists_between, CallMarkers, ParsedCall, ParsedReply, Tool};

/// Before and after a turn's calls.
pub(super) const CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
pub(super) const CALLS_END: &str = "<｜tool▁calls▁end｜>";
/// Before and after each call.
pub(super) const CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
pub(super) const CALL_END: &str = "<｜tool▁call▁end｜>";
/// Between a call's head and the rest.
pub(super) const SEP: &str = "<｜tool▁sep｜>";
/// Around the fenced form's arguments.
const FENCE: (&str, &str) = ("```json", "```");
/// The fenced form's head: the call's type.
const FUNCTION: &str = "function";

/// Whether `template` (its Jinja source) writes DeepSeek's calls, and if so whether fenced.
pub(super) fn writes(template: &str) -> Option<bool> {
    (template.contains(CALLS_BEGIN) && template.contains(SEP)).then(|| template.contains(FENCE.0))
}

/// The calls in `text`, text around them allowed; `None` when there are none or a list holds
/// anything but whole calls.
pub(super) fn parse(text: &str, fenced: bool) -> Option<ParsedReply> {
    parse_lists_between(text, (CALLS_BEGIN, CALLS_END), true, |inner| calls(inner, fenced))
}

/// One list's calls: blocks between the call marks, whitespace between them (llama.cpp's R1
/// template writes a line break), the last block's end mark missing where the reply was cut.
fn calls(inner: &str, fenced: bool) -> Option<Vec<ParsedCall>> {
    only_blocks(inner, (CALL_BEGIN, CALL_END), |block| call(block, fenced))
}

/// One call's block: the function's name and its arguments, a JSON object.
fn call(block: &str, fenced: bool) -> Option<ParsedCall> {
    let (head, body) = block.split_once(SEP)?;
    let (name, args) = match fenced {
        true if head.trim() == FUNCTION => {
            let (name, rest) = body.split_once('\n')?;
            (name, rest.trim().strip_prefix(FENCE.0)?.strip_suffix(FENCE.1)?)
        }
        true => return None,
        false => (head, body),
    };
    let name = name.trim();
    if name.is_empty() || !name.chars().all(is_name_char) {
        return None;
    }
    let args = serde_json::from_str::<Value>(args.trim()).ok().filter(Value::is_object)?;
    call_of(&json!({"name": name, "arguments": args}))
}

/// The grammar of one call of one of `tools`, as the templates write a turn's one call back:
/// the marks (their special tokens where `markers` has them) around the call's name, the
/// separator and its arguments valid against the tool's schema, laid out as `tojson` writes
/// them (the fenced form: `function`, the separator, the name, a line break and the fenced
/// arguments).
pub(super) fn forced_call(tools: &[Tool], fenced: bool, markers: CallMarkers) -> String {
    let sep = mark_rule(markers.args, SEP);
    let (calls, close) = match fenced {
        true => (named_call_grammar(tools, &format!("{} {sep} ", literal(FUNCTION)), &format!("{} ", literal(&format!("\n{}\n", FENCE.0)))), literal(&format!("\n{}", FENCE.1))),
        false => (named_call_grammar(tools, "", &format!("{sep} ")), String::new()),
    };
    let (call_begin, call_end) = markers.call.unzip();
    format!(
        "start: {} {} call {close} {} {}\n{}",
        mark_rule(markers.calls, CALLS_BEGIN),
        mark_rule(call_begin, CALL_BEGIN),
        mark_rule(call_end, CALL_END),
        mark_rule(markers.end, CALLS_END),
        calls.replacen("start:", "call:", 1)
    )
}

/// The offered tools described as DeepSeek-V3.1's model card does, for the system prompt: each
/// tool's name, description and parameters (`json.dumps`'s layout), then the call format.
pub(super) fn describe(tools: &[Tool]) -> String {
    let mut text = String::from("## Tools\nYou have access to the following tools:\n");
    for t in tools {
        let description = t.description.as_deref().unwrap_or_default();
        text.push_str(&format!("\n### {}\nDescription: {description}\n\nParameters: {}\n", t.name, dumps(&t.parameters)));
    }
    text.push_str(&format!(
        "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n{CALLS_BEGIN}{CALL_BEGIN}tool_call_name{SEP}\
         tool_call_arguments{CALL_END}{{additional_tool_calls}}{CALLS_END}\n\nWhere:\n\
         - `tool_call_name` must be an exact match to one of the available tools\n\
         - `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n\
         - For multiple tool calls, chain them directly without separators or spaces"
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::chat::tools::{assert_only_fixtures_are, call_then_result, weather_tool, ToolFormat, ToolStream};
    use crate::model::chat::{ChatTemplate, Message, Role};

    /// DeepSeek-V3.1's template and llama.cpp's for DeepSeek-R1 (`models/templates/`).
    const V31: &str = include_str!("fixtures/deepseek-v3.1.jinja");
    const R1: &str = include_str!("fixtures/deepseek-r1-llama-cpp.jinja");

    /// Both templates are this format (R1's fenced); R1's distills' are not (they render no
    /// tools), nor any other fixture.
    #[test]
    fn the_templates_write_deepseeks_calls() {
        assert_eq!(ToolFormat::of_template(V31), ToolFormat::DeepSeek { fenced: false });
        assert_eq!(ToolFormat::of_template(R1), ToolFormat::DeepSeek { fenced: true });
        assert_eq!(ToolFormat::of_template(include_str!("fixtures/deepseek-r1-distill-qwen-32b.jinja")), ToolFormat::Injected);
        assert_only_fixtures_are(&["deepseek-v3.1", "deepseek-r1-llama-cpp"], |f| matches!(f, ToolFormat::DeepSeek { .. }));
    }

    /// A call the model made, sent back as history, renders as the model writes it, which
    /// parses into the same call; then its result, and the prompt for the next turn. V3.1's
    /// prompt describes the offered tools (in the system prompt, after the user's own).
    #[test]
    fn each_template_renders_calls_as_written_and_parses_them_back() {
        let cases = [
            (V31, false, format!("{CALLS_BEGIN}{CALL_BEGIN}get_weather{SEP}{{\"city\": \"Paris\", \"days\": 3}}{CALL_END}{CALLS_END}")),
            (R1, true, format!("{CALLS_BEGIN}{CALL_BEGIN}function{SEP}get_weather\n```json\n{{\"city\": \"Paris\", \"days\": 3}}\n```{CALL_END}{CALLS_END}")),
        ];
        for (source, fenced, written) in cases {
            let t = ChatTemplate::new(source.to_owned(), Some("<｜begin▁of▁sentence｜>".into()), Some("<｜end▁of▁sentence｜>".into())).unwrap();
            let [call, result] = call_then_result("get_weather", r#"{"city": "Paris", "days": 3}"#, "sunny");
            let history = [Message::system("Be brief."), Message::user("Weather?"), call, result];
            let format = ToolFormat::DeepSeek { fenced };
            let out = t.render_with_tools(&format.prepare(&history, &[weather_tool()], source), &[weather_tool().to_json()], true).unwrap();
            assert!(out.contains(&written), "{fenced}: {out}");
            assert!(out.contains("sunny"), "{fenced}: {out}");
            assert!(out.contains("get_weather"), "{fenced}: {out}");
            if !fenced {
                assert!(out.starts_with(&format!("<｜begin▁of▁sentence｜>Be brief.\n\n{}", describe(&[weather_tool()]))), "{out}");
            }
            let p = format.parse(&written).unwrap();
            assert_eq!((p.calls[0].name.as_str(), p.calls[0].arguments.as_str()), ("get_weather", r#"{"city":"Paris","days":3}"#), "{fenced}");
        }
    }

    /// The model card's description, word for word (its example's layout), a tool without a
    /// description included.
    #[test]
    fn the_tools_are_described_as_the_model_card_does() {
        let mut bare = weather_tool();
        bare.name = "get_time".into();
        bare.description = None;
        bare.parameters = json!({});
        let text = describe(&[bare]);
        assert_eq!(
            text,
            "## Tools\nYou have access to the following tools:\n\n### get_time\nDescription: \n\nParameters: {}\n\n\
             IMPORTANT: ALWAYS adhere to this exact format for tool use:\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name\
             <｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜>{additional_tool_calls}<｜tool▁calls▁end｜>\n\nWhere:\n\
             - `tool_call_name` must be an exact match to one of the available tools\n\
             - `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n\
             - For multiple tool calls, chain them directly without separators or spaces"
        );
        // Without a system message the description is one, after the blank line the card puts
        // after the (empty) system prompt.
        let msgs = ToolFormat::DeepSeek { fenced: false }.prepare(&[Message::user("Hi")], &[weather_tool()], V31);
        assert_eq!((msgs[0].role.clone(), msgs[0].content.clone()), (Role::System, format!("\n\n{}", describe(&[weather_tool()]))));
        // Without tools nothing changes.
        assert_eq!(ToolFormat::DeepSeek { fenced: false }.prepare(&[Message::user("Hi")], &[], V31).len(), 1);
    }

    /// Several calls (R1's a line apart), text before them; a reply cut at its stop; anything
    /// that is not a list of whole calls stays text.
    #[test]
    fn calls_read_as_json_arguments() {
        let text = format!(
            "Checking.{CALLS_BEGIN}{CALL_BEGIN}get_weather{SEP}{{\"city\": \"Paris\"}}{CALL_END}{CALL_BEGIN}get_time{SEP}{{}}{CALL_END}{CALLS_END}"
        );
        let p = parse(&text, false).unwrap();
        assert_eq!(p.content, "Checking.");
        let calls: Vec<(&str, &str)> = p.calls.iter().map(|c| (c.name.as_str(), c.arguments.as_str())).collect();
        assert_eq!(calls, [("get_weather", r#"{"city":"Paris"}"#), ("get_time", "{}")]);
        let fenced = format!(
            "{CALLS_BEGIN}{CALL_BEGIN}function{SEP}f\n```json\n{{\"a\": 1}}\n```{CALL_END}\n{CALL_BEGIN}function{SEP}g\n```json\n{{}}\n```{CALL_END}{CALLS_END}"
        );
        assert_eq!(parse(&fenced, true).unwrap().calls.len(), 2);
        let cut = format!("{CALLS_BEGIN}{CALL_BEGIN}f{SEP}{{\"a\": 1}}");
        assert_eq!(parse(&cut, false).unwrap().calls[0].arguments, r#"{"a":1}"#);
        for (bad, fenced) in [
            (format!("{CALLS_BEGIN}{CALLS_END}"), false),
            (format!("{CALLS_BEGIN}{CALL_BEGIN}f g{SEP}{{}}{CALL_END}{CALLS_END}"), false),
            (format!("{CALLS_BEGIN}{CALL_BEGIN}f{SEP}[1]{CALL_END}{CALLS_END}"), false),
            (format!("{CALLS_BEGIN}{CALL_BEGIN}f{SEP}{{}}{CALL_END}trailing{CALLS_END}"), false),
            (format!("{CALLS_BEGIN}{CALL_BEGIN}f{SEP}{{\"a\": 1"), false),
            (format!("{CALLS_BEGIN}{CALL_BEGIN}f{SEP}{{}}{CALL_END}{CALLS_END}"), true),
            (format!("{CALLS_BEGIN}{CALL_BEGIN}function{SEP}f\n{{}}{CALL_END}{CALLS_END}"), true),
            ("Just text.".to_owned(), false),
        ] {
            assert_eq!(parse(&bad, fenced), None, "{bad:?}");
        }
    }

    /// A streamed reply's text goes out until the list may have begun, then is held.
    #[test]
    fn a_stream_holds_back_from_the_list() {
        let mut s = ToolStream::with_tools(ToolFormat::DeepSeek { fenced: false }, vec![weather_tool()]);
        let (head, tail) = CALLS_BEGIN.split_at(4);
        assert_eq!(s.push(&format!("Sure. {head}")), "Sure. ");
        assert_eq!(s.push(&format!("{tail}{CALL_BEGIN}get_weather{SEP}{{\"city\": \"Rome\", \"days\": 1}}{CALL_END}{CALLS_END}")), "");
        assert_eq!(s.finish().calls[0].arguments, r#"{"city":"Rome","days":1}"#);
    }

    /// The forced call's grammar writes the marks as the vocabulary's tokens where it has them,
    /// the call as the template writes it (fenced or not), the tool's schema.
    #[test]
    fn the_forced_call_grammar_writes_one_call_in_the_list() {
        let tokens = CallMarkers {
            calls: Some(1),
            args: Some(3),
            end: Some(5),
            call: Some((2, 4)),
        };
        let g = forced_call(&[weather_tool()], false, tokens);
        assert!(g.starts_with("start: <[1]> <[2]> call  <[4]> <[5]>\ncall: c0\n"), "{g}");
        assert!(g.contains("c0: \"get_weather\" <[3]> %json {"), "{g}");
        let g = forced_call(&[weather_tool()], true, CallMarkers::default());
        assert!(g.starts_with(&format!("start: \"{CALLS_BEGIN}\" \"{CALL_BEGIN}\" call \"\\n```\" \"{CALL_END}\" \"{CALLS_END}\"\n")), "{g}");
        assert!(g.contains(&format!("c0: \"function\" \"{SEP}\" \"get_weather\" \"\\n```json\\n\" %json {{")), "{g}");
    }
}
