//! Reading and writing one cache file (the format is in `format.rs`).
//!
//! Owns: [`CacheFile`] (an open file whose header passed every check; blocks are read one at a
//! time, each checked against its checksum) and [`write_cache_file`] (an atomic write of a
//! whole file, whose leading blocks may be copied from the previous version of the file so the
//! engine hands over only the blocks that are new).
//!
//! Invariant: a block is handed to a caller only after its checksum matched; a file is replaced
//! only by a complete, fsynced new version.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::format::{
    block_checksum, payload_offset_for, state_checksum, BlockEntry, CacheHeader, Fingerprint, KvLayout, StateEntry,
};
use super::{AtomicFile, Faults, PersistError};
use crate::kv::BlockHash;

/// File extension of cache files.
pub const CACHE_EXT: &str = "hkv";

/// An open cache file with a valid header.
#[derive(Debug)]
pub struct CacheFile {
    path: PathBuf,
    file: File,
    header: CacheHeader,
    len: u64,
    pos: u64,
}

impl CacheFile {
    /// Opens `path` and reads its header (not its payloads).
    pub fn open(path: &Path) -> Result<Self, PersistError> {
        let mut file = File::open(path).map_err(|e| PersistError::io(path, e))?;
        let len = file.metadata().map_err(|e| PersistError::io(path, e))?.len();
        let header = CacheHeader::read(&mut file, len, path)?;
        let pos = header.header_len();
        Ok(Self {
            path: path.into(),
            file,
            header,
            len,
            pos,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> &CacheHeader {
        &self.header
    }

    /// The file's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Blocks wholly present (fewer than the header lists if the file was truncated).
    pub fn blocks_present(&self) -> usize {
        self.header.blocks_present(self.len)
    }

    /// Fails unless the file was written for `fingerprint` and `layout`.
    pub fn check_compatible(&self, fingerprint: Fingerprint, layout: &KvLayout) -> Result<(), PersistError> {
        if self.header.layout.dtype != layout.dtype {
            return Err(PersistError::OtherKvDtype {
                path: self.path.clone(),
                found: self.header.layout.dtype,
                expected: layout.dtype,
            });
        }
        if self.header.fingerprint != fingerprint || self.header.layout != *layout {
            return Err(PersistError::Foreign {
                path: self.path.clone(),
                found: self.header.fingerprint.to_string(),
                expected: fingerprint.to_string(),
            });
        }
        Ok(())
    }

    /// Reads block `k` into `dst` (exactly one block's bytes) and checks its checksum.
    pub fn read_block(&mut self, k: usize, dst: &mut [u8]) -> Result<(), PersistError> {
        let bb = self.header.block_bytes();
        let Some(entry) = self.header.blocks.get(k).copied() else {
            return Err(PersistError::MissingBlock {
                path: self.path.clone(),
                block: k,
            });
        };
        if dst.len() as u64 != bb {
            return Err(PersistError::corrupt(
                &self.path,
                format!("asked for {} bytes of a {bb}-byte block", dst.len()),
            ));
        }
        if k >= self.blocks_present() {
            return Err(PersistError::MissingBlock {
                path: self.path.clone(),
                block: k,
            });
        }
        let at = self.header.block_offset(k);
        if self.pos != at {
            self.file
                .seek(SeekFrom::Start(at))
                .map_err(|e| PersistError::io(&self.path, e))?;
        }
        self.pos = u64::MAX;
        self.file.read_exact(dst).map_err(|e| PersistError::io(&self.path, e))?;
        self.pos = at + bb;
        if block_checksum(dst) != entry.checksum {
            return Err(PersistError::BlockChecksum {
                path: self.path.clone(),
                block: k,
            });
        }
        Ok(())
    }

    /// Reads blocks `first, first + 1, ...` into `dsts` (one block's bytes each), in one
    /// sequential pass, checking each block's checksum on another core while the next is read.
    /// Returns how many leading blocks are good, and the error that stopped the rest (a short
    /// file, a read error, the first bad checksum); blocks after a bad one are never counted.
    pub fn read_blocks(&mut self, first: usize, dsts: Vec<&mut [u8]>) -> (usize, Option<PersistError>) {
        let bb = self.header.block_bytes();
        let want = dsts.len();
        let entries: Vec<BlockEntry> = self.header.blocks.iter().skip(first).take(want).copied().collect();
        let present = self.blocks_present().saturating_sub(first).min(entries.len());
        let mut stop: Option<PersistError> = None;
        if present < want {
            stop = Some(PersistError::MissingBlock {
                path: self.path.clone(),
                block: first + present,
            });
        }
        if dsts.iter().any(|d| d.len() as u64 != bb) {
            return (
                0,
                Some(PersistError::corrupt(
                    &self.path,
                    "internal: a destination is not one block long",
                )),
            );
        }
        let at = self.header.block_offset(first);
        if present > 0 && self.pos != at {
            if let Err(e) = self.file.seek(SeekFrom::Start(at)) {
                return (0, Some(PersistError::io(&self.path, e)));
            }
        }
        self.pos = u64::MAX;
        let sums: Vec<std::sync::atomic::AtomicBool> = (0..present)
            .map(|_| std::sync::atomic::AtomicBool::new(false))
            .collect();
        let mut read = 0;
        let file = &mut self.file;
        let path = &self.path;
        rayon::scope(|scope| {
            for ((dst, entry), ok) in dsts.into_iter().zip(&entries).take(present).zip(&sums) {
                if let Err(e) = file.read_exact(dst) {
                    stop = Some(PersistError::io(path, e));
                    break;
                }
                read += 1;
                let dst: &[u8] = dst;
                let want = entry.checksum;
                scope.spawn(move |_| ok.store(block_checksum(dst) == want, std::sync::atomic::Ordering::Relaxed));
            }
        });
        if read == present && stop.is_none() {
            self.pos = at + read as u64 * bb;
        }
        let good = sums[..read]
            .iter()
            .take_while(|s| s.load(std::sync::atomic::Ordering::Relaxed))
            .count();
        if good < read {
            stop = Some(PersistError::BlockChecksum {
                path: self.path.clone(),
                block: first + good,
            });
        }
        (good, stop)
    }

    /// Reads every block present and checks it; `on_block` is called after each (progress).
    /// Returns the number of good leading blocks, or the first error.
    /// The stored recurrent state (version 4): the blocks it follows and its values, checked
    /// against its checksum; `None` in a file without one.
    pub fn read_state(&mut self) -> Result<Option<(usize, Vec<f32>)>, PersistError> {
        let Some(st) = self.header.state else {
            return Ok(None);
        };
        let at = self.header.state_offset();
        let n = 4 * u64::from(st.floats);
        if at + n > self.len {
            return Err(PersistError::corrupt(
                &self.path,
                format!("its state ends at byte {} of {} (truncated)", at + n, self.len),
            ));
        }
        // n is bounded by the file's length: safe to allocate.
        let mut bytes = vec![0u8; n as usize];
        self.file.seek(SeekFrom::Start(at)).map_err(|e| PersistError::io(&self.path, e))?;
        self.file.read_exact(&mut bytes).map_err(|e| PersistError::io(&self.path, e))?;
        self.pos = at + n;
        if state_checksum(&bytes) != st.checksum {
            return Err(PersistError::corrupt(&self.path, "its recurrent state fails its checksum".to_string()));
        }
        let floats = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Ok(Some((st.blocks as usize, floats)))
    }

    pub fn verify(&mut self, mut on_block: impl FnMut(u64)) -> Result<usize, PersistError> {
        let bb = self.header.block_bytes();
        let mut buf = vec![0u8; bb as usize];
        for k in 0..self.header.blocks.len() {
            self.read_block(k, &mut buf)?;
            on_block(bb);
        }
        Ok(self.header.blocks.len())
    }
}

/// What [`write_cache_file`] writes.
#[derive(Debug)]
pub struct CacheWrite<'a> {
    pub fingerprint: Fingerprint,
    pub layout: KvLayout,
    /// The whole token history (may end in a partial block, which has no payload).
    pub tokens: &'a [u32],
    /// Chain hashes of the full blocks to store, in order.
    pub hashes: &'a [BlockHash],
    /// The previous version of this conversation's file and how many of its leading blocks to
    /// copy (their tokens must equal `tokens`' leading blocks).
    pub reuse: Option<(&'a mut CacheFile, usize)>,
    /// Payloads of blocks `reuse ..`, contiguous.
    pub fresh: &'a [u8],
    /// A model with recurrent layers: its state after this many of the blocks (1 ..= their
    /// count; a state past the blocks a damaged previous file leaves is not written).
    pub state: Option<(usize, &'a [f32])>,
}

/// What was written.
#[derive(Debug)]
pub struct Written {
    pub header: CacheHeader,
    /// Bytes of the new file.
    pub bytes: u64,
    /// Set if a block of the previous file failed its check while being copied: the new file
    /// ends before that block (the rest is recomputed next time).
    pub damaged: Option<PersistError>,
}

/// Writes a cache file to `dest` atomically (see the module docs).
pub fn write_cache_file(dest: &Path, w: CacheWrite<'_>, faults: &Faults) -> Result<Written, PersistError> {
    let bb = w.layout.block_bytes() as usize;
    let n = w.hashes.len();
    let reuse_n = w.reuse.as_ref().map_or(0, |r| r.1).min(n);
    if (n - reuse_n) * bb != w.fresh.len() || n * w.layout.block_size as usize > w.tokens.len() {
        return Err(PersistError::corrupt(
            dest,
            format!(
                "internal: {n} blocks ({reuse_n} reused) with {} fresh bytes for {} tokens",
                w.fresh.len(),
                w.tokens.len()
            ),
        ));
    }
    if let Some((k, floats)) = w.state {
        if k == 0 || k > n || floats.is_empty() || floats.len() > super::format::MAX_STATE_FLOATS as usize || w.layout.version() != 1 {
            return Err(PersistError::corrupt(
                dest,
                format!("internal: a state of {} floats after {k} of {n} blocks", floats.len()),
            ));
        }
    }
    let payload_offset = payload_offset_for(&w.layout, w.tokens.len(), n, w.state.is_some());
    let mut out = AtomicFile::create(dest, faults)?;
    out.seek(payload_offset)?;
    let mut blocks: Vec<BlockEntry> = Vec::with_capacity(n);
    let mut damaged = None;
    if let Some((old, _)) = w.reuse {
        let mut buf = vec![0u8; bb];
        for k in 0..reuse_n {
            if let Err(e) = old.read_block(k, &mut buf) {
                damaged = Some(e);
                break;
            }
            out.write_all(&buf)?;
            blocks.push(BlockEntry {
                hash: w.hashes[k],
                checksum: block_checksum(&buf),
            });
        }
    }
    if damaged.is_none() {
        for (k, payload) in (reuse_n..n).zip(w.fresh.chunks_exact(bb.max(1))) {
            blocks.push(BlockEntry {
                hash: w.hashes[k],
                checksum: block_checksum(payload),
            });
        }
        // One write for all fresh blocks.
        out.write_all(w.fresh)?;
    }
    // The state, where the blocks it follows were all written. (The header keeps the offset
    // its entry was counted for: a state left out leaves 16 bytes of the header's padding.)
    let state = match w.state {
        Some((k, floats)) if k <= blocks.len() => {
            let bytes: Vec<u8> = floats.iter().flat_map(|f| f.to_le_bytes()).collect();
            out.write_all(&bytes)?;
            Some(StateEntry {
                blocks: k as u32,
                floats: floats.len() as u32,
                checksum: state_checksum(&bytes),
            })
        }
        _ => None,
    };
    let header = CacheHeader {
        fingerprint: w.fingerprint,
        layout: w.layout,
        tokens: w.tokens.to_vec(),
        blocks,
        payload_offset,
        state,
    };
    let len = header.file_len();
    out.set_len(len)?;
    out.seek(0)?;
    out.write_all(&header.encode())?;
    out.commit()?;
    Ok(Written {
        header,
        bytes: len,
        damaged,
    })
}
