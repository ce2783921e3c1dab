//! [`Pooling`]: how a sentence embedding pools a sequence's final rows.
//!
//! Declared here, as [`super::KvDtype`] is, because the settings name it (`server.pooling`,
//! `--pooling`: an override of the file's pooling type) as well as the model (a file's
//! `{arch}.pooling_type`, read in `model::pooling`) and the server.

/// How a sequence's rows become its embedding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The mean of every position's row (sentence-transformers' `pooling_mode_mean_tokens`).
    Mean,
    /// The first position's row (`pooling_mode_cls_token`).
    Cls,
    /// The last position's row (`pooling_mode_lasttoken`: Qwen3-Embedding's).
    Last,
}

impl Pooling {
    /// The name the settings and the API use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mean => "mean",
            Self::Cls => "cls",
            Self::Last => "last",
        }
    }
}

impl std::str::FromStr for Pooling {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "mean" => Ok(Self::Mean),
            "cls" | "first" => Ok(Self::Cls),
            "last" => Ok(Self::Last),
            _ => Err("must be mean, cls or last".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for p in [Pooling::Mean, Pooling::Cls, Pooling::Last] {
            assert_eq!(p.name().parse::<Pooling>(), Ok(p));
        }
        assert_eq!(" LAST ".parse::<Pooling>(), Ok(Pooling::Last));
        assert!("rank".parse::<Pooling>().is_err());
    }
}
