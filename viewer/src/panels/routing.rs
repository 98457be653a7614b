//! Routing: router probabilities per token and expert with the chosen top-k outlined, the
//! expert load with imbalance figures, and each token's top-k weights on hover.

use crate::analysis::RoutingView;
use crate::widgets::{exact, legend, num, pct, Colormap, Heatmap};
use eframe::egui::{Color32, RichText, Ui, Vec2};
use egui_plot::{Bar, BarChart, HLine, LineStyle, Plot};

/// Load bar colors: no tokens, within twice the mean, above twice the mean; the mean line.
pub const EMPTY: Color32 = Color32::from_rgb(230, 120, 40);
pub const NORMAL: Color32 = Color32::from_rgb(70, 140, 220);
pub const HOT: Color32 = Color32::from_rgb(220, 70, 70);
pub const MEAN: Color32 = Color32::from_rgb(40, 170, 90);

pub fn show(ui: &mut Ui, v: &RoutingView) {
    let total_slots = (v.m * v.top_k).max(1);
    let mean = total_slots as f64 / v.n_experts.max(1) as f64;
    ui.horizontal_wrapped(|ui| {
        ui.label(
            RichText::new(format!(
                "{} tokens × {} experts, {} scoring, top-{}",
                v.m, v.n_experts, v.scoring, v.top_k
            ))
            .strong(),
        );
        ui.separator();
        ui.label(format!("load max/mean {}", num(v.max_over_mean)));
        ui.separator();
        ui.label(format!("CV {}", num(v.cv)));
        ui.separator();
        let empty = if v.empty.is_empty() {
            "none".to_string()
        } else if v.empty.len() <= 12 {
            format!("{} ({:?})", v.empty.len(), v.empty)
        } else {
            format!("{} of {}", v.empty.len(), v.n_experts)
        };
        let c = if v.empty.is_empty() {
            ui.visuals().text_color()
        } else {
            EMPTY
        };
        ui.colored_label(c, format!("experts with no tokens: {empty}"));
    });
    ui.add_space(4.0);
    // Side by side when both fit (heatmap >= 420, load chart >= 300 points); stacked
    // otherwise, with the height split between them so the load chart is never pushed out of
    // the window.
    let avail = ui.available_width();
    let side_by_side = avail >= 740.0;
    let hm_w = if side_by_side { avail * 0.58 } else { avail };
    let room = ui.available_height();
    let room = if room.is_finite() { room - 80.0 } else { 460.0 };
    let (hm_h, load_h) = if side_by_side {
        let h = (v.m as f32 * 8.0).clamp(180.0, room.clamp(180.0, 900.0)) + 42.0;
        (h, h)
    } else {
        // Stacked: the two titles and legends take about 60 points.
        let room = (room - 60.0).max(360.0);
        let load = (room * 0.38).clamp(150.0, 320.0);
        ((v.m as f32 * 8.0).clamp(140.0, room - load) + 42.0, load)
    };
    let smax = crate::widgets::finite_range(&v.scores).1;
    let draw_heatmap = |ui: &mut Ui| {
        ui.vertical(|ui| {
            ui.label(RichText::new("Router scores (white outline: chosen top-k)").strong());
            legend(ui, Colormap::ViridisSqrt, 0.0, smax, "score (sqrt scale)");
            let marked = |t: usize, e: usize| v.slot_of(t, e).is_some();
            Heatmap::new("routing-heatmap", v.m, v.n_experts, &v.scores)
                .range(0.0, smax)
                .cmap(Colormap::ViridisSqrt)
                .size(Vec2::new(hm_w - 8.0, hm_h))
                .names("token", "expert")
                .marked(&marked)
                .show(ui, |ui, t, e| {
                    let k = v.top_k;
                    ui.label(RichText::new(format!("token {t}, expert {e}")).strong());
                    ui.monospace(format!("score  {}", exact(v.scores[t * v.n_experts + e])));
                    match v.slot_of(t, e) {
                        Some(j) => ui.monospace(format!(
                            "chosen: slot {j}, weight {}",
                            exact(v.routing.topk_weights[t * k + j])
                        )),
                        None => ui.monospace("not chosen"),
                    };
                    ui.separator();
                    ui.label(format!("token {t} top-{k}:"));
                    for j in 0..k {
                        ui.monospace(format!(
                            "  expert {:>3}  weight {}",
                            v.routing.topk_ids[t * k + j],
                            exact(v.routing.topk_weights[t * k + j])
                        ));
                    }
                });
        });
    };
    let draw_load = |ui: &mut Ui, w: f32| {
        ui.vertical(|ui| {
            ui.label(RichText::new("Expert load (token slots per expert)").strong());
            super::swatches(
                ui,
                &[
                    (NORMAL, "≤ 2× mean"),
                    (HOT, "> 2× mean (hot expert)"),
                    (EMPTY, "no tokens"),
                    (MEAN, &format!("mean = {}", num(mean))),
                ],
            );
            let bars: Vec<Bar> = v
                .load
                .iter()
                .enumerate()
                .map(|(e, &n)| {
                    let fill = if n == 0 {
                        EMPTY
                    } else if n as f64 > 2.0 * mean {
                        HOT
                    } else {
                        NORMAL
                    };
                    Bar::new(e as f64, n as f64)
                        .width(0.85)
                        .fill(fill)
                        .name(format!(
                            "expert {e}: {n} tokens ({} of slots, {}× mean)",
                            pct(n as f64 / total_slots as f64),
                            num(n as f64 / mean.max(1e-12))
                        ))
                })
                .collect();
            let chart = BarChart::new("load", bars)
                .element_formatter(Box::new(|b: &Bar, _| b.name.clone()));
            Plot::new("routing-load")
                .width(w)
                .height(load_h)
                .allow_zoom(false)
                .allow_drag(false)
                .allow_scroll(false)
                .allow_boxed_zoom(false)
                .include_y(0.0)
                .x_axis_label("expert")
                .x_grid_spacer(crate::widgets::int_grid)
                .y_axis_label("tokens")
                .show(ui, |p| {
                    p.bar_chart(chart);
                    p.hline(
                        HLine::new("mean", mean)
                            .color(MEAN)
                            .width(2.5)
                            .style(LineStyle::dashed_loose()),
                    );
                    // Bars 0 high for empty experts would be invisible: a tick marks them.
                    let empty: Vec<Bar> = v
                        .load
                        .iter()
                        .enumerate()
                        .filter(|(_, &n)| n == 0)
                        .map(|(e, _)| {
                            Bar::new(e as f64, mean.max(1.0) * 0.04)
                                .width(0.85)
                                .fill(EMPTY)
                                .name(format!("expert {e}: no tokens"))
                        })
                        .collect();
                    if !empty.is_empty() {
                        p.bar_chart(
                            BarChart::new("no tokens", empty)
                                .element_formatter(Box::new(|b: &Bar, _| b.name.clone())),
                        );
                    }
                });
        });
    };
    if side_by_side {
        ui.horizontal_top(|ui| {
            draw_heatmap(ui);
            let w = ui.available_width() - 8.0;
            draw_load(ui, w);
        });
    } else {
        draw_heatmap(ui);
        draw_load(ui, avail - 8.0);
    }
}
