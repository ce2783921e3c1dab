//! The disk tier and conversations: a conversation survives a restart warm, damaged or foreign
//! cache files are never used (and cost nothing but a recompute), writes are atomic, a full disk
//! never stops generation, and the cache file reader withstands any input.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use hearth::engine::{DiskSettings, Engine, GenerateParams, GenerateRequest, GenerationReport, SaveTo};
use hearth::model::hparams::Family;
use hearth::model::testkit::{TinyModelSpec, WeightType};
use hearth::persist::{
    cache_dir, cache_path, write_cache_file, CacheFile, CacheHeader, CacheWrite, ConversationId, DiskIndex, Faults,
    Fingerprint, Message, PersistError, Role,
};

/// F32 weights: a cached run's logits equal a full prefill's within float rounding.
const F32_TOL: f32 = 1e-4;

fn model(dir: &Path) -> (TinyModelSpec, PathBuf) {
    model_of(dir, Family::Llama)
}

fn model_of(dir: &Path, family: Family) -> (TinyModelSpec, PathBuf) {
    let spec = TinyModelSpec::tiny(family, WeightType::F32);
    let path = write_tiny(dir, &spec, &format!("{}-f32.gguf", family.arch()));
    (spec, path)
}

/// An engine on `data` with its disk tier (RAM tiers: 64 device, 16 host blocks of 16 tokens).
fn disk_engine(path: &Path, data: &Path, faults: Faults) -> Engine {
    let settings = DiskSettings {
        faults,
        ..DiskSettings::new(data, 1 << 30)
    };
    engine(path, true, 64, 16).with_disk(&settings).unwrap()
}

fn id(s: &str) -> ConversationId {
    ConversationId::parse(s).unwrap()
}

/// One turn of `conversation` (its text: one user message per turn).
fn turn(e: &mut Engine, conversation: &ConversationId, prompt: &[u32], n: usize, turn: usize) -> GenerationReport {
    let request = GenerateRequest {
        prompt: prompt.to_vec(),
        params: greedy_exactly(n),
        save: Some(SaveTo {
            conversation: conversation.clone(),
            messages: Some(vec![Message::new(Role::User, format!("turn {turn}"))]),
        }),
    };
    e.run(request, |_| Ok(())).unwrap()
}

/// Turn 4's prompt after three turns of 20 tokens each, and the tokens computed by turn 3.
struct History {
    turns: Vec<Vec<u32>>,
    committed_after_turn3: usize,
    next: Vec<u32>,
}

/// Runs three turns on `e` (saving into `conversation`) and returns the prompts.
fn three_turns(e: &mut Engine, conversation: &ConversationId, vocab: usize) -> History {
    let mut history = prompt(37, vocab, 10);
    let mut turns = Vec::new();
    let mut committed = 0;
    for t in 0..3 {
        turns.push(history.clone());
        let r = turn(e, conversation, &history, 20, t);
        assert_eq!(r.tokens.len(), 20);
        committed = history.len() + r.tokens.len() - 1;
        history.extend(&r.tokens);
        history.extend(prompt(7, vocab, 20 + t as u32));
    }
    History {
        turns,
        committed_after_turn3: committed,
        next: history,
    }
}

