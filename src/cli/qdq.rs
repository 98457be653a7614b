//! `mxmoe qdq`: quantize-dequantize every float tensor along its last axis.

use super::{meta, note, BackendArgs};
use anyhow::{Context, Result};
use clap::Args;
use mxmoe::format::{MxFormat, ScaleMode};
use mxmoe::io::{self, FloatTensor, OutTensor, StFile};
use std::path::PathBuf;

/// Quantize-dequantize (fake-quantize) every float tensor along its last axis.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe qdq --format mxfp6_e2m3 --scale-mode even --input acts.safetensors --output acts.qdq.safetensors"
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
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(a: &QdqArgs) -> Result<()> {
    let (format, mode) = (a.format, a.scale_mode);
    io::check_outputs(&[("--output", &a.output)], &[("--input", &a.input)])?;
    let b = a.backend.open()?;
    let f = StFile::open(&a.input)?;
    let mut out = Vec::new();
    for FloatTensor { name, data, shape } in io::float_tensors(&f, false, note)? {
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
