//! The MoE layer, split into what configures it and what it weighs:
//!
//! * [`MoeConfig`]: scheme, activation, routing keys, activation scale mode and shapes. Small,
//!   `Clone`, kept by every backend's prepared handle.
//! * [`MoeWeights`]: packed experts and scales (vLLM/Quark layout), biases, the DeepSeek
//!   correction bias and the `expert_map`. Large; a backend's `prepare` puts them where it
//!   computes (GPU buffers for wgpu, a borrow for the CPU).

use super::{Activation, MoeError, RouterConfig};
use crate::format::{MxTensor, ScaleMode, BLOCK};
use crate::scheme::Scheme;

/// What a layer computes, without its weights.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    pub scheme: Scheme,
    pub activation: Activation,
    pub router: RouterConfig,
    /// Scale mode of both activation QDQ points (default `even`, docs/NUMERICS.md decision 1).
    pub act_scale_mode: ScaleMode,
    /// The router's width (global experts). Without `expert_map` it equals `local_experts`.
    pub n_experts: usize,
    /// Experts whose weights the layer holds (`E_local`).
    pub local_experts: usize,
    /// Hidden size H.
    pub hidden: usize,
    /// Intermediate size I (per expert).
    pub inter: usize,
}

impl MoeConfig {
    /// Check a token batch against the layer's shapes: `hidden` `[M, H]` with M >= 1, `logits`
    /// `[M, n_experts]`; returns M. (Finite logits are the router's check.)
    pub fn check_batch(&self, hidden: &[f32], logits: &[f32]) -> Result<usize, MoeError> {
        let h = self.hidden;
        if h == 0 || hidden.is_empty() || !hidden.len().is_multiple_of(h) {
            return Err(MoeError::Shape(format!(
                "hidden_states has {} values, expected [M, {h}] with M >= 1",
                hidden.len()
            )));
        }
        let m = hidden.len() / h;
        if logits.len() != m * self.n_experts {
            return Err(MoeError::Shape(format!(
                "router_logits has {} values, expected [M = {m}, E = {}] = {}",
                logits.len(),
                self.n_experts,
                m * self.n_experts
            )));
        }
        Ok(m)
    }
}

/// A layer's weights. Shapes are those of [`MoeConfig`]:
///
/// * `w13`: `[E_local, 2I, H]`, rows `[0, I)` gate and `[I, 2I)` up for `silu`; interleaved
///   (even = gate, odd = linear) for `swigluoai`.
/// * `w2`: `[E_local, H, I]`.
/// * `w13_bias`: `[E_local * 2I]`, `w2_bias`: `[E_local * H]` (f32), optional.
/// * `e_score_correction_bias`: `[n_experts]` (DeepSeek-V3/R1), used for selection only.
/// * `expert_map`: `[n_experts]`, global id -> local expert index, or -1 for experts that live
///   elsewhere (they contribute nothing).
#[derive(Clone, Debug)]
pub struct MoeWeights {
    pub w13: MxTensor,
    pub w2: MxTensor,
    pub w13_bias: Option<Vec<f32>>,
    pub w2_bias: Option<Vec<f32>>,
    pub e_score_correction_bias: Option<Vec<f32>>,
    pub expert_map: Option<Vec<i32>>,
}

impl MoeWeights {
    /// Bytes of packed weights + scales.
    pub fn weight_bytes(&self) -> usize {
        self.w13.data.len() + self.w13.scales.len() + self.w2.data.len() + self.w2.scales.len()
    }

    /// The local expert index of a global id, if local.
    pub fn local_id(&self, global: usize) -> Option<usize> {
        local_id(self.expert_map.as_deref(), global)
    }
}

/// The local expert index of a global id under an optional `expert_map`.
pub fn local_id(expert_map: Option<&[i32]>, global: usize) -> Option<usize> {
    match expert_map {
        None => Some(global),
        Some(m) => {
            let l = *m.get(global)?;
            (l >= 0).then_some(l as usize)
        }
    }
}

/// One MoE layer: its configuration and its weights (which stay packed; backends dequantize
/// on the fly).
#[derive(Clone, Debug)]
pub struct MoeLayer {
    pub config: MoeConfig,
    pub weights: MoeWeights,
}

impl MoeLayer {
    /// A layer from its configuration and weights, checked ([`MoeLayer::validate`]).
    pub fn new(config: MoeConfig, weights: MoeWeights) -> Result<MoeLayer, MoeError> {
        let layer = MoeLayer { config, weights };
        layer.validate()?;
        Ok(layer)
    }

    /// Experts whose weights this layer holds.
    pub fn local_experts(&self) -> usize {
        self.config.local_experts
    }

    /// The local expert index of a global id, if local.
    pub fn local_id(&self, global: usize) -> Option<usize> {
        self.weights.local_id(global)
    }

