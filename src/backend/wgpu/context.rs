//! The wgpu context, created once: instance, adapter choice, device, queue, limits, the
//! weight-chunk knobs, the pipeline cache (keyed by [`Shader`] + entry + overrides), the
//! dispatch helpers every op file uses (bind groups, grid sizing) and the one-workgroup runner
//! of the start-up device checks (`run_check`).
//!
//! `Context`'s other methods live beside it, in further `impl Context` blocks over its fields
//! (`pub(super)` where they need them): the buffer pool and uploads in buffers.rs, submission
//! and readback in readback.rs, timestamp timers in timer.rs, the cooperative GEMM's kernels
//! and start-up checks in coop.rs, the decode GEMV's layout and checks in gemv_config.rs.
//! Adapter enumeration and ranking live in adapter.rs, the host-time profile in
//! host_profile.rs.

use super::adapter::{
    all_adapters, coop_config_ok, instance, instance_for, rank, summarize, COOP_FEATURES, WANTED,
};
pub use super::adapter::{enumerate_adapters, AdapterSummary};
use super::buffers::Upload;
use super::coop::{coop_runtime_checks, CoopKernel, COOP_TRUSTED_ENTRIES};
use super::gemv_config::{GemvConfig, DEFAULT_GEMV_PAIRS_PER_EXPERT, DEFAULT_OWN_LISTS_MAX};
use super::readback::{READ_PIECE, READ_STREAM_MIN};
use super::source::{Shader, MAX_CHUNKS_PER_PASS};
use crate::backend::BackendError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// gemv2 fuses the combine up to this many tokens (its last workgroup per 64-column slice sums
/// M x 64 outputs; the HIP backend's limit too).
pub const FUSED_COMBINE_MAX_TOKENS: usize = 16;

/// The most storage buffers an expert pass of the multi-chunk compositions binds
/// (moe_weights_multi.wgsl: 9 more than the one-chunk passes' most, gemv1 and gemv2's 13;
/// `tests/shaders.rs` checks it against what naga finds the entry points use).
pub const MULTI_STORAGE_BINDINGS: u32 = 22;

/// Forwards read several weight chunks per expert dispatch (unless `MXMOE_WGPU_CHUNKS_PER_PASS`
/// says otherwise) only on the GEMV with at most this many token-expert pairs: there a pass's
/// time is latency, and one dispatch over both of DeepSeek-R1's chunks took 0.087 + 0.050 ms
/// (gemv1 + gemv2) at 1 token against 0.121 + 0.067 for two dispatches each, 0.443 + 0.252
/// against 0.452 + 0.264 at 8 tokens; at 64 tokens (512 pairs) both ways measured the same and
/// from 512 tokens (the GEMV) and on the GEMM (2048 tokens) the one dispatch was 1-5 % slower
/// (its loads branch on the chunk; H200, docs/h200-2026-12-01s7-wgpu).
pub const MULTI_CHUNK_MAX_PAIRS: usize = 256;

/// The weight-chunk knobs from the environment and the adapter's limits: (experts per chunk
/// (0: no limit), chunks per expert pass, why one chunk per pass where it is so). A value that
/// does not parse, or asks for more chunks per pass than the bindings allow, is an error.
fn chunk_knobs(limits: &wgpu::Limits) -> Result<(u64, u64, String), BackendError> {
    let parse =
        |name: &str, ok: &dyn Fn(u64) -> bool, want: &str| -> Result<Option<u64>, BackendError> {
            match std::env::var(name) {
                Err(_) => Ok(None),
                Ok(v) if v.trim().is_empty() => Ok(None),
                Ok(v) => match v.trim().parse::<u64>() {
                    Ok(n) if ok(n) => Ok(Some(n)),
                    _ => Err(BackendError::Device(format!("{name}={v}: expected {want}"))),
                },
            }
        };
    let experts = parse(
        "MXMOE_WGPU_CHUNK_EXPERTS",
        &|n| n >= 1,
        "a number of experts >= 1",
    )?;
    let per_pass = parse(
        "MXMOE_WGPU_CHUNKS_PER_PASS",
        &|n| (1..=MAX_CHUNKS_PER_PASS as u64).contains(&n),
        "1, 2, 3 or 4",
    )?;
    let have = limits.max_storage_buffers_per_shader_stage;
    let fits = have >= MULTI_STORAGE_BINDINGS;
    let note = if fits {
        String::new()
    } else {
        format!(
            "the adapter offers {have} storage buffers per shader stage, the multi-chunk expert              passes bind up to {MULTI_STORAGE_BINDINGS}"
        )
    };
    let per_pass = match per_pass {
        Some(n) if n > 1 && !fits => {
            return Err(BackendError::Device(format!(
                "MXMOE_WGPU_CHUNKS_PER_PASS={n}: {note}; only 1 is possible here"
            )))
        }
        Some(1) => {
            let note = "MXMOE_WGPU_CHUNKS_PER_PASS=1".to_string();
            return Ok((experts.unwrap_or(0), 1, note));
        }
        Some(n) => n,
        None if fits => MAX_CHUNKS_PER_PASS as u64,
        None => 1,
    };
    Ok((experts.unwrap_or(0), per_pass, note))
}

