//! Backends: a closed enum. Each answers `supports(&op)` with [`Support`] (and the reason when
//! it cannot) and runs ops; an op a backend cannot run is reported UNSUPPORTED, never silently
//! passed. Inputs are validated once, in [`ops`], before any backend runs; layers are
//! `prepare`d once (resident on the device) and run many times ([`Prepared`]).
//!
//! Contract for every backend (docs/NUMERICS.md): quantize / dequantize / QDQ / packing are
//! **bit-exact** against the CPU reference (including NaN/Inf blocks, zero blocks, subnormal
//! inputs and ±0); routing gives exactly the CPU ids; MoE outputs agree with the CPU reference
//! within a relative-L2 bound (GEMM accumulation order differs between backends).
//!
//! Where each op lives (CPU = the reference; HIP = `hip/mxmoe.cu` and the headers it includes,
//! host side `backend/hip/single_ops.rs` and, for the MoE forward, `backend/hip/moe.rs`):
//!
//! | op | CPU | WGSL (shader / host) | HIP |
//! |---|---|---|---|
//! | element codec, E8M0, packing | `format/{codec,scale,pack}.rs` | `shaders/mx_common.wgsl` (+ the preamble of `wgpu/source.rs`) | `hip/mx_common.h` (+ `hip/mx_formats.h` from `hip/header.rs`) |
//! | quantize, dequantize, QDQ | `format/tensor.rs` | `shaders/quant.wgsl` / `wgpu/quant.rs` | `mx_quantize`, `mx_dequantize`, `mx_qdq` (`hip/quant.h`) |
//! | route | `moe/route.rs` + `moe/exact_math.rs` | `shaders/route.wgsl` + `shaders/exact_math.wgsl` / `wgpu/route.rs` | `mx_route` (`hip/route.h`) + `hip/exact_math.h` |
//! | expert lists | (`moe/reference.rs`, `assignments_by_expert`) | `shaders/moe_lists.wgsl` / `wgpu/moe.rs` | `moe_lists` (`hip/lists.h`) |
//! | grouped GEMM (prefill) | `moe/reference.rs` | `shaders/moe_gemm.wgsl` / `wgpu/moe.rs` | `moe_gemm{1,2}[_split]` (`hip/gemm_v1.h`) on `hip/mx_fragment.h` |
//! | grouped GEMV (decode) | `moe/reference.rs` | `shaders/moe_gemv.wgsl` + `moe_gemv_fp4_{table,registers}.wgsl` + `moe_gemv_reduce_{subgroup,shared}.wgsl` / `wgpu/moe.rs` | `moe_gemv{1,2}_cb{4,6,8}` (`hip/gemv.h`) |
//! | activation + intermediate QDQ | `moe/reference.rs` (`activate`, `qdq_slice`) | the GEMM1/GEMV1 epilogues (`shaders/moe_common.wgsl`) | the gemm1 / gemv1 epilogues |
//! | combine | `moe/reference.rs` | `shaders/moe_combine.wgsl` / `wgpu/moe.rs` | `moe_combine` (`hip/combine.h`) |
//! | op descriptors, validation | `backend/ops.rs` | (shared) | (shared) |
//! | dispatch | `backend/cpu/mod.rs` | `backend/wgpu/mod.rs` | `backend/hip/real.rs` (feature `hip`; `stub.rs` without) |

pub mod cpu;
pub mod hip;
pub mod host_io;
pub mod ops;
pub mod wgpu;

pub use ops::{Op, RouteOp, Support};

use crate::format::{FormatError, MxFormat, MxTensor, ScaleMode};
use crate::moe::{MoeConfig, MoeError, MoeLayer, MoeOptions, MoeOutput, RouterConfig, Routing};
use std::fmt;
use std::str::FromStr;

