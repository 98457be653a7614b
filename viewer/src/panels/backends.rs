//! CPU vs GPU: the difference of the layer outputs (heatmap + numbers), or SKIPPED when no GPU.

use crate::analysis::BackendView;
use crate::widgets::{exact, legend, num, pct, Colormap, Heatmap};
use eframe::egui::{self, Color32, RichText, Ui, Vec2};

pub fn show(ui: &mut Ui, v: &BackendView) {
    match v {
        BackendView::Skipped(why) => {
            ui.label(
                RichText::new("SKIPPED: no GPU")
                    .strong()
                    .color(Color32::from_rgb(230, 150, 40)),
            );
            ui.label(format!("The wgpu backend could not be opened: {why}"));
            ui.label("On a machine without a GPU, install Mesa lavapipe (mesa-vulkan-drivers) for a software Vulkan adapter.");
        }
        BackendView::Failed { adapter, error } => {
            ui.colored_label(
                ui.visuals().error_fg_color,
                format!("FAILED on {adapter}: {error}"),
            );
        }
        BackendView::Diff(d) => {
            ui.label(RichText::new(format!("GPU: {}", d.adapter)).strong());
            egui::Grid::new("backend-nums")
                .striped(true)
                .num_columns(2)
                .show(ui, |ui| {
                    let mut kv = |k: &str, v: String| {
                        ui.label(k);
                        ui.monospace(v);
                        ui.end_row();
                    };
                    kv("max |GPU - CPU|", num(d.max_abs));
                    kv("relative L2", num(d.rel_l2));
                    kv(
                        "bit-exact elements",
                        format!(
                            "{} of {} ({})",
                            d.n_exact,
                            d.diff.len(),
                            pct(d.n_exact as f64 / d.diff.len().max(1) as f64)
                        ),
                    );
                    kv(
                        "tokens with different top-k",
                        d.routing_mismatch.to_string(),
                    );
                    kv("CPU time (fp32 acc.)", format!("{:.4} s", d.cpu_seconds));
                    kv("GPU time", format!("{:.4} s", d.gpu_seconds));
                });
            let hi = d
                .diff
                .iter()
                .fold(0.0f32, |a, &b| a.max(b.abs()))
                .max(f32::MIN_POSITIVE);
            ui.label(RichText::new("GPU - CPU per output element (tokens × H)").strong());
            legend(ui, Colormap::Diverging, -hi, hi, "difference");
            let w = ui.available_width() - 8.0;
            Heatmap::new("backend-diff", d.m, d.h, &d.diff)
                .range(-hi, hi)
                .cmap(Colormap::Diverging)
                .size(Vec2::new(w, (d.m as f32 * 6.0).clamp(160.0, 420.0) + 28.0))
                .names("token", "h")
                .show(ui, |ui, t, h| {
                    ui.monospace(format!(
                        "token {t}, h {h}: GPU - CPU = {}",
                        exact(d.diff[t * d.h + h])
                    ));
                });
        }
    }
}