/// Llama's layers all alike (cache files of format 1), Gemma 4's E model (local and global
/// layers of different heads, layers sharing K/V: format 2 with its layer table),
/// DeepSeek-V2's latent attention (K kept alone: format 3) and Qwen3.5's, LFM2's, Granite 4.0's,
/// Nemotron-H's and Jamba's recurrent layers (their state after the last whole block stored
/// after the blocks: format 4), Nanbeige's looped layers (a store layer per layer and pass) and
/// Gemma 3n's layers inside AltUp's streams (K/V shared by its last layers, as Gemma 4's, but
/// of one shape: format 1).
#[test]
fn a_conversation_stays_warm_across_a_restart() {
    for family in [Family::Llama, Family::Gemma4, Family::DeepSeek2, Family::Qwen35, Family::Lfm2, Family::GraniteHybrid, Family::NemotronH] {
        let dir = tempfile::tempdir().unwrap();
        let (spec, path) = model_of(dir.path(), family);
        warm_across_a_restart(dir.path(), spec, &path);
    }
    for (name, spec) in [
        ("jamba", TinyModelSpec::jamba(WeightType::F32)),
        ("nanbeige", TinyModelSpec::nanbeige(WeightType::F32)),
        ("gemma3n", TinyModelSpec::gemma3n_short(WeightType::F32)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = write_tiny(dir.path(), &spec, &format!("{name}-f32.gguf"));
        warm_across_a_restart(dir.path(), spec, &path);
    }
}

fn warm_across_a_restart(dir: &Path, spec: TinyModelSpec, path: &Path) {
    let family = spec.family;
    let data = dir.join("data");
    let c = id("chat-1");

    let mut first = disk_engine(path, &data, Faults::none());
    let h = three_turns(&mut first, &c, spec.vocab.size);
    first.flush_disk();
    let stats = first.stats().disk.unwrap();
    assert_eq!(stats.files_written, 3);
    assert_eq!(stats.write_failures, 0);
    drop(first);

    // A run that never restarted: turn 4 from its RAM tiers.
    let mut kept = engine(path, true, 64, 16);
    for p in &h.turns {
        kept.generate(p, &greedy_exactly(20), |_| Ok(())).unwrap();
    }
    let never_restarted = kept.generate(&h.next, &greedy_exactly(20), |_| Ok(())).unwrap();

    // A new engine: its RAM tiers are empty; turn 4 reads the history from the cache file.
    let mut second = disk_engine(path, &data, Faults::none());
    assert_eq!(second.stats().disk.unwrap().files, 1);
    let file = std::fs::read_dir(data.join("cache")).unwrap().next().unwrap().unwrap().path();
    let version = std::fs::read(&file).unwrap()[8];
    let expected = match family {
        _ if spec.jamba.is_some() => 4,
        // (Gemma 3n's layers are all of one shape: no layer table.)
        _ if spec.arch == Some("gemma3n") => 1,
        Family::Gemma4 => 2,
        Family::DeepSeek2 => 3,
        Family::Qwen35 | Family::Lfm2 | Family::GraniteHybrid | Family::NemotronH => 4,
        _ => 1,
    };
    assert_eq!(version, expected, "{family:?}: {}", file.display());
    let r = turn(&mut second, &c, &h.next, 20, 3);
    let whole_blocks = h.committed_after_turn3 / 16 * 16;
    assert_eq!(r.cached.tokens, whole_blocks, "{:?}", r.cached);
    assert_eq!(r.cached.disk_tokens, whole_blocks, "{:?}", r.cached);
    assert_eq!(r.tokens, never_restarted.tokens);
    assert_eq!(r.logits, never_restarted.logits, "K/V from disk are the same bits");

    let cold = engine(path, false, 64, 0)
        .generate(&h.next, &greedy_exactly(20), |_| Ok(()))
        .unwrap();
    assert_same_run(&r, &cold, "after a restart vs uncached", F32_TOL);
    assert_blocks_released(&second.cache_stats(), "after the restarted turn");

    // The text: the last request's messages and its reply.
    second.flush_disk();
    let conv = second.conversations().unwrap().get(&c).unwrap();
    assert_eq!(conv.messages.len(), 2);
    assert_eq!(conv.messages[0].content, "turn 3");
    assert_eq!(conv.messages[1].role, Role::Assistant);
    assert_eq!(conv.messages[1].content, r.text);
    if family == Family::Qwen35 {
        a_damaged_state_is_not_used(path, &data, &file, &h, &cold);
    }
}

/// Qwen3.5's cache file with a byte of its stored state flipped (the blocks intact): the
/// state fails its checksum, so no prefix is taken (a recurrent model's prefix needs its
/// state) and turn 4 is computed whole, the same as without a cache.
fn a_damaged_state_is_not_used(model: &Path, data: &Path, file: &Path, h: &History, cold: &GenerationReport) {
    let mut bytes = std::fs::read(file).unwrap();
    let header = CacheHeader::read(&mut bytes.as_slice(), bytes.len() as u64, file).unwrap();
    let st = header.state.expect("a version 4 file has a state");
    // (The file is turn 4's now: its state after that turn's last whole block.)
    assert!(st.blocks as usize > h.committed_after_turn3 / 16, "{st:?}");
    assert_eq!(header.file_len(), bytes.len() as u64);
    let at = header.state_offset() as usize + 4 * (st.floats as usize / 2);
    bytes[at] ^= 0x01;
    std::fs::write(file, &bytes).unwrap();
    let mut e = disk_engine(model, data, Faults::none());
    let r = e.generate(&h.next, &greedy_exactly(20), |_| Ok(())).unwrap();
    assert_eq!(r.cached.tokens, 0, "{:?}", r.cached);
    assert_same_run(&r, cold, "a damaged state", F32_TOL);
    assert_blocks_released(&e.cache_stats(), "after a damaged state");
}

/// A saved conversation (three turns) and what turn 4 needs.
struct Saved {
    _dir: tempfile::TempDir,
    data: PathBuf,
    model: PathBuf,
    file: PathBuf,
    pristine: Vec<u8>,
    next: Vec<u32>,
    cold: GenerationReport,
    conversation: ConversationId,
}

fn saved() -> Saved {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (spec, path) = model(dir.path());
    let c = id("saved");
    let mut e = disk_engine(&path, &data, Faults::none());
    let h = three_turns(&mut e, &c, spec.vocab.size);
    e.flush_disk();
    drop(e);
    let file = cache_path(&cache_dir(&data), &c);
    let pristine = std::fs::read(&file).unwrap();
    let cold = engine(&path, false, 64, 0)
        .generate(&h.next, &greedy_exactly(20), |_| Ok(()))
        .unwrap();
    Saved {
        _dir: dir,
        data,
        model: path,
        file,
        pristine,
        next: h.next,
        cold,
        conversation: c,
    }
}

impl Saved {
    /// Restores the file, damages it with `damage`, then runs turn 4 on a fresh engine.
    fn turn_after(&self, damage: impl FnOnce(&mut Vec<u8>)) -> (GenerationReport, Engine) {
        let mut bytes = self.pristine.clone();
        damage(&mut bytes);
        std::fs::write(&self.file, &bytes).unwrap();
        let mut e = disk_engine(&self.model, &self.data, Faults::none());
        let r = e.generate(&self.next, &greedy_exactly(20), |_| Ok(())).unwrap();
        assert_blocks_released(&e.cache_stats(), "after a damaged read");
        (r, e)
    }

    fn header(&self) -> CacheHeader {
        CacheHeader::read(&mut self.pristine.as_slice(), self.pristine.len() as u64, &self.file).unwrap()
    }

    fn text_intact(&self, e: &Engine) {
        let c = e.conversations().unwrap().get(&self.conversation).unwrap();
        assert_eq!(c.messages.len(), 2, "the conversation's text survives its cache");
    }
}

#[test]
fn a_damaged_or_foreign_cache_file_is_never_used() {
    let s = saved();
    let h = s.header();
    let blocks = h.blocks.len();
    assert!(blocks >= 5, "{blocks}");

    // Intact: every block is used.
    let (r, e) = s.turn_after(|_| {});
    assert_eq!(r.cached.disk_tokens, blocks * 16);
    assert_same_run(&r, &s.cold, "intact", F32_TOL);
    s.text_intact(&e);

    // A flipped byte in block k: blocks before k are used, the rest recomputed.
    let k = 3;
    let (r, e) = s.turn_after(|b| b[(h.block_offset(k) + 1000) as usize] ^= 0x40);
    assert_eq!(r.cached.disk_tokens, k * 16, "{:?}", r.cached);
    assert_eq!(r.cached.tokens, k * 16);
    assert_same_run(&r, &s.cold, "flipped byte", F32_TOL);
    assert_eq!(e.stats().disk.unwrap().damaged_blocks, 1);
    s.text_intact(&e);

    // Truncated inside block k: the whole blocks before it are used.
    let (r, e) = s.turn_after(|b| b.truncate((h.block_offset(k) + 5) as usize));
    assert_eq!(r.cached.disk_tokens, k * 16, "{:?}", r.cached);
    assert_same_run(&r, &s.cold, "truncated", F32_TOL);
    s.text_intact(&e);

    // Truncated inside the header, another model's file, a future version, random bytes, an
    // empty file: the file is ignored as a whole, with the reason.
    let other = {
        let mut h2 = h.clone();
        h2.fingerprint = Fingerprint::of(&[b"another model"]);
        let mut b = s.pristine.clone();
        let enc = h2.encode();
        b[..enc.len()].copy_from_slice(&enc);
        b
    };
    type Damage = Box<dyn FnOnce(&mut Vec<u8>)>;
    let cases: Vec<(&str, Damage, &str)> = vec![
        ("header cut", Box::new(|b: &mut Vec<u8>| b.truncate(40)), "truncated"),
        (
            "another model",
            Box::new(move |b: &mut Vec<u8>| *b = other),
            "another model",
        ),
        ("future version", Box::new(|b: &mut Vec<u8>| b[8] = 9), "newer hearth"),
        (
            "random bytes",
            Box::new(|b: &mut Vec<u8>| {
                let mut x = 0x9e37_79b9u32;
                for byte in b.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    *byte = x as u8;
                }
            }),
            "not a hearth cache file",
        ),
        ("empty", Box::new(|b: &mut Vec<u8>| b.clear()), "empty"),
    ];
    for (what, damage, reason) in cases {
        let (r, e) = s.turn_after(damage);
        assert_eq!(r.cached.tokens, 0, "{what}: {:?}", r.cached);
        assert_same_run(&r, &s.cold, what, F32_TOL);
        s.text_intact(&e);
        let fp = e.stats().disk.unwrap();
        assert_eq!(fp.files, 0, "{what}: indexed");
        // The reason a user sees (the engine logs the same message).
        let layout = hearth::persist::kv_layout(e.model().transformer.kv_shape(), 16, hearth::config::KvDtype::F32);
        let files = &e.model().info.files;
        let current = hearth::persist::fingerprint(files, "cpu", "", &layout, &mut |_| {}).unwrap();
        let (_, report) = DiskIndex::scan(cache_dir(&s.data), current, layout).unwrap();
        assert_eq!(report.ignored.len(), 1, "{what}");
        let msg = report.ignored[0].1.to_string();
        assert!(msg.contains(reason), "{what}: {msg}");
    }
}

