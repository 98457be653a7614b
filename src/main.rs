//! The `mxmoe` command line: quantize, dequantize, qdq, moe, gen, check, verify, info, demo.
//!
//! Errors are printed as `error: ...` (which file, which tensor, what was expected) with exit
//! code 1; outputs are written atomically, so a failed run leaves no file behind.

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use mxmoe::backend::{Backend, BackendKind};
use mxmoe::check::{self, Status, Suite};
use mxmoe::format::{MxFormat, ScaleMode, BLOCK};
use mxmoe::io::{self, OutTensor, StFile, TokenBatch};
use mxmoe::moe::synth::{synth_batch, synth_layer, synth_layer_packed, SynthSpec};
use mxmoe::moe::{self, Accumulate, Activation, Intermediate, MoeOptions, Scoring};
use mxmoe::scheme::Scheme;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

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
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Clone)]
struct BackendArgs {
    /// Backend: cpu, wgpu, hip or auto (wgpu when a GPU adapter exists, else cpu).
    #[arg(long, default_value = "cpu")]
    backend: BackendKind,
    /// Pick the GPU adapter whose name contains this text (also: MXMOE_ADAPTER).
    #[arg(long)]
    adapter: Option<String>,
}

impl BackendArgs {
    /// Open the backend; `auto` says on stderr which one it chose and why.
    fn open(&self) -> Result<Backend> {
        if self.backend == BackendKind::Auto {
            let (b, why) = Backend::open_auto(self.adapter.as_deref());
            eprintln!("{why}");
            return Ok(b);
        }
        Backend::open(self.backend, self.adapter.as_deref()).map_err(|e| anyhow!("{e}"))
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Quantize every 2-D float tensor of a safetensors file to an MX format.
    #[command(
        after_help = "Example:\n  mxmoe quantize --format mxfp4 --scale-mode even --input w.safetensors --output w.mxfp4.safetensors\n\n\
Each 2-D float tensor T [rows, cols] (f32/bf16/f16, cols % 32 == 0) becomes T (u8 packed,\n\
[rows, packed cols]) and T_scale (u8 E8M0, [rows, cols/32]); metadata: format, scale_mode."
    )]
    Quantize {
        /// mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, mxfp8_e5m2 or mxint8.
        #[arg(long)]
        format: MxFormat,
        /// floor, even, ceil or rceil.
        #[arg(long, default_value = "even")]
        scale_mode: ScaleMode,
        #[arg(long)]
        input: PathBuf,
        #[arg(long)]
        output: PathBuf,
        #[command(flatten)]
        backend: BackendArgs,
    },
    /// Dequantize an MX file (written by `quantize`) back to f32.
    #[command(
        after_help = "Example:\n  mxmoe dequantize --input w.mxfp4.safetensors --output w.f32.safetensors"
    )]
    Dequantize {
        #[arg(long)]
        input: PathBuf,
        #[arg(long)]
        output: PathBuf,
        #[command(flatten)]
        backend: BackendArgs,
    },
    /// Quantize-dequantize (fake-quantize) every float tensor along its last axis.
    #[command(
        after_help = "Example:\n  mxmoe qdq --format mxfp6_e2m3 --scale-mode even --input acts.safetensors --output acts.qdq.safetensors"
    )]
    Qdq {
        #[arg(long)]
        format: MxFormat,
        #[arg(long, default_value = "even")]
        scale_mode: ScaleMode,
        #[arg(long)]
        input: PathBuf,
        #[arg(long)]
        output: PathBuf,
        #[command(flatten)]
        backend: BackendArgs,
    },
    /// Run a MoE layer on a token batch.
    #[command(
        after_help = "Example:\n  mxmoe moe --layer layer.safetensors --input batch.safetensors --output result.safetensors\n\n\
Layer bundle: w13_weight u8 [E, 2I, packed(H)] + w13_weight_scale, w2_weight u8 [E, H, packed(I)] +\n\
w2_weight_scale, optional w13_bias, w2_bias, e_score_correction_bias, expert_map; metadata scheme,\n\
activation, top_k, renormalize, scale_mode, scoring, n_group, topk_group, routed_scaling_factor,\n\
apply_router_weight_on_input. gpt-oss checkpoints (*_blocks/*_scales) load too.\n\
Batch: hidden_states [M, H] (f32/bf16/f16), router_logits [M, E].\n\
Result: output f32 [M, H], topk_ids i32 [M, k], topk_weights f32 [M, k]."
    )]
    Moe {
        #[arg(long)]
        layer: PathBuf,
        #[arg(long)]
        input: PathBuf,
        #[arg(long)]
        output: PathBuf,
        #[command(flatten)]
        backend: BackendArgs,
        /// Activation QDQ scale mode (overrides the layer's `scale_mode`).
        #[arg(long)]
        scale_mode: Option<ScaleMode>,
        /// GEMM accumulation: f64 (the oracle, CPU only) or f32.
        #[arg(long, default_value = "f64")]
        accumulate: Accumulate,
        /// Intermediates: f32 (contract) or bf16 (vLLM parity).
        #[arg(long, default_value = "f32")]
        intermediate: Intermediate,
        #[command(flatten)]
        over: LayerOverrides,
    },
    /// Generate a synthetic layer bundle and token batch (heavy-tailed weights, skewed router).
    #[command(
        after_help = "Example:\n  mxmoe gen --scheme w_mxfp4_a_mxfp4 --experts 8 --hidden 256 --inter 128 --top-k 2 --tokens 16 \\\n      --layer-out layer.safetensors --batch-out batch.safetensors"
    )]
    Gen {
        #[arg(long, default_value = "w_mxfp4_a_mxfp4")]
        scheme: Scheme,
        #[arg(long, default_value_t = 8)]
        experts: usize,
        #[arg(long, default_value_t = 256)]
        hidden: usize,
        #[arg(long, default_value_t = 256)]
        inter: usize,
        #[arg(long, default_value_t = 2)]
        top_k: usize,
        #[arg(long, default_value_t = 16)]
        tokens: usize,
        #[arg(long, default_value = "silu")]
        activation: Activation,
        /// Add w13/w2 biases.
        #[arg(long)]
        bias: bool,
        /// Random codes and scales instead of quantized f32 weights (fast, for big shapes; no
        /// unquantized weights are stored).
        #[arg(long)]
        packed: bool,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        layer_out: PathBuf,
        #[arg(long)]
        batch_out: PathBuf,
    },
    /// Run the conformance suite on a backend (or all) against the CPU reference.
    #[command(
        after_help = "Example:\n  mxmoe check --backend all\n  mxmoe check --backend wgpu --suite full --json report.json"
    )]
    Check {
        /// cpu, wgpu, hip, auto or all.
        #[arg(long, default_value = "all")]
        backend: String,
        #[arg(long)]
        adapter: Option<String>,
        /// quick (small shapes, CI) or full (larger shapes).
        #[arg(long, default_value = "quick")]
        suite: String,
        /// Print every case, not only failures and a summary.
        #[arg(long, short)]
        verbose: bool,
        /// Write the results as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Check a MoE result produced elsewhere (vLLM, SGLang, your kernel) against the reference.
    #[command(
        after_help = "Example:\n  mxmoe verify --layer layer.safetensors --input batch.safetensors --result theirs.safetensors\n\n\
Reports the routing agreement and the output error against the f64 reference under each activation\n\
scale mode (floor/even/ceil/rceil) and with/without bf16 intermediates, and names the closest."
    )]
    Verify {
        #[arg(long)]
        layer: PathBuf,
        #[arg(long)]
        input: PathBuf,
        #[arg(long)]
        result: PathBuf,
        /// Relative-L2 bound for "within tolerance".
        #[arg(long, default_value_t = 1e-2)]
        tolerance: f64,
    },
    /// Time a MoE layer on a backend at several token counts; JSON with ratios to the floor.
    #[command(
        after_help = "Example:\n  mxmoe bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16,64 --json bench.json\n\n\
Shapes (the case catalog's model shapes): gpt-oss-20b / gpt-oss-120b (32 / 128 experts, H = I = 2880,\n\
top-4, swigluoai, w_mxfp4), deepseek-r1 (256 experts, H 7168, I 2048, top-8, sigmoid + correction bias,\n\
8 groups, w_mxfp4_a_mxfp4), qwen3-30b-a3b (128 experts, H 2048, I 768, top-8), llama4-maverick (128\n\
experts, H 5120, I 8192, top-1 on input), or custom; --experts/--hidden/--inter/--top-k override any.\n\
Weights are random finite codes with plausible scales. The floor is the packed bytes of the experts the tokens\n\
touch divided by --hbm-gbps (default 4550: the WGSL streaming read measured on an H200)."
    )]
    Bench {
        #[arg(long, default_value = "auto")]
        backend: BackendKind,
        #[arg(long)]
        adapter: Option<String>,
        /// A model shape of the case catalog (gpt-oss-120b, deepseek-r1, ...) or custom.
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
        /// Memory bandwidth used for the floor, GB/s.
        #[arg(long, default_value_t = 4550.0)]
        hbm_gbps: f64,
        /// Skip the correctness check against the CPU reference.
        #[arg(long)]
        no_check: bool,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// List the backends and adapters present, with features and limits.
    Info,
    /// Build a realistic synthetic layer, run it on every available backend, check each against
    /// the f64 reference.
    #[command(
        after_help = "Example:\n  mxmoe demo\n  mxmoe demo --experts 128 --hidden 2880 --inter 2880 --top-k 4 --tokens 64"
    )]
    Demo {
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
    },
}

