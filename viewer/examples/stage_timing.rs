//! Seconds per worker stage for a synthetic layer, first load and after a router change (the
//! layer, its weight view and the per-format quantized weights reused), without a window:
//! `cargo run --release -p mxmoe-viewer --example stage_timing -- [experts H I top_k tokens]`.
//!
//! The stages are the worker's: one library forward with stage taps (the routing, activation and
//! scheme views are computed from it), then the views, then the GPU. The GPU is opened once per
//! process; each dataset's layer is uploaded once (resident) and its forwards run on that handle,
//! so a second forward on the same dataset costs only the forward.

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
    let lap = |t: &mut Instant, what: &str| {
        println!("{what:<34} {:>7.3} s", t.elapsed().as_secs_f64());
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
    let mut t = Instant::now();
    let base = data::synth_base(&p).unwrap();
    lap(&mut t, "generate layer");
    let d = data::synth_dataset(&p, &base).unwrap();
    lap(&mut t, "dataset (batch)");
    let run = analysis::layer_run(&d).unwrap();
    lap(&mut t, "forward with stage taps (once)");
    let _ = analysis::routing_view(&d).unwrap();
    lap(&mut t, "routing (from the forward)");
    let _ = analysis::act_view(&d, &run);
    lap(&mut t, "activations (from the taps)");
    let _ = analysis::weight_view(&d);
    lap(&mut t, "weights (5 rules)");
    let mut cache = SchemeCache::default();
    let _ = analysis::scheme_view(&d, &run, &mut cache, |_| true)
        .unwrap()
        .unwrap();
    lap(&mut t, "schemes (cold, forward x5)");
    match analysis::gpu() {
        Ok(g) => println!("GPU: {}", g.adapter()),
        Err(e) => println!("GPU: none ({e})"),
    }
    lap(&mut t, "open GPU (once per process)");
    let gpu = analysis::prepare_gpu(&d);
    lap(&mut t, "GPU upload (once per dataset)");
    let _ = analysis::backend_view(&d, &gpu);
    lap(&mut t, "CPU vs GPU (forward on resident)");
    if let Ok(g) = &gpu {
        let opts = analysis::backends::COMPARE;
        let _ = g.backend.moe(&g.layer, &d.hidden, &d.logits, opts).unwrap();
        lap(&mut t, "GPU forward again (resident)");
    }
    println!(
        "-- router change: top-k {} -> 2, reusing the layer",
        p.top_k
    );
    p.top_k = 2;
    let d = data::synth_dataset(&p, &base).unwrap();
    let run = analysis::layer_run(&d).unwrap();
    let _ = analysis::routing_view(&d).unwrap();
    let _ = analysis::act_view(&d, &run);
    lap(&mut t, "dataset + forward + routing + acts");
    let _ = analysis::scheme_view(&d, &run, &mut cache, |_| true)
        .unwrap()
        .unwrap();
    lap(&mut t, "schemes (warm)");
    let gpu = analysis::prepare_gpu(&d);
    lap(&mut t, "GPU upload (new dataset)");
    let _ = analysis::backend_view(&d, &gpu);
    lap(&mut t, "CPU vs GPU (same GPU, no reopen)");
}
