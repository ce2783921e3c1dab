//! ggml's tensor types as a GGUF file names them, whatever candle knows.
//!
//! Owns the table of every type id llama.cpp writes (block size, bytes per
//! block, name), so that a file's extent is checked and an unsupported type is
//! named to the user ("IQ2_XXS"), not reported as a damaged header; and which
//! of them hearth reads: the types candle holds as they are, and those it
//! lacks that [`super::convert`] decodes into Q8_0 (IQ4_NL, IQ4_XS, MXFP4, and the IQ1, IQ2,
//! IQ3 and TQ types).
//!
//! Counterpart: ggml's `type_traits` table (`ggml.c`) and `enum ggml_type`.

use candle_core::quantized::GgmlDType;

/// A tensor type of a GGUF file (`enum ggml_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    F64,
    I8,
    I16,
    I32,
    I64,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    IQ1_M,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
    Q2_0,
}

/// How hearth reads a tensor of a given type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// candle holds it as stored.
    Native(GgmlDType),
    /// Decoded at load into Q8_0 ([`super::convert`]): value for value, up to the f16
    /// rounding of a scale, or of half a block for IQ2_XS, IQ2_S and IQ1_M (`super::iq`).
    ToQ8_0,
    /// hearth has no kernel for it.
    Unsupported,
}

impl GgmlType {
    /// The type of id `id`, or `None` for an id llama.cpp removed or never had.
    pub fn from_id(id: u32) -> Option<Self> {
        use GgmlType::*;
        Some(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2_K,
            11 => Q3_K,
            12 => Q4_K,
            13 => Q5_K,
            14 => Q6_K,
            15 => Q8_K,
            16 => IQ2_XXS,
            17 => IQ2_XS,
            18 => IQ3_XXS,
            19 => IQ1_S,
            20 => IQ4_NL,
            21 => IQ3_S,
            22 => IQ2_S,
            23 => IQ4_XS,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            29 => IQ1_M,
            30 => BF16,
            34 => TQ1_0,
            35 => TQ2_0,
            39 => MXFP4,
            40 => NVFP4,
            41 => Q1_0,
            42 => Q2_0,
            _ => return None,
        })
    }

    /// Values per block.
    pub const fn block_elems(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 | F64 | I8 | I16 | I32 | I64 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | IQ4_NL | MXFP4 => 32,
            Q2_0 | NVFP4 => 64,
            Q1_0 => 128,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K | IQ2_XXS | IQ2_XS | IQ3_XXS | IQ1_S | IQ3_S | IQ2_S
            | IQ4_XS | IQ1_M | TQ1_0 | TQ2_0 => 256,
        }
    }

    /// Bytes per block (`sizeof(block_…)` in `ggml-common.h`).
    pub const fn block_bytes(self) -> usize {
        use GgmlType::*;
        match self {
            I8 => 1,
            F16 | BF16 | I16 => 2,
            F32 | I32 => 4,
            F64 | I64 => 8,
            Q4_0 | IQ4_NL => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            MXFP4 => 17,
            NVFP4 => 36,
            Q1_0 | Q2_0 => 18,
            Q2_K => 84,
            Q3_K => 110,
            Q4_K => 144,
            Q5_K => 176,
            Q6_K => 210,
            Q8_K => 292,
            IQ2_XXS => 66,
            IQ2_XS => 74,
            IQ3_XXS => 98,
            IQ1_S => 50,
            IQ3_S => 110,
            IQ2_S => 82,
            IQ4_XS => 136,
            IQ1_M => 56,
            TQ1_0 => 54,
            TQ2_0 => 66,
        }
    }

    /// The name llama.cpp's tools print (`Q4_K`, `IQ4_XS`, `MXFP4`).
    pub fn name(self) -> String {
        format!("{self:?}")
    }

    /// The types under 4 bits whose groups of values index a lattice (IQ1, IQ2, IQ3) or are
    /// ternary digits (TQ): decoded into Q8_0 at load by `super::iq`.
    pub const fn is_lattice(self) -> bool {
        use GgmlType::*;
        matches!(self, IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S | IQ1_M | TQ1_0 | TQ2_0)
    }

    /// The lattice types with a scale per 16 values (two per Q8_0 block), which Q8_0 holds
    /// only approximately and our kernels keep as Q8_0 (`super::iq`).
    pub const fn has_half_block_scales(self) -> bool {
        matches!(self, GgmlType::IQ2_XS | GgmlType::IQ2_S | GgmlType::IQ1_M)
    }

    /// Whether hearth reads this type, and how.
    pub fn reading(self) -> Reading {
        use GgmlType::*;
        if self.is_lattice() {
            return Reading::ToQ8_0;
        }
        Reading::Native(match self {
            F32 => GgmlDType::F32,
            F16 => GgmlDType::F16,
            BF16 => GgmlDType::BF16,
            Q4_0 => GgmlDType::Q4_0,
            Q4_1 => GgmlDType::Q4_1,
            Q5_0 => GgmlDType::Q5_0,
            Q5_1 => GgmlDType::Q5_1,
            Q8_0 => GgmlDType::Q8_0,
            Q8_1 => GgmlDType::Q8_1,
            Q2_K => GgmlDType::Q2K,
            Q3_K => GgmlDType::Q3K,
            Q4_K => GgmlDType::Q4K,
            Q5_K => GgmlDType::Q5K,
            Q6_K => GgmlDType::Q6K,
            Q8_K => GgmlDType::Q8K,
            IQ4_NL | IQ4_XS | MXFP4 => return Reading::ToQ8_0,
            _ => return Reading::Unsupported,
        })
    }

    /// The type a tensor of this one is held in once read (its own where candle has it).
    pub fn loaded(self) -> Self {
        match self.reading() {
            Reading::ToQ8_0 => Self::Q8_0,
            _ => self,
        }
    }

    /// Bytes of `elems` values (a whole number of blocks).
    pub const fn bytes_of(self, elems: usize) -> usize {
        elems / self.block_elems() * self.block_bytes()
    }

    /// The types hearth reads, for error messages.
    pub fn supported_names() -> String {
        (0..64)
            .filter_map(Self::from_id)
            .filter(|t| t.reading() != Reading::Unsupported)
            .map(Self::name)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every type candle knows has candle's block size and bytes (the table is ggml's).
    #[test]
    fn the_table_agrees_with_candle_where_candle_has_the_type() {
        let mut native = 0;
        for id in 0..64 {
            let Some(t) = GgmlType::from_id(id) else { continue };
            if let Reading::Native(d) = t.reading() {
                assert_eq!((t.block_elems(), t.block_bytes()), (d.block_size(), d.type_size()), "{t}");
                native += 1;
            }
        }
        assert_eq!(native, 15);
    }

    #[test]
    fn removed_ids_are_unknown_and_names_are_llama_cpps() {
        for id in [4, 5, 31, 32, 33, 36, 37, 38, 43, 1000] {
            assert_eq!(GgmlType::from_id(id), None, "{id}");
        }
        assert_eq!(GgmlType::from_id(23).map(GgmlType::name).as_deref(), Some("IQ4_XS"));
        assert_eq!(GgmlType::from_id(12).map(GgmlType::name).as_deref(), Some("Q4_K"));
        assert!(GgmlType::supported_names().contains("MXFP4"));
        assert!(GgmlType::supported_names().contains("IQ2_XXS"));
        assert!(!GgmlType::supported_names().contains("NVFP4"));
    }
}
