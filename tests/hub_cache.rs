//! `resolve` against a directory laid out like the Hugging Face hub cache.
//! Every test runs with `offline: true` and an explicit `cache_dir`, so none
//! can reach the network or read the user's real cache.

use std::path::{Path, PathBuf};

use hearth::model::source::{resolve, HubOptions, ModelSource};
use hearth::model::ModelError;

const MAIN_HASH: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const V1_HASH: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/// Writes `models--Owner--Repo` into `cache` the way hf-hub/huggingface_hub
/// do: `refs/<rev>` holds the commit, `snapshots/<commit>/<file>` is a link to
/// `blobs/<etag>` (a plain copy where links are unavailable).
fn add_file(cache: &Path, repo: &str, revision: &str, commit: &str, file: &str, bytes: &[u8]) -> PathBuf {
    let folder = cache.join(format!("models--{}", repo.replace('/', "--")));
    let refs = folder.join("refs");
    std::fs::create_dir_all(&refs).unwrap();
    std::fs::write(refs.join(revision), commit).unwrap();

    let blobs = folder.join("blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    let blob = blobs.join(format!("etag-{}-{}", commit, file.replace('/', "_")));
    std::fs::write(&blob, bytes).unwrap();

    let snapshot = folder.join("snapshots").join(commit).join(file);
    std::fs::create_dir_all(snapshot.parent().unwrap()).unwrap();
    link_or_copy(&blob, &snapshot);
    snapshot
}

#[cfg(unix)]
fn link_or_copy(blob: &Path, snapshot: &Path) {
    std::os::unix::fs::symlink(blob, snapshot).unwrap();
}

#[cfg(not(unix))]
fn link_or_copy(blob: &Path, snapshot: &Path) {
    std::fs::copy(blob, snapshot).unwrap();
}

fn offline(cache: &Path) -> HubOptions {
    HubOptions {
        cache_dir: Some(cache.to_owned()),
        offline: true,
        endpoint: None,
    }
}

fn hub(spec: &str) -> ModelSource {
    ModelSource::parse(spec).unwrap()
}

#[test]
fn cached_file_resolves_to_its_snapshot_path() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = add_file(
        tmp.path(),
        "Owner/Repo",
        "main",
        MAIN_HASH,
        "model-Q4_K_M.gguf",
        b"GGUF....",
    );

    let resolved = resolve(&hub("Owner/Repo:model-Q4_K_M.gguf"), &offline(tmp.path())).unwrap();
    assert_eq!(resolved.gguf, gguf);
    assert_eq!(std::fs::read(&resolved.gguf).unwrap(), b"GGUF....");
    assert_eq!(resolved.tokenizer_json, None);
    assert_eq!(resolved.tokenizer_config, None);
}

#[test]
fn cached_tokenizer_files_of_the_same_revision_are_found() {
    let tmp = tempfile::tempdir().unwrap();
    add_file(tmp.path(), "Owner/Repo", "main", MAIN_HASH, "m.gguf", b"GGUF");
    let tok = add_file(tmp.path(), "Owner/Repo", "main", MAIN_HASH, "tokenizer.json", b"{}");
    let cfg = add_file(
        tmp.path(),
        "Owner/Repo",
        "main",
        MAIN_HASH,
        "tokenizer_config.json",
        b"{}",
    );

    let resolved = resolve(&hub("Owner/Repo:m.gguf"), &offline(tmp.path())).unwrap();
    assert_eq!(resolved.tokenizer_json, Some(tok));
    assert_eq!(resolved.tokenizer_config, Some(cfg));
}

#[test]
fn files_in_subfolders_of_the_repo() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = add_file(tmp.path(), "Owner/Repo", "main", MAIN_HASH, "Q8_0/m-Q8_0.gguf", b"GGUF");
    let resolved = resolve(&hub("Owner/Repo:Q8_0/m-Q8_0.gguf"), &offline(tmp.path())).unwrap();
    assert_eq!(resolved.gguf, gguf);
}

