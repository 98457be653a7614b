//! `mxmoe quantize`: the float tensors of a file (any rank, blocks along the last axis), or a
//! layer's experts, to an MX format.

use super::{note, BackendArgs, LayerPick};
use anyhow::{Context, Result};
use clap::Args;
use mxmoe::format::{MxFormat, ScaleMode};
use mxmoe::io::{self, FloatTensor, StFile};
use std::path::PathBuf;

/// Quantize the float tensors of a safetensors file (any rank; blocks along the last axis), or
/// the experts of a layer file / checkpoint, to an MX format.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe quantize --format mxfp4 --scale-mode even --input w.safetensors --output w.mxfp4.safetensors\n\n\
Each float tensor T [..., K] (f32/bf16/f16, K % 32 == 0; e.g. an expert stack [E, N, K]) becomes T\n\
(u8 packed, [..., packed(K)]) and T_scale (u8 E8M0, [..., K/32]); metadata: format, scale_mode.\n\
--tensor NAME (repeatable) takes only those tensors. A layer file or checkpoint (a bundle, a model\n\
directory, GGUF; --layer-index/--layer-name pick the layer) gives its experts, dequantized, as\n\
w13_weight [E, 2I, H] and w2_weight [E, H, I]: re-quantizing them checks a quantizer on MoE weights."
)]
pub struct QuantizeArgs {
    /// mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, mxfp8_e5m2 or mxint8.
    #[arg(long)]
    format: MxFormat,
    /// floor, even, ceil or rceil.
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

pub fn run(a: &QuantizeArgs) -> Result<()> {
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
        let t = b
            .quantize(format, mode, &data, &shape)
            .with_context(|| format!("quantizing '{name}' of {}", a.input.display()))?;
        out.push((name, t));
    }
    io::save_mx(&a.output, &out, mode)?;
    eprintln!(
        "quantized {} tensor(s) to {format} ({mode} scales) on {}: {}",
        out.len(),
        b.name(),
        a.output.display()
    );
    Ok(())
}
