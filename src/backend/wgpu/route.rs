//! Routing on the GPU (shaders/route.wgsl): exact CPU ids (selection compares logits only),
//! weights within float tolerance.

use super::context::{Context, Timer};
use crate::backend::{BackendError, Op, RouteOp, Support};
use crate::moe::{RouterConfig, Routing, Scoring};

/// route.wgsl's limits (private arrays and bit sets).
pub const MAX_EXPERTS: usize = 1024;
pub const MAX_TOP_K: usize = 32;
pub const MAX_GROUPS: usize = 32;

/// Whether route.wgsl can run this routing op within its limits.
fn within_limits(r: &RouteOp) -> Support {
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

/// Whether the standalone route op runs here.
pub fn supports(r: &RouteOp) -> Support {
    Support::when(!r.correction_bias, || {
        "selection on sigmoid scores + e_score_correction_bias cannot match the CPU ids \
         exactly (the GPU's exp differs in the last bit)"
            .into()
    })
    .and(|| within_limits(r))
}

/// Whether a MoE forward's routing runs here. A layer with a correction bias takes its ids
/// from the CPU router before the single submit (see `moe::forward`).
pub fn supports_in_forward(r: &RouteOp) -> Support {
    within_limits(r)
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

/// The uniform block of route.wgsl.
pub fn params(cfg: &RouterConfig, m: usize, n_experts: usize) -> [u32; 8] {
    // The CPU's top-k-then-softmax ignores groups (src/moe/routing.rs), so do we.
    let (ng, tg) = match (cfg.scoring, cfg.n_group, cfg.topk_group) {
        (Scoring::TopkSoftmax, _, _) => (0, 0),
        (_, Some(g), Some(t)) => (g as u32, t as u32),
        _ => (0, 0),
    };
    [
        m as u32,
        n_experts as u32,
        cfg.top_k as u32,
        match cfg.scoring {
            Scoring::Softmax => 0,
            Scoring::TopkSoftmax => 1,
            Scoring::Sigmoid => 2,
        },
        cfg.renormalize as u32,
        ng,
        tg,
        cfg.routed_scaling_factor.to_bits(),
    ]
}

/// Record the routing dispatch into `enc`.
#[allow(clippy::too_many_arguments, reason = "the buffers of one dispatch")]
pub fn record(
    ctx: &Context,
    enc: &mut wgpu::CommandEncoder,
    params: &wgpu::Buffer,
    logits: &wgpu::Buffer,
    ids: &wgpu::Buffer,
    weights: &wgpu::Buffer,
    m: usize,
    timer: Option<&mut Timer>,
) -> Result<(), BackendError> {
    let pipe = ctx.pipeline("route", "route", &[])?;
    let bg = ctx.bind(&pipe, &[(0, params), (1, logits), (2, ids), (3, weights)]);
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
    let p = ctx.uniform(bytemuck::cast_slice(&params(cfg, m, n_experts)));
    let lb = ctx.upload(bytemuck::cast_slice(logits));
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
    record(ctx, &mut enc, &p, &lb, &ids, &w, m, None)?;
    let r = ctx.submit_and_read(enc, &[(&ids, n), (&w, n)]);
    ctx.give([p, lb, ids, w]);
    let r = r?;
    Ok(Routing {
        top_k: k,
        topk_ids: bytemuck::pod_collect_to_vec(&r[0]),
        topk_weights: bytemuck::pod_collect_to_vec(&r[1]),
    })
}
