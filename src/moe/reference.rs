//! The CPU reference forward pass (the oracle) and its naive twin.
//!
//! `forward` streams packed weights row by row (dequantizing one row at a time, exactly) and
//! runs experts in parallel with rayon; `forward_naive` dequantizes whole tensors and loops
//! plainly. Tests hold the two together. With `MoeOptions { taps: true, .. }`, `forward` also
//! returns the intermediates of every step ([`StageTaps`]), for the viewer and for tests.

use super::{route, Accumulate, Activation, Intermediate, MoeError, MoeLayer, Routing};
use crate::format::{MxFormat, MxTensor, ProfileId, ScaleMode};
use rayon::prelude::*;

/// Options of a forward run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MoeOptions {
    pub accumulate: Accumulate,
    pub intermediate: Intermediate,
    /// Keep the intermediates of every step ([`StageTaps`], in [`MoeOutput::stages`]). Off by
    /// default: without taps a forward allocates and computes nothing extra. Only the CPU
    /// reference has them; GPU backends answer UNSUPPORTED.
    pub taps: bool,
    /// The compatibility profile of the activation QDQs (`--profile`, NUMERICS.md 17): the
    /// contract by default. Only the CPU reference runs other profiles.
    pub profile: ProfileId,
}

/// The activation QDQ of a forward under `profile` (the contract's `qdq_slice` by default).
fn act_qdq(
    profile: ProfileId,
    f: MxFormat,
    mode: ScaleMode,
    x: &[f32],
    k: usize,
) -> Result<Vec<f32>, MoeError> {
    Ok(profile.spec().qdq_slice(f, mode, x, k)?)
}

/// Fault-injection hooks of the reference (`check::faults`): each switch leaves out or
/// degrades one step of the contract, so that `mxmoe verify` can re-run the reference with a
/// known fault and see whether it explains a result. Not part of [`MoeOptions`]: the public
/// forward runs with every switch off ([`forward`] passes `Probe::default()`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Probe {
    /// Skip the input QDQ (the GEMM1 reads the unquantized input).
    pub skip_input_qdq: bool,
    /// Skip the intermediate QDQ (the GEMM2 reads the unquantized activation output).
    pub skip_intermediate_qdq: bool,
    /// Accumulate the GEMM dot products in bf16 (every partial sum rounded to bf16).
    pub bf16_accumulation: bool,
    /// Use this routing instead of the router's (ids and weights, `[M, k]`).
    pub routing: Option<Routing>,
}

/// A forward result: `output` `[M, H]`, the routing that produced it, and (with
/// [`MoeOptions::taps`]) the intermediates of every step.
#[derive(Clone, Debug)]
pub struct MoeOutput {
    pub output: Vec<f32>,
    pub routing: Routing,
    /// `Some` exactly when the forward ran with `taps: true`.
    pub stages: Option<StageTaps>,
}

/// The intermediates of one forward, step by step along the dataflow (module docs), as the
/// forward used them. Per-slot tensors are slot-major: row `a = t * top_k + j` is token `t`'s
/// `j`-th routing choice. Rows of slots whose expert this layer does not hold
/// (`expert_map` -1) are zero and `local[a]` is `false`.
///
/// Values are rounded to f32 for the tap: with `Accumulate::F64` the GEMM1 and GEMM2 epilogues
/// run in f64, so `gemm1` / `gemm2` are those f64 values rounded once (the activation and the
/// combine read the f64 values); with `Accumulate::F32` they are the forward's own values, bit
/// for bit. With `Intermediate::Bf16` they are the bf16-rounded values the next step reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StageTaps {
    pub top_k: usize,
    /// `[M, H]`: the input after QDQ (the input itself for weight-only schemes).
    pub input_q: Vec<f32>,
    /// `[M*k, 2I]`: GEMM1 output + bias (x router weight with `apply_router_weight_on_input`).
    pub gemm1: Vec<f32>,
    /// `[M*k, I]`: the activation output, what the intermediate QDQ reads.
    pub act: Vec<f32>,
    /// `[M*k, I]`: the intermediate after QDQ (= `act` for weight-only schemes), GEMM2's input.
    pub inter_q: Vec<f32>,
    /// `[M*k, H]`: GEMM2 output + bias, x router weight (unless applied on the input).
    pub gemm2: Vec<f32>,
    /// `[M*k]`: whether the slot's expert is local (non-local slots contribute nothing).
    pub local: Vec<bool>,
    /// `[M, H]`: the combine (the sum over each token's slots), equal to `MoeOutput::output`
    /// bit for bit; kept here so the taps are a complete record on their own.
    pub combine: Vec<f32>,
}

