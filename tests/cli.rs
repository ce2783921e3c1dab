//! The `hearth` binary end to end on tiny models: streaming `run`, `tokenize`,
//! and one-line errors with a non-zero exit for bad input.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use hearth::model::hparams::Family;
use hearth::model::testkit::{TinyModelSpec, WeightType};

/// An empty config file in `dir` (a file named with `--config` must exist).
fn empty_config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("empty-config.toml");
    std::fs::write(&path, "").unwrap();
    path
}

fn hearth(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        // Isolated config and data: never the user's, never the network.
        .arg("--config")
        .arg(empty_config(dir))
        .arg("--offline")
        .env("HEARTH_DATA_DIR", dir.join("data"))
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HOME", dir.join("hf"))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_one_line_error(o: &Output, needle: &str) {
    assert!(
        !o.status.success(),
        "expected failure, got success; stderr: {}",
        stderr(o)
    );
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr, got: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(lines[0].contains(needle), "expected {needle:?} in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn run_streams_the_greedy_completion_and_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::tiny(Family::Qwen2, WeightType::Q8_0);
    let model = common::write_tiny(dir.path(), &spec, "m.gguf");
    let m = model.to_str().unwrap();
    let args = [
        "run",
        "--model",
        m,
        "--prompt",
        "Hello world",
        "--max-tokens",
        "12",
        "--temperature",
        "0",
    ];
    let a = hearth(dir.path(), &args);
    assert!(a.status.success(), "{}", stderr(&a));
    let b = hearth(dir.path(), &args);
    assert_eq!(a.stdout, b.stdout, "greedy runs differ");
    let text = String::from_utf8(a.stdout).unwrap();
    assert!(text.ends_with('\n'));
    assert!(!text.trim_end_matches('\n').is_empty(), "no completion text");

    // The completion is the model's greedy continuation, decoded.
    let mut engine = common::engine(&model, true, 64, 16);
    let ids = engine.model().prompt_ids("Hello world", false).unwrap();
    let report = engine.generate(&ids, &common::greedy(12), |_| Ok(())).unwrap();
    assert_eq!(text.trim_end_matches('\n'), report.text);

    // --chat goes through the template and still succeeds.
    let c = hearth(
        dir.path(),
        &[
            "run",
            "--model",
            m,
            "--prompt",
            "Hi",
            "--max-tokens",
            "4",
            "--chat",
            "--seed",
            "3",
        ],
    );
    assert!(c.status.success(), "{}", stderr(&c));
}

/// `run --chat` on a model whose prompt opens its reasoning (as QwQ's template does): the
/// reasoning streams to stderr and stdout gets only the answer (none here: the tiny model never
/// closes it); without `--chat` there is no template and all of the reply goes to stdout.
#[test]
fn run_chat_sends_a_thinking_models_reasoning_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = TinyModelSpec::tiny(Family::Qwen2, WeightType::Q8_0);
    let template = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>' }}{% endif %}";
    for (k, v) in &mut spec.vocab.metadata {
        if k == "tokenizer.chat_template" {
            *v = candle_core::quantized::gguf_file::Value::String(template.to_owned());
        }
    }
    let model = common::write_tiny(dir.path(), &spec, "m.gguf");
    let m = model.to_str().unwrap();
    let o = hearth(
        dir.path(),
        &["run", "--model", m, "--prompt", "Why?", "--max-tokens", "8", "--temperature", "0", "--chat"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "\n", "no answer on stdout");
    let mut engine = common::engine(&model, true, 64, 16);
    let ids = engine.model().prompt_ids("Why?", true).unwrap();
    let report = engine.generate(&ids, &common::greedy(8), |_| Ok(())).unwrap();
    let reasoning = report.text.trim();
    assert!(!reasoning.is_empty() && !reasoning.contains("</think>"), "{report:?}");
    assert!(stderr(&o).contains(reasoning), "{reasoning:?} in {}", stderr(&o));
}

#[test]
fn tokenize_prints_ids_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0);
    let model = common::write_tiny(dir.path(), &spec, "m.gguf");
    let m = model.to_str().unwrap();
    let o = hearth(dir.path(), &["tokenize", "--model", m, "--text", "Hello, world 123"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let ids: Vec<u32> = serde_json::from_slice(&o.stdout).unwrap();
    assert!(!ids.is_empty());

    let jsonl = dir.path().join("in.jsonl");
    std::fs::write(&jsonl, "{\"text\": \"Hello, world 123\"}\n{\"text\": \"a\"}\n").unwrap();
    let o = hearth(
        dir.path(),
        &["tokenize", "--model", m, "--jsonl", jsonl.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<Vec<u32>> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0], ids);

    std::fs::write(&jsonl, "{\"txt\": 1}\n").unwrap();
    let o = hearth(
        dir.path(),
        &["tokenize", "--model", m, "--jsonl", jsonl.to_str().unwrap()],
    );
    assert_one_line_error(&o, "line 1");
}

/// A vocab-only GGUF (no tensors, its data section not padded, like llama.cpp's
/// `models/ggml-vocab-*.gguf`) opens for `hearth tokenize`.
#[test]
fn tokenize_reads_a_vocab_only_gguf() {
    use candle_core::quantized::gguf_file::{self, Value};
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0);
    let model = common::write_tiny(dir.path(), &spec, "m.gguf");
    let mut md: Vec<(String, Value)> = spec.vocab.metadata.clone();
    md.push(("general.architecture".into(), Value::String("llama".into())));
    // Last, so the file ends in its text and trailing zeros are only padding.
    md.push(("general.name".into(), Value::String("vocab-only".into())));
    let mut bytes = Vec::new();
    let refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut std::io::Cursor::new(&mut bytes), &refs, &[]).unwrap();
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    let vocab = dir.path().join("ggml-vocab-tiny.gguf");
    std::fs::write(&vocab, &bytes).unwrap();
    let text = "Hello, world 123";
    let o = hearth(
        dir.path(),
        &["tokenize", "--model", vocab.to_str().unwrap(), "--text", text],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let full = hearth(
        dir.path(),
        &["tokenize", "--model", model.to_str().unwrap(), "--text", text],
    );
    assert_eq!(o.stdout, full.stdout, "the same vocabulary tokenizes the same");
}

