//! Tiny models in the types candle cannot write: IQ4_NL, IQ4_XS and MXFP4, and the IQ1, IQ2,
//! IQ3 and TQ types.
//!
//! [`requantize`] reads a GGUF file the testkit wrote (Q8_0 or F32 weights),
//! and writes it again with the tensors a caller picks in one of those types,
//! with a GGUF writer of its own (candle's writes only the types it has). The
//! 4-bit types are quantized here from their values, plain round-to-nearest on
//! each block's largest value, not llama.cpp's searches: any block is a valid
//! one, and llama.cpp, which the tests compare with, reads the same bytes. The
//! smaller types (lattices of 4 or 8 values, `random_lattice_blocks`) get
//! random blocks scaled to the values' size: the weights of a random model
//! still, each file's own, and any bytes are a valid block of these types.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::Value;
use candle_core::Device;
use half::f16;

use crate::model::gguf::convert::{dequant_q8_0, to_q8_0, KVALUES_IQ4NL, KVALUES_MXFP4};
use crate::model::gguf::types::GgmlType;
use crate::model::gguf::GgufFile;
use crate::model::ModelError;

/// The index of the table value nearest `x`.
fn nearest(table: &[i8; 16], x: f32) -> u8 {
    let mut best = 0;
    for (i, &v) in table.iter().enumerate() {
        if (x - v as f32).abs() < (x - table[best] as f32).abs() {
            best = i;
        }
    }
    best as u8
}

/// 32 values as 16 bytes of table indices for `1/scale` (ggml's nibble order).
fn nibbles(xs: &[f32], inv: f32, table: &[i8; 16], out: &mut Vec<u8>) {
    for j in 0..16 {
        out.push(nearest(table, xs[j] * inv) | (nearest(table, xs[j + 16] * inv) << 4));
    }
}

/// The value of largest magnitude, with its sign.
fn signed_max(xs: &[f32]) -> f32 {
    xs.iter().copied().fold(0f32, |m, x| if x.abs() > m.abs() { x } else { m })
}

fn inv(d: f32) -> f32 {
    if d == 0.0 {
        0.0
    } else {
        1.0 / d
    }
}

/// `x` rounded to 5 significant bits, so that its product with a 6-bit integer is exact in
/// f16 (11): the IQ4_XS files' sub-block scales `d·(ls−32)` are then exact in hearth's Q8_0
/// too, and a test on them compares the rest.
fn five_bits(x: f32) -> f32 {
    if x == 0.0 {
        return 0.0;
    }
    let step = 2f32.powi(x.abs().log2().floor() as i32 - 4);
    (x / step).round() * step
}

/// `xs` (a multiple of the type's block) quantized to `ty` (IQ4_NL, IQ4_XS or MXFP4).
pub fn quantize(ty: GgmlType, xs: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ty.bytes_of(xs.len()));
    match ty {
        GgmlType::IQ4_NL => {
            for b in xs.chunks_exact(32) {
                let d = f16::from_f32(signed_max(b) / KVALUES_IQ4NL[0] as f32);
                out.extend_from_slice(&d.to_bits().to_le_bytes());
                nibbles(b, inv(d.to_f32()), &KVALUES_IQ4NL, &mut out);
            }
        }
        GgmlType::MXFP4 => {
            for b in xs.chunks_exact(32) {
                let amax = signed_max(b).abs();
                // The smallest power of two 2^(e−128) with amax / 2^(e−128) ≤ 12.
                let e = if amax == 0.0 { 0 } else { (128 + (amax / 12.0).log2().ceil() as i32).clamp(0, 254) };
                out.push(e as u8);
                nibbles(b, 2f32.powi(128 - e), &KVALUES_MXFP4, &mut out);
            }
        }
        GgmlType::IQ4_XS => {
            for sb in xs.chunks_exact(256) {
                let subs: Vec<f32> = sb.chunks_exact(32).map(|b| signed_max(b) / KVALUES_IQ4NL[0] as f32).collect();
                let top = subs.iter().fold(0f32, |m, s| m.max(s.abs()));
                let d = f16::from_f32(five_bits(top / 31.0));
                let ls: Vec<i32> = subs.iter().map(|s| (s * inv(d.to_f32())).round().clamp(-32.0, 31.0) as i32).collect();
                out.extend_from_slice(&d.to_bits().to_le_bytes());
                let (mut h, mut l) = (0u16, [0u8; 4]);
                for (ib, &s) in ls.iter().enumerate() {
                    let u = (s + 32) as u8;
                    l[ib / 2] |= (u & 0xF) << (4 * (ib % 2));
                    h |= u16::from(u >> 4) << (2 * ib);
                }
                out.extend_from_slice(&h.to_le_bytes());
                out.extend_from_slice(&l);
                for (b, &s) in sb.chunks_exact(32).zip(&ls) {
                    nibbles(b, inv(d.to_f32() * s as f32), &KVALUES_IQ4NL, &mut out);
                }
            }
        }
        other if other.is_lattice() => {
            return random_lattice_blocks(other, xs);
        }
        other => panic!("the testkit does not quantize to {other}"),
    }
    out
}

