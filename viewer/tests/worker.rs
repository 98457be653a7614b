//! The worker thread behind the UI: loads finish, views arrive, and a change of router settings
//! reuses the generated layer and its weight view instead of recomputing them.

use eframe::egui;
use egui_kittest::Harness;
use mxmoe_viewer::app::{AutoRun, Slot, Tab, ViewerApp};
use mxmoe_viewer::data::{Source, SynthParams};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn settle(h: &mut Harness<'_, ViewerApp>) {
    let t0 = Instant::now();
    loop {
        h.step();
        if h.state().idle_now() {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the worker did not finish"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Catches a cache keyed on too little (stale weights after a layer change) or too much (the
/// layer regenerated when only top-k changed).
#[test]
fn router_change_reuses_the_layer_a_layer_change_does_not() {
    let p = SynthParams::small();
    let app = ViewerApp::new(
        &egui::Context::default(),
        Source::Synthetic(p.clone()),
        Tab::Weights,
        AutoRun::default(),
    );
    let mut h = Harness::builder()
        .with_size([1200.0, 800.0])
        .build_ui_state(|ui, app: &mut ViewerApp| app.draw(ui), app);
    settle(&mut h);
    let weights = |h: &Harness<'_, ViewerApp>| match &h.state().results.weights {
        Slot::Ready(w) => w.clone(),
        other => panic!("weights not ready: {other:?}"),
    };
    let w1 = weights(&h);
    let mut p2 = p.clone();
    p2.top_k = 3;
    p2.tokens = 10;
    h.state_mut().load(Source::Synthetic(p2));
    h.step();
    settle(&mut h);
    let w2 = weights(&h);
    assert!(
        Arc::ptr_eq(&w1, &w2),
        "top-k change recomputed the weight view"
    );
    h.state_mut().tab = Tab::Routing;
    h.step();
    settle(&mut h);
    match &h.state().results.routing {
        Slot::Ready(r) => assert_eq!((r.top_k, r.m), (3, 10)),
        other => panic!("routing not ready: {other:?}"),
    }
    let mut p3 = p.clone();
    p3.seed = 2;
    h.state_mut().tab = Tab::Weights;
    h.state_mut().load(Source::Synthetic(p3));
    h.step();
    settle(&mut h);
    assert!(
        !Arc::ptr_eq(&w1, &weights(&h)),
        "a new seed kept the old weights"
    );
}

/// Views are computed when their tab is shown, not before: opening a big layer does not wait
/// for the scheme comparison nobody looked at.
#[test]
fn views_are_computed_when_their_tab_is_shown() {
    let app = ViewerApp::new(
        &egui::Context::default(),
        Source::Synthetic(SynthParams::small()),
        Tab::Routing,
        AutoRun::default(),
    );
    let mut h = Harness::builder()
        .with_size([1200.0, 800.0])
        .build_ui_state(|ui, app: &mut ViewerApp| app.draw(ui), app);
    settle(&mut h);
    let r = &h.state().results;
    assert!(matches!(r.routing, Slot::Ready(_)));
    assert!(r.schemes.is_waiting() && r.acts.is_waiting() && r.packed.is_waiting());
    h.state_mut().tab = Tab::Activations;
    h.step();
    settle(&mut h);
    let r = &h.state().results;
    assert!(matches!(r.acts, Slot::Ready(_)));
    assert!(
        r.schemes.is_waiting(),
        "the scheme view ran without its tab"
    );
}

/// Cancel stops a running view: it is marked cancelled (with a way to compute it again) and
/// the worker is free again at once, not after the computation.
#[test]
fn cancel_stops_a_running_view() {
    let p = SynthParams {
        n_experts: 64,
        hidden: 512,
        inter: 512,
        ..SynthParams::small()
    };
    let app = ViewerApp::new(
        &egui::Context::default(),
        Source::Synthetic(p),
        Tab::Routing,
        AutoRun::default(),
    );
    let mut h = Harness::builder()
        .with_size([1200.0, 800.0])
        .build_ui_state(|ui, app: &mut ViewerApp| app.draw(ui), app);
    settle(&mut h);
    h.state_mut().tab = Tab::Schemes;
    h.step();
    h.state_mut().cancel();
    h.step();
    let t0 = Instant::now();
    settle(&mut h);
    match &h.state().results.schemes {
        Slot::Failed(e) => assert_eq!(e, "cancelled"),
        other => panic!("the scheme view was not cancelled: {other:?}"),
    }
    eprintln!("cancelled in {:.2} s", t0.elapsed().as_secs_f64());
    // Routing, computed before, stays.
    assert!(matches!(h.state().results.routing, Slot::Ready(_)));
}
