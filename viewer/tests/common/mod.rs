//! Test fixtures shared by the viewer's tests: a small model directory.

#![allow(dead_code)]

use mxmoe::io::OutTensor;
use mxmoe::moe::synth::{synth_layer, SynthSpec};
use mxmoe::scheme::Scheme;
use std::collections::HashMap;
use std::path::Path;

/// A vLLM-named model directory (`model.safetensors` + `config.json`, Quark MXFP4 config):
/// `layers` MoE layers of `e` experts, H = 64, I = 32, top-2, with router weights
/// `model.layers.N.mlp.gate.weight` [E, H] that grow sharper (more imbalanced) with N.
pub fn write_model_dir(dir: &Path, layers: usize, e: usize) {
    let (h, i) = (64, 32);
    let mut t = Vec::new();
    for n in 0..layers {
        let mut spec = SynthSpec::new(Scheme::OCP_MX[0], e, h, i, 2);
        spec.seed = 10 + n as u64;
        let l = synth_layer(&spec).unwrap().layer;
        let p = format!("model.layers.{n}.mlp.");
        let w = &l.weights;
        t.push(OutTensor::u8(
            format!("{p}experts.w13_weight"),
            vec![e, 2 * i, h / 2],
            &w.w13.data,
        ));
        t.push(OutTensor::u8(
            format!("{p}experts.w13_weight_scale"),
            vec![e, 2 * i, h / 32],
            &w.w13.scales,
        ));
        t.push(OutTensor::u8(
            format!("{p}experts.w2_weight"),
            vec![e, h, i / 2],
            &w.w2.data,
        ));
        t.push(OutTensor::u8(
            format!("{p}experts.w2_weight_scale"),
            vec![e, h, i / 32],
            &w.w2.scales,
        ));
        // Gate rows: expert k gets a direction; later layers scale the first experts up.
        let gate: Vec<f32> = (0..e * h)
            .map(|x| {
                let (k, c) = (x / h, x % h);
                let v = (((k * 131 + c * 17 + n * 7) % 23) as f32 - 11.0) / 64.0;
                v * (1.0 + (n as f32) * (e - k) as f32 / e as f32)
            })
            .collect();
        t.push(OutTensor::f32(format!("{p}gate.weight"), vec![e, h], &gate));
    }
    std::fs::create_dir_all(dir).unwrap();
    mxmoe::io::save(&dir.join("model.safetensors"), &t, HashMap::new()).unwrap();
    let cfg = serde_json::json!({
        "num_experts_per_tok": 2,
        "quantization_config": {"quant_method": "quark", "global_quant_config": {
            "weight": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"},
            "input_tensors": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32}}}
    });
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&cfg).unwrap(),
    )
    .unwrap();
}