/// Blocks of `ty` (an IQ1, IQ2, IQ3 or TQ type) for `xs`: random bytes (seeded by the
/// values), each block's f16 scale `d` set so that the block's values have the root mean
/// square of its 256 values in `xs`.
fn random_lattice_blocks(ty: GgmlType, xs: &[f32]) -> Vec<u8> {
    let mut seed = xs.iter().fold(0x9E37_79B9_7F4A_7C15u64, |h, x| (h ^ u64::from(x.to_bits())).wrapping_mul(0x100_0000_01B3)) | 1;
    let mut out = Vec::with_capacity(ty.bytes_of(xs.len()));
    for chunk in xs.chunks_exact(256) {
        let mut b: Vec<u8> = (0..ty.block_bytes())
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 32) as u8
            })
            .collect();
        set_d(ty, &mut b, f16::ONE);
        let unit = rms(&dequant_q8_0(&to_q8_0(ty, &b).unwrap_or_default()));
        let want = rms(chunk);
        set_d(ty, &mut b, f16::from_f32(if unit > 0.0 { want / unit } else { 0.0 }));
        out.extend_from_slice(&b);
    }
    out
}

fn rms(v: &[f32]) -> f32 {
    (v.iter().map(|x| x * x).sum::<f32>() / v.len().max(1) as f32).sqrt()
}

/// Sets the f16 scale `d` of block `b` of `ty` (IQ1_M keeps it in the top four bits of its
/// four scale words; TQ1_0 and TQ2_0 after their quants; the others first).
fn set_d(ty: GgmlType, b: &mut [u8], d: f16) {
    let bits = d.to_bits();
    match ty {
        GgmlType::IQ1_M => {
            for i in 0..4 {
                let at = 48 + 2 * i;
                let w = (u16::from_le_bytes([b[at], b[at + 1]]) & 0x0FFF) | (((bits >> (4 * i)) & 0xF) << 12);
                b[at..at + 2].copy_from_slice(&w.to_le_bytes());
            }
        }
        GgmlType::TQ1_0 => b[52..54].copy_from_slice(&bits.to_le_bytes()),
        GgmlType::TQ2_0 => b[64..66].copy_from_slice(&bits.to_le_bytes()),
        _ => b[..2].copy_from_slice(&bits.to_le_bytes()),
    }
}

