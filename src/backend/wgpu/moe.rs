//! The MoE layer on the GPU (shaders/moe_*.wgsl; moe_common.wgsl has the overview): one submit
//! per forward, no host round trips between passes, weights stay packed (dequantized in the GEMM
//! prologues).
//!
//! Size (~1250 lines): the forward's pass encoding and its bind groups in one place (every
//! pass shares the forward's buffers). Seams for a split: the prefill GEMM passes (tiled and
//! cooperative) and the weight-chunk planning.
//!
//! Passes: route -> lists (histogram, prefix sum, row lists, tile list) -> input QDQ
//! (quant.wgsl) -> gemm1 per weight chunk (bias, activation, intermediate QDQ fused) -> gemm2 per
//! weight chunk (bias, router weight) -> combine (slot order, no float atomics). The GEMV path
//! (tiles of 4 rows) replaces the GEMMs up to `Context::gemv_pairs_for` token-expert pairs
//! per expert; at decode sizes (up to `Context::own_lists_max` pairs) gemv1 builds the lists
//! itself and the `lists` pass is not recorded, and up to `FUSED_COMBINE_MAX_TOKENS` tokens
//! gemv2's last workgroup per column slice does the combine (no `combine` pass). Everything the caller gets back (output, ids,
//! weights, timestamps) comes back in one readback. A layer keeps its last forward's buffers and
//! bind groups ([`FwdCache`]), so a forward of the same batch size only uploads its inputs and
//! records the passes.
//!
//! Weights larger than one storage binding are split into chunks of whole experts, each its own
//! buffer. One dispatch of each expert pass reads up to four chunks (shaders/
//! moe_weights_multi.wgsl: a binding set per chunk, the loads pick the tile's expert's chunk):
//! a layer of C chunks runs ceil(C / chunks-per-pass) dispatches per pass, each skipping the
//! tiles of the other dispatches' experts. Where the adapter's storage-buffer limit does not
//! hold the extra bindings, every chunk gets its own dispatch (`Context::chunks_per_pass` = 1),
//! and so it does by default past decode sizes (`MULTI_CHUNK_MAX_PAIRS`: where a pass is long,
//! the multi-chunk loads' branch costs more than a dispatch).
//!
//! Over 700 lines: `forward` records every pass of one submit against one set of buffers and
//! bind groups (the forward cache); splitting it per pass would pass that set around. Layer
//! preparation (weight chunks, resident buffers) is the other third.

use super::buffers::Upload;
use super::context::{Context, FUSED_COMBINE_MAX_TOKENS};
use super::host_profile;
use super::route;
use super::source::{Shader, FMT_NONE, MULTI_WEIGHT_BINDINGS};
use super::timer::Timer;
use crate::backend::host_io::{pod_append, pod_vec, touched_vec, WRITE_PAR_MIN};
use crate::backend::{ops, BackendError, PassTimes};
use crate::format::MxTensor;
use crate::moe::{Intermediate, MoeConfig, MoeLayer, MoeOptions, MoeOutput, Routing};
use std::sync::atomic::Ordering;

/// Rows per GEMM tile (GEMM_TILE_ROWS in moe_gemm.wgsl) and per GEMV tile (GEMV_TILE_ROWS in
/// moe_gemv.wgsl).
const TM: usize = 64;
const TG: usize = 4;

/// Which expert kernels a forward uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MoePath {
    /// GEMV when there are few token-expert pairs (decode), GEMM otherwise.
    #[default]
    Auto,
    /// Grouped GEMM: tiles of 64 rows x 64 intermediate (gemm1) / 128 output (gemm2) columns.
    Gemm,
    /// Grouped GEMV: tiles of 4 rows, lanes along K, weights streamed once per tile.
    Gemv,
}

/// Intermediate columns per gemm1 workgroup, output columns per gemm2 workgroup, and the same
/// for the GEMV kernels.
const TN1: usize = 64;
const TN2: usize = 128;
const TN1_GEMV: usize = 32;
const TN2_GEMV: usize = 64;
/// gemv1 builds the row lists itself (GEMV_OWN_LISTS in moe_gemv.wgsl) up to this many
/// token-expert pairs (its workgroup arrays).
const GEMV_LIST_MAX: usize = 256;
/// moe_lists.wgsl's workgroup arrays hold this many local experts.
pub const MAX_LOCAL_EXPERTS: usize = 1024;

/// The bindings of the cooperative GEMM's kernel k64p (`coop64p_gemm1/2`): the GEMM's own
/// (parameters, row lists, tiles, weights, scales, output, bias, router weights, the FP4 vec4
/// view) and the pre-converted activations (17 hi, 18 lo, 19 row exponents); no x_in.
/// `tests/shaders.rs` checks them against what naga finds the entry points use (a bind group
/// must name exactly the bindings of the pipeline's derived layout).
pub const COOP64P_BINDINGS: [u32; 12] = [0, 3, 5, 7, 8, 9, 10, 11, 13, 17, 18, 19];
/// The bindings of kernel k64pw (`coop64pw_gemm1/2`): k64p's with the vec4 views of the
/// pre-converted activations (20 hi, 21 lo) instead of their f16 views.
pub const COOP64PW_BINDINGS: [u32; 12] = [0, 3, 5, 7, 8, 9, 10, 11, 13, 19, 20, 21];
/// The bindings of `gemm1_pre_ref` / `gemm2_pre_ref` (the tiled GEMM over the pre-converted
/// rows; `Context::gemm_pre_ref`).
pub const GEMM_PRE_REF_BINDINGS: [u32; 11] = [0, 3, 5, 7, 8, 9, 10, 11, 17, 18, 19];
/// The bindings of the pre-passes `coopp_prep1` (token rows scattered to the pairs' rows:
/// row_of_pair) and `coopp_prep2` (rows kept).
pub const COOPP_PREP1_BINDINGS: [u32; 6] = [0, 4, 6, 17, 18, 19];
pub const COOPP_PREP2_BINDINGS: [u32; 5] = [0, 6, 17, 18, 19];
/// Rows of padding after the pre-converted rows: a tile's 64 rows are loaded whole.
const COOPP_PAD_ROWS: usize = 64;

/// The buffers of a pre-pass (`coopp_prep1` / `coopp_prep2`) or a pre-pass kernel's GEMM
/// (k64p, k64pw) bind group, by binding number.
struct PreBufs<'a> {
    params: &'a wgpu::Buffer,
    /// pair_of_row (3), row_of_pair (4), tiles (5)
    rows: &'a wgpu::Buffer,
    slot: &'a wgpu::Buffer,
    tiles: &'a wgpu::Buffer,
    /// x_in (6): the pre-pass's input rows
    x: &'a wgpu::Buffer,
    /// weights (7 and their vec4 view 13), scales (8), output (9), bias (10), router weights (11)
    w: &'a wgpu::Buffer,
    sc: &'a wgpu::Buffer,
    out: &'a wgpu::Buffer,
    bias: &'a wgpu::Buffer,
    topw: &'a wgpu::Buffer,
    /// the pre-converted activations: hi (17 / 20), lo (18 / 21), row exponents (19)
    hi: &'a wgpu::Buffer,
    lo: &'a wgpu::Buffer,
    exp: &'a wgpu::Buffer,
}