/// Errors of backends. Variants carry the op or sizes they concern.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("backend {backend} does not support {op}: {reason}")]
    Unsupported {
        backend: String,
        op: String,
        reason: String,
    },
    #[error("this layer was prepared on backend {prepared}, not on {backend}")]
    WrongBackend {
        prepared: &'static str,
        backend: &'static str,
    },
    #[error("backend '{0}' is not compiled in (rebuild with --features {0})")]
    NotCompiled(&'static str),
    /// Compiled in, but cannot run here: no driver library, no device, or no code object for
    /// the device's architecture (the reason says which).
    #[error("backend '{backend}' is unavailable: {reason}")]
    Unavailable {
        backend: &'static str,
        reason: String,
    },
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

impl BackendKind {
    /// Every concrete backend, in the order `--backend all` and the conformance tests run them.
    /// A new backend adds its arm here and is then tested by the whole case catalog.
    pub const ALL: [BackendKind; 3] = [BackendKind::Cpu, BackendKind::Wgpu, BackendKind::Hip];

    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Hip => "hip",
            BackendKind::Auto => "auto",
        }
    }
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

/// A layer's weights where a backend computes: GPU buffers for wgpu (resident: upload once,
/// run many forwards), a borrow of the host layer for the CPU. Made by [`Backend::prepare`];
/// run with [`Backend::moe`].
pub enum Prepared<'w> {
    Cpu(&'w MoeLayer),
    // Boxed: a resident GPU layer is several hundred bytes (buffers, the forward cache).
    Wgpu(Box<wgpu::GpuLayer>),
    Hip(Box<hip::HipLayer>),
}

impl Prepared<'_> {
    /// The layer's configuration.
    pub fn config(&self) -> &MoeConfig {
        match self {
            Prepared::Cpu(l) => &l.config,
            Prepared::Wgpu(g) => g.config(),
            Prepared::Hip(h) => h.config(),
        }
    }

    /// Whether the layer has a DeepSeek `e_score_correction_bias`.
    pub fn has_correction_bias(&self) -> bool {
        match self {
            Prepared::Cpu(l) => l.weights.e_score_correction_bias.is_some(),
            Prepared::Wgpu(g) => g.has_correction_bias(),
            Prepared::Hip(h) => h.has_correction_bias(),
        }
    }

    /// The backend that holds it.
    pub fn backend(&self) -> &'static str {
        match self {
            Prepared::Cpu(_) => "cpu",
            Prepared::Wgpu(_) => "wgpu",
            Prepared::Hip(_) => "hip",
        }
    }
}

/// GPU time per pass in milliseconds, in submission order.
pub type PassTimes = Vec<(String, f64)>;

/// What a timed forward ([`Backend::moe_timed`]) measures on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// Nothing: the plain forward.
    Off,
    /// Each pass on its own (a timestamp or event pair around each kernel / compute pass): the
    /// breakdown. Each pair costs a little, and a gap between kernels falls outside every pair,
    /// so their sum and [`Timing::Forward`] differ slightly (on the H200 by <= 2 us at decode).
    Passes,
    /// The forward as one span, one entry `("forward", ms)`: HIP, events before the first and
    /// after the last kernel; wgpu, timestamps at the first pass's beginning and the last
    /// pass's end (the gaps between kernels / passes included).
    Forward,
    /// Host time of the forward's three phases, each ended by a wait for the device so that
    /// none hides in another: `("upload", ms)` (the inputs written to the device and the copy
    /// finished), `("forward", ms)` (the host work before the kernels — validation, pipelines,
    /// buffers, encoding — then submit / launch and the wait until the GPU is done; inputs
    /// already on the device, the output still there) and `("readback", ms)` (the output and
    /// routing copied to host-visible memory, the wait, and the copy into the returned
    /// `Vec`s). The extra waits make the phases' sum a little larger than the plain forward's
    /// wall time (one device round trip each); the output is the plain forward's, bit for bit.
    /// No GPU timestamps are taken in this mode.
    Host,
}

/// The phase names [`Timing::Host`] reports, in order.
pub const HOST_PHASES: [&str; 3] = ["upload", "forward", "readback"];

