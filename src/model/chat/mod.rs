//! Chat templates: turning a list of messages into the one prompt string the
//! model was trained on, by rendering the model's own Jinja template.
//!
//! Owns [`ChatTemplate`] (a compiled template plus the BOS/EOS text it may
//! print) and [`Message`] / [`Role`], the one message type of hearth (the
//! template renders it, conversations store it, the HTTP API reads it). The template comes from the GGUF key
//! `tokenizer.chat_template`, from a Hugging Face `tokenizer_config.json`, or,
//! when a model ships none, its family's own (Gemma 3's, for Gemma 2 and 3) or ChatML ([`ChatTemplate::fallback`]).
//!
//! Invariants:
//! - The template is parsed once, in [`ChatTemplate::new`]; rendering never
//!   re-parses, and a template that does not parse is an error there, not later.
//! - Rendering is pure: the same messages give the same string (except for
//!   templates that call `strftime_now`).
//! - Nothing a template does can panic: a syntax error, an undefined-variable
//!   misuse or a `raise_exception(..)` all come back as
//!   [`ModelError::ChatTemplate`](crate::model::ModelError::ChatTemplate).
//!
//! The environment mirrors the one `transformers` builds in
//! `apply_chat_template` (an `ImmutableSandboxedEnvironment` with
//! `trim_blocks=True, lstrip_blocks=True`): the variables `messages`,
//! `add_generation_prompt`, `bos_token`, `eos_token`, `tools` and `documents`
//! (both `none`), and whatever further variables a request gives
//! (`chat_template_kwargs`, e.g. `enable_thinking`; they cannot replace
//! those); the functions `raise_exception(msg)` and `strftime_now(fmt)`;
//! a `tojson` filter that writes what Python's `json.dumps` writes (no HTML
//! escaping, `", "` and `": "` separators); Jinja2's `iterable` test (`none`
//! is not iterable, as templates testing `tools is iterable` expect); and Python string/dict methods
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

//!
//! Files: `message.rs` (the message type), `template.rs` (finding and
//! rendering the template), `python.rs` (what transformers' Python
//! environment gives templates: generation tags, `raise_exception`,
//! `strftime_now`, `tojson`, `iterable`), `tools.rs` (tool-call formats: parsing, forcing, templates
//! without tools), `reasoning.rs` (a reply's `<think>` part split from its answer), `harmony.rs`
//! (gpt-oss's harmony format: its tool calls, and histories whose assistant turns hold a whole
//! harmony reply), `gemma4.rs`, `qwen_xml.rs`, `lfm2.rs`, `cohere.rs`, `minimax_xml.rs` and `json_list.rs` (those models' own call
//! formats; Gemma 4's and LFM2's read their notation with `cursor.rs`'s moves), `tests.rs` with real models' templates in `fixtures/`.

mod cohere;
mod cursor;
mod deepseek;
mod gemma4;
mod harmony;
mod json_list;
mod lfm2;
mod message;
mod minimax_xml;
mod python;
mod qwen_xml;
pub mod reasoning;
mod template;
#[cfg(test)]
mod tests;
pub mod tools;

pub use harmony::split_history as harmony_history;
pub use json_list::ListMarks;
pub use message::{Message, Role, ToolCall};
pub use python::rfc3339;
pub use template::{check_kwargs, ChatTemplate, TemplateKwargs, GGUF_CHAT_TEMPLATE_KEY};
