//! The numbers behind the views, on the small fixed layer: the invariants a reader relies on.

use mxmoe::format::ScaleMode;
use mxmoe_viewer::analysis::{self, BackendView, Rule};
use mxmoe_viewer::app::{Results, Slot};
use mxmoe_viewer::data::{self, Source, SynthParams};
use std::path::PathBuf;

fn small() -> mxmoe_viewer::analysis::Dataset {
    data::load(&Source::Synthetic(SynthParams::small())).unwrap()
}

/// The small dataset and its one forward with stage taps.
fn small_run() -> (
    mxmoe_viewer::analysis::Dataset,
    mxmoe_viewer::analysis::LayerRun,
) {
    let d = small();
    let run = analysis::layer_run(&d).unwrap();
    (d, run)
}

/// Catches a load histogram that forgets slots or double counts: it must sum to M * k.
#[test]
fn routing_load_sums_to_slots() {
    let d = small();
    let r = analysis::routing_view(&d).unwrap();
    assert_eq!(r.load.iter().sum::<usize>(), d.m * r.top_k);
    assert!(r.max_over_mean >= 1.0);
    for t in 0..d.m {
        let row = &r.scores[t * r.n_experts..(t + 1) * r.n_experts];
        assert!(
            (row.iter().sum::<f32>() - 1.0).abs() < 1e-5,
            "softmax row {t} sums to 1"
        );
        for j in 0..r.top_k {
            let e = r.routing.topk_ids[t * r.top_k + j] as usize;
            assert_eq!(r.slot_of(t, e), Some(j));
        }
    }
    assert!(r
        .csv()
        .starts_with("token,expert,score,selected_slot,router_weight\n"));
}

/// Catches scale-rule mix-ups: ceil and rceil never clip, floor may; every rule's error is
/// positive and small; the stored (even) scales give exactly the even-mode numbers.
#[test]
fn weight_stats_follow_the_scale_rules() {
    let d = small();
    let w = analysis::weight_view(&d).expect("synthetic layers carry their originals");
    for t in [&w.w13, &w.w2] {
        let by = |r: Rule| t.by_rule.iter().find(|q| q.rule == r).unwrap();
        assert_eq!(by(Rule::Mode(ScaleMode::Ceil)).n_saturated, 0);
        assert_eq!(by(Rule::Mode(ScaleMode::RCeil)).n_saturated, 0);
        for q in &t.by_rule {
            assert!(
                q.rel_l2 > 0.0 && q.rel_l2 < 0.5,
                "{} {}: {}",
                t.name,
                q.rule.name(),
                q.rel_l2
            );
            assert_eq!(q.scale_hist.iter().sum::<u64>() as usize, q.n_elems / 32);
            assert_eq!(q.group_rel.len(), w.n_experts);
        }
        // Synthetic weights are quantized with `even`: the stored rule must match it exactly.
        let (a, b) = (by(Rule::Mode(ScaleMode::Even)), by(Rule::Stored));
        assert_eq!(a.block_rel, b.block_rel);
        assert_eq!(a.scale_hist, b.scale_hist);
    }
}

/// Catches an intermediate computed from the wrong slot or expert: the slot order must follow
/// the routing, and every slot of a local expert must have a non-zero intermediate.
#[test]
fn activation_stats_cover_both_points() {
    let (d, run) = small_run();
    let r = analysis::routing_view(&d).unwrap();
    let a = analysis::act_view(&d, &run);
    let input = a.input.unwrap();
    let inter = a.intermediate.unwrap();
    assert_eq!(input.by_rule[0].groups(), d.m);
    assert_eq!(inter.by_rule[0].groups(), d.m * r.top_k);
    assert_eq!(input.by_rule.len(), 4);
    for q in inter.by_rule.iter().chain(&input.by_rule) {
        assert!(q.rel_l2 > 0.0 && q.rel_l2 < 0.5);
    }
}

/// The scheme comparison covers the five OCP MX schemes plus the stored layer, and the stored
/// row equals the matching OCP row (same weights, same modes).
#[test]
fn schemes_compare_all_five() {
    let (d, run) = small_run();
    let s = analysis::scheme_view(&d, &run, &mut Default::default(), |_| true)
        .unwrap()
        .unwrap();
    assert_eq!(s.rows.len(), 6);
    assert!(s.rows[0].stored);
    let same = s.rows[1..]
        .iter()
        .find(|r| r.scheme == d.layer.config.scheme)
        .unwrap();
    assert_eq!(same.rel_l2, s.rows[0].rel_l2);
    for r in &s.rows {
        assert!(
            r.rel_l2 > 0.0 && r.rel_l2 < 1.0,
            "{}: {}",
            r.label,
            r.rel_l2
        );
    }
}

