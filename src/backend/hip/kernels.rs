//! The kernel binaries build.rs compiled from `hip/mxmoe.cu`, embedded, and the choice of the
//! one that serves a device.
//!
//! The tests on the embedded code objects (PTX, AMD disassembly, the CPU emulations) are
//! `kernels/tests.rs`; those on the SASS that ptxas makes of the PTX, `kernels/sass_tests.rs`.

/// PTX for NVIDIA compute capability 9.0 (H100, H200), built for `sm_90a` so that it can hold
/// the wgmma GEMMs ([`NAMES_WGMMA`]); arch-specific PTX runs on 9.0 only (NUL-terminated for
/// cuModuleLoadData).
pub static PTX_SM90: &[u8] = concat!(
    include_str!(concat!(env!("OUT_DIR"), "/mxmoe_sm90.ptx")),
    "\0"
)
.as_bytes();
/// PTX for compute capability 8.x (Ampere, Ada) and for 10.x and newer (the sm_90a PTX does not
/// run there; PTX of an older target is compiled forward by the driver).
pub static PTX_SM80: &[u8] = concat!(
    include_str!(concat!(env!("OUT_DIR"), "/mxmoe_sm80.ptx")),
    "\0"
)
.as_bytes();
/// The gfx942 code object (MI300X, MI300A, MI325X).
pub static GFX942: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mxmoe_gfx942.hsaco"));
/// The gfx950 code object (MI350X, MI355X).
pub static GFX950: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mxmoe_gfx950.hsaco"));
/// Which compiler built each target (build.rs), one line per target.
pub static BUILT_WITH: &str = include_str!(concat!(env!("OUT_DIR"), "/mxmoe_hip_built.txt"));

/// Every code object: (target name, bytes).
pub fn all() -> [(&'static str, &'static [u8]); 4] {
    [
        ("sm_90a PTX", PTX_SM90),
        ("sm_80 PTX", PTX_SM80),
        ("gfx942", GFX942),
        ("gfx950", GFX950),
    ]
}

/// The code object for a device architecture ("sm_90", "gfx942", ...): its name and bytes, or
/// why none serves it.
pub fn for_arch(arch: &str) -> Result<(&'static str, &'static [u8]), String> {
    if let Some(cc) = arch.strip_prefix("sm_") {
        let cc: u32 = cc
            .parse()
            .map_err(|_| format!("unknown NVIDIA architecture {arch}"))?;
        return match cc {
            90 => Ok(("sm_90a PTX", PTX_SM90)),
            80.. => Ok(("sm_80 PTX", PTX_SM80)),
            _ => Err(format!(
                "no code object for {arch}: the kernels use bf16 mma.sync (sm_80 and newer); \
                 built: sm_80 and sm_90a PTX, gfx942, gfx950"
            )),
        };
    }
    match arch {
        "gfx942" => Ok(("gfx942", GFX942)),
        "gfx950" => Ok(("gfx950", GFX950)),
        _ => Err(format!(
            "no code object for {arch} (built: gfx942, gfx950, sm_80 and sm_90a PTX); add the \
             target to build.rs"
        )),
    }
}

/// Every kernel of hip/mxmoe.cu (the gfx950-only scaled-MFMA GEMM is resolved separately).
pub const NAMES: [&str; 22] = [
    "mx_quantize",
    "mx_dequantize",
    "mx_qdq",
    "mx_route",
    "mx_to_bf16",
    "moe_lists",
    "moe_gemm1_cb4",
    "moe_gemm2_cb4",
    "moe_gemm1_split_cb4",
    "moe_gemm2_split_cb4",
    "moe_gemm1_cb6",
    "moe_gemm2_cb6",
    "moe_gemm1_split_cb6",
    "moe_gemm2_split_cb6",
    "moe_gemm1_cb8",
    "moe_gemm2_cb8",
    "moe_gemm1_split_cb8",
    "moe_gemm2_split_cb8",
    "moe_gemv1_cb4",
    "moe_gemv2_cb4",
    "moe_gemv1_cb6",
    "moe_gemv2_cb6",
];
/// The GEMV kernels of 8-bit codes (FP8, INT8), the combine, decode's fused route + lists, the
/// MoE input QDQ, the v2 decode kernels (`MXMOE_HIP_GEMV`, `MXMOE_HIP_ROUTE`) and v6's warp
/// routing (hip/route_warp.h).
pub const NAMES_MORE: [&str; 33] = [
    "mx_qdq_lanes",
    "moe_gemv1_cb8",
    "moe_gemv2_cb8",
    "moe_combine",
    "moe_route_lists",
    "moe_gemv1_v2_cb4",
    "moe_gemv2_v2_cb4",
    "moe_gemv1_v2c_cb4",
    "moe_gemv2_v2c_cb4",
    "moe_gemv1_v3_cb4",
    "moe_gemv2_v3_cb4",
    "mx_route_v2",
    "moe_lists_v2",
    "moe_route_lists_v2",
    "mx_route_v3",
    "moe_route_lists_v3",
    "moe_route_lists_w1",
    "mx_route_v4",
    "moe_route_lists_v4",
    "moe_route_lists_w1g",
    "moe_route_lists_w2_4",
    "moe_route_lists_w2_8",
    "moe_route_lists_w2_32",
    "mx_route_w_4",
    "mx_route_w_8",
    "mx_route_w_32",
    "moe_route_lists_w3_4",
    "moe_route_lists_w3_8",
    "moe_route_lists_w3_32",
    "moe_route_lists_w2g_8",
    "moe_route_lists_w2g_32",
    "mx_route_wg_8",
    "mx_route_wg_32",
];

