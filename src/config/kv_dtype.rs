//! [`KvDtype`]: the element type K/V is stored in (the setting `cache.kv_dtype`), with what
//! every layer needs to know of it: its name, its code in cache files, the bytes a row takes.
//! Converting to and from it is `ops`' (`ops::kv_dtype`).

/// Values in one `q8_0` group.
pub const Q8_0_GROUP: usize = 32;
/// Bytes of one `q8_0` group: its f16 scale and 32 `i8`.
pub const Q8_0_GROUP_BYTES: usize = 2 + Q8_0_GROUP;

/// The element type of stored K/V.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvDtype {
    F32,
    F16,
    Bf16,
    #[serde(rename = "q8_0")]
    Q8_0,
}

impl KvDtype {
    /// The type used when `cache.kv_dtype` is unset, on the CPU and on CUDA alike.
    pub const DEFAULT: KvDtype = KvDtype::F16;

    /// Every type, in the order the docs list them.
    pub const ALL: [KvDtype; 4] = [KvDtype::F16, KvDtype::Bf16, KvDtype::Q8_0, KvDtype::F32];

    /// The name settings and files use: `f32`, `f16`, `bf16`, `q8_0`.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
            Self::Q8_0 => "q8_0",
        }
    }

    /// The number a cache file's header stores.
    pub fn code(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Bf16 => 2,
            Self::Q8_0 => 3,
        }
    }

    pub fn from_code(code: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.code() == code)
    }

    /// Bytes of `n` values (for `q8_0`, `n` must be a multiple of [`Q8_0_GROUP`]).
    pub fn row_bytes(self, n: usize) -> usize {
        match self {
            Self::F32 => 4 * n,
            Self::F16 | Self::Bf16 => 2 * n,
            Self::Q8_0 => n / Q8_0_GROUP * Q8_0_GROUP_BYTES,
        }
    }

    /// Why this type cannot be stored on a CUDA device (`cuda`) or the CPU, if it cannot: the
    /// CUDA kernels store f32, f16 and bf16.
    pub fn check_device(self, cuda: bool) -> Result<(), String> {
        match self {
            Self::Q8_0 if cuda => Err("q8_0 K/V is stored on the CPU only; on CUDA use f16 or bf16".into()),
            _ => Ok(()),
        }
    }

    /// Why rows of `head_dim` values cannot be stored in this type, if they cannot.
    pub fn check_head_dim(self, head_dim: usize) -> Result<(), String> {
        match self {
            Self::Q8_0 if !head_dim.is_multiple_of(Q8_0_GROUP) => Err(format!(
                "q8_0 stores K/V in groups of {Q8_0_GROUP} values, and this model's head size is {head_dim}; \
                 use f16 or bf16"
            )),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for KvDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KvDtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|d| d.name() == s.trim())
            .ok_or_else(|| "expected f16, bf16, q8_0 or f32".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_f16_and_only_q8_0_is_refused_on_cuda() {
        assert_eq!(KvDtype::DEFAULT, KvDtype::F16);
        for d in KvDtype::ALL {
            assert!(d.check_device(false).is_ok(), "{d} on the CPU");
            assert_eq!(d.check_device(true).is_err(), d == KvDtype::Q8_0, "{d} on CUDA");
        }
        assert!(KvDtype::Q8_0.check_device(true).unwrap_err().contains("f16"));
    }
}
