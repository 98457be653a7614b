//! The expert stage of the MoE forward (`moe.rs`), one function per family of kernels: the
//! grouped GEMV (decode sizes: `hip/gemv.h`, `hip/gemv_mma.h`), the gfx950 scaled-MFMA MX GEMM
//! (`hip/gemm_mx.h`) and the bf16 GEMM v1 / v2 / mma (`hip/gemm_v1.h`, `gemm_v2.h`,
//! `gemm_mma.h`). Each reads the activations the forward prepared (`ExpertArgs`), writes the
//! expert rows `y2` (the GEMV's fused combine: also the output) and allocates what only it needs.

use super::choice::*;
use super::layer::HipLayer;
use super::moe::{ExpertPlan, Launcher, MoeParams};
use super::real::{args, HipBackend};
use crate::backend::BackendError;
use crate::format::BLOCK;

/// What the forward hands its expert stage: device pointers of its buffers and the facts the
/// kernels' choice needs.
pub(super) struct ExpertArgs<'a> {
    pub g: &'a HipLayer,
    pub p: MoeParams,
    /// Tokens, token-expert pairs, the lists' tile slots.
    pub m: usize,
    pub na: usize,
    pub max_tiles: usize,
    /// The lists (rows in expert order, each pair's slot, the tiles).
    pub rows: u64,
    pub slot: u64,
    pub tiles: u64,
    /// The intermediates (f32, na x inter) and the expert rows (na x hidden).
    pub a2: u64,
    pub y2: u64,
    /// The router weights of the pairs and the output.
    pub topw: u64,
    pub out: u64,
    /// The hidden states as uploaded, and the activations of gemm1 (QDQ'd or the same).
    pub hidden: u64,
    pub x_in: u64,
    /// The hidden states as bf16 in mx_to_bf16_p8's layout (hi, lo), where the forward made
    /// them.
    pub xb: Option<(u64, u64)>,
    /// Weight-only activations that are not all bf16 values (hi + lo).
    pub x_split: bool,
    /// The route kernel or the input QDQ wrote `xb`.
    pub converted: bool,
    /// The intermediates are rounded to bf16 (`Intermediate::Bf16`).
    pub bf16_intermediate: bool,
    /// gemv1 routes the token itself (`choice/gemv.rs` `routed_gemv1`): no route kernel ran.
    pub routed: Option<RoutedGemv1>,
}

/// What gemv1 needs to route one token itself (hip/p8_fused.h gemv1_routed): the route
/// kernel's arguments.
pub(super) struct RoutedGemv1 {
    pub kernel: String,
    pub rp: [u32; 12],
    pub logits: u64,
    /// Where the routing goes (the ids; the weights are `ExpertArgs::topw`) and the expert map.
    pub ids: u64,
    pub map: u64,
}

impl ExpertArgs<'_> {
    fn bias13(&self) -> u64 {
        self.g.bias13.as_ref().unwrap_or(&self.g.dummy).ptr
    }
    fn bias2(&self) -> u64 {
        self.g.bias2.as_ref().unwrap_or(&self.g.dummy).ptr
    }
    fn weight_only(&self) -> bool {
        self.g.config.scheme.activation.is_none()
    }
}