/// SwiGLU-OAI constants (gpt-oss `swiglu_limit`, `alpha`; NUMERICS.md 11).
pub const SWIGLU_LIMIT: f64 = 7.0;
pub const SWIGLU_ALPHA: f64 = 1.702;

/// The real type the epilogues run in (f32 or f64), so both accumulation modes share one code
/// path. Dot products use 8 interleaved partial sums (lane l sums elements i = l mod 8), then
/// a pairwise tree: vectorizable and deterministic.
trait Real:
    Copy + Send + Sync + Default + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self>
{
    fn of(x: f32) -> Self;
    fn of64(x: f64) -> Self;
    fn f32(self) -> f32;
    fn f64(self) -> f64;
    fn dot(a: &[f32], b: &[f32]) -> Self;
}

impl Real for f64 {
    fn of(x: f32) -> Self {
        x as f64
    }
    fn of64(x: f64) -> Self {
        x
    }
    fn f32(self) -> f32 {
        self as f32
    }
    fn f64(self) -> f64 {
        self
    }
    #[inline]
    fn dot(a: &[f32], b: &[f32]) -> f64 {
        let mut acc = [0f64; 8];
        for (ca, cb) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
            for l in 0..8 {
                acc[l] += ca[l] as f64 * cb[l] as f64;
            }
        }
        ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
    }
}

impl Real for f32 {
    fn of(x: f32) -> Self {
        x
    }
    fn of64(x: f64) -> Self {
        x as f32
    }
    fn f32(self) -> f32 {
        self
    }
    fn f64(self) -> f64 {
        self as f64
    }
    #[inline]
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        let mut acc = [0f32; 8];
        for (ca, cb) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
            for l in 0..8 {
                acc[l] += ca[l] * cb[l];
            }
        }
        ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
    }
}

/// A dot product accumulated in bf16 (the `bf16_accumulation` fault): sequential, every
/// partial sum rounded to bf16 (the products themselves are f32).
fn dot_bf16(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .fold(0f32, |s, (x, y)| bf16_round(s + x * y))
}

#[inline]
fn bf16_round(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

/// Apply the activation to one GEMM1 output row `h` (`2I`) into `out` (`I`), in the epilogue
/// precision (computed in f64 for both modes, rounded to the mode's type: the transcendental
/// is not where the two modes are meant to differ).
fn activate<R: Real>(act: Activation, h: &[R], out: &mut [R]) {
    let i = out.len();
    for j in 0..i {
        let (g, u) = match act {
            Activation::Silu => (h[j].f64(), h[i + j].f64()),
            Activation::SwigluOai => (h[2 * j].f64(), h[2 * j + 1].f64()),
        };
        let v = match act {
            Activation::Silu => g / (1.0 + (-g).exp()) * u,
            Activation::SwigluOai => swiglu_oai(g, u),
        };
        out[j] = R::of64(v);
    }
}

/// gpt-oss SwiGLU: `g = min(g, 7)`, `l = clamp(l, -7, 7)`, `g * sigmoid(1.702 g) * (l + 1)`.
pub fn swiglu_oai(glu: f64, lin: f64) -> f64 {
    let g = glu.min(SWIGLU_LIMIT);
    let l = lin.clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT);
    g / (1.0 + (-SWIGLU_ALPHA * g).exp()) * (l + 1.0)
}

/// Check the layer, then the batch against it; returns M.
pub fn check_batch(layer: &MoeLayer, hidden: &[f32], logits: &[f32]) -> Result<usize, MoeError> {
    layer.validate()?;
    layer.config.check_batch(hidden, logits)
}