    /// Check every shape and configuration invariant once; backends rely on it.
    pub fn validate(&self) -> Result<(), MoeError> {
        let c = &self.config;
        let w = &self.weights;
        let (h, i, e) = (c.hidden, c.inter, c.n_experts);
        if h == 0 || h % BLOCK != 0 {
            return Err(MoeError::Shape(format!(
                "hidden size H = {h} must be a positive multiple of 32"
            )));
        }
        if i == 0 || i % BLOCK != 0 {
            return Err(MoeError::Shape(format!(
                "intermediate size I = {i} must be a positive multiple of 32"
            )));
        }
        if e == 0 {
            return Err(MoeError::Config("the layer has no experts".into()));
        }
        // Every product below is of these sizes; refuse sizes whose products overflow.
        if super::budget::product(&[c.local_experts.max(e), 3, h, i]).is_none() {
            return Err(MoeError::TooLarge(format!(
                "{} experts x 3 x H {h} x I {i} elements overflows 64-bit arithmetic",
                c.local_experts.max(e)
            )));
        }
        let el = c.local_experts;
        if w.w13.shape.first() == Some(&0) || el == 0 {
            return Err(MoeError::Shape(format!(
                "w13_weight has shape {:?}: no experts (expected [E, 2I, H] with E >= 1)",
                w.w13.shape
            )));
        }
        if w.w13.shape.first() != Some(&el) {
            return Err(MoeError::Shape(format!(
                "w13_weight holds {} experts, the configuration says {el}",
                w.w13.shape.first().copied().unwrap_or(0)
            )));
        }
        if w.w13.format != c.scheme.weight || w.w2.format != c.scheme.weight {
            return Err(MoeError::Config(format!(
                "weights are {} / {} but scheme {} wants {}",
                w.w13.format, w.w2.format, c.scheme, c.scheme.weight
            )));
        }
        if w.w13.shape != [el, 2 * i, h] {
            return Err(MoeError::Shape(format!(
                "w13_weight has logical shape {:?}, expected [{el}, {}, {h}] ([E, 2I, H])",
                w.w13.shape,
                2 * i
            )));
        }
        if w.w2.shape != [el, h, i] {
            return Err(MoeError::Shape(format!(
                "w2_weight has logical shape {:?}, expected [{el}, {h}, {i}] ([E, H, I])",
                w.w2.shape
            )));
        }
        if let Some(b) = &w.w13_bias {
            if b.len() != el * 2 * i {
                return Err(MoeError::Shape(format!(
                    "w13_bias has {} elements, expected {el} x {} = {}",
                    b.len(),
                    2 * i,
                    el * 2 * i
                )));
            }
        }
        if let Some(b) = &w.w2_bias {
            if b.len() != el * h {
                return Err(MoeError::Shape(format!(
                    "w2_bias has {} elements, expected {el} x {h} = {}",
                    b.len(),
                    el * h
                )));
            }
        }
        match &w.expert_map {
            None if el != e => {
                return Err(MoeError::Shape(format!(
                    "the router has {e} experts but the weights hold {el}; an expert_map is needed"
                )))
            }
            None => {}
            Some(m) => {
                if m.len() != e {
                    return Err(MoeError::Shape(format!(
                        "expert_map has {} entries, expected one per router expert ({e})",
                        m.len()
                    )));
                }
                if let Some(bad) = m.iter().find(|&&v| v < -1 || v >= el as i32) {
                    return Err(MoeError::Config(format!(
                        "expert_map entry {bad} is outside [-1, {el}) (local experts: {el})"
                    )));
                }
                let mut owner = vec![usize::MAX; el];
                for (g, &v) in m.iter().enumerate().filter(|(_, &v)| v >= 0) {
                    let o = &mut owner[v as usize];
                    if *o != usize::MAX {
                        return Err(MoeError::Config(format!(
                            "expert_map maps global experts {} and {g} both to local expert {v} \
                             (each local expert belongs to one global id)",
                            *o
                        )));
                    }
                    *o = g;
                }
            }
        }
        if let Some(b) = &w.e_score_correction_bias {
            if let Some(p) = b.iter().position(|v| !v.is_finite()) {
                return Err(MoeError::Input(format!(
                    "e_score_correction_bias[{p}] is {} (the bias must be finite)",
                    b[p]
                )));
            }
            if b.len() != e {
                return Err(MoeError::Shape(format!(
                    "e_score_correction_bias has {} entries, expected {e}",
                    b.len()
                )));
            }
        }
        let r = &c.router;
        if r.top_k == 0 || r.top_k > e {
            return Err(MoeError::Config(format!(
                "top_k = {} must be in [1, {e}] (the number of experts)",
                r.top_k
            )));
        }
        match (r.n_group, r.topk_group) {
            (None, None) => {}
            (Some(g), Some(tg)) => {
                if g == 0 || e % g != 0 {
                    return Err(MoeError::Config(format!(
                        "n_group = {g} must divide the number of experts ({e})"
                    )));
                }
                if tg == 0 || tg > g {
                    return Err(MoeError::Config(format!(
                        "topk_group = {tg} must be in [1, n_group = {g}]"
                    )));
                }
                if r.top_k > tg * (e / g) {
                    return Err(MoeError::Config(format!(
                        "top_k = {} exceeds the experts in the {tg} eligible groups ({})",
                        r.top_k,
                        tg * (e / g)
                    )));
                }
            }
            _ => {
                return Err(MoeError::Config(
                    "n_group and topk_group must be given together".into(),
                ))
            }
        }
        if r.apply_router_weight_on_input && r.top_k != 1 {
            return Err(MoeError::Config(format!(
                "apply_router_weight_on_input needs top_k = 1 (got {}), as in vLLM",
                r.top_k
            )));
        }
        let f = r.routed_scaling_factor;
        if !(f.is_finite() && f > 0.0) {
            return Err(MoeError::Config(format!(
                "routed_scaling_factor must be finite and > 0 (it multiplies the routing \
                 weights), got {f}"
            )));
        }
        Ok(())
    }

    /// Bytes of packed weights + scales.
    pub fn weight_bytes(&self) -> usize {
        self.weights.weight_bytes()
    }
}
