//! The case catalog: every cross-backend case, written once. `mxmoe check`, `mxmoe bench` and
//! `tests/backend_ops.rs` all take their cases from here.
//!
//! A case is plain data: a **stable id** (e.g. `qdq/mxfp4/even/edges-k64`,
//! `moe/w_mxfp4_a_mxfp4/silu/e8-h96-i64-k2-bias/m17`), the tier it belongs to, what to run (a
//! deterministic generator of its inputs, [`Kind`]) and what to expect ([`Expect`]): bit-exact
//! for quantize / dequantize / QDQ / routing ids, routing weights bit-exact where every backend
//! computes the scores exactly ([`Weights::BitExact`]) or else within a typed tolerance
//! ([`Tol`]), MoE outputs within a tolerance, or an error for invalid inputs. Flop and byte
//! counts ([`Cost`]) come from the materialized case (`check::run`).
//!
//! Ids name the op, the format / scheme, the sizes and every feature that changes the result, so
//! the same id always means the same inputs (generator seeds are fixed in the code below).
//!
//! Over 600 lines: the case types, their ids and expectations and the judge of each kind are
//! kept together so an id and what it checks read in one place; the cases themselves live in
//! `cases_format.rs`, `cases_moe.rs` and `models.rs`.

use super::inputs;
pub use super::models::{bench_cases, model_cases, model_shape, model_shape_names};
use super::{MOE_BF16_REL_L2, MOE_REL_L2, ROUTE_WEIGHT_REL};
use crate::format::{MxFormat, MxTensor, ScaleMode};
use crate::moe::synth::{synth_layer, synth_layer_packed, SynthSpec};
use crate::moe::{
    self, Accumulate, Intermediate, MoeError, MoeLayer, MoeOptions, RouterConfig, Scoring,
};
use crate::scheme::Scheme;

/// A suite: `Quick` is what CI runs on lavapipe (small, awkward shapes and every edge);
/// `Full` adds larger shapes. Real model shapes ([`Tier::Model`]) are for `mxmoe bench` only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    Quick,
    Full,
}

/// Which suites a case belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// Quick and Full.
    Quick,
    /// Full only.
    Full,
    /// Real model shapes: `mxmoe bench`, never `check` (too big for lavapipe and the CPU).
    Model,
}

impl Tier {
    pub fn in_suite(self, s: Suite) -> bool {
        matches!((self, s), (Tier::Quick, _) | (Tier::Full, Suite::Full))
    }
}

/// A tolerance: a relative-L2 bound and, optionally, a per-element relative bound
/// `|got - want| <= elem_rel * max(|want|, 1e-6)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tol {
    pub rel_l2: f64,
    pub elem_rel: Option<f64>,
}

impl Tol {
    /// MoE outputs against the CPU f32-accumulation reference ([`MOE_REL_L2`]).
    pub const MOE: Tol = Tol {
        rel_l2: MOE_REL_L2,
        elem_rel: None,
    };
    /// MoE outputs with bf16 intermediates ([`MOE_BF16_REL_L2`]).
    pub const MOE_BF16: Tol = Tol {
        rel_l2: MOE_BF16_REL_L2,
        elem_rel: None,
    };
    /// Routing weights inside a MoE forward: relative L2 only (as `mxmoe check` always had).
    pub const ROUTE_WEIGHTS_RL2: Tol = Tol {
        rel_l2: ROUTE_WEIGHT_REL,
        elem_rel: None,
    };
    /// Routing weights ([`ROUTE_WEIGHT_REL`], also per element).
    pub const ROUTE_WEIGHTS: Tol = Tol {
        rel_l2: ROUTE_WEIGHT_REL,
        elem_rel: Some(ROUTE_WEIGHT_REL),
    };
}

/// How routing weights must agree with the reference's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Weights {
    /// Within a tolerance.
    Within(Tol),
    /// Bit for bit: for routers whose scores every backend computes to the CPU's bits (sigmoid,
    /// or softmax with a correction bias; `moe::exact_math`). WGSL lets an adapter flush
    /// subnormals in the float steps that follow (the renormalizing sum, the scaling multiply),
    /// so two differences are accepted (`check::run`): a weight whose score or reference value
    /// is subnormal may come back as zero, and with `renormalize` a token one of whose selected
    /// scores is below [`super::run::TINY_SCORE`] is not compared bit for bit (its ids are).
    BitExact,
}

