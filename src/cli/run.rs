//! `hearth run`: prompts in turn through the engine, tokens streamed to stdout. With `--chat`,
//! a thinking model's reasoning (`<think>` … `</think>`) streams to stderr and only its answer
//! to stdout, so a pipe gets the answer as the HTTP API's `content` would give it.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use hearth::config::{AppPaths, Settings};
use hearth::engine::{Event, GenerateParams, GenerateRequest, Reasoning, ReasoningStream, SplitPiece};
use hearth::persist::ConversationId;

use super::args::RunArgs;
use super::start::start;

pub fn run(settings: &Settings, paths: &AppPaths, args: &RunArgs) -> Result<ExitCode> {
    let mut prompts = args.prompt.clone();
    // A prompt longer than the context could hold fails at once, without reading all of it.
    let context = settings
        .model
        .context_length
        .unwrap_or(hearth::model::DEFAULT_CONTEXT_CAP);
    let limit = prompt_file_limit(context);
    for path in &args.prompt_file {
        let bytes = hearth::config::read_limited(path, limit)
            .with_context(|| format!("cannot read prompt file {}", path.display()))?
            .with_context(|| {
                format!(
                    "prompt file {} is larger than {limit} bytes, more than a context of {context} tokens can hold",
                    path.display()
                )
            })?;
        prompts.push(
            String::from_utf8(bytes).with_context(|| format!("prompt file {} is not UTF-8 text", path.display()))?,
        );
    }
    let conversation = args.conversation.as_deref().map(ConversationId::parse).transpose()?;
    generate(settings, paths, &prompts, args.chat, conversation)
}

/// A reply on its way out: reasoning to stderr, the rest to stdout.
struct Split {
    stream: Option<ReasoningStream>,
    /// Reasoning has gone to stderr and no line break has ended it there yet.
    thinking: bool,
}

impl Split {
    fn new(reasoning: Option<Reasoning>) -> Self {
        Self {
            stream: reasoning.map(Reasoning::stream),
            thinking: false,
        }
    }

    fn push(&mut self, text: String) -> SplitPiece {
        SplitPiece::of(self.stream.as_mut(), text)
    }

    fn finish(&mut self) -> SplitPiece {
        self.stream.take().map(ReasoningStream::finish).unwrap_or_default()
    }

    fn write(&mut self, out: &mut impl Write, piece: SplitPiece) -> Result<()> {
        if !piece.reasoning.is_empty() {
            let mut err = std::io::stderr().lock();
            err.write_all(piece.reasoning.as_bytes())?;
            err.flush()?;
            self.thinking = true;
        }
        if !piece.content.is_empty() {
            if std::mem::take(&mut self.thinking) {
                eprintln!();
            }
            out.write_all(piece.content.as_bytes())?;
            out.flush()?;
        }
        Ok(())
    }
}

/// The most bytes a prompt file may hold: 64 per token of the context (no tokenizer's token is
/// longer on average), plus 1 MiB.
fn prompt_file_limit(context_tokens: usize) -> u64 {
    (context_tokens as u64).saturating_mul(64).saturating_add(1 << 20)
}

fn generate(
    settings: &Settings,
    paths: &AppPaths,
    prompts: &[String],
    chat: bool,
    conversation: Option<ConversationId>,
) -> Result<ExitCode> {
    let handle = start(settings, paths)?;
    let model = handle.model();
    let chat = chat || conversation.is_some();
    // Tokenize every prompt before generating, so a bad one fails first.
    let all_ids = prompts
        .iter()
        .map(|p| model.prompt_ids(p, chat))
        .collect::<Result<Vec<_>, _>>()?;
    for ids in &all_ids {
        model.check_prompt_fits(ids.len())?;
    }
    let params = GenerateParams {
        max_tokens: settings.reply_tokens(),
        sampling: settings.sampling.clone(),
        stop: Vec::new(),
        ignore_eos: false,
        keep_logits: false,
        logprobs: None,
        grammar: None,
        grammar_after: None,
        prompt_logprobs: None,
        embed: None,
    };
    if let Some(id) = &conversation {
        if handle.open_or_create_conversation(id)?.1 {
            eprintln!("conversation {id}: new");
        }
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // Chat prompts render as the model's probe did: the same reasoning state.
    let reasoning = chat.then(|| handle.model_info().reasoning).flatten();
    for (n, (ids, text)) in all_ids.into_iter().zip(prompts).enumerate() {
        // One prompt at a time, in order; each shares the cache with the ones before.
        let mut stream = match &conversation {
            Some(id) => handle.send_message(id, Some(text), &params)?,
            None => handle.submit(GenerateRequest::new(ids, params.clone()))?,
        };
        let mut split = Split::new(reasoning);
        let report = loop {
            match stream.blocking_recv() {
                Some(Event::Token { text, .. }) => {
                    // A closed stdout ends here; dropping the stream cancels the request.
                    let piece = split.push(text);
                    split.write(&mut out, piece)?;
                }
                Some(Event::Done(report)) => {
                    let rest = split.finish();
                    split.write(&mut out, rest)?;
                    break report;
                }
                Some(Event::Error(e)) => return Err(e.into()),
                None => bail!("the engine stopped unexpectedly"),
            }
        };
        writeln!(out)?;
        out.flush()?;
        let c = report.cached;
        eprintln!(
            "prompt {}: {} tokens, {} cached (device {}, host {}, of which disk {}); first token {:.0} ms; {} generated ({:?}), {:.1} tok/s",
            n + 1,
            report.prompt_tokens,
            c.tokens,
            c.device_tokens,
            c.host_tokens,
            c.disk_tokens,
            report.ttft.as_secs_f64() * 1e3,
            report.tokens.len(),
            report.stop,
            report.decode_rate()
        );
    }
    // The reply and the cache file are written in the background: wait for them.
    handle.flush_disk();
    super::report_unsaved(&handle);
    Ok(ExitCode::SUCCESS)
}
