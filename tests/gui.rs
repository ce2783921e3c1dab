//! The desktop app with the real engine on a tiny model, driven through egui_kittest: widgets
//! are found by role and label, as a screen reader would.
#![cfg(feature = "gui")]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use egui::accesskit::Role;
use egui_kittest::kittest::{NodeT, Queryable};
use egui_kittest::Harness;

use common::*;
use hearth::config::EngineSettings;
use hearth::engine::{DiskSettings, EngineHandle, GenerateParams};
use hearth::gui::HearthApp;
use hearth::model::hparams::Family;
use hearth::model::testkit::{TinyModelSpec, WeightType};

struct Fixture {
    _dir: tempfile::TempDir,
    model: PathBuf,
    data: PathBuf,
}

fn fixture() -> Fixture {
    fixture_of(&TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0))
}

fn fixture_of(spec: &TinyModelSpec) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let model = write_tiny(dir.path(), spec, "m.gguf");
    let data = dir.path().join("data");
    Fixture { _dir: dir, model, data }
}

fn handle(model: &Path, data: &Path, limits: EngineSettings) -> EngineHandle {
    let e = engine_limits(model, cache_settings(true, 16), &limits, 128, 64)
        .with_disk(&DiskSettings::new(data, 1 << 30))
        .unwrap();
    EngineHandle::spawn(e, 16).unwrap()
}

/// Greedy replies of exactly 8 tokens (a random model may end its turn at once).
fn defaults() -> GenerateParams {
    GenerateParams {
        ignore_eos: true,
        ..GenerateParams::greedy(8)
    }
}

/// The app in a harness. Replies of the tiny model are arbitrary tokens (some outside the
/// default fonts, such as CJK brackets), drawn as boxes as the app does for any model; the
/// app's own strings are checked for missing glyphs where no reply is shown.
fn harness(engine: EngineHandle) -> Harness<'static, HearthApp> {
    harness_with(engine, true)
}

fn harness_with(engine: EngineHandle, replies: bool) -> Harness<'static, HearthApp> {
    let b = Harness::builder().with_size(egui::vec2(1200.0, 800.0));
    let b = if replies { b.allow_missing_glyphs() } else { b };
    b.build_eframe(move |cc| HearthApp::with_engine(&cc.egui_ctx, engine, defaults()))
}

/// Steps frames until `done` holds (the engine runs on its own thread meanwhile).
fn step_until(h: &mut Harness<'_, HearthApp>, what: &str, done: impl Fn(&HearthApp) -> bool) {
    let start = Instant::now();
    while !done(h.state()) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}; the model: {:?}, errors: {:?}",
            h.state().model.model,
            h.state().model.errors
        );
        h.step();
        std::thread::sleep(Duration::from_millis(2));
    }
    h.run_steps(2);
}

/// Types `text` into the message box and clicks Send, then waits for the reply to finish;
/// no error may show.
fn send(h: &mut Harness<'_, HearthApp>, text: &str) {
    send_and_wait(h, text);
    assert!(h.state().model.errors.is_empty(), "{:?}", h.state().model.errors);
}

/// [`send`], whatever errors show (a failed save, say).
fn send_and_wait(h: &mut Harness<'_, HearthApp>, text: &str) {
    h.get_by_role_and_label(Role::MultilineTextInput, "Message").focus();
    h.run_steps(1);
    h.get_by_role_and_label(Role::MultilineTextInput, "Message")
        .type_text(text);
    h.run_steps(4);
    h.get_by_role_and_label(Role::Button, "Send").click();
    h.run_steps(1);
    assert!(
        h.state().model.busy(),
        "sending started no reply: {:?}",
        h.state().model.errors
    );
    step_until(h, "the reply", |a| !a.model.busy());
}

/// The number after `prefix` in the label that starts with it.
fn figure(h: &Harness<'_, HearthApp>, prefix: &str) -> usize {
    let node = h.get_by_label_contains(prefix);
    let n = node.accesskit_node();
    // A label's text is its accessible value.
    let label = n.label().or(n.value()).unwrap_or_default();
    label[label.find(prefix).unwrap() + prefix.len()..]
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no number in {label:?}"))
}

const LONG: &str = "The quick brown fox jumps over the lazy dog, again and again, while the cat watches. ";

