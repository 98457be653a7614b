//! Snapshot tests of every view on a small fixed synthetic layer (8 experts, H = I = 64, top-2,
//! 24 tokens, seed 1) and on a packed-only layer file (no unquantized weights, no token batch:
//! what an MXFP4 checkpoint gives), rendered with egui_kittest's wgpu renderer (lavapipe in CI).
//!
//! Update with `UPDATE_SNAPSHOTS=true cargo test -p mxmoe-viewer --test snapshots`, then LOOK at
//! `viewer/tests/snapshots/*.png`: they are the views a user sees.

mod common;

use eframe::egui;
use egui_kittest::kittest::Queryable as _;
use egui_kittest::{Harness, SnapshotResults};
use mxmoe_viewer::analysis::{BackendDiff, BackendView};
use mxmoe_viewer::app::{AutoRun, Results, Slot, Tab, ViewUi, ViewerApp};
use mxmoe_viewer::data::{Source, SynthParams};
use mxmoe_viewer::panels;
use mxmoe_viewer::state::WeightSection;
use std::sync::{Arc, OnceLock};

/// A packed-only layer file (16 experts, H = 128, I = 64, top-4, MXFP4 weights quantized with
/// `even`, seed 5) with no token batch, computed once.
fn packed_only() -> Results {
    static R: OnceLock<Results> = OnceLock::new();
    R.get_or_init(|| {
        use mxmoe::moe::synth::{synth_layer, SynthSpec};
        let dir = tempfile::tempdir().unwrap();
        let mut spec = SynthSpec::new(mxmoe::scheme::Scheme::OCP_MX[0], 16, 128, 64, 4);
        spec.seed = 5;
        let s = synth_layer(&spec).unwrap();
        let path = dir.path().join("mxfp4-layer.safetensors");
        mxmoe::io::save_layer(&path, &s.layer, None).unwrap();
        let mut r = Results::compute(&Source::files(&path, None, 32));
        r.backends = Slot::Ready(Arc::new(BackendView::Skipped("fixture".into())));
        r.schemes = Slot::Waiting;
        r
    })
    .clone()
}

/// The fixed results, computed once; timings zeroed so the pictures are deterministic.
fn results() -> Results {
    static R: OnceLock<Results> = OnceLock::new();
    R.get_or_init(|| {
        let mut r = Results::compute(&Source::Synthetic(SynthParams::small()));
        if let Slot::Ready(s) = &r.schemes {
            let mut s = (**s).clone();
            for row in &mut s.rows {
                row.seconds = 0.0;
            }
            r.schemes = Slot::Ready(Arc::new(s));
        }
        // The live GPU result depends on the machine; the backend views get fixed data below.
        r.backends = Slot::Ready(Arc::new(BackendView::Skipped(
            "no GPU adapter found (test fixture)".into(),
        )));
        r
    })
    .clone()
}

fn harness<'a>(
    size: egui::Vec2,
    tab: Tab,
    r: Results,
    vu: ViewUi,
) -> Harness<'a, (Results, ViewUi)> {
    Harness::builder().with_size(size).build_ui_state(
        move |ui, (r, vu): &mut (Results, ViewUi)| {
            egui::CentralPanel::default().show(ui, |ui| panels::show_tab(ui, tab, r, vu));
        },
        (r, vu),
    )
}

fn snap(
    results: &mut SnapshotResults,
    name: &str,
    size: [f32; 2],
    tab: Tab,
    r: Results,
    vu: ViewUi,
) {
    let mut h = harness(size.into(), tab, r, vu);
    h.run();
    results.add(h.try_snapshot(name));
}

