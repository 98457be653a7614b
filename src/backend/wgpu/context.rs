//! The wgpu context, created once: instance, adapter choice, device, queue, the pipeline cache
//! (keyed by [`Shader`] + entry + overrides) and a buffer pool. Thin per-call helpers live here
//! too (upload, readback, dispatch-grid sizing).
//!
//! Over 700 lines: one type (`Context`) and the small helpers every op file uses; the pieces
//! (pipeline cache, buffer pool, start-up self-checks, timers, readback) share its locks and
//! limits. Adapter enumeration and ranking live in adapter.rs, the host-time profile in
//! host_profile.rs.

use super::adapter::{
    all_adapters, coop_config_ok, instance, instance_for, rank, summarize, COOP_FEATURES, WANTED,
};
pub use super::adapter::{enumerate_adapters, AdapterSummary};
pub use super::host_profile;
use super::source::{Shader, MAX_CHUNKS_PER_PASS};
use crate::backend::BackendError;
use crate::format::MxFormat;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use wgpu::util::DeviceExt;

/// The bit pattern outputs are filled with before a run when poisoning is on (a NaN no kernel
/// writes), so an element a kernel forgot to write fails a bit-exact or tolerance comparison.
pub const POISON: u32 = 0x7FC0_DEAD;

/// gemv2 fuses the combine up to this many tokens (its last workgroup per 64-column slice sums
/// M x 64 outputs; the HIP backend's limit too).
pub const FUSED_COMBINE_MAX_TOKENS: usize = 16;

/// Whether the GEMV prefetches the next block unless `MXMOE_GEMV_PREFETCH` says, and whether its
/// lanes take words rather than 32-blocks unless `MXMOE_GEMV_WORDS` says: words + prefetch was
/// the fastest layout on the H200 at 1 and 16 tokens (docs/h200-2026-12-01-perf/README.md).
pub const DEFAULT_GEMV_PREFETCH: bool = true;
/// See [`DEFAULT_GEMV_PREFETCH`].
pub const DEFAULT_GEMV_WORDS: bool = true;
/// Whether one-token forwards use GEMV pipelines specialized for one-row tiles
/// (`GemvConfig::one_row`) unless `MXMOE_GEMV_ONE_ROW` says: on the H200, gpt-oss-120b at one
/// token, gemv1 0.052 -> 0.033 ms on the same binary (0.038 before this branch),
/// docs/h200-2026-12-01-wgpudecode2.
pub const DEFAULT_GEMV_ONE_ROW: bool = true;

/// Subgroups per GEMV lane group unless `MXMOE_GEMV_SPLIT` says (see [`GemvConfig::split`]).
pub const DEFAULT_GEMV_SPLIT: u32 = 1;

/// gemv1 builds its own row lists up to this many token-expert pairs (see
/// [`Context::own_lists_max`]). Its builder costs O(pairs) per invocation in every workgroup:
/// on the H200 at 64 pairs (gpt-oss, 16 tokens) gemv1 took 0.492 ms with it and 0.296 with the
/// `lists` pass (7 us) instead; at 4 pairs it saves that pass.
pub const DEFAULT_OWN_LISTS_MAX: u64 = 16;
/// Auto takes the GEMV up to this many token-expert pairs per local expert (see
/// [`Context::gemv_pairs_for`]). First measured on the H200 against the scalar tiled GEMM
/// (gpt-oss-120b, docs/h200-2026-12-01-wgpudecode: they cross near 40 pairs per expert);
/// re-measured against the cooperative GEMM's kernel k64 (docs/h200-2026-12-01s5-wgpu5,
/// gpt-oss-120b, w_mxfp4: GEMV 7.62 / 15.06 ms, GEMM 10.08 / 14.53 ms at 16 / 32 pairs per
/// expert: they cross near 29; the weight-only GEMM multiplies hi and lo activation parts).
pub const DEFAULT_GEMV_PAIRS_PER_EXPERT: u64 = 32;
/// The crossover where the cooperative GEMM runs and the activations are MX-quantized (one
/// f16 part, half the matrix instructions of weight-only schemes). Measured on the H200
/// (docs/h200-2026-12-01s5-wgpu5, DeepSeek-R1, w_mxfp4_a_mxfp4): at 16 pairs per expert the
/// GEMV took 24.63 ms (docs/h200-2026-12-01-session4) and the GEMM k64 24.92; at 8 the GEMM
/// took 17.6 and the GEMV ~12.6 (interpolated from 3.64 at 2 and 24.63 at 16): they cross near
/// 16.
pub const DEFAULT_GEMV_PAIRS_PER_EXPERT_ACT_QUANT: u64 = 16;

/// Workgroup memory of the cooperative kernel k64 (shaders/moe_gemm_coop.wgsl): activation hi
/// and lo tiles 2 x 64 x 72 f16, weight tile 64 x 136 f16, hand-out staging 32 x 68 f32, the
/// code table 256 f32, block_amax 128 u32, the tile descriptor and the two exponent slot pairs.
pub const COOP64_WORKGROUP_BYTES: u32 =
    2 * 64 * 72 * 2 + 64 * 136 * 2 + 32 * 68 * 4 + 1024 + 512 + 16 + 16;
/// Workgroup memory of kernel k64p: k64's without the activation tiles (its A fragments come
/// from the pre-converted storage buffers).
pub const COOP64P_WORKGROUP_BYTES: u32 = COOP64_WORKGROUP_BYTES - 2 * 64 * 72 * 2;

/// The entry points of shaders/moe_gemm_coop.wgsl built without naga's index clamps and loop
/// bounding by default (kernels k64, k64p and k64pw: [`coop_runtime_checks`]; on the H200 this
/// takes 9 % off a 2048-token prefill, docs/h200-2026-12-01s9-wgpucoop). tests/shaders.rs
/// (`coop_trusted_entries_are_in_bounds`) proves, for every override combination the backend
/// uses, that each index into a workgroup, private or function array or vector these entry
/// points reach (cooperative loads and stores over their whole 16x16 extent included) is in
/// range and that each of their loops ends. Storage buffers keep the driver's robust buffer
/// access on Vulkan either way. `MXMOE_WGPU_COOP_CHECKED=1` builds them checked.
pub const COOP_TRUSTED_ENTRIES: [&str; 6] = [
    "coop64_gemm1",
    "coop64_gemm2",
    "coop64p_gemm1",
    "coop64p_gemm2",
    "coop64pw_gemm1",
    "coop64pw_gemm2",
];

/// The runtime checks of [`COOP_TRUSTED_ENTRIES`]' module: no bounds checks (naga's clamps
/// of workgroup / private indices; on Vulkan storage buffers keep the device's robust buffer
/// access, which wgpu enables where offered) and no loop bounding, both justified by
/// tests/shaders.rs; integer-division guards stay (the divisors are constants but for the
/// host's `top_k` and `chunk_experts`, which a static check cannot see; the guards of
/// constant divisors fold away).
pub fn coop_runtime_checks() -> wgpu::ShaderRuntimeChecks {
    let mut c = wgpu::ShaderRuntimeChecks::checked();
    c.bounds_checks = false;
    c.force_loop_bounding = false;
    c
}

