//! The HIP backend (feature `hip`): host side of the kernels in `hip/mxmoe.cu`, on whatever the
//! run-time driver offers (an AMD GPU through HIP, an NVIDIA GPU through the CUDA driver).
//!
//! Size (~1200 lines): the ops' launches, and the MoE forward, one function of ~450 lines
//! that stages every pass of a forward in order (choice.rs decides the kernels). Its seam is
//! the expert stage: the GEMV, the gfx950 MX GEMM and the bf16 GEMM branches could each move
//! to a function of a `moe.rs` taking the forward's buffers; not done yet.
//!
//! Numerics (docs/NUMERICS.md): quantize / dequantize / QDQ bit-exact (integer arithmetic on
//! fp32 bits, the WGSL kernels' port); routing ids exact and sigmoid / softmax-with-bias weights
//! bit-exact (exact_math.h); MoE outputs within `check::MOE_REL_L2` of the CPU: the GEMMs run on
//! matrix cores with bf16 operands, exact for MX weights and QDQ'd activations (every value of
//! the five OCP formats and MXINT8 times a power of two is a bf16), and split into a bf16 hi + lo
//! pair for the unquantized activations of weight-only schemes (about 16 significant bits), f32
//! accumulation.
//!
//! UNSUPPORTED (reported, never silently run): stage taps, more than 1024 experts, top_k > 32
//! (the route and lists kernels' shared arrays).
//!
//! Over 600 lines (rustfmt's layout of the kernel-argument lists is most of it): one type whose
//! ops share the device, the op lock, poisoning and the launch helper, as wgpu's `Context` does
//! (`wgpu/context.rs`, `wgpu/buffers.rs`).

use super::driver::{DevBuf, Device, Driver, Event};

use super::kernels;
use crate::backend::wgpu::{route as wroute, POISON};
use crate::backend::{ops, BackendError, Op, PassTimes, RouteOp, Support, Timing};
use crate::format::{FormatError, MxFormat, MxTensor, ScaleMode, BLOCK};
use crate::moe::{Intermediate, MoeConfig, MoeLayer, MoeOptions, MoeOutput, RouterConfig, Routing};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::choice::*;
pub use super::choice::{MAX_EXPERTS, MAX_GROUPS, MAX_TOP_K};

/// The HIP backend: a device, its loaded module and the kernels' handles.
pub struct HipBackend {
    dev: Arc<Device>,
    funcs: std::collections::HashMap<&'static str, usize>,
    /// The v2 GEMM kernels' dynamic shared memory (bytes, already allowed on the device), or why
    /// v2 cannot run here (AMD, or the driver refused the size).
    v2: Result<std::collections::HashMap<&'static str, u32>, String>,
    code_object: &'static str,
    lock: Mutex<()>,
    poison: AtomicBool,
}

impl std::fmt::Debug for HipBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HipBackend({})", self.adapter())
    }
}

/// A device this backend could run on (for `mxmoe info`).
#[derive(Clone, Debug)]
pub struct HipDeviceInfo {
    pub name: String,
    pub arch: String,
    pub memory_gib: f64,
    pub library: String,
    /// The embedded code object that serves it, or why none does.
    pub code_object: Result<&'static str, String>,
}

/// The devices the driver sees (the one `MXMOE_HIP_DEVICE` selects, default 0), or why none.
pub fn devices() -> Result<Vec<HipDeviceInfo>, BackendError> {
    let d = Driver::open_device()?;
    Ok(vec![HipDeviceInfo {
        code_object: kernels::for_arch(&d.arch).map(|(n, _)| n),
        name: d.name.clone(),
        arch: d.arch.clone(),
        memory_gib: d.total_mem as f64 / (1u64 << 30) as f64,
        library: d.driver.path.clone(),
    }])
}

/// The compilers that built the embedded code objects (build.rs), one line per target.
pub fn built_with() -> &'static str {
    kernels::BUILT_WITH
}

/// Every embedded code object: (target, bytes).
pub fn code_objects() -> [(&'static str, &'static [u8]); 4] {
    kernels::all()
}

/// A layer's weights on the device.
pub struct HipLayer {
    config: MoeConfig,
    correction_bias: bool,
    w13: DevBuf,
    s13: DevBuf,
    w2: DevBuf,
    s2: DevBuf,
    bias13: Option<DevBuf>,
    bias2: Option<DevBuf>,
    map: Option<DevBuf>,
    route_bias: Option<DevBuf>,
    dummy: DevBuf,
    /// gemv2's per-column-block counters (hip/gemv.h gemv2_combine), zero between forwards.
    counters: DevBuf,
    /// The MXFP4 codes are in the nv4 layout (hip/nv4.h; choice.rs nv4_layout).
    nv4: bool,
}

impl HipLayer {
    pub fn config(&self) -> &MoeConfig {
        &self.config
    }
    pub fn has_correction_bias(&self) -> bool {
        self.correction_bias
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
struct MoeParams {
    m: u32,
    top_k: u32,
    hidden: u32,
    inter: u32,
    n_experts: u32,
    e_local: u32,
    has_map: u32,
    has_bias13: u32,
    has_bias2: u32,
    on_input: u32,
    weight_fmt: u32,
    act_fmt: u32,
    act_mode: u32,
    activation: u32,
    round_bf16: u32,
    tile_m: u32,
}

/// Kernel arguments: pointers to each value (the driver copies them at launch).
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        [$( (&$a) as *const _ as *mut c_void ),*]
    };
}

/// Whether every value is a bf16 value (its low 16 bits zero: bf16 -> f32 is exact, so the
/// bf16 hi of the GEMV's split is the value and its lo +0).
fn all_bf16(x: &[f32]) -> bool {
    x.iter().all(|v| v.to_bits() & 0xFFFF == 0)
}

fn f32_bytes(v: &[f32]) -> &[u8] {
    bytemuck::cast_slice(v)
}

fn unsupported(op: &Op, reason: String) -> BackendError {
    BackendError::Unsupported {
        backend: "hip".into(),
        op: op.id(),
        reason,
    }
}