#[test]
fn views() {
    let mut res = SnapshotResults::new();
    let r = results();
    snap(
        &mut res,
        "routing",
        [1100.0, 520.0],
        Tab::Routing,
        r.clone(),
        ViewUi::default(),
    );
    // A narrow window: the load chart goes below the heatmap and must still fit.
    snap(
        &mut res,
        "routing_narrow",
        [640.0, 760.0],
        Tab::Routing,
        r.clone(),
        ViewUi::default(),
    );
    let mut vu = ViewUi::default();
    vu.weights.expert = 3;
    vu.weights.section = WeightSection::Error;
    snap(
        &mut res,
        "weights_w13",
        [1100.0, 900.0],
        Tab::Weights,
        r.clone(),
        vu.clone(),
    );
    vu.weights.tensor = 1;
    snap(
        &mut res,
        "weights_w2",
        [1100.0, 900.0],
        Tab::Weights,
        r.clone(),
        vu,
    );
    // The packed-only layer: codes and scales of both tensors, the re-quantization table.
    let p = packed_only();
    let mut vu = ViewUi::default();
    snap(
        &mut res,
        "packed_codes_w13",
        [1100.0, 1000.0],
        Tab::Weights,
        p.clone(),
        vu.clone(),
    );
    vu.weights.tensor = 1;
    snap(
        &mut res,
        "packed_codes_w2",
        [1100.0, 1000.0],
        Tab::Weights,
        p.clone(),
        vu.clone(),
    );
    vu.weights.tensor = 0;
    vu.weights.section = WeightSection::Requant;
    snap(
        &mut res,
        "packed_requant",
        [900.0, 420.0],
        Tab::Weights,
        p.clone(),
        vu,
    );
    snap(
        &mut res,
        "packed_activations",
        [1100.0, 760.0],
        Tab::Activations,
        p.clone(),
        ViewUi::default(),
    );
    snap(
        &mut res,
        "activations_input",
        [1100.0, 760.0],
        Tab::Activations,
        r.clone(),
        ViewUi::default(),
    );
    let mut vu = ViewUi::default();
    vu.acts.point = 1;
    snap(
        &mut res,
        "activations_intermediate",
        [1100.0, 760.0],
        Tab::Activations,
        r.clone(),
        vu,
    );
    snap(
        &mut res,
        "schemes",
        [1000.0, 560.0],
        Tab::Schemes,
        r.clone(),
        ViewUi::default(),
    );
    snap(
        &mut res,
        "backends_skipped",
        [800.0, 160.0],
        Tab::Backends,
        r.clone(),
        ViewUi::default(),
    );

    // A fixed CPU-vs-GPU difference (what a GPU run shows), independent of the machine.
    let (m, h) = (24, 64);
    let diff: Vec<f32> = (0..m * h)
        .map(|x| {
            if x % 7 == 0 {
                0.0
            } else {
                ((x as f32 * 0.37).sin()) * 3e-6 * ((x / h) as f32 / m as f32)
            }
        })
        .collect();
    let mut rd = r.clone();
    rd.backends = Slot::Ready(Arc::new(BackendView::Diff(BackendDiff {
        adapter: "llvmpipe (LLVM 15.0.6, 256 bits) (wgpu), fixture".into(),
        m,
        h,
        n_exact: diff.iter().filter(|v| **v == 0.0).count(),
        max_abs: diff.iter().fold(0.0f64, |a, &b| a.max(b.abs() as f64)),
        rel_l2: 2.5e-7,
        routing_mismatch: 0,
        cpu_seconds: 0.0,
        gpu_seconds: 0.0,
        diff,
    })));
    snap(
        &mut res,
        "backends_diff",
        [900.0, 520.0],
        Tab::Backends,
        rd,
        ViewUi::default(),
    );
}

/// Hovering a heatmap cell shows the exact score and the token's top-k weights.
#[test]
fn routing_tooltip() {
    let mut h = harness(
        [1100.0, 520.0].into(),
        Tab::Routing,
        results(),
        ViewUi::default(),
    );
    h.run();
    let node = h.get_by_label("heatmap token x expert");
    let rect = node.rect();
    // Token 5, expert 2 of the 24 x 8 map (margins: 34 left, 14 top, 28 bottom).
    let p = rect.min
        + egui::vec2(
            34.0 + (rect.width() - 34.0) * (2.5 / 8.0),
            14.0 + (rect.height() - 42.0) * (5.5 / 24.0),
        );
    h.hover_at(p);
    h.run();
    h.snapshot("routing_tooltip");
}

/// A model directory (6 MoE layers of 16 experts, vLLM names, router weights), no batch.
fn model_dir() -> Results {
    static R: OnceLock<Results> = OnceLock::new();
    R.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("tiny-moe");
        common::write_model_dir(&root, 6, 16);
        let mut r = Results::compute(&Source::files(&root, None, 48));
        r.backends = Slot::Ready(Arc::new(BackendView::Skipped("fixture".into())));
        r
    })
    .clone()
}

/// The overview of every layer, and the whole window with the layer picker.
#[test]
fn model_directory() {
    let mut res = SnapshotResults::new();
    snap(
        &mut res,
        "model_overview",
        [1100.0, 760.0],
        Tab::Model,
        model_dir(),
        ViewUi::default(),
    );
    let mut h = Harness::builder()
        .with_size([1440.0, 860.0])
        .build_ui_state(|ui, app: &mut ViewerApp| app.draw(ui), {
            let ctx = egui::Context::default();
            let mut app = ViewerApp::idle(&ctx, Tab::Routing, AutoRun::default());
            app.results = model_dir();
            app.layer_path = "/models/tiny-moe".into();
            app
        });
    h.run();
    res.add(h.try_snapshot("window_model"));
}

/// The whole window on the packed-only layer: the SYNTHETIC batch banner, the scheme picker
/// disabled (no originals), the weights tab.
#[test]
fn whole_window_packed_only() {
    let mut h = Harness::builder()
        .with_size([1440.0, 900.0])
        .build_ui_state(|ui, app: &mut ViewerApp| app.draw(ui), {
            let ctx = egui::Context::default();
            let mut app = ViewerApp::idle(&ctx, Tab::Weights, AutoRun::default());
            app.results = packed_only();
            app.layer_path = "/models/mxfp4-layer.safetensors".into();
            app
        });
    h.run();
    h.snapshot("window_packed_only");
}

/// The whole window: side panel, tab bar and the routing view, with results injected.
#[test]
fn whole_window() {
    let mut h = Harness::builder()
        .with_size([1440.0, 820.0])
        .build_ui_state(|ui, app: &mut ViewerApp| app.draw(ui), {
            let ctx = egui::Context::default();
            let mut app = ViewerApp::idle(&ctx, Tab::Routing, AutoRun::default());
            app.synth = SynthParams::small();
            app.results = results();
            app
        });
    h.run();
    h.snapshot("window");
}
