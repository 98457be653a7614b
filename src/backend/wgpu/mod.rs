//! The wgpu backend: WGSL compute shaders (`shaders/`) through wgpu, on any Vulkan / Metal /
//! DX12 GPU and on Mesa lavapipe (GL adapters with compute work too: `WGPU_BACKEND=gl`).
//!
//! * [`context`]: the device context, created once (adapter choice, limits, features, pipeline
//!   cache keyed by shader + entry + overrides); its other methods live in [`buffers`] (buffer
//!   pool, uploads, poisoning), [`readback`] (submission, waits, readback in pieces), [`timer`]
//!   (timestamp timers), [`coop`] (the cooperative GEMM's kernels and start-up checks) and
//!   [`gemv_config`] (the decode GEMV's layout and checks).
//! * [`quant`]: quantize / dequantize / QDQ, bit-exact against the CPU reference (integer
//!   arithmetic on fp32 bits; inputs larger than a binding are processed in chunks).
//! * [`route`]: routing with exactly the CPU's ids: selection compares the logits, or with an
//!   `e_score_correction_bias` (DeepSeek-V3/R1) `sigmoid(logit) + bias` (or softmax + bias)
//!   computed to the CPU's bits (`exact_math.wgsl`: the integer math of `moe::exact_math`),
//!   groups included.
//! * [`moe`]: the whole layer in one submit: route, expert histogram + prefix sum + row lists,
//!   input QDQ, grouped GEMM (prefill) or grouped GEMV (decode) with weights dequantized in the
//!   prologue and bias + activation + intermediate QDQ in the GEMM1 epilogue, GEMM2 with bias and
//!   router weight, a deterministic combine. The prefill GEMM runs on cooperative matrices
//!   (`shaders/moe_gemm_coop.wgsl`, f16 16x16x16 with f32 accumulation) where the adapter offers
//!   `EXPERIMENTAL_COOPERATIVE_MATRIX` and the start-up `coop_check` passes, the tiled f32 GEMM
//!   elsewhere; `MXMOE_GEMM=tiled|coop|auto` chooses (`coop` fails where it cannot run) and
//!   `mxmoe info` says which runs and why. Weights larger than a binding are split into
//!   chunks of whole experts, and one dispatch of each expert pass reads up to four of them
//!   (`shaders/moe_weights_multi.wgsl`; one dispatch per chunk where the adapter's
//!   storage-buffer limit is too low); batches whose activations exceed a binding run as
//!   several submits.
//! * [`source`]: every WGSL file (`include_str!`) and the [`source::Shader`]s composed from them
//!   (a preamble generated from the Rust format table and enum ids + the shader's files).
//!
//! Numerics: quantize / dequantize / QDQ and the scale bytes are bit-exact; routing ids are
//! exact, sigmoid (and softmax + bias) routing weights bit-exact (other softmax weights within
//! float tolerance); MoE outputs agree with `moe::forward(.., Accumulate::F32)` within
//! `check::MOE_REL_L2` (activation in f32 on the GPU, f64 on the CPU; other summation order).
//! `Intermediate::Bf16` rounds at the same four points as the CPU.
//!
//! UNSUPPORTED (reported, never silently run): more than 1024 experts or top_k > 32.

pub mod adapter;
pub mod buffers;
pub mod context;
pub mod coop;
mod fwd_cache;
pub mod gemv_config;
pub mod host_profile;
pub mod layer;
pub mod moe;
mod plan;
pub mod prepass;
mod probe;
pub mod quant;
pub mod readback;
pub mod route;
pub mod source;
pub mod timer;

pub use crate::backend::host_io::WRITE_PAR_MIN;
pub use buffers::POISON;
pub use context::{enumerate_adapters, AdapterSummary, ContextInfo, MULTI_STORAGE_BINDINGS};
pub use coop::{
    coop_runtime_checks, CoopKernel, COOP64P_WORKGROUP_BYTES, COOP64_WORKGROUP_BYTES,
    COOP_TRUSTED_ENTRIES,
};
pub use gemv_config::GemvConfig;
pub use layer::GpuLayer;
pub use moe::MoePath;
pub use prepass::{
    CoopPrepassOut, COOP64PW_BINDINGS, COOP64P_BINDINGS, COOPP_PREP1_BINDINGS,
    COOPP_PREP2_BINDINGS, GEMM_PRE_REF_BINDINGS,
};