/// The cooperative GEMM's kernels (`MXMOE_COOP_KERNEL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoopKernel {
    /// `coop_gemm1/2`: the first kernel (K steps of 32).
    K32,
    /// `coop64_gemm1/2`: K steps of 64, conflict-free staging (where its check passed; the
    /// default where k64pw's check failed).
    K64,
    /// `coop64p_gemm1/2` after the pre-passes `coopp_prep1/2` (moe_coop_prepass.wgsl): k64 with
    /// the activations converted to f16 once per forward (one exponent per row) and loaded by
    /// the MMAs straight from storage. Not the default (slower than k64pw on the H200).
    K64p,
    /// `coop64pw_gemm1/2` after the same pre-passes: k64p's activations copied (16-byte loads,
    /// no conversion, no atomics) into k64's workgroup tiles each K step, for drivers whose
    /// cooperative loads from storage are slow. The default where k64's and k64p's checks
    /// passed (13 % faster than k64 at gpt-oss-120b 2048 tokens on the H200).
    K64pw,
}

impl CoopKernel {
    /// The names `MXMOE_COOP_KERNEL` takes (and `auto`).
    pub const NAMES: [(&'static str, CoopKernel); 4] = [
        ("k32", CoopKernel::K32),
        ("k64", CoopKernel::K64),
        ("k64p", CoopKernel::K64p),
        ("k64pw", CoopKernel::K64pw),
    ];

    /// The name (`MXMOE_COOP_KERNEL`, notes).
    pub fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("?", |(n, _)| n)
    }

    /// Parse `MXMOE_COOP_KERNEL`'s value: Ok(None) for `auto` (or empty), Err naming the
    /// variable, the value and the accepted names.
    pub fn parse(v: &str) -> Result<Option<CoopKernel>, String> {
        let v = v.trim();
        if v.is_empty() || v == "auto" {
            return Ok(None);
        }
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == v)
            .map(|(_, k)| Some(*k))
            .ok_or_else(|| format!("MXMOE_COOP_KERNEL={v}: expected k32, k64, k64p, k64pw or auto"))
    }

    /// The entry points (gemm1, gemm2).
    pub fn entries(self) -> (&'static str, &'static str) {
        match self {
            CoopKernel::K32 => ("coop_gemm1", "coop_gemm2"),
            CoopKernel::K64 => ("coop64_gemm1", "coop64_gemm2"),
            CoopKernel::K64p => ("coop64p_gemm1", "coop64p_gemm2"),
            CoopKernel::K64pw => ("coop64pw_gemm1", "coop64pw_gemm2"),
        }
    }

    /// Whether the kernel reads activations pre-converted by `coopp_prep1/2`.
    pub fn prepass(self) -> bool {
        matches!(self, CoopKernel::K64p | CoopKernel::K64pw)
    }
}

/// `coop_check` / `coop64_check` output: C x 2 of A[i][k] = (3i + k) % 7 - 3 and
/// B[k][n] = (5k + n) % 11 - 5 (16 x 32 by 32 x 16, small integers: exact), row-major.
fn check_coop_product(got: &[f32]) -> Result<(), String> {
    for i in 0..16i64 {
        for n in 0..16i64 {
            let want: i64 = (0..32i64)
                .map(|k| ((3 * i + k) % 7 - 3) * ((5 * k + n) % 11 - 5))
                .sum::<i64>()
                * 2;
            let g = got[(i * 16 + n) as usize];
            if g != want as f32 {
                return Err(format!("C[{i}][{n}] = {g}, expected {want}"));
            }
        }
    }
    Ok(())
}

/// A non-negative integer from the environment variable `name`, else `default` (also when it
/// does not parse: a knob for measurements, not a user setting).
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

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// How long `submit_and_map` polls the fence before it blocks (a forward of a few milliseconds
/// or less finishes while spinning; longer ones block, costing one wake-up).
const SPIN_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// The host-side copy helpers (typed copies of mapped bytes, readback destinations prepared
/// while the device works), shared with the HIP backend: `backend/host_io.rs`.
pub use crate::backend::host_io::{pod_append, pod_into, pod_vec, touched_vec, WRITE_PAR_MIN};
/// [`Context::fill_upload`] splits copies of at least [`WRITE_PAR_MIN`] bytes over threads, in
/// pieces of this many bytes (a multiple of wgpu's 4-byte copy alignment).
const WRITE_PIECE: usize = 1 << 20;

/// [`Context::submit_and_map`] reads a first part of at least this many bytes back in pieces
/// of [`READ_PIECE`] bytes (a multiple of 256), each in a submission of its own, so that the
/// host's copy of one piece overlaps the device's copy of the next.
pub const READ_STREAM_MIN: u64 = 16 << 20;
pub const READ_PIECE: u64 = 8 << 20;

/// Pooled buffers kept per (usage, power-of-two size) class.
const POOL_PER_CLASS: usize = 12;

/// Idle upload buffers ([`Upload`]) the context keeps (a layer's cached forward keeps its own).
const UPLOADS_KEPT: usize = 4;

/// [`Upload`] states.
const UP_UNMAPPED: u8 = 0;
const UP_REQUESTED: u8 = 1;
const UP_MAPPED: u8 = 2;
const UP_FAILED: u8 = 3;

/// A host-visible upload buffer (MAP_WRITE | COPY_SRC) that stays mapped while idle: a forward
/// writes its inputs straight into the mapping, unmaps, records copies into the device buffers
/// at the start of its command buffer, and asks for the mapping again right after the submit
/// (granted once that submission completes, in the same poll that completes the readback).
/// `queue.write_buffer` instead creates, maps and later frees a fresh staging buffer per call
/// and submits an extra command buffer of pending writes (wgpu-core `Queue::write_buffer`,
/// `StagingBuffer::new`); at 2048 tokens those staging buffers are tens of MB of fresh mapped
/// memory per forward.
pub struct Upload {
    pub buf: wgpu::Buffer,
    state: Arc<AtomicU8>,
}

/// A readback recorded by [`Context::encode_readback`], submitted by
/// [`Context::submit_readback`]: the finished command buffer (the caller's commands, then the
/// copies into `staging`), the parts' (offset, bytes) in `staging` (the first part's first
/// piece only), and the first part's further pieces (command buffer, mappable buffer, offset in
/// the part, bytes).
pub struct Readback {
    cmd: wgpu::CommandBuffer,
    staging: wgpu::Buffer,
    total: u64,
    parts: Vec<(u64, u64)>,
    #[allow(clippy::type_complexity)]
    more: Vec<(wgpu::CommandBuffer, wgpu::Buffer, u64, u64)>,
}

/// GPU timestamps around compute passes (TIMESTAMP_QUERY), for benchmarks.
pub struct Timer {
    set: wgpu::QuerySet,
    labels: Vec<String>,
    cap: u32,
}

impl Timer {
    /// Timestamp writes for the next pass (None once the set is full).
    pub fn writes(&mut self, label: &str) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let i = 2 * self.labels.len() as u32;
        if i + 2 > self.cap {
            return None;
        }
        self.labels.push(label.to_string());
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(i),
            end_of_pass_write_index: Some(i + 1),
        })
    }

    /// Bytes the resolved timestamps take.
    pub fn bytes(&self) -> u64 {
        (2 * self.labels.len() as u64).max(1) * 8
    }

    /// Resolve the written timestamps into `buf` (QUERY_RESOLVE usage).
    pub fn resolve(&self, enc: &mut wgpu::CommandEncoder, buf: &wgpu::Buffer) {
        if !self.labels.is_empty() {
            enc.resolve_query_set(&self.set, 0..2 * self.labels.len() as u32, buf, 0);
        }
    }

    /// Milliseconds from the first pass's beginning to the last pass's end (the passes and the
    /// gaps between them), from the resolved bytes; 0 without passes.
    pub fn span(&self, raw: &[u8], period_ns: f32) -> f64 {
        let t: Vec<u64> = bytemuck::pod_collect_to_vec(raw);
        match self.labels.len() {
            0 => 0.0,
            n => t[2 * n - 1].saturating_sub(t[0]) as f64 * period_ns as f64 * 1e-6,
        }
    }

    /// (label, milliseconds) per pass from the resolved bytes.
    pub fn durations(&self, raw: &[u8], period_ns: f32) -> Vec<(String, f64)> {
        let t: Vec<u64> = bytemuck::pod_collect_to_vec(raw);
        self.labels
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let d = t[2 * i + 1].saturating_sub(t[2 * i]);
                (l.clone(), d as f64 * period_ns as f64 * 1e-6)
            })
            .collect()
    }
}

