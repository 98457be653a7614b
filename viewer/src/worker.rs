//! The worker thread behind the UI, and the pipeline it runs for each dataset.
//!
//! The UI thread never computes: a [`Job`] goes to the worker over a channel, the worker sends
//! each finished view back as a [`Msg`] and calls `request_repaint()`, so views appear one by one
//! while a progress bar shows the stage. A newer job cancels an older one between stages (and
//! between schemes), and results of an old generation are dropped.
//!
//! Per dataset the pipeline runs the layer **once** through the library with stage taps
//! ([`analysis::layer_run`]); the routing, activation and scheme views are computed from that
//! run. The backends are opened once per process ([`analysis::cpu`], [`analysis::gpu`]); the
//! GPU gets the dataset's layer once ([`analysis::prepare_gpu`], resident weights) and runs its
//! forward on that handle.

use crate::analysis::{
    self, ActView, BackendView, Dataset, RoutingView, SchemeCache, SchemeView, WeightView,
};
use crate::data::{self, Source};
use crate::state::{Results, Slot};
use eframe::egui;
use mxmoe::moe::synth::SynthLayer;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

/// Work for the worker thread.
pub(crate) enum Job {
    Load { gen: u64, src: Source },
}

/// One finished view.
pub(crate) enum View {
    Routing(Slot<RoutingView>),
    Acts(Slot<ActView>),
    Weights(Slot<Option<WeightView>>),
    Schemes(Slot<SchemeView>),
    Backends(Slot<BackendView>),
}

/// What the worker sends back.
pub(crate) enum Msg {
    Progress {
        gen: u64,
        stage: String,
        frac: f32,
    },
    Dataset {
        gen: u64,
        slot: Slot<Dataset>,
    },
    View {
        gen: u64,
        view: View,
    },
    /// `stages`: seconds per stage, for the status line.
    Done {
        gen: u64,
        seconds: f64,
        stages: String,
    },
}

impl Results {
    /// Compute every view synchronously (tests, examples): the worker's pipeline, in order.
    pub fn compute(src: &Source) -> Results {
        let mut r = Results::default();
        let d = match data::load(src) {
            Ok(d) => Arc::new(d),
            Err(e) => {
                r.dataset = Slot::Failed(e);
                return r;
            }
        };
        r.dataset = Slot::Ready(d.clone());
        compute_views(&d, &mut Reuse::default(), &|_, _| {}, &|| true, &mut |v| {
            r.set(v)
        });
        r
    }

    /// Store a finished view.
    pub(crate) fn set(&mut self, v: View) {
        match v {
            View::Routing(s) => self.routing = s,
            View::Acts(s) => self.acts = s,
            View::Weights(s) => self.weights = s,
            View::Schemes(s) => self.schemes = s,
            View::Backends(s) => self.backends = s,
        }
    }
}

/// The worker handle: a job channel, a message channel, the latest generation.
pub(crate) struct Jobs {
    pub tx: Sender<Job>,
    pub rx: Receiver<Msg>,
    pub latest: Arc<AtomicU64>,
}

impl Jobs {
    /// Start the worker thread.
    pub fn spawn(ctx: &egui::Context) -> Jobs {
        let (jtx, jrx) = channel();
        let (mtx, mrx) = channel();
        let latest = Arc::new(AtomicU64::new(0));
        {
            let (latest, ctx) = (latest.clone(), ctx.clone());
            std::thread::Builder::new()
                .name("mxmoe-viewer-worker".into())
                .spawn(move || worker(jrx, mtx, latest, ctx))
                .expect("spawn the worker thread");
        }
        Jobs {
            tx: jtx,
            rx: mrx,
            latest,
        }
    }
}

/// Run `f`, turning a panic into an error message (a bug in a view must not kill the worker).
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        format!("internal error: {msg}")
    })
}

fn slot<T>(r: Result<Result<T, String>, String>) -> Slot<T> {
    match r {
        Ok(Ok(v)) => Slot::Ready(Arc::new(v)),
        Ok(Err(e)) | Err(e) => Slot::Failed(e),
    }
}

/// What the pipeline reuses across datasets of the same layer (only the router settings or the
/// tokens changed): the weight view and the per-format quantized weights of the schemes. Start
/// a new one when the layer changes.
#[derive(Default)]
pub(crate) struct Reuse {
    weights: Option<Slot<Option<WeightView>>>,
    schemes: SchemeCache,
}