fn layout() -> hearth::persist::KvLayout {
    hearth::persist::KvLayout {
        block_size: 16,
        dtype: hearth::persist::KvDtype::F32,
        shape: hearth::ops::KvShape::uniform(2, 2, 8),
    }
}

/// Writes a cache file of `blocks` blocks whose payload bytes are all `fill`.
fn write_file(path: &Path, blocks: usize, fill: u8, faults: &Faults) -> Result<(), PersistError> {
    let l = layout();
    let tokens: Vec<u32> = (0..(blocks * 16 + 3) as u32).collect();
    let hashes = hearth::kv::hash_chain(&tokens, 16);
    let fresh = vec![fill; blocks * l.block_bytes() as usize];
    write_cache_file(
        path,
        CacheWrite {
            fingerprint: Fingerprint::of(&[b"m"]),
            layout: l,
            tokens: &tokens,
            hashes: &hashes[..blocks],
            reuse: None,
            fresh: &fresh,
            state: None,
        },
        faults,
    )
    .map(|_| ())
}

#[test]
fn a_write_interrupted_at_any_step_leaves_the_previous_file_usable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.hkv");
    write_file(&path, 3, 1, &Faults::none()).unwrap();
    let before = std::fs::read(&path).unwrap();
    let mut steps = 0;
    for fail_at in 0.. {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let faults = Faults::new(move |_| {
            if c.fetch_add(1, Ordering::SeqCst) == fail_at {
                Err(std::io::Error::other("simulated crash"))
            } else {
                Ok(())
            }
        });
        let r = write_file(&path, 5, 2, &faults);
        let mut f = CacheFile::open(&path).unwrap();
        assert_eq!(f.verify(|_| {}).unwrap(), f.header().blocks.len(), "step {fail_at}");
        let temps = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(temps, 1, "step {fail_at}: a temp file was left behind");
        if r.is_ok() {
            assert_eq!(f.header().blocks.len(), 5);
            steps = fail_at;
            break;
        }
        // Failing after the rename (the directory sync) leaves the new file, complete.
        let now = std::fs::read(&path).unwrap();
        if now != before {
            assert_eq!(f.header().blocks.len(), 5, "step {fail_at}");
            std::fs::write(&path, &before).unwrap();
        }
    }
    assert!(steps >= 5, "only {steps} steps were tried");
}