#[test]
fn revision_resolves_through_its_ref() {
    let tmp = tempfile::tempdir().unwrap();
    let on_main = add_file(tmp.path(), "Owner/Repo", "main", MAIN_HASH, "m.gguf", b"main");
    let on_v1 = add_file(tmp.path(), "Owner/Repo", "v1", V1_HASH, "m.gguf", b"v1");

    let opts = offline(tmp.path());
    assert_eq!(resolve(&hub("Owner/Repo:m.gguf@v1"), &opts).unwrap().gguf, on_v1);
    assert_eq!(resolve(&hub("Owner/Repo:m.gguf@main"), &opts).unwrap().gguf, on_main);
    assert_eq!(resolve(&hub("Owner/Repo:m.gguf"), &opts).unwrap().gguf, on_main);
    // A commit hash as the revision needs no ref.
    assert_eq!(
        resolve(&hub(&format!("Owner/Repo:m.gguf@{V1_HASH}")), &opts)
            .unwrap()
            .gguf,
        on_v1
    );
}

#[test]
fn ref_with_trailing_newline_still_resolves() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = add_file(tmp.path(), "Owner/Repo", "main", MAIN_HASH, "m.gguf", b"GGUF");
    let refs = tmp.path().join("models--Owner--Repo").join("refs").join("main");
    std::fs::write(&refs, format!("{MAIN_HASH}\n")).unwrap();
    assert_eq!(
        resolve(&hub("Owner/Repo:m.gguf"), &offline(tmp.path())).unwrap().gguf,
        gguf
    );
}

#[test]
fn missing_file_offline_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    add_file(tmp.path(), "Owner/Repo", "main", MAIN_HASH, "m.gguf", b"GGUF");

    let started = std::time::Instant::now();
    for spec in ["Owner/Repo:other.gguf", "Owner/Repo:m.gguf@v2", "Someone/Else:m.gguf"] {
        let err = resolve(&hub(spec), &offline(tmp.path())).unwrap_err();
        match &err {
            ModelError::Hub { spec: s, reason } => {
                assert_eq!(s, spec);
                assert!(reason.contains("not in the hub cache"), "{reason}");
                assert!(reason.contains(&tmp.path().display().to_string()), "{reason}");
                assert!(reason.contains("offline"), "{reason}");
            }
            other => panic!("{spec}: unexpected error {other:?}"),
        }
        assert!(err.to_string().contains(spec), "{err}");
    }
    // No network attempt, so no timeout to wait for.
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn dangling_snapshot_link_counts_as_missing() {
    let tmp = tempfile::tempdir().unwrap();
    add_file(tmp.path(), "Owner/Repo", "main", MAIN_HASH, "m.gguf", b"GGUF");
    let blobs = tmp.path().join("models--Owner--Repo").join("blobs");
    for blob in std::fs::read_dir(&blobs).unwrap() {
        std::fs::remove_file(blob.unwrap().path()).unwrap();
    }
    if cfg!(unix) {
        assert!(matches!(
            resolve(&hub("Owner/Repo:m.gguf"), &offline(tmp.path())),
            Err(ModelError::Hub { .. })
        ));
    }
}

#[test]
fn parse_cases() {
    assert_eq!(
        hub("Owner/Repo:m.gguf"),
        ModelSource::Hub {
            repo: "Owner/Repo".into(),
            file: "m.gguf".into(),
            revision: "main".into()
        }
    );
    assert_eq!(
        hub("Owner/Repo:m.gguf@v1"),
        ModelSource::Hub {
            repo: "Owner/Repo".into(),
            file: "m.gguf".into(),
            revision: "v1".into()
        }
    );
    match ModelSource::parse("Owner/Repo") {
        Err(ModelError::BadSource { spec, reason }) => {
            assert_eq!(spec, "Owner/Repo");
            assert!(reason.contains("Owner/Repo:<file>.gguf"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        ModelSource::parse("not-a-file"),
        Err(ModelError::BadSource { .. })
    ));

    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("x.gguf");
    std::fs::write(&local, b"GGUF").unwrap();
    assert_eq!(
        ModelSource::parse(local.to_str().unwrap()).unwrap(),
        ModelSource::Local(local.clone())
    );
    let resolved = resolve(&ModelSource::Local(local.clone()), &offline(tmp.path())).unwrap();
    assert_eq!(resolved.gguf, local);

    // A missing local path parses (it looks like a path) but does not resolve.
    let missing = tmp.path().join("missing.gguf");
    let source = ModelSource::parse(missing.to_str().unwrap()).unwrap();
    let err = resolve(&source, &offline(tmp.path())).unwrap_err();
    assert!(matches!(err, ModelError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("missing.gguf"), "{err}");
}
