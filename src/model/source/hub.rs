//! The Hugging Face hub side of [`super::resolve`]: the cache directory, the
//! offline lookup in it, and the download through `hf-hub` when allowed.
//!
//! Cache layout (shared with Python's `huggingface_hub`):
//! `<cache>/models--<owner>--<name>/refs/<revision>` holds a commit hash;
//! `<cache>/models--<owner>--<name>/snapshots/<hash>/<file>` is the file (a
//! link into `blobs/` when downloaded by a tool).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use hf_hub::{Cache, Repo, RepoType};

use super::download::{Cancel, DownloadError, DownloadProgress, HubClient};
use super::{HubOptions, ResolvedModel};
use crate::model::gguf::split;
use crate::model::ModelError;

const TOKENIZER_JSON: &str = "tokenizer.json";
const TOKENIZER_CONFIG: &str = "tokenizer_config.json";
/// The hub, unless `HubOptions::endpoint` or `$HF_ENDPOINT` names a mirror.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// One hub file to resolve; `spec` is how errors name it.
pub(super) struct HubRequest<'a> {
    pub spec: String,
    pub repo: &'a str,
    pub file: &'a str,
    pub revision: &'a str,
}

/// What the process environment says about the hub, read once per
/// [`super::resolve`] call (never stored globally), so tests can pass their own.
#[derive(Debug, Clone, Default)]
pub(super) struct HubEnv {
    /// `$HF_HUB_CACHE`.
    pub hf_hub_cache: Option<PathBuf>,
    /// `$HF_HOME` (the cache is its `hub/`).
    pub hf_home: Option<PathBuf>,
    /// The user's home directory.
    pub home: Option<PathBuf>,
    /// `$HF_HUB_OFFLINE` is `1`/`true`/`yes`/`on`.
    pub offline: bool,
    /// `$HF_TOKEN` (or the older `$HUGGING_FACE_HUB_TOKEN`); else the `token`
    /// file next to the cache (`$HF_HOME/token`) is read.
    pub token: Option<String>,
    /// `$HF_ENDPOINT`, for mirrors.
    pub endpoint: Option<String>,
}

impl HubEnv {
    pub fn from_process() -> Self {
        let var = |key: &str| std::env::var_os(key).filter(|v| !v.is_empty());
        let text = |v: OsString| v.to_string_lossy().trim().to_owned();
        Self {
            hf_hub_cache: var("HF_HUB_CACHE").map(PathBuf::from),
            hf_home: var("HF_HOME").map(PathBuf::from),
            home: directories::BaseDirs::new().map(|d| d.home_dir().to_owned()),
            offline: var("HF_HUB_OFFLINE").map(text).is_some_and(|v| is_truthy(&v)),
            token: var("HF_TOKEN")
                .or_else(|| var("HUGGING_FACE_HUB_TOKEN"))
                .map(text)
                .filter(|t| !t.is_empty()),
            endpoint: var("HF_ENDPOINT").map(text).filter(|e| !e.is_empty()),
        }
    }
}

fn is_truthy(v: &str) -> bool {
    ["1", "true", "yes", "on"].iter().any(|t| v.eq_ignore_ascii_case(t))
}

/// The hub cache directory [`super::resolve`] uses for `opts`:
/// `opts.cache_dir`, else `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
/// `~/.cache/huggingface/hub`. `None` only when none of these is known.
pub fn hub_cache_dir(opts: &HubOptions) -> Option<PathBuf> {
    cache_dir(opts, &HubEnv::from_process())
}

fn cache_dir(opts: &HubOptions, env: &HubEnv) -> Option<PathBuf> {
    opts.cache_dir
        .clone()
        .or_else(|| env.hf_hub_cache.clone())
        .or_else(|| env.hf_home.as_ref().map(|h| h.join("hub")))
        .or_else(|| {
            env.home
                .as_ref()
                .map(|h| h.join(".cache").join("huggingface").join("hub"))
        })
}

