//! The HIP backend: one kernel source set in HIP C++ (`hip/`), compiled ahead of time by
//! build.rs (feature `hip`) to PTX for NVIDIA GPUs and to gfx942 / gfx950 code objects for AMD
//! Instinct MI300 / MI350, embedded in the library and loaded at run time through the vendor's
//! driver library (`libamdhip64.so` of ROCm 5/6/7, or the CUDA driver `libcuda.so.1`), opened
//! with `libloading` (docs/ARCHITECTURE.md says why not `hip-sys`).
//!
//! * [`header`]: `hip/mx_formats.h`, generated from the format table (always compiled: its test
//!   checks the checked-in header).
//! * `driver` (feature `hip`): the driver API, one table of function pointers over HIP's module
//!   API or the CUDA driver API (they map one to one).
//! * `kernels` (feature `hip`): the embedded binaries, the kernel names they hold and the code
//!   object that serves a device.
//! * The host side of every op (feature `hip`), each file with its own `impl HipBackend`: `real`
//!   ([`HipBackend`] itself: device and code object, `supports`, `notes`, the launch helpers),
//!   `single_ops` (quantize, dequantize, QDQ, routing on their own), `layer` ([`HipLayer`]: a
//!   layer's weights uploaded once), `moe` (the MoE forward's launch sequence; `moe_experts` its
//!   expert stage: GEMV, MX GEMM, bf16 GEMM; `host_profile` times its host phases).
//! * `choice` (feature `hip`): which kernels and shapes those run, per op family (route, GEMV,
//!   GEMM, code layout), and the `MXMOE_HIP_*` knobs that override them.
//!
//! Without the feature, [`HipBackend::new`] says "not compiled in"; with it but without a driver
//! or device it says which of the two is missing (or that no code object serves the GPU's
//! architecture), and every catalog case reports SKIPPED with that reason.

pub mod header;

#[cfg(feature = "hip")]
mod choice;
#[cfg(feature = "hip")]
mod driver;
#[cfg(feature = "hip")]
mod host_profile;
#[cfg(feature = "hip")]
mod kernels;
#[cfg(feature = "hip")]
mod layer;
#[cfg(all(test, feature = "hip"))]
mod mma_layout;
#[cfg(feature = "hip")]
mod moe;
#[cfg(feature = "hip")]
mod moe_experts;
#[cfg(feature = "hip")]
mod real;
#[cfg(feature = "hip")]
mod single_ops;
#[cfg(feature = "hip")]
pub use layer::HipLayer;
#[cfg(feature = "hip")]
pub use real::*;

#[cfg(not(feature = "hip"))]
mod stub;
#[cfg(not(feature = "hip"))]
pub use stub::*;
