//! Backends: a closed enum. Each answers `supports(&op)` and runs ops; an op a backend cannot
//! run is reported UNSUPPORTED (never silently passed).
//!
//! Contract for every backend (NUMERICS.md): quantize / dequantize / QDQ / packing are
//! **bit-exact** against the CPU reference (including NaN/Inf blocks, zero blocks, subnormal
//! inputs and ±0); routing gives exactly the CPU ids; MoE outputs agree with the CPU reference
//! within a relative-L2 bound (GEMM accumulation order differs between backends).

pub mod cpu;
pub mod hip;
pub mod wgpu;

use crate::format::{FormatError, MxFormat, MxTensor, ScaleMode};
use crate::moe::{
    Activation, MoeError, MoeLayer, MoeOptions, MoeOutput, RouterConfig, Routing, Scoring,
};
use crate::scheme::Scheme;
use std::fmt;
use std::str::FromStr;

/// An op as plain data with a stable name ([`Op::id`]), used in reports and test names.
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
    Route {
        scoring: Scoring,
        top_k: usize,
        grouped: bool,
    },
    MoeForward {
        scheme: Scheme,
        activation: Activation,
    },
}

impl Op {
    pub fn id(&self) -> String {
        match self {
            Op::Quantize { format, mode } => format!("quantize/{format}/{mode}"),
            Op::Dequantize { format } => format!("dequantize/{format}"),
            Op::Qdq { format, mode } => format!("qdq/{format}/{mode}"),
            Op::Route {
                scoring,
                top_k,
                grouped,
            } => {
                format!(
                    "route/{scoring}/k{top_k}{}",
                    if *grouped { "/grouped" } else { "" }
                )
            }
            Op::MoeForward { scheme, activation } => format!("moe/{scheme}/{activation}"),
        }
    }
    /// The routing op of a router configuration.
    pub fn route_of(cfg: &RouterConfig) -> Op {
        Op::Route {
            scoring: cfg.scoring,
            top_k: cfg.top_k,
            grouped: cfg.n_group.is_some(),
        }
    }
}

/// Errors of backends. Variants carry the op or sizes they concern.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("backend {backend} does not support {op}")]
    Unsupported { backend: String, op: String },
    #[error("backend '{0}' is not compiled in (rebuild with --features {0})")]
    NotCompiled(&'static str),
    #[error("no GPU adapter found{0}")]
    NoAdapter(String),
    #[error("GPU device error: {0}")]
    Device(String),
    #[error("out of device memory: {0}")]
    OutOfMemory(String),
    #[error(transparent)]
    Moe(#[from] MoeError),
    #[error(transparent)]
    Format(#[from] FormatError),
}

/// Which backend to use, as named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackendKind {
    Cpu,
    Wgpu,
    Hip,
    /// wgpu when an adapter exists, else the CPU.
    #[default]
    Auto,
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(BackendKind::Cpu),
            "wgpu" | "gpu" => Ok(BackendKind::Wgpu),
            "hip" => Ok(BackendKind::Hip),
            "auto" => Ok(BackendKind::Auto),
            _ => Err(format!(
                "unknown backend '{s}' (expected cpu, wgpu, hip or auto)"
            )),
        }
    }
}

/// A live backend.
pub enum Backend {
    Cpu(cpu::CpuBackend),
    Wgpu(wgpu::WgpuBackend),
    Hip(hip::HipBackend),
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Backend({}: {})", self.name(), self.adapter())
    }
}

