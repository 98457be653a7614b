//! Weight quantization error (needs the unquantized weights): per expert and per 32-block
//! relative error under each scale mode and the stored scales, side by side, with E8M0 scale
//! exponent histograms and the saturated share.

use super::{exp_histograms, rule_color, summary_grid};
use crate::analysis::{Rule, TensorStats, WeightView};
use crate::state::WeightsUi;
use crate::widgets::{exact, legend, Colormap, Heatmap};
use eframe::egui::{self, RichText, Ui, Vec2};

pub fn show(ui: &mut Ui, v: Option<&WeightView>, st: &mut WeightsUi) {
    let Some(v) = v else {
        ui.label(RichText::new("No unquantized weights in this layer file.").strong());
        ui.label(
            "Weight error needs the original weights: save the bundle with tensors \
             w13_weight_orig [E, 2I, H] and w2_weight_orig [E, H, I], or generate a synthetic layer.",
        );
        return;
    };
    ui.horizontal(|ui| {
        ui.label("tensor");
        ui.selectable_value(&mut st.tensor, 0, "w13 (gate/up) [E, 2I, H]");
        ui.selectable_value(&mut st.tensor, 1, "w2 (down) [E, H, I]");
        ui.separator();
        let l = ui.label("expert");
        ui.add(egui::DragValue::new(&mut st.expert).range(0..=v.n_experts.saturating_sub(1)))
            .labelled_by(l.id);
        ui.weak("(or click the per-expert map)");
    });
    st.expert = st.expert.min(v.n_experts.saturating_sub(1));
    let t: &TensorStats = if st.tensor == 0 { &v.w13 } else { &v.w2 };
    let fmt = t.by_rule[0].format;
    ui.label(format!(
        "{} quantized to {} under each scale rule (\"stored\" = the scales in the file)",
        t.name, fmt
    ));
    summary_grid(ui, "weights-summary", &t.by_rule, None);
    ui.add_space(6.0);

    // Per expert: rules x experts.
    let rules: Vec<Rule> = t.by_rule.iter().map(|q| q.rule).collect();
    let ne = v.n_experts;
    let per_expert: Vec<f32> = t
        .by_rule
        .iter()
        .flat_map(|q| q.group_rel.iter().copied())
        .collect();
    let (_, hi) = crate::widgets::finite_range(&per_expert);
    ui.label(RichText::new("Relative error per expert (rows: scale rule)").strong());
    legend(ui, Colormap::Inferno, 0.0, hi, "rel. error");
    let w = ui.available_width().min(1200.0) - 8.0;
    let rule_names: Vec<&str> = rules.iter().map(|r| r.name()).collect();
    let (resp, hovered) = Heatmap::new(("w-expert", st.tensor), rules.len(), ne, &per_expert)
        .row_labels(&rule_names)
        .range(0.0, hi)
        .cmap(Colormap::Inferno)
        .size(Vec2::new(w, 5.0 * 20.0 + 42.0))
        .names("rule", "expert")
        .marked(&|_, e| e == st.expert)
        .show(ui, |ui, r, e| {
            ui.label(RichText::new(format!("expert {e}")).strong());
            for (ri, q) in t.by_rule.iter().enumerate() {
                let s = format!("{:>6}: {}", q.rule.name(), exact(q.group_rel[e]));
                if ri == r {
                    ui.label(RichText::new(s).monospace().strong());
                } else {
                    ui.monospace(s);
                }
            }
        });
    if resp.clicked() {
        if let Some((_, e)) = hovered {
            st.expert = e;
        }
    }
    ui.add_space(6.0);

    // Per 32-block for the selected expert, one heatmap per rule.
    let q0 = &t.by_rule[0];
    let rows = q0.rows_per_group;
    let bpr = q0.blocks_per_row();
    let per = rows * bpr;
    let e = st.expert;
    let slices: Vec<&[f32]> = t
        .by_rule
        .iter()
        .map(|q| &q.block_rel[e * per..(e + 1) * per])
        .collect();
    let hi = slices
        .iter()
        .map(|s| crate::widgets::finite_range(s).1)
        .fold(0.0f32, f32::max);
    ui.label(RichText::new(format!(
        "Expert {e}: relative error per 32-block ({rows} rows × {bpr} blocks), one map per rule, shared color scale"
    )).strong());
    legend(ui, Colormap::Inferno, 0.0, hi, "rel. error");
    let n = slices.len() as f32;
    let cw = ((ui.available_width() - 10.0 * n) / n).clamp(120.0, 360.0);
    let ch = (rows as f32).clamp(160.0, 360.0) + 28.0;
    ui.horizontal_top(|ui| {
        for (ri, s) in slices.iter().enumerate() {
            ui.vertical(|ui| {
                ui.colored_label(rule_color(rules[ri]), rules[ri].name());
                Heatmap::new(("w-block", st.tensor, ri), rows, bpr, s)
                    .range(0.0, hi)
                    .cmap(Colormap::Inferno)
                    .size(Vec2::new(cw, ch))
                    .names("row", "block")
                    .show(ui, |ui, r, b| {
                        ui.label(
                            RichText::new(format!(
                                "expert {e}, row {r}, block {b} (columns {}..{})",
                                b * 32,
                                b * 32 + 31
                            ))
                            .strong(),
                        );
                        for (rj, s2) in slices.iter().enumerate() {
                            let line =
                                format!("{:>6}: {}", rules[rj].name(), exact(s2[r * bpr + b]));
                            if rj == ri {
                                ui.label(RichText::new(line).monospace().strong());
                            } else {
                                ui.monospace(line);
                            }
                        }
                    });
            });
        }
    });
    ui.add_space(6.0);
    ui.label(RichText::new(format!("E8M0 scale exponents of {} (all experts)", t.name)).strong());
    exp_histograms(ui, &format!("w-hist-{}", st.tensor), &t.by_rule);
}