impl<'a> PreBufs<'a> {
    /// Exactly the entries of `bindings` (one of the `COOP*_BINDINGS` lists, which
    /// `tests/shaders.rs` checks against the entry points' derived layouts).
    fn entries(&self, bindings: &[u32]) -> Vec<(u32, &'a wgpu::Buffer)> {
        bindings
            .iter()
            .map(|&i| {
                let b = match i {
                    0 => self.params,
                    3 => self.rows,
                    4 => self.slot,
                    5 => self.tiles,
                    6 => self.x,
                    7 | 13 => self.w,
                    8 => self.sc,
                    9 => self.out,
                    10 => self.bias,
                    11 => self.topw,
                    17 | 20 => self.hi,
                    18 | 21 => self.lo,
                    19 => self.exp,
                    _ => unreachable!("binding {i} is in no COOP*_BINDINGS list"),
                };
                (i, b)
            })
            .collect()
    }
}

struct WeightChunk {
    e0: usize,
    e1: usize,
    w13: wgpu::Buffer,
    s13: wgpu::Buffer,
    w2: wgpu::Buffer,
    s2: wgpu::Buffer,
}

impl WeightChunk {
    /// The codes and scales expert stage `si` (0: w13, 1: w2) reads.
    fn stage(&self, si: usize) -> (&wgpu::Buffer, &wgpu::Buffer) {
        if si == 0 {
            (&self.w13, &self.s13)
        } else {
            (&self.w2, &self.s2)
        }
    }
}

/// A layer's weights resident on the device (upload once, run many times).
pub struct GpuLayer {
    config: MoeConfig,
    /// Whether the layer has an `e_score_correction_bias` (what `supports` is asked about).
    has_correction_bias: bool,
    chunks: Vec<WeightChunk>,
    /// Local experts per chunk (the last chunk may hold fewer).
    chunk_experts: usize,
    bias13: Option<wgpu::Buffer>,
    bias2: Option<wgpu::Buffer>,
    map: Option<wgpu::Buffer>,
    /// The router's e_score_correction_bias (when the selection uses it: sigmoid scoring).
    route_bias: Option<wgpu::Buffer>,
    dummy: wgpu::Buffer,
    /// Bytes of packed weights + scales on the device.
    pub bytes: u64,
    /// The last forward's buffers and bind groups (see [`FwdCache`]; boxed: it is large and
    /// `Prepared` holds the layer by value).
    fwd: std::sync::Mutex<Option<Box<FwdCache>>>,
}

/// A forward's cache key: a forward with the same batch size, path and pipelines (layouts,
/// decode, GEMV layout) on the same layer can reuse the last one's buffers and bind groups.
#[derive(PartialEq)]
struct FwdKey {
    m: usize,
    gemv: bool,
    own_lists: bool,
    fuse_combine: bool,
    /// Weight chunks per expert dispatch.
    per_pass: usize,
    pipes: Vec<wgpu::ComputePipeline>,
}

/// A forward's buffers (parameter blocks, inputs, scratch, outputs) and bind groups, kept by the
/// layer after a forward so that the next one of the same [`FwdKey`] only writes its inputs and
/// records the passes: no pool look-ups, no parameter writes, no bind-group creation. Kept up to
/// [`FWD_CACHE_MAX_BYTES`]; a different key gives the buffers back to the context's pool.
struct FwdCache {
    key: FwdKey,
    rparams: wgpu::Buffer,
    base_params: wgpu::Buffer,
    logits_b: wgpu::Buffer,
    hidden_b: wgpu::Buffer,
    /// ids, weights, rows, slot, tiles, intermediate, y, out, xq, the fused combine's slice
    /// counters (sizes in `out_sizes`).
    bufs: Vec<wgpu::Buffer>,
    out_sizes: Vec<u64>,
    qp: Option<wgpu::Buffer>,
    /// One parameter block per dispatch group of chunks.
    chunk_params: Vec<wgpu::Buffer>,
    bg_lists: Option<wgpu::BindGroup>,
    bg_qdq: Option<wgpu::BindGroup>,
    /// gemv1/gemm1 per dispatch group of chunks, then gemv2/gemm2 per group.
    bg_stages: Vec<wgpu::BindGroup>,
    bg_comb: wgpu::BindGroup,
    /// Kernel k64p's pre-passes (coopp_prep1, coopp_prep2).
    bg_prep: Option<(wgpu::BindGroup, wgpu::BindGroup)>,
    bg_route: wgpu::BindGroup,
    /// The inputs' upload buffer: logits at 0, hidden states at `hidden_off`.
    upload: Upload,
    hidden_off: u64,
}

/// The largest buffer set a layer keeps between forwards (64 MiB: gpt-oss-120b up to 256 tokens,
/// DeepSeek-R1 up to 64).
const FWD_CACHE_MAX_BYTES: u64 = 64 << 20;

impl FwdCache {
    fn bytes(&self) -> u64 {
        self.buffers().map(|b| b.size()).sum()
    }
    fn buffers(&self) -> impl Iterator<Item = &wgpu::Buffer> {
        [
            &self.rparams,
            &self.base_params,
            &self.logits_b,
            &self.hidden_b,
        ]
        .into_iter()
        .chain(&self.bufs)
        .chain(&self.qp)
        .chain(&self.chunk_params)
    }
    /// Give the buffers back to the context's pools (the bind groups are dropped).
    fn give_back(self, ctx: &Context) {
        let mut v = vec![self.rparams, self.base_params, self.logits_b, self.hidden_b];
        v.extend(self.bufs);
        v.extend(self.qp);
        v.extend(self.chunk_params);
        ctx.give(v);
        ctx.give_upload(self.upload);
    }
}

impl GpuLayer {
    /// The layer's configuration.
    pub fn config(&self) -> &MoeConfig {
        &self.config
    }
    /// Whether the layer has a DeepSeek `e_score_correction_bias`.
    pub fn has_correction_bias(&self) -> bool {
        self.has_correction_bias
    }
    /// How many buffers the weights were split into (1 unless they exceed a binding).
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }
    /// How many dispatches each expert pass takes with `per_pass` chunks per dispatch.
    pub fn dispatches(&self, per_pass: usize) -> usize {
        self.chunks.len().div_ceil(per_pass.max(1))
    }
}

