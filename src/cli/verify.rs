//! `mxmoe verify`: a MoE result produced elsewhere against the reference
//! ([`mxmoe::check::verify`] computes the report; this prints it and writes it as JSON).
//!
//! Exit codes: 0 match, 1 mismatch, 2 an input could not be read or is invalid.

use anyhow::{bail, Context, Result};
use clap::Args;
use mxmoe::check::verify::{self, VerifyOptions, VerifyReport};
use mxmoe::check::verify_stages::{verify_stages, Stage, StageDump};
use mxmoe::format::ProfileId;
use mxmoe::io::{self, StFile};
use std::path::{Path, PathBuf};

/// Check a MoE result produced elsewhere (vLLM, SGLang, your kernel) against the reference.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe verify --layer layer.safetensors --input batch.safetensors --result theirs.safetensors --json report.json\n\n\
The result file holds `output` [M, H] and optionally `topk_ids` / `topk_weights` [M, k] (top-k order\n\
does not matter: each token's experts are compared as a set, with their weights).\n\n\
Reference variants (docs/NUMERICS.md 10.5): `contract` (the layer's scale mode, f32 intermediates) and\n\
`vllm_bf16` (bf16 intermediates) are legitimate; the other scale modes are reported. Each legitimate\n\
variant's tolerance is half the rel-L2 from it to the nearest known fault on this layer and batch\n\
(capped by --tolerance). On a mismatch the reference is re-run with each known fault injected and\n\
the faults are listed closest first. Fault ids:\n\
  input_qdq_missing, intermediate_qdq_missing, activation_scale_mode_floor, activation_scale_mode_ceil,\n\
  activation_scale_mode_rceil, activation_scale_mode_even, fp4_nibbles_swapped, fp6_bytes_swapped,\n\
  gate_up_swapped, renormalize_missing, bf16_accumulation, bf16_intermediates,\n\
  router_weight_on_input_missing, routing_differs\n\n\
Per-stage verification (docs/NUMERICS.md 10.6): the result may also hold intermediates, any subset:\n\
  input_qdq_out [M, H]          the input after the activation QDQ\n\
  gemm1_out [M*k, 2I]           GEMM1 + bias (x router weight when applied on the input)\n\
  act_out [M*k, I]              the activation output, before the intermediate QDQ\n\
  intermediate_qdq_out [M*k, I] the intermediate after QDQ (GEMM2's input)\n\
  gemm2_out [M*k, H]            GEMM2 + bias, x router weight\n\
Per-slot rows are slot-major in the result's own top-k order (row t*k + j: token t's j-th topk_ids\n\
entry); verify names the first stage that leaves the reference and the faults closest there.\n\n\
--profile NAME runs the reference under a compatibility profile (contract, ocp, quark, torchao, nvidia,\n\
microxcaling, ggml; docs/NUMERICS.md 17).\n\n\
Exit codes: 0 match, 1 mismatch, 2 an input could not be read or is invalid."
)]
pub struct VerifyArgs {
    #[command(flatten)]
    sel: super::LayerSel,
    #[arg(long)]
    input: PathBuf,
    #[arg(long)]
    result: PathBuf,
    /// Upper bound on every variant's relative-L2 tolerance.
    #[arg(long, default_value_t = 1e-2)]
    tolerance: f64,
    /// Accept only the contract: bf16 intermediates become the fault `bf16_intermediates`.
    #[arg(long)]
    contract_only: bool,
    /// Compatibility profile the reference runs under: contract (default), ocp, quark, torchao,
    /// nvidia, microxcaling or ggml (docs/NUMERICS.md 17).
    #[arg(long, default_value = "contract")]
    profile: ProfileId,
    /// Write the whole report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// A result file: `output`, and `topk_ids` / `topk_weights` when present.
type Theirs = (Vec<f32>, Option<Vec<i32>>, Option<Vec<f32>>);

/// The stage tensors a result file holds (3-D `[M, k, w]` is read as `[M*k, w]`).
fn load_stages(path: &Path) -> Result<StageDump> {
    let f = StFile::open(path)?;
    let mut d = StageDump::default();
    for s in Stage::ALL {
        if f.has(s.name()) {
            let (v, _) = f.floats(s.name())?;
            d.stages.push((s, v));
        }
    }
    Ok(d)
}

fn load_theirs(path: &Path) -> Result<Theirs> {
    let f = StFile::open(path)?;
    if f.has("topk_ids") && f.has("topk_weights") {
        let r = io::load_result(path)?;
        return Ok((
            r.output,
            Some(r.routing.topk_ids),
            Some(r.routing.topk_weights),
        ));
    }
    if f.has("topk_weights") {
        bail!("{}: topk_weights without topk_ids", path.display());
    }
    let (output, shape) = f.floats("output")?;
    if shape.len() != 2 {
        bail!(
            "{}: output has shape {shape:?}, expected [M, H]",
            path.display()
        );
    }
    let ids = match f.has("topk_ids") {
        true => Some(
            f.ints("topk_ids")?
                .0
                .into_iter()
                .map(|v| v as i32)
                .collect(),
        ),
        false => None,
    };
    Ok((output, ids, None))
}

fn report(a: &VerifyArgs) -> Result<VerifyReport> {
    if let Some(j) = &a.json {
        io::check_outputs(
            &[("--json", j)],
            &[("--layer", &a.sel.layer), ("--input", &a.input), ("--result", &a.result)],
        )?;
    }
    let loaded = a.sel.load()?;
    for w in &loaded.warnings {
        eprintln!("warning: {}: {w}", a.sel.layer.display());
    }
    let batch = io::load_batch_for(&a.input, loaded.router.as_ref())?;
    let mut l = loaded.layer;
    // As `moe --profile`: a layer mode the peer lacks becomes the profile's own.
    let p = a.profile.spec();
    if !p.modes.contains(&l.config.act_scale_mode) {
        eprintln!(
            "profile {}: {} has no '{}' scale mode; the reference uses its '{}'",
            p.name, p.peer, l.config.act_scale_mode, p.default_mode
        );
        l.config.act_scale_mode = p.default_mode;
    }
    let (output, ids, weights) = load_theirs(&a.result)?;
    let dump = load_stages(&a.result)?;
    let opts = VerifyOptions {
        tolerance_cap: a.tolerance,
        accept_bf16: !a.contract_only,
        profile: a.profile,
    };
    let mut rep = verify::verify_with(
        &l,
        &batch,
        &output,
        ids.as_deref(),
        weights.as_deref(),
        &opts,
    )
    .with_context(|| a.result.display().to_string())?;
    verify_stages(&l, &batch, &mut rep, &dump, ids.as_deref(), &opts)
        .with_context(|| a.result.display().to_string())?;
    Ok(rep)
}

pub fn run(a: &VerifyArgs) -> Result<()> {
    let rep = match report(a) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    };
    print(&rep);
    if let Some(p) = &a.json {
        let text = serde_json::to_string_pretty(&rep)?;
        io::write_atomic(p, (text + "\n").as_bytes())?;
    }
    if !rep.verdict.passed() {
        bail!("result does not match the reference")
    }
    Ok(())
}

