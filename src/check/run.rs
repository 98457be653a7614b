//! Running catalog cases: materialize a case into a concrete op call ([`Call`]), compute the CPU
//! reference once, run the call on every backend, judge each result against the case's
//! [`Expect`].
//!
//! Over 600 lines: materializing, referencing, running and judging every case kind are one
//! pipeline over the `Call` and `Expect` enums; split it by case kind if it grows further.

use super::catalog::{moe_cost, Case, Cost, Expect, Invalid, Kind, Tol, Weights};
use super::{first_bit_mismatch, rel_l2, CaseResult, Status};
use crate::backend::{wgpu::POISON, Backend, BackendError, BackendKind};
use crate::format::{qdq_slice, MxFormat, MxTensor, ScaleMode};
use crate::moe::{
    self, exact_math, MoeLayer, MoeOptions, MoeOutput, RouterConfig, Routing, Scoring,
};
use std::sync::Arc;
use std::time::Instant;

/// A case made concrete: the op and its data.
#[derive(Clone, Debug)]
pub enum Call {
    Quantize {
        format: MxFormat,
        mode: ScaleMode,
        x: Vec<f32>,
        shape: Vec<usize>,
    },
    Dequantize {
        t: MxTensor,
    },
    Qdq {
        format: MxFormat,
        mode: ScaleMode,
        x: Vec<f32>,
        k: usize,
    },
    Route {
        cfg: RouterConfig,
        n_experts: usize,
        logits: Vec<f32>,
        bias: Option<Vec<f32>>,
    },
    Moe {
        layer: Arc<MoeLayer>,
        hidden: Vec<f32>,
        logits: Vec<f32>,
        opts: MoeOptions,
    },
}

/// A result of a call.
#[derive(Clone, Debug)]
pub enum Output {
    Tensor(MxTensor),
    Values(Vec<f32>),
    Routing(Routing),
    Moe(MoeOutput),
}

/// Builds calls, keeping the last built layer (consecutive cases often share one).
#[derive(Default)]
pub struct Materializer {
    last: Option<(String, Arc<MoeLayer>)>,
}

impl Materializer {
    fn layer(&mut self, spec: &super::catalog::LayerSpec) -> Result<Arc<MoeLayer>, String> {
        let key = spec.key();
        if let Some((k, l)) = &self.last {
            if *k == key {
                return Ok(l.clone());
            }
        }
        let l = Arc::new(
            spec.build()
                .map_err(|e| format!("building the layer: {e}"))?,
        );
        self.last = Some((key, l.clone()));
        Ok(l)
    }

    /// The call a case makes.
    pub fn call(&mut self, case: &Case) -> Result<Call, String> {
        Ok(match &case.kind {
            Kind::Quantize {
                format,
                mode,
                input,
            } => {
                let x = input.generate(*format);
                Call::Quantize {
                    format: *format,
                    mode: *mode,
                    shape: vec![x.len() / input.k, input.k],
                    x,
                }
            }
            Kind::Qdq {
                format,
                mode,
                input,
            } => Call::Qdq {
                format: *format,
                mode: *mode,
                x: input.generate(*format),
                k: input.k,
            },
            Kind::Dequantize { format, input } => Call::Dequantize {
                t: input.generate(*format),
            },
            Kind::Route(r) => Call::Route {
                cfg: r.router.clone(),
                n_experts: r.n_experts,
                logits: r.logits(),
                bias: r.bias(),
            },
            Kind::Moe(mc) => {
                let (hidden, logits) = mc.batch(0);
                Call::Moe {
                    layer: self.layer(&mc.layer)?,
                    hidden,
                    logits,
                    opts: mc.opts,
                }
            }
            Kind::Invalid(w) => self.invalid(*w)?,
        })
    }