/// What a backend's result must satisfy against the CPU reference.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// Bits equal (any NaN equals any NaN); for quantize, scale bytes and packed codes equal.
    BitExact,
    /// Routing: ids identical, weights as `weights` says.
    Route { weights: Weights },
    /// MoE: routing ids identical, routing weights as `weights` says, no element left unwritten
    /// (poison), the output within `output`; with `bf16_output`, every output is a bf16 value.
    Moe {
        weights: Weights,
        output: Tol,
        bf16_output: bool,
    },
    /// The inputs are invalid: every backend returns an error (never a result, never a panic)
    /// whose message contains `contains`.
    Error { contains: Option<&'static str> },
}

/// Values a format case quantizes: a generator and the row length `k` (inputs are padded with
/// −0.0 to a multiple of `k`).
#[derive(Clone, Debug, PartialEq)]
pub struct FormatInput {
    pub values: Values,
    pub k: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// [`inputs::special`] (format-independent special blocks).
    Special,
    /// [`inputs::edges`] of the case's format with this seed.
    Edges { seed: u64 },
    /// [`inputs::random`] heavy-tailed `[rows, k]`.
    Random { rows: usize, seed: u64 },
    /// [`inputs::amax_sweep`].
    AmaxSweep,
}

impl FormatInput {
    /// The input's name in ids.
    pub fn name(&self) -> String {
        match &self.values {
            Values::Special => "special".into(),
            Values::Edges { .. } => format!("edges-k{}", self.k),
            Values::Random { rows, .. } => format!("random-{rows}x{}", self.k),
            Values::AmaxSweep => format!("amax-sweep-k{}", self.k),
        }
    }

    /// The values, padded with −0.0 to a multiple of `k`.
    pub fn generate(&self, fmt: MxFormat) -> Vec<f32> {
        let mut x = match &self.values {
            Values::Special => inputs::special(),
            Values::Edges { seed } => inputs::edges(fmt, *seed),
            Values::Random { rows, seed } => inputs::random(*rows, self.k, *seed),
            Values::AmaxSweep => inputs::amax_sweep(),
        };
        x.resize(x.len().next_multiple_of(self.k), -0.0);
        x
    }
}

/// The packed tensor a dequantize case decodes.
#[derive(Clone, Debug, PartialEq)]
pub enum DequantInput {
    /// The input quantized by the CPU with the `even` scale mode.
    Quantized(FormatInput),
    /// [`inputs::random_bytes`].
    RandomBytes { rows: usize, k: usize, seed: u64 },
    /// [`inputs::all_codes`].
    AllCodes,
}

impl DequantInput {
    pub fn name(&self) -> String {
        match self {
            DequantInput::Quantized(i) => i.name(),
            DequantInput::RandomBytes { rows, k, .. } => format!("random-bytes-{rows}x{k}"),
            DequantInput::AllCodes => "all-codes".into(),
        }
    }

    pub fn generate(&self, fmt: MxFormat) -> MxTensor {
        match self {
            DequantInput::Quantized(i) => {
                let x = i.generate(fmt);
                MxTensor::quantize(fmt, ScaleMode::Even, &x, &[x.len() / i.k, i.k])
                    .expect("valid input")
            }
            DequantInput::RandomBytes { rows, k, seed } => {
                inputs::random_bytes(fmt, *rows, *k, *seed)
            }
            DequantInput::AllCodes => inputs::all_codes(fmt),
        }
    }
}

/// A standalone routing case: `m` tokens of `n_experts` logits.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteCase {
    pub router: RouterConfig,
    pub n_experts: usize,
    pub m: usize,
    pub input: RouteInput,
}

