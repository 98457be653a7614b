//! MoE configuration, routing, layer weights and the reference forward pass.
//!
//! Dataflow (ARCHITECTURE.md "MoE forward dataflow", NUMERICS.md 10.2/10.3):
//! route -> QDQ(input) -> GEMM1 (+bias, fp32 accumulate) -> activation -> **QDQ(intermediate)**
//! -> GEMM2 (+bias) x router weight -> deterministic fp32 sum over the top-k slots.

pub mod budget;
pub mod exact_math;
pub mod gate;
pub mod layer;
pub mod presets;
pub mod reference;
pub mod route;
pub mod synth;

pub use gate::RouterWeights;
pub use layer::{MoeConfig, MoeLayer, MoeWeights};
pub use reference::{
    forward, forward_naive, forward_probe, MoeOptions, MoeOutput, Probe, StageTaps,
};
pub use route::{route, Routing};

use std::fmt;
use std::str::FromStr;

/// Errors of MoE configuration, shapes and inputs. Every variant says what was expected.
#[derive(Debug, thiserror::Error)]
pub enum MoeError {
    #[error("invalid MoE configuration: {0}")]
    Config(String),
    #[error("shape mismatch: {0}")]
    Shape(String),
    #[error("invalid input: {0}")]
    Input(String),
    /// A size that overflows or exceeds the memory available (checked before allocating).
    #[error("too large: {0}")]
    TooLarge(String),
    #[error(transparent)]
    Format(#[from] crate::format::FormatError),
    #[error(transparent)]
    Profile(#[from] crate::format::ProfileError),
}

/// The expert activation between the two GEMMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Activation {
    /// `silu(gate) * up`; gate = rows `[0, I)` of w13, up = rows `[I, 2I)` (vLLM layout).
    #[default]
    Silu,
    /// gpt-oss SwiGLU: interleaved rows (even = gate, odd = linear), gate clamped above at 7,
    /// linear clamped to [-7, 7], `out = g * sigmoid(1.702 g) * (lin + 1)` (NUMERICS.md 11).
    SwigluOai,
}

impl Activation {
    pub const ALL: [Activation; 2] = [Activation::Silu, Activation::SwigluOai];
    /// A small integer id shared with the WGSL shaders (`ACT_*` in the generated preamble).
    pub const fn id(self) -> u32 {
        match self {
            Activation::Silu => 0,
            Activation::SwigluOai => 1,
        }
    }
    pub const fn name(self) -> &'static str {
        match self {
            Activation::Silu => "silu",
            Activation::SwigluOai => "swigluoai",
        }
    }
}
impl fmt::Display for Activation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
impl FromStr for Activation {
    type Err = MoeError;
    fn from_str(s: &str) -> Result<Self, MoeError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "silu" | "swiglu" => Ok(Activation::Silu),
            "swigluoai" | "swiglu_oai" => Ok(Activation::SwigluOai),
            _ => Err(MoeError::Config(format!(
                "unknown activation '{s}' (expected silu or swigluoai)"
            ))),
        }
    }
}

/// How router logits become scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Scoring {
    /// fp32 softmax over all experts, then top-k (vLLM `fused_topk`), optional renormalize.
    #[default]
    Softmax,
    /// gpt-oss: top-k of the logits, then a softmax over the selected logits only.
    TopkSoftmax,
    /// Sigmoid scores (DeepSeek-V3/R1 with `e_score_correction_bias`, Llama 4 top-1).
    Sigmoid,
}

impl Scoring {
    pub const ALL: [Scoring; 3] = [Scoring::Softmax, Scoring::TopkSoftmax, Scoring::Sigmoid];
    /// A small integer id shared with the WGSL shaders (`SCORING_*` in the generated preamble).
    pub const fn id(self) -> u32 {
        match self {
            Scoring::Softmax => 0,
            Scoring::TopkSoftmax => 1,
            Scoring::Sigmoid => 2,
        }
    }
    pub const fn name(self) -> &'static str {
        match self {
            Scoring::Softmax => "softmax",
            Scoring::TopkSoftmax => "topk_softmax",
            Scoring::Sigmoid => "sigmoid",
        }
    }
}
impl fmt::Display for Scoring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
impl FromStr for Scoring {
    type Err = MoeError;
    fn from_str(s: &str) -> Result<Self, MoeError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "softmax" => Ok(Scoring::Softmax),
            "topk_softmax" | "topk-softmax" | "gpt-oss" | "gptoss" => Ok(Scoring::TopkSoftmax),
            "sigmoid" => Ok(Scoring::Sigmoid),
            _ => Err(MoeError::Config(format!(
                "unknown scoring '{s}' (expected softmax, topk_softmax or sigmoid)"
            ))),
        }
    }
}

/// Router configuration (the routing keys of a layer bundle's metadata).
#[derive(Clone, Debug, PartialEq)]
pub struct RouterConfig {
    pub scoring: Scoring,
    pub top_k: usize,
    /// Divide the selected weights by their sum.
    pub renormalize: bool,
    /// Group-limited routing (DeepSeek): experts split into `n_group` groups, only the best
    /// `topk_group` groups are eligible. `None` = no grouping.
    pub n_group: Option<usize>,
    pub topk_group: Option<usize>,
    /// Multiplies the final weights (DeepSeek-V3: 2.5). 1.0 = none.
    pub routed_scaling_factor: f32,
    /// Llama 4: the router weight multiplies the GEMM1 accumulator instead of the GEMM2 output
    /// (the input is QDQ'd first, NUMERICS.md 10.2). Requires `top_k == 1`.
    pub apply_router_weight_on_input: bool,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            scoring: Scoring::Softmax,
            top_k: 2,
            renormalize: true,
            n_group: None,
            topk_group: None,
            routed_scaling_factor: 1.0,
            apply_router_weight_on_input: false,
        }
    }
}

/// Accumulation precision of the reference GEMMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Accumulate {
    /// fp32 accumulation (what GPU kernels do): 8 interleaved partial sums, combined pairwise.
    F32,
    /// f64 accumulation, f64 epilogues: the oracle.
    #[default]
    F64,
}

impl Accumulate {
    pub const fn name(self) -> &'static str {
        match self {
            Accumulate::F32 => "f32",
            Accumulate::F64 => "f64",
        }
    }
}

impl FromStr for Accumulate {
    type Err = MoeError;
    fn from_str(s: &str) -> Result<Self, MoeError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" => Ok(Accumulate::F32),
            "f64" | "fp64" => Ok(Accumulate::F64),
            _ => Err(MoeError::Config(format!(
                "unknown accumulation '{s}' (expected f32 or f64)"
            ))),
        }
    }
}

/// Precision of intermediates between the steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Intermediate {
    /// Keep fp32 (the contract default).
    #[default]
    F32,
    /// Round to bf16 where vLLM does (after GEMM1's epilogue, after the activation, after
    /// GEMM2's epilogue, and the final sum), for parity runs.
    Bf16,
}

impl Intermediate {
    pub const fn name(self) -> &'static str {
        match self {
            Intermediate::F32 => "f32",
            Intermediate::Bf16 => "bf16",
        }
    }
}

impl FromStr for Intermediate {
    type Err = MoeError;
    fn from_str(s: &str) -> Result<Self, MoeError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" => Ok(Intermediate::F32),
            "bf16" => Ok(Intermediate::Bf16),
            _ => Err(MoeError::Config(format!(
                "unknown intermediate precision '{s}' (expected f32 or bf16)"
            ))),
        }
    }
}
