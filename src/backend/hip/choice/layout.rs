//! The layout of a layer's MXFP4 code words on the device: nv4 (hip/nv4.h, for the
//! matrix-core GEMV and GEMM on NVIDIA) or as stored, chosen once when the layer is uploaded
//! (`nv4_layout`, `layer.rs`), the GEMV a layer of either layout runs (`gemv_variant_for_layer`),
//! and the check that a forward's kernels decode the layer's layout (`check_layout`).

use super::gemm::{gemm_version, GemmVersion};
use super::gemv::{gemv_is_mma, gemv_variant_for};
use crate::backend::BackendError;

/// Whether a layer's MXFP4 code words go to the device in the nv4 layout (hip/nv4.h, rearranged
/// once by `mx_nv4_repack`): on NVIDIA, for 4-bit codes, when every kernel that may run on them
/// decodes nv4, i.e. the GEMV is a matrix-core one (`MXMOE_HIP_GEMV` unset or mma*) and the
/// GEMM is the mma one (`MXMOE_HIP_GEMM` auto or mma, its module loaded). Measured as ~11 logic
/// instructions per code word against ~16 (see hip/nv4.h). A layer prepared one way runs only
/// with kernels of its layout (`check_layout`).
pub(in crate::backend::hip) fn nv4_layout(
    nvidia: bool,
    code_bits: u32,
    mma_gemm: bool,
) -> Result<bool, BackendError> {
    if !nvidia || code_bits != 4 {
        return Ok(false);
    }
    let gemv = gemv_variant_for(true)?;
    let gemm = gemm_version()?;
    let set = std::env::var("MXMOE_HIP_GEMV").is_ok_and(|v| !v.is_empty());
    if let Some(why) = knob_conflict(gemv, set, gemm) {
        return Err(BackendError::Device(why));
    }
    Ok(mma_gemm && gemv_is_mma(gemv) && matches!(gemm, GemmVersion::Auto | GemmVersion::Mma))
}

/// Whether an nv4 layer's blocks go up in the rows order (hip/nv4.h `Nv4Rows`: each 16-row
/// group's 4-block steps contiguous, in the order the matrix-core GEMV's and GEMM's lanes load
/// them, so that a warp's 16-byte load reads 512 consecutive bytes instead of 8 rows x 64, and
/// its scale load 32 instead of 8 x 4), copied by `mx_nv4_rows` at upload:
/// `MXMOE_HIP_NV4_ROWS` = `0` (the default: the stored row order) or `1`. Not measured yet on
/// a GPU (written in session 13 without device time; the CPU emulation checks it); the default
/// stays the stored order until a device measures the two.
pub(in crate::backend::hip) fn nv4_rows() -> Result<bool, BackendError> {
    Ok(super::env_variant("MXMOE_HIP_NV4_ROWS", &["0", "1"])? == "1")
}

/// Knobs that ask for kernels of both layouts, refused when the layer is prepared rather than
/// at its first forward: an mma* GEMV named by `MXMOE_HIP_GEMV` (`set`) decodes only nv4 words,
/// which `MXMOE_HIP_GEMM=v1` / `v2` never prepare.
fn knob_conflict(gemv: &str, set: bool, gemm: GemmVersion) -> Option<String> {
    let g = match gemm {
        GemmVersion::V1 => "v1",
        GemmVersion::V2 => "v2",
        GemmVersion::Auto | GemmVersion::Mma => return None,
    };
    (set && gemv_is_mma(gemv)).then(|| {
        format!(
            "MXMOE_HIP_GEMV={gemv} decodes MXFP4 weights in the matrix-core (nv4) layout, which \
             only the mma GEMM shares, but MXMOE_HIP_GEMM={g} decodes them as stored: unset one \
             of the two (docs/ENVIRONMENT.md)"
        )
    })
}

/// The MXFP4 GEMV for a prepared layer: `gemv_variant_for`, except that a layer in the stored
/// layout (`nv4` false: e.g. an NVIDIA device whose mma GEMM module did not load, as when a GPU
/// offers less shared memory per block than its kernels ask) runs v3 where a matrix-core GEMV
/// is only the default; one that `MXMOE_HIP_GEMV` sets stays, and `check_layout` refuses it.
pub(in crate::backend::hip) fn gemv_variant_for_layer(
    nvidia: bool,
    nv4: bool,
) -> Result<&'static str, BackendError> {
    let v = gemv_variant_for(nvidia)?;
    let set = std::env::var("MXMOE_HIP_GEMV").is_ok_and(|v| !v.is_empty());
    Ok(if gemv_is_mma(v) && !nv4 && !set {
        "v3"
    } else {
        v
    })
}

/// A forward's kernels against the layer's code layout (`nv4`: prepared for the matrix-core
/// kernels): the mma GEMV and GEMM decode only nv4 words, the others only stored ones.
pub(in crate::backend::hip) fn check_layout(
    nv4: bool,
    mma_kernels: bool,
) -> Result<(), BackendError> {
    if nv4 == mma_kernels {
        return Ok(());
    }
    Err(BackendError::Device(format!(
        "this layer's MXFP4 codes were uploaded in the {} layout, but this forward runs {} \
         kernels: either MXMOE_HIP_GEMV / MXMOE_HIP_GEMM changed after the layer was prepared \
         (prepare it again with the same settings), or they ask for kernels of both layouts (a \
         matrix-core GEMV decodes only nv4 words, which only MXMOE_HIP_GEMM=auto or mma \
         prepares; docs/ENVIRONMENT.md)",
        if nv4 { "matrix-core (nv4)" } else { "stored" },
        if mma_kernels { "matrix-core" } else { "other" }
    )))
}

#[cfg(test)]
mod tests {
    use super::super::gemv::GEMV_MMA_DEFAULT_VARIANT;
    use super::*;

    #[test]
    fn stored_layout_layers_fall_back_to_v3() {
        if std::env::var("MXMOE_HIP_GEMV").is_ok_and(|v| !v.is_empty()) {
            eprintln!("SKIPPED: MXMOE_HIP_GEMV is set");
            return;
        }
        assert_eq!(
            gemv_variant_for_layer(true, true).unwrap(),
            GEMV_MMA_DEFAULT_VARIANT
        );
        assert_eq!(gemv_variant_for_layer(true, false).unwrap(), "v3");
        assert_eq!(gemv_variant_for_layer(false, false).unwrap(), "v3");
        assert!(check_layout(true, false).is_err() && check_layout(false, true).is_err());
        assert!(check_layout(true, true).is_ok() && check_layout(false, false).is_ok());
        assert!(knob_conflict("mmaw", true, GemmVersion::V2).is_some());
        assert!(knob_conflict("mmab", true, GemmVersion::V1).is_some());
        assert!(knob_conflict("mmaw", false, GemmVersion::V2).is_none()); // the default, not named
        assert!(knob_conflict("v3", true, GemmVersion::V2).is_none());
        assert!(knob_conflict("mmaw", true, GemmVersion::Mma).is_none());
        let why = knob_conflict("mmaw", true, GemmVersion::V2).unwrap();
        assert!(
            why.contains("MXMOE_HIP_GEMM=v2") && !why.contains("  "),
            "{why}"
        );
        let msg = check_layout(true, false).unwrap_err().to_string();
        assert!(
            msg.contains("matrix-core (nv4) layout") && !msg.contains("  "),
            "{msg}"
        );
    }
}
