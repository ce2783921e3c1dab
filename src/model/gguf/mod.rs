//! Opening GGUF files with errors a user can act on, and typed metadata access.
//!
//! Owns the open file: its header, parsed by [`header`] (which keeps every
//! tensor type llama.cpp writes, [`types`]), and reading its tensors as
//! candle's `QTensor`s, the types candle lacks decoded by [`convert`]. A user
//! gets "not a GGUF file" instead of a bad-magic error, a truncation check
//! against the tensor table before any weight is read, a tensor of a type
//! hearth cannot run named with its type, and metadata getters that accept
//! any integer width a converter may have used.
//!
//! Counterpart: llama.cpp's `gguf_init_from_file` checks.

pub mod convert;
pub mod header;
mod iq;
mod iq_grids;
pub mod split;
pub mod types;
pub mod weight;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;

use super::ModelError;
use header::{read_header, Header};
use types::{GgmlType, Reading};
use weight::{NativeBlocks, Weight};

/// Told the bytes of tensor data read so far, after each tensor ([`GgufFile::set_meter`]): a
/// load's progress. It answers whether to go on: after `false` the file reads no more tensors
/// ([`ModelError::LoadCancelled`]), so a cancelled load stops within a tensor.
pub type ReadMeter = Box<dyn Fn(u64) -> bool + Send>;

/// An open GGUF model: its parsed header plus a reader for tensor data, in each of its files
/// (one, or the parts of a split model: [`split`]).
pub struct GgufFile {
    /// The (first) file's path.
    path: PathBuf,
    /// The first file's metadata; every part's tensors, each with the part it is in.
    header: Header,
    parts: Vec<Part>,
    /// Bytes of tensor data read so far, and who is told.
    read: u64,
    meter: Option<ReadMeter>,
    /// The meter said to stop.
    stopped: bool,
    /// The tensors read so far, by name ([`Self::unread_tensors`]).
    read_names: HashSet<String>,
}

/// One file of a model.
struct Part {
    path: PathBuf,
    reader: BufReader<File>,
    len: u64,
    /// Where its tensor offsets count from.
    data_offset: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("parts", &self.parts.len())
            .field("tensors", &self.header.tensors.len())
            .finish()
    }
}

/// Opens `path`, checks the magic and parses the header.
fn read_part(path: &Path) -> Result<(Header, Part), ModelError> {
    let io_err = |source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io_err)?;
    let len = file.metadata().map_err(io_err)?.len();
    let mut reader = BufReader::new(file);
    let mut magic = [0u8; 4];
    if len < 4 || reader.read_exact(&mut magic).is_err() || &magic != b"GGUF" {
        return Err(ModelError::NotGguf {
            path: path.to_path_buf(),
        });
    }
    let header = read_header(&mut reader, len).map_err(|e| ModelError::Corrupt {
        path: path.to_path_buf(),
        reason: format!("header does not parse ({})", one_line(&e.to_string())),
    })?;
    let part = Part {
        path: path.to_path_buf(),
        reader,
        len,
        data_offset: header.data_offset,
    };
    Ok((header, part))
}

