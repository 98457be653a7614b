//! The weights: what the packed codes and scales show (no originals needed: the common case of
//! MXFP4 checkpoints), what re-quantizing them under every format and scale mode would cost,
//! and, when the file has the unquantized weights (`*_orig`), the quantization error under each
//! scale rule as distributions (per expert, sorted per-block errors).

use super::{columns, exp_histograms, quantile_plot, rule_color, summary_grid, swatches};
use crate::analysis::packed::{code_class, quantiles, CodeClass, PackedTensor};
use crate::analysis::{PackedView, Requant, Rule, TensorStats, WeightView};
use crate::state::{Slot, WeightSection, WeightsUi};
use crate::widgets::{exact, int_grid, legend, num, pct, Colormap, Heatmap};
use eframe::egui::{self, Color32, RichText, Ui, Vec2};
use egui_plot::{Bar, BarChart, Legend, Line, Plot, PlotPoints};
use mxmoe::format::{decode_elem_f64, MxFormat, ScaleMode};

/// The color of each code class, the same in every chart.
pub fn class_color(c: CodeClass) -> Color32 {
    match c {
        CodeClass::Zero => Color32::from_rgb(150, 150, 150),
        CodeClass::Subnormal => Color32::from_rgb(90, 180, 90),
        CodeClass::Normal => Color32::from_rgb(70, 140, 220),
        CodeClass::Max => Color32::from_rgb(220, 70, 70),
        CodeClass::NonFinite => Color32::from_rgb(255, 0, 255),
    }
}

pub fn show(ui: &mut Ui, p: &PackedView, err: &Slot<Option<WeightView>>, st: &mut WeightsUi) {
    let has_orig = matches!(err, Slot::Ready(v) if v.is_some());
    ui.horizontal_wrapped(|ui| {
        ui.selectable_value(&mut st.section, WeightSection::Packed, "Codes & scales");
        ui.selectable_value(&mut st.section, WeightSection::Requant, "Re-quantization");
        ui.add_enabled_ui(has_orig, |ui| {
            ui.selectable_value(
                &mut st.section,
                WeightSection::Error,
                "Error vs unquantized",
            )
            .on_disabled_hover_text(
                "needs the unquantized weights: w13_weight_orig [E, 2I, H] and \
                     w2_weight_orig [E, H, I] in the layer file (MXFP4 checkpoints ship none)",
            );
        });
        ui.separator();
        ui.label("tensor");
        ui.selectable_value(&mut st.tensor, 0, "w13 (gate/up) [E, 2I, H]");
        ui.selectable_value(&mut st.tensor, 1, "w2 (down) [E, H, I]");
    });
    if st.section == WeightSection::Error && !has_orig {
        st.section = WeightSection::Packed;
    }
    ui.add_space(4.0);
    match st.section {
        WeightSection::Packed => {
            let t = if st.tensor == 0 { &p.w13 } else { &p.w2 };
            packed(ui, t);
        }
        WeightSection::Requant => {
            let q = if st.tensor == 0 {
                &p.requant13
            } else {
                &p.requant2
            };
            requant(ui, q);
        }
        WeightSection::Error => match err {
            Slot::Ready(v) => {
                if let Some(v) = v.as_ref().as_ref() {
                    error(ui, v, st)
                }
            }
            Slot::Waiting => {
                ui.spinner();
            }
            Slot::Failed(e) => {
                ui.colored_label(ui.visuals().error_fg_color, e);
            }
        },
    }
}

fn fixed_plot(id: String, w: f32, h: f32) -> Plot<'static> {
    Plot::new(id)
        .width(w)
        .height(h)
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .allow_boxed_zoom(false)
        .include_y(0.0)
}

/// Lay out `n` panels of at least `min_w` points in as many columns as fit.
fn grid(ui: &mut Ui, min_w: f32, items: Vec<Box<dyn FnOnce(&mut Ui, f32) + '_>>) {
    let (cols, w) = columns(ui, items.len(), min_w);
    let mut it = items.into_iter().peekable();
    while it.peek().is_some() {
        ui.horizontal_top(|ui| {
            for f in it.by_ref().take(cols) {
                ui.vertical(|ui| {
                    ui.set_width(w);
                    f(ui, w)
                });
            }
        });
        ui.add_space(6.0);
    }
}

