//! `mxmoe bench`: time a MoE layer on a backend at several token counts.

use super::BackendArgs;
use anyhow::{anyhow, bail, Result};
use clap::Args;
use mxmoe::backend::wgpu::GemvConfig;
use mxmoe::backend::BackendKind;
use mxmoe::bench::{BenchParams, BenchResult};
use mxmoe::check;
use mxmoe::check::MOE_REL_L2;
use mxmoe::io;
use mxmoe::moe::budget;
use mxmoe::moe::presets::Preset;
use mxmoe::scheme::Scheme;
use std::path::PathBuf;

/// The floor's bandwidth where this device's cannot be measured (wgpu without timestamp
/// queries), GB/s: the WGSL streaming read measured on an H200.
const FALLBACK_HBM_GBPS: f64 = 4550.0;

/// `--hbm-gbps`: a bandwidth in GB/s, or `measure` (this device's copy bandwidth).
#[derive(Clone, Copy, Debug)]
enum FloorBandwidth {
    Measure,
    Gbps(f64),
}

impl std::str::FromStr for FloorBandwidth {
    type Err = String;
    fn from_str(v: &str) -> Result<Self, String> {
        if v.trim() == "measure" {
            return Ok(FloorBandwidth::Measure);
        }
        match v.trim().parse::<f64>() {
            Ok(g) if g.is_finite() && g > 0.0 => Ok(FloorBandwidth::Gbps(g)),
            _ => Err(format!(
                "'{v}' is neither a positive bandwidth in GB/s nor `measure`"
            )),
        }
    }
}

/// Time a MoE layer on a backend at several token counts; JSON with ratios to the floor.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16,64 --json bench.json\n\n\
Shapes: gpt-oss-120b (128 experts, H = I = 2880, top-4, swigluoai, w_mxfp4), deepseek-r1 (256 experts,\n\
H 7168, I 2048, top-8, w_mxfp4_a_mxfp4), or custom with --experts/--hidden/--inter/--top-k. Weights are\n\
random finite codes with plausible scales. The floor is the packed bytes of the experts the tokens\n\
touch divided by --hbm-gbps: by default (`measure`) this device's copy bandwidth, measured before the\n\
benchmark (read + write of a 256 MiB copy on a GPU, 64-128 MiB on a CPU or CPU adapter; where it cannot\n\
be measured, 4550 GB/s, the WGSL streaming read measured on an H200), or the GB/s given.\n\n\
Each point warms up (>= 1 s back to back), then times wall (submit + GPU + readback), GPU time (the forward\n\
as one span of timestamps / events, gaps between kernels included), in a third phase each pass on its own\n\
(the `passes` breakdown) and in a fourth the host phases (wgpu, HIP): `up` the activations' upload, `fwd`\n\
the forward with its inputs on the device (host setup, submit, GPU, wait), `rb` the readback; each phase\n\
ends with a wait, so their sum exceeds the plain wall by a device round trip or two. `fwd - gpu` is the\n\
forward's own host overhead. The output is checked against the CPU reference."
)]
pub struct BenchArgs {
    #[arg(long, default_value = "auto")]
    backend: BackendKind,
    #[arg(long)]
    adapter: Option<String>,
    /// gpt-oss-120b, deepseek-r1 or custom.
    #[arg(long, default_value = "gpt-oss-120b")]
    shape: String,
    /// Scheme (overrides the shape's).
    #[arg(long)]
    scheme: Option<Scheme>,
    #[arg(long)]
    experts: Option<usize>,
    #[arg(long)]
    hidden: Option<usize>,
    #[arg(long)]
    inter: Option<usize>,
    #[arg(long)]
    top_k: Option<usize>,
    /// Comma-separated token counts.
    #[arg(long, default_value = "1,4,16,64")]
    tokens: String,
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Distinct token batches cycled through (defeats L2 reuse between iterations).
    #[arg(long, default_value_t = 8)]
    rotate: usize,
    /// Memory bandwidth the floor divides by: GB/s, or `measure` (this device's copy
    /// bandwidth, measured before the benchmark).
    #[arg(long, default_value = "measure", value_name = "GBPS|measure")]
    hbm_gbps: FloorBandwidth,
    /// Skip the correctness check against the CPU reference.
    #[arg(long)]
    no_check: bool,
    #[arg(long)]
    json: Option<PathBuf>,
    /// wgpu: compare decode GEMV layouts on the same layer, e.g.
    /// `shared,subgroup,subgroup+words+prefetch` (lane sums in workgroup memory or by
    /// subgroupAdd; `+prefetch`: each lane loads its next block before the current block's math;
    /// `+words`: lanes take 8-code words, not 32-blocks; `+split2`, `+split4`: 2 or 4
    /// subgroups per lane group along K, e.g. `subgroup+words+prefetch`; `+onerow`: one-token
    /// forwards run pipelines specialized for one-row tiles). Default: the backend's choice.
    #[arg(long)]
    gemv_layouts: Option<String>,
    /// bf16 activations, as a bf16 model runs the layer (vLLM's gpt-oss; the peers take bf16
    /// inputs): the hidden states rounded to bf16 values and the intermediates rounded to bf16
    /// (the catalog's vLLM-parity option); the CPU check does the same. Default: the contract's
    /// f32 hidden states and intermediates.
    #[arg(long)]
    bf16_activations: bool,
}