impl GgufFile {
    /// Opens `path`, checks the magic, parses the header and checks that every
    /// tensor's data lies inside the file. A split model's first part opens every part
    /// (beside it, named as [`split::SplitName`] says) and checks that they belong together.
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        let (header, first) = read_part(path)?;
        let mut this = Self {
            path: path.to_path_buf(),
            header,
            parts: vec![first],
            read: 0,
            read_names: HashSet::new(),
            meter: None,
            stopped: false,
        };
        this.open_other_parts()?;
        this.check_extent()?;
        Ok(this)
    }

    /// `split.no` and `split.count` of a part's metadata (0 and 1 for a model in one file).
    fn split_of(path: &Path, md: &HashMap<String, Value>) -> Result<(usize, usize), ModelError> {
        let no = md_opt_usize(md, split::SPLIT_NO)?.unwrap_or(0);
        let count = md_opt_usize(md, split::SPLIT_COUNT)?.unwrap_or(1).max(1);
        if no >= count {
            return Err(ModelError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("it says it is part {} of {count}", no + 1),
            });
        }
        Ok((no, count))
    }

    /// A split model's parts after the first, their tensors merged into the first's table.
    fn open_other_parts(&mut self) -> Result<(), ModelError> {
        let (no, count) = Self::split_of(&self.path, &self.header.metadata)?;
        if count == 1 {
            return Ok(());
        }
        let corrupt = |path: &Path, reason: String| ModelError::Corrupt {
            path: path.to_path_buf(),
            reason,
        };
        let name = split::SplitName::of(&self.path).filter(|n| n.count as usize == count && n.part as usize == no + 1);
        let Some(name) = name else {
            return Err(corrupt(
                &self.path,
                format!("it is part {} of a model split into {count} files, but not named as one (NAME-{:05}-of-{count:05}.gguf), so the other parts cannot be found", no + 1, no + 1),
            ));
        };
        if no != 0 {
            return Err(ModelError::NotFirstPart {
                path: self.path.clone(),
                part: no + 1,
                count,
                first: name.path_of(1),
            });
        }
        for i in 1..count {
            let path = name.path_of(i as u32 + 1);
            let (header, part) = read_part(&path).map_err(|e| match e {
                ModelError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => ModelError::MissingPart {
                    path: path.clone(),
                    part: i + 1,
                    count,
                },
                other => other,
            })?;
            if Self::split_of(&path, &header.metadata)? != (i, count) {
                return Err(corrupt(&path, format!("its split.no and split.count do not say part {} of {count}", i + 1)));
            }
            for (tensor, mut info) in header.tensors {
                info.part = i;
                if self.header.tensors.insert(tensor.clone(), info).is_some() {
                    return Err(corrupt(&path, format!("tensor \"{tensor}\" is in two of the model's parts")));
                }
            }
            self.parts.push(part);
        }
        match md_opt_usize(&self.header.metadata, split::SPLIT_TENSORS)? {
            Some(n) if n != self.header.tensors.len() => Err(corrupt(
                &self.path,
                format!("split.tensors.count says {n} tensors, its {count} parts hold {}", self.header.tensors.len()),
            )),
            _ => Ok(()),
        }
    }

    /// Every tensor's bytes must end inside its file: a truncated download is
    /// caught here, before loading starts. A file with no tensors (llama.cpp's
    /// vocab-only `ggml-vocab-*.gguf`) needs no data section, padded or not.
    fn check_extent(&self) -> Result<(), ModelError> {
        for (i, part) in self.parts.iter().enumerate() {
            let needed = self
                .header
                .tensors
                .values()
                .filter(|t| t.part == i)
                .map(|t| part.data_offset.saturating_add(t.offset).saturating_add(t.bytes()))
                .max()
                .unwrap_or(0);
            if needed > part.len {
                return Err(ModelError::Corrupt {
                    path: part.path.clone(),
                    reason: format!(
                        "truncated: its tensors need {needed} bytes but the file has {} (an interrupted download?)",
                        part.len
                    ),
                });
            }
        }
        Ok(())
    }

    /// The (first) file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every file of the model, the first first (one, unless it is split).
    pub fn paths(&self) -> Vec<PathBuf> {
        self.parts.iter().map(|p| p.path.clone()).collect()
    }

    /// Bytes of the model's files, all parts together.
    pub fn file_len(&self) -> u64 {
        self.parts.iter().map(|p| p.len).sum()
    }

    /// Bytes of tensor data the file stores: what a load reads, about (a tensor the model does
    /// not use is not read; a tensor read twice counts twice).
    pub fn tensor_data_bytes(&self) -> u64 {
        self.header.tensors.values().map(|t| t.bytes()).sum()
    }

    /// From now on `meter` is told the bytes of tensor data read so far, after each tensor, and
    /// may stop the reading.
    pub fn set_meter(&mut self, meter: ReadMeter) {
        self.meter = Some(meter);
    }

    pub fn metadata(&self) -> &HashMap<String, Value> {
        &self.header.metadata
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.header.tensors.contains_key(name)
    }

    /// Every tensor's name, in no particular order.
    pub fn tensor_names(&self) -> Vec<String> {
        self.header.tensors.keys().cloned().collect()
    }

    /// The shape of a tensor, in candle's order (`[rows, cols]` for a matrix).
    pub fn tensor_shape(&self, name: &str) -> Option<Vec<usize>> {
        self.header.tensors.get(name).map(|i| i.dims.clone())
    }

    /// A tensor's type as the file stores it.
    pub fn tensor_type(&self, name: &str) -> Option<GgmlType> {
        self.header.tensors.get(name).map(|i| i.ty)
    }

    /// Reads one tensor onto `device` (the types candle lacks as Q8_0: [`convert`]).
    pub fn tensor(&mut self, name: &str, device: &Device) -> Result<QTensor, ModelError> {
        Ok(self.read_tensor(name, device, false)?.0)
    }

    /// Reads one matrix onto `device` for a projection: as [`tensor`](Self::tensor), and on
    /// the CPU, for a type our kernels take in its own blocks ([`weight::native_kind`]),
    /// those blocks too.
    pub fn weight(&mut self, name: &str, device: &Device) -> Result<Weight, ModelError> {
        let (t, native) = self.read_tensor(name, device, device.is_cpu())?;
        Ok(Weight::new(t, native))
    }

    fn read_tensor(
        &mut self,
        name: &str,
        device: &Device,
        keep_native: bool,
    ) -> Result<(QTensor, Option<NativeBlocks>), ModelError> {
        let Some(info) = self.header.tensors.get(name) else {
            return Err(ModelError::MissingTensor { name: name.to_string() });
        };
        let (ty, dims) = (info.ty, info.dims.clone());
        let dtype = match ty.reading() {
            Reading::Native(d) => d,
            Reading::ToQ8_0 => GgmlDType::Q8_0,
            Reading::Unsupported => {
                return Err(ModelError::UnsupportedTensorType {
                    name: name.to_string(),
                    ty: ty.name(),
                    supported: GgmlType::supported_names(),
                })
            }
        };
        let raw = self.tensor_raw(name)?;
        let corrupt = |reason: String| self.corrupt_tensor(name, &reason);
        let (raw, native) = match ty.reading() {
            Reading::ToQ8_0 => {
                let q8 = convert::to_q8_0(ty, &raw).map_err(corrupt)?;
                let keep = keep_native && dims.len() >= 2 && weight::native_kind(ty).is_some();
                (q8, keep.then_some(NativeBlocks { ty, bytes: raw }))
            }
            _ => (raw, None),
        };
        let t = qtensor_from_ggml(dtype, &raw, dims, device).map_err(|e| corrupt(e.to_string()))?;
        Ok((t, native))
    }

    /// A tensor's bytes as its file stores them, whatever its type.
    pub fn tensor_raw(&mut self, name: &str) -> Result<Vec<u8>, ModelError> {
        if self.stopped {
            return Err(ModelError::LoadCancelled);
        }
        let Some(info) = self.header.tensors.get(name) else {
            return Err(ModelError::MissingTensor { name: name.to_string() });
        };
        let (size, part_index) = (info.bytes() as usize, info.part);
        let Some(part) = self.parts.get_mut(part_index) else {
            return Err(ModelError::MissingTensor { name: name.to_string() });
        };
        let start = part.data_offset.saturating_add(info.offset);
        let mut raw = vec![0u8; size];
        let read = part.reader.seek(SeekFrom::Start(start)).and_then(|_| part.reader.read_exact(&mut raw));
        match read {
            Ok(()) => {
                self.read += raw.len() as u64;
                self.read_names.insert(name.to_string());
                if let Some(meter) = &self.meter {
                    self.stopped = !meter(self.read);
                }
                Ok(raw)
            }
            Err(e) => Err(self.corrupt_tensor(name, &e.to_string())),
        }
    }

    /// Counts tensor `name` as read without reading it: a tensor the model knowingly leaves
    /// unused (Gemma 3n's K/V projections in the layers that read an earlier layer's K/V).
    pub fn pass_over(&mut self, name: &str) {
        if self.header.tensors.contains_key(name) {
            self.read_names.insert(name.to_string());
        }
    }

    /// The tensors not read so far, sorted: after a model's load, those its forward never uses
    /// (the tests check there are none in the tiny files: a tensor left unread is a layer
    /// wired wrong, such as one reading another's K/V while the file has its own).
    pub fn unread_tensors(&self) -> Vec<String> {
        let mut names: Vec<String> = self.header.tensors.keys().filter(|n| !self.read_names.contains(*n)).cloned().collect();
        names.sort();
        names
    }

    /// A tensor that could not be read: the file it is in, damaged.
    fn corrupt_tensor(&self, name: &str, reason: &str) -> ModelError {
        let part = self.header.tensors.get(name).map_or(0, |i| i.part);
        ModelError::Corrupt {
            path: self.parts.get(part).map_or_else(|| self.path.clone(), |p| p.path.clone()),
            reason: format!("tensor {name} could not be read ({})", one_line(reason)),
        }
    }

    /// Reads an optional tensor: `None` when absent.
    pub fn tensor_opt(&mut self, name: &str, device: &Device) -> Result<Option<QTensor>, ModelError> {
        if self.has_tensor(name) {
            self.tensor(name, device).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Reads tensor `name`, which must hold `parts.iter().sum()` rows of `cols` (a 3-D tensor
    /// counts its first two dimensions as rows), as consecutive matrices of `parts[i]` rows each,
    /// on `device`: Phi-3's fused projections, a MoE layer's stacked experts. A GGUF row is
    /// whole blocks, so each part is a byte range of the tensor's data.
    pub fn tensor_row_split(
        &mut self,
        name: &str,
        parts: &[usize],
        cols: usize,
        device: &Device,
    ) -> Result<Vec<Weight>, ModelError> {
        let (t, native) = self.read_tensor(name, &Device::Cpu, device.is_cpu())?;
        let dims = t.shape().dims().to_vec();
        let rows: usize = parts.iter().sum();
        let bad = || ModelError::BadTensor {
            name: name.into(),
            actual: dims.clone(),
            expected: vec![rows, cols],
        };
        let (file_rows, file_cols) = match dims.as_slice() {
            [r, c] => (*r, *c),
            [n, r, c] => (n * r, *c),
            _ => return Err(bad()),
        };
        let data = t.data()?;
        if file_rows != rows || file_cols != cols || rows == 0 || data.len() % rows != 0 {
            return Err(bad());
        }
        let row_bytes = data.len() / rows;
        // The file's own blocks split at the same rows (whole blocks per row: `Weight`).
        let native_row = native.as_ref().map_or(0, |b| b.bytes.len() / rows);
        let mut start = 0;
        parts
            .iter()
            .map(|&n| {
                let bytes = &data[start * row_bytes..(start + n) * row_bytes];
                let part = native.as_ref().map(|b| NativeBlocks {
                    ty: b.ty,
                    bytes: b.bytes[start * native_row..(start + n) * native_row].to_vec(),
                });
                start += n;
                let t = qtensor_from_ggml(t.dtype(), &Cow::Borrowed(bytes), vec![n, cols], device)?;
                Ok(Weight::new(t, part))
            })
            .collect()
    }

    /// The most common weight type among matrices (2-D tensors, and the 3-D stacks of a
    /// mixture of experts' matrices), by values, as the file stores it (the file's quantization
    /// as a user would name it, e.g. `Q4_K`, `IQ4_XS`, `MXFP4` for gpt-oss's files, whose
    /// experts are most of the model).
    pub fn dominant_dtype(&self) -> String {
        let mut counts: HashMap<GgmlType, u64> = HashMap::new();
        for info in self.header.tensors.values() {
            if info.dims.len() >= 2 {
                *counts.entry(info.ty).or_default() += info.elems() as u64;
            }
        }
        counts
            .into_iter()
            .max_by_key(|(t, n)| (*n, t.name()))
            .map(|(t, _)| t.name())
            .unwrap_or_else(|| "unknown".into())
    }

    /// Bytes one tensor's data takes once loaded. A type candle lacks is read as Q8_0 (a
    /// `QTensor` of it holds Q8_0's bytes, as the GPU does); on the CPU our kernels keep such a
    /// matrix in 4 bits again (`ops::qmatmul::narrow_q8_0`), its size as stored within a few
    /// percent, so `on_cpu` counts the stored bytes. Q3_K's 3-bit quants are kept in 4 bits on
    /// the CPU (146 bytes a 256-value block against 110), Q2_K's 4-bit sub-scales and sub-mins
    /// in bytes (100 against 84). The types under 4 bits with one scale per 32 values are kept
    /// in 4 bits on the CPU too (18 bytes a 32-value block), those with two (IQ2_XS, IQ2_S,
    /// IQ1_M) as Q8_0 (`iq`).
    pub fn tensor_bytes(&self, name: &str, on_cpu: bool) -> Option<u64> {
        use GgmlType::*;
        let info = self.header.tensors.get(name)?;
        let elems = info.elems();
        Some(match (on_cpu, info.ty) {
            (true, Q3_K) => elems / 256 * 146,
            (true, Q2_K) => elems / 256 * 100,
            (true, ty) if ty.has_half_block_scales() => Q8_0.bytes_of(elems),
            (true, ty) if ty.is_lattice() => elems / 32 * 18,
            (true, ty) => ty.bytes_of(elems),
            (false, ty) => ty.loaded().bytes_of(elems),
        } as u64)
    }

    /// Bytes of all tensors' data once loaded ([`tensor_bytes`](Self::tensor_bytes)).
    pub fn total_tensor_bytes(&self, on_cpu: bool) -> u64 {
        self.tensor_bytes_where(on_cpu, |_| true)
    }

    /// Bytes of the tensors whose names `keep` accepts, once loaded.
    pub fn tensor_bytes_where(&self, on_cpu: bool, keep: impl Fn(&str) -> bool) -> u64 {
        self.header
            .tensors
            .keys()
            .filter(|n| keep(n))
            .filter_map(|n| self.tensor_bytes(n, on_cpu))
            .sum()
    }

    /// Total parameter count over all tensors.
    pub fn parameter_count(&self) -> u64 {
        self.header.tensors.values().map(|i| i.elems() as u64).sum()
    }
}

fn one_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}

/// A required unsigned integer, whatever width the converter wrote.
pub fn md_usize(md: &HashMap<String, Value>, key: &str) -> Result<usize, ModelError> {
    md_opt_usize(md, key)?.ok_or_else(|| ModelError::MissingMetadata { key: key.to_string() })
}

/// An optional unsigned integer; present with the wrong type is an error.
pub fn md_opt_usize(md: &HashMap<String, Value>, key: &str) -> Result<Option<usize>, ModelError> {
    md.get(key).map(|v| usize_of(key, v)).transpose()
}

/// An optional unsigned integer that a file may also write once per layer, as an array
/// (llama.cpp's `get_key_or_arr`: Granite 4.0's converter writes `attention.head_count_kv`
/// so). hearth runs one value in every layer, so the array's values must all be the same.
pub fn md_opt_per_layer_usize(md: &HashMap<String, Value>, key: &str) -> Result<Option<usize>, ModelError> {
    let Some(Value::Array(items)) = md.get(key) else {
        return md_opt_usize(md, key);
    };
    let values = items.iter().map(|v| usize_of(key, v)).collect::<Result<Vec<_>, _>>()?;
    match values.split_first() {
        Some((&first, rest)) if rest.iter().all(|&v| v == first) => Ok(Some(first)),
        Some(_) => Err(ModelError::BadMetadata {
            key: key.to_string(),
            reason: format!("per-layer values {values:?} differ; hearth runs one value in every layer"),
        }),
        None => Err(ModelError::BadMetadata {
            key: key.to_string(),
            reason: "an empty array".into(),
        }),
    }
}

/// One value per layer of `layers`: the key's array of exactly that many, or its one value for
/// every layer (llama.cpp's `get_key_or_arr`); `None` when absent.
pub fn md_opt_usize_per_layer(md: &HashMap<String, Value>, key: &str, layers: usize) -> Result<Option<Vec<usize>>, ModelError> {
    per_layer(md, key, layers, usize_of)
}

/// One value per layer of `layers`, each read by `of`: the key's array of exactly that many, or
/// its one value for every layer; `None` when absent.
fn per_layer<T: Clone>(
    md: &HashMap<String, Value>,
    key: &str,
    layers: usize,
    of: fn(&str, &Value) -> Result<T, ModelError>,
) -> Result<Option<Vec<T>>, ModelError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::Array(items)) if items.len() != layers => Err(ModelError::BadMetadata {
            key: key.to_string(),
            reason: format!("{} values for {layers} layers", items.len()),
        }),
        Some(Value::Array(items)) => items.iter().map(|v| of(key, v)).collect::<Result<Vec<_>, _>>().map(Some),
        Some(v) => Ok(Some(vec![of(key, v)?; layers])),
    }
}

