//! The layer output error of the five OCP MX schemes (and the layer as stored) against an f64
//! reference, on the same layer and tokens.

use crate::analysis::SchemeView;
use crate::widgets::num;
use eframe::egui::{self, Color32, RichText, Ui};
use egui_plot::{Bar, BarChart, Plot};

pub fn show(ui: &mut Ui, v: &SchemeView) {
    ui.label(RichText::new("Layer output error vs the f64 reference, per scheme").strong());
    ui.label(format!("Reference: {}.", v.reference));
    ui.label(format!(
        "Weights quantized with scale mode \"{}\"; activations QDQ'd with \"{}\" at both points; f64 accumulation.",
        v.weight_scale_mode, v.act_scale_mode
    ));
    ui.add_space(4.0);
    let bars: Vec<Bar> = v
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let fill = if r.stored {
                Color32::from_rgb(160, 110, 200)
            } else {
                Color32::from_rgb(70, 140, 220)
            };
            Bar::new(i as f64, r.rel_l2)
                .width(0.7)
                .fill(fill)
                .name(format!(
                    "{}\noutput rel. L2 {}\nmax |error| {}\nweight rel. L2 {}",
                    r.label,
                    num(r.rel_l2),
                    num(r.max_abs),
                    num(r.weight_rel)
                ))
        })
        .collect();
    let labels: Vec<String> = v.rows.iter().map(|r| short(&r.label)).collect();
    let chart = BarChart::new("output error", bars)
        .element_formatter(Box::new(|b: &Bar, _| b.name.clone()));
    let ymax = v.rows.iter().map(|r| r.rel_l2).fold(0.0, f64::max);
    Plot::new("schemes-bars")
        .width((ui.available_width() - 8.0).min(900.0))
        .height(260.0)
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .allow_boxed_zoom(false)
        .include_y(0.0)
        .include_y(ymax * 1.1)
        .y_axis_label("output rel. L2 error")
        .x_axis_formatter(move |m, _| {
            let i = m.value.round();
            if (m.value - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .show(ui, |p| p.bar_chart(chart));
    ui.add_space(6.0);
    egui::Grid::new("schemes-table")
        .striped(true)
        .num_columns(5)
        .show(ui, |ui| {
            ui.strong("scheme");
            ui.strong("output rel. L2");
            ui.strong("output max |error|");
            ui.strong("weight rel. L2");
            ui.strong("forward (s)");
            ui.end_row();
            for r in &v.rows {
                ui.label(&r.label);
                ui.monospace(num(r.rel_l2));
                ui.monospace(num(r.max_abs));
                ui.monospace(num(r.weight_rel));
                ui.monospace(format!("{:.3}", r.seconds));
                ui.end_row();
            }
        });
}

/// `w_mxfp4_a_mxfp6_e3m2` -> `W4 A6 e3m2` style short labels for the axis.
fn short(s: &str) -> String {
    s.replace("as stored (", "stored\n")
        .replace(')', "")
        .replace("w_mxfp", "W")
        .replace("_a_mxfp", " A")
        .replace('_', " ")
}
