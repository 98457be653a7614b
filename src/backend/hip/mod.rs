//! The HIP backend (native AMD MI300 / gfx942 kernels) lives behind the `hip` feature. Without
//! it (and, for now, with it: no HIP kernels have landed yet) this stub of the same shape
//! reports `NotCompiled`, so the registry and test runner carry no `cfg` in their match arms.

use super::{BackendError, Op, Support};
use crate::format::{MxFormat, MxTensor, ScaleMode};
use crate::moe::{MoeConfig, MoeLayer, MoeOptions, MoeOutput, RouterConfig, Routing};

#[derive(Debug)]
pub struct HipBackend {
    _private: (),
}

/// A layer prepared on the HIP backend (none can be made until the kernels land).
#[derive(Debug)]
pub struct HipLayer {
    config: MoeConfig,
    correction_bias: bool,
}

impl HipLayer {
    pub fn config(&self) -> &MoeConfig {
        &self.config
    }
    pub fn has_correction_bias(&self) -> bool {
        self.correction_bias
    }
}

fn not_compiled<T>() -> Result<T, BackendError> {
    Err(BackendError::NotCompiled("hip"))
}

impl HipBackend {
    pub fn new() -> Result<Self, BackendError> {
        not_compiled()
    }
    pub fn adapter(&self) -> String {
        "hip (not compiled)".into()
    }
    pub fn supports(&self, op: &Op) -> Support {
        match op {
            Op::Quantize { .. }
            | Op::Dequantize { .. }
            | Op::Qdq { .. }
            | Op::Route { .. }
            | Op::MoeForward { .. } => Support::Unsupported {
                reason: "the HIP kernels are not built yet".into(),
            },
        }
    }
    pub fn quantize(
        &self,
        _: MxFormat,
        _: ScaleMode,
        _: &[f32],
        _: &[usize],
    ) -> Result<MxTensor, BackendError> {
        not_compiled()
    }
    pub fn dequantize(&self, _: &MxTensor) -> Result<Vec<f32>, BackendError> {
        not_compiled()
    }
    pub fn qdq(
        &self,
        _: MxFormat,
        _: ScaleMode,
        _: &[f32],
        _: usize,
    ) -> Result<Vec<f32>, BackendError> {
        not_compiled()
    }
    pub fn route(
        &self,
        _: &RouterConfig,
        _: &[f32],
        _: usize,
        _: Option<&[f32]>,
    ) -> Result<Routing, BackendError> {
        not_compiled()
    }
    pub fn prepare(&self, _: &MoeLayer) -> Result<HipLayer, BackendError> {
        not_compiled()
    }
    pub fn moe(
        &self,
        _: &HipLayer,
        _: &[f32],
        _: &[f32],
        _: MoeOptions,
    ) -> Result<MoeOutput, BackendError> {
        not_compiled()
    }
}