fn unsupported(op: String, reason: String) -> BackendError {
    BackendError::Unsupported {
        backend: "wgpu".into(),
        op,
        reason,
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

/// The largest buffer this backend binds: the adapter's binding limit, and never more than
/// u32 bytes (the shaders index words and scale bytes with u32).
pub const MAX_U32_BYTES: u64 = u32::MAX as u64;

/// Check a layer's sizes against what the shaders address (u32 parameters and offsets) and the
/// adapter's binding limit `max_binding`, with overflow-checked arithmetic, before anything is
/// allocated or uploaded; a refusal names the sizes and the limit.
pub fn check_layer_sizes(
    c: &MoeConfig,
    max_binding: u64,
    adapter: &str,
) -> Result<(), BackendError> {
    let too_large = |msg: String| BackendError::Moe(crate::moe::MoeError::TooLarge(msg));
    let u32_params = [
        ("hidden size H", c.hidden),
        ("intermediate size I", c.inter),
        ("n_experts", c.n_experts),
        ("local experts", c.local_experts),
        ("top_k", c.router.top_k),
    ];
    for (what, v) in u32_params {
        if u64::try_from(v).map_or(true, |v| v > u32::MAX as u64) {
            return Err(too_large(format!(
                "{what} = {v} does not fit the shaders' u32 parameters (at most {})",
                u32::MAX
            )));
        }
    }
    let fmt = c.scheme.weight;
    let per = |rows: usize, k: usize| -> Option<u64> {
        crate::moe::budget::product(&[rows, k / crate::format::BLOCK])?
            .checked_mul(fmt.spec().block_bytes() as u64)
    };
    let w13 = c.inter.checked_mul(2).and_then(|r| per(r, c.hidden));
    let w2 = per(c.hidden, c.inter);
    let limit = max_binding.min(MAX_U32_BYTES);
    for (name, b) in [("w13", w13), ("w2", w2)] {
        match b {
            None => {
                return Err(too_large(format!(
                    "one expert's {name} (H {}, I {}) overflows 64-bit arithmetic",
                    c.hidden, c.inter
                )))
            }
            Some(b) if b > limit => {
                return Err(BackendError::OutOfMemory(format!(
                    "one expert's packed {name} weights (H {}, I {}) need {} but one storage \
                     binding holds at most {} on {adapter} (the shaders address a binding with \
                     u32 offsets)",
                    c.hidden,
                    c.inter,
                    crate::moe::budget::bytes_words(b),
                    crate::moe::budget::bytes_words(limit)
                )))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Upload a layer's weights, split into chunks of whole experts that fit one binding.
pub fn upload(ctx: &Context, layer: &MoeLayer) -> Result<GpuLayer, BackendError> {
    let max = ctx.max_binding().min(MAX_U32_BYTES);
    check_layer_sizes(&layer.config, max, &ctx.info.adapter.name)?;
    layer.validate()?;
    let el = layer.local_experts();
    let per13 = (layer.weights.w13.data.len() / el) as u64;
    let per2 = (layer.weights.w2.data.len() / el) as u64;
    let per_expert = per13.max(per2);
    if per_expert > max {
        return Err(BackendError::OutOfMemory(format!(
            "one expert's packed weights ({} for w13, {} for w2) exceed the largest storage \
             binding of {} ({})",
            mib(per13),
            mib(per2),
            mib(max),
            ctx.info.adapter.name
        )));
    }
    let mut per_chunk = ((max / per_expert) as usize).clamp(1, el);
    match ctx.chunk_experts.load(Ordering::Relaxed) {
        0 => {}
        n => per_chunk = per_chunk.min(n as usize),
    }
    let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let sl = |t: &MxTensor, e0: usize, e1: usize, scales: bool| -> Vec<u8> {
        let v = if scales { &t.scales } else { &t.data };
        let per = v.len() / el;
        v[e0 * per..e1 * per].to_vec()
    };
    let mut chunks = Vec::new();
    let mut e0 = 0;
    while e0 < el {
        let e1 = (e0 + per_chunk).min(el);
        chunks.push(WeightChunk {
            e0,
            e1,
            w13: ctx.upload_owned("w13", &sl(&layer.weights.w13, e0, e1, false)),
            s13: ctx.upload_owned("w13_scale", &sl(&layer.weights.w13, e0, e1, true)),
            w2: ctx.upload_owned("w2", &sl(&layer.weights.w2, e0, e1, false)),
            s2: ctx.upload_owned("w2_scale", &sl(&layer.weights.w2, e0, e1, true)),
        });
        e0 = e1;
    }
    let f32s = |v: &[f32]| -> Vec<u8> { bytemuck::cast_slice(v).to_vec() };
    let bias13 = layer
        .weights
        .w13_bias
        .as_deref()
        .map(|b| ctx.upload_owned("w13_bias", &f32s(b)));
    let bias2 = layer
        .weights
        .w2_bias
        .as_deref()
        .map(|b| ctx.upload_owned("w2_bias", &f32s(b)));
    let map = layer
        .weights
        .expert_map
        .as_deref()
        .map(|m| ctx.upload_owned("expert_map", bytemuck::cast_slice(m)));
    let route_bias = layer
        .weights
        .e_score_correction_bias
        .as_deref()
        .filter(|b| route::uses_bias(&layer.config.router, Some(b)))
        .map(|b| ctx.upload_owned("e_score_correction_bias", &f32s(b)));
    let dummy = ctx.upload_owned("dummy", &[0u8; 16]);
    let bytes = layer.weight_bytes() as u64;
    if let Some(e) = pollster::block_on(scope.pop()) {
        return Err(BackendError::OutOfMemory(format!(
            "uploading {} of packed weights in {} chunk(s) to {}: {e}",
            mib(bytes),
            chunks.len(),
            ctx.info.adapter.name
        )));
    }
    Ok(GpuLayer {
        config: layer.config.clone(),
        has_correction_bias: layer.weights.e_score_correction_bias.is_some(),
        chunks,
        chunk_experts: per_chunk,
        bias13,
        bias2,
        map,
        route_bias,
        dummy,
        bytes,
        fwd: std::sync::Mutex::new(None),
    })
}

/// The MoeParams block (shaders/moe_common.wgsl) of a dispatch over local experts [e0, e1).
fn params(g: &GpuLayer, m: usize, e0: usize, e1: usize) -> [u32; 16] {
    let l = &g.config;
    [
        m as u32,
        l.router.top_k as u32,
        l.hidden as u32,
        l.inter as u32,
        l.n_experts as u32,
        l.local_experts as u32,
        g.map.is_some() as u32,
        g.bias13.is_some() as u32,
        g.bias2.is_some() as u32,
        l.router.apply_router_weight_on_input as u32,
        e0 as u32,
        e1 as u32,
        g.chunk_experts as u32,
        0,
        0,
        0,
    ]
}

/// Records a forward's dispatches: untimed, all in ONE compute pass (wgpu-core tracks each
/// dispatch's bindings and records a barrier before a dispatch that reads or writes what an
/// earlier one wrote: storage read-write is not an "ordered" use on Vulkan, wgpu-hal
/// `get_ordered_buffer_usages`, so the passes' order and visibility are those of separate
/// passes); timed, one pass per dispatch with its two timestamps (each pass's GPU time).
struct Recorder<'a> {
    enc: &'a mut wgpu::CommandEncoder,
    timer: Option<&'a mut Timer>,
    one: Option<wgpu::ComputePass<'static>>,
}

impl Recorder<'_> {
    fn dispatch(
        &mut self,
        label: &str,
        pipe: &wgpu::ComputePipeline,
        bg: &wgpu::BindGroup,
        (x, y): (u32, u32),
    ) {
        let run = |p: &mut wgpu::ComputePass<'_>| {
            p.set_pipeline(pipe);
            p.set_bind_group(0, bg, &[]);
            p.dispatch_workgroups(x, y, 1);
        };
        match self.timer.as_deref_mut() {
            Some(t) => run(
                &mut self.enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(label),
                    timestamp_writes: t.writes(label),
                }),
            ),
            None => {
                // The pass no longer borrows the encoder (forget_lifetime); it is ended when the
                // recorder is dropped, before the encoder records anything else.
                let enc = &mut *self.enc;
                run(self.one.get_or_insert_with(|| {
                    enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some("moe"),
                        timestamp_writes: None,
                    })
                    .forget_lifetime()
                }))
            }
        }
    }
}

