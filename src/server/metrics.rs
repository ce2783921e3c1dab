//! `GET /metrics`: the engine's statistics in Prometheus' text exposition format.
//!
//! Owns: [`render`], written by hand (no metrics crate): `# HELP` / `# TYPE` per family,
//! names prefixed `hearth_`, counters ending in `_total`, histograms as cumulative
//! `_bucket{le=..}` lines with `+Inf`, then `_sum` and `_count`. Everything comes from one
//! [`EngineStats`] snapshot, so the figures of one scrape agree with each other.
//!
//! Metrics: prefix-cache hit tokens by tier and the tokens looked up, prompt and generated
//! tokens, KV blocks per tier and state (used, cached, free), block copies and evictions,
//! requests submitted and by outcome, waiting and running requests, preemptions, engine steps
//! and busy time, time to first token and decode speed histograms, and the device memory
//! split when the device reports one, and the disk tier (cache files, bytes, hits, reads,
//! writes, evictions, damaged blocks, failed saves) when the engine has one.
//!
//! Counterpart: vLLM's `v1/metrics/loggers.py` (`PrometheusStatLogger`).

use std::fmt::{Display, Write};

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;

use crate::engine::ModelInfo;
use crate::engine::TierStats;
use crate::engine::{EngineStats, Histogram};

use super::AppState;