use super::{BackendError, Op, PassTimes, Support, Timing};
use crate::format::{MxFormat, MxTensor, ScaleMode};
use crate::moe::{MoeLayer, MoeOptions, MoeOutput, RouterConfig, Routing};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The wgpu backend. Cheap to clone (the context is shared); `Send + Sync`.
#[derive(Clone)]
pub struct WgpuBackend {
    ctx: Arc<context::Context>,
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WgpuBackend({})", self.adapter())
    }
}

impl WgpuBackend {
    /// Open the best adapter (discrete > integrated > CPU; Vulkan/Metal/DX12 before GL) whose
    /// name, driver, backend or type contains `adapter` (case-insensitive; `MXMOE_ADAPTER` when
    /// None). `WGPU_BACKEND` restricts the backends searched.
    pub fn new(adapter: Option<&str>) -> Result<Self, BackendError> {
        Ok(WgpuBackend {
            ctx: Arc::new(context::Context::new(adapter)?),
        })
    }

    /// The adapter in words: name, backend, type, driver.
    pub fn adapter(&self) -> String {
        let a = &self.ctx.info.adapter;
        format!(
            "{} ({}, {}, {} {})",
            a.name, a.backend, a.device_type, a.driver, a.driver_info
        )
    }

    /// Test hook: decode FP4 weights in the GEMV from bits in registers (`true`) or through
    /// the workgroup-memory table (`false`), whatever the start-up check chose.
    pub fn set_fp4_register_decode(&self, on: bool) {
        self.ctx.fp4_register_decode.store(on, Ordering::Relaxed);
    }

    /// Kernel choices this device made at start-up, in words (for `info` and bench results).
    pub fn notes(&self) -> Vec<String> {
        let g = self.ctx.gemv_config();
        let mut v = Vec::new();
        if self.ctx.diag_gemv_loads_only {
            v.push(
                "DIAGNOSTIC MXMOE_DIAG_GEMV_LOADS_ONLY=1: the FP4 GEMV skips its decode and dot \
                 products; results are wrong (timings only)"
                    .to_string(),
            );
        }
        if self.fused_combine() {
            v.push(
                "EXPERIMENTAL MXMOE_WGPU_FUSED_COMBINE=1: gemv2 sums the top-k slots itself; WGSL's \
                 memory model does not order this, and it gave wrong forwards on an H200"
                    .to_string(),
            );
        }
        if self.ctx.trusted_shaders {
            v.push(
                "MXMOE_WGPU_TRUSTED=1: shader modules without runtime checks (no index clamps, \
                 loop bounding or division guards)"
                    .to_string(),
            );
        } else if self.ctx.coop_gemm() {
            v.push(if self.ctx.trusted_coop {
                "cooperative GEMM kernels k64/k64p/k64pw built without index clamps and loop \
                 bounding (indices and loops proved in range by tests/shaders.rs; \
                 MXMOE_WGPU_COOP_CHECKED=1 keeps the checks)"
                    .to_string()
            } else {
                "MXMOE_WGPU_COOP_CHECKED=1: the cooperative GEMM keeps naga's runtime checks"
                    .to_string()
            });
        }
        v.extend([
            format!(
                "prefill GEMM: {}",
                if self.ctx.coop_gemm() || self.ctx.gemm_note().starts_with("tiled") {
                    self.ctx.gemm_note()
                } else {
                    "tiled f32 (moe_gemm.wgsl): switched by set_coop_gemm".into()
                }
            ),
            format!(
                "fp4 decode in the GEMV: {}",
                if self.ctx.fp4_register_decode.load(Ordering::Relaxed) {
                    "registers (f16 bit trick; the adapter passed the check)"
                } else {
                    "byte table in workgroup memory"
                }
            ),
            format!(
                "GEMV layout: 8 rows x {} lanes per group ({}), {} invocations, lane sums {}{}{}",
                g.lanes,
                if g.words {
                    "words per lane"
                } else {
                    "32-blocks per lane"
                },
                g.threads(),
                if !g.subgroup {
                    "in workgroup memory".to_string()
                } else if g.split > 1 {
                    format!(
                        "by subgroupAdd over {} subgroups per group (subgroup_check passed)",
                        g.split
                    )
                } else {
                    "by subgroupAdd (subgroup_check passed)".to_string()
                },
                if g.prefetch {
                    ", next block prefetched"
                } else {
                    ""
                },
                if g.one_row {
                    "; one-token pipelines for one-row tiles"
                } else {
                    ""
                }
            ),
            self.chunks_note(),
        ]);
        v
    }

