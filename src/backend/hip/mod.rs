//! The HIP backend (native AMD MI300 / gfx942 kernels) lives behind the `hip` feature. Without
//! it (and, for now, with it: no HIP kernels have landed yet) this stub of the same shape
//! reports `NotCompiled`, so the registry and test runner carry no `cfg` in their match arms.

use super::{BackendError, Op};
use crate::format::{MxFormat, MxTensor, ScaleMode};
use crate::moe::{MoeLayer, MoeOptions, MoeOutput, RouterConfig, Routing};

#[derive(Debug)]
pub struct HipBackend {
    _private: (),
}

impl HipBackend {
    pub fn new() -> Result<Self, BackendError> {
        Err(BackendError::NotCompiled("hip"))
    }
    pub fn adapter(&self) -> String {
        "hip (not compiled)".into()
    }
    pub fn supports(&self, op: &Op) -> bool {
        match op {
            Op::Quantize { .. }
            | Op::Dequantize { .. }
            | Op::Qdq { .. }
            | Op::Route { .. }
            | Op::MoeForward { .. } => false,
        }
    }
    pub fn quantize(
        &self,
        _: MxFormat,
        _: ScaleMode,
        _: &[f32],
        _: &[usize],
    ) -> Result<MxTensor, BackendError> {
        Err(BackendError::NotCompiled("hip"))
    }
    pub fn dequantize(&self, _: &MxTensor) -> Result<Vec<f32>, BackendError> {
        Err(BackendError::NotCompiled("hip"))
    }
    pub fn qdq(
        &self,
        _: MxFormat,
        _: ScaleMode,
        _: &[f32],
        _: usize,
    ) -> Result<Vec<f32>, BackendError> {
        Err(BackendError::NotCompiled("hip"))
    }
    pub fn route(
        &self,
        _: &RouterConfig,
        _: &[f32],
        _: usize,
        _: Option<&[f32]>,
    ) -> Result<Routing, BackendError> {
        Err(BackendError::NotCompiled("hip"))
    }
    pub fn moe(
        &self,
        _: &MoeLayer,
        _: &[f32],
        _: &[f32],
        _: MoeOptions,
    ) -> Result<MoeOutput, BackendError> {
        Err(BackendError::NotCompiled("hip"))
    }
}
