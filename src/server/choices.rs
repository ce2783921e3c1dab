//! A request's choices: `n` of each of its prompts, each an engine request of its own.
//!
//! Owns: [`Choice`] (one engine request of a response, the prompt it answers, the text it
//! echoes) and submitting them ([`submit`]): each prompt's first choice alone until its prompt
//! has been computed ([`RequestStream::started`]), then the prompt's other choices, which read
//! its full blocks from the prefix cache instead of each computing it again (sent together, all
//! would be admitted before any had cached a block); the prompts side by side. Choice `j` of a
//! prompt is seeded `seed + j` ([`Plan::params_for`]). The order is OpenAI's: prompt by
//! prompt, `n` each, so choice `i·n + j` is prompt `i`'s `j`-th.
//!
//! Invariants: a request asks for no more choices than the engine's queue holds (a 400 naming
//! `n` otherwise, where a full queue's 503 would tell the client to retry in vain); a prompt
//! whose first choice fails before its first token is answered by that
//! choice alone (its error is the response's); only the first choice of the first prompt is
//! saved (a request that saves has one prompt and `n` 1).
//!
//! Counterpart: vLLM's `ParentRequest` (`v1/engine/parallel_sampling.py`), which fans `n` out
//! into child requests and leaves the sharing to its prefix cache; llama-server's `n_cmpl`
//! children, started once the first slot has processed the prompt.

use crate::engine::{RequestStream, SaveTo};

use super::generation::submit_choice;
use super::params::Plan;
use super::{ApiError, AppState};

/// The prompt a reply echoes (the completions' `echo`): its text, and its ids for the prompt's
/// own log-probabilities.
#[derive(Debug, Clone)]
pub(crate) struct Echo {
    pub text: String,
    pub ids: Vec<u32>,
}

/// A prompt of a request: its ids, and its text where the replies echo it.
#[derive(Debug)]
pub(crate) struct Prompt {
    pub ids: Vec<u32>,
    pub echo: Option<String>,
}

impl Prompt {
    pub fn ids(ids: Vec<u32>) -> Self {
        Self { ids, echo: None }
    }
}

/// One choice of a response.
#[derive(Debug)]
pub(crate) struct Choice {
    pub events: RequestStream,
    /// Which of the request's prompts it answers (`usage` counts each prompt once).
    pub prompt: usize,
    /// The prompt to put before the reply.
    pub echo: Option<Echo>,
}

impl Choice {
    /// The one choice of a one-prompt request.
    pub fn one(events: RequestStream) -> Self {
        Self {
            events,
            prompt: 0,
            echo: None,
        }
    }
}

/// Submits `plan.n` choices of each of `prompts` (the first prompt's first saved as `save`
/// says), in OpenAI's order.
pub(crate) async fn submit(
    state: &AppState,
    prompts: Vec<Prompt>,
    plan: &Plan,
    mut save: Option<SaveTo>,
) -> Result<Vec<Choice>, ApiError> {
    // Every choice waits in the engine's queue at first: more than it holds would always be
    // refused (503), however often the client retried. (One request alone is the queue's to
    // refuse when it is full.)
    let (total, queue) = (prompts.len() * plan.n, state.engine().max_queued());
    if total > 1 && total > queue {
        return Err(ApiError::invalid_param(
            "n",
            format!("{total} choices do not fit this server's queue of {queue} requests (engine.max_queued); ask for fewer"),
        ));
    }
    let each = prompts.into_iter().enumerate().map(|(i, p)| {
        let save = save.take();
        async move {
            let echo = p.echo.map(|text| Echo {
                text,
                ids: p.ids.clone(),
            });
            let streams = submit_prompt(state, p.ids, plan, save).await?;
            let choices = streams.into_iter().map(|events| Choice {
                events,
                prompt: i,
                echo: echo.clone(),
            });
            Ok::<_, ApiError>(choices.collect::<Vec<_>>())
        }
    });
    Ok(futures_util::future::try_join_all(each)
        .await?
        .into_iter()
        .flatten()
        .collect())
}

/// Submits `plan.n` choices of `prompt`: the first alone until the prompt is computed, then
/// the others.
async fn submit_prompt(
    state: &AppState,
    prompt: Vec<u32>,
    plan: &Plan,
    save: Option<SaveTo>,
) -> Result<Vec<RequestStream>, ApiError> {
    let mut first = submit_choice(state, prompt.clone(), plan, 0, save)?;
    if plan.n <= 1 || !first.started().await {
        return Ok(vec![first]);
    }
    let mut all = vec![first];
    for index in 1..plan.n {
        all.push(submit_choice(state, prompt.clone(), plan, index, None)?);
    }
    Ok(all)
}
