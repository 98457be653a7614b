//! The decode GEMV: its variants (`MXMOE_HIP_GEMV`; the matrix-core ones on NVIDIA only,
//! hip/gemv_mma.h), their kernel names, tile heights and gemv2 output rows
//! (`MXMOE_HIP_GEMV2_ROWS`), gemv1's occupancy, mmab's bf16 conversion, and the GEMV / GEMM
//! crossover in token-expert pairs per local expert (`MXMOE_HIP_GEMV_PAIRS`).

use super::env_variant;
use crate::backend::BackendError;

/// Rows per tile of the GEMV (4; the GEMM's: `GEMM_TILE`, hip/gemm_v1.h GT_M).
pub(in crate::backend::hip) const GEMV_TILE: usize = 4;
/// gemv2's output rows per block (hip/gemv.h GV_OUT_ROWS; gemv1 blocks: 32 columns).
pub(in crate::backend::hip) const GEMV_OUT_ROWS: usize = 64;
/// The same for the v2 GEMV (hip/gemv.h GV2_OUT_ROWS); the combine counters are sized for it
/// (the smaller, so the larger count).
pub(in crate::backend::hip) const GEMV2_OUT_ROWS: usize = 32;

/// The decode GEMV for MXFP4 weights (`MXMOE_HIP_GEMV`): `v2` (`moe_gemv{1,2}_v2_cb4`: one FMA
/// per code, per-block scales, 32-row gemv2 blocks, 4 blocks per multiprocessor, weights loaded
/// past the L1 on NVIDIA), `v2c` (the same with plain loads, `moe_gemv{1,2}_v2c_cb4`), `v3`
/// (`moe_gemv{1,2}_v3_cb4`: four lanes per 32-block, so that a warp's activation loads touch 8
/// lines instead of 32; faster than v2 at every measured decode size on the H200,
/// docs/h200-2026-12-01-session4; the default on AMD) or `v1`; the kernel-name infix. Other weight
/// formats always run v1.
/// `mma` (NVIDIA only: `moe_gemv{1,2}_mma[_split]_cb4`, hip/gemv_mma.h) runs the GEMV on the
/// matrix cores: the weights are mma.sync's A operand, up to 8 token-expert pairs of one expert its
/// N columns, so one decode of a weight fragment serves all of a tile's pairs; the default on
/// NVIDIA (GEMV_MMA_DEFAULT). (A variant with two K steps in flight per warp and one block per
/// multiprocessor, `mmapf`, was slower on the H200 at every measured size, 1 / 16 / 256 gpt-oss
/// tokens 0.067 / 0.269 / 1.699 ms against 0.058 / 0.209 / 1.260, and was removed. So was `mma2`:
/// each block's weights prefetched into the L2 and K split across up to 8 blocks with a
/// fixed-order sum of their partial tiles, slower at every measured size and split, e.g. one
/// gpt-oss token 0.081 ms, 0.066 with the prefetch alone, against 0.058; commit cb464fa,
/// docs/h200-2026-12-01s6-gemv.)
/// `mmaw` (NVIDIA only: `moe_gemv{1,2}_mmaw[_split]_cb4`): `mma` with two
/// 16-row tiles per warp instead of four (the block's 64 rows in two groups of 4 warps, each
/// group's K steps over its 4 warps): 80 registers instead of 128, so three blocks (24 warps)
/// per multiprocessor instead of two, for about 17 % more instructions per weight byte.
/// `mmab` (NVIDIA only: `moe_gemv{1,2}_mmab[_split]_cb4`): `mmaw` on bf16 activations, the
/// hidden states converted once per forward by mx_to_bf16_p8 (as the mma GEMM takes them: hi,
/// and for f32 activations of weight-only schemes the remainder lo) and gemv1's output written
/// that way by gemv1 itself, so the loop loads its B fragments as they are instead of
/// converting 32 f32 values per lane and step (~130 of ~540 instructions of an mmaw step with
/// hi + lo).
/// (`mmac`, mmab with each warp's weights streamed through a two-step cp.async ring in shared
/// memory, measured no faster and was removed: docs/h200-2026-12-01s8-gemv.)
pub(in crate::backend::hip) const GEMV_VARIANTS: [&str; 7] =
    ["v3", "v2", "v2c", "v1", "mma", "mmaw", "mmab"];

/// Whether a GEMV variant takes its activations as bf16 from mx_to_bf16_p8 (`mmab`).
pub(in crate::backend::hip) fn gemv_takes_bf16(variant: &str) -> bool {
    variant == "mmab"
}

