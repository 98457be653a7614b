//! `mxmoe qdq`: quantize-dequantize every float tensor along its last axis.

use super::{meta, note, BackendArgs, LayerPick};
use anyhow::{Context, Result};
use clap::Args;
use mxmoe::format::{MxFormat, ScaleMode};
use mxmoe::io::{self, FloatTensor, OutTensor, StFile};
use std::path::PathBuf;

/// Quantize-dequantize (fake-quantize) every float tensor along its last axis.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe qdq --format mxfp6_e2m3 --scale-mode even --input acts.safetensors --output acts.qdq.safetensors\n\n\
Tensors of any rank (blocks along the last axis); --tensor NAME (repeatable) takes only those. A\n\
layer file or checkpoint gives its experts, dequantized, as w13_weight and w2_weight."
)]
pub struct QdqArgs {
    #[arg(long)]
    format: MxFormat,
    #[arg(long, default_value = "even")]
    scale_mode: ScaleMode,
    #[arg(long)]
    input: PathBuf,
    #[arg(long)]
    output: PathBuf,
    /// Only these tensors (repeatable).
    #[arg(long = "tensor", value_name = "NAME")]
    tensors: Vec<String>,
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    pick: LayerPick,
}

pub fn run(a: &QdqArgs) -> Result<()> {
    let (format, mode) = (a.format, a.scale_mode);
    let b = a.backend.open()?;
    let inputs = if a.tensors.is_empty() && a.pick.is_layer_input(&a.input) {
        a.pick.expert_floats(&b, &a.input)?.0
    } else {
        let f = StFile::open(&a.input)?;
        io::float_tensors_named(&f, &a.tensors, note)?
    };
    let mut out = Vec::new();
    for FloatTensor { name, data, shape } in inputs {
        let k = *shape.last().unwrap();
        let q = b
            .qdq(format, mode, &data, k)
            .with_context(|| format!("QDQ of '{name}'"))?;
        out.push(OutTensor::f32(name, shape, &q));
    }
    let m = meta([
        ("format", format.name().to_string()),
        ("scale_mode", mode.name().to_string()),
    ]);
    io::save(&a.output, &out, m)?;
    eprintln!(
        "QDQ'd {} tensor(s) with {format} ({mode} scales) on {}: {}",
        out.len(),
        b.name(),
        a.output.display()
    );
    Ok(())
}
