//! The catalog's real model shapes by name: `mxmoe bench` takes its layer, batches, flop and
//! byte counts from these cases. Never run by `mxmoe check` or the tests (too large for
//! lavapipe and the CPU reference).

use super::catalog::{moe_case_opts, moe_f32, Case, LayerSpec, Tier};
use crate::format::MxFormat;
use crate::moe::synth::SynthSpec;
use crate::moe::{Activation, RouterConfig, Scoring};
use crate::scheme::Scheme;

/// The real model shapes by name (random packed weights; for `mxmoe bench`), and `custom`
/// (a mid-size layer for `--experts/--hidden/--inter/--top-k` overrides).
pub const MODEL_SHAPES: [&str; 6] = [
    "gpt-oss-20b",
    "gpt-oss-120b",
    "deepseek-r1",
    "qwen3-30b-a3b",
    "llama4-maverick",
    "custom",
];

/// The layer of a named model shape.
pub fn model_shape(name: &str) -> Option<LayerSpec> {
    let gpt_oss = |e: usize| {
        let mut s = SynthSpec::new(Scheme::new(MxFormat::Fp4E2M1, None), e, 2880, 2880, 4);
        s.activation = Activation::SwigluOai;
        s.bias = true;
        s.router.scoring = Scoring::TopkSoftmax;
        s.router.renormalize = false;
        s
    };
    let (synth, cbias, name) = match name {
        "gpt-oss-20b" => (gpt_oss(32), None, "gpt-oss-20b"),
        "gpt-oss-120b" => (gpt_oss(128), None, "gpt-oss-120b"),
        "deepseek-r1" => {
            let mut s = SynthSpec::new(Scheme::OCP_MX[0], 256, 7168, 2048, 8);
            s.router = RouterConfig {
                scoring: Scoring::Sigmoid,
                top_k: 8,
                renormalize: true,
                n_group: Some(8),
                topk_group: Some(4),
                routed_scaling_factor: 2.5,
                apply_router_weight_on_input: false,
            };
            (s, Some(1), "deepseek-r1")
        }
        "qwen3-30b-a3b" => (
            SynthSpec::new(Scheme::OCP_MX[0], 128, 2048, 768, 8),
            None,
            "qwen3-30b-a3b",
        ),
        "llama4-maverick" => {
            let mut s = SynthSpec::new(Scheme::OCP_MX[0], 128, 5120, 8192, 1);
            s.router.scoring = Scoring::Sigmoid;
            s.router.renormalize = false;
            s.router.apply_router_weight_on_input = true;
            (s, None, "llama4-maverick")
        }
        "custom" => (
            SynthSpec::new(Scheme::OCP_MX[0], 32, 1024, 1024, 4),
            None,
            "custom",
        ),
        _ => return None,
    };
    Some(LayerSpec {
        correction_bias: cbias,
        packed: true,
        name: Some(name),
        ..LayerSpec::new(synth)
    })
}

/// Benchmark cases of a layer: one per token count, each rotating through `rotate` batches
/// (seeds `1000 + 7 r + M`), tier [`Tier::Model`].
pub fn bench_cases(layer: &LayerSpec, tokens: &[usize], rotate: usize) -> Vec<Case> {
    tokens
        .iter()
        .map(|&m| {
            let seeds = (0..rotate.max(1) as u64)
                .map(|r| 1000 + r * 7 + m as u64)
                .collect();
            moe_case_opts(Tier::Model, layer, m, seeds, moe_f32())
        })
        .collect()
}

/// The model-shape cases of the catalog (default token counts 1, 4, 16, 64; 8 rotating
/// batches): what `mxmoe bench --shape NAME` runs.
pub fn model_cases() -> Vec<Case> {
    MODEL_SHAPES
        .iter()
        .filter_map(|n| model_shape(n))
        .flat_map(|l| bench_cases(&l, &[1, 4, 16, 64], 8))
        .collect()
}