#[test]
fn a_full_disk_never_stops_generation_or_loses_what_was_saved() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (spec, path) = model(dir.path());
    let (full, faults) = common::full_disk(false);
    let mut e = disk_engine(&path, &data, faults);
    let c = id("full");
    let p = prompt(40, spec.vocab.size, 1);
    turn(&mut e, &c, &p, 10, 0);
    e.flush_disk();
    let file = cache_path(&cache_dir(&data), &c);
    let saved = std::fs::read(&file).unwrap();
    let text = std::fs::read(data.join("conversations/full.json")).unwrap();

    full.store(true, Ordering::SeqCst);
    let mut longer = p.clone();
    longer.extend(prompt(30, spec.vocab.size, 2));
    let r = turn(&mut e, &c, &longer, 10, 1);
    assert_eq!(r.tokens.len(), 10, "generation went on");
    e.flush_disk();
    let s = e.stats().disk.unwrap();
    // The cache file and the text both failed (and the flush's retry of the text, kept in memory).
    assert!(s.write_failures >= 2, "{s:?}");
    assert_eq!(s.unsaved.len(), 1, "the turn's text is kept in memory: {s:?}");
    assert!(s.last_error.as_deref().is_some_and(|m| m.contains("No space")), "{s:?}");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        saved,
        "the saved cache file is untouched"
    );
    assert_eq!(std::fs::read(data.join("conversations/full.json")).unwrap(), text);
    let names: Vec<_> = std::fs::read_dir(cache_dir(&data)).unwrap().collect();
    assert_eq!(names.len(), 1, "no temp file left");

    full.store(false, Ordering::SeqCst);
    turn(&mut e, &c, &longer, 10, 2);
    e.flush_disk();
    let s = e.stats().disk.unwrap();
    assert_eq!(s.last_error, None, "saving works again");
    assert!(s.unsaved.is_empty(), "what was kept in memory is written: {s:?}");
    assert_ne!(std::fs::read(&file).unwrap(), saved);
    assert_ne!(std::fs::read(data.join("conversations/full.json")).unwrap(), text);
}

