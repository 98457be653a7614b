//! A forward's buffers and bind groups ([`FwdCache`]): parameter blocks, the inputs' upload
//! buffer and device copies, scratch and outputs, and one bind group per dispatch of the
//! forward's [`Plan`]. A layer keeps the set of its last forward (`GpuLayer::fwd`, layer.rs), so
//! that the next forward of the same [`FwdKey`] (batch size, path, pipelines) only writes its
//! inputs and records the passes (moe.rs).

use super::buffers::Upload;
use super::context::Context;
use super::layer::{params, GpuLayer};
use super::moe::TN2_GEMV;
use super::plan::Plan;
use super::prepass::{PreBufs, COOPP_PAD_ROWS, COOPP_PREP1_BINDINGS, COOPP_PREP2_BINDINGS};
use super::route;
use super::source::MULTI_WEIGHT_BINDINGS;

/// Bytes of `n` 4-byte values (f32, i32, u32).
pub(super) fn word_bytes(n: usize) -> u64 {
    (n * 4) as u64
}

/// A forward's cache key: a forward with the same batch size, path and pipelines (layouts,
/// decode, GEMV layout) on the same layer can reuse the last one's buffers and bind groups.
#[derive(PartialEq)]
pub(super) struct FwdKey {
    m: usize,
    gemv: bool,
    own_lists: bool,
    fuse_combine: bool,
    /// Weight chunks per expert dispatch.
    per_pass: usize,
    pipes: Vec<wgpu::ComputePipeline>,
}

impl FwdKey {
    /// The key of a forward of `plan`.
    fn of(plan: &Plan) -> FwdKey {
        let p = &plan.p;
        let mut pipes = vec![
            p.route.clone(),
            p.lists.clone(),
            p.g1.clone(),
            p.g2.clone(),
            p.comb.clone(),
        ];
        pipes.extend(p.qdq.clone());
        if let Some((p1, p2)) = &p.prep {
            pipes.extend([p1.clone(), p2.clone()]);
        }
        FwdKey {
            m: plan.m,
            gemv: plan.gemv,
            own_lists: plan.own_lists,
            fuse_combine: plan.fuse_combine,
            per_pass: plan.per_pass,
            pipes,
        }
    }
}

/// A forward's buffers (parameter blocks, inputs, scratch, outputs) and bind groups, kept by the
/// layer after a forward so that the next one of the same [`FwdKey`] only writes its inputs and
/// records the passes: no pool look-ups, no parameter writes, no bind-group creation. Kept up to
/// [`FWD_CACHE_MAX_BYTES`]; a different key gives the buffers back to the context's pool.
pub(super) struct FwdCache {
    key: FwdKey,
    rparams: wgpu::Buffer,
    base_params: wgpu::Buffer,
    logits_b: wgpu::Buffer,
    hidden_b: wgpu::Buffer,
    /// ids, weights, rows, slot, tiles, intermediate, y, out, xq, the fused combine's slice
    /// counters (sizes in `out_sizes`).
    pub(super) bufs: Vec<wgpu::Buffer>,
    pub(super) out_sizes: Vec<u64>,
    qp: Option<wgpu::Buffer>,
    /// One parameter block per dispatch group of chunks.
    chunk_params: Vec<wgpu::Buffer>,
    pub(super) bg_lists: Option<wgpu::BindGroup>,
    pub(super) bg_qdq: Option<wgpu::BindGroup>,
    /// gemv1/gemm1 per dispatch group of chunks, then gemv2/gemm2 per group.
    pub(super) bg_stages: Vec<wgpu::BindGroup>,
    pub(super) bg_comb: wgpu::BindGroup,
    /// Kernel k64p's pre-passes (coopp_prep1, coopp_prep2).
    pub(super) bg_prep: Option<(wgpu::BindGroup, wgpu::BindGroup)>,
    pub(super) bg_route: wgpu::BindGroup,
    /// The inputs' upload buffer: logits at 0, hidden states at `hidden_off`.
    pub(super) upload: Upload,
    pub(super) hidden_off: u64,
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
    pub(super) fn give_back(self, ctx: &Context) {
        let mut v = vec![self.rparams, self.base_params, self.logits_b, self.hidden_b];
        v.extend(self.bufs);
        v.extend(self.qp);
        v.extend(self.chunk_params);
        ctx.give(v);
        ctx.give_upload(self.upload);
    }

    /// The routing's outputs: expert ids and router weights per token-expert pair.
    pub(super) fn ids(&self) -> &wgpu::Buffer {
        &self.bufs[0]
    }
    pub(super) fn topw(&self) -> &wgpu::Buffer {
        &self.bufs[1]
    }
    /// The MoE output [m][H].
    pub(super) fn out(&self) -> &wgpu::Buffer {
        &self.bufs[7]
    }
    /// The fused combine's slice counters.
    pub(super) fn counts(&self) -> &wgpu::Buffer {
        &self.bufs[9]
    }

    /// Record the copies of the inputs (`nl` bytes of logits, `nh` of hidden states) from the
    /// upload buffer into the device buffers.
    pub(super) fn copy_inputs(&self, enc: &mut wgpu::CommandEncoder, nl: u64, nh: u64) {
        enc.copy_buffer_to_buffer(&self.upload.buf, 0, &self.logits_b, 0, nl);
        enc.copy_buffer_to_buffer(&self.upload.buf, self.hidden_off, &self.hidden_b, 0, nh);
    }

