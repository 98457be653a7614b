//! The wgpu backend (WGSL compute shaders). PLACEHOLDER until the wgpu issue lands: reports
//! that no adapter is available.

use super::{BackendError, Op};
use crate::format::{MxFormat, MxTensor, ScaleMode};
use crate::moe::{MoeLayer, MoeOptions, MoeOutput, RouterConfig, Routing};

#[derive(Debug)]
pub struct WgpuBackend {
    _private: (),
}

fn none() -> BackendError {
    BackendError::NoAdapter(" (the wgpu backend is not built yet)".into())
}

impl WgpuBackend {
    pub fn new(_adapter: Option<&str>) -> Result<Self, BackendError> {
        Err(none())
    }
    pub fn adapter(&self) -> String {
        String::new()
    }
    pub fn supports(&self, _op: &Op) -> bool {
        false
    }
    pub fn quantize(
        &self,
        _: MxFormat,
        _: ScaleMode,
        _: &[f32],
        _: &[usize],
    ) -> Result<MxTensor, BackendError> {
        Err(none())
    }
    pub fn dequantize(&self, _: &MxTensor) -> Result<Vec<f32>, BackendError> {
        Err(none())
    }
    pub fn qdq(
        &self,
        _: MxFormat,
        _: ScaleMode,
        _: &[f32],
        _: usize,
    ) -> Result<Vec<f32>, BackendError> {
        Err(none())
    }
    pub fn route(
        &self,
        _: &RouterConfig,
        _: &[f32],
        _: usize,
        _: Option<&[f32]>,
    ) -> Result<Routing, BackendError> {
        Err(none())
    }
    pub fn moe(
        &self,
        _: &MoeLayer,
        _: &[f32],
        _: &[f32],
        _: MoeOptions,
    ) -> Result<MoeOutput, BackendError> {
        Err(none())
    }
}
