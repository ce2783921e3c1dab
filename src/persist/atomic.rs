//! Writing a file so that a reader sees the old version or the new one, never a mix.
//!
//! Owns: [`AtomicFile`] (temp file in the destination's directory → write → fsync → rename →
//! fsync the directory) and [`Faults`], the hook tests use to fail a write at any step.
//!
//! Invariant: until [`AtomicFile::commit`] returns, the destination is untouched; a write that
//! fails (or is dropped) removes its temp file. A crash leaves at most a stray temp file
//! (`.NAME.tmp-PID-*`), which no reader opens and the next start removes ([`super::temps`]).
//!
//! Counterpart: LMCache's local disk backend and llama.cpp's slot save write in place; this is
//! the usual `rename(2)` pattern instead (as `git` and SQLite's journal do it).

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::PersistError;

/// One step of an atomic write (what a [`Faults`] hook sees before each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStep {
    CreateTemp,
    /// Writing bytes; `done` were written before this call.
    Write {
        done: u64,
    },
    SetLen,
    Sync,
    Rename,
    SyncDir,
}

type Hook = dyn Fn(WriteStep) -> std::io::Result<()> + Send + Sync;

/// A hook called before every step of every atomic write; an error it returns fails that step
/// as the operating system would (tests simulate a full disk or a crash with it). Cloned into
/// the background writer; the default does nothing.
#[derive(Clone, Default)]
pub struct Faults(Option<Arc<Hook>>);

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Faults(hook)"
        } else {
            "Faults(none)"
        })
    }
}

impl Faults {
    pub fn none() -> Self {
        Self(None)
    }

    /// Calls `hook` before every step.
    pub fn new(hook: impl Fn(WriteStep) -> std::io::Result<()> + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(hook)))
    }

    fn check(&self, step: WriteStep) -> std::io::Result<()> {
        match &self.0 {
            Some(h) => h(step),
            None => Ok(()),
        }
    }
}

/// A file being written under a temporary name next to its destination.
#[derive(Debug)]
pub struct AtomicFile {
    tmp: PathBuf,
    dest: PathBuf,
    file: Option<File>,
    faults: Faults,
    written: u64,
}

/// Whether `name` is a temp file's: `.NAME.tmp-PID-RANDOM` (or `.NAME.tmp-RANDOM`, older).
pub(crate) fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.contains(".tmp-")
}

impl AtomicFile {
    /// Starts writing `dest` (its directory must exist).
    pub fn create(dest: &Path, faults: &Faults) -> Result<Self, PersistError> {
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let r: u64 = rand::random();
        // The writer's process id in the name: a start-up sweep removes the temp files of
        // writers that are gone, never a live one's (`super::temps`).
        let tmp = dest.with_file_name(format!(".{name}.tmp-{}-{r:016x}", std::process::id()));
        faults
            .check(WriteStep::CreateTemp)
            .map_err(|e| PersistError::io(&tmp, e))?;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| PersistError::io(&tmp, e))?;
        Ok(Self {
            tmp,
            dest: dest.to_path_buf(),
            file: Some(file),
            faults: faults.clone(),
            written: 0,
        })
    }

    fn file(&mut self) -> Result<&mut File, PersistError> {
        match self.file.as_mut() {
            Some(f) => Ok(f),
            None => Err(PersistError::io(&self.tmp, std::io::Error::other("already closed"))),
        }
    }

    /// Appends `bytes` at the current position.
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), PersistError> {
        let step = WriteStep::Write { done: self.written };
        let tmp = self.tmp.clone();
        self.faults.check(step).map_err(|e| PersistError::io(&tmp, e))?;
        self.file()?.write_all(bytes).map_err(|e| PersistError::io(&tmp, e))?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Moves the write position to `offset`.
    pub fn seek(&mut self, offset: u64) -> Result<(), PersistError> {
        let tmp = self.tmp.clone();
        self.file()?
            .seek(SeekFrom::Start(offset))
            .map_err(|e| PersistError::io(&tmp, e))?;
        Ok(())
    }

    /// Sets the file's length.
    pub fn set_len(&mut self, len: u64) -> Result<(), PersistError> {
        let tmp = self.tmp.clone();
        self.faults
            .check(WriteStep::SetLen)
            .map_err(|e| PersistError::io(&tmp, e))?;
        self.file()?.set_len(len).map_err(|e| PersistError::io(&tmp, e))
    }

    /// fsync, rename over the destination, fsync the directory.
    pub fn commit(mut self) -> Result<(), PersistError> {
        let tmp = self.tmp.clone();
        self.faults
            .check(WriteStep::Sync)
            .map_err(|e| PersistError::io(&tmp, e))?;
        self.file()?.sync_all().map_err(|e| PersistError::io(&tmp, e))?;
        self.file = None;
        self.faults
            .check(WriteStep::Rename)
            .map_err(|e| PersistError::io(&self.dest, e))?;
        std::fs::rename(&self.tmp, &self.dest).map_err(|e| PersistError::io(&self.dest, e))?;
        // Renamed: nothing for Drop to clean up, even if the directory sync fails.
        self.tmp = PathBuf::new();
        self.faults
            .check(WriteStep::SyncDir)
            .map_err(|e| PersistError::io(&self.dest, e))?;
        sync_dir(&self.dest)
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        self.file = None;
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// fsyncs the directory holding `path`, so a rename into it survives a power cut (a no-op where
/// directories cannot be opened, as on Windows).
fn sync_dir(path: &Path) -> Result<(), PersistError> {
    #[cfg(unix)]
    if let Some(dir) = path.parent() {
        let d = File::open(dir).map_err(|e| PersistError::io(dir, e))?;
        d.sync_all().map_err(|e| PersistError::io(dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Writes `bytes` to `dest` atomically.
pub fn write_atomic(dest: &Path, bytes: &[u8], faults: &Faults) -> Result<(), PersistError> {
    let mut f = AtomicFile::create(dest, faults)?;
    f.write_all(bytes)?;
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_write_failing_at_any_step_leaves_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("f.json");
        write_atomic(&dest, b"old", &Faults::none()).unwrap();
        for fail_at in 0.. {
            let calls = Arc::new(AtomicUsize::new(0));
            let c = calls.clone();
            let faults = Faults::new(move |_| {
                if c.fetch_add(1, Ordering::SeqCst) == fail_at {
                    Err(std::io::Error::other("injected"))
                } else {
                    Ok(())
                }
            });
            let r = write_atomic(&dest, b"new", &faults);
            if r.is_ok() {
                assert!(fail_at >= 4, "{fail_at}");
                assert_eq!(std::fs::read(&dest).unwrap(), b"new");
                break;
            }
            let got = std::fs::read(&dest).unwrap();
            // A failed directory sync comes after the rename: the new file is already whole.
            assert!(got == b"old" || got == b"new", "{fail_at}: {got:?}");
            if got == b"new" {
                write_atomic(&dest, b"old", &Faults::none()).unwrap();
            }
            let names: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names.len(), 1, "temp file left behind at step {fail_at}: {names:?}");
        }
    }
}