/// NVIDIA only (sm_80 / sm_90a PTX): the matrix-core decode GEMV (`MXMOE_HIP_GEMV=mma`, the
/// default there; hip/gemv_mma.h), `moe_gemv{1,2}_mma[_split]_cb4` (`_split`: f32 activations as
/// bf16 hi + lo), `mmaw`'s (`MXMOE_HIP_GEMV=mmaw`: two 16-row tiles per warp) and `mmab`'s
/// (`MXMOE_HIP_GEMV=mmab`: mmaw on bf16 activations from mx_to_bf16_p8; its gemv1 of one to three
/// tokens `mmao`: f32 activations in, bf16 out), mmab's gemv2 with 32 output rows per block
/// (`moe_gemv2_mmab32`: grids of less than two waves) and its hi-only gemv1 at four blocks per
/// multiprocessor (`moe_gemv1_mmab4_cb4`: grids beyond one wave of three).
pub const NAMES_GEMV_MMA: [&str; 17] = [
    "moe_gemv1_mma_cb4",
    "moe_gemv2_mma_cb4",
    "moe_gemv1_mma_split_cb4",
    "moe_gemv2_mma_split_cb4",
    "moe_gemv1_mmaw_cb4",
    "moe_gemv2_mmaw_cb4",
    "moe_gemv1_mmaw_split_cb4",
    "moe_gemv2_mmaw_split_cb4",
    "moe_gemv1_mmab_cb4",
    "moe_gemv2_mmab_cb4",
    "moe_gemv1_mmab_split_cb4",
    "moe_gemv2_mmab_split_cb4",
    "moe_gemv1_mmao_cb4",
    "moe_gemv1_mmao_split_cb4",
    "moe_gemv2_mmab32_cb4",
    "moe_gemv2_mmab32_split_cb4",
    "moe_gemv1_mmab4_cb4",
];

/// NVIDIA only (sm_80 / sm_90a PTX): the v2 grouped GEMM (`MXMOE_HIP_GEMM=v2`, docs/hip-gemm-v2.md),
/// `moe_gemm{1,2}_v2_t<pair rows>[_split]_cb<code bits>`.
pub const NAMES_V2: [&str; 36] = [
    "moe_gemm1_v2_t64_cb4",
    "moe_gemm2_v2_t64_cb4",
    "moe_gemm1_v2_t64_split_cb4",
    "moe_gemm2_v2_t64_split_cb4",
    "moe_gemm1_v2_t64_cb6",
    "moe_gemm2_v2_t64_cb6",
    "moe_gemm1_v2_t64_split_cb6",
    "moe_gemm2_v2_t64_split_cb6",
    "moe_gemm1_v2_t64_cb8",
    "moe_gemm2_v2_t64_cb8",
    "moe_gemm1_v2_t64_split_cb8",
    "moe_gemm2_v2_t64_split_cb8",
    "moe_gemm1_v2_t32_cb4",
    "moe_gemm2_v2_t32_cb4",
    "moe_gemm1_v2_t32_split_cb4",
    "moe_gemm2_v2_t32_split_cb4",
    "moe_gemm1_v2_t32_cb6",
    "moe_gemm2_v2_t32_cb6",
    "moe_gemm1_v2_t32_split_cb6",
    "moe_gemm2_v2_t32_split_cb6",
    "moe_gemm1_v2_t32_cb8",
    "moe_gemm2_v2_t32_cb8",
    "moe_gemm1_v2_t32_split_cb8",
    "moe_gemm2_v2_t32_split_cb8",
    "moe_gemm1_v2_t16_cb4",
    "moe_gemm2_v2_t16_cb4",
    "moe_gemm1_v2_t16_split_cb4",
    "moe_gemm2_v2_t16_split_cb4",
    "moe_gemm1_v2_t16_cb6",
    "moe_gemm2_v2_t16_cb6",
    "moe_gemm1_v2_t16_split_cb6",
    "moe_gemm2_v2_t16_split_cb6",
    "moe_gemm1_v2_t16_cb8",
    "moe_gemm2_v2_t16_cb8",
    "moe_gemm1_v2_t16_split_cb8",
    "moe_gemm2_v2_t16_split_cb8",
];