fn route_support(r: &RouteOp) -> Support {
    Support::when(
        r.n_experts <= MAX_EXPERTS
            && r.top_k >= 1
            && r.top_k <= MAX_TOP_K
            && r.n_group.is_none_or(|g| g <= MAX_GROUPS),
        || {
            format!(
                "{} experts, top_k {}, n_group {:?} (mx_route holds at most {MAX_EXPERTS} \
                 experts, top_k {MAX_TOP_K}, {MAX_GROUPS} groups)",
                r.n_experts, r.top_k, r.n_group
            )
        },
    )
}

impl HipBackend {
    /// Load the driver, open the device and its code object; `Unavailable` with the reason
    /// (no library / no device / no code object for this architecture) otherwise.
    pub fn new() -> Result<Self, BackendError> {
        let dev = Arc::new(Driver::open_device()?);
        let (co, image) =
            kernels::for_arch(&dev.arch).map_err(|reason| BackendError::Unavailable {
                backend: "hip",
                reason: format!("{} ({}): {reason}", dev.name, dev.arch),
            })?;
        dev.make_current()?;
        let mut names: Vec<&'static str> = kernels::NAMES
            .iter()
            .chain(&kernels::NAMES_MORE)
            .copied()
            .collect();
        if dev.arch == "gfx950" {
            names.extend(kernels::NAMES_GFX950);
        }
        let nvidia = !dev.arch.starts_with("gfx");
        if nvidia {
            names.extend(kernels::NAMES_V2);
            names.extend(kernels::NAMES_MMA);
            names.extend(kernels::NAMES_GEMV_MMA);
        }
        let funcs: std::collections::HashMap<&'static str, usize> = dev
            .load_module(image, &names)
            .map_err(|e| BackendError::Unavailable {
                backend: "hip",
                reason: format!("loading the {co} code object on {}: {e}", dev.name),
            })?
            .into_iter()
            .zip(&names)
            .map(|(p, n)| (*n, p as usize))
            .collect();
        // v2: each kernel's shared memory from the PTX, allowed once per function.
        let v2 = if nvidia {
            kernels::NAMES_V2
                .iter()
                .chain(
                    kernels::NAMES_MMA
                        .iter()
                        .filter(|n| n.starts_with("moe_gemm")),
                )
                .map(|&n| {
                    let bytes = kernels::v2_smem(image, n)
                        .ok_or_else(|| format!("{co}: no shared-memory size for {n}"))?;
                    dev.set_max_dynamic_shared(funcs[n] as *mut c_void, bytes)
                        .map_err(|e| format!("{n}: {e}"))?;
                    Ok((n, bytes))
                })
                .collect::<Result<_, String>>()
        } else {
            Err(format!(
                "the v2 GEMM is built for NVIDIA only (PTX); {} runs v1",
                dev.arch
            ))
        };
        Ok(HipBackend {
            dev,
            funcs,
            v2,
            code_object: co,
            lock: Mutex::new(()),
            poison: AtomicBool::new(std::env::var("MXMOE_POISON").is_ok_and(|v| v == "1")),
        })
    }

    pub fn adapter(&self) -> String {
        let d = &self.dev;
        let v = d.driver_version;
        format!(
            "{} ({}, {:.0} GiB; {} {}.{}; kernels: {})",
            d.name,
            d.arch,
            d.total_mem as f64 / (1u64 << 30) as f64,
            d.driver.path,
            v / 1000,
            (v % 1000) / 10,
            self.code_object
        )
    }

    /// Kernel choices, in words (for `info` and bench results).
    pub fn notes(&self) -> Vec<String> {
        let built = kernels::BUILT_WITH
            .lines()
            .find(|l| {
                let t = self.code_object.split(' ').next().unwrap_or("");
                l.starts_with(&t.replace('_', ""))
            })
            .unwrap_or("");
        let mma = if self.dev.arch.starts_with("gfx") {
            "v_mfma_f32_16x16x16_bf16"
        } else {
            "mma.sync m16n8k16 bf16"
        };
        let mut v = vec![
            format!("code object: {} ({built})", self.code_object),
            format!(
                "expert kernels: grouped GEMV up to {} token-expert pair(s) per local expert, \
                 else the grouped GEMM on {mma}",
                gemv_variant_for(!self.dev.arch.starts_with("gfx"))
                    .map_or(gemv_pairs(), gemv_pairs_for)
            ),
            format!(
                "decode kernels: MXFP4 GEMV {}, route + lists {} (MXMOE_HIP_GEMV, MXMOE_HIP_ROUTE)",
                gemv_variant_for(!self.dev.arch.starts_with("gfx"))
                    .unwrap_or("(MXMOE_HIP_GEMV invalid)"),
                route_variant().unwrap_or("(MXMOE_HIP_ROUTE invalid)")
            ),
        ];
        if self.dev.arch == "gfx950" {
            v.push("MX-float schemes: v_mfma_scale_f32_16x16x128_f8f6f4 on the MX codes".into());
        }
        match gemm_version() {
            Ok(GemmVersion::Auto) => v.push(match &self.v2 {
                Ok(_) => format!(
                    "bf16 GEMM: auto (MXFP4 weights: mma; other weights: v2 with 16-row tiles up \
                     to {AUTO_V2_MAX_MEAN_PAIRS} token-expert pairs per local expert, v1 above; \
                     MXMOE_HIP_GEMM=v1|v2|mma forces one)"
                ),
                Err(e) => format!("bf16 GEMM: v1 (v2 unavailable here: {e})"),
            }),
            Ok(GemmVersion::V2) => v.push(match &self.v2 {
                Ok(_) => "bf16 GEMM: v2 (MXMOE_HIP_GEMM=v2: dynamic shared memory, 64-deep K \
                          steps, 16/32/64-row tiles)"
                    .into(),
                Err(e) => format!("bf16 GEMM: MXMOE_HIP_GEMM=v2 is set but unavailable: {e}"),
            }),
            Ok(GemmVersion::V1) => v.push("bf16 GEMM: v1".into()),
            Ok(GemmVersion::Mma) => v.push(match &self.v2 {
                Ok(_) => "bf16 GEMM: mma (MXMOE_HIP_GEMM=mma: swap AB, MXFP4 weights decoded in \
                          registers, 16/32/64-pair tiles; other weight formats as auto)"
                    .into(),
                Err(e) => format!("bf16 GEMM: MXMOE_HIP_GEMM=mma is set but unavailable: {e}"),
            }),
            Err(e) => v.push(e.to_string()),
        }
        v
    }

