//! The settings window: the model (a local `.gguf` path, typed or picked with the file dialog,
//! or a hub spec, downloaded on "Load model"), sampling defaults, the
//! KV cache's sizes, block size and K/V type, and the data directory. "Save settings" writes them to the
//! config file; sampling applies to the next message at once, "Load model" reloads the model
//! (and the cache sizes with it), the data directory applies at the next start.

use super::super::{Action, AppModel};

/// The form's values, as edited.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingsForm {
    pub model_source: String,
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: usize,
    /// `None`: no limit (the model or the context ends a reply).
    pub max_tokens: Option<usize>,
    pub block_size: usize,
    /// How K/V is stored; `None`: the default (f16).
    pub kv_dtype: Option<crate::config::KvDtype>,
    pub host_cache_gib: f64,
    pub disk_cache_gib: f64,
    /// 0: sized from free memory.
    pub kv_pool_mib: u64,
    pub data_dir: String,
}

pub fn show(ui: &mut egui::Ui, m: &mut AppModel, actions: &mut Vec<Action>) {
    let picking = m.picking_file;
    let Some(form) = m.settings.as_mut() else { return };
    let mut open = true;
    egui::Window::new("Settings")
        .open(&mut open)
        .resizable(false)
        .show(ui.ctx(), |ui| {
            egui::Grid::new("settings").num_columns(2).show(ui, |ui| {
                let l = ui.label("Model");
                ui.horizontal(|ui| {
                    ui.add(egui::TextEdit::singleline(&mut form.model_source).desired_width(320.0))
                        .labelled_by(l.id)
                        .on_hover_text("a .gguf path, or owner/repo:file.gguf[@revision] on the Hugging Face hub");
                    let browse = ui
                        .add_enabled(!picking, egui::Button::new("Browse…"))
                        .on_hover_text("choose a .gguf file on this computer");
                    if browse.clicked() {
                        actions.push(Action::PickModelFile);
                    }
                });
                ui.end_row();
                let l = ui.label("Temperature");
                ui.add(egui::Slider::new(&mut form.temperature, 0.0..=2.0)).labelled_by(l.id);
                ui.end_row();
                let l = ui.label("Top-p");
                ui.add(egui::Slider::new(&mut form.top_p, 0.01..=1.0)).labelled_by(l.id);
                ui.end_row();
                let l = ui.label("Top-k");
                ui.add(egui::Slider::new(&mut form.top_k, 0..=200)).labelled_by(l.id);
                ui.end_row();
                let l = ui.label("Max reply tokens");
                ui.horizontal(|ui| {
                    let mut limited = form.max_tokens.is_some();
                    ui.checkbox(&mut limited, "Limit")
                        .on_hover_text("unchecked: a reply goes on until the model ends it or the context is full");
                    match (limited, form.max_tokens) {
                        (true, None) => form.max_tokens = Some(1024),
                        (false, Some(_)) => form.max_tokens = None,
                        _ => {}
                    }
                    if let Some(n) = &mut form.max_tokens {
                        ui.add(egui::DragValue::new(n).range(1..=1_000_000)).labelled_by(l.id);
                    } else {
                        ui.label("none");
                    }
                });
                ui.end_row();
                ui.label("Block size");
                egui::ComboBox::from_id_salt("block size")
                    .selected_text(form.block_size.to_string())
                    .show_ui(ui, |ui| {
                        for bs in [8, 16, 32, 64, 128, 256] {
                            ui.selectable_value(&mut form.block_size, bs, bs.to_string());
                        }
                    });
                ui.end_row();
                ui.label("K/V type");
                let shown = |t: Option<crate::config::KvDtype>| match t {
                    None => "default (f16)".to_string(),
                    Some(t) => t.name().to_string(),
                };
                egui::ComboBox::from_id_salt("kv dtype")
                    .selected_text(shown(form.kv_dtype))
                    .show_ui(ui, |ui| {
                        ui.selectable_value(&mut form.kv_dtype, None, shown(None));
                        for t in crate::config::KvDtype::ALL {
                            ui.selectable_value(&mut form.kv_dtype, Some(t), shown(Some(t)));
                        }
                    });
                ui.end_row();
                let l = ui.label("Device tier (MiB, 0 = auto)");
                ui.add(egui::DragValue::new(&mut form.kv_pool_mib).range(0..=1 << 20)).labelled_by(l.id);
                ui.end_row();
                let l = ui.label("RAM tier (GiB)");
                ui.add(egui::DragValue::new(&mut form.host_cache_gib).range(0.0..=1024.0).speed(0.25))
                    .labelled_by(l.id);
                ui.end_row();
                let l = ui.label("Disk cache (GiB)");
                ui.add(egui::DragValue::new(&mut form.disk_cache_gib).range(0.0..=100_000.0).speed(1.0))
                    .labelled_by(l.id);
                ui.end_row();
                let l = ui.label("Data directory");
                ui.add(egui::TextEdit::singleline(&mut form.data_dir).desired_width(320.0))
                    .labelled_by(l.id);
                ui.end_row();
            });
            ui.horizontal(|ui| {
                if ui.button("Save settings").clicked() {
                    actions.push(Action::SaveSettings);
                }
                if ui.button("Load model").clicked() {
                    actions.push(Action::LoadModel);
                }
            });
            ui.weak("Sampling applies to the next message; cache sizes with the next model load; the data directory at the next start.");
        });
    if !open {
        m.settings = None;
    }
}