/// Rewrites the GGUF at `src` into `dst`, each tensor for which `pick(name, dims)` gives a type
/// quantized to it (IQ4_NL, IQ4_XS or MXFP4), the others as they are.
pub fn requantize(
    src: &Path,
    dst: &Path,
    pick: impl Fn(&str, &[usize]) -> Option<GgmlType>,
) -> Result<(), ModelError> {
    let mut file = GgufFile::open(src)?;
    let mut names: Vec<String> = file.tensor_names();
    names.sort();
    let mut tensors = Vec::with_capacity(names.len());
    for name in names {
        let dims = file.tensor_shape(&name).unwrap_or_default();
        let ty = file.tensor_type(&name).ok_or_else(|| ModelError::MissingTensor { name: name.clone() })?;
        let (ty, bytes) = match pick(&name, &dims) {
            Some(to) => {
                let t = file.tensor(&name, &Device::Cpu)?.dequantize(&Device::Cpu)?;
                let xs = t.flatten_all()?.to_vec1::<f32>()?;
                (to, quantize(to, &xs))
            }
            None => (ty, file.tensor_raw(&name)?),
        };
        tensors.push((name, dims, ty, bytes));
    }
    let io = |source| ModelError::Io {
        path: dst.to_path_buf(),
        source,
    };
    let mut w = std::io::BufWriter::new(std::fs::File::create(dst).map_err(io)?);
    write_raw(&mut w, file.metadata(), &tensors).map_err(io)?;
    w.flush().map_err(io)
}

/// Writes the model at `src` as a split model of `count` files, as llama.cpp's `gguf-split`
/// does: `PREFIX-00001-of-0000N.gguf` …, the tensors in name order spread evenly over the
/// parts, the first with the metadata, every one with `split.no`, `split.count` and (the first)
/// `split.tensors.count`. Returns the parts' paths, the first first.
pub fn split_model(src: &Path, prefix: &Path, count: usize) -> Result<Vec<PathBuf>, ModelError> {
    use crate::model::gguf::split::{SplitName, SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS};
    let mut file = GgufFile::open(src)?;
    let mut names = file.tensor_names();
    names.sort();
    let name = SplitName {
        prefix: prefix.to_string_lossy().into_owned(),
        part: 1,
        count: count as u32,
    };
    let per = names.len().div_ceil(count.max(1));
    let mut paths = Vec::with_capacity(count);
    for i in 0..count {
        let mut metadata = if i == 0 { file.metadata().clone() } else { HashMap::new() };
        metadata.insert(SPLIT_NO.into(), Value::U16(i as u16));
        metadata.insert(SPLIT_COUNT.into(), Value::U16(count as u16));
        if i == 0 {
            metadata.insert(SPLIT_TENSORS.into(), Value::I32(names.len() as i32));
        }
        let mut tensors = Vec::new();
        for n in names.iter().skip(i * per).take(per) {
            let dims = file.tensor_shape(n).unwrap_or_default();
            let ty = file.tensor_type(n).ok_or_else(|| ModelError::MissingTensor { name: n.clone() })?;
            tensors.push((n.clone(), dims, ty, file.tensor_raw(n)?));
        }
        let path = name.path_of(i as u32 + 1);
        let io = |source| ModelError::Io {
            path: path.clone(),
            source,
        };
        let mut w = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
        write_raw(&mut w, &metadata, &tensors).map_err(io)?;
        w.flush().map_err(io)?;
        paths.push(path);
    }
    Ok(paths)
}

/// The GGUF type id of `t` (the inverse of `GgmlType::from_id`).
fn type_id(t: GgmlType) -> u32 {
    (0..64).find(|&i| GgmlType::from_id(i) == Some(t)).unwrap_or(u32::MAX)
}

