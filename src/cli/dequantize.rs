//! `mxmoe dequantize`: an MX file back to f32.

use super::BackendArgs;
use anyhow::{Context, Result};
use clap::Args;
use mxmoe::io::{self, OutTensor};
use std::collections::HashMap;
use std::path::PathBuf;

/// Dequantize an MX file (written by `quantize`) back to f32.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe dequantize --input w.mxfp4.safetensors --output w.f32.safetensors"
)]
pub struct DequantizeArgs {
    #[arg(long)]
    input: PathBuf,
    #[arg(long)]
    output: PathBuf,
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(a: &DequantizeArgs) -> Result<()> {
    io::check_outputs(&[("--output", &a.output)], &[("--input", &a.input)])?;
    let b = a.backend.open()?;
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