/// The logits (and correction bias) a routing case routes.
#[derive(Clone, Debug, PartialEq)]
pub enum RouteInput {
    /// [`inputs::router_logits`] with `seed` (`ties`: exact ties in the first token), and
    /// optionally a DeepSeek correction bias ([`inputs::correction_bias`] with its seed).
    Synth {
        seed: u64,
        ties: bool,
        correction_bias: Option<u64>,
    },
    /// [`inputs::sigmoid_sweep`] with this step (tokens of 32 logits, no bias).
    SigmoidSweep { step: u32 },
    /// [`inputs::adversarial_routing`] of router `router` (an index into
    /// [`inputs::ADVERSARIAL_ROUTERS`]) with its correction bias number `bias` (into
    /// [`inputs::ADVERSARIAL_BIASES`]).
    Adversarial { router: usize, bias: usize },
}

impl RouteCase {
    pub fn logits(&self) -> Vec<f32> {
        match self.input {
            RouteInput::Synth { seed, ties, .. } => {
                inputs::router_logits(self.m, self.n_experts, seed, ties)
            }
            RouteInput::SigmoidSweep { step } => inputs::sigmoid_sweep(step),
            RouteInput::Adversarial { router, .. } => inputs::adversarial_routing(router).0,
        }
    }
    pub fn bias(&self) -> Option<Vec<f32>> {
        match self.input {
            RouteInput::Synth {
                correction_bias, ..
            } => correction_bias.map(|s| inputs::correction_bias(self.n_experts, s)),
            RouteInput::SigmoidSweep { .. } => None,
            RouteInput::Adversarial { router, bias } => {
                Some(inputs::adversarial_routing(router).1.swap_remove(bias))
            }
        }
    }
}

/// The router's features in ids: `-topk_softmax`, `-norenorm`, `-g4of2`, `-x2.5`, `-oninput`.
fn router_tag(r: &RouterConfig, with_scoring: bool) -> String {
    let mut t = String::new();
    if with_scoring && r.scoring != Scoring::Softmax {
        t += &format!("-{}", r.scoring);
    }
    if !r.renormalize {
        t += "-norenorm";
    }
    if let (Some(g), Some(tg)) = (r.n_group, r.topk_group) {
        t += &format!("-g{g}of{tg}");
    }
    if r.routed_scaling_factor != 1.0 {
        t += &format!("-x{}", r.routed_scaling_factor);
    }
    if r.apply_router_weight_on_input {
        t += "-oninput";
    }
    t
}

/// A synthetic layer: a [`SynthSpec`] and what the spec does not say.
#[derive(Clone, Debug)]
pub struct LayerSpec {
    pub synth: SynthSpec,
    /// The activation QDQ scale mode (the layer's `act_scale_mode`).
    pub act_scale_mode: ScaleMode,
    /// The router sees this many experts, of which the even ids are local (`expert_map`
    /// 2g -> g, odd -> −1); `synth.n_experts` must be half of it. `None`: all experts local.
    pub router_experts: Option<usize>,
    /// Seed of a DeepSeek `e_score_correction_bias`.
    pub correction_bias: Option<u64>,
    /// Experts `a..b` of the correction bias (with `correction_bias`) all get 0.05: equal keys
    /// for saturated sigmoids.
    pub equal_bias: Option<(usize, usize)>,
    /// Random codes and scales instead of quantized f32 weights (fast: model shapes, and the
    /// catalog's wide-router layers of up to 1024 experts, whose ids say `-packed`).
    pub packed: bool,
    /// A name that replaces the size part of ids (model shapes).
    pub name: Option<&'static str>,
}

impl LayerSpec {
    pub fn new(synth: SynthSpec) -> LayerSpec {
        LayerSpec {
            synth,
            act_scale_mode: ScaleMode::Even,
            router_experts: None,
            correction_bias: None,
            equal_bias: None,
            packed: false,
            name: None,
        }
    }

    /// The router's width.
    pub fn n_experts(&self) -> usize {
        self.router_experts.unwrap_or(self.synth.n_experts)
    }

