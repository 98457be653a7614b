//! One module per view: functions over `&mut Ui` plus the view's data (egui_demo_app shape), so
//! the snapshot tests draw exactly what the app draws. Panels read [`crate::state`] and
//! [`crate::analysis`] and never the app: the app sits above them.

pub mod activations;
pub mod backends;
pub mod model;
pub mod routing;
pub mod schemes;
pub mod side;
pub mod weights;

use crate::analysis::{Dataset, QuantStats, Rule};
use crate::state::{Results, Slot, Tab, ViewUi};
use crate::widgets::{num, pct};
use eframe::egui::{self, Color32, RichText, Ui};
use egui_plot::{Bar, BarChart, Legend, Line, Plot, PlotPoints};

/// Draw the selected tab's view.
pub fn show_tab(ui: &mut Ui, tab: Tab, r: &Results, vu: &mut ViewUi) {
    let mut retry = false;
    match tab {
        Tab::Routing => with_slot(ui, &r.routing, "routing", &mut retry, routing::show),
        Tab::Weights => with_slot(ui, &r.packed, "packed weights", &mut retry, |ui, p| {
            weights::show(ui, p, &r.weights, &mut vu.weights)
        }),
        Tab::Activations => with_slot(ui, &r.acts, "activation error", &mut retry, |ui, v| {
            activations::show(ui, v, &mut vu.acts)
        }),
        Tab::Schemes => with_slot(ui, &r.schemes, "scheme comparison", &mut retry, |ui, v| {
            schemes::show(ui, v)
        }),
        Tab::Backends => with_slot(ui, &r.backends, "CPU vs GPU", &mut retry, backends::show),
        Tab::Model => with_slot(
            ui,
            &r.model,
            "routing of every layer",
            &mut retry,
            model::show,
        ),
    }
    if retry {
        vu.retry = Some(tab);
    }
}

/// A view's slot: a spinner while computing, the error (with Retry after a cancel), or the
/// view.
pub fn with_slot<T>(
    ui: &mut Ui,
    s: &Slot<T>,
    what: &str,
    retry: &mut bool,
    f: impl FnOnce(&mut Ui, &T),
) {
    match s {
        Slot::Waiting => {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label(format!("computing {what}…"));
            });
        }
        Slot::Failed(e) if e == "cancelled" => {
            ui.horizontal(|ui| {
                ui.label(format!("{what}: cancelled."));
                if ui.button("Compute again").clicked() {
                    *retry = true;
                }
            });
        }
        Slot::Failed(e) => {
            ui.colored_label(ui.visuals().error_fg_color, format!("{what} failed: {e}"));
        }
        Slot::Ready(v) => f(ui, v),
    }
}

/// The color that marks synthetic data.
pub const SYNTHETIC: Color32 = Color32::from_rgb(230, 140, 30);

/// Above every view: where the token batch came from; a synthetic one in orange.
pub fn batch_banner(ui: &mut Ui, d: &Dataset) {
    let b = d.batch;
    if b.is_synthetic() {
        ui.label(RichText::new(b.label()).color(SYNTHETIC).strong())
            .on_hover_text(
                "No token batch was given (or it lacks a part): the routing and activation \
                 views show generated tokens. Give a batch with hidden_states [M, H] and \
                 router_logits [M, E] to see the model's own.",
            );
    } else {
        ui.weak(b.label());
    }
}

/// The overlay while files are dragged over the window.
pub fn drop_overlay(ui: &Ui, rect: egui::Rect) {
    let p = ui.ctx().layer_painter(egui::LayerId::new(
        egui::Order::Foreground,
        egui::Id::unique("drop"),
    ));
    p.rect_filled(rect, 0.0, Color32::from_black_alpha(170));
    p.text(
        rect.center(),
        egui::Align2::CENTER_CENTER,
        "Drop a layer file (and a token batch) to open it",
        egui::FontId::proportional(22.0),
        Color32::WHITE,
    );
}

/// A row of color swatches with their meaning: the legend of a chart's colors.
pub fn swatches(ui: &mut Ui, items: &[(Color32, &str)]) {
    ui.horizontal_wrapped(|ui| {
        for (c, label) in items {
            let (r, _) = ui.allocate_exact_size(egui::vec2(12.0, 12.0), egui::Sense::hover());
            ui.painter().rect_filled(r, 2.0, *c);
            ui.label(RichText::new(*label).small());
            ui.add_space(6.0);
        }
    });
}

/// Sorted values as lines (a quantile plot): x = share of the values at or below, y = value.
/// One line per series, each with its color and name in the legend; readable where a raw
/// scatter of 10^5 blocks is noise.
pub fn quantile_plot(
    ui: &mut Ui,
    id: &str,
    series: &[(String, Color32, Vec<f32>)],
    y_label: &str,
    size: egui::Vec2,
) {
    Plot::new(id.to_string())
        .width(size.x)
        .height(size.y)
        .legend(Legend::default().position(egui_plot::Corner::LeftTop))
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .allow_boxed_zoom(false)
        .include_x(0.0)
        .include_x(1.0)
        .include_y(0.0)
        .x_axis_label("share of blocks (sorted by error)")
        .y_axis_label(y_label.to_string())
        .show(ui, |p| {
            for (name, color, q) in series {
                let n = q.len().max(2) - 1;
                let pts: PlotPoints = q
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| [i as f64 / n as f64, v as f64])
                    .collect();
                p.line(Line::new(name.clone(), pts).color(*color).width(2.0));
            }
        });
}

