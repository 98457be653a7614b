//! The side panel's forms: synthetic-layer parameters and the loaded dataset's description.

use crate::analysis::Dataset;
use crate::data::SynthParams;
use eframe::egui::{self, Ui};
use mxmoe::moe::Scoring;
use mxmoe::scheme::Scheme;

pub fn synth_form(ui: &mut Ui, p: &mut SynthParams) {
    egui::Grid::new("synth").num_columns(2).show(ui, |ui| {
        let l = ui.label("scheme");
        egui::ComboBox::from_id_salt("scheme")
            .selected_text(p.scheme.name())
            .width(150.0)
            .show_ui(ui, |ui| {
                for s in Scheme::ALL {
                    ui.selectable_value(&mut p.scheme, s, s.name());
                }
            })
            .response
            .labelled_by(l.id);
        ui.end_row();
        let l = ui.label("router");
        egui::ComboBox::from_id_salt("scoring")
            .selected_text(p.scoring.name())
            .show_ui(ui, |ui| {
                for s in [Scoring::Softmax, Scoring::TopkSoftmax, Scoring::Sigmoid] {
                    ui.selectable_value(&mut p.scoring, s, s.name());
                }
            })
            .response
            .labelled_by(l.id);
        ui.end_row();
        let row = |ui: &mut Ui, name: &str, v: &mut usize, lo: usize, hi: usize, step: f64| {
            let l = ui.label(name);
            ui.add(egui::DragValue::new(v).range(lo..=hi).speed(step))
                .labelled_by(l.id);
            ui.end_row();
        };
        row(ui, "experts", &mut p.n_experts, 1, 512, 0.5);
        row(ui, "H (hidden)", &mut p.hidden, 32, 8192, 32.0);
        row(ui, "I (intermediate)", &mut p.inter, 32, 8192, 32.0);
        row(ui, "top-k", &mut p.top_k, 1, 64, 0.1);
        row(ui, "tokens", &mut p.tokens, 1, 4096, 1.0);
        let l = ui.label("seed");
        ui.add(egui::DragValue::new(&mut p.seed)).labelled_by(l.id);
        ui.end_row();
    });
    // Keep H and I on the block grid while dragging.
    p.hidden = (p.hidden / 32).max(1) * 32;
    p.inter = (p.inter / 32).max(1) * 32;
}

pub fn dataset_info(ui: &mut Ui, d: &Dataset) {
    let l = &d.layer;
    ui.label(egui::RichText::new("Loaded").strong());
    egui::Grid::new("info")
        .num_columns(2)
        .striped(true)
        .show(ui, |ui| {
            let mut kv = |k: &str, v: String| {
                ui.label(k);
                ui.add(egui::Label::new(egui::RichText::new(v).monospace()).wrap());
                ui.end_row();
            };
            let (file, batch) = d.source.split_once(" + ").unwrap_or((&d.source, ""));
            kv("source", file.to_string());
            if !batch.is_empty() {
                kv("tokens from", batch.to_string());
            }
            kv("scheme", l.config.scheme.name());
            kv("activation", l.config.activation.name().into());
            kv(
                "router",
                format!(
                    "{} top-{}{}",
                    l.config.router.scoring,
                    l.config.router.top_k,
                    if l.config.router.renormalize {
                        " renorm"
                    } else {
                        ""
                    }
                ),
            );
            kv("act. scale mode", l.config.act_scale_mode.name().into());
            kv(
                "experts",
                format!("{} ({} local)", l.config.n_experts, l.local_experts()),
            );
            kv("H x I", format!("{} x {}", l.config.hidden, l.config.inter));
            kv("tokens", d.m.to_string());
            kv(
                "batch",
                if d.batch.is_synthetic() {
                    "SYNTHETIC".into()
                } else {
                    "from files".into()
                },
            );
            let b = l.weight_bytes() as f64;
            let size = if b >= (1 << 20) as f64 {
                format!("{:.1} MiB packed", b / (1 << 20) as f64)
            } else {
                format!("{:.1} KiB packed", b / 1024.0)
            };
            kv("weights", size);
            kv(
                "unquantized",
                if d.w13_orig.is_some() {
                    "yes".into()
                } else {
                    "no".into()
                },
            );
        });
}
