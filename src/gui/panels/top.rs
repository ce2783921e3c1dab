//! The top bar: the model (name, quantization, context, device, and what an embedding model or a
//! reranker is for; or loading, with the download's
//! progress bar and a cancel button; or why it failed), the cache panel's toggle, and errors
//! until dismissed.

use super::super::{Action, AppModel, ModelStatus};

pub fn show(ui: &mut egui::Ui, m: &mut AppModel, actions: &mut Vec<Action>) {
    egui::Panel::top("top").show(ui, |ui| {
        ui.horizontal(|ui| {
            ui.strong("hearth");
            ui.separator();
            match &m.model {
                ModelStatus::Loading(what) => match &m.download {
                    Some(d) => {
                        ui.label(format!("{} {}", if d.reading { "Loading" } else { "Downloading" }, d.file));
                        ui.add(
                            egui::ProgressBar::new(d.fraction())
                                .desired_width(240.0)
                                .show_percentage(),
                        );
                        ui.label(format!("{} of {}", size(d.done), size(d.total)));
                        if ui.button(if d.reading { "Cancel" } else { "Cancel download" }).clicked() {
                            actions.push(Action::CancelLoad);
                        }
                    }
                    None => {
                        ui.spinner();
                        ui.label(format!("Loading {what}…"));
                        if ui.button("Cancel").clicked() {
                            actions.push(Action::CancelLoad);
                        }
                    }
                },
                ModelStatus::Ready(i) => {
                    ui.label(format!(
                        "{} · {} · {} tokens of context · {}",
                        i.name, i.quantization, i.context_length, i.device
                    ));
                    // An embedding model or a reranker answers a chat with noise: say so.
                    if let Some(n) = i.purpose.notice() {
                        ui.colored_label(ui.visuals().warn_fg_color, n);
                    }
                }
                ModelStatus::Failed(e) => {
                    ui.colored_label(ui.visuals().error_fg_color, format!("The model failed to load: {e}"));
                }
            }
            ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                ui.toggle_value(&mut m.show_cache_panel, "Cache panel");
                if ui.button("Settings").clicked() {
                    actions.push(Action::OpenSettings);
                }
            });
        });
        if let Some(n) = &m.notice {
            let mut dismiss = false;
            ui.horizontal(|ui| {
                ui.label(n);
                dismiss = ui.small_button("OK").clicked();
            });
            if dismiss {
                m.notice = None;
            }
        }
        for (i, e) in m.errors.iter().enumerate() {
            ui.horizontal(|ui| {
                ui.colored_label(ui.visuals().error_fg_color, e);
                if ui.small_button("Dismiss").clicked() {
                    actions.push(Action::DismissError(i));
                }
            });
        }
    });
}

/// Bytes as MiB, or GiB from 10 GiB on, for the download's figures.
fn size(bytes: u64) -> String {
    if bytes >= 10 << 30 {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        super::mib(bytes)
    }
}