/// How the decode GEMV (shaders/moe_gemv.wgsl) is laid out on this device: lane groups of
/// `lanes` invocations along K, each owning 8 of a workgroup's 64 weight rows; whether the lane
/// sums are reduced with subgroup operations (`lanes` = the adapter's subgroup size, verified by
/// `subgroup_check`) or in workgroup memory (32 lanes); whether each lane loads its next block
/// before the current block's math (`prefetch`); whether lanes take whole 32-blocks (16-byte
/// loads) or words of 8 codes (`words`: coalesced x loads, scales per word).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemvConfig {
    pub subgroup: bool,
    pub lanes: u32,
    pub prefetch: bool,
    pub words: bool,
    /// Subgroups per lane group (subgroup layout only; 1, 2 or 4): `lanes` is then `split`
    /// times the subgroup size, so a row's K is spread over more lanes (fewer steps per lane,
    /// more invocations per workgroup) and the subgroups' sums are added in workgroup memory.
    pub split: u32,
    /// One-token forwards run GEMV pipelines specialized for one-row tiles (GEMV_ONE_ROW: the
    /// FP4 paths compile the one-token code only, fewer registers).
    pub one_row: bool,
}

impl GemvConfig {
    /// The workgroup-memory layout every adapter runs.
    pub const SHARED: GemvConfig = GemvConfig {
        subgroup: false,
        lanes: 32,
        prefetch: false,
        words: false,
        split: 1,
        one_row: false,
    };

    /// The GEMV entry points (gemv1, gemv2). (A wide layout with entry points of its own,
    /// 16-byte code loads with x and scales staged in workgroup memory, measured 1.2-1.5x
    /// slower on the H200 and was removed: docs/wgpu-gemv-wide.md.)
    pub fn entries(&self) -> (&'static str, &'static str) {
        ("gemv1", "gemv2")
    }

    /// Invocations per workgroup (8 lane groups).
    pub fn threads(&self) -> u32 {
        8 * self.lanes
    }

