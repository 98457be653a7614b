//! `verify`: the library's [`mxmoe::check::verify::verify_with`] (what `mxmoe verify`
//! prints) as a dict. The dict's keys are the Python API's; each comes from the report.

use crate::{f32s, i32s, Failure, Layer};
use mxmoe::check::verify::{verify_with, VerifyError, VerifyOptions, VerifyReport};
use mxmoe::check::verify_stages::{verify_stages, Stage, StageDump};
use mxmoe::format::ProfileId;
use mxmoe::io::TokenBatch;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

impl From<VerifyError> for Failure {
    fn from(e: VerifyError) -> Self {
        match e {
            VerifyError::Moe(m) => Failure::Moe(m),
            other => Failure::Value(other.to_string()),
        }
    }
}

/// The verdict of `mxmoe verify` on arrays (see `mxmoe.verify`).
#[pyfunction]
#[pyo3(signature = (layer, hidden, logits, output, topk_ids=None, topk_weights=None, tolerance=1e-2, profile="contract", stages=None))]
#[allow(clippy::too_many_arguments)]
pub fn verify<'py>(
    py: Python<'py>,
    layer: &Bound<'py, Layer>,
    hidden: &[u8],
    logits: &[u8],
    output: &[u8],
    topk_ids: Option<&[u8]>,
    topk_weights: Option<&[u8]>,
    tolerance: f64,
    profile: &str,
    stages: Option<Vec<(String, Vec<u8>)>>,
) -> PyResult<Bound<'py, PyDict>> {
    let mut dump = StageDump::default();
    for (name, bytes) in stages.unwrap_or_default() {
        let st = Stage::from_name(&name).ok_or_else(|| {
            let names: Vec<&str> = Stage::ALL.iter().map(|s| s.name()).collect();
            PyValueError::new_err(format!(
                "stages: unknown stage '{name}' (expected: {})",
                names.join(", ")
            ))
        })?;
        dump.stages.push((st, f32s(&bytes, st.name())?));
    }
    let prof: ProfileId = profile
        .parse()
        .map_err(|e: mxmoe::format::ProfileError| PyValueError::new_err(e.to_string()))?;
    let mut lv = layer.get().inner.clone();
    // As `mxmoe verify --profile`: a layer mode the peer lacks becomes the profile's own.
    if !prof.spec().modes.contains(&lv.config.act_scale_mode) {
        lv.config.act_scale_mode = prof.spec().default_mode;
    }
    let l = &lv;
    let r = py.detach(|| -> Result<VerifyReport, Failure> {
        let (h, n_experts) = (l.config.hidden, l.config.n_experts);
        let hidden = f32s(hidden, "hidden_states")?;
        let batch = TokenBatch {
            m: hidden.len() / h.max(1),
            hidden,
            logits: f32s(logits, "router_logits")?,
            hidden_size: h,
            n_experts,
        };
        let o = f32s(output, "output")?;
        let ids = topk_ids.map(|b| i32s(b, "topk_ids")).transpose()?;
        let w = topk_weights.map(|b| f32s(b, "topk_weights")).transpose()?;
        let opts = VerifyOptions {
            tolerance_cap: tolerance,
            profile: prof,
            ..VerifyOptions::default()
        };
        let mut rep = verify_with(l, &batch, &o, ids.as_deref(), w.as_deref(), &opts)?;
        verify_stages(l, &batch, &mut rep, &dump, ids.as_deref(), &opts)?;
        Ok(rep)
    })?;
    let d = PyDict::new(py);
    d.set_item("profile", r.profile)?;
    d.set_item("verdict", r.verdict.name())?;
    d.set_item("match", r.verdict.id() == "match")?;
    d.set_item("variant", r.variant.clone())?;
    let diag = PyList::empty(py);
    for f in &r.diagnosis {
        let e = PyDict::new(py);
        e.set_item("fault", f.fault)?;
        e.set_item("rel_l2", f.rel_l2)?;
        diag.append(e)?;
    }
    d.set_item("diagnosis", diag)?;
    d.set_item("ok", r.verdict.passed())?;
    d.set_item("summary", r.summary())?;
    d.set_item("bit_exact", r.output_bit_exact)?;
    d.set_item("rel_l2", r.contract_rel_l2)?;
    d.set_item("max_abs", r.contract_max_abs)?;
    d.set_item("tolerance", r.tolerance)?;
    match r.closest() {
        Some(b) => {
            d.set_item("closest", b.name())?;
            d.set_item("closest_scale_mode", b.scale_mode.name())?;
            d.set_item("closest_intermediate", b.intermediate.name())?;
            d.set_item("closest_rel_l2", b.rel_l2)?;
        }
        None => {
            for k in ["closest", "closest_scale_mode", "closest_intermediate"] {
                d.set_item(k, py.None())?;
            }
            d.set_item("closest_rel_l2", f64::INFINITY)?;
        }
    }
    let vs = PyList::empty(py);
    for v in &r.variants {
        let e = PyDict::new(py);
        e.set_item("name", v.name())?;
        e.set_item("id", v.id.clone())?;
        e.set_item("legitimate", v.legitimate)?;
        e.set_item("variant_tolerance", v.tolerance)?;
        e.set_item("scale_mode", v.scale_mode.name())?;
        e.set_item("intermediate", v.intermediate.name())?;
        e.set_item("rel_l2", v.rel_l2)?;
        e.set_item("max_abs", v.max_abs)?;
        vs.append(e)?;
    }
    d.set_item("variants", vs)?;
    d.set_item("ids_identical", r.ids_identical)?;
    d.set_item("ids_differ", r.ids_differ)?;
    d.set_item("ids_total", r.ids_total)?;
    d.set_item("weights_rel_l2", r.routing_weights_rel_l2)?;
    let w = PyDict::new(py);
    w.set_item("token", r.worst.token)?;
    w.set_item("column", r.worst.column)?;
    w.set_item("theirs", r.worst.theirs)?;
    w.set_item("reference", r.worst.reference)?;
    d.set_item("worst", w)?;
    let st = PyList::empty(py);
    for s in &r.stages {
        let e = PyDict::new(py);
        e.set_item("stage", s.stage)?;
        e.set_item("rows", s.rows)?;
        e.set_item("against", s.against.clone())?;
        e.set_item("rel_l2", s.rel_l2)?;
        e.set_item("tolerance", s.tolerance)?;
        e.set_item("agrees", s.agrees)?;
        e.set_item("nearest_fault", s.nearest_fault.as_ref().map(|f| f.fault))?;
        st.append(e)?;
    }
    d.set_item("stages", st)?;
    d.set_item("first_differing_stage", r.first_differing_stage)?;
    let sd = PyList::empty(py);
    for f in &r.stage_diagnosis {
        let e = PyDict::new(py);
        e.set_item("fault", f.fault)?;
        e.set_item("rel_l2", f.rel_l2)?;
        sd.append(e)?;
    }
    d.set_item("stage_diagnosis", sd)?;
    Ok(d)
}