#[test]
fn a_message_streams_its_reply_and_a_repeated_prefix_hits_the_cache() {
    let f = fixture();
    let mut h = harness(handle(&f.model, &f.data, EngineSettings::default()));
    h.get_by_label("Write a message to start a new chat.");
    send(&mut h, &LONG.repeat(3));
    let open = h.state().model.open.clone().unwrap();
    assert_eq!(open.conversation.messages.len(), 2, "{:?}", open.conversation.messages);
    // The conversation got a title from the message and is listed.
    h.get_by_role_and_label(Role::Button, &open.conversation.title);
    h.get_by_label("Assistant");
    assert_eq!(figure(&h, "Cached tokens: "), 0);

    send(&mut h, "And then?");
    assert_eq!(h.state().model.open.as_ref().unwrap().conversation.messages.len(), 4);
    let cached = figure(&h, "Cached tokens: ");
    assert!(cached >= 16, "the second turn reused the first: {cached}");
    h.get_by_label_contains("Hit rate since start: ");
    h.get_by_label_contains("Disk cache: 1 files");
    // Two layers of two 64-wide K/V heads, K and V, f32: 2 KiB a token.
    h.get_by_label("K/V: f32, 2.0 KiB per token, 524288 tokens per GiB");
    // Regenerate replaces the last reply.
    h.get_by_role_and_label(Role::Button, "Regenerate").click();
    h.run_steps(1);
    step_until(&mut h, "the regenerated reply", |a| !a.model.busy());
    assert_eq!(h.state().model.open.as_ref().unwrap().conversation.messages.len(), 4);
}

#[test]
fn conversations_are_created_renamed_searched_and_deleted() {
    let f = fixture();
    let mut h = harness_with(handle(&f.model, &f.data, EngineSettings::default()), false);
    h.get_by_role_and_label(Role::Button, "New chat").click();
    h.run_steps(2);
    assert_eq!(h.state().model.conversations.len(), 1);
    h.get_by_role_and_label(Role::Button, "Rename").click();
    h.run_steps(2);
    // Replace the title in the edit box.
    h.state_mut().model.renaming.as_mut().unwrap().1.clear();
    h.run_steps(1);
    h.get_by_role_and_label(Role::TextInput, "New title").focus();
    h.run_steps(1);
    h.get_by_role_and_label(Role::TextInput, "New title")
        .type_text("Groceries");
    h.run_steps(1);
    h.get_by_role_and_label(Role::Button, "Save title").click();
    h.run_steps(2);
    assert_eq!(h.state().model.conversations[0].title, "Groceries");
    h.get_by_role_and_label(Role::Button, "Groceries");

    // Search hides what does not match.
    h.get_by_role_and_label(Role::TextInput, "Search").focus();
    h.run_steps(1);
    h.get_by_role_and_label(Role::TextInput, "Search").type_text("zzz");
    h.run_steps(2);
    assert!(h.query_by_role_and_label(Role::Button, "Groceries").is_none());
    h.state_mut().model.search.clear();
    h.run_steps(2);

    h.get_by_role_and_label(Role::Button, "Delete").click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "Delete for good").click();
    h.run_steps(2);
    assert!(h.state().model.conversations.is_empty());
    assert!(h.query_by_role_and_label(Role::Button, "Groceries").is_none());
    let left = std::fs::read_dir(f.data.join("conversations")).unwrap().count();
    assert_eq!(left, 0);
}

/// A conversation written through the API with tools (an assistant turn that called a function,
/// the function's result) opens, reads as calls and results, and goes on.
#[test]
fn a_conversation_with_tool_messages_opens_and_reads_sensibly() {
    use hearth::engine::{ConversationId, Message, Role as MsgRole, ToolCall};
    let f = fixture();
    let engine = handle(&f.model, &f.data, EngineSettings::default());
    let mut call = Message::assistant("");
    call.tool_calls.push(ToolCall {
        id: "call_1".into(),
        name: "get_weather".into(),
        arguments: "{\"city\":\"Paris\"}".into(),
    });
    let mut result = Message::new(MsgRole::parse("tool"), "{\"sky\": \"sunny\"}");
    result.tool_call_id = Some("call_1".into());
    result.name = Some("get_weather".into());
    let messages = vec![
        Message::user("Weather in Paris?"),
        call,
        result,
        Message::assistant("It is sunny."),
    ];
    let id = ConversationId::parse("agent-1").unwrap();
    engine.save_messages(&id, &messages).unwrap();
    engine.flush_disk();
    let mut h = harness(engine);
    h.get_by_role_and_label(Role::Button, "Weather in Paris?").click();
    h.run_steps(3);
    h.get_by_label("Called get_weather({\"city\":\"Paris\"})");
    h.get_by_label("Result of get_weather");
    h.get_by_label("{\"sky\": \"sunny\"}");
    send(&mut h, "Thanks!");
    let open = h.state().model.open.clone().unwrap();
    assert_eq!(open.conversation.messages.len(), 6, "{:?}", open.conversation.messages);
    assert_eq!(open.conversation.messages[1].tool_calls.len(), 1, "the call is kept");
}