impl Backend {
    /// Open a backend. `adapter` filters GPU adapters by a name substring (also read from
    /// `MXMOE_ADAPTER` by the wgpu backend). `Auto` takes wgpu when an adapter exists, else
    /// the CPU; [`Backend::open_auto`] also says why.
    pub fn open(kind: BackendKind, adapter: Option<&str>) -> Result<Backend, BackendError> {
        match kind {
            BackendKind::Cpu => Ok(Backend::Cpu(cpu::CpuBackend)),
            BackendKind::Wgpu => Ok(Backend::Wgpu(wgpu::WgpuBackend::new(adapter)?)),
            BackendKind::Hip => Ok(Backend::Hip(hip::HipBackend::new()?)),
            BackendKind::Auto => Ok(Backend::open_auto(adapter).0),
        }
    }

    /// `--backend auto`: wgpu when an adapter exists, else the CPU, with a sentence saying which
    /// was chosen and why (the CLI prints it on stderr).
    pub fn open_auto(adapter: Option<&str>) -> (Backend, String) {
        match wgpu::WgpuBackend::new(adapter) {
            Ok(b) => {
                let why = format!("backend auto: chose wgpu on {}", b.adapter());
                (Backend::Wgpu(b), why)
            }
            Err(e) => (
                Backend::Cpu(cpu::CpuBackend),
                format!("backend auto: fell back to the CPU reference (wgpu: {e})"),
            ),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Backend::Cpu(_) => "cpu",
            Backend::Wgpu(_) => "wgpu",
            Backend::Hip(_) => "hip",
        }
    }