/// The stored codes and scales of one tensor.
fn packed(ui: &mut Ui, t: &PackedTensor) {
    let fmt = t.format;
    let blocks: u64 = t.scale_hist.iter().sum();
    let all = t.class_counts(None);
    let n: u64 = all.iter().sum();
    let share = |c: CodeClass| all[c.index()] as f64 / n.max(1) as f64;
    ui.label(
        RichText::new(format!(
            "{} as stored: {fmt}, {} experts × {} rows × {} ({} blocks of 32)",
            t.name, t.n_experts, t.rows_per_expert, t.k, blocks
        ))
        .strong(),
    );
    ui.horizontal_wrapped(|ui| {
        ui.label(format!("±0: {}", pct(share(CodeClass::Zero))));
        ui.separator();
        ui.label(format!("subnormal: {}", pct(share(CodeClass::Subnormal))));
        ui.separator();
        ui.label(format!("±max: {}", pct(share(CodeClass::Max))))
            .on_hover_text(
                "elements at the largest magnitude (±max_normal): where clipped values land, \
                 so an upper bound on the saturated share (the unquantized values are not \
                 in the file)",
            );
        ui.separator();
        match t.exp_range() {
            Some((a, b)) => ui.label(format!("scale exponents [{a}, {b}]")),
            None => ui.label("no finite scale"),
        };
        let nan = t.nonfinite_blocks();
        if nan > 0 {
            ui.separator();
            ui.colored_label(
                class_color(CodeClass::NonFinite),
                format!("{nan} NaN/Inf blocks (scale 0xFF)"),
            );
        }
    });
    ui.add_space(4.0);
    let items: Vec<Box<dyn FnOnce(&mut Ui, f32) + '_>> = vec![
        Box::new(|ui, w| exp_per_expert(ui, t, w)),
        Box::new(|ui, w| exp_all(ui, t, w)),
        Box::new(|ui, w| code_chart(ui, t, w)),
        Box::new(|ui, w| block_max_chart(ui, t, w)),
        Box::new(|ui, w| class_per_expert(ui, t, w)),
        Box::new(|ui, w| span_chart(ui, t, w)),
    ];
    grid(ui, 360.0, items);
}

fn exp_per_expert(ui: &mut Ui, t: &PackedTensor, w: f32) {
    ui.label(RichText::new("Scale exponent per expert (share of the expert's blocks)").strong());
    let Some((lo, hi, v)) = t.exp_matrix() else {
        ui.label("no finite scale");
        return;
    };
    let vmax = crate::widgets::finite_range(&v).1;
    legend(ui, Colormap::Inferno, 0.0, vmax, "share of blocks");
    let labels: Vec<String> = (lo..=hi).rev().map(|e| e.to_string()).collect();
    let refs: Vec<&str> = labels.iter().map(|s| s.as_str()).collect();
    let rows = (hi - lo + 1) as usize;
    Heatmap::new(("packed-exp", t.name), rows, t.n_experts, &v)
        .row_labels(&refs)
        .range(0.0, vmax)
        .cmap(Colormap::Inferno)
        .size(Vec2::new(
            w,
            (rows as f32 * 14.0).clamp(120.0, 260.0) + 42.0,
        ))
        .names("exponent", "expert")
        .show(ui, |ui, r, e| {
            let x = hi - r as i32;
            let n = t.scale_hist[e * 256 + (x + 127) as usize];
            ui.label(RichText::new(format!("expert {e}, exponent {x}")).strong());
            ui.monospace(format!(
                "{n} blocks ({})",
                pct(v[r * t.n_experts + e] as f64)
            ));
        });
}