/// An optional array of unsigned integers of any width (`rope.dimension_sections`).
pub fn md_opt_usize_array(md: &HashMap<String, Value>, key: &str) -> Result<Option<Vec<usize>>, ModelError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::Array(items)) => items.iter().map(|v| usize_of(key, v)).collect::<Result<Vec<_>, _>>().map(Some),
        Some(v) => Err(ModelError::BadMetadata {
            key: key.to_string(),
            reason: format!("expected an array, found {:?}", v.value_type()),
        }),
    }
}

/// `v`, the value of `key`, as an unsigned integer of any width.
fn usize_of(key: &str, v: &Value) -> Result<usize, ModelError> {
    let bad = |reason: &str| ModelError::BadMetadata {
        key: key.to_string(),
        reason: reason.to_string(),
    };
    let n: i128 = match v {
        Value::U8(x) => *x as i128,
        Value::I8(x) => *x as i128,
        Value::U16(x) => *x as i128,
        Value::I16(x) => *x as i128,
        Value::U32(x) => *x as i128,
        Value::I32(x) => *x as i128,
        Value::U64(x) => *x as i128,
        Value::I64(x) => *x as i128,
        _ => return Err(bad(&format!("expected an integer, found {:?}", v.value_type()))),
    };
    usize::try_from(n).map_err(|_| bad(&format!("{n} is out of range")))
}

