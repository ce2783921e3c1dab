//! Where the GGUF comes from: a local file, or a file of a Hugging Face hub
//! repo found in (or downloaded into) the standard hub cache.
//!
//! Owns [`ModelSource`] (a parsed model spec), [`HubOptions`] and [`resolve`],
//! which turns a source into [`ResolvedModel`] paths on disk.
//!
//! Spec syntax (see [`ModelSource::parse`]):
//! - a path to an existing file, or a path ending in `.gguf` that contains a
//!   path separator (`models/x.gguf`, `./x.gguf`), existing or not →
//!   [`ModelSource::Local`] ([`resolve`] reports a missing one);
//! - `owner/repo:file.gguf` or `owner/repo:file.gguf@revision` →
//!   [`ModelSource::Hub`] (revision `main` when absent).
//!
//! Invariants:
//! - A hub file already in the cache is used without touching the network,
//!   so a model downloaded once starts offline.
//! - Offline (by option or `HF_HUB_OFFLINE=1`) never touches the network.
//! - Environment variables are read when [`resolve`] runs, never stored.
//! - The cache layout is the one `huggingface_hub` (Python) and `hf-hub`
//!   (Rust) share, so models downloaded by either are found.
//!
//! - A download shows its progress to the caller and stops when cancelled,
//!   keeping its part file so the next attempt resumes (`download.rs`).
//!
//! Counterparts: llama.cpp `-hf owner/repo[:quant]` (`common/arg.cpp`),
//! `huggingface_hub.hf_hub_download` / `try_to_load_from_cache`, the `hf-hub`
//! crate (which does the cache lookup here; the download is our own, to be
//! cancellable).

mod download;
mod hub;

use std::fmt;
use std::path::{Path, PathBuf};

use super::ModelError;

pub use download::{Cancel, DownloadError, DownloadProgress, HubClient};
pub use hub::{hub_cache_dir, DEFAULT_ENDPOINT};

/// A parsed model spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A GGUF file on this machine.
    Local(PathBuf),
    /// A GGUF file of a Hugging Face model repo.
    Hub {
        /// `owner/name`.
        repo: String,
        /// Path of the `.gguf` inside the repo (may contain `/`).
        file: String,
        /// Branch, tag or commit hash; `main` by default.
        revision: String,
    },
}

/// The revision a hub spec without `@revision` means.
pub const DEFAULT_REVISION: &str = "main";

impl ModelSource {
    /// Parses a spec (see the module docs). Errors name the spec and say what
    /// to write instead: `owner/repo` alone must name its `.gguf` file, a
    /// directory is not a model, a name that is neither a file nor a hub spec
    /// is reported as missing.
    pub fn parse(spec: &str) -> Result<Self, ModelError> {
        let spec = spec.trim();
        let bad = |reason: String| ModelError::BadSource {
            spec: spec.to_owned(),
            reason,
        };
        if spec.is_empty() {
            return Err(bad(
                "the model spec is empty; give a .gguf path or owner/repo:file.gguf".to_owned(),
            ));
        }
        let path = Path::new(spec);
        if path.is_file() {
            return Ok(Self::Local(path.to_owned()));
        }
        if path.is_dir() {
            return Err(bad("this is a directory; name the .gguf file in it".to_owned()));
        }
        if let Some(hub) = parse_hub(spec) {
            return hub.map_err(bad);
        }
        if has_gguf_extension(spec) && spec.contains(['/', std::path::MAIN_SEPARATOR]) {
            return Ok(Self::Local(path.to_owned()));
        }
        if is_repo_id(spec) {
            return Err(bad(format!(
                "no such file; to use a Hugging Face repo, name the .gguf file in it: {spec}:<file>.gguf (e.g. {spec}:model-Q4_K_M.gguf)"
            )));
        }
        Err(bad(
            "no such file, and not a hub spec of the form owner/repo:file.gguf".to_owned()
        ))
    }

    /// The local path, if this is [`ModelSource::Local`].
    pub fn local_path(&self) -> Option<&Path> {
        match self {
            Self::Local(p) => Some(p),
            Self::Hub { .. } => None,
        }
    }
}