#[test]
fn bad_input_gives_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    let o = hearth(
        d,
        &[
            "run",
            "--model",
            d.join("missing.gguf").to_str().unwrap(),
            "--prompt",
            "x",
        ],
    );
    assert_one_line_error(&o, "missing.gguf");

    let not_gguf = d.join("notes.gguf");
    std::fs::write(&not_gguf, b"this is not a model file at all").unwrap();
    let o = hearth(d, &["run", "--model", not_gguf.to_str().unwrap(), "--prompt", "x"]);
    assert_one_line_error(&o, "not a GGUF file");

    let spec = TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0);
    let good = common::write_tiny(d, &spec, "good.gguf");
    let bytes = std::fs::read(&good).unwrap();
    let truncated = d.join("truncated.gguf");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let o = hearth(d, &["run", "--model", truncated.to_str().unwrap(), "--prompt", "x"]);
    assert_one_line_error(&o, "truncated");
    let header_cut = d.join("header-cut.gguf");
    std::fs::write(&header_cut, &bytes[..200]).unwrap();
    let o = hearth(d, &["run", "--model", header_cut.to_str().unwrap(), "--prompt", "x"]);
    assert_one_line_error(&o, "damaged GGUF");

    // Same file with another architecture name: candle's writer lets us
    // rewrite the metadata.
    let foreign = d.join("foreign.gguf");
    rewrite_arch(&good, &foreign, "mamba");
    let o = hearth(d, &["run", "--model", foreign.to_str().unwrap(), "--prompt", "x"]);
    assert_one_line_error(
        &o,
        "unsupported architecture \"mamba\"; hearth supports: llama, qwen2, qwen3",
    );

    let long = "word ".repeat(600);
    let o = hearth(d, &["run", "--model", good.to_str().unwrap(), "--prompt", &long]);
    assert_one_line_error(&o, "context holds 512");

    let o = hearth(
        d,
        &[
            "run",
            "--model",
            good.to_str().unwrap(),
            "--prompt",
            "x",
            "--top-p",
            "7",
        ],
    );
    assert_one_line_error(&o, "top_p");
}

fn rewrite_arch(src: &Path, dst: &Path, arch: &str) {
    use candle_core::quantized::gguf_file::{self, Value};
    let mut r = std::fs::File::open(src).unwrap();
    let c = gguf_file::Content::read(&mut r).unwrap();
    let mut md: Vec<(String, Value)> = c.metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    for (k, v) in md.iter_mut() {
        if k == "general.architecture" {
            *v = Value::String(arch.into());
        }
    }
    let tensors: Vec<(String, candle_core::quantized::QTensor)> = c
        .tensor_infos
        .keys()
        .map(|n| (n.clone(), c.tensor(&mut r, n, &candle_core::Device::Cpu).unwrap()))
        .collect();
    let mut w = std::fs::File::create(dst).unwrap();
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &candle_core::quantized::QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    gguf_file::write(&mut w, &md_refs, &t_refs).unwrap();
}

