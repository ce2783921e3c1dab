//! Downloading from the hub, against [`FakeHub`] on 127.0.0.1 (never the network): the file
//! lands in the hub cache's layout and then resolves offline; progress is reported; a cancelled
//! download keeps its bytes and the next one resumes from there; the hub's errors read clearly.

use std::path::Path;
use std::time::Duration;

use hearth::model::source::{resolve, resolve_with, Cancel, DownloadProgress, HubOptions, ModelSource};
use hearth::model::testkit::FakeHub;
use hearth::model::ModelError;

const COMMIT: &str = "cccccccccccccccccccccccccccccccccccccccc";

fn online(cache: &Path, hub: &FakeHub) -> HubOptions {
    HubOptions {
        cache_dir: Some(cache.to_owned()),
        offline: false,
        endpoint: Some(hub.endpoint()),
    }
}

fn offline(cache: &Path) -> HubOptions {
    HubOptions {
        cache_dir: Some(cache.to_owned()),
        offline: true,
        endpoint: None,
    }
}

fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

/// Records what a download reports; cancels once `cancel_at` bytes are down.
#[derive(Default)]
struct Recorder {
    starts: Vec<(String, u64, u64)>,
    positions: Vec<u64>,
    finished: usize,
    cancel_at: Option<(u64, Cancel)>,
}

impl DownloadProgress for Recorder {
    fn start(&mut self, file: &str, done: u64, total: u64) {
        self.starts.push((file.to_owned(), done, total));
    }
    fn advance(&mut self, done: u64) {
        self.positions.push(done);
        if let Some((at, c)) = &self.cancel_at {
            if done >= *at {
                c.cancel();
            }
        }
    }
    fn finish(&mut self) {
        self.finished += 1;
    }
}

#[test]
fn download_lands_in_the_cache_and_then_resolves_offline() {
    let hub = FakeHub::start().unwrap();
    let model = bytes(3 << 20);
    hub.add("Owner/Repo", "main", COMMIT, "sub/m-Q8_0.gguf", model.clone());
    hub.add("Owner/Repo", "main", COMMIT, "tokenizer.json", b"{}".to_vec());
    let cache = tempfile::tempdir().unwrap();
    let source = ModelSource::parse("Owner/Repo:sub/m-Q8_0.gguf").unwrap();

    let mut rec = Recorder::default();
    let got = resolve_with(&source, &online(cache.path(), &hub), &mut rec, &Cancel::new()).unwrap();
    assert_eq!(std::fs::read(&got.gguf).unwrap(), model);
    let expected = cache
        .path()
        .join("models--Owner--Repo/snapshots")
        .join(COMMIT)
        .join("sub/m-Q8_0.gguf");
    assert_eq!(got.gguf, expected);
    assert!(got.tokenizer_json.is_some(), "the repo's tokenizer.json comes along");
    assert_eq!(got.tokenizer_config, None, "a file the repo lacks is not an error");
    assert_eq!(rec.starts[0], ("sub/m-Q8_0.gguf".into(), 0, model.len() as u64));
    assert!(rec.positions.windows(2).all(|w| w[0] <= w[1]), "progress only grows");
    assert_eq!(rec.positions.last(), Some(&(model.len() as u64)));
    assert_eq!(rec.finished, 1);
    #[cfg(unix)]
    assert!(
        std::fs::symlink_metadata(&expected).unwrap().file_type().is_symlink(),
        "snapshots link into blobs/, as huggingface_hub lays it out"
    );
    let blobs = std::fs::read_dir(cache.path().join("models--Owner--Repo/blobs"))
        .unwrap()
        .count();
    assert_eq!(blobs, 2, "two blobs, no part files left");

    // Now offline: found in the cache, no request made.
    let before = hub.requests().len();
    let again = resolve(&source, &offline(cache.path())).unwrap();
    assert_eq!(again, got);
    let again = resolve(&source, &online(cache.path(), &hub)).unwrap();
    assert_eq!(again.gguf, got.gguf);
    assert_eq!(hub.requests().len(), before, "a cached model never touches the network");
}