/// An optional float (f32 or f64, or an integer).
pub fn md_opt_f64(md: &HashMap<String, Value>, key: &str) -> Result<Option<f64>, ModelError> {
    md.get(key).map(|v| f64_of(key, v)).transpose()
}

/// `v`, the value of `key`, as a float: f32, f64, or an unsigned integer of any width.
fn f64_of(key: &str, v: &Value) -> Result<f64, ModelError> {
    match v {
        Value::F32(x) => Ok(f64::from(*x)),
        Value::F64(x) => Ok(*x),
        other => usize_of(key, other).map(|n| n as f64),
    }
}

/// One float per layer of `layers`: the key's array of exactly that many, or its one value for
/// every layer (llama.cpp's `get_key_or_arr`); `None` when absent.
pub fn md_opt_f64_per_layer(md: &HashMap<String, Value>, key: &str, layers: usize) -> Result<Option<Vec<f64>>, ModelError> {
    per_layer(md, key, layers, f64_of)
}

/// An optional string.
pub fn md_opt_str<'a>(md: &'a HashMap<String, Value>, key: &str) -> Result<Option<&'a str>, ModelError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(v) => Err(ModelError::BadMetadata {
            key: key.to_string(),
            reason: format!("expected a string, found {:?}", v.value_type()),
        }),
    }
}

