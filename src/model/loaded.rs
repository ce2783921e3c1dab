//! A model ready to use: weights, tokenizer and chat template loaded together.

use std::path::Path;
use std::sync::OnceLock;

use candle_core::Device;

use super::chat::tools::{Tool, ToolFormat};
use super::chat::reasoning::{Reasoning, ThinkTags};
use super::chat::{ChatTemplate, Message, TemplateKwargs};
use super::gguf::{md_opt_str, GgufFile, ReadMeter};
use super::grammar::{Grammar, GrammarCompiler, GrammarError};
use super::hparams::Family;
use super::source::ResolvedModel;
use super::tokenizer::Tokenizer;
use super::{ModelError, Transformer};

/// What a user sees about the loaded model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// `general.name`, else the file name.
    pub name: String,
    pub architecture: String,
    /// The dominant weight type, e.g. `Q4K`.
    pub quantization: String,
    pub parameters: u64,
    /// The context length the model was trained for.
    pub trained_context: usize,
    /// The context length hearth uses (prompt plus reply).
    pub context_length: usize,
    pub device: String,
    /// What else decides the K/V this model computes, beyond its files, device and layout:
    /// empty, or the rope factors chosen by the context length (Phi-3's LongRoPE). Part of a
    /// cache file's fingerprint.
    pub kv_variant: String,
    pub file_bytes: u64,
    /// How this model's chat replies carry reasoning (`None`: its template knows no `<think>`),
    /// as a conversation of one user message shows it (the desktop app's turns).
    pub reasoning: Option<Reasoning>,
    /// The files whose contents define the model: the GGUF, then any `tokenizer.json` and
    /// `tokenizer_config.json` used with it (what a cache file's fingerprint hashes).
    pub files: Vec<std::path::PathBuf>,
    /// What the file says the model is for: chat, embeddings or reranking.
    pub purpose: ModelPurpose,
}

/// What a model is for, as its file says (`{arch}.pooling_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelPurpose {
    /// A generative model (no pooling type).
    Chat,
    /// An embedding model (mean, first- or last-token pooling): `/v1/embeddings`.
    Embedding,
    /// A reranker (pooling type rank, a classifier head): `/v1/rerank`.
    Reranker,
}

impl ModelPurpose {
    fn of(hp: &super::hparams::HParams) -> Self {
        match (hp.rank, hp.pooling) {
            (Some(_), _) => Self::Reranker,
            (None, Some(_)) => Self::Embedding,
            // An encoder embeds whatever its file says of pooling (the server's may supply it).
            (None, None) if hp.encoder => Self::Embedding,
            (None, None) => Self::Chat,
        }
    }

    /// What a chat window tells its user about such a model; `None` for a chat model.
    pub fn notice(self) -> Option<&'static str> {
        match self {
            Self::Chat => None,
            Self::Embedding => Some("An embedding model: its replies are no chat. Serve it with hearth --headless for POST /v1/embeddings."),
            Self::Reranker => Some("A reranker: its replies are no chat. Serve it with hearth --headless for POST /v1/rerank."),
        }
    }
}

/// A chat request's prompt as the model reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatPrompt {
    pub ids: Vec<u32>,
    /// How the reply carries reasoning; `None` for a model whose template knows none.
    pub reasoning: Option<Reasoning>,
}

/// Weights, tokenizer and chat template of one model.
#[derive(Debug)]
pub struct LoadedModel {
    pub transformer: Transformer,
    pub tokenizer: Tokenizer,
    pub chat_template: ChatTemplate,
    pub info: ModelInfo,
    /// A reranker's prompt template (`tokenizer.chat_template.rerank`: `{query}` and
    /// `{document}` replaced), where the file has one.
    pub rerank_template: Option<String>,
    /// The grammar compiler over this vocabulary, built by the first request with a grammar.
    grammar: OnceLock<Result<GrammarCompiler, String>>,
}

