//! Parsing a GGUF header: metadata, the tensor table, where the data starts.
//!
//! Owns reading the header of GGUF versions 1 to 3 into candle's metadata
//! [`Value`]s and a tensor table that keeps each tensor's type as the file
//! writes it ([`GgmlType`], every type llama.cpp has), so that a file with a
//! type candle lacks still opens and its tensors can be named. Every length
//! is checked against the bytes left in the file before anything is
//! allocated, so a damaged header is an error, never a huge allocation.
//!
//! Counterpart: llama.cpp's `gguf_init_from_file_impl` (`gguf.cpp`), with its
//! checks; candle's `gguf_file::Content::read`, which refuses a whole file
//! over one tensor type it does not know.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};

use candle_core::quantized::gguf_file::Value;

use super::types::GgmlType;

/// One tensor's entry in the table.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub ty: GgmlType,
    /// Row-major, as candle orders them (`[rows, cols]`: GGUF's `ne` reversed).
    pub dims: Vec<usize>,
    /// From the start of the data section.
    pub offset: u64,
    /// The file of a split model it is in (`super::split`): 0, the first, or the only one.
    pub part: usize,
}

impl TensorInfo {
    pub fn elems(&self) -> usize {
        self.dims.iter().product()
    }

    /// Bytes of the tensor as stored.
    pub fn bytes(&self) -> u64 {
        self.ty.bytes_of(self.elems()) as u64
    }
}

/// A parsed header.
#[derive(Debug)]
pub struct Header {
    pub metadata: HashMap<String, Value>,
    pub tensors: HashMap<String, TensorInfo>,
    /// Where tensor offsets count from.
    pub data_offset: u64,
}

/// Why a header does not parse (rendered into `ModelError::Corrupt`).
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Bad(String),
}

fn bad<T>(msg: impl Into<String>) -> Result<T, HeaderError> {
    Err(HeaderError::Bad(msg.into()))
}

/// At most this many tensors or metadata entries (llama.cpp's own checks are by size).
const MAX_ENTRIES: u64 = 1 << 24;
/// Nesting of arrays of arrays.
const MAX_DEPTH: usize = 4;

struct Cursor<'a, R> {
    r: &'a mut R,
    pos: u64,
    len: u64,
    /// Version 1 writes lengths and counts as u32.
    v1: bool,
}