fn exp_all(ui: &mut Ui, t: &PackedTensor, w: f32) {
    ui.label(RichText::new("Scale exponents, all experts").strong());
    let total = t.scale_total();
    let Some((lo, hi)) = t.exp_range() else {
        return;
    };
    let sum: u64 = total.iter().sum();
    let bars: Vec<Bar> = (lo..=hi)
        .map(|e| {
            let n = total[(e + 127) as usize] as f64;
            Bar::new(e as f64, n).width(0.8).name(format!(
                "2^{e}: {n} blocks ({})",
                pct(n / sum.max(1) as f64)
            ))
        })
        .collect();
    let chart = BarChart::new("blocks", bars)
        .color(Color32::from_rgb(70, 140, 220))
        .element_formatter(Box::new(|b: &Bar, _| b.name.clone()));
    fixed_plot(format!("packed-exp-all-{}", t.name), w, 200.0)
        .x_axis_label("E8M0 scale exponent")
        .y_axis_label("blocks")
        .x_grid_spacer(int_grid)
        .include_x(lo as f64 - 0.6)
        .include_x(hi as f64 + 0.6)
        .show(ui, |p| p.bar_chart(chart));
}

/// The signed values of a format's codes in order: (rank, value, codes with that value).
fn signed_ranks(fmt: MxFormat, mags: &[f64]) -> impl Fn(u8) -> Option<(i32, f64)> + '_ {
    move |c| {
        let v = decode_elem_f64(fmt, c);
        if !v.is_finite() {
            return None;
        }
        let i = mags.iter().position(|&m| m == v.abs())? as i32;
        Some((if v < 0.0 { -i } else { i }, v))
    }
}

fn code_chart(ui: &mut Ui, t: &PackedTensor, w: f32) {
    ui.label(RichText::new("Element codes, all experts").strong());
    let classes = [
        CodeClass::Zero,
        CodeClass::Subnormal,
        CodeClass::Normal,
        CodeClass::Max,
    ];
    let items: Vec<(Color32, &str)> = classes
        .iter()
        .map(|&c| (class_color(c), c.name()))
        .collect();
    swatches(ui, &items);
    let total = t.code_total();
    let n: u64 = total.iter().sum();
    let rank = signed_ranks(t.format, &t.magnitudes);
    // ±0 share one bar; other codes one bar per signed value.
    let mut by_rank: std::collections::BTreeMap<i32, (f64, u64, CodeClass)> = Default::default();
    for (c, &cnt) in total.iter().enumerate() {
        if let Some((r, v)) = rank(c as u8) {
            let e = by_rank.entry(r).or_insert((
                v.abs() * v.signum(),
                0,
                code_class(t.format, c as u8),
            ));
            e.1 += cnt;
        }
    }
    let bars: Vec<Bar> = by_rank
        .iter()
        .map(|(&r, &(v, cnt, class))| {
            Bar::new(r as f64, cnt as f64)
                .width(0.85)
                .fill(class_color(class))
                .name(format!(
                    "{v}: {cnt} elements ({}), {}",
                    pct(cnt as f64 / n.max(1) as f64),
                    class.name()
                ))
        })
        .collect();
    let mags = t.magnitudes.clone();
    let chart =
        BarChart::new("codes", bars).element_formatter(Box::new(|b: &Bar, _| b.name.clone()));
    let lim = (t.magnitudes.len() as f64) - 0.4;
    fixed_plot(format!("packed-codes-{}", t.name), w, 200.0)
        .x_axis_label("element value (before the block scale)")
        .y_axis_label("elements")
        .include_x(-lim)
        .include_x(lim)
        .x_grid_spacer(int_grid)
        .x_axis_formatter(move |m, _| {
            let i = m.value.round() as i64;
            match mags.get(i.unsigned_abs() as usize) {
                Some(v) if i < 0 => format!("-{v}"),
                Some(v) => format!("{v}"),
                None => String::new(),
            }
        })
        .show(ui, |p| p.bar_chart(chart));
    let nf = t.class_counts(None)[CodeClass::NonFinite.index()];
    if nf > 0 {
        ui.colored_label(
            class_color(CodeClass::NonFinite),
            format!("{nf} NaN/Inf codes (not drawn)"),
        );
    }
}

