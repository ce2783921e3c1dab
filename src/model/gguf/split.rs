//! Split GGUF models: one model in several files, `NAME-00001-of-00003.gguf` … (llama.cpp's
//! `gguf-split`; Hugging Face holds files under 50 GB, so every larger model is published so).
//!
//! Owns the naming of the parts. The first part holds the model's metadata and, with every
//! part, `split.no` (its index from 0), `split.count` and, in the first, `split.tensors.count`;
//! each part holds its own tensors, offsets counted from its own data section.
//! `GgufFile::open` reads the parts' headers and merges their tensor tables.
//!
//! Invariants: a part's name is its first part's with its own number (`%05d`, from 1), as
//! llama.cpp's `llama_split_path` writes it; the parts of a model are all its parts, in order.
//!
//! Counterpart: llama.cpp's `llama_split_prefix` / `llama_split_path` (`src/llama.cpp`) and its
//! model loader's `split.*` checks (`llama-model-loader.cpp`).

use std::path::{Path, PathBuf};

/// `split.no`: the part's index, from 0.
pub const SPLIT_NO: &str = "split.no";
/// `split.count`: how many files the model is in.
pub const SPLIT_COUNT: &str = "split.count";
/// `split.tensors.count`: the model's tensors over all its parts (in the first part).
pub const SPLIT_TENSORS: &str = "split.tensors.count";

/// A split model's part as its file name says it: `PREFIX-NNNNN-of-MMMMM.gguf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitName {
    /// The path up to `-NNNNN-of-…`.
    pub prefix: String,
    /// Its number, from 1.
    pub part: u32,
    pub count: u32,
}

impl SplitName {
    /// `path` read as a split model's part, if its name is one.
    pub fn of(path: &Path) -> Option<Self> {
        let s = path.to_str()?;
        let stem = s.strip_suffix(".gguf")?;
        // `-NNNNN-of-MMMMM`: 5 digits each, or more for a number over 99999.
        let (rest, count) = stem.rsplit_once("-of-")?;
        let (prefix, part) = rest.rsplit_once('-')?;
        let digits = |d: &str| d.len() >= 5 && d.bytes().all(|b| b.is_ascii_digit());
        if !digits(part) || !digits(count) || prefix.is_empty() {
            return None;
        }
        let (part, count) = (part.parse().ok()?, count.parse().ok()?);
        (part >= 1 && part <= count).then(|| Self {
            prefix: prefix.to_owned(),
            part,
            count,
        })
    }

    /// The path of part `part` (from 1) of this model.
    pub fn path_of(&self, part: u32) -> PathBuf {
        PathBuf::from(format!("{}-{part:05}-of-{:05}.gguf", self.prefix, self.count))
    }

    /// Every part's path, the first first.
    pub fn parts(&self) -> Vec<PathBuf> {
        (1..=self.count).map(|i| self.path_of(i)).collect()
    }
}

