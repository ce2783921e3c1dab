//! `POST /v1/embeddings`: sentence embeddings from an embedding model (a GGUF whose file gives
//! a pooling type, such as Qwen3-Embedding's).
//!
//! Owns: reading `input` (a string, a list of strings, a list of token ids, or a list of such
//! lists; at most [`MAX_INPUTS`]), `encoding_format` (`float`, or `base64` of little-endian
//! f32s) and `dimensions` (the first `dimensions` values, renormalized: Matryoshka models'
//! shorter vectors, as OpenAI's `text-embedding-3` answer). Text is tokenized with BOS and EOS
//! as the file says (llama.cpp's server does the same). Each input is one engine request
//! ([`GenerateParams::embedding`]) pooled as the file says; inputs are submitted
//! [`IN_FLIGHT`] at a time, so one large request neither fills the queue nor waits for it to
//! drain, and the engine batches them with whatever else runs. Vectors come back at unit
//! length, as OpenAI's do. The pooling is the server's `--pooling` where given (llama.cpp's
//! flag), else the file's; a model without either (a chat model) is a 400 naming `model`: its
//! hidden states are not trained as embeddings, and llama.cpp refuses the same.
//!
//! Counterpart: vLLM's `serving_embedding.py`; llama.cpp's server `/v1/embeddings`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::{normalize, GenerateParams, GenerateRequest, Pooling, RequestStream};

use super::completions::token_ids;
use super::{body, generation, ApiError, AppState};

/// The most inputs one request may carry (OpenAI's limit).
pub(crate) const MAX_INPUTS: usize = 2048;
/// Inputs of one request submitted to the engine at once.
pub(crate) const IN_FLIGHT: usize = 16;

#[derive(Debug, Deserialize)]
struct EmbeddingFields {
    input: Value,
    model: Option<String>,
    encoding_format: Option<String>,
    dimensions: Option<u64>,
}

/// One input as sent.
#[derive(Debug, PartialEq)]
enum Input {
    Text(String),
    Tokens(Vec<u32>),
}

#[derive(Debug, Serialize)]
pub(crate) struct EmbeddingList {
    object: &'static str,
    data: Vec<EmbeddingData>,
    model: String,
    usage: EmbeddingUsage,
}

#[derive(Debug, Serialize)]
struct EmbeddingData {
    object: &'static str,
    index: usize,
    /// A list of floats, or their little-endian bytes in base64.
    embedding: Value,
}

#[derive(Debug, Serialize)]
struct EmbeddingUsage {
    prompt_tokens: usize,
    total_tokens: usize,
}

pub(crate) async fn handle(
    State(state): State<AppState>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Json<EmbeddingList>, ApiError> {
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let f = body::fields::<EmbeddingFields>(&value)?;
    let model = state.resolve_model(f.model.as_deref())?.to_string();
    let pooling = pooling_for(&state, &model)?;
    let base64 = match f.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "encoding_format",
                format!("encoding_format must be \"float\" or \"base64\", not {other:?}"),
            ))
        }
    };
    let dimensions = dimensions(&state, f.dimensions)?;
    let inputs = inputs(f.input)?;
    let prompts = generation::tokenize(&state, move |engine| {
        inputs
            .into_iter()
            .map(|i| match i {
                Input::Text(t) => engine.tokenize_for_embedding(&t),
                Input::Tokens(ids) => Ok(ids),
            })
            .collect::<Result<Vec<Vec<u32>>, _>>()
    })
    .await?;
    let vectors = embed_all(&state, &prompts, pooling, "input").await?;
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, mut v)| {
            v.truncate(dimensions);
            normalize(&mut v);
            EmbeddingData {
                object: "embedding",
                index,
                embedding: if base64 { Value::String(encode_base64(&v)) } else { Value::from(v) },
            }
        })
        .collect();
    let tokens = prompts.iter().map(Vec::len).sum();
    Ok(Json(EmbeddingList {
        object: "list",
        data,
        model,
        usage: EmbeddingUsage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
    }))
}

/// How `model` (the loaded model, under the name the request used) pools an embedding: the
/// server's `--pooling`, else the file's; a model with neither is a 400 naming `model`.
pub(crate) fn pooling_for(state: &AppState, model: &str) -> Result<Pooling, ApiError> {
    let engine = state.engine();
    state.config().embedding_pooling(engine).ok_or_else(|| {
        ApiError::invalid_param(
            "model",
            format!(
                "{model} is not an embedding model: its file gives no pooling type ({}.pooling_type), so its hidden states were not trained as embeddings; load one that does, such as Qwen3-Embedding, or start the server with --pooling mean|cls|last",
                engine.model_info().architecture
            ),
        )
    })
}