#[test]
fn cancelled_download_keeps_its_bytes_and_the_next_one_resumes() {
    let hub = FakeHub::start().unwrap();
    let model = bytes(2 << 20);
    hub.add("Owner/Repo", "main", COMMIT, "m.gguf", model.clone());
    hub.throttle(Some((64 << 10, Duration::from_millis(5))));
    let cache = tempfile::tempdir().unwrap();
    let source = ModelSource::parse("Owner/Repo:m.gguf").unwrap();
    let opts = online(cache.path(), &hub);

    let cancel = Cancel::new();
    let mut rec = Recorder {
        cancel_at: Some((512 << 10, cancel.clone())),
        ..Recorder::default()
    };
    let kept = match resolve_with(&source, &opts, &mut rec, &cancel) {
        Err(ModelError::Cancelled { spec, kept }) => {
            assert_eq!(spec, "Owner/Repo:m.gguf");
            kept
        }
        other => panic!("expected a cancelled download, got {other:?}"),
    };
    assert!(kept >= 512 << 10 && kept < model.len() as u64, "kept {kept}");
    assert_eq!(rec.finished, 0);
    let folder = cache.path().join("models--Owner--Repo");
    assert!(!folder.join("snapshots").exists(), "no snapshot names a partial file");
    assert!(
        resolve(&source, &offline(cache.path())).is_err(),
        "a partial download is never used"
    );

    // While another program holds the part file, a download refuses rather than interleave.
    let part = std::fs::read_dir(folder.join("blobs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "part"))
        .expect("the part file is kept");
    let other = std::fs::OpenOptions::new().append(true).open(&part).unwrap();
    other.lock().unwrap();
    let text = resolve(&source, &opts).unwrap_err().to_string();
    assert!(text.contains("being downloaded by another program"), "{text}");
    drop(other);

    hub.throttle(None);
    let mut rec = Recorder::default();
    let got = resolve_with(&source, &opts, &mut rec, &Cancel::new()).unwrap();
    assert_eq!(
        std::fs::read(&got.gguf).unwrap(),
        model,
        "resumed bytes match the original"
    );
    assert_eq!(
        rec.starts[0].1, kept,
        "the second download starts where the first stopped"
    );
    let resumed = hub
        .requests()
        .iter()
        .any(|r| r.range.as_deref() == Some(&format!("bytes={kept}-")));
    assert!(resumed, "asked only for the missing bytes: {:?}", hub.requests());
}

#[test]
fn hub_errors_read_clearly_and_leave_nothing_behind() {
    let hub = FakeHub::start().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let opts = online(cache.path(), &hub);

    let missing = resolve(&ModelSource::parse("Owner/Repo:nope.gguf").unwrap(), &opts).unwrap_err();
    let text = missing.to_string();
    assert!(text.contains("not found on the hub") && text.contains("404"), "{text}");

    hub.add("Owner/Gated", "main", COMMIT, "m.gguf", bytes(1000));
    hub.require_token(Some("secret"));
    let denied = resolve(&ModelSource::parse("Owner/Gated:m.gguf").unwrap(), &opts).unwrap_err();
    let text = denied.to_string();
    assert!(text.contains("access denied") && text.contains("HF_TOKEN"), "{text}");
    assert!(!cache.path().join("models--Owner--Gated/snapshots").exists());

    // Nothing listening: a transport error naming the address.
    let closed = HubOptions {
        endpoint: Some("http://127.0.0.1:9".into()),
        ..opts
    };
    let text = resolve(&ModelSource::parse("Owner/Repo:m.gguf").unwrap(), &closed)
        .unwrap_err()
        .to_string();
    assert!(text.contains("127.0.0.1:9"), "{text}");
}

#[test]
fn a_branch_with_slashes_gets_its_ref_and_resolves_offline_after() {
    let hub = FakeHub::start().unwrap();
    hub.add("Owner/Repo", "refs/pr/1", COMMIT, "m.gguf", bytes(4096));
    let cache = tempfile::tempdir().unwrap();
    let source = ModelSource::parse("Owner/Repo:m.gguf@refs/pr/1").unwrap();
    let got = resolve(&source, &online(cache.path(), &hub)).unwrap();
    let reference = cache.path().join("models--Owner--Repo/refs/refs/pr/1");
    assert_eq!(std::fs::read_to_string(reference).unwrap(), COMMIT);
    assert_eq!(resolve(&source, &offline(cache.path())).unwrap().gguf, got.gguf);
    assert!(hub.requests()[0].path.contains("refs%2Fpr%2F1"));
}

#[test]
fn a_gated_repo_downloads_with_the_token_huggingface_cli_login_saved() {
    let hub = FakeHub::start().unwrap();
    hub.add("Owner/Gated", "main", COMMIT, "m.gguf", bytes(5000));
    hub.require_token(Some("hf_secret"));
    // `$HF_HOME/hub` is the cache; `$HF_HOME/token` the saved login.
    let home = tempfile::tempdir().unwrap();
    let cache = home.path().join("hub");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::write(home.path().join("token"), "hf_secret\n").unwrap();
    let got = resolve(
        &ModelSource::parse("Owner/Gated:m.gguf").unwrap(),
        &online(&cache, &hub),
    )
    .unwrap();
    assert_eq!(std::fs::read(got.gguf).unwrap(), bytes(5000));
    assert!(hub
        .requests()
        .iter()
        .all(|r| r.authorization.as_deref() == Some("Bearer hf_secret")));
}

/// A split model named by its first part downloads every part (each with its own progress),
/// resolves with them in order, and then resolves offline; a part the repo lacks is named.
#[test]
fn a_split_models_first_part_brings_every_part() {
    let hub = FakeHub::start().unwrap();
    let parts: Vec<Vec<u8>> = (1..=3).map(|i| bytes(i << 16)).collect();
    for (i, p) in parts.iter().enumerate() {
        hub.add("Owner/Big", "main", COMMIT, &format!("Q4_K_M/big-0000{}-of-00003.gguf", i + 1), p.clone());
    }
    let cache = tempfile::tempdir().unwrap();
    let source = ModelSource::parse("Owner/Big:Q4_K_M/big-00001-of-00003.gguf").unwrap();
    let mut rec = Recorder::default();
    let got = resolve_with(&source, &online(cache.path(), &hub), &mut rec, &Cancel::new()).unwrap();
    assert_eq!(std::fs::read(&got.gguf).unwrap(), parts[0]);
    assert_eq!(got.gguf_parts.len(), 2);
    for (path, want) in got.gguf_parts.iter().zip(&parts[1..]) {
        assert_eq!(&std::fs::read(path).unwrap(), want);
        assert_eq!(path.parent(), got.gguf.parent(), "the parts lie beside the first");
    }
    let started: Vec<&str> = rec.starts.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(started, ["Q4_K_M/big-00001-of-00003.gguf", "Q4_K_M/big-00002-of-00003.gguf", "Q4_K_M/big-00003-of-00003.gguf"]);
    assert_eq!(rec.finished, 3);
    assert_eq!(resolve(&source, &offline(cache.path())).unwrap(), got);

    // A repo missing its last part: the error names it, after the others are down.
    hub.add("Owner/Torn", "main", COMMIT, "t-00001-of-00002.gguf", parts[0].clone());
    let torn = ModelSource::parse("Owner/Torn:t-00001-of-00002.gguf").unwrap();
    match resolve(&torn, &online(cache.path(), &hub)) {
        Err(e @ ModelError::Hub { .. }) => assert!(e.to_string().contains("t-00002-of-00002.gguf"), "{e}"),
        other => panic!("{other:?}"),
    }
}