/// A thinking model's saved reply shows its answer, its reasoning folded under "Thought"
/// (the `<think>` tags never shown), and the fold opens.
#[test]
fn a_thinking_models_reasoning_is_folded_under_thought() {
    use hearth::engine::{ConversationId, Message, Reasoning, ThinkTags};
    let dir = tempfile::tempdir().unwrap();
    let mut spec = TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0);
    let template = "{% for m in messages %}{% if m['role'] == 'assistant' %}{{ 'assistant: ' + m['content'].split('</think>')[-1] + '\\n' }}{% else %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}";
    spec.vocab.metadata.retain(|(k, _)| k != "tokenizer.chat_template");
    spec.vocab.metadata.push((
        "tokenizer.chat_template".into(),
        candle_core::quantized::gguf_file::Value::String(template.into()),
    ));
    let model = write_tiny(dir.path(), &spec, "m.gguf");
    let engine = handle(&model, &dir.path().join("data"), EngineSettings::default());
    let thinks = Reasoning {
        tags: ThinkTags::Think,
        starts_open: false,
    };
    assert_eq!(engine.model_info().reasoning, Some(thinks));
    let messages = vec![
        Message::user("Why is the sky blue?"),
        Message::assistant("<think>\nScattering, surely.\n</think>\n\nBecause of Rayleigh scattering."),
    ];
    engine.save_messages(&ConversationId::parse("thinks").unwrap(), &messages).unwrap();
    engine.flush_disk();
    let mut h = harness(engine);
    h.get_by_role_and_label(Role::Button, "Why is the sky blue?").click();
    h.run_steps(3);
    h.get_by_label("Because of Rayleigh scattering.");
    assert!(h.query_by_label_contains("<think>").is_none());
    assert!(h.query_by_label("Scattering, surely.").is_none(), "folded");
    h.get_by_label("Thought").click();
    h.run_steps(3);
    h.get_by_label("Scattering, surely.");
}

#[test]
fn after_a_restart_the_conversations_are_back_and_the_next_message_hits() {
    let f = fixture();
    let title;
    {
        let engine = handle(&f.model, &f.data, EngineSettings::default());
        let mut h = harness(engine.clone());
        send(&mut h, &LONG.repeat(3));
        title = h.state().model.open.as_ref().unwrap().conversation.title.clone();
        engine.flush_disk();
    }
    // A new app and a new engine (empty RAM tiers) on the same data dir.
    let mut h = harness(handle(&f.model, &f.data, EngineSettings::default()));
    h.get_by_role_and_label(Role::Button, &title);
    let open = h.state().model.open.clone().expect("the last conversation is reopened");
    assert_eq!(open.conversation.messages.len(), 2);
    send(&mut h, "And then?");
    let t = *h.state().model.last_turn().unwrap();
    assert!(t.cached.disk_tokens >= 16, "{:?}", t.cached);
    assert!(figure(&h, "from disk: ") >= 16);
}

#[test]
fn the_window_renders_and_a_snapshot_is_kept() {
    let f = fixture();
    let engine = handle(&f.model, &f.data, EngineSettings::default());
    let mut h = Harness::builder()
        .with_size(egui::vec2(1200.0, 780.0))
        .allow_missing_glyphs()
        .wgpu()
        .build_eframe(move |cc| HearthApp::with_engine(&cc.egui_ctx, engine, defaults()));
    send(&mut h, &LONG.repeat(2));
    send(&mut h, "What does the cat do?");
    let image = h.render().expect("rendering with wgpu (Mesa's lavapipe without a GPU)");
    assert_eq!((image.width(), image.height()), (1200, 780));
    let first = image.get_pixel(0, 0);
    assert!(image.pixels().any(|p| p != first), "a blank frame");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("main-window.png");
    image.save(&out).unwrap();
    eprintln!("snapshot: {}", out.display());
}