pub(super) fn resolve_hub(
    req: &HubRequest<'_>,
    opts: &HubOptions,
    env: &HubEnv,
    progress: &mut dyn DownloadProgress,
    cancel: &Cancel,
) -> Result<ResolvedModel, ModelError> {
    let err = |reason: String| ModelError::Hub {
        spec: req.spec.clone(),
        reason,
    };
    let dir = cache_dir(opts, env).ok_or_else(|| {
        err("no hub cache directory: no home directory found; set HF_HUB_CACHE or HF_HOME".to_owned())
    })?;
    let cache = Cache::new(dir.clone());
    let repo = Repo::with_revision(req.repo.to_owned(), RepoType::Model, req.revision.to_owned());

    // A split model's first part brings every part (`model::gguf::split`).
    let files: Vec<String> = match split::SplitName::of(Path::new(req.file)).filter(|n| n.part == 1) {
        Some(name) => name.parts().iter().map(|p| p.to_string_lossy().into_owned()).collect(),
        None => vec![req.file.to_owned()],
    };
    let cached: Vec<Option<PathBuf>> = files.iter().map(|f| find_cached(&cache, &repo, req.revision, f)).collect();
    if let Some(mut paths) = cached.iter().cloned().collect::<Option<Vec<PathBuf>>>() {
        let gguf = paths.remove(0);
        tracing::debug!(spec = %req.spec, path = %gguf.display(), "found in the hub cache");
        return Ok(ResolvedModel {
            gguf,
            gguf_parts: paths,
            tokenizer_json: find_cached(&cache, &repo, req.revision, TOKENIZER_JSON),
            tokenizer_config: find_cached(&cache, &repo, req.revision, TOKENIZER_CONFIG),
        });
    }

    if opts.offline || env.offline {
        let why = if opts.offline { "" } else { " (HF_HUB_OFFLINE is set)" };
        return Err(err(format!(
            "not in the hub cache at {} and offline{why}; run once online to download it",
            dir.display()
        )));
    }

    let endpoint = opts
        .endpoint
        .clone()
        .or_else(|| env.endpoint.clone())
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
    // `$HF_TOKEN`, else the file `huggingface-cli login` writes beside the cache.
    let token = env.token.clone().or_else(|| cache.token());
    let client = HubClient::new(&endpoint, token);
    tracing::info!(spec = %req.spec, cache = %dir.display(), %endpoint, "downloading from the Hugging Face hub");
    let mut paths = Vec::with_capacity(files.len());
    for (file, cached) in files.iter().zip(cached) {
        let path = match cached {
            Some(path) => path,
            None => client
                .download(&dir, req.repo, req.revision, file, progress, cancel)
                .map_err(|e| match e {
                    DownloadError::Cancelled { kept } => ModelError::Cancelled {
                        spec: req.spec.clone(),
                        kept,
                    },
                    e if files.len() > 1 => err(format!("{file}: {}", describe_download_error(&e))),
                    e => err(describe_download_error(&e)),
                })?,
        };
        paths.push(path);
    }
    let gguf = paths.remove(0);

    let optional = |name: &str| {
        find_cached(&cache, &repo, req.revision, name).or_else(|| download_optional(&client, &dir, req, name, cancel))
    };
    Ok(ResolvedModel {
        gguf,
        gguf_parts: paths,
        tokenizer_json: optional(TOKENIZER_JSON),
        tokenizer_config: optional(TOKENIZER_CONFIG),
    })
}

/// `file` of `repo` at `revision` in the cache, without the network.
///
/// hf-hub's lookup first; then what it misses: a ref file with a trailing
/// newline, and a revision that is itself a commit hash (no ref file).
fn find_cached(cache: &Cache, repo: &Repo, revision: &str, file: &str) -> Option<PathBuf> {
    if let Some(path) = cache.repo(repo.clone()).get(file) {
        return Some(path);
    }
    let folder = cache.path().join(repo.folder_name());
    let commit = match std::fs::read_to_string(folder.join("refs").join(revision)) {
        Ok(text) => text.trim().to_owned(),
        Err(_) if is_commit_hash(revision) => revision.to_owned(),
        Err(_) => return None,
    };
    if !is_commit_hash(&commit) {
        return None;
    }
    let path = snapshot_path(&folder, &commit, file);
    path.exists().then_some(path)
}

fn snapshot_path(repo_folder: &Path, commit: &str, file: &str) -> PathBuf {
    file.split('/')
        .fold(repo_folder.join("snapshots").join(commit), |p, part| p.join(part))
}

