//! Which HIP kernels a forward runs, and their shapes: tile heights, the GEMV/GEMM crossover,
//! the decode fusions, the GEMM, GEMV and route versions, and the `MXMOE_HIP_*` knobs that
//! override them (docs/ENVIRONMENT.md). Out of the files that launch what this decides
//! (`moe.rs`, `single_ops.rs`, `layer.rs`), one file per kernel family and one for the weights'
//! code layout, each with its unit tests:
//!
//! * `route`: routing and the expert lists (`MXMOE_HIP_ROUTE`, `MXMOE_HIP_FUSED_ROUTE`): the
//!   route plan (fused or separate kernels), the router shapes v6's warp kernels take, the
//!   kernels' limits ([`MAX_EXPERTS`], [`MAX_TOP_K`], [`MAX_GROUPS`]).
//! * `gemv`: the decode GEMV (`MXMOE_HIP_GEMV`, `MXMOE_HIP_GEMV2_ROWS`): its variants, kernel
//!   names, tiles and occupancy, and the GEMV / GEMM crossover (`MXMOE_HIP_GEMV_PAIRS`).
//! * `gemm`: the prefill GEMM (`MXMOE_HIP_GEMM`, `MXMOE_HIP_GEMM_TM`, `MXMOE_HIP_MMA_VARIANT`):
//!   v1 / v2 / mma, their tiles and block sizes.
//! * `layout`: the MXFP4 code layout a layer is uploaded in (nv4 or stored) and the check that a
//!   forward's kernels decode it.
//!
//! About 40 % of the lines are the long doc comments that keep each default's H200 measurement
//! beside it; what the callers use is re-exported here ([`env_variant`] is the knob parser
//! shared by the variant knobs).

mod gemm;
mod gemv;
mod layout;
mod route;

use crate::backend::BackendError;

pub(super) use gemm::*;
pub(super) use gemv::*;
pub(super) use layout::*;
pub(super) use route::*;
pub use route::{MAX_EXPERTS, MAX_GROUPS, MAX_TOP_K};

/// The value of the knob `name` among `allowed` (the first is the default, taken when the
/// variable is unset or empty); anything else is an error naming the variable and the choices.
pub(in crate::backend::hip) fn env_variant(
    name: &str,
    allowed: &[&'static str],
) -> Result<&'static str, BackendError> {
    let v = std::env::var(name).unwrap_or_default();
    if v.is_empty() {
        return Ok(allowed[0]);
    }
    allowed.iter().copied().find(|a| *a == v).ok_or_else(|| {
        BackendError::Device(format!(
            "{name}={v}: expected one of {} (docs/ENVIRONMENT.md)",
            allowed.join(", ")
        ))
    })
}