    fn invalid(&mut self, w: Invalid) -> Result<Call, String> {
        let (f, m) = (MxFormat::Fp4E2M1, ScaleMode::Even);
        let moe_call = |s: &mut Self, cut: &dyn Fn(&mut Vec<f32>, &mut Vec<f32>)| {
            let spec = Invalid::layer();
            let (mut hidden, mut logits) = moe::synth::synth_batch(3, 32, 4, 1);
            cut(&mut hidden, &mut logits);
            Ok::<_, String>(Call::Moe {
                layer: s.layer(&spec)?,
                hidden,
                logits,
                opts: MoeOptions::default(),
            })
        };
        Ok(match w {
            Invalid::MoeShortLogits => moe_call(self, &|_, l| l.truncate(11))?,
            Invalid::MoeRaggedHidden => moe_call(self, &|h, _| h.truncate(40))?,
            Invalid::MoeNanLogits => moe_call(self, &|_, l| l[5] = f32::NAN)?,
            Invalid::QdqK48 => Call::Qdq {
                format: f,
                mode: m,
                x: vec![0.0; 48],
                k: 48,
            },
            Invalid::QdqRagged => Call::Qdq {
                format: f,
                mode: m,
                x: vec![0.0; 40],
                k: 32,
            },
            Invalid::QuantizeShape => Call::Quantize {
                format: f,
                mode: m,
                x: vec![0.0; 64],
                shape: vec![3, 32],
            },
            Invalid::DequantizeTruncated => {
                let mut t = MxTensor::quantize(MxFormat::Fp6E3M2, m, &[1.0; 64], &[2, 32])
                    .map_err(|e| e.to_string())?;
                t.data.to_mut().pop();
                Call::Dequantize { t }
            }
        })
    }
}

/// The CPU reference of a call (the oracle functions, not a backend).
pub fn reference(call: &Call) -> Result<Output, String> {
    let r = match call {
        Call::Quantize {
            format,
            mode,
            x,
            shape,
        } => MxTensor::quantize(*format, *mode, x, shape).map(Output::Tensor),
        Call::Dequantize { t } => Ok(Output::Values(t.dequantize())),
        Call::Qdq { format, mode, x, k } => qdq_slice(*format, *mode, x, *k).map(Output::Values),
        Call::Route {
            cfg,
            n_experts,
            logits,
            bias,
        } => {
            return moe::route(cfg, logits, *n_experts, bias.as_deref())
                .map(Output::Routing)
                .map_err(|e| e.to_string())
        }
        Call::Moe {
            layer,
            hidden,
            logits,
            opts,
        } => {
            return moe::forward(layer, hidden, logits, *opts)
                .map(Output::Moe)
                .map_err(|e| e.to_string())
        }
    };
    r.map_err(|e| e.to_string())
}

/// Run a call on a backend (through the `Backend` face: inputs validated once, `supports`
/// asked first).
pub fn exec(b: &Backend, call: &Call) -> Result<Output, BackendError> {
    Ok(match call {
        Call::Quantize {
            format,
            mode,
            x,
            shape,
        } => Output::Tensor(b.quantize(*format, *mode, x, shape)?),
        Call::Dequantize { t } => Output::Values(b.dequantize(t)?),
        Call::Qdq { format, mode, x, k } => Output::Values(b.qdq(*format, *mode, x, *k)?),
        Call::Route {
            cfg,
            n_experts,
            logits,
            bias,
        } => Output::Routing(b.route(cfg, logits, *n_experts, bias.as_deref())?),
        Call::Moe {
            layer,
            hidden,
            logits,
            opts,
        } => Output::Moe(b.moe_once(layer, hidden, logits, *opts)?),
    })
}

/// Work and traffic of a call (see [`Cost`]).
pub fn cost(call: &Call) -> Cost {
    let n = |v: &[f32]| v.len() as f64;
    match call {
        Call::Quantize { format, x, .. } => Cost {
            flops: n(x),
            bytes: 4.0 * n(x) + packed_bytes(*format, x.len()),
            weight_bytes: 0.0,
        },
        Call::Dequantize { t } => Cost {
            flops: t.numel() as f64,
            bytes: (t.data.len() + t.scales.len()) as f64 + 4.0 * t.numel() as f64,
            weight_bytes: 0.0,
        },
        Call::Qdq { x, .. } => Cost {
            flops: 2.0 * n(x),
            bytes: 8.0 * n(x),
            weight_bytes: 0.0,
        },
        Call::Route {
            cfg,
            logits,
            bias,
            n_experts,
        } => {
            let m = logits.len() / (*n_experts).max(1);
            Cost {
                flops: 3.0 * n(logits),
                bytes: 4.0 * n(logits)
                    + bias.as_ref().map_or(0.0, |b| 4.0 * n(b))
                    + 8.0 * (m * cfg.top_k) as f64,
                weight_bytes: 0.0,
            }
        }
        Call::Moe {
            layer,
            hidden,
            logits,
            ..
        } => {
            let m = hidden.len() / layer.config.hidden.max(1);
            moe_cost(layer, m, &[logits]).unwrap_or_default()
        }
    }
}

fn packed_bytes(f: MxFormat, n: usize) -> f64 {
    (f.packed_len(n) + n / crate::format::BLOCK) as f64
}