    /// The GEMM accumulation this backend actually uses for `requested`: the CPU honours it;
    /// the GPU backends accumulate in f32 whatever is asked (WGSL has no f64), so a report
    /// never claims f64 for them.
    pub fn accumulation(&self, requested: crate::moe::Accumulate) -> crate::moe::Accumulate {
        match self {
            Backend::Cpu(_) => requested,
            Backend::Wgpu(_) | Backend::Hip(_) => crate::moe::Accumulate::F32,
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

    /// Kernel choices the backend made at start-up, in words (for `info` and bench results).
    pub fn notes(&self) -> Vec<String> {
        match self {
            Backend::Wgpu(b) => b.notes(),
            Backend::Hip(b) => b.notes(),
            Backend::Cpu(_) => Vec::new(),
        }
    }

    /// Test hook: fill outputs with [`wgpu::POISON`] before every run where the backend
    /// allocates device outputs (wgpu), so an element a kernel forgets to write fails the
    /// comparison. The CPU returns fresh vectors it writes fully; a no-op there.
    pub fn set_poison(&self, on: bool) {
        match self {
            Backend::Cpu(_) => {}
            Backend::Wgpu(b) => b.set_poison(on),
            Backend::Hip(b) => b.set_poison(on),
        }
    }

    /// Whether this backend can run `op`, and if not, why.
    pub fn supports(&self, op: &Op) -> Support {
        match self {
            Backend::Cpu(b) => b.supports(op),
            Backend::Wgpu(b) => b.supports(op),
            Backend::Hip(b) => b.supports(op),
        }
    }

    fn require(&self, op: Op) -> Result<(), BackendError> {
        match self.supports(&op) {
            Support::Supported => Ok(()),
            Support::Unsupported { reason } => Err(BackendError::Unsupported {
                backend: self.name().into(),
                op: op.id(),
                reason,
            }),
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
        ops::validate_quantize(x, shape)?;
        self.require(Op::Quantize { format, mode })?;
        match self {
            Backend::Cpu(b) => b.quantize(format, mode, x, shape),
            Backend::Wgpu(b) => b.quantize(format, mode, x, shape),
            Backend::Hip(b) => b.quantize(format, mode, x, shape),
        }
    }

    pub fn dequantize(&self, t: &MxTensor) -> Result<Vec<f32>, BackendError> {
        ops::validate_dequantize(t)?;
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
        ops::validate_qdq(x, k)?;
        self.require(Op::Qdq { format, mode })?;
        match self {
            Backend::Cpu(b) => b.qdq(format, mode, x, k),
            Backend::Wgpu(b) => b.qdq(format, mode, x, k),
            Backend::Hip(b) => b.qdq(format, mode, x, k),
        }
    }

    /// Route `[M, n_experts]` logits (with an optional DeepSeek correction bias).
    pub fn route(
        &self,
        cfg: &RouterConfig,
        logits: &[f32],
        n_experts: usize,
        bias: Option<&[f32]>,
    ) -> Result<Routing, BackendError> {
        ops::validate_route(cfg, logits, n_experts, bias)?;
        self.require(Op::route_of(cfg, n_experts, bias.is_some()))?;
        match self {
            Backend::Cpu(b) => b.route(cfg, logits, n_experts, bias),
            Backend::Wgpu(b) => b.route(cfg, logits, n_experts, bias),
            Backend::Hip(b) => b.route(cfg, logits, n_experts, bias),
        }
    }

    /// Put a layer's weights where this backend computes (validating the layer first). Run it
    /// with [`Backend::moe`] as often as needed.
    pub fn prepare<'w>(&self, layer: &'w MoeLayer) -> Result<Prepared<'w>, BackendError> {
        layer.validate()?;
        self.require(Op::moe_of(
            &layer.config,
            layer.weights.e_score_correction_bias.is_some(),
            false,
        ))?;
        Ok(match self {
            Backend::Cpu(_) => Prepared::Cpu(layer),
            Backend::Wgpu(b) => Prepared::Wgpu(Box::new(b.prepare(layer)?)),
            Backend::Hip(b) => Prepared::Hip(Box::new(b.prepare(layer)?)),
        })
    }

    /// One forward of a prepared layer on a token batch: `hidden` `[M, H]`, `logits`
    /// `[M, n_experts]`.
    pub fn moe(
        &self,
        layer: &Prepared,
        hidden: &[f32],
        logits: &[f32],
        opts: MoeOptions,
    ) -> Result<MoeOutput, BackendError> {
        Ok(self.moe_timed(layer, hidden, logits, opts, Timing::Off)?.0)
    }

    /// [`Backend::moe`], with GPU times as `timing` asks when the backend can measure them
    /// (`None` otherwise: the CPU, or an adapter without timestamp queries).
    pub fn moe_timed(
        &self,
        layer: &Prepared,
        hidden: &[f32],
        logits: &[f32],
        opts: MoeOptions,
        timing: Timing,
    ) -> Result<(MoeOutput, Option<PassTimes>), BackendError> {
        let cfg = layer.config();
        ops::validate_moe(cfg, hidden, logits)?;
        self.require(Op::moe_of(cfg, layer.has_correction_bias(), opts.taps))?;
        if opts.profile != crate::format::ProfileId::Contract && !matches!(self, Backend::Cpu(_)) {
            return Err(BackendError::Unsupported {
                backend: self.name().to_string(),
                op: format!("moe with --profile {}", opts.profile),
                reason: "compatibility profiles run on the CPU reference only".into(),
            });
        }
        match (self, layer) {
            (Backend::Cpu(b), Prepared::Cpu(l)) => Ok((b.moe(l, hidden, logits, opts)?, None)),
            (Backend::Wgpu(b), Prepared::Wgpu(g)) => b.moe_timing(g, hidden, logits, opts, timing),
            (Backend::Hip(b), Prepared::Hip(h)) => b.moe(h, hidden, logits, opts, timing),
            _ => Err(BackendError::WrongBackend {
                prepared: layer.backend(),
                backend: self.name(),
            }),
        }
    }

    /// Prepare and run once (a layer run once; callers that run a layer repeatedly prepare it
    /// once and call [`Backend::moe`]).
    pub fn moe_once(
        &self,
        layer: &MoeLayer,
        hidden: &[f32],
        logits: &[f32],
        opts: MoeOptions,
    ) -> Result<MoeOutput, BackendError> {
        let p = self.prepare(layer)?;
        self.moe(&p, hidden, logits, opts)
    }
}
