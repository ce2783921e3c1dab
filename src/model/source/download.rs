//! Downloading one file of a hub repo into the hub cache, with progress and cancel.
//!
//! Owns: [`DownloadProgress`] (what a caller sees: bytes so far of which total), [`Cancel`] (a
//! flag the caller sets from another thread; the download stops at its next chunk and keeps
//! what it has), and [`HubClient::download`].
//!
//! The protocol and layout are `huggingface_hub`'s (and the `hf-hub` crate's):
//! 1. `GET {endpoint}/{repo}/resolve/{revision}/{file}` with `Range: bytes=0-0` and no
//!    redirects: the hub answers with `x-repo-commit` (the commit the revision names),
//!    `x-linked-etag` or `etag` (the blob's id) and the size (`x-linked-size`, or the total in
//!    `content-range`). Relative redirects (a renamed repo) are followed; an absolute one points
//!    at the CDN, which is then asked for the size.
//! 2. The bytes go to `blobs/<etag>.part`, resumed from its length with `Range: bytes=N-`, so a
//!    cancelled or broken download continues where it stopped next time.
//! 3. A complete part of the right size is renamed to `blobs/<etag>`; `snapshots/<commit>/<file>`
//!    links to it (a copy where links are unavailable); `refs/<revision>` records the commit.
//!
//! Invariant: `snapshots/` only ever names a complete blob of the size the hub announced, so
//! the cache lookup (which needs no network) never returns a partial file.
//!
//! Why not `hf-hub`'s own download: it has no way to stop a download once started, and the
//! desktop app needs a cancel button. `hf-hub` still does the cache lookup.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a download reports as it goes. Called on the downloading thread.
pub trait DownloadProgress {
    /// `file` starts: `total` bytes, of which `done` are already on disk (a resumed download).
    fn start(&mut self, file: &str, done: u64, total: u64);
    /// `done` bytes of the current file are on disk.
    fn advance(&mut self, done: u64);
    /// The current file is complete.
    fn finish(&mut self);
}

/// No progress reporting.
impl DownloadProgress for () {
    fn start(&mut self, _: &str, _: u64, _: u64) {}
    fn advance(&mut self, _: u64) {}
    fn finish(&mut self) {}
}

/// Stops a download from another thread. Clones share the flag.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the download to stop; it does at its next chunk, keeping the part file.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Why a download failed.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error("cancelled; {kept} bytes are kept and the next download resumes from there")]
    Cancelled { kept: u64 },
    /// The hub answered with an HTTP error.
    #[error("{url}: HTTP status {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: {reason}")]
    Transport { url: String, reason: String },
    #[error("{url}: the hub's answer lacks {what}")]
    BadAnswer { url: String, what: String },
    #[error("{url}: got {got} bytes, the hub announced {expected}")]
    WrongSize { url: String, got: u64, expected: u64 },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} is being downloaded by another program; try again when it is done")]
    Busy { path: PathBuf },
}

impl DownloadError {
    /// The HTTP status, when the hub answered with one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// What the hub says about a file before it is downloaded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Metadata {
    commit: String,
    etag: String,
    size: u64,
}

/// Talks to one hub endpoint.
pub struct HubClient {
    endpoint: String,
    token: Option<String>,
    /// Follows no redirects: the metadata request reads the hub's own headers.
    no_redirect: ureq::Agent,
    /// Follows redirects (to the CDN), keeping the token only on the same host.
    agent: ureq::Agent,
}

/// Reads this much between cancel checks and progress reports.
const CHUNK: usize = 256 * 1024;
/// Attempts to resume a download that broke off (the network, not the hub, failed).
const RETRIES: u32 = 3;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> DownloadError + '_ {
    move |source| DownloadError::Io {
        path: path.to_owned(),
        source,
    }
}

impl HubClient {
    /// A client for `endpoint` (e.g. `https://huggingface.co`), sending `token` if given.
    pub fn new(endpoint: &str, token: Option<String>) -> Self {
        let builder = || {
            ureq::AgentBuilder::new()
                .user_agent(concat!("hearth/", env!("CARGO_PKG_VERSION")))
                .timeout_connect(Duration::from_secs(15))
                .timeout_read(Duration::from_secs(30))
                .try_proxy_from_env(true)
        };
        Self {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            token,
            no_redirect: builder().redirects(0).build(),
            agent: builder()
                .redirects(8)
                .redirect_auth_headers(ureq::RedirectAuthHeaders::SameHost)
                .build(),
        }
    }

    /// The URL of `file` of `repo` at `revision`.
    pub fn file_url(&self, repo: &str, revision: &str, file: &str) -> String {
        format!(
            "{}/{repo}/resolve/{}/{file}",
            self.endpoint,
            revision.replace('/', "%2F")
        )
    }