/// What a forward measures: nothing, the GPU (timestamps per pass and the span), or the host
/// time of its phases ([`crate::backend::Timing::Host`]: each phase ends with a wait, and the
/// times come back as `("upload" | "forward" | "readback", ms)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FwdTiming {
    Off,
    Gpu,
    Host,
}

/// Logits of at least this many values are checked (finite) on another thread while the
/// inputs are written to the upload buffer (gpt-oss-120b, 2048 tokens: 1 MB, ~0.15 ms on the
/// H200's host, docs/h200-2026-12-01s6-wgpu); smaller ones first, on this thread.
const VALIDATE_PAR_MIN: usize = 1 << 16;

/// Hidden states of at least this many bytes are written to the upload buffer while another
/// thread records the forward's commands: where the write itself is split over rayon's threads
/// (`WRITE_PAR_MIN`; gpt-oss-120b from 365 tokens: the H200's host writes them at ~23 GB/s,
/// 1.1 ms at 2048 tokens, and wgpu-core's encoding at `finish` took 140-220 us there,
/// docs/h200-2026-12-01s6-wgpu); below it, one after the other (waking a thread would cost
/// about what the overlap saves).
const RECORD_PAR_MIN: usize = WRITE_PAR_MIN;

/// Run a resident layer on a token batch.
pub fn forward(
    ctx: &Context,
    g: &GpuLayer,
    hidden: &[f32],
    logits: &[f32],
    opts: MoeOptions,
    path: MoePath,
    timing: FwdTiming,
) -> Result<(MoeOutput, PassTimes, f64), BackendError> {
    let timed = timing == FwdTiming::Gpu;
    let host = timing == FwdTiming::Host;
    let l = &g.config;
    // Batch shapes (the layer itself was validated at upload).
    let h = l.hidden;
    let inter = l.inter;
    let m = ops::validate_moe(l, hidden, logits)?;
    // Batches whose activations exceed one binding (or the workgroup grid) run as several
    // submits over consecutive tokens; routing is per token, so this changes no result.
    let k = l.router.top_k;
    let max_binding = ctx.max_binding().min(MAX_U32_BYTES);
    // Overflow-checked: the largest per-token row of f32 activations (hidden, k intermediate
    // rows, k expert outputs).
    let per_token = h
        .checked_mul(k)
        .zip(inter.checked_mul(k))
        .and_then(|(a, b)| u64::try_from(a.max(b).max(h)).ok()?.checked_mul(4));
    let wg_max = ctx.limits.max_compute_workgroups_per_dimension as usize;
    let by_grid = (wg_max.saturating_sub(l.local_experts).saturating_mul(TG) / k).max(1);
    let mut max_tokens = per_token.map_or(0, |p| ((max_binding / p) as usize).min(by_grid));
    if ctx.coop_pre().is_some() || ctx.gemm_pre_ref.load(Ordering::Relaxed) {
        // The pre-pass kernels' f16 rows carry COOPP_PAD_ROWS rows of padding: they must fit
        // one binding too (only small bindings feel it; the f32 rows are twice as large).
        let row = (h.max(inter) * 2) as u64;
        let rows = (max_binding / row).saturating_sub(COOPP_PAD_ROWS as u64);
        max_tokens = max_tokens.min((rows / k as u64) as usize);
    }
    if max_tokens == 0 {
        return Err(BackendError::OutOfMemory(format!(
            "one token's activations (H {h}, I {inter}, top-{k}) need {} but one storage binding \
             holds at most {} on {}",
            per_token.map_or("more than 2^64 bytes".into(), mib),
            mib(max_binding),
            ctx.info.adapter.name
        )));
    }
    if m > max_tokens {
        let ne = l.n_experts;
        let mut out = Vec::with_capacity(m * h);
        let mut ids = Vec::with_capacity(m * k);
        let mut ws = Vec::with_capacity(m * k);
        let mut times = Vec::new();
        let mut span = 0.0;
        for t0 in (0..m).step_by(max_tokens) {
            let t1 = (t0 + max_tokens).min(m);
            let (o, t, sp) = forward(
                ctx,
                g,
                &hidden[t0 * h..t1 * h],
                &logits[t0 * ne..t1 * ne],
                opts,
                path,
                timing,
            )?;
            out.extend(o.output);
            ids.extend(o.routing.topk_ids);
            ws.extend(o.routing.topk_weights);
            if host {
                // The phases of the pieces add up.
                for (n, ms) in t {
                    match times.iter_mut().find(|(k, _)| *k == n) {
                        Some(e) => e.1 += ms,
                        None => times.push((n, ms)),
                    }
                }
            } else {
                times.extend(t);
            }
            span += sp;
        }
        return Ok((
            MoeOutput {
                output: out,
                routing: Routing {
                    top_k: k,
                    topk_ids: ids,
                    topk_weights: ws,
                },
                stages: None,
            },
            times,
            span,
        ));
    }
    host_profile::once(|| match ctx.round_trip_probe(200) {
        Ok([lo, med, hi]) => format!(
            "round trip of a minimal submission (clear 4 bytes, copy them to a mappable \
             buffer, submit, wait, map) on {}: median {med:.1} us [{lo:.1}..{hi:.1}] over 200",
            ctx.info.adapter.name
        ),
        Err(e) => format!("round-trip probe failed: {e}"),
    });
    let t_start = std::time::Instant::now();
    host_profile::start();
    // The router's input checks (finite logits; the bias was checked at upload): here when
    // small, else beside the inputs' upload (below).
    let validate = || ops::validate_route(&l.router, logits, l.n_experts, None);
    let validate_early = logits.len() < VALIDATE_PAR_MIN;
    if validate_early {
        validate()?;
    }
    host_profile::mark("validate");
    let na = m * k;
    let el = l.local_experts;
    let gemv = match path {
        MoePath::Gemv => true,
        MoePath::Gemm => false,
        MoePath::Auto => {
            let per = ctx.gemv_pairs_for(l.scheme.activation.is_some()) as usize;
            na <= per.saturating_mul(el.max(1)) || m <= 4
        }
    };
    let tile_m = if gemv { TG } else { TM };
    let max_tiles = crate::moe::budget::max_tiles(na, el, tile_m);
    let big = [
        ("hidden_states", (m * h * 4) as u64),
        ("intermediate [M*k, I]", (na * inter * 4) as u64),
        ("expert outputs [M*k, H]", (na * h * 4) as u64),
    ];
    // Kernel k64p's pre-converted rows: f16 [rows + padding][max(H, I)] (hi, and lo for
    // weight-only schemes).
    let xp_bytes = ((na + COOPP_PAD_ROWS) * h.max(inter) * 2).next_multiple_of(4) as u64;
    for (what, b) in big {
        if b > max_binding {
            return Err(BackendError::OutOfMemory(format!(
                "{what} needs {} but one storage binding holds at most {} on {} (run fewer \
                 tokens per call)",
                mib(b),
                mib(max_binding),
                ctx.info.adapter.name
            )));
        }
    }
    let wg_max = ctx.limits.max_compute_workgroups_per_dimension as usize;
    if max_tiles > wg_max {
        return Err(unsupported(
            format!("moe/{}/{}", l.scheme, l.activation),
            format!("{na} token-expert pairs need {max_tiles} tiles > {wg_max} workgroups"),
        ));
    }

    let bytes = |n: usize| (n * 4) as u64;
    // Pipelines first: the forward cache's key names them.
    let bf16 = (opts.intermediate == Intermediate::Bf16) as u32;
    let ov: [(&'static str, u32); 5] = [
        ("WEIGHT_FMT", l.scheme.weight.id()),
        ("ACT_FMT", l.scheme.activation.map_or(FMT_NONE, |f| f.id())),
        ("ACT_SCALE_MODE", l.act_scale_mode.id()),
        ("ACTIVATION", l.activation.id()),
        ("ROUND_BF16", bf16),
    ];
    let p_route = route::pipeline(ctx)?;
    let p_lists = ctx.pipeline(Shader::MoeLists, "lists", &[("TILE_M", tile_m as u32)])?;
    let gcfg = ctx.gemv_config();
    let (experts, e1, e2) = if gemv {
        let shader = Shader::MoeGemv {
            registers: ctx.fp4_register_decode.load(Ordering::Relaxed),
            subgroup: gcfg.subgroup,
        };
        let (g1, g2) = gcfg.entries();
        (shader, g1, g2)
    } else if ctx.coop_gemm() {
        // Cooperative matrices where the device passed coop_check (Context::new): kernel k64
        // or k32.
        let (g1, g2) = ctx.coop_entries();
        (Shader::MoeGemmCoop, g1, g2)
    } else if ctx.gemm_pre_ref.load(Ordering::Relaxed) {
        // Test hook: the tiled GEMM over the pre-passes' rows.
        (Shader::MoeCoopPrepass, "gemm1_pre_ref", "gemm2_pre_ref")
    } else {
        (Shader::MoeGemm, "gemm1", "gemm2")
    };
    // Decode sizes: gemv1 builds the row lists itself (no `lists` pass).
    let own_lists = gemv && na <= GEMV_LIST_MAX && ctx.gemv_own_lists(na);
    // Decode sizes: gemv2 also combines (no `combine` pass).
    let fuse_combine =
        gemv && m <= FUSED_COMBINE_MAX_TOKENS && ctx.fused_combine.load(Ordering::Relaxed);
    // Kernel k64 of the cooperative GEMM reads activations and FP4 blocks through the vec4
    // views (bindings 14 and 13) and never through binding 6.
    let coop64 = !gemv && e1 == "coop64_gemm1";
    // Kernel k64p: the pre-passes convert each stage's activations (coopp_prep1 / 2) and the
    // GEMMs read them from bindings 17-19 (COOP64P_BINDINGS).
    let prepass = !gemv && ["coop64p_gemm1", "coop64pw_gemm1", "gemm1_pre_ref"].contains(&e1);
    let pre_bindings: &[u32] = match e1 {
        "coop64pw_gemm1" => &COOP64PW_BINDINGS,
        "gemm1_pre_ref" => &GEMM_PRE_REF_BINDINGS,
        _ => &COOP64P_BINDINGS,
    };
    if prepass && xp_bytes > max_binding {
        return Err(BackendError::OutOfMemory(format!(
            "kernel k64p's pre-converted activations need {} but one storage binding holds at \
             most {} on {} (run fewer tokens per call)",
            mib(xp_bytes),
            mib(max_binding),
            ctx.info.adapter.name
        )));
    }
    let mut ov = ov.to_vec();
    if gemv {
        ov.extend(gcfg.overrides());
        ov.push(("GEMV_OWN_LISTS", own_lists as u32));
        ov.push(("GEMV_FUSE_COMBINE", fuse_combine as u32));
        // One token: every tile has one row (the token's k experts are distinct).
        ov.push(("GEMV_ONE_ROW", (gcfg.one_row && m == 1) as u32));
        if ctx.diag_gemv_loads_only {
            ov.push(("GEMV_DIAG_LOADS", 1));
        }
    } else if experts == Shader::MoeGemmCoop {
        ov.extend(ctx.coop_overrides());
    }
    // Weight chunks per dispatch: all of them (up to four) where the adapter holds the
    // bindings and the forward is a decode-sized GEMV (or the knob forces it), else one; the
    // multi-chunk composition only where a dispatch has several.
    let decode = gemv && na <= super::context::MULTI_CHUNK_MAX_PAIRS;
    let per_pass = if decode || ctx.chunks_forced.load(Ordering::Relaxed) {
        (ctx.chunks_per_pass.load(Ordering::Relaxed) as usize)
            .clamp(1, super::source::MAX_CHUNKS_PER_PASS)
            .min(g.chunks.len())
    } else {
        1
    };
    let (p_g1, p_g2) = if per_pass > 1 {
        ov.push(("W_CHUNKS", per_pass as u32));
        (
            ctx.pipeline_multi(experts, e1, &ov)?,
            ctx.pipeline_multi(experts, e2, &ov)?,
        )
    } else {
        (
            ctx.pipeline(experts, e1, &ov)?,
            ctx.pipeline(experts, e2, &ov)?,
        )
    };
    let groups: Vec<&[WeightChunk]> = g.chunks.chunks(per_pass).collect();
    let p_comb = ctx.pipeline(Shader::MoeCombine, "combine", &[("ROUND_BF16", bf16)])?;
    let weight_only = l.scheme.activation.is_none();
    let p_prep = if prepass {
        let ov = [("ACT_FMT", l.scheme.activation.map_or(FMT_NONE, |f| f.id()))];
        Some((
            ctx.pipeline(Shader::MoeCoopPrepass, "coopp_prep1", &ov)?,
            ctx.pipeline(Shader::MoeCoopPrepass, "coopp_prep2", &ov)?,
        ))
    } else {
        None
    };
    let p_qdq = match l.scheme.activation {
        Some(f) => Some(ctx.pipeline(
            Shader::Quant,
            "qdq",
            &[("FMT", f.id()), ("MODE", l.act_scale_mode.id())],
        )?),
        None => None,
    };
    host_profile::mark("pipelines");

    // Buffers and bind groups: the layer's cached set when this forward has the same key as the
    // last one (same batch size, path and pipelines), else a new set from the pool.
    let mut pipes = vec![
        p_route.clone(),
        p_lists.clone(),
        p_g1.clone(),
        p_g2.clone(),
        p_comb.clone(),
    ];
    pipes.extend(p_qdq.clone());
    if let Some((p1, p2)) = &p_prep {
        pipes.extend([p1.clone(), p2.clone()]);
    }
    let key = FwdKey {
        m,
        gemv,
        own_lists,
        fuse_combine,
        per_pass,
        pipes,
    };
    let cached = g.fwd.lock().unwrap_or_else(|p| p.into_inner()).take();
    let c = match cached {
        Some(c) if c.key == key => *c,
        old => {
            if let Some(old) = old {
                (*old).give_back(ctx);
            }
            let out_sizes = vec![
                bytes(na),                   // ids
                bytes(na),                   // weights
                bytes(na),                   // rows
                bytes(na),                   // slot
                bytes(1 + 3 * max_tiles),    // tiles
                bytes(na * inter),           // intermediate
                bytes(na * h),               // y
                bytes(m * h),                // out
                bytes(m * h),                // xq
                bytes(h.div_ceil(TN2_GEMV)), // slice arrivals (fused combine)
            ];
            let mut out_sizes = out_sizes;
            if prepass {
                out_sizes.extend([
                    xp_bytes, // xp_hi
                    // xp_lo; MX activations: never written nor read, but bound (one vec4;
                    // not the layer's dummy, which may sit in a read-only binding of the
                    // same dispatch)
                    if weight_only { xp_bytes } else { 16 },
                    bytes(na + COOPP_PAD_ROWS), // xp_exp
                ]);
            }
            let bufs: Vec<wgpu::Buffer> = out_sizes.iter().map(|&n| ctx.storage(n)).collect();
            let (ids, topw, rows, slot, tiles, a2, y2, out, xq, counts) = (
                &bufs[0], &bufs[1], &bufs[2], &bufs[3], &bufs[4], &bufs[5], &bufs[6], &bufs[7],
                &bufs[8], &bufs[9],
            );
            let rparams = ctx.uniform(bytemuck::cast_slice(&route::params(
                &l.router,
                m,
                l.n_experts,
                g.route_bias.is_some(),
            )));
            let base_params = ctx.uniform(bytemuck::cast_slice(&params(g, m, 0, el)));
            let logits_b = ctx.storage(bytes(m * l.n_experts).max(4));
            let hidden_b = ctx.storage(bytes(m * h).max(4));
            let map = g.map.as_ref().unwrap_or(&g.dummy);
            let bg_lists = (!own_lists).then(|| {
                ctx.bind(
                    &p_lists,
                    &[
                        (0, &base_params),
                        (1, ids),
                        (2, map),
                        (3, rows),
                        (4, slot),
                        (5, tiles),
                    ],
                )
            });
            let nb = m * h / 32;
            let (qp, bg_qdq) = match &p_qdq {
                Some(pq) => {
                    let qp = ctx.uniform(bytemuck::cast_slice(&[nb as u32, 0, 0, 0]));
                    let bg = ctx.bind(pq, &[(0, &qp), (1, &hidden_b), (3, xq)]);
                    (Some(qp), Some(bg))
                }
                None => (None, None),
            };
            // Weight-only schemes read the hidden states directly.
            let x_in = if p_qdq.is_some() { xq } else { &hidden_b };
            let b13 = g.bias13.as_ref().unwrap_or(&g.dummy);
            let b2 = g.bias2.as_ref().unwrap_or(&g.dummy);
            let chunk_params: Vec<wgpu::Buffer> = groups
                .iter()
                .map(|gr| {
                    let (e0, e1) = (gr[0].e0, gr[gr.len() - 1].e1);
                    ctx.uniform(bytemuck::cast_slice(&params(g, m, e0, e1)))
                })
                .collect();
            // GEMM1 then GEMM2, each once per group of weight chunks: the same bindings but for
            // which weights, input, output and bias they read and write.
            let mut bg_stages = Vec::new();
            for si in 0..2 {
                let (pipe, x, o, bias) = if si == 0 {
                    (&p_g1, x_in, a2, b13)
                } else {
                    (&p_g2, a2, y2, b2)
                };
                for (gr, cp) in groups.iter().zip(&chunk_params) {
                    let (w, sc) = gr[0].stage(si);
                    let mut ents = vec![
                        (0, cp),
                        (3, rows),
                        (5, tiles),
                        (6, x),
                        (7, w),
                        (8, sc),
                        (9, o),
                        (10, bias),
                        (11, topw),
                    ];
                    if coop64 {
                        ents.extend([(13, w), (14, x)]);
                        ents.retain(|(i, _)| *i != 6);
                    }
                    if prepass {
                        let pb = PreBufs {
                            params: cp,
                            rows,
                            slot,
                            tiles,
                            x,
                            w,
                            sc,
                            out: o,
                            bias,
                            topw,
                            hi: &bufs[10],
                            lo: &bufs[11],
                            exp: &bufs[12],
                        };
                        ents = pb.entries(pre_bindings);
                    }
                    if gemv {
                        // The FP4 path's vec4 views of the same weights and activations.
                        ents.extend([(13, w), (14, x)]);
                        if si == 0 {
                            // gemv1 may build the lists (GEMV_OWN_LISTS): the routing and the
                            // lists' outputs (bound either way: the pipeline layout holds every
                            // binding the entry point's code names).
                            ents.extend([(1, ids), (2, map), (4, slot)]);
                        } else {
                            // gemv2 may combine (GEMV_FUSE_COMBINE): the rows of each pair,
                            // the MoE output and the slice counters (bound either way).
                            ents.extend([(4, slot), (15, out), (16, counts)]);
                        }
                    }
                    if per_pass > 1 {
                        // moe_weights_multi.wgsl: chunk j of the group beside each weight
                        // binding of chunk 0 (the last chunk again past the group's end).
                        for j in 1..super::source::MAX_CHUNKS_PER_PASS {
                            let (wj, sj) = gr[j.min(gr.len() - 1)].stage(si);
                            let extra: Vec<(u32, &wgpu::Buffer)> = ents
                                .iter()
                                .filter_map(|&(i, _)| match i {
                                    7 => Some((MULTI_WEIGHT_BINDINGS[j - 1][0], wj)),
                                    8 => Some((MULTI_WEIGHT_BINDINGS[j - 1][1], sj)),
                                    13 => Some((MULTI_WEIGHT_BINDINGS[j - 1][2], wj)),
                                    _ => None,
                                })
                                .collect();
                            ents.extend(extra);
                        }
                    }
                    bg_stages.push(ctx.bind(pipe, &ents));
                }
            }
            let bg_comb = ctx.bind(&p_comb, &[(0, &base_params), (4, slot), (9, out), (12, y2)]);
            let bg_prep = p_prep.as_ref().map(|(p1, p2)| {
                // Stage 1 reads the input rows, stage 2 the intermediate.
                let pb = |x| PreBufs {
                    params: &base_params,
                    rows,
                    slot,
                    tiles,
                    x,
                    w: &g.dummy,
                    sc: &g.dummy,
                    out: &g.dummy,
                    bias: &g.dummy,
                    topw: &g.dummy,
                    hi: &bufs[10],
                    lo: &bufs[11],
                    exp: &bufs[12],
                };
                (
                    ctx.bind(p1, &pb(x_in).entries(&COOPP_PREP1_BINDINGS)),
                    ctx.bind(p2, &pb(a2).entries(&COOPP_PREP2_BINDINGS)),
                )
            });
            let bg_route = route::bind(
                ctx,
                &p_route,
                &rparams,
                &logits_b,
                g.route_bias.as_ref().unwrap_or(&g.dummy),
                ids,
                topw,
            );
            let hidden_off = bytes(m * l.n_experts).next_multiple_of(256);
            let upload = ctx.take_upload(hidden_off + bytes(m * h));
            FwdCache {
                key,
                bg_route,
                upload,
                hidden_off,
                rparams,
                base_params,
                logits_b,
                hidden_b,
                bufs,
                out_sizes,
                qp,
                chunk_params,
                bg_lists,
                bg_qdq,
                bg_stages,
                bg_comb,
                bg_prep,
            }
        }
    };
    // The inputs go through the set's upload buffer (mapped while idle), copied into the
    // device buffers at the start of the forward's command buffer (Timing::Host: in a
    // submission of their own, waited for).
    let (logits_bytes, hidden_bytes): (&[u8], &[u8]) =
        (bytemuck::cast_slice(logits), bytemuck::cast_slice(hidden));
    let (nl, nh) = (logits_bytes.len() as u64, hidden_bytes.len() as u64);
    let t_setup = t_start.elapsed();
    let parts = [(0, logits_bytes), (c.hidden_off, hidden_bytes)];
    // The inputs into the upload buffer, the logits checked beside them when large.
    let fill = || {
        if validate_early {
            ctx.fill_upload(&c.upload, &parts)
        } else {
            let (v, f) = rayon::join(validate, || ctx.fill_upload(&c.upload, &parts));
            v.map_err(BackendError::from).and(f)
        }
    };
    let up_copy = |enc: &mut wgpu::CommandEncoder| {
        enc.copy_buffer_to_buffer(&c.upload.buf, 0, &c.logits_b, 0, nl);
        enc.copy_buffer_to_buffer(&c.upload.buf, c.hidden_off, &c.hidden_b, 0, nh);
    };
    for (b, &n) in c.bufs.iter().zip(&c.out_sizes) {
        ctx.maybe_poison(b, n);
    }
    let (ids, topw, out, counts) = (&c.bufs[0], &c.bufs[1], &c.bufs[7], &c.bufs[9]);
    let mut timer = if timed {
        ctx.timer(4 + 2 * groups.len() as u32 + 2 * prepass as u32)
    } else {
        None
    };
    // The forward's commands: the inputs' copies (`with_upload`), the passes, the timestamps'
    // resolve (returns its buffer).
    let record = |with_upload: bool, mut timer: Option<&mut Timer>| {
        let mut enc = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("moe") });
        if with_upload {
            up_copy(&mut enc);
        }
        if fuse_combine {
            // gemv2's slice counters start at zero (its last workgroups also reset them).
            enc.clear_buffer(counts, 0, None);
        }
        {
            let timer = timer.as_deref_mut();
            let mut rec = Recorder {
                enc: &mut enc,
                timer,
                one: None,
            };
            rec.dispatch("route", &p_route, &c.bg_route, ctx.grid(m as u32));
            if let Some(bg) = &c.bg_lists {
                rec.dispatch("moe/lists", &p_lists, bg, (1, 1));
            }
            // Input QDQ, once per token.
            if let (Some(pq), Some(bg)) = (&p_qdq, &c.bg_qdq) {
                rec.dispatch(
                    "moe/input_qdq",
                    pq,
                    bg,
                    ctx.grid((m * h / 32).div_ceil(8) as u32),
                );
            }
            let nc = groups.len();
            let stages = [
                (&p_g1, e1, if gemv { TN1_GEMV } else { TN1 }, inter),
                (&p_g2, e2, if gemv { TN2_GEMV } else { TN2 }, h),
            ];
            for (si, (pipe, label, tn, cols)) in stages.into_iter().enumerate() {
                // Kernel k64p: the stage's activations converted once (one workgroup per token, then
                // per GEMM row).
                if let (Some((pp1, pp2)), Some((bp1, bp2))) = (&p_prep, &c.bg_prep) {
                    let (pp, bp, n, name) = if si == 0 {
                        (pp1, bp1, m, "moe/prep1")
                    } else {
                        (pp2, bp2, na, "moe/prep2")
                    };
                    rec.dispatch(name, pp, bp, ctx.grid(n as u32));
                }
                let name = format!("moe/{label}");
                for bg in &c.bg_stages[si * nc..(si + 1) * nc] {
                    rec.dispatch(
                        &name,
                        pipe,
                        bg,
                        (max_tiles as u32, cols.div_ceil(tn) as u32),
                    );
                }
            }
            if !fuse_combine {
                rec.dispatch(
                    "moe/combine",
                    &p_comb,
                    &c.bg_comb,
                    ctx.grid((m * h).div_ceil(256) as u32),
                );
            }
            drop(rec);
        }
        let resolve = timer.map(|t| {
            let b = ctx.resolve_buffer(t.bytes());
            t.resolve(&mut enc, &b);
            b
        });
        (enc, resolve)
    };
    // What comes back: output, ids, weights (and the timestamps), one copy each.
    let readback =
        |enc: wgpu::CommandEncoder, timer: Option<&Timer>, resolve: &Option<wgpu::Buffer>| {
            let mut reads = vec![(out, bytes(m * h)), (ids, bytes(na)), (topw, bytes(na))];
            if let (Some(t), Some(b)) = (timer, resolve) {
                reads.push((b, t.bytes()));
            }
            ctx.encode_readback(enc, &reads)
        };
    let mut fwd_ms = 0.0;
    let mut t_upload = std::time::Duration::ZERO;
    let (rb, resolve, uploads) = if host {
        // Timing::Host: the upload, the passes and the readback, each a submission of its own,
        // waited for.
        let t_up0 = std::time::Instant::now();
        let filled = fill().and_then(|()| {
            let mut enc = ctx
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("moe upload"),
                });
            up_copy(&mut enc);
            ctx.submit_wait(enc, &[&c.upload])
        });
        if let Err(e) = filled {
            c.give_back(ctx);
            return Err(e);
        }
        t_upload = t_up0.elapsed();
        let t_fwd0 = std::time::Instant::now();
        let (enc, _) = record(false, None);
        host_profile::mark("record");
        if let Err(e) = ctx.submit_wait(enc, &[]) {
            c.give_back(ctx);
            return Err(e);
        }
        fwd_ms = (t_setup + t_fwd0.elapsed()).as_secs_f64() * 1e3;
        let enc = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("moe readback"),
            });
        (readback(enc, None, &None), None, Vec::new())
    } else {
        // The commands are recorded (and wgpu-core encodes them) while the inputs are written
        // to the upload buffer, on other threads when they are large (copies from a mapped
        // buffer may be recorded; it must be unmapped by the submit).
        let mut work = || {
            let (enc, resolve) = record(true, timer.as_mut());
            let rb = readback(enc, timer.as_ref(), &resolve);
            (rb, resolve)
        };
        let (filled, (rb, resolve)) = if hidden_bytes.len() >= RECORD_PAR_MIN {
            rayon::join(fill, work)
        } else {
            (fill(), work())
        };
        if let Err(e) = filled {
            drop(rb);
            ctx.give(resolve);
            c.give_back(ctx);
            return Err(e);
        }
        (rb, resolve, vec![&c.upload])
    };
    // (Profile marks from this thread only: with the recording on another thread, this step
    // is the inputs' write and the recording together.)
    host_profile::mark("buffers_uploads_record");
    let t_rb0 = std::time::Instant::now();
    // The output's destination is allocated (its pages faulted in) while the device works.
    let period = ctx.queue.get_timestamp_period();
    let r = ctx.submit_readback(
        rb,
        &uploads,
        || touched_vec::<f32>(m * h),
        m * h * 4 >= WRITE_PAR_MIN,
        // The output, in the order of its pieces (see Context::submit_readback).
        |output, _, piece| pod_append(output, piece),
        |parts, output| {
            let (times, span) = match &timer {
                Some(t) => (t.durations(parts[3], period), t.span(parts[3], period)),
                None => (Vec::new(), 0.0),
            };
            (
                output,
                pod_vec::<i32>(parts[1]),
                pod_vec::<f32>(parts[2]),
                times,
                span,
            )
        },
    );
    let rb_ms = t_rb0.elapsed().as_secs_f64() * 1e3;
    ctx.give(resolve);
    // Keep the set for the next forward when it is small (decode and middle batches, where the
    // host time per forward matters most); large ones go back to the pool (a model's many layers
    // would otherwise each pin their largest batch's buffers).
    if r.is_ok() && c.bytes() <= FWD_CACHE_MAX_BYTES {
        *g.fwd.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(c));
    } else {
        c.give_back(ctx);
    }
    host_profile::mark("give");
    host_profile::finish(|| {
        format!(
            "moe {} m={m}{}",
            if gemv { "gemv" } else { "gemm" },
            match timing {
                FwdTiming::Off => "",
                FwdTiming::Gpu => " timed",
                FwdTiming::Host => " host phases",
            }
        )
    });
    let (output, topk_ids, topk_weights, mut times, span) = r?;
    if host {
        times = vec![
            ("upload".to_string(), t_upload.as_secs_f64() * 1e3),
            ("forward".to_string(), fwd_ms),
            ("readback".to_string(), rb_ms),
        ];
    }
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
        span,
    ))
}

