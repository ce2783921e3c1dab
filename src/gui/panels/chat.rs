//! The middle: the open conversation (title with rename and delete, system prompt, messages
//! with markdown and code blocks, a thinking model's reasoning folded under "Thought", the
//! streaming reply) and the message box (send, stop, regenerate).

use super::super::{Action, AppModel, ModelStatus};
use crate::engine::{Message, Reasoning, Role};

// long: the panel's layout from top to bottom (title bar, system prompt, messages, reply,
// message box), read in the order it is drawn.
pub fn show(
    ui: &mut egui::Ui,
    m: &mut AppModel,
    markdown: &mut egui_commonmark::CommonMarkCache,
    actions: &mut Vec<Action>,
) {
    let ready = matches!(m.model, ModelStatus::Ready(_));
    let reasoning = match &m.model {
        ModelStatus::Ready(info) => info.reasoning,
        _ => None,
    };
    egui::Panel::bottom("input").resizable(false).show(ui, |ui| {
        // The buttons first, so a long draft can never push them out of the window.
        let mut label_id = None;
        ui.horizontal(|ui| {
            label_id = Some(ui.label("Message").id);
            let can_send = ready && !m.busy() && !m.draft.trim().is_empty();
            if ui.add_enabled(can_send, egui::Button::new("Send")).clicked() {
                actions.push(Action::Send);
            }
            if m.busy() && ui.button("Stop").clicked() {
                actions.push(Action::Stop);
            }
            let last_is_reply = m
                .open
                .as_ref()
                .and_then(|o| o.conversation.messages.last())
                .is_some_and(|msg| msg.role == Role::Assistant);
            if !m.busy() && last_is_reply && ui.button("Regenerate").clicked() {
                actions.push(Action::Regenerate);
            }
        });
        // A long message scrolls inside the box.
        egui::ScrollArea::vertical()
            .id_salt("draft")
            .max_height(160.0)
            .show(ui, |ui| {
                let edit = ui.add(
                    egui::TextEdit::multiline(&mut m.draft)
                        .desired_rows(3)
                        .desired_width(f32::INFINITY)
                        .hint_text("Write a message…"),
                );
                if let Some(id) = label_id {
                    edit.labelled_by(id);
                }
            });
    });
    egui::CentralPanel::default().show(ui, |ui| {
        if let Some(why) = m.open_id().and_then(|id| m.unsaved(id)).map(str::to_owned) {
            ui.colored_label(
                ui.visuals().error_fg_color,
                format!(
                    "This conversation is not saved: {why}. It is kept in memory and written again every few seconds; free some disk space."
                ),
            );
        }
        let Some(open) = m.open.as_mut() else {
            ui.centered_and_justified(|ui| {
                ui.label(if ready {
                    "Write a message to start a new chat."
                } else {
                    "Waiting for the model…"
                });
            });
            return;
        };
        let id = open.conversation.id.clone();
        ui.horizontal(|ui| match &mut m.renaming {
            Some((rid, title)) if *rid == id => {
                let label = ui.label("New title");
                ui.add(egui::TextEdit::singleline(title)).labelled_by(label.id);
                if ui.button("Save title").clicked() {
                    actions.push(Action::Rename(id.clone(), title.clone()));
                }
                if ui.button("Cancel").clicked() {
                    m.renaming = None;
                }
            }
            _ => {
                ui.heading(&open.conversation.title);
                if ui.button("Rename").clicked() {
                    m.renaming = Some((id.clone(), open.conversation.title.clone()));
                }
                if m.confirm_delete.as_ref() == Some(&id) {
                    if ui.button("Delete for good").clicked() {
                        actions.push(Action::Delete(id.clone()));
                    }
                    if ui.button("Keep").clicked() {
                        m.confirm_delete = None;
                    }
                } else if ui.button("Delete").clicked() {
                    m.confirm_delete = Some(id.clone());
                }
            }
        });
        egui::CollapsingHeader::new("System prompt").show(ui, |ui| {
            ui.add(
                egui::TextEdit::multiline(&mut open.system_prompt)
                    .desired_rows(2)
                    .desired_width(f32::INFINITY),
            );
            if ui.button("Apply").clicked() {
                actions.push(Action::ApplySystemPrompt);
            }
        });
        ui.separator();
        let streaming = m.streaming.as_ref().filter(|s| s.conversation == id);
        egui::ScrollArea::vertical().stick_to_bottom(true).show(ui, |ui| {
            for (i, msg) in open.conversation.messages.iter().enumerate() {
                match &msg.role {
                    Role::User => {
                        ui.group(|ui| {
                            ui.strong("You");
                            match &mut m.editing {
                                Some((at, text)) if *at == i => {
                                    ui.text_edit_multiline(text);
                                    let mut cancel = false;
                                    ui.horizontal(|ui| {
                                        if ui.button("Resend").clicked() {
                                            actions.push(Action::ResendEdited(i, text.clone()));
                                        }
                                        cancel = ui.button("Cancel edit").clicked();
                                    });
                                    if cancel {
                                        m.editing = None;
                                    }
                                }
                                _ => {
                                    ui.label(&msg.content);
                                    if m.streaming.is_none() && ui.small_button("Edit").clicked() {
                                        m.editing = Some((i, msg.content.clone()));
                                    }
                                }
                            }
                        });
                    }
                    Role::Assistant => {
                        ui.strong("Assistant");
                        let (thought, answer) = Reasoning::parts(reasoning, &msg.content);
                        if let Some(thought) = &thought {
                            egui::CollapsingHeader::new("Thought")
                                .id_salt(("thought", i))
                                .show(ui, |ui| ui.weak(thought.as_ref()));
                        }
                        if !answer.is_empty() || (msg.tool_calls.is_empty() && thought.is_none()) {
                            egui_commonmark::CommonMarkViewer::new().show(ui, markdown, answer);
                        }
                        tool_calls(ui, msg);
                    }
                    Role::System => {
                        ui.weak(format!("System: {}", msg.content));
                    }
                    Role::Other(_) if msg.role.is_tool() => tool_result(ui, msg),
                    Role::Other(role) => {
                        ui.weak(format!("{role}: {}", msg.content));
                    }
                }
                ui.add_space(6.0);
            }
            if let Some(s) = streaming {
                ui.strong("Assistant");
                let (thought, answer) = Reasoning::parts(reasoning, &s.text);
                if let Some(thought) = thought {
                    // Open while the model thinks, so the reasoning can be followed.
                    egui::CollapsingHeader::new(if answer.is_empty() { "Thinking…" } else { "Thought" })
                        .id_salt("thought-streaming")
                        .default_open(true)
                        .show(ui, |ui| ui.weak(thought.as_ref()));
                }
                ui.horizontal_wrapped(|ui| {
                    ui.label(answer);
                    ui.spinner();
                });
            }
        });
    });
}

/// An assistant turn's function calls (a conversation written through the API with tools).
fn tool_calls(ui: &mut egui::Ui, msg: &Message) {
    for call in &msg.tool_calls {
        ui.monospace(format!("Called {}({})", call.name, call.arguments));
    }
}

/// A `tool` message: a function's result, under the function's name when the client gave it.
fn tool_result(ui: &mut egui::Ui, msg: &Message) {
    ui.group(|ui| {
        let title = match &msg.name {
            Some(name) => format!("Result of {name}"),
            None => "Tool result".to_owned(),
        };
        ui.weak(title);
        ui.monospace(&msg.content);
    });
}