/// Whether a GEMV variant has gemv2 kernels of 32 output rows per block
/// (`moe_gemv2_<variant>32[_split]_cb4`).
pub(in crate::backend::hip) fn gemv_has_rows32(variant: &str) -> bool {
    variant == "mmab"
}

/// gemv2's output rows per block for a variant with 32-row kernels (`gemv_has_rows32`): 32 when
/// the 64-row grid (`slots` tile slots x the column blocks of `hidden`) is less than two waves of
/// three blocks per multiprocessor (`sms`; 132 when unknown), so that twice the blocks, each
/// with its K over all 8 warps, keep more warps busy; else 64. On the H200 (docs/
/// h200-2026-12-01s8-gemv), gemv2 at 1 / 4 gpt-oss-120b tokens (180 / 720 blocks of 64 rows):
/// 0.015 / 0.032 ms with 32 rows against 0.019 / 0.035; at 16 tokens (~2250 blocks) 0.061 against
/// 0.059, DeepSeek-R1 1 / 8 tokens (896 / ~6400) 0.036 / 0.111 against 0.034 / 0.098.
/// `MXMOE_HIP_GEMV2_ROWS` (32 or 64) forces one.
/// Other variants keep theirs (`rows`, from `gemv_kernels`).
pub(in crate::backend::hip) fn gemv2_rows(
    variant: &str,
    rows: usize,
    slots: usize,
    hidden: usize,
    sms: u32,
) -> Result<usize, BackendError> {
    if !gemv_has_rows32(variant) {
        return Ok(rows);
    }
    match std::env::var("MXMOE_HIP_GEMV2_ROWS")
        .unwrap_or_default()
        .as_str()
    {
        "" => {
            let waves2 = 6 * if sms > 0 { sms as usize } else { 132 };
            Ok(if slots * hidden.div_ceil(GEMV_MMA_OUT_ROWS) < waves2 {
                32
            } else {
                GEMV_MMA_OUT_ROWS
            })
        }
        "32" => Ok(32),
        "64" => Ok(64),
        v => Err(BackendError::Device(format!(
            "MXMOE_HIP_GEMV2_ROWS={v}: expected 32 or 64 (docs/ENVIRONMENT.md)"
        ))),
    }
}

/// mmab's hi-only gemv1 (`moe_gemv1_mmab_cb4`: MX activations, or bf16 hidden states) at four
/// blocks per multiprocessor (`moe_gemv1_mmab4_cb4`, <= 64 registers) where its grid (`slots`
/// tile slots x `inter` / 32 column blocks) is more than one wave of three (`sms`; 132 when
/// unknown): on the H200 DeepSeek-R1 at one token (8 x 64 = 512 blocks: 1.29 waves of three,
/// one of four) gemv1 took 0.046 ms against 0.061 and the forward 0.088 against 0.103, at 8
/// tokens 0.263 against 0.266 (docs/h200-2026-12-01s8-occ). Below one wave (one gpt-oss token:
/// 4 x 90 = 360) the fourth slot adds nothing. Other gemv1 kernels are returned unchanged.
pub(in crate::backend::hip) fn gemv1_occupancy(
    k1: &str,
    slots: usize,
    inter: usize,
    sms: u32,
) -> String {
    let wave = 3 * if sms > 0 { sms as usize } else { 132 };
    if k1 == "moe_gemv1_mmab_cb4" && slots * (inter / 32) > wave {
        "moe_gemv1_mmab4_cb4".to_string()
    } else {
        k1.to_string()
    }
}

/// gemv2's kernel name for `rows` output rows per block (`gemv2_rows`).
pub(in crate::backend::hip) fn gemv2_kernel_rows(k2: &str, variant: &str, rows: usize) -> String {
    if rows == 32 && gemv_has_rows32(variant) {
        k2.replacen(&format!("_{variant}"), &format!("_{variant}32"), 1)
    } else {
        k2.to_string()
    }
}

/// `mmab` converts the hidden states in a kernel of its own from this many tokens on; below, its
/// gemv1 is `mmao` (the conversion in the loop, as `mmaw`; the output for mmab's gemv2). On the
/// H200 the conversion kernel took ~7 us at 1-16 gpt-oss tokens while mmab's gemv1 saved 3 us at
/// 1 token (0.022 vs 0.025 ms), 6 at 4 and 14 at 16 (docs/h200-2026-12-01s7-nv4).
pub(in crate::backend::hip) const MMAB_CONVERT_MIN_TOKENS: usize = 4;