    /// The pipeline overrides of this layout.
    pub fn overrides(&self) -> Vec<(&'static str, u32)> {
        let mut v = vec![
            ("GEMV_LANES", self.lanes),
            ("GEMV_THREADS", self.threads()),
            ("GEMV_PREFETCH", self.prefetch as u32),
            ("GEMV_WORDS", self.words as u32),
        ];
        // Only the subgroup reduction declares GEMV_SPLIT.
        if self.subgroup {
            v.push(("GEMV_SPLIT", self.split));
        }
        v
    }
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
    pool: Mutex<HashMap<(u32, u64), Vec<wgpu::Buffer>>>,
    /// Idle [`Upload`] buffers, mapped (or about to be).
    uploads: Mutex<Vec<Upload>>,
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
    gemv: Mutex<GemvConfig>,
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
    coop_gemm: AtomicBool,
    /// Whether the cooperative GEMM passed its checks (so it may be switched back on).
    coop_ok: bool,
    /// Which GEMM runs and why, in words (`mxmoe info`, bench notes).
    coop_note: Mutex<String>,
    /// The cooperative GEMM's layout and diagnostic overrides (`COOP_B_ROW` from
    /// `MXMOE_COOP_B_ROW=0|1`, `COOP_DIAG` from `MXMOE_COOP_DIAG`, a bit mask that breaks
    /// results on purpose to time parts of the kernel: see shaders/moe_gemm_coop.wgsl).
    coop_overrides: [(&'static str, u32); 2],
    /// Which cooperative kernel runs: k64 (`coop64_gemm1/2`: K steps of 64, conflict-free
    /// staging, FP4 decoded in registers, the next step's loads in flight during the MMAs) where
    /// `coop64_check` passed, else k32 (`coop_gemm1/2`, the first kernel);
    /// `MXMOE_COOP_KERNEL=k32|k64` chooses (k64 fails where its check failed; `k64p|k64pw`:
    /// `coop_pre`).
    coop_k64: AtomicBool,
    /// Whether kernel k64 passed its checks (so it may be switched on).
    coop_k64_ok: bool,
    /// Why k64 cannot run (empty when it can).
    coop_k64_note: Mutex<String>,
    /// The pre-pass kernel when the cooperative GEMM (when it runs) is one: k64pw by default
    /// where k64 and `coop64p_check` passed, `MXMOE_COOP_KERNEL=k64p|k64pw` chooses, `k64` or
    /// `k32` turns it off. The pre-passes of moe_coop_prepass.wgsl, then its GEMMs. Takes
    /// precedence over `coop_k64`.
    coop_pre: Mutex<Option<CoopKernel>>,
    /// Why the default k64pw does not run where k64 does (empty otherwise).
    coop_pre_note: Mutex<String>,
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
    uncaptured: Arc<Mutex<Option<String>>>,
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
        let mut coop_why: Option<String> = match gemm_env.as_deref() {
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
        let on = match std::env::var("MXMOE_FP4_DECODE").as_deref() {
            Ok("table") => false,
            Ok("registers") => true,
            _ => {
                adapter
                    .get_downlevel_capabilities()
                    .flags
                    .contains(wgpu::DownlevelFlags::SHADER_F16_IN_F32)
                    && ctx.check_fp4_register_decode()
            }
        };
        ctx.fp4_register_decode.store(on, Ordering::Relaxed);
        let prefetch = match std::env::var("MXMOE_GEMV_PREFETCH").as_deref() {
            Ok("0") => false,
            Ok("1") => true,
            _ => DEFAULT_GEMV_PREFETCH,
        };
        let one_row = match std::env::var("MXMOE_GEMV_ONE_ROW").as_deref() {
            Ok("0") => false,
            Ok("1") => true,
            _ => DEFAULT_GEMV_ONE_ROW,
        };
        let words = match std::env::var("MXMOE_GEMV_WORDS").as_deref() {
            Ok("0") => false,
            Ok("1") => true,
            _ => DEFAULT_GEMV_WORDS,
        };
        let subgroup = std::env::var("MXMOE_GEMV_REDUCE").as_deref() != Ok("shared");
        let split = env_u64("MXMOE_GEMV_SPLIT", DEFAULT_GEMV_SPLIT as u64) as u32;
        // Falls back to the shared layout when the subgroup check fails.
        let _ = ctx.set_gemv(GemvConfig {
            subgroup,
            lanes: 32,
            split,
            prefetch,
            words,
            one_row,
        });
        if coop_why.is_none() {
            let layout = GemvConfig {
                subgroup: true,
                lanes: 32,
                split: 1,
                prefetch: false,
                words: false,
                one_row: false,
            };
            coop_why = if ctx.subgroup_size != Some(32) || !ctx.check_subgroup_layout(layout) {
                Some(format!(
                    "subgroups are not 32 consecutive invocations (subgroup size {:?})",
                    ctx.subgroup_size
                ))
            } else {
                ctx.check_coop()
                    .err()
                    .map(|e| format!("coop_check failed: {e}"))
            };
        }
        ctx.coop_ok = coop_why.is_none();
        ctx.coop_gemm.store(ctx.coop_ok, Ordering::Relaxed);
        if ctx.coop_ok {
            let k64 = ctx.check_coop64();
            ctx.coop_k64_ok = k64.is_ok();
            if let Err(e) = &k64 {
                if matches!(
                    kernel_env,
                    Some(CoopKernel::K64 | CoopKernel::K64p | CoopKernel::K64pw)
                ) {
                    return Err(BackendError::Device(format!(
                        "MXMOE_COOP_KERNEL={} on {}: coop64_check failed: {e}",
                        kernel_env.map_or("", |k| k.name()),
                        ctx.info.adapter.name
                    )));
                }
                *ctx.coop_k64_note.lock().unwrap() = format!("coop64_check failed: {e}");
            }
            ctx.coop_k64.store(
                ctx.coop_k64_ok && kernel_env != Some(CoopKernel::K32),
                Ordering::Relaxed,
            );
            // Kernel k64pw is the default where k64 passed (gpt-oss-120b at 2048 tokens on the
            // H200: 18.4 vs 21.2 ms GPU, docs/h200-2026-12-01s5-closing/extra/prepass; the
            // forced-GEMM catalog: docs/h200-2026-12-01s6-wgpu). Asked for by name, a failed
            // check is an error; by default, k64 stays and the note says why.
            let pre = match kernel_env {
                None => Some(CoopKernel::K64pw),
                Some(k) if k.prepass() => Some(k),
                Some(_) => None,
            };
            if let Some(k) = pre.filter(|_| ctx.coop_k64_ok) {
                if let Err(e) = ctx.set_coop_pre(Some(k)) {
                    if kernel_env.is_some() {
                        return Err(BackendError::Device(format!(
                            "MXMOE_COOP_KERNEL={} on {}: {e}",
                            k.name(),
                            ctx.info.adapter.name
                        )));
                    }
                    *ctx.coop_pre_note.lock().unwrap() = format!("k64pw not used: {e}; ");
                }
            }
        }
        *ctx.coop_note.lock().unwrap() = match coop_why {
            None => format!(
                "cooperative matrices (moe_gemm_coop.wgsl: f16 16x16x16, f32 accumulation, {}{}; \
                 MXMOE_GEMM=tiled for the tiled GEMM)",
                if let Some(k) = ctx.coop_pre() {
                    format!(
                        "kernel {} (k64 with the activations pre-converted once per forward \
                         by coopp_prep1/2, one exponent per row, A {}; FP4 decoded {}; \
                         coop64p_check passed; MXMOE_COOP_KERNEL=k64 for k64, k32 for the \
                         first kernel)",
                        k.name(),
                        if k == CoopKernel::K64p {
                            "loaded by the MMAs from storage"
                        } else {
                            "copied into workgroup memory"
                        },
                        if ctx.fp4_register_decode.load(Ordering::Relaxed) {
                            "in registers"
                        } else {
                            "through the code table"
                        }
                    )
                } else if ctx.coop_k64() {
                    format!(
                        "kernel k64 (K steps of 64, FP4 decoded {}; coop64_check passed; \
                         {}MXMOE_COOP_KERNEL=k32 for the first kernel)",
                        ctx.coop_pre_note.lock().unwrap(),
                        if ctx.fp4_register_decode.load(Ordering::Relaxed) {
                            "in registers"
                        } else {
                            "through the code table"
                        }
                    )
                } else {
                    format!(
                        "kernel k32 (K steps of 32, B {}; coop_check passed; k64 not used: {})",
                        if ctx.coop_overrides[0].1 == 1 {
                            "row-major"
                        } else {
                            "column-major"
                        },
                        if ctx.coop_k64_ok {
                            "MXMOE_COOP_KERNEL=k32".to_string()
                        } else {
                            ctx.coop_k64_note.lock().unwrap().clone()
                        }
                    )
                },
                match ctx.coop_overrides[1].1 {
                    0 => String::new(),
                    d => format!(", DIAGNOSTIC COOP_DIAG={d}: results are wrong"),
                }
            ),
            Some(why) => format!("tiled f32 (moe_gemm.wgsl): {why}"),
        };
        if gemm_env.as_deref() == Some("coop") && !ctx.coop_ok {
            return Err(BackendError::Device(format!(
                "MXMOE_GEMM=coop on {}: {}",
                ctx.info.adapter.name,
                ctx.coop_note.lock().unwrap()
            )));
        }
        Ok(ctx)
    }

    /// The GEMV / GEMM crossover in token-expert pairs per local expert for a layer whose
    /// activations are MX-quantized (`act_quant`) or not: `MXMOE_GEMV_PAIRS` where set, else
    /// [`DEFAULT_GEMV_PAIRS_PER_EXPERT_ACT_QUANT`] for quantized activations on the cooperative
    /// GEMM and [`DEFAULT_GEMV_PAIRS_PER_EXPERT`] otherwise.
    pub fn gemv_pairs_for(&self, act_quant: bool) -> u64 {
        if self.gemv_pairs_set || !(act_quant && self.coop_gemm()) {
            self.gemv_pairs_per_expert.load(Ordering::Relaxed)
        } else {
            DEFAULT_GEMV_PAIRS_PER_EXPERT_ACT_QUANT
        }
    }

    /// Whether the prefill GEMM runs on cooperative matrices now.
    pub fn coop_gemm(&self) -> bool {
        self.coop_gemm.load(Ordering::Relaxed)
    }

    /// The pipeline overrides the cooperative GEMM's entry points take beyond the GEMM's own
    /// (those of the kernel that runs now).
    pub fn coop_overrides(&self) -> Vec<(&'static str, u32)> {
        if self.coop_k64() || self.coop_pre().is_some() {
            self.coop64_overrides().to_vec()
        } else {
            self.coop_overrides.to_vec()
        }
    }

    /// Kernel k64's overrides: the diagnostic mask and where FP4 is decoded.
    fn coop64_overrides(&self) -> [(&'static str, u32); 2] {
        [
            self.coop_overrides[1],
            (
                "COOP_FP4_REGISTERS",
                self.fp4_register_decode.load(Ordering::Relaxed) as u32,
            ),
        ]
    }

    /// Whether the cooperative GEMM (when it runs) is kernel k64 (else k32).
    pub fn coop_k64(&self) -> bool {
        self.coop_k64.load(Ordering::Relaxed)
    }

    /// The cooperative GEMM's entry points now: (gemm1, gemm2).
    pub fn coop_entries(&self) -> (&'static str, &'static str) {
        self.coop_kernel().entries()
    }

    /// The cooperative GEMM's kernel now (when it runs).
    pub fn coop_kernel(&self) -> CoopKernel {
        if let Some(k) = self.coop_pre() {
            k
        } else if self.coop_k64() {
            CoopKernel::K64
        } else {
            CoopKernel::K32
        }
    }

    /// The pre-pass kernel (k64p or k64pw) when the cooperative GEMM runs one.
    pub fn coop_pre(&self) -> Option<CoopKernel> {
        *self.coop_pre.lock().unwrap()
    }

    /// Use a pre-pass kernel (`Some(K64p | K64pw)`; its device check and pipelines run first:
    /// Err where they or k64's check failed, or for a kernel without pre-passes) or none
    /// (`None`: k64 or k32 as chosen before).
    pub fn set_coop_pre(&self, k: Option<CoopKernel>) -> Result<(), String> {
        if let Some(k) = k {
            if !k.prepass() {
                return Err(format!("kernel {} has no pre-passes", k.name()));
            }
            if !self.coop_k64_ok {
                let why = self.coop_k64_note.lock().unwrap().clone();
                return Err(format!(
                    "kernel {} needs kernel k64's layouts: {}",
                    k.name(),
                    if why.is_empty() {
                        self.gemm_note()
                    } else {
                        why
                    }
                ));
            }
            // Checked on every switch (its pipelines are cached after the first).
            self.check_coop64p(k)?;
        }
        *self.coop_pre.lock().unwrap() = k;
        Ok(())
    }

    /// Use kernel k64 (`true`, only where it passed its checks) or k32 for the cooperative
    /// GEMM. Err when k64 is asked on a device that cannot run it.
    pub fn set_coop_k64(&self, on: bool) -> Result<(), String> {
        if on && !self.coop_k64_ok {
            let why = self.coop_k64_note.lock().unwrap().clone();
            return Err(if why.is_empty() {
                self.gemm_note()
            } else {
                why
            });
        }
        self.coop_k64.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Which GEMM the device chose at start-up and why, in words.
    pub fn gemm_note(&self) -> String {
        self.coop_note.lock().unwrap().clone()
    }

    /// Use the cooperative-matrix GEMM (`true`, only where it passed its checks) or the tiled
    /// one. Err when `true` is asked on a device that cannot run it.
    pub fn set_coop_gemm(&self, on: bool) -> Result<(), String> {
        if on && !self.coop_ok {
            return Err(self.gemm_note());
        }
        self.coop_gemm.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Multiply the known 16x32 by 32x16 product of `coop_check` (shaders/moe_gemm_coop.wgsl)
    /// on the device and compare every element exactly; then build the two GEMM pipelines
    /// (default overrides) so a driver that rejects them (workgroup memory, compilation) is
    /// found here, not in a forward.
    fn check_coop(&self) -> Result<(), String> {
        let pipe = self
            .pipeline(Shader::MoeGemmCoop, "coop_check", &self.coop_overrides[..1])
            .map_err(|e| e.to_string())?;
        let got: Vec<f32> =
            bytemuck::pod_collect_to_vec(&self.run_check(&pipe, 1024).map_err(|e| e.to_string())?);
        check_coop_product(&got)?;
        for entry in ["coop_gemm1", "coop_gemm2"] {
            self.pipeline(Shader::MoeGemmCoop, entry, &self.coop_overrides)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Kernel k64's device check: `coop64_check` (its layouts: column-major A, row-major B, the
    /// hand-out stride) must give exactly the product `coop_check` gives, and both k64
    /// pipelines must build (46 KiB of workgroup memory: an adapter with less refuses here).
    fn check_coop64(&self) -> Result<(), String> {
        let need = COOP64_WORKGROUP_BYTES;
        let have = self.limits.max_compute_workgroup_storage_size;
        if need > have {
            return Err(format!(
                "kernel k64 needs {need} B of workgroup memory, the adapter has {have} B"
            ));
        }
        let pipe = self
            .pipeline(Shader::MoeGemmCoop, "coop64_check", &[])
            .map_err(|e| e.to_string())?;
        let got: Vec<f32> =
            bytemuck::pod_collect_to_vec(&self.run_check(&pipe, 1024).map_err(|e| e.to_string())?);
        check_coop_product(&got)?;
        let ov = self.coop64_overrides();
        for entry in ["coop64_gemm1", "coop64_gemm2"] {
            self.pipeline(Shader::MoeGemmCoop, entry, &ov)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Kernel k64p's device check: `coop64p_check` loads A with coopLoadT from a storage buffer
    /// (f16 rows of stride 40 at a row offset, as the k-loop loads xp_hi) and must give exactly
    /// the product `coop_check` gives; then the GEMM pipelines of kernel `k` (k64p or k64pw;
    /// only the one asked for: each costs seconds of driver compilation at start-up) and the
    /// pre-passes must build.
    fn check_coop64p(&self, k: CoopKernel) -> Result<(), String> {
        // k64pw keeps k64's workgroup tiles (A is copied into them); k64p drops the A tiles.
        let need = if k == CoopKernel::K64pw {
            COOP64_WORKGROUP_BYTES
        } else {
            COOP64P_WORKGROUP_BYTES
        };
        let have = self.limits.max_compute_workgroup_storage_size;
        if need > have {
            return Err(format!(
                "kernel {} needs {need} B of workgroup memory, the adapter has {have} B",
                k.name()
            ));
        }
        let run = || -> Result<Vec<u8>, BackendError> {
            let pipe = self.pipeline(Shader::MoeGemmCoop, "coop64p_check", &[])?;
            // A[i][k] = (3i + k) % 7 - 3 at row i + 1 of a [17][40] f16 buffer.
            let mut a = vec![half::f16::ZERO; 17 * 40];
            for i in 0..16usize {
                for k in 0..32usize {
                    a[(i + 1) * 40 + k] = half::f16::from_f32(((3 * i + k) % 7) as f32 - 3.0);
                }
            }
            let xa = self.upload_owned("coop64p_check_a", bytemuck::cast_slice(&a));
            let out = self.storage(1024);
            let bg = self.bind(&pipe, &[(9, &out), (17, &xa)]);
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("coop64p_check"),
                });
            {
                let mut p = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                p.set_pipeline(&pipe);
                p.set_bind_group(0, &bg, &[]);
                p.dispatch_workgroups(1, 1, 1);
            }
            let mut r = self.submit_and_read(enc, &[(&out, 1024)])?;
            self.give([out]);
            Ok(r.swap_remove(0))
        };
        let got: Vec<f32> =
            bytemuck::pod_collect_to_vec(&run().map_err(|e| format!("coop64p_check failed: {e}"))?);
        check_coop_product(&got).map_err(|e| format!("coop64p_check failed: {e}"))?;
        let ov = self.coop64_overrides();
        let (g1, g2) = k.entries();
        for entry in [g1, g2] {
            self.pipeline(Shader::MoeGemmCoop, entry, &ov)
                .map_err(|e| e.to_string())?;
        }
        for entry in ["coopp_prep1", "coopp_prep2"] {
            self.pipeline(Shader::MoeCoopPrepass, entry, &[])
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Whether gemv1 builds the row lists itself for `pairs` token-expert pairs.
    pub fn gemv_own_lists(&self, pairs: usize) -> bool {
        self.own_lists.load(Ordering::Relaxed)
            && pairs as u64 <= self.own_lists_max.load(Ordering::Relaxed)
    }

    /// The decode GEMV's layout now.
    pub fn gemv_config(&self) -> GemvConfig {
        *self.gemv.lock().unwrap()
    }

    /// Choose the decode GEMV's layout: subgroup reductions (when `want.subgroup`, the adapter
    /// has fixed-size subgroups and `subgroup_check` passes for that workgroup; the lanes are the
    /// subgroup size) or the workgroup-memory layout (32 lanes), with `want`'s prefetch and
    /// words. Returns the layout in force and, when the subgroup layout was asked for and
    /// refused, why.
    pub fn set_gemv(&self, want: GemvConfig) -> Result<GemvConfig, String> {
        let (prefetch, words) = (want.prefetch, want.words);
        let mut r = Ok(());
        let shared = GemvConfig {
            prefetch,
            words,
            one_row: want.one_row,
            ..GemvConfig::SHARED
        };
        let cfg = if !want.subgroup {
            shared
        } else {
            match self.subgroup_size {
                None => {
                    r = Err(format!(
                        "{}: no SUBGROUP feature or no fixed subgroup size",
                        self.info.adapter.name
                    ));
                    shared
                }
                Some(size) => {
                    let split = want.split.clamp(1, 4).next_power_of_two();
                    let lanes = size * split;
                    let c = GemvConfig {
                        subgroup: true,
                        lanes,
                        prefetch,
                        words,
                        split,
                        one_row: want.one_row,
                    };
                    let max = self.limits.max_compute_invocations_per_workgroup;
                    if c.threads() > max {
                        r = Err(format!(
                            "8 lane groups of {lanes} lanes: {} invocations (at most {max})",
                            c.threads()
                        ));
                        shared
                    } else if !self.check_subgroup_layout(c) {
                        r = Err(format!(
                            "{}: subgroup_check failed for {} invocations",
                            self.info.adapter.name,
                            c.threads()
                        ));
                        shared
                    } else {
                        c
                    }
                }
            }
        };
        *self.gemv.lock().unwrap() = cfg;
        r.map(|_| cfg)
    }

    /// One workgroup of a start-up self-check entry point (`subgroup_check`,
    /// `fp4_decode_check`, `coop_check`) writing `bytes` into binding 9; returns those bytes.
    fn run_check(&self, pipe: &wgpu::ComputePipeline, bytes: u64) -> Result<Vec<u8>, BackendError> {
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

    /// Run `subgroup_check` (shaders/moe_gemv_reduce_subgroup.wgsl) with the layout `c`: every
    /// invocation must sit in a subgroup of exactly `c.lanes` consecutive invocations.
    fn check_subgroup_layout(&self, c: GemvConfig) -> bool {
        let run = || -> Result<bool, BackendError> {
            let pipe = self.pipeline(
                Shader::MoeGemv {
                    registers: false,
                    subgroup: true,
                },
                "subgroup_check",
                &c.overrides(),
            )?;
            let got: Vec<u32> =
                bytemuck::pod_collect_to_vec(&self.run_check(&pipe, 4 * c.threads() as u64)?);
            Ok(got.iter().all(|&v| v == 1))
        };
        run().unwrap_or(false)
    }

    /// Run `fp4_decode_check` (shaders/moe_gemv_fp4_registers.wgsl) and compare the 16 E2M1 codes it
    /// decodes from bits with the format table's values, bit for bit (±0 included). False on
    /// any difference or error: the table decode is always right.
    fn check_fp4_register_decode(&self) -> bool {
        let run = || -> Result<bool, BackendError> {
            let pipe = self.pipeline(
                Shader::MoeGemv {
                    registers: true,
                    subgroup: false,
                },
                "fp4_decode_check",
                &[],
            )?;
            let got: Vec<u32> = bytemuck::pod_collect_to_vec(&self.run_check(&pipe, 64)?);
            Ok((0..16u8).all(|c| {
                got[c as usize] == crate::format::dequant_elem(MxFormat::Fp4E2M1, c, 127).to_bits()
            }))
        };
        run().unwrap_or(false)
    }

    /// A timer for up to `passes` passes, when the device has TIMESTAMP_QUERY.
    pub fn timer(&self, passes: u32) -> Option<Timer> {
        if !self
            .device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY)
        {
            return None;
        }
        let cap = 2 * passes.max(1);
        Some(Timer {
            set: self.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("mxmoe timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: cap,
            }),
            labels: Vec::new(),
            cap,
        })
    }

    /// A buffer timestamps can be resolved into.
    pub fn resolve_buffer(&self, bytes: u64) -> wgpu::Buffer {
        self.take(
            bytes,
            wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        )
    }

    /// The adapter's largest bindable storage buffer (no test override).
    fn max_binding_hw(&self) -> u64 {
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

    /// A pooled buffer of at least `size` bytes (storage + copy src/dst).
    pub fn storage(&self, size: u64) -> wgpu::Buffer {
        self.take(
            size,
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
        )
    }

    /// A pooled uniform buffer holding `data`.
    pub fn uniform(&self, data: &[u8]) -> wgpu::Buffer {
        let b = self.take(
            data.len() as u64,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        );
        self.queue.write_buffer(&b, 0, data);
        b
    }

    fn take(&self, size: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
        // Power-of-two classes for reuse, but never above what one binding may hold (a storage
        // buffer is always bound whole).
        let pow2 = size.max(256).next_power_of_two();
        let class = if pow2 <= self.max_binding_hw() {
            pow2
        } else {
            size.next_multiple_of(256)
        };
        let key = (usage.bits(), class);
        if let Some(b) = self
            .pool
            .lock()
            .unwrap()
            .get_mut(&key)
            .and_then(|v| v.pop())
        {
            return b;
        }
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("mxmoe pool"),
            size: class,
            usage,
            mapped_at_creation: false,
        })
    }

    /// Return pooled buffers after the op's submission completed.
    pub fn give(&self, bufs: impl IntoIterator<Item = wgpu::Buffer>) {
        let mut pool = self.pool.lock().unwrap();
        for b in bufs {
            let v = pool.entry((b.usage().bits(), b.size())).or_default();
            // A few per size class cover one op's needs; more would only pin memory.
            if v.len() < POOL_PER_CLASS {
                v.push(b);
            }
        }
    }

    /// A pooled storage buffer holding `data` (padded to 4 bytes).
    pub fn upload(&self, data: &[u8]) -> wgpu::Buffer {
        let b = self.storage(data.len() as u64);
        if !data.is_empty() {
            if data.len().is_multiple_of(4) {
                self.queue.write_buffer(&b, 0, data);
            } else {
                let mut v = data.to_vec();
                v.resize(data.len().next_multiple_of(4), 0);
                self.queue.write_buffer(&b, 0, &v);
            }
        }
        b
    }

    /// An idle [`Upload`] buffer of at least `size` bytes (the smallest kept one that fits, else
    /// a new one, mapped at creation).
    pub fn take_upload(&self, size: u64) -> Upload {
        {
            let mut ups = self.uploads.lock().unwrap();
            let best = ups
                .iter()
                .enumerate()
                .filter(|(_, u)| u.buf.size() >= size)
                .min_by_key(|(_, u)| u.buf.size())
                .map(|(i, _)| i);
            if let Some(i) = best {
                return ups.swap_remove(i);
            }
        }
        let pow2 = size.max(256).next_power_of_two();
        let class = if pow2 <= self.limits.max_buffer_size {
            pow2
        } else {
            size.next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
        };
        Upload {
            buf: self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("mxmoe upload"),
                size: class,
                usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: true,
            }),
            state: Arc::new(AtomicU8::new(UP_MAPPED)),
        }
    }

    /// Keep an idle [`Upload`] buffer for a later [`Context::take_upload`] (a few are kept; one
    /// whose mapping failed is dropped).
    pub fn give_upload(&self, up: Upload) {
        if up.state.load(Ordering::Acquire) == UP_FAILED {
            return;
        }
        let mut ups = self.uploads.lock().unwrap();
        if ups.len() < UPLOADS_KEPT {
            ups.push(up);
        }
    }

    /// Write `parts` ((byte offset, bytes), offsets and lengths multiples of 4) into `up`'s
    /// mapping, then unmap it so that copies from it can be recorded. Waits for the mapping if
    /// the last submission that read the buffer is still running; parts of [`WRITE_PAR_MIN`]
    /// bytes or more are copied from rayon's threads in [`WRITE_PIECE`] pieces (a 2048-token
    /// batch is tens of MB).
    pub fn fill_upload(&self, up: &Upload, parts: &[(u64, &[u8])]) -> Result<(), BackendError> {
        use rayon::prelude::*;
        let map_err = |e: String| BackendError::Device(format!("upload buffer: {e}"));
        if up.state.load(Ordering::Acquire) == UP_UNMAPPED {
            // Left unmapped by a forward that failed between its fill and its submit.
            self.request_map(up);
        }
        if up.state.load(Ordering::Acquire) == UP_REQUESTED {
            self.device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| map_err(format!("poll: {e}")))?;
        }
        if up.state.load(Ordering::Acquire) != UP_MAPPED {
            up.state.store(UP_FAILED, Ordering::Release);
            return Err(map_err("map_async for writing failed".into()));
        }
        {
            let mut v = up
                .buf
                .slice(..)
                .get_mapped_range_mut()
                .map_err(|e| map_err(format!("mapped range: {e}")))?;
            for &(off, data) in parts {
                let mut dst = v.slice(off as usize..off as usize + data.len());
                if data.len() < WRITE_PAR_MIN {
                    dst.copy_from_slice(data);
                } else {
                    // wgpu's write-only view is not Send: the pieces are written through its
                    // pointer. SAFETY: the pointer covers `data.len()` writable bytes (the
                    // view's length, checked by `slice`), the pieces are disjoint, and the view
                    // outlives the parallel loop (it is joined before `v` is dropped).
                    let base = dst.as_raw_element_ptr().as_ptr() as usize;
                    data.par_chunks(WRITE_PIECE)
                        .enumerate()
                        .for_each(|(i, s)| unsafe {
                            std::ptr::copy_nonoverlapping(
                                s.as_ptr(),
                                (base as *mut u8).add(i * WRITE_PIECE),
                                s.len(),
                            )
                        });
                }
            }
        }
        up.buf.unmap();
        up.state.store(UP_UNMAPPED, Ordering::Release);
        Ok(())
    }

    /// Ask for `up`'s mapping again (after the submission that reads it).
    fn request_map(&self, up: &Upload) {
        up.state.store(UP_REQUESTED, Ordering::Release);
        let st = up.state.clone();
        up.buf.slice(..).map_async(wgpu::MapMode::Write, move |r| {
            st.store(
                if r.is_ok() { UP_MAPPED } else { UP_FAILED },
                Ordering::Release,
            );
        });
    }

    /// An unpooled storage buffer holding `data` exactly (weights that live with a layer).
    pub fn upload_owned(&self, label: &str, data: &[u8]) -> wgpu::Buffer {
        let mut v;
        let bytes = if data.len().is_multiple_of(4) && !data.is_empty() {
            data
        } else {
            v = data.to_vec();
            v.resize(data.len().next_multiple_of(4).max(4), 0);
            &v
        };
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytes,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            })
    }

    /// Fill the first `bytes` of an output buffer with [`POISON`] when poisoning is on.
    pub fn maybe_poison(&self, b: &wgpu::Buffer, bytes: u64) {
        if self.poison.load(Ordering::Relaxed) && bytes > 0 {
            let n = (bytes / 4) as usize;
            let v = vec![POISON; n];
            self.queue.write_buffer(b, 0, bytemuck::cast_slice(&v));
        }
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

    /// Record copies of `(buffer, bytes)` into ONE mappable buffer (each part at a 256-byte
    /// aligned offset), submit `enc`, wait for it (spinning on the fence for a short while before
    /// blocking: a blocking wait adds the wake-up latency of a sleeping thread to every forward),
    /// map once and hand the parts to `read`, which copies out what it needs:
    /// [`Context::encode_readback`], then [`Context::submit_readback`] (`pre` on this thread).
    pub fn submit_and_map<T, P: Send>(
        &self,
        enc: wgpu::CommandEncoder,
        uploads: &[&Upload],
        reads: &[(&wgpu::Buffer, u64)],
        pre: impl FnOnce() -> P + Send,
        stream: impl FnMut(&mut P, u64, &[u8]),
        read: impl FnOnce(&[&[u8]], P) -> T,
    ) -> Result<T, BackendError> {
        let rb = self.encode_readback(enc, reads);
        host_profile::mark("finish_encoder");
        self.submit_readback(rb, uploads, pre, false, stream, read)
    }

    /// Record into `enc` the copies of `(buffer, bytes)` into ONE mappable buffer (each part
    /// at a 256-byte aligned offset) and finish it; no submission yet (a forward records this
    /// while other threads write its inputs). The first part is read back in pieces where it is
    /// large: see [`Context::submit_readback`].
    pub fn encode_readback(
        &self,
        mut enc: wgpu::CommandEncoder,
        reads: &[(&wgpu::Buffer, u64)],
    ) -> Readback {
        // The first part's pieces: (offset, bytes); piece 0 shares the first mappable buffer
        // with the other parts.
        let n0 = reads.first().map_or(0, |r| r.1);
        let stream_min = self.read_pieces.0.load(Ordering::Relaxed);
        let piece = self.read_pieces.1.load(Ordering::Relaxed).max(256);
        let pieces: Vec<(u64, u64)> = if n0 >= stream_min {
            (0..n0)
                .step_by(piece as usize)
                .map(|o| (o, piece.min(n0 - o)))
                .collect()
        } else {
            vec![(0, n0)]
        };
        let mut parts = Vec::with_capacity(reads.len());
        let mut total = 0u64;
        for (i, (_, n)) in reads.iter().enumerate() {
            let n = if i == 0 { pieces[0].1 } else { *n };
            parts.push((total, n));
            total = (total + n).next_multiple_of(256);
        }
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let staging = self.take(total.max(4), usage);
        for ((b, _), &(o, n)) in reads.iter().zip(&parts) {
            if n > 0 {
                enc.copy_buffer_to_buffer(b, 0, &staging, o, n);
            }
        }
        let cmd = enc.finish();
        // The other pieces, a command buffer each (submitted one by one).
        let more = pieces[1..]
            .iter()
            .map(|&(o, n)| {
                let st = self.take(n, usage);
                let mut e = self
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("readback piece"),
                    });
                e.copy_buffer_to_buffer(reads[0].0, o, &st, 0, n);
                (e.finish(), st, o, n)
            })
            .collect();
        Readback {
            cmd,
            staging,
            total: total.max(4),
            parts,
            more,
        }
    }

    /// Submit a recorded readback, wait for it and map it: the parts after the first go to
    /// `read` (the first as an empty slice). The first part goes to `stream` instead (called
    /// with the destination, the byte offset and the bytes): where it is
    /// [`Context::read_pieces`]`.0` bytes or more ([`READ_STREAM_MIN`]), in pieces of
    /// [`READ_PIECE`] bytes, each copied into its own mappable buffer by a submission of its
    /// own, so that the host copies piece i out while the device copies piece i + 1 (a
    /// 2048-token DeepSeek-R1 output is 58.7 MB: the device's copy and the host's copy each
    /// take milliseconds). `pre` runs while the device works, with `overlap` on rayon's threads
    /// (e.g. [`touched_vec`]: the destination's page faults, which a fresh allocation of tens
    /// of MB otherwise takes during the copy-out); its result is `stream`'s destination, then
    /// goes to `read`. The `uploads` the submission reads are asked to map again right after the
    /// submit (see [`Upload`]). Device errors raised meanwhile are returned as
    /// [`BackendError::Device`].
    pub fn submit_readback<T, P: Send>(
        &self,
        rb: Readback,
        uploads: &[&Upload],
        pre: impl FnOnce() -> P + Send,
        overlap: bool,
        mut stream: impl FnMut(&mut P, u64, &[u8]),
        read: impl FnOnce(&[&[u8]], P) -> T,
    ) -> Result<T, BackendError> {
        let Readback {
            cmd,
            staging,
            total,
            parts,
            more,
        } = rb;
        let idx = self.queue.submit([cmd]);
        for up in uploads {
            self.request_map(up);
        }
        let mut more_bufs = Vec::with_capacity(more.len());
        for (c, st, o, n) in more {
            let i = self.queue.submit([c]);
            more_bufs.push((st, o, n, i));
        }
        host_profile::mark("submit");
        let map = |b: &wgpu::Buffer, n: u64| {
            let done = Arc::new(Mutex::new(None));
            let d2 = done.clone();
            b.slice(0..n).map_async(wgpu::MapMode::Read, move |r| {
                *d2.lock().unwrap() = Some(r);
            });
            done
        };
        let done = map(&staging, total);
        let dones: Vec<_> = more_bufs.iter().map(|(b, _, n, _)| map(b, *n)).collect();
        // Whether a map callback came, and with success.
        let status = |d: &Mutex<Option<Result<(), wgpu::BufferAsyncError>>>| match d
            .lock()
            .unwrap()
            .take()
        {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(BackendError::Device(format!("map_async: {e}"))),
            None => Err(BackendError::Device(
                "map_async: no callback after wait".into(),
            )),
        };
        // With `overlap`, the wait on this thread and `pre` on another (rayon::join: `pre` runs
        // here after the wait if no thread took it); else `pre` first, all on this thread (a
        // decode-sized forward would pay two thread wake-ups for nothing).
        let wait = || self.spin_until(|| done.lock().unwrap().is_some(), &idx);
        let (waited, mut dest) = if overlap {
            rayon::join(wait, pre)
        } else {
            let dest = pre();
            (wait(), dest)
        };
        let first = waited.and_then(|()| status(&done));
        host_profile::mark("wait");
        let range = |b: &wgpu::Buffer, n: u64| {
            b.slice(0..n)
                .get_mapped_range()
                .map_err(|e| BackendError::Device(format!("mapped range: {e}")))
        };
        let mut result = first.and_then(|()| {
            let v = range(&staging, total)?;
            stream(&mut dest, 0, &v[..parts[0].1 as usize]);
            Ok(())
        });
        let mut mapped = vec![result.is_ok()];
        for ((b, o, n, i), d) in more_bufs.iter().zip(&dones) {
            result = result.and_then(|()| {
                self.spin_until(|| d.lock().unwrap().is_some(), i)?;
                status(d)?;
                stream(&mut dest, *o, &range(b, *n)?);
                Ok(())
            });
            mapped.push(result.is_ok());
        }
        let out = result.and_then(|()| {
            let v = range(&staging, total)?;
            let views: Vec<&[u8]> = parts
                .iter()
                .enumerate()
                .map(|(i, &(o, n))| {
                    if i == 0 {
                        &v[0..0]
                    } else {
                        &v[o as usize..(o + n) as usize]
                    }
                })
                .collect();
            Ok(read(&views, dest))
        });
        host_profile::mark("copy_out");
        // Mapped buffers go back to the pool; one whose map failed or never came is dropped.
        let bufs = std::iter::once(staging).chain(more_bufs.into_iter().map(|(b, _, _, _)| b));
        for (b, ok) in bufs.zip(mapped) {
            if ok {
                b.unmap();
                self.give([b]);
            }
        }
        host_profile::mark("unmap");
        let out = out?;
        if let Some(e) = self.uncaptured.lock().unwrap().take() {
            return Err(BackendError::Device(e));
        }
        Ok(out)
    }

    /// Poll the device until `ready()` (set by a callback that a poll runs), spinning for up to
    /// [`SPIN_WAIT`] before one blocking wait for submission `idx` (not for later ones: the
    /// readback's further pieces are copied out as each completes).
    fn spin_until(
        &self,
        ready: impl Fn() -> bool,
        idx: &wgpu::SubmissionIndex,
    ) -> Result<(), BackendError> {
        let t0 = std::time::Instant::now();
        loop {
            if ready() {
                return Ok(());
            }
            if t0.elapsed() > SPIN_WAIT {
                self.device
                    .poll(wgpu::PollType::Wait {
                        submission_index: Some(idx.clone()),
                        timeout: None,
                    })
                    .map_err(|e| BackendError::Device(format!("poll: {e}")))?;
                return Ok(());
            }
            self.device
                .poll(wgpu::PollType::Poll)
                .map_err(|e| BackendError::Device(format!("poll: {e}")))?;
        }
    }

    /// Submit `enc` and wait until the device has run it (the same spin-then-block wait as
    /// [`Context::submit_and_map`]); the `uploads` it reads are asked to map again right after
    /// the submit. For [`crate::backend::Timing::Host`], which ends each phase with a wait.
    pub fn submit_wait(
        &self,
        enc: wgpu::CommandEncoder,
        uploads: &[&Upload],
    ) -> Result<(), BackendError> {
        let idx = self.queue.submit([enc.finish()]);
        for up in uploads {
            self.request_map(up);
        }
        let done = Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        self.queue
            .on_submitted_work_done(move || d2.store(true, Ordering::Release));
        self.spin_until(|| done.load(Ordering::Acquire), &idx)?;
        if let Some(e) = self.uncaptured.lock().unwrap().take() {
            return Err(BackendError::Device(e));
        }
        Ok(())
    }

    /// The round trip of a minimal submission, in microseconds ([min, median, max] over `n`):
    /// one 4-byte copy into a mappable buffer, submit, wait and map as a forward does
    /// ([`Context::submit_and_map`]). The floor under any forward's wall time here (host
    /// profile diagnostic).
    pub fn round_trip_probe(&self, n: usize) -> Result<[f64; 3], BackendError> {
        let src = self.storage(4);
        let mut t = Vec::with_capacity(n);
        for _ in 0..n.max(1) {
            let t0 = std::time::Instant::now();
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("probe"),
                });
            enc.clear_buffer(&src, 0, None);
            self.submit_and_map(enc, &[], &[(&src, 4)], || (), |_, _, _| (), |_, _| ())?;
            t.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        self.give([src]);
        t.sort_by(|a, b| a.total_cmp(b));
        Ok([t[0], t[t.len() / 2], t[t.len() - 1]])
    }

