//! `mxmoe quantize`: every 2-D float tensor of a file to an MX format.

use super::{note, profile_backend, BackendArgs};
use anyhow::{Context, Result};
use clap::Args;
use mxmoe::format::{MxFormat, ProfileId, ScaleMode};
use mxmoe::io::{self, FloatTensor, StFile};
use std::path::PathBuf;

/// Quantize every 2-D float tensor of a safetensors file to an MX format.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe quantize --format mxfp4 --scale-mode even --input w.safetensors --output w.mxfp4.safetensors\n  \
mxmoe quantize --profile ggml --format mxfp4 --input w.safetensors --output w.ggml.safetensors\n\n\
Each 2-D float tensor T [rows, cols] (f32/bf16/f16, cols % 32 == 0) becomes T (u8 packed,\n\
[rows, packed cols]) and T_scale (u8 E8M0, [rows, cols/32]); metadata: format, scale_mode and,\n\
with a profile, profile (ggml writes its split nibble order; `dequantize` reads it back).\n\
Profiles (docs/NUMERICS.md 17): contract (default), ocp, quark, torchao, nvidia, microxcaling, ggml.\n\
A peer that only fake-quantizes a block (Quark's scales below 2^-127, microxcaling's NaN exponent)\n\
makes quantize fail for that block; use qdq."
)]
pub struct QuantizeArgs {
    /// mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, mxfp8_e5m2 or mxint8.
    #[arg(long)]
    format: MxFormat,
    /// floor, even, ceil or rceil (default: even, or the profile's own mode).
    #[arg(long)]
    scale_mode: Option<ScaleMode>,
    /// Compatibility profile: contract, ocp, quark, torchao, nvidia, microxcaling or ggml.
    #[arg(long, default_value = "contract")]
    profile: ProfileId,
    #[arg(long)]
    input: PathBuf,
    #[arg(long)]
    output: PathBuf,
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(a: &QuantizeArgs) -> Result<()> {
    let p = a.profile.spec();
    let (format, mode) = (a.format, p.mode(a.scale_mode));
    profile_backend(a.profile, &a.backend)?;
    p.check(format, mode)?;
    let b = a.backend.open()?;
    let f = StFile::open(&a.input)?;
    let mut out = Vec::new();
    for FloatTensor { name, data, shape } in io::float_tensors(&f, true, note)? {
        let t = if a.profile == ProfileId::Contract {
            b.quantize(format, mode, &data, &shape)
                .with_context(|| format!("quantizing '{name}' of {}", a.input.display()))?
        } else {
            p.quantize(format, mode, &data, &shape)
                .with_context(|| format!("quantizing '{name}' of {}", a.input.display()))?
        };
        out.push((name, t));
    }
    io::save_mx_profile(&a.output, &out, mode, a.profile)?;
    eprintln!(
        "quantized {} tensor(s) to {format} ({mode} scales, profile {}) on {}: {}",
        out.len(),
        a.profile,
        b.name(),
        a.output.display()
    );
    Ok(())
}
