//! `mxmoe quantize`: the float tensors of a file (any rank, blocks along the last axis), or a
//! layer's experts, to an MX format.

use super::{FloatToolArgs, FloatToolRun};
use anyhow::{bail, Context, Result};
use clap::Args;
use mxmoe::format::ProfileId;
use mxmoe::io::{self, FloatTensor};

/// Quantize the float tensors of a safetensors file (any rank; blocks along the last axis), or
/// the experts of a layer file / checkpoint, to an MX format.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe quantize --format mxfp4 --scale-mode even --input w.safetensors --output w.mxfp4.safetensors\n  \
mxmoe quantize --profile ggml --format mxfp4 --input w.safetensors --output w.ggml.safetensors\n\n\
Each float tensor T [..., K] (f32/bf16/f16, K % 32 == 0; e.g. an expert stack [E, N, K]) becomes T\n\
(u8 packed, [..., packed(K)]) and T_scale (u8 E8M0, [..., K/32]); metadata: format, scale_mode.\n\
--tensor NAME (repeatable) takes only those tensors. A layer file or checkpoint (a bundle, a model\n\
directory, GGUF; --layer-index/--layer-name pick the layer) gives its experts, dequantized, as\n\
w13_weight [E, 2I, H] and w2_weight [E, H, I]: re-quantizing them checks a quantizer on MoE weights.\n\
With --profile the metadata records it (ggml writes its split nibble order; `dequantize` reads it\n\
back). Profiles (docs/NUMERICS.md 17): contract (default), ocp, quark, torchao, nvidia,\n\
microxcaling, ggml. A peer that only fake-quantizes a block (Quark's scales below 2^-127,\n\
microxcaling's NaN exponent) makes quantize fail for that block; use qdq."
)]
pub struct QuantizeArgs {
    #[command(flatten)]
    t: FloatToolArgs,
}

pub fn run(args: &QuantizeArgs) -> Result<()> {
    let a = &args.t;
    let FloatToolRun {
        profile: p,
        format,
        mode,
        backend: b,
        inputs,
    } = a.prepare()?;
    // Each T becomes T and T_scale: refuse inputs where that writes one name twice.
    let taken: std::collections::HashSet<&str> = inputs.iter().map(|t| t.name.as_str()).collect();
    if let Some(t) = inputs
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
    for FloatTensor { name, data, shape } in inputs {
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
