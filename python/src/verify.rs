//! `verify`: the verdict of the CLI's `mxmoe verify` (src/main.rs `cmd_verify`) as a dict.
//!
//! This mirrors `cmd_verify` step for step with the library's `moe::forward` and
//! `check::rel_l2`: the contract reference is the f64 forward under the layer's activation scale
//! mode with f32 intermediates; the closest variant is searched over the four scale modes x
//! {f32, bf16} intermediates; BIT-EXACT needs every output bit and every id equal, WITHIN
//! TOLERANCE the contract rel-L2 <= tolerance and the same ids, else WRONG.
//! TODO: call the library's verify once the CLI's logic moves into `src/check/verify.rs`.

use crate::{f32s, i32s, Failure, Layer};
use mxmoe::check::rel_l2;
use mxmoe::format::ScaleMode;
use mxmoe::moe::{self, Accumulate, Intermediate, MoeOptions};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

struct Variant {
    name: String,
    mode: ScaleMode,
    inter: &'static str,
    rel: f64,
    max_abs: f64,
}

struct Report {
    verdict: &'static str,
    summary: String,
    contract_rel: f64,
    contract_max_abs: f64,
    bit_exact: bool,
    ids_checked: bool,
    ids_differ: usize,
    ids_total: usize,
    weights_rel: Option<f64>,
    variants: Vec<Variant>,
    best: Option<usize>,
    worst: (usize, usize, f32, f32),
}

fn run(
    layer: &moe::MoeLayer,
    hidden: &[f32],
    logits: &[f32],
    theirs: &[f32],
    ids: Option<&[i32]>,
    weights: Option<&[f32]>,
    tol: f64,
) -> Result<Report, Failure> {
    let h = layer.config.hidden;
    let m = moe::reference::check_batch(layer, hidden, logits)?;
    if theirs.len() != m * h {
        return Err(Failure::Value(format!(
            "output has {} values, expected [M = {m}, H = {h}] = {}",
            theirs.len(),
            m * h
        )));
    }
    let mut variants = Vec::new();
    let mut want = None;
    for inter in [Intermediate::F32, Intermediate::Bf16] {
        for mode in ScaleMode::ALL {
            let mut lv = layer.clone();
            lv.config.act_scale_mode = mode;
            let r = moe::forward(
                &lv,
                hidden,
                logits,
                MoeOptions {
                    accumulate: Accumulate::F64,
                    intermediate: inter,
                },
            )?;
            let (rel, mx) = rel_l2(theirs, &r.output);
            let iname = if inter == Intermediate::F32 {
                "f32"
            } else {
                "bf16"
            };
            variants.push(Variant {
                name: format!("{mode} scales, {iname} intermediates"),
                mode,
                inter: iname,
                rel,
                max_abs: mx,
            });
            // The contract reference: `moe::forward(layer, MoeOptions::default())`.
            if mode == layer.config.act_scale_mode && inter == Intermediate::F32 {
                want = Some(r);
            }
        }
    }
    let internal =
        || Failure::Value("internal: the layer's scale mode is not among the variants".into());
    let want = want.ok_or_else(internal)?;
    let contract = variants
        .iter()
        .position(|v| v.mode == layer.config.act_scale_mode && v.inter == "f32")
        .ok_or_else(internal)?;
    // The first variant with the smallest rel-L2, as the CLI's strict `<` scan from infinity
    // (none when every rel-L2 is NaN or infinite: an output holding NaN/Inf).
    let mut best: Option<usize> = None;
    let mut best_rel = f64::INFINITY;
    for (j, v) in variants.iter().enumerate() {
        if v.rel < best_rel {
            best = Some(j);
            best_rel = v.rel;
        }
    }
    let (ids_checked, same_ids, ids_differ) = match ids {
        None => (false, true, 0),
        Some(t) => {
            let differ = t
                .iter()
                .zip(&want.routing.topk_ids)
                .filter(|(a, b)| a != b)
                .count();
            (true, t == want.routing.topk_ids.as_slice(), differ)
        }
    };
    let weights_rel = weights.map(|w| rel_l2(w, &want.routing.topk_weights).0);
    let (mut wi, mut wv) = (0usize, 0f64);
    for (i, (a, b)) in theirs.iter().zip(&want.output).enumerate() {
        let d = (*a as f64 - *b as f64).abs();
        if d > wv || d.is_nan() {
            wi = i;
            wv = d;
        }
    }
    let exact = theirs
        .iter()
        .zip(&want.output)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    let c = variants[contract].rel;
    let (verdict, summary) = if exact && same_ids {
        ("BIT-EXACT", "BIT-EXACT".to_string())
    } else if c <= tol && same_ids {
        (
            "WITHIN TOLERANCE",
            format!("WITHIN TOLERANCE (rel-L2 {c:.3e} <= {tol:e})"),
        )
    } else {
        (
            "WRONG",
            format!(
                "WRONG (rel-L2 {c:.3e} > {tol:e}{})",
                if same_ids { "" } else { ", routing differs" }
            ),
        )
    };
    Ok(Report {
        verdict,
        summary,
        contract_rel: c,
        contract_max_abs: variants[contract].max_abs,
        bit_exact: exact,
        ids_checked,
        ids_differ,
        ids_total: want.routing.topk_ids.len(),
        weights_rel,
        variants,
        best,
        worst: (wi / h, wi % h, theirs[wi], want.output[wi]),
    })
}