    /// How the expert passes read weights split into chunks (layers over one storage binding).
    fn chunks_note(&self) -> String {
        let per = self.ctx.chunks_per_pass.load(Ordering::Relaxed);
        let mut s = if per > 1 && self.ctx.chunks_forced.load(Ordering::Relaxed) {
            format!(
                "weight chunks: one dispatch per expert pass reads up to {per} chunks \
                 (moe_weights_multi.wgsl; MXMOE_WGPU_CHUNKS_PER_PASS={per}: every forward)"
            )
        } else if per > 1 {
            format!(
                "weight chunks: one dispatch per expert pass reads up to {per} chunks \
                 (moe_weights_multi.wgsl) on GEMV forwards of at most {} token-expert pairs, one \
                 dispatch per chunk above",
                context::MULTI_CHUNK_MAX_PAIRS
            )
        } else {
            let why = &self.ctx.chunks_note;
            format!(
                "weight chunks: one dispatch per chunk and expert pass{}",
                if why.is_empty() {
                    String::new()
                } else {
                    format!(" ({why})")
                }
            )
        };
        match self.ctx.chunk_experts.load(Ordering::Relaxed) {
            0 => {}
            n => s += &format!("; MXMOE_WGPU_CHUNK_EXPERTS={n}: at most {n} experts per chunk"),
        }
        s
    }

