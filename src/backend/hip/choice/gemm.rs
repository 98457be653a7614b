//! The prefill GEMM: which bf16 grouped GEMM runs (`MXMOE_HIP_GEMM`: v1, v2, mma or auto), its
//! tile heights (`MXMOE_HIP_GEMM_TM`), its mma variants (`MXMOE_HIP_MMA_VARIANT`) and its
//! block sizes. The kernels: hip/gemm_v1.h (v1), hip/gemm_v2.h (v2), hip/gemm_mma.h (mma); docs/hip-gemm-v2.md,
//! docs/hip-gemm-mma.md.

use crate::backend::hip::kernels;
use crate::backend::BackendError;

/// Rows per tile of the GEMM (hip/gemm_v1.h GT_M; the GEMV's: `GEMV_TILE`).
pub(in crate::backend::hip) const GEMM_TILE: usize = 64;

/// The bf16 matrix-core GEMM's tile (hip/gemm_v1.h): GEMM_TILE pair rows x GEMM_N weight rows,
/// which in stage 1 are the gate and up rows of GEMM_N / 2 intermediate columns.
pub(in crate::backend::hip) const GEMM_N: usize = 128;
/// Threads per v2 GEMM block (hip/gemm_v2.h V2_THREADS: 4 warps, one weight row of the 128 each);
/// its column blocks are GEMM_N wide, as v1's.
pub(in crate::backend::hip) const V2_THREADS: u32 = 128;

/// A launch's `block` argument of `moe`'s `run`: `threads` per block and `shared` bytes of
/// dynamic shared memory.
pub(in crate::backend::hip) fn with_shared(threads: u32, shared: u32) -> u64 {
    threads as u64 | (shared as u64) << 32
}

/// Threads per GEMM block (hip/gemm_v1.h GEMM_THREADS): 4 warps (NVIDIA, 32 lanes) or 4
/// wavefronts (AMD, 64 lanes).
pub(in crate::backend::hip) fn gemm_threads(arch: &str) -> u32 {
    if arch.starts_with("gfx") {
        256
    } else {
        128
    }
}

/// Which bf16 grouped GEMM runs the prefill (`MXMOE_HIP_GEMM`): v1 (`moe_gemm{1,2}[_split]_cb*`),
/// v2 (`moe_gemm{1,2}_v2_t*`, NVIDIA only, docs/hip-gemm-v2.md), mma (`moe_gemm{1,2}_mma_t*`:
/// swap AB, MXFP4 weights decoded in registers, NVIDIA only, docs/hip-gemm-mma.md; other weight
/// formats run what auto picks) or auto (the default: v2 where it was measured faster, see
/// [`auto_uses_v2`], v1 elsewhere and wherever v2 is not built).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::hip) enum GemmVersion {
    Auto,
    V1,
    V2,
    Mma,
}

pub(in crate::backend::hip) fn gemm_version() -> Result<GemmVersion, BackendError> {
    match std::env::var("MXMOE_HIP_GEMM").as_deref() {
        Err(_) | Ok("") | Ok("auto") => Ok(GemmVersion::Auto),
        Ok("v1") => Ok(GemmVersion::V1),
        Ok("v2") => Ok(GemmVersion::V2),
        Ok("mma") => Ok(GemmVersion::Mma),
        Ok(v) => Err(BackendError::Device(format!(
            "MXMOE_HIP_GEMM={v}: expected auto, v1, v2 or mma (docs/ENVIRONMENT.md)"
        ))),
    }
}

/// The largest mean token-expert pairs per local expert for which `MXMOE_HIP_GEMM=auto` takes
/// v2 (with its 16-row tiles). Measured on the H200 (docs/h200-2026-12-01-v2): at 2 pairs per
/// expert v2 is 21-22 % faster than v1 (gpt-oss-120b 64 tokens 0.859 vs 1.088 ms GPU,
/// DeepSeek-R1 64 tokens 2.04 vs 2.62); at 8 and more it is slower (gpt-oss 256 tokens 1.93 vs
/// 1.84, DeepSeek 512 tokens 8.10 vs 6.06, both 2048-token runs 16-24 % slower).
pub(in crate::backend::hip) const AUTO_V2_MAX_MEAN_PAIRS: usize = 4;

