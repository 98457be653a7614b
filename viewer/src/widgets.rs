//! Small drawing helpers: colormaps, a texture-backed heatmap with exact-value tooltips and
//! top-k marks, a color legend, and a number formatter.

use eframe::egui::{
    self, Align2, Color32, ColorImage, FontId, Id, Pos2, Rect, Response, Sense, Stroke, StrokeKind,
    TextureHandle, TextureOptions, Ui, Vec2,
};
use std::hash::{Hash, Hasher};

/// Colormaps, as linear interpolation between a few control points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Colormap {
    /// Dark blue -> green -> yellow (viridis-like): probabilities, loads.
    Viridis,
    /// Viridis on a square-root scale: router probabilities, where most values are tiny and a
    /// linear scale shows only the few large ones.
    ViridisSqrt,
    /// Black -> purple -> orange -> light yellow (inferno-like): errors (bright = bad).
    Inferno,
    /// Blue -> white -> red, centred on 0: signed differences.
    Diverging,
}

const VIRIDIS: [[u8; 3]; 6] = [
    [68, 1, 84],
    [65, 68, 135],
    [42, 120, 142],
    [34, 168, 132],
    [122, 209, 81],
    [253, 231, 37],
];
const INFERNO: [[u8; 3]; 6] = [
    [0, 0, 4],
    [66, 10, 104],
    [147, 38, 103],
    [221, 81, 58],
    [252, 165, 10],
    [252, 255, 164],
];
const DIVERGING: [[u8; 3]; 5] = [
    [33, 102, 172],
    [146, 197, 222],
    [247, 247, 247],
    [244, 165, 130],
    [178, 24, 43],
];

fn lerp_table(t: &[[u8; 3]], x: f32) -> Color32 {
    let x = if x.is_finite() {
        x.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let f = x * (t.len() - 1) as f32;
    let i = (f.floor() as usize).min(t.len() - 2);
    let w = f - i as f32;
    let c = |k: usize| (t[i][k] as f32 * (1.0 - w) + t[i + 1][k] as f32 * w).round() as u8;
    Color32::from_rgb(c(0), c(1), c(2))
}

impl Colormap {
    /// Color of `v` within `[lo, hi]` (for `Diverging`, `[-hi, hi]` with `lo` ignored).
    pub fn color(self, v: f32, lo: f32, hi: f32) -> Color32 {
        if v.is_nan() {
            return Color32::from_rgb(255, 0, 255);
        }
        match self {
            Colormap::ViridisSqrt => {
                let x = if hi > lo {
                    ((v - lo) / (hi - lo)).max(0.0).sqrt()
                } else {
                    0.0
                };
                lerp_table(&VIRIDIS, x)
            }
            Colormap::Viridis | Colormap::Inferno => {
                let x = if hi > lo { (v - lo) / (hi - lo) } else { 0.0 };
                lerp_table(
                    if self == Colormap::Viridis {
                        &VIRIDIS
                    } else {
                        &INFERNO
                    },
                    x,
                )
            }
            Colormap::Diverging => {
                let x = if hi > 0.0 { 0.5 + 0.5 * v / hi } else { 0.5 };
                lerp_table(&DIVERGING, x)
            }
        }
    }
}

/// Format a number for tooltips and labels: exact enough to compare (6 significant digits),
/// scientific when small or large.
pub fn num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e-3 && v.abs() < 1e5 {
        let s = format!("{v:.6}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_string()
    } else {
        format!("{v:.5e}")
    }
}

/// The exact value of an f32 for tooltips: the shortest decimal that reads back to the same
/// bits (Rust's float formatting), scientific when small or large.
pub fn exact(v: f32) -> String {
    if v == 0.0 || !v.is_finite() || (v.abs() >= 1e-3 && v.abs() < 1e6) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// A percentage with 3 significant digits.
pub fn pct(v: f64) -> String {
    format!("{}%", num(100.0 * v))
}

/// A heatmap of `rows x cols` values drawn as one texture (so 10^5 cells cost one quad), with
/// tick labels, an optional outline on marked cells, a hover outline and a tooltip closure that
/// gets the hovered cell.
pub struct Heatmap<'a> {
    pub id: Id,
    pub rows: usize,
    pub cols: usize,
    pub values: &'a [f32],
    pub lo: f32,
    pub hi: f32,
    pub cmap: Colormap,
    pub size: Vec2,
    pub row_name: &'a str,
    pub col_name: &'a str,
    /// Cells to outline (e.g. the chosen top-k).
    pub marked: Option<&'a dyn Fn(usize, usize) -> bool>,
    /// Names for the rows (instead of row numbers), e.g. scale rules.
    pub row_labels: Option<&'a [&'a str]>,
}

