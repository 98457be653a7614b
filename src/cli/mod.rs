//! The subcommands, one file each: its clap arguments (with the help text and an example) and
//! its `run`. What a subcommand computes lives in the library; these files parse, call and print.

mod bench;
mod check;
mod demo;
mod dequantize;
mod extract;
mod gen;
mod golden;
mod info;
mod layers;
mod moe;
mod qdq;
mod quantize;
mod verify;

use anyhow::{anyhow, Result};
use clap::{Args, Parser, Subcommand};
use mxmoe::backend::{Backend, BackendKind};
use mxmoe::format::{MxFormat, Profile, ProfileId, ScaleMode};
use mxmoe::io::{self, LayerQuery, LoadedLayer};
use mxmoe::scheme::Scheme;
use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "mxmoe",
    version,
    about = "Portable, exact reference for OCP MX-quantized Mixture-of-Experts inference",
    long_about = "Portable, exact reference for OCP MX-quantized Mixture-of-Experts inference.\n\n\
Formats: mxfp4 (E2M1), mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, mxfp8_e5m2, mxint8, with E8M0 block\n\
scales over 32 elements. Scale modes: floor (OCP), even (Quark/vLLM, default), ceil, rceil (NVIDIA).\n\
Backends: cpu (the exact reference), wgpu (WGSL on any GPU or lavapipe), hip (feature-gated).",
    after_help = "Start with `mxmoe demo`: it runs a MoE layer on every available backend and checks it."
)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// The variants carry no doc comments: each subcommand's help is on its args struct.
#[derive(Subcommand)]
enum Cmd {
    Quantize(quantize::QuantizeArgs),
    Dequantize(dequantize::DequantizeArgs),
    Qdq(qdq::QdqArgs),
    Moe(moe::MoeArgs),
    Gen(gen::GenArgs),
    Layers(layers::LayersArgs),
    Extract(extract::ExtractArgs),
    Check(check::CheckArgs),
    Verify(verify::VerifyArgs),
    Golden(golden::GoldenArgs),
    Bench(bench::BenchArgs),
    Info(info::InfoArgs),
    Demo(demo::DemoArgs),
}

impl Cli {
    pub fn run(self) -> Result<()> {
        match self.cmd {
            Cmd::Quantize(a) => quantize::run(&a),
            Cmd::Dequantize(a) => dequantize::run(&a),
            Cmd::Qdq(a) => qdq::run(&a),
            Cmd::Moe(a) => moe::run(&a),
            Cmd::Gen(a) => gen::run(&a),
            Cmd::Layers(a) => layers::run(&a),
            Cmd::Extract(a) => extract::run(&a),
            Cmd::Check(a) => check::run(&a),
            Cmd::Verify(a) => verify::run(&a),
            Cmd::Golden(a) => golden::run(&a),
            Cmd::Bench(a) => bench::run(&a),
            Cmd::Info(a) => info::run(&a),
            Cmd::Demo(a) => demo::run(&a),
        }
    }
}

// `--backend` and `--adapter` of the subcommands that run on one backend. (No doc comment: a
// flattened struct's doc comment would become the subcommand's about.)
#[derive(Args, Clone)]
pub struct BackendArgs {
    /// Backend: cpu, wgpu, hip or auto (wgpu when a GPU adapter exists, else cpu).
    #[arg(long, default_value = "cpu")]
    pub backend: BackendKind,
    /// Pick the GPU adapter whose name contains this text (also: MXMOE_ADAPTER).
    #[arg(long)]
    pub adapter: Option<String>,
}

impl BackendArgs {
    /// Open the backend; `auto` says on stderr which one it chose and why.
    pub fn open(&self) -> Result<Backend> {
        if self.backend == BackendKind::Auto {
            let (b, why) = Backend::open_auto(self.adapter.as_deref());
            eprintln!("{why}");
            return Ok(b);
        }
        Backend::open(self.backend, self.adapter.as_deref()).map_err(|e| anyhow!("{e}"))
    }
}

