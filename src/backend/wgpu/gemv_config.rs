//! The decode GEMV's layout (shaders/moe_gemv.wgsl): [`GemvConfig`] (lanes per row group,
//! subgroup or workgroup-memory reduction, prefetch, words, split, one-row pipelines), the
//! defaults of its knobs (`MXMOE_GEMV_*`) and of the GEMV / GEMM crossover, the start-up
//! device checks that decide what the adapter may run (`subgroup_check`, `fp4_decode_check`,
//! the latter against the format table) and the setter tests and bench use (`set_gemv`).
//!
//! An `impl Context` block over the context's `gemv` field and GEMV knobs (context.rs); the
//! checks build their pipelines through its pipeline cache (context.rs).

use super::context::{env_u64, Context};
use super::source::Shader;
use crate::backend::BackendError;
use crate::format::MxFormat;
use std::sync::atomic::Ordering;

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

impl Context {
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

    /// Run `subgroup_check` (shaders/moe_gemv_reduce_subgroup.wgsl) with the layout `c`: every
    /// invocation must sit in a subgroup of exactly `c.lanes` consecutive invocations.
    pub(super) fn check_subgroup_layout(&self, c: GemvConfig) -> bool {
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

    /// The decode GEMV's start-up choices, part of [`Context::new`]: where FP4 codes are
    /// decoded (`MXMOE_FP4_DECODE`, else in registers where the adapter has SHADER_F16_IN_F32
    /// and `fp4_decode_check` passes) and the layout the `MXMOE_GEMV_*` knobs ask for (the
    /// workgroup-memory layout where the subgroup check fails).
    pub(super) fn init_gemv(&self, adapter: &wgpu::Adapter) {
        let on = match std::env::var("MXMOE_FP4_DECODE").as_deref() {
            Ok("table") => false,
            Ok("registers") => true,
            _ => {
                adapter
                    .get_downlevel_capabilities()
                    .flags
                    .contains(wgpu::DownlevelFlags::SHADER_F16_IN_F32)
                    && self.check_fp4_register_decode()
            }
        };
        self.fp4_register_decode.store(on, Ordering::Relaxed);
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
        let _ = self.set_gemv(GemvConfig {
            subgroup,
            lanes: 32,
            split,
            prefetch,
            words,
            one_row,
        });
    }
}