#[test]
fn tokenizer_json_beside_the_model_is_used_and_agrees_with_gguf_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let spec = TinyModelSpec::tiny(Family::Qwen2, WeightType::Q8_0);
    let text = "Héllo wörld 2024 <|im_start|>  tabs\tand 日本語 🙂";
    let with_json = d.join("with");
    let bare = d.join("bare");
    std::fs::create_dir_all(&with_json).unwrap();
    std::fs::create_dir_all(&bare).unwrap();
    let m1 = common::write_tiny(&with_json, &spec, "m.gguf");
    let m2 = common::write_tiny(&bare, &spec, "m.gguf");
    spec.vocab.write_tokenizer_json(&with_json).unwrap();
    let resolved = hearth::model::source::resolve(
        &hearth::model::source::ModelSource::Local(m1.clone()),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(resolved.tokenizer_json, Some(with_json.join("tokenizer.json")));
    let a = hearth(d, &["tokenize", "--model", m1.to_str().unwrap(), "--text", text]);
    let b = hearth(d, &["tokenize", "--model", m2.to_str().unwrap(), "--text", text]);
    assert!(
        a.status.success() && b.status.success(),
        "{} {}",
        stderr(&a),
        stderr(&b)
    );
    assert_eq!(a.stdout, b.stdout);

    // A different tokenizer.json beside the model changes the ids: the file
    // is what `tokenize` used.
    let other = hearth::model::testkit::TinyVocab::new(hearth::model::testkit::VocabStyle::Gpt2 { pre: "gpt-2" });
    other.write_tokenizer_json(&with_json).unwrap();
    let c = hearth(d, &["tokenize", "--model", m1.to_str().unwrap(), "--text", text]);
    assert!(c.status.success(), "{}", stderr(&c));
    assert_ne!(c.stdout, b.stdout);
}

#[test]
fn several_prompts_share_the_cache_and_report_hits_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0);
    let model = common::write_tiny(dir.path(), &spec, "m.gguf");
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(6);
    let file = dir.path().join("p.txt");
    std::fs::write(&file, format!("{long}And then?")).unwrap();
    let m = model.to_str().unwrap();
    let o = hearth(
        dir.path(),
        &[
            "run",
            "--model",
            m,
            "--temperature",
            "0",
            "-n",
            "6",
            "--prompt",
            &long,
            "--prompt",
            &long,
            "--prompt-file",
            file.to_str().unwrap(),
            "--block-size",
            "8",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout.clone()).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out:?}");
    assert_eq!(lines[0], lines[1], "the cached run differs from the cold one");
    let err = stderr(&o);
    let reports: Vec<&str> = err.lines().filter(|l| l.starts_with("prompt ")).collect();
    assert_eq!(reports.len(), 3, "{err}");
    assert!(reports[0].contains(" 0 cached"), "{}", reports[0]);
    let cached = |l: &str| -> usize {
        let after = l.split(" tokens, ").nth(1).unwrap();
        after.split(' ').next().unwrap().parse().unwrap()
    };
    assert!(cached(reports[1]) > 0, "{}", reports[1]);
    assert!(reports[1].contains("host 0"), "{}", reports[1]);
    assert!(cached(reports[2]) >= 8, "shared prefix not reused: {}", reports[2]);

    let o = hearth(
        dir.path(),
        &[
            "run",
            "--model",
            m,
            "--prompt",
            "x",
            "--prompt-file",
            "/nonexistent/p.txt",
        ],
    );
    assert_one_line_error(&o, "/nonexistent/p.txt");
}

