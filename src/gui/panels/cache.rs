//! The right panel: what the cache did for the last turn (cached tokens by tier, time to first
//! token, speed), the hit rate since the app started with a chart of recent turns, and how the
//! device's memory, the RAM tier and the disk tier are used.

use egui_plot::{Bar, BarChart, Plot};

use super::super::AppModel;
use super::mib;
use crate::engine::TierStats;

/// A horizontal bar of `parts` (label, bytes, color) over `total`, with a legend line each.
fn bar(ui: &mut egui::Ui, title: &str, total: u64, parts: &[(&str, u64, egui::Color32)]) {
    ui.label(format!("{title}: {}", mib(total)));
    let width = ui.available_width();
    let (rect, _) = ui.allocate_exact_size(egui::vec2(width, 14.0), egui::Sense::hover());
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 2.0, ui.visuals().extreme_bg_color);
    let mut x = rect.left();
    for (_, bytes, color) in parts {
        let w = if total == 0 {
            0.0
        } else {
            width * (*bytes as f32 / total as f32)
        };
        let r = egui::Rect::from_min_size(egui::pos2(x, rect.top()), egui::vec2(w.max(0.0), rect.height()));
        painter.rect_filled(r, 0.0, *color);
        x += w;
    }
    for (name, bytes, color) in parts {
        ui.horizontal(|ui| {
            let (swatch, _) = ui.allocate_exact_size(egui::vec2(10.0, 10.0), egui::Sense::hover());
            ui.painter().rect_filled(swatch, 2.0, *color);
            ui.label(format!("{name}: {}", mib(*bytes)));
        });
    }
}

fn tier_parts(t: &TierStats) -> [(&'static str, u64, egui::Color32); 3] {
    [
        ("KV used", t.referenced_bytes(), egui::Color32::from_rgb(220, 120, 40)),
        ("KV cached", t.cached_bytes(), egui::Color32::from_rgb(60, 160, 90)),
        ("KV free", t.free_bytes(), egui::Color32::from_gray(120)),
    ]
}

pub fn show(ui: &mut egui::Ui, m: &AppModel) {
    egui::Panel::right("cache")
        .resizable(true)
        .default_size(260.0)
        .show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                ui.heading("Cache");
                let cuda = m
                    .stats
                    .as_ref()
                    .and_then(|s| s.memory.as_ref())
                    .is_some_and(|s| s.device == "cuda");
                let (device_tier, host_tier) = if cuda {
                    ("VRAM", "RAM")
                } else {
                    ("RAM (device tier)", "RAM (host tier)")
                };
                ui.strong("Last turn");
                match m.last_turn() {
                    None => {
                        ui.weak("No turn yet.");
                    }
                    Some(t) => {
                        let (d, h, disk) = t.by_tier();
                        ui.label(format!("Prompt tokens: {}", t.prompt_tokens));
                        ui.label(format!("Cached tokens: {}", t.cached.tokens));
                        ui.label(format!("  from {device_tier}: {d}"));
                        ui.label(format!("  from {host_tier}: {h}"));
                        ui.label(format!("  from disk: {disk}"));
                        ui.label(format!("Time to first token: {:.0} ms", t.ttft.as_secs_f64() * 1e3));
                        ui.label(format!("Speed: {:.1} tokens/s", t.tokens_per_second));
                    }
                }
                ui.separator();
                match m.hit_rate() {
                    Some(r) => ui.label(format!("Hit rate since start: {:.0}%", r * 100.0)),
                    None => ui.label("Hit rate since start: –"),
                };
                if !m.turns.is_empty() {
                    let cached: Vec<Bar> = m
                        .turns
                        .iter()
                        .enumerate()
                        .map(|(i, t)| Bar::new(i as f64, t.cached.tokens as f64))
                        .collect();
                    let computed: Vec<Bar> = m
                        .turns
                        .iter()
                        .enumerate()
                        .map(|(i, t)| {
                            Bar::new(
                                i as f64,
                                (t.prompt_tokens - t.cached.tokens.min(t.prompt_tokens)) as f64,
                            )
                        })
                        .collect();
                    let cached = BarChart::new("cached", cached).color(egui::Color32::from_rgb(60, 160, 90));
                    let computed = BarChart::new("prefilled", computed)
                        .color(egui::Color32::from_rgb(220, 120, 40))
                        .stack_on(&[&cached]);
                    Plot::new("recent turns")
                        .height(110.0)
                        .show_x(false)
                        .allow_drag(false)
                        .allow_zoom(false)
                        .allow_scroll(false)
                        .show(ui, |p| {
                            p.bar_chart(cached);
                            p.bar_chart(computed);
                        });
                    ui.weak("Prompt tokens of recent turns: cached (green), prefilled (orange)");
                }
                ui.separator();
                let Some(stats) = &m.stats else { return };
                ui.label(format!(
                    "K/V: {}, {:.1} KiB per token, {} tokens per GiB",
                    stats.kv_dtype,
                    stats.kv_bytes_per_token as f64 / 1024.0,
                    stats.tokens_per_gib()
                ));
                if let Some(r) = &stats.recurrent_states {
                    ui.label(format!(
                        "Recurrent state: {} copies kept, {:.1} of {:.1} MiB",
                        r.copies,
                        r.bytes as f64 / (1 << 20) as f64,
                        r.budget_bytes as f64 / (1 << 20) as f64
                    ));
                }
                if let Some(mem) = &stats.memory {
                    let title = if cuda { "VRAM" } else { "RAM" };
                    let mut parts = vec![("weights", mem.weights, egui::Color32::from_rgb(70, 110, 200))];
                    parts.extend(tier_parts(&stats.cache.device));
                    parts.push(("other", mem.other, egui::Color32::from_rgb(150, 90, 170)));
                    parts.push(("free", mem.free, egui::Color32::from_gray(60)));
                    bar(ui, title, mem.total, &parts);
                }
                let host = &stats.cache.host;
                if host.capacity_blocks > 0 {
                    ui.add_space(6.0);
                    bar(ui, "RAM tier", host.capacity_bytes(), &tier_parts(host));
                }
                ui.add_space(6.0);
                match &stats.disk {
                    Some(d) => {
                        ui.label(format!(
                            "Disk cache: {} files, {} of {}",
                            d.files,
                            mib(d.bytes),
                            mib(d.budget_bytes)
                        ));
                    }
                    None => {
                        ui.label("Disk cache: off");
                    }
                }
            });
        });
}