/// Flags that override a layer's metadata.
#[derive(Args, Clone, Default)]
struct LayerOverrides {
    #[arg(long)]
    top_k: Option<usize>,
    #[arg(long)]
    renormalize: Option<bool>,
    /// softmax, topk_softmax (gpt-oss) or sigmoid.
    #[arg(long)]
    scoring: Option<Scoring>,
    /// silu or swigluoai.
    #[arg(long)]
    activation: Option<Activation>,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Quantize {
            format,
            scale_mode,
            input,
            output,
            backend,
        } => cmd_quantize(format, scale_mode, &input, &output, &backend),
        Cmd::Dequantize {
            input,
            output,
            backend,
        } => cmd_dequantize(&input, &output, &backend),
        Cmd::Qdq {
            format,
            scale_mode,
            input,
            output,
            backend,
        } => cmd_qdq(format, scale_mode, &input, &output, &backend),
        Cmd::Moe {
            layer,
            input,
            output,
            backend,
            scale_mode,
            accumulate,
            intermediate,
            over,
        } => cmd_moe(
            &layer,
            &input,
            &output,
            &backend,
            scale_mode,
            MoeOptions {
                accumulate,
                intermediate,
            },
            &over,
        ),
        Cmd::Gen {
            scheme,
            experts,
            hidden,
            inter,
            top_k,
            tokens,
            activation,
            bias,
            packed,
            seed,
            layer_out,
            batch_out,
        } => {
            let mut spec = SynthSpec::new(scheme, experts, hidden, inter, top_k);
            spec.activation = activation;
            spec.bias = bias;
            spec.seed = seed;
            cmd_gen(&spec, tokens, packed, &layer_out, &batch_out)
        }
        Cmd::Check {
            backend,
            adapter,
            suite,
            verbose,
            json,
        } => cmd_check(
            &backend,
            adapter.as_deref(),
            &suite,
            verbose,
            json.as_deref(),
        ),
        Cmd::Verify {
            layer,
            input,
            result,
            tolerance,
        } => cmd_verify(&layer, &input, &result, tolerance),
        Cmd::Info => cmd_info(),
        Cmd::Bench {
            backend,
            adapter,
            shape,
            scheme,
            experts,
            hidden,
            inter,
            top_k,
            tokens,
            iters,
            rotate,
            hbm_gbps,
            no_check,
            json,
        } => {
            let mut spec = check::catalog::model_shape(&shape).ok_or_else(|| {
                anyhow!(
                    "unknown shape '{shape}' (expected {})",
                    check::catalog::MODEL_SHAPES.join(", ")
                )
            })?;
            if let Some(s) = scheme {
                spec.synth.scheme = s;
            }
            if let Some(x) = experts {
                spec.synth.n_experts = x;
            }
            if let Some(x) = hidden {
                spec.synth.hidden = x;
            }
            if let Some(x) = inter {
                spec.synth.inter = x;
            }
            if let Some(x) = top_k {
                spec.synth.router.top_k = x;
            }
            let tokens: Vec<usize> = tokens
                .split(',')
                .map(|t| {
                    t.trim()
                        .parse::<usize>()
                        .map_err(|_| anyhow!("--tokens: '{t}' is not a number"))
                })
                .collect::<Result<_>>()?;
            if tokens.contains(&0) || iters == 0 {
                bail!("--tokens values and --iters must be at least 1");
            }
            cmd_bench(
                &spec,
                BackendArgs { backend, adapter },
                mxmoe::bench::BenchParams {
                    tokens,
                    iters,
                    rotate,
                    hbm_gbps,
                    check: !no_check,
                },
                json.as_deref(),
            )
        }
        Cmd::Demo {
            experts,
            hidden,
            inter,
            top_k,
            tokens,
            adapter,
        } => cmd_demo(experts, hidden, inter, top_k, tokens, adapter.as_deref()),
    }
}

