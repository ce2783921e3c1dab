//! The engine thread and its scheduler: continuous batching gives every
//! request exactly the tokens it gets alone; preemption, cancellation and a
//! vanished consumer all give every block back.

mod common;

use std::time::{Duration, Instant};

use common::*;
use hearth::config::EngineSettings;
use hearth::engine::{
    Engine, EngineError, EngineHandle, ErrorKind, Event, GenerateParams, GenerateRequest, GenerationReport, RequestId,
    StopReason, Submission,
};
use hearth::model::hparams::Family;
use hearth::model::testkit::{TinyModelSpec, WeightType};

/// Greedy, exactly `n` tokens: a random model's end-of-turn does not stop it.
fn fixed_length(n: usize) -> GenerateParams {
    GenerateParams {
        ignore_eos: true,
        ..GenerateParams::greedy(n)
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    vocab: usize,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0);
    let path = write_tiny(dir.path(), &spec, "llama.gguf");
    Fixture {
        _dir: dir,
        path,
        vocab: spec.vocab.size,
    }
}

/// Sixteen requests of mixed lengths; some share a 40-token prefix. Replies
/// are `min_reply` to `min_reply + 16` tokens.
fn requests(vocab: usize, min_reply: usize) -> Vec<GenerateRequest> {
    let shared = prompt(40, vocab, 77);
    (0..16u32)
        .map(|i| {
            let mut p = if i % 3 == 0 { shared.clone() } else { Vec::new() };
            p.extend(prompt(5 + (i as usize * 13) % 90, vocab, 100 + i));
            GenerateRequest {
                prompt: p,
                params: GenerateParams::greedy(min_reply + (i as usize * 7) % 17),
                save: None,
            }
        })
        .collect()
}

/// Each request alone, on an engine without prefix caching.
fn alone(path: &std::path::Path, reqs: &[GenerateRequest]) -> Vec<GenerationReport> {
    let mut e = engine(path, false, 64, 0);
    reqs.iter()
        .map(|r| e.generate(&r.prompt, &r.params, |_| Ok(())).unwrap())
        .collect()
}

fn wait_for(stream: &mut hearth::engine::RequestStream) -> Result<GenerationReport, EngineError> {
    let mut text = String::new();
    let mut ids = Vec::new();
    loop {
        match stream.blocking_recv() {
            Some(Event::Token { id, text: t, .. }) => {
                text.push_str(&t);
                ids.push(id);
            }
            Some(Event::Done(r)) => {
                assert_eq!(r.text, text, "{}: streamed text differs from the report", r.id);
                return Ok(*r);
            }
            Some(Event::Error(e)) => return Err(e),
            None => panic!("the stream ended without Done or Error"),
        }
    }
}

