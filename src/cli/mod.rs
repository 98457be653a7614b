//! The subcommands, one file each: its clap arguments (with the help text and an example) and
//! its `run`. What a subcommand computes lives in the library; these files parse, call and print.

mod bench;
mod check;
mod demo;
mod dequantize;
mod gen;
mod golden;
mod info;
mod moe;
mod qdq;
mod quantize;
mod verify;

use anyhow::{anyhow, Result};
use clap::{Args, Parser, Subcommand};
use mxmoe::backend::{Backend, BackendKind};
use mxmoe::format::ProfileId;
use std::collections::HashMap;

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