/// The v2 GEMM's pair-row tiles (hip/gemm_v2.h GEMM_V2_KERNELS); the mma GEMM has the same.
pub const V2_TILES: [usize; 3] = [16, 32, 64];

/// NVIDIA only: the swap-AB GEMM on register-decoded MXFP4 weights (`MXMOE_HIP_GEMM=mma`,
/// hip/gemm_mma.h, docs/hip-gemm-mma.md), `moe_gemm{1,2}_mma_t<pair cols>[_split]_cb4`, and the
/// conversion to bf16 in the order its B fragments take (`mx_to_bf16_p8`), and the rearrangement
/// of a layer's MXFP4 codes into the layout the matrix-core kernels decode (`mx_nv4_repack`,
/// hip/nv4.h; with the rows in the order the kernels' lanes load them, `mx_nv4_rows`), and v6's
/// warp routing with that conversion of the hidden states folded in
/// (`mx_route_wx_<nq>`; the fused few-token route + lists with the conversion in blocks of
/// their own, `moe_route_lists_w2x_<nq>` / `w3x`), the input QDQ writing that layout
/// (`mx_qdq_lanes_p8`), and mmab's gemv1 routing one token itself (`moe_gemv1_mmab_rt_<nq>`).
pub const NAMES_MMA: [&str; 43] = [
    "moe_gemm1_mma_t64_cb4",
    "moe_gemm2_mma_t64_cb4",
    "moe_gemm1_mma_t64_split_cb4",
    "moe_gemm2_mma_t64_split_cb4",
    "moe_gemm1_mma_t32_cb4",
    "moe_gemm2_mma_t32_cb4",
    "moe_gemm1_mma_t32_split_cb4",
    "moe_gemm2_mma_t32_split_cb4",
    "moe_gemm1_mma_t16_cb4",
    "moe_gemm2_mma_t16_cb4",
    "moe_gemm1_mma_t16_split_cb4",
    "moe_gemm2_mma_t16_split_cb4",
    "moe_gemm1_mma_t64_v0_cb4",
    "moe_gemm2_mma_t64_v0_cb4",
    "moe_gemm1_mma_t64_split_v0_cb4",
    "moe_gemm2_mma_t64_split_v0_cb4",
    "moe_gemm1_mma_t32_v0_cb4",
    "moe_gemm2_mma_t32_v0_cb4",
    "moe_gemm1_mma_t32_split_v0_cb4",
    "moe_gemm2_mma_t32_split_v0_cb4",
    "moe_gemm1_mma_t16_v0_cb4",
    "moe_gemm2_mma_t16_v0_cb4",
    "moe_gemm1_mma_t16_split_v0_cb4",
    "moe_gemm2_mma_t16_split_v0_cb4",
    "mx_to_bf16_p8",
    "mx_nv4_repack",
    "mx_nv4_rows",
    "mx_route_wx_4",
    "mx_route_wx_8",
    "mx_route_wx_32",
    "moe_route_lists_w2x_4",
    "moe_route_lists_w2x_8",
    "moe_route_lists_w2x_32",
    "moe_route_lists_w3x_4",
    "moe_route_lists_w3x_8",
    "moe_route_lists_w3x_32",
    "mx_qdq_lanes_p8",
    "moe_gemv1_mmab_rt_4_cb4",
    "moe_gemv1_mmab_rt_4_split_cb4",
    "moe_gemv1_mmab_rt_8_cb4",
    "moe_gemv1_mmab_rt_8_split_cb4",
    "moe_gemv1_mmab_rt_32_cb4",
    "moe_gemv1_mmab_rt_32_split_cb4",
];