/// mmab's gemv1 kernel for `tokens` tokens (from `gemv_kernels`' name) and whether the hidden
/// states go through mx_to_bf16_p8's layout first: always where a kernel that runs anyway
/// converts them (`in_route`: the route kernel, `route_with_conversion`, or the input QDQ of MX
/// activations, mx_qdq_lanes_p8), else from MMAB_CONVERT_MIN_TOKENS tokens.
pub(in crate::backend::hip) fn mmab_gemv1(
    k1: &str,
    tokens: usize,
    in_route: bool,
) -> (String, bool) {
    if tokens < MMAB_CONVERT_MIN_TOKENS && !in_route {
        (k1.replace("_mmab", "_mmao"), false)
    } else {
        (k1.to_string(), true)
    }
}

/// Hidden sizes up to which mmab's gemv1 can route one token itself (hip/p8_fused.h RT_MAX_K:
/// the bf16 hidden states, hi and lo, in 16 KB of shared memory).
pub(in crate::backend::hip) const ROUTED_GEMV1_MAX_HIDDEN: usize = 4096;

/// Whether mmab's gemv1 may route one token itself (`MXMOE_HIP_GEMV_ROUTED=0`: never).
pub(in crate::backend::hip) fn routed_gemv1_enabled() -> bool {
    std::env::var("MXMOE_HIP_GEMV_ROUTED").as_deref() != Ok("0")
}

/// The gemv1 that routes one token itself (`moe_gemv1_mmab_rt_<nq>[_split]_cb4`, hip/p8_fused.h
/// gemv1_routed), where the forward would run the one-warp route + lists kernel
/// `moe_route_lists_w2_<nq>` (a softmax router) before mmab's gemv1 of one token of a
/// weight-only scheme: one kernel launch and one dependency less. `split`: the hidden states
/// need bf16 hi + lo. None where it does not apply or `MXMOE_HIP_GEMV_ROUTED=0`.
pub(in crate::backend::hip) fn routed_gemv1(
    route_kernel: &str,
    variant: &str,
    tokens: usize,
    weight_only: bool,
    hidden: usize,
    split: bool,
) -> Option<String> {
    if !routed_gemv1_enabled() {
        return None;
    }
    let nq = route_kernel.strip_prefix("moe_route_lists_w2_")?;
    let ok = variant == "mmab" && tokens == 1 && weight_only && hidden <= ROUTED_GEMV1_MAX_HIDDEN;
    let sfx = if split { "_split" } else { "" };
    ok.then(|| format!("moe_gemv1_mmab_rt_{nq}{sfx}_cb4"))
}

/// Whether a GEMV variant is a matrix-core one (hip/gemv_mma.h, NVIDIA only, tiles of 8 pairs).
pub(in crate::backend::hip) fn gemv_is_mma(variant: &str) -> bool {
    variant.starts_with("mma")
}
pub(in crate::backend::hip) fn gemv_variant() -> Result<&'static str, BackendError> {
    env_variant("MXMOE_HIP_GEMV", &GEMV_VARIANTS)
}

/// Whether NVIDIA devices run the `mma` GEMV when `MXMOE_HIP_GEMV` is unset (AMD: never, it is not
/// built there). Yes since its first H200 run (docs/h200-2026-12-01s5-gemvmma): the whole catalog
/// with the GEMV forced on every MoE case passed (587/0/0) and it beat v3 at 4 to 16 tokens by
/// 1.7-2.5x (gpt-oss-120b 16 tokens 0.525 -> 0.209 ms; DeepSeek-R1 1 token 0.155 -> 0.137,
/// 8 tokens 0.878 -> 0.393); at one gpt-oss token it is within 2 us of v3 (0.058 vs 0.056).
/// Since session 6's closing call the variant is `mmaw` (two 16-row tiles per warp, 80
/// registers, three blocks per multiprocessor): the catalog with it forced on every MoE case
/// passed (587/0/0) and it measured 3-5 % faster than `mma` in the same call (gpt-oss-120b 1 / 4
/// / 16 tokens 0.053 / 0.104 / 0.197 ms vs 0.056 / 0.106 / 0.204; docs/h200-2026-12-01s6-closing).
/// Since session 7 it is `mmab` (bf16 activations; gemv1 `mmao` below 4 tokens): the catalog
/// with mmab forced on every MoE case passed (587/0/0), and on the nv4 layout it measured
/// gpt-oss-120b 4 / 16 tokens 0.099 / 0.172 ms against mmaw's 0.103 / 0.190, DeepSeek-R1 8
/// tokens 0.287 vs 0.312 (docs/h200-2026-12-01s7-nv4; at 1 token its conversion kernel cost
/// what it saved, hence mmao there).
pub(in crate::backend::hip) const GEMV_MMA_DEFAULT: bool = true;
pub(in crate::backend::hip) const GEMV_MMA_DEFAULT_VARIANT: &str = "mmab";

