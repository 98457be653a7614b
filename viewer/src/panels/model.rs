//! Every MoE layer of a checkpoint for one batch: load imbalance per layer (max/mean, CV),
//! experts no token chose, and the load of every expert of every layer as one map.

use crate::analysis::model::load_matrix;
use crate::analysis::ModelRouting;
use crate::widgets::{int_grid, legend, num, Colormap, Heatmap};
use eframe::egui::{self, Color32, RichText, Ui, Vec2};
use egui_plot::{Bar, BarChart, Legend, Plot};

pub fn show(ui: &mut Ui, v: &ModelRouting) {
    ui.label(
        RichText::new(format!(
            "{} MoE layers × {} experts, top-{}, {} tokens",
            v.layers.len(),
            v.n_experts,
            v.top_k,
            v.m
        ))
        .strong(),
    );
    ui.label(RichText::new(&v.note).color(super::SYNTHETIC))
        .on_hover_text(
            "Each layer's router scores these hidden states with its own gate weights. A real \
             model feeds each layer the output of the one before; mxmoe does not run attention, \
             so the overview shows how each layer's router treats the same tokens.",
        );
    let ok: Vec<(usize, &crate::analysis::LoadStats)> = v
        .layers
        .iter()
        .filter_map(|l| l.stats.as_ref().ok().map(|s| (l.index, s)))
        .collect();
    let worst = ok
        .iter()
        .max_by(|a, b| a.1.max_over_mean.total_cmp(&b.1.max_over_mean));
    let never = ok.iter().map(|(_, s)| s.empty.len()).sum::<usize>();
    ui.horizontal_wrapped(|ui| {
        if let Some((i, s)) = worst {
            ui.label(format!(
                "most imbalanced: layer {i} (max/mean {})",
                num(s.max_over_mean)
            ));
            ui.separator();
        }
        ui.label(format!(
            "experts never chosen: {never} (layer, expert) pairs of {}",
            ok.len() * v.n_experts
        ));
        let missing = v.layers.len() - ok.len();
        if missing > 0 {
            ui.separator();
            ui.colored_label(
                ui.visuals().warn_fg_color,
                format!("{missing} layers without statistics (hover the table)"),
            );
        }
    });
    ui.add_space(4.0);
    let (cols, w) = super::columns(ui, 2, 420.0);
    let chart = |ui: &mut Ui, w: f32| {
        ui.label(RichText::new("Load imbalance per layer").strong());
        let bars: Vec<Bar> = ok
            .iter()
            .map(|(i, s)| {
                Bar::new(*i as f64, s.max_over_mean)
                    .width(0.8)
                    .name(format!("layer {i}: max/mean {}", num(s.max_over_mean)))
            })
            .collect();
        let empty: Vec<Bar> = ok
            .iter()
            .map(|(i, s)| {
                Bar::new(*i as f64, s.empty.len() as f64)
                    .width(0.4)
                    .name(format!("layer {i}: {} experts never chosen", s.empty.len()))
            })
            .collect();
        Plot::new("model-imbalance")
            .width(w)
            .height(220.0)
            .legend(Legend::default().position(egui_plot::Corner::LeftTop))
            .allow_zoom(false)
            .allow_drag(false)
            .allow_scroll(false)
            .allow_boxed_zoom(false)
            .include_y(0.0)
            .x_axis_label("layer")
            .x_grid_spacer(int_grid)
            .show(ui, |p| {
                p.bar_chart(
                    BarChart::new("max / mean load", bars)
                        .color(Color32::from_rgb(220, 70, 70))
                        .element_formatter(Box::new(|b: &Bar, _| b.name.clone())),
                );
                p.bar_chart(
                    BarChart::new("experts never chosen", empty)
                        .color(Color32::from_rgb(230, 120, 40))
                        .element_formatter(Box::new(|b: &Bar, _| b.name.clone())),
                );
            });
    };
    let map = |ui: &mut Ui, w: f32| {
        ui.label(RichText::new("Load per expert and layer (over the layer's mean)").strong());
        let m = load_matrix(v);
        let hi = crate::widgets::finite_range(&m).1.max(1.0);
        legend(
            ui,
            Colormap::Inferno,
            0.0,
            hi,
            "load / mean (0 = never chosen)",
        );
        let labels: Vec<String> = v.layers.iter().map(|l| l.index.to_string()).collect();
        let refs: Vec<&str> = labels.iter().map(|s| s.as_str()).collect();
        let rows = v.layers.len();
        Heatmap::new("model-load", rows, v.n_experts, &m)
            .row_labels(&refs)
            .range(0.0, hi)
            .cmap(Colormap::Inferno)
            .size(Vec2::new(
                w,
                (rows as f32 * 10.0).clamp(120.0, 420.0) + 42.0,
            ))
            .names("layer", "expert")
            .show(ui, |ui, r, e| {
                let l = &v.layers[r];
                ui.label(
                    RichText::new(format!("layer {} ({}), expert {e}", l.index, l.name)).strong(),
                );
                match &l.stats {
                    Ok(s) => ui.monospace(format!(
                        "{} token slots ({}× mean)",
                        s.load[e],
                        num(m[r * v.n_experts + e] as f64)
                    )),
                    Err(why) => ui.label(why.as_str()),
                };
            });
    };
    if cols >= 2 {
        ui.horizontal_top(|ui| {
            ui.vertical(|ui| {
                ui.set_width(w);
                chart(ui, w)
            });
            ui.vertical(|ui| {
                ui.set_width(w);
                map(ui, w)
            });
        });
    } else {
        chart(ui, w);
        map(ui, w);
    }
    ui.add_space(6.0);
    egui::Grid::new("model-table")
        .striped(true)
        .num_columns(5)
        .show(ui, |ui| {
            ui.strong("layer");
            ui.strong("name");
            ui.strong("max/mean");
            ui.strong("CV");
            ui.strong("never chosen");
            ui.end_row();
            for l in &v.layers {
                ui.monospace(l.index.to_string());
                ui.monospace(&l.name);
                match &l.stats {
                    Ok(s) => {
                        ui.monospace(num(s.max_over_mean));
                        ui.monospace(num(s.cv));
                        let list = if s.empty.is_empty() {
                            "none".to_string()
                        } else if s.empty.len() <= 10 {
                            format!("{} {:?}", s.empty.len(), s.empty)
                        } else {
                            format!("{}", s.empty.len())
                        };
                        ui.monospace(list);
                    }
                    Err(e) => {
                        ui.weak("-");
                        ui.weak("-");
                        ui.weak(e.as_str());
                    }
                }
                ui.end_row();
            }
        });
}