// `--layer` and its selector, for every subcommand that reads a layer. (No doc comment, as above.)
#[derive(Args, Clone)]
pub struct LayerSel {
    /// A layer bundle, a checkpoint file (safetensors or GGUF) or a model directory
    /// (model.safetensors.index.json + shards, or *.safetensors, with config.json).
    #[arg(long, value_name = "PATH")]
    pub layer: PathBuf,
    /// Which MoE layer, by the index `mxmoe layers` lists (needed when there are several).
    #[arg(long, value_name = "N")]
    pub layer_index: Option<usize>,
    /// Which MoE layer, by its name or a prefix matching one (e.g. model.layers.3.mlp).
    #[arg(long, value_name = "PREFIX")]
    pub layer_name: Option<String>,
    /// The layer's scheme, when the checkpoint does not record it (overrides metadata and
    /// config.json), e.g. w_mxfp4_a_mxfp4.
    #[arg(long)]
    pub scheme: Option<Scheme>,
}

impl LayerSel {
    pub fn query(&self) -> LayerQuery {
        LayerQuery {
            index: self.layer_index,
            name: self.layer_name.clone(),
            scheme: self.scheme,
        }
    }
    pub fn load(&self) -> Result<LoadedLayer> {
        Ok(io::load_layer_with(&self.layer, &self.query())?)
    }
}

// The layer selector of `quantize`, `dequantize` and `qdq`, whose input may be a layer file or a
// checkpoint (their `--input`). (No doc comment, as above.)
#[derive(Args, Clone, Default)]
pub struct LayerPick {
    /// With a checkpoint as input: which MoE layer (the index `mxmoe layers` lists).
    #[arg(long, value_name = "N")]
    pub layer_index: Option<usize>,
    /// With a checkpoint as input: which MoE layer, by name or prefix.
    #[arg(long, value_name = "PREFIX")]
    pub layer_name: Option<String>,
    /// With a checkpoint as input: its scheme, when it does not record one.
    #[arg(long)]
    pub scheme: Option<Scheme>,
}

impl LayerPick {
    fn given(&self) -> bool {
        self.layer_index.is_some() || self.layer_name.is_some() || self.scheme.is_some()
    }
    fn query(&self) -> LayerQuery {
        LayerQuery {
            index: self.layer_index,
            name: self.layer_name.clone(),
            scheme: self.scheme,
        }
    }

    /// Whether `input` is read as a layer: a selector was given, or it is a directory, a GGUF
    /// file, or a safetensors file in which an MoE layer is found.
    pub fn is_layer_input(&self, input: &std::path::Path) -> bool {
        self.given()
            || input.is_dir()
            || io::gguf::is_gguf(input)
            || io::list_layers(input, None).is_ok()
    }

    /// The layer's experts dequantized on `b`: `w13_weight` `[E, 2I, H]` and `w2_weight`
    /// `[E, H, I]` (f32), and the layer's scheme.
    pub fn expert_floats(
        &self,
        b: &Backend,
        input: &std::path::Path,
    ) -> Result<(Vec<io::FloatTensor>, Scheme)> {
        let l = io::load_layer_with(input, &self.query())?.layer;
        let mut out = Vec::new();
        for (name, t) in [("w13_weight", &l.weights.w13), ("w2_weight", &l.weights.w2)] {
            let data = b
                .dequantize(t)
                .map_err(|e| anyhow!("dequantizing {name} of {}: {e}", input.display()))?;
            out.push(io::FloatTensor {
                name: name.into(),
                data,
                shape: t.shape.clone(),
            });
        }
        eprintln!(
            "note: {}: taking the MoE layer's experts ({}, {} experts, H {}, I {}) as w13_weight and w2_weight",
            input.display(),
            l.config.scheme,
            l.config.local_experts,
            l.config.hidden,
            l.config.inter
        );
        Ok((out, l.config.scheme))
    }
}

