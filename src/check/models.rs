//! The catalog's real model shapes by name: `mxmoe bench` takes its layer, batches, flop and
//! byte counts from these cases. Never run by `mxmoe check` or the tests (too large for
//! lavapipe and the CPU reference).

use super::catalog::{moe_case_opts, moe_f32, Case, LayerSpec, Tier};
use crate::moe::presets::Preset;

/// The model shapes by name ([`Preset::ALL`]): real models' layers with random packed weights
/// (for `mxmoe bench`), and `custom` (a mid-size layer for `--experts/--hidden/--inter/--top-k`
/// overrides).
pub fn model_shape_names() -> Vec<&'static str> {
    Preset::ALL.iter().map(|p| p.name).collect()
}

/// The layer of a named model shape.
pub fn model_shape(name: &str) -> Option<LayerSpec> {
    let p: Preset = name.parse().ok()?;
    Some(LayerSpec {
        correction_bias: p.correction_bias.then_some(1),
        packed: true,
        name: Some(p.name),
        ..LayerSpec::new(p.synth_spec())
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
    model_shape_names()
        .into_iter()
        .filter_map(model_shape)
        .flat_map(|l| bench_cases(&l, &[1, 4, 16, 64], 8))
        .collect()
}