impl<R: Read> Cursor<'_, R> {
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], HeaderError> {
        let mut b = [0u8; N];
        if self.len.saturating_sub(self.pos) < N as u64 {
            return bad(format!("the header ends early, at byte {} of {}", self.pos, self.len));
        }
        self.r.read_exact(&mut b)?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, HeaderError> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> Result<u64, HeaderError> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    fn length(&mut self) -> Result<u64, HeaderError> {
        if self.v1 {
            self.u32().map(u64::from)
        } else {
            self.u64()
        }
    }

    /// Fails unless `n` items of at least `each` bytes fit in what is left.
    fn room(&self, n: u64, each: u64, what: &str) -> Result<(), HeaderError> {
        let left = self.len.saturating_sub(self.pos);
        if n.saturating_mul(each) > left {
            return bad(format!("{what} of {n} needs more than the {left} bytes left"));
        }
        Ok(())
    }

    fn string(&mut self) -> Result<String, HeaderError> {
        let n = self.length()?;
        self.room(n, 1, "a string")?;
        let mut b = vec![0u8; n as usize];
        self.r.read_exact(&mut b)?;
        self.pos += n;
        // llama.cpp keeps strings as bytes; a tokenizer's invalid UTF-8 stays readable.
        Ok(String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    fn value(&mut self, ty: u32, depth: usize) -> Result<Value, HeaderError> {
        Ok(match ty {
            0 => Value::U8(self.bytes::<1>()?[0]),
            1 => Value::I8(self.bytes::<1>()?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.bytes()?)),
            3 => Value::I16(i16::from_le_bytes(self.bytes()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(i32::from_le_bytes(self.bytes()?)),
            6 => Value::F32(f32::from_le_bytes(self.bytes()?)),
            7 => match self.bytes::<1>()?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return bad(format!("a bool of value {b}")),
            },
            8 => Value::String(self.string()?),
            9 => {
                if depth >= MAX_DEPTH {
                    return bad("arrays nested too deep");
                }
                let item = self.u32()?;
                let n = self.length()?;
                let each = match item {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    10..=12 => 8,
                    8 => if self.v1 { 4 } else { 8 },
                    9 => 12,
                    t => return bad(format!("an array of unknown value type {t}")),
                };
                self.room(n, each, "an array")?;
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(self.value(item, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.bytes()?)),
            12 => Value::F64(f64::from_le_bytes(self.bytes()?)),
            t => return bad(format!("unknown value type {t}")),
        })
    }
}

/// Reads the header of the GGUF file `r` (positioned anywhere), `len` bytes long.
pub fn read_header<R: Read + Seek>(r: &mut R, len: u64) -> Result<Header, HeaderError> {
    r.seek(SeekFrom::Start(0))?;
    let mut c = Cursor { r, pos: 0, len, v1: false };
    if &c.bytes::<4>()? != b"GGUF" {
        return bad("not a GGUF file");
    }
    let version = c.u32()?;
    match version {
        1 => c.v1 = true,
        2 | 3 => {}
        v if v.swap_bytes() <= 3 => return bad("a big-endian GGUF file (only little-endian files run here)"),
        v => return bad(format!("GGUF version {v}, newer than this hearth reads (1 to 3)")),
    }
    let tensors_n = c.length()?;
    let kv_n = c.length()?;
    if tensors_n > MAX_ENTRIES || kv_n > MAX_ENTRIES {
        return bad(format!("{tensors_n} tensors and {kv_n} metadata entries"));
    }
    let mut metadata = HashMap::new();
    for _ in 0..kv_n {
        let key = c.string()?;
        let ty = c.u32()?;
        let value = c.value(ty, 0).map_err(|e| HeaderError::Bad(format!("metadata \"{key}\": {e}")))?;
        metadata.insert(key, value);
    }
    let mut tensors = HashMap::new();
    for _ in 0..tensors_n {
        let name = c.string()?;
        let (ty, dims, offset) = tensor_entry(&mut c).map_err(|e| HeaderError::Bad(format!("tensor \"{name}\": {e}")))?;
        if tensors.insert(name.clone(), TensorInfo { ty, dims, offset, part: 0 }).is_some() {
            return bad(format!("tensor \"{name}\" is listed twice"));
        }
    }
    let alignment = match super::md_opt_usize(&metadata, "general.alignment") {
        Ok(None) => 32,
        Ok(Some(a)) if a.is_power_of_two() => a as u64,
        _ => return bad(format!("general.alignment {:?} is not a power of two", metadata.get("general.alignment"))),
    };
    let data_offset = c.pos.div_ceil(alignment) * alignment;
    for (name, t) in &tensors {
        if t.offset % alignment != 0 {
            return bad(format!("tensor \"{name}\" starts at {}, not a multiple of the alignment {alignment}", t.offset));
        }
    }
    Ok(Header {
        metadata,
        tensors,
        data_offset,
    })
}

fn tensor_entry<R: Read>(c: &mut Cursor<'_, R>) -> Result<(GgmlType, Vec<usize>, u64), HeaderError> {
    let n_dims = c.u32()?;
    if n_dims > 4 {
        return bad(format!("{n_dims} dimensions (at most 4)"));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        let d = if c.v1 { u64::from(c.u32()?) } else { c.u64()? };
        dims.push(usize::try_from(d).map_err(|_| HeaderError::Bad(format!("dimension {d}")))?);
    }
    dims.reverse();
    let elems = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n < 1 << 48)
        .ok_or_else(|| HeaderError::Bad(format!("dimensions {dims:?} overflow")))?;
    let id = c.u32()?;
    let ty = GgmlType::from_id(id).ok_or_else(|| {
        HeaderError::Bad(format!("tensor type id {id}, which llama.cpp removed or this hearth does not know"))
    })?;
    if elems % ty.block_elems() != 0 {
        return bad(format!("{elems} values are not whole {}-value blocks of {ty}", ty.block_elems()));
    }
    let offset = c.u64()?;
    Ok((ty, dims, offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    fn candle_file() -> Vec<u8> {
        let t = Tensor::arange(0f32, 64.0, &Device::Cpu).unwrap().reshape((2, 32)).unwrap();
        let q = QTensor::quantize(&t, GgmlDType::Q8_0).unwrap();
        let f = QTensor::quantize(&Tensor::ones((1, 3), candle_core::DType::F32, &Device::Cpu).unwrap(), GgmlDType::F32).unwrap();
        let md = [
            ("a.u32", Value::U32(7)),
            ("a.str", Value::String("héllo".into())),
            ("a.arr", Value::Array(vec![Value::F32(1.5), Value::F32(-2.0)])),
            ("a.nested", Value::Array(vec![Value::Array(vec![Value::I8(-1)])])),
            ("a.bool", Value::Bool(true)),
        ];
        let md: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (*k, v)).collect();
        let mut out = std::io::Cursor::new(Vec::new());
        gguf_file::write(&mut out, &md, &[("w", &q), ("f", &f)]).unwrap();
        out.into_inner()
    }

    /// What candle writes, this reads as candle does: metadata, shapes, offsets, data start.
    #[test]
    fn reads_what_candle_reads() {
        let bytes = candle_file();
        let mut r = std::io::Cursor::new(&bytes);
        let ours = read_header(&mut r, bytes.len() as u64).unwrap();
        let theirs = gguf_file::Content::read(&mut std::io::Cursor::new(&bytes)).unwrap();
        assert_eq!(ours.data_offset, theirs.tensor_data_offset);
        assert_eq!(format!("{:?}", sorted(&ours.metadata)), format!("{:?}", sorted(&theirs.metadata)));
        for (name, info) in &theirs.tensor_infos {
            let t = &ours.tensors[name];
            assert_eq!(t.dims, info.shape.dims());
            assert_eq!(t.offset, info.offset);
            assert_eq!(t.ty.reading(), super::super::types::Reading::Native(info.ggml_dtype));
        }
    }

    fn sorted(m: &HashMap<String, Value>) -> Vec<(&String, &Value)> {
        let mut v: Vec<_> = m.iter().collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }

    /// Every cut of the file inside its header is an error, never a panic or a huge allocation.
    #[test]
    fn truncated_headers_are_errors() {
        let bytes = candle_file();
        let full = read_header(&mut std::io::Cursor::new(&bytes), bytes.len() as u64).unwrap();
        for cut in 0..full.data_offset as usize - 31 {
            let b = &bytes[..cut];
            assert!(read_header(&mut std::io::Cursor::new(b), cut as u64).is_err(), "cut at {cut}");
        }
    }

    /// A length field rewritten to 2^62 is refused before anything is allocated.
    #[test]
    fn absurd_lengths_are_refused() {
        let mut bytes = candle_file();
        // The first key's length sits after magic, version and the two counts.
        bytes[24..32].copy_from_slice(&(1u64 << 62).to_le_bytes());
        let e = read_header(&mut std::io::Cursor::new(&bytes), bytes.len() as u64).unwrap_err();
        assert!(e.to_string().contains("bytes left"), "{e}");
    }

    /// A tensor of a type candle lacks (IQ4_XS, id 23) is listed with its type; a removed id
    /// (Q4_0_4_4, 31) is named in the error.
    #[test]
    fn types_candle_lacks_are_listed_and_removed_ones_named() {
        let bytes = candle_file();
        let full = read_header(&mut std::io::Cursor::new(&bytes), bytes.len() as u64).unwrap();
        // Find "w"'s type field: name length (8) + "w" + n_dims (4) + 2 dims (16), then the type.
        let at = bytes.windows(9).position(|w| w == [1, 0, 0, 0, 0, 0, 0, 0, b'w']).unwrap() + 9 + 4 + 16;
        assert_eq!(u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()), 8, "Q8_0");
        let with = |id: u32| {
            let mut b = bytes.clone();
            b[at..at + 4].copy_from_slice(&id.to_le_bytes());
            read_header(&mut std::io::Cursor::new(&b), b.len() as u64)
        };
        // 64 values of IQ4_XS are not whole 256-value blocks; IQ4_NL's 32 are.
        assert!(with(23).unwrap_err().to_string().contains("IQ4_XS"));
        let h = with(20).unwrap();
        assert_eq!(h.tensors["w"].ty, GgmlType::IQ4_NL);
        assert_eq!(h.tensors["w"].bytes(), 36);
        assert_eq!(h.data_offset, full.data_offset);
        let e = with(31).unwrap_err().to_string();
        assert!(e.contains("tensor \"w\"") && e.contains("type id 31"), "{e}");
    }
}
