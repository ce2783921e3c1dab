//! [`ConversationId`]: the name of a conversation, and of its files.
//!
//! Invariant: an id is 1 to 64 ASCII letters, digits, `-` or `_`. It is used as a file name
//! (`conversations/<id>.json`, `cache/<id>.hkv`), so this rule is what keeps an id from the HTTP
//! API from naming a path outside the data directory: no separators, no dots, nothing empty.

use std::fmt;

use super::PersistError;

/// Longest conversation id.
pub const MAX_ID_LEN: usize = 64;

/// A validated conversation id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ConversationId(String);

impl ConversationId {
    /// Checks `s` against the rule in the module docs.
    pub fn parse(s: &str) -> Result<Self, PersistError> {
        let ok = !s.is_empty()
            && s.len() <= MAX_ID_LEN
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if ok {
            Ok(Self(s.to_string()))
        } else {
            Err(PersistError::InvalidId(s.chars().take(80).collect()))
        }
    }

    /// A fresh id: `c-` then the time in milliseconds and 32 random bits, in hex (sorts by
    /// creation time).
    pub fn generate() -> Self {
        let ms = super::now_ms();
        let r: u32 = rand::random();
        Self(format!("c-{ms:012x}-{r:08x}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ConversationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for ConversationId {
    type Error = PersistError;
    fn try_from(s: String) -> Result<Self, PersistError> {
        Self::parse(&s)
    }
}

impl From<ConversationId> for String {
    fn from(id: ConversationId) -> String {
        id.0
    }
}

impl std::str::FromStr for ConversationId {
    type Err = PersistError;
    fn from_str(s: &str) -> Result<Self, PersistError> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_cannot_name_paths() {
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "a\\b",
            "/etc/passwd",
            "a.json",
            "x\0y",
            "é",
            " a",
            "C:",
            &"a".repeat(65),
        ] {
            assert!(ConversationId::parse(bad).is_err(), "{bad:?}");
        }
        for good in ["a", "chat-1", "A_b-9", &"z".repeat(64)] {
            assert_eq!(ConversationId::parse(good).unwrap().as_str(), good);
        }
        let g = ConversationId::generate();
        assert!(ConversationId::parse(g.as_str()).is_ok(), "{g}");
        assert!(serde_json::from_str::<ConversationId>("\"../up\"").is_err());
    }
}
