//! The conformance suite: ONE case generator for every cross-backend comparison (cargo test,
//! `mxmoe check`, the viewer), typed tolerances and a report.
//!
//! For every case: run on the backend under test with outputs poisoned first (the backends
//! allocate fresh outputs; the GPU backend poisons its buffers), compare with the CPU reference:
//! **bit-exact** for quantize / dequantize / QDQ (NaN == NaN), exact ids for routing, a
//! relative-L2 bound for MoE outputs. Results are OK / FAIL / UNSUPPORTED / SKIPPED.

pub mod verify;

use crate::backend::{Backend, BackendError, Op};
use crate::format::{MxFormat, MxTensor, ScaleMode, BLOCK};
use crate::moe::synth::{synth_batch, synth_layer, Rng, SynthSpec};
use crate::moe::{self, Accumulate, Activation, MoeLayer, MoeOptions, RouterConfig, Scoring};
use crate::scheme::Scheme;
use std::fmt;
use std::time::Instant;

/// Relative-L2 bound of a backend's MoE output against the CPU f32-accumulation reference.
/// fp32 reordering alone gives ~1e-6; the headroom covers the rare element whose pre-QDQ value
/// sits on a rounding boundary and flips by one quantization step (the QDQ is discontinuous).
/// A missing QDQ, a wrong scale mode or a wrong layout errs by 1e-2 or more.
pub const MOE_REL_L2: f64 = 2e-3;
/// Bound for routing weights (exp/sum order differs between backends).
pub const ROUTE_WEIGHT_REL: f64 = 1e-5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    Fail,
    Unsupported,
    Skipped,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Ok => "OK",
            Status::Fail => "FAIL",
            Status::Unsupported => "UNSUPPORTED",
            Status::Skipped => "SKIPPED",
        })
    }
}

#[derive(Clone, Debug)]
pub struct CaseResult {
    pub name: String,
    pub status: Status,
    pub detail: String,
    pub millis: f64,
}

/// A suite's size: `Quick` for CI on lavapipe (small shapes), `Full` adds model-like shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    Quick,
    Full,
}

/// Input data for the format ops: a named `[rows, k]` buffer.
#[derive(Clone, Debug)]
pub struct FormatInput {
    pub name: &'static str,
    pub x: Vec<f32>,
    pub k: usize,
}

/// Blocks that probe every rule of the contract: NaN and ±Inf blocks, zero and −0 blocks,
/// fp32 subnormals (incl. amax subnormal), ±0 inside blocks, RNE ties, saturating values,
/// binade edges, huge values near FLT_MAX (Even's carry), mixed magnitudes.
pub fn special_input() -> FormatInput {
    let mut blocks: Vec<[f32; BLOCK]> = Vec::new();
    let mut b = [0f32; BLOCK];
    b[3] = f32::NAN;
    b[0] = 1.0;
    blocks.push(b);
    let mut b = [0.5f32; BLOCK];
    b[7] = f32::INFINITY;
    blocks.push(b);
    let mut b = [-2.0f32; BLOCK];
    b[31] = f32::NEG_INFINITY;
    blocks.push(b);
    blocks.push([0.0; BLOCK]);
    blocks.push([-0.0; BLOCK]);
    // fp32 subnormals only (amax subnormal).
    let mut b = [0f32; BLOCK];
    for (j, v) in b.iter_mut().enumerate() {
        *v = f32::from_bits(j as u32 * 0x1_1111 + 1) * if j % 2 == 0 { 1.0 } else { -1.0 };
    }
    blocks.push(b);
    // Normal amax with subnormal companions.
    let mut b = [0f32; BLOCK];
    b[0] = 1e-37;
    for (j, v) in b.iter_mut().enumerate().skip(1) {
        *v = f32::from_bits(0x0000_0100 * j as u32) * if j % 3 == 0 { -1.0 } else { 1.0 };
    }
    blocks.push(b);
    // FP4 ties and the G5 row (amax 5), signed zeros.
    let g5 = [
        5.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, -0.25, -0.75, -1.25, -2.5, -3.5, 0.1, -0.1,
    ];
    let mut b = [0f32; BLOCK];
    b[..g5.len()].copy_from_slice(&g5);
    b[14] = f32::from_bits(0x3E80_0001);
    b[15] = f32::from_bits(0x3E80_0004);
    b[16] = 4.75;
    b[17] = 5.5;
    b[18] = -0.0;
    blocks.push(b);
    // Saturation edges and binade edges for each format's max.
    for amax in [
        7.0f32, 6.5, 7.75, 29.0, 30.0, 480.0, 500.0, 60000.0, 1.99, 255.99998, 256.00003,
    ] {
        let mut b = [0f32; BLOCK];
        for (j, v) in b.iter_mut().enumerate() {
            *v = amax * (1.0 - j as f32 / 40.0) * if j % 2 == 1 { -1.0 } else { 1.0 };
        }
        blocks.push(b);
    }
    // Near FLT_MAX (Even's carry into the Inf exponent) and near the bottom of E8M0.
    let mut b = [0f32; BLOCK];
    b[0] = f32::MAX;
    b[1] = -3.0e38;
    b[2] = 1.0;
    blocks.push(b);
    let mut b = [0f32; BLOCK];
    b[0] = 1e-38;
    b[1] = 6e-39;
    b[2] = -3e-39;
    blocks.push(b);
    // Random heavy-tailed blocks with a wide exponent spread.
    let mut rng = Rng::new(42);
    for _ in 0..16 {
        let mut b = [0f32; BLOCK];
        let sh = (rng.normal() * 20.0) as i32;
        for v in b.iter_mut() {
            *v = (rng.heavy() * 2f64.powi(sh)) as f32;
        }
        blocks.push(b);
    }
    FormatInput {
        name: "special",
        x: blocks.concat(),
        k: BLOCK,
    }
}

