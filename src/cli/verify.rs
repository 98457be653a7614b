//! `mxmoe verify`: a MoE result produced elsewhere against the reference
//! ([`mxmoe::check::verify`] computes the report; this prints it).

use anyhow::{bail, Result};
use clap::Args;
use mxmoe::check::verify::{self, VerifyError, VerifyReport};
use mxmoe::io;
use std::path::PathBuf;

/// Check a MoE result produced elsewhere (vLLM, SGLang, your kernel) against the reference.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe verify --layer layer.safetensors --input batch.safetensors --result theirs.safetensors\n\n\
Reports the routing agreement and the output error against the f64 reference under each activation\n\
scale mode (floor/even/ceil/rceil) and with/without bf16 intermediates, and names the closest."
)]
pub struct VerifyArgs {
    #[arg(long)]
    layer: PathBuf,
    #[arg(long)]
    input: PathBuf,
    #[arg(long)]
    result: PathBuf,
    /// Relative-L2 bound for "within tolerance".
    #[arg(long, default_value_t = 1e-2)]
    tolerance: f64,
}

pub fn run(a: &VerifyArgs) -> Result<()> {
    let l = io::load_layer(&a.layer)?.layer;
    let batch = io::load_batch(&a.input)?;
    let theirs = io::load_result(&a.result)?;
    let rep = match verify::verify(&l, &batch, &theirs, a.tolerance) {
        Ok(r) => r,
        Err(e @ VerifyError::Shape { .. }) => bail!("{}: {e}", a.result.display()),
        Err(e) => return Err(e.into()),
    };
    print(&rep);
    if !rep.verdict.passed() {
        bail!("result does not match the reference")
    }
    Ok(())
}

fn print(r: &VerifyReport) {
    // A result file always has ids and weights (io::load_result requires them).
    println!(
        "routing: {}",
        match r.ids_identical {
            Some(true) => "ids identical".to_string(),
            Some(false) => format!(
                "{} of {} ids differ",
                r.ids_differ.unwrap_or(0),
                r.ids_total
            ),
            None => "ids not given".to_string(),
        }
    );
    if let Some(w) = r.routing_weights_rel_l2 {
        println!("routing weights rel-L2 vs reference: {w:.3e}");
    }
    println!(
        "{:<28} {:>12} {:>12}",
        "reference variant", "rel-L2", "max abs"
    );
    for v in &r.variants {
        println!("{:<28} {:>12.3e} {:>12.3e}", v.name(), v.rel_l2, v.max_abs);
    }
    let (name, rel) = r
        .closest()
        .map_or((String::new(), f64::INFINITY), |v| (v.name(), v.rel_l2));
    println!("closest reference: {name} (rel-L2 {rel:.3e})");
    let w = &r.worst;
    println!(
        "worst element vs contract: token {}, column {}: theirs {:e}, reference {:e}",
        w.token, w.column, w.theirs, w.reference
    );
    println!("verdict: {}", r.summary());
}