#[test]
fn frames_keep_coming_while_a_long_prompt_prefills() {
    // A slow prefill: a model of 12 layers (the others' 2 let the prefill end within 7 frames
    // while the other GUI tests drew beside it on CI's 2 cores), 16 prompt tokens per engine
    // step.
    let f = fixture_of(&TinyModelSpec {
        layers: 12,
        ..TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0)
    });
    let limits = EngineSettings {
        max_running: 4,
        max_batch_tokens: 16,
        max_queued: 16,
        threads: None,
    };
    let mut h = harness(handle(&f.model, &f.data, limits));
    h.get_by_role_and_label(Role::MultilineTextInput, "Message").focus();
    h.run_steps(1);
    h.get_by_role_and_label(Role::MultilineTextInput, "Message")
        .type_text(&LONG.repeat(10));
    // A panel takes a frame to grow to its new content: let the layout settle before clicking.
    h.run_steps(4);
    h.get_by_role_and_label(Role::Button, "Send").click();
    let sent = Instant::now();
    h.step();
    assert!(h.state().model.busy(), "{:?}", h.state().model.errors);
    let (mut frames, mut slowest) = (0u32, Duration::ZERO);
    while h.state().model.streaming.as_ref().is_some_and(|s| s.text.is_empty()) {
        let t = Instant::now();
        h.step();
        slowest = slowest.max(t.elapsed());
        frames += 1;
        assert!(sent.elapsed() < Duration::from_secs(60));
    }
    let prefill = sent.elapsed();
    step_until(&mut h, "the reply", |a| !a.model.busy());
    assert!(frames >= 10, "{frames} frames during a {prefill:?} prefill");
    // No frame waited for the engine: each is a small part of the prefill.
    assert!(
        slowest * 5 < prefill,
        "slowest frame {slowest:?} during a {prefill:?} prefill"
    );
}

#[test]
fn settings_are_saved_to_the_config_and_the_model_reloads_in_the_background() {
    use hearth::config::{AppPaths, ConfigFile, Settings};
    use hearth::gui::ModelStatus;
    let f = fixture();
    let config = f.data.with_file_name("config.toml");
    let paths = AppPaths {
        config_file: config.clone(),
        data_dir: f.data.clone(),
    };
    let mut cli = ConfigFile::default();
    cli.model.source = Some(f.model.display().to_string());
    cli.model.device = Some("cpu".into());
    cli.cache.device_pool_mib = Some(8);
    cli.cache.host_cache_gib = Some(0.01);
    cli.model.context_length = Some(256);
    let settings = Settings::resolve(&ConfigFile::default(), &cli).unwrap();
    let engine = handle(&f.model, &f.data, EngineSettings::default());
    let mut h = Harness::builder()
        .with_size(egui::vec2(1200.0, 800.0))
        .build_eframe(move |cc| {
            HearthApp::with_engine(&cc.egui_ctx, engine, defaults())
                .with_config(settings, paths)
                .with_flags(cli)
        });
    h.get_by_role_and_label(Role::Button, "New chat").click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "Settings").click();
    h.run_steps(4);
    assert!(h.state().model.settings.is_some(), "{:?}", h.state().model.errors);
    h.get_by_role_and_label(Role::Slider, "Temperature");
    h.state_mut().model.settings.as_mut().unwrap().temperature = 0.25;
    h.run_steps(1);
    h.get_by_role_and_label(Role::Button, "Save settings").click();
    h.run_steps(2);
    assert!(h.state().model.errors.is_empty(), "{:?}", h.state().model.errors);
    h.get_by_label_contains("Settings saved to");
    let saved = ConfigFile::load(&config).unwrap();
    assert_eq!(saved.sampling.temperature, Some(0.25));
    assert_eq!(saved.sampling.max_tokens, None, "no reply limit unless one is set");
    assert_eq!(saved.model.source.as_deref(), Some(f.model.to_str().unwrap()));
    // "Limit" sets one, saved too.
    h.get_by_role_and_label(Role::CheckBox, "Limit").click();
    h.run_steps(2);
    assert_eq!(h.state().model.settings.as_ref().unwrap().max_tokens, Some(1024));
    h.get_by_role_and_label(Role::Button, "Save settings").click();
    h.run_steps(2);
    assert_eq!(ConfigFile::load(&config).unwrap().sampling.max_tokens, Some(1024));
    assert_eq!(saved.paths.data_dir.as_deref(), Some(f.data.as_path()));

    // Reloading the model happens on another thread: the window keeps drawing meanwhile.
    h.get_by_role_and_label(Role::Button, "Load model").click();
    h.run_steps(1);
    assert!(matches!(h.state().model.model, ModelStatus::Loading(_)));
    step_until(&mut h, "the model", |a| matches!(a.model.model, ModelStatus::Ready(_)));
    assert_eq!(
        h.state().model.conversations.len(),
        1,
        "the conversations are listed again"
    );
    // A command-line value the window does not edit (the context length) still applies.
    let ModelStatus::Ready(info) = &h.state().model.model else {
        unreachable!()
    };
    assert_eq!(info.context_length, 256);
}