/// The 2-D float tensors of a file (name, data, shape), sorted by name.
fn float_tensors(f: &StFile, two_d_only: bool) -> Result<Vec<(String, Vec<f32>, Vec<usize>)>> {
    use safetensors::Dtype;
    let mut out = Vec::new();
    for n in f.names() {
        let dt = f.dtype(&n)?;
        if !matches!(dt, Dtype::F32 | Dtype::BF16 | Dtype::F16) {
            eprintln!(
                "note: {}: skipping '{n}' ({dt:?} is not a float tensor)",
                f.path
            );
            continue;
        }
        let shape = f.shape(&n)?;
        if two_d_only && shape.len() != 2 {
            eprintln!(
                "note: {}: skipping '{n}' (shape {shape:?} is not 2-D)",
                f.path
            );
            continue;
        }
        let k = shape.last().copied().unwrap_or(0);
        if k == 0 || k % BLOCK != 0 {
            bail!("{}: tensor '{n}' has shape {shape:?}: its last dimension {k} is not a multiple of the MX block size 32", f.path);
        }
        let (v, s) = f.floats(&n)?;
        out.push((n, v, s));
    }
    if out.is_empty() {
        bail!(
            "{}: no {}float tensors to process (tensors: {})",
            f.path,
            if two_d_only { "2-D " } else { "" },
            f.names().join(", ")
        );
    }
    Ok(out)
}