/// `dimensions`: absent for the model's whole width, else from 1 to it.
pub(crate) fn dimensions(state: &AppState, requested: Option<u64>) -> Result<usize, ApiError> {
    let width = state.engine().model().transformer.hparams().hidden;
    match requested {
        None => Ok(width),
        Some(d) if (1..=width as u64).contains(&d) => Ok(d as usize),
        Some(d) => Err(ApiError::invalid_param(
            "dimensions",
            format!("dimensions must be from 1 to {width} (this model's width), not {d}"),
        )),
    }
}

/// Every prompt's pooled vector, in order, [`IN_FLIGHT`] requests at a time. Every prompt is
/// checked before any is computed: an empty one, or one over the context, refuses the request,
/// naming it as `field[i]`. A later error (a full queue) answers for the whole request; the
/// requests still running are cancelled as their streams drop.
pub(crate) async fn embed_all(
    state: &AppState,
    prompts: &[Vec<u32>],
    pooling: Pooling,
    field: &str,
) -> Result<Vec<Vec<f32>>, ApiError> {
    let engine = state.engine();
    for (i, p) in prompts.iter().enumerate() {
        if p.is_empty() {
            return Err(ApiError::invalid_param(format!("{field}[{i}]"), "an input must not be empty"));
        }
        if let Err(e) = engine.model().check_prompt_fits(p.len()) {
            return Err(ApiError::ContextLength(format!("{field}[{i}]: {e}")));
        }
    }
    let mut out = Vec::with_capacity(prompts.len());
    for batch in prompts.chunks(IN_FLIGHT) {
        let streams = batch
            .iter()
            .map(|p| engine.submit(GenerateRequest::new(p.clone(), GenerateParams::embedding(pooling))))
            .collect::<Result<Vec<RequestStream>, _>>()?;
        for events in streams {
            let report = generation::collect(events).await?;
            let v = report
                .embedding
                .ok_or_else(|| ApiError::Internal("the engine finished an embedding without its vector".into()))?;
            out.push(v);
        }
    }
    Ok(out)
}

fn inputs(value: Value) -> Result<Vec<Input>, ApiError> {
    const SHAPES: &str = "input must be a string, a list of strings, a list of token ids or a list of lists of token ids";
    let inputs = match value {
        Value::String(s) => vec![Input::Text(s)],
        Value::Array(items) if items.is_empty() => return Err(ApiError::invalid_param("input", "input must not be empty")),
        Value::Array(items) if items.iter().all(Value::is_number) => vec![Input::Tokens(token_ids(&items, "input")?)],
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(Input::Text(s)),
                Value::Array(ids) => Ok(Input::Tokens(token_ids(&ids, &format!("input[{i}]"))?)),
                _ => Err(ApiError::invalid_param(format!("input[{i}]"), SHAPES)),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(ApiError::invalid_param("input", SHAPES)),
    };
    // An empty text (OpenAI refuses it too), or an empty list of ids.
    let empty = |i: &Input| matches!(i, Input::Text(t) if t.is_empty()) || matches!(i, Input::Tokens(t) if t.is_empty());
    if let Some(i) = inputs.iter().position(empty) {
        let param = if inputs.len() == 1 { "input".to_string() } else { format!("input[{i}]") };
        return Err(ApiError::invalid_param(param, "an input must not be empty"));
    }
    if inputs.len() > MAX_INPUTS {
        return Err(ApiError::invalid_param(
            "input",
            format!("{} inputs; at most {MAX_INPUTS} are accepted in one request", inputs.len()),
        ));
    }
    Ok(inputs)
}

/// `v`'s little-endian bytes in standard base64 (with padding), as OpenAI's `base64` format.
fn encode_base64(v: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn input_shapes() {
        assert_eq!(inputs(json!("hi")).unwrap(), vec![Input::Text("hi".into())]);
        assert_eq!(
            inputs(json!(["a", "b"])).unwrap(),
            vec![Input::Text("a".into()), Input::Text("b".into())]
        );
        assert_eq!(inputs(json!([1, 2])).unwrap(), vec![Input::Tokens(vec![1, 2])]);
        assert_eq!(
            inputs(json!([[1], [2, 3]])).unwrap(),
            vec![Input::Tokens(vec![1]), Input::Tokens(vec![2, 3])]
        );
        assert_eq!(
            inputs(json!(["a", [4]])).unwrap(),
            vec![Input::Text("a".into()), Input::Tokens(vec![4])]
        );
        for bad in [json!([]), json!(null), json!(3), json!([1, -2]), json!([{"a": 1}]), json!([[1, "x"]]), json!(""), json!(["a", ""]), json!([[1], []])] {
            assert!(inputs(bad.clone()).is_err(), "{bad}");
        }
        let many = Value::Array(vec![json!("x"); MAX_INPUTS + 1]);
        assert!(inputs(many).is_err());
    }

    #[test]
    fn base64_is_the_little_endian_floats() {
        // 1.0f32 = 00 00 80 3f.
        assert_eq!(encode_base64(&[1.0]), "AACAPw==");
        assert_eq!(encode_base64(&[1.0, -2.0]), "AACAPwAAAMA=");
        assert_eq!(encode_base64(&[]), "");
    }
}
