//! `mxmoe check`: the conformance suite on a backend (or all) against the CPU reference.
//!
//! CI-friendly: a backend named explicitly that cannot be opened is a failure; with
//! `--backend all` missing backends are listed with the reason and `--require` makes them a
//! failure; `--json` and `--junit` carry totals. Exit code 0 only when nothing failed.

use anyhow::{anyhow, bail, Result};
use clap::Args;
use mxmoe::backend::BackendKind;
use mxmoe::check::report::{self, Totals};
use mxmoe::check::{self, Status, Suite};
use mxmoe::io;
use std::path::PathBuf;
use std::time::Instant;

/// Run the conformance suite on a backend (or all) against the CPU reference.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe check --backend all\n  mxmoe check --backend all --require wgpu --junit check.xml\n  mxmoe check --backend wgpu --suite full --json report.json\n\n\
A backend named explicitly (cpu, wgpu, hip) that cannot be opened is a failure (exit 1). With\n\
--backend all, backends that cannot be opened are listed as missing with the reason and skipped,\n\
unless --require names them (or MXMOE_REQUIRE_GPU=1 and the backend is compiled in)."
)]
pub struct CheckArgs {
    /// cpu, wgpu, hip, auto or all.
    #[arg(long, default_value = "all")]
    backend: String,
    #[arg(long)]
    adapter: Option<String>,
    /// quick (small shapes, CI) or full (larger shapes).
    #[arg(long, default_value = "quick")]
    suite: String,
    /// Comma-separated backends that must open (e.g. wgpu,hip): a missing one is a failure.
    #[arg(long, value_name = "LIST")]
    require: Option<String>,
    /// Only the cases whose id contains TEXT (e.g. `qdq/mxfp4`, `moe/`).
    #[arg(long, value_name = "TEXT")]
    filter: Option<String>,
    /// Print every case, not only failures and a summary.
    #[arg(long, short)]
    verbose: bool,
    /// Write the results as JSON (suite, totals, one object per backend).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the results as JUnit XML (one testsuite per backend, one testcase per case).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

/// The backends `--require` names (each a concrete backend).
fn required(list: &str) -> Result<Vec<String>> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.parse::<BackendKind>() {
            Ok(BackendKind::Auto) | Err(_) => Err(anyhow!(
                "--require: '{s}' is not a backend (expected a comma-separated list of cpu, wgpu, hip)"
            )),
            Ok(k) => Ok(k.name().to_string()),
        })
        .collect()
}

pub fn run(a: &CheckArgs) -> Result<()> {
    let suite = match a.suite.as_str() {
        "quick" => Suite::Quick,
        "full" => Suite::Full,
        s => bail!("unknown suite '{s}' (expected quick or full)"),
    };
    let require = a.require.as_deref().map(required).transpose()?.unwrap_or_default();
    // The case catalog on every backend that opens (outputs poisoned), each case's reference
    // computed once.
    if let (Some(j), Some(x)) = (&a.json, &a.junit) {
        io::check_outputs(&[("--json", j), ("--junit", x)], &[])?;
    }
    let mut opened = check::open_backends(&a.backend, a.adapter.as_deref(), check::require_gpu())
        .map_err(|e| anyhow!(e))?;
    for r in &require {
        match opened.iter_mut().find(|o| &o.name == r) {
            Some(o) => o.require(&format!("--require {r}")),
            None => bail!(
                "--require {r}: --backend {} does not run {r} (use --backend all or --backend {r})",
                a.backend
            ),
        }
    }
    for o in &opened {
        match &o.backend {
            Ok(b) => println!("== {} [{}]", b.name(), b.adapter()),
            Err(e) if o.fails => println!("== {}: NOT AVAILABLE, a failure ({}): {e}", o.name, o.fail_why),
            Err(e) => println!("== {}: missing, skipped: {e}", o.name),
        }
    }
    let mut cases = check::cases(suite);
    if let Some(f) = &a.filter {
        cases.retain(|c| c.id.contains(f.as_str()));
        if cases.is_empty() {
            bail!("--filter '{f}': no case of the {} suite has an id containing it", a.suite);
        }
    }
    let t0 = Instant::now();
    let reports = check::conformance(&opened, &cases, |name, r| {
        if a.verbose || r.status != Status::Ok {
            println!("{}", check::report::case_line(name, r));
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    for r in &reports {
        println!("{}", r.summary_line());
    }
    let totals = Totals::of(&reports);
    println!(
        "{} cases of the {} suite in {secs:.1} s (references included)",
        cases.len(),
        a.suite
    );
    println!("{}", totals.line());
    if let Some(p) = &a.json {
        let v = report::run_json(&a.suite, secs, &reports);
        io::write_atomic(p, serde_json::to_string_pretty(&v)?.as_bytes())?;
    }
    if let Some(p) = &a.junit {
        io::write_atomic(p, report::junit(&a.suite, &reports).as_bytes())?;
    }
    let failed = check::failures(&reports);
    if !failed.is_empty() {
        bail!("{} failure(s): {}", failed.len(), failed.join("; "));
    }
    Ok(())
}