    /// Test hook: fill outputs with [`POISON`] before every run.
    pub fn set_poison(&self, on: bool) {
        self.poison.store(on, Ordering::Relaxed);
    }

    pub fn supports(&self, op: &Op) -> Support {
        match op {
            Op::Quantize { .. } | Op::Dequantize { .. } | Op::Qdq { .. } => Support::Supported,
            Op::Route(r) => route_support(r),
            Op::MoeForward {
                route,
                local_experts,
                taps,
                ..
            } => Support::when(!taps, || {
                "stage taps are a feature of the CPU reference forward".into()
            })
            .and(|| {
                Support::when(*local_experts <= MAX_EXPERTS, || {
                    format!("{local_experts} local experts (moe_lists holds at most {MAX_EXPERTS})")
                })
            })
            .and(|| route_support(route)),
        }
    }

    /// gfx950 with MX-float weights and activations: the scaled-MFMA kernels' name suffix.
    fn scaled_mfma(&self, l: &MoeConfig) -> Option<String> {
        if self.dev.arch != "gfx950" {
            return None;
        }
        let w = kernels::mx_name(l.scheme.weight)?;
        let a = kernels::mx_name(l.scheme.activation?)?;
        let name = format!("{w}_{a}");
        let known = kernels::NAMES_GFX950
            .iter()
            .any(|n| n.ends_with(&format!("_mx_{name}")));
        known.then_some(name)
    }

