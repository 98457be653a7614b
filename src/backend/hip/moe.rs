//! The MoE forward of a prepared layer (`HipBackend::moe`): one function that stages every pass
//! in order on the device's stream: the inputs' upload, routing and the expert lists (fused or
//! separate: `choice/route.rs` `route_plan`), the input QDQ or bf16 conversion, the expert
//! stage (the grouped GEMV for few token-expert pairs per expert, the gfx950 scaled-MFMA MX
//! GEMM, or the bf16 GEMM v1 / v2 / mma), the combine, and one copy back of the output, ids and
//! weights. `choice/` decides every kernel and shape; `real.rs` holds the launch helpers.
//!
//! Size (~630 lines): `moe` is ~580 of them. Its seam is the expert stage: the GEMV, the gfx950
//! MX GEMM and the bf16 GEMM branches could each move to a function taking the forward's
//! buffers; not done yet.

use super::choice::*;
use super::driver::Event;
use super::host_profile::HostProfile;
use super::layer::HipLayer;
use super::real::{args, f32_bytes, HipBackend};
use crate::backend::wgpu::route as wroute;
use crate::backend::{ops, BackendError, PassTimes, Timing};
use crate::format::{MxFormat, BLOCK};
use crate::moe::{Intermediate, MoeOptions, MoeOutput, Routing};
use std::ffi::c_void;

#[repr(C)]
#[derive(Clone, Copy)]
struct MoeParams {
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
}

