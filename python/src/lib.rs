//! `mxmoe._mxmoe`: the native half of the `mxmoe` Python package (PyO3, abi3, CPython >= 3.9).
//!
//! The public API is `python/mxmoe/__init__.py`: it turns NumPy arrays, PyTorch CPU tensors and
//! other array-likes into contiguous native-endian buffers, checks dtypes and shapes (naming the
//! argument), and calls the functions here with `bytes` plus shapes. This side parses names,
//! runs the library with the GIL released (`Python::detach`) and maps every library error to a
//! Python exception carrying its message: nothing panics across the boundary.
//!
//! Arrays cross as `bytes` (in) and `bytearray` (out, so NumPy views of them are writable)
//! because the buffer protocol is only in the limited API from Python 3.11 on, and this module
//! is built for the 3.9 stable ABI.

use mxmoe::backend::{Backend, BackendError, BackendKind};
use mxmoe::format::{FormatError, MxFormat, MxTensor, ProfileError, ProfileId, ScaleMode};
use mxmoe::io::IoError;
use mxmoe::moe::{Accumulate, Intermediate, MoeError, MoeOptions};
use mxmoe::scheme::Scheme;
use pyo3::exceptions::{
    PyFileNotFoundError, PyMemoryError, PyNotImplementedError, PyOSError, PyRuntimeError,
    PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict, PyList};
use std::sync::{Arc, Mutex};

mod layer;
mod verify;

pub use layer::Layer;

// ---------------------------------------------------------------------------------------------
// Errors: every library error becomes a Python exception with the library's message.

pub(crate) fn err_format(e: FormatError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

pub(crate) fn err_moe(e: MoeError) -> PyErr {
    match e {
        MoeError::Format(f) => err_format(f),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// Backend errors: an op a backend cannot run is `NotImplementedError` (the library's
/// UNSUPPORTED), a missing or failing device `RuntimeError`, device memory `MemoryError`, bad
/// inputs `ValueError`.
pub(crate) fn err_backend(e: BackendError) -> PyErr {
    let msg = e.to_string();
    match e {
        BackendError::Unsupported { .. } => PyNotImplementedError::new_err(msg),
        BackendError::OutOfMemory(_) => PyMemoryError::new_err(msg),
        BackendError::Moe(m) => err_moe(m),
        BackendError::Format(f) => err_format(f),
        _ => PyRuntimeError::new_err(msg),
    }
}

/// I/O errors: a missing file is `FileNotFoundError`, other OS errors `OSError`, a file that is
/// not what was expected (corrupt, missing tensor, wrong dtype or shape) `ValueError`.
pub(crate) fn err_io(e: IoError) -> PyErr {
    let msg = e.to_string();
    match &e {
        IoError::Os { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(msg)
        }
        IoError::Os { .. } => PyOSError::new_err(msg),
        _ => PyValueError::new_err(msg),
    }
}

/// Errors raised inside a GIL-free section, turned into Python exceptions after it.
pub(crate) enum Failure {
    Value(String),
    Backend(BackendError),
    Moe(MoeError),
}

impl From<BackendError> for Failure {
    fn from(e: BackendError) -> Self {
        Failure::Backend(e)
    }
}
impl From<MoeError> for Failure {
    fn from(e: MoeError) -> Self {
        Failure::Moe(e)
    }
}
impl From<FormatError> for Failure {
    fn from(e: FormatError) -> Self {
        Failure::Moe(MoeError::Format(e))
    }
}
impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        match f {
            Failure::Value(m) => PyValueError::new_err(m),
            Failure::Backend(e) => err_backend(e),
            Failure::Moe(e) => err_moe(e),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Names.

pub(crate) fn parse_format(s: &str) -> PyResult<MxFormat> {
    s.parse().map_err(err_format)
}

pub(crate) fn parse_mode(s: &str) -> PyResult<ScaleMode> {
    s.parse().map_err(err_format)
}

pub(crate) fn parse_scheme(s: &str) -> PyResult<Scheme> {
    s.parse()
        .map_err(|e: mxmoe::scheme::UnknownScheme| PyValueError::new_err(e.to_string()))
}

fn parse_backend(s: &str) -> PyResult<BackendKind> {
    s.parse().map_err(|e: String| PyValueError::new_err(e))
}

// ---------------------------------------------------------------------------------------------
// Buffers.

/// Native-endian f32 values from the bytes the Python side sent (copied: `bytes` gives no
/// alignment guarantee).
pub(crate) fn f32s(b: &[u8], what: &str) -> Result<Vec<f32>, Failure> {
    if !b.len().is_multiple_of(4) {
        return Err(Failure::Value(format!(
            "{what}: {} bytes is not a whole number of float32 values",
            b.len()
        )));
    }
    Ok(bytemuck::pod_collect_to_vec(b))
}

pub(crate) fn i32s(b: &[u8], what: &str) -> Result<Vec<i32>, Failure> {
    if !b.len().is_multiple_of(4) {
        return Err(Failure::Value(format!(
            "{what}: {} bytes is not a whole number of int32 values",
            b.len()
        )));
    }
    Ok(bytemuck::pod_collect_to_vec(b))
}

pub(crate) fn out_f32<'py>(py: Python<'py>, v: &[f32]) -> Bound<'py, PyByteArray> {
    PyByteArray::new(py, bytemuck::cast_slice(v))
}

pub(crate) fn out_i32<'py>(py: Python<'py>, v: &[i32]) -> Bound<'py, PyByteArray> {
    PyByteArray::new(py, bytemuck::cast_slice(v))
}

