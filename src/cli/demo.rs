//! `mxmoe demo`: a realistic synthetic layer under each OCP MX scheme on every available
//! backend, each checked against the f64 reference (the README's first command).

use super::open_backends;
use anyhow::{bail, Result};
use clap::Args;
use mxmoe::backend::BackendError;
use mxmoe::check::{verify, MOE_REL_L2};
use mxmoe::moe::synth::{synth_batch, synth_layer, SynthSpec};
use mxmoe::moe::{self, Accumulate, MoeOptions};
use mxmoe::scheme::Scheme;
use std::time::Instant;

/// Build a realistic synthetic layer, run it on every available backend, check each against
/// the f64 reference.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe demo\n  mxmoe demo --experts 128 --hidden 2880 --inter 2880 --top-k 4 --tokens 64"
)]
pub struct DemoArgs {
    #[arg(long, default_value_t = 32)]
    experts: usize,
    #[arg(long, default_value_t = 512)]
    hidden: usize,
    #[arg(long, default_value_t = 512)]
    inter: usize,
    #[arg(long, default_value_t = 4)]
    top_k: usize,
    #[arg(long, default_value_t = 16)]
    tokens: usize,
    #[arg(long)]
    adapter: Option<String>,
}

/// One line of the table: scheme, backend, adapter, prepare ms, forward ms, rel-L2, verdict.
fn row(cells: [&str; 6], verdict: &str) {
    let [scheme, backend, adapter, prep, fwd, rel] = cells;
    println!("{scheme:<28} {backend:<8} {adapter:<34} {prep:>10} {fwd:>11} {rel:>11}  {verdict}");
}

pub fn run(a: &DemoArgs) -> Result<()> {
    let (experts, hidden, inter, top_k, tokens) = (a.experts, a.hidden, a.inter, a.top_k, a.tokens);
    println!("mxmoe demo: a synthetic MoE layer ({experts} experts, H {hidden}, I {inter}, top-{top_k}, {tokens} tokens;");
    println!("heavy-tailed weights, skewed router logits) under each OCP MX scheme, on every available backend,");
    println!("checked against the exact f64 CPU reference (bound: rel-L2 <= {MOE_REL_L2:.0e}).\n");
    let mut backends = Vec::new();
    for (name, b) in open_backends("all", a.adapter.as_deref())? {
        match b {
            Ok(b) => backends.push(b),
            Err(e) => println!("{name}: not available ({e})"),
        }
    }
    println!();
    row(
        [
            "scheme",
            "backend",
            "adapter",
            "prepare ms",
            "forward ms",
            "rel-L2",
        ],
        "verdict",
    );
    let mut bad = 0;
    let opts = MoeOptions {
        accumulate: Accumulate::F32,
        ..Default::default()
    };
    for scheme in Scheme::OCP_MX {
        let mut spec = SynthSpec::new(scheme, experts, hidden, inter, top_k);
        spec.seed = 2026;
        let layer = synth_layer(&spec)?.layer;
        let (h, lg) = synth_batch(tokens, hidden, experts, 7);
        let want = moe::forward(&layer, &h, &lg, MoeOptions::default())?;
        let scheme = scheme.name();
        for b in &backends {
            let ad: String = b.adapter().chars().take(34).collect();
            let ad = ad.trim_end_matches(['(', ' ', ',']);
            // Prepare (upload) once, warm up once (pipelines), then time one forward.
            let t0 = Instant::now();
            let r = b.prepare(&layer).and_then(|p| {
                let prep_ms = t0.elapsed().as_secs_f64() * 1e3;
                b.moe(&p, &h, &lg, opts)?;
                let t1 = Instant::now();
                let got = b.moe(&p, &h, &lg, opts)?;
                Ok((prep_ms, t1.elapsed().as_secs_f64() * 1e3, got))
            });
            match r {
                Ok((prep_ms, ms, got)) => {
                    let (rel, ok) = verify::agrees(&got, &want);
                    bad += !ok as usize;
                    let (prep, fwd, rel) = (
                        format!("{prep_ms:.2}"),
                        format!("{ms:.2}"),
                        format!("{rel:.3e}"),
                    );
                    let verdict = if ok { "OK" } else { "FAIL" };
                    row([&scheme, b.name(), ad, &prep, &fwd, &rel], verdict);
                }
                Err(e) => {
                    let s = if matches!(e, BackendError::Unsupported { .. }) {
                        "UNSUPPORTED"
                    } else {
                        bad += 1;
                        "FAIL"
                    };
                    row([&scheme, b.name(), ad, "-", "-", "-"], &format!("{s}: {e}"));
                }
            }
        }
    }
    if bad > 0 {
        bail!("{bad} run(s) disagreed with the reference");
    }
    println!("\nall backends agree with the reference.");
    Ok(())
}
