//! The HIP backend (feature `hip`): host side of the kernels in `hip/mxmoe.cu`, on whatever the
//! run-time driver offers (an AMD GPU through HIP, an NVIDIA GPU through the CUDA driver).
//!
//! This file holds [`HipBackend`] itself: the driver, the device and its loaded code object
//! (`new`), what it says of itself (`adapter`, `notes`, `supports`, and the device list of
//! `mxmoe info`), and what every op shares: the op lock, poisoned outputs, the launch helpers
//! and the `args!` macro. The ops are the other `impl HipBackend` blocks of this folder, as
//! wgpu's `Context` is spread over `wgpu/context.rs`, `wgpu/buffers.rs` and `wgpu/readback.rs`:
//! `single_ops.rs` (quantize, dequantize, QDQ and routing on their own), `layer.rs` (`prepare`:
//! a layer's weights uploaded once) and `moe.rs` (the MoE forward); `choice/` decides which
//! kernels they run.
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

use super::choice::{
    gemm_version, gemv_pairs, gemv_pairs_for, gemv_variant_for, route_variant,
    routed_gemv1_enabled, GemmVersion, AUTO_V2_MAX_MEAN_PAIRS, WG256_MIN_K,
};
use super::driver::{DevBuf, Device, Driver};
use super::kernels;
use crate::backend::wgpu::POISON;
use crate::backend::{BackendError, Op, RouteOp, Support};
use crate::moe::MoeConfig;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub use super::choice::{MAX_EXPERTS, MAX_GROUPS, MAX_TOP_K};

/// The HIP backend: a device, its loaded module and the kernels' handles.
pub struct HipBackend {
    pub(super) dev: Arc<Device>,
    funcs: std::collections::HashMap<&'static str, usize>,
    /// The v2 GEMM kernels' dynamic shared memory (bytes, already allowed on the device), or why
    /// v2 cannot run here (AMD, or the driver refused the size).
    pub(super) v2: Result<std::collections::HashMap<&'static str, u32>, String>,
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

/// Kernel arguments: pointers to each value (the driver copies them at launch).
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        [$( (&$a) as *const _ as *mut ::std::ffi::c_void ),*]
    };
}
pub(super) use args;

pub(super) fn f32_bytes(v: &[f32]) -> &[u8] {
    bytemuck::cast_slice(v)
}

pub(super) fn unsupported(op: &Op, reason: String) -> BackendError {
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
        // The wgmma GEMM: only in the sm_90a PTX, which only compute capability 9.0 loads.
        let wgmma: &[&'static str] = if dev.arch == "sm_90" {
            &kernels::NAMES_WGMMA
        } else {
            &[]
        };
        names.extend(wgmma);
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
                .chain(wgmma.iter().filter(|n| n.starts_with("moe_gemm")))
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

    /// `mxmoe bench`'s floor: the device-to-device copy bandwidth of each timed copy (GB/s,
    /// read + write; see `Device::copy_bandwidth`), or None where the driver has no such copy.
    pub fn copy_bandwidth(
        &self,
        bytes: usize,
        warm: usize,
        reps: usize,
    ) -> Result<Option<Vec<f64>>, BackendError> {
        let _g = self.guard()?;
        self.dev.copy_bandwidth(bytes, warm, reps)
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
        if matches!(
            gemv_variant_for(!self.dev.arch.starts_with("gfx")),
            Ok("mmab")
        ) {
            v.push(if routed_gemv1_enabled() {
                "one token of a weight-only scheme with a softmax router: gemv1 routes it \
                 itself, no route kernel (MXMOE_HIP_GEMV_ROUTED=0: the route kernel first)"
                    .into()
            } else {
                "one token: the route kernel before gemv1 (MXMOE_HIP_GEMV_ROUTED=0)".into()
            });
        }
        if self.dev.arch == "gfx950" {
            v.push("MX-float schemes: v_mfma_scale_f32_16x16x128_f8f6f4 on the MX codes".into());
        }
        if self.dev.arch == "sm_90" {
            v.push(format!(
                "MXFP4 prefill GEMM on compute capability 9.0: wgmma.mma_async on 256-row blocks \
                 for 64-pair tiles of stages with K >= {WG256_MIN_K}, mma.sync elsewhere \
                 (MXMOE_HIP_MMA_VARIANT={})",
                std::env::var("MXMOE_HIP_MMA_VARIANT").unwrap_or_else(|_| "unset".into())
            ));
        }
        if !self.dev.arch.starts_with("gfx") {
            v.push(match super::choice::nv4_rows() {
                Ok(true) => "MXFP4 blocks on the matrix-core path: in the rows order \
                             (MXMOE_HIP_NV4_ROWS=1: each 16-row group's k steps contiguous, as \
                             the lanes load them; not measured yet)"
                    .into(),
                Ok(false) => "MXFP4 blocks on the matrix-core path: in the stored row order \
                              (MXMOE_HIP_NV4_ROWS=1: the rows order)"
                    .into(),
                Err(e) => e.to_string(),
            });
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
    pub(super) fn scaled_mfma(&self, l: &MoeConfig) -> Option<String> {
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

    pub(super) fn guard(&self) -> Result<std::sync::MutexGuard<'_, ()>, BackendError> {
        let g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.dev.make_current()?;
        Ok(g)
    }

    pub(super) fn out(&self, bytes: usize) -> Result<DevBuf, BackendError> {
        let b = self.dev.alloc(bytes)?;
        if self.poison.load(Ordering::Relaxed) {
            b.fill(POISON, b.bytes / 4)?;
        }
        Ok(b)
    }

    pub(super) fn launch(
        &self,
        k: &str,
        grid: (u32, u32),
        block: u32,
        args: &mut [*mut c_void],
    ) -> Result<(), BackendError> {
        self.launch_shared(k, grid, block, 0, args)
    }

    /// [`HipBackend::launch`] with dynamic shared memory (the v2 GEMM).
    pub(super) fn launch_shared(
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
}
