//! What is kept between runs, and telling a dropped token batch from a layer by its header.

use eframe::egui;
use mxmoe::io::{save_batch, save_layer, TokenBatch};
use mxmoe::moe::synth::{synth_batch, synth_layer, SynthSpec};
use mxmoe_viewer::app::{AutoRun, Tab, ViewerApp};
use mxmoe_viewer::settings::{is_token_batch, safetensors_names, Settings, RECENT};
use std::path::Path;

/// Catches a recent list that grows without bound, repeats a file, or loses the newest.
#[test]
fn recent_files_are_newest_first_once_and_capped() {
    let mut s = Settings::default();
    for i in 0..12 {
        s.remember(Path::new(&format!("/m/{i}.safetensors")), None);
    }
    s.remember(Path::new("/m/5.safetensors"), None);
    assert_eq!(s.recent.len(), RECENT);
    assert_eq!(s.recent[0].layer, "/m/5.safetensors");
    assert_eq!(s.recent[1].layer, "/m/11.safetensors");
    assert_eq!(
        s.recent
            .iter()
            .filter(|r| r.layer == "/m/5.safetensors")
            .count(),
        1
    );
    // The same layer with a batch is another entry.
    s.remember(
        Path::new("/m/5.safetensors"),
        Some(Path::new("/m/b.safetensors")),
    );
    assert_eq!(s.recent[0].batch, "/m/b.safetensors");
    assert_eq!(s.recent[0].label(), "5.safetensors + b.safetensors");
}

/// The settings of an app survive serialization and come back into a new app; values that
/// no longer parse are ignored, not fatal.
#[test]
fn settings_round_trip_into_a_new_app() {
    let ctx = egui::Context::default();
    let mut app = ViewerApp::idle(&ctx, Tab::Weights, AutoRun::default());
    app.export_dir = "/tmp/exports".into();
    app.synth.n_experts = 16;
    app.synth.seed = 9;
    app.settings.remember(Path::new("/m/a.safetensors"), None);
    let st = Settings::from_app(&app);
    let text = serde_json::to_string(&st).unwrap();
    let back: Settings = serde_json::from_str(&text).unwrap();
    assert_eq!(back, st);
    let mut app2 = ViewerApp::idle(&ctx, Tab::Routing, AutoRun::default());
    back.apply(&mut app2);
    assert_eq!(app2.tab, Tab::Weights);
    assert_eq!(app2.export_dir, "/tmp/exports");
    assert_eq!((app2.synth.n_experts, app2.synth.seed), (16, 9));
    assert_eq!(app2.settings.recent, st.recent);
    // The last file fills the path field (loaded only when asked).
    assert_eq!(app2.layer_path, "/m/a.safetensors");
    assert_eq!(app2.results.generation, 0);
    // An older or damaged file: unknown scheme and sizes that fail the checks are skipped.
    let old: Settings =
        serde_json::from_str(r#"{"synth_scheme":"nope","synth_sizes":[4,48,64,2,8]}"#).unwrap();
    let mut app3 = ViewerApp::idle(&ctx, Tab::Routing, AutoRun::default());
    let before = app3.synth.clone();
    old.apply(&mut app3);
    assert_eq!(app3.synth, before);
}

#[test]
fn a_dropped_batch_is_told_from_a_layer_by_its_header() {
    let dir = tempfile::tempdir().unwrap();
    let s = synth_layer(&SynthSpec::new(
        mxmoe::scheme::Scheme::OCP_MX[0],
        4,
        64,
        32,
        2,
    ))
    .unwrap();
    let layer = dir.path().join("l.safetensors");
    save_layer(&layer, &s.layer, None).unwrap();
    let (hidden, logits) = synth_batch(3, 64, 4, 1);
    let batch = dir.path().join("tokens-but-named-oddly.safetensors");
    save_batch(
        &batch,
        &TokenBatch {
            hidden,
            logits,
            m: 3,
            hidden_size: 64,
            n_experts: 4,
        },
    )
    .unwrap();
    assert!(is_token_batch(&batch));
    assert!(!is_token_batch(&layer));
    assert!(!is_token_batch(dir.path()));
    let names = safetensors_names(&batch).unwrap();
    assert!(names.contains(&"router_logits".to_string()));
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"\xff\xff\xff\xff\xff\xff\xff\xffzz").unwrap();
    assert!(safetensors_names(&junk).is_none());
}