/// The verdict of `mxmoe verify` on arrays (see `mxmoe.verify`).
#[pyfunction]
#[pyo3(signature = (layer, hidden, logits, output, topk_ids=None, topk_weights=None, tolerance=1e-2))]
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
) -> PyResult<Bound<'py, PyDict>> {
    let l = &layer.get().inner;
    let r = py.detach(|| -> Result<Report, Failure> {
        let x = f32s(hidden, "hidden_states")?;
        let g = f32s(logits, "router_logits")?;
        let o = f32s(output, "output")?;
        let ids = topk_ids.map(|b| i32s(b, "topk_ids")).transpose()?;
        let w = topk_weights.map(|b| f32s(b, "topk_weights")).transpose()?;
        run(l, &x, &g, &o, ids.as_deref(), w.as_deref(), tolerance)
    })?;
    let d = PyDict::new(py);
    d.set_item("verdict", r.verdict)?;
    d.set_item("ok", r.verdict != "WRONG")?;
    d.set_item("summary", r.summary)?;
    d.set_item("bit_exact", r.bit_exact)?;
    d.set_item("rel_l2", r.contract_rel)?;
    d.set_item("max_abs", r.contract_max_abs)?;
    d.set_item("tolerance", tolerance)?;
    match r.best.map(|j| &r.variants[j]) {
        Some(b) => {
            d.set_item("closest", &b.name)?;
            d.set_item("closest_scale_mode", b.mode.name())?;
            d.set_item("closest_intermediate", b.inter)?;
            d.set_item("closest_rel_l2", b.rel)?;
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
        e.set_item("name", &v.name)?;
        e.set_item("scale_mode", v.mode.name())?;
        e.set_item("intermediate", v.inter)?;
        e.set_item("rel_l2", v.rel)?;
        e.set_item("max_abs", v.max_abs)?;
        vs.append(e)?;
    }
    d.set_item("variants", vs)?;
    if r.ids_checked {
        d.set_item("ids_identical", r.ids_differ == 0)?;
        d.set_item("ids_differ", r.ids_differ)?;
    } else {
        d.set_item("ids_identical", py.None())?;
        d.set_item("ids_differ", py.None())?;
    }
    d.set_item("ids_total", r.ids_total)?;
    d.set_item("weights_rel_l2", r.weights_rel)?;
    let w = PyDict::new(py);
    w.set_item("token", r.worst.0)?;
    w.set_item("column", r.worst.1)?;
    w.set_item("theirs", r.worst.2)?;
    w.set_item("reference", r.worst.3)?;
    d.set_item("worst", w)?;
    Ok(d)
}