    fn get(&self, agent: &ureq::Agent, url: &str, range: &str) -> Result<ureq::Response, DownloadError> {
        let mut req = agent.get(url).set("Range", range);
        if let Some(token) = &self.token {
            req = req.set("Authorization", &format!("Bearer {token}"));
        }
        req.call().map_err(|e| match e {
            ureq::Error::Status(status, _) => DownloadError::Status {
                url: url.to_owned(),
                status,
            },
            ureq::Error::Transport(t) => DownloadError::Transport {
                url: url.to_owned(),
                reason: t.to_string(),
            },
        })
    }

    fn metadata(&self, url: &str) -> Result<Metadata, DownloadError> {
        let bad = |what: &str| DownloadError::BadAnswer {
            url: url.to_owned(),
            what: what.to_owned(),
        };
        let mut current = url.to_owned();
        let mut response = self.get(&self.no_redirect, &current, "bytes=0-0")?;
        for _ in 0..8 {
            if !(300..400).contains(&response.status()) {
                break;
            }
            let Some(location) = response.header("location").map(str::to_owned) else {
                break;
            };
            if location.starts_with('/') {
                // A renamed repo: same host, new path.
                current = format!("{}{location}", origin(&current));
                response = self.get(&self.no_redirect, &current, "bytes=0-0")?;
            } else {
                break;
            }
        }
        let commit = response
            .header("x-repo-commit")
            .map(str::to_owned)
            .ok_or_else(|| bad("the x-repo-commit header"))?;
        if !super::hub::is_commit_hash(&commit) {
            return Err(bad("a commit hash in x-repo-commit"));
        }
        let etag = response
            .header("x-linked-etag")
            .or_else(|| response.header("etag"))
            .map(|e| e.trim_start_matches("W/").replace('"', ""))
            .ok_or_else(|| bad("the etag header"))?;
        if etag.is_empty()
            || etag.len() > 128
            || !etag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            || etag.starts_with('.')
        {
            return Err(bad("an etag usable as a file name"));
        }
        let size_of = |r: &ureq::Response| {
            r.header("x-linked-size")
                .and_then(|s| s.trim().parse::<u64>().ok())
                .or_else(|| {
                    r.header("content-range")
                        .and_then(|c| c.rsplit('/').next())
                        .and_then(|s| s.trim().parse().ok())
                })
        };
        let size = match size_of(&response) {
            Some(size) => Some(size),
            None if (300..400).contains(&response.status()) => {
                let location = response
                    .header("location")
                    .map(str::to_owned)
                    .ok_or_else(|| bad("a size"))?;
                size_of(&self.get(&self.agent, &location, "bytes=0-0")?)
            }
            None => None,
        };
        let size = size.ok_or_else(|| bad("the file's size (x-linked-size or content-range)"))?;
        Ok(Metadata { commit, etag, size })
    }

    /// Downloads `file` of `repo` at `revision` into the hub cache at `cache_dir`, resuming a
    /// part file left by an earlier attempt; returns its `snapshots/` path.
    pub fn download(
        &self,
        cache_dir: &Path,
        repo: &str,
        revision: &str,
        file: &str,
        progress: &mut dyn DownloadProgress,
        cancel: &Cancel,
    ) -> Result<PathBuf, DownloadError> {
        let url = self.file_url(repo, revision, file);
        let meta = self.metadata(&url)?;
        let folder = cache_dir.join(format!("models--{}", repo.replace('/', "--")));
        let blobs = folder.join("blobs");
        std::fs::create_dir_all(&blobs).map_err(io_err(&blobs))?;
        let blob = blobs.join(&meta.etag);
        let have = std::fs::metadata(&blob).map(|m| m.len()).ok();
        if have != Some(meta.size) {
            self.fetch(&url, &blob, &meta, file, progress, cancel)?;
        } else {
            progress.start(file, meta.size, meta.size);
            progress.finish();
        }

        let snapshot = file
            .split('/')
            .fold(folder.join("snapshots").join(&meta.commit), |p, part| p.join(part));
        if let Some(parent) = snapshot.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        let depth = file.split('/').count() + 1; // up from snapshots/<commit>/<file>
        let target = (0..depth)
            .fold(PathBuf::new(), |p, _| p.join(".."))
            .join("blobs")
            .join(&meta.etag);
        link_or_copy(&target, &blob, &snapshot)?;
        if revision != meta.commit {
            let r = revision.split('/').fold(folder.join("refs"), |p, part| p.join(part));
            if let Some(parent) = r.parent() {
                std::fs::create_dir_all(parent).map_err(io_err(parent))?;
            }
            // Written beside and renamed over, so a reader never sees half a commit hash.
            let tmp = r.with_extension("tmp");
            std::fs::write(&tmp, meta.commit.as_bytes()).map_err(io_err(&tmp))?;
            std::fs::rename(&tmp, &r).map_err(io_err(&r))?;
        }
        Ok(snapshot)
    }