pub fn run(a: &BenchArgs) -> Result<()> {
    // The shape's layer comes from the case catalog (whose model shapes are moe::presets).
    a.shape.parse::<Preset>()?;
    let mut spec = check::catalog::model_shape(&a.shape).expect("a preset names a model shape");
    let s = &mut spec.synth;
    if let Some(x) = a.scheme {
        s.scheme = x;
    }
    if let Some(x) = a.experts {
        s.n_experts = x;
    }
    if let Some(x) = a.hidden {
        s.hidden = x;
    }
    if let Some(x) = a.inter {
        s.inter = x;
    }
    if let Some(x) = a.top_k {
        s.router.top_k = x;
    }
    let tokens: Vec<usize> = a
        .tokens
        .split(',')
        .map(|t| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| anyhow!("--tokens: '{t}' is not a number"))
        })
        .collect::<Result<_>>()?;
    if tokens.contains(&0) || a.iters == 0 {
        bail!("--tokens values and --iters must be at least 1");
    }
    // Sizes checked before anything is allocated (the layer is built packed).
    let s = &spec.synth;
    let most = tokens.iter().copied().max().unwrap_or(1);
    budget::check_synth(s.scheme.weight, s.n_experts, s.hidden, s.inter, true, most)?;
    let gemv_layouts = match &a.gemv_layouts {
        None => Vec::new(),
        Some(v) => v
            .split(',')
            .map(|t| {
                let mut c = GemvConfig::SHARED;
                for (i, part) in t.trim().split('+').enumerate() {
                    match (i, part) {
                        (0, "shared") => c.subgroup = false,
                        (0, "subgroup") => c.subgroup = true,
                        (i, "prefetch") if i > 0 => c.prefetch = true,
                        (i, "words") if i > 0 => c.words = true,
                        (i, "split2") if i > 0 => c.split = 2,
                        (i, "split4") if i > 0 => c.split = 4,
                        (i, "onerow") if i > 0 => c.one_row = true,
                        _ => bail!(
                            "--gemv-layouts: '{t}': expected shared or subgroup, optionally \
                             followed by +prefetch, +words, +onerow (one-token \
                             pipelines) and (subgroup) +split2 or +split4"
                        ),
                    }
                }
                Ok(c)
            })
            .collect::<Result<_>>()?,
    };
    let mut p = BenchParams {
        gemv_layouts,
        tokens,
        iters: a.iters,
        rotate: a.rotate,
        hbm_gbps: FALLBACK_HBM_GBPS,
        floor_source: String::new(),
        check: !a.no_check,
        bf16_activations: a.bf16_activations,
    };
    let ba = BackendArgs {
        backend: a.backend,
        adapter: a.adapter.clone(),
    };
    let b = ba.open()?;
    (p.hbm_gbps, p.floor_source) = match a.hbm_gbps {
        FloorBandwidth::Gbps(g) => (g, "from --hbm-gbps".into()),
        FloorBandwidth::Measure => {
            eprintln!(
                "bench: measuring the copy bandwidth of {} for the floor",
                b.name()
            );
            match mxmoe::bench::floor_bandwidth(&b) {
                Ok(Some(m)) => m,
                r => {
                    let why = match r {
                        Err(e) => format!("the copy failed: {e}"),
                        _ => "no timestamp queries on this adapter".into(),
                    };
                    eprintln!("bench: the floor's bandwidth was not measured: {why}");
                    (
                        FALLBACK_HBM_GBPS,
                        format!(
                            "not measured ({why}): the WGSL streaming read measured on an \
                             NVIDIA H200; set --hbm-gbps to this device's bandwidth"
                        ),
                    )
                }
            }
        }
    };
    eprintln!(
        "bench: {} {} on {} [{}]",
        spec.tag(),
        spec.synth.scheme,
        b.name(),
        b.adapter()
    );
    let res = mxmoe::bench::run(&b, &spec, &p, |s| eprintln!("  {s}"))?;
    println!("{}", floor_words(p.hbm_gbps, &p.floor_source));
    print_table(&res);
    if let Some(path) = &a.json {
        io::write_atomic(path, serde_json::to_string_pretty(&res)?.as_bytes())?;
        eprintln!("wrote {}", path.display());
    }
    let disagrees = |x: f64| x.is_nan() || x > MOE_REL_L2;
    if let Some(bad) = res.iter().find(|r| r.rel_l2_vs_cpu.is_some_and(disagrees)) {
        bail!(
            "M = {}: output disagrees with the CPU reference (worst rel-L2 of {} checked forwards: {:?})",
            bad.tokens,
            bad.checked_forwards,
            bad.rel_l2_vs_cpu
        );
    }
    if let Some(bad) = res.iter().find(|r| r.ids_match == Some(false)) {
        bail!(
            "M = {}: routing ids differ from the CPU reference on the {} checked token(s) (in at least one of {} checked forwards)",
            bad.tokens,
            bad.checked_tokens,
            bad.checked_forwards
        );
    }
    Ok(())
}