/// Seconds per stage.
struct Laps {
    t: Instant,
    v: Vec<(&'static str, f64)>,
}

impl Laps {
    fn new() -> Laps {
        Laps {
            t: Instant::now(),
            v: Vec::new(),
        }
    }
    fn mark(&mut self, name: &'static str) {
        self.v.push((name, self.t.elapsed().as_secs_f64()));
        self.t = Instant::now();
    }
}

/// Stages of a load, for the progress bar: loading, then the six below.
const STAGES: f32 = 7.0;

/// Compute every view of `d` in order, handing each to `emit` as soon as it is ready:
/// the one forward with stage taps, then routing, activations, weights, schemes (from that
/// forward, and five forwards of the re-quantized layers), then the GPU (upload once, forward on
/// the resident layer). `progress(stage, fraction)` is told before each stage; `live()` false
/// cancels between stages and between schemes (returns `None`). Returns seconds per stage.
pub(crate) fn compute_views(
    d: &Dataset,
    reuse: &mut Reuse,
    progress: &dyn Fn(&str, f32),
    live: &dyn Fn() -> bool,
    emit: &mut dyn FnMut(View),
) -> Option<Vec<(&'static str, f64)>> {
    let mut laps = Laps::new();
    progress("forward with stage taps", 1.0 / STAGES);
    let run = guarded(|| analysis::layer_run(d)).and_then(|r| r);
    laps.mark("forward");
    if !live() {
        return None;
    }
    progress("routing", 2.0 / STAGES);
    let rv = match &run {
        Ok(r) => slot(guarded(|| Ok(analysis::routing_view(d, r)))),
        Err(e) => Slot::Failed(e.clone()),
    };
    laps.mark("routing");
    emit(View::Routing(rv));
    if !live() {
        return None;
    }
    progress("activation QDQ error", 3.0 / STAGES);
    let acts = match &run {
        Ok(r) => slot(guarded(|| Ok(analysis::act_view(d, r)))),
        Err(e) => Slot::Failed(e.clone()),
    };
    laps.mark("activations");
    emit(View::Acts(acts));
    if !live() {
        return None;
    }
    progress("weight error under 4 scale modes", 4.0 / STAGES);
    let w = match &reuse.weights {
        Some(w) => w.clone(),
        None => {
            let w = slot(guarded(|| Ok(analysis::weight_view(d))));
            reuse.weights = Some(w.clone());
            w
        }
    };
    laps.mark("weights");
    emit(View::Weights(w));
    if !live() {
        return None;
    }
    const SCHEMES: &str = "schemes: quantize + forward x5";
    progress(SCHEMES, 5.0 / STAGES);
    let s = match &run {
        Ok(r) => match guarded(|| {
            analysis::scheme_view(d, r, &mut reuse.schemes, |f| {
                progress(SCHEMES, (5.0 + f) / STAGES);
                live()
            })
        }) {
            Ok(None) => return None,
            Ok(Some(x)) => slot(Ok(x)),
            Err(e) => Slot::Failed(e),
        },
        Err(e) => Slot::Failed(e.clone()),
    };
    laps.mark("schemes");
    emit(View::Schemes(s));
    progress("GPU backend: upload + forward", 6.0 / STAGES);
    // The layer goes to the GPU once for this dataset; its forward runs on the resident copy.
    let gpu = guarded(|| analysis::prepare_gpu(d)).unwrap_or_else(|e| {
        Err(BackendView::Failed {
            adapter: "gpu".into(),
            error: e,
        })
    });
    laps.mark("gpu upload");
    let b = slot(guarded(|| Ok::<_, String>(analysis::backend_view(d, &gpu))));
    laps.mark("gpu");
    emit(View::Backends(b));
    Some(laps.v)
}

/// The generated layer for a synthetic key.
type SynthCache = (data::SynthKey, Arc<SynthLayer>);

fn worker(rx: Receiver<Job>, tx: Sender<Msg>, latest: Arc<AtomicU64>, ctx: egui::Context) {
    // The last synthetic layer and what the views reuse of it: changing only the router
    // settings or the tokens reuses them (the weights are most of the work).
    let mut synth_cache: Option<SynthCache> = None;
    let mut reuse = Reuse::default();
    while let Ok(mut job) = rx.recv() {
        // Skip to the newest queued job.
        while let Ok(j) = rx.try_recv() {
            job = j;
        }
        let Job::Load { gen, src } = job;
        let t0 = Instant::now();
        let live = || latest.load(Ordering::SeqCst) == gen;
        let send = |m: Msg| {
            let _ = tx.send(m);
            ctx.request_repaint();
        };
        let progress = |stage: &str, frac: f32| {
            send(Msg::Progress {
                gen,
                stage: stage.into(),
                frac,
            })
        };
        progress("loading", 0.0);
        let key = match &src {
            Source::Synthetic(p) => Some(data::synth_key(p)),
            Source::Files { .. } => None,
        };
        if synth_cache.as_ref().map(|c| Some(c.0)) != Some(key) {
            synth_cache = None;
            reuse = Reuse::default();
        }
        // Files are not cached: a file may change on disk between two loads.
        let mut fresh = Reuse::default();
        let reuse = if key.is_some() {
            &mut reuse
        } else {
            &mut fresh
        };
        let loaded = guarded(|| -> Result<Dataset, String> {
            match (&src, key) {
                (Source::Synthetic(p), Some(k)) => {
                    let base = match &synth_cache {
                        Some((_, b)) => b.clone(),
                        None => {
                            let b = Arc::new(data::synth_base(p)?);
                            synth_cache = Some((k, b.clone()));
                            b
                        }
                    };
                    data::synth_dataset(p, &base)
                }
                _ => data::load(&src),
            }
        });
        let d = match loaded {
            Ok(Ok(d)) => Arc::new(d),
            Ok(Err(e)) | Err(e) => {
                send(Msg::Dataset {
                    gen,
                    slot: Slot::Failed(e),
                });
                send(Msg::Done {
                    gen,
                    seconds: t0.elapsed().as_secs_f64(),
                    stages: String::new(),
                });
                continue;
            }
        };
        let load_s = t0.elapsed().as_secs_f64();
        send(Msg::Dataset {
            gen,
            slot: Slot::Ready(d.clone()),
        });
        if !live() {
            continue;
        }
        let laps = compute_views(&d, reuse, &progress, &live, &mut |view| {
            send(Msg::View { gen, view })
        });
        let Some(laps) = laps else {
            continue;
        };
        let stages = std::iter::once(("load", load_s))
            .chain(laps)
            .map(|(n, s)| format!("{n} {s:.1}"))
            .collect::<Vec<_>>()
            .join(", ");
        send(Msg::Done {
            gen,
            seconds: t0.elapsed().as_secs_f64(),
            stages,
        });
    }
}