/// Reading a model's weights (from a local file, or after its download) shows a bar of its
/// own in the top bar, with the load's cancel button.
#[test]
fn reading_the_weights_shows_a_loading_bar() {
    use hearth::gui::{DownloadFigures, ModelStatus};
    let f = fixture();
    let mut h = harness(handle(&f.model, &f.data, EngineSettings::default()));
    h.state_mut().model.model = ModelStatus::Loading("tiny-Q8_0.gguf".into());
    h.state_mut().model.download = Some(DownloadFigures {
        file: "tiny-Q8_0.gguf".into(),
        reading: true,
        done: 1 << 20,
        total: 4 << 20,
    });
    h.run();
    h.get_by_role(Role::ProgressIndicator);
    h.get_by_label_contains("Loading tiny-Q8_0.gguf");
    h.get_by_label_contains("of 4");
    h.get_by_role_and_label(Role::Button, "Cancel");
    assert!(h.query_by_role_and_label(Role::Button, "Cancel download").is_none());
}

#[test]
fn a_hub_model_downloads_with_a_progress_bar_that_cancels_and_a_picked_file_loads() {
    use hearth::config::{AppPaths, ConfigFile, Settings};
    use hearth::gui::ModelStatus;
    use hearth::model::testkit::FakeHub;
    use std::sync::Arc;

    let f = fixture();
    let hub = FakeHub::start().unwrap();
    let commit = "dddddddddddddddddddddddddddddddddddddddd";
    let bytes = std::fs::read(&f.model).unwrap();
    hub.add("Owner/Tiny", "main", commit, "tiny-Q8_0.gguf", bytes.clone());
    hub.throttle(Some((16 << 10, Duration::from_millis(20))));

    // The user's config file names the mirror (here the fake hub) and the model; "Load model"
    // reads it again.
    let mut file = ConfigFile::default();
    file.hub.endpoint = Some(hub.endpoint());
    file.hub.cache_dir = Some(f.data.with_file_name("hub"));
    file.model.source = Some("Owner/Tiny:tiny-Q8_0.gguf".into());
    file.model.device = Some("cpu".into());
    file.cache.device_pool_mib = Some(8);
    file.cache.host_cache_gib = Some(0.01);
    let paths = AppPaths {
        config_file: f.data.with_file_name("config.toml"),
        data_dir: f.data.clone(),
    };
    file.save(&paths.config_file).unwrap();
    let settings = Settings::resolve(&file, &ConfigFile::default()).unwrap();
    let local = f.model.clone();
    // The first pick chooses the local model; the second is closed without a choice.
    let picks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let picker: hearth::gui::FilePicker =
        Arc::new(move |_| (picks.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0).then(|| local.clone()));
    let mut h = Harness::builder()
        .with_size(egui::vec2(1200.0, 400.0))
        .wgpu()
        .build_eframe(move |cc| HearthApp::new(&cc.egui_ctx, settings, paths).with_file_picker(picker));

    // The download shows a progress bar; cancelling it is not a crash, and says what was kept.
    step_until(&mut h, "the download to start", |a| {
        a.model.download.as_ref().is_some_and(|d| d.done > 0)
    });
    h.get_by_role(Role::ProgressIndicator);
    h.get_by_label_contains("Downloading tiny-Q8_0.gguf");
    let image = h.render().expect("rendering with wgpu");
    image
        .save(Path::new(env!("CARGO_TARGET_TMPDIR")).join("downloading.png"))
        .unwrap();
    h.get_by_role_and_label(Role::Button, "Cancel download").click();
    step_until(&mut h, "the cancel", |a| {
        matches!(a.model.model, ModelStatus::Failed(_))
    });
    let ModelStatus::Failed(why) = &h.state().model.model else {
        unreachable!()
    };
    assert!(why.contains("cancelled") && why.contains("resumes"), "{why}");
    h.get_by_label_contains("was cancelled");
    assert!(h.query_by_role(Role::ProgressIndicator).is_none());

    // "Load model" again resumes the download and loads the model.
    hub.throttle(None);
    h.get_by_role_and_label(Role::Button, "Settings").click();
    h.run_steps(4);
    h.get_by_role_and_label(Role::Button, "Load model").click();
    step_until(&mut h, "the downloaded model", |a| {
        matches!(a.model.model, ModelStatus::Ready(_))
    });
    let resumed = hub.requests().iter().any(|r| {
        r.range
            .as_deref()
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n > 0)
    });
    assert!(resumed, "the second download resumed: {:?}", hub.requests());
    h.get_by_label_contains("tokens of context");

    // Browse… opens the file dialog (here a stand-in) off the UI thread; its answer fills the
    // model field, and the picked file loads.
    h.get_by_role_and_label(Role::Button, "Browse…").click();
    let want = f.model.display().to_string();
    step_until(&mut h, "the file dialog's answer", |a| {
        a.model.settings.as_ref().is_some_and(|s| s.model_source == want)
    });
    assert!(!h.state().model.picking_file);
    h.get_by_role_and_label(Role::Button, "Load model").click();
    h.run_steps(1);
    step_until(&mut h, "the picked model", |a| {
        matches!(a.model.model, ModelStatus::Ready(_))
    });
    assert!(h.state().model.errors.is_empty(), "{:?}", h.state().model.errors);
    // A dialog closed without a choice (or none could open) says so and changes nothing.
    h.get_by_role_and_label(Role::Button, "Settings").click();
    h.run_steps(4);
    h.get_by_role_and_label(Role::Button, "Browse…").click();
    step_until(&mut h, "the empty answer", |a| a.model.notice.is_some());
    assert!(h.state().model.notice.as_deref().unwrap().contains("No file chosen"));
    assert_eq!(h.state().model.settings.as_ref().unwrap().model_source, want);
}

