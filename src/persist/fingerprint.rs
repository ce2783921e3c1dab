//! The fingerprint a cache file is written for: which model's K/V, computed how.
//!
//! Owns: [`fingerprint`] (xxh3 over the whole contents of the model's files — weights,
//! architecture settings, tokenizer, chat template — the device kind and the [`KvLayout`]),
//! [`kv_layout`] (a model's K/V shape as the file format names it) and
//! [`KV_SEMANTICS_VERSION`]. `hearth cache` and the engine's disk tier both use them, so a
//! file the one calls usable the other does too.
//!
//! Invariant: a different model, device kind, layout or way of computing K/V gives a different
//! fingerprint; a cache file is only ever read under the fingerprint it was written with.
//!
//! Counterpart: LMCache's `CacheEngineKey` (model name, world size, chunk hash); vLLM keys its
//! prefix cache by block hashes only, within one process.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::{Fingerprint, KvDtype, KvLayout, PersistError};
use crate::ops::KvShape;

/// Bumped whenever hearth computes different K/V for the same model and tokens (the forward,
/// rope, the block layout): cache files written before no longer match. 2: the MLP's gated
/// activation (`ops::glu`) rounds differently from candle's `silu`/`gelu` (2026-11-24; this
/// also retires files from before our CPU kernels, which were never counted here). 3: Gemma 3's
/// local layers no longer take the file's rope scaling (the 4B and larger scale linearly ×8,
/// for their global layers only; 2026-11-25).
pub const KV_SEMANTICS_VERSION: u32 = 3;

/// The layout of cache file payloads for a model of `shape` with `block_size`-token blocks of
/// K/V stored as `dtype`.
pub fn kv_layout(shape: KvShape, block_size: usize, dtype: KvDtype) -> KvLayout {
    KvLayout {
        block_size: block_size as u32,
        dtype,
        shape,
    }
}

/// The fingerprint of K/V computed by this hearth from the model in `files` (their whole
/// contents: weights, architecture settings, tokenizer, chat template) on a `device` kind, as
/// `variant` says (the model's `kv_variant`: empty, or what the settings chose, such as Phi-3's
/// long rope factors), in `layout`. `progress` gets the bytes hashed so far.
pub fn fingerprint(
    files: &[PathBuf],
    device: &str,
    variant: &str,
    layout: &KvLayout,
    progress: &mut dyn FnMut(u64),
) -> Result<Fingerprint, PersistError> {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    parts.push(format!("hearth-kv-{KV_SEMANTICS_VERSION}").into_bytes());
    let mut done = 0u64;
    for path in files {
        parts.push(hash_file(path, &mut |n| {
            done += n;
            progress(done)
        })?);
    }
    parts.push(device.as_bytes().to_vec());
    // Only when there is one, so that the fingerprints of every other model stay as they were.
    if !variant.is_empty() {
        parts.push(format!("variant {variant}").into_bytes());
    }
    // A uniform layout hashes as before per-layer shapes existed (one shape); another, every
    // layer's.
    let layers = layout.shape.layers() as u32;
    let shapes: Vec<(u32, u32)> = match layout.shape.uniform_layer() {
        Some(l) => vec![(l.kv_heads as u32, l.head_dim as u32)],
        None => layout.shape.iter().map(|l| (l.kv_heads as u32, l.head_dim as u32)).collect(),
    };
    parts.push(layout.block_size.to_le_bytes().to_vec());
    parts.push(layers.to_le_bytes().to_vec());
    for (kv_heads, head_dim) in shapes {
        parts.push(kv_heads.to_le_bytes().to_vec());
        parts.push(head_dim.to_le_bytes().to_vec());
    }
    parts.push(layout.dtype.code().to_le_bytes().to_vec());
    // Only for a layout that keeps K alone, so that every other fingerprint stays as it was.
    if layout.shape.v_from_k() {
        parts.push(b"v from k".to_vec());
    }
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    Ok(Fingerprint::of(&refs))
}

/// xxh3-128 of a file's contents.
fn hash_file(path: &Path, progress: &mut dyn FnMut(u64)) -> Result<Vec<u8>, PersistError> {
    let err = |e| PersistError::io(path, e);
    let mut f = std::fs::File::open(path).map_err(err)?;
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 4 << 20];
    loop {
        let n = f.read(&mut buf).map_err(err)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        progress(n as u64);
    }
    Ok(h.digest128().to_le_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::LayerKv;

    /// A uniform layout hashes exactly as before layers could differ (so the cache files of
    /// earlier hearths stay usable); layouts that differ in one layer's heads differ.
    #[test]
    fn uniform_layouts_keep_their_fingerprints_and_shapes_count() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, b"weights").unwrap();
        let files = [model.clone()];
        let fp = |shape: KvShape| fingerprint(&files, "cpu", "", &kv_layout(shape, 16, KvDtype::F16), &mut |_| ()).unwrap();
        let mut before: Vec<Vec<u8>> = vec![
            format!("hearth-kv-{KV_SEMANTICS_VERSION}").into_bytes(),
            hash_file(&model, &mut |_| ()).unwrap(),
            b"cpu".to_vec(),
        ];
        for v in [16u32, 3, 2, 64, KvDtype::F16.code()] {
            before.push(v.to_le_bytes().to_vec());
        }
        let refs: Vec<&[u8]> = before.iter().map(Vec::as_slice).collect();
        assert_eq!(fp(KvShape::uniform(3, 2, 64)), Fingerprint::of(&refs));
        let layer = |kv_heads, head_dim| LayerKv { kv_heads, head_dim };
        let mixed = fp(KvShape::per_layer(vec![layer(2, 64), layer(1, 128), layer(2, 64)]));
        assert_ne!(mixed, fp(KvShape::uniform(3, 2, 64)));
        assert_ne!(mixed, fp(KvShape::per_layer(vec![layer(2, 64), layer(2, 64), layer(1, 128)])));
        assert_ne!(fp(KvShape::uniform(3, 2, 64).with_v_from_k()), fp(KvShape::uniform(3, 2, 64)));
    }
}
