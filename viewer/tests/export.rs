//! The export buttons: CSV of every view lands in the export folder, with the view's header.

use eframe::egui;
use egui_kittest::kittest::Queryable as _;
use egui_kittest::Harness;
use mxmoe_viewer::app::{AutoRun, Results, Tab, ViewerApp};
use mxmoe_viewer::data::{Source, SynthParams};

/// Catches an export that writes nothing, the wrong view, or to the wrong folder.
#[test]
fn csv_button_writes_each_views_data() {
    let dir = tempfile::tempdir().unwrap();
    let app = {
        let ctx = egui::Context::default();
        let mut app = ViewerApp::idle(&ctx, Tab::Routing, AutoRun::default());
        app.results = Results::compute(&Source::Synthetic(SynthParams::small()));
        app.export_dir = dir.path().display().to_string();
        app
    };
    let mut h = Harness::builder()
        .with_size([1440.0, 820.0])
        .build_ui_state(|ui, app: &mut ViewerApp| app.draw(ui), app);
    h.run();
    let tabs = [
        (
            "Routing",
            "routing",
            "token,expert,score,selected_slot,router_weight",
        ),
        (
            "Weights",
            "weights",
            "# packed weights: codes and scales as stored",
        ),
        (
            "Activation error",
            "activations",
            "tensor,format,rule,rel_l2",
        ),
        ("Schemes", "schemes", "# reference:"),
        ("CPU vs GPU", "backends", "# "),
    ];
    for (label, _, _) in tabs {
        h.get_by_label(label).click();
        h.run();
        h.get_by_label("CSV").click();
        h.run();
    }
    for (_, slug, head) in tabs {
        let f = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&format!("mxmoe-{slug}-"))
            })
            .unwrap_or_else(|| panic!("no CSV for {slug}"));
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            text.starts_with(head),
            "{slug}: {}",
            &text[..text.len().min(80)]
        );
        assert!(text.lines().count() > 1, "{slug} CSV is empty");
    }
}

/// Catches an off-by-one or transposed crop in the PNG export of one view.
#[test]
fn png_export_crops_to_the_view() {
    let dir = tempfile::tempdir().unwrap();
    let (w, h) = (40usize, 30usize);
    let px: Vec<egui::Color32> = (0..w * h)
        .map(|i| egui::Color32::from_rgb((i % w) as u8, (i / w) as u8, 7))
        .collect();
    let img = egui::ColorImage::new([w, h], px);
    let path = dir.path().join("view.png");
    let crop = egui::Rect::from_min_max(egui::pos2(10.0, 5.0), egui::pos2(30.0, 25.0));
    mxmoe_viewer::app::save_png(&img, Some(crop), &path).unwrap();
    let out = image::open(&path).unwrap().to_rgba8();
    assert_eq!(out.dimensions(), (20, 20));
    assert_eq!(out.get_pixel(0, 0).0, [10, 5, 7, 255]);
    assert_eq!(out.get_pixel(19, 19).0, [29, 24, 7, 255]);
}