/// Renders the spec back: the path, or `owner/repo:file` (plus `@revision`
/// unless it is `main`). `parse(&source.to_string())` gives `source` again.
impl fmt::Display for ModelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Local(path) => write!(f, "{}", path.display()),
            Self::Hub { repo, file, revision } if revision == DEFAULT_REVISION => write!(f, "{repo}:{file}"),
            Self::Hub { repo, file, revision } => write!(f, "{repo}:{file}@{revision}"),
        }
    }
}

/// `Some` when `spec` has the hub form `owner/repo:rest`; then `Err(reason)`
/// when `rest` is not `file.gguf[@revision]`.
fn parse_hub(spec: &str) -> Option<Result<ModelSource, String>> {
    let (repo, rest) = spec.split_once(':')?;
    if !is_repo_id(repo) {
        return None;
    }
    let (file, revision) = match rest.rsplit_once('@') {
        Some((file, revision)) => (file, revision),
        None => (rest, DEFAULT_REVISION),
    };
    let example = format!("{repo}:model-Q4_K_M.gguf");
    let result = if file.is_empty() {
        Err(format!("name the .gguf file after ':' (e.g. {example})"))
    } else if revision.is_empty() {
        Err("the revision after '@' is empty".to_owned())
    } else if revision
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        Err(format!("\"{revision}\" is not a valid revision"))
    } else if !has_gguf_extension(file) {
        Err(format!(
            "\"{file}\" is not a .gguf file; name the .gguf file in the repo (e.g. {example})"
        ))
    } else if file.starts_with('/')
        || file
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..")
    {
        Err(format!("\"{file}\" is not a plain path inside the repo"))
    } else {
        Ok(ModelSource::Hub {
            repo: repo.to_owned(),
            file: file.to_owned(),
            revision: revision.to_owned(),
        })
    };
    Some(result)
}

/// `owner/name` with the characters the hub allows (letters, digits, `-_.`).
fn is_repo_id(s: &str) -> bool {
    let Some((owner, name)) = s.split_once('/') else {
        return false;
    };
    let part_ok = |p: &str| {
        !p.is_empty()
            && p != "."
            && p != ".."
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    part_ok(owner) && part_ok(name)
}

fn has_gguf_extension(s: &str) -> bool {
    s.len() > 5
        && s.get(s.len() - 5..)
            .is_some_and(|ext| ext.eq_ignore_ascii_case(".gguf"))
}

/// How [`resolve`] may reach the hub.
#[derive(Debug, Clone, Default)]
pub struct HubOptions {
    /// The hub cache directory (the one holding `models--owner--repo`); when
    /// `None`: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
    /// `~/.cache/huggingface/hub`.
    pub cache_dir: Option<PathBuf>,
    /// Never touch the network; a file not in the cache is an error. Also on
    /// when `HF_HUB_OFFLINE` is `1`/`true`/`yes`/`on`.
    pub offline: bool,
    /// The hub's address, for a mirror; when `None`: `$HF_ENDPOINT`, else
    /// [`DEFAULT_ENDPOINT`].
    pub endpoint: Option<String>,
}

impl From<&crate::config::HubSettings> for HubOptions {
    fn from(s: &crate::config::HubSettings) -> Self {
        Self {
            cache_dir: s.cache_dir.clone(),
            offline: s.offline,
            endpoint: s.endpoint.clone(),
        }
    }
}

/// The files a model needs, on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedModel {
    /// The GGUF file (for a hub model, its path in the cache's `snapshots/`); a split model's
    /// first part.
    pub gguf: PathBuf,
    /// A split model's other parts, in order, beside the first (`model::gguf::split`); empty
    /// for a model in one file.
    pub gguf_parts: Vec<PathBuf>,
    /// `tokenizer.json` beside the GGUF, or of the same hub repo and revision.
    pub tokenizer_json: Option<PathBuf>,
    /// `tokenizer_config.json` beside the GGUF, or of the same hub repo and revision.
    pub tokenizer_config: Option<PathBuf>,
}