/// A full disk: the conversation is marked "not saved" (in the list and above the chat) with
/// its text kept on screen, and the mark goes once the background writer has saved it.
#[test]
fn a_conversation_that_cannot_be_saved_is_marked_until_it_is() {
    use std::sync::atomic::Ordering;

    let f = fixture();
    let (full, faults) = full_disk(true);
    let disk = DiskSettings {
        faults,
        ..DiskSettings::new(&f.data, 1 << 30)
    };
    let limits = EngineSettings::default();
    let e = engine_limits(&f.model, cache_settings(true, 16), &limits, 128, 64)
        .with_disk(&disk)
        .unwrap();
    let mut h = harness(EngineHandle::spawn(e, 16).unwrap());
    step_until(&mut h, "the model", |a| {
        matches!(a.model.model, hearth::gui::ModelStatus::Ready(_))
    });
    send_and_wait(&mut h, "my words survive");
    step_until(&mut h, "the mark", |a| {
        a.model.open_id().is_some_and(|id| a.model.unsaved(id).is_some())
    });
    assert!(h.query_by_label_contains("This conversation is not saved").is_some());
    assert!(h.query_by_label_contains("(not saved)").is_some());
    // The message on screen, and the conversation in the list titled by it.
    assert!(
        h.query_all_by_label_contains("my words survive").count() >= 2,
        "the text stays on screen"
    );
    full.store(false, Ordering::SeqCst);
    step_until(&mut h, "the save", |a| {
        a.model.open_id().is_some_and(|id| a.model.unsaved(id).is_none())
    });
    assert!(h.query_by_label_contains("(not saved)").is_none());
    let id = h.state().model.open_id().unwrap().clone();
    let saved = std::fs::read_to_string(f.data.join(format!("conversations/{id}.json"))).unwrap();
    assert!(saved.contains("my words survive"), "{saved}");
}

/// An embedding model in the chat window: the top bar says what it is for.
#[test]
fn an_embedding_model_says_what_it_is_for() {
    let f = fixture_of(&TinyModelSpec::embedding(3, WeightType::Q8_0));
    let mut h = harness_with(handle(&f.model, &f.data, EngineSettings::default()), false);
    h.run_steps(2);
    h.get_by_label_contains("An embedding model: its replies are no chat.");
    let chat = fixture();
    let mut h = harness_with(handle(&chat.model, &chat.data, EngineSettings::default()), false);
    h.run_steps(2);
    assert!(h.query_by_label_contains("An embedding model").is_none());
}