/// sm_90a only (the H100 / H200 PTX): the mma GEMM on wgmma.mma_async (hip/gemm_wgmma.h,
/// `MXMOE_HIP_MMA_VARIANT=wg256`), `moe_gemm{1,2}_mma_t<pair cols>[_split]_wg256_cb4` (blocks
/// of 256 weight rows and 512 threads), the same on activations in the c16 order copied by
/// cp.async (`wg256c`), and the conversion of gemm1's activations into that order
/// (`mx_p8_to_c16`).
pub const NAMES_WGMMA: [&str; 25] = [
    "moe_gemm1_mma_t64_wg256_cb4",
    "moe_gemm2_mma_t64_wg256_cb4",
    "moe_gemm1_mma_t64_split_wg256_cb4",
    "moe_gemm2_mma_t64_split_wg256_cb4",
    "moe_gemm1_mma_t32_wg256_cb4",
    "moe_gemm2_mma_t32_wg256_cb4",
    "moe_gemm1_mma_t32_split_wg256_cb4",
    "moe_gemm2_mma_t32_split_wg256_cb4",
    "moe_gemm1_mma_t16_wg256_cb4",
    "moe_gemm2_mma_t16_wg256_cb4",
    "moe_gemm1_mma_t16_split_wg256_cb4",
    "moe_gemm2_mma_t16_split_wg256_cb4",
    "moe_gemm1_mma_t64_wg256c_cb4",
    "moe_gemm2_mma_t64_wg256c_cb4",
    "moe_gemm1_mma_t64_split_wg256c_cb4",
    "moe_gemm2_mma_t64_split_wg256c_cb4",
    "moe_gemm1_mma_t32_wg256c_cb4",
    "moe_gemm2_mma_t32_wg256c_cb4",
    "moe_gemm1_mma_t32_split_wg256c_cb4",
    "moe_gemm2_mma_t32_split_wg256c_cb4",
    "moe_gemm1_mma_t16_wg256c_cb4",
    "moe_gemm2_mma_t16_wg256c_cb4",
    "moe_gemm1_mma_t16_split_wg256c_cb4",
    "moe_gemm2_mma_t16_split_wg256c_cb4",
    "mx_p8_to_c16",
];

/// The dynamic shared memory (bytes) a v2 or mma GEMM launch must give: the PTX constant
/// `moe_gemm_v2_t<tm>[_split]_cb<cb>_smem` (`moe_gemm_mma_...`) of `ptx` (hip/gemm_v2.h and
/// hip/gemm_mma.h compute the layouts; the kernels stop on a launch with less). `kernel` is a
/// GEMM name of [`NAMES_V2`] or [`NAMES_MMA`].
pub fn v2_smem(ptx: &[u8], kernel: &str) -> Option<u32> {
    let (ver, rest) = ["_v2_", "_mma_"]
        .iter()
        .find_map(|v| kernel.split_once(v).map(|(_, r)| (*v, r)))?;
    let key = format!("moe_gemm{ver}{rest}_smem = ");
    let text = std::str::from_utf8(ptx).ok()?;
    let at = text.find(&key)? + key.len();
    text[at..].split(';').next()?.trim().parse().ok()
}

/// gfx950 only: the scaled-MFMA GEMMs on MX operands, `moe_gemm{1,2}_mx_<weight>_<activation>`
/// for the OCP MX schemes whose activations are MX floats.
pub const NAMES_GFX950: [&str; 14] = [
    "moe_gemm1_mx_fp4_fp4",
    "moe_gemm2_mx_fp4_fp4",
    "moe_gemm1_mx_fp4_fp6e3m2",
    "moe_gemm2_mx_fp4_fp6e3m2",
    "moe_gemm1_mx_fp4_fp6e2m3",
    "moe_gemm2_mx_fp4_fp6e2m3",
    "moe_gemm1_mx_fp6e3m2_fp6e3m2",
    "moe_gemm2_mx_fp6e3m2_fp6e3m2",
    "moe_gemm1_mx_fp6e2m3_fp6e2m3",
    "moe_gemm2_mx_fp6e2m3_fp6e2m3",
    "moe_gemm1_mx_fp8e4m3_fp8e4m3",
    "moe_gemm2_mx_fp8e4m3_fp8e4m3",
    "moe_gemm1_mx_fp8e5m2_fp8e5m2",
    "moe_gemm2_mx_fp8e5m2_fp8e5m2",
];

/// The short name of an MX float format in the scaled-MFMA kernel names (None: MXINT8, which
/// the scaled MFMA does not take).
pub fn mx_name(f: crate::format::MxFormat) -> Option<&'static str> {
    use crate::format::MxFormat::*;
    Some(match f {
        Fp4E2M1 => "fp4",
        Fp6E3M2 => "fp6e3m2",
        Fp6E2M3 => "fp6e2m3",
        Fp8E4M3 => "fp8e4m3",
        Fp8E5M2 => "fp8e5m2",
        Int8 => return None,
    })
}

#[cfg(test)]
mod sass_tests;
#[cfg(test)]
mod tests;
