//! `response_format`: JSON output, any object or one that matches a JSON Schema.
//!
//! Owns: reading OpenAI's `{"type": "text" | "json_object" | "json_schema"}` (and llama.cpp's
//! `{"type": "json_object", "schema": {...}}`) into the engine's [`Grammar`]; the mapping of a
//! grammar that does not compile to a 400 naming the field it came from. The engine enforces
//! the grammar while sampling (`model::grammar`, llguidance).
//!
//! Counterpart: vLLM's `ResponseFormat` in `protocol.py` and `StructuredOutputsParams`.

use serde_json::Value;

use crate::engine::{EngineError, Grammar, GrammarError};

use super::ApiError;

/// The field `response_format`.
pub(crate) const FIELD: &str = "response_format";

/// `response_format` as a grammar; `None` for text (or no field).
pub(crate) fn response_format(value: Option<&Value>) -> Result<Option<Grammar>, ApiError> {
    let value = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let Some(obj) = value.as_object() else {
        return Err(ApiError::invalid_param(FIELD, "response_format must be an object with a `type`"));
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => match obj.get("schema") {
            None | Some(Value::Null) => Ok(Some(Grammar::JsonObject)),
            Some(schema) => Ok(Some(Grammar::JsonSchema(schema.clone()))),
        },
        Some("json_schema") => {
            let param = "response_format.json_schema";
            let spec = obj
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| ApiError::invalid_param(param, "a json_schema response_format needs a `json_schema` object"))?;
            match spec.get("schema") {
                None | Some(Value::Null) => Ok(Some(Grammar::JsonObject)),
                Some(schema) => Ok(Some(Grammar::JsonSchema(schema.clone()))),
            }
        }
        Some(other) => Err(ApiError::invalid_param(
            "response_format.type",
            format!("response_format.type must be text, json_object or json_schema, not {other:?}"),
        )),
        None => Err(ApiError::invalid_param(
            "response_format.type",
            "response_format needs a string `type` (text, json_object or json_schema)",
        )),
    }
}

/// The Responses API's field for the same thing.
pub(crate) const TEXT_FIELD: &str = "text.format";

/// The Responses API's `text.format` as a grammar: `{"type": "text"}`, `{"type":
/// "json_object"}` or `{"type": "json_schema", "name", "schema"}` (flat, where chat nests it
/// under `json_schema`); `None` for text (or no field).
pub(crate) fn text_format(value: Option<&Value>) -> Result<Option<Grammar>, ApiError> {
    let value = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let Some(obj) = value.as_object() else {
        return Err(ApiError::invalid_param(TEXT_FIELD, "text.format must be an object with a `type`"));
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Grammar::JsonObject)),
        Some("json_schema") => match obj.get("schema") {
            Some(schema @ Value::Object(_)) => Ok(Some(Grammar::JsonSchema(schema.clone()))),
            _ => Err(ApiError::invalid_param(
                "text.format.schema",
                "a json_schema text.format needs a `schema` object",
            )),
        },
        Some(other) => Err(ApiError::invalid_param(
            "text.format.type",
            format!("text.format.type must be text, json_object or json_schema, not {other:?}"),
        )),
        None => Err(ApiError::invalid_param(
            "text.format.type",
            "text.format needs a string `type` (text, json_object or json_schema)",
        )),
    }
}

/// An engine error with a grammar that does not compile named as the request's `field`;
/// other errors as they are.
pub(crate) fn named(e: EngineError, field: Option<&str>) -> ApiError {
    match (e, field) {
        (EngineError::Grammar(GrammarError::Invalid(why)), Some(field)) => {
            ApiError::invalid_param(field, format!("{field} cannot be used: {why}"))
        }
        (e, _) => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_shapes_of_response_format() {
        assert_eq!(response_format(None).unwrap(), None);
        assert_eq!(response_format(Some(&json!({"type": "text"}))).unwrap(), None);
        assert_eq!(
            response_format(Some(&json!({"type": "json_object"}))).unwrap(),
            Some(Grammar::JsonObject)
        );
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        assert_eq!(
            response_format(Some(&json!({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})))
                .unwrap(),
            Some(Grammar::JsonSchema(schema.clone()))
        );
        assert_eq!(
            response_format(Some(&json!({"type": "json_object", "schema": schema}))).unwrap(),
            Some(Grammar::JsonSchema(schema))
        );
        for bad in [json!("json"), json!({"type": "yaml"}), json!({}), json!({"type": "json_schema"})] {
            let e = response_format(Some(&bad)).unwrap_err();
            assert!(e.body().error.param.is_some_and(|p| p.starts_with(FIELD)), "{bad}: {e}");
        }
    }
}