#[test]
fn an_unwritable_data_dir_never_stops_generation() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // Where the directories should be, files: nothing can be created under them (even by root).
    std::fs::write(data.join("cache"), b"").unwrap();
    std::fs::write(data.join("conversations"), b"").unwrap();
    let (spec, path) = model(dir.path());
    let mut e = disk_engine(&path, &data, Faults::none());
    let p = prompt(40, spec.vocab.size, 1);
    let cold = engine(&path, false, 64, 0)
        .generate(&p, &greedy_exactly(8), |_| Ok(()))
        .unwrap();
    let r = turn(&mut e, &id("ro"), &p, 8, 0);
    assert_same_run(&r, &cold, "unwritable data dir", F32_TOL);
    e.flush_disk();
    let s = e.stats().disk.unwrap();
    assert_eq!(s.write_failures, 2);
    assert!(s.last_error.is_some());
}

mod reader_fuzz {
    use super::*;
    use proptest::prelude::*;

    fn valid_file(dir: &Path) -> Vec<u8> {
        let path = dir.join("v.hkv");
        write_file(&path, 3, 7, &Faults::none()).unwrap();
        std::fs::read(&path).unwrap()
    }

    /// Opens `bytes` as a cache file and reads every block: errors are fine, panics are not.
    fn exercise(dir: &Path, bytes: &[u8]) {
        let path = dir.join("f.hkv");
        std::fs::write(&path, bytes).unwrap();
        if let Ok(mut f) = CacheFile::open(&path) {
            let bb = f.header().block_bytes();
            // A valid header's block size is bounded by the layout checks.
            assert!(bb <= 1 << 34, "{bb}");
            if bb <= 1 << 24 {
                let mut buf = vec![0u8; bb as usize];
                for k in 0..f.header().blocks.len() + 1 {
                    let _ = f.read_block(k, &mut buf);
                }
            }
            let _ = f.verify(|_| {});
        }
        let _ = CacheHeader::read(&mut &bytes[..], bytes.len() as u64, &path);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let dir = tempfile::tempdir().unwrap();
            exercise(dir.path(), &bytes);
        }