/// Whether `auto` runs v2 for `pairs` token-expert pairs over `experts` local experts.
pub(in crate::backend::hip) fn auto_uses_v2(pairs: usize, experts: usize) -> bool {
    pairs.div_ceil(experts.max(1)) <= AUTO_V2_MAX_MEAN_PAIRS
}

/// Threads per mma GEMM block (hip/gemm_mma.h MM_THREADS: 8 warps of 16 weight rows); its column
/// blocks are GEMM_N = 128 weight rows wide, as v1's.
pub(in crate::backend::hip) const MMA_THREADS: u32 = 256;

/// The mma GEMM's kernel variants (`MXMOE_HIP_MMA_VARIANT`, hip/gemm_mma.h `V`): `""` (the
/// default: pair groups without guards where a warp's columns all hold pairs and the tile is
/// not a split 32 / 64-pair one, and split tiles whose activations are all bf16-representable
/// skip the lo MMAs), `v0` (session 5's kernel, for comparisons) and `wg256` (the same GEMM on
/// Hopper's wgmma.mma_async on blocks of 256 weight rows and 512 threads, [`mma_block_rows`];
/// hip/gemm_wgmma.h: sm_90a PTX only, so compute capability 9.0), `wg256c` (`wg256` on
/// activations in the c16 order, [`mma_takes_c16`], copied to shared memory by cp.async as they
/// are: no register staging; written in session 13 without device time, checked on the CPU
/// emulation only, not measured yet).
pub(in crate::backend::hip) const MMA_VARIANTS: [&str; 4] = ["", "v0", "wg256", "wg256c"];

/// Whether mma variant `variant` reads its activations in the c16 order (hip/gemv_epilogue.h
/// c16_pos; gemm1's converted by `mx_p8_to_c16`, gemm2's written so by gemm1) rather than in
/// mx_to_bf16_p8's.
pub(in crate::backend::hip) fn mma_takes_c16(variant: &str) -> bool {
    variant == "wg256c"
}

/// Weight rows per block of mma variant `variant` (the grid's x covers the weight rows in blocks
/// of this many; threads = 2 x rows): 256 for `wg256` and `wg256c`, else 128 (`GEMM_N`).
pub(in crate::backend::hip) fn mma_block_rows(variant: &str) -> usize {
    if variant.starts_with("wg256") {
        256
    } else {
        128
    }
}

/// The mma GEMM variant `MXMOE_HIP_MMA_VARIANT` asks for (one of [`MMA_VARIANTS`]; unset or
/// empty: the default).
pub(in crate::backend::hip) fn mma_variant() -> Result<&'static str, BackendError> {
    let v = std::env::var("MXMOE_HIP_MMA_VARIANT").unwrap_or_default();
    MMA_VARIANTS
        .iter()
        .find(|n| **n == v)
        .copied()
        .ok_or_else(|| {
            BackendError::Device(format!(
                "MXMOE_HIP_MMA_VARIANT={v}: expected v0, wg256 or wg256c (or unset: the default; \
                 docs/ENVIRONMENT.md)"
            ))
        })
}

/// The smallest K (the stage's reduction length) at which a 64-pair mma stage runs `wg256` on
/// compute capability 9.0. Measured on the H100 (docs/h100-2026-12-06s12-wgmma, one call,
/// alternating rounds), GPU ms per stage at 64 pairs per expert, mma vs wg256: gpt-oss-120b
/// (K = 2880) gemm1 2.539 vs 2.453, gemm2 1.328 vs 1.302, with bf16 activations 2.292 vs 1.962
/// and 1.213 vs 1.027; DeepSeek-R1 gemm1 (K = 7168) 4.904 vs 4.799, gemm2 (K = 2048) 3.302 vs
/// 3.604. At 16-pair tiles wg256 lost everywhere (gpt-oss 256 tokens 0.966 vs 1.19 ms).
pub(in crate::backend::hip) const WG256_MIN_K: usize = 2560;