/// The other parts of the model whose first part is `path` (none for a model in one file, or
/// a name that is not a first part's).
pub fn other_parts(path: &Path) -> Vec<PathBuf> {
    match SplitName::of(path) {
        Some(n) if n.part == 1 => n.parts().split_off(1),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::teacher_forced_logits;
    use crate::config::KvDtype;
    use crate::model::gguf::GgufFile;
    use crate::model::hparams::Family;
    use crate::model::testkit::{split_model, write_model, TinyModelSpec, WeightType};
    use crate::model::{ModelError, Transformer};
    use candle_core::Device;

    fn logits(path: &Path) -> Vec<Vec<f32>> {
        let tf = Transformer::from_gguf(&mut GgufFile::open(path).unwrap(), &Device::Cpu, 64).unwrap();
        teacher_forced_logits(&tf, &[1, 5, 9, 200], &[7, 3, 11], KvDtype::F32).unwrap()
    }

    /// A model split into three files opens from its first part with every tensor, byte for
    /// byte, and computes what the model in one file does.
    #[test]
    fn a_split_model_opens_from_its_first_part_and_computes_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let whole = dir.path().join("m.gguf");
        write_model(&TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0), &whole).unwrap();
        let parts = split_model(&whole, &dir.path().join("m"), 3).unwrap();
        assert_eq!(parts[2], dir.path().join("m-00003-of-00003.gguf"));
        let (mut a, mut b) = (GgufFile::open(&whole).unwrap(), GgufFile::open(&parts[0]).unwrap());
        assert_eq!(b.paths(), parts);
        let mut names = a.tensor_names();
        names.sort();
        let mut split_names = b.tensor_names();
        split_names.sort();
        assert_eq!(names, split_names);
        for n in &names {
            assert_eq!(a.tensor_raw(n).unwrap(), b.tensor_raw(n).unwrap(), "{n}");
        }
        let lens: u64 = parts.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
        assert_eq!(b.file_len(), lens);
        assert_eq!(logits(&whole), logits(&parts[0]));
    }

    /// A later part, a missing part, a truncated part and parts of two different splits are
    /// each refused with what is wrong, naming the file.
    #[test]
    fn a_split_model_with_a_wrong_part_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let whole = dir.path().join("m.gguf");
        write_model(&TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0), &whole).unwrap();
        let parts = split_model(&whole, &dir.path().join("m"), 3).unwrap();
        match GgufFile::open(&parts[1]) {
            Err(e @ ModelError::NotFirstPart { .. }) => assert!(e.to_string().contains("part 2 of 3") && e.to_string().contains("m-00001-of-00003.gguf"), "{e}"),
            other => panic!("{other:?}"),
        }
        // Truncated: the part is named.
        let bytes = std::fs::read(&parts[2]).unwrap();
        std::fs::write(&parts[2], &bytes[..bytes.len() - 100]).unwrap();
        match GgufFile::open(&parts[0]) {
            Err(e @ ModelError::Corrupt { .. }) => assert!(e.to_string().contains("m-00003-of-00003.gguf") && e.to_string().contains("truncated"), "{e}"),
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(&parts[2]).unwrap();
        match GgufFile::open(&parts[0]) {
            Err(e @ ModelError::MissingPart { .. }) => assert!(e.to_string().contains("part 3") && e.to_string().contains("m-00003-of-00003.gguf"), "{e}"),
            other => panic!("{other:?}"),
        }
        // A part of a split into two where the third of three should be.
        let other = split_model(&whole, &dir.path().join("o"), 2).unwrap();
        std::fs::copy(&other[1], &parts[2]).unwrap();
        match GgufFile::open(&parts[0]) {
            Err(e @ ModelError::Corrupt { .. }) => assert!(e.to_string().contains("split.count"), "{e}"),
            other => panic!("{other:?}"),
        }
        // A first part renamed, so that the others cannot be found by name.
        let renamed = dir.path().join("renamed.gguf");
        std::fs::copy(&parts[0], &renamed).unwrap();
        match GgufFile::open(&renamed) {
            Err(e @ ModelError::Corrupt { .. }) => assert!(e.to_string().contains("split into 3 files"), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn part_names_are_read_and_written_as_llama_cpp_does() {
        let n = SplitName::of(Path::new("/m/gpt-oss-120b-mxfp4-00001-of-00003.gguf")).unwrap();
        assert_eq!((n.prefix.as_str(), n.part, n.count), ("/m/gpt-oss-120b-mxfp4", 1, 3));
        assert_eq!(n.path_of(3), Path::new("/m/gpt-oss-120b-mxfp4-00003-of-00003.gguf"));
        assert_eq!(
            other_parts(Path::new("a/Q4_K_M/x-00001-of-00002.gguf")),
            vec![PathBuf::from("a/Q4_K_M/x-00002-of-00002.gguf")]
        );
        assert_eq!(SplitName::of(Path::new("x-00002-of-00002.gguf")).map(|n| n.part), Some(2));
        assert!(other_parts(Path::new("x-00002-of-00002.gguf")).is_empty());
        for not in ["model.gguf", "x-1-of-2.gguf", "x-00003-of-00002.gguf", "x-00000-of-00002.gguf", "-00001-of-00002.gguf", "x-00001-of-00002.bin"] {
            assert_eq!(SplitName::of(Path::new(not)), None, "{not}");
        }
    }
}
