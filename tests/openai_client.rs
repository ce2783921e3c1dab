//! The official `openai`, `anthropic` and `ollama` Python clients against `hearth --headless`. With
//! `openai`: a two-step tool call (whole and streamed), a JSON-schema reply and the same call
//! through the Responses API (`client.responses`, continued by `previous_response_id`); with
//! `anthropic`: the tool call through `/v1/messages` as a coding agent sends it (the history
//! resent, served from the cache), streamed through the SDK's helper, and `count_tokens`; and
//! `ollama`: the model routes, a chat whole and streamed, `raw` generate, a JSON Schema
//! `format`, a tool conversation as an agent on it sends one, and a 404 for an unknown model;
//! and `client.embeddings` (openai) and `embed`/`embeddings` (ollama) on a tiny embedding model
//! (base64, floats, `dimensions`). On a
//! tiny model with Qwen 2.5's template (the Hermes format) and on the real SmolLM2 and Gemma 3
//! models (whose templates know no tools: hearth describes them itself). The clients come from
//! `source .ci/python-client.sh` (`HEARTH_TEST_OPENAI`, one directory with all three); without it
//! the tests print `SKIPPED …` and pass. `.ci/run` always sets it.

mod common;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hearth::model::hparams::Family;
use hearth::model::testkit::{write_model, TinyModelSpec, WeightType};

/// `hearth --headless` on `model`, stopped when dropped.
struct Headless {
    child: Child,
    /// `http://ADDR/v1`.
    url: String,
    /// The id the server answers to.
    model: String,
    _dir: tempfile::TempDir,
}

impl Drop for Headless {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn headless(model: &Path) -> Headless {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("empty-config.toml");
    std::fs::write(&config, "").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .arg("--config")
        .arg(&config)
        .arg("--offline")
        .args(["--headless", "--port", "0", "--device", "cpu", "--kv-pool-mib", "64", "--host-cache-gib", "0", "--ctx-size", "2048"])
        .arg("--model")
        .arg(model)
        .env("HEARTH_DATA_DIR", dir.path().join("data"))
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HOME", dir.path().join("hf"))
        .env_remove("HEARTH_API_KEY")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("hearth: {line}");
            // "hearth: serving MODEL at http://ADDR/v1 (...)"
            if let Some((model, rest)) = line.strip_prefix("hearth: serving ").and_then(|l| l.split_once(" at http://")) {
                let _ = tx.send((model.to_string(), rest.split(' ').next().unwrap_or_default().to_string()));
            }
        }
    });
    let (model, url) = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok((model, u)) => (model, format!("http://{u}")),
        Err(e) => {
            let _ = child.kill();
            panic!("hearth --headless printed no URL: {e}");
        }
    };
    Headless {
        child,
        url,
        model,
        _dir: dir,
    }
}

/// Where the `openai` package is, or `None` (the test is skipped).
fn openai_client(test: &str) -> Option<PathBuf> {
    match std::env::var_os("HEARTH_TEST_OPENAI") {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            eprintln!("SKIPPED {test}: HEARTH_TEST_OPENAI is not set (`source .ci/python-client.sh` installs the client)");
            None
        }
    }
}

/// Runs the three chat client scripts against `server`; panics with the output of one that fails.
fn drive(client: &Path, server: &Headless) {
    for script in ["openai_tools.py", "anthropic_messages.py", "ollama_chat.py"] {
        run_script(client, server, script);
    }
}

fn run_script(client: &Path, server: &Headless, script: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients").join(script);
    let out = Command::new("python3")
        .arg(&script)
        .arg(&server.url)
        .arg(&server.model)
        .env("PYTHONPATH", client)
        .env("OPENAI_BASE_URL", &server.url)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{stdout}");
    assert!(out.status.success(), "{} failed:\n{stdout}\n{stderr}", script.display());
    assert!(stdout.trim_end().ends_with("ok"), "{stdout}");
}

#[test]
fn the_openai_client_calls_a_tool_on_a_tiny_model_with_qwens_template() {
    let Some(client) = openai_client("the_openai_client_calls_a_tool_on_a_tiny_model_with_qwens_template") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-qwen.gguf");
    let mut spec = TinyModelSpec::tiny(Family::Qwen2, WeightType::Q8_0);
    spec.context_length = 2048;
    let template = include_str!("../src/model/chat/fixtures/qwen2.5-instruct.jinja");
    for (k, v) in &mut spec.vocab.metadata {
        if k == "tokenizer.chat_template" {
            *v = candle_core::quantized::gguf_file::Value::String(template.to_owned());
        }
    }
    write_model(&spec, &path).unwrap();
    let server = headless(&path);
    drive(&client, &server);
}

#[test]
fn the_openai_client_embeds_on_a_tiny_embedding_model() {
    let Some(client) = openai_client("the_openai_client_embeds_on_a_tiny_embedding_model") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-embed.gguf");
    let mut spec = TinyModelSpec::embedding(3, WeightType::Q8_0);
    spec.context_length = 2048;
    write_model(&spec, &path).unwrap();
    let server = headless(&path);
    run_script(&client, &server, "openai_embeddings.py");
    run_script(&client, &server, "ollama_embed.py");
}

/// The client against the real model `file` (skipped without the client or the models).
fn on_real_model(test: &str, file: &str) {
    let Some(client) = openai_client(test) else {
        return;
    };
    let Some(model) = common::real::real_model(test, file) else {
        return;
    };
    let server = headless(&model);
    drive(&client, &server);
}

#[test]
fn the_openai_client_calls_a_tool_on_smollm2() {
    on_real_model("the_openai_client_calls_a_tool_on_smollm2", common::real::SMOLLM2);
}

#[test]
fn the_openai_client_calls_a_tool_on_gemma3() {
    on_real_model("the_openai_client_calls_a_tool_on_gemma3", common::real::GEMMA3);
}