fn block_max_chart(ui: &mut Ui, t: &PackedTensor, w: f32) {
    ui.label(RichText::new("Largest |element| in each block").strong())
        .on_hover_text(
            "The OCP scale rule (floor) and round-to-nearest (even) put each block's largest \
             value in the top binade of the format (MXFP4: 4 or 6); ceil and rceil scales \
             never clip and leave more blocks below it. This chart tells which rule wrote the \
             file.",
        );
    let sum: u64 = t.block_max_hist.iter().sum();
    let top = t.magnitudes.last().copied().unwrap_or(0.0);
    let bars: Vec<Bar> = t
        .magnitudes
        .iter()
        .zip(&t.block_max_hist)
        .enumerate()
        .filter(|(_, (_, &n))| n > 0)
        .map(|(i, (&m, &n))| {
            let fill = if m >= top {
                class_color(CodeClass::Max)
            } else {
                class_color(CodeClass::Normal)
            };
            Bar::new(i as f64, n as f64)
                .width(0.85)
                .fill(fill)
                .name(format!(
                    "{m}: {n} blocks ({})",
                    pct(n as f64 / sum.max(1) as f64)
                ))
        })
        .collect();
    swatches(
        ui,
        &[
            (class_color(CodeClass::Max), "block holds ±max"),
            (class_color(CodeClass::Normal), "largest value below max"),
        ],
    );
    let mags = t.magnitudes.clone();
    let chart =
        BarChart::new("block max", bars).element_formatter(Box::new(|b: &Bar, _| b.name.clone()));
    fixed_plot(format!("packed-bmax-{}", t.name), w, 180.0)
        .x_axis_label("largest |element| of the block (before the scale)")
        .y_axis_label("blocks")
        .x_grid_spacer(int_grid)
        .x_axis_formatter(move |m, _| {
            mags.get(m.value.round().max(0.0) as usize)
                .map(|v| v.to_string())
                .unwrap_or_default()
        })
        .show(ui, |p| p.bar_chart(chart));
}

fn class_per_expert(ui: &mut Ui, t: &PackedTensor, w: f32) {
    ui.label(RichText::new("Per expert: share of ±0, subnormal and ±max codes").strong());
    let series = [CodeClass::Zero, CodeClass::Subnormal, CodeClass::Max];
    fixed_plot(format!("packed-class-{}", t.name), w, 200.0)
        .legend(Legend::default().position(egui_plot::Corner::LeftTop))
        .x_axis_label("expert")
        .y_axis_label("share of elements")
        .x_grid_spacer(int_grid)
        .show(ui, |p| {
            for c in series {
                let pts: PlotPoints = (0..t.n_experts)
                    .map(|e| [e as f64, t.class_share(Some(e), c)])
                    .collect();
                p.line(Line::new(c.name(), pts).color(class_color(c)).width(2.0));
            }
        });
}

fn span_chart(ui: &mut Ui, t: &PackedTensor, w: f32) {
    ui.label(RichText::new("Scale range along each row (largest − smallest exponent)").strong())
        .on_hover_text(
            "How many powers of two the block scales of one row span: a wide span means a row \
             mixes large and small blocks (outlier columns); per-row scaling would waste range \
             there, per-block MX scaling does not.",
        );
    let sum: u64 = t.row_span_hist.iter().sum();
    let mean = t.row_span_mean.iter().sum::<f32>() / t.row_span_mean.len().max(1) as f32;
    let bars: Vec<Bar> = t
        .row_span_hist
        .iter()
        .enumerate()
        .map(|(s, &n)| {
            Bar::new(s as f64, n as f64).width(0.8).name(format!(
                "span {s}: {n} rows ({})",
                pct(n as f64 / sum.max(1) as f64)
            ))
        })
        .collect();
    let chart = BarChart::new("rows", bars)
        .color(Color32::from_rgb(200, 150, 40))
        .element_formatter(Box::new(|b: &Bar, _| b.name.clone()));
    ui.weak(format!("mean span {}", num(mean as f64)));
    fixed_plot(format!("packed-span-{}", t.name), w, 180.0)
        .x_axis_label("exponent span of the row")
        .y_axis_label("rows")
        .x_grid_spacer(int_grid)
        .show(ui, |p| p.bar_chart(chart));
}

