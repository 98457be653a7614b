//! Routing on the GPU (shaders/route.wgsl): exactly the CPU's ids. Selection compares the logits,
//! or with an `e_score_correction_bias` (DeepSeek-V3/R1) the keys `score + bias` computed to the
//! CPU's bits (`shaders/exact_math.wgsl`, the twin of `src/moe/exact_math.rs`: an integer sigmoid,
//! or for softmax routers an integer exp and an exact division). Those weights are bit-exact too;
//! softmax weights without a bias are within float tolerance (the GPU's `exp`).

use super::context::Context;
use super::source::Shader;
use super::timer::Timer;
use crate::backend::{BackendError, Op, RouteOp, Support};
use crate::moe::{RouterConfig, Routing, Scoring};

/// route.wgsl's limits (workgroup arrays; a group holds at least one expert, so groups are
/// bounded by the experts).
pub const MAX_EXPERTS: usize = 1024;
pub const MAX_TOP_K: usize = 32;
pub const MAX_GROUPS: usize = MAX_EXPERTS;

/// Whether route.wgsl can run this routing op (standalone or inside a MoE forward): every
/// router, with or without a correction bias, within its array limits.
pub fn supports(r: &RouteOp) -> Support {
    Support::when(
        r.n_experts <= MAX_EXPERTS
            && r.top_k >= 1
            && r.top_k <= MAX_TOP_K
            && r.n_group.is_none_or(|g| g <= MAX_GROUPS),
        || {
            format!(
                "{} experts, top_k {}, n_group {:?} (route.wgsl holds at most {MAX_EXPERTS} \
                 experts, top_k {MAX_TOP_K}, {MAX_GROUPS} groups)",
                r.n_experts, r.top_k, r.n_group
            )
        },
    )
}

/// Whether the selection uses the correction bias: top-k-then-softmax ignores it (as the CPU
/// does).
pub fn uses_bias(cfg: &RouterConfig, bias: Option<&[f32]>) -> bool {
    bias.is_some() && cfg.scoring != Scoring::TopkSoftmax
}

/// The same input checks (and messages) as the CPU `moe::route`, plus our limits.
pub fn check(
    cfg: &RouterConfig,
    logits: &[f32],
    n_experts: usize,
    bias: Option<&[f32]>,
) -> Result<usize, BackendError> {
    let m = crate::backend::ops::validate_route(cfg, logits, n_experts, bias)?;
    match supports(&RouteOp::of(cfg, n_experts, bias.is_some())) {
        Support::Supported => Ok(m),
        Support::Unsupported { reason } => Err(BackendError::Unsupported {
            backend: "wgpu".into(),
            op: Op::route_of(cfg, n_experts, bias.is_some()).id(),
            reason,
        }),
    }
}

/// The uniform block of route.wgsl (`has_bias`: see [`uses_bias`]).
pub fn params(cfg: &RouterConfig, m: usize, n_experts: usize, has_bias: bool) -> [u32; 12] {
    // The CPU's top-k-then-softmax ignores groups (src/moe/route.rs), so do we.
    let (ng, tg) = match (cfg.scoring, cfg.n_group, cfg.topk_group) {
        (Scoring::TopkSoftmax, _, _) => (0, 0),
        (_, Some(g), Some(t)) => (g as u32, t as u32),
        _ => (0, 0),
    };
    [
        m as u32,
        n_experts as u32,
        cfg.top_k as u32,
        cfg.scoring.id(),
        cfg.renormalize as u32,
        ng,
        tg,
        cfg.routed_scaling_factor.to_bits(),
        has_bias as u32,
        0,
        0,
        0,
    ]
}

/// The routing pipeline (one workgroup per token).
pub fn pipeline(ctx: &Context) -> Result<wgpu::ComputePipeline, BackendError> {
    ctx.pipeline(Shader::Route, "route", &[])
}

/// The routing dispatch's bind group (the MoE forward keeps it with its buffers).
pub fn bind(
    ctx: &Context,
    pipe: &wgpu::ComputePipeline,
    params: &wgpu::Buffer,
    logits: &wgpu::Buffer,
    bias: &wgpu::Buffer,
    ids: &wgpu::Buffer,
    weights: &wgpu::Buffer,
) -> wgpu::BindGroup {
    ctx.bind(
        pipe,
        &[(0, params), (1, logits), (2, ids), (3, weights), (4, bias)],
    )
}

/// Record the routing dispatch into `enc`. `bias`: the correction bias (any buffer when the
/// params say there is none).
#[allow(clippy::too_many_arguments, reason = "the buffers of one dispatch")]
pub fn record(
    ctx: &Context,
    enc: &mut wgpu::CommandEncoder,
    params: &wgpu::Buffer,
    logits: &wgpu::Buffer,
    bias: &wgpu::Buffer,
    ids: &wgpu::Buffer,
    weights: &wgpu::Buffer,
    m: usize,
    timer: Option<&mut Timer>,
) -> Result<(), BackendError> {
    let pipe = pipeline(ctx)?;
    let bg = bind(ctx, &pipe, params, logits, bias, ids, weights);
    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some("route"),
        timestamp_writes: timer.and_then(|t| t.writes("route")),
    });
    pass.set_pipeline(&pipe);
    pass.set_bind_group(0, &bg, &[]);
    let (x, y) = ctx.grid(m as u32); // one workgroup per token
    pass.dispatch_workgroups(x, y, 1);
    Ok(())
}

pub fn route(
    ctx: &Context,
    cfg: &RouterConfig,
    logits: &[f32],
    n_experts: usize,
    bias: Option<&[f32]>,
) -> Result<Routing, BackendError> {
    let m = check(cfg, logits, n_experts, bias)?;
    let k = cfg.top_k;
    let has_bias = uses_bias(cfg, bias);
    let p = ctx.uniform(bytemuck::cast_slice(&params(cfg, m, n_experts, has_bias)));
    let lb = ctx.upload(bytemuck::cast_slice(logits));
    let bb = match bias {
        Some(b) if has_bias => ctx.upload(bytemuck::cast_slice(b)),
        _ => ctx.storage(4),
    };
    let n = (m * k * 4) as u64;
    let ids = ctx.storage(n);
    let w = ctx.storage(n);
    ctx.maybe_poison(&ids, n);
    ctx.maybe_poison(&w, n);
    let mut enc = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("route"),
        });
    record(ctx, &mut enc, &p, &lb, &bb, &ids, &w, m, None)?;
    let r = ctx.submit_and_read(enc, &[(&ids, n), (&w, n)]);
    ctx.give([p, lb, bb, ids, w]);
    let r = r?;
    Ok(Routing {
        top_k: k,
        topk_ids: bytemuck::pod_collect_to_vec(&r[0]),
        topk_weights: bytemuck::pod_collect_to_vec(&r[1]),
    })
}