impl<'a> Heatmap<'a> {
    pub fn new(
        id: impl Hash + std::fmt::Debug,
        rows: usize,
        cols: usize,
        values: &'a [f32],
    ) -> Self {
        let (lo, hi) = finite_range(values);
        Heatmap {
            id: Id::unique(id),
            rows,
            cols,
            values,
            lo,
            hi,
            cmap: Colormap::Viridis,
            size: Vec2::new(400.0, 300.0),
            row_name: "row",
            col_name: "col",
            marked: None,
            row_labels: None,
        }
    }
    pub fn row_labels(mut self, l: &'a [&'a str]) -> Self {
        self.row_labels = Some(l);
        self
    }
    pub fn range(mut self, lo: f32, hi: f32) -> Self {
        self.lo = lo;
        self.hi = hi;
        self
    }
    pub fn cmap(mut self, c: Colormap) -> Self {
        self.cmap = c;
        self
    }
    pub fn size(mut self, s: Vec2) -> Self {
        self.size = s;
        self
    }
    pub fn names(mut self, row: &'a str, col: &'a str) -> Self {
        self.row_name = row;
        self.col_name = col;
        self
    }
    pub fn marked(mut self, f: &'a dyn Fn(usize, usize) -> bool) -> Self {
        self.marked = Some(f);
        self
    }

    fn texture(&self, ui: &Ui) -> TextureHandle {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (
            self.values.as_ptr() as usize,
            self.values.len(),
            self.rows,
            self.cols,
        )
            .hash(&mut h);
        (self.lo.to_bits(), self.hi.to_bits(), self.cmap).hash(&mut h);
        let key = h.finish();
        let tid = self.id.with("texture");
        if let Some((k, t)) = ui.data(|d| d.get_temp::<(u64, TextureHandle)>(tid)) {
            if k == key {
                return t;
            }
        }
        let max_side = ui.input(|i| i.max_texture_side).max(1);
        // Down-sample (max over the bin: errors and probabilities must not vanish) when a side
        // is larger than the GPU allows.
        let (tw, th) = (self.cols.min(max_side), self.rows.min(max_side));
        let mut px = vec![Color32::BLACK; tw * th];
        for y in 0..th {
            let (r0, r1) = (
                y * self.rows / th,
                ((y + 1) * self.rows / th).max(y * self.rows / th + 1),
            );
            for x in 0..tw {
                let (c0, c1) = (
                    x * self.cols / tw,
                    ((x + 1) * self.cols / tw).max(x * self.cols / tw + 1),
                );
                let mut v = f32::NEG_INFINITY;
                for r in r0..r1 {
                    for c in c0..c1 {
                        let w = self.values[r * self.cols + c];
                        let better = if v == f32::NEG_INFINITY {
                            true
                        } else if self.cmap == Colormap::Diverging {
                            w.abs() > v.abs()
                        } else {
                            w > v
                        };
                        if better {
                            v = w;
                        }
                    }
                }
                px[y * tw + x] = self.cmap.color(v, self.lo, self.hi);
            }
        }
        let tex = ui.ctx().load_texture(
            format!("heatmap-{:?}", self.id),
            ColorImage::new([tw, th], px),
            TextureOptions::NEAREST,
        );
        ui.data_mut(|d| d.insert_temp(tid, (key, tex.clone())));
        tex
    }

    /// Draw; `tooltip(ui, row, col)` fills the hover tooltip. Returns the hovered cell too.
    pub fn show(
        self,
        ui: &mut Ui,
        tooltip: impl FnOnce(&mut Ui, usize, usize),
    ) -> (Response, Option<(usize, usize)>) {
        let font = FontId::proportional(11.0);
        let text_color = ui.visuals().text_color();
        let left = if self.row_labels.is_some() {
            52.0
        } else {
            34.0
        };
        let bottom = 28.0;
        let top = 14.0;
        let (outer, resp) = ui.allocate_exact_size(self.size, Sense::click());
        let label = format!("heatmap {} x {}", self.row_name, self.col_name);
        resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Figure, true, &label));
        let rect = Rect::from_min_max(
            outer.min + Vec2::new(left, top),
            outer.max - Vec2::new(0.0, bottom),
        );
        if self.rows == 0 || self.cols == 0 || self.values.len() < self.rows * self.cols {
            ui.painter().text(
                rect.center(),
                Align2::CENTER_CENTER,
                "no data",
                font,
                text_color,
            );
            return (resp, None);
        }
        let tex = self.texture(ui);
        let p = ui.painter_at(outer);
        p.image(
            tex.id(),
            rect,
            Rect::from_min_max(Pos2::ZERO, Pos2::new(1.0, 1.0)),
            Color32::WHITE,
        );
        let cw = rect.width() / self.cols as f32;
        let ch = rect.height() / self.rows as f32;
        let cell = |r: usize, c: usize| {
            Rect::from_min_size(
                rect.min + Vec2::new(c as f32 * cw, r as f32 * ch),
                Vec2::new(cw, ch),
            )
        };
        if let Some(mark) = self.marked {
            let stroke = Stroke::new(if cw.min(ch) >= 6.0 { 1.5 } else { 1.0 }, Color32::WHITE);
            for r in 0..self.rows {
                for c in 0..self.cols {
                    if mark(r, c) {
                        let cr = cell(r, c);
                        if cw.min(ch) >= 4.0 {
                            p.rect_stroke(cr.shrink(0.5), 0.0, stroke, StrokeKind::Inside);
                        } else {
                            p.circle_filled(cr.center(), 1.2, Color32::WHITE);
                        }
                    }
                }
            }
        }
        // Ticks: about every 60 px (columns) / 24 px (rows), at round numbers.
        let tick = |n: usize, px: f32, min_px: f32| -> usize {
            let raw = (min_px / px.max(1e-3)).ceil().max(1.0) as usize;
            [
                1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, 128, 200, 250, 256, 500, 512, 1000,
                1024, 2048, 4096,
            ]
            .into_iter()
            .find(|&s| s >= raw)
            .unwrap_or(n.max(1))
        };
        let cs = tick(self.cols, cw, 40.0);
        for c in (0..self.cols).step_by(cs) {
            let x = rect.min.x + (c as f32 + 0.5) * cw;
            p.line_segment(
                [Pos2::new(x, rect.max.y), Pos2::new(x, rect.max.y + 3.0)],
                Stroke::new(1.0, text_color),
            );
            p.text(
                Pos2::new(x, rect.max.y + 3.0),
                Align2::CENTER_TOP,
                c,
                font.clone(),
                text_color,
            );
        }
        p.text(
            Pos2::new(rect.center().x, outer.max.y),
            Align2::CENTER_BOTTOM,
            format!("{} (columns)", self.col_name),
            font.clone(),
            text_color,
        );
        let rs = tick(self.rows, ch, 16.0);
        for r in (0..self.rows).step_by(rs) {
            let y = rect.min.y + (r as f32 + 0.5) * ch;
            let label = match self.row_labels {
                Some(l) if r < l.len() => l[r].to_string(),
                _ => r.to_string(),
            };
            p.text(
                Pos2::new(rect.min.x - 3.0, y),
                Align2::RIGHT_CENTER,
                label,
                font.clone(),
                text_color,
            );
        }
        p.text(
            outer.min,
            Align2::LEFT_TOP,
            format!("{} (rows)", self.row_name),
            font.clone(),
            text_color,
        );
        let mut hovered = None;
        if let Some(pos) = resp.hover_pos() {
            if rect.contains(pos) {
                let c = (((pos.x - rect.min.x) / cw) as usize).min(self.cols - 1);
                let r = (((pos.y - rect.min.y) / ch) as usize).min(self.rows - 1);
                p.rect_stroke(
                    cell(r, c).expand(1.0),
                    0.0,
                    Stroke::new(1.5, Color32::RED),
                    StrokeKind::Outside,
                );
                hovered = Some((r, c));
            }
        }
        let resp = match hovered {
            Some((r, c)) => resp.on_hover_ui_at_pointer(|ui| tooltip(ui, r, c)),
            None => resp,
        };
        (resp, hovered)
    }
}

