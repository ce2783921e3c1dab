//! The chat template's tests: real models' templates (`fixtures/`, verbatim from their
//! `tokenizer_config.json`) rendered as transformers renders them, and the Python helpers.

use super::python::{civil_from_days, days_from_civil, python_float_repr, rfc3339, strftime};
use super::template::{CHATML_TEMPLATE, GEMMA3_TEMPLATE};
use super::{check_kwargs, ChatTemplate, Message, Role, TemplateKwargs, ToolCall};
use crate::model::ModelError;

fn msgs(pairs: &[(&str, &str)]) -> Vec<Message> {
    pairs.iter().map(|(r, c)| Message::new(Role::parse(r), *c)).collect()
}

fn template(source: &str, bos: &str, eos: &str) -> ChatTemplate {
    ChatTemplate::new(source.to_owned(), Some(bos.to_owned()), Some(eos.to_owned())).unwrap()
}

/// Qwen2.5-Instruct's `chat_template` (tokenizer_config.json), verbatim.
const QWEN25: &str = include_str!("fixtures/qwen2.5-instruct.jinja");

/// Meta-Llama-3-8B-Instruct's `chat_template`, verbatim.
const LLAMA3: &str = include_str!("fixtures/llama-3-instruct.jinja");

/// Llama-2-chat's `chat_template` (the `[INST]` format), verbatim.
const LLAMA2: &str = include_str!("fixtures/llama-2-chat.jinja");

/// Mistral-7B-Instruct-v0.1's `chat_template`, verbatim.
const MISTRAL: &str = include_str!("fixtures/mistral-7b-instruct-v0.1.jinja");

/// SmolLM2-Instruct's `chat_template`, verbatim (the newlines inside the
/// string literals are real newlines, as in the JSON's `\n`).
const SMOLLM2: &str = include_str!("fixtures/smollm2-instruct.jinja");

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
    let err = t.render(&msgs(&[("user", "Hi"), ("user", "again")]), false).unwrap_err();
    assert!(err.to_string().contains("Conversation roles must alternate"), "{err}");
}

/// google/gemma-2-2b-it's `chat_template` (llama.cpp's `models/templates/`), verbatim.
const GEMMA2: &str = include_str!("fixtures/google-gemma-2-2b-it.jinja");

