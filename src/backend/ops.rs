//! The op contract: every op as plain data ([`Op`]), whether a backend can run it
//! ([`Support`]), and the validation of each op's inputs, **in one place**.
//!
//! [`super::Backend`] validates an op's inputs here before it dispatches to any backend, so
//! every backend sees only well-formed inputs and every backend reports bad input with the same
//! message. Backends check only their own limits (binding sizes, workgroup arrays) and answer
//! them through `supports`.

use crate::format::{check_rows, check_values, FormatError, MxFormat, MxTensor, ScaleMode};
use crate::moe::{Activation, MoeConfig, MoeError, RouterConfig, Scoring};
use crate::scheme::Scheme;

/// An op as plain data with a stable name ([`Op::id`]), used in reports and test names. The
/// fields carry what decides whether a backend can run it (not the data itself).
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Quantize {
        format: MxFormat,
        mode: ScaleMode,
    },
    Dequantize {
        format: MxFormat,
    },
    Qdq {
        format: MxFormat,
        mode: ScaleMode,
    },
    Route(RouteOp),
    MoeForward {
        scheme: Scheme,
        activation: Activation,
        route: RouteOp,
        /// Experts whose weights the layer holds.
        local_experts: usize,
        /// Stage taps requested (the intermediates of every step, for the viewer).
        taps: bool,
    },
}

/// The routing part of an op: what a router needs to be able to do.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteOp {
    pub scoring: Scoring,
    pub top_k: usize,
    /// Group-limited (`n_group` groups); `None` = no grouping.
    pub n_group: Option<usize>,
    /// A DeepSeek `e_score_correction_bias` takes part in the selection.
    pub correction_bias: bool,
    /// The router's width.
    pub n_experts: usize,
}

impl RouteOp {
    /// The routing op of a router configuration over `n_experts` experts.
    pub fn of(cfg: &RouterConfig, n_experts: usize, correction_bias: bool) -> RouteOp {
        RouteOp {
            scoring: cfg.scoring,
            top_k: cfg.top_k,
            n_group: cfg.n_group,
            correction_bias,
            n_experts,
        }
    }

    fn id(&self) -> String {
        format!(
            "route/{}/k{}{}{}",
            self.scoring,
            self.top_k,
            if self.n_group.is_some() {
                "/grouped"
            } else {
                ""
            },
            if self.correction_bias { "/bias" } else { "" }
        )
    }
}

impl Op {
    /// The stable name of the op (independent of sizes).
    pub fn id(&self) -> String {
        match self {
            Op::Quantize { format, mode } => format!("quantize/{format}/{mode}"),
            Op::Dequantize { format } => format!("dequantize/{format}"),
            Op::Qdq { format, mode } => format!("qdq/{format}/{mode}"),
            Op::Route(r) => r.id(),
            Op::MoeForward {
                scheme, activation, ..
            } => format!("moe/{scheme}/{activation}"),
        }
    }

    /// The routing op of a router configuration.
    pub fn route_of(cfg: &RouterConfig, n_experts: usize, correction_bias: bool) -> Op {
        Op::Route(RouteOp::of(cfg, n_experts, correction_bias))
    }

    /// The forward op of a layer configuration.
    pub fn moe_of(cfg: &MoeConfig, correction_bias: bool, taps: bool) -> Op {
        Op::MoeForward {
            scheme: cfg.scheme,
            activation: cfg.activation,
            route: RouteOp::of(&cfg.router, cfg.n_experts, correction_bias),
            local_experts: cfg.local_experts,
            taps,
        }
    }
}

/// A backend's answer to "can you run this op?": yes, or no and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Support {
    Supported,
    Unsupported { reason: String },
}

impl Support {
    pub fn is_supported(&self) -> bool {
        matches!(self, Support::Supported)
    }

    /// `Supported` when `ok`, else `Unsupported` with the reason `why()` gives.
    pub fn when(ok: bool, why: impl FnOnce() -> String) -> Support {
        if ok {
            Support::Supported
        } else {
            Support::Unsupported { reason: why() }
        }
    }

    /// The first `Unsupported` of two answers.
    pub fn and(self, other: impl FnOnce() -> Support) -> Support {
        match self {
            Support::Supported => other(),
            no => no,
        }
    }
}

/// Inputs of quantize: a row-major f32 tensor of `shape`, last dimension a multiple of 32.
pub fn validate_quantize(x: &[f32], shape: &[usize]) -> Result<(), FormatError> {
    check_values(x.len(), shape)
}

/// Inputs of dequantize: a packed tensor whose data and scales fit its shape and format.
pub fn validate_dequantize(t: &MxTensor) -> Result<(), FormatError> {
    t.validate()
}

/// Inputs of QDQ: rows of `k` values, `k` a multiple of 32.
pub fn validate_qdq(x: &[f32], k: usize) -> Result<(), FormatError> {
    check_rows(x.len(), k)
}

/// Inputs of routing: `logits` `[M, n_experts]`, finite; returns M.
pub fn validate_route(
    cfg: &RouterConfig,
    logits: &[f32],
    n_experts: usize,
    correction_bias: Option<&[f32]>,
) -> Result<usize, MoeError> {
    crate::moe::route::check_inputs(cfg, logits, n_experts, correction_bias)
}

/// Inputs of a MoE forward: `hidden` `[M, H]` (M >= 1), `logits` `[M, n_experts]`; returns M.
/// The layer itself was validated when it was built or prepared.
pub fn validate_moe(cfg: &MoeConfig, hidden: &[f32], logits: &[f32]) -> Result<usize, MoeError> {
    cfg.check_batch(hidden, logits)
}
