//! A MoE layer's weights resident on the device ([`GpuLayer`]): the upload ([`upload`]), split
//! into chunks of whole experts that each fit one storage binding (`WeightChunk`), the size
//! checks made before anything is allocated ([`check_layer_sizes`]), and the `MoeParams` block
//! of a dispatch over a range of local experts (`params`, shaders/moe_common.wgsl).
//!
//! The forward (moe.rs) reads the layer's buffers; the layer also keeps its last forward's
//! buffers and bind groups (`FwdCache`, fwd_cache.rs).

use super::context::Context;
use super::fwd_cache::FwdCache;
use super::route;
use crate::backend::BackendError;
use crate::format::MxTensor;
use crate::moe::{MoeConfig, MoeLayer};
use std::sync::atomic::Ordering;

/// One buffer set of whole experts [e0, e1): their packed w13 and w2 codes and scales.
pub(super) struct WeightChunk {
    pub(super) e0: usize,
    pub(super) e1: usize,
    w13: wgpu::Buffer,
    s13: wgpu::Buffer,
    w2: wgpu::Buffer,
    s2: wgpu::Buffer,
}

impl WeightChunk {
    /// The codes and scales expert stage `si` (0: w13, 1: w2) reads.
    pub(super) fn stage(&self, si: usize) -> (&wgpu::Buffer, &wgpu::Buffer) {
        if si == 0 {
            (&self.w13, &self.s13)
        } else {
            (&self.w2, &self.s2)
        }
    }
}

/// A layer's weights resident on the device (upload once, run many times).
pub struct GpuLayer {
    pub(super) config: MoeConfig,
    /// Whether the layer has an `e_score_correction_bias` (what `supports` is asked about).
    has_correction_bias: bool,
    pub(super) chunks: Vec<WeightChunk>,
    /// Local experts per chunk (the last chunk may hold fewer).
    chunk_experts: usize,
    pub(super) bias13: Option<wgpu::Buffer>,
    pub(super) bias2: Option<wgpu::Buffer>,
    pub(super) map: Option<wgpu::Buffer>,
    /// The router's e_score_correction_bias (when the selection uses it: sigmoid scoring).
    pub(super) route_bias: Option<wgpu::Buffer>,
    pub(super) dummy: wgpu::Buffer,
    /// Bytes of packed weights + scales on the device.
    pub bytes: u64,
    /// The last forward's buffers and bind groups (see [`FwdCache`]; boxed: it is large and
    /// `Prepared` holds the layer by value).
    pub(super) fwd: std::sync::Mutex<Option<Box<FwdCache>>>,
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

/// Sizes for messages: mebibytes with one decimal.
pub(super) fn mib(b: u64) -> String {
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
pub(super) fn params(g: &GpuLayer, m: usize, e0: usize, e1: usize) -> [u32; 16] {
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
