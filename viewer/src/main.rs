//! `mxmoe-viewer`: the desktop viewer's entry point (arguments -> a first dataset -> eframe).

use clap::Parser;
use mxmoe::moe::Scoring;
use mxmoe::scheme::Scheme;
use mxmoe_viewer::app::{AutoRun, Tab, ViewerApp};
use mxmoe_viewer::data::{Source, SynthParams};
use mxmoe_viewer::settings::Settings;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "mxmoe-viewer",
    version,
    about = "See expert routing and MX quantization error of a MoE layer"
)]
struct Args {
    /// A layer bundle, or a checkpoint file / model directory / GGUF holding one MoE layer
    /// (`mxmoe extract` takes one layer out of a larger one).
    #[arg(long)]
    layer: Option<PathBuf>,
    /// A token batch (hidden_states [M, H], router_logits [M, E]); without it, a synthetic batch.
    #[arg(long)]
    input: Option<PathBuf>,
    /// Start with a synthetic layer (the default when no --layer is given).
    #[arg(long)]
    synthetic: bool,
    /// Synthetic layer: scheme (e.g. w_mxfp4_a_mxfp4).
    #[arg(long, default_value = "w_mxfp4_a_mxfp4")]
    scheme: String,
    /// Synthetic layer: number of experts.
    #[arg(long, default_value_t = 64)]
    experts: usize,
    /// Synthetic layer: hidden size H.
    #[arg(long, default_value_t = 512)]
    hidden: usize,
    /// Synthetic layer: intermediate size I.
    #[arg(long, default_value_t = 512)]
    inter: usize,
    /// Synthetic layer: top-k.
    #[arg(long, default_value_t = 4)]
    top_k: usize,
    /// Tokens of a synthetic batch.
    #[arg(long, default_value_t = 64)]
    tokens: usize,
    /// Synthetic layer: router scoring (softmax, topk_softmax, sigmoid).
    #[arg(long, default_value = "softmax")]
    scoring: String,
    /// Synthetic layer: seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// With --layer: which MoE layer of a checkpoint with several (a model directory), by the
    /// model's layer number (`mxmoe layers DIR` lists them); default: the first. The side
    /// panel picks others.
    #[arg(long)]
    layer_index: Option<usize>,
    /// With --layer: re-quantize the file's unquantized weights (`*_orig`) with this scheme
    /// instead of showing the stored ones.
    #[arg(long)]
    requant: Option<String>,
    /// Do not read or write the kept settings (recent files, export folder, ...).
    #[arg(long)]
    no_persist: bool,
    /// The view shown first: routing, model, weights, activations, schemes, backends.
    #[arg(long, default_value = "routing")]
    tab: String,
    /// Once the shown view is computed, save a PNG of the window here and exit: 0 on success,
    /// 1 when the layer or batch failed to load (the PNG then shows the error).
    #[arg(long)]
    screenshot: Option<PathBuf>,
    /// Once every view is computed, save one PNG per view into this folder and exit.
    #[arg(long)]
    screenshot_tabs: Option<PathBuf>,
    /// Exit after this many frames (smoke tests).
    #[arg(long)]
    exit_after_frames: Option<u64>,
    /// Window size in points, WxH.
    #[arg(long, default_value = "1440x900")]
    size: String,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("mxmoe-viewer: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let a = Args::parse();
    let tab = Tab::from_slug(&a.tab).ok_or_else(|| {
        format!(
            "unknown --tab '{}' (routing, model, weights, activations, schemes, backends)",
            a.tab
        )
    })?;
    let src = match (&a.layer, a.synthetic) {
        (Some(l), false) => Source::Files {
            layer: l.clone(),
            batch: a.input.clone(),
            tokens: a.tokens,
            pick: a.layer_index,
            requant: match &a.requant {
                Some(s) => Some(s.parse::<Scheme>().map_err(|e| e.to_string())?),
                None => None,
            },
        },
        (Some(_), true) => return Err("--layer and --synthetic exclude each other".into()),
        (None, _) => {
            if a.input.is_some() {
                return Err("--input needs --layer".into());
            }
            let p = SynthParams {
                scheme: a.scheme.parse::<Scheme>().map_err(|e| e.to_string())?,
                n_experts: a.experts,
                hidden: a.hidden,
                inter: a.inter,
                top_k: a.top_k,
                tokens: a.tokens,
                scoring: a.scoring.parse::<Scoring>().map_err(|e| e.to_string())?,
                seed: a.seed,
            };
            p.check()?;
            Source::Synthetic(p)
        }
    };
    let (w, h) = a
        .size
        .split_once('x')
        .and_then(|(w, h)| Some((w.parse::<f32>().ok()?, h.parse::<f32>().ok()?)))
        .ok_or_else(|| format!("--size '{}' is not WxH", a.size))?;
    let auto = AutoRun {
        screenshot: a.screenshot.clone(),
        screenshot_tabs: a.screenshot_tabs.clone(),
        exit_after_frames: a.exit_after_frames,
        ..Default::default()
    };
    let report = auto.report.clone();
    if let Some(d) = &a.screenshot_tabs {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    // Unattended runs neither read nor write the kept settings: their pictures must not
    // depend on what a person did before.
    let unattended =
        a.screenshot.is_some() || a.screenshot_tabs.is_some() || a.exit_after_frames.is_some();
    let persist = !(unattended || a.no_persist);
    let options = eframe::NativeOptions {
        viewport: eframe::egui::ViewportBuilder::default()
            .with_title("mxmoe viewer")
            .with_inner_size([w, h])
            .with_drag_and_drop(true),
        persist_window: persist,
        ..Default::default()
    };
    let tab_given = a.tab != "routing";
    // Started with no layer and no synthetic-layer choice: the synthetic layer of last time.
    let synth_given = a.synthetic
        || std::env::args().any(|x| {
            [
                "--scheme",
                "--experts",
                "--hidden",
                "--inter",
                "--top-k",
                "--tokens",
                "--scoring",
                "--seed",
            ]
            .iter()
            .any(|f| x == *f || x.starts_with(&format!("{f}=")))
        });
    eframe::run_native(
        "mxmoe-viewer",
        options,
        Box::new(move |cc| {
            let mut st = match (persist, cc.storage) {
                (true, Some(s)) => {
                    eframe::get_value::<Settings>(s, eframe::APP_KEY).unwrap_or_default()
                }
                _ => Settings::default(),
            };
            if tab_given {
                st.tab = tab.slug().into();
            }
            let src = match src {
                Source::Synthetic(p) if !synth_given => Source::Synthetic(st.synth_params(p)),
                s => s,
            };
            Ok(Box::new(ViewerApp::with_settings(
                &cc.egui_ctx,
                src,
                tab,
                auto,
                st,
            )))
        }),
    )
    .map_err(|e| format!("could not start the window: {e}"))?;
    if a.screenshot.is_some() || a.screenshot_tabs.is_some() {
        let (written, err) = report.lock().map(|r| r.clone()).unwrap_or_default();
        for p in &written {
            eprintln!("mxmoe-viewer: wrote {}", p.display());
        }
        if let Some(e) = err {
            return Err(e);
        }
        let want = a.screenshot.is_some() as usize
            + if a.screenshot_tabs.is_some() {
                Tab::ALL.len()
            } else {
                0
            };
        if written.len() < want {
            return Err("the window closed before every screenshot was taken".into());
        }
    }
    Ok(())
}
