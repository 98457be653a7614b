//! `mxmoe quantize`: every 2-D float tensor of a file to an MX format.

use super::{note, BackendArgs};
use anyhow::{bail, Context, Result};
use clap::Args;
use mxmoe::format::{MxFormat, ScaleMode};
use mxmoe::io::{self, FloatTensor, StFile};
use std::path::PathBuf;

/// Quantize every 2-D float tensor of a safetensors file to an MX format.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe quantize --format mxfp4 --scale-mode even --input w.safetensors --output w.mxfp4.safetensors\n\n\
Each 2-D float tensor T [rows, cols] (f32/bf16/f16, cols % 32 == 0) becomes T (u8 packed,\n\
[rows, packed cols]) and T_scale (u8 E8M0, [rows, cols/32]); metadata: format, scale_mode."
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
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(a: &QuantizeArgs) -> Result<()> {
    let (format, mode) = (a.format, a.scale_mode);
    let b = a.backend.open()?;
    io::check_outputs(&[("--output", &a.output)], &[("--input", &a.input)])?;
    let f = StFile::open(&a.input)?;
    let tensors = io::float_tensors(&f, true, note)?;
    // Each T becomes T and T_scale: refuse a file where that writes one name twice.
    let taken: std::collections::HashSet<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    if let Some(t) = tensors
        .iter()
        .find(|t| taken.contains(format!("{}_scale", t.name).as_str()))
    {
        let (file, n) = (a.input.display(), &t.name);
        bail!(
            "{file}: tensors '{n}' and '{n}_scale' are both float tensors to quantize, but the \
             quantized '{n}' is stored with its scales as '{n}_scale' (rename one of them)"
        );
    }
    let mut out = Vec::new();
    for FloatTensor { name, data, shape } in tensors {
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