fn print(r: &VerifyReport) {
    let routing = match (r.ids_identical, r.tokens_same_experts) {
        (Some(true), _) => format!("same experts for all {} tokens", r.tokens),
        (Some(false), s) => format!(
            "{} of {} ids differ ({} of {} tokens have the same experts)",
            r.ids_differ.unwrap_or(0),
            r.ids_total,
            s.unwrap_or(0),
            r.tokens
        ),
        (None, _) => "ids not given".to_string(),
    };
    if r.profile != "contract" {
        println!("profile: {}", r.profile);
    }
    println!("routing: {routing}");
    if let Some(w) = r.routing_weights_rel_l2 {
        println!(
            "routing weights rel-L2 vs reference (aligned by id): {w:.3e} (bound {:e})",
            r.routing_weights_tolerance
        );
    }
    println!(
        "{:<20} {:>5} {:>11} {:>11} {:>11}  nearest fault",
        "reference variant", "legit", "rel-L2", "max abs", "tolerance"
    );
    for v in &r.variants {
        let tol = v.tolerance.map_or("-".into(), |t| format!("{t:.3e}"));
        let near = v
            .nearest_fault
            .as_ref()
            .map_or(String::new(), |n| format!("{} ({:.3e})", n.fault, n.rel_l2));
        println!(
            "{:<20} {:>5} {:>11.3e} {:>11.3e} {:>11}  {near}",
            v.id,
            if v.legitimate { "yes" } else { "no" },
            v.rel_l2,
            v.max_abs,
            tol
        );
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
    if !r.diagnosis.is_empty() {
        println!("diagnosis (injected fault that explains the result best first):");
        for d in r.diagnosis.iter().take(5) {
            println!("  {:<32} rel-L2 {:.3e}", d.fault, d.rel_l2);
        }
        if let Some(m) = r.diagnosis_margin {
            println!("  margin to the next: {m:.3e}");
        }
    }
    if !r.skipped_faults.is_empty() {
        let s: Vec<&str> = r.skipped_faults.iter().map(|s| s.fault).collect();
        println!("not probed: {}", s.join(", "));
    }
    if !r.stages.is_empty() {
        println!(
            "{:<22} {:>6} {:>11} {:>11} {:>11}  {:<10} nearest fault",
            "stage", "rows", "rel-L2", "tolerance", "max abs", "agrees"
        );
        for s in &r.stages {
            let near = s
                .nearest_fault
                .as_ref()
                .map_or(String::new(), |n| format!("{} ({:.3e})", n.fault, n.rel_l2));
            println!(
                "{:<22} {:>6} {:>11.3e} {:>11.3e} {:>11.3e}  {:<10} {near}",
                s.stage,
                s.rows,
                s.rel_l2,
                s.tolerance,
                s.max_abs,
                if s.agrees { "yes" } else { "NO" }
            );
        }
        match r.first_differing_stage {
            Some(st) => {
                println!("first differing stage: {st}");
                for d in r.stage_diagnosis.iter().take(3) {
                    println!("  {:<32} rel-L2 {:.3e} at {st}", d.fault, d.rel_l2);
                }
            }
            None => println!("every dumped stage agrees with the reference"),
        }
    }
    println!("variant: {}", r.variant.as_deref().unwrap_or("none"));
    println!("verdict: {}", r.summary());
}