impl Backend {
    /// Open a backend. `adapter` filters GPU adapters by a name substring (also read from
    /// `MXMOE_ADAPTER` by the wgpu backend).
    pub fn open(kind: BackendKind, adapter: Option<&str>) -> Result<Backend, BackendError> {
        match kind {
            BackendKind::Cpu => Ok(Backend::Cpu(cpu::CpuBackend)),
            BackendKind::Wgpu => Ok(Backend::Wgpu(wgpu::WgpuBackend::new(adapter)?)),
            BackendKind::Hip => Ok(Backend::Hip(hip::HipBackend::new()?)),
            BackendKind::Auto => match wgpu::WgpuBackend::new(adapter) {
                Ok(b) => Ok(Backend::Wgpu(b)),
                Err(_) => Ok(Backend::Cpu(cpu::CpuBackend)),
            },
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Backend::Cpu(_) => "cpu",
            Backend::Wgpu(_) => "wgpu",
            Backend::Hip(_) => "hip",
        }
    }

    /// The device this backend runs on, in words (adapter name, driver).
    pub fn adapter(&self) -> String {
        match self {
            Backend::Cpu(b) => b.adapter(),
            Backend::Wgpu(b) => b.adapter(),
            Backend::Hip(b) => b.adapter(),
        }
    }

    pub fn supports(&self, op: &Op) -> bool {
        match self {
            Backend::Cpu(b) => b.supports(op),
            Backend::Wgpu(b) => b.supports(op),
            Backend::Hip(b) => b.supports(op),
        }
    }

    fn require(&self, op: Op) -> Result<(), BackendError> {
        if self.supports(&op) {
            Ok(())
        } else {
            Err(BackendError::Unsupported {
                backend: self.name().into(),
                op: op.id(),
            })
        }
    }

    /// Quantize a row-major f32 tensor (last dimension a multiple of 32).
    pub fn quantize(
        &self,
        format: MxFormat,
        mode: ScaleMode,
        x: &[f32],
        shape: &[usize],
    ) -> Result<MxTensor, BackendError> {
        self.require(Op::Quantize { format, mode })?;
        match self {
            Backend::Cpu(b) => b.quantize(format, mode, x, shape),
            Backend::Wgpu(b) => b.quantize(format, mode, x, shape),
            Backend::Hip(b) => b.quantize(format, mode, x, shape),
        }
    }

    pub fn dequantize(&self, t: &MxTensor) -> Result<Vec<f32>, BackendError> {
        self.require(Op::Dequantize { format: t.format })?;
        match self {
            Backend::Cpu(b) => b.dequantize(t),
            Backend::Wgpu(b) => b.dequantize(t),
            Backend::Hip(b) => b.dequantize(t),
        }
    }

    /// Quantize-dequantize a row-major buffer with last dimension `k`.
    pub fn qdq(
        &self,
        format: MxFormat,
        mode: ScaleMode,
        x: &[f32],
        k: usize,
    ) -> Result<Vec<f32>, BackendError> {
        self.require(Op::Qdq { format, mode })?;
        match self {
            Backend::Cpu(b) => b.qdq(format, mode, x, k),
            Backend::Wgpu(b) => b.qdq(format, mode, x, k),
            Backend::Hip(b) => b.qdq(format, mode, x, k),
        }
    }

    pub fn route(
        &self,
        cfg: &RouterConfig,
        logits: &[f32],
        n_experts: usize,
        bias: Option<&[f32]>,
    ) -> Result<Routing, BackendError> {
        self.require(Op::route_of(cfg))?;
        match self {
            Backend::Cpu(b) => b.route(cfg, logits, n_experts, bias),
            Backend::Wgpu(b) => b.route(cfg, logits, n_experts, bias),
            Backend::Hip(b) => b.route(cfg, logits, n_experts, bias),
        }
    }

    pub fn moe(
        &self,
        layer: &MoeLayer,
        hidden: &[f32],
        logits: &[f32],
        opts: MoeOptions,
    ) -> Result<MoeOutput, BackendError> {
        self.require(Op::MoeForward {
            scheme: layer.scheme,
            activation: layer.activation,
        })?;
        match self {
            Backend::Cpu(b) => b.moe(layer, hidden, logits, opts),
            Backend::Wgpu(b) => b.moe(layer, hidden, logits, opts),
            Backend::Hip(b) => b.moe(layer, hidden, logits, opts),
        }
    }
}