/// Polls the published stats until `ended` requests have ended and nothing
/// runs or waits (a snapshot may predate the last submission).
fn settle(h: &EngineHandle, ended: u64) -> hearth::engine::EngineStats {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = h.stats();
        let r = s.requests;
        if r.finished + r.cancelled + r.failed >= ended && s.running == 0 && s.waiting == 0 && s.cache.running_seqs == 0
        {
            return s;
        }
        assert!(Instant::now() < deadline, "the engine did not settle: {s:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn run_concurrently(e: Engine, reqs: &[GenerateRequest]) -> (Vec<GenerationReport>, hearth::engine::EngineStats) {
    let h = EngineHandle::spawn(e, 64).unwrap();
    let mut streams: Vec<_> = reqs.iter().map(|r| h.submit(r.clone()).unwrap()).collect();
    let reports = streams.iter_mut().map(|s| wait_for(s).unwrap()).collect();
    (reports, settle(&h, reqs.len() as u64))
}

#[test]
fn sixteen_concurrent_requests_get_exactly_their_tokens_alone() {
    let f = fixture();
    let reqs = requests(f.vocab, 4);
    let reference = alone(&f.path, &reqs);
    // A small token budget: prompts are prefilled in chunks, mixed with decodes.
    let limits = EngineSettings {
        max_running: 16,
        max_batch_tokens: 48,
        max_queued: 64,
        threads: None,
    };
    let e = engine_limits(&f.path, cache_settings(true, 16), &limits, 128, 0);
    let (reports, stats) = run_concurrently(e, &reqs);
    for (i, (got, want)) in reports.iter().zip(&reference).enumerate() {
        assert_eq!(got.tokens, want.tokens, "request {i}: batched tokens differ from alone");
        assert_eq!(got.text, want.text, "request {i}");
        assert_eq!(got.stop, want.stop, "request {i}");
        assert_eq!(got.preemptions, 0, "request {i}");
    }
    // Batching happened: far fewer steps than tokens sampled.
    let sampled: usize = reports.iter().map(|r| r.tokens.len()).sum();
    assert!(
        (stats.steps as usize) < sampled,
        "{} steps for {sampled} tokens",
        stats.steps
    );
    // The shared prefix was reused by later requests.
    assert!(
        reports.iter().any(|r| r.cached.tokens >= 32),
        "no request hit the shared prefix"
    );
    assert_blocks_released(&stats.cache, "after the batch");
    assert_eq!(stats.requests.finished, 16);
    assert_eq!(stats.requests.submitted, 16);
}

#[test]
fn preemption_under_a_small_pool_still_completes_every_request_exactly() {
    let f = fixture();
    let reqs = requests(f.vocab, 30);
    let reference = alone(&f.path, &reqs);
    let limits = EngineSettings {
        max_running: 16,
        max_batch_tokens: 64,
        max_queued: 64,
        threads: None,
    };
    // Fourteen 16-token blocks: the longest request (at most 181 tokens)
    // fits alone; growing replies of several together do not.
    let longest = reqs.iter().map(|r| r.prompt.len() + r.params.max_tokens).max().unwrap();
    assert!(longest <= 14 * 16, "{longest}");
    let e = engine_limits(&f.path, cache_settings(true, 16), &limits, 14, 0);
    let (reports, stats) = run_concurrently(e, &reqs);
    for (i, (got, want)) in reports.iter().zip(&reference).enumerate() {
        assert_eq!(got.tokens, want.tokens, "request {i}: tokens differ after preemption");
        assert_eq!(got.text, want.text, "request {i}");
    }
    assert!(
        stats.requests.preemptions > 0,
        "nothing was preempted: {:?}",
        stats.requests
    );
    assert!(reports.iter().any(|r| r.preemptions > 0));
    assert_blocks_released(&stats.cache, "after preemptions");
    assert_eq!(stats.requests.finished, 16);
}

#[test]
fn a_vanished_consumer_frees_its_blocks_within_one_step() {
    let f = fixture();
    let mut e = engine(&f.path, true, 64, 0);
    let mut receivers = Vec::new();
    for i in 0..2u64 {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        e.add_request(Submission {
            id: RequestId(i),
            request: GenerateRequest {
                prompt: prompt(30 + 20 * i as usize, f.vocab, i as u32),
                params: fixed_length(200),
                save: None,
            },
            events: tx,
            submitted: Instant::now(),
            ticket: None,
            constraint: None,
        });
        receivers.push(rx);
    }
    for _ in 0..4 {
        e.step();
    }
    let before = e.cache_stats();
    assert_eq!(before.running_seqs, 2);
    let first = receivers.remove(0);
    drop(first);
    e.step();
    let after = e.cache_stats();
    assert_eq!(after.running_seqs, 1, "the abandoned request still holds its sequence");
    // Only the other request (50 prompt tokens + 5 generated: 4 blocks) holds blocks now.
    assert_eq!(after.device.referenced_blocks, 4);
    assert_eq!(e.stats().requests.cancelled, 1);
    // The survivor goes on to its end, and then nothing is held.
    while e.has_work() {
        e.step();
    }
    assert_blocks_released(&e.cache_stats(), "after the survivor");
    let mut rx = receivers.remove(0);
    let mut done = false;
    while let Ok(ev) = rx.try_recv() {
        done |= matches!(ev, Event::Done(_));
    }
    assert!(done, "the survivor did not finish");
}

#[test]
fn dropping_a_stream_or_cancelling_through_the_handle_releases_everything() {
    let f = fixture();
    let h = EngineHandle::spawn(engine(&f.path, true, 64, 0), 8).unwrap();
    let long = GenerateRequest {
        prompt: prompt(40, f.vocab, 3),
        params: fixed_length(400),
        save: None,
    };
    let mut s = h.submit(long.clone()).unwrap();
    assert!(matches!(s.blocking_recv(), Some(Event::Token { .. })));
    drop(s);
    let stats = settle(&h, 1);
    assert_blocks_released(&stats.cache, "after the drop");
    assert_eq!(stats.requests.cancelled, 1);

    let mut s = h.submit(long).unwrap();
    assert!(matches!(s.blocking_recv(), Some(Event::Token { .. })));
    h.cancel(s.id());
    let end = loop {
        match s.blocking_recv() {
            Some(Event::Token { .. }) => continue,
            other => break other,
        }
    };
    assert!(matches!(end, Some(Event::Error(EngineError::Cancelled))), "{end:?}");
    let stats = settle(&h, 2);
    assert_blocks_released(&stats.cache, "after the cancel");
    assert_eq!(stats.requests.cancelled, 2);
}

#[test]
fn stop_strings_end_the_reply_before_the_string() {
    let f = fixture();
    let mut e = engine(&f.path, true, 64, 0);
    let p = prompt(20, f.vocab, 9);
    let fixed = fixed_length(24);
    let full = e.generate(&p, &fixed, |_| Ok(())).unwrap();
    assert_eq!(full.tokens.len(), 24, "ignore_eos gives exactly max_tokens");
    let chars: Vec<(usize, char)> = full.text.char_indices().collect();
    assert!(chars.len() >= 8, "the reply is too short to cut: {:?}", full.text);
    let (a, _) = chars[chars.len() / 2];
    let b = chars.get(chars.len() / 2 + 2).map_or(full.text.len(), |c| c.0);
    let stop = full.text[a..b].to_string();
    let expected = &full.text[..full.text.find(&stop).unwrap()];
    let mut streamed = String::new();
    let params = GenerateParams {
        stop: vec!["never appears \u{1}".into(), stop.clone()],
        ..fixed.clone()
    };
    let cut = e
        .generate(&p, &params, |t| {
            streamed.push_str(t);
            Ok(())
        })
        .unwrap();
    assert_eq!(cut.stop, StopReason::StopString);
    assert_eq!(cut.text, expected, "stop {stop:?}");
    assert_eq!(streamed, expected, "the stop string leaked into the stream");
    assert!(full.tokens.starts_with(&cut.tokens));
    assert_blocks_released(&e.cache_stats(), "after the stop");
}

#[test]
fn bad_requests_are_refused_before_they_are_queued() {
    let f = fixture();
    let h = EngineHandle::spawn(engine(&f.path, true, 8, 0), 0).unwrap();
    let req = |prompt: Vec<u32>, params: GenerateParams| GenerateRequest::new(prompt, params);
    let kind = |r: GenerateRequest| h.submit(r).map(|_| ()).unwrap_err().kind();
    assert_eq!(kind(req(vec![], GenerateParams::greedy(3))), ErrorKind::InvalidRequest);
    assert_eq!(
        kind(req(vec![f.vocab as u32 + 5], GenerateParams::greedy(3))),
        ErrorKind::InvalidRequest
    );
    assert_eq!(
        kind(req(prompt(600, f.vocab, 1), GenerateParams::greedy(3))),
        ErrorKind::ContextLength
    );
    // Eight blocks of 16: a 200-token prompt can never fit the cache.
    let err = h
        .submit(req(prompt(200, f.vocab, 1), GenerateParams::greedy(3)))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ContextLength);
    assert!(err.to_string().contains("holds only 128"), "{err}");
    let mut bad = GenerateParams::greedy(3);
    bad.sampling.top_p = 0.0;
    assert_eq!(kind(req(prompt(5, f.vocab, 1), bad)), ErrorKind::InvalidRequest);
    let mut bad = GenerateParams::greedy(3);
    bad.stop = vec![String::new()];
    assert_eq!(kind(req(prompt(5, f.vocab, 1), bad)), ErrorKind::InvalidRequest);
    assert_eq!(
        kind(req(prompt(5, f.vocab, 1), GenerateParams::greedy(0))),
        ErrorKind::InvalidRequest
    );
    // A queue of zero: every valid request is refused as overload.
    let err = h
        .submit(req(prompt(5, f.vocab, 1), GenerateParams::greedy(3)))
        .unwrap_err();
    assert!(matches!(err, EngineError::QueueFull { limit: 0 }), "{err}");
    assert_eq!(err.kind(), ErrorKind::Overloaded);
    let stats = h.stats();
    assert_eq!(stats.requests.submitted, 0);
    assert_eq!(h.queued(), 0);
}

