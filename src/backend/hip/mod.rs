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
//! * `kernels` / `ops` (feature `hip`): the embedded binaries and the host side of every op.
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
mod kernels;
#[cfg(all(test, feature = "hip"))]
mod mma_layout;
#[cfg(feature = "hip")]
mod real;
#[cfg(feature = "hip")]
pub use real::*;

#[cfg(not(feature = "hip"))]
mod stub;
#[cfg(not(feature = "hip"))]
pub use stub::*;
