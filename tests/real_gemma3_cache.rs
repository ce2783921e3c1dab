//! Gemma 3 270M (real, Q4_K_M): a long conversation stays warm and correct across its
//! sliding window. A first turn of ~1,500 tokens (three 512-token windows), then a follow-up
//! turn that reuses it from the device tier, from the host tier (after another long prompt
//! pushed it there) and from its cache file after a restart: each equals the uncached run.

mod common;

use std::path::Path;

use candle_core::Device;
use common::*;
use hearth::engine::{DiskSettings, Engine, GenerateRequest, SaveTo};
use hearth::model::chat::Message;
use hearth::model::source::{resolve, ModelSource};
use hearth::model::LoadedModel;
use hearth::persist::ConversationId;

fn facts(n: usize, times: usize) -> String {
    let lines: Vec<String> = (1..=n)
        .map(|i| format!("Fact {i}: {i} times {times} is {}.", i * times))
        .collect();
    format!("Read these facts carefully.\n{}\nWhat is fact 2?", lines.join("\n"))
}

/// Cached against uncached: logits equal up to float rounding.
const TOL: f32 = 1e-3;

/// 110 device blocks of 16 tokens (one long prompt and a little), 256 host blocks, a disk tier.
fn cached_engine(path: &Path, data: &Path) -> Engine {
    engine(path, true, 110, 256)
        .with_disk(&DiskSettings::new(data, 1 << 30))
        .unwrap()
}

#[test]
fn a_long_gemma3_conversation_is_exact_from_every_tier() {
    let Some(path) = common::real::real_model("a_long_gemma3_conversation_is_exact", common::real::GEMMA3) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let model = LoadedModel::load(
        &resolve(&ModelSource::Local(path.clone()), &Default::default()).unwrap(),
        &Device::Cpu,
        None,
    )
    .unwrap();
    let first = vec![Message::user(facts(86, 3))];
    let turn1 = model.chat_ids(&first).unwrap();
    assert!(turn1.len() > 1_400, "{} tokens", turn1.len());
    let conversation = ConversationId::parse("gemma-long").unwrap();

    let mut cached = cached_engine(&path, &data);
    let request = |prompt: &[u32]| GenerateRequest {
        prompt: prompt.to_vec(),
        params: greedy_exactly(12),
        save: Some(SaveTo {
            conversation: conversation.clone(),
            messages: None,
        }),
    };
    let r1 = cached.run(request(&turn1), |_| Ok(())).unwrap();
    let mut second = first.clone();
    second.push(Message::assistant(r1.text.clone()));
    second.push(Message::user("And what is fact 5?"));
    let turn2 = model.chat_ids(&second).unwrap();
    let other_prompt = model.chat_ids(&[Message::user(facts(86, 7))]).unwrap();
    drop(model);

    let cold = engine(&path, false, 200, 0)
        .generate(&turn2, &greedy_exactly(12), |_| Ok(()))
        .unwrap();
    assert_eq!(cold.cached.tokens, 0);

    let device = cached.run(request(&turn2), |_| Ok(())).unwrap();
    assert!(device.cached.device_tokens >= 1_400, "{:?}", device.cached);
    assert_same_run(&device, &cold, "turn 2 from the device tier", TOL);

    // Another long prompt takes the device blocks; turn 2's prefix moves to the host tier.
    let other = cached.generate(&other_prompt, &greedy_exactly(2), |_| Ok(())).unwrap();
    assert!(
        other.cached.tokens <= 16,
        "only the shared first block: {:?}",
        other.cached
    );
    let host = cached.run(request(&turn2), |_| Ok(())).unwrap();
    assert!(host.cached.host_tokens >= 1_000, "{:?}", host.cached);
    assert_same_run(&host, &cold, "turn 2 from the host tier", TOL);

    // A restart: empty RAM tiers, the conversation's cache file on disk.
    cached.flush_disk();
    drop(cached);
    let mut restarted = cached_engine(&path, &data);
    let disk = restarted.run(request(&turn2), |_| Ok(())).unwrap();
    assert!(disk.cached.disk_tokens >= 1_400, "{:?}", disk.cached);
    assert_same_run(&disk, &cold, "turn 2 from the cache file after a restart", TOL);
    eprintln!(
        "gemma3: turn 1 {} tokens, turn 2 {} tokens; hits: device {}, host {}, disk {}",
        turn1.len(),
        turn2.len(),
        device.cached.device_tokens,
        host.cached.host_tokens,
        disk.cached.disk_tokens
    );
}