/// How many plots of `min_w` fit side by side in the width left (at least 1), and their width.
pub fn columns(ui: &Ui, n: usize, min_w: f32) -> (usize, f32) {
    let avail = ui.available_width().max(min_w);
    let cols = ((avail / (min_w + 12.0)) as usize).clamp(1, n.max(1));
    (cols, (avail - 12.0 * cols as f32) / cols as f32)
}

/// One color per scale rule, the same in every view.
pub fn rule_color(r: Rule) -> Color32 {
    match r {
        Rule::Mode(m) => match m {
            mxmoe::format::ScaleMode::Floor => Color32::from_rgb(220, 90, 60),
            mxmoe::format::ScaleMode::Even => Color32::from_rgb(70, 140, 220),
            mxmoe::format::ScaleMode::Ceil => Color32::from_rgb(90, 180, 90),
            mxmoe::format::ScaleMode::RCeil => Color32::from_rgb(200, 150, 40),
        },
        Rule::Stored => Color32::from_rgb(160, 110, 200),
    }
}

/// A summary table: one row per rule (relative L2, max |error|, saturated share, scale range).
pub fn summary_grid(ui: &mut Ui, id: &str, stats: &[QuantStats], highlight: Option<Rule>) {
    egui::Grid::new(id)
        .striped(true)
        .num_columns(6)
        .show(ui, |ui| {
            ui.strong("scale rule");
            ui.strong("rel. L2 error");
            ui.strong("max |error|");
            ui.strong("saturated");
            ui.strong("E8M0 exponents");
            ui.strong("elements");
            ui.end_row();
            for q in stats {
                let name = if Some(q.rule) == highlight {
                    format!("{} (layer)", q.rule.name())
                } else {
                    q.rule.name().to_string()
                };
                ui.colored_label(rule_color(q.rule), name);
                ui.monospace(num(q.rel_l2));
                ui.monospace(num(q.max_abs));
                ui.monospace(format!("{} ({})", pct(q.saturated), q.n_saturated));
                ui.monospace(match q.exp_range() {
                    Some((a, b)) => format!("[{a}, {b}]"),
                    None => "-".into(),
                });
                if q.nonfinite_blocks > 0 {
                    ui.monospace(format!(
                        "{} ({} NaN/Inf blocks)",
                        q.n_elems, q.nonfinite_blocks
                    ));
                } else {
                    ui.monospace(q.n_elems.to_string());
                }
                ui.end_row();
            }
        });
}

/// Histograms of E8M0 scale exponents, one small plot per rule, side by side, on one x range.
pub fn exp_histograms(ui: &mut Ui, id: &str, stats: &[QuantStats]) {
    let lo = stats
        .iter()
        .filter_map(|q| q.exp_range())
        .map(|r| r.0)
        .min()
        .unwrap_or(-10);
    let hi = stats
        .iter()
        .filter_map(|q| q.exp_range())
        .map(|r| r.1)
        .max()
        .unwrap_or(0);
    let ymax = stats
        .iter()
        .flat_map(|q| q.scale_hist.iter().copied())
        .max()
        .unwrap_or(1) as f64;
    let n = stats.len().max(1) as f32;
    let w = ((ui.available_width() - 8.0 * n) / n).clamp(140.0, 320.0);
    ui.horizontal(|ui| {
        for q in stats {
            ui.vertical(|ui| {
                ui.label(
                    egui::RichText::new(format!("{} — {} blocks", q.rule.name(), q.n_elems / 32))
                        .color(rule_color(q.rule))
                        .small(),
                );
                let total = (q.n_elems / 32).max(1) as f64;
                let bars: Vec<Bar> = (lo..=hi)
                    .map(|e| {
                        let n = q.scale_hist[(e + 127) as usize] as f64;
                        Bar::new(e as f64, n)
                            .width(0.8)
                            .name(format!("2^{e}: {n} blocks ({})", pct(n / total)))
                    })
                    .collect();
                let chart = BarChart::new(q.rule.name(), bars)
                    .color(rule_color(q.rule))
                    .element_formatter(Box::new(|b: &Bar, _| b.name.clone()));
                Plot::new(format!("{id}-{}", q.rule.name()))
                    .width(w)
                    .height(120.0)
                    .allow_zoom(false)
                    .allow_drag(false)
                    .allow_scroll(false)
                    .allow_boxed_zoom(false)
                    .include_y(0.0)
                    .include_y(ymax * 1.05)
                    .include_x(lo as f64 - 0.6)
                    .include_x(hi as f64 + 0.6)
                    .x_axis_label("scale exponent")
                    .x_grid_spacer(crate::widgets::int_grid)
                    .show(ui, |p| p.bar_chart(chart));
            });
        }
    });
}