// The arguments `quantize` and `qdq` share: the format, the scale mode and profile, the input
// (float tensors, or a layer's experts) and the output. (No doc comment, as above.)
#[derive(Args)]
pub struct FloatToolArgs {
    /// mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, mxfp8_e5m2 or mxint8.
    #[arg(long)]
    pub format: MxFormat,
    /// floor, even, ceil or rceil (default: even, or the profile's own mode).
    #[arg(long)]
    pub scale_mode: Option<ScaleMode>,
    /// Compatibility profile: contract, ocp, quark, torchao, nvidia, microxcaling or ggml.
    #[arg(long, default_value = "contract")]
    pub profile: ProfileId,
    #[arg(long)]
    pub input: PathBuf,
    #[arg(long)]
    pub output: PathBuf,
    /// Only these tensors (repeatable).
    #[arg(long = "tensor", value_name = "NAME")]
    pub tensors: Vec<String>,
    #[command(flatten)]
    pub backend: BackendArgs,
    #[command(flatten)]
    pub pick: LayerPick,
}

/// What [`FloatToolArgs::prepare`] gives a command: the profile, the format and scale mode it
/// resolved, the opened backend and the float tensors to work on.
pub struct FloatToolRun {
    pub profile: Profile,
    pub format: MxFormat,
    pub mode: ScaleMode,
    pub backend: Backend,
    pub inputs: Vec<io::FloatTensor>,
}

impl FloatToolArgs {
    /// Check the paths and the profile, open the backend, read the input: the `--tensor`s of a
    /// float file, or (a layer file or checkpoint) the layer's experts dequantized.
    pub fn prepare(&self) -> Result<FloatToolRun> {
        let profile = self.profile.spec();
        let (format, mode) = (self.format, profile.mode(self.scale_mode));
        io::check_outputs(&[("--output", &self.output)], &[("--input", &self.input)])?;
        profile_backend(self.profile, &self.backend)?;
        profile.check(format, mode)?;
        let backend = self.backend.open()?;
        let inputs = if self.tensors.is_empty() && self.pick.is_layer_input(&self.input) {
            self.pick.expert_floats(&backend, &self.input)?.0
        } else {
            let f = io::StFile::open(&self.input)?;
            io::float_tensors_named(&f, &self.tensors, note)?
        };
        Ok(FloatToolRun {
            profile,
            format,
            mode,
            backend,
            inputs,
        })
    }
}

/// A backend named on the command line, opened or not (with the reason).
pub type Opened = (String, Result<Backend, String>);

/// Open the backends `which` names: `all` (every concrete backend, in order) or one of `cpu`,
/// `wgpu`, `hip`, `auto`. A backend that cannot open is returned with its reason, to be
/// reported as skipped; an unknown name is an error.
pub fn open_backends(which: &str, adapter: Option<&str>) -> Result<Vec<Opened>> {
    let kinds: Vec<(String, BackendKind)> = match which {
        "all" => BackendKind::ALL
            .iter()
            .map(|&k| (k.name().to_string(), k))
            .collect(),
        w => vec![(
            w.to_string(),
            w.parse::<BackendKind>().map_err(|e| anyhow!(e))?,
        )],
    };
    Ok(kinds
        .into_iter()
        .map(|(n, k)| (n, Backend::open(k, adapter).map_err(|e| e.to_string())))
        .collect())
}

/// `--profile` of the commands that quantize: a non-default profile runs on the CPU reference.
pub fn profile_backend(profile: ProfileId, b: &BackendArgs) -> Result<()> {
    if profile != ProfileId::Contract && b.backend != BackendKind::Cpu {
        anyhow::bail!(
            "--profile {profile} reproduces {} and runs on the CPU reference only (use --backend cpu)",
            profile.spec().peer
        );
    }
    Ok(())
}

/// safetensors metadata from key-value pairs.
pub fn meta<const N: usize>(pairs: [(&str, String); N]) -> HashMap<String, String> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Print a note on stderr (a tensor skipped, ...).
pub fn note(msg: &str) {
    eprintln!("note: {msg}");
}