/// How `template`'s chat replies carry reasoning, from a one-message conversation rendered
/// with it; a template that thinks but cannot render that is taken to let the model open the
/// reasoning itself.
fn reasoning_of(template: &ChatTemplate) -> Option<Reasoning> {
    let tags = Reasoning::tags_in_template(template.source())?;
    Some(match template.render(&[Message::user("Hi")], true) {
        Ok(rendered) => Reasoning::for_prompt(tags, &rendered),
        Err(_) => Reasoning {
            tags,
            starts_open: false,
        },
    })
}

/// Where a reranker's GGUF keeps its prompt template (llama.cpp's named template "rerank").
const RERANK_TEMPLATE_KEY: &str = "tokenizer.chat_template.rerank";

/// The context length used when none is configured: the model's own, capped
/// here so a 128k-context model does not reserve rope tables and KV for it.
pub const DEFAULT_CONTEXT_CAP: usize = 8192;

impl LoadedModel {
    /// Loads `resolved` onto `device`. `context_length`: `None` uses the
    /// model's trained context capped at [`DEFAULT_CONTEXT_CAP`]; a larger
    /// explicit value than the model's is refused.
    pub fn load(resolved: &ResolvedModel, device: &Device, context_length: Option<usize>) -> Result<Self, ModelError> {
        Self::load_with(resolved, device, context_length, |_| None)
    }

    /// [`LoadedModel::load`], with the weights' reading reported: `meter` gets the bytes of
    /// tensor data the file stores and may return a [`ReadMeter`] to tell as they are read.
    pub fn load_with(
        resolved: &ResolvedModel,
        device: &Device,
        context_length: Option<usize>,
        meter: impl FnOnce(u64) -> Option<ReadMeter>,
    ) -> Result<Self, ModelError> {
        let mut file = GgufFile::open(&resolved.gguf)?;
        if let Some(m) = meter(file.tensor_data_bytes()) {
            file.set_meter(m);
        }
        let md = file.metadata().clone();
        let hp = super::hparams::HParams::from_metadata(&md, file.tensor_shape("token_embd.weight").map(|s| s[0]))?;
        let context = resolve_context(&hp, context_length)?;
        let tokenizer = match &resolved.tokenizer_json {
            Some(path) => Tokenizer::from_file(path, Some(&md))?,
            None => Tokenizer::from_gguf_metadata(&md)?,
        };
        if tokenizer.vocab_size() > hp.vocab_size {
            return Err(ModelError::Tokenizer(format!(
                "the tokenizer has {} tokens but the model only {}",
                tokenizer.vocab_size(),
                hp.vocab_size
            )));
        }
        // Gemma 3n's turns are Gemma 3's (its files run on Gemma 4's layer).
        let template_family = if hp.altup.is_some() { Family::Gemma3 } else { hp.family };
        let chat_template = match ChatTemplate::from_gguf_metadata(&md, &tokenizer)? {
            Some(t) => t,
            None => match &resolved.tokenizer_config {
                Some(cfg) => match ChatTemplate::from_tokenizer_config(cfg, &tokenizer)? {
                    Some(t) => t,
                    None => ChatTemplate::fallback(template_family, &tokenizer),
                },
                None => ChatTemplate::fallback(template_family, &tokenizer),
            },
        };
        let transformer = Transformer::from_gguf(&mut file, device, context)?;
        let info = ModelInfo {
            name: md_opt_str(&md, "general.name")?
                .map(str::to_string)
                .unwrap_or_else(|| file_name(&resolved.gguf)),
            architecture: md_opt_str(&md, "general.architecture")?.unwrap_or(hp.family.arch()).to_string(),
            quantization: file.dominant_dtype(),
            parameters: file.parameter_count(),
            trained_context: hp.context_length,
            context_length: context,
            device: device_name(device),
            kv_variant: kv_variant(&file, &hp, context),
            file_bytes: file.file_len(),
            reasoning: reasoning_of(&chat_template),
            files: resolved.files(),
            purpose: ModelPurpose::of(&hp),
        };
        Ok(Self {
            transformer,
            tokenizer,
            chat_template,
            info,
            rerank_template: md_opt_str(&md, RERANK_TEMPLATE_KEY)?.map(str::to_string),
            grammar: OnceLock::new(),
        })
    }