/// The finite min and max of a slice (0, 1 when there is none).
pub fn finite_range(v: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
    for &x in v {
        if x.is_finite() {
            lo = lo.min(x);
            hi = hi.max(x);
        }
    }
    if lo > hi {
        (0.0, 1.0)
    } else {
        (lo, hi)
    }
}

/// A horizontal color bar with its end labels.
pub fn legend(ui: &mut Ui, cmap: Colormap, lo: f32, hi: f32, label: &str) {
    ui.horizontal(|ui| {
        ui.label(egui::RichText::new(label).small());
        let (lo_s, hi_s) = match cmap {
            Colormap::Diverging => (num(-hi as f64), num(hi as f64)),
            _ => (num(lo as f64), num(hi as f64)),
        };
        ui.label(egui::RichText::new(lo_s).small().monospace());
        let (rect, _) = ui.allocate_exact_size(Vec2::new(120.0, 10.0), Sense::hover());
        let n = 40;
        for i in 0..n {
            let t = i as f32 / (n - 1) as f32;
            let v = match cmap {
                Colormap::Diverging => -hi + 2.0 * hi * t,
                _ => lo + (hi - lo) * t,
            };
            let x0 = rect.min.x + rect.width() * i as f32 / n as f32;
            let x1 = rect.min.x + rect.width() * (i + 1) as f32 / n as f32;
            ui.painter().rect_filled(
                Rect::from_min_max(Pos2::new(x0, rect.min.y), Pos2::new(x1 + 0.5, rect.max.y)),
                0.0,
                cmap.color(v, lo, hi),
            );
        }
        ui.label(egui::RichText::new(hi_s).small().monospace());
    });
}

/// Grid marks at integers (experts, exponents): a step of 1, 2, 4, 5, 8, 10, ... chosen so
/// labels stay about 40 points apart, so every bar of a small chart gets its own label.
pub fn int_grid(input: egui_plot::GridInput) -> Vec<egui_plot::GridMark> {
    let (lo, hi) = input.bounds;
    // base_step_size spans the plot's minimum grid spacing (8 points by default); egui_plot
    // fades tick labels in from about 70 points apart, so aim for that.
    let min_step = (input.base_step_size * 9.0).max(1.0);
    let step = [
        1.0, 2.0, 4.0, 5.0, 8.0, 10.0, 16.0, 20.0, 25.0, 32.0, 50.0, 64.0, 100.0, 128.0, 256.0,
        512.0, 1024.0,
    ]
    .into_iter()
    .find(|&s| s >= min_step)
    .unwrap_or(min_step.ceil());
    let mut v = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while v <= hi && out.len() < 1000 {
        out.push(egui_plot::GridMark {
            value: v + 0.0, // -0.0 -> 0.0, so no "-0" label
            step_size: step,
        });
        v += step;
    }
    out
}