/// The MXFP4 decode GEMV for a device (`nvidia`: the CUDA driver): `MXMOE_HIP_GEMV` when set
/// (`mma` on AMD is an error naming the variable), else the default of the device.
pub(in crate::backend::hip) fn gemv_variant_for(
    nvidia: bool,
) -> Result<&'static str, BackendError> {
    let set = std::env::var("MXMOE_HIP_GEMV").is_ok_and(|v| !v.is_empty());
    let v = gemv_variant()?;
    if !set && nvidia && GEMV_MMA_DEFAULT {
        return Ok(GEMV_MMA_DEFAULT_VARIANT);
    }
    if gemv_is_mma(v) && !nvidia {
        return Err(BackendError::Device(format!(
            "MXMOE_HIP_GEMV={v}: the matrix-core GEMV is built for NVIDIA (mma.sync) only; AMD \
             runs v3, v2, v2c or v1 (docs/ENVIRONMENT.md)"
        )));
    }
    Ok(v)
}

/// Pair rows per tile of the `mma` GEMV (the MMA's N; hip/gemv_mma.h GM_COLS) and its gemv2
/// output rows per block (GM_ROWS; gemv1 blocks: 32 intermediate columns, as every GEMV).
pub(in crate::backend::hip) const GEMV_MMA_TILE: usize = 8;
pub(in crate::backend::hip) const GEMV_MMA_OUT_ROWS: usize = 64;

/// The GEMV's tile height for a variant.
pub(in crate::backend::hip) fn gemv_tile(variant: &str) -> usize {
    if gemv_is_mma(variant) {
        GEMV_MMA_TILE
    } else {
        GEMV_TILE
    }
}

/// The GEMV kernels (gemv1, gemv2) and gemv2's output rows per block for a variant (`v1` for
/// weight formats other than MXFP4), code bits and, for `mma`, whether each stage's activations
/// need a bf16 hi + lo (`split`: unquantized f32 values that are not all bf16 values; where
/// they are, lo is +0 and its MMAs would add nothing, so the hi-only kernel gives the same
/// bits).
pub(in crate::backend::hip) fn gemv_kernels(
    variant: &str,
    cb: u32,
    split: [bool; 2],
) -> (String, String, usize) {
    match variant {
        v if gemv_is_mma(v) => {
            let sfx = |s: bool| if s { "_split" } else { "" };
            (
                format!("moe_gemv1_{v}{}_cb4", sfx(split[0])),
                format!("moe_gemv2_{v}{}_cb4", sfx(split[1])),
                GEMV_MMA_OUT_ROWS,
            )
        }
        "v1" => (
            format!("moe_gemv1_cb{cb}"),
            format!("moe_gemv2_cb{cb}"),
            GEMV_OUT_ROWS,
        ),
        v => (
            format!("moe_gemv1_{v}_cb4"),
            format!("moe_gemv2_{v}_cb4"),
            GEMV2_OUT_ROWS,
        ),
    }
}

/// GEMV while the token-expert pairs are at most this many per local expert (on the H200 the
/// GEMV wins at 0.25 and 0.5 pairs per expert, the matrix-core GEMM at 2;
/// docs/h200-2026-12-01-hip, docs/h200-2026-12-01-hipdecode). `MXMOE_HIP_GEMV_PAIRS` overrides.
pub(in crate::backend::hip) const GEMV_PAIRS_PER_EXPERT: f64 = 1.0;
/// Up to this many tokens the GEMV path sums the top-k slots in gemv2's last blocks instead of
/// a combine kernel (one launch fewer; the last block's share grows with the tokens).
pub(in crate::backend::hip) const FUSED_COMBINE_MAX_TOKENS: usize = 16;