/// A random heavy-tailed `[rows, k]` matrix (rows x k large enough to cover many workgroups).
pub fn random_input(rows: usize, k: usize, seed: u64) -> FormatInput {
    let mut rng = Rng::new(seed);
    FormatInput {
        name: "random",
        x: (0..rows * k).map(|_| rng.heavy() as f32).collect(),
        k,
    }
}

fn bits_equal(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

/// First mismatch between two f32 buffers, bitwise (NaN == NaN).
pub fn first_bit_mismatch(got: &[f32], want: &[f32]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("length {} != {}", got.len(), want.len()));
    }
    let bad = got
        .iter()
        .zip(want)
        .filter(|(g, w)| !bits_equal(**g, **w))
        .count();
    got.iter()
        .zip(want)
        .position(|(g, w)| !bits_equal(*g, *w))
        .map(|i| {
            format!(
                "{bad} of {} elements differ; first at {i}: got {:e} ({:#010x}), want {:e} ({:#010x})",
                got.len(),
                got[i],
                got[i].to_bits(),
                want[i],
                want[i].to_bits()
            )
        })
}

/// Relative L2 error `||got - want|| / ||want||` (f64), and the max abs error.
pub fn rel_l2(got: &[f32], want: &[f32]) -> (f64, f64) {
    let mut num = 0f64;
    let mut den = 0f64;
    let mut mx = 0f64;
    for (&g, &w) in got.iter().zip(want) {
        let d = g as f64 - w as f64;
        num += d * d;
        den += (w as f64) * (w as f64);
        mx = if d.abs() > mx || d.is_nan() {
            d.abs()
        } else {
            mx
        };
    }
    let r = if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    };
    (r, mx)
}

fn outcome(name: String, t0: Instant, r: Result<Option<String>, BackendError>) -> CaseResult {
    let millis = t0.elapsed().as_secs_f64() * 1e3;
    let (status, detail) = match r {
        Ok(None) => (Status::Ok, String::new()),
        Ok(Some(msg)) => (Status::Fail, msg),
        Err(BackendError::Unsupported { reason, .. }) => (Status::Unsupported, reason),
        Err(e) => (Status::Fail, format!("error: {e}")),
    };
    CaseResult {
        name,
        status,
        detail,
        millis,
    }
}