/// The mma variant a stage runs: `MXMOE_HIP_MMA_VARIANT` when set; else, on compute
/// capability 9.0 (`wgmma`), `wg256` for 64-pair tiles of a stage whose K is at least
/// [`WG256_MIN_K`]; else session 5's kernel (`v0`)
/// for split (hi + lo) tiles of 32 or 64 pairs unless the forward's activations are bf16 values
/// (`bf16_acts`: bf16 intermediates, Intermediate::Bf16), the default otherwise. On the H200 the
/// default's lo-skip check made the split 64-pair kernels 14 % slower on f32 activations
/// (gpt-oss 2048 tokens: gemm1 2.95 vs 2.59 ms, gemm2 1.58 vs 1.40; session 6's closing call,
/// docs/h200-2026-12-01s6-closing), while it is faster on 16-pair tiles (gpt-oss 256 tokens
/// 0.973 vs 0.999 ms) and, with bf16 activations, skips half the MMAs (2048 tokens 3.64 ms).
pub(in crate::backend::hip) fn mma_variant_for(
    split: bool,
    tile_m: usize,
    bf16_acts: bool,
    k: usize,
    wgmma: bool,
) -> Result<&'static str, BackendError> {
    if std::env::var("MXMOE_HIP_MMA_VARIANT").is_ok_and(|v| !v.is_empty()) {
        return mma_variant();
    }
    Ok(if wgmma && tile_m == 64 && k >= WG256_MIN_K {
        "wg256"
    } else if split && tile_m >= 32 && !bf16_acts {
        "v0"
    } else {
        ""
    })
}

/// The kernel-name suffix of mma variant `variant`.
pub(in crate::backend::hip) fn mma_suffix(variant: &str) -> String {
    match variant {
        "" => String::new(),
        v => format!("_{v}"),
    }
}

/// Whether `auto` runs the mma GEMM (MXFP4 weights, NVIDIA) for `pairs` token-expert pairs over
/// `experts` local experts: wherever the GEMM runs. Measured on the H200
/// (docs/h200-2026-12-01s5-hipgemm3; the same 585-case catalog passed with it, also with the
/// GEMM forced at every size), GPU ms mma vs the previous auto: gpt-oss-120b 64 / 256 / 2048
/// tokens (2 / 8 / 64 pairs per expert) 0.449 / 0.997 / 4.122 vs 0.848 / 1.818 / 5.091,
/// DeepSeek-R1 64 / 512 tokens (2 / 16) 1.030 / 3.882 vs 2.030 / 6.007. Not measured: below 2
/// pairs per expert (the GEMV runs there unless `MXMOE_HIP_GEMV_PAIRS` says otherwise) and
/// DeepSeek-R1 at 2048 tokens (its bench ran out of the call's time; gpt-oss at the same 64
/// pairs per expert is 1.24x faster).
pub(in crate::backend::hip) fn auto_uses_mma(pairs: usize, experts: usize) -> bool {
    let _ = (pairs, experts);
    true
}

/// The v2 GEMM's pair rows per tile for `pairs` token-expert pairs over `experts` local experts:
/// the narrowest tile (16, 32, 64) that holds the mean pairs per expert, so that a few pairs per
/// expert do not stream mostly zero rows through the matrix cores. `MXMOE_HIP_GEMM_TM`
/// (16, 32 or 64) forces one (measurements).
pub(in crate::backend::hip) fn v2_tile_m(
    pairs: usize,
    experts: usize,
) -> Result<usize, BackendError> {
    if let Ok(v) = std::env::var("MXMOE_HIP_GEMM_TM") {
        return match v.parse::<usize>() {
            Ok(t) if kernels::V2_TILES.contains(&t) => Ok(t),
            _ => Err(BackendError::Device(format!(
                "MXMOE_HIP_GEMM_TM={v}: expected one of {:?}",
                kernels::V2_TILES
            ))),
        };
    }
    Ok(v2_tile_for(pairs, experts))
}