    /// Test hook: how many weight chunks one expert dispatch reads in every forward, whatever
    /// its size (1: a dispatch per chunk; at most 4). Err where the adapter cannot bind more
    /// than one.
    pub fn set_chunks_per_pass(&self, n: usize) -> Result<(), String> {
        if !(1..=source::MAX_CHUNKS_PER_PASS).contains(&n) {
            return Err(format!(
                "{n} chunks per pass: expected 1 to {}",
                source::MAX_CHUNKS_PER_PASS
            ));
        }
        let have = self.ctx.limits.max_storage_buffers_per_shader_stage;
        if n > 1 && have < context::MULTI_STORAGE_BINDINGS {
            return Err(format!(
                "{n} chunks per pass: the adapter offers {have} storage buffers per stage, the \
                 multi-chunk passes bind up to {}",
                context::MULTI_STORAGE_BINDINGS
            ));
        }
        self.ctx.chunks_per_pass.store(n as u64, Ordering::Relaxed);
        self.ctx.chunks_forced.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Test hook: at most `n` local experts per weight chunk from the next `prepare` on (0: as
    /// many as fit one binding), so a small layer exercises the multi-chunk passes.
    pub fn set_max_chunk_experts(&self, n: usize) {
        self.ctx.chunk_experts.store(n as u64, Ordering::Relaxed);
    }

    /// Use the cooperative-matrix GEMM (`true`; Err where the device did not pass its checks)
    /// or the tiled GEMM (`false`) for prefill batches.
    pub fn set_coop_gemm(&self, on: bool) -> Result<(), String> {
        self.ctx.set_coop_gemm(on)
    }

    /// Whether prefill batches run the cooperative-matrix GEMM now.
    pub fn coop_gemm(&self) -> bool {
        self.ctx.coop_gemm()
    }

    /// Use the cooperative GEMM's kernel k64 (`true`; Err where it did not pass its checks) or
    /// the first kernel k32 (`false`) when the cooperative GEMM runs.
    pub fn set_coop_k64(&self, on: bool) -> Result<(), String> {
        self.ctx.set_coop_k64(on)
    }

    /// Whether the cooperative GEMM (when it runs) is kernel k64.
    pub fn coop_k64(&self) -> bool {
        self.ctx.coop_k64()
    }

    /// Use one of the cooperative GEMM's pre-pass kernels (`Some(CoopKernel::K64p)` or
    /// `Some(CoopKernel::K64pw)`; its device check runs first: Err where it or k64's failed, or
    /// without the cooperative GEMM) or none (`None`).
    pub fn set_coop_pre(&self, k: Option<CoopKernel>) -> Result<(), String> {
        self.ctx.set_coop_pre(k)
    }

    /// Test hook: where the tiled GEMM runs (no cooperative matrices, or switched off), run it
    /// over the pre-pass kernels' pre-converted rows (`coopp_prep1/2`, then `gemm1_pre_ref`,
    /// `gemm2_pre_ref` in moe_coop_prepass.wgsl): the forward's pre-pass plumbing on any
    /// adapter.
    pub fn set_gemm_pre_ref(&self, on: bool) {
        self.ctx.gemm_pre_ref.store(on, Ordering::Relaxed);
    }

    /// The cooperative GEMM's kernel now (when it runs).
    pub fn coop_kernel(&self) -> CoopKernel {
        self.ctx.coop_kernel()
    }

    /// Test and diagnostic hook: run one of kernel k64p's activation pre-passes
    /// (moe_coop_prepass.wgsl; plain compute, every adapter) on `x`; see
    /// [`prepass::coop_prepass`].
    #[allow(clippy::too_many_arguments)]
    pub fn coop_prepass(
        &self,
        stage: u32,
        x: &[f32],
        m: usize,
        kk: usize,
        top_k: usize,
        row_of_pair: &[i32],
        weight_only: bool,
    ) -> Result<CoopPrepassOut, BackendError> {
        let _g = self.ctx.op_lock.lock().unwrap_or_else(|p| p.into_inner());
        prepass::coop_prepass(&self.ctx, stage, x, m, kk, top_k, row_of_pair, weight_only)
    }

    /// Test hook: the decode GEMV's layout (subgroup or workgroup-memory reductions, with or
    /// without prefetching the next block, blocks or words per lane; `want.lanes` is ignored).
    /// Err (and the workgroup-memory layout) when the adapter cannot run the subgroup layout.
    pub fn set_gemv_layout(&self, want: GemvConfig) -> Result<GemvConfig, String> {
        self.ctx.set_gemv(want)
    }

    /// Test hook: whether gemv1 builds the row lists itself at decode sizes (default) or the
    /// `lists` pass runs first.
    pub fn set_gemv_own_lists(&self, on: bool) {
        self.ctx.own_lists.store(on, Ordering::Relaxed);
    }

    /// Test hook: whether gemv2 does the combine itself up to 16 tokens (GEMV_FUSE_COMBINE;
    /// default off: not ordered by WGSL's memory model; `MXMOE_WGPU_FUSED_COMBINE=1`).
    pub fn set_fused_combine(&self, on: bool) {
        self.ctx.fused_combine.store(on, Ordering::Relaxed);
    }

    /// Whether gemv2 does the combine itself up to 16 tokens (see [`Self::set_fused_combine`]).
    pub fn fused_combine(&self) -> bool {
        self.ctx.fused_combine.load(Ordering::Relaxed)
    }

    /// Test hook: gemv1 builds its own lists up to `pairs` token-expert pairs (when on).
    pub fn set_gemv_own_lists_max(&self, pairs: u64) {
        self.ctx.own_lists_max.store(pairs, Ordering::Relaxed);
    }

    /// The decode GEMV's layout in force.
    pub fn gemv_layout(&self) -> GemvConfig {
        self.ctx.gemv_config()
    }

    /// The adapter's fixed subgroup size, when it has SUBGROUP (None otherwise).
    pub fn subgroup_size(&self) -> Option<u32> {
        self.ctx.subgroup_size
    }

    /// The chosen adapter's summary (features, limits) and the features enabled.
    pub fn info(&self) -> &ContextInfo {
        &self.ctx.info
    }

    /// Every adapter visible to wgpu, best first (for `mxmoe info`).
    pub fn enumerate_adapters() -> Vec<AdapterSummary> {
        context::enumerate_adapters()
    }

    /// Test hook: fill every output and intermediate buffer with [`POISON`] before each run, so
    /// elements a kernel forgets to write fail the comparison (also `MXMOE_POISON=1`).
    pub fn set_poison(&self, on: bool) {
        self.ctx.poison.store(on, Ordering::Relaxed);
    }

    /// Test hook: read a forward's output back in pieces of `piece` bytes (rounded up to 256)
    /// from `min_bytes` on (each piece a submission of its own, copied out while the device
    /// copies the next); `None` restores the defaults (pieces of 8 MiB from 16 MiB).
    pub fn set_read_pieces(&self, sizes: Option<(u64, u64)>) {
        let (min, piece) = sizes.unwrap_or((readback::READ_STREAM_MIN, readback::READ_PIECE));
        self.ctx.read_pieces.0.store(min, Ordering::Relaxed);
        self.ctx
            .read_pieces
            .1
            .store(piece.next_multiple_of(256), Ordering::Relaxed);
    }

    /// Test hook: split weights into chunks of at most `bytes` (0 = the adapter's binding
    /// limit), so a small layer exercises the multi-buffer path.
    pub fn set_max_chunk_bytes(&self, bytes: u64) {
        self.ctx.chunk_override.store(bytes, Ordering::Relaxed);
    }

    /// Test hook: how many compute pipelines the pipeline cache holds.
    pub fn pipeline_count(&self) -> usize {
        self.ctx.pipeline_count()
    }

    pub fn supports(&self, op: &Op) -> Support {
        match op {
            Op::Quantize { .. } | Op::Dequantize { .. } | Op::Qdq { .. } => Support::Supported,
            Op::Route(r) => route::supports(r),
            Op::MoeForward {
                route: r,
                local_experts,
                taps,
                ..
            } => Support::when(!taps, || {
                "stage taps are a feature of the CPU reference forward".into()
            })
            .and(|| {
                Support::when(*local_experts <= moe::MAX_LOCAL_EXPERTS, || {
                    format!(
                        "{local_experts} local experts (moe.wgsl holds at most {})",
                        moe::MAX_LOCAL_EXPERTS
                    )
                })
            })
            .and(|| route::supports(r)),
        }
    }

    pub fn quantize(
        &self,
        format: MxFormat,
        mode: ScaleMode,
        x: &[f32],
        shape: &[usize],
    ) -> Result<MxTensor, BackendError> {
        let _g = self.ctx.op_lock.lock().unwrap_or_else(|p| p.into_inner());
        quant::quantize(&self.ctx, format, mode, x, shape)
    }

    pub fn dequantize(&self, t: &MxTensor) -> Result<Vec<f32>, BackendError> {
        let _g = self.ctx.op_lock.lock().unwrap_or_else(|p| p.into_inner());
        quant::dequantize(&self.ctx, t)
    }

    pub fn qdq(
        &self,
        format: MxFormat,
        mode: ScaleMode,
        x: &[f32],
        k: usize,
    ) -> Result<Vec<f32>, BackendError> {
        let _g = self.ctx.op_lock.lock().unwrap_or_else(|p| p.into_inner());
        quant::qdq(&self.ctx, format, mode, x, k)
    }

    pub fn route(
        &self,
        cfg: &RouterConfig,
        logits: &[f32],
        n_experts: usize,
        bias: Option<&[f32]>,
    ) -> Result<Routing, BackendError> {
        let _g = self.ctx.op_lock.lock().unwrap_or_else(|p| p.into_inner());
        route::route(&self.ctx, cfg, logits, n_experts, bias)
    }

    /// Upload a layer's weights once (split across buffers when larger than a binding).
    pub fn prepare(&self, layer: &MoeLayer) -> Result<GpuLayer, BackendError> {
        let op = Op::moe_of(
            &layer.config,
            layer.weights.e_score_correction_bias.is_some(),
            false,
        );
        if let Support::Unsupported { reason } = self.supports(&op) {
            return Err(BackendError::Unsupported {
                backend: "wgpu".into(),
                op: op.id(),
                reason,
            });
        }
        let _g = self.ctx.op_lock.lock().unwrap_or_else(|p| p.into_inner());
        self::layer::upload(&self.ctx, layer)
    }

    /// Run a resident layer (see [`WgpuBackend::prepare`]): one submit, one readback; with
    /// `timed`, GPU time per pass (`None` without TIMESTAMP_QUERY).
    pub fn moe(
        &self,
        layer: &GpuLayer,
        hidden: &[f32],
        logits: &[f32],
        opts: MoeOptions,
        timed: bool,
    ) -> Result<(MoeOutput, Option<PassTimes>), BackendError> {
        self.moe_path(layer, hidden, logits, opts, MoePath::Auto, timed)
    }

    /// [`WgpuBackend::moe`] with the expert kernels chosen explicitly (tests and benchmarks run
    /// both paths on the same inputs).
    pub fn moe_path(
        &self,
        layer: &GpuLayer,
        hidden: &[f32],
        logits: &[f32],
        opts: MoeOptions,
        path: MoePath,
        timed: bool,
    ) -> Result<(MoeOutput, Option<PassTimes>), BackendError> {
        let mode = if timed {
            moe::FwdTiming::Gpu
        } else {
            moe::FwdTiming::Off
        };
        let (o, t) = self.forward_timed(layer, hidden, logits, opts, path, mode)?;
        Ok((o, t.map(|(passes, _)| passes)))
    }

    /// One forward under the op lock, measured as `mode` says: [`moe::FwdTiming::Gpu`] its
    /// passes' times (each dispatch its own timestamped pass) and the span from the first pass's
    /// beginning to the last one's end (ms); [`moe::FwdTiming::Span`] the GPU span of the untimed
    /// recording (one compute pass between two timestamps) as its one time; both `None` without
    /// TIMESTAMP_QUERY; [`moe::FwdTiming::Host`] the host phases.
    #[allow(clippy::type_complexity)]
    fn forward_timed(
        &self,
        layer: &GpuLayer,
        hidden: &[f32],
        logits: &[f32],
        opts: MoeOptions,
        path: MoePath,
        mode: moe::FwdTiming,
    ) -> Result<(MoeOutput, Option<(PassTimes, f64)>), BackendError> {
        use moe::FwdTiming::{Gpu, Off, Span};
        let mode = match mode {
            Gpu | Span if !self.has_timestamps() => Off,
            m => m,
        };
        let _g = self.ctx.op_lock.lock().unwrap_or_else(|p| p.into_inner());
        let (o, t, span) = moe::forward(&self.ctx, layer, hidden, logits, opts, path, mode)?;
        Ok((o, (mode != Off).then_some((t, span))))
    }

    /// [`WgpuBackend::moe`] timed as `timing` asks: per pass, or the forward as one span (the
    /// untimed recording's one compute pass between two timestamps: every dispatch and the
    /// barriers between them, as an untimed forward runs), one entry `("forward", ms)`; `None`
    /// without TIMESTAMP_QUERY. [`Timing::Host`]: the host time of the upload, the forward and
    /// the readback, each ended by a wait (every adapter).
    pub fn moe_timing(
        &self,
        layer: &GpuLayer,
        hidden: &[f32],
        logits: &[f32],
        opts: MoeOptions,
        timing: Timing,
    ) -> Result<(MoeOutput, Option<PassTimes>), BackendError> {
        let auto = MoePath::Auto;
        match timing {
            Timing::Off => self.moe(layer, hidden, logits, opts, false),
            Timing::Passes => self.moe(layer, hidden, logits, opts, true),
            Timing::Forward => {
                let (o, t) =
                    self.forward_timed(layer, hidden, logits, opts, auto, moe::FwdTiming::Span)?;
                Ok((o, t.map(|(_, span)| vec![("forward".to_string(), span)])))
            }
            Timing::Host => {
                let (o, t) =
                    self.forward_timed(layer, hidden, logits, opts, auto, moe::FwdTiming::Host)?;
                Ok((o, t.map(|(phases, _)| phases)))
            }
        }
    }

    /// Whether [`WgpuBackend::moe`] can report GPU times (TIMESTAMP_QUERY).
    pub fn has_timestamps(&self) -> bool {
        self.ctx
            .device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY)
    }
}