/// The re-quantization table of one tensor.
fn requant(ui: &mut Ui, q: &Requant) {
    ui.label(
        RichText::new(format!(
            "{}: relative L2 error of re-quantizing the stored {} values (dequantized exactly)",
            q.name, q.source
        ))
        .strong(),
    );
    let sample = if q.sampled_rows == q.total_rows {
        format!("all {} rows", q.total_rows)
    } else {
        format!(
            "a sample of {} of {} rows (every {}th)",
            q.sampled_rows,
            q.total_rows,
            q.total_rows.div_ceil(q.sampled_rows.max(1))
        )
    };
    ui.label(format!(
        "On {sample}. 0 = every value survives exactly; a format that holds every {} value \
         (wider mantissa and range) costs nothing, a narrower one shows what converting the \
         checkpoint would lose. Hover a cell for the clipped share.",
        q.source
    ));
    ui.add_space(4.0);
    let vmax = q
        .rel
        .iter()
        .flat_map(|r| r.iter().copied())
        .fold(0f64, f64::max)
        .max(1e-12) as f32;
    legend(ui, Colormap::Inferno, 0.0, vmax, "rel. L2 error");
    egui::Grid::new(("requant", q.name))
        .striped(true)
        .num_columns(ScaleMode::ALL.len() + 1)
        .min_col_width(90.0)
        .show(ui, |ui| {
            ui.strong("target format");
            for m in ScaleMode::ALL {
                ui.strong(format!("{m}"));
            }
            ui.end_row();
            for (fi, f) in MxFormat::ALL.iter().enumerate() {
                if *f == q.source {
                    ui.label(RichText::new(format!("{f} (stored)")).strong());
                } else {
                    ui.label(f.name());
                }
                for mi in 0..ScaleMode::ALL.len() {
                    let v = q.rel[fi][mi];
                    let bg = Colormap::Inferno.color(v as f32, 0.0, vmax);
                    let fg = if (bg.r() as u32 + bg.g() as u32 + bg.b() as u32) > 380 {
                        Color32::BLACK
                    } else {
                        Color32::WHITE
                    };
                    let text = if v == 0.0 {
                        "0 (exact)".to_string()
                    } else {
                        num(v)
                    };
                    let r = egui::Frame::new()
                        .fill(bg)
                        .inner_margin(egui::Margin::symmetric(6, 2))
                        .show(ui, |ui| ui.label(RichText::new(text).monospace().color(fg)))
                        .response;
                    r.on_hover_text(format!(
                        "{} under {}: rel. L2 {}, clipped {}",
                        f,
                        ScaleMode::ALL[mi],
                        num(v),
                        pct(q.saturated[fi][mi])
                    ));
                }
                ui.end_row();
            }
        });
}

/// The error against the unquantized weights, as distributions.
fn error(ui: &mut Ui, v: &WeightView, st: &mut WeightsUi) {
    ui.horizontal(|ui| {
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

    // Per expert: rules x experts (aggregated per expert: readable at any size).
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

    // Per 32-block: the distribution (sorted errors) per rule, the selected expert and all.
    let e = st.expert;
    let q0 = &t.by_rule[0];
    let per = q0.rows_per_group * q0.blocks_per_row();
    let series = |one: Option<usize>| -> Vec<(String, Color32, Vec<f32>)> {
        t.by_rule
            .iter()
            .map(|q| {
                let qs = match one {
                    Some(e) => quantiles(&q.block_rel[e * per..(e + 1) * per], 101),
                    None => q.block_q.clone(),
                };
                (q.rule.name().to_string(), rule_color(q.rule), qs)
            })
            .collect()
    };
    let (cols, pw) = columns(ui, 2, 380.0);
    let _ = cols;
    let items: Vec<Box<dyn FnOnce(&mut Ui, f32) + '_>> = vec![
        Box::new(|ui, w| {
            ui.label(RichText::new(format!("Expert {e}: per-block error, sorted")).strong());
            quantile_plot(
                ui,
                &format!("w-q-{}-e", st.tensor),
                &series(Some(e)),
                "rel. error of the block",
                Vec2::new(w, 220.0),
            );
        }),
        Box::new(|ui, w| {
            ui.label(RichText::new("All experts: per-block error, sorted").strong());
            quantile_plot(
                ui,
                &format!("w-q-{}-all", st.tensor),
                &series(None),
                "rel. error of the block",
                Vec2::new(w, 220.0),
            );
        }),
    ];
    let _ = pw;
    grid(ui, 380.0, items);
    ui.label(RichText::new(format!("E8M0 scale exponents of {} (all experts)", t.name)).strong());
    exp_histograms(ui, &format!("w-hist-{}", st.tensor), &t.by_rule);
}
