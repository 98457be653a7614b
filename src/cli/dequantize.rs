//! `mxmoe dequantize`: an MX file back to f32.

use super::{BackendArgs, LayerPick};
use anyhow::{Context, Result};
use clap::Args;
use mxmoe::io::{self, OutTensor};
use std::collections::HashMap;
use std::path::PathBuf;

/// Dequantize an MX file (written by `quantize`), or a layer's experts, back to f32.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe dequantize --input w.mxfp4.safetensors --output w.f32.safetensors\n  \
mxmoe dequantize --input ./gpt-oss-20b --layer-index 0 --output experts0.f32.safetensors\n\n\
An input without `format` metadata is read as a layer file or checkpoint (bundle, model directory,\n\
GGUF): its experts become w13_weight [E, 2I, H] and w2_weight [E, H, I] (f32), metadata scheme."
)]
pub struct DequantizeArgs {
    #[arg(long)]
    input: PathBuf,
    #[arg(long)]
    output: PathBuf,
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    pick: LayerPick,
}

pub fn run(a: &DequantizeArgs) -> Result<()> {
    let b = a.backend.open()?;
    let mx_file =
        !a.input.is_dir() && io::StFile::open(&a.input).is_ok_and(|f| f.meta("format").is_some());
    if !mx_file && a.pick.is_layer_input(&a.input) {
        let (ts, scheme) = a.pick.expert_floats(&b, &a.input)?;
        let out: Vec<OutTensor> = ts
            .iter()
            .map(|t| OutTensor::f32(t.name.clone(), t.shape.clone(), &t.data))
            .collect();
        let m = super::meta([("scheme", scheme.name())]);
        io::save(&a.output, &out, m)?;
        eprintln!(
            "dequantized the layer's experts on {}: {}",
            b.name(),
            a.output.display()
        );
        return Ok(());
    }
    let (ts, _) = io::load_mx(&a.input)?;
    let mut out = Vec::new();
    for (n, t) in &ts {
        let v = b
            .dequantize(t)
            .with_context(|| format!("dequantizing '{n}'"))?;
        out.push(OutTensor::f32(n.clone(), t.shape.clone(), &v));
    }
    io::save(&a.output, &out, HashMap::new())?;
    eprintln!(
        "dequantized {} tensor(s) on {}: {}",
        out.len(),
        b.name(),
        a.output.display()
    );
    Ok(())
}