// ---------------------------------------------------------------------------------------------
// Backends: the CPU is free to open; wgpu devices are opened once per adapter filter and kept
// (a `WgpuBackend` is `Send + Sync` and shares its context), so repeated calls do not pay for
// device creation and shader compilation again.

type Cached = Mutex<Vec<(Option<String>, Arc<Backend>)>>;
static WGPU: Cached = Mutex::new(Vec::new());

fn open_wgpu(adapter: Option<&str>) -> Result<Arc<Backend>, BackendError> {
    let key = adapter.map(str::to_owned);
    let mut cache = WGPU.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, b)) = cache.iter().find(|(k, _)| *k == key) {
        return Ok(b.clone());
    }
    let b = Arc::new(Backend::open(BackendKind::Wgpu, adapter)?);
    cache.push((key, b.clone()));
    Ok(b)
}

pub(crate) fn open_backend(
    kind: BackendKind,
    adapter: Option<&str>,
) -> Result<Arc<Backend>, BackendError> {
    match kind {
        BackendKind::Cpu => Ok(Arc::new(Backend::open(BackendKind::Cpu, None)?)),
        BackendKind::Wgpu => open_wgpu(adapter),
        BackendKind::Hip => Ok(Arc::new(Backend::open(BackendKind::Hip, adapter)?)),
        BackendKind::Auto => match open_wgpu(adapter) {
            Ok(b) => Ok(b),
            Err(_) => Ok(Arc::new(Backend::open(BackendKind::Cpu, None)?)),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Formats.

/// `(canonical name, code bits, packed bytes per 32-block)` of a format name or alias.
#[pyfunction]
fn format_spec(format: &str) -> PyResult<(String, u32, usize)> {
    let f = parse_format(format)?;
    let s = f.spec();
    Ok((s.name.to_string(), s.code_bits, s.block_bytes()))
}

/// `(canonical name, weight format, activation format or None)` of a scheme name.
#[pyfunction]
fn scheme_spec(scheme: &str) -> PyResult<(String, String, Option<String>)> {
    let s = parse_scheme(scheme)?;
    Ok((
        s.name(),
        s.weight.name().to_string(),
        s.activation.map(|a| a.name().to_string()),
    ))
}

/// Canonical scale-mode name (raises on an unknown one).
#[pyfunction]
fn scale_mode_name(scale_mode: &str) -> PyResult<&'static str> {
    Ok(parse_mode(scale_mode)?.name())
}

/// A profile name (`contract` by default), and the scale mode: the one given, or (empty) the
/// profile's own. A non-default profile runs on the CPU reference only.
fn profile_and_mode(
    profile: &str,
    scale_mode: &str,
    kind: BackendKind,
) -> PyResult<(ProfileId, ScaleMode)> {
    let p: ProfileId = profile
        .parse()
        .map_err(|e: ProfileError| PyValueError::new_err(e.to_string()))?;
    if p != ProfileId::Contract && kind != BackendKind::Cpu {
        return Err(PyValueError::new_err(format!(
            "profile {p} reproduces {} and runs on the CPU reference only (backend='cpu')",
            p.spec().peer
        )));
    }
    let mode = match scale_mode {
        "" => p.spec().default_mode,
        m => parse_mode(m)?,
    };
    Ok((p, mode))
}

fn profile_err(e: ProfileError) -> Failure {
    Failure::Value(e.to_string())
}

/// Quantize `data` (f32, row-major `shape`): `(packed, scales)` as bytearrays.
#[pyfunction]
#[pyo3(signature = (data, shape, format, scale_mode, backend, adapter=None, profile="contract"))]
#[allow(clippy::too_many_arguments)]
fn quantize<'py>(
    py: Python<'py>,
    data: &[u8],
    shape: Vec<usize>,
    format: &str,
    scale_mode: &str,
    backend: &str,
    adapter: Option<&str>,
    profile: &str,
) -> PyResult<(Bound<'py, PyByteArray>, Bound<'py, PyByteArray>)> {
    let (fmt, kind) = (parse_format(format)?, parse_backend(backend)?);
    let (prof, mode) = profile_and_mode(profile, scale_mode, kind)?;
    let t = py.detach(|| -> Result<MxTensor, Failure> {
        let x = f32s(data, "x")?;
        if prof != ProfileId::Contract {
            return prof
                .spec()
                .quantize(fmt, mode, &x, &shape)
                .map_err(profile_err);
        }
        let b = open_backend(kind, adapter)?;
        Ok(b.quantize(fmt, mode, &x, &shape)?)
    })?;
    Ok((
        PyByteArray::new(py, &t.data),
        PyByteArray::new(py, &t.scales),
    ))
}

/// Dequantize packed codes + E8M0 scales of logical `shape`: f32 bytes.
#[pyfunction]
#[pyo3(signature = (packed, scales, shape, format, backend, adapter=None, profile="contract"))]
#[allow(clippy::too_many_arguments)]
fn dequantize<'py>(
    py: Python<'py>,
    packed: &[u8],
    scales: &[u8],
    shape: Vec<usize>,
    format: &str,
    backend: &str,
    adapter: Option<&str>,
    profile: &str,
) -> PyResult<Bound<'py, PyByteArray>> {
    let (fmt, kind) = (parse_format(format)?, parse_backend(backend)?);
    let (prof, _) = profile_and_mode(profile, "", kind)?;
    let v = py.detach(|| -> Result<Vec<f32>, Failure> {
        let t = MxTensor::new(fmt, shape, packed.to_vec(), scales.to_vec())?;
        if prof != ProfileId::Contract {
            return Ok(prof.spec().dequantize(&t));
        }
        let b = open_backend(kind, adapter)?;
        Ok(b.dequantize(&t)?)
    })?;
    Ok(out_f32(py, &v))
}