fn put_str(w: &mut impl Write, s: &str) -> std::io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn value_type(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn put_value(w: &mut impl Write, v: &Value) -> std::io::Result<()> {
    match v {
        Value::U8(x) => w.write_all(&[*x]),
        Value::I8(x) => w.write_all(&x.to_le_bytes()),
        Value::U16(x) => w.write_all(&x.to_le_bytes()),
        Value::I16(x) => w.write_all(&x.to_le_bytes()),
        Value::U32(x) => w.write_all(&x.to_le_bytes()),
        Value::I32(x) => w.write_all(&x.to_le_bytes()),
        Value::F32(x) => w.write_all(&x.to_le_bytes()),
        Value::Bool(x) => w.write_all(&[u8::from(*x)]),
        Value::String(s) => put_str(w, s),
        Value::U64(x) => w.write_all(&x.to_le_bytes()),
        Value::I64(x) => w.write_all(&x.to_le_bytes()),
        Value::F64(x) => w.write_all(&x.to_le_bytes()),
        Value::Array(items) => {
            w.write_all(&items.first().map_or(4, value_type).to_le_bytes())?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            items.iter().try_for_each(|i| put_value(w, i))
        }
    }
}

const ALIGN: usize = 32;

/// A GGUF (version 3) of `metadata` (keys in sorted order) and `tensors` (name, row-major
/// dims, type, bytes) in the order given.
fn write_raw(
    w: &mut impl Write,
    metadata: &HashMap<String, Value>,
    tensors: &[(String, Vec<usize>, GgmlType, Vec<u8>)],
) -> std::io::Result<()> {
    let mut header = Vec::new();
    header.extend_from_slice(b"GGUF");
    header.extend_from_slice(&3u32.to_le_bytes());
    header.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    header.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    let mut keys: Vec<&String> = metadata.keys().collect();
    keys.sort();
    for k in keys {
        put_str(&mut header, k)?;
        header.extend_from_slice(&value_type(&metadata[k]).to_le_bytes());
        put_value(&mut header, &metadata[k])?;
    }
    let mut offset = 0usize;
    for (name, dims, ty, bytes) in tensors {
        put_str(&mut header, name)?;
        header.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims.iter().rev() {
            header.extend_from_slice(&(*d as u64).to_le_bytes());
        }
        header.extend_from_slice(&type_id(*ty).to_le_bytes());
        header.extend_from_slice(&(offset as u64).to_le_bytes());
        offset += bytes.len().div_ceil(ALIGN) * ALIGN;
    }
    header.resize(header.len().div_ceil(ALIGN) * ALIGN, 0);
    w.write_all(&header)?;
    for (_, _, _, bytes) in tensors {
        w.write_all(bytes)?;
        w.write_all(&vec![0u8; bytes.len().div_ceil(ALIGN) * ALIGN - bytes.len()])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each quantizer's blocks read back (through hearth's decoding) near the values, as
    /// 4-bit quantization allows.
    #[test]
    fn quantized_blocks_read_back_near_the_values() {
        let xs: Vec<f32> = (0..1024).map(|i| ((i as f32 * 0.731).sin() * 0.05) * if i % 97 == 0 { 4.0 } else { 1.0 }).collect();
        for ty in [GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4] {
            let q = quantize(ty, &xs);
            assert_eq!(q.len(), ty.bytes_of(xs.len()));
            let back = dequant_q8_0(&to_q8_0(ty, &q).unwrap());
            let rms = |v: &mut dyn Iterator<Item = f32>| (v.map(|x| x * x).sum::<f32>() / xs.len() as f32).sqrt();
            let err = rms(&mut xs.iter().zip(&back).map(|(a, b)| a - b));
            let size = rms(&mut xs.iter().copied());
            assert!(err < 0.15 * size, "{ty}: error {err} against values of {size}");
        }
    }

    /// The smaller types' random blocks have the values' size, block by block.
    #[test]
    fn random_lattice_blocks_have_the_values_size() {
        let xs: Vec<f32> = (0..1024).map(|i| (i as f32 * 0.731).sin() * if i < 512 { 0.05 } else { 0.5 }).collect();
        for ty in [GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::TQ1_0, GgmlType::TQ2_0] {
            let q = quantize(ty, &xs);
            assert_eq!(q.len(), ty.bytes_of(xs.len()));
            let back = dequant_q8_0(&to_q8_0(ty, &q).unwrap());
            for (b, x) in back.chunks(256).zip(xs.chunks(256)) {
                let (got, want) = (rms(b), rms(x));
                assert!((got - want).abs() < 0.01 * want, "{ty}: {got} against {want}");
            }
            assert_ne!(quantize(ty, &xs[..256]), quantize(ty, &xs[256..512]), "{ty}: blocks differ");
        }
    }
}