fn tol_check(what: &str, got: &[f32], want: &[f32], tol: Tol) -> Result<String, String> {
    if got.len() != want.len() {
        return Err(format!("{what}: length {} != {}", got.len(), want.len()));
    }
    let (r, mx) = rel_l2(got, want);
    if r.is_nan() || r > tol.rel_l2 {
        return Err(format!(
            "{what} rel-L2 {r:.3e} > {:e} (max abs {mx:.3e})",
            tol.rel_l2
        ));
    }
    if let Some(e) = tol.elem_rel {
        // NaN is never within.
        let within = |i: usize| (got[i] - want[i]).abs() <= e as f32 * want[i].abs().max(1e-6);
        if let Some(i) = (0..got.len()).find(|&i| !within(i)) {
            return Err(format!(
                "{what}[{i}]: {} vs {} (relative bound {e:e})",
                got[i], want[i]
            ));
        }
    }
    Ok(format!("{what} rel-L2 {r:.2e}, max abs {mx:.2e}"))
}

/// A selected score below this makes a renormalized token exempt from the bit-for-bit weight
/// check ([`Weights::BitExact`]): an adapter that flushes subnormals may have dropped a score
/// from the renormalizing sum.
pub const TINY_SCORE: f32 = 1e-30;

/// The router, expert count, logits and whether a correction bias takes part, of a routing or
/// MoE call.
fn router_of(call: &Call) -> Option<(&RouterConfig, usize, &[f32], bool)> {
    match call {
        Call::Route {
            cfg,
            n_experts,
            logits,
            bias,
        } => Some((cfg, *n_experts, logits, bias.is_some())),
        Call::Moe { layer, logits, .. } => Some((
            &layer.config.router,
            layer.config.n_experts,
            logits,
            layer.weights.e_score_correction_bias.is_some(),
        )),
        _ => None,
    }
}

/// Routing weights against the reference's (the ids already agree).
fn weights_check(w: Weights, call: &Call, got: &Routing, want: &Routing) -> Result<String, String> {
    match w {
        Weights::Within(tol) => tol_check(
            "routing weights",
            &got.topk_weights,
            &want.topk_weights,
            tol,
        ),
        Weights::BitExact => weights_bits(call, got, want),
    }
}

/// [`Weights::BitExact`]: every weight's bits, but for what an adapter that flushes subnormals
/// may change: a weight whose score or reference value is subnormal may be ±0; with
/// `renormalize`, a token with a selected score below [`TINY_SCORE`] is not compared. The
/// scores are the CPU's exact ones (`moe::exact_math`), recomputed only for tokens that differ.
/// A call without a router (none should come here) gets no exemption.
fn weights_bits(call: &Call, got: &Routing, want: &Routing) -> Result<String, String> {
    let (g, w) = (&got.topk_weights, &want.topk_weights);
    if g.len() != w.len() {
        return Err(format!(
            "routing weights: length {} != {}",
            g.len(),
            w.len()
        ));
    }
    let k = want.top_k.max(1);
    let router = router_of(call);
    let (mut flushed, mut tiny_tokens) = (0usize, 0usize);
    for tok in 0..w.len().div_ceil(k) {
        let slots = tok * k..((tok + 1) * k).min(w.len());
        if slots.clone().all(|j| g[j].to_bits() == w[j].to_bits()) {
            continue;
        }
        let bad = |j: usize, why: &str| {
            Err(format!(
                "routing weights differ in bits at slot {j} (token {}): got {:e} ({:#010x}), \
                 want {:e} ({:#010x}){why}",
                j / k,
                g[j],
                g[j].to_bits(),
                w[j],
                w[j].to_bits()
            ))
        };
        let Some((cfg, e, logits, has_bias)) = router else {
            let j = slots.clone().find(|&j| g[j].to_bits() != w[j].to_bits());
            return bad(j.unwrap_or(slots.start), "");
        };
        let row = &logits[tok * e..(tok + 1) * e];
        let scores = match (cfg.scoring, has_bias) {
            (Scoring::Sigmoid, _) => row.iter().map(|&x| exact_math::sigmoid(x)).collect(),
            (Scoring::Softmax, true) => exact_math::softmax(row),
            _ => moe::route::softmax(row),
        };
        let score = |j: usize| scores[want.topk_ids[j] as usize];
        if cfg.renormalize && slots.clone().any(|j| score(j) < TINY_SCORE) {
            tiny_tokens += 1;
            continue;
        }
        for j in slots {
            if g[j].to_bits() == w[j].to_bits() {
                continue;
            }
            if g[j] == 0.0 && (w[j].is_subnormal() || score(j).is_subnormal()) {
                flushed += 1;
                continue;
            }
            return bad(j, &format!(" (score {:e})", score(j)));
        }
    }
    let mut note = format!("routing weights bit-exact ({} slots", w.len());
    if flushed > 0 {
        note += &format!("; {flushed} subnormal weights flushed to zero");
    }
    if tiny_tokens > 0 {
        note += &format!("; {tiny_tokens} tokens with tiny scores differ, not compared");
    }
    Ok(note + ")")
}

