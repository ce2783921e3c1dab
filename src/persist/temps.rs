//! Temp files of atomic writes that never finished: found, and removed when no live writer owns
//! them.
//!
//! Owns: [`temp_files`] (the temp files in a directory, each marked stale or not) and
//! [`remove_stale_temps`] (removes the stale ones, reporting what could not be removed). A temp
//! file is named `.NAME.tmp-PID-RANDOM` by the process writing it ([`super::AtomicFile`]); it
//! is stale when that process is gone (a crash, `kill -9`), when its name carries no process
//! id (an older hearth), or when it is over an hour old.
//!
//! Invariant: a temp file of a live writer (another hearth on the same data dir, this one's
//! background writer) is never removed while it is fresh.
//!
//! Counterpart: SQLite's hot-journal check (is the owner still alive?) and git's stale
//! `*.lock` files.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A temp file older than this is stale whoever wrote it.
const STALE_AGE: Duration = Duration::from_secs(3600);

/// One temp file of an unfinished write.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TempFile {
    pub path: PathBuf,
    pub bytes: u64,
    /// No live writer owns it: safe to remove.
    pub stale: bool,
}

/// What [`remove_stale_temps`] did.
#[derive(Debug, Default)]
pub struct TempSweep {
    pub removed: usize,
    pub removed_bytes: u64,
    /// Stale temp files that could not be removed, with why.
    pub left: Vec<(PathBuf, std::io::Error)>,
}

/// The process id in a temp file's name (`.NAME.tmp-PID-RANDOM`), if it has one.
fn owner(name: &str) -> Option<u32> {
    let rest = &name[name.rfind(".tmp-")? + 5..];
    let (pid, random) = rest.split_once('-')?;
    (!random.is_empty()).then_some(())?;
    pid.parse().ok()
}

/// Whether process `pid` is running (where the system can say; elsewhere the age decides).
fn alive(pid: u32) -> Option<bool> {
    if pid == std::process::id() {
        return Some(true);
    }
    let proc = Path::new("/proc");
    proc.is_dir().then(|| proc.join(pid.to_string()).exists())
}

/// Every temp file of an atomic write in `dir` (none when `dir` does not exist).
pub fn temp_files(dir: &Path) -> Vec<TempFile> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !super::atomic::is_temp_name(&name) {
            continue;
        }
        let meta = entry.metadata().ok();
        let old = meta
            .as_ref()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_AGE);
        let stale = old
            || match owner(&name) {
                None => true,
                Some(pid) => alive(pid) == Some(false),
            };
        out.push(TempFile {
            path: entry.path(),
            bytes: meta.map_or(0, |m| m.len()),
            stale,
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Removes the stale temp files in `dir`.
pub fn remove_stale_temps(dir: &Path) -> TempSweep {
    let mut sweep = TempSweep::default();
    for t in temp_files(dir).into_iter().filter(|t| t.stale) {
        match std::fs::remove_file(&t.path) {
            Ok(()) => {
                sweep.removed += 1;
                sweep.removed_bytes += t.bytes;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => sweep.left.push((t.path, e)),
        }
    }
    if sweep.removed > 0 {
        tracing::info!(
            "removed {} temp files ({} bytes) of writes that never finished in {}",
            sweep.removed,
            sweep.removed_bytes,
            dir.display()
        );
    }
    for (path, e) in &sweep.left {
        tracing::warn!("cannot remove the leftover temp file {}: {e}", path.display());
    }
    sweep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_writers_temp_is_stale_and_a_live_ones_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join(format!(".a.hkv.tmp-{}-00ff", std::process::id()));
        let unnamed = dir.path().join(".b.json.tmp-0123456789abcdef");
        std::fs::write(&mine, b"live").unwrap();
        std::fs::write(&unnamed, b"old format").unwrap();
        std::fs::write(dir.path().join("c.hkv"), b"not a temp").unwrap();
        // A process id that is not running: a child that has exited and been reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let gone = dir.path().join(format!(".d.hkv.tmp-{dead}-0001"));
        std::fs::write(&gone, b"crashed").unwrap();
        let stale: Vec<_> = temp_files(dir.path())
            .into_iter()
            .map(|t| (t.path.file_name().unwrap().to_string_lossy().into_owned(), t.stale))
            .collect();
        assert_eq!(stale.len(), 3, "{stale:?}");
        let sweep = remove_stale_temps(dir.path());
        assert!(mine.exists(), "a live writer's temp file is kept");
        assert!(!unnamed.exists());
        if Path::new("/proc").is_dir() {
            assert!(!gone.exists(), "a dead writer's temp file is removed");
            assert_eq!(sweep.removed, 2);
        }
        assert!(sweep.left.is_empty());
        assert!(dir.path().join("c.hkv").exists());
    }

    #[test]
    fn the_owner_is_read_from_the_name() {
        assert_eq!(owner(".x.hkv.tmp-4242-00aa"), Some(4242));
        assert_eq!(owner(".x.hkv.tmp-00aa11"), None);
        assert_eq!(owner(".x.hkv.tmp-12-"), None);
    }
}