    /// The size and feature part of ids, e.g. `e8-h96-i64-k2-bias`.
    pub fn tag(&self) -> String {
        if let Some(n) = self.name {
            return n.into();
        }
        let s = &self.synth;
        let mut t = format!(
            "e{}-h{}-i{}-k{}",
            s.n_experts, s.hidden, s.inter, s.router.top_k
        );
        if let Some(g) = self.router_experts {
            t += &format!("-map{g}");
        }
        t += &router_tag(&s.router, true);
        if self.correction_bias.is_some() {
            t += "-cbias";
        }
        if let Some((a, b)) = self.equal_bias {
            t += &format!("-eq{a}to{b}");
        }
        if s.bias {
            t += "-bias";
        }
        if s.weight_log2 != 0 {
            t += &format!("-wx2e{}", s.weight_log2);
        }
        if self.act_scale_mode != ScaleMode::Even {
            t += &format!("-act{}", self.act_scale_mode);
        }
        if self.packed {
            t += "-packed";
        }
        t
    }

    /// A key that is equal for equal layers (for caching a built layer between cases).
    pub fn key(&self) -> String {
        format!("{self:?}")
    }

    /// Build the layer (deterministic).
    pub fn build(&self) -> Result<MoeLayer, MoeError> {
        let mut layer = if self.packed {
            synth_layer_packed(&self.synth)?
        } else {
            synth_layer(&self.synth)?.layer
        };
        layer.config.act_scale_mode = self.act_scale_mode;
        if let Some(g) = self.router_experts {
            layer.config.n_experts = g;
            layer.weights.expert_map = Some(
                (0..g as i32)
                    .map(|x| if x % 2 == 0 { x / 2 } else { -1 })
                    .collect(),
            );
        }
        if let Some(seed) = self.correction_bias {
            let mut b = inputs::correction_bias(self.n_experts(), seed);
            if let Some((lo, hi)) = self.equal_bias {
                b[lo..hi].fill(0.05);
            }
            layer.weights.e_score_correction_bias = Some(b);
        }
        layer.validate()?;
        Ok(layer)
    }
}

/// A MoE forward case: a layer, `m` tokens from [`crate::moe::synth::synth_batch`] with
/// `seeds[0]` (benchmarks rotate through every seed), and the options.
#[derive(Clone, Debug)]
pub struct MoeCase {
    pub layer: LayerSpec,
    pub m: usize,
    pub seeds: Vec<u64>,
    pub opts: MoeOptions,
    /// Token 0's logits all 30.0: every sigmoid saturates to 1.0 (the correction bias, then
    /// the index decides).
    pub saturated_token: bool,
}

impl MoeCase {
    /// Batch `r` (of `seeds`): hidden `[m, H]`, logits `[m, n_experts]`. With bf16
    /// intermediates (vLLM parity) the hidden states are bf16 values too, as a bf16 model's
    /// are (round to nearest even of the synthetic f32 values).
    pub fn batch(&self, r: usize) -> (Vec<f32>, Vec<f32>) {
        let (mut hidden, mut logits) = moe::synth::synth_batch(
            self.m,
            self.layer.synth.hidden,
            self.layer.n_experts(),
            self.seeds[r % self.seeds.len()],
        );
        if self.saturated_token {
            logits[..self.layer.n_experts()].fill(30.0);
        }
        if self.opts.intermediate == Intermediate::Bf16 {
            for x in &mut hidden {
                *x = half::bf16::from_f32(*x).to_f32();
            }
        }
        (hidden, logits)
    }

    /// The id: `moe/{scheme}/{activation}/{layer tag}/m{M}[-saturated][/bf16][/f64]`.
    pub fn id(&self) -> String {
        let s = &self.layer.synth;
        let mut id = format!(
            "moe/{}/{}/{}/m{}",
            s.scheme,
            s.activation,
            self.layer.tag(),
            self.m
        );
        if self.saturated_token {
            id += "-saturated";
        }
        if self.opts.intermediate == Intermediate::Bf16 {
            id += "/bf16";
        }
        if self.opts.accumulate != Accumulate::F32 {
            id += "/f64";
        }
        id
    }
}

/// Invalid inputs: every backend must reject them with an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// Logits shorter than `[M, E]`.
    MoeShortLogits,
    /// Hidden states not a whole number of rows.
    MoeRaggedHidden,
    /// A NaN router logit (the message names it).
    MoeNanLogits,
    /// QDQ with K = 48 (not a multiple of 32).
    QdqK48,
    /// QDQ of 40 values in rows of 32.
    QdqRagged,
    /// Quantize of 64 values with shape [3, 32].
    QuantizeShape,
    /// Dequantize of a tensor missing a byte of codes.
    DequantizeTruncated,
}

