//! What one MoE forward runs ([`Plan`]): the largest batch one submit takes ([`max_tokens`]),
//! the expert path (GEMV or GEMM, and which GEMM kernel), the passes it records or skips (the
//! `lists` pass, the `combine` pass, kernel k64p's pre-passes), the weight chunks per expert
//! dispatch, the size checks against the adapter's limits, and the pipelines. The forward
//! cache's key (fwd_cache.rs) names the plan's batch size, flags and pipelines; moe.rs records
//! the plan's passes.

use super::context::{Context, FUSED_COMBINE_MAX_TOKENS};
use super::gemv_config::GemvConfig;
use super::layer::{mib, GpuLayer, WeightChunk};
use super::moe::{MoePath, GEMV_LIST_MAX, TG, TM};
use super::prepass::{COOP64PW_BINDINGS, COOP64P_BINDINGS, COOPP_PAD_ROWS, GEMM_PRE_REF_BINDINGS};
use super::route;
use super::source::{Shader, FMT_NONE};
use crate::backend::BackendError;
use crate::moe::{Intermediate, MoeConfig, MoeOptions};
use std::sync::atomic::Ordering;

/// A forward's pipelines, one per pass kind.
pub(super) struct Pipes {
    pub(super) route: wgpu::ComputePipeline,
    pub(super) lists: wgpu::ComputePipeline,
    /// gemv1 / gemm1 and gemv2 / gemm2 (the multi-chunk composition where a dispatch reads
    /// several weight chunks).
    pub(super) g1: wgpu::ComputePipeline,
    pub(super) g2: wgpu::ComputePipeline,
    pub(super) comb: wgpu::ComputePipeline,
    /// Kernel k64p's pre-passes (coopp_prep1, coopp_prep2).
    pub(super) prep: Option<(wgpu::ComputePipeline, wgpu::ComputePipeline)>,
    /// The input QDQ (schemes with MX activations).
    pub(super) qdq: Option<wgpu::ComputePipeline>,
}

/// What one forward of `m` tokens runs: its path, the passes it records or skips, its sizes and
/// its pipelines.
pub(super) struct Plan<'g> {
    pub(super) m: usize,
    /// Token-expert pairs (m * top_k).
    pub(super) na: usize,
    /// The GEMV path (tiles of `TG` rows) rather than the GEMM (tiles of `TM` rows).
    pub(super) gemv: bool,
    /// The expert passes' tiles (the first dimension of their grids).
    pub(super) max_tiles: usize,
    /// gemv1 builds the row lists (no `lists` pass).
    pub(super) own_lists: bool,
    /// gemv2 combines (no `combine` pass).
    pub(super) fuse_combine: bool,
    /// Kernel k64 of the cooperative GEMM: vec4 views (bindings 13, 14), no binding 6.
    pub(super) coop64: bool,
    /// Kernel k64p / k64pw / the pre-pass reference GEMM: the pre-passes run, the GEMMs bind
    /// `pre_bindings`.
    pub(super) prepass: bool,
    pub(super) pre_bindings: &'static [u32],
    /// Bytes of one plane of kernel k64p's pre-converted rows.
    pub(super) xp_bytes: u64,
    /// Weight chunks per expert dispatch, and the chunks of each dispatch.
    pub(super) per_pass: usize,
    pub(super) groups: Vec<&'g [WeightChunk]>,
    /// The expert passes' entry points (their timing labels: `moe/{e1}`, `moe/{e2}`).
    pub(super) e1: &'static str,
    pub(super) e2: &'static str,
    pub(super) p: Pipes,
}

fn unsupported(op: String, reason: String) -> BackendError {
    BackendError::Unsupported {
        backend: "wgpu".into(),
        op,
        reason,
    }
}

/// The most tokens one submit of a layer of config `l` takes: its activations must fit one
/// storage binding (`max_binding`, at most `MAX_U32_BYTES`) and its tiles the workgroup grid
/// (larger batches run as several submits).
/// Err where not even one token fits.
pub(super) fn max_tokens(
    ctx: &Context,
    l: &MoeConfig,
    max_binding: u64,
) -> Result<usize, BackendError> {
    let h = l.hidden;
    let inter = l.inter;
    let k = l.router.top_k;
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
    Ok(max_tokens)
}

/// The expert kernels' shader and entry points (gemm1 / gemv1, gemm2 / gemv2).
fn expert_kernel(
    ctx: &Context,
    gemv: bool,
    gcfg: &GemvConfig,
) -> (Shader, &'static str, &'static str) {
    if gemv {
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
    }
}

/// Refuse a forward whose activations exceed one storage binding or whose tiles exceed the
/// workgroup grid.
fn check_sizes(
    ctx: &Context,
    l: &MoeConfig,
    m: usize,
    na: usize,
    max_tiles: usize,
    max_binding: u64,
) -> Result<(), BackendError> {
    let (h, inter) = (l.hidden, l.inter);
    let big = [
        ("hidden_states", (m * h * 4) as u64),
        ("intermediate [M*k, I]", (na * inter * 4) as u64),
        ("expert outputs [M*k, H]", (na * h * 4) as u64),
    ];
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
    Ok(())
}

/// Plan a forward of `m` tokens (at most [`max_tokens`]) on layer `g`: choose the path, check
/// the sizes against the adapter's limits and `max_binding` (the largest binding, at most
/// `MAX_U32_BYTES`), create (or find) the pipelines.
pub(super) fn plan<'g>(
    ctx: &Context,
    g: &'g GpuLayer,
    m: usize,
    opts: MoeOptions,
    path: MoePath,
    max_binding: u64,
) -> Result<Plan<'g>, BackendError> {
    let l = &g.config;
    let h = l.hidden;
    let inter = l.inter;
    let k = l.router.top_k;
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
    // Kernel k64p's pre-converted rows: f16 [rows + padding][max(H, I)] (hi, and lo for
    // weight-only schemes).
    let xp_bytes = ((na + COOPP_PAD_ROWS) * h.max(inter) * 2).next_multiple_of(4) as u64;
    check_sizes(ctx, l, m, na, max_tiles, max_binding)?;

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
    let (experts, e1, e2) = expert_kernel(ctx, gemv, &gcfg);
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
    Ok(Plan {
        m,
        na,
        gemv,
        max_tiles,
        own_lists,
        fuse_combine,
        coop64,
        prepass,
        pre_bindings,
        xp_bytes,
        per_pass,
        groups,
        e1,
        e2,
        p: Pipes {
            route: p_route,
            lists: p_lists,
            g1: p_g1,
            g2: p_g2,
            comb: p_comb,
            prep: p_prep,
            qdq: p_qdq,
        },
    })
}