/// QDQ `data` (f32 rows of `k`): f32 bytes.
#[pyfunction]
#[pyo3(signature = (data, k, format, scale_mode, backend, adapter=None, profile="contract"))]
#[allow(clippy::too_many_arguments)]
fn qdq<'py>(
    py: Python<'py>,
    data: &[u8],
    k: usize,
    format: &str,
    scale_mode: &str,
    backend: &str,
    adapter: Option<&str>,
    profile: &str,
) -> PyResult<Bound<'py, PyByteArray>> {
    let (fmt, kind) = (parse_format(format)?, parse_backend(backend)?);
    let (prof, mode) = profile_and_mode(profile, scale_mode, kind)?;
    let v = py.detach(|| -> Result<Vec<f32>, Failure> {
        let x = f32s(data, "x")?;
        if prof != ProfileId::Contract {
            return prof.spec().qdq_slice(fmt, mode, &x, k).map_err(profile_err);
        }
        let b = open_backend(kind, adapter)?;
        Ok(b.qdq(fmt, mode, &x, k)?)
    })?;
    Ok(out_f32(py, &v))
}

// ---------------------------------------------------------------------------------------------
// MoE.

/// One forward: `(output f32 bytes, topk_ids i32 bytes, topk_weights f32 bytes, top_k)`.
#[pyfunction]
#[pyo3(signature = (layer, hidden, logits, backend, accumulate, intermediate, adapter=None, profile="contract"))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn moe<'py>(
    py: Python<'py>,
    layer: &Bound<'py, Layer>,
    hidden: &[u8],
    logits: &[u8],
    backend: &str,
    accumulate: &str,
    intermediate: &str,
    adapter: Option<&str>,
    profile: &str,
) -> PyResult<(
    Bound<'py, PyByteArray>,
    Bound<'py, PyByteArray>,
    Bound<'py, PyByteArray>,
    usize,
)> {
    let kind = parse_backend(backend)?;
    let (prof, default_mode) = profile_and_mode(profile, "", kind)?;
    let opts = MoeOptions {
        accumulate: accumulate.parse::<Accumulate>().map_err(err_moe)?,
        intermediate: intermediate.parse::<Intermediate>().map_err(err_moe)?,
        profile: prof,
        ..MoeOptions::default()
    };
    let l = &layer.get().inner;
    let out = py.detach(|| -> Result<mxmoe::moe::MoeOutput, Failure> {
        let x = f32s(hidden, "hidden_states")?;
        let r = f32s(logits, "router_logits")?;
        let b = open_backend(kind, adapter)?;
        // As `mxmoe moe --profile`: a layer mode the peer lacks becomes the profile's own.
        if !prof.spec().modes.contains(&l.config.act_scale_mode) {
            let mut lp = l.clone();
            lp.config.act_scale_mode = default_mode;
            return Ok(b.moe_once(&lp, &x, &r, opts)?);
        }
        Ok(b.moe_once(l, &x, &r, opts)?)
    })?;
    Ok((
        out_f32(py, &out.output),
        out_i32(py, &out.routing.topk_ids),
        out_f32(py, &out.routing.topk_weights),
        out.routing.top_k,
    ))
}

