//! The native layer object behind `mxmoe.MoeLayer`: a checked `mxmoe::moe::MoeLayer`, built
//! from packed arrays or loaded with the CLI's loader (`mxmoe::io::load_layer`).

use crate::{err_io, err_moe, f32s, i32s, out_f32, out_i32, parse_mode, parse_scheme, Failure};
use mxmoe::format::{MxTensor, ScaleMode};
use mxmoe::moe::{Activation, MoeConfig, MoeError, MoeLayer, MoeWeights, RouterConfig, Scoring};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict};
use std::path::PathBuf;

#[pyclass(frozen, name = "Layer", module = "mxmoe._mxmoe")]
pub struct Layer {
    pub inner: MoeLayer,
}

fn opt_f32(b: Option<&[u8]>, what: &str) -> Result<Option<Vec<f32>>, Failure> {
    b.map(|b| f32s(b, what)).transpose()
}

#[pymethods]
impl Layer {
    /// Load a layer bundle or a one-layer gpt-oss checkpoint (the CLI's loader).
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Layer> {
        let l = py.detach(|| mxmoe::io::load_layer(&path)).map_err(err_io)?;
        Ok(Layer { inner: l.layer })
    }

    /// Build from packed weights (u8 bytes of the vLLM/Quark layout) and routing keys; the
    /// shapes are logical: `w13` `[experts, 2 * inter, hidden]`, `w2` `[experts, hidden, inter]`.
    #[staticmethod]
    #[pyo3(signature = (
        w13, w13_scale, w2, w2_scale, experts, hidden, inter, scheme, activation, top_k,
        renormalize, scoring, scale_mode, routed_scaling_factor, apply_router_weight_on_input,
        n_group=None, topk_group=None, w13_bias=None, w2_bias=None,
        e_score_correction_bias=None, expert_map=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn from_parts(
        py: Python<'_>,
        w13: &[u8],
        w13_scale: &[u8],
        w2: &[u8],
        w2_scale: &[u8],
        experts: usize,
        hidden: usize,
        inter: usize,
        scheme: &str,
        activation: &str,
        top_k: usize,
        renormalize: bool,
        scoring: &str,
        scale_mode: &str,
        routed_scaling_factor: f32,
        apply_router_weight_on_input: bool,
        n_group: Option<usize>,
        topk_group: Option<usize>,
        w13_bias: Option<&[u8]>,
        w2_bias: Option<&[u8]>,
        e_score_correction_bias: Option<&[u8]>,
        expert_map: Option<&[u8]>,
    ) -> PyResult<Layer> {
        let scheme = parse_scheme(scheme)?;
        let activation: Activation = activation.parse().map_err(err_moe)?;
        let scoring: Scoring = scoring.parse().map_err(err_moe)?;
        let act_scale_mode: ScaleMode = parse_mode(scale_mode)?;
        let layer = py.detach(|| -> Result<MoeLayer, Failure> {
            let fmt = scheme.weight;
            let tensor = |name: &str, data: &[u8], scales: &[u8], shape: Vec<usize>| {
                MxTensor::new(fmt, shape, data.to_vec(), scales.to_vec())
                    .map_err(|e| Failure::Moe(MoeError::Shape(format!("{name}: {e}"))))
            };
            let w13 = tensor(
                "w13_weight",
                w13,
                w13_scale,
                vec![experts, 2 * inter, hidden],
            )?;
            let w2 = tensor("w2_weight", w2, w2_scale, vec![experts, hidden, inter])?;
            let expert_map = expert_map.map(|b| i32s(b, "expert_map")).transpose()?;
            let n_experts = expert_map.as_ref().map_or(experts, Vec::len);
            let config = MoeConfig {
                scheme,
                activation,
                router: RouterConfig {
                    scoring,
                    top_k,
                    renormalize,
                    n_group,
                    topk_group,
                    routed_scaling_factor,
                    apply_router_weight_on_input,
                },
                act_scale_mode,
                n_experts,
                local_experts: experts,
                hidden,
                inter,
            };
            let weights = MoeWeights {
                w13,
                w2,
                w13_bias: opt_f32(w13_bias, "w13_bias")?,
                w2_bias: opt_f32(w2_bias, "w2_bias")?,
                e_score_correction_bias: opt_f32(
                    e_score_correction_bias,
                    "e_score_correction_bias",
                )?,
                expert_map,
            };
            Ok(MoeLayer::new(config, weights)?)
        })?;
        Ok(Layer { inner: layer })
    }

    /// Write the layer as a bundle (vLLM/Quark names, routing keys as metadata; the CLI's writer).
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| mxmoe::io::save_layer(&path, &self.inner, None))
            .map_err(err_io)
    }

    /// The configuration as a dict.
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = &self.inner.config;
        let r = &c.router;
        let d = PyDict::new(py);
        d.set_item("scheme", c.scheme.name())?;
        d.set_item("weight_format", c.scheme.weight.name())?;
        d.set_item("activation_format", c.scheme.activation.map(|a| a.name()))?;
        d.set_item("activation", c.activation.name())?;
        d.set_item("scale_mode", c.act_scale_mode.name())?;
        d.set_item("n_experts", c.n_experts)?;
        d.set_item("local_experts", c.local_experts)?;
        d.set_item("hidden", c.hidden)?;
        d.set_item("inter", c.inter)?;
        d.set_item("scoring", r.scoring.name())?;
        d.set_item("top_k", r.top_k)?;
        d.set_item("renormalize", r.renormalize)?;
        d.set_item("n_group", r.n_group)?;
        d.set_item("topk_group", r.topk_group)?;
        d.set_item("routed_scaling_factor", r.routed_scaling_factor)?;
        d.set_item(
            "apply_router_weight_on_input",
            r.apply_router_weight_on_input,
        )?;
        d.set_item("weight_bytes", self.inner.weight_bytes())?;
        Ok(d)
    }

    /// The weights as `{name: (bytearray, shape, dtype)}` (packed u8 with their stored shapes,
    /// f32 biases, i32 expert_map); absent optional tensors are left out.
    fn weights<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (c, w) = (&self.inner.config, &self.inner.weights);
        let (e, h, i) = (c.local_experts, c.hidden, c.inter);
        let f = c.scheme.weight;
        let d = PyDict::new(py);
        let u8s = |v: &[u8], shape: Vec<usize>| (PyByteArray::new(py, v), shape, "uint8");
        d.set_item(
            "w13_weight",
            u8s(&w.w13.data, vec![e, 2 * i, f.packed_len(h)]),
        )?;
        d.set_item(
            "w13_weight_scale",
            u8s(&w.w13.scales, vec![e, 2 * i, h / 32]),
        )?;
        d.set_item("w2_weight", u8s(&w.w2.data, vec![e, h, f.packed_len(i)]))?;
        d.set_item("w2_weight_scale", u8s(&w.w2.scales, vec![e, h, i / 32]))?;
        if let Some(b) = &w.w13_bias {
            d.set_item("w13_bias", (out_f32(py, b), vec![e, 2 * i], "float32"))?;
        }
        if let Some(b) = &w.w2_bias {
            d.set_item("w2_bias", (out_f32(py, b), vec![e, h], "float32"))?;
        }
        if let Some(b) = &w.e_score_correction_bias {
            d.set_item(
                "e_score_correction_bias",
                (out_f32(py, b), vec![c.n_experts], "float32"),
            )?;
        }
        if let Some(m) = &w.expert_map {
            d.set_item("expert_map", (out_i32(py, m), vec![c.n_experts], "int32"))?;
        }
        Ok(d)
    }
}