fn first_diff<T: PartialEq>(a: &[T], b: &[T]) -> Option<usize> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()));
    }
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// Judge a backend's output of `call` against the reference: `Ok(note)` or `Err(why it
/// fails)`. (The call gives [`Weights::BitExact`] the router and logits, for its exemptions.)
pub fn judge(expect: &Expect, call: &Call, got: &Output, want: &Output) -> Result<String, String> {
    match (expect, got, want) {
        (Expect::BitExact, Output::Tensor(g), Output::Tensor(w)) => {
            if g.shape != w.shape {
                Err(format!("shape {:?} != {:?}", g.shape, w.shape))
            } else if let Some(i) = first_diff(&g.scales, &w.scales) {
                Err(format!(
                    "scale bytes differ (first at block {i}: got {:?}, want {:?})",
                    g.scales.get(i),
                    w.scales.get(i)
                ))
            } else if let Some(i) = first_diff(&g.data, &w.data) {
                let bb = g.format.spec().block_bytes();
                Err(format!(
                    "packed codes differ (first at byte {i}, block {}: got {:?}, want {:?})",
                    i / bb,
                    g.data.get(i),
                    w.data.get(i)
                ))
            } else {
                Ok(String::new())
            }
        }
        (Expect::BitExact, Output::Values(g), Output::Values(w)) => {
            first_bit_mismatch(g, w).map_or(Ok(String::new()), Err)
        }
        (Expect::Route { weights }, Output::Routing(g), Output::Routing(w)) => {
            if let Some(i) = first_diff(&g.topk_ids, &w.topk_ids) {
                return Err(format!("routing ids differ (first at slot {i})"));
            }
            weights_check(*weights, call, g, w)
        }
        (
            Expect::Moe {
                weights,
                output,
                bf16_output,
            },
            Output::Moe(g),
            Output::Moe(w),
        ) => {
            if let Some(i) = first_diff(&g.routing.topk_ids, &w.routing.topk_ids) {
                return Err(format!("routing ids differ (first at slot {i})"));
            }
            let wnote = weights_check(*weights, call, &g.routing, &w.routing)?;
            if let Some(i) = g.output.iter().position(|v| v.to_bits() == POISON) {
                return Err(format!("output element {i} was never written (poison)"));
            }
            if *bf16_output {
                if let Some(i) = g.output.iter().position(|v| v.to_bits() & 0xFFFF != 0) {
                    return Err(format!(
                        "output[{i}] = {:e} is not a bf16 value",
                        g.output[i]
                    ));
                }
            }
            let onote = tol_check("output", &g.output, &w.output, *output)?;
            Ok(if *weights == Weights::BitExact {
                format!("{onote}; {wnote}")
            } else {
                onote
            })
        }
        (e, _, _) => Err(format!(
            "internal: expectation {e:?} does not fit the output"
        )),
    }
}

/// Judge an error expectation on a backend's answer.
fn judge_error(
    contains: Option<&str>,
    r: &Result<Output, BackendError>,
) -> (Status, Result<String, String>) {
    match r {
        Ok(_) => (
            Status::Fail,
            Err("invalid input accepted (expected an error)".into()),
        ),
        Err(BackendError::Unsupported { reason, .. }) => (Status::Unsupported, Ok(reason.clone())),
        Err(e) => {
            let msg = e.to_string();
            match contains {
                Some(n) if !msg.contains(n) => (
                    Status::Fail,
                    Err(format!("error '{msg}' does not mention '{n}'")),
                ),
                _ => (Status::Ok, Ok(format!("rejected: {msg}"))),
            }
        }
    }
}

/// Run one materialized case on a backend and judge it.
pub fn run_call(
    b: &Backend,
    case: &Case,
    call: &Call,
    want: &Result<Output, String>,
    cost: Cost,
) -> CaseResult {
    let t0 = Instant::now();
    let got = exec(b, call);
    let millis = t0.elapsed().as_secs_f64() * 1e3;
    let (status, detail) = match (&case.expect, &got, want) {
        (Expect::Error { contains }, r, _) => {
            let (s, d) = judge_error(*contains, r);
            (s, d.unwrap_or_else(|e| e))
        }
        (_, Err(BackendError::Unsupported { reason, .. }), _) => {
            (Status::Unsupported, reason.clone())
        }
        (_, Err(e), _) => (Status::Fail, format!("error: {e}")),
        (_, Ok(_), Err(e)) => (Status::Fail, format!("reference failed: {e}")),
        (x, Ok(g), Ok(w)) => match judge(x, call, g, w) {
            Ok(note) => (Status::Ok, note),
            Err(why) => (Status::Fail, why),
        },
    };
    CaseResult {
        name: case.id.clone(),
        status,
        detail,
        millis,
        flops: cost.flops,
        bytes: cost.bytes,
    }
}