/// The crossover for the matrix-core GEMV (`mma`): 1, as the others: at 2 pairs per
/// expert the mma GEMM is ahead (H200, GEMV forced vs the default: gpt-oss-120b 64 tokens 0.464
/// vs 0.448 ms, DeepSeek-R1 64 tokens 1.259 vs 1.015; docs/h200-2026-12-01s5-gemvmma).
pub(in crate::backend::hip) const GEMV_MMA_PAIRS_PER_EXPERT: f64 = 1.0;

/// The GEMV / GEMM crossover in pairs per local expert (`MXMOE_HIP_GEMV_PAIRS` or the default).
pub(in crate::backend::hip) fn gemv_pairs() -> f64 {
    gemv_pairs_for("v3")
}

/// The crossover for a GEMV variant (`MXMOE_HIP_GEMV_PAIRS` or the variant's default).
pub(in crate::backend::hip) fn gemv_pairs_for(variant: &str) -> f64 {
    std::env::var("MXMOE_HIP_GEMV_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if gemv_is_mma(variant) {
            GEMV_MMA_PAIRS_PER_EXPERT
        } else {
            GEMV_PAIRS_PER_EXPERT
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::hip::kernels;

    /// The routed gemv1 replaces exactly the one-token softmax route kernel before mmab, names
    /// kernels the NVIDIA code object has, and nothing else.
    #[test]
    fn routed_gemv1_where_it_applies() {
        let r = |k: &str, v: &str, t: usize, wo: bool, h: usize, sp: bool| {
            routed_gemv1(k, v, t, wo, h, sp)
        };
        for nq in ["4", "8", "32"] {
            let k = format!("moe_route_lists_w2_{nq}");
            let name = r(&k, "mmab", 1, true, 2880, true).unwrap();
            assert_eq!(name, format!("moe_gemv1_mmab_rt_{nq}_split_cb4"));
            assert!(kernels::NAMES_MMA.contains(&name.as_str()), "{name}");
            let name = r(&k, "mmab", 1, true, 4096, false).unwrap();
            assert!(kernels::NAMES_MMA.contains(&name.as_str()), "{name}");
        }
        let k = "moe_route_lists_w2_4";
        assert_eq!(r(k, "mmab", 2, true, 2880, true), None, "one token only");
        assert_eq!(
            r(k, "mmab", 1, false, 2880, true),
            None,
            "MX activations: input QDQ first"
        );
        assert_eq!(r(k, "mmab", 1, true, 4128, true), None, "shared memory");
        assert_eq!(r(k, "v3", 1, true, 2880, true), None, "mmab only");
        assert_eq!(r(k, "mma", 1, true, 2880, true), None, "mmab only");
        assert_eq!(
            r("moe_route_lists_w2g_8", "mmab", 1, true, 2880, true),
            None,
            "sigmoid"
        );
        assert_eq!(r("moe_route_lists_w3_4", "mmab", 1, true, 2880, true), None);
    }

    /// Every GEMV variant names kernels the code objects have (the mma ones in the NVIDIA list),
    /// with its tile height and gemv2 block rows.
    #[test]
    fn gemv_variants_name_built_kernels() {
        let built = |n: &str| {
            kernels::NAMES.contains(&n)
                || kernels::NAMES_MORE.contains(&n)
                || kernels::NAMES_GEMV_MMA.contains(&n)
        };
        // mmab's gemv1 below MMAB_CONVERT_MIN_TOKENS: mmao, no conversion kernel; its gemv2
        // with 32 rows per block.
        for (v, o) in [("mmab", "_mmao_")] {
            for split in [false, true] {
                let (k1, k2, rows) = gemv_kernels(v, 4, [split, split]);
                for (m, in_route, want) in [
                    (1, false, false),
                    (3, false, false),
                    (4, false, true),
                    (64, false, true),
                    (1, true, true),
                    (3, true, true),
                    (16, true, true),
                ] {
                    let (k, conv) = mmab_gemv1(&k1, m, in_route);
                    assert!(built(&k), "{k}");
                    assert_eq!(conv, want, "{m} tokens");
                    assert_eq!(k.contains(o.trim_end_matches('_')), !want, "{k}");
                    assert_eq!(k == k1, want, "{k}");
                    assert_eq!(k.contains("_split"), split, "{k}");
                }
                let k32 = gemv2_kernel_rows(&k2, v, 32);
                assert!(built(&k32), "{k32}");
                assert_eq!(k32, k2.replace(v, &format!("{v}32")));
                assert_eq!(gemv2_kernel_rows(&k2, v, rows), k2);
            }
        }
        assert_eq!(
            gemv2_kernel_rows("moe_gemv2_v3_cb4", "v3", 32),
            "moe_gemv2_v3_cb4"
        );
        for v in GEMV_VARIANTS {
            for split in [[false, false], [true, true], [false, true], [true, false]] {
                let (k1, k2, rows) = gemv_kernels(v, 4, split);
                assert!(built(&k1) && built(&k2), "{v}: {k1}, {k2}");
                assert!(k1.starts_with("moe_gemv1") && k2.starts_with("moe_gemv2"));
                assert_eq!(
                    k1.contains("_split"),
                    v.starts_with("mma") && split[0],
                    "{k1}"
                );
                assert_eq!(
                    k2.contains("_split"),
                    v.starts_with("mma") && split[1],
                    "{k2}"
                );
                assert_eq!(
                    rows,
                    if v == "v1" || v.starts_with("mma") {
                        64
                    } else {
                        32
                    }
                );
            }
            assert_eq!(gemv_tile(v), if v.starts_with("mma") { 8 } else { 4 });
        }
        for cb in [6, 8] {
            let (k1, k2, _) = gemv_kernels("v1", cb, [true, true]);
            assert!(built(&k1) && built(&k2), "{k1}, {k2}");
        }
        assert!(kernels::NAMES_GEMV_MMA.iter().all(|n| n.contains("_mma")));
    }

    #[test]
    fn gemv2_rows_halve_below_two_waves() {
        if std::env::var("MXMOE_HIP_GEMV2_ROWS").is_ok() {
            return; // the override decides (tested by the catalog runs that set it)
        }
        // gpt-oss-120b (hidden 2880: 45 column blocks of 64 rows) on 132 multiprocessors (two
        // waves: 792 blocks): one token (4 tile slots) 180 blocks -> 32 rows, 4 tokens (16
        // slots) 720 -> 32, 16 tokens (64 slots) 2880 -> 64; 17 slots: 765 -> 32, 18: 810 -> 64.
        assert_eq!(gemv2_rows("mmab", 64, 4, 2880, 132).unwrap(), 32);
        assert_eq!(gemv2_rows("mmab", 64, 16, 2880, 132).unwrap(), 32);
        assert_eq!(gemv2_rows("mmab", 64, 17, 2880, 132).unwrap(), 32);
        assert_eq!(gemv2_rows("mmab", 64, 18, 2880, 132).unwrap(), 64);
        assert_eq!(gemv2_rows("mmab", 64, 64, 2880, 132).unwrap(), 64);
        // DeepSeek-R1, one token: 8 slots x 112 = 896 blocks.
        assert_eq!(gemv2_rows("mmab", 64, 8, 7168, 132).unwrap(), 64);
        // Unknown multiprocessor count: the H200's.
        assert_eq!(gemv2_rows("mmab", 64, 4, 2880, 0).unwrap(), 32);
        // Variants without 32-row kernels keep their rows.
        assert_eq!(gemv2_rows("v3", 32, 4, 2880, 132).unwrap(), 32);
        assert_eq!(gemv2_rows("mmaw", 64, 4, 2880, 132).unwrap(), 64);
    }

    #[test]
    fn gemv1_four_blocks_beyond_a_wave() {
        let hi = "moe_gemv1_mmab_cb4";
        // DeepSeek-R1 (inter 2048: 64 column blocks): one token 8 slots = 512 blocks > 396.
        assert_eq!(gemv1_occupancy(hi, 8, 2048, 132), "moe_gemv1_mmab4_cb4");
        assert_eq!(gemv1_occupancy(hi, 64, 2048, 132), "moe_gemv1_mmab4_cb4");
        // gpt-oss-120b (inter 2880: 90) with bf16 hidden states, one token: 360 <= 396.
        assert_eq!(gemv1_occupancy(hi, 4, 2880, 132), hi);
        assert_eq!(gemv1_occupancy(hi, 5, 2880, 132), "moe_gemv1_mmab4_cb4"); // 450
        assert_eq!(gemv1_occupancy(hi, 4, 2880, 0), hi);
        // Only the hi-only mmab gemv1 has a four-block kernel.
        for k in [
            "moe_gemv1_mmab_split_cb4",
            "moe_gemv1_mmao_cb4",
            "moe_gemv1_v3_cb4",
        ] {
            assert_eq!(gemv1_occupancy(k, 64, 2048, 132), k);
        }
        assert!(kernels::NAMES_GEMV_MMA.contains(&"moe_gemv1_mmab4_cb4"));
    }
}