impl HipBackend {
    /// The grouped GEMV (hip/gemv.h gemv_body, hip/gemv_mma.h): 32 intermediate columns /
    /// `rows2` output rows per block.
    pub(super) fn gemv_stage(
        &self,
        run: &mut Launcher,
        plan: &ExpertPlan,
        a: &ExpertArgs,
    ) -> Result<(), BackendError> {
        let (g, p, gv) = (a.g, a.p, plan.gv);
        let (h, inter) = (g.config.hidden, g.config.inter);
        let mt = a.max_tiles as u32;
        // Weight-only schemes take f32 activations as bf16 hi + lo, unless they are bf16
        // values (a bf16 model's hidden states; the intermediates when rounded to bf16): then
        // lo is +0 and the hi-only kernel gives the same bits with half the MMAs.
        let split = [a.x_split, a.weight_only() && !a.bf16_intermediate];
        let (mut k1, k2, rows2) = gemv_kernels(gv, plan.cb, split);
        let rows2 = gemv2_rows(gv, rows2, a.max_tiles, h, self.dev.sms)?;
        let k2 = gemv2_kernel_rows(&k2, gv, rows2);
        if gemv_takes_bf16(gv) && a.routed.is_none() {
            let (k, convert) = mmab_gemv1(&k1, a.m, a.converted);
            let k = gemv1_occupancy(&k, a.max_tiles, inter, self.dev.sms);
            debug_assert_eq!(convert, a.xb.is_some());
            k1 = k;
        }
        let (g1, g2) = ((mt, (inter / 32) as u32), (mt, h.div_ceil(rows2) as u32));
        let none = 0u64;
        // mmab: the hidden states as bf16 in mx_to_bf16_p8's order (hi, then lo and its row
        // flags when split), gemv1 writes a2 that way (hi, lo: two bytes each of the four a2
        // has per value).
        let x1 = a.xb.map_or(a.x_in, |(hi, _)| hi);
        let (b13, b2) = (a.bias13(), a.bias2());
        if let Some(r) = &a.routed {
            // Routing, the lists and the conversion in every block of gemv1.
            run.run(
                "moe/gemv1",
                &r.kernel,
                g1,
                256,
                &mut args!(
                    r.rp, p, r.logits, r.ids, a.topw, r.map, a.rows, a.slot, a.tiles, a.hidden,
                    g.w13.ptr, g.s13.ptr, a.a2, b13
                ),
            )?;
        } else {
            run.run(
                "moe/gemv1",
                &k1,
                g1,
                256,
                &mut args!(
                    p, a.rows, a.tiles, x1, g.w13.ptr, g.s13.ptr, a.a2, b13, a.topw, none, none,
                    none
                ),
            )?;
        }
        // Decode: the combine runs in gemv2's last block per column block (counters).
        let counters = if plan.fuse_combine { g.counters.ptr } else { 0 };
        run.run(
            "moe/gemv2",
            &k2,
            g2,
            256,
            &mut args!(
                p, a.rows, a.tiles, a.a2, g.w2.ptr, g.s2.ptr, a.y2, b2, a.topw, a.slot, counters,
                a.out
            ),
        )
    }

    /// gfx950: the scaled MFMA multiplies the MX codes of the weights and of the activations
    /// (quantized here with the activation format and scale mode; kernels of `mx` =
    /// `<weight>_<activation>`).
    pub(super) fn mx_gemm_stage(
        &self,
        run: &mut Launcher,
        mx: &str,
        a: &ExpertArgs,
    ) -> Result<(), BackendError> {
        let (g, p, dev) = (a.g, a.p, &self.dev);
        let l = &g.config;
        let (h, inter, m, na) = (l.hidden, l.inter, a.m, a.na);
        let mt = a.max_tiles as u32;
        let (g1, g2) = ((mt, (inter / 32) as u32), (mt, h.div_ceil(64) as u32));
        let (k1, k2) = (format!("moe_gemm1_mx_{mx}"), format!("moe_gemm2_mx_{mx}"));
        let af = l.scheme.activation.ok_or_else(|| {
            BackendError::Device("the scaled-MFMA GEMM needs MX activations".into())
        })?;
        let (fi, mi) = (af.id(), l.act_scale_mode.id());
        let cba = af.spec().code_bits as usize;
        let (b13, b2) = (a.bias13(), a.bias2());
        let nb1 = (m * h / BLOCK) as u32;
        let xc = dev.alloc(nb1 as usize * cba * 4)?;
        let xs = dev.alloc(nb1 as usize)?;
        run.run(
            "moe/quantize_x",
            "mx_quantize",
            (nb1.div_ceil(256), 1),
            256,
            &mut args!(a.hidden, xc.ptr, xs.ptr, nb1, fi, mi),
        )?;
        run.run(
            "moe/gemm1",
            &k1,
            g1,
            256,
            &mut args!(p, a.rows, a.tiles, xc.ptr, xs.ptr, g.w13.ptr, g.s13.ptr, a.a2, b13, a.topw),
        )?;
        let nb2 = (na * inter / BLOCK) as u32;
        let ac = dev.alloc(nb2 as usize * cba * 4)?;
        let asc = dev.alloc(nb2 as usize)?;
        run.run(
            "moe/quantize_a",
            "mx_quantize",
            (nb2.div_ceil(256), 1),
            256,
            &mut args!(a.a2, ac.ptr, asc.ptr, nb2, fi, mi),
        )?;
        run.run(
            "moe/gemm2",
            &k2,
            g2,
            256,
            &mut args!(p, a.rows, a.tiles, ac.ptr, asc.ptr, g.w2.ptr, g.s2.ptr, a.y2, b2, a.topw),
        )
    }