#[test]
fn a_conversation_survives_a_restart_and_hearth_cache_lists_verifies_and_prunes() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0);
    let model = common::write_tiny(dir.path(), &spec, "m.gguf");
    let m = model.to_str().unwrap();
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(8);
    let turn = |text: &str| {
        let o = hearth(
            dir.path(),
            &[
                "run",
                "--model",
                m,
                "--temperature",
                "0",
                "-n",
                "6",
                "--conversation",
                "c1",
                "--prompt",
                text,
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        stderr(&o)
    };
    let disk = |report: &str| -> usize {
        let line = report.lines().find(|l| l.starts_with("prompt 1:")).unwrap();
        line.split("of which disk ")
            .nth(1)
            .unwrap()
            .split(')')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let first = turn(&long);
    assert_eq!(disk(&first), 0, "{first}");
    // A new process: the history comes from the cache file.
    let second = turn("And then?");
    assert!(disk(&second) >= 64, "{second}");
    let conv: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("data/conversations/c1.json")).unwrap()).unwrap();
    assert_eq!(conv["messages"].as_array().unwrap().len(), 4, "{conv}");

    let cache = |args: &[&str]| {
        let mut a = vec!["cache", "--model", m];
        a.extend_from_slice(args);
        hearth(dir.path(), &a)
    };
    let o = cache(&["list", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let list: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["conversation"], "c1");
    assert_eq!(list[0]["status"], "usable");
    // A temp file a killed writer left (its process is gone): counted by list, deleted by prune.
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let leftover = dir
        .path()
        .join(format!("data/cache/.c9.hkv.tmp-{dead}-00000000000000aa"));
    std::fs::write(&leftover, vec![7u8; 4096]).unwrap();
    let o = cache(&["list"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("c1") && out.contains(" ok "), "{out}");
    assert!(out.contains("1 temp files of unfinished writes"), "{out}");
    let o = cache(&["verify"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));

    // Damage one block: verify names it and fails.
    let file = dir.path().join("data/cache/c1.hkv");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 10;
    bytes[last] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    let o = cache(&["verify"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !o.status.success() && out.contains("DAMAGED") && out.contains("checksum"),
        "{out}"
    );

    // Another model sees the file as foreign; prune --foreign deletes it, keeping the text.
    let other = common::write_tiny(
        dir.path(),
        &TinyModelSpec::tiny(Family::Qwen2, WeightType::Q8_0),
        "o.gguf",
    );
    let o = hearth(dir.path(), &["cache", "--model", other.to_str().unwrap(), "list"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("other model"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = hearth(
        dir.path(),
        &[
            "cache",
            "--model",
            other.to_str().unwrap(),
            "prune",
            "--foreign",
            "--dry-run",
        ],
    );
    assert!(o.status.success() && file.exists(), "{}", stderr(&o));
    let o = cache(&["prune", "--to-gib", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!file.exists());
    if Path::new("/proc").is_dir() {
        assert!(!leftover.exists(), "{}", String::from_utf8_lossy(&o.stdout));
    }
    assert!(
        dir.path().join("data/conversations/c1.json").exists(),
        "the text is never pruned"
    );
    // The conversation goes on without its cache file.
    let third = turn("More?");
    assert_eq!(disk(&third), 0, "{third}");
    assert!(file.exists());
}

#[test]
fn a_hub_model_downloads_once_and_then_runs_offline() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0);
    let model = common::write_tiny(dir.path(), &spec, "m.gguf");
    let hub = hearth::model::testkit::FakeHub::start().unwrap();
    let commit = "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee";
    hub.add(
        "Owner/Tiny",
        "main",
        commit,
        "tiny-Q8_0.gguf",
        std::fs::read(&model).unwrap(),
    );
    let run = |offline: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hearth"));
        c.args([
            "run",
            "--model",
            "Owner/Tiny:tiny-Q8_0.gguf",
            "--prompt",
            "Hello",
            "--max-tokens",
            "6",
            "--temperature",
            "0",
        ])
        .arg("--config")
        .arg(empty_config(dir.path()))
        .env("HEARTH_DATA_DIR", dir.path().join("data"))
        .env("HF_HOME", dir.path().join("hf"))
        .env("HF_ENDPOINT", hub.endpoint())
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_HUB_CACHE")
        .env("RUST_LOG", "warn");
        if offline {
            c.arg("--offline");
        }
        c.output().unwrap()
    };
    let first = run(false);
    assert!(first.status.success(), "{}", stderr(&first));
    let blob = dir
        .path()
        .join("hf/hub/models--Owner--Tiny/snapshots")
        .join(commit)
        .join("tiny-Q8_0.gguf");
    assert_eq!(std::fs::read(&blob).unwrap(), std::fs::read(&model).unwrap());
    let seen = hub.requests().len();
    let second = run(true);
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(
        first.stdout, second.stdout,
        "the cached model gives the same greedy text"
    );
    assert_eq!(hub.requests().len(), seen, "offline: no request");
}

/// Issue 19's command-line cases: each is one `error:` line naming the value or the file, exit
/// status 1, and endless inputs (`/dev/zero`) fail at once instead of filling memory.
#[test]
fn hostile_command_lines_fail_with_one_line_and_status_1() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let spec = TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0);
    let model = common::write_tiny(d, &spec, "tiny.gguf");
    let m = model.to_str().unwrap();
    let status1 = |o: &Output, needle: &str| {
        assert_one_line_error(o, needle);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(o));
    };
    // Bad flag values: clap's complaint, on one line, exit 1 (not clap's 2 with usage).
    status1(&hearth(d, &["--port", "99999", "--headless"]), "99999");
    status1(&hearth(d, &["--port", "abc", "--headless"]), "abc");
    status1(&hearth(d, &["run", "--model", m, "--prompt", "x", "--seed=-1"]), "-1");
    status1(
        &hearth(
            d,
            &[
                "run",
                "--model",
                m,
                "--prompt",
                "x",
                "--max-tokens",
                "99999999999999999999",
            ],
        ),
        "99999999999999999999",
    );
    // A negative number is a value, refused by the settings with the reason.
    status1(
        &hearth(d, &["run", "--model", m, "--prompt", "x", "--temperature", "-1"]),
        "temperature",
    );
    status1(
        &hearth(d, &["run", "--model", m, "--prompt", "x", "--max-queued", "0"]),
        "engine.max_queued",
    );
    // A config file named on the command line must exist and be of a config file's size.
    let missing = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args([
            "--config",
            d.join("nope.toml").to_str().unwrap(),
            "tokenize",
            "--model",
            m,
            "--text",
            "a",
        ])
        .env("HEARTH_DATA_DIR", d.join("data"))
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    status1(&missing, "nope.toml");
    if Path::new("/dev/zero").exists() {
        let zero = Command::new(env!("CARGO_BIN_EXE_hearth"))
            .args(["--config", "/dev/zero", "tokenize", "--model", m, "--text", "a"])
            .env("HEARTH_DATA_DIR", d.join("data"))
            .output()
            .unwrap();
        status1(&zero, "/dev/zero");
        status1(
            &hearth(d, &["run", "--model", m, "--prompt-file", "/dev/zero"]),
            "prompt file /dev/zero is larger than",
        );
        status1(
            &hearth(d, &["tokenize", "--model", m, "--jsonl", "/dev/zero"]),
            "longer than",
        );
    }
}

/// `hearth bench gpu` on the CPU refuses at once, before writing its 1B benchmark model; a
/// decode bench of zero sequences is refused too.
#[test]
fn bench_gpu_without_a_gpu_says_so_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = hearth(d, &["--device", "cpu", "bench", "gpu"]);
    assert_one_line_error(&o, "CUDA");
    assert!(!d.join("data").join("bench").exists(), "nothing written");
    let o = hearth(d, &["bench", "decode", "--batch", "0"]);
    assert_one_line_error(&o, "--batch");
}

