//! `mxmoe qdq`: quantize-dequantize every float tensor along its last axis.

use super::{meta, FloatToolArgs, FloatToolRun};
use anyhow::{Context, Result};
use clap::Args;
use mxmoe::format::ProfileId;
use mxmoe::io::{self, FloatTensor, OutTensor};

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
    #[command(flatten)]
    t: FloatToolArgs,
}

pub fn run(args: &QdqArgs) -> Result<()> {
    let a = &args.t;
    let FloatToolRun {
        profile: p,
        format,
        mode,
        backend: b,
        inputs,
    } = a.prepare()?;
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