fn cmd_quantize(
    format: MxFormat,
    mode: ScaleMode,
    input: &PathBuf,
    output: &PathBuf,
    ba: &BackendArgs,
) -> Result<()> {
    let b = ba.open()?;
    let f = StFile::open(input)?;
    let mut out = Vec::new();
    for (n, v, s) in float_tensors(&f, true)? {
        let t = b
            .quantize(format, mode, &v, &s)
            .with_context(|| format!("quantizing '{n}' of {}", input.display()))?;
        out.push((n, t));
    }
    io::save_mx(output, &out, mode)?;
    eprintln!(
        "quantized {} tensor(s) to {format} ({mode} scales) on {}: {}",
        out.len(),
        b.name(),
        output.display()
    );
    Ok(())
}

fn cmd_dequantize(input: &PathBuf, output: &PathBuf, ba: &BackendArgs) -> Result<()> {
    let b = ba.open()?;
    let (ts, _) = io::load_mx(input)?;
    let mut out = Vec::new();
    for (n, t) in &ts {
        let v = b
            .dequantize(t)
            .with_context(|| format!("dequantizing '{n}'"))?;
        out.push(OutTensor::f32(n.clone(), t.shape.clone(), &v));
    }
    io::save(output, &out, HashMap::new())?;
    eprintln!(
        "dequantized {} tensor(s) on {}: {}",
        out.len(),
        b.name(),
        output.display()
    );
    Ok(())
}