    /// The bf16 GEMM (v1, v2 or mma): activations as bf16 for the matrix cores, exact for
    /// QDQ'd values, hi + lo for the unquantized activations of weight-only schemes (`split`).
    pub(super) fn bf16_gemm_stage(
        &self,
        run: &mut Launcher,
        plan: &ExpertPlan,
        a: &ExpertArgs,
    ) -> Result<(), BackendError> {
        let (g, p, dev) = (a.g, a.p, &self.dev);
        let l = &g.config;
        let (h, inter, m, na, cb) = (l.hidden, l.inter, a.m, a.na, plan.cb);
        let (use_mma, mt) = (plan.use_mma, a.max_tiles as u32);
        let split = a.weight_only();
        let sfx = if split { "_split" } else { "" };
        // Per stage (gemm1: K = hidden, gemm2: K = inter): its kernel, the weight rows of its
        // blocks (the grid's x; 128, or 256 for the wgmma GEMM's wg256 / wg256c), and whether
        // it reads its activations in the c16 order (wg256c; hip/gemv_epilogue.h c16_pos).
        let stage = |k: usize, n: u32| -> Result<(String, usize, bool), BackendError> {
            Ok(match plan.v2_tm {
                // mma: the same arguments, grid (128 weight rows a block) and tile list
                // contract (hip/gemm_mma.h), activations from mx_to_bf16_p8.
                // MXMOE_HIP_MMA_VARIANT picks a variant (measurements), else mma_variant_for.
                Some(tm) if use_mma => {
                    let wgmma = dev.arch == "sm_90";
                    let v = mma_variant_for(split, tm, a.bf16_intermediate, k, wgmma)?;
                    if v.starts_with("wg") && !wgmma {
                        return Err(BackendError::Device(format!(
                            "MXMOE_HIP_MMA_VARIANT={v}: the wgmma GEMM needs compute capability \
                             9.0 (H100 / H200; its sm_90a PTX runs nowhere else), this device is {}",
                            dev.arch
                        )));
                    }
                    let vs = mma_suffix(v);
                    (
                        format!("moe_gemm{n}_mma_t{tm}{sfx}{vs}_cb4"),
                        mma_block_rows(v),
                        mma_takes_c16(v),
                    )
                }
                // The same arguments, grid and tile list contract as v1 (hip/gemm_v2.h
                // gemm_v2_body), tiles of tm pair rows.
                Some(tm) => (format!("moe_gemm{n}_v2_t{tm}{sfx}_cb{cb}"), GEMM_N, false),
                None => (format!("moe_gemm{n}{sfx}_cb{cb}"), GEMM_N, false),
            })
        };
        let ((k1, rows1, c16_1), (k2, rows2, c16_2)) = (stage(h, 1)?, stage(inter, 2)?);
        let block = |k: &str, rows: usize| -> Result<u64, BackendError> {
            Ok(match (&self.v2, plan.v2_tm) {
                (Ok(v2), Some(_)) => {
                    let smem = v2.get(k).copied().ok_or_else(|| {
                        BackendError::Device(format!("kernel {k} is not in the code object"))
                    })?;
                    let threads = if use_mma {
                        MMA_THREADS * (rows / GEMM_N) as u32
                    } else {
                        V2_THREADS
                    };
                    with_shared(threads, smem)
                }
                _ => gemm_threads(&dev.arch) as u64,
            })
        };
        let (block1, block2) = (block(&k1, rows1)?, block(&k2, rows2)?);
        // x = column block, y = tile slot (hip/gemm_v1.h: L2 reuse); grid y is at most 65535.
        if mt > 65535 {
            return Err(BackendError::Device(format!(
                "HIP GEMM: {na} token-expert pairs need {mt} row tiles, more than the 65535 one \
                 launch takes; split the batch"
            )));
        }
        let (g1, g2) = (
            (inter.div_ceil(rows1 / 2) as u32, mt),
            (h.div_ceil(rows2) as u32, mt),
        );
        // mma: one u32 per row after the lo values (hip/gemm_mma.h mx_to_bf16_p8: whether some
        // lo of the row is not +0; tiles of rows without one skip the lo MMAs).
        let flags = |rows: usize| if use_mma { rows * 4 } else { 0 };
        // The hidden states as bf16: mma in mx_to_bf16_p8's layout, converted by the forward
        // (`xb`: by the route kernel or mx_to_bf16_p8); v1 / v2 here, one thread a value.
        let xv12 = if use_mma {
            None
        } else {
            let n = m * h;
            let xh = dev.alloc(2 * n)?;
            let xl = if split { Some(dev.alloc(2 * n)?) } else { None };
            let xlp = xl.as_ref().map_or(0u64, |b| b.ptr);
            run.run(
                "moe/to_bf16",
                "mx_to_bf16",
                ((n as u64).div_ceil(256) as u32, 1),
                256,
                &mut args!(a.x_in, xh.ptr, xlp, n as u64),
            )?;
            Some((xh, xl))
        };
        let (mut xhp, mut xlp) = match (&xv12, a.xb) {
            (Some((xh, xl)), _) => (xh.ptr, xl.as_ref().map_or(0u64, |b| b.ptr)),
            (None, Some(xb)) => xb,
            (None, None) => {
                return Err(BackendError::Device(
                    "internal: the mma GEMM's bf16 activations were not prepared".into(),
                ))
            }
        };
        // wg256c's gemm1: the hidden states' bf16 (hi, lo and its row flags) in the c16 order,
        // converted from mx_to_bf16_p8's by one pass (hip/gemm_wgmma.h mx_p8_to_c16).
        let _xc = if c16_1 {
            let n = m * h * 2;
            let b = dev.alloc(if split { 2 * n + flags(m) } else { n })?;
            let lo = if split { b.ptr + n as u64 } else { 0u64 };
            // One thread per 16-byte chunk of a row (h / 8 of them, 16 per 128-k step), one
            // grid row per token, in launches of at most 65535 rows (grid y).
            let chunks = 16 * h.div_ceil(128) as u32;
            for row0 in (0..m).step_by(65535) {
                let n = (m - row0).min(65535) as u32;
                run.run(
                    "moe/to_c16",
                    "mx_p8_to_c16",
                    (chunks.div_ceil(256), n),
                    256,
                    &mut args!(xhp, xlp, b.ptr, lo, m as u32, h as u32, row0 as u32),
                )?;
            }
            (xhp, xlp) = (b.ptr, lo);
            Some(b)
        } else {
            None
        };
        // gemm2's bf16 activations: hi, then (split) lo and the row flags, in one buffer. The
        // mma gemm1 writes them itself (hip/gemm_v1.h gemm_p8_store); v1 / v2 write f32 and a
        // conversion kernel follows.
        let n2 = na * inter * 2;
        let ab = dev.alloc(if split { 2 * n2 + flags(na) } else { n2 })?;
        let (ahp, alp) = (ab.ptr, if split { ab.ptr + n2 as u64 } else { 0u64 });
        let out1 = if use_mma { ahp } else { a.a2 };
        let (b13, b2) = (a.bias13(), a.bias2());
        // gemm1 writes gemm2's activations in the c16 order for a wg256c gemm2.
        let p1 = p.with_xc2(c16_2);
        run.run(
            "moe/gemm1",
            &k1,
            g1,
            block1,
            &mut args!(p1, a.rows, a.tiles, xhp, xlp, g.w13.ptr, g.s13.ptr, out1, b13, a.topw),
        )?;
        if !use_mma {
            let n = (na * inter) as u64;
            run.run(
                "moe/to_bf16",
                "mx_to_bf16",
                (n.div_ceil(256) as u32, 1),
                256,
                &mut args!(a.a2, ahp, alp, n),
            )?;
        }
        run.run(
            "moe/gemm2",
            &k2,
            g2,
            block2,
            &mut args!(p, a.rows, a.tiles, ahp, alp, g.w2.ptr, g.s2.ptr, a.y2, b2, a.topw),
        )
    }
}