        #[test]
        fn mutated_files(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in any::<usize>()) {
            let dir = tempfile::tempdir().unwrap();
            let mut b = valid_file(dir.path());
            for (at, x) in flips {
                let i = at % b.len();
                b[i] ^= x | 1;
            }
            exercise(dir.path(), &b);
            let n = cut % (b.len() + 1);
            exercise(dir.path(), &b[..n]);
        }

        #[test]
        fn header_fields_claiming_huge_sizes(field in 0usize..6, value in any::<u32>()) {
            // Rewrites one count or size field and fixes the header checksum, so the
            // checks on sizes (not the checksum) must catch it.
            let dir = tempfile::tempdir().unwrap();
            let mut b = valid_file(dir.path());
            let at = [12, 32, 36, 52, 56, 60][field];
            b[at..at + 4].copy_from_slice(&value.to_le_bytes());
            let n = u32::from_le_bytes([b[12], b[13], b[14], b[15]]) as usize;
            if n >= 16 && n <= b.len() {
                let sum = xxhash_rust::xxh3::xxh3_64(&b[..n - 8]);
                b[n - 8..n].copy_from_slice(&sum.to_le_bytes());
            }
            exercise(dir.path(), &b);
        }
    }
}

#[test]
fn the_conversation_api_creates_continues_renames_and_deletes() {
    use hearth::engine::{EngineHandle, Event};
    use hearth::persist::ConversationSettings;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (_, path) = model(dir.path());
    let h = EngineHandle::spawn(disk_engine(&path, &data, Faults::none()), 8).unwrap();
    let c = h
        .create_conversation(
            Some("first chat"),
            ConversationSettings {
                system_prompt: Some("You are terse.".into()),
                max_tokens: Some(5),
                ..Default::default()
            },
        )
        .unwrap();
    let reply = |stream: &mut hearth::engine::RequestStream| loop {
        match stream.blocking_recv() {
            Some(Event::Done(r)) => return r,
            Some(Event::Error(e)) => panic!("{e}"),
            Some(_) => {}
            None => panic!("stream ended"),
        }
    };
    let defaults = GenerateParams {
        ignore_eos: true,
        ..GenerateParams::greedy(50)
    };
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(6);
    let r1 = reply(&mut h.send_message(&c.id, Some(&long), &defaults).unwrap());
    assert_eq!(r1.tokens.len(), 5, "the conversation's max_tokens wins");
    let r2 = reply(&mut h.send_message(&c.id, Some("And then?"), &defaults).unwrap());
    assert!(
        r2.cached.tokens > 0,
        "the second turn reused the first: {:?}",
        r2.cached
    );
    h.flush_disk();
    let got = h.conversation(&c.id).unwrap();
    let roles: Vec<Role> = got.messages.iter().map(|m| m.role.clone()).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::User, Role::Assistant]);
    assert_eq!(got.messages[1].content, r1.text);
    assert_eq!(got.messages[3].content, r2.text);
    assert!(cache_path(&cache_dir(&data), &c.id).exists());

    h.rename_conversation(&c.id, "renamed").unwrap();
    let list = h.list_conversations().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!((list[0].title.as_str(), list[0].messages), ("renamed", 4));
    let missing = id("nope");
    assert!(matches!(
        h.send_message(&missing, Some("x"), &defaults),
        Err(hearth::engine::EngineError::Persist(PersistError::NotFound(_)))
    ));

    h.delete_conversation(&c.id).unwrap();
    h.flush_disk();
    assert!(h.list_conversations().unwrap().is_empty());
    assert!(!cache_path(&cache_dir(&data), &c.id).exists());
}

