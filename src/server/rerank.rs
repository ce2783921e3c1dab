//! `POST /v1/rerank` (and `/rerank`, `/v1/reranking`, `/reranking`, llama.cpp's paths): a
//! reranker's relevance scores of documents for a query, in Jina's and Cohere's shape as
//! llama.cpp's server answers.
//!
//! Owns: reading `query` (a string), `documents` (strings, or objects with `text`; at most
//! [`super::embeddings::MAX_INPUTS`]), `top_n` and `return_documents`, or, in the shape of
//! Hugging Face's text-embeddings-inference (TEI), `texts` and `return_text`, answered as TEI's
//! bare list of `{index, score, text?}` (llama.cpp tells the two apart the same way); each pair's prompt (the
//! file's rerank template, else the query and the document between BOS and EOS:
//! `model::pooling::rank_prompt`), run as an engine request pooled like an embedding on its
//! last row (an encoder's, a BERT or XLM-RoBERTa cross-encoder's: its first), scored by the
//! file's classifier head (Qwen3-Reranker's "yes" against "no": the softmax's first
//! probability; a cross-encoder's logit); results sorted by score, highest first. A model without a
//! classifier head (not a rank file) is a 400 naming `model`.
//!
//! Counterpart: llama.cpp's server `/v1/rerank`; vLLM's `serving_score.py` (`/rerank`).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::embeddings::{embed_all, MAX_INPUTS};
use super::{body, generation, ApiError, AppState};

#[derive(Debug, Deserialize)]
struct RerankFields {
    query: String,
    documents: Option<Vec<Value>>,
    model: Option<String>,
    top_n: Option<usize>,
    return_documents: Option<bool>,
    /// TEI's name for the documents.
    texts: Option<Vec<Value>>,
    /// TEI's `return_documents`.
    return_text: Option<bool>,
}

/// TEI's result: `score` for `relevance_score`, the text beside it.
#[derive(Debug, Serialize)]
struct TeiResult {
    index: usize,
    score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct RerankList {
    model: String,
    object: &'static str,
    usage: RerankUsage,
    results: Vec<RerankResult>,
}

#[derive(Debug, Serialize)]
struct RerankUsage {
    prompt_tokens: usize,
    total_tokens: usize,
}

#[derive(Debug, Serialize)]
struct RerankResult {
    index: usize,
    relevance_score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    document: Option<DocumentText>,
}

#[derive(Debug, Serialize)]
struct DocumentText {
    text: String,
}

pub(crate) async fn handle(
    State(state): State<AppState>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let f = body::fields::<RerankFields>(&value)?;
    let model = state.resolve_model(f.model.as_deref())?.to_string();
    let engine = state.engine();
    if engine.model().transformer.hparams().rank.is_none() {
        return Err(ApiError::invalid_param(
            "model",
            format!("{model} is not a reranker: its file has no classifier head (pooling type rank, cls.output.weight), such as Qwen3-Reranker's"),
        ));
    }
    let (tei, items) = match (f.documents, f.texts) {
        (Some(d), None) => (false, d),
        (None, Some(t)) => (true, t),
        _ => return Err(ApiError::invalid("give exactly one of documents (Jina's and Cohere's shape) or texts (TEI's)")),
    };
    let field = if tei { "texts" } else { "documents" };
    let documents = documents(items, field)?;
    let top_n = match f.top_n {
        Some(0) => return Err(ApiError::invalid_param("top_n", "top_n must be at least 1")),
        Some(n) => n.min(documents.len()),
        None => documents.len(),
    };
    let query = f.query;
    let docs = documents.clone();
    let prompts = generation::tokenize(&state, move |engine| {
        docs.iter()
            .map(|d| engine.tokenize_rerank(&query, d))
            .collect::<Result<Vec<Vec<u32>>, _>>()
    })
    .await?;
    let rows = embed_all(&state, &prompts, engine.model().transformer.hparams().rank_pooling(), field).await?;
    let transformer = &engine.model().transformer;
    let mut results = rows
        .iter()
        .enumerate()
        .map(|(index, row)| {
            let score = transformer
                .rank_score(row)
                .ok_or_else(|| ApiError::Internal("the reranker lost its classifier head".into()))?;
            Ok(RerankResult {
                index,
                relevance_score: score,
                document: None,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    results.sort_by(|a, b| b.relevance_score.total_cmp(&a.relevance_score));
    results.truncate(top_n);
    if tei {
        let with_text = f.return_text.unwrap_or(false);
        let list: Vec<TeiResult> = results
            .iter()
            .map(|r| TeiResult {
                index: r.index,
                score: r.relevance_score,
                text: with_text.then(|| documents.get(r.index).cloned()).flatten(),
            })
            .collect();
        return json(&list);
    }
    if f.return_documents.unwrap_or(false) {
        for r in &mut results {
            r.document = documents.get(r.index).map(|t| DocumentText { text: t.clone() });
        }
    }
    let tokens = prompts.iter().map(Vec::len).sum();
    json(&RerankList {
        model,
        object: "list",
        usage: RerankUsage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
        results,
    })
}

fn json(v: &impl Serialize) -> Result<Json<Value>, ApiError> {
    serde_json::to_value(v)
        .map(Json)
        .map_err(|e| ApiError::Internal(format!("the rerank results did not serialize: {e}")))
}

/// The documents' texts: strings, or objects with a `text` string (Jina's and Cohere's);
/// errors name `field` (`documents`, or TEI's `texts`).
fn documents(items: Vec<Value>, field: &str) -> Result<Vec<String>, ApiError> {
    if items.is_empty() {
        return Err(ApiError::invalid_param(field, format!("{field} must not be empty")));
    }
    if items.len() > MAX_INPUTS {
        return Err(ApiError::invalid_param(
            field,
            format!("{} documents; at most {MAX_INPUTS} are accepted in one request", items.len()),
        ));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, d)| match d {
            Value::String(s) => Ok(s),
            Value::Object(mut o) => match o.remove("text") {
                Some(Value::String(s)) => Ok(s),
                _ => Err(ApiError::invalid_param(format!("{field}[{i}]"), "a document object needs a text string")),
            },
            _ => Err(ApiError::invalid_param(
                format!("{field}[{i}]"),
                "a document is a string or an object with a text string",
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn document_shapes() {
        assert_eq!(documents(vec![json!("a"), json!({"text": "b"})], "documents").unwrap(), vec!["a", "b"]);
        assert!(documents(vec![], "documents").is_err());
        assert!(documents(vec![json!(3)], "texts").is_err());
        assert!(documents(vec![json!({"title": "x"})], "documents").is_err());
    }
}