/// A full git commit id: 40 hex digits (64 for SHA-256 repos).
pub(super) fn is_commit_hash(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Downloads an optional file of the repo (no progress shown); a repo without it is normal, so
/// failures only log.
fn download_optional(
    client: &HubClient,
    dir: &Path,
    req: &HubRequest<'_>,
    name: &str,
    cancel: &Cancel,
) -> Option<PathBuf> {
    match client.download(dir, req.repo, req.revision, name, &mut (), cancel) {
        Ok(path) => Some(path),
        Err(e) if e.status() == Some(404) => {
            tracing::debug!(spec = %req.spec, file = name, "the repo has no such file");
            None
        }
        Err(e) => {
            tracing::warn!(spec = %req.spec, file = name, error = %e, "could not download; the GGUF's own tokenizer data will be used");
            None
        }
    }
}

/// A one-line reason for a failed download, with what to do about it.
fn describe_download_error(e: &DownloadError) -> String {
    match e.status() {
        Some(404) => format!("not found on the hub; check the repo id, the file name and the revision ({e})"),
        Some(401 | 403) => format!(
            "access denied; the repo may be gated or private: accept its terms on huggingface.co and set HF_TOKEN ({e})"
        ),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn cache_dir_precedence() {
        let env = HubEnv {
            hf_hub_cache: Some("/c".into()),
            hf_home: Some("/h".into()),
            home: Some("/u".into()),
            ..Default::default()
        };
        let opts = HubOptions {
            cache_dir: Some("/o".into()),
            ..Default::default()
        };
        assert_eq!(cache_dir(&opts, &env), Some(PathBuf::from("/o")));
        let opts = HubOptions::default();
        assert_eq!(cache_dir(&opts, &env), Some(PathBuf::from("/c")));
        let env = HubEnv {
            hf_hub_cache: None,
            ..env
        };
        assert_eq!(cache_dir(&opts, &env), Some(PathBuf::from("/h/hub")));
        let env = HubEnv { hf_home: None, ..env };
        assert_eq!(cache_dir(&opts, &env), Some(PathBuf::from("/u/.cache/huggingface/hub")));
        assert_eq!(cache_dir(&opts, &HubEnv::default()), None);
    }

    #[test]
    fn truthy_values() {
        assert!(is_truthy("1") && is_truthy("TRUE") && is_truthy("yes") && is_truthy("On"));
        assert!(!is_truthy("0") && !is_truthy("false") && !is_truthy(""));
    }

    #[test]
    fn env_offline_refuses_without_network() {
        let dir = tempfile::tempdir().unwrap();
        let env = HubEnv {
            offline: true,
            ..Default::default()
        };
        let opts = HubOptions {
            cache_dir: Some(dir.path().to_owned()),
            ..Default::default()
        };
        let req = HubRequest {
            spec: "a/b:x.gguf".into(),
            repo: "a/b",
            file: "x.gguf",
            revision: "main",
        };
        let err = resolve_hub(&req, &opts, &env, &mut (), &Cancel::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains("offline") && err.contains("HF_HUB_OFFLINE"), "{err}");
    }

    #[test]
    fn finds_trimmed_refs_and_commit_revisions() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("models--a--b");
        std::fs::create_dir_all(folder.join("refs")).unwrap();
        std::fs::write(folder.join("refs").join("main"), format!("{HASH}\n")).unwrap();
        let snap = folder.join("snapshots").join(HASH).join("sub");
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::write(snap.join("x.gguf"), b"GGUF").unwrap();
        let cache = Cache::new(dir.path().to_owned());
        let main = Repo::with_revision("a/b".into(), RepoType::Model, "main".into());
        assert_eq!(
            find_cached(&cache, &main, "main", "sub/x.gguf"),
            Some(snap.join("x.gguf"))
        );
        let by_hash = Repo::with_revision("a/b".into(), RepoType::Model, HASH.into());
        assert_eq!(
            find_cached(&cache, &by_hash, HASH, "sub/x.gguf"),
            Some(snap.join("x.gguf"))
        );
        assert_eq!(find_cached(&cache, &main, "main", "y.gguf"), None);
        let dev = Repo::with_revision("a/b".into(), RepoType::Model, "dev".into());
        assert_eq!(find_cached(&cache, &dev, "dev", "sub/x.gguf"), None);
    }
}