/// `hearth bench agent` runs its four loops end to end (here two short turns on a tiny model)
/// and reports each turn; the second turn of a cached run is served from the cache.
#[test]
fn bench_agent_runs_both_apis_with_caching_on_and_off() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut spec = TinyModelSpec::tiny(Family::Qwen2, WeightType::Q8_0);
    spec.context_length = 2048;
    let model = common::write_tiny(d, &spec, "m.gguf");
    let json = d.join("agent.json");
    let args = [
        "--device", "cpu", "bench", "agent", "--gguf", model.to_str().unwrap(), "--turns", "2", "--system-tokens", "64",
        "--result-tokens", "16", "--reply-tokens", "2", "--json", json.to_str().unwrap(),
    ];
    let o = hearth(d, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4, "{report}");
    for run in runs {
        let turns = run["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 2, "{run}");
        let second = &turns[1];
        let (prompt, cached) = (second["prompt_tokens"].as_u64().unwrap(), second["cached_tokens"].as_u64().unwrap());
        assert!(prompt > turns[0]["prompt_tokens"].as_u64().unwrap(), "the history grows: {run}");
        if run["prefix_caching"] == true {
            assert!(cached >= 64, "the system prompt at least: {run}");
        } else {
            assert_eq!(cached, 0, "{run}");
        }
    }
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("| messages | on |") && out.contains("| responses | off |"), "{out}");
}

/// `hearth cache verify` without a model on this machine checks the files offline: it never
/// tries the hub (here an address that refuses connections).
#[test]
fn cache_verify_never_downloads_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args([
            "--config",
            empty_config(dir.path()).to_str().unwrap(),
            "cache",
            "verify",
        ])
        .env("HEARTH_DATA_DIR", dir.path().join("data"))
        .env("HF_HOME", dir.path().join("hf"))
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("not on this machine"), "{err}");
    assert!(
        !err.contains("127.0.0.1:9") && !err.to_lowercase().contains("connect"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("0 files checked"));
}