    /// Record copies of `(buffer, bytes)` into mappable buffers, submit `enc`, wait, and read
    /// them back. Device errors raised meanwhile are returned as [`BackendError::Device`].
    pub fn submit_and_read(
        &self,
        mut enc: wgpu::CommandEncoder,
        reads: &[(&wgpu::Buffer, u64)],
    ) -> Result<Vec<Vec<u8>>, BackendError> {
        let staging: Vec<wgpu::Buffer> = reads
            .iter()
            .map(|(_, n)| {
                self.take(
                    (*n).max(4),
                    wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                )
            })
            .collect();
        for ((b, n), s) in reads.iter().zip(&staging) {
            if *n > 0 {
                enc.copy_buffer_to_buffer(b, 0, s, 0, *n);
            }
        }
        self.queue.submit([enc.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        for ((_, n), s) in reads.iter().zip(&staging) {
            let tx = tx.clone();
            s.slice(0..(*n).max(4))
                .map_async(wgpu::MapMode::Read, move |r| {
                    let _ = tx.send(r);
                });
        }
        drop(tx);
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| BackendError::Device(format!("poll: {e}")))?;
        for r in rx.iter() {
            r.map_err(|e| BackendError::Device(format!("map_async: {e}")))?;
        }
        let mut out = Vec::with_capacity(reads.len());
        for ((_, n), s) in reads.iter().zip(&staging) {
            {
                let v = s
                    .slice(0..(*n).max(4))
                    .get_mapped_range()
                    .map_err(|e| BackendError::Device(format!("mapped range: {e}")))?;
                out.push(v[..*n as usize].to_vec());
            }
            s.unmap();
        }
        self.give(staging);
        if let Some(e) = self.uncaptured.lock().unwrap().take() {
            return Err(BackendError::Device(e));
        }
        Ok(out)
    }
}
