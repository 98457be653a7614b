//! The worker thread behind the UI, and the pipeline it runs for each dataset.
//!
//! The UI thread never computes: a [`Job`] goes to the worker over a channel, the worker sends
//! each finished view back as a [`Msg`] and calls `request_repaint()`, so views appear one by one
//! while a progress bar shows the stage. Views are computed **lazily**: a load computes only the
//! dataset; each tab's views are computed when the tab is first shown (a `Want` job), so opening
//! a real-sized layer does not wait for the views nobody looked at. A newer load drops older
//! jobs; the user's Cancel stops the running job between stages (results of a cancelled or old
//! job are dropped).
//!
//! Per dataset the layer runs **once** through the library with stage taps
//! ([`analysis::layer_run`], on first need: the activation and scheme views); the routing view
//! calls the same router the forward calls. The backends are opened once per process
//! ([`analysis::cpu`], [`analysis::gpu`]); the GPU gets the dataset's layer once
//! ([`analysis::prepare_gpu`], resident weights) and runs its forward on that handle.

use crate::analysis::{
    self, ActView, BackendView, Dataset, LayerRun, ModelRouting, PackedView, RoutingView,
    SchemeCache, SchemeView, WeightView,
};
use crate::data::{self, Source};
use crate::state::{Results, Slot, Tab};
use eframe::egui;
use mxmoe::moe::synth::SynthLayer;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

/// Work for the worker thread. `id` orders jobs; Cancel cancels every job up to an id.
pub(crate) enum Job {
    Load {
        gen: u64,
        id: u64,
        src: Source,
    },
    /// Compute the views of `tab` for dataset `gen` (once).
    Want {
        gen: u64,
        id: u64,
        tab: Tab,
    },
}

impl Job {
    fn gen(&self) -> u64 {
        match self {
            Job::Load { gen, .. } | Job::Want { gen, .. } => *gen,
        }
    }
}

/// One finished view.
pub(crate) enum View {
    Routing(Slot<RoutingView>),
    Acts(Slot<ActView>),
    Packed(Slot<PackedView>),
    Weights(Slot<Option<WeightView>>),
    Schemes(Slot<SchemeView>),
    Backends(Slot<BackendView>),
    Model(Slot<ModelRouting>),
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
    /// Job `id` ended (`cancelled`: stopped by the user, its views not computed); `stages`:
    /// seconds per stage, for the status line.
    Done {
        gen: u64,
        id: u64,
        seconds: f64,
        stages: String,
        cancelled: bool,
    },
}

impl Results {
    /// Compute every view synchronously (tests, examples): the worker's pipeline, tab by tab.
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
        let mut ctx = ViewCtx::default();
        for tab in Tab::ALL {
            compute_tab(&d, tab, &mut ctx, &|_, _| {}, &|| true, &mut |v| r.set(v));
        }
        r
    }

    /// Store a finished view.
    pub(crate) fn set(&mut self, v: View) {
        match v {
            View::Routing(s) => self.routing = s,
            View::Acts(s) => self.acts = s,
            View::Packed(s) => self.packed = s,
            View::Weights(s) => self.weights = s,
            View::Schemes(s) => self.schemes = s,
            View::Backends(s) => self.backends = s,
            View::Model(s) => self.model = s,
        }
    }
}

/// The worker handle: a job channel, a message channel, the latest generation (dataset), the
/// job counter, and the id up to which jobs are cancelled.
pub(crate) struct Jobs {
    pub tx: Sender<Job>,
    pub rx: Receiver<Msg>,
    pub latest: Arc<AtomicU64>,
    pub next_id: u64,
    pub cancelled: Arc<AtomicU64>,
}

impl Jobs {
    /// Start the worker thread.
    pub fn spawn(ctx: &egui::Context) -> Jobs {
        let (jtx, jrx) = channel();
        let (mtx, mrx) = channel();
        let latest = Arc::new(AtomicU64::new(0));
        let cancelled = Arc::new(AtomicU64::new(0));
        {
            let (latest, cancelled, ctx) = (latest.clone(), cancelled.clone(), ctx.clone());
            std::thread::Builder::new()
                .name("mxmoe-viewer-worker".into())
                .spawn(move || worker(jrx, mtx, latest, cancelled, ctx))
                .expect("spawn the worker thread");
        }
        Jobs {
            tx: jtx,
            rx: mrx,
            latest,
            next_id: 1,
            cancelled,
        }
    }

