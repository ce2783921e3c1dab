//! [`Message`]: one turn of a chat, the one message type of hearth. The chat template renders
//! it, a conversation file stores it, the HTTP API reads it from `messages`, the desktop app
//! shows it.
//!
//! Invariants: a [`Role`] is written as its OpenAI name (`"system"`, `"user"`, `"assistant"`,
//! or whatever else a client sent, e.g. `"tool"`), so a conversation file and a request body
//! spell a message the same way; only the three conversation roles are saved in conversations
//! (checked where a conversation is written from a request).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Who said it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Role {
    System,
    User,
    Assistant,
    /// A role templates may know and conversations do not keep (`tool`, `developer`, ...).
    Other(String),
}

impl Role {
    pub fn as_str(&self) -> &str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Other(s) => s,
        }
    }

    /// The role named `s`; names other than the three conversation roles are kept as given.
    pub fn parse(s: &str) -> Self {
        match s {
            "system" => Self::System,
            "user" => Self::User,
            "assistant" => Self::Assistant,
            other => Self::Other(other.to_owned()),
        }
    }

    /// System, user or assistant: the roles a conversation started in the app holds (one
    /// written through the API may hold `tool` messages too).
    pub fn is_conversation_role(&self) -> bool {
        !matches!(self, Self::Other(_))
    }

    /// The `tool` role: a function's result.
    pub fn is_tool(&self) -> bool {
        matches!(self, Self::Other(r) if r == "tool")
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Role {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self::parse(&String::deserialize(d)?))
    }
}

/// One message: its role, its text, and when it was written; an assistant's tool calls, and
/// which call a `tool` message answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    /// Milliseconds since the Unix epoch (0 when unknown).
    #[serde(default)]
    pub created_ms: u64,
    /// The functions an assistant turn called (OpenAI's `tool_calls`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// A `tool` message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A `tool` message: the function's name (some templates print it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An assistant turn's reasoning, when a client sends it back apart from `content`
    /// (llama.cpp's and vLLM's `reasoning_content`; Qwen3's template renders it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// GLM-4's templates: an assistant turn that is one call carries the function's name here
    /// (its `metadata`) and the arguments as its content. Set only by
    /// [`super::tools::ToolFormat::prepare`] for the template; never read from a request or stored.
    #[serde(skip)]
    pub metadata: Option<String>,
}

/// One function call of an assistant turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id (`call_...`), which the `tool` message with its result repeats.
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments as JSON text (OpenAI sends and expects a string).
    pub arguments: String,
}

impl ToolCall {
    /// The arguments as the value they encode (what templates `tojson`), or as the string
    /// itself when it is not JSON.
    pub fn arguments_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.arguments).unwrap_or_else(|_| serde_json::Value::String(self.arguments.clone()))
    }
}

impl Message {
    /// A message written now.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        let created_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Self {
            role,
            content: content.into(),
            created_ms,
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            reasoning_content: None,
            metadata: None,
        }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_round_trip_as_their_names() {
        for name in ["system", "user", "assistant", "tool"] {
            let role = Role::parse(name);
            assert_eq!(role.as_str(), name);
            assert_eq!(role.is_conversation_role(), name != "tool");
            let json = serde_json::to_string(&role).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<Role>(&json).unwrap(), role);
        }
        let m: Message = serde_json::from_str(r#"{"role": "user", "content": "hi"}"#).unwrap();
        assert_eq!((m.role, m.content.as_str(), m.created_ms), (Role::User, "hi", 0));
    }
}