fn cmd_qdq(
    format: MxFormat,
    mode: ScaleMode,
    input: &PathBuf,
    output: &PathBuf,
    ba: &BackendArgs,
) -> Result<()> {
    let b = ba.open()?;
    let f = StFile::open(input)?;
    let mut out = Vec::new();
    for (n, v, s) in float_tensors(&f, false)? {
        let k = *s.last().unwrap();
        let q = b
            .qdq(format, mode, &v, k)
            .with_context(|| format!("QDQ of '{n}'"))?;
        out.push(OutTensor::f32(n, s, &q));
    }
    let meta = HashMap::from([
        ("format".to_string(), format.name().to_string()),
        ("scale_mode".to_string(), mode.name().to_string()),
    ]);
    io::save(output, &out, meta)?;
    eprintln!(
        "QDQ'd {} tensor(s) with {format} ({mode} scales) on {}: {}",
        out.len(),
        b.name(),
        output.display()
    );
    Ok(())
}

fn cmd_moe(
    layer: &PathBuf,
    input: &PathBuf,
    output: &PathBuf,
    ba: &BackendArgs,
    mode: Option<ScaleMode>,
    opts: MoeOptions,
    over: &LayerOverrides,
) -> Result<()> {
    let t0 = Instant::now();
    let mut l = io::load_layer(layer)?.layer;
    if let Some(m) = mode {
        l.config.act_scale_mode = m;
    }
    if let Some(k) = over.top_k {
        l.config.router.top_k = k;
    }
    if let Some(r) = over.renormalize {
        l.config.router.renormalize = r;
    }
    if let Some(s) = over.scoring {
        l.config.router.scoring = s;
    }
    if let Some(a) = over.activation {
        l.config.activation = a;
    }
    l.validate()
        .with_context(|| format!("layer {}", layer.display()))?;
    let batch = io::load_batch(input)?;
    if batch.hidden_size != l.config.hidden {
        bail!(
            "{}: hidden_states has H = {} but the layer {} has H = {}",
            input.display(),
            batch.hidden_size,
            layer.display(),
            l.config.hidden
        );
    }
    if batch.n_experts != l.config.n_experts {
        bail!(
            "{}: router_logits has {} experts but the layer {} routes over {}",
            input.display(),
            batch.n_experts,
            layer.display(),
            l.config.n_experts
        );
    }
    let t_load = t0.elapsed();
    let b = ba.open()?;
    let t1 = Instant::now();
    let res = b.moe_once(&l, &batch.hidden, &batch.logits, opts)?;
    let t_run = t1.elapsed();
    let meta = HashMap::from([
        ("scheme".to_string(), l.config.scheme.name()),
        ("backend".to_string(), b.name().to_string()),
        (
            "scale_mode".to_string(),
            l.config.act_scale_mode.name().to_string(),
        ),
        (
            "accumulate".to_string(),
            format!("{:?}", opts.accumulate).to_lowercase(),
        ),
        (
            "intermediate".to_string(),
            format!("{:?}", opts.intermediate).to_lowercase(),
        ),
    ]);
    io::save_result(output, &res.output, l.config.hidden, &res.routing, meta)?;
    eprintln!(
        "moe {} ({} experts, H {}, I {}, top-{}) on {} tokens, backend {} [{}], {:?} accumulation, {} scales: load {:.2} s, run {:.3} s -> {}",
        l.config.scheme, l.config.n_experts, l.config.hidden, l.config.inter, l.config.router.top_k, batch.m, b.name(), b.adapter(), opts.accumulate, l.config.act_scale_mode,
        t_load.as_secs_f64(), t_run.as_secs_f64(), output.display()
    );
    Ok(())
}