    /// A new job id.
    pub fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Cancel every job sent so far (the running one stops at its next check).
    pub fn cancel_all(&self) {
        self.cancelled.store(self.next_id, Ordering::SeqCst);
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

/// What the views of one dataset share: the forward with stage taps (run on first need), and
/// what is reused across datasets of the same synthetic layer (only the router settings or the
/// tokens changed): the weight views and the per-format quantized weights of the schemes.
#[derive(Default)]
pub(crate) struct ViewCtx {
    run: Option<Result<Arc<LayerRun>, String>>,
    reuse: Reuse,
}

#[derive(Default, Clone)]
pub(crate) struct Reuse {
    weights: Option<Slot<Option<WeightView>>>,
    packed: Option<Slot<PackedView>>,
    schemes: Arc<std::sync::Mutex<SchemeCache>>,
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

/// The shared forward, run once per dataset on first need.
fn shared_run(
    d: &Dataset,
    ctx: &mut ViewCtx,
    progress: &dyn Fn(&str, f32),
    laps: &mut Laps,
) -> Result<Arc<LayerRun>, String> {
    if ctx.run.is_none() {
        progress("forward with stage taps (CPU reference)", 0.1);
        ctx.run = Some(
            guarded(|| analysis::layer_run(d))
                .and_then(|r| r)
                .map(Arc::new),
        );
        laps.mark("forward");
    }
    ctx.run.clone().expect("set above")
}

/// Compute the views `tab` shows, handing each to `emit` when ready. `progress(stage,
/// fraction)` is told before each stage; `live()` false cancels between stages and between
/// schemes (returns `None`). Returns seconds per stage.
pub(crate) fn compute_tab(
    d: &Dataset,
    tab: Tab,
    ctx: &mut ViewCtx,
    progress: &dyn Fn(&str, f32),
    live: &dyn Fn() -> bool,
    emit: &mut dyn FnMut(View),
) -> Option<Vec<(&'static str, f64)>> {
    let mut laps = Laps::new();
    match tab {
        Tab::Routing => {
            progress("routing", 0.5);
            emit(View::Routing(slot(guarded(|| analysis::routing_view(d)))));
            laps.mark("routing");
        }
        Tab::Weights => {
            progress("packed weights: codes, scales, re-quantization", 0.2);
            let p = match &ctx.reuse.packed {
                Some(p) => p.clone(),
                None => {
                    let l = &d.layer;
                    let p = slot(guarded(|| {
                        Ok(analysis::packed_view(
                            &l.weights.w13,
                            &l.weights.w2,
                            l.local_experts(),
                        ))
                    }));
                    ctx.reuse.packed = Some(p.clone());
                    p
                }
            };
            laps.mark("packed");
            emit(View::Packed(p));
            if !live() {
                return None;
            }
            progress("weight error under 4 scale modes", 0.6);
            let w = match &ctx.reuse.weights {
                Some(w) => w.clone(),
                None => {
                    let w = slot(guarded(|| Ok(analysis::weight_view(d))));
                    ctx.reuse.weights = Some(w.clone());
                    w
                }
            };
            laps.mark("weights");
            emit(View::Weights(w));
        }
        Tab::Activations => {
            let run = shared_run(d, ctx, progress, &mut laps);
            if !live() {
                return None;
            }
            progress("activation QDQ error", 0.8);
            let acts = match &run {
                Ok(r) => slot(guarded(|| Ok(analysis::act_view(d, r)))),
                Err(e) => Slot::Failed(e.clone()),
            };
            laps.mark("activations");
            emit(View::Acts(acts));
        }
        Tab::Schemes => {
            let run = shared_run(d, ctx, progress, &mut laps);
            if !live() {
                return None;
            }
            const SCHEMES: &str = "schemes: quantize + forward x5";
            progress(SCHEMES, 0.2);
            let cache = ctx.reuse.schemes.clone();
            let s = match &run {
                Ok(r) => match guarded(|| {
                    let mut c = cache.lock().unwrap_or_else(|p| p.into_inner());
                    analysis::scheme_view(d, r, &mut c, |f| {
                        progress(SCHEMES, 0.2 + 0.8 * f);
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
        }
        Tab::Model => {
            const WHAT: &str = "routing every MoE layer";
            progress(WHAT, 0.0);
            let m = match guarded(|| {
                analysis::model_routing(d, |f| {
                    progress(WHAT, f);
                    live()
                })
            }) {
                Ok(None) => return None,
                Ok(Some(x)) => slot(Ok(x)),
                Err(e) => Slot::Failed(e),
            };
            laps.mark("all layers");
            emit(View::Model(m));
        }
        Tab::Backends => {
            progress("GPU backend: upload + forward", 0.3);
            // The layer goes to the GPU once for this dataset; its forward runs on the resident
            // copy.
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
        }
    }
    Some(laps.v)
}

/// The generated layer for a synthetic key.
type SynthCache = (data::SynthKey, Arc<SynthLayer>);

/// The loaded dataset the `Want` jobs compute views of.
struct Current {
    gen: u64,
    d: Arc<Dataset>,
    ctx: ViewCtx,
    done: HashSet<Tab>,
}

fn fmt_laps(v: impl IntoIterator<Item = (&'static str, f64)>) -> String {
    v.into_iter()
        .map(|(n, s)| format!("{n} {s:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn worker(
    rx: Receiver<Job>,
    tx: Sender<Msg>,
    latest: Arc<AtomicU64>,
    cancelled: Arc<AtomicU64>,
    ctx: egui::Context,
) {
    // The last synthetic layer and what the views reuse of it: changing only the router
    // settings or the tokens reuses them (the weights are most of the work).
    let mut synth_cache: Option<SynthCache> = None;
    let mut synth_reuse = Reuse::default();
    let mut cur: Option<Current> = None;
    let mut queue: VecDeque<Job> = VecDeque::new();
    loop {
        if queue.is_empty() {
            match rx.recv() {
                Ok(j) => queue.push_back(j),
                Err(_) => return,
            }
        }
        while let Ok(j) = rx.try_recv() {
            queue.push_back(j);
        }
        // Only the newest dataset matters: drop jobs of older generations.
        let newest = latest.load(Ordering::SeqCst);
        queue.retain(|j| j.gen() >= newest);
        // A newer Load supersedes an older one still queued.
        if let Some(last) = queue.iter().rposition(|j| matches!(j, Job::Load { .. })) {
            queue.drain(..last);
        }
        let Some(job) = queue.pop_front() else {
            continue;
        };
        let t0 = Instant::now();
        let (gen, id) = match &job {
            Job::Load { gen, id, .. } | Job::Want { gen, id, .. } => (*gen, *id),
        };
        let live = || latest.load(Ordering::SeqCst) == gen && cancelled.load(Ordering::SeqCst) < id;
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
        let done = |stages: String, cancelled: bool| {
            send(Msg::Done {
                gen,
                id,
                seconds: t0.elapsed().as_secs_f64(),
                stages,
                cancelled,
            })
        };
        match job {
            Job::Load { src, .. } => {
                cur = None;
                if !live() {
                    done(String::new(), true);
                    continue;
                }
                progress("loading", 0.0);
                let key = match &src {
                    Source::Synthetic(p) => Some(data::synth_key(p)),
                    Source::Files { .. } => None,
                };
                if synth_cache.as_ref().map(|c| Some(c.0)) != Some(key) {
                    synth_cache = None;
                    synth_reuse = Reuse::default();
                }
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
                        done(String::new(), false);
                        continue;
                    }
                };
                let load_s = t0.elapsed().as_secs_f64();
                if !live() {
                    done(String::new(), true);
                    continue;
                }
                send(Msg::Dataset {
                    gen,
                    slot: Slot::Ready(d.clone()),
                });
                // Files are not cached across loads: a file may change on disk in between.
                let reuse = if key.is_some() {
                    synth_reuse.clone()
                } else {
                    Reuse::default()
                };
                cur = Some(Current {
                    gen,
                    d,
                    ctx: ViewCtx { run: None, reuse },
                    done: HashSet::new(),
                });
                done(fmt_laps([("load", load_s)]), false);
            }
            Job::Want { tab, .. } => {
                let Some(c) = cur.as_mut().filter(|c| c.gen == gen) else {
                    // No such dataset (its load failed or was superseded): nothing to compute,
                    // but the app waits for every job it sent to end.
                    done(String::new(), false);
                    continue;
                };
                if c.done.contains(&tab) {
                    done(String::new(), false);
                    continue;
                }
                let d = c.d.clone();
                let laps = compute_tab(&d, tab, &mut c.ctx, &progress, &live, &mut |view| {
                    send(Msg::View { gen, view })
                });
                match laps {
                    Some(l) => {
                        c.done.insert(tab);
                        // Keep what a synthetic layer's next dataset may reuse.
                        if matches!(tab, Tab::Weights | Tab::Schemes) {
                            synth_reuse = c.ctx.reuse.clone();
                        }
                        done(fmt_laps(l), false);
                    }
                    None => done(String::new(), true),
                }
            }
        }
    }
}
