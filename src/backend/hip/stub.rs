//! The HIP backend without the `hip` feature: a stub of the same shape that reports
//! `NotCompiled`, so the registry and test runner carry no `cfg` in their match arms.

use crate::backend::{BackendError, Op, PassTimes, Support, Timing};
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
                reason: "not compiled in (rebuild with --features hip)".into(),
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
        _timing: Timing,
    ) -> Result<(MoeOutput, Option<PassTimes>), BackendError> {
        not_compiled()
    }
    pub fn set_poison(&self, _: bool) {}
    pub fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    pub fn copy_bandwidth(
        &self,
        _bytes: usize,
        _warm: usize,
        _reps: usize,
    ) -> Result<Option<Vec<f64>>, BackendError> {
        Ok(None)
    }
}

/// A device the HIP backend could run on (`mxmoe info`); none without the feature.
#[derive(Clone, Debug)]
pub struct HipDeviceInfo {
    pub name: String,
    pub arch: String,
    pub memory_gib: f64,
    pub library: String,
    pub code_object: Result<&'static str, String>,
}

/// Without the feature: `NotCompiled`.
pub fn devices() -> Result<Vec<HipDeviceInfo>, BackendError> {
    not_compiled()
}

/// Without the feature: nothing was built.
pub fn built_with() -> &'static str {
    ""
}

/// Without the feature: no code objects.
pub fn code_objects() -> [(&'static str, &'static [u8]); 0] {
    []
}
