//! The CPU reference MoE (`moe::forward`) against an independent, hand-written pipeline.
//!
//! The pipeline below uses only `MxTensor::dequantize` and `qdq_slice` from the library, plain
//! f64 loops for the GEMMs and its own activations. It takes the routing (ids, weights) from
//! `moe::route`, which is tested separately against hand-computed values further down. Each
//! dataflow rule is pinned twice: `forward` matches the pipeline within `TOL`, and the pipeline
//! with that rule broken (no intermediate QDQ, gate/up swapped, unweighted w2 bias, ...) differs
//! from `forward` by at least `MATERIAL` = 1000 x `TOL`, so the test would catch the bug.
//!
//! Over 600 lines: the independent hand-written pipeline plus one test per dataflow feature.

use mxmoe::check::rel_l2;
use mxmoe::format::{qdq_slice, MxFormat, BLOCK};
use mxmoe::moe::synth::{synth_batch, synth_layer, SynthSpec};
use mxmoe::moe::{
    forward, route, Accumulate, Activation, Intermediate, MoeLayer, MoeOptions, RouterConfig,
    Scoring,
};
use mxmoe::scheme::Scheme;

/// forward (f64 accumulation, f32 output) vs the pipeline: f32 output rounding (2^-24) and the
/// different f64 summation orders (~1e-16) leave ~1e-7; 1e-6 has margin.
const TOL: f64 = 1e-6;
/// What "differs materially" means: far beyond TOL.
const MATERIAL: f64 = 1000.0 * TOL;

/// The library's `check::rel_l2`, refusing an all-zero reference (the test would be vacuous).
fn rel(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    assert!(
        b.iter().any(|&v| v != 0.0),
        "reference output is all zero: the test would be vacuous"
    );
    rel_l2(a, b).0
}

/// Ways to break the dataflow on purpose (all `false` = the contract).
#[derive(Clone, Copy, Default, Debug)]
struct Variant {
    no_input_qdq: bool,
    no_mid_qdq: bool,
    /// QDQ both points with this format instead of the scheme's (weight-only check).
    force_act: Option<MxFormat>,
    /// silu: gate from the second half of w13 rows, up from the first.
    swap_halves: bool,
    /// swigluoai: read gate/linear as halves instead of interleaved rows.
    deinterleave: bool,
    /// swigluoai without the clamps.
    no_clamp: bool,
    no_w13_bias: bool,
    /// Add the w2 bias after the router-weight multiply (unweighted).
    w2_bias_unweighted: bool,
    /// apply_router_weight_on_input: QDQ(w · x) instead of w · GEMM1(QDQ(x)).
    on_input_qdq_after_weight: bool,
    /// apply_router_weight_on_input: weight the GEMM2 output instead.
    on_input_weight_at_output: bool,
    /// expert_map ignored: every global id used as a local one modulo E_local.
    ignore_expert_map: bool,
    /// Round to bf16 where vLLM does (NUMERICS.md 10.3): the GEMM1 epilogue, the activation
    /// output, the GEMM2 epilogue (after the router weight) and the final top-k sum.
    bf16: bool,
}

/// f32 -> bf16 -> f32, round to nearest even (the `half` crate's conversion).
fn bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

fn silu(g: f64) -> f64 {
    g / (1.0 + (-g).exp())
}

/// gpt-oss SwiGLU, written from NUMERICS.md section 11.
fn swiglu(g: f64, l: f64, clamp: bool) -> f64 {
    let (g, l) = if clamp {
        (g.min(7.0), l.clamp(-7.0, 7.0))
    } else {
        (g, l)
    };
    g * (1.0 / (1.0 + (-1.702 * g).exp())) * (l + 1.0)
}

/// The independent pipeline. `ids`/`wts` are `[M, k]` from `route`.
fn pipeline(layer: &MoeLayer, hidden: &[f32], ids: &[i32], wts: &[f32], v: Variant) -> Vec<f32> {
    let (h, i) = (layer.config.hidden, layer.config.inter);
    let m = hidden.len() / h;
    let k = ids.len() / m;
    let el = layer.weights.w13.shape[0];
    let w13 = layer.weights.w13.dequantize();
    let w2 = layer.weights.w2.dequantize();
    let act_fmt = v.force_act.or(layer.config.scheme.activation);
    let mode = layer.config.act_scale_mode;
    let qdq = |x: &[f32], n: usize| -> Vec<f32> {
        match act_fmt {
            Some(f) => qdq_slice(f, mode, x, n).unwrap(),
            None => x.to_vec(),
        }
    };
    let on_input = layer.config.router.apply_router_weight_on_input;
    let xq = if v.no_input_qdq {
        hidden.to_vec()
    } else {
        qdq(hidden, h)
    };
    let mut out = vec![0f64; m * h];
    for t in 0..m {
        for j in 0..k {
            let gid = ids[t * k + j] as usize;
            let e = match (&layer.weights.expert_map, v.ignore_expert_map) {
                (Some(map), false) => match map[gid] {
                    -1 => continue,
                    l => l as usize,
                },
                _ => gid % el,
            };
            let w = wts[t * k + j];
            let x: Vec<f32> = if on_input && v.on_input_qdq_after_weight {
                let wx: Vec<f32> = hidden[t * h..(t + 1) * h].iter().map(|&a| a * w).collect();
                qdq(&wx, h)
            } else {
                xq[t * h..(t + 1) * h].to_vec()
            };
            let mut g1 = vec![0f64; 2 * i];
            for (r, g) in g1.iter_mut().enumerate() {
                let row = &w13[(e * 2 * i + r) * h..(e * 2 * i + r + 1) * h];
                let mut s: f64 = row.iter().zip(&x).map(|(&a, &b)| a as f64 * b as f64).sum();
                if let (Some(b), false) = (&layer.weights.w13_bias, v.no_w13_bias) {
                    s += b[e * 2 * i + r] as f64;
                }
                if on_input && !v.on_input_qdq_after_weight && !v.on_input_weight_at_output {
                    s *= w as f64;
                }
                *g = if v.bf16 { bf16(s as f32) as f64 } else { s };
            }
            let act: Vec<f32> = (0..i)
                .map(|c| {
                    let a = match layer.config.activation {
                        Activation::Silu => {
                            let (g, u) = if v.swap_halves {
                                (g1[i + c], g1[c])
                            } else {
                                (g1[c], g1[i + c])
                            };
                            silu(g) * u
                        }
                        Activation::SwigluOai => {
                            let (g, l) = if v.deinterleave {
                                (g1[c], g1[i + c])
                            } else {
                                (g1[2 * c], g1[2 * c + 1])
                            };
                            swiglu(g, l, !v.no_clamp)
                        }
                    };
                    if v.bf16 {
                        bf16(a as f32)
                    } else {
                        a as f32
                    }
                })
                .collect();
            let aq = if v.no_mid_qdq { act } else { qdq(&act, i) };
            let weight_out = !on_input || v.on_input_weight_at_output;
            for r in 0..h {
                let row = &w2[(e * h + r) * i..(e * h + r + 1) * i];
                let y: f64 = row
                    .iter()
                    .zip(&aq)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum();
                let b2 = layer
                    .weights
                    .w2_bias
                    .as_ref()
                    .map_or(0.0, |b| b[e * h + r] as f64);
                let yo = match (weight_out, v.w2_bias_unweighted) {
                    (true, false) => (y + b2) * w as f64,
                    (true, true) => y * w as f64 + b2,
                    (false, _) => y + b2,
                };
                out[t * h + r] += if v.bf16 { bf16(yo as f32) as f64 } else { yo };
            }
        }
    }
    out.iter()
        .map(|&o| if v.bf16 { bf16(o as f32) } else { o as f32 })
        .collect()
}