fn cmd_gen(
    spec: &SynthSpec,
    tokens: usize,
    packed: bool,
    layer_out: &PathBuf,
    batch_out: &PathBuf,
) -> Result<()> {
    if tokens == 0 {
        bail!("--tokens must be at least 1");
    }
    let t0 = Instant::now();
    eprintln!(
        "generating {} layer: {} experts, H {}, I {}, top-{} ...",
        spec.scheme, spec.n_experts, spec.hidden, spec.inter, spec.router.top_k
    );
    if packed {
        let l = synth_layer_packed(spec)?;
        io::save_layer(layer_out, &l, None)?;
    } else {
        let s = synth_layer(spec)?;
        io::save_layer(layer_out, &s.layer, Some((&s.w13_f32, &s.w2_f32)))?;
    }
    let (hidden, logits) = synth_batch(tokens, spec.hidden, spec.n_experts, spec.seed);
    io::save_batch(
        batch_out,
        &TokenBatch {
            hidden,
            logits,
            m: tokens,
            hidden_size: spec.hidden,
            n_experts: spec.n_experts,
        },
    )?;
    eprintln!(
        "wrote {} and {} in {:.1} s",
        layer_out.display(),
        batch_out.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

fn open_backends(
    which: &str,
    adapter: Option<&str>,
) -> Result<Vec<(String, Result<Backend, String>)>> {
    let kinds: Vec<(&str, BackendKind)> = match which {
        "all" => BackendKind::ALL.iter().map(|k| (k.name(), *k)).collect(),
        w => vec![(w, w.parse::<BackendKind>().map_err(|e| anyhow!(e))?)],
    };
    Ok(kinds
        .into_iter()
        .map(|(n, k)| {
            (
                n.to_string(),
                Backend::open(k, adapter).map_err(|e| e.to_string()),
            )
        })
        .collect())
}

fn cmd_check(
    which: &str,
    adapter: Option<&str>,
    suite: &str,
    verbose: bool,
    json: Option<&std::path::Path>,
) -> Result<()> {
    let suite = match suite {
        "quick" => Suite::Quick,
        "full" => Suite::Full,
        s => bail!("unknown suite '{s}' (expected quick or full)"),
    };
    // The case catalog on every backend that opens (outputs poisoned), each case's reference
    // computed once; with MXMOE_REQUIRE_GPU=1 a backend compiled in without a device FAILS.
    let opened =
        check::open_backends(which, adapter, check::require_gpu()).map_err(|e| anyhow!(e))?;
    for o in &opened {
        if let Ok(b) = &o.backend {
            println!("== {} [{}]", b.name(), b.adapter());
        }
    }
    let cases = check::cases(suite);
    let t0 = Instant::now();
    let reports = check::conformance(&opened, &cases, |name, r| {
        if verbose || r.status != Status::Ok {
            println!("{}", check::report::case_line(name, r));
        }
    });
    for r in &reports {
        println!("{}", r.summary_line());
    }
    println!(
        "{} cases of the {} suite in {:.1} s (references included)",
        cases.len(),
        if suite == Suite::Quick {
            "quick"
        } else {
            "full"
        },
        t0.elapsed().as_secs_f64()
    );
    if let Some(p) = json {
        let all: Vec<_> = reports.iter().map(|r| r.json()).collect();
        io::write_atomic(p, serde_json::to_string_pretty(&all)?.as_bytes())?;
    }
    let failed = check::failures(&reports);
    if !failed.is_empty() {
        bail!("{} failure(s): {}", failed.len(), failed.join("; "));
    }
    Ok(())
}

fn cmd_verify(layer: &PathBuf, input: &PathBuf, result: &PathBuf, tol: f64) -> Result<()> {
    let l = io::load_layer(layer)?.layer;
    let batch = io::load_batch(input)?;
    let theirs = io::load_result(result)?;
    if theirs.m != batch.m || theirs.hidden != l.config.hidden {
        bail!(
            "{}: output is [{}, {}], expected [M = {}, H = {}]",
            result.display(),
            theirs.m,
            theirs.hidden,
            batch.m,
            l.config.hidden
        );
    }
    let want = moe::forward(&l, &batch.hidden, &batch.logits, MoeOptions::default())?;
    let same_ids = theirs.routing.topk_ids == want.routing.topk_ids;
    let diff_ids = theirs
        .routing
        .topk_ids
        .iter()
        .zip(&want.routing.topk_ids)
        .filter(|(a, b)| a != b)
        .count();
    println!(
        "routing: {}",
        if same_ids {
            "ids identical".to_string()
        } else {
            format!("{diff_ids} of {} ids differ", want.routing.topk_ids.len())
        }
    );
    let (wr, _) = check::rel_l2(&theirs.routing.topk_weights, &want.routing.topk_weights);
    println!("routing weights rel-L2 vs reference: {wr:.3e}");
    println!(
        "{:<28} {:>12} {:>12}",
        "reference variant", "rel-L2", "max abs"
    );
    let mut best = (f64::INFINITY, String::new());
    let mut contract = f64::NAN;
    for inter in [Intermediate::F32, Intermediate::Bf16] {
        for mode in ScaleMode::ALL {
            let mut lv = l.clone();
            lv.config.act_scale_mode = mode;
            let r = moe::forward(
                &lv,
                &batch.hidden,
                &batch.logits,
                MoeOptions {
                    accumulate: Accumulate::F64,
                    intermediate: inter,
                },
            )?;
            let (rel, mx) = check::rel_l2(&theirs.output, &r.output);
            let name = format!(
                "{mode} scales, {} intermediates",
                if inter == Intermediate::F32 {
                    "f32"
                } else {
                    "bf16"
                }
            );
            println!("{name:<28} {rel:>12.3e} {mx:>12.3e}");
            if mode == l.config.act_scale_mode && inter == Intermediate::F32 {
                contract = rel;
            }
            if rel < best.0 {
                best = (rel, name);
            }
        }
    }
    // Where is the worst error (against the contract reference)?
    let (mut wi, mut wv) = (0, 0f64);
    for (i, (a, b)) in theirs.output.iter().zip(&want.output).enumerate() {
        let d = (*a as f64 - *b as f64).abs();
        if d > wv || d.is_nan() {
            wi = i;
            wv = d;
        }
    }
    println!("closest reference: {} (rel-L2 {:.3e})", best.1, best.0);
    println!(
        "worst element vs contract: token {}, column {}: theirs {:e}, reference {:e}",
        wi / l.config.hidden,
        wi % l.config.hidden,
        theirs.output[wi],
        want.output[wi]
    );
    let exact = theirs
        .output
        .iter()
        .zip(&want.output)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    if exact && same_ids {
        println!("verdict: BIT-EXACT");
        Ok(())
    } else if contract <= tol && same_ids {
        println!("verdict: WITHIN TOLERANCE (rel-L2 {contract:.3e} <= {tol:e})");
        Ok(())
    } else {
        println!(
            "verdict: WRONG (rel-L2 {contract:.3e} > {tol:e}{})",
            if same_ids { "" } else { ", routing differs" }
        );
        bail!("result does not match the reference")
    }
}

fn cmd_bench(
    spec: &check::catalog::LayerSpec,
    ba: BackendArgs,
    p: mxmoe::bench::BenchParams,
    json: Option<&std::path::Path>,
) -> Result<()> {
    let b = ba.open()?;
    eprintln!(
        "bench: {} {} on {} [{}]",
        spec.tag(),
        spec.synth.scheme,
        b.name(),
        b.adapter()
    );
    let res = mxmoe::bench::run(&b, spec, &p, |s| eprintln!("  {s}"))?;
    println!(
        "{:>6} {:>8} {:>10} {:>10} {:>10} {:>9} {:>9} {:>8} {:>10}",
        "tokens",
        "experts",
        "wall ms",
        "gpu ms",
        "floor ms",
        "GB/s",
        "TFLOP/s",
        "x floor",
        "rel-L2"
    );
    for r in &res {
        println!(
            "{:>6} {:>8.1} {:>10.3} {:>10} {:>10.4} {:>9.0} {:>9.2} {:>8.1} {:>10}",
            r.tokens,
            r.active_experts,
            r.wall_ms,
            r.gpu_ms.map_or("-".into(), |g| format!("{g:.3}")),
            r.floor_ms,
            r.gbps,
            r.tflops,
            r.ratio_to_floor,
            r.rel_l2_vs_cpu.map_or("-".into(), |x| format!("{x:.2e}"))
        );
    }
    if let Some(path) = json {
        io::write_atomic(path, serde_json::to_string_pretty(&res)?.as_bytes())?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(bad) = res
        .iter()
        .find(|r| r.rel_l2_vs_cpu.is_some_and(|x| !(x <= check::MOE_REL_L2)))
    {
        bail!(
            "M = {}: output disagrees with the CPU reference (rel-L2 {:?})",
            bad.tokens,
            bad.rel_l2_vs_cpu
        );
    }
    Ok(())
}

fn cmd_info() -> Result<()> {
    println!("mxmoe {}", env!("CARGO_PKG_VERSION"));
    println!("backends:");
    println!(
        "  cpu   available   {} (exact reference; f64/f32 accumulation)",
        Backend::open(BackendKind::Cpu, None)?.adapter()
    );
    match Backend::open(BackendKind::Wgpu, None) {
        Ok(b) => println!("  wgpu  available   picks: {}", b.adapter()),
        Err(e) => println!("  wgpu  unavailable ({e})"),
    }
    let adapters = mxmoe::backend::wgpu::enumerate_adapters();
    println!("wgpu adapters ({}):", adapters.len());
    for a in &adapters {
        println!("  - {a}");
    }
    match Backend::open(BackendKind::Hip, None) {
        Ok(b) => println!("  hip   available   {}", b.adapter()),
        Err(e) => println!("  hip   unavailable ({e})"),
    }
    println!("formats: {}", MxFormat::ALL.map(|f| f.name()).join(", "));
    println!("scale modes: floor, even (default), ceil, rceil");
    println!("schemes: {}", Scheme::ALL.map(|s| s.name()).join(", "));
    Ok(())
}

fn cmd_demo(
    experts: usize,
    hidden: usize,
    inter: usize,
    top_k: usize,
    tokens: usize,
    adapter: Option<&str>,
) -> Result<()> {
    println!("mxmoe demo: a synthetic MoE layer ({experts} experts, H {hidden}, I {inter}, top-{top_k}, {tokens} tokens;");
    println!("heavy-tailed weights, skewed router logits) under each OCP MX scheme, on every available backend,");
    println!(
        "checked against the exact f64 CPU reference (bound: rel-L2 <= {:.0e}).\n",
        check::MOE_REL_L2
    );
    let mut backends = Vec::new();
    for (name, b) in open_backends("all", adapter)? {
        match b {
            Ok(b) => backends.push(b),
            Err(e) => println!("{name}: not available ({e})"),
        }
    }
    println!();
    println!(
        "{:<28} {:<8} {:<34} {:>10} {:>11} {:>11}  verdict",
        "scheme", "backend", "adapter", "prepare ms", "forward ms", "rel-L2"
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
                    let (rel, _) = check::rel_l2(&got.output, &want.output);
                    let ok =
                        rel <= check::MOE_REL_L2 && got.routing.topk_ids == want.routing.topk_ids;
                    bad += !ok as usize;
                    println!(
                        "{:<28} {:<8} {:<34} {:>10.2} {:>11.2} {:>11.3e}  {}",
                        scheme.name(),
                        b.name(),
                        ad,
                        prep_ms,
                        ms,
                        rel,
                        if ok { "OK" } else { "FAIL" }
                    );
                }
                Err(e) => {
                    let s = if matches!(e, mxmoe::backend::BackendError::Unsupported { .. }) {
                        "UNSUPPORTED"
                    } else {
                        bad += 1;
                        "FAIL"
                    };
                    println!(
                        "{:<28} {:<8} {:<34} {:>10} {:>11} {:>11}  {s}: {e}",
                        scheme.name(),
                        b.name(),
                        ad,
                        "-",
                        "-",
                        "-"
                    );
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