/// Run the format cases (quantize, dequantize, QDQ) for every format x mode on `inputs`.
pub fn run_format_cases(b: &Backend, inputs: &[FormatInput]) -> Vec<CaseResult> {
    let mut out = Vec::new();
    for inp in inputs {
        let rows = inp.x.len() / inp.k;
        let shape = [rows, inp.k];
        for fmt in MxFormat::ALL {
            for mode in ScaleMode::ALL {
                let op = Op::Quantize { format: fmt, mode };
                let name = format!("{}/{}", op.id(), inp.name);
                let want = MxTensor::quantize(fmt, mode, &inp.x, &shape).expect("valid input");
                let t0 = Instant::now();
                {
                    let r = b.quantize(fmt, mode, &inp.x, &shape).map(|got| {
                        if got.scales != want.scales {
                            let i = got
                                .scales
                                .iter()
                                .zip(&want.scales)
                                .position(|(a, c)| a != c);
                            Some(format!("scale bytes differ (first at block {i:?})"))
                        } else if got.data != want.data {
                            let i = got.data.iter().zip(&want.data).position(|(a, c)| a != c);
                            Some(format!("packed codes differ (first at byte {i:?})"))
                        } else {
                            None
                        }
                    });
                    out.push(outcome(name, t0, r));
                }
                let op = Op::Qdq { format: fmt, mode };
                let name = format!("{}/{}", op.id(), inp.name);
                let want_q = want.dequantize();
                let t0 = Instant::now();
                let r = b
                    .qdq(fmt, mode, &inp.x, inp.k)
                    .map(|g| first_bit_mismatch(&g, &want_q));
                out.push(outcome(name, t0, r));
                if mode == ScaleMode::Even {
                    let op = Op::Dequantize { format: fmt };
                    let name = format!("{}/{}", op.id(), inp.name);
                    let t0 = Instant::now();
                    let r = b.dequantize(&want).map(|g| first_bit_mismatch(&g, &want_q));
                    out.push(outcome(name, t0, r));
                }
            }
        }
    }
    out
}

/// One MoE case: a layer, a batch, and the options.
#[derive(Clone, Debug)]
pub struct MoeCase {
    pub name: String,
    pub layer: MoeLayer,
    pub hidden: Vec<f32>,
    pub logits: Vec<f32>,
}

fn moe_case(name: String, spec: &SynthSpec, m: usize, seed: u64) -> MoeCase {
    let layer = synth_layer(spec).expect("valid synthetic spec").layer;
    let (hidden, logits) = synth_batch(m, spec.hidden, spec.n_experts, seed);
    MoeCase {
        name,
        layer,
        hidden,
        logits,
    }
}

/// The MoE cases: every scheme (5 OCP MX + weight-only + MXFP8), both activations, awkward M,
/// top-k 1 and 8, experts with no tokens, biases, expert_map, weight-on-input, the gpt-oss and
/// DeepSeek routers.
pub fn moe_cases(suite: Suite) -> Vec<MoeCase> {
    let (h, i, e) = match suite {
        Suite::Quick => (64, 96, 8),
        Suite::Full => (512, 384, 32),
    };
    let mut cases = Vec::new();
    let mut schemes: Vec<Scheme> = Scheme::OCP_MX.to_vec();
    schemes.push(Scheme::new(MxFormat::Fp4E2M1, None));
    schemes.push(Scheme::new(MxFormat::Fp8E4M3, Some(MxFormat::Fp8E4M3)));
    for (si, &scheme) in schemes.iter().enumerate() {
        for (ai, act) in [Activation::Silu, Activation::SwigluOai]
            .into_iter()
            .enumerate()
        {
            let m = [1, 3, 17, 64][(si + ai) % 4];
            let mut spec = SynthSpec::new(scheme, e, h, i, 2);
            spec.activation = act;
            spec.bias = ai == 1;
            spec.seed = 100 + si as u64 * 10 + ai as u64;
            cases.push(moe_case(
                format!("moe/{scheme}/{act}/m{m}/k2"),
                &spec,
                m,
                spec.seed,
            ));
        }
    }
    let base = Scheme::OCP_MX[0];
    // top-k = 1 and 8 (8 = every expert of the quick layer).
    for k in [1, 8] {
        let mut spec = SynthSpec::new(base, e, h, i, k);
        spec.seed = 7 + k as u64;
        cases.push(moe_case(
            format!("moe/{base}/silu/m17/k{k}"),
            &spec,
            17,
            spec.seed,
        ));
    }
    // Experts with no tokens: one token, many experts.
    let spec = SynthSpec::new(Scheme::OCP_MX[1], 2 * e, h, i, 2);
    cases.push(moe_case(
        format!("moe/{}/silu/m1/e{}-sparse", spec.scheme, 2 * e),
        &spec,
        1,
        9,
    ));
    // gpt-oss router: top-k then softmax, swigluoai, biases, weight-only MXFP4.
    let mut spec = SynthSpec::new(Scheme::new(MxFormat::Fp4E2M1, None), e, h, i, 4);
    spec.activation = Activation::SwigluOai;
    spec.bias = true;
    spec.router.scoring = Scoring::TopkSoftmax;
    spec.router.renormalize = false;
    cases.push(moe_case(
        "moe/gpt-oss-router/w_mxfp4/m5/k4".into(),
        &spec,
        5,
        11,
    ));
    // DeepSeek-V3 router: sigmoid, correction bias, groups, scaling factor.
    let mut spec = SynthSpec::new(base, e, h, i, 2);
    spec.router = RouterConfig {
        scoring: Scoring::Sigmoid,
        top_k: 2,
        renormalize: true,
        n_group: Some(4),
        topk_group: Some(2),
        routed_scaling_factor: 2.5,
        apply_router_weight_on_input: false,
    };
    let mut c = moe_case(
        "moe/deepseek-router/w_mxfp4_a_mxfp4/m17/k2".into(),
        &spec,
        17,
        12,
    );
    let mut rng = Rng::new(3);
    c.layer.weights.e_score_correction_bias =
        Some((0..e).map(|_| (rng.normal() * 0.1) as f32).collect());
    cases.push(c);
    // Llama 4 router: top-1 sigmoid, weight on input.
    let mut spec = SynthSpec::new(Scheme::OCP_MX[2], e, h, i, 1);
    spec.router.scoring = Scoring::Sigmoid;
    spec.router.renormalize = false;
    spec.router.apply_router_weight_on_input = true;
    cases.push(moe_case(
        "moe/llama4-router/w_mxfp4_a_mxfp6_e2m3/m3/k1".into(),
        &spec,
        3,
        13,
    ));
    // expert_map: the router sees 2E experts, half of them local.
    let spec = SynthSpec::new(Scheme::OCP_MX[3], e, h, i, 2);
    let mut c = moe_case(
        "moe/expert-map/w_mxfp6_e3m2_a_mxfp6_e3m2/m17/k2".into(),
        &spec,
        17,
        14,
    );
    let (hidden, logits) = synth_batch(17, h, 2 * e, 14);
    c.hidden = hidden;
    c.logits = logits;
    c.layer.config.n_experts = 2 * e;
    c.layer.weights.expert_map = Some(
        (0..2 * e as i32)
            .map(|g| if g % 2 == 0 { g / 2 } else { -1 })
            .collect(),
    );
    cases.push(c);
    cases
}