#[test]
fn a_request_alone_that_fills_the_cache_stops_at_its_end() {
    let f = fixture();
    // Three blocks: 48 tokens in all; a 40-token prompt can grow by 8.
    let mut e = engine(&f.path, true, 3, 0);
    let r = e
        .generate(&prompt(40, f.vocab, 5), &fixed_length(100), |_| Ok(()))
        .unwrap();
    assert_eq!(r.stop, StopReason::ContextFull);
    assert_eq!(
        r.tokens.len(),
        9,
        "48 slots hold 40 prompt tokens and 8 fed replies; the 9th is sampled"
    );
    assert_blocks_released(&e.cache_stats(), "after the full cache");
}

/// A prompt's scores (`prompt_logprobs`, the completions' `echo`) do not depend on how the
/// prompt is cut into chunks: fed whole alone, or a token at a time beside another request.
#[test]
fn prompt_scores_do_not_depend_on_the_chunking() {
    let f = fixture();
    let scored = GenerateRequest::new(
        prompt(40, f.vocab, 7),
        GenerateParams {
            prompt_logprobs: Some(3),
            ..GenerateParams::greedy(2)
        },
    );
    let (mut alone, _) = run_concurrently(engine(&f.path, true, 64, 0), std::slice::from_ref(&scored));
    let whole = alone.remove(0);
    assert_eq!(whole.prompt_logprobs.len(), 39);
    // Two tokens a step: once the other request decodes, the prompt gets one token a step.
    let limits = EngineSettings {
        max_running: 2,
        max_batch_tokens: 2,
        max_queued: 64,
        threads: None,
    };
    let busy = GenerateRequest::new(prompt(8, f.vocab, 1), fixed_length(60));
    let e = engine_limits(&f.path, cache_settings(true, 16), &limits, 64, 0);
    let (reports, stats) = run_concurrently(e, &[busy, scored]);
    let chunked = &reports[1];
    assert_eq!(chunked.prompt_logprobs.len(), 39, "every prompt token after the first is scored");
    for (i, (a, b)) in chunked.prompt_logprobs.iter().zip(&whole.prompt_logprobs).enumerate() {
        assert_eq!(a.id, b.id, "token {}", i + 1);
        assert!((a.logprob - b.logprob).abs() < 1e-4, "token {}: {} vs {}", i + 1, a.logprob, b.logprob);
        let ids = |t: &[(u32, f32)]| t.iter().map(|p| p.0).collect::<Vec<_>>();
        assert_eq!(ids(&a.top), ids(&b.top), "token {}", i + 1);
    }
    assert_eq!(chunked.tokens, whole.tokens);
    assert_blocks_released(&stats.cache, "after scoring");
}