/// A non-negative integer from the environment variable `name`, else `default` (also when it
/// does not parse: a knob for measurements, not a user setting).
pub(super) fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// What was asked for and what we got.
#[derive(Clone, Debug)]
pub struct ContextInfo {
    pub adapter: AdapterSummary,
    /// Features enabled on the device (the subset of [`AdapterSummary::features`]).
    pub enabled_features: Vec<&'static str>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct PipeKey {
    shader: Shader,
    /// Built from [`Shader::compose_multi`] (the weights of several chunks per dispatch).
    multi: bool,
    entry: &'static str,
    overrides: Vec<(&'static str, u32)>,
}

/// The device context. Cheap to share (`Arc`), `Sync`.
pub struct Context {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: ContextInfo,
    pub limits: wgpu::Limits,
    /// Compiled modules by shader, whether it is the multi-chunk composition, and whether it
    /// was built without runtime checks ([`Context::runtime_checks`]).
    modules: Mutex<HashMap<(Shader, bool, bool), wgpu::ShaderModule>>,
    pipelines: Mutex<HashMap<PipeKey, wgpu::ComputePipeline>>,
    pub(super) pool: Mutex<HashMap<(u32, u64), Vec<wgpu::Buffer>>>,
    /// Idle [`Upload`] buffers, mapped (or about to be).
    pub(super) uploads: Mutex<Vec<Upload>>,
    /// Test hook: the largest weight chunk (bytes) instead of the adapter's binding limit.
    pub chunk_override: AtomicU64,
    /// At most this many local experts per weight chunk (0: as many as fit one binding);
    /// `MXMOE_WGPU_CHUNK_EXPERTS` sets it (a test knob: small layers get several chunks).
    pub chunk_experts: AtomicU64,
    /// The most weight chunks one expert dispatch reads (1: one dispatch per chunk, through
    /// moe_weights_one.wgsl; 2..4: moe_weights_multi.wgsl): [`MAX_CHUNKS_PER_PASS`] where the
    /// adapter's storage-buffer limit holds the multi-chunk passes' bindings
    /// ([`MULTI_STORAGE_BINDINGS`]), else 1; `MXMOE_WGPU_CHUNKS_PER_PASS` sets it (at most
    /// what fits). Unless set (`chunks_forced`), forwards read several chunks per dispatch only
    /// on the GEMV up to [`MULTI_CHUNK_MAX_PAIRS`] token-expert pairs.
    pub chunks_per_pass: AtomicU64,
    /// Whether `chunks_per_pass` holds for every forward (the environment or the test hook set
    /// it) rather than for decode-sized GEMV forwards only.
    pub chunks_forced: AtomicBool,
    /// Why the expert passes read one chunk per dispatch where they do (empty otherwise).
    pub chunks_note: String,
    pub poison: AtomicBool,
    /// The readback's pieces (`submit_and_map`): a first part of at least `.0` bytes is read
    /// back in pieces of `.1` bytes ([`READ_STREAM_MIN`], [`READ_PIECE`]; a test hook sets
    /// small ones).
    pub read_pieces: (AtomicU64, AtomicU64),
    /// Whether the decode GEMV decodes FP4 codes in registers (`FP4_REGISTER_DECODE`) rather
    /// than through a table in workgroup memory: set when the adapter passes
    /// `Context::check_fp4_register_decode`; `MXMOE_FP4_DECODE=table|registers` forces it.
    pub fp4_register_decode: AtomicBool,
    /// The decode GEMV's layout ([`GemvConfig`]): subgroup reductions where the adapter has
    /// fixed-size subgroups that pass `subgroup_check`; `MXMOE_GEMV_REDUCE=shared|subgroup`,
    /// `MXMOE_GEMV_PREFETCH=0|1` and `MXMOE_GEMV_WORDS=0|1` choose.
    pub(super) gemv: Mutex<GemvConfig>,
    /// The adapter's subgroup size when SUBGROUP is enabled and the size is fixed (min = max).
    pub subgroup_size: Option<u32>,
    /// Whether gemv1 builds the row lists itself at decode sizes (no `lists` pass);
    /// `MXMOE_GEMV_OWN_LISTS=0` turns it off.
    pub own_lists: AtomicBool,
    /// Whether gemv2 also does the combine up to [`FUSED_COMBINE_MAX_TOKENS`] tokens
    /// (GEMV_FUSE_COMBINE in moe_gemv.wgsl: the last workgroup of each column slice sums the
    /// slots, same order and bits as the combine pass): off by default (not ordered by WGSL's
    /// memory model; once wrong on the H200), `MXMOE_WGPU_FUSED_COMBINE=1` turns it on.
    pub fused_combine: AtomicBool,
    /// Whether the prefill GEMM runs on cooperative matrices (shaders/moe_gemm_coop.wgsl): set
    /// when the adapter offers them (f16 16x16x16, f32 accumulation), the subgroups are 32
    /// consecutive invocations and `check_coop` passed; `MXMOE_GEMM=tiled` keeps the tiled
    /// GEMM (the feature is then not even requested).
    pub(super) coop_gemm: AtomicBool,
    /// Whether the cooperative GEMM passed its checks (so it may be switched back on).
    pub(super) coop_ok: bool,
    /// Which GEMM runs and why, in words (`mxmoe info`, bench notes).
    pub(super) coop_note: Mutex<String>,
    /// The cooperative GEMM's layout and diagnostic overrides (`COOP_B_ROW` from
    /// `MXMOE_COOP_B_ROW=0|1`, `COOP_DIAG` from `MXMOE_COOP_DIAG`, a bit mask that breaks
    /// results on purpose to time parts of the kernel: see shaders/moe_gemm_coop.wgsl).
    pub(super) coop_overrides: [(&'static str, u32); 2],
    /// Which cooperative kernel runs: k64 (`coop64_gemm1/2`: K steps of 64, conflict-free
    /// staging, FP4 decoded in registers, the next step's loads in flight during the MMAs) where
    /// `coop64_check` passed, else k32 (`coop_gemm1/2`, the first kernel);
    /// `MXMOE_COOP_KERNEL=k32|k64` chooses (k64 fails where its check failed; `k64p|k64pw`:
    /// `coop_pre`).
    pub(super) coop_k64: AtomicBool,
    /// Whether kernel k64 passed its checks (so it may be switched on).
    pub(super) coop_k64_ok: bool,
    /// Why k64 cannot run (empty when it can).
    pub(super) coop_k64_note: Mutex<String>,
    /// The pre-pass kernel when the cooperative GEMM (when it runs) is one: k64pw by default
    /// where k64 and `coop64p_check` passed, `MXMOE_COOP_KERNEL=k64p|k64pw` chooses, `k64` or
    /// `k32` turns it off. The pre-passes of moe_coop_prepass.wgsl, then its GEMMs. Takes
    /// precedence over `coop_k64`.
    pub(super) coop_pre: Mutex<Option<CoopKernel>>,
    /// Why the default k64pw does not run where k64 does (empty otherwise).
    pub(super) coop_pre_note: Mutex<String>,
    /// Test hook (`set_gemm_pre_ref`): where the tiled GEMM runs, run it over the pre-pass
    /// kernels' pre-converted rows (`gemm1_pre_ref`, `gemm2_pre_ref` after `coopp_prep1/2`),
    /// so that adapters without cooperative matrices exercise the pre-passes inside a forward.
    pub gemm_pre_ref: AtomicBool,
    /// gemv1 builds the lists itself only up to this many token-expert pairs (its list builder
    /// costs O(pairs) per invocation in every workgroup; past this the one-workgroup `lists`
    /// pass is cheaper); `MXMOE_GEMV_OWN_LISTS_MAX` sets it.
    pub own_lists_max: AtomicU64,
    /// Diagnostic (`MXMOE_DIAG_GEMV_LOADS_ONLY=1`): the FP4 GEMV keeps its loads but drops the
    /// decode and the dot products (GEMV_DIAG_LOADS in moe_gemv.wgsl). Results are WRONG; for
    /// `bench --no-check` timings only.
    pub diag_gemv_loads_only: bool,
    /// Whether shader modules are built with `create_shader_module_trusted` and no runtime
    /// checks (`MXMOE_WGPU_TRUSTED=1`): naga then emits no index clamps on workgroup and private
    /// arrays, no loop-bounding counters and no integer-division guards (storage buffers on
    /// Vulkan keep the driver's robust buffer access either way). Off by default: a timing
    /// knob; our shaders index within bounds and divide by non-zero values by construction, and
    /// the check suite runs with it on as well as off.
    pub trusted_shaders: bool,
    /// Whether the cooperative GEMM's kernels k64 / k64p / k64pw ([`COOP_TRUSTED_ENTRIES`])
    /// are built without naga's index clamps and loop bounding ([`coop_runtime_checks`]): on
    /// by default, `MXMOE_WGPU_COOP_CHECKED=1` turns it off (every module then as
    /// `trusted_shaders` says).
    pub trusted_coop: bool,
    /// Auto picks the GEMV while the token-expert pairs are at most this many per local expert
    /// (on average) when `MXMOE_GEMV_PAIRS` sets it (`gemv_pairs_set`); else
    /// [`Context::gemv_pairs_for`] picks a default per scheme.
    pub gemv_pairs_per_expert: AtomicU64,
    /// Whether `MXMOE_GEMV_PAIRS` was set (then it holds for every scheme).
    pub gemv_pairs_set: bool,
    /// Serializes ops: error scopes and the pool are per-op state.
    pub op_lock: Mutex<()>,
    pub(super) uncaptured: Arc<Mutex<Option<String>>>,
}

impl Context {
    /// Create the context on the best adapter matching `filter` (a case-insensitive substring of
    /// the adapter name, driver, backend or type; `MXMOE_ADAPTER` when `filter` is None).
    pub fn new(filter: Option<&str>) -> Result<Context, BackendError> {
        let env = std::env::var("MXMOE_ADAPTER").ok();
        let filter = filter.map(str::to_owned).or(env).filter(|s| !s.is_empty());
        // Vulkan / Metal / DX12 first; GL (EGL probing, often without compute) only when they
        // offer nothing.
        let mut inst = instance_for(wgpu::Backends::PRIMARY);
        let mut adapters = pollster::block_on(inst.enumerate_adapters(wgpu::Backends::all()));
        if adapters.iter().all(|a| rank(a).0 >= 100) {
            inst = instance();
            adapters = all_adapters(&inst);
        }
        let seen: Vec<String> = adapters
            .iter()
            .map(|a| {
                let i = a.get_info();
                format!("{} ({:?})", i.name, i.backend)
            })
            .collect();
        if let Some(f) = &filter {
            let f = f.to_ascii_lowercase();
            adapters.retain(|a| {
                let i = a.get_info();
                format!(
                    "{} {} {:?} {:?}",
                    i.name, i.driver, i.backend, i.device_type
                )
                .to_ascii_lowercase()
                .contains(&f)
            });
        }
        adapters.sort_by_key(rank);
        let adapter = adapters
            .into_iter()
            .find(|a| rank(a).0 < 100)
            .ok_or_else(|| {
                BackendError::NoAdapter(match &filter {
                    Some(f) => format!(
                        " matching '{f}' with compute support (adapters seen: [{}])",
                        seen.join(", ")
                    ),
                    None => format!(
                        " with compute support (adapters seen: [{}]; on a machine without a GPU \
                         install Mesa lavapipe, e.g. the mesa-vulkan-drivers package)",
                        seen.join(", ")
                    ),
                })
            })?;
        let summary = summarize(&adapter);
        let feats = adapter.features();
        let mut required = wgpu::Features::empty();
        let mut enabled = Vec::new();
        for (f, n) in WANTED {
            if feats.contains(f) {
                required |= f;
                enabled.push(n);
            }
        }
        // The cooperative-matrix GEMM: request the experimental feature only where it would be
        // used (MXMOE_GEMM=tiled: never).
        let gemm_env = std::env::var("MXMOE_GEMM").ok().filter(|s| !s.is_empty());
        let kernel_env = match std::env::var("MXMOE_COOP_KERNEL") {
            Ok(v) => CoopKernel::parse(&v).map_err(BackendError::Device)?,
            Err(_) => None,
        };
        let offered: Vec<String> = summary.coop_matrix.clone();
        let coop_why: Option<String> = match gemm_env.as_deref() {
            Some("tiled") => Some("MXMOE_GEMM=tiled".into()),
            Some(v) if v != "coop" && v != "auto" => {
                return Err(BackendError::Device(format!(
                    "MXMOE_GEMM={v}: expected tiled, coop or auto"
                )))
            }
            _ if !feats.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) => {
                Some("the adapter does not offer EXPERIMENTAL_COOPERATIVE_MATRIX".into())
            }
            _ if !adapter
                .cooperative_matrix_properties()
                .iter()
                .any(coop_config_ok) =>
            {
                Some(format!(
                    "no f16 16x16x16 configuration with f32 accumulation (offered: [{}])",
                    offered.join(", ")
                ))
            }
            _ if !feats.contains(COOP_FEATURES) => {
                Some("the adapter lacks SHADER_F16 or SUBGROUP".into())
            }
            _ => None,
        };
        let request_coop = coop_why.is_none();
        if request_coop {
            required |= COOP_FEATURES;
        }
        let limits = adapter.limits();
        let ainfo = adapter.get_info();
        let subgroup_size = (feats.contains(wgpu::Features::SUBGROUP)
            && ainfo.subgroup_min_size == ainfo.subgroup_max_size
            && ainfo.subgroup_min_size.is_power_of_two()
            && (4..=64).contains(&ainfo.subgroup_min_size))
        .then_some(ainfo.subgroup_min_size);
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("mxmoe"),
            required_features: required,
            required_limits: limits.clone(),
            experimental_features: if request_coop {
                // SAFETY: wgpu's experimental features may have bugs that lead to undefined
                // behaviour; we use cooperative matrices only after `check_coop` multiplied a
                // known product on this device through the GEMM's own layouts, and the tiled
                // GEMM stays one environment variable away (MXMOE_GEMM=tiled).
                unsafe { wgpu::ExperimentalFeatures::enabled() }
            } else {
                wgpu::ExperimentalFeatures::disabled()
            },
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| BackendError::Device(format!("request_device on {}: {e}", summary.name)))?;
        let uncaptured = Arc::new(Mutex::new(None));
        let u2 = uncaptured.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut g = u2.lock().unwrap_or_else(|p| p.into_inner());
            if g.is_none() {
                *g = Some(e.to_string());
            }
        }));
        let (chunk_experts, chunks_per_pass, chunks_note) = chunk_knobs(&limits)?;
        let chunks_forced =
            std::env::var("MXMOE_WGPU_CHUNKS_PER_PASS").is_ok_and(|v| !v.trim().is_empty());
        let mut ctx = Context {
            device,
            queue,
            info: ContextInfo {
                adapter: summary,
                enabled_features: enabled,
            },
            limits,
            modules: Mutex::new(HashMap::new()),
            pipelines: Mutex::new(HashMap::new()),
            pool: Mutex::new(HashMap::new()),
            uploads: Mutex::new(Vec::new()),
            chunk_override: AtomicU64::new(0),
            chunk_experts: AtomicU64::new(chunk_experts),
            chunks_per_pass: AtomicU64::new(chunks_per_pass),
            chunks_forced: AtomicBool::new(chunks_forced),
            chunks_note,
            poison: AtomicBool::new(std::env::var("MXMOE_POISON").is_ok_and(|v| v == "1")),
            read_pieces: (AtomicU64::new(READ_STREAM_MIN), AtomicU64::new(READ_PIECE)),
            fp4_register_decode: AtomicBool::new(false),
            gemv: Mutex::new(GemvConfig::SHARED),
            own_lists: AtomicBool::new(std::env::var("MXMOE_GEMV_OWN_LISTS").as_deref() != Ok("0")),
            // Default OFF everywhere: the pattern (a workgroup reads other workgroups' slot
            // stores after an arrival counter, storage barriers on both sides) is not ordered by
            // WGSL's memory model (relaxed atomics, no device-scope release/acquire for plain
            // stores), and on the H200 it once gave a wrong DeepSeek-R1 1-token forward (rel-L2
            // 3.2e-3, docs/h200-2026-12-01-session4). An experiment only: MXMOE_WGPU_FUSED_COMBINE=1.
            fused_combine: AtomicBool::new(
                std::env::var("MXMOE_WGPU_FUSED_COMBINE").as_deref() == Ok("1"),
            ),
            own_lists_max: AtomicU64::new(env_u64(
                "MXMOE_GEMV_OWN_LISTS_MAX",
                DEFAULT_OWN_LISTS_MAX,
            )),
            diag_gemv_loads_only: std::env::var("MXMOE_DIAG_GEMV_LOADS_ONLY").as_deref() == Ok("1"),
            trusted_shaders: std::env::var("MXMOE_WGPU_TRUSTED").as_deref() == Ok("1"),
            trusted_coop: std::env::var("MXMOE_WGPU_COOP_CHECKED").as_deref() != Ok("1"),
            gemv_pairs_per_expert: AtomicU64::new(env_u64(
                "MXMOE_GEMV_PAIRS",
                DEFAULT_GEMV_PAIRS_PER_EXPERT,
            )),
            gemv_pairs_set: std::env::var("MXMOE_GEMV_PAIRS")
                .ok()
                .is_some_and(|v| v.trim().parse::<u64>().is_ok()),
            subgroup_size,
            coop_gemm: AtomicBool::new(false),
            coop_ok: false,
            coop_note: Mutex::new(String::new()),
            coop_k64: AtomicBool::new(false),
            coop_k64_ok: false,
            coop_k64_note: Mutex::new(String::new()),
            coop_pre: Mutex::new(None),
            coop_pre_note: Mutex::new(String::new()),
            gemm_pre_ref: AtomicBool::new(false),
            coop_overrides: [
                (
                    "COOP_B_ROW",
                    (std::env::var("MXMOE_COOP_B_ROW").as_deref() == Ok("1")) as u32,
                ),
                (
                    "COOP_DIAG",
                    std::env::var("MXMOE_COOP_DIAG")
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0),
                ),
            ],
            op_lock: Mutex::new(()),
            uncaptured,
        };
        ctx.init_gemv(&adapter);
        ctx.init_coop(coop_why, kernel_env, gemm_env.as_deref())?;
        Ok(ctx)
    }

    /// One workgroup of a start-up self-check entry point (`subgroup_check`,
    /// `fp4_decode_check`, `coop_check`) writing `bytes` into binding 9; returns those bytes.
    pub(super) fn run_check(
        &self,
        pipe: &wgpu::ComputePipeline,
        bytes: u64,
    ) -> Result<Vec<u8>, BackendError> {
        let out = self.storage(bytes);
        let bg = self.bind(pipe, &[(9, &out)]);
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("check"),
            });
        {
            let mut p = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            p.set_pipeline(pipe);
            p.set_bind_group(0, &bg, &[]);
            p.dispatch_workgroups(1, 1, 1);
        }
        let mut r = self.submit_and_read(enc, &[(&out, bytes)])?;
        self.give([out]);
        Ok(r.swap_remove(0))
    }

    /// The adapter's largest bindable storage buffer (no test override).
    pub(super) fn max_binding_hw(&self) -> u64 {
        self.limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
    }

    /// The largest storage buffer we bind (and so the largest weight chunk).
    pub fn max_binding(&self) -> u64 {
        let hw = self.max_binding_hw();
        match self.chunk_override.load(Ordering::Relaxed) {
            0 => hw,
            o => o.min(hw),
        }
    }

    /// How many pipelines the cache holds (each built once per shader + entry + overrides).
    pub fn pipeline_count(&self) -> usize {
        self.pipelines.lock().map_or(0, |p| p.len())
    }

    /// The cached pipeline of `entry` in shader `shader` with `overrides` (name, u32 value).
    /// Compiles the module and builds the pipeline on first use only.
    pub fn pipeline(
        &self,
        shader: Shader,
        entry: &'static str,
        overrides: &[(&'static str, u32)],
    ) -> Result<wgpu::ComputePipeline, BackendError> {
        self.pipeline_in(shader, false, entry, overrides)
    }

    /// [`Context::pipeline`] of the shader's multi-chunk composition ([`Shader::compose_multi`]:
    /// its expert passes read up to four weight chunks per dispatch; override `W_CHUNKS`).
    pub fn pipeline_multi(
        &self,
        shader: Shader,
        entry: &'static str,
        overrides: &[(&'static str, u32)],
    ) -> Result<wgpu::ComputePipeline, BackendError> {
        self.pipeline_in(shader, true, entry, overrides)
    }

    /// How the module of `entry` of `shader` is built: `None` checked (wgpu's default),
    /// else the runtime checks it keeps (`MXMOE_WGPU_TRUSTED=1`: none, every module; else
    /// [`coop_runtime_checks`] for [`COOP_TRUSTED_ENTRIES`] unless `MXMOE_WGPU_COOP_CHECKED=1`).
    pub fn runtime_checks(&self, shader: Shader, entry: &str) -> Option<wgpu::ShaderRuntimeChecks> {
        if self.trusted_shaders {
            return Some(wgpu::ShaderRuntimeChecks::unchecked());
        }
        (self.trusted_coop
            && shader == Shader::MoeGemmCoop
            && COOP_TRUSTED_ENTRIES.contains(&entry))
        .then(coop_runtime_checks)
    }

    fn pipeline_in(
        &self,
        shader: Shader,
        multi: bool,
        entry: &'static str,
        overrides: &[(&'static str, u32)],
    ) -> Result<wgpu::ComputePipeline, BackendError> {
        if multi && !shader.reads_weights() {
            return Err(BackendError::Device(format!(
                "{shader} reads no expert weights: it has no multi-chunk composition"
            )));
        }
        let key = PipeKey {
            shader,
            multi,
            entry,
            overrides: overrides.to_vec(),
        };
        if let Some(p) = self.pipelines.lock().unwrap().get(&key) {
            return Ok(p.clone());
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let checks = self.runtime_checks(shader, entry);
        let module = {
            let mut mods = self.modules.lock().unwrap();
            match mods.get(&(shader, multi, checks.is_some())) {
                Some(m) => m.clone(),
                None => {
                    let src = match multi {
                        true => shader.compose_multi().unwrap_or_default(),
                        false => shader.compose(),
                    };
                    let desc = wgpu::ShaderModuleDescriptor {
                        label: Some(shader.name()),
                        source: wgpu::ShaderSource::Wgsl(src.into()),
                    };
                    let m = match checks {
                        // SAFETY: either MXMOE_WGPU_TRUSTED=1 (see `trusted_shaders`: every
                        // shader of this crate indexes its arrays within bounds, never divides
                        // by zero and ends its loops; the check suite runs with it on), or one
                        // of the cooperative GEMM's COOP_TRUSTED_ENTRIES, whose workgroup and
                        // private array / vector indices (cooperative loads and stores
                        // included) and loops tests/shaders.rs proves in range and finite
                        // (`coop_trusted_entries_are_in_bounds`); their integer divisions keep
                        // naga's guards (`coop_runtime_checks`).
                        Some(c) => unsafe { self.device.create_shader_module_trusted(desc, c) },
                        None => self.device.create_shader_module(desc),
                    };
                    mods.insert((shader, multi, checks.is_some()), m.clone());
                    m
                }
            }
        };
        let consts: Vec<(&str, f64)> = overrides.iter().map(|(n, v)| (*n, *v as f64)).collect();
        let label = format!(
            "{shader}{}/{entry}{overrides:?}",
            if multi { "+chunks" } else { "" }
        );
        let p = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&label),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &consts,
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(BackendError::Device(format!(
                "building pipeline {label}: {e}"
            )));
        }
        self.pipelines.lock().unwrap().insert(key, p.clone());
        Ok(p)
    }

    /// A bind group for `pipeline` with the given (binding, buffer) entries (whole buffers).
    pub fn bind(
        &self,
        pipeline: &wgpu::ComputePipeline,
        entries: &[(u32, &wgpu::Buffer)],
    ) -> wgpu::BindGroup {
        let layout = pipeline.get_bind_group_layout(0);
        let e: Vec<wgpu::BindGroupEntry> = entries
            .iter()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: *i,
                resource: b.as_entire_binding(),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &e,
        })
    }

    /// A grid of `n` workgroups laid out in 2-D when `n` exceeds the per-dimension limit.
    pub fn grid(&self, n: u32) -> (u32, u32) {
        let max = self.limits.max_compute_workgroups_per_dimension.max(1);
        if n <= max {
            (n.max(1), 1)
        } else {
            let y = n.div_ceil(max);
            (n.div_ceil(y), y)
        }
    }
}
