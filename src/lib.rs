//! mxmoe: a portable, exact and fast reference for OCP MX-quantized Mixture-of-Experts inference.
//!
//! * [`format`]: MX element formats, E8M0 scales, scale modes, packing, [`format::MxTensor`].
//! * [`scheme`]: the OCP MX MoE schemes (weight format, activation format).

pub mod backend;
pub mod bench;
pub mod check;
pub mod format;
pub mod io;
pub mod moe;
pub mod scheme;
