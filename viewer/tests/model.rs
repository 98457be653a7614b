//! Model directories: the layer listing and pick, router logits from the checkpoint's gate
//! weights, and the routing overview of every layer; `load_stats` by hand.

mod common;

use mxmoe_viewer::analysis::model::load_stats;
use mxmoe_viewer::analysis::{self, Origin};
use mxmoe_viewer::app::Results;
use mxmoe_viewer::data::{self, Source};

/// ids [0, 0, 1, 3] over 4 experts: load [2, 1, 0, 1], mean 1, max/mean 2, variance
/// (1 + 0 + 1 + 0) / 4 = 0.5, CV = sqrt(0.5); expert 2 never chosen. Ids outside are ignored.
#[test]
fn load_stats_by_hand() {
    let s = load_stats(&[0, 0, 1, 3, -1, 9], 4);
    assert_eq!(s.load, vec![2, 1, 0, 1]);
    assert_eq!(s.max_over_mean, 2.0);
    assert!((s.cv - 0.5f64.sqrt()).abs() < 1e-15);
    assert_eq!(s.empty, vec![2]);
    let z = load_stats(&[], 3);
    assert_eq!((z.max_over_mean, z.cv, z.empty.len()), (0.0, 0.0, 3));
}

/// A three-layer directory: the first layer loads by default, `pick` loads another, the batch
/// is synthetic hidden states with the logits from the layer's own router.
#[test]
fn model_directory_lists_picks_and_routes_from_the_gate() {
    let dir = tempfile::tempdir().unwrap();
    common::write_model_dir(dir.path(), 3, 8);
    let layers = data::list_layers(dir.path()).unwrap();
    assert_eq!(layers.len(), 3);
    assert!(layers.iter().all(|l| l.router));
    let d = data::load(&Source::files(dir.path(), None, 16)).unwrap();
    let m = d
        .model
        .as_ref()
        .expect("a model directory lists its layers");
    assert_eq!((m.layers.len(), m.picked), (3, 0));
    assert_eq!(d.batch.hidden, Origin::Synthetic);
    assert_eq!(
        d.batch.logits,
        Origin::Router,
        "logits must come from the gate"
    );
    // The logits are the gate's: W x, recomputed here by hand for token 0.
    let r = d.router.as_ref().unwrap();
    for e in 0..8 {
        let want: f64 = (0..64)
            .map(|k| r.weight[e * 64 + k] as f64 * d.hidden[k] as f64)
            .sum();
        assert!((d.logits[e] as f64 - want).abs() <= 1e-6 * want.abs().max(1.0));
    }
    let mut src = Source::files(dir.path(), None, 16);
    if let Source::Files { pick, .. } = &mut src {
        *pick = Some(2);
    }
    let d2 = data::load(&src).unwrap();
    assert_eq!(d2.model.as_ref().unwrap().picked, 2);
    assert!(d2.source.contains("model.layers.2"), "{}", d2.source);
    assert_ne!(d2.layer.weights.w13.scales, d.layer.weights.w13.scales);
}

/// The overview routes the same hidden states through every layer's router: one row per
/// layer, each load summing to M * k, and the loaded layer's row equal to its routing view.
#[test]
fn overview_covers_every_layer() {
    let dir = tempfile::tempdir().unwrap();
    common::write_model_dir(dir.path(), 4, 8);
    let d = data::load(&Source::files(dir.path(), None, 20)).unwrap();
    let v = analysis::model_routing(&d, |_| true).unwrap().unwrap();
    assert_eq!(v.layers.len(), 4);
    for l in &v.layers {
        let s = l.stats.as_ref().unwrap();
        assert_eq!(s.load.iter().sum::<usize>(), 20 * 2, "layer {}", l.index);
    }
    let own = analysis::routing_view(&d).unwrap();
    assert_eq!(v.layers[0].stats.as_ref().unwrap().load, own.load);
    // Cancelling after the first layer stops.
    let mut n = 0;
    assert!(analysis::model_routing(&d, |_| {
        n += 1;
        false
    })
    .is_none());
    assert_eq!(n, 1);
    assert!(v.csv().lines().count() >= 5);
    // Through the pipeline too.
    let r = Results::compute(&Source::files(dir.path(), None, 20));
    assert_eq!(r.model.ready().unwrap().layers.len(), 4);
}
