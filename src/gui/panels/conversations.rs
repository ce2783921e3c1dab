//! The left panel: new chat, search, and the conversation list.

use super::super::{Action, AppModel};

pub fn show(ui: &mut egui::Ui, m: &mut AppModel, actions: &mut Vec<Action>) {
    egui::Panel::left("conversations")
        .resizable(true)
        .default_size(220.0)
        .show(ui, |ui| {
            ui.heading("Conversations");
            if ui.button("New chat").clicked() {
                actions.push(Action::NewConversation);
            }
            let label = ui.label("Search");
            ui.add(egui::TextEdit::singleline(&mut m.search).hint_text("title…"))
                .labelled_by(label.id);
            ui.separator();
            let open = m.open_id().cloned();
            egui::ScrollArea::vertical().show(ui, |ui| {
                for c in m.visible_conversations() {
                    let selected = open.as_ref() == Some(&c.id);
                    // A conversation only in memory (a full disk) is marked, with why.
                    let unsaved = m.unsaved(&c.id).map(str::to_owned);
                    let title = match &unsaved {
                        Some(_) => format!("⚠ {} (not saved)", c.title),
                        None => c.title.clone(),
                    };
                    let mut item = ui.selectable_label(selected, title);
                    if let Some(why) = unsaved {
                        item = item.on_hover_text(format!("Not saved: {why}"));
                    }
                    if item.clicked() && !selected {
                        actions.push(Action::Open(c.id.clone()));
                    }
                }
                if m.conversations.is_empty() {
                    ui.weak("No conversations yet.");
                }
            });
        });
}
