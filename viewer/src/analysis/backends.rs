//! The backend view's data (the CPU vs GPU difference of the layer output), and the backends
//! the viewer runs on, each opened once per process: the CPU reference ([`cpu`]) and the wgpu
//! backend ([`gpu`]). A dataset's layer goes to the GPU once ([`prepare_gpu`]: resident
//! weights) and the GPU forwards of that dataset run on the handle.

use super::{out_err, Dataset};
use mxmoe::backend::{Backend, BackendKind, Prepared};
use mxmoe::moe::{Accumulate, Intermediate, MoeOptions};
use std::sync::OnceLock;
use std::time::Instant;

/// The CPU reference backend, opened once per process.
pub fn cpu() -> &'static Backend {
    static CPU: OnceLock<Backend> = OnceLock::new();
    CPU.get_or_init(|| Backend::open(BackendKind::Cpu, None).expect("the CPU backend opens"))
}

/// The wgpu backend, opened on first use and then shared by every computation of the process
/// (opening an adapter and a device is the slow part); when none opens, the reason, kept too.
pub fn gpu() -> Result<&'static Backend, String> {
    static GPU: OnceLock<Result<Backend, String>> = OnceLock::new();
    GPU.get_or_init(|| Backend::open(BackendKind::Wgpu, None).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

/// A dataset's layer resident on the GPU: uploaded once per loaded dataset by [`prepare_gpu`];
/// every GPU forward of that dataset runs on it.
pub struct ResidentLayer<'d> {
    pub backend: &'static Backend,
    /// The adapter in words, with the backend's name.
    pub adapter: String,
    pub layer: Prepared<'d>,
    /// Seconds the upload took.
    pub prepare_seconds: f64,
}

/// Upload the dataset's layer to the GPU (opening the GPU on first use). `Err` is what the view
/// shows instead: SKIPPED without an adapter, FAILED when the GPU cannot take the layer.
pub fn prepare_gpu(d: &Dataset) -> Result<ResidentLayer<'_>, BackendView> {
    let backend = gpu().map_err(BackendView::Skipped)?;
    let adapter = format!("{} ({})", backend.adapter(), backend.name());
    let t0 = Instant::now();
    match backend.prepare(&d.layer) {
        Ok(layer) => Ok(ResidentLayer {
            backend,
            adapter,
            layer,
            prepare_seconds: t0.elapsed().as_secs_f64(),
        }),
        Err(e) => Err(BackendView::Failed {
            adapter,
            error: e.to_string(),
        }),
    }
}

/// The options of the comparison: the GPU's contract is fp32 accumulation, so the CPU side runs
/// with it too. (The shared f64 forward of the other views cannot stand in for it: against f64
/// outputs almost no GPU element would be bit-exact, and the differences would be the
/// accumulation's, not the GPU's.)
pub const COMPARE: MoeOptions = MoeOptions {
    accumulate: Accumulate::F32,
    intermediate: Intermediate::F32,
    taps: false,
    profile: mxmoe::format::ProfileId::Contract,
};

#[derive(Clone, Debug)]
pub enum BackendView {
    /// No GPU backend could be opened: the reason, shown as SKIPPED.
    Skipped(String),
    /// The GPU ran but failed (or does not support this layer).
    Failed {
        adapter: String,
        error: String,
    },
    Diff(BackendDiff),
}

#[derive(Clone, Debug)]
pub struct BackendDiff {
    pub adapter: String,
    pub m: usize,
    pub h: usize,
    /// `[M, H]` GPU - CPU (both fp32 accumulation).
    pub diff: Vec<f32>,
    pub max_abs: f64,
    pub rel_l2: f64,
    /// Elements whose bits agree exactly.
    pub n_exact: usize,
    /// Tokens whose top-k ids differ.
    pub routing_mismatch: usize,
    /// Seconds of the CPU forward (fp32 accumulation).
    pub cpu_seconds: f64,
    /// Seconds of the GPU forward on the resident weights (the upload not included).
    pub gpu_seconds: f64,
}

impl BackendView {
    pub fn csv(&self) -> String {
        match self {
            BackendView::Skipped(why) => format!("# SKIPPED: {why}\n"),
            BackendView::Failed { adapter, error } => format!("# FAILED on {adapter}: {error}\n"),
            BackendView::Diff(d) => {
                let mut s = format!(
                    "# adapter: {}\n# max_abs,{:e}\n# rel_l2,{:e}\n# bit_exact,{}/{}\n# routing_mismatch_tokens,{}\n# cpu_s,{:.4}\n# gpu_s,{:.4}\ntoken,h,gpu_minus_cpu\n",
                    d.adapter, d.max_abs, d.rel_l2, d.n_exact, d.diff.len(), d.routing_mismatch, d.cpu_seconds, d.gpu_seconds
                );
                for (x, v) in d.diff.iter().enumerate() {
                    s += &format!("{},{},{:e}\n", x / d.h, x % d.h, v);
                }
                s
            }
        }
    }
}

/// Compare the resident GPU layer's output with the CPU reference's, both with [`COMPARE`]
/// options (fp32 accumulation, the GPU's contract), on the CPU backend opened once.
pub fn backend_view(d: &Dataset, gpu: &Result<ResidentLayer<'_>, BackendView>) -> BackendView {
    let g = match gpu {
        Ok(g) => g,
        Err(v) => return v.clone(),
    };
    let adapter = g.adapter.clone();
    let t0 = Instant::now();
    let cpu = match cpu().moe_once(&d.layer, &d.hidden, &d.logits, COMPARE) {
        Ok(y) => y,
        Err(e) => {
            return BackendView::Failed {
                adapter: "cpu".into(),
                error: e.to_string(),
            }
        }
    };
    let cpu_seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let g = match g.backend.moe(&g.layer, &d.hidden, &d.logits, COMPARE) {
        Ok(y) => y,
        Err(e) => {
            return BackendView::Failed {
                adapter,
                error: e.to_string(),
            }
        }
    };
    let gpu_seconds = t1.elapsed().as_secs_f64();
    if g.output.len() != cpu.output.len() {
        return BackendView::Failed {
            adapter,
            error: format!(
                "the GPU returned {} values, the CPU {}",
                g.output.len(),
                cpu.output.len()
            ),
        };
    }
    let diff: Vec<f32> = g
        .output
        .iter()
        .zip(&cpu.output)
        .map(|(a, b)| a - b)
        .collect();
    let cpu64: Vec<f64> = cpu.output.iter().map(|&v| v as f64).collect();
    let (rel_l2, max_abs) = out_err(&g.output, &cpu64);
    let k = cpu.routing.top_k;
    let routing_mismatch = (0..d.m)
        .filter(|&t| {
            cpu.routing.topk_ids[t * k..(t + 1) * k] != g.routing.topk_ids[t * k..(t + 1) * k]
        })
        .count();
    BackendView::Diff(BackendDiff {
        adapter,
        m: d.m,
        h: d.layer.config.hidden,
        n_exact: g
            .output
            .iter()
            .zip(&cpu.output)
            .filter(|(a, b)| a.to_bits() == b.to_bits())
            .count(),
        diff,
        max_abs,
        rel_l2,
        routing_mismatch,
        cpu_seconds,
        gpu_seconds,
    })
}