/// Run the MoE cases: routing ids exact, weights within [`ROUTE_WEIGHT_REL`], outputs within
/// [`MOE_REL_L2`] of the CPU f32-accumulation reference.
pub fn run_moe_cases(b: &Backend, cases: &[MoeCase]) -> Vec<CaseResult> {
    let opts = MoeOptions {
        accumulate: Accumulate::F32,
        ..MoeOptions::default()
    };
    let mut out = Vec::new();
    for c in cases {
        let want = moe::forward(&c.layer, &c.hidden, &c.logits, opts).expect("reference runs");
        let t0 = Instant::now();
        let mut note = String::new();
        let r = {
            b.moe_once(&c.layer, &c.hidden, &c.logits, opts).map(|got| {
                if got.routing.topk_ids != want.routing.topk_ids {
                    let i = got
                        .routing
                        .topk_ids
                        .iter()
                        .zip(&want.routing.topk_ids)
                        .position(|(a, w)| a != w);
                    return Some(format!("routing ids differ (first at slot {i:?})"));
                }
                let (rw, _) = rel_l2(&got.routing.topk_weights, &want.routing.topk_weights);
                if rw.is_nan() || rw > ROUTE_WEIGHT_REL {
                    return Some(format!(
                        "routing weights rel-L2 {rw:.3e} > {ROUTE_WEIGHT_REL:e}"
                    ));
                }
                let (r, mx) = rel_l2(&got.output, &want.output);
                note = format!("rel-L2 {r:.2e}, max abs {mx:.2e}");
                if r.is_nan() || r > MOE_REL_L2 {
                    Some(format!(
                        "output rel-L2 {r:.3e} > {MOE_REL_L2:e} (max abs {mx:.3e})"
                    ))
                } else {
                    None
                }
            })
        };
        let mut res = outcome(c.name.clone(), t0, r);
        if res.status == Status::Ok {
            res.detail = note;
        }
        out.push(res);
    }
    out
}

/// The whole suite for one backend.
pub fn run_suite(b: &Backend, suite: Suite) -> Vec<CaseResult> {
    let mut inputs = vec![special_input()];
    inputs.push(match suite {
        Suite::Quick => random_input(37, 96, 5),
        Suite::Full => random_input(1031, 1024, 5),
    });
    let mut r = run_format_cases(b, &inputs);
    r.extend(run_moe_cases(b, &moe_cases(suite)));
    r
}

/// Counts of each status.
pub fn summary(results: &[CaseResult]) -> (usize, usize, usize, usize) {
    let c = |s| results.iter().filter(|r| r.status == s).count();
    (
        c(Status::Ok),
        c(Status::Fail),
        c(Status::Unsupported),
        c(Status::Skipped),
    )
}