/// Run `cases` on every backend: each case is materialized and its reference computed once,
/// then it runs on each backend in turn. `each(backend index, result)` is called as results
/// come. Returns the results per backend, in case order.
pub fn run_cases(
    backends: &[&Backend],
    cases: &[Case],
    mut each: impl FnMut(usize, &CaseResult),
) -> Vec<Vec<CaseResult>> {
    let mut out = vec![Vec::with_capacity(cases.len()); backends.len()];
    let mut mat = Materializer::default();
    for case in cases {
        let (call, want) = match mat.call(case) {
            Ok(c) => {
                let want = match case.expect {
                    Expect::Error { .. } => Err("no reference".into()),
                    _ => reference(&c),
                };
                (Some(c), want)
            }
            Err(e) => (None, Err(e)),
        };
        let cost = match (&call, &case.expect) {
            (Some(c), e) if !matches!(e, Expect::Error { .. }) => cost(c),
            _ => Cost::default(),
        };
        for (bi, b) in backends.iter().enumerate() {
            let r = match &call {
                Some(c) => run_call(b, case, c, &want, cost),
                None => CaseResult {
                    name: case.id.clone(),
                    status: Status::Fail,
                    detail: format!("cannot build the case: {:?}", want.as_ref().err()),
                    millis: 0.0,
                    flops: 0.0,
                    bytes: 0.0,
                },
            };
            each(bi, &r);
            out[bi].push(r);
        }
    }
    out
}

/// Whether `MXMOE_REQUIRE_GPU=1`: a backend that is compiled in but cannot be opened (no
/// adapter) then FAILS instead of being SKIPPED.
pub fn require_gpu() -> bool {
    std::env::var("MXMOE_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// A backend as opened for a conformance run.
pub struct Opened {
    pub name: String,
    /// The backend, or why it could not be opened.
    pub backend: Result<Backend, String>,
    /// When not opened: whether that is a failure rather than a skip (see [`open_backends`]).
    pub fails: bool,
    /// Why not opening is a failure (`named explicitly`, `MXMOE_REQUIRE_GPU=1`, `--require`);
    /// empty when it is not.
    pub fail_why: String,
}

impl Opened {
    /// Make a backend that did not open a failure, saying why (e.g. `--require wgpu`).
    pub fn require(&mut self, why: &str) {
        if self.backend.is_err() && !self.fails {
            self.fails = true;
            self.fail_why = why.to_string();
        }
    }
}

/// Open `which` (`all` = every [`BackendKind::ALL`], or one kind name) with outputs poisoned
/// (GPU backends fill outputs with [`POISON`] before every run). A backend named explicitly
/// (`cpu`, `wgpu`, `hip`) that cannot be opened is a failure; with `all`, one that cannot be
/// opened is SKIPPED with its reason, unless `require` is set and it is compiled in without a
/// device (`MXMOE_REQUIRE_GPU=1`). `auto` falls back to the CPU and never fails to open.
pub fn open_backends(
    which: &str,
    adapter: Option<&str>,
    require: bool,
) -> Result<Vec<Opened>, String> {
    let explicit = which != "all";
    let kinds: Vec<BackendKind> = match which {
        "all" => BackendKind::ALL.to_vec(),
        w => vec![w.parse::<BackendKind>()?],
    };
    Ok(kinds
        .into_iter()
        .map(|k| match Backend::open(k, adapter) {
            Ok(b) => {
                b.set_poison(true);
                Opened {
                    name: b.name().into(),
                    backend: Ok(b),
                    fails: false,
                    fail_why: String::new(),
                }
            }
            Err(e) => {
                let gpu_required = require && !matches!(e, BackendError::NotCompiled(_));
                let why = if explicit {
                    format!("--backend {} named explicitly", k.name())
                } else if gpu_required {
                    "MXMOE_REQUIRE_GPU=1".to_string()
                } else {
                    String::new()
                };
                Opened {
                    name: k.name().into(),
                    fails: explicit || gpu_required,
                    fail_why: why,
                    backend: Err(e.to_string()),
                }
            }
        })
        .collect())
}