pub(crate) async fn handle(State(state): State<AppState>) -> impl IntoResponse {
    let text = render(
        &state.engine().stats(),
        &state.config().model_id,
        state.engine().model_info(),
    );
    ([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text)
}

/// The exposition text for one snapshot of the engine serving `model_id`.
// long: one statement per metric with its help text, in the order they are exposed.
pub fn render(stats: &EngineStats, model_id: &str, info: &ModelInfo) -> String {
    let mut m = Exposition::default();
    m.family("hearth_model_info", "gauge", "The served model (always 1).");
    m.sample(
        "hearth_model_info",
        &[
            ("model", model_id),
            ("architecture", &info.architecture),
            ("quantization", &info.quantization),
            ("device", &info.device),
        ],
        1,
    );
    m.gauge(
        "hearth_context_length_tokens",
        "Context length in tokens (prompt plus reply).",
        info.context_length,
    );

    let c = &stats.cache;
    m.family(
        "hearth_prefix_cache_hit_tokens_total",
        "counter",
        "Prompt tokens served from the KV cache, by the tier they were found in.",
    );
    m.sample(
        "hearth_prefix_cache_hit_tokens_total",
        &[("tier", "device")],
        c.hit_tokens_device,
    );
    m.sample(
        "hearth_prefix_cache_hit_tokens_total",
        &[("tier", "host")],
        c.hit_tokens_host,
    );
    m.counter(
        "hearth_prefix_cache_query_tokens_total",
        "Prompt tokens looked up in the prefix cache (a preempted request's are looked up again).",
        c.prompt_tokens,
    );
    m.counter(
        "hearth_prompt_tokens_total",
        "Prompt tokens of submitted requests.",
        stats.prompt_tokens,
    );
    m.counter(
        "hearth_generation_tokens_total",
        "Tokens generated.",
        stats.generated_tokens,
    );

    m.gauge(
        "hearth_kv_block_size_tokens",
        "Tokens per KV cache block.",
        c.block_size,
    );
    m.family(
        "hearth_kv_bytes_per_token",
        "gauge",
        "Bytes one cached token takes (K and V, all layers), labelled with the K/V type.",
    );
    m.sample(
        "hearth_kv_bytes_per_token",
        &[("dtype", stats.kv_dtype.name())],
        stats.kv_bytes_per_token,
    );
    if let Some(r) = &stats.recurrent_states {
        m.gauge(
            "hearth_recurrent_state_copies",
            "Copies of a recurrent model's state kept where cached prefixes may end.",
            r.copies,
        );
        m.gauge(
            "hearth_recurrent_state_bytes",
            "Bytes those copies take in RAM.",
            r.bytes,
        );
    }
    m.family(
        "hearth_kv_blocks",
        "gauge",
        "KV cache blocks by tier and state: used (referenced by running requests or pending copies), cached (evictable prefixes) and free.",
    );
    for (tier, t) in [("device", &c.device), ("host", &c.host)] {
        for (state, n) in block_states(t) {
            m.sample("hearth_kv_blocks", &[("tier", tier), ("state", state)], n);
        }
    }
    m.family(
        "hearth_kv_block_bytes",
        "gauge",
        "Bytes of one KV cache block (K and V, all layers), by tier.",
    );
    m.sample("hearth_kv_block_bytes", &[("tier", "device")], c.device.bytes_per_block);
    m.sample("hearth_kv_block_bytes", &[("tier", "host")], c.host.bytes_per_block);
    m.family(
        "hearth_kv_copies_total",
        "counter",
        "KV block copies between tiers, by kind.",
    );
    m.sample("hearth_kv_copies_total", &[("kind", "promotion")], c.promotions);
    m.sample("hearth_kv_copies_total", &[("kind", "demotion")], c.demotions);
    m.sample(
        "hearth_kv_copies_total",
        &[("kind", "write_through")],
        c.write_through_copies,
    );
    m.family(
        "hearth_kv_evictions_total",
        "counter",
        "Cached KV blocks dropped, by tier.",
    );
    m.sample("hearth_kv_evictions_total", &[("tier", "device")], c.evictions_device);
    m.sample("hearth_kv_evictions_total", &[("tier", "host")], c.evictions_host);

    let r = &stats.requests;
    m.counter(
        "hearth_requests_submitted_total",
        "Requests accepted by the engine.",
        r.submitted,
    );
    m.counter(
        "hearth_requests_rejected_total",
        "Requests refused at submission (invalid, over the context or the cache, queue full).",
        r.rejected,
    );
    m.family("hearth_requests_total", "counter", "Requests ended, by outcome.");
    m.sample("hearth_requests_total", &[("outcome", "finished")], r.finished);
    m.sample("hearth_requests_total", &[("outcome", "cancelled")], r.cancelled);
    m.sample("hearth_requests_total", &[("outcome", "failed")], r.failed);
    m.gauge(
        "hearth_requests_waiting",
        "Requests waiting to be scheduled.",
        stats.waiting,
    );
    m.gauge("hearth_requests_running", "Requests holding KV blocks.", stats.running);
    m.counter(
        "hearth_preemptions_total",
        "Times a running request was preempted to free KV blocks.",
        r.preemptions,
    );
    m.counter(
        "hearth_engine_steps_total",
        "Engine steps (batched forwards) run.",
        stats.steps,
    );
    m.counter(
        "hearth_engine_busy_seconds_total",
        "Seconds the engine spent in forwards.",
        stats.busy.as_secs_f64(),
    );

    m.histogram(
        "hearth_time_to_first_token_seconds",
        "Time from submission to the first generated token.",
        &stats.ttft_seconds,
    );
    m.histogram(
        "hearth_decode_tokens_per_second",
        "Decode speed of each finished request (tokens after the first, per second).",
        &stats.decode_tokens_per_second,
    );

    if let Some(s) = &stats.memory {
        m.gauge_labeled(
            "hearth_memory_total_bytes",
            "The device's memory.",
            &[("device", s.device)],
            s.total,
        );
        m.family(
            "hearth_memory_bytes",
            "gauge",
            "How the device's memory divides: weights, KV cache (used, cached, free), other, free.",
        );
        for (part, bytes) in [
            ("weights", s.weights),
            ("kv_used", s.kv_used),
            ("kv_cached", s.kv_cached),
            ("kv_free", s.kv_free),
            ("other", s.other),
            ("free", s.free),
        ] {
            m.sample("hearth_memory_bytes", &[("device", s.device), ("part", part)], bytes);
        }
    }
    if let Some(d) = &stats.disk {
        m.gauge(
            "hearth_disk_cache_files",
            "Cache files indexed (usable by this model).",
            d.files,
        );
        m.gauge("hearth_disk_cache_bytes", "Bytes of those cache files.", d.bytes);
        m.gauge(
            "hearth_disk_cache_budget_bytes",
            "The disk tier's budget.",
            d.budget_bytes,
        );
        m.counter(
            "hearth_disk_hit_tokens_total",
            "Prompt tokens whose K/V was read from cache files (also counted as host hits).",
            d.hit_tokens,
        );
        m.counter(
            "hearth_disk_read_bytes_total",
            "Bytes of K/V read from cache files.",
            d.bytes_read,
        );
        m.counter(
            "hearth_disk_files_written_total",
            "Cache files written.",
            d.files_written,
        );
        m.counter(
            "hearth_disk_written_bytes_total",
            "Bytes of cache files written.",
            d.bytes_written,
        );
        m.counter(
            "hearth_disk_files_evicted_total",
            "Cache files deleted to stay within the budget.",
            d.files_evicted,
        );
        m.counter(
            "hearth_disk_damaged_blocks_total",
            "Blocks that failed their checksum on read (never used).",
            d.damaged_blocks,
        );
        m.counter(
            "hearth_disk_write_failures_total",
            "Saves that failed (cache files and conversation text); generation went on.",
            d.write_failures,
        );
        m.gauge(
            "hearth_conversations_unsaved",
            "Conversations kept in memory because they could not be written (a full disk); retried every few seconds.",
            d.unsaved.len(),
        );
    }
    m.out
}

fn block_states(t: &TierStats) -> [(&'static str, usize); 3] {
    [
        ("used", t.referenced_blocks),
        ("cached", t.cached_blocks),
        ("free", t.free_blocks),
    ]
}

#[derive(Default)]
struct Exposition {
    out: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(
            self.out,
            "# HELP {name} {}",
            help.replace('\\', "\\\\").replace('\n', "\\n")
        );
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    fn counter(&mut self, name: &str, help: &str, value: impl Display) {
        self.family(name, "counter", help);
        self.sample(name, &[], value);
    }

    fn gauge(&mut self, name: &str, help: &str, value: impl Display) {
        self.gauge_labeled(name, help, &[], value);
    }

    fn gauge_labeled(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: impl Display) {
        self.family(name, "gauge", help);
        self.sample(name, labels, value);
    }

    fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.family(name, "histogram", help);
        let bucket = format!("{name}_bucket");
        for (bound, count) in h.bounds.iter().zip(&h.counts) {
            self.sample(&bucket, &[("le", &bound.to_string())], count);
        }
        self.sample(&bucket, &[("le", "+Inf")], h.count);
        self.sample(&format!("{name}_sum"), &[], h.sum);
        self.sample(&format!("{name}_count"), &[], h.count);
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_lines_and_label_escaping() {
        let mut h = Histogram::new(&[0.5, 1.0]);
        h.observe(0.25);
        h.observe(2.0);
        let mut m = Exposition::default();
        m.histogram("x_seconds", "help", &h);
        let want = "# HELP x_seconds help\n# TYPE x_seconds histogram\n\
                    x_seconds_bucket{le=\"0.5\"} 1\nx_seconds_bucket{le=\"1\"} 1\n\
                    x_seconds_bucket{le=\"+Inf\"} 2\nx_seconds_sum 2.25\nx_seconds_count 2\n";
        assert_eq!(m.out, want);
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
