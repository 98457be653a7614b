//! `mxmoe qdq`: quantize-dequantize every float tensor along its last axis.

use super::{meta, note, profile_backend, BackendArgs, LayerPick};
use anyhow::{Context, Result};
use clap::Args;
use mxmoe::format::{MxFormat, ProfileId, ScaleMode};
use mxmoe::io::{self, FloatTensor, OutTensor, StFile};
use std::path::PathBuf;

/// Quantize-dequantize (fake-quantize) every float tensor along its last axis.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe qdq --format mxfp6_e2m3 --scale-mode even --input acts.safetensors --output acts.qdq.safetensors\n  \
mxmoe qdq --profile quark --format mxfp4 --input acts.safetensors --output acts.quark.safetensors\n\n\
Tensors of any rank (blocks along the last axis); --tensor NAME (repeatable) takes only those. A\n\
layer file or checkpoint gives its experts, dequantized, as w13_weight and w2_weight.\n\
Profiles (docs/NUMERICS.md 17) reproduce another implementation bit for bit: contract (default), ocp,\n\
quark (amd-quark 0.13), torchao (0.18), nvidia (nvidia-modelopt 0.47), microxcaling, ggml (gguf-py)."
)]
pub struct QdqArgs {
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
    /// Only these tensors (repeatable).
    #[arg(long = "tensor", value_name = "NAME")]
    tensors: Vec<String>,
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    pick: LayerPick,
}

pub fn run(a: &QdqArgs) -> Result<()> {
    let p = a.profile.spec();
    let (format, mode) = (a.format, p.mode(a.scale_mode));
    io::check_outputs(&[("--output", &a.output)], &[("--input", &a.input)])?;
    profile_backend(a.profile, &a.backend)?;
    p.check(format, mode)?;
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
        let q = if a.profile == ProfileId::Contract {
            b.qdq(format, mode, &data, k)
                .with_context(|| format!("QDQ of '{name}'"))?
        } else {
            p.qdq_slice(format, mode, &data, k)
                .with_context(|| format!("QDQ of '{name}'"))?
        };
        out.push(OutTensor::f32(name, shape, &q));
    }
    let m = meta([
        ("format", format.name().to_string()),
        ("scale_mode", mode.name().to_string()),
        ("profile", a.profile.name().to_string()),
    ]);
    io::save(&a.output, &out, m)?;
    eprintln!(
        "QDQ'd {} tensor(s) with {format} ({mode} scales, profile {}) on {}: {}",
        out.len(),
        a.profile,
        b.name(),
        a.output.display()
    );
    Ok(())
}