    /// The compiler of grammars over this model's vocabulary (built on the first call).
    pub fn grammar(&self) -> Result<&GrammarCompiler, GrammarError> {
        self.grammar
            .get_or_init(|| {
                GrammarCompiler::new(&self.tokenizer).map_err(|e| match e {
                    GrammarError::Vocabulary(why) => why,
                    other => other.to_string(),
                })
            })
            .as_ref()
            .map_err(|why| GrammarError::Vocabulary(why.clone()))
    }

    /// A reranker's prompt for `query` and `document` ([`super::pooling::rank_prompt`]).
    pub fn rank_ids(&self, query: &str, document: &str) -> Result<Vec<u32>, ModelError> {
        super::pooling::rank_prompt(&self.tokenizer, self.rerank_template.as_deref(), query, document)
    }

    /// The prompt's token ids: raw text (BOS per the tokenizer's rule), or,
    /// with `chat`, the text as one user turn through the chat template.
    pub fn prompt_ids(&self, text: &str, chat: bool) -> Result<Vec<u32>, ModelError> {
        if !chat {
            return self.tokenizer.encode(text, self.tokenizer.add_bos());
        }
        let messages = [Message::user(text)];
        self.chat_ids(&messages)
    }

    /// Token ids of a conversation rendered through the chat template with
    /// the generation prompt. BOS is added only if the template did not
    /// already write it.
    pub fn chat_ids(&self, messages: &[Message]) -> Result<Vec<u32>, ModelError> {
        Ok(self.chat_prompt(messages, &[], &TemplateKwargs::new())?.ids)
    }

    /// How this model's template writes tool calls.
    pub fn tool_format(&self) -> ToolFormat {
        ToolFormat::of_template(self.chat_template.source())
    }

    /// The grammar that forces one call of one of `tools`, in this model's format and with
    /// the special tokens its vocabulary writes calls with.
    pub fn forced_call(&self, tools: &[Tool]) -> Grammar {
        let format = self.tool_format();
        format.forced_call(tools, format.markers(|t| self.tokenizer.special_token_id(t)))
    }

    /// [`Self::chat_ids`] with `tools` offered: through the template's own `tools` where it
    /// renders them, else described in the system message ([`ToolFormat::prepare`]).
    pub fn chat_ids_with_tools(&self, messages: &[Message], tools: &[Tool]) -> Result<Vec<u32>, ModelError> {
        Ok(self.chat_prompt(messages, tools, &TemplateKwargs::new())?.ids)
    }

    /// A chat request's prompt: `messages` with `tools` offered (none: the plain template)
    /// and `kwargs` as further template variables, and how the reply carries reasoning.
    pub fn chat_prompt(
        &self,
        messages: &[Message],
        tools: &[Tool],
        kwargs: &TemplateKwargs,
    ) -> Result<ChatPrompt, ModelError> {
        let format = self.tool_format();
        // gpt-oss: assistant turns kept as whole harmony replies come apart first.
        let split;
        let messages = match self.info.reasoning.map(|r| r.tags) {
            Some(ThinkTags::Harmony) => {
                split = super::chat::harmony_history(messages);
                &split[..]
            }
            _ => messages,
        };
        let rendered = if tools.is_empty() {
            self.chat_template.render_with(messages, &[], kwargs, true)?
        } else {
            let messages = format.prepare(messages, tools, self.chat_template.source());
            let listed: Vec<serde_json::Value> = match format {
                ToolFormat::Injected => Vec::new(),
                _ => tools.iter().map(Tool::to_json).collect(),
            };
            self.chat_template.render_with(&messages, &listed, kwargs, true)?
        };
        // The tags were read from the template at load (`ModelInfo::reasoning`); only where
        // this prompt leaves the reply is new.
        let reasoning = self.info.reasoning.map(|r| Reasoning::for_prompt(r.tags, &rendered));
        Ok(ChatPrompt {
            ids: self.encode_rendered(&rendered)?,
            reasoning,
        })
    }