/// Templates that refuse a system message (Gemma 2 raises "System role not supported",
/// Mistral 7B v0.1 "roles must alternate") get it merged into the first user message, as
/// llama.cpp does; a system message alone becomes the user's. Later turns are unchanged.
#[test]
fn a_template_without_a_system_role_gets_it_merged_into_the_first_message() {
    let gemma = template(GEMMA2, "<bos>", "<eos>");
    assert!(!gemma.supports_system());
    let out = gemma
        .render(&msgs(&[("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello."), ("user", "2+2?")]), true)
        .unwrap();
    assert_eq!(
        out,
        "<bos><start_of_turn>user\nBe brief.\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n\
         <start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n"
    );
    // Without a system message, exactly the template's own rendering.
    let plain = gemma.render(&msgs(&[("user", "Hi")]), true).unwrap();
    assert_eq!(plain, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    let alone = gemma.render(&msgs(&[("system", "Be brief.")]), true).unwrap();
    assert_eq!(alone, "<bos><start_of_turn>user\nBe brief.<end_of_turn>\n<start_of_turn>model\n");

    let mistral = template(MISTRAL, "<s>", "</s>");
    assert!(!mistral.supports_system());
    let out = mistral.render(&msgs(&[("system", "Sys"), ("user", "Hi")]), true).unwrap();
    assert_eq!(out, "<s>[INST] Sys\nHi [/INST]");
    // Still the template's error for what it refuses after the merge.
    let err = mistral.render(&msgs(&[("system", "Sys"), ("assistant", "a"), ("assistant", "b")]), true);
    assert!(err.is_err());
}

/// Every other template here renders a system message as such: the probe leaves them alone.
#[test]
fn templates_with_a_system_role_keep_it() {
    for (name, source) in [
        ("qwen2.5", QWEN25),
        ("llama3", LLAMA3),
        ("llama2", LLAMA2),
        ("smollm2", SMOLLM2),
        ("phi3.5", PHI35),
        ("mistral-nemo", MISTRAL_NEMO),
        ("qwen3", QWEN3),
        ("gemma3", GEMMA3_TEMPLATE),
        ("chatml", CHATML_TEMPLATE),
    ] {
        assert!(template(source, "<s>", "</s>").supports_system(), "{name}");
    }
}

const PHI35: &str = include_str!("fixtures/phi-3.5-mini-instruct.jinja");
const MISTRAL_NEMO: &str = include_str!("fixtures/mistral-nemo-instruct-2407.jinja");

#[test]
fn phi35_role_tags_and_end_tokens() {
    let t = template(PHI35, "<s>", "<|endoftext|>");
    let out = t
        .render(&msgs(&[("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello"), ("user", "Bye")]), true)
        .unwrap();
    assert_eq!(
        out,
        "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n"
    );
    // Without a generation prompt it ends with the EOS text, as transformers renders it.
    assert!(t.render(&msgs(&[("user", "Hi")]), false).unwrap().ends_with("<|end|>\n<|endoftext|>"));
}

#[test]
fn mistral_nemo_tekken_inst_without_spaces_and_system_in_the_last_turn() {
    let t = template(MISTRAL_NEMO, "<s>", "</s>");
    let out = t
        .render(&msgs(&[("system", "S"), ("user", "Hi"), ("assistant", "Hello"), ("user", "Bye")]), true)
        .unwrap();
    assert_eq!(out, "<s>[INST]Hi[/INST]Hello</s>[INST]S\n\nBye[/INST]");
}

/// Qwen3-0.6B's `chat_template`, verbatim (llama.cpp's `models/templates` copy).
const QWEN3: &str = include_str!("fixtures/qwen3-0.6b.jinja");

#[test]
fn qwen3_thinking_switch_and_reasoning_sent_back() {
    let t = template(QWEN3, "", "<|im_end|>");
    let hi = msgs(&[("user", "Hi")]);
    assert_eq!(t.render(&hi, true).unwrap(), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    let mut kwargs = TemplateKwargs::new();
    kwargs.insert("enable_thinking".into(), false.into());
    let off = t.render_with(&hi, &[], &kwargs, true).unwrap();
    assert!(off.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"), "{off:?}");
    // A kwarg cannot replace what hearth sets.
    kwargs.insert("messages".into(), serde_json::json!([]));
    assert!(check_kwargs(&kwargs).unwrap_err().contains("`messages`"));
    // An assistant turn after the last user message keeps its reasoning, given apart.
    let mut call = Message::assistant("");
    call.tool_calls = vec![ToolCall {
        id: "c1".into(),
        name: "weather".into(),
        arguments: "{}".into(),
    }];
    call.reasoning_content = Some("\nThe user wants the weather.\n".into());
    let mut result = Message::new(Role::parse("tool"), "sunny");
    result.tool_call_id = Some("c1".into());
    let out = t.render(&[Message::user("Weather?"), call, result], true).unwrap();
    assert!(
        out.contains("<|im_start|>assistant\n<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"weather\""),
        "{out}"
    );
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

/// Gemma 3's built-in template (for GGUFs without one): the system prompt joins the first
/// user turn, the assistant is `model`, content is trimmed, roles must alternate.
#[test]
fn gemma3_fallback() {
    let t = ChatTemplate::new(GEMMA3_TEMPLATE.to_owned(), Some("<bos>".into()), Some("<eos>".into())).unwrap();
    let out = t
        .render(
            &msgs(&[
                ("system", "Be brief."),
                ("user", " Hi "),
                ("assistant", "Hello."),
                ("user", "Bye"),
            ]),
            true,
        )
        .unwrap();
    assert_eq!(
        out,
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n\
         <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
    );
    let err = t
        .render(&msgs(&[("user", "a"), ("user", "b")]), true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("must alternate"), "{err}");
}

#[test]
fn trim_and_lstrip_blocks_like_hf() {
    // trim_blocks drops the newline after a block tag; lstrip_blocks drops
    // the indentation before one; no trailing newline is kept.
    let src =
        "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}\n";
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

/// SmolLM3-3B's template as llama.cpp keeps it (`models/templates/HuggingFaceTB-SmolLM3-3B.jinja`:
/// Unsloth's edit of the official one, without its tool sections), verbatim.
const SMOLLM3: &str = include_str!("fixtures/smollm3-3b-unsloth.jinja");

#[test]
fn smollm3_reasoning_modes_from_kwargs_and_the_system_prompt() {
    use super::reasoning::{Reasoning, ThinkTags};
    use super::tools::ToolFormat;
    let t = template(SMOLLM3, "", "<|im_end|>");
    assert_eq!(Reasoning::tags_in_template(SMOLLM3), Some(ThinkTags::Think));
    // No tool section: hearth describes the tools itself.
    assert_eq!(ToolFormat::of_template(SMOLLM3), ToolFormat::Injected);
    // Thinking by default: the model opens `<think>` itself.
    let think = t.render(&msgs(&[("user", "Hi")]), true).unwrap();
    assert!(think.starts_with("<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nReasoning Mode: /think\n\n"), "{think}");
    assert!(think.ends_with("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"), "{think}");
    assert!(!Reasoning::for_prompt(ThinkTags::Think, &think).starts_open);
    // `enable_thinking: false`, or `/no_think` in the system prompt (taken out of it), closes an
    // empty reasoning in the prompt; earlier replies render with one too.
    let mut kwargs = TemplateKwargs::new();
    kwargs.insert("enable_thinking".into(), false.into());
    let off = t.render_with(&msgs(&[("user", "Hi"), ("assistant", "Hello"), ("user", "Bye")]), &[], &kwargs, true).unwrap();
    assert!(off.contains("Reasoning Mode: /no_think\n\n"), "{off}");
    assert!(off.contains("<|im_start|>assistant\n<think>\n\n</think>\nHello<|im_end|>\n"), "{off}");
    assert!(off.ends_with("<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n"), "{off}");
    let system = t.render(&msgs(&[("system", "Be brief. /no_think"), ("user", "Hi")]), true).unwrap();
    assert!(system.contains("Reasoning Mode: /no_think\n\n## Custom Instructions\n\nBe brief.\n\n<|im_end|>\n"), "{system}");
    assert!(system.ends_with("<think>\n\n</think>\n"), "{system}");
}

/// Granite 3.3 2B Instruct's template as llama.cpp keeps it
/// (`models/templates/ibm-granite-granite-3.3-2B-Instruct.jinja`), verbatim.
const GRANITE33: &str = include_str!("fixtures/granite-3.3-2b-instruct.jinja");

#[test]
fn granite33_roles_and_default_system_with_todays_date() {
    use super::tools::ToolFormat;
    let t = template(GRANITE33, "", "<|end_of_text|>");
    let out = t.render(&msgs(&[("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello."), ("user", "Bye")]), true).unwrap();
    assert_eq!(
        out,
        "<|start_of_role|>system<|end_of_role|>Be brief.<|end_of_text|>\n\
         <|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n\
         <|start_of_role|>assistant<|end_of_role|>Hello.<|end_of_text|>\n\
         <|start_of_role|>user<|end_of_role|>Bye<|end_of_text|>\n\
         <|start_of_role|>assistant<|end_of_role|>"
    );
    // Without a system message the template writes its own, dated today (`strftime_now`).
    let out = t.render(&msgs(&[("user", "Hi")]), true).unwrap();
    assert!(out.starts_with("<|start_of_role|>system<|end_of_role|>Knowledge Cutoff Date: April 2024. Today's Date: "), "{out}");
    assert!(out.contains(". You are Granite, developed by IBM. You are a helpful AI assistant.<|end_of_text|>\n"), "{out}");
    // Its own format: `<|tool_call|>` then a JSON list of calls.
    assert_eq!(ToolFormat::of_template(GRANITE33), ToolFormat::Granite);
}

/// Granite 3.3's calls: the reply (its `<|tool_call|>` a special token, so not in the text, or
/// written out) parses into the calls; sent back, a call is written into its turn's content as
/// the model wrote it (the template renders no `tool_calls`), the tools are listed by the
/// template, and the result is a `tool` turn.
#[test]
fn granite33_calls_parse_and_render_back_as_the_model_wrote_them() {
    use super::tools::{Tool, ToolFormat};
    let f = ToolFormat::Granite;
    let call = "[{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}]";
    for text in [call.to_owned(), format!("<|tool_call|>{call}")] {
        let p = f.parse(&text).unwrap();
        assert_eq!((p.calls[0].name.as_str(), p.calls[0].arguments.as_str()), ("weather", "{\"city\":\"Paris\"}"));
    }
    assert_eq!(f.parse("Paris is sunny."), None);
    let weather = Tool {
        name: "weather".into(),
        description: None,
        parameters: serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    };
    let mut said = Message::assistant("");
    said.tool_calls = vec![ToolCall {
        id: "c1".into(),
        name: "weather".into(),
        arguments: "{\"city\":\"Paris\"}".into(),
    }];
    let mut result = Message::new(Role::parse("tool"), "sunny");
    result.tool_call_id = Some("c1".into());
    let history = [Message::user("Weather in Paris?"), said, result];
    let prepared = f.prepare(&history, std::slice::from_ref(&weather), GRANITE33);
    assert!(prepared[1].tool_calls.is_empty());
    let t = template(GRANITE33, "", "<|end_of_text|>");
    let out = t.render_with_tools(&prepared, &[weather.to_json()], true).unwrap();
    assert!(out.contains("<|start_of_role|>available_tools<|end_of_role|>"), "{out}");
    assert!(
        out.ends_with(&format!(
            "<|start_of_role|>assistant<|end_of_role|><|tool_call|>{call}<|end_of_text|>\n\
             <|start_of_role|>tool<|end_of_role|>sunny<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"
        )),
        "{out}"
    );
}

/// Granite 4.0's template as llama.cpp keeps it (`models/templates/ibm-granite-granite-4.0.jinja`),
/// verbatim: Hermes-style `<tool_call>` blocks. Granite 4.0 Micro, its dense model, is a
/// `granite` file.
const GRANITE40: &str = include_str!("fixtures/granite-4.0.jinja");

#[test]
fn granite40_writes_hermes_calls_and_renders_them_back() {
    use super::tools::{Tool, ToolFormat};
    assert_eq!(ToolFormat::of_template(GRANITE40), ToolFormat::Hermes);
    let t = template(GRANITE40, "", "<|end_of_text|>");
    let weather = Tool {
        name: "weather".into(),
        description: Some("The weather in a city.".into()),
        parameters: serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    };
    // What the model writes in that shape parses back into the call (its arguments as compact
    // JSON text, as OpenAI returns them) ...
    let written = "<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    let parsed = ToolFormat::Hermes.parse(written).unwrap();
    assert_eq!((parsed.calls[0].name.as_str(), parsed.calls[0].arguments.as_str()), ("weather", "{\"city\":\"Paris\"}"));
    // ... and, sent back in the history, renders as the model wrote it.
    let mut call = Message::assistant("");
    call.tool_calls = vec![ToolCall {
        id: "c1".into(),
        name: "weather".into(),
        arguments: parsed.calls[0].arguments.clone(),
    }];
    let mut result = Message::new(Role::parse("tool"), "sunny");
    result.tool_call_id = Some("c1".into());
    let out = t
        .render_with_tools(&[Message::user("Weather in Paris?"), call, result], &[weather.to_json()], true)
        .unwrap();
    assert!(
        out.starts_with("<|start_of_role|>system<|end_of_role|>You are a helpful assistant with access to the following tools."),
        "{out}"
    );
    assert!(out.contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"weather\""), "{out}");
    let expected = format!(
        "<|start_of_role|>assistant<|end_of_role|>{written}<|end_of_text|>\n\
         <|start_of_role|>user<|end_of_role|>\n<tool_response>\nsunny\n</tool_response><|end_of_text|>\n\
         <|start_of_role|>assistant<|end_of_role|>"
    );
    assert!(out.ends_with(&expected), "{out}");
}

const GPT_OSS: &str = include_str!("fixtures/openai-gpt-oss-120b.jinja");

/// gpt-oss's template (llama.cpp's copy): the system message becomes the developer's
/// instructions after harmony's own system message, the reply starts after
/// `<|start|>assistant`; an assistant turn kept as a whole harmony reply (the desktop app's)
/// renders once split, and a call renders as a commentary message to `functions.NAME` with its
/// reasoning before it and its result after.
#[test]
fn gpt_oss_renders_harmony() {
    let t = template(GPT_OSS, "<|startoftext|>", "<|return|>");
    let out = t.render(&msgs(&[("system", "Be brief."), ("user", "Hi")]), true).unwrap();
    assert!(out.starts_with("<|start|>system<|message|>You are ChatGPT"), "{out}");
    assert!(
        out.ends_with("<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant"),
        "{out}"
    );
    let kept = "<|channel|>analysis<|message|>A greeting.<|end|><|start|>assistant<|channel|>final<|message|>Hello!";
    let history = msgs(&[("user", "Hi"), ("assistant", kept), ("user", "Bye")]);
    assert!(t.render(&history, true).is_err(), "the template refuses harmony headers in a content");
    let out = t.render(&super::harmony_history(&history), true).unwrap();
    assert!(
        out.ends_with("<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|end|><|start|>user<|message|>Bye<|end|><|start|>assistant"),
        "{out}"
    );
    let weather = super::tools::Tool {
        name: "weather".into(),
        description: Some("The weather in a city.".into()),
        parameters: serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    };
    let mut call = Message::assistant("");
    call.tool_calls = vec![ToolCall {
        id: "c1".into(),
        name: "weather".into(),
        arguments: "{\"city\":\"Paris\"}".into(),
    }];
    call.reasoning_content = Some("Need the weather.".into());
    let mut result = Message::new(Role::parse("tool"), "sunny");
    result.tool_call_id = Some("c1".into());
    let out = t
        .render_with_tools(&[Message::user("Weather in Paris?"), call, result], &[weather.to_json()], true)
        .unwrap();
    assert!(out.contains("// The weather in a city.\ntype weather = (_: {\ncity: string,\n}) => any;"), "{out}");
    assert!(
        out.ends_with(
            "<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>\
             <|start|>assistant to=functions.weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>\
             <|start|>functions.weather to=assistant<|channel|>commentary<|message|>\"sunny\"<|end|><|start|>assistant"
        ),
        "{out}"
    );
}

const GEMMA4: &str = super::template::GEMMA4_TEMPLATE;

/// Gemma 4's template (llama.cpp's copy of google/gemma-4-31B-it's): `<|turn>role` …
/// `<turn|>` turns, the system message in a system turn, the reply opened with an empty
/// thought channel when thinking is off, and an earlier reply's thinking left out.
#[test]
fn gemma4_renders_its_turns() {
    let t = template(GEMMA4, "<bos>", "<eos>");
    assert!(t.supports_system());
    let out = t.render(&msgs(&[("system", "Be brief."), ("user", "Hi")]), true).unwrap();
    assert_eq!(
        out,
        "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    );
    let kept = "<|channel>thought\nA greeting.<channel|>Hello!";
    let out = t.render(&msgs(&[("user", "Hi"), ("assistant", kept), ("user", "Bye")]), true).unwrap();
    assert_eq!(
        out,
        "<bos><|turn>user\nHi<turn|>\n<|turn>model\nHello!<turn|>\n<|turn>user\nBye<turn|>\n\
         <|turn>model\n<|channel>thought\n<channel|>"
    );
}

/// After a turn of calls, their results and text, Gemma 4's template opens no turn for the
/// reply; one is opened (as llama.cpp does), and only then.
#[test]
fn gemma4_opens_the_reply_turn_after_results_and_text() {
    let t = template(GEMMA4, "<bos>", "<eos>");
    let mut call = Message::assistant("It is sunny.");
    call.tool_calls = vec![ToolCall {
        id: "c1".into(),
        name: "weather".into(),
        arguments: "{\"city\":\"Paris\"}".into(),
    }];
    let mut result = Message::new(Role::parse("tool"), "sunny");
    result.tool_call_id = Some("c1".into());
    let out = t.render(&[Message::user("Weather?"), call.clone(), result.clone()], true).unwrap();
    assert!(out.ends_with("<tool_response|>It is sunny.<turn|>\n<|turn>model\n"), "{out}");
    // Without text the model goes on in the results' turn: nothing is added.
    call.content = String::new();
    let out = t.render(&[Message::user("Weather?"), call, result], true).unwrap();
    assert!(out.ends_with("<tool_response|>"), "{out}");
}

/// `none is iterable` is false, as in Jinja2: Qwen3-Coder's template (and Nemotron 3's) test
/// `tools is iterable and tools | length > 0`, which a request without tools (`tools` none) must
/// pass without a system turn, not fail on the length of none.
#[test]
fn a_template_testing_tools_is_iterable_renders_without_tools() {
    let t = template(include_str!("fixtures/qwen3-coder-30b-a3b-instruct.jinja"), "", "<|im_end|>");
    let out = t.render(&msgs(&[("user", "hi")]), true).unwrap();
    assert_eq!(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    let env = {
        let mut e = minijinja::Environment::new();
        e.add_test("iterable", super::python::python_iterable);
        e
    };
    let is = |expr: &str| env.render_str(&format!("{{{{ {expr} }}}}"), minijinja::context! {}).unwrap();
    assert_eq!(is("none is iterable"), "False");
    assert_eq!(is("undefined_name is iterable"), "False");
    assert_eq!(is("[1] is iterable"), "True");
    assert_eq!(is("'ab' is iterable"), "True");
    assert_eq!(is("{} is iterable"), "True");
    assert_eq!(is("3 is iterable"), "False");
}

#[test]
fn times_are_rfc3339_in_utc_with_nanoseconds() {
    use std::time::{Duration, UNIX_EPOCH};
    assert_eq!(rfc3339(UNIX_EPOCH + Duration::new(1_764_673_509, 5)), "2025-12-02T11:05:09.000000005Z");
    assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00.000000000Z");
    assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
}