impl ResolvedModel {
    /// The files whose contents define the model: the GGUF (every part), then the tokenizer
    /// files used.
    pub fn files(&self) -> Vec<PathBuf> {
        std::iter::once(self.gguf.clone())
            .chain(self.gguf_parts.iter().cloned())
            .chain(self.tokenizer_json.clone())
            .chain(self.tokenizer_config.clone())
            .collect()
    }
}

/// Finds `source` on disk, downloading a hub file that is not in the cache
/// unless offline.
///
/// - `Local`: the file must exist (an [`ModelError::Io`] naming it if not);
///   `tokenizer.json` / `tokenizer_config.json` beside it are picked up.
/// - `Hub`: looked up in the hub cache first (no network). When absent and
///   offline: [`ModelError::Hub`] saying so. Otherwise downloaded into the
///   cache, with the repo's `tokenizer.json` / `tokenizer_config.json` when it
///   has them (a repo without them is normal for GGUF repos and is not an
///   error). A cached GGUF never triggers downloads, not even of tokenizer
///   files.
pub fn resolve(source: &ModelSource, opts: &HubOptions) -> Result<ResolvedModel, ModelError> {
    resolve_with(source, opts, &mut (), &Cancel::new())
}

/// [`resolve`], reporting a download's progress to `progress` and stopping it when `cancel` is
/// set ([`ModelError::Cancelled`]; what was downloaded is kept and the next call resumes).
pub fn resolve_with(
    source: &ModelSource,
    opts: &HubOptions,
    progress: &mut dyn DownloadProgress,
    cancel: &Cancel,
) -> Result<ResolvedModel, ModelError> {
    match source {
        ModelSource::Local(path) => resolve_local(path),
        ModelSource::Hub { repo, file, revision } => hub::resolve_hub(
            &hub::HubRequest {
                spec: source.to_string(),
                repo,
                file,
                revision,
            },
            opts,
            &hub::HubEnv::from_process(),
            progress,
            cancel,
        ),
    }
}

