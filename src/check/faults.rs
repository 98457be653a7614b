//! Known faults of MoE implementations, as data: each [`Fault`] has a stable id (the vocabulary
//! of `mxmoe verify`'s diagnosis, docs/NUMERICS.md 10.5) and a way to produce the reference
//! output with that fault injected. Most are forward hooks ([`moe::Probe`]) or options; the
//! packing and layout faults transform the layer's packed weights; the routing faults change
//! the router configuration or the routing itself.

use crate::format::{Packing, ProfileId, ScaleMode};
use crate::io::TokenBatch;
use crate::moe::{
    self, Activation, Intermediate, MoeError, MoeLayer, MoeOptions, MoeOutput, Probe, Routing,
    Scoring,
};

/// A known fault (see [`Fault::id`] for the vocabulary).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The input QDQ is left out (GEMM1 reads the unquantized input).
    InputQdqMissing,
    /// The intermediate QDQ is left out (NUMERICS.md 13: a known bug elsewhere).
    IntermediateQdqMissing,
    /// The activation QDQs use another E8M0 scale mode than the layer's.
    ActivationScaleMode(ScaleMode),
    /// FP4 weights read with the two nibbles of each byte swapped.
    Fp4NibblesSwapped,
    /// FP6 weights read with the first and third byte of each 3-byte group swapped.
    Fp6BytesSwapped,
    /// The gate and up halves of w13 swapped (interleaved pairs for SwiGLU-OAI).
    GateUpSwapped,
    /// The selected routing weights are not divided by their sum.
    RenormalizeMissing,
    /// GEMM dot products accumulated in bf16 instead of fp32.
    Bf16Accumulation,
    /// Intermediates rounded to bf16 (vLLM's precision; a fault only against the f32 contract).
    Bf16Intermediates,
    /// The router weight multiplies the GEMM2 output instead of the GEMM1 accumulator (Llama 4).
    RouterWeightOnInputMissing,
    /// Other experts chosen than the reference's.
    RoutingDiffers,
}

impl Fault {
    /// Every fault, in the order of the vocabulary (ties in a diagnosis keep this order).
    pub const ALL: [Fault; 14] = [
        Fault::InputQdqMissing,
        Fault::IntermediateQdqMissing,
        Fault::ActivationScaleMode(ScaleMode::Floor),
        Fault::ActivationScaleMode(ScaleMode::Ceil),
        Fault::ActivationScaleMode(ScaleMode::RCeil),
        Fault::ActivationScaleMode(ScaleMode::Even),
        Fault::Fp4NibblesSwapped,
        Fault::Fp6BytesSwapped,
        Fault::GateUpSwapped,
        Fault::RenormalizeMissing,
        Fault::Bf16Accumulation,
        Fault::Bf16Intermediates,
        Fault::RouterWeightOnInputMissing,
        Fault::RoutingDiffers,
    ];