fn make_layer(
    scheme: Scheme,
    act: Activation,
    e: usize,
    h: usize,
    i: usize,
    k: usize,
    seed: u64,
) -> MoeLayer {
    let mut spec = SynthSpec::new(scheme, e, h, i, k);
    spec.activation = act;
    spec.seed = seed;
    synth_layer(&spec).unwrap().layer
}

/// Run `forward` (f64) and the contract pipeline; assert they agree; return what the
/// variants need.
struct Case {
    layer: MoeLayer,
    hidden: Vec<f32>,
    ids: Vec<i32>,
    wts: Vec<f32>,
    out: Vec<f32>,
}

impl Case {
    fn new(layer: MoeLayer, hidden: Vec<f32>, logits: &[f32]) -> Case {
        let o = forward(&layer, &hidden, logits, MoeOptions::default()).unwrap();
        let r = route(
            &layer.config.router,
            logits,
            layer.config.n_experts,
            layer.weights.e_score_correction_bias.as_deref(),
        )
        .unwrap();
        assert_eq!(o.routing, r, "forward must report the routing it used");
        let c = Case {
            layer,
            hidden,
            ids: r.topk_ids,
            wts: r.topk_weights,
            out: o.output,
        };
        let want = c.run(Variant::default());
        let err = rel(&c.out, &want);
        assert!(
            err <= TOL,
            "forward vs independent pipeline: rel L2 {err:e} > {TOL:e}"
        );
        c
    }
    fn run(&self, v: Variant) -> Vec<f32> {
        pipeline(&self.layer, &self.hidden, &self.ids, &self.wts, v)
    }
    /// The pipeline with a rule broken differs from `forward` materially.
    fn breaks(&self, what: &str, v: Variant) {
        let d = rel(&self.run(v), &self.out);
        eprintln!("{what}: broken pipeline differs by {d:.3e}");
        assert!(
            d >= MATERIAL,
            "{what}: the broken pipeline differs by only {d:e}: the test could not detect it"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// One test per scheme: both QDQ points happen (and nothing happens for weight-only schemes).
// ---------------------------------------------------------------------------------------------

fn check_scheme(scheme: Scheme) {
    let (e, h, i, k, m) = (4, 64, 64, 2, 8);
    let layer = make_layer(scheme, Activation::Silu, e, h, i, k, 42);
    let (hs, lg) = synth_batch(m, h, e, 42);
    let c = Case::new(layer, hs, &lg);
    match scheme.activation {
        Some(_) => {
            c.breaks(
                "no intermediate QDQ",
                Variant {
                    no_mid_qdq: true,
                    ..Default::default()
                },
            );
            c.breaks(
                "no input QDQ",
                Variant {
                    no_input_qdq: true,
                    ..Default::default()
                },
            );
        }
        None => {
            // Weight-only: activations stay f32; QDQ'ing them (with the weight format) would
            // change the result materially, and forward matched the no-QDQ pipeline above.
            c.breaks(
                "activation QDQ on a weight-only scheme",
                Variant {
                    force_act: Some(scheme.weight),
                    ..Default::default()
                },
            );
            c.breaks(
                "intermediate QDQ on a weight-only scheme",
                Variant {
                    force_act: Some(scheme.weight),
                    no_input_qdq: true,
                    ..Default::default()
                },
            );
        }
    }
    // The f32-accumulation path runs the same dataflow.
    let o32 = forward(
        &c.layer,
        &c.hidden,
        &lg,
        MoeOptions {
            accumulate: Accumulate::F32,
            ..Default::default()
        },
    )
    .unwrap();
    // Bound justified in tests/props.rs forward_f32_vs_f64.
    assert!(rel(&o32.output, &c.out) <= 2e-5);
}

#[test]
fn scheme_w_mxfp4_a_mxfp4() {
    check_scheme("w_mxfp4_a_mxfp4".parse().unwrap());
}
#[test]
fn scheme_w_mxfp4_a_mxfp6_e3m2() {
    check_scheme("w_mxfp4_a_mxfp6_e3m2".parse().unwrap());
}
#[test]
fn scheme_w_mxfp4_a_mxfp6_e2m3() {
    check_scheme("w_mxfp4_a_mxfp6_e2m3".parse().unwrap());
}
#[test]
fn scheme_w_mxfp6_e3m2_a_mxfp6_e3m2() {
    check_scheme("w_mxfp6_e3m2_a_mxfp6_e3m2".parse().unwrap());
}
#[test]
fn scheme_w_mxfp6_e2m3_a_mxfp6_e2m3() {
    check_scheme("w_mxfp6_e2m3_a_mxfp6_e2m3".parse().unwrap());
}
#[test]
fn scheme_w_mxfp4_weight_only() {
    check_scheme("w_mxfp4".parse().unwrap());
}

/// The five OCP MX schemes are exactly vLLM's list, by name, and all are covered above.
#[test]
fn ocp_mx_scheme_names() {
    let names: Vec<String> = Scheme::OCP_MX.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        [
            "w_mxfp4_a_mxfp4",
            "w_mxfp4_a_mxfp6_e3m2",
            "w_mxfp4_a_mxfp6_e2m3",
            "w_mxfp6_e3m2_a_mxfp6_e3m2",
            "w_mxfp6_e2m3_a_mxfp6_e2m3"
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Activations, biases, expert_map, apply_router_weight_on_input
// ---------------------------------------------------------------------------------------------

/// swigluoai reads interleaved w13 rows (even = gate, odd = linear) and clamps gate <= 7 and
/// linear to [−7, 7]; hidden states are scaled up so the clamps are active.
#[test]
fn swigluoai_interleaved_and_clamped() {
    let scheme: Scheme = "w_mxfp4_a_mxfp6_e2m3".parse().unwrap();
    let (e, h, i, m) = (4, 64, 64, 8);
    let layer = make_layer(scheme, Activation::SwigluOai, e, h, i, 2, 7);
    let (hs, lg) = synth_batch(m, h, e, 7);
    let hs: Vec<f32> = hs.iter().map(|v| v * 16.0).collect();
    let c = Case::new(layer, hs, &lg);
    c.breaks(
        "swigluoai read as halves",
        Variant {
            deinterleave: true,
            ..Default::default()
        },
    );
    c.breaks(
        "swigluoai without clamps",
        Variant {
            no_clamp: true,
            ..Default::default()
        },
    );
}

/// silu: gate = rows [0, I) of w13, up = rows [I, 2I).
#[test]
fn silu_gate_up_halves() {
    let scheme: Scheme = "w_mxfp4_a_mxfp4".parse().unwrap();
    let layer = make_layer(scheme, Activation::Silu, 4, 64, 64, 2, 9);
    let (hs, lg) = synth_batch(8, 64, 4, 9);
    let c = Case::new(layer, hs, &lg);
    c.breaks(
        "gate/up swapped",
        Variant {
            swap_halves: true,
            ..Default::default()
        },
    );
}

/// Biases: w13_bias is added to the GEMM1 accumulator; w2_bias is added before the router-weight
/// multiply, so it is weighted (vLLM, gpt-oss).
#[test]
fn biases_w2_weighted() {
    let scheme: Scheme = "w_mxfp4_a_mxfp6_e3m2".parse().unwrap();
    let (e, h, i) = (4, 64, 64);
    let mut layer = make_layer(scheme, Activation::Silu, e, h, i, 2, 11);
    let mut rng = mxmoe::moe::synth::Rng::new(5);
    layer.weights.w13_bias = Some((0..e * 2 * i).map(|_| rng.normal() as f32 * 0.5).collect());
    layer.weights.w2_bias = Some((0..e * h).map(|_| rng.normal() as f32 * 0.5).collect());
    let (hs, lg) = synth_batch(8, h, e, 11);
    let c = Case::new(layer, hs, &lg);
    c.breaks(
        "w2 bias unweighted",
        Variant {
            w2_bias_unweighted: true,
            ..Default::default()
        },
    );
    c.breaks(
        "w13 bias dropped",
        Variant {
            no_w13_bias: true,
            ..Default::default()
        },
    );
}

/// expert_map: global ids map to local experts or −1; non-local experts contribute nothing (a
/// token routed only to non-local experts gets an all-zero output).
#[test]
fn expert_map_non_local_contribute_nothing() {
    let scheme: Scheme = "w_mxfp4_a_mxfp4".parse().unwrap();
    let (el, h, i, m) = (4, 64, 64, 6);
    let mut layer = make_layer(scheme, Activation::Silu, el, h, i, 2, 13);
    layer.config.n_experts = 8;
    layer.weights.expert_map = Some(vec![2, -1, 0, -1, -1, 3, 1, -1]);
    let (hs, _) = synth_batch(m, h, el, 13);
    // Token 0 -> experts 1, 3 (both non-local); token 1 -> 0 (local) and 7 (non-local);
    // the rest mixed.
    let mut lg = vec![0f32; m * 8];
    let prefs: [[usize; 2]; 6] = [[1, 3], [0, 7], [2, 4], [5, 6], [6, 0], [3, 5]];
    for (t, p) in prefs.iter().enumerate() {
        lg[t * 8 + p[0]] = 4.0;
        lg[t * 8 + p[1]] = 3.0;
    }
    let c = Case::new(layer, hs, &lg);
    let ids: Vec<i32> = prefs
        .iter()
        .flat_map(|p| [p[0] as i32, p[1] as i32])
        .collect();
    assert_eq!(c.ids, ids);
    assert!(
        c.out[..h].iter().all(|&v| v == 0.0),
        "token 0 only has non-local experts"
    );
    assert!(c.out[h..2 * h].iter().any(|&v| v != 0.0));
    c.breaks(
        "expert_map ignored",
        Variant {
            ignore_expert_map: true,
            ..Default::default()
        },
    );
}

/// apply_router_weight_on_input (Llama 4, top-1 sigmoid): the input is QDQ'd first and the
/// router weight multiplies the GEMM1 fp32 accumulator (NUMERICS.md 10.2), not QDQ(w · x) and
/// not the GEMM2 output. top_k must be 1.
#[test]
fn apply_router_weight_on_input() {
    let scheme: Scheme = "w_mxfp4_a_mxfp4".parse().unwrap();
    let (e, h, i, m) = (4, 64, 64, 8);
    let mut layer = make_layer(scheme, Activation::Silu, e, h, i, 1, 17);
    layer.config.router = RouterConfig {
        scoring: Scoring::Sigmoid,
        top_k: 1,
        renormalize: false,
        apply_router_weight_on_input: true,
        ..RouterConfig::default()
    };
    let (hs, lg) = synth_batch(m, h, e, 17);
    let c = Case::new(layer.clone(), hs.clone(), &lg);
    // Router weights are sigmoids of the chosen logits (not powers of two, not 1).
    for (t, (&id, &w)) in c.ids.iter().zip(&c.wts).enumerate() {
        let want = 1.0 / (1.0 + (-(lg[t * e + id as usize] as f64)).exp());
        assert!(
            (w as f64 - want).abs() <= 1e-6,
            "token {t}: weight {w} vs sigmoid {want}"
        );
    }
    c.breaks(
        "QDQ(w·x)",
        Variant {
            on_input_qdq_after_weight: true,
            ..Default::default()
        },
    );
    c.breaks(
        "weight at the output",
        Variant {
            on_input_weight_at_output: true,
            ..Default::default()
        },
    );
    // top_k = 2 with apply_router_weight_on_input is rejected, not run.
    layer.config.router.top_k = 2;
    assert!(forward(&layer, &hs, &lg, MoeOptions::default()).is_err());
}

/// `Intermediate::Bf16` rounds exactly where vLLM does (GEMM1 epilogue, activation, GEMM2
/// epilogue after the router weight, final sum), and that differs materially from fp32
/// intermediates.
#[test]
fn bf16_intermediates() {
    let scheme: Scheme = "w_mxfp4_a_mxfp6_e2m3".parse().unwrap();
    let (e, h, i, m) = (4, 64, 64, 8);
    let mut layer = make_layer(scheme, Activation::Silu, e, h, i, 2, 23);
    let mut rng = mxmoe::moe::synth::Rng::new(6);
    layer.weights.w2_bias = Some((0..e * h).map(|_| rng.normal() as f32 * 0.3).collect());
    let (hs, lg) = synth_batch(m, h, e, 23);
    let c = Case::new(layer, hs, &lg);
    let opts = MoeOptions {
        accumulate: Accumulate::F64,
        intermediate: Intermediate::Bf16,
        taps: false,
        profile: mxmoe::format::ProfileId::Contract,
    };
    let o = forward(&c.layer, &c.hidden, &lg, opts).unwrap();
    let want = c.run(Variant {
        bf16: true,
        ..Default::default()
    });
    let err = rel(&o.output, &want);
    assert!(err <= TOL, "bf16 intermediates vs pipeline: {err:e}");
    assert!(
        o.output.iter().all(|v| bf16(*v) == *v),
        "outputs are bf16 values"
    );
    let d = rel(&o.output, &c.out);
    assert!(
        d >= MATERIAL,
        "bf16 vs f32 intermediates differ by only {d:e}"
    );
}

// ---------------------------------------------------------------------------------------------
// Routing
// ---------------------------------------------------------------------------------------------

fn cfg(scoring: Scoring, top_k: usize, renormalize: bool) -> RouterConfig {
    RouterConfig {
        scoring,
        top_k,
        renormalize,
        ..RouterConfig::default()
    }
}

/// Within 2 fp32 ulps (the router works in fp32).
fn close(w: f32, want: f64) -> bool {
    (w as f64 - want).abs() <= 2.0 * f32::EPSILON as f64 * want.abs().max(1e-30)
}

/// Own top-k: largest first, ties to the lower index.
fn own_topk(keys: &[f64], k: usize, eligible: impl Fn(usize) -> bool) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..keys.len()).filter(|&i| eligible(i)).collect();
    idx.sort_by(|&a, &b| keys[b].partial_cmp(&keys[a]).unwrap().then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

/// gpt-oss: top-k of the logits, then a softmax over the selected logits only (renormalize is
/// irrelevant), against an f64 computation; random logits with forced duplicates (ties).
#[test]
fn gpt_oss_topk_then_softmax() {
    let mut rng = mxmoe::moe::synth::Rng::new(21);
    for it in 0..300 {
        let e = 4 + rng.below(29);
        let k = 1 + rng.below(4.min(e));
        let mut lg: Vec<f32> = (0..e).map(|_| (rng.normal() * 2.0) as f32).collect();
        if it % 3 == 0 {
            let (a, b) = (rng.below(e), rng.below(e));
            lg[a] = lg[b];
        }
        let keys: Vec<f64> = lg.iter().map(|&v| v as f64).collect();
        let sel = own_topk(&keys, k, |_| true);
        let mx = keys[sel[0]];
        let z: f64 = sel.iter().map(|&i| (keys[i] - mx).exp()).sum();
        for renorm in [true, false] {
            let r = route(&cfg(Scoring::TopkSoftmax, k, renorm), &lg, e, None).unwrap();
            let ids: Vec<i32> = sel.iter().map(|&i| i as i32).collect();
            assert_eq!(r.topk_ids, ids, "logits {lg:?}");
            for (j, &i) in sel.iter().enumerate() {
                let want = (keys[i] - mx).exp() / z;
                // fp32 softmax: exp of an fp32-rounded (v − max) is ~4 ulps off for small
                // weights, so 1e-6 relative.
                let w = r.topk_weights[j] as f64;
                assert!((w - want).abs() <= 1e-6 * want, "{w} vs {want}");
            }
        }
    }
}

/// Softmax scoring: renormalize off gives the full-softmax probabilities of the selected
/// experts; on divides by their sum.
#[test]
fn softmax_renormalize_on_off() {
    let lg = [1.0f32, 2.0, 3.0, 4.0];
    let ex: Vec<f64> = lg.iter().map(|&v| (v as f64).exp()).collect();
    let z: f64 = ex.iter().sum();
    let off = route(&cfg(Scoring::Softmax, 2, false), &lg, 4, None).unwrap();
    assert_eq!(off.topk_ids, vec![3, 2]);
    assert!(
        close(off.topk_weights[0], ex[3] / z) && close(off.topk_weights[1], ex[2] / z),
        "{:?}",
        off.topk_weights
    );
    let on = route(&cfg(Scoring::Softmax, 2, true), &lg, 4, None).unwrap();
    assert_eq!(on.topk_ids, vec![3, 2]);
    let s = ex[3] + ex[2];
    assert!(
        close(on.topk_weights[0], ex[3] / s) && close(on.topk_weights[1], ex[2] / s),
        "{:?}",
        on.topk_weights
    );
    // Sigmoid without renormalize: the sigmoid of each chosen logit.
    let sg = route(&cfg(Scoring::Sigmoid, 2, false), &lg, 4, None).unwrap();
    assert_eq!(sg.topk_ids, vec![3, 2]);
    assert!(close(sg.topk_weights[0], 1.0 / (1.0 + (-4f64).exp())));
    assert!(close(sg.topk_weights[1], 1.0 / (1.0 + (-3f64).exp())));
}

/// Ties go to the lower expert index, for every scoring.
#[test]
fn ties_to_lower_index() {
    for scoring in [Scoring::Softmax, Scoring::TopkSoftmax, Scoring::Sigmoid] {
        let r = route(&cfg(scoring, 3, true), &[0.5; 6], 6, None).unwrap();
        assert_eq!(r.topk_ids, vec![0, 1, 2], "{scoring}");
        assert!(
            r.topk_weights.iter().all(|&w| close(w, 1.0 / 3.0)),
            "{scoring}: {:?}",
            r.topk_weights
        );
        let r = route(&cfg(scoring, 2, true), &[1.0, 3.0, 3.0, 2.0, 3.0], 5, None).unwrap();
        assert_eq!(r.topk_ids, vec![1, 2], "{scoring}");
    }
    // With a correction bias, ties of score + bias too.
    let mut c = cfg(Scoring::Sigmoid, 2, true);
    c.n_group = None;
    let r = route(
        &c,
        &[0.0, 1.0, 0.0, 1.0],
        4,
        Some(&[0.0f32, -0.25, 0.0, -0.25][..]),
    )
    .unwrap();
    // keys: 0.5, 0.481, 0.5, 0.481 -> experts 0 and 2.
    assert_eq!(r.topk_ids, vec![0, 2]);
}

/// DeepSeek-V3: sigmoid scores, e_score_correction_bias for selection only, group-limited top-k
/// (group score = sum of the two best biased scores), renormalized weights times
/// routed_scaling_factor. A hand-made case and random cases against an f64 implementation.
#[test]
fn deepseek_v3_routing() {
    let ds = |top_k, n_group, topk_group, factor| RouterConfig {
        scoring: Scoring::Sigmoid,
        top_k,
        renormalize: true,
        n_group,
        topk_group,
        routed_scaling_factor: factor,
        apply_router_weight_on_input: false,
    };
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    // Hand-made: 8 experts, 4 groups of 2, 2 groups eligible, top-2, bias +0.5 on expert 5.
    // Scores: e0 0.953 e1 0.047 | e2 0.731 e3 0.731 | e4 0.5 e5 0.269(+0.5) | e6, e7 0.119.
    // Group sums (biased): 1.0, 1.462, 1.269, 0.238 -> groups 1 and 2; the best single expert
    // (e0) is excluded. Keys: e5 0.769 > e2 = e3 0.731 (tie -> e2) > e4 0.5.
    let lg = [3.0f32, -3.0, 1.0, 1.0, 0.0, -1.0, -2.0, -2.0];
    let bias = [0.0f32, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0];
    let r = route(&ds(2, Some(4), Some(2), 2.5), &lg, 8, Some(&bias[..])).unwrap();
    assert_eq!(r.topk_ids, vec![5, 2]);
    // Weights use the unbiased scores: sigmoid(−1) + sigmoid(1) = 1, times 2.5.
    assert!(
        close(r.topk_weights[0], 2.5 * sig(-1.0)),
        "{:?}",
        r.topk_weights
    );
    assert!(
        close(r.topk_weights[1], 2.5 * sig(1.0)),
        "{:?}",
        r.topk_weights
    );
    // Without groups the best expert wins; without the bias, expert 5 is not chosen.
    let r = route(&ds(2, None, None, 2.5), &lg, 8, Some(&bias[..])).unwrap();
    assert_eq!(r.topk_ids, vec![0, 5]);
    let r = route(&ds(2, None, None, 1.0), &lg, 8, None).unwrap();
    assert_eq!(r.topk_ids, vec![0, 2]);
    assert!(close(r.topk_weights[0], sig(3.0) / (sig(3.0) + sig(1.0))));

    // Random: 16 experts, 4 groups, 2 eligible, top-4, factor 2.5.
    let mut rng = mxmoe::moe::synth::Rng::new(33);
    let (e, g, tg, k) = (16usize, 4usize, 2usize, 4usize);
    for _ in 0..300 {
        let lg: Vec<f32> = (0..e).map(|_| (rng.normal() * 2.0) as f32).collect();
        let bias: Vec<f32> = (0..e).map(|_| (rng.normal() * 0.3) as f32).collect();
        let sc: Vec<f64> = lg.iter().map(|&v| sig(v as f64)).collect();
        let keys: Vec<f64> = sc.iter().zip(&bias).map(|(s, &b)| s + b as f64).collect();
        let per = e / g;
        let gs: Vec<f64> = (0..g)
            .map(|gi| {
                let ks = &keys[gi * per..(gi + 1) * per];
                own_topk(ks, 2, |_| true).iter().map(|&i| ks[i]).sum()
            })
            .collect();
        let groups = own_topk(&gs, tg, |_| true);
        let sel = own_topk(&keys, k, |i| groups.contains(&(i / per)));
        let z: f64 = sel.iter().map(|&i| sc[i]).sum();
        let r = route(
            &ds(k, Some(g), Some(tg), 2.5),
            &lg,
            e,
            Some(bias.as_slice()),
        )
        .unwrap();
        let ids: Vec<i32> = sel.iter().map(|&i| i as i32).collect();
        assert_eq!(r.topk_ids, ids, "logits {lg:?} bias {bias:?}");
        for (j, &i) in sel.iter().enumerate() {
            let want = 2.5 * sc[i] / z;
            assert!(
                (r.topk_weights[j] as f64 - want).abs() <= 1e-6 * want,
                "{} vs {want}",
                r.topk_weights[j]
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Bad inputs: Err, never a panic.
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_router_inputs_are_errors() {
    let lg = [0.1f32, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8];
    let c2 = cfg(Scoring::Softmax, 2, true);
    assert!(
        route(&cfg(Scoring::Softmax, 5, true), &lg, 4, None).is_err(),
        "top_k > experts"
    );
    assert!(
        route(&cfg(Scoring::Softmax, 0, true), &lg, 4, None).is_err(),
        "top_k = 0"
    );
    let mut nan = lg;
    nan[5] = f32::NAN;
    assert!(route(&c2, &nan, 4, None).is_err(), "NaN logit");
    let mut inf = lg;
    inf[2] = f32::INFINITY;
    assert!(route(&c2, &inf, 4, None).is_err(), "Inf logit");
    assert!(route(&c2, &lg[..7], 4, None).is_err(), "logits not [M, E]");
    assert!(route(&c2, &lg, 0, None).is_err(), "zero experts");
    let mut ds = cfg(Scoring::Sigmoid, 2, true);
    assert!(
        route(&ds, &lg, 4, Some(&[0.0f32; 3][..])).is_err(),
        "short correction bias"
    );
    assert!(
        route(&ds, &lg, 4, Some(&[0.0f32; 5][..])).is_err(),
        "long correction bias"
    );
    ds.n_group = Some(2);
    ds.topk_group = Some(1);
    assert!(
        route(&ds, &lg, 4, Some(&[0.0f32; 3][..])).is_err(),
        "short correction bias, grouped"
    );
}

#[test]
fn bad_forward_inputs_are_errors() {
    let scheme: Scheme = "w_mxfp4_a_mxfp4".parse().unwrap();
    let (e, h, i, m) = (4, 64, 32, 3);
    let layer = make_layer(scheme, Activation::Silu, e, h, i, 2, 3);
    let (hs, lg) = synth_batch(m, h, e, 3);
    let opts = MoeOptions::default();
    assert!(forward(&layer, &hs, &lg, opts).is_ok());

    let mut l = layer.clone();
    l.config.router.top_k = 5;
    assert!(forward(&l, &hs, &lg, opts).is_err(), "top_k > experts");

    let mut bad = lg.clone();
    bad[7] = f32::NAN;
    assert!(
        forward(&layer, &hs, &bad, opts).is_err(),
        "NaN router logits"
    );
    assert!(
        forward(&layer, &hs, &lg[..m * e - 1], opts).is_err(),
        "logits width"
    );
    let wide: Vec<f32> = (0..m * (e + 1)).map(|j| j as f32 * 0.01).collect();
    assert!(
        forward(&layer, &hs, &wide, opts).is_err(),
        "logits with E+1 columns"
    );
    assert!(
        forward(&layer, &hs[..hs.len() - BLOCK], &lg, opts).is_err(),
        "hidden not [M, H]"
    );
    assert!(
        forward(&layer, &hs[..h + 1], &lg[..e], opts).is_err(),
        "hidden not a multiple of H"
    );
    assert!(forward(&layer, &[], &[], opts).is_err(), "empty batch");

    let mut l = layer.clone();
    l.config.n_experts = 6;
    l.weights.expert_map = Some(vec![0, 1, 2, 3, -1, 4]);
    let lg6: Vec<f32> = (0..m * 6).map(|j| (j % 7) as f32 * 0.3).collect();
    assert!(
        forward(&l, &hs, &lg6, opts).is_err(),
        "expert_map entry 4 with 4 local experts"
    );
    l.weights.expert_map = Some(vec![0, 1, 2, 3, -2, -1]);
    assert!(forward(&l, &hs, &lg6, opts).is_err(), "expert_map entry -2");
    l.weights.expert_map = Some(vec![0, 1, 2, 3, -1]);
    assert!(
        forward(&l, &hs, &lg6, opts).is_err(),
        "expert_map of the wrong length"
    );
    l.weights.expert_map = Some(vec![0, 1, 2, 3, -1, -1]);
    assert!(
        forward(&l, &hs, &lg6, opts).is_ok(),
        "a valid map is accepted"
    );

    let mut l = layer.clone();
    l.weights.w2_bias = Some(vec![0.0; e * h - 1]);
    assert!(forward(&l, &hs, &lg, opts).is_err(), "w2_bias length");
    let mut l = layer.clone();
    l.weights.e_score_correction_bias = Some(vec![0.0; e + 1]);
    assert!(
        forward(&l, &hs, &lg, opts).is_err(),
        "correction bias length"
    );
}

/// Standalone routing with impossible groups is an error, not a division by zero.
#[test]
fn route_rejects_bad_groups() {
    let cfg = mxmoe::moe::RouterConfig {
        top_k: 2,
        n_group: Some(0),
        topk_group: Some(1),
        ..Default::default()
    };
    let logits = [0.5f32, 1.0, -1.0, 2.0];
    let e = mxmoe::moe::route(&cfg, &logits, 4, None).unwrap_err();
    assert!(e.to_string().contains("n_group = 0"), "{e}");
    let cfg = mxmoe::moe::RouterConfig {
        n_group: Some(3),
        ..cfg
    };
    assert!(mxmoe::moe::route(&cfg, &logits, 4, None).is_err());
}

// ---------------------------------------------------------------------------------------------
// Stage taps
// ---------------------------------------------------------------------------------------------

/// Recompute every stage of a tapped forward from the taps of the stage before (and the
/// dequantized weights), with this file's own f64 loops and activations, and assert each tap.
/// Returns the taps for further checks.
fn check_taps(layer: &MoeLayer, hs: &[f32], lg: &[f32]) -> mxmoe::moe::StageTaps {
    let on = MoeOptions {
        taps: true,
        ..Default::default()
    };
    let o = forward(layer, hs, lg, on).unwrap();
    let st = o.stages.clone().expect("taps requested");
    let (h, i) = (layer.config.hidden, layer.config.inter);
    let (m, k) = (hs.len() / h, o.routing.top_k);
    assert_eq!(st.top_k, k);
    assert_eq!(st.gemm1.len(), m * k * 2 * i);
    assert_eq!((st.act.len(), st.inter_q.len()), (m * k * i, m * k * i));
    assert_eq!((st.gemm2.len(), st.local.len()), (m * k * h, m * k));
    let qdq = |x: &[f32], n: usize| match layer.config.scheme.activation {
        Some(f) => qdq_slice(f, layer.config.act_scale_mode, x, n).unwrap(),
        None => x.to_vec(),
    };
    // 1. The input tap is the QDQ of the input, bit for bit.
    assert_eq!(st.input_q, qdq(hs, h), "input tap != QDQ(input)");
    // 4. The intermediate tap is the QDQ of the activation tap, bit for bit (zero rows of
    //    non-local slots stay zero under QDQ).
    assert_eq!(
        st.inter_q,
        qdq(&st.act, i),
        "intermediate tap != QDQ(activation tap)"
    );
    if layer.config.scheme.activation.is_some() {
        let d = rel(&st.inter_q, &st.act);
        assert!(
            d >= MATERIAL,
            "the intermediate QDQ changed nothing ({d:e})"
        );
    }
    let w13 = layer.weights.w13.dequantize();
    let w2 = layer.weights.w2.dequantize();
    let on_input = layer.config.router.apply_router_weight_on_input;
    let (mut g1_want, mut act_want, mut y_want) = (
        vec![0f32; m * k * 2 * i],
        vec![0f32; m * k * i],
        vec![0f32; m * k * h],
    );
    for a in 0..m * k {
        let t = a / k;
        let Some(e) = layer.local_id(o.routing.topk_ids[a] as usize) else {
            assert!(!st.local[a], "slot {a}: non-local expert marked local");
            let rows = [
                &st.gemm1[a * 2 * i..(a + 1) * 2 * i],
                &st.act[a * i..(a + 1) * i],
                &st.gemm2[a * h..(a + 1) * h],
            ];
            assert!(rows.iter().all(|r| r.iter().all(|&v| v == 0.0)), "slot {a}");
            continue;
        };
        assert!(st.local[a], "slot {a}: local expert marked non-local");
        let w = o.routing.topk_weights[a] as f64;
        // 2. GEMM1 (+bias, x router weight on the input) on the input tap.
        let x = &st.input_q[t * h..(t + 1) * h];
        let g1: Vec<f64> = (0..2 * i)
            .map(|r| {
                let row = &w13[(e * 2 * i + r) * h..(e * 2 * i + r + 1) * h];
                let mut s: f64 = row.iter().zip(x).map(|(&p, &q)| p as f64 * q as f64).sum();
                s += layer
                    .weights
                    .w13_bias
                    .as_ref()
                    .map_or(0.0, |b| b[e * 2 * i + r] as f64);
                if on_input {
                    s *= w;
                }
                s
            })
            .collect();
        // 3. The activation of the recomputed GEMM1 row.
        let act: Vec<f64> = (0..i)
            .map(|c| match layer.config.activation {
                Activation::Silu => silu(g1[c]) * g1[i + c],
                Activation::SwigluOai => swiglu(g1[2 * c], g1[2 * c + 1], true),
            })
            .collect();
        // 5. GEMM2 (+bias, x router weight) on the intermediate tap.
        let aq = &st.inter_q[a * i..(a + 1) * i];
        for r in 0..h {
            let row = &w2[(e * h + r) * i..(e * h + r + 1) * i];
            let mut s: f64 = row.iter().zip(aq).map(|(&p, &q)| p as f64 * q as f64).sum();
            s += layer
                .weights
                .w2_bias
                .as_ref()
                .map_or(0.0, |b| b[e * h + r] as f64);
            if !on_input {
                s *= w;
            }
            y_want[a * h + r] = s as f32;
        }
        for (d, v) in g1_want[a * 2 * i..].iter_mut().zip(&g1) {
            *d = *v as f32;
        }
        for (d, v) in act_want[a * i..].iter_mut().zip(&act) {
            *d = *v as f32;
        }
    }
    for (name, got, want) in [
        ("GEMM1", &st.gemm1, &g1_want),
        ("activation", &st.act, &act_want),
        ("GEMM2", &st.gemm2, &y_want),
    ] {
        let err = rel(got, want);
        assert!(err <= TOL, "{name} tap vs recomputation: rel L2 {err:e}");
    }
    // 6. The combine: the output, and the sum over each token's slots of the GEMM2 taps.
    assert_eq!(st.combine, o.output, "combine tap != output");
    let mut sum = vec![0f32; m * h];
    for a in 0..m * k {
        for (s, v) in sum[(a / k) * h..(a / k + 1) * h]
            .iter_mut()
            .zip(&st.gemm2[a * h..(a + 1) * h])
        {
            *s += v;
        }
    }
    let err = rel(&sum, &o.output);
    assert!(err <= TOL, "sum of GEMM2 taps vs output: rel L2 {err:e}");
    st
}

/// Catches taps recorded at the wrong step, from the wrong slot or expert, or not at all: each
/// stage recomputed from the stage before agrees, on silu and swigluoai layers with biases,
/// an activation and a weight-only scheme, a layer holding half of its experts, and the router
/// weight applied on the input.
#[test]
fn stage_taps_recompute_stage_by_stage() {
    let (e, h, i, k, m) = (4, 64, 64, 2, 8);
    for (scheme, act) in [
        ("w_mxfp4_a_mxfp6_e2m3", Activation::Silu),
        ("w_mxfp4_a_mxfp4", Activation::SwigluOai),
        ("w_mxfp4", Activation::Silu),
    ] {
        let mut spec = SynthSpec::new(scheme.parse().unwrap(), e, h, i, k);
        spec.activation = act;
        spec.bias = true;
        spec.seed = 31;
        let layer = synth_layer(&spec).unwrap().layer;
        assert!(layer.weights.w2_bias.is_some() && layer.weights.w13_bias.is_some());
        let (hs, lg) = synth_batch(m, h, e, 31);
        check_taps(&layer, &hs, &lg);
    }
    // Half the experts non-local: their slots are zero and marked.
    let mut layer = make_layer(
        "w_mxfp4_a_mxfp4".parse().unwrap(),
        Activation::Silu,
        4,
        h,
        i,
        2,
        13,
    );
    layer.config.n_experts = 8;
    layer.weights.expert_map = Some(vec![2, -1, 0, -1, -1, 3, 1, -1]);
    let (hs, lg) = synth_batch(m, h, 8, 13);
    let st = check_taps(&layer, &hs, &lg);
    let n_local = st.local.iter().filter(|&&l| l).count();
    assert!(
        n_local > 0 && n_local < st.local.len(),
        "the batch must mix local and non-local slots ({n_local} of {})",
        st.local.len()
    );
    // Router weight on the input (Llama 4, top-1 sigmoid).
    let mut layer = make_layer(
        "w_mxfp4_a_mxfp4".parse().unwrap(),
        Activation::Silu,
        e,
        h,
        i,
        1,
        17,
    );
    layer.config.router = RouterConfig {
        scoring: Scoring::Sigmoid,
        top_k: 1,
        renormalize: false,
        apply_router_weight_on_input: true,
        ..RouterConfig::default()
    };
    let (hs, lg) = synth_batch(m, h, e, 17);
    check_taps(&layer, &hs, &lg);
}

/// Catches taps that change the numbers or cost when off: without taps `stages` is `None`, with
/// them the output is the same bits, in both accumulation modes and with bf16 intermediates.
/// With fp32 accumulation the GEMM2 taps are the forward's own values, so their sum in slot
/// order is the output bit for bit.
#[test]
fn stage_taps_off_changes_nothing() {
    let (e, h, i, k, m) = (4, 64, 64, 2, 8);
    let layer = make_layer(
        "w_mxfp4_a_mxfp6_e2m3".parse().unwrap(),
        Activation::Silu,
        e,
        h,
        i,
        k,
        29,
    );
    let (hs, lg) = synth_batch(m, h, e, 29);
    for accumulate in [Accumulate::F64, Accumulate::F32] {
        for intermediate in [Intermediate::F32, Intermediate::Bf16] {
            let off = MoeOptions {
                accumulate,
                intermediate,
                taps: false,
                profile: mxmoe::format::ProfileId::Contract,
            };
            let on = MoeOptions { taps: true, ..off };
            let a = forward(&layer, &hs, &lg, off).unwrap();
            let b = forward(&layer, &hs, &lg, on).unwrap();
            assert!(a.stages.is_none(), "{off:?}: stages without taps");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a.output), bits(&b.output), "{off:?}");
            assert_eq!(a.routing, b.routing);
            let st = b.stages.expect("stages with taps");
            assert_eq!(bits(&st.combine), bits(&b.output));
            if (accumulate, intermediate) == (Accumulate::F32, Intermediate::F32) {
                let mut sum = vec![0f32; m * h];
                for a in 0..m * k {
                    for (s, v) in sum[(a / k) * h..(a / k + 1) * h]
                        .iter_mut()
                        .zip(&st.gemm2[a * h..(a + 1) * h])
                    {
                        *s += v;
                    }
                }
                assert_eq!(bits(&sum), bits(&b.output), "f32: slot sum != output");
            }
        }
    }
}

/// The CPU backend returns taps; the wgpu backend answers UNSUPPORTED for a tapped forward
/// (never a silent run without them). The wgpu half is SKIPPED without an adapter.
#[test]
fn stage_taps_through_backends() {
    use mxmoe::backend::{Backend, BackendError, BackendKind};
    let (e, h, i, k, m) = (4, 64, 64, 2, 4);
    let layer = make_layer(
        "w_mxfp4_a_mxfp4".parse().unwrap(),
        Activation::Silu,
        e,
        h,
        i,
        k,
        5,
    );
    let (hs, lg) = synth_batch(m, h, e, 5);
    let opts = MoeOptions {
        taps: true,
        ..Default::default()
    };
    let cpu = Backend::open(BackendKind::Cpu, None).unwrap();
    let p = cpu.prepare(&layer).unwrap();
    assert!(cpu.moe(&p, &hs, &lg, opts).unwrap().stages.is_some());
    match Backend::open(BackendKind::Wgpu, None) {
        Err(err) => eprintln!("SKIPPED: wgpu half of stage_taps_through_backends: {err}"),
        Ok(gpu) => {
            let g = gpu.prepare(&layer).unwrap();
            match gpu.moe(&g, &hs, &lg, opts) {
                Err(BackendError::Unsupported { reason, .. }) => {
                    assert!(reason.contains("taps"), "{reason}")
                }
                Err(other) => panic!("expected UNSUPPORTED, got {other}"),
                Ok(_) => panic!("wgpu ran a tapped forward"),
            }
            let plain = MoeOptions {
                taps: false,
                ..opts
            };
            assert!(gpu.moe(&g, &hs, &lg, plain).unwrap().stages.is_none());
        }
    }
}