/// The GPU comparison runs when an adapter exists and says SKIPPED (explicitly) when not.
#[test]
fn gpu_comparison_or_explicit_skip() {
    let d = small();
    match analysis::backend_view(&d, &analysis::prepare_gpu(&d)) {
        BackendView::Skipped(why) => eprintln!("SKIPPED: CPU vs GPU: {why}"),
        BackendView::Failed { adapter, error } => panic!("GPU {adapter} failed: {error}"),
        BackendView::Diff(x) => {
            eprintln!(
                "CPU vs GPU on {}: max |diff| {:e}, rel {:e}",
                x.adapter, x.max_abs, x.rel_l2
            );
            assert!(
                x.rel_l2 < 1e-4,
                "GPU output differs from the CPU by rel {:e}",
                x.rel_l2
            );
        }
    }
}

/// Catches a view that runs a forward of its own, or reads the wrong stage: the routing view
/// shows the shared forward's routing, the activation view's intermediate is the QDQ error of
/// the forward's activation tap (under the layer's own mode, exactly the error between the
/// activation and intermediate taps), and the scheme view's stored row is the forward's output.
#[test]
fn views_come_from_one_forward() {
    let (d, run) = small_run();
    let l = &d.layer;
    assert_eq!(
        run.routing,
        mxmoe::moe::route(&l.config.router, &d.logits, l.config.n_experts, None).unwrap()
    );
    assert_eq!(analysis::routing_view(&d).unwrap().routing, run.routing);
    let a = analysis::act_view(&d, &run);
    let inter = a.intermediate.unwrap();
    let own = inter
        .by_rule
        .iter()
        .find(|q| q.rule == Rule::Mode(l.config.act_scale_mode))
        .unwrap();
    let (mut e2, mut x2) = (0f64, 0f64);
    for (&x, &q) in run.stages.act.iter().zip(&run.stages.inter_q) {
        e2 += (q as f64 - x as f64).powi(2);
        x2 += (x as f64).powi(2);
    }
    let want = (e2 / x2).sqrt();
    assert!(
        (own.rel_l2 - want).abs() <= 1e-12 * want,
        "intermediate view {} vs taps {want}",
        own.rel_l2
    );
    let s = analysis::scheme_view(&d, &run, &mut Default::default(), |_| true)
        .unwrap()
        .unwrap();
    assert_eq!(s.rows[0].seconds, run.seconds);
    let reference = analysis::reference_forward(
        l,
        d.w13_orig.as_ref().unwrap(),
        d.w2_orig.as_ref().unwrap(),
        &d.hidden,
        &run.routing,
    );
    let (mut e2, mut r2) = (0f64, 0f64);
    for (&y, &r) in run.output.iter().zip(&reference) {
        e2 += (y as f64 - r).powi(2);
        r2 += r * r;
    }
    assert_eq!(s.rows[0].rel_l2, (e2 / r2).sqrt());
}

/// The GPU is opened once per process: every call hands out the same backend.
#[test]
fn backends_open_once() {
    assert!(std::ptr::eq(analysis::cpu(), analysis::cpu()));
    if let (Ok(a), Ok(b)) = (analysis::gpu(), analysis::gpu()) {
        assert!(std::ptr::eq(a, b), "the GPU was opened twice");
    }
}

/// Bad inputs become messages, never panics.
#[test]
fn bad_files_are_messages() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.safetensors");
    std::fs::write(&junk, b"not safetensors").unwrap();
    for layer in [PathBuf::from("/nonexistent/layer.safetensors"), junk] {
        let r = Results::compute(&Source::files(&layer, None, 4));
        match r.dataset {
            Slot::Failed(e) => assert!(e.contains(&*layer.to_string_lossy()), "{e}"),
            _ => panic!("{} loaded", layer.display()),
        }
    }
    let mut p = SynthParams::small();
    p.hidden = 48;
    assert!(data::load(&Source::Synthetic(p)).is_err());
}