/// Run the layer on a token batch: `hidden` `[M, H]`, `logits` `[M, n_experts]`.
pub fn forward(
    layer: &MoeLayer,
    hidden: &[f32],
    logits: &[f32],
    opts: MoeOptions,
) -> Result<MoeOutput, MoeError> {
    forward_probe(layer, hidden, logits, opts, &Probe::default())
}

/// [`forward`] with fault-injection hooks ([`Probe`]); for `check::faults` only.
pub fn forward_probe(
    layer: &MoeLayer,
    hidden: &[f32],
    logits: &[f32],
    opts: MoeOptions,
    probe: &Probe,
) -> Result<MoeOutput, MoeError> {
    let m = check_batch(layer, hidden, logits)?;
    let routing = match &probe.routing {
        Some(r) if r.topk_ids.len() == m * r.top_k && r.topk_weights.len() == r.topk_ids.len() => {
            if let Some(&bad) = r
                .topk_ids
                .iter()
                .find(|&&i| i < 0 || i as usize >= layer.config.n_experts)
            {
                return Err(MoeError::Input(format!(
                    "topk_ids holds expert {bad}, outside [0, {})",
                    layer.config.n_experts
                )));
            }
            r.clone()
        }
        Some(r) => {
            return Err(MoeError::Shape(format!(
                "the given routing has {} ids and {} weights, expected [M = {m}, k = {}]",
                r.topk_ids.len(),
                r.topk_weights.len(),
                r.top_k
            )))
        }
        None => route(
            &layer.config.router,
            logits,
            layer.config.n_experts,
            layer.weights.e_score_correction_bias.as_deref(),
        )?,
    };
    let (output, stages) = match opts.accumulate {
        Accumulate::F64 => run::<f64>(layer, hidden, m, &routing, opts, probe)?,
        Accumulate::F32 => run::<f32>(layer, hidden, m, &routing, opts, probe)?,
    };
    Ok(MoeOutput {
        output,
        routing,
        stages,
    })
}

/// Group the `[M*k]` assignments by local expert.
pub fn assignments_by_expert(layer: &MoeLayer, routing: &Routing) -> Vec<Vec<usize>> {
    let mut lists = vec![Vec::new(); layer.local_experts()];
    for (a, &id) in routing.topk_ids.iter().enumerate() {
        if let Some(l) = layer.local_id(id as usize) {
            lists[l].push(a);
        }
    }
    lists
}

/// One expert's share of a forward: its slots, their GEMM2 rows `[t, H]`, and (with taps) the
/// per-slot stages `(gemm1 [t, 2I], act [t, I], inter_q [t, I])`.
type ExpertRun<R> = (Vec<usize>, Vec<R>, Option<(Vec<f32>, Vec<f32>, Vec<f32>)>);