    /// The stable id.
    pub const fn id(self) -> &'static str {
        match self {
            Fault::InputQdqMissing => "input_qdq_missing",
            Fault::IntermediateQdqMissing => "intermediate_qdq_missing",
            Fault::ActivationScaleMode(ScaleMode::Floor) => "activation_scale_mode_floor",
            Fault::ActivationScaleMode(ScaleMode::Ceil) => "activation_scale_mode_ceil",
            Fault::ActivationScaleMode(ScaleMode::RCeil) => "activation_scale_mode_rceil",
            Fault::ActivationScaleMode(ScaleMode::Even) => "activation_scale_mode_even",
            Fault::Fp4NibblesSwapped => "fp4_nibbles_swapped",
            Fault::Fp6BytesSwapped => "fp6_bytes_swapped",
            Fault::GateUpSwapped => "gate_up_swapped",
            Fault::RenormalizeMissing => "renormalize_missing",
            Fault::Bf16Accumulation => "bf16_accumulation",
            Fault::Bf16Intermediates => "bf16_intermediates",
            Fault::RouterWeightOnInputMissing => "router_weight_on_input_missing",
            Fault::RoutingDiffers => "routing_differs",
        }
    }

    /// The fault of an id.
    pub fn from_id(id: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.id() == id)
    }

    /// Why this fault cannot show on `layer` (its output would be the contract's), or `None`.
    pub fn not_applicable(self, layer: &MoeLayer) -> Option<&'static str> {
        let c = &layer.config;
        let r = &c.router;
        let quantized_acts = c.scheme.activation.is_some();
        match self {
            Fault::InputQdqMissing | Fault::IntermediateQdqMissing if !quantized_acts => {
                Some("weight-only scheme: no activation QDQ")
            }
            Fault::ActivationScaleMode(_) if !quantized_acts => {
                Some("weight-only scheme: no activation QDQ")
            }
            Fault::ActivationScaleMode(m) if m == c.act_scale_mode => {
                Some("this is the layer's own scale mode")
            }
            Fault::Fp4NibblesSwapped if c.scheme.weight.packing() != Packing::Nibbles => {
                Some("the weights are not FP4")
            }
            Fault::Fp6BytesSwapped if c.scheme.weight.packing() != Packing::FourInThree => {
                Some("the weights are not FP6")
            }
            Fault::RenormalizeMissing if !r.renormalize || r.scoring == Scoring::TopkSoftmax => {
                Some("the router does not renormalize (or its weights already sum to 1)")
            }
            Fault::RouterWeightOnInputMissing if !r.apply_router_weight_on_input => {
                Some("the layer applies the router weight on the output")
            }
            Fault::RoutingDiffers if r.top_k >= c.n_experts => Some("every expert is selected"),
            _ => None,
        }
    }

    /// The reference output (f64 accumulation, f32 intermediates unless the fault says
    /// otherwise) with this fault injected. For [`Fault::RoutingDiffers`], `routing` is the
    /// routing to run with (a result's own ids and weights); without it, each token's last
    /// choice is replaced by the lowest-index expert it did not choose (same weight).
    pub fn inject(
        self,
        layer: &MoeLayer,
        batch: &TokenBatch,
        routing: Option<&Routing>,
    ) -> Result<MoeOutput, MoeError> {
        self.inject_with(layer, batch, routing, ProfileId::Contract)
    }

    /// [`Fault::inject`] with the activation QDQs under a compatibility profile (the contract's
    /// QDQ where the peer lacks the injected scale mode).
    pub fn inject_with(
        self,
        layer: &MoeLayer,
        batch: &TokenBatch,
        routing: Option<&Routing>,
        profile: ProfileId,
    ) -> Result<MoeOutput, MoeError> {
        let opts = MoeOptions {
            profile,
            ..MoeOptions::default()
        };
        self.inject_opts(layer, batch, routing, opts)
    }

    /// [`Fault::inject_with`] from given forward options (the profile, `taps` for the
    /// per-stage comparison); the fault overrides what it injects.
    pub fn inject_opts(
        self,
        layer: &MoeLayer,
        batch: &TokenBatch,
        routing: Option<&Routing>,
        mut opts: MoeOptions,
    ) -> Result<MoeOutput, MoeError> {
        let profile = opts.profile;
        let mut l = layer.clone();
        let mut probe = Probe::default();
        match self {
            Fault::InputQdqMissing => probe.skip_input_qdq = true,
            Fault::IntermediateQdqMissing => probe.skip_intermediate_qdq = true,
            Fault::ActivationScaleMode(m) => {
                l.config.act_scale_mode = m;
                if !profile.spec().modes.contains(&m) {
                    opts.profile = ProfileId::Contract;
                }
            }
            Fault::Fp4NibblesSwapped => {
                for t in [&mut l.weights.w13, &mut l.weights.w2] {
                    t.data.iter_mut().for_each(|b| *b = b.rotate_left(4));
                }
            }
            Fault::Fp6BytesSwapped => {
                for t in [&mut l.weights.w13, &mut l.weights.w2] {
                    t.data.chunks_exact_mut(3).for_each(|g| g.swap(0, 2));
                }
            }
            Fault::GateUpSwapped => swap_gate_up(&mut l),
            Fault::RenormalizeMissing => l.config.router.renormalize = false,
            Fault::Bf16Accumulation => probe.bf16_accumulation = true,
            Fault::Bf16Intermediates => opts.intermediate = Intermediate::Bf16,
            Fault::RouterWeightOnInputMissing => {
                l.config.router.apply_router_weight_on_input = false
            }
            Fault::RoutingDiffers => {
                probe.routing = Some(match routing {
                    Some(r) => r.clone(),
                    None => other_experts(layer, batch)?,
                })
            }
        }
        moe::forward_probe(&l, &batch.hidden, &batch.logits, opts, &probe)
    }
}

/// The reference routing with each token's last choice replaced by the lowest-index expert the
/// token did not choose (the canonical `routing_differs` injection).
pub fn other_experts(layer: &MoeLayer, batch: &TokenBatch) -> Result<Routing, MoeError> {
    let c = &layer.config;
    let mut r = moe::route(
        &c.router,
        &batch.logits,
        c.n_experts,
        layer.weights.e_score_correction_bias.as_deref(),
    )?;
    let k = r.top_k;
    for ids in r.topk_ids.chunks_mut(k) {
        if let Some(e) = (0..c.n_experts as i32).find(|e| !ids.contains(e)) {
            ids[k - 1] = e;
        }
    }
    Ok(r)
}

/// Swap the gate and up rows of w13 (and its bias): rows `[0, I)` with `[I, 2I)` for SiLU,
/// even with odd rows for SwiGLU-OAI.
fn swap_gate_up(l: &mut MoeLayer) {
    let i = l.config.inter;
    let pairs: Vec<(usize, usize)> = match l.config.activation {
        Activation::Silu => (0..i).map(|r| (r, i + r)).collect(),
        Activation::SwigluOai => (0..i).map(|r| (2 * r, 2 * r + 1)).collect(),
    };
    let w = &mut l.weights.w13;
    let (rb, sb) = (w.row_bytes(), w.k() / crate::format::BLOCK);
    for e in 0..l.config.local_experts {
        let base = e * 2 * i;
        for &(a, b) in &pairs {
            let (a, b) = (base + a, base + b);
            for j in 0..rb {
                w.data.swap(a * rb + j, b * rb + j);
            }
            for j in 0..sb {
                w.scales.swap(a * sb + j, b * sb + j);
            }
            if let Some(bias) = l.weights.w13_bias.as_mut() {
                bias.swap(a, b);
            }
        }
    }
}