impl Invalid {
    pub const ALL: [Invalid; 7] = [
        Invalid::MoeShortLogits,
        Invalid::MoeRaggedHidden,
        Invalid::MoeNanLogits,
        Invalid::QdqK48,
        Invalid::QdqRagged,
        Invalid::QuantizeShape,
        Invalid::DequantizeTruncated,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Invalid::MoeShortLogits => "invalid/moe/short-logits",
            Invalid::MoeRaggedHidden => "invalid/moe/ragged-hidden",
            Invalid::MoeNanLogits => "invalid/moe/nan-logits",
            Invalid::QdqK48 => "invalid/qdq/k48",
            Invalid::QdqRagged => "invalid/qdq/ragged",
            Invalid::QuantizeShape => "invalid/quantize/shape",
            Invalid::DequantizeTruncated => "invalid/dequantize/truncated",
        }
    }

    /// The small layer the MoE variants use.
    pub fn layer() -> LayerSpec {
        LayerSpec::new(SynthSpec::new(Scheme::OCP_MX[0], 4, 32, 32, 2))
    }
}

/// What a case runs.
#[derive(Clone, Debug)]
pub enum Kind {
    Quantize {
        format: MxFormat,
        mode: ScaleMode,
        input: FormatInput,
    },
    Dequantize {
        format: MxFormat,
        input: DequantInput,
    },
    Qdq {
        format: MxFormat,
        mode: ScaleMode,
        input: FormatInput,
    },
    Route(RouteCase),
    Moe(MoeCase),
    Invalid(Invalid),
}

/// One case of the catalog.
#[derive(Clone, Debug)]
pub struct Case {
    pub id: String,
    pub tier: Tier,
    pub kind: Kind,
    pub expect: Expect,
}

impl Case {
    pub fn is_moe(&self) -> bool {
        matches!(self.kind, Kind::Moe(_))
    }

    /// The same case with its routing weights expected bit for bit ([`Weights::BitExact`]).
    pub fn weights_bit_exact(mut self) -> Case {
        if let Expect::Route { weights } | Expect::Moe { weights, .. } = &mut self.expect {
            *weights = Weights::BitExact;
        }
        self
    }
}

/// Work and traffic of one run of a case (for reports and `mxmoe bench`).
///
/// * `flops`: format ops count one multiply per element (two for QDQ); routing ~3 per logit;
///   MoE the two GEMMs, `M * k * (2 * 2I * H + 2 * H * I)`.
/// * `weight_bytes`: MoE only: the packed weights + scales of the local experts the batch
///   touches (what any implementation must read at least once: the bench's floor).
/// * `bytes`: everything read or written at least once: inputs, outputs, and `weight_bytes`
///   plus the biases of the touched experts.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    pub flops: f64,
    pub bytes: f64,
    pub weight_bytes: f64,
}

/// The MoE cost of `layer` over token batches of `m` tokens (averaged over the batches'
/// logits): touched local experts from the CPU router.
pub fn moe_cost(layer: &MoeLayer, m: usize, logits: &[&[f32]]) -> Result<Cost, MoeError> {
    let c = &layer.config;
    let (h, i, e, k) = (c.hidden, c.inter, c.n_experts, c.router.top_k);
    let el = layer.local_experts().max(1);
    let mut active = 0f64;
    for lg in logits {
        let r = moe::route(
            &c.router,
            lg,
            e,
            layer.weights.e_score_correction_bias.as_deref(),
        )?;
        let mut seen = vec![false; el];
        for &id in &r.topk_ids {
            if let Some(l) = layer.local_id(id as usize) {
                seen[l] = true;
            }
        }
        active += seen.iter().filter(|&&s| s).count() as f64;
    }
    active /= logits.len().max(1) as f64;
    let per_expert = layer.weight_bytes() as f64 / el as f64;
    let bias_per_expert = if layer.weights.w13_bias.is_some() {
        4.0 * (2 * i + h) as f64
    } else {
        0.0
    };
    let weight_bytes = active * per_expert;
    let io = 4.0 * (m * h * 2 + m * e) as f64;
    Ok(Cost {
        flops: (m * k) as f64 * (2.0 * 2.0 * i as f64 * h as f64 + 2.0 * h as f64 * i as f64),
        bytes: weight_bytes + active * bias_per_expert + io,
        weight_bytes,
    })
}