fn run<R: Real>(
    layer: &MoeLayer,
    hidden: &[f32],
    m: usize,
    routing: &Routing,
    opts: MoeOptions,
    probe: &Probe,
) -> Result<(Vec<f32>, Option<StageTaps>), MoeError> {
    let (inter, taps) = (opts.intermediate, opts.taps);
    let dot = |a: &[f32], b: &[f32]| {
        if probe.bf16_accumulation {
            R::of(dot_bf16(a, b))
        } else {
            R::dot(a, b)
        }
    };
    let (h, i, k) = (layer.config.hidden, layer.config.inter, routing.top_k);
    let act_fmt = layer.config.scheme.activation;
    let mode = layer.config.act_scale_mode;
    // 1. Input QDQ, once per token (skipped for weight-only schemes).
    let xq = match act_fmt {
        Some(f) if !probe.skip_input_qdq => act_qdq(opts.profile, f, mode, hidden, h)?,
        _ => hidden.to_vec(),
    };
    let lists = assignments_by_expert(layer, routing);
    let on_input = layer.config.router.apply_router_weight_on_input;
    let bf16 = inter == Intermediate::Bf16;
    let round = |v: R| if bf16 { R::of(bf16_round(v.f32())) } else { v };

    // 2. Per expert: GEMM1 -> activation -> intermediate QDQ -> GEMM2 (rows streamed).
    let per_expert: Vec<ExpertRun<R>> = lists
        .par_iter()
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(|(e, list)| -> Result<ExpertRun<R>, MoeError> {
            let t = list.len();
            let mut row = vec![0f32; h.max(i)];
            // GEMM1: g1[t][r], r in 0..2I.
            let mut g1 = vec![R::default(); t * 2 * i];
            for r in 0..2 * i {
                let wrow = &mut row[..h];
                layer.weights.w13.dequantize_rows(e * 2 * i + r, wrow);
                let b = layer
                    .weights
                    .w13_bias
                    .as_ref()
                    .map_or(0.0, |b| b[e * 2 * i + r]);
                for (ti, &a) in list.iter().enumerate() {
                    let tok = a / k;
                    let mut v = dot(wrow, &xq[tok * h..(tok + 1) * h]) + R::of(b);
                    if on_input {
                        v = v * R::of(routing.topk_weights[a]);
                    }
                    g1[ti * 2 * i + r] = round(v);
                }
            }
            // Activation and the intermediate QDQ (per token-expert, blocks along I).
            let mut act = vec![R::default(); t * i];
            for ti in 0..t {
                activate(
                    layer.config.activation,
                    &g1[ti * 2 * i..(ti + 1) * 2 * i],
                    &mut act[ti * i..(ti + 1) * i],
                );
            }
            let act32: Vec<f32> = act.iter().map(|v| round(*v).f32()).collect();
            // Taps only: the GEMM1 rows and the activation output (QDQ may consume it).
            let tapped = taps.then(|| (g1.iter().map(|v| v.f32()).collect(), act32.clone()));
            let aq = match act_fmt {
                Some(f) if !probe.skip_intermediate_qdq => {
                    act_qdq(opts.profile, f, mode, &act32, i)?
                }
                _ => act32,
            };
            // GEMM2: y[t][r], r in 0..H, + bias, x router weight.
            let mut y = vec![R::default(); t * h];
            for r in 0..h {
                let wrow = &mut row[..i];
                layer.weights.w2.dequantize_rows(e * h + r, wrow);
                let b = layer.weights.w2_bias.as_ref().map_or(0.0, |b| b[e * h + r]);
                for (ti, &a) in list.iter().enumerate() {
                    let mut v = dot(wrow, &aq[ti * i..(ti + 1) * i]) + R::of(b);
                    if !on_input {
                        v = v * R::of(routing.topk_weights[a]);
                    }
                    y[ti * h + r] = round(v);
                }
            }
            let tapped = tapped.map(|(g, a)| (g, a, aq));
            Ok((list.clone(), y, tapped))
        })
        .collect::<Result<_, _>>()?;

    // 3. Combine: per token, sum the k slots in slot order (deterministic, no atomics).
    let mut slot: Vec<Option<(usize, usize)>> = vec![None; m * k];
    for (pe, (list, _, _)) in per_expert.iter().enumerate() {
        for (ti, &a) in list.iter().enumerate() {
            slot[a] = Some((pe, ti));
        }
    }
    let mut out = vec![0f32; m * h];
    out.par_chunks_mut(h).enumerate().for_each(|(tok, orow)| {
        let mut acc = vec![R::default(); h];
        for j in 0..k {
            if let Some((pe, ti)) = slot[tok * k + j] {
                let y = &per_expert[pe].1[ti * h..(ti + 1) * h];
                for (a, &v) in acc.iter_mut().zip(y) {
                    *a = *a + v;
                }
            }
        }
        for (o, a) in orow.iter_mut().zip(acc) {
            *o = if bf16 { bf16_round(a.f32()) } else { a.f32() };
        }
    });
    let stages = taps.then(|| {
        let mut st = StageTaps {
            top_k: k,
            input_q: xq,
            gemm1: vec![0f32; m * k * 2 * i],
            act: vec![0f32; m * k * i],
            inter_q: vec![0f32; m * k * i],
            gemm2: vec![0f32; m * k * h],
            local: slot.iter().map(Option::is_some).collect(),
            combine: out.clone(),
        };
        for (list, y, t) in &per_expert {
            let (g1, act, aq) = t.as_ref().expect("taps were requested");
            for (ti, &a) in list.iter().enumerate() {
                let rows = |n: usize| (a * n..(a + 1) * n, ti * n..(ti + 1) * n);
                let (d, s) = rows(2 * i);
                st.gemm1[d].copy_from_slice(&g1[s]);
                let (d, s) = rows(i);
                st.act[d.clone()].copy_from_slice(&act[s.clone()]);
                st.inter_q[d].copy_from_slice(&aq[s]);
                let (d, s) = rows(h);
                for (o, v) in st.gemm2[d].iter_mut().zip(&y[s]) {
                    *o = v.f32();
                }
            }
        }
        st
    });
    Ok((out, stages))
}