fn resolve_local(path: &Path) -> Result<ResolvedModel, ModelError> {
    let meta = std::fs::metadata(path).map_err(|source| ModelError::Io {
        path: path.to_owned(),
        source,
    })?;
    if meta.is_dir() {
        return Err(ModelError::BadSource {
            spec: path.display().to_string(),
            reason: "this is a directory; name the .gguf file in it".to_owned(),
        });
    }
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    let beside = |name: &str| Some(dir.join(name)).filter(|p| p.is_file());
    Ok(ResolvedModel {
        gguf: path.to_owned(),
        gguf_parts: crate::model::gguf::split::other_parts(path),
        tokenizer_json: beside("tokenizer.json"),
        tokenizer_config: beside("tokenizer_config.json"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(repo: &str, file: &str, revision: &str) -> ModelSource {
        ModelSource::Hub {
            repo: repo.into(),
            file: file.into(),
            revision: revision.into(),
        }
    }

    fn reason(spec: &str) -> String {
        match ModelSource::parse(spec) {
            Err(ModelError::BadSource { spec: s, reason }) => {
                assert_eq!(s, spec.trim());
                reason
            }
            other => panic!("{spec:?} gave {other:?}"),
        }
    }

    #[test]
    fn parses_hub_specs() {
        assert_eq!(
            ModelSource::parse("Qwen/Qwen2.5-0.5B-Instruct-GGUF:qwen2.5-0.5b-instruct-q4_k_m.gguf").unwrap(),
            hub(
                "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
                "qwen2.5-0.5b-instruct-q4_k_m.gguf",
                "main"
            )
        );
        assert_eq!(
            ModelSource::parse("a/b:sub/x.GGUF@v1.0").unwrap(),
            hub("a/b", "sub/x.GGUF", "v1.0")
        );
        assert_eq!(
            ModelSource::parse(" a/b:x.gguf@refs/pr/1 ").unwrap(),
            hub("a/b", "x.gguf", "refs/pr/1")
        );
    }

    #[test]
    fn rejects_bad_hub_specs() {
        assert!(reason("owner/repo").contains("owner/repo:<file>.gguf"));
        assert!(reason("owner/repo:").contains("name the .gguf file"));
        assert!(reason("owner/repo:Q4_K_M").contains("not a .gguf file"));
        assert!(reason("owner/repo:x.gguf@").contains("revision"));
        assert!(reason("owner/repo:x.gguf@../../etc").contains("not a valid revision"));
        assert!(reason("owner/repo:../x.gguf").contains("plain path"));
        assert!(reason("").contains("empty"));
        assert!(reason("no-such-model").contains("no such file"));
        assert!(reason("missing.gguf").contains("no such file"));
    }

    #[test]
    fn local_paths() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("m.bin");
        std::fs::write(&f, b"x").unwrap();
        assert_eq!(
            ModelSource::parse(f.to_str().unwrap()).unwrap(),
            ModelSource::Local(f.clone())
        );
        // A .gguf path that does not exist yet is Local; resolve reports it.
        let missing = dir.path().join("nope.gguf");
        let src = ModelSource::parse(missing.to_str().unwrap()).unwrap();
        assert_eq!(src, ModelSource::Local(missing.clone()));
        match resolve(
            &src,
            &HubOptions {
                offline: true,
                ..Default::default()
            },
        ) {
            Err(e @ ModelError::Io { .. }) => assert!(e.to_string().contains("nope.gguf"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(reason(dir.path().to_str().unwrap()).contains("directory"));
    }

    #[test]
    fn resolve_local_finds_tokenizer_files_beside() {
        let dir = tempfile::tempdir().unwrap();
        let gguf = dir.path().join("m.gguf");
        std::fs::write(&gguf, b"GGUF").unwrap();
        let r = resolve(&ModelSource::Local(gguf.clone()), &HubOptions::default()).unwrap();
        assert_eq!(
            r,
            ResolvedModel {
                gguf: gguf.clone(),
                gguf_parts: Vec::new(),
                tokenizer_json: None,
                tokenizer_config: None
            }
        );
        std::fs::write(dir.path().join("tokenizer.json"), b"{}").unwrap();
        std::fs::write(dir.path().join("tokenizer_config.json"), b"{}").unwrap();
        let r = resolve(&ModelSource::Local(gguf), &HubOptions::default()).unwrap();
        assert_eq!(r.tokenizer_json, Some(dir.path().join("tokenizer.json")));
        assert_eq!(r.tokenizer_config, Some(dir.path().join("tokenizer_config.json")));
        // A split model's first part brings its other parts, whose contents define it too.
        let first = dir.path().join("m-00001-of-00003.gguf");
        std::fs::write(&first, b"GGUF").unwrap();
        let r = resolve(&ModelSource::Local(first.clone()), &HubOptions::default()).unwrap();
        let parts = [2, 3].map(|i| dir.path().join(format!("m-0000{i}-of-00003.gguf")));
        assert_eq!(r.gguf_parts, parts);
        assert_eq!(r.files()[..3], [first, parts[0].clone(), parts[1].clone()]);
    }

    #[test]
    fn display_round_trips() {
        for spec in ["a/b:x.gguf", "a/b:dir/x.gguf@dev", "some/dir/x.gguf", "models/x.gguf"] {
            let parsed = ModelSource::parse(spec).unwrap();
            assert_eq!(parsed.to_string(), spec);
            assert_eq!(ModelSource::parse(&parsed.to_string()).unwrap(), parsed);
        }
        assert_eq!(hub("a/b", "x.gguf", "main").to_string(), "a/b:x.gguf");
    }

    #[test]
    fn repo_ids() {
        assert!(is_repo_id("bartowski/Llama-3.2-1B-Instruct-GGUF"));
        assert!(!is_repo_id("a/b/c"));
        assert!(!is_repo_id("./b"));
        assert!(!is_repo_id("C:\\models"));
        assert!(!is_repo_id("a b/c"));
        assert!(has_gguf_extension("x.GgUf") && !has_gguf_extension(".gguf") && !has_gguf_extension("gguf"));
    }
}
