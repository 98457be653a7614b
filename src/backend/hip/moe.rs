//! The MoE forward of a prepared layer (`HipBackend::moe`): every pass in order on the device's
//! stream: the inputs' upload, routing and the expert lists (fused or separate: `choice/route.rs`
//! `route_plan`), the input QDQ or bf16 conversion, the expert stage (`moe_experts.rs`: the
//! grouped GEMV for few token-expert pairs per expert, the gfx950 scaled-MFMA MX GEMM, or the
//! bf16 GEMM v1 / v2 / mma), the combine, and one copy back of the output, ids and weights.
//! `choice/` decides every kernel and shape ([`ExpertPlan`] gathers the expert stage's
//! decisions); [`Launcher`] launches and optionally times each kernel; `real.rs` holds the
//! launch helpers.

use super::choice::*;
use super::driver::Event;
use super::host_profile::HostProfile;
use super::layer::HipLayer;
use super::moe_experts::{ExpertArgs, RoutedGemv1};
use super::real::{args, f32_bytes, HipBackend};
use crate::backend::wgpu::route as wroute;
use crate::backend::{ops, BackendError, PassTimes, Timing};
use crate::format::{MxFormat, BLOCK};
use crate::moe::{Intermediate, MoeOptions, MoeOutput, Routing};
use std::ffi::c_void;

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct MoeParams {
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
    /// The MXFP4 codes in the nv4 rows order (hip/nv4.h Nv4Rows; `HipLayer::nv4_rows`).
    wrows: u32,
    /// gemm1 writes gemm2's bf16 activations in the c16 order (hip/gemv_epilogue.h c16_pos):
    /// gemm2 is the `wg256c` wgmma GEMM (`moe_experts.rs` bf16_gemm_stage).
    xc2: u32,
}

impl MoeParams {
    /// The same parameters with gemm2's activations in the c16 order or not.
    pub(super) fn with_xc2(self, on: bool) -> Self {
        MoeParams {
            xc2: on as u32,
            ..self
        }
    }
}

/// Whether every value is a bf16 value (its low 16 bits zero: bf16 -> f32 is exact, so the
/// bf16 hi of the GEMV's split is the value and its lo +0).
fn all_bf16(x: &[f32]) -> bool {
    x.iter().all(|v| v.to_bits() & 0xFFFF == 0)
}

/// The kernel launches of one forward, each between two events when the forward is timed per
/// pass (`Timing::Passes`).
pub(super) struct Launcher<'a> {
    hip: &'a HipBackend,
    timed: bool,
    marks: Vec<(String, Event, Event)>,
}

impl Launcher<'_> {
    /// Launch kernel `k` as pass `label`. `block`: threads per block, and for kernels with
    /// dynamic shared memory (the v2 GEMM) its bytes in the high half (`with_shared`).
    pub(super) fn run(
        &mut self,
        label: &str,
        k: &str,
        grid: (u32, u32),
        block: u64,
        a: &mut [*mut c_void],
    ) -> Result<(), BackendError> {
        let (block, shared) = (block as u32, (block >> 32) as u32);
        if self.timed {
            let (s, e) = (self.hip.dev.event()?, self.hip.dev.event()?);
            s.record()?;
            self.hip.launch_shared(k, grid, block, shared, a)?;
            e.record()?;
            self.marks.push((label.to_string(), s, e));
            Ok(())
        } else {
            self.hip.launch_shared(k, grid, block, shared, a)
        }
    }
}

/// The expert stage's decisions for one forward: which kernels (GEMV or which GEMM), their
/// tile and the fused combine.
pub(super) struct ExpertPlan {
    /// The GEMV variant for these weights (MXFP4: `MXMOE_HIP_GEMV` or the device's default).
    pub gv: &'static str,
    /// Bits per weight code.
    pub cb: u32,
    /// The grouped GEMV (else a GEMM).
    pub gemv: bool,
    /// gemv2 does the combine (decode sizes).
    pub fuse_combine: bool,
    /// The bf16 GEMM on `mma.sync` (MXFP4 weights, NVIDIA).
    pub use_mma: bool,
    /// The v2 / mma GEMM's tile of pair rows (None: v1, the GEMV or the MX GEMM).
    pub v2_tm: Option<usize>,
    /// Pair rows per tile of the lists.
    pub tile_m: usize,
}