/// The default of [`v2_tile_m`]: the narrowest of 16, 32, 64 that holds the mean pairs per
/// expert (rounded up), 64 beyond.
pub(in crate::backend::hip) fn v2_tile_for(pairs: usize, experts: usize) -> usize {
    let mean = pairs.div_ceil(experts.max(1));
    kernels::V2_TILES
        .iter()
        .copied()
        .find(|&t| mean <= t)
        .unwrap_or(64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The v2 tile for the bench shapes (pairs = tokens x top-k over the experts, by hand) and
    /// the edges.
    #[test]
    fn v2_tile_follows_the_pairs_per_expert() {
        // gpt-oss-120b (128 experts, top-4): 64, 256, 2048 tokens = 2, 8, 64 pairs per expert.
        assert_eq!(v2_tile_for(256, 128), 16);
        assert_eq!(v2_tile_for(1024, 128), 16);
        assert_eq!(v2_tile_for(8192, 128), 64);
        // DeepSeek-R1 (256 experts, top-8): 512 and 2048 tokens = 16 and 64 pairs per expert.
        assert_eq!(v2_tile_for(4096, 256), 16);
        assert_eq!(v2_tile_for(16384, 256), 64);
        // 17 and 33 pairs per expert (rounded up) move to the next tile; beyond 64 stays 64.
        assert_eq!(v2_tile_for(16 * 128 + 1, 128), 32);
        assert_eq!(v2_tile_for(32 * 128 + 1, 128), 64);
        assert_eq!(v2_tile_for(1 << 20, 8), 64);
        assert_eq!(v2_tile_for(0, 0), 16);
        // every mma variant names kernels of every tile (the NVIDIA list)
        for v in MMA_VARIANTS {
            for tm in kernels::V2_TILES {
                for split in ["", "_split"] {
                    let sfx = mma_suffix(v);
                    for k in [1, 2] {
                        let n = format!("moe_gemm{k}_mma_t{tm}{split}{sfx}_cb4");
                        let list: &[&str] = if v.starts_with("wg") {
                            &kernels::NAMES_WGMMA
                        } else {
                            &kernels::NAMES_MMA
                        };
                        assert!(list.contains(&n.as_str()), "{n}");
                    }
                }
            }
        }
        assert_eq!(mma_suffix(""), "");
        assert_eq!(mma_suffix("v0"), "_v0");
        assert_eq!(mma_suffix("wg256"), "_wg256");
        assert_eq!(mma_suffix("wg256c"), "_wg256c");
        assert_eq!(
            (
                mma_block_rows("wg256"),
                mma_block_rows("wg256c"),
                mma_block_rows("v0"),
                mma_block_rows("")
            ),
            (256, 256, 128, 128)
        );
        // only wg256c reads the c16 order (its gemm1 input converted, gemm2's written so)
        let c16: Vec<&str> = MMA_VARIANTS
            .into_iter()
            .filter(|v| mma_takes_c16(v))
            .collect();
        assert_eq!(c16, ["wg256c"]);
        // the default per stage (MXMOE_HIP_MMA_VARIANT unset in tests): wg256 on compute
        // capability 9.0 for 64-pair tiles of K >= 2560, else v0 only for split 32 / 64-pair
        // tiles of f32 activations
        if std::env::var("MXMOE_HIP_MMA_VARIANT").is_err() {
            for (split, tm, bf16, k, wgmma, want) in [
                (true, 64, false, 2880, false, "v0"),
                (true, 32, false, 2880, true, "v0"),
                (true, 16, false, 2880, true, ""),
                (true, 64, true, 2880, false, ""),
                (false, 64, false, 7168, false, ""),
                // compute capability 9.0: wg256 for 64-pair tiles of long stages
                (true, 64, false, 2880, true, "wg256"),
                (true, 64, true, 2880, true, "wg256"),
                (false, 64, false, 7168, true, "wg256"),
                (false, 64, false, 2048, true, ""),
                (true, 64, false, 2048, true, "v0"),
            ] {
                assert_eq!(
                    mma_variant_for(split, tm, bf16, k, wgmma).unwrap(),
                    want,
                    "{split} {tm} {bf16} {k} {wgmma}"
                );
            }
        }
        // auto, MXFP4 weights: the mma GEMM at every measured size
        assert!(auto_uses_mma(256, 128) && auto_uses_mma(8192, 128) && auto_uses_mma(4096, 256));
        // auto, other weights: v2 at the measured 2 pairs per expert, v1 at 8 and more
        assert!(auto_uses_v2(256, 128) && auto_uses_v2(512, 256) && auto_uses_v2(512, 128));
        assert!(!auto_uses_v2(1024, 128) && !auto_uses_v2(4096, 256) && !auto_uses_v2(513, 128));
    }

    #[test]
    fn with_shared_keeps_both_halves() {
        let b = with_shared(V2_THREADS, 116_736);
        assert_eq!((b as u32, (b >> 32) as u32), (128, 116_736));
        assert_eq!(with_shared(256, 0), 256);
    }
}