/// A required string.
pub fn md_str<'a>(md: &'a HashMap<String, Value>, key: &str) -> Result<&'a str, ModelError> {
    md_opt_str(md, key)?.ok_or_else(|| ModelError::MissingMetadata { key: key.to_string() })
}

/// An optional bool (a bool, or an integer 0/1).
pub fn md_opt_bool(md: &HashMap<String, Value>, key: &str) -> Result<Option<bool>, ModelError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => md_opt_usize(md, key).map(|o| o.map(|n| n != 0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::hparams::Family;
    use crate::model::linear::QLinear;
    use crate::model::testkit::{requantize, write_model, TinyModelSpec, WeightType};
    use crate::ops::qmatmul::QuantKind;

    /// An IQ4_NL or MXFP4 matrix reads as Q8_0 (what candle and the GPU run), and on the CPU
    /// our kernels keep it in 4 bits again: its stored size, counted so by `tensor_bytes`.
    #[test]
    fn four_bit_types_read_as_q8_0_and_pack_back_into_four_bits() {
        let dir = tempfile::tempdir().unwrap();
        let q8 = dir.path().join("q8.gguf");
        write_model(&TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0), &q8).unwrap();
        for (ty, kind) in [(GgmlType::IQ4_NL, QuantKind::Q8Iq4nl), (GgmlType::MXFP4, QuantKind::Q8Fp4)] {
            let path = dir.path().join(format!("{ty}.gguf"));
            requantize(&q8, &path, |n, _| (n == "blk.0.attn_q.weight").then_some(ty)).unwrap();
            let mut file = GgufFile::open(&path).unwrap();
            let name = "blk.0.attn_q.weight";
            assert_eq!(file.tensor_type(name), Some(ty));
            let stored = file.tensor_bytes(name, true).unwrap();
            assert_eq!(stored, 256 * 256 / 32 * ty.block_bytes() as u64);
            assert_eq!(file.tensor_bytes(name, false), Some(256 * 256 / 32 * 34));
            let t = file.tensor(name, &Device::Cpu).unwrap();
            assert_eq!(t.dtype(), GgmlDType::Q8_0);
            let linear = QLinear::new(t, &Device::Cpu).unwrap();
            let packed = linear.packed().unwrap();
            assert_eq!(packed.kind(), kind);
            let ratio = packed.bytes() as f64 / stored as f64;
            assert!((0.99..1.07).contains(&ratio), "{ty}: packed {} against {stored} stored", packed.bytes());
            // A Q8_0 matrix of the file stays Q8_0.
            let other = QLinear::new(file.tensor("blk.0.attn_k.weight", &Device::Cpu).unwrap(), &Device::Cpu).unwrap();
            assert_eq!(other.packed().map(|p| p.kind()), Some(QuantKind::Q8_0));
        }
    }

    /// An IQ4_XS matrix reads as Q8_0 for candle and, for a projection on the CPU, in its own
    /// blocks too: our kernels pack those (as `tensor_bytes` counts them) and multiply as ggml
    /// does, the file's weights exactly (each `d·(ls − 32)` unrounded) by activations rounded
    /// per 256 values. Read as a plain tensor, or for a GPU, it is Q8_0 of its values.
    #[test]
    fn iq4_xs_runs_in_its_own_blocks_on_the_cpu() {
        use crate::ops::qmatmul::round_acts;
        use candle_core::Tensor;
        let dir = tempfile::tempdir().unwrap();
        let q8 = dir.path().join("q8.gguf");
        write_model(&TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0), &q8).unwrap();
        let path = dir.path().join("iq4_xs.gguf");
        let name = "blk.0.attn_q.weight";
        requantize(&q8, &path, |n, _| (n == name).then_some(GgmlType::IQ4_XS)).unwrap();
        let mut file = GgufFile::open(&path).unwrap();
        let raw = file.tensor_raw(name).unwrap();
        let w = file.weight(name, &Device::Cpu).unwrap();
        assert_eq!(w.dtype(), GgmlDType::Q8_0);
        assert_eq!(w.native().map(|n| (n.ty, &n.bytes)), Some((GgmlType::IQ4_XS, &raw)));
        let linear = QLinear::new(w, &Device::Cpu).unwrap();
        let packed = linear.packed().unwrap();
        assert_eq!(packed.kind(), QuantKind::Iq4Xs);
        let counted = file.tensor_bytes(name, true).unwrap();
        let ratio = packed.bytes() as f64 / counted as f64;
        assert!((0.99..1.03).contains(&ratio), "packed {} against {counted} counted", packed.bytes());

        let mut wf = Vec::new();
        convert::dequantize_iq4_xs(&raw, &mut wf);
        let x: Vec<f32> = (0..256).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
        let xr = round_acts(QuantKind::Iq4Xs, &x);
        let y = linear.forward(&Tensor::from_vec(x.clone(), (1, 256), &Device::Cpu).unwrap()).unwrap();
        let y = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let plain = QLinear::new(file.tensor(name, &Device::Cpu).unwrap(), &Device::Cpu).unwrap();
        assert_eq!(plain.packed().map(|p| p.kind()), Some(QuantKind::Q8Iq4nl));
        let y8 = plain.forward(&Tensor::from_vec(x, (1, 256), &Device::Cpu).unwrap()).unwrap();
        let y8 = y8.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let mut q8_off = 0;
        for (r, (&got, &got8)) in y.iter().zip(&y8).enumerate() {
            let row = &wf[r * 256..(r + 1) * 256];
            let want: f64 = row.iter().zip(&xr).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
            let scale: f64 = row.iter().zip(&xr).map(|(&a, &b)| f64::from(a * b).abs()).sum();
            assert!((f64::from(got) - want).abs() <= 1e-6 * scale, "row {r}: {got} against {want}");
            q8_off += usize::from((f64::from(got8) - want).abs() > 1e-6 * scale);
        }
        // The Q8_0 reading (rounded sub-scales, activations per 32) is not ggml's product.
        assert!(q8_off > 128, "{q8_off} of 256 rows off");
    }

    /// Each type under 4 bits reads as Q8_0; on the CPU those with one scale per 32 values pack
    /// into 4-bit indices of a table, those with two stay Q8_0, as `tensor_bytes` counts them.
    #[test]
    fn lattice_types_read_as_q8_0_and_pack_as_counted() {
        let dir = tempfile::tempdir().unwrap();
        let q8 = dir.path().join("q8.gguf");
        write_model(&TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0), &q8).unwrap();
        let cases = [
            (GgmlType::IQ2_XXS, QuantKind::Q8Iq2),
            (GgmlType::IQ3_XXS, QuantKind::Q8Iq3xxs),
            (GgmlType::IQ3_S, QuantKind::Q8Iq3s),
            (GgmlType::IQ1_S, QuantKind::Q8Iq3s),
            (GgmlType::TQ1_0, QuantKind::Q8Fp4),
            (GgmlType::TQ2_0, QuantKind::Q8Fp4),
            (GgmlType::IQ2_XS, QuantKind::Q8_0),
            (GgmlType::IQ2_S, QuantKind::Q8_0),
            (GgmlType::IQ1_M, QuantKind::Q8_0),
        ];
        let name = "blk.0.attn_q.weight";
        for (ty, kind) in cases {
            let path = dir.path().join(format!("{ty}.gguf"));
            requantize(&q8, &path, |n, _| (n == name).then_some(ty)).unwrap();
            let mut file = GgufFile::open(&path).unwrap();
            assert_eq!(file.tensor_type(name), Some(ty));
            assert_eq!(file.tensor_bytes(name, false), Some(256 * 256 / 32 * 34));
            let counted = file.tensor_bytes(name, true).unwrap();
            let linear = QLinear::new(file.tensor(name, &Device::Cpu).unwrap(), &Device::Cpu).unwrap();
            let packed = linear.packed().unwrap();
            assert_eq!(packed.kind(), kind, "{ty}");
            let ratio = packed.bytes() as f64 / counted as f64;
            assert!((0.99..1.07).contains(&ratio), "{ty}: packed {} against {counted} counted", packed.bytes());
        }
    }

    /// A load tells its meter the bytes read, growing, up to the tensor data the file stores.
    #[test]
    fn a_load_tells_its_meter_the_bytes_read() {
        use std::sync::{Arc, Mutex};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        write_model(&TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0), &path).unwrap();
        let mut file = GgufFile::open(&path).unwrap();
        let total = file.tensor_data_bytes();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        file.set_meter(Box::new(move |done| {
            log.lock().unwrap().push(done);
            true
        }));
        crate::model::Transformer::from_gguf(&mut file, &Device::Cpu, 64).unwrap();
        let read = seen.lock().unwrap().clone();
        assert!(read.len() > 10 && read.windows(2).all(|w| w[0] < w[1]), "{read:?}");
        assert_eq!(*read.last().unwrap(), total, "every tensor of this file is read once");
        // A meter that says stop after the third tensor: the load fails as cancelled, having read
        // no more.
        let mut file = GgufFile::open(&path).unwrap();
        let count = Arc::new(Mutex::new(0));
        let n = count.clone();
        file.set_meter(Box::new(move |_| {
            *n.lock().unwrap() += 1;
            *n.lock().unwrap() < 3
        }));
        match crate::model::Transformer::from_gguf(&mut file, &Device::Cpu, 64) {
            Err(ModelError::LoadCancelled) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(*count.lock().unwrap(), 3);
    }

    /// A mixture of experts' stacked expert tensors count: a gpt-oss file with MXFP4 experts
    /// is an MXFP4 file, though its other matrices are Q8_0.
    #[test]
    fn the_dominant_type_counts_the_expert_stacks() {
        let dir = tempfile::tempdir().unwrap();
        let q8 = dir.path().join("q8.gguf");
        write_model(&TinyModelSpec::tiny(Family::GptOss, WeightType::Q8_0), &q8).unwrap();
        assert_eq!(GgufFile::open(&q8).unwrap().dominant_dtype(), "Q8_0");
        let mxfp4 = dir.path().join("mxfp4.gguf");
        requantize(&q8, &mxfp4, |n, _| n.contains("_exps.weight").then_some(GgmlType::MXFP4)).unwrap();
        assert_eq!(GgufFile::open(&mxfp4).unwrap().dominant_dtype(), "MXFP4");
    }
}