// ---------------------------------------------------------------------------------------------
// What is here.

/// `{name: {"available", "adapter", "reason"}}` for cpu, wgpu and hip (wgpu also lists every
/// adapter it can see).
#[pyfunction]
fn backends(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let rows = py.detach(|| {
        let mut rows = Vec::new();
        for (name, kind) in [
            ("cpu", BackendKind::Cpu),
            ("wgpu", BackendKind::Wgpu),
            ("hip", BackendKind::Hip),
        ] {
            rows.push((name, open_backend(kind, None).map(|b| b.adapter())));
        }
        let adapters: Vec<String> = mxmoe::backend::wgpu::enumerate_adapters()
            .iter()
            .map(|a| a.to_string())
            .collect();
        (rows, adapters)
    });
    let d = PyDict::new(py);
    for (name, r) in rows.0 {
        let e = PyDict::new(py);
        match r {
            Ok(adapter) => {
                e.set_item("available", true)?;
                e.set_item("adapter", adapter)?;
                e.set_item("reason", py.None())?;
            }
            Err(err) => {
                e.set_item("available", false)?;
                e.set_item("adapter", py.None())?;
                e.set_item("reason", err.to_string())?;
            }
        }
        if name == "wgpu" {
            e.set_item("adapters", PyList::new(py, &rows.1)?)?;
        }
        d.set_item(name, e)?;
    }
    Ok(d)
}

/// Version, formats (with their table rows), scale modes, schemes and the MoE tolerance.
#[pyfunction]
fn info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("version", env!("CARGO_PKG_VERSION"))?;
    d.set_item("formats", MxFormat::ALL.map(|f| f.name()).to_vec())?;
    let specs = PyDict::new(py);
    for f in MxFormat::ALL {
        let s = f.spec();
        let e = PyDict::new(py);
        e.set_item("aliases", s.aliases.to_vec())?;
        e.set_item(
            "kind",
            match s.kind {
                mxmoe::format::ElemKind::Float => "float",
                mxmoe::format::ElemKind::Int => "int",
            },
        )?;
        e.set_item("ebits", s.ebits)?;
        e.set_item("mbits", s.mbits)?;
        e.set_item("bias", s.bias)?;
        e.set_item("emax_elem", s.emax_elem)?;
        e.set_item("code_bits", s.code_bits)?;
        e.set_item("block_bytes", s.block_bytes())?;
        e.set_item("max_normal", s.max_normal)?;
        specs.set_item(s.name, e)?;
    }
    d.set_item("format_specs", specs)?;
    d.set_item("scale_modes", ScaleMode::ALL.map(|m| m.name()).to_vec())?;
    d.set_item("default_scale_mode", ScaleMode::default().name())?;
    d.set_item(
        "schemes",
        Scheme::ALL.iter().map(|s| s.name()).collect::<Vec<_>>(),
    )?;
    d.set_item(
        "ocp_mx_schemes",
        Scheme::OCP_MX.iter().map(|s| s.name()).collect::<Vec<_>>(),
    )?;
    d.set_item("activations", vec!["silu", "swigluoai"])?;
    d.set_item("scorings", vec!["softmax", "topk_softmax", "sigmoid"])?;
    d.set_item("backends", vec!["cpu", "wgpu", "hip", "auto"])?;
    d.set_item("block", mxmoe::format::BLOCK)?;
    d.set_item("moe_rel_l2", mxmoe::check::MOE_REL_L2)?;
    d.set_item("route_weight_rel", mxmoe::check::ROUTE_WEIGHT_REL)?;
    Ok(d)
}

#[pymodule]
fn _mxmoe(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Layer>()?;
    m.add_function(wrap_pyfunction!(format_spec, m)?)?;
    m.add_function(wrap_pyfunction!(scheme_spec, m)?)?;
    m.add_function(wrap_pyfunction!(scale_mode_name, m)?)?;
    m.add_function(wrap_pyfunction!(quantize, m)?)?;
    m.add_function(wrap_pyfunction!(dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(qdq, m)?)?;
    m.add_function(wrap_pyfunction!(moe, m)?)?;
    m.add_function(wrap_pyfunction!(verify::verify, m)?)?;
    m.add_function(wrap_pyfunction!(backends, m)?)?;
    m.add_function(wrap_pyfunction!(info, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