    /// Fills `blob` (through `<blob>.part`) with the file's bytes.
    fn fetch(
        &self,
        url: &str,
        blob: &Path,
        meta: &Metadata,
        file: &str,
        progress: &mut dyn DownloadProgress,
        cancel: &Cancel,
    ) -> Result<(), DownloadError> {
        let part = blob.with_extension("part");
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&part)
            .map_err(io_err(&part))?;
        // One writer per part file (another hearth may be fetching the same blob); the lock
        // goes with the handle.
        match out.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(DownloadError::Busy { path: part.clone() });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_err(&part)(e)),
        }
        let mut done = out.metadata().map_err(io_err(&part))?.len();
        if done > meta.size {
            out.set_len(0).map_err(io_err(&part))?;
            done = 0;
        }
        progress.start(file, done, meta.size);
        let mut attempt = 0;
        while done < meta.size {
            if cancel.is_cancelled() {
                return Err(DownloadError::Cancelled { kept: done });
            }
            match self.fetch_from(url, &part, &mut out, &mut done, meta.size, progress, cancel) {
                Ok(()) => {}
                // The network broke off: resume. A local error (a full disk) is not retried.
                Err(e @ DownloadError::Transport { .. }) if attempt < RETRIES => {
                    attempt += 1;
                    tracing::warn!(url, error = %e, attempt, "download broke off; resuming");
                    std::thread::sleep(Duration::from_millis(300 << attempt));
                }
                Err(e) => return Err(e),
            }
        }
        out.sync_all().map_err(io_err(&part))?;
        drop(out);
        let got = std::fs::metadata(&part).map_err(io_err(&part))?.len();
        if got != meta.size {
            return Err(DownloadError::WrongSize {
                url: url.to_owned(),
                got,
                expected: meta.size,
            });
        }
        std::fs::rename(&part, blob).map_err(io_err(blob))?;
        progress.finish();
        Ok(())
    }

    /// One request for the bytes from `done` on, appended to `out` until the body ends.
    #[allow(clippy::too_many_arguments)]
    fn fetch_from(
        &self,
        url: &str,
        part: &Path,
        out: &mut std::fs::File,
        done: &mut u64,
        size: u64,
        progress: &mut dyn DownloadProgress,
        cancel: &Cancel,
    ) -> Result<(), DownloadError> {
        let response = self.get(&self.agent, url, &format!("bytes={done}-"))?;
        if response.status() == 200 && *done > 0 {
            // The server ignored the range: start over.
            out.set_len(0).map_err(io_err(part))?;
            *done = 0;
            progress.advance(0);
        }
        let mut body = response.into_reader();
        let mut buf = vec![0u8; CHUNK];
        loop {
            if cancel.is_cancelled() {
                return Err(DownloadError::Cancelled { kept: *done });
            }
            let n = body.read(&mut buf).map_err(|e| DownloadError::Transport {
                url: url.to_owned(),
                reason: e.to_string(),
            })?;
            if n == 0 {
                return Ok(());
            }
            if *done + n as u64 > size {
                return Err(DownloadError::WrongSize {
                    url: url.to_owned(),
                    got: *done + n as u64,
                    expected: size,
                });
            }
            out.write_all(&buf[..n]).map_err(io_err(part))?;
            *done += n as u64;
            progress.advance(*done);
        }
    }
}

/// `scheme://host[:port]` of `url`.
fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => &url[..after_scheme + i],
        None => url,
    }
}

/// Points `snapshot` at the blob: a relative link `target` where the platform allows, else a
/// copy of `blob`. An existing entry is replaced.
fn link_or_copy(target: &Path, blob: &Path, snapshot: &Path) -> Result<(), DownloadError> {
    if std::fs::symlink_metadata(snapshot).is_ok() {
        std::fs::remove_file(snapshot).map_err(io_err(snapshot))?;
    }
    #[cfg(unix)]
    if std::os::unix::fs::symlink(target, snapshot).is_ok() {
        return Ok(());
    }
    let _ = target;
    std::fs::copy(blob, snapshot).map_err(io_err(snapshot))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_origins() {
        let c = HubClient::new("https://huggingface.co/", None);
        assert_eq!(
            c.file_url("a/b", "refs/pr/1", "sub/x.gguf"),
            "https://huggingface.co/a/b/resolve/refs%2Fpr%2F1/sub/x.gguf"
        );
        assert_eq!(origin("http://127.0.0.1:9/a/b/resolve/main/x"), "http://127.0.0.1:9");
        assert_eq!(origin("http://h"), "http://h");
    }

    #[test]
    fn cancel_is_shared_by_clones() {
        let c = Cancel::new();
        let d = c.clone();
        assert!(!d.is_cancelled());
        c.cancel();
        assert!(d.is_cancelled());
    }
}