    /// A rendered conversation's ids, BOS added only if the template did not write it.
    fn encode_rendered(&self, rendered: &str) -> Result<Vec<u32>, ModelError> {
        let starts_with_bos = self
            .tokenizer
            .bos_token()
            .is_some_and(|b| !b.is_empty() && rendered.starts_with(b));
        self.tokenizer
            .encode(rendered, self.tokenizer.add_bos() && !starts_with_bos)
    }

    /// Checks that `prompt_tokens` leaves room for at least one generated token.
    pub fn check_prompt_fits(&self, prompt_tokens: usize) -> Result<(), ModelError> {
        let context = self.info.context_length;
        if prompt_tokens == 0 {
            return Err(ModelError::Tokenizer("the prompt is empty (no tokens)".into()));
        }
        if prompt_tokens >= context {
            return Err(ModelError::PromptTooLong {
                tokens: prompt_tokens,
                context,
            });
        }
        Ok(())
    }
}

/// The K/V geometry of the model in `gguf`, from its metadata alone (no weights are read).
pub fn kv_shape_of(gguf: &Path) -> Result<crate::ops::KvShape, ModelError> {
    let file = GgufFile::open(gguf)?;
    let hp =
        super::hparams::HParams::from_metadata(file.metadata(), file.tensor_shape("token_embd.weight").map(|s| s[0]))?;
    Ok(hp.kv_shape())
}

/// The [`ModelInfo::kv_variant`] of the model in `gguf` run with the `context_length` setting
/// (read from its metadata, without loading weights).
pub fn kv_variant_of(gguf: &Path, context_length: Option<usize>) -> Result<String, ModelError> {
    let file = GgufFile::open(gguf)?;
    let hp =
        super::hparams::HParams::from_metadata(file.metadata(), file.tensor_shape("token_embd.weight").map(|s| s[0]))?;
    let context = resolve_context(&hp, context_length)?;
    Ok(kv_variant(&file, &hp, context))
}

/// Phi-3's LongRoPE computes different K for the same tokens depending on which factors the
/// context picks; nothing else here varies with the settings.
fn kv_variant(file: &GgufFile, hp: &super::hparams::HParams, context: usize) -> String {
    match super::transformer::rope_factors_name(file, hp, context) {
        Some(name @ ("rope_factors_long.weight" | "rope_factors_short.weight")) => name.to_string(),
        _ => String::new(),
    }
}

/// The context length a model runs with: the setting, else its trained context capped at
/// [`DEFAULT_CONTEXT_CAP`]; 0 or more than the trained context is refused.
fn resolve_context(hp: &super::hparams::HParams, setting: Option<usize>) -> Result<usize, ModelError> {
    match setting {
        None => Ok(hp.context_length.min(DEFAULT_CONTEXT_CAP)),
        Some(0) => Err(ModelError::BadMetadata {
            key: "context_length (setting)".into(),
            reason: "must be at least 1".into(),
        }),
        Some(n) if n > hp.context_length => Err(ModelError::BadMetadata {
            key: "context_length (setting)".into(),
            reason: format!("{n} exceeds the model's trained context of {}", hp.context_length),
        }),
        Some(n) => Ok(n),
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// A short human name for a device.
pub fn device_name(device: &Device) -> String {
    match device {
        Device::Cpu => "cpu".into(),
        Device::Cuda(_) => "cuda".into(),
        Device::Metal(_) => "metal".into(),
    }
}
