//! Activation QDQ error of the token batch at both QDQ points (the input, per token along H, and
//! the intermediate, per token-expert slot along I) under each scale mode, side by side.

use super::{exp_histograms, rule_color, summary_grid};
use crate::analysis::{ActView, Rule, TensorStats};
use crate::state::ActsUi;
use crate::widgets::{exact, legend, Colormap, Heatmap};
use eframe::egui::{Color32, RichText, Ui, Vec2};

pub fn show(ui: &mut Ui, v: &ActView, st: &mut ActsUi) {
    let (Some(fmt), Some(input), Some(inter)) = (v.format, &v.input, &v.intermediate) else {
        ui.label(RichText::new("Weight-only scheme: activations are not quantized.").strong());
        ui.label("Pick a scheme with an activation format (w_…_a_…) to see activation QDQ error.");
        return;
    };
    let layer_rule = Some(Rule::Mode(v.layer_mode));
    ui.label(format!(
        "Activations QDQ'd to {fmt}; the layer itself uses scale mode \"{}\" at both points.",
        v.layer_mode
    ));
    ui.columns(2, |c| {
        c[0].label(RichText::new("1. input (per token, 32-blocks along H)").strong());
        summary_grid(&mut c[0], "act-in", &input.by_rule, layer_rule);
        c[1].label(RichText::new("2. intermediate (per token-expert, 32-blocks along I)").strong());
        summary_grid(&mut c[1], "act-mid", &inter.by_rule, layer_rule);
    });
    ui.add_space(6.0);
    ui.horizontal(|ui| {
        ui.label("QDQ point");
        ui.selectable_value(&mut st.point, 0, "input");
        ui.selectable_value(&mut st.point, 1, "intermediate");
    });
    let t: &TensorStats = if st.point == 0 { input } else { inter };
    let k = v.top_k;
    let q0 = &t.by_rule[0];
    let rows = q0.groups();
    let bpr = q0.blocks_per_row();
    let hi = t
        .by_rule
        .iter()
        .map(|q| crate::widgets::finite_range(&q.block_rel).1)
        .fold(0.0f32, f32::max);
    let row_name = if st.point == 0 {
        "token"
    } else {
        "token·k + slot"
    };
    let own = t
        .by_rule
        .iter()
        .position(|q| Some(q.rule) == layer_rule)
        .unwrap_or(0);
    let (cols, w) = super::columns(ui, 2, 380.0);
    let draw_sorted = |ui: &mut Ui, w: f32| {
        ui.label(RichText::new("Per-block error, sorted (every scale mode)").strong());
        let series: Vec<(String, Color32, Vec<f32>)> = t
            .by_rule
            .iter()
            .map(|q| {
                (
                    q.rule.name().to_string(),
                    rule_color(q.rule),
                    q.block_q.clone(),
                )
            })
            .collect();
        super::quantile_plot(
            ui,
            &format!("act-q-{}", st.point),
            &series,
            "rel. error of the block",
            Vec2::new(w, 260.0),
        );
    };
    let draw_map = |ui: &mut Ui, w: f32| {
        let q = &t.by_rule[own];
        ui.label(
            RichText::new(format!(
                "Per block under the layer's mode ({}): {rows} {row_name}s × {bpr} blocks",
                q.rule.name()
            ))
            .strong(),
        )
        .on_hover_text("columns that stay bright across tokens are outlier channels");
        legend(ui, Colormap::Inferno, 0.0, hi, "rel. error");
        let ch = (rows as f32 * 4.0).clamp(160.0, 300.0) + 28.0;
        Heatmap::new(("act-block", st.point, own), rows, bpr, &q.block_rel)
            .range(0.0, hi)
            .cmap(Colormap::Inferno)
            .size(Vec2::new(w, ch))
            .names(row_name, "block")
            .show(ui, |ui, r, b| {
                let who = if st.point == 0 {
                    format!("token {r}")
                } else {
                    format!("token {}, slot {}", r / k, r % k)
                };
                ui.label(
                    RichText::new(format!(
                        "{who}, block {b} (elements {}..{})",
                        b * 32,
                        b * 32 + 31
                    ))
                    .strong(),
                );
                for q2 in t.by_rule.iter() {
                    ui.monospace(format!(
                        "{:>6}: block {}  row {}",
                        q2.rule.name(),
                        exact(q2.block_rel[r * bpr + b]),
                        exact(q2.group_rel[r])
                    ));
                }
            });
    };
    if cols >= 2 {
        ui.horizontal_top(|ui| {
            ui.vertical(|ui| {
                ui.set_width(w);
                draw_sorted(ui, w)
            });
            ui.vertical(|ui| {
                ui.set_width(w);
                draw_map(ui, w)
            });
        });
    } else {
        draw_sorted(ui, w);
        draw_map(ui, w);
    }
    ui.add_space(6.0);
    ui.label(RichText::new(format!("E8M0 scale exponents at the {} QDQ point", t.name)).strong());
    exp_histograms(ui, &format!("act-hist-{}", st.point), &t.by_rule);
}