/// What kernel k64p's pre-pass produced for `rows` GEMM rows of K values: f16 bits of hi and
/// lo (`[rows][K]`; lo all zero for schemes with MX activations) and the row exponents.
#[derive(Clone, Debug, PartialEq)]
pub struct CoopPrepassOut {
    pub hi: Vec<u16>,
    pub lo: Vec<u16>,
    pub exp: Vec<i32>,
}

/// Run one of kernel k64p's activation pre-passes alone (a test and diagnostic hook; plain
/// compute, so it runs on every adapter): `stage` 1 converts the token rows `x` ([m][kk]) into
/// the GEMM rows `row_of_pair[t * top_k + s]` (-1: skipped) of `m * top_k` rows, stage 2 the
/// rows `x` ([m * top_k][kk]) in place. `weight_only` writes lo too (ACT_FMT = FMT_NONE).
/// Rows no pair writes come back as they were: zeros.
#[allow(clippy::too_many_arguments)]
pub fn coop_prepass(
    ctx: &Context,
    stage: u32,
    x: &[f32],
    m: usize,
    kk: usize,
    top_k: usize,
    row_of_pair: &[i32],
    weight_only: bool,
) -> Result<CoopPrepassOut, BackendError> {
    let rows = m * top_k;
    let n_in = if stage == 1 { m } else { rows };
    let bad = |what: String| BackendError::Device(format!("coop_prepass: {what}"));
    if stage != 1 && stage != 2 {
        return Err(bad(format!("stage {stage}: expected 1 or 2")));
    }
    if kk == 0 || !kk.is_multiple_of(32) || x.len() != n_in * kk || m == 0 || top_k == 0 {
        return Err(bad(format!(
            "{} values for {n_in} rows of K = {kk} (K a positive multiple of 32)",
            x.len()
        )));
    }
    if stage == 1
        && (row_of_pair.len() != rows || row_of_pair.iter().any(|&r| r >= rows as i32 || r < -1))
    {
        return Err(bad(format!(
            "row_of_pair must hold {rows} rows in -1..{rows}, got {:?}",
            row_of_pair
        )));
    }
    let act = if weight_only { FMT_NONE } else { 0 };
    let entry = if stage == 1 {
        "coopp_prep1"
    } else {
        "coopp_prep2"
    };
    let pipe = ctx.pipeline(Shader::MoeCoopPrepass, entry, &[("ACT_FMT", act)])?;
    let mut p = [0u32; 16];
    p[0] = m as u32;
    p[1] = top_k as u32;
    p[2] = kk as u32; // hidden (stage 1)
    p[3] = kk as u32; // inter (stage 2)
    let params = ctx.uniform(bytemuck::cast_slice(&p));
    let xb = ctx.upload_owned("coop_prepass_x", bytemuck::cast_slice(x));
    let rop = ctx.upload_owned(
        "coop_prepass_row_of_pair",
        bytemuck::cast_slice(if row_of_pair.is_empty() {
            &[0i32][..]
        } else {
            row_of_pair
        }),
    );
    // Pooled buffers (readable back), zeroed: rows no pair writes read back as zeros.
    let zeros = |n: usize| {
        let b = ctx.storage(n as u64);
        ctx.queue.write_buffer(&b, 0, &vec![0u8; n]);
        b
    };
    let half_bytes = rows * kk * 2;
    let (hi, lo, ex) = (zeros(half_bytes), zeros(half_bytes), zeros(rows * 4));
    // The forward's own binding lists (PreBufs), so that this hook also checks them.
    let pb = PreBufs {
        params: &params,
        rows: &rop,
        slot: &rop,
        tiles: &rop,
        x: &xb,
        w: &rop,
        sc: &rop,
        out: &rop,
        bias: &rop,
        topw: &rop,
        hi: &hi,
        lo: &lo,
        exp: &ex,
    };
    let list: &[u32] = if stage == 1 {
        &COOPP_PREP1_BINDINGS
    } else {
        &COOPP_PREP2_BINDINGS
    };
    let bg = ctx.bind(&pipe, &pb.entries(list));
    let mut enc = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("coop_prepass"),
        });
    {
        let mut ps = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        ps.set_pipeline(&pipe);
        ps.set_bind_group(0, &bg, &[]);
        let (gx, gy) = ctx.grid(n_in as u32);
        ps.dispatch_workgroups(gx, gy, 1);
    }
    let r = ctx.submit_and_read(
        enc,
        &[
            (&hi, half_bytes as u64),
            (&lo, half_bytes as u64),
            (&ex, (rows * 4) as u64),
        ],
    )?;
    ctx.give([params, hi, lo, ex]);
    Ok(CoopPrepassOut {
        hi: bytemuck::pod_collect_to_vec(&r[0]),
        lo: bytemuck::pod_collect_to_vec(&r[1]),
        exp: bytemuck::pod_collect_to_vec(&r[2]),
    })
}
