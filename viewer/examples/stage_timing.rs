//! Seconds per worker stage for a synthetic layer, first load and after a router change (the
//! layer, its weight view and the per-format quantized weights reused), without a window:
//! `cargo run --release -p mxmoe-viewer --example stage_timing -- [experts H I top_k tokens]`.

use mxmoe_viewer::analysis::{self, SchemeCache};
use mxmoe_viewer::data::{self, SynthParams};
use std::time::Instant;

fn main() {
    let a: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let mut p = SynthParams::default();
    if let [e, h, i, k, m] = a[..] {
        (p.n_experts, p.hidden, p.inter, p.top_k, p.tokens) = (e, h, i, k, m);
    }
    let t = Instant::now();
    let lap = |t: &mut Instant, what: &str| {
        println!("{what:<28} {:>7.2} s", t.elapsed().as_secs_f64());
        *t = Instant::now();
    };
    println!(
        "{} experts, H = {}, I = {}, top-{}, {} tokens, {} rayon threads",
        p.n_experts,
        p.hidden,
        p.inter,
        p.top_k,
        p.tokens,
        rayon::current_num_threads()
    );
    let mut t = t;
    let base = data::synth_base(&p).unwrap();
    lap(&mut t, "generate layer");
    let d = data::synth_dataset(&p, &base).unwrap();
    lap(&mut t, "dataset (batch)");
    let r = analysis::routing_view(&d).unwrap();
    lap(&mut t, "routing");
    let _ = analysis::act_view(&d, &r.routing);
    lap(&mut t, "activations");
    let _ = analysis::weight_view(&d);
    lap(&mut t, "weights (5 rules)");
    let mut cache = SchemeCache::default();
    let _ = analysis::scheme_view(&d, &mut cache, |_| true)
        .unwrap()
        .unwrap();
    lap(&mut t, "schemes (cold)");
    let _ = analysis::backend_view(&d);
    lap(&mut t, "gpu");
    println!(
        "-- router change: top-k {} -> 2, reusing the layer",
        p.top_k
    );
    p.top_k = 2;
    let d = data::synth_dataset(&p, &base).unwrap();
    let r = analysis::routing_view(&d).unwrap();
    let _ = analysis::act_view(&d, &r.routing);
    lap(&mut t, "dataset + routing + acts");
    let _ = analysis::scheme_view(&d, &mut cache, |_| true)
        .unwrap()
        .unwrap();
    lap(&mut t, "schemes (warm)");
}