    fn guard(&self) -> Result<std::sync::MutexGuard<'_, ()>, BackendError> {
        let g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.dev.make_current()?;
        Ok(g)
    }

    fn out(&self, bytes: usize) -> Result<DevBuf, BackendError> {
        let b = self.dev.alloc(bytes)?;
        if self.poison.load(Ordering::Relaxed) {
            b.fill(POISON, b.bytes / 4)?;
        }
        Ok(b)
    }

    fn launch(
        &self,
        k: &str,
        grid: (u32, u32),
        block: u32,
        args: &mut [*mut c_void],
    ) -> Result<(), BackendError> {
        self.launch_shared(k, grid, block, 0, args)
    }

    /// [`HipBackend::launch`] with dynamic shared memory (the v2 GEMM).
    fn launch_shared(
        &self,
        k: &str,
        grid: (u32, u32),
        block: u32,
        shared: u32,
        args: &mut [*mut c_void],
    ) -> Result<(), BackendError> {
        let f = *self
            .funcs
            .get(k)
            .ok_or_else(|| BackendError::Device(format!("kernel {k} is not in the code object")))?;
        self.dev
            .launch_shared(f as *mut c_void, grid, block, shared, args)
    }

    pub fn quantize(
        &self,
        format: MxFormat,
        mode: ScaleMode,
        x: &[f32],
        shape: &[usize],
    ) -> Result<MxTensor, BackendError> {
        ops::validate_quantize(x, shape)?;
        let _g = self.guard()?;
        let nb = x.len() / BLOCK;
        let cb = format.spec().code_bits as usize;
        let xin = self.dev.upload(f32_bytes(x))?;
        let codes = self.out(nb * cb * 4)?;
        let scales = self.out(nb)?;
        let (n, f, m) = (nb as u32, format.id(), mode.id());
        self.launch(
            "mx_quantize",
            (n.div_ceil(256).max(1), 1),
            256,
            &mut args!(xin.ptr, codes.ptr, scales.ptr, n, f, m),
        )?;
        self.dev.synchronize()?;
        let data = codes.read(nb * cb * 4)?;
        let sc = scales.read(nb)?;
        Ok(MxTensor::new(format, shape.to_vec(), data, sc)?)
    }

    pub fn dequantize(&self, t: &MxTensor) -> Result<Vec<f32>, BackendError> {
        ops::validate_dequantize(t)?;
        let _g = self.guard()?;
        let nb = t.numel() / BLOCK;
        let codes = self.dev.upload(&t.data)?;
        let scales = self.dev.upload(&t.scales)?;
        let out = self.out(nb * BLOCK * 4)?;
        let (n, f) = (nb as u32, t.format.id());
        self.launch(
            "mx_dequantize",
            ((nb * BLOCK).div_ceil(256).max(1) as u32, 1),
            256,
            &mut args!(codes.ptr, scales.ptr, out.ptr, n, f),
        )?;
        self.dev.synchronize()?;
        Ok(bytemuck::pod_collect_to_vec(&out.read(nb * BLOCK * 4)?))
    }

    pub fn qdq(
        &self,
        format: MxFormat,
        mode: ScaleMode,
        x: &[f32],
        k: usize,
    ) -> Result<Vec<f32>, BackendError> {
        ops::validate_qdq(x, k)?;
        if k == 0 || !k.is_multiple_of(BLOCK) {
            return Err(FormatError::NotBlockMultiple(k).into());
        }
        let _g = self.guard()?;
        let nb = x.len() / BLOCK;
        let xin = self.dev.upload(f32_bytes(x))?;
        let out = self.out(x.len() * 4)?;
        let (n, f, m) = (nb as u32, format.id(), mode.id());
        self.launch(
            "mx_qdq",
            (n.div_ceil(256).max(1), 1),
            256,
            &mut args!(xin.ptr, out.ptr, n, f, m),
        )?;
        self.dev.synchronize()?;
        Ok(bytemuck::pod_collect_to_vec(&out.read(x.len() * 4)?))
    }

    pub fn route(
        &self,
        cfg: &RouterConfig,
        logits: &[f32],
        n_experts: usize,
        bias: Option<&[f32]>,
    ) -> Result<Routing, BackendError> {
        let m = ops::validate_route(cfg, logits, n_experts, bias)?;
        let op = Op::route_of(cfg, n_experts, bias.is_some());
        if let Support::Unsupported { reason } = self.supports(&op) {
            return Err(unsupported(&op, reason));
        }
        let _g = self.guard()?;
        let k = cfg.top_k;
        let has_bias = wroute::uses_bias(cfg, bias);
        let p = wroute::params(cfg, m, n_experts, has_bias);
        let lb = self.dev.upload(f32_bytes(logits))?;
        let bb = match bias {
            Some(b) if has_bias => self.dev.upload(f32_bytes(b))?,
            _ => self.dev.alloc(4)?,
        };
        let ids = self.out(m * k * 4)?;
        let w = self.out(m * k * 4)?;
        let (kernel, threads, per_block) = route_op_kernel(route_variant()?, RouterShape::of(&p));
        self.launch(
            &kernel,
            ((m as u32).div_ceil(per_block), 1),
            threads,
            &mut args!(p, lb.ptr, bb.ptr, ids.ptr, w.ptr),
        )?;
        self.dev.synchronize()?;
        Ok(Routing {
            top_k: k,
            topk_ids: bytemuck::pod_collect_to_vec(&ids.read(m * k * 4)?),
            topk_weights: bytemuck::pod_collect_to_vec(&w.read(m * k * 4)?),
        })
    }

    /// Upload a layer's weights once.
    pub fn prepare(&self, layer: &MoeLayer) -> Result<HipLayer, BackendError> {
        layer.validate()?;
        let op = Op::moe_of(
            &layer.config,
            layer.weights.e_score_correction_bias.is_some(),
            false,
        );
        if let Support::Unsupported { reason } = self.supports(&op) {
            return Err(unsupported(&op, reason));
        }
        let _g = self.guard()?;
        let w = &layer.weights;
        let up = |d: &[u8]| self.dev.upload(d);
        let opt = |v: Option<&[f32]>| v.map(|b| self.dev.upload(f32_bytes(b))).transpose();
        let nv4 = nv4_layout(
            !self.dev.arch.starts_with("gfx"),
            layer.config.scheme.weight.spec().code_bits,
            self.v2.is_ok(),
        )?;
        // nv4: the code words rearranged in place once (hip/gemm_mma.h mx_nv4_repack).
        let codes = |d: &[u8]| -> Result<DevBuf, BackendError> {
            let b = up(d)?;
            if nv4 {
                let n = (d.len() / 4) as u64;
                self.launch(
                    "mx_nv4_repack",
                    (n.div_ceil(256) as u32, 1),
                    256,
                    &mut args!(b.ptr, n),
                )?;
            }
            Ok(b)
        };
        Ok(HipLayer {
            config: layer.config.clone(),
            correction_bias: w.e_score_correction_bias.is_some(),
            nv4,
            w13: codes(&w.w13.data)?,
            s13: up(&w.w13.scales)?,
            w2: codes(&w.w2.data)?,
            s2: up(&w.w2.scales)?,
            bias13: opt(w.w13_bias.as_deref())?,
            bias2: opt(w.w2_bias.as_deref())?,
            map: w
                .expert_map
                .as_deref()
                .map(|m| self.dev.upload(bytemuck::cast_slice(m)))
                .transpose()?,
            route_bias: opt(w
                .e_score_correction_bias
                .as_deref()
                .filter(|b| wroute::uses_bias(&layer.config.router, Some(b))))?,
            dummy: self.dev.alloc(16)?,
            counters: {
                let n = layer
                    .config
                    .hidden
                    .div_ceil(GEMV_OUT_ROWS.min(GEMV2_OUT_ROWS));
                let c = self.dev.alloc(n * 4)?;
                c.fill(0, n)?;
                c
            },
        })
    }

    /// One forward of a prepared layer; GPU time per kernel or for the whole forward (events)
    /// as `timing` asks.
    pub fn moe(
        &self,
        g: &HipLayer,
        hidden: &[f32],
        logits: &[f32],
        opts: MoeOptions,
        timing: Timing,
    ) -> Result<(MoeOutput, Option<PassTimes>), BackendError> {
        let l = &g.config;
        let timed = timing == Timing::Passes;
        // Timing::Host: the host time of the upload (waited for), the forward (setup, launches,
        // synchronize) and the readback.
        let t_start = std::time::Instant::now();
        let m = ops::validate_moe(l, hidden, logits)?;
        ops::validate_route(&l.router, logits, l.n_experts, None)?;
        let _guard = self.guard()?;
        let prof = HostProfile::start();
        let (h, inter, k, el) = (l.hidden, l.inter, l.router.top_k, l.local_experts);
        let na = m * k;
        // The GEMV for these weights (MXFP4: MXMOE_HIP_GEMV or the device's default).
        let cb = l.scheme.weight.spec().code_bits;
        let gv = if cb == 4 {
            gemv_variant_for_layer(!self.dev.arch.starts_with("gfx"), g.nv4)?
        } else {
            "v1"
        };
        // MXMOE_HIP_MOE_PATH=gemm|gemv forces the expert kernels (benchmarks, tests).
        let gemv = match std::env::var("MXMOE_HIP_MOE_PATH").as_deref() {
            Ok("gemm") => false,
            Ok("gemv") => true,
            _ => na as f64 <= gemv_pairs_for(gv) * el.max(1) as f64 || m <= 4,
        };
        // MXMOE_HIP_FUSED_COMBINE=0 keeps the combine kernel (measurements, diagnosis).
        let fuse_combine = gemv
            && m <= FUSED_COMBINE_MAX_TOKENS
            && std::env::var("MXMOE_HIP_FUSED_COMBINE").map_or(true, |v| v != "0");
        // The bf16 GEMM's version and, for v2 and mma, its tile (the lists kernel cuts tiles of
        // tile_m). mma takes MXFP4 weights only; other formats run what auto picks.
        let version = gemm_version()?;
        if matches!(version, GemmVersion::V2 | GemmVersion::Mma) {
            if let Err(e) = &self.v2 {
                let v = if version == GemmVersion::V2 {
                    "v2"
                } else {
                    "mma"
                };
                return Err(BackendError::Device(format!("MXMOE_HIP_GEMM={v}: {e}")));
            }
        }
        let bf16_gemm = !gemv && self.scaled_mfma(l).is_none();
        let fp4 = l.scheme.weight == MxFormat::Fp4E2M1;
        let use_mma = bf16_gemm
            && fp4
            && self.v2.is_ok()
            && match version {
                GemmVersion::Mma => true,
                GemmVersion::Auto => auto_uses_mma(na, el),
                _ => false,
            };
        let use_v2 = bf16_gemm
            && !use_mma
            && match version {
                GemmVersion::V1 => false,
                GemmVersion::Auto | GemmVersion::Mma => self.v2.is_ok() && auto_uses_v2(na, el),
                GemmVersion::V2 => true,
            };
        // The codes' layout must be the one these kernels decode (hip/nv4.h).
        check_layout(g.nv4, if gemv { gemv_is_mma(gv) } else { use_mma })?;
        let v2_tm = if use_v2 || use_mma {
            Some(v2_tile_m(na, el)?)
        } else {
            None
        };
        let tile_m = match (gemv, v2_tm) {
            (true, _) => gemv_tile(gv),
            (false, Some(t)) => t,
            (false, None) => GEMM_TILE,
        };
        let max_tiles = crate::moe::budget::max_tiles(na, el, tile_m);
        let dev = &self.dev;
        // The results in one buffer, read back in one copy: the output, the ids, the weights.
        let out_bytes = m * h * 4;
        let ids_off = out_bytes.next_multiple_of(256);
        let w_off = ids_off + (na * 4).next_multiple_of(256);
        let result = self.out(w_off + na * 4)?;
        let (out_p, ids_p, topw_p) = (
            result.ptr,
            result.ptr + ids_off as u64,
            result.ptr + w_off as u64,
        );
        let rows = self.out(na * 4)?;
        let slot = self.out(na * 4)?;
        let tiles = self.out((1 + 3 * max_tiles) * 4)?;
        let a2 = self.out(na * inter * 4)?;
        let y2 = self.out(na * h * 4)?;
        let xq = match l.scheme.activation {
            Some(_) => Some(self.out(m * h * 4)?),
            None => None,
        };
        let p = MoeParams {
            m: m as u32,
            top_k: k as u32,
            hidden: h as u32,
            inter: inter as u32,
            n_experts: l.n_experts as u32,
            e_local: el as u32,
            has_map: g.map.is_some() as u32,
            has_bias13: g.bias13.is_some() as u32,
            has_bias2: g.bias2.is_some() as u32,
            on_input: l.router.apply_router_weight_on_input as u32,
            weight_fmt: l.scheme.weight.id(),
            act_fmt: l
                .scheme
                .activation
                .map_or(crate::backend::wgpu::source::FMT_NONE, |f| f.id()),
            act_mode: l.act_scale_mode.id(),
            activation: l.activation.id(),
            round_bf16: (opts.intermediate == Intermediate::Bf16) as u32,
            tile_m: tile_m as u32,
        };
        let mut marks: Vec<(String, Event, Event)> = Vec::new();
        // `block`: threads per block, and for kernels with dynamic shared memory (the v2 GEMM)
        // its bytes in the high half (`with_shared`).
        let mut run = |label: &str,
                       k: &str,
                       grid: (u32, u32),
                       block: u64,
                       a: &mut [*mut c_void]|
         -> Result<(), BackendError> {
            let (block, shared) = (block as u32, (block >> 32) as u32);
            if timed {
                let (s, e) = (dev.event()?, dev.event()?);
                s.record()?;
                self.launch_shared(k, grid, block, shared, a)?;
                e.record()?;
                marks.push((label.to_string(), s, e));
                Ok(())
            } else {
                self.launch_shared(k, grid, block, shared, a)
            }
        };
        let rp = wroute::params(&l.router, m, l.n_experts, g.route_bias.is_some());
        let rb = g.route_bias.as_ref().unwrap_or(&g.dummy).ptr;
        let map = g.map.as_ref().unwrap_or(&g.dummy).ptr;
        let plan = route_plan(
            route_variant()?,
            RouterShape::of(&rp),
            m,
            fused_route_tokens(),
        );
        // The hidden states as bf16 in mx_to_bf16_p8's layout (hi; lo and row flags for f32
        // activations of weight-only schemes) for the GEMV mmab and for the mma GEMM. `x_split`
        // also gives the GEMV its kernels (a bf16 model's hidden states need no lo).
        // Weight-only schemes under v6's warp routing convert them in the route kernel
        // (`route_with_conversion`; the fused few-token kernels, which write no row flags, for
        // the GEMV only), the others in mx_to_bf16_p8 after the QDQ: for the GEMV from
        // MMAB_CONVERT_MIN_TOKENS (below, its gemv1 converts in its loop: `mmab_gemv1`).
        let weight_only = l.scheme.activation.is_none();
        let x_split = if gemv {
            weight_only && !all_bf16(hidden)
        } else {
            weight_only
        };
        let conv_kernel = if weight_only {
            route_with_conversion(&plan, !gemv)
        } else {
            None
        };
        let gemv_bf16 = gemv
            && gemv_takes_bf16(gv)
            && (m >= MMAB_CONVERT_MIN_TOKENS || conv_kernel.is_some() || !weight_only);
        let x_p8 = gemv_bf16 || (!gemv && use_mma);
        // MX activations: the input QDQ writes the bf16 layout itself (mx_qdq_lanes_p8), no
        // f32 copy and no conversion kernel.
        let qdq_p8 = x_p8 && xq.is_some();
        let xb = if x_p8 {
            let n = m * h;
            let buf = dev.alloc(if x_split { 4 * n + 4 * m } else { 2 * n })?;
            let lo = if x_split {
                buf.ptr + 2 * n as u64
            } else {
                0u64
            };
            Some((buf, lo))
        } else {
            None
        };
        let route_conv = xb.as_ref().and(conv_kernel);
        // Timing::Forward: one event pair around all the kernels (none between them).
        let span = match timing {
            Timing::Forward => Some((dev.event()?, dev.event()?)),
            _ => None,
        };
        // The inputs in one copy (logits, then the hidden states) through the page-locked
        // staging buffer, last before the kernels: the host work above is done by then, so the
        // first kernel's launch follows the copy at once (the GPU does not wait for it).
        let t_setup = t_start.elapsed();
        let t_up0 = std::time::Instant::now();
        let (inputs, in_ptrs) = dev.upload_parts(&[f32_bytes(logits), f32_bytes(hidden)])?;
        let (logits_p, hidden_p) = (in_ptrs[0], in_ptrs[1]);
        if timing == Timing::Host {
            dev.synchronize()?;
        }
        let upload_ms = t_up0.elapsed().as_secs_f64() * 1e3;
        let t_fwd0 = std::time::Instant::now();
        let t_upload = prof.lap();
        if let Some((s, _)) = &span {
            s.record()?;
        }
        let (xbh, xbl) = xb.as_ref().map_or((0u64, 0u64), |(b, lo)| (b.ptr, *lo));
        let hk = h as u32;
        match plan {
            RoutePlan::Fused { kernel, threads } => match &route_conv {
                // Decode: routing and the lists in one block (moe_route_lists*: hip/lists.h, v6's
                // route_warp.h, route_lists_w3.h, p8_fused.h), with the conversion: one more
                // block per `threads` groups of 8 values.
                Some(kx) => run(
                    "route+lists",
                    kx,
                    (1 + (m * h / 8).div_ceil(threads as usize) as u32, 1),
                    threads,
                    &mut args!(
                        rp, p, logits_p, rb, ids_p, topw_p, map, rows.ptr, slot.ptr, tiles.ptr,
                        hidden_p, xbh, xbl, hk
                    ),
                )?,
                None => run(
                    "route+lists",
                    &kernel,
                    (1, 1),
                    threads,
                    &mut args!(
                        rp, p, logits_p, rb, ids_p, topw_p, map, rows.ptr, slot.ptr, tiles.ptr
                    ),
                )?,
            },
            RoutePlan::Separate {
                route,
                threads,
                per_block,
                lists,
            } => {
                let grid = ((m as u32).div_ceil(per_block), 1);
                match &route_conv {
                    Some(kx) => run(
                        "route",
                        kx,
                        grid,
                        threads,
                        &mut args!(rp, logits_p, rb, ids_p, topw_p, hidden_p, xbh, xbl, hk),
                    )?,
                    None => run(
                        "route",
                        &route,
                        grid,
                        threads,
                        &mut args!(rp, logits_p, rb, ids_p, topw_p),
                    )?,
                }
                run(
                    "moe/lists",
                    &lists,
                    (1, 1),
                    256,
                    &mut args!(p, ids_p, map, rows.ptr, slot.ptr, tiles.ptr),
                )?;
            }
        }
        let x_in = match (&xq, l.scheme.activation) {
            (Some(xq), Some(f)) => {
                let nb = (m * h / BLOCK) as u32;
                let (fi, mi) = (f.id(), l.act_scale_mode.id());
                let (kq, out) = if qdq_p8 {
                    ("mx_qdq_lanes_p8", xbh)
                } else {
                    ("mx_qdq_lanes", xq.ptr)
                };
                run(
                    "moe/input_qdq",
                    kq,
                    ((nb as usize * BLOCK).div_ceil(256) as u32, 1),
                    256,
                    &mut args!(hidden_p, out, nb, fi, mi),
                )?;
                xq.ptr
            }
            _ => hidden_p,
        };
        // The conversion where neither the route kernel nor the input QDQ did it.
        if x_p8 && route_conv.is_none() && !qdq_p8 {
            let (r, kk) = (m as u32, h as u32);
            run(
                "moe/to_bf16",
                "mx_to_bf16_p8",
                (r, 1),
                256,
                &mut args!(x_in, xbh, xbl, r, kk),
            )?;
        }
        let b13 = g.bias13.as_ref().unwrap_or(&g.dummy).ptr;
        let b2 = g.bias2.as_ref().unwrap_or(&g.dummy).ptr;
        let mt = max_tiles as u32;
        let (g1, g2) = ((mt, (inter / 32) as u32), (mt, h.div_ceil(64) as u32));
        if gemv {
            // hip/gemv.h gemv_body, hip/gemv_mma.h: 32 intermediate columns / `rows2` output
            // rows per block.
            // Weight-only schemes take f32 activations as bf16 hi + lo, unless they are bf16
            // values (a bf16 model's hidden states; the intermediates when rounded to bf16):
            // then lo is +0 and the hi-only kernel gives the same bits with half the MMAs.
            let split = [
                x_split,
                weight_only && opts.intermediate != Intermediate::Bf16,
            ];
            let (mut k1, k2, rows2) = gemv_kernels(gv, cb, split);
            let rows2 = gemv2_rows(gv, rows2, max_tiles, h, dev.sms)?;
            let k2 = gemv2_kernel_rows(&k2, gv, rows2);
            if gemv_takes_bf16(gv) {
                let (k, convert) = mmab_gemv1(&k1, m, route_conv.is_some() || qdq_p8);
                let k = gemv1_occupancy(&k, max_tiles, inter, dev.sms);
                debug_assert_eq!(convert, xb.is_some());
                k1 = k;
            }
            let g2 = (mt, h.div_ceil(rows2) as u32);
            let none = 0u64;
            // mmab: the hidden states as bf16 in mx_to_bf16_p8's order (hi, then lo and its
            // row flags when split), gemv1 writes a2 that way (hi, lo: two bytes each of the
            // four a2 has per value).
            let x1 = if xb.is_some() { xbh } else { x_in };
            run(
                "moe/gemv1",
                &k1,
                g1,
                256,
                &mut args!(
                    p, rows.ptr, tiles.ptr, x1, g.w13.ptr, g.s13.ptr, a2.ptr, b13, topw_p, none,
                    none, none
                ),
            )?;
            // Decode: the combine runs in gemv2's last block per column block (counters).
            let counters = if fuse_combine { g.counters.ptr } else { 0 };
            run(
                "moe/gemv2",
                &k2,
                g2,
                256,
                &mut args!(
                    p, rows.ptr, tiles.ptr, a2.ptr, g.w2.ptr, g.s2.ptr, y2.ptr, b2, topw_p,
                    slot.ptr, counters, out_p
                ),
            )?;
        } else if let Some(mx) = self.scaled_mfma(l) {
            // gfx950: the scaled MFMA multiplies the MX codes of the weights and of the
            // activations (quantized here with the activation format and scale mode).
            let (k1, k2) = (format!("moe_gemm1_mx_{mx}"), format!("moe_gemm2_mx_{mx}"));
            let af = l
                .scheme
                .activation
                .expect("scaled_mfma needs MX activations");
            let (fi, mi) = (af.id(), l.act_scale_mode.id());
            let cba = af.spec().code_bits as usize;
            let nb1 = (m * h / BLOCK) as u32;
            let xc = dev.alloc(nb1 as usize * cba * 4)?;
            let xs = dev.alloc(nb1 as usize)?;
            run(
                "moe/quantize_x",
                "mx_quantize",
                (nb1.div_ceil(256), 1),
                256,
                &mut args!(hidden_p, xc.ptr, xs.ptr, nb1, fi, mi),
            )?;
            run(
                "moe/gemm1",
                &k1,
                g1,
                256,
                &mut args!(
                    p, rows.ptr, tiles.ptr, xc.ptr, xs.ptr, g.w13.ptr, g.s13.ptr, a2.ptr, b13,
                    topw_p
                ),
            )?;
            let nb2 = (na * inter / BLOCK) as u32;
            let ac = dev.alloc(nb2 as usize * cba * 4)?;
            let asc = dev.alloc(nb2 as usize)?;
            run(
                "moe/quantize_a",
                "mx_quantize",
                (nb2.div_ceil(256), 1),
                256,
                &mut args!(a2.ptr, ac.ptr, asc.ptr, nb2, fi, mi),
            )?;
            run(
                "moe/gemm2",
                &k2,
                g2,
                256,
                &mut args!(
                    p, rows.ptr, tiles.ptr, ac.ptr, asc.ptr, g.w2.ptr, g.s2.ptr, y2.ptr, b2, topw_p
                ),
            )?;
        } else {
            // Activations as bf16 for the matrix cores: exact for QDQ'd values; hi + lo for the
            // unquantized activations of weight-only schemes (`split`).
            let split = l.scheme.activation.is_none();
            let sfx = if split { "_split" } else { "" };
            let (k1, k2) = match v2_tm {
                // mma: the same arguments, grid (128 weight rows a block) and tile list
                // contract (hip/gemm_mma.h), activations from mx_to_bf16_p8.
                // MXMOE_HIP_MMA_VARIANT picks a variant (measurements).
                Some(tm) if use_mma => {
                    let bf16_acts = opts.intermediate == Intermediate::Bf16;
                    let vs = mma_suffix(mma_variant_for(split, tm, bf16_acts)?);
                    (
                        format!("moe_gemm1_mma_t{tm}{sfx}{vs}_cb4"),
                        format!("moe_gemm2_mma_t{tm}{sfx}{vs}_cb4"),
                    )
                }
                // The same arguments, grid and tile list contract as v1 (hip/gemm_v2.h
                // gemm_v2_body), tiles of tm pair rows.
                Some(tm) => (
                    format!("moe_gemm1_v2_t{tm}{sfx}_cb{cb}"),
                    format!("moe_gemm2_v2_t{tm}{sfx}_cb{cb}"),
                ),
                None => (
                    format!("moe_gemm1{sfx}_cb{cb}"),
                    format!("moe_gemm2{sfx}_cb{cb}"),
                ),
            };
            let block = match (&self.v2, v2_tm) {
                (Ok(v2), Some(_)) => {
                    let smem = |k: &str| {
                        v2.get(k).copied().ok_or_else(|| {
                            BackendError::Device(format!("kernel {k} is not in the code object"))
                        })
                    };
                    // gemm1 and gemm2 of a variant share the layout (one PTX constant).
                    let (s1, s2) = (smem(&k1)?, smem(&k2)?);
                    debug_assert_eq!(s1, s2);
                    let threads = if use_mma { MMA_THREADS } else { V2_THREADS };
                    with_shared(threads, s1.max(s2))
                }
                _ => gemm_threads(&dev.arch) as u64,
            };
            // x = column block, y = tile slot (hip/gemm_v1.h: L2 reuse); grid y is at most 65535.
            if mt > 65535 {
                return Err(BackendError::Device(format!(
                    "HIP GEMM: {na} token-expert pairs need {mt} row tiles, more than the 65535 \
                     one launch takes; split the batch"
                )));
            }
            let (g1, g2) = (
                (inter.div_ceil(GEMM_N / 2) as u32, mt),
                (h.div_ceil(GEMM_N) as u32, mt),
            );
            // mma: one u32 per row after the lo values (hip/gemm_mma.h mx_to_bf16_p8: whether
            // some lo of the row is not +0; tiles of rows without one skip the lo MMAs).
            let flags = |rows: usize| if use_mma { rows * 4 } else { 0 };
            // The hidden states as bf16: mma in mx_to_bf16_p8's layout, converted above (`xb`:
            // by the route kernel or mx_to_bf16_p8); v1 / v2 here, one thread a value.
            let xv12 = if use_mma {
                None
            } else {
                let n = m * h;
                let xh = dev.alloc(2 * n)?;
                let xl = if split { Some(dev.alloc(2 * n)?) } else { None };
                let xlp = xl.as_ref().map_or(0u64, |b| b.ptr);
                run(
                    "moe/to_bf16",
                    "mx_to_bf16",
                    ((n as u64).div_ceil(256) as u32, 1),
                    256,
                    &mut args!(x_in, xh.ptr, xlp, n as u64),
                )?;
                Some((xh, xl))
            };
            let (xhp, xlp) = match &xv12 {
                Some((xh, xl)) => (xh.ptr, xl.as_ref().map_or(0u64, |b| b.ptr)),
                None => (xbh, xbl),
            };
            // gemm2's bf16 activations: hi, then (split) lo and the row flags, in one buffer.
            // The mma gemm1 writes them itself (hip/gemm_v1.h gemm_p8_store); v1 / v2 write f32
            // and a conversion kernel follows.
            let n2 = na * inter * 2;
            let ab = dev.alloc(if split { 2 * n2 + flags(na) } else { n2 })?;
            let (ahp, alp) = (ab.ptr, if split { ab.ptr + n2 as u64 } else { 0u64 });
            let out1 = if use_mma { ahp } else { a2.ptr };
            run(
                "moe/gemm1",
                &k1,
                g1,
                block,
                &mut args!(
                    p, rows.ptr, tiles.ptr, xhp, xlp, g.w13.ptr, g.s13.ptr, out1, b13, topw_p
                ),
            )?;
            if !use_mma {
                let n = (na * inter) as u64;
                run(
                    "moe/to_bf16",
                    "mx_to_bf16",
                    (n.div_ceil(256) as u32, 1),
                    256,
                    &mut args!(a2.ptr, ahp, alp, n),
                )?;
            }
            run(
                "moe/gemm2",
                &k2,
                g2,
                block,
                &mut args!(
                    p, rows.ptr, tiles.ptr, ahp, alp, g.w2.ptr, g.s2.ptr, y2.ptr, b2, topw_p
                ),
            )?;
        }
        if !fuse_combine {
            run(
                "moe/combine",
                "moe_combine",
                ((m * h).div_ceil(256) as u32, 1),
                256,
                &mut args!(p, slot.ptr, y2.ptr, out_p),
            )?;
        }
        if let Some((_, e)) = &span {
            e.record()?;
        }
        let t_launch = prof.lap();
        // The output's room, its pages faulted in (huge pages when large) while the device
        // works: a fresh `vec![0.0; m * h]` of tens of MB costs a page fault per 4 KiB in the
        // copy-out and a slow free (wgpu's readback destination, docs/h200-2026-12-01s8-wgpuio).
        let mut output = crate::backend::host_io::touched_vec::<f32>(m * h);
        dev.synchronize()?;
        let t_gpu = prof.lap();
        let forward_ms = (t_setup + t_fwd0.elapsed()).as_secs_f64() * 1e3;
        let t_rb0 = std::time::Instant::now();
        let times = if let Some((s, e)) = &span {
            Some(vec![("forward".to_string(), s.elapsed_to(e)?)])
        } else if timed {
            let mut t = Vec::new();
            for (label, s, e) in &marks {
                t.push((label.clone(), s.elapsed_to(e)?));
            }
            Some(t)
        } else {
            None
        };
        // One copy back; the output is copied out on several threads when large.
        let mut topk_ids = vec![0i32; na];
        let mut topk_weights = vec![0f32; na];
        result.read_with(w_off + na * 4, |st| {
            crate::backend::host_io::pod_append(&mut output, &st[..out_bytes]);
            bytemuck::cast_slice_mut(&mut topk_ids).copy_from_slice(&st[ids_off..ids_off + na * 4]);
            bytemuck::cast_slice_mut(&mut topk_weights).copy_from_slice(&st[w_off..w_off + na * 4]);
            Ok(())
        })?;
        drop(inputs);
        prof.report(m, [t_upload, t_launch, t_gpu, prof.lap()]);
        let times = if timing == Timing::Host {
            let rb = t_rb0.elapsed().as_secs_f64() * 1e3;
            Some(vec![
                ("upload".to_string(), upload_ms),
                ("forward".to_string(), forward_ms),
                ("readback".to_string(), rb),
            ])
        } else {
            times
        };
        Ok((
            MoeOutput {
                output,
                routing: Routing {
                    top_k: k,
                    topk_ids,
                    topk_weights,
                },
                stages: None,
            },
            times,
        ))
    }
}

/// `MXMOE_HIP_HOST_PROFILE=1`: the host time of a forward by phase (upload, launches, waiting
/// for the GPU, copy back), printed to stderr for one forward in 64 (measurement aid).
struct HostProfile {
    on: bool,
    last: std::cell::Cell<std::time::Instant>,
}

static PROFILE_COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl HostProfile {
    fn start() -> Self {
        HostProfile {
            on: std::env::var("MXMOE_HIP_HOST_PROFILE").is_ok_and(|v| v == "1"),
            last: std::cell::Cell::new(std::time::Instant::now()),
        }
    }
    /// Milliseconds since the last lap.
    fn lap(&self) -> f64 {
        if !self.on {
            return 0.0;
        }
        let now = std::time::Instant::now();
        let ms = (now - self.last.get()).as_secs_f64() * 1e3;
        self.last.set(now);
        ms
    }
    fn report(&self, m: usize, t: [f64; 4]) {
        if self.on
            && PROFILE_COUNT
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(64)
        {
            eprintln!(
                "hip host profile, M = {m}: upload {:.3} ms, launches {:.3} ms, GPU wait {:.3} ms, \
                 copy back {:.3} ms",
                t[0], t[1], t[2], t[3]
            );
        }
    }
}