/// Whether every value is a bf16 value (its low 16 bits zero: bf16 -> f32 is exact, so the
/// bf16 hi of the GEMV's split is the value and its lo +0).
fn all_bf16(x: &[f32]) -> bool {
    x.iter().all(|v| v.to_bits() & 0xFFFF == 0)
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
        let timed = timing == Timing::Passes;
        // Timing::Host: the host time of the upload (waited for), the forward (setup, launches,
        // synchronize) and the readback.
        let t_start = std::time::Instant::now();
        let m = ops::validate_moe(l, hidden, logits)?;
        ops::validate_route(&l.router, logits, l.n_experts, None)?;
        let _guard = self.guard()?;
        let prof = HostProfile::start();
        let (h, inter, k, el) = (l.hidden, l.inter, l.router.top_k, l.local_experts);
        let na = m * k;
        // The GEMV for these weights (MXFP4: MXMOE_HIP_GEMV or the device's default).
        let cb = l.scheme.weight.spec().code_bits;
        let gv = if cb == 4 {
            gemv_variant_for_layer(!self.dev.arch.starts_with("gfx"), g.nv4)?
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
            if let Err(e) = &self.v2 {
                let v = if version == GemmVersion::V2 {
                    "v2"
                } else {
                    "mma"
                };
                return Err(BackendError::Device(format!("MXMOE_HIP_GEMM={v}: {e}")));
            }
        }
        let bf16_gemm = !gemv && self.scaled_mfma(l).is_none();
        let fp4 = l.scheme.weight == MxFormat::Fp4E2M1;
        let use_mma = bf16_gemm
            && fp4
            && self.v2.is_ok()
            && match version {
                GemmVersion::Mma => true,
                GemmVersion::Auto => auto_uses_mma(na, el),
                _ => false,
            };
        let use_v2 = bf16_gemm
            && !use_mma
            && match version {
                GemmVersion::V1 => false,
                GemmVersion::Auto | GemmVersion::Mma => self.v2.is_ok() && auto_uses_v2(na, el),
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
        };
        let mut marks: Vec<(String, Event, Event)> = Vec::new();
        // `block`: threads per block, and for kernels with dynamic shared memory (the v2 GEMM)
        // its bytes in the high half (`with_shared`).
        let mut run = |label: &str,
                       k: &str,
                       grid: (u32, u32),
                       block: u64,
                       a: &mut [*mut c_void]|
         -> Result<(), BackendError> {
            let (block, shared) = (block as u32, (block >> 32) as u32);
            if timed {
                let (s, e) = (dev.event()?, dev.event()?);
                s.record()?;
                self.launch_shared(k, grid, block, shared, a)?;
                e.record()?;
                marks.push((label.to_string(), s, e));
                Ok(())
            } else {
                self.launch_shared(k, grid, block, shared, a)
            }
        };
        let rp = wroute::params(&l.router, m, l.n_experts, g.route_bias.is_some());
        let rb = g.route_bias.as_ref().unwrap_or(&g.dummy).ptr;
        let map = g.map.as_ref().unwrap_or(&g.dummy).ptr;
        let plan = route_plan(
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
        let conv_kernel = if weight_only {
            route_with_conversion(&plan, !gemv)
        } else {
            None
        };
        let gemv_bf16 = gemv
            && gemv_takes_bf16(gv)
            && (m >= MMAB_CONVERT_MIN_TOKENS || conv_kernel.is_some() || !weight_only);
        let x_p8 = gemv_bf16 || (!gemv && use_mma);
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
        match plan {
            RoutePlan::Fused { kernel, threads } => match &route_conv {
                // Decode: routing and the lists in one block (moe_route_lists*: hip/lists.h, v6's
                // route_warp.h, route_lists_w3.h, p8_fused.h), with the conversion: one more
                // block per `threads` groups of 8 values.
                Some(kx) => run(
                    "route+lists",
                    kx,
                    (1 + (m * h / 8).div_ceil(threads as usize) as u32, 1),
                    threads,
                    &mut args!(
                        rp, p, logits_p, rb, ids_p, topw_p, map, rows.ptr, slot.ptr, tiles.ptr,
                        hidden_p, xbh, xbl, hk
                    ),
                )?,
                None => run(
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
                    Some(kx) => run(
                        "route",
                        kx,
                        grid,
                        threads,
                        &mut args!(rp, logits_p, rb, ids_p, topw_p, hidden_p, xbh, xbl, hk),
                    )?,
                    None => run(
                        "route",
                        &route,
                        grid,
                        threads,
                        &mut args!(rp, logits_p, rb, ids_p, topw_p),
                    )?,
                }
                run(
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
                run(
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
            run(
                "moe/to_bf16",
                "mx_to_bf16_p8",
                (r, 1),
                256,
                &mut args!(x_in, xbh, xbl, r, kk),
            )?;
        }
        let b13 = g.bias13.as_ref().unwrap_or(&g.dummy).ptr;
        let b2 = g.bias2.as_ref().unwrap_or(&g.dummy).ptr;
        let mt = max_tiles as u32;
        let (g1, g2) = ((mt, (inter / 32) as u32), (mt, h.div_ceil(64) as u32));
        if gemv {
            // hip/gemv.h gemv_body, hip/gemv_mma.h: 32 intermediate columns / `rows2` output
            // rows per block.
            // Weight-only schemes take f32 activations as bf16 hi + lo, unless they are bf16
            // values (a bf16 model's hidden states; the intermediates when rounded to bf16):
            // then lo is +0 and the hi-only kernel gives the same bits with half the MMAs.
            let split = [
                x_split,
                weight_only && opts.intermediate != Intermediate::Bf16,
            ];
            let (mut k1, k2, rows2) = gemv_kernels(gv, cb, split);
            let rows2 = gemv2_rows(gv, rows2, max_tiles, h, dev.sms)?;
            let k2 = gemv2_kernel_rows(&k2, gv, rows2);
            if gemv_takes_bf16(gv) {
                let (k, convert) = mmab_gemv1(&k1, m, route_conv.is_some() || qdq_p8);
                let k = gemv1_occupancy(&k, max_tiles, inter, dev.sms);
                debug_assert_eq!(convert, xb.is_some());
                k1 = k;
            }
            let g2 = (mt, h.div_ceil(rows2) as u32);
            let none = 0u64;
            // mmab: the hidden states as bf16 in mx_to_bf16_p8's order (hi, then lo and its
            // row flags when split), gemv1 writes a2 that way (hi, lo: two bytes each of the
            // four a2 has per value).
            let x1 = if xb.is_some() { xbh } else { x_in };
            run(
                "moe/gemv1",
                &k1,
                g1,
                256,
                &mut args!(
                    p, rows.ptr, tiles.ptr, x1, g.w13.ptr, g.s13.ptr, a2.ptr, b13, topw_p, none,
                    none, none
                ),
            )?;
            // Decode: the combine runs in gemv2's last block per column block (counters).
            let counters = if fuse_combine { g.counters.ptr } else { 0 };
            run(
                "moe/gemv2",
                &k2,
                g2,
                256,
                &mut args!(
                    p, rows.ptr, tiles.ptr, a2.ptr, g.w2.ptr, g.s2.ptr, y2.ptr, b2, topw_p,
                    slot.ptr, counters, out_p
                ),
            )?;
        } else if let Some(mx) = self.scaled_mfma(l) {
            // gfx950: the scaled MFMA multiplies the MX codes of the weights and of the
            // activations (quantized here with the activation format and scale mode).
            let (k1, k2) = (format!("moe_gemm1_mx_{mx}"), format!("moe_gemm2_mx_{mx}"));
            let af = l
                .scheme
                .activation
                .expect("scaled_mfma needs MX activations");
            let (fi, mi) = (af.id(), l.act_scale_mode.id());
            let cba = af.spec().code_bits as usize;
            let nb1 = (m * h / BLOCK) as u32;
            let xc = dev.alloc(nb1 as usize * cba * 4)?;
            let xs = dev.alloc(nb1 as usize)?;
            run(
                "moe/quantize_x",
                "mx_quantize",
                (nb1.div_ceil(256), 1),
                256,
                &mut args!(hidden_p, xc.ptr, xs.ptr, nb1, fi, mi),
            )?;
            run(
                "moe/gemm1",
                &k1,
                g1,
                256,
                &mut args!(
                    p, rows.ptr, tiles.ptr, xc.ptr, xs.ptr, g.w13.ptr, g.s13.ptr, a2.ptr, b13,
                    topw_p
                ),
            )?;
            let nb2 = (na * inter / BLOCK) as u32;
            let ac = dev.alloc(nb2 as usize * cba * 4)?;
            let asc = dev.alloc(nb2 as usize)?;
            run(
                "moe/quantize_a",
                "mx_quantize",
                (nb2.div_ceil(256), 1),
                256,
                &mut args!(a2.ptr, ac.ptr, asc.ptr, nb2, fi, mi),
            )?;
            run(
                "moe/gemm2",
                &k2,
                g2,
                256,
                &mut args!(
                    p, rows.ptr, tiles.ptr, ac.ptr, asc.ptr, g.w2.ptr, g.s2.ptr, y2.ptr, b2, topw_p
                ),
            )?;
        } else {
            // Activations as bf16 for the matrix cores: exact for QDQ'd values; hi + lo for the
            // unquantized activations of weight-only schemes (`split`).
            let split = l.scheme.activation.is_none();
            let sfx = if split { "_split" } else { "" };
            let (k1, k2) = match v2_tm {
                // mma: the same arguments, grid (128 weight rows a block) and tile list
                // contract (hip/gemm_mma.h), activations from mx_to_bf16_p8.
                // MXMOE_HIP_MMA_VARIANT picks a variant (measurements).
                Some(tm) if use_mma => {
                    let bf16_acts = opts.intermediate == Intermediate::Bf16;
                    let vs = mma_suffix(mma_variant_for(split, tm, bf16_acts)?);
                    (
                        format!("moe_gemm1_mma_t{tm}{sfx}{vs}_cb4"),
                        format!("moe_gemm2_mma_t{tm}{sfx}{vs}_cb4"),
                    )
                }
                // The same arguments, grid and tile list contract as v1 (hip/gemm_v2.h
                // gemm_v2_body), tiles of tm pair rows.
                Some(tm) => (
                    format!("moe_gemm1_v2_t{tm}{sfx}_cb{cb}"),
                    format!("moe_gemm2_v2_t{tm}{sfx}_cb{cb}"),
                ),
                None => (
                    format!("moe_gemm1{sfx}_cb{cb}"),
                    format!("moe_gemm2{sfx}_cb{cb}"),
                ),
            };
            let block = match (&self.v2, v2_tm) {
                (Ok(v2), Some(_)) => {
                    let smem = |k: &str| {
                        v2.get(k).copied().ok_or_else(|| {
                            BackendError::Device(format!("kernel {k} is not in the code object"))
                        })
                    };
                    // gemm1 and gemm2 of a variant share the layout (one PTX constant).
                    let (s1, s2) = (smem(&k1)?, smem(&k2)?);
                    debug_assert_eq!(s1, s2);
                    let threads = if use_mma { MMA_THREADS } else { V2_THREADS };
                    with_shared(threads, s1.max(s2))
                }
                _ => gemm_threads(&dev.arch) as u64,
            };
            // x = column block, y = tile slot (hip/gemm_v1.h: L2 reuse); grid y is at most 65535.
            if mt > 65535 {
                return Err(BackendError::Device(format!(
                    "HIP GEMM: {na} token-expert pairs need {mt} row tiles, more than the 65535 \
                     one launch takes; split the batch"
                )));
            }
            let (g1, g2) = (
                (inter.div_ceil(GEMM_N / 2) as u32, mt),
                (h.div_ceil(GEMM_N) as u32, mt),
            );
            // mma: one u32 per row after the lo values (hip/gemm_mma.h mx_to_bf16_p8: whether
            // some lo of the row is not +0; tiles of rows without one skip the lo MMAs).
            let flags = |rows: usize| if use_mma { rows * 4 } else { 0 };
            // The hidden states as bf16: mma in mx_to_bf16_p8's layout, converted above (`xb`:
            // by the route kernel or mx_to_bf16_p8); v1 / v2 here, one thread a value.
            let xv12 = if use_mma {
                None
            } else {
                let n = m * h;
                let xh = dev.alloc(2 * n)?;
                let xl = if split { Some(dev.alloc(2 * n)?) } else { None };
                let xlp = xl.as_ref().map_or(0u64, |b| b.ptr);
                run(
                    "moe/to_bf16",
                    "mx_to_bf16",
                    ((n as u64).div_ceil(256) as u32, 1),
                    256,
                    &mut args!(x_in, xh.ptr, xlp, n as u64),
                )?;
                Some((xh, xl))
            };
            let (xhp, xlp) = match &xv12 {
                Some((xh, xl)) => (xh.ptr, xl.as_ref().map_or(0u64, |b| b.ptr)),
                None => (xbh, xbl),
            };
            // gemm2's bf16 activations: hi, then (split) lo and the row flags, in one buffer.
            // The mma gemm1 writes them itself (hip/gemm_v1.h gemm_p8_store); v1 / v2 write f32
            // and a conversion kernel follows.
            let n2 = na * inter * 2;
            let ab = dev.alloc(if split { 2 * n2 + flags(na) } else { n2 })?;
            let (ahp, alp) = (ab.ptr, if split { ab.ptr + n2 as u64 } else { 0u64 });
            let out1 = if use_mma { ahp } else { a2.ptr };
            run(
                "moe/gemm1",
                &k1,
                g1,
                block,
                &mut args!(
                    p, rows.ptr, tiles.ptr, xhp, xlp, g.w13.ptr, g.s13.ptr, out1, b13, topw_p
                ),
            )?;
            if !use_mma {
                let n = (na * inter) as u64;
                run(
                    "moe/to_bf16",
                    "mx_to_bf16",
                    (n.div_ceil(256) as u32, 1),
                    256,
                    &mut args!(a2.ptr, ahp, alp, n),
                )?;
            }
            run(
                "moe/gemm2",
                &k2,
                g2,
                block,
                &mut args!(
                    p, rows.ptr, tiles.ptr, ahp, alp, g.w2.ptr, g.s2.ptr, y2.ptr, b2, topw_p
                ),
            )?;
        }
        if !fuse_combine {
            run(
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
        } else if timed {
            let mut t = Vec::new();
            for (label, s, e) in &marks {
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