#[test]
fn the_disk_budget_evicts_least_recently_used_cache_files_never_text() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (spec, path) = model(dir.path());
    // Measure one file, then allow a little over two.
    let mut probe = disk_engine(&path, &dir.path().join("probe"), Faults::none());
    turn(&mut probe, &id("p"), &prompt(60, spec.vocab.size, 9), 5, 0);
    probe.flush_disk();
    let one = probe.stats().disk.unwrap().bytes;
    let settings = DiskSettings::new(&data, one * 5 / 2);
    let mut e = engine(&path, true, 64, 16).with_disk(&settings).unwrap();
    for (n, name) in ["a", "b", "c"].into_iter().enumerate() {
        turn(&mut e, &id(name), &prompt(60, spec.vocab.size, 30 + n as u32), 5, 0);
        e.flush_disk();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let s = e.stats().disk.unwrap();
    assert_eq!((s.files, s.files_evicted), (2, 1), "{s:?}");
    assert!(s.bytes <= one * 5 / 2);
    let cache = cache_dir(&data);
    assert!(
        !cache_path(&cache, &id("a")).exists(),
        "the least recently used file goes"
    );
    assert!(cache_path(&cache, &id("c")).exists());
    let store = e.conversations().unwrap();
    assert_eq!(store.list().unwrap().len(), 3, "every conversation's text is kept");
}

/// Every K/V type through the disk tier: a conversation saved with `dtype`, read back after a
/// restart, gives the same bits as the run that never restarted; an engine storing another type
/// does not use the file (and says why).
#[test]
fn every_kv_dtype_stays_warm_across_a_restart_and_other_types_are_not_used() {
    use hearth::config::KvDtype;
    for dtype in [KvDtype::F16, KvDtype::Bf16, KvDtype::Q8_0] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let (spec, path) = model(dir.path());
        let c = id("chat-t");
        let settings = hearth::config::CacheSettings {
            kv_dtype: Some(dtype),
            ..cache_settings(true, 16)
        };
        let with_disk = |settings: hearth::config::CacheSettings| {
            engine_with(&path, settings, 64, 16)
                .with_disk(&DiskSettings::new(&data, 1 << 30))
                .unwrap()
        };
        let mut first = with_disk(settings.clone());
        let h = three_turns(&mut first, &c, spec.vocab.size);
        first.flush_disk();
        drop(first);

        let mut kept = engine_with(&path, settings.clone(), 64, 16);
        for p in &h.turns {
            kept.generate(p, &greedy_exactly(20), |_| Ok(())).unwrap();
        }
        let never_restarted = kept.generate(&h.next, &greedy_exactly(20), |_| Ok(())).unwrap();

        let mut second = with_disk(settings.clone());
        let r = turn(&mut second, &c, &h.next, 20, 3);
        let whole_blocks = h.committed_after_turn3 / 16 * 16;
        assert_eq!(r.cached.disk_tokens, whole_blocks, "{dtype}: {:?}", r.cached);
        assert_eq!(r.tokens, never_restarted.tokens, "{dtype}");
        assert_eq!(
            r.logits, never_restarted.logits,
            "{dtype}: K/V from disk are the same bits"
        );
        second.flush_disk();
        drop(second);

        // An engine storing f32 ignores the file, with the reason.
        let other = hearth::config::CacheSettings {
            kv_dtype: Some(KvDtype::F32),
            ..settings
        };
        let mut third = with_disk(other);
        assert_eq!(
            third.stats().disk.unwrap().files,
            0,
            "{dtype}: a file of another K/V type was indexed"
        );
        let r = third.generate(&h.next, &greedy_exactly(4), |_| Ok(())).unwrap();
        assert_eq!(r.cached.disk_tokens, 0, "{dtype}");
        let layout = hearth::persist::kv_layout(third.model().transformer.kv_shape(), 16, KvDtype::F32);
        let current = hearth::persist::fingerprint(&third.model().info.files, "cpu", "", &layout, &mut |_| {}).unwrap();
        let (_, report) = DiskIndex::scan(cache_dir(&data), current, layout).unwrap();
        let msg = report.ignored[0].1.to_string();
        assert!(msg.contains(&format!("written with {dtype} K/V")), "{msg}");
    }
}