/// The bandwidth the floor divides by, and where the figure comes from.
fn floor_words(gbps: f64, source: &str) -> String {
    format!("floor: packed bytes of the touched experts / {gbps:.0} GB/s ({source})")
}

fn print_table(res: &[BenchResult]) {
    println!(
        "{:>6} {:>8} {:>10} {:>10} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9} {:>8} {:>10}",
        "tokens",
        "experts",
        "wall ms",
        "gpu ms",
        "up ms",
        "fwd ms",
        "rb ms",
        "floor ms",
        "GB/s",
        "TFLOP/s",
        "x floor",
        "rel-L2"
    );
    for r in res {
        let ph = |f: fn(&mxmoe::bench::HostPhases) -> f64| {
            r.host_phases
                .as_ref()
                .map_or("-".into(), |p| format!("{:.3}", f(p)))
        };
        println!(
            "{:>6} {:>8.1} {:>10.3} {:>10} {:>9} {:>9} {:>9} {:>10.4} {:>9.0} {:>9.2} {:>8.1} {:>10}",
            r.tokens,
            r.active_experts,
            r.wall_ms,
            r.gpu_ms.map_or("-".into(), |g| format!("{g:.3}")),
            ph(|p| p.upload_ms[1]),
            ph(|p| p.forward_ms[1]),
            ph(|p| p.readback_ms[1]),
            r.floor_ms,
            r.gbps,
            r.tflops,
            r.ratio_to_floor,
            r.rel_l2_vs_cpu.map_or("-".into(), |x| format!("{x:.2e}"))
        );
    }
}