/// The naive twin: dequantize whole weight tensors, plain loops, f64 sequential sums, the same
/// dataflow. Slow; for tests on small layers only.
pub fn forward_naive(
    layer: &MoeLayer,
    hidden: &[f32],
    logits: &[f32],
) -> Result<MoeOutput, MoeError> {
    let m = check_batch(layer, hidden, logits)?;
    let routing = route(
        &layer.config.router,
        logits,
        layer.config.n_experts,
        layer.weights.e_score_correction_bias.as_deref(),
    )?;
    let (h, i, k) = (
        layer.config.hidden,
        layer.config.inter,
        layer.config.router.top_k,
    );
    let deq = |t: &MxTensor| t.dequantize();
    let w13 = deq(&layer.weights.w13);
    let w2 = deq(&layer.weights.w2);
    let xq = match layer.config.scheme.activation {
        Some(f) => act_qdq(
            ProfileId::Contract,
            f,
            layer.config.act_scale_mode,
            hidden,
            h,
        )?,
        None => hidden.to_vec(),
    };
    let mut out = vec![0f32; m * h];
    for tok in 0..m {
        let mut acc = vec![0f64; h];
        for j in 0..k {
            let a = tok * k + j;
            let Some(e) = layer.local_id(routing.topk_ids[a] as usize) else {
                continue;
            };
            let w = routing.topk_weights[a] as f64;
            let mut g1 = vec![0f64; 2 * i];
            for (r, g) in g1.iter_mut().enumerate() {
                let base = (e * 2 * i + r) * h;
                let mut s = 0f64;
                for c in 0..h {
                    s += w13[base + c] as f64 * xq[tok * h + c] as f64;
                }
                s += layer
                    .weights
                    .w13_bias
                    .as_ref()
                    .map_or(0.0, |b| b[e * 2 * i + r] as f64);
                if layer.config.router.apply_router_weight_on_input {
                    s *= w;
                }
                *g = s;
            }
            let mut act = vec![0f64; i];
            activate(layer.config.activation, &g1, &mut act);
            let act32: Vec<f32> = act.iter().map(|&v| v as f32).collect();
            let aq = match layer.config.scheme.activation {
                Some(f) => act_qdq(
                    ProfileId::Contract,
                    f,
                    layer.config.act_scale_mode,
                    &act32,
                    i,
                )?,
                None => act32,
            };
            for (r, o) in acc.iter_mut().enumerate() {
                let base = (e * h + r) * i;
                let mut s = 0f64;
                for c in 0..i {
                    s += w2[base + c] as f64 * aq[c] as f64;
                }
                s += layer
                    .weights
                    .w2_bias
                    .as_ref()
                    .map_or(0.0, |b| b[e * h + r] as f64);
                if !layer.config.router.apply_router_weight_on_input {
                    s *= w;
                }
                *o += s;
            }
        }
        for (o, a) in out[tok * h..(tok + 1) * h].iter_mut().zip(acc) {
            *o = a as f32;
        }
    }
    Ok(MoeOutput {
        output: out,
        routing,
        stages: None,
    })
}