pub(super) fn moe_f32() -> MoeOptions {
    MoeOptions {
        accumulate: Accumulate::F32,
        intermediate: Intermediate::F32,
        taps: false,
        profile: crate::format::ProfileId::Contract,
    }
}

fn moe_expect(opts: MoeOptions) -> Expect {
    let bf16 = opts.intermediate == Intermediate::Bf16;
    Expect::Moe {
        weights: Weights::Within(Tol::ROUTE_WEIGHTS_RL2),
        output: if bf16 { Tol::MOE_BF16 } else { Tol::MOE },
        bf16_output: bf16,
    }
}

/// A MoE case with the default (f32) options.
pub fn moe_case(tier: Tier, layer: &LayerSpec, m: usize, seed: u64) -> Case {
    moe_case_opts(tier, layer, m, vec![seed], moe_f32())
}

/// A MoE case ([`MoeCase::id`]).
pub fn moe_case_opts(
    tier: Tier,
    layer: &LayerSpec,
    m: usize,
    seeds: Vec<u64>,
    opts: MoeOptions,
) -> Case {
    moe_case_of(
        tier,
        MoeCase {
            layer: layer.clone(),
            m,
            seeds,
            opts,
            saturated_token: false,
        },
    )
}

/// The case of a [`MoeCase`] (its id, its options' expectation).
pub fn moe_case_of(tier: Tier, mc: MoeCase) -> Case {
    Case {
        id: mc.id(),
        tier,
        expect: moe_expect(mc.opts),
        kind: Kind::Moe(mc),
    }
}

/// A routing case (weights within [`Tol::ROUTE_WEIGHTS`]): id
/// `route/{scoring}/e{E}-k{k}{features}{bias}/m{M}{input}`, the bias `-cbias` (synthetic) or
/// `-cbias-{name}` (adversarial), the input `-ties`, `-sweep{step}` or `-adversarial`.
pub fn route_case(tier: Tier, rc: RouteCase) -> Case {
    let r = &rc.router;
    let (bias, input) = match rc.input {
        RouteInput::Synth {
            ties,
            correction_bias,
            ..
        } => (
            if correction_bias.is_some() {
                "-cbias".into()
            } else {
                String::new()
            },
            if ties { "-ties".into() } else { String::new() },
        ),
        RouteInput::SigmoidSweep { step } => (String::new(), format!("-sweep{step}")),
        RouteInput::Adversarial { bias, .. } => (
            format!("-cbias-{}", inputs::ADVERSARIAL_BIASES[bias]),
            "-adversarial".into(),
        ),
    };
    let id = format!(
        "route/{}/e{}-k{}{}{bias}/m{}{input}",
        r.scoring,
        rc.n_experts,
        r.top_k,
        router_tag(r, false),
        rc.m,
    );
    Case {
        id,
        tier,
        expect: Expect::Route {
            weights: Weights::Within(Tol::ROUTE_WEIGHTS),
        },
        kind: Kind::Route(rc),
    }
}

/// Every case of a suite, in a fixed order (formats, routing, MoE, invalid inputs).
pub fn cases(suite: Suite) -> Vec<Case> {
    let mut v = super::cases_format::cases();
    v.extend(super::cases_moe::route_cases());
    v.extend(super::cases_moe::moe_cases());
    v.extend(Invalid::ALL.into_iter().map(|w| Case {
        id: w.id().into(),
        tier: Tier::Quick,
        kind: Kind::Invalid(w),
        expect: Expect::Error {
            contains: (w == Invalid::MoeNanLogits).then_some("NaN"),
        },
    }));
    v.retain(|c| c.tier.in_suite(suite));
    v
}