    /// The layer's cached set when a forward of `plan` has the same key as the last one (same
    /// batch size, path and pipelines), else a new set from the pool (the old one goes back).
    pub(super) fn take(ctx: &Context, g: &GpuLayer, plan: &Plan) -> FwdCache {
        let key = FwdKey::of(plan);
        let cached = g.fwd.lock().unwrap_or_else(|p| p.into_inner()).take();
        match cached {
            Some(c) if c.key == key => *c,
            old => {
                if let Some(old) = old {
                    (*old).give_back(ctx);
                }
                FwdCache::new(ctx, g, plan, key)
            }
        }
    }

    /// Keep the set for the layer's next forward when `ok` and it is small (decode and middle
    /// batches, where the host time per forward matters most); large ones go back to the pool
    /// (a model's many layers would otherwise each pin their largest batch's buffers).
    pub(super) fn keep_or_give_back(self, ctx: &Context, g: &GpuLayer, ok: bool) {
        if ok && self.bytes() <= FWD_CACHE_MAX_BYTES {
            *g.fwd.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(self));
        } else {
            self.give_back(ctx);
        }
    }

    /// A new set for a forward of `plan` on `g`: buffers from the pool, parameter blocks
    /// written, every dispatch's bind group.
    fn new(ctx: &Context, g: &GpuLayer, plan: &Plan, key: FwdKey) -> FwdCache {
        let l = &g.config;
        let (m, na, h, inter) = (plan.m, plan.na, l.hidden, l.inter);
        let el = l.local_experts;
        let bytes = word_bytes;
        let weight_only = l.scheme.activation.is_none();
        let mut out_sizes = vec![
            bytes(na),                     // ids
            bytes(na),                     // weights
            bytes(na),                     // rows
            bytes(na),                     // slot
            bytes(1 + 3 * plan.max_tiles), // tiles
            bytes(na * inter),             // intermediate
            bytes(na * h),                 // y
            bytes(m * h),                  // out
            bytes(m * h),                  // xq
            bytes(h.div_ceil(TN2_GEMV)),   // slice arrivals (fused combine)
        ];
        if plan.prepass {
            out_sizes.extend([
                plan.xp_bytes, // xp_hi
                // xp_lo; MX activations: never written nor read, but bound (one vec4;
                // not the layer's dummy, which may sit in a read-only binding of the
                // same dispatch)
                if weight_only { plan.xp_bytes } else { 16 },
                bytes(na + COOPP_PAD_ROWS), // xp_exp
            ]);
        }
        let bufs: Vec<wgpu::Buffer> = out_sizes.iter().map(|&n| ctx.storage(n)).collect();
        let (ids, topw, rows, slot, tiles, a2, y2, out, xq) = (
            &bufs[0], &bufs[1], &bufs[2], &bufs[3], &bufs[4], &bufs[5], &bufs[6], &bufs[7],
            &bufs[8],
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
        let bg_lists = (!plan.own_lists).then(|| {
            ctx.bind(
                &plan.p.lists,
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
        let (qp, bg_qdq) = match &plan.p.qdq {
            Some(pq) => {
                let qp = ctx.uniform(bytemuck::cast_slice(&[nb as u32, 0, 0, 0]));
                let bg = ctx.bind(pq, &[(0, &qp), (1, &hidden_b), (3, xq)]);
                (Some(qp), Some(bg))
            }
            None => (None, None),
        };
        // Weight-only schemes read the hidden states directly.
        let x_in = if plan.p.qdq.is_some() { xq } else { &hidden_b };
        let chunk_params: Vec<wgpu::Buffer> = plan
            .groups
            .iter()
            .map(|gr| {
                let (e0, e1) = (gr[0].e0, gr[gr.len() - 1].e1);
                ctx.uniform(bytemuck::cast_slice(&params(g, m, e0, e1)))
            })
            .collect();
        let bg_stages = stage_bind_groups(ctx, g, plan, &bufs, &chunk_params, x_in);
        let bg_comb = ctx.bind(
            &plan.p.comb,
            &[(0, &base_params), (4, slot), (9, out), (12, y2)],
        );
        let bg_prep = plan.p.prep.as_ref().map(|(p1, p2)| {
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
            &plan.p.route,
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
}

/// The expert passes' bind groups: GEMM1 then GEMM2 (or the GEMVs), each once per group of
/// weight chunks (`chunk_params`, one parameter block per group): the same bindings but for
/// which weights, input, output and bias they read and write. `bufs`: the forward's buffers
/// (see [`FwdCache::bufs`]); `x_in`: the first stage's input rows.
fn stage_bind_groups(
    ctx: &Context,
    g: &GpuLayer,
    plan: &Plan,
    bufs: &[wgpu::Buffer],
    chunk_params: &[wgpu::Buffer],
    x_in: &wgpu::Buffer,
) -> Vec<wgpu::BindGroup> {
    let (ids, topw, rows, slot, tiles, a2, y2, out, counts) = (
        &bufs[0], &bufs[1], &bufs[2], &bufs[3], &bufs[4], &bufs[5], &bufs[6], &bufs[7], &bufs[9],
    );
    let map = g.map.as_ref().unwrap_or(&g.dummy);
    let b13 = g.bias13.as_ref().unwrap_or(&g.dummy);
    let b2 = g.bias2.as_ref().unwrap_or(&g.dummy);
    let mut bg_stages = Vec::new();
    for si in 0..2 {
        let (pipe, x, o, bias) = if si == 0 {
            (&plan.p.g1, x_in, a2, b13)
        } else {
            (&plan.p.g2, a2, y2, b2)
        };
        for (gr, cp) in plan.groups.iter().zip(chunk_params) {
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
            if plan.coop64 {
                ents.extend([(13, w), (14, x)]);
                ents.retain(|(i, _)| *i != 6);
            }
            if plan.prepass {
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
                ents = pb.entries(plan.pre_bindings);
            }
            if plan.gemv {
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
            if plan.per_pass > 1 {
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
    bg_stages
}