impl ExpertPlan {
    fn choose(hip: &HipBackend, g: &HipLayer, m: usize, na: usize) -> Result<Self, BackendError> {
        let l = &g.config;
        let el = l.local_experts;
        let cb = l.scheme.weight.spec().code_bits;
        let gv = if cb == 4 {
            gemv_variant_for_layer(!hip.dev.arch.starts_with("gfx"), g.nv4)?
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
            if let Err(e) = &hip.v2 {
                let v = if version == GemmVersion::V2 {
                    "v2"
                } else {
                    "mma"
                };
                return Err(BackendError::Device(format!("MXMOE_HIP_GEMM={v}: {e}")));
            }
        }
        let bf16_gemm = !gemv && hip.scaled_mfma(l).is_none();
        let fp4 = l.scheme.weight == MxFormat::Fp4E2M1;
        let use_mma = bf16_gemm
            && fp4
            && hip.v2.is_ok()
            && match version {
                GemmVersion::Mma => true,
                GemmVersion::Auto => auto_uses_mma(na, el),
                _ => false,
            };
        let use_v2 = bf16_gemm
            && !use_mma
            && match version {
                GemmVersion::V1 => false,
                GemmVersion::Auto | GemmVersion::Mma => hip.v2.is_ok() && auto_uses_v2(na, el),
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
        Ok(ExpertPlan {
            gv,
            cb,
            gemv,
            fuse_combine,
            use_mma,
            v2_tm,
            tile_m,
        })
    }
}

impl HipBackend {
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
        // Timing::Host: the host time of the upload (waited for), the forward (setup, launches,
        // synchronize) and the readback.
        let t_start = std::time::Instant::now();
        let m = ops::validate_moe(l, hidden, logits)?;
        ops::validate_route(&l.router, logits, l.n_experts, None)?;
        let _guard = self.guard()?;
        let prof = HostProfile::start();
        let (h, inter, k, el) = (l.hidden, l.inter, l.router.top_k, l.local_experts);
        let na = m * k;
        let plan = ExpertPlan::choose(self, g, m, na)?;
        let (gemv, tile_m) = (plan.gemv, plan.tile_m);
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
            wrows: g.nv4_rows as u32,
            xc2: 0,
        };
        let mut run = Launcher {
            hip: self,
            timed: timing == Timing::Passes,
            marks: Vec::new(),
        };
        let rp = wroute::params(&l.router, m, l.n_experts, g.route_bias.is_some());
        let rb = g.route_bias.as_ref().unwrap_or(&g.dummy).ptr;
        let map = g.map.as_ref().unwrap_or(&g.dummy).ptr;
        let route = route_plan(
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
        // One token through mmab: gemv1 routes it itself (no route kernel, no conversion).
        let routed = match &route {
            RoutePlan::Fused { kernel, .. } if gemv => {
                routed_gemv1(kernel, plan.gv, m, weight_only, h, x_split)
            }
            _ => None,
        };
        let conv_kernel = if weight_only && routed.is_none() {
            route_with_conversion(&route, !gemv)
        } else {
            None
        };
        let gemv_bf16 = gemv
            && routed.is_none()
            && gemv_takes_bf16(plan.gv)
            && (m >= MMAB_CONVERT_MIN_TOKENS || conv_kernel.is_some() || !weight_only);
        let x_p8 = gemv_bf16 || (!gemv && plan.use_mma);
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
        match route {
            _ if routed.is_some() => {}
            RoutePlan::Fused { kernel, threads } => match &route_conv {
                // Decode: routing and the lists in one block (moe_route_lists*: hip/lists.h, v6's
                // route_warp.h, route_lists_w3.h, p8_fused.h), with the conversion: one more
                // block per `threads` groups of 8 values.
                Some(kx) => run.run(
                    "route+lists",
                    kx,
                    (1 + (m * h / 8).div_ceil(threads as usize) as u32, 1),
                    threads,
                    &mut args!(
                        rp, p, logits_p, rb, ids_p, topw_p, map, rows.ptr, slot.ptr, tiles.ptr,
                        hidden_p, xbh, xbl, hk
                    ),
                )?,
                None => run.run(
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
                    Some(kx) => run.run(
                        "route",
                        kx,
                        grid,
                        threads,
                        &mut args!(rp, logits_p, rb, ids_p, topw_p, hidden_p, xbh, xbl, hk),
                    )?,
                    None => run.run(
                        "route",
                        &route,
                        grid,
                        threads,
                        &mut args!(rp, logits_p, rb, ids_p, topw_p),
                    )?,
                }
                run.run(
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
                run.run(
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
            run.run(
                "moe/to_bf16",
                "mx_to_bf16_p8",
                (r, 1),
                256,
                &mut args!(x_in, xbh, xbl, r, kk),
            )?;
        }
        let ea = ExpertArgs {
            g,
            p,
            m,
            na,
            max_tiles,
            rows: rows.ptr,
            slot: slot.ptr,
            tiles: tiles.ptr,
            a2: a2.ptr,
            y2: y2.ptr,
            topw: topw_p,
            out: out_p,
            hidden: hidden_p,
            x_in,
            xb: xb.as_ref().map(|_| (xbh, xbl)),
            x_split,
            converted: route_conv.is_some() || qdq_p8,
            bf16_intermediate: opts.intermediate == Intermediate::Bf16,
            routed: routed.map(|kernel| RoutedGemv1 {
                kernel,
                rp,
                logits: logits_p,
                ids: ids_p,
                map,
            }),
        };
        if gemv {
            self.gemv_stage(&mut run, &plan, &ea)?;
        } else if let Some(mx) = self.scaled_mfma(l) {
            self.mx_gemm_stage(&mut run, &mx, &ea)?;
        } else {
            self.bf16_gemm_stage(&mut run, &plan, &ea)?;
        }
        if !plan.fuse_combine {
            run.run(
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
        } else if run.timed {
            let mut t = Vec::new();
            for (label, s, e) in &run.marks {
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