/// Temp files a killed writer left (its process is gone) are removed when the disk tier opens;
/// a live writer's are kept, and nothing else is touched.
#[test]
fn a_restart_removes_the_temp_files_of_dead_writers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (_spec, path) = model(dir.path());
    let cache = cache_dir(&data);
    let convs = data.join("conversations");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::create_dir_all(&convs).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = [
        cache.join(format!(".c1.hkv.tmp-{dead}-00000000000000a1")),
        convs.join(format!(".c1.json.tmp-{dead}-00000000000000a2")),
        cache.join(".c2.hkv.tmp-00000000000000a3"),
    ];
    let live = cache.join(format!(".c3.hkv.tmp-{}-00000000000000a4", std::process::id()));
    for p in stale.iter().chain([&live]) {
        std::fs::write(p, vec![1u8; 1 << 20]).unwrap();
    }
    let e = disk_engine(&path, &data, Faults::none());
    if Path::new("/proc").is_dir() {
        for p in &stale {
            assert!(!p.exists(), "{} survived the restart", p.display());
        }
    }
    assert!(live.exists(), "a live writer's temp file is kept");
    assert_eq!(e.stats().disk.unwrap().stale_temp_files, 0);
}

/// Phi-3's LongRoPE computes other K for the same tokens when the context picks its other
/// factors, so that choice is part of a cache file's fingerprint: a conversation saved with the
/// long factors is not used by an engine whose context picks the short ones, and is used again
/// by one that picks the long ones. `hearth cache` computes the same choice without loading.
#[test]
fn a_cache_file_of_the_other_longrope_factors_is_not_used() {
    use hearth::model::testkit::TinyLongRope;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let spec = TinyModelSpec {
        longrope: Some(TinyLongRope {
            short: vec![1.0; 32],
            long: (0..32).map(|i| 1.0 + 0.25 * i as f32).collect(),
            original_context: 128,
            attn_factor: 1.19,
        }),
        ..TinyModelSpec::tiny(Family::Phi3, WeightType::F32)
    };
    let path = write_tiny(dir.path(), &spec, "phi3-longrope.gguf");
    let with_context = |context: usize| {
        let resolved = hearth::model::source::resolve(
            &hearth::model::source::ModelSource::Local(path.clone()),
            &Default::default(),
        )
        .unwrap();
        let model = hearth::model::LoadedModel::load(&resolved, &candle_core::Device::Cpu, Some(context)).unwrap();
        assert_eq!(
            model.info.kv_variant,
            hearth::model::kv_variant_of(&path, Some(context)).unwrap(),
            "the engine and `hearth cache` disagree at context {context}"
        );
        hearth::engine::Engine::with_pool_sizes(
            model,
            &cache_settings(true, 16),
            &hearth::config::EngineSettings::default(),
            hearth::runtime::PoolSizes {
                device_blocks: 64,
                host_blocks: 16,
            },
        )
        .unwrap()
        .with_disk(&DiskSettings::new(&data, 1 << 30))
        .unwrap()
    };
    assert_eq!(hearth::model::kv_variant_of(&path, Some(512)).unwrap(), "rope_factors_long.weight");
    assert_eq!(hearth::model::kv_variant_of(&path, Some(128)).unwrap(), "rope_factors_short.weight");
    assert_eq!(hearth::model::kv_variant_of(&path, None).unwrap(), "rope_factors_long.weight");

    let c = id("chat-phi");
    let mut long = with_context(512);
    let h = three_turns(&mut long, &c, spec.vocab.size);
    long.flush_disk();
    drop(long);

    let short = with_context(128);
    assert_eq!(short.stats().disk.unwrap().files, 0, "a file of the long factors was indexed");
    drop(short);

    let mut long_again = with_context(400);
    assert_eq!(long_again.stats().disk.unwrap().files, 1);
    let r = turn(&mut long_again, &c, &h.next, 4, 3);
    assert!(r.cached.disk_tokens > 0, "{:?}", r.cached);
}
