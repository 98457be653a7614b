//! The kernel binaries build.rs compiled from `hip/mxmoe.cu`, embedded, and the choice of the
//! one that serves a device.

/// PTX for NVIDIA compute capability 9.x and up (NUL-terminated for cuModuleLoadData).
pub static PTX_SM90: &[u8] = concat!(include_str!(concat!(env!("OUT_DIR"), "/mxmoe_sm90.ptx")), "\0").as_bytes();
/// PTX for compute capability 8.x (Ampere, Ada).
pub static PTX_SM80: &[u8] = concat!(include_str!(concat!(env!("OUT_DIR"), "/mxmoe_sm80.ptx")), "\0").as_bytes();
/// The gfx942 code object (MI300X, MI300A, MI325X).
pub static GFX942: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mxmoe_gfx942.hsaco"));
/// The gfx950 code object (MI350X, MI355X).
pub static GFX950: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mxmoe_gfx950.hsaco"));
/// Which compiler built each target (build.rs), one line per target.
pub static BUILT_WITH: &str = include_str!(concat!(env!("OUT_DIR"), "/mxmoe_hip_built.txt"));

/// Every code object: (target name, bytes).
pub fn all() -> [(&'static str, &'static [u8]); 4] {
    [("sm_90 PTX", PTX_SM90), ("sm_80 PTX", PTX_SM80), ("gfx942", GFX942), ("gfx950", GFX950)]
}

/// The code object for a device architecture ("sm_90", "gfx942", ...): its name and bytes, or
/// why none serves it.
pub fn for_arch(arch: &str) -> Result<(&'static str, &'static [u8]), String> {
    if let Some(cc) = arch.strip_prefix("sm_") {
        let cc: u32 = cc.parse().map_err(|_| format!("unknown NVIDIA architecture {arch}"))?;
        return match cc {
            90.. => Ok(("sm_90 PTX", PTX_SM90)),
            80..=89 => Ok(("sm_80 PTX", PTX_SM80)),
            _ => Err(format!(
                "no code object for {arch}: the kernels use bf16 mma.sync (sm_80 and newer); \
                 built: sm_80 and sm_90 PTX, gfx942, gfx950"
            )),
        };
    }
    match arch {
        "gfx942" => Ok(("gfx942", GFX942)),
        "gfx950" => Ok(("gfx950", GFX950)),
        _ => Err(format!(
            "no code object for {arch} (built: gfx942, gfx950, sm_80 and sm_90 PTX); add the \
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
/// The GEMV kernels of 8-bit codes (FP8, INT8).
pub const NAMES_MORE: [&str; 3] = ["moe_gemv1_cb8", "moe_gemv2_cb8", "moe_combine"];

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
