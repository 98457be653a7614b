//! The application: the frame layout, deferred commands, exports and unattended screenshots.
//! Everything heavy runs on the worker thread ([`crate::worker`]); the app sends it jobs and
//! stores the views it sends back in [`Results`].
//!
//! Over 600 lines: the side panel's file handling (paths, dialog, drops, recent files, layer
//! and scheme pickers) lives here beside the frame it draws into; the next split is a
//! `panels/files.rs` taking `&mut ViewerApp`'s file fields as one struct.

use crate::data::{Source, SynthParams};
use crate::panels;
use crate::settings::{self, Settings};
use crate::worker::{Job, Jobs, Msg};
use eframe::egui::{self, Color32, RichText, Ui};
use mxmoe::scheme::Scheme;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use crate::state::{Results, Slot, Tab, ViewUi};

/// What the user asked for; applied after the frame is drawn (egui_demo_app's deferred-command
/// shape), so panels only push commands and never mutate the app mid-frame.
#[derive(Clone, Debug)]
pub enum Command {
    Load(Source),
    ExportCsv,
    ExportPng,
    /// Stop the running job (a load, or a view being computed).
    Cancel,
    /// Compute a cancelled view again.
    Retry(Tab),
}

/// Options from the command line that drive an unattended run (smoke test, screenshots).
#[derive(Clone, Debug, Default)]
pub struct AutoRun {
    /// Save a PNG of the window once every view is computed, then exit.
    pub screenshot: Option<PathBuf>,
    /// Save one PNG per tab into this folder (`routing.png`, ...), then exit.
    pub screenshot_tabs: Option<PathBuf>,
    /// Exit after this many frames regardless.
    pub exit_after_frames: Option<u64>,
    /// Set by the screenshot callback: `Ok(path)` or the error (one shot at a time).
    pub outcome: Arc<Mutex<Option<Result<PathBuf, String>>>>,
    /// What was written, and the first error; read by `main` after the window closes.
    pub report: Arc<Mutex<(Vec<PathBuf>, Option<String>)>>,
}

impl AutoRun {
    fn queue(&self) -> Vec<(Option<Tab>, PathBuf)> {
        let mut q: Vec<(Option<Tab>, PathBuf)> = Vec::new();
        if let Some(p) = &self.screenshot {
            q.push((None, p.clone()));
        }
        if let Some(d) = &self.screenshot_tabs {
            q.extend(
                Tab::ALL
                    .iter()
                    .map(|t| (Some(*t), d.join(format!("{}.png", t.slug())))),
            );
        }
        q
    }
}

pub struct ViewerApp {
    pub results: Results,
    pub tab: Tab,
    pub view_ui: ViewUi,
    pub synth: SynthParams,
    pub layer_path: String,
    pub batch_path: String,
    pub file_tokens: usize,
    pub export_dir: String,
    /// The scheme to re-quantize a loaded file's unquantized weights with (`None`: as stored).
    pub requant: Option<Scheme>,
    /// The layer picked in a checkpoint with several MoE layers (`None`: the first).
    pub pick: Option<usize>,
    /// Recently opened files and the settings kept between runs.
    pub settings: Settings,
    pub status: Option<(bool, String)>,
    progress: Option<(String, f32)>,
    started: Option<Instant>,
    jobs: Jobs,
    /// Jobs sent and not finished; the tabs whose views were asked for (this dataset).
    pending: HashSet<u64>,
    requested: HashSet<Tab>,
    /// A file dialog running on its own thread: which field it fills, and its answer.
    dialog: Option<(DialogTarget, Receiver<Option<PathBuf>>)>,
    commands: Vec<Command>,
    auto: AutoRun,
    frames: u64,
    done_frames: u64,
    /// Unattended screenshots: index into `auto.queue()`, frames waited, one in flight.
    shot: (usize, u64, bool),
    central_rect: egui::Rect,
    png_outcome: Arc<Mutex<Option<Result<PathBuf, String>>>>,
}

/// Which path field a file dialog fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DialogTarget {
    Layer,
    Batch,
}

impl ViewerApp {
    /// Start the worker and load `src`.
    pub fn new(ctx: &egui::Context, src: Source, tab: Tab, auto: AutoRun) -> Self {
        Self::with_settings(ctx, src, tab, auto, Settings::default())
    }

    /// Start with settings kept from an earlier run (recent files, export folder, the
    /// synthetic layer's parameters), then load `src`.
    pub fn with_settings(
        ctx: &egui::Context,
        src: Source,
        tab: Tab,
        auto: AutoRun,
        st: Settings,
    ) -> Self {
        let mut app = Self::idle(ctx, tab, auto);
        st.apply(&mut app);
        if let Source::Synthetic(p) = &src {
            app.synth = p.clone();
        }
        if let Source::Files {
            layer,
            batch,
            requant,
            pick,
            ..
        } = &src
        {
            app.pick = *pick;
            app.layer_path = layer.display().to_string();
            app.batch_path = batch
                .as_ref()
                .map(|b| b.display().to_string())
                .unwrap_or_default();
            app.requant = *requant;
        }
        app.commands.push(Command::Load(src));
        app.apply_commands(ctx);
        app
    }

    /// Stop the running job (applied at the end of the frame).
    pub fn cancel(&mut self) {
        self.commands.push(Command::Cancel);
    }

    /// Ask for `src` to be loaded and its views recomputed (applied at the end of the frame).
    pub fn load(&mut self, src: Source) {
        self.commands.push(Command::Load(src));
    }

    /// Whether the worker has finished: no job running, and the shown tab's views are ready
    /// (or failed). Views of other tabs are computed when their tab is shown.
    pub fn idle_now(&self) -> bool {
        self.progress.is_none() && self.pending.is_empty() && self.results.tab_done(self.tab)
    }

    /// Start the worker with nothing loaded (tests set `results` themselves).
    pub fn idle(ctx: &egui::Context, tab: Tab, auto: AutoRun) -> Self {
        ViewerApp {
            results: Results::default(),
            tab,
            view_ui: ViewUi::default(),
            synth: SynthParams::default(),
            layer_path: String::new(),
            batch_path: String::new(),
            file_tokens: 64,
            export_dir: ".".into(),
            requant: None,
            pick: None,
            settings: Settings::default(),
            status: None,
            progress: None,
            started: None,
            jobs: Jobs::spawn(ctx),
            pending: HashSet::new(),
            requested: HashSet::new(),
            dialog: None,
            commands: Vec::new(),
            auto,
            frames: 0,
            done_frames: 0,
            shot: (0, 0, false),
            central_rect: egui::Rect::NOTHING,
            png_outcome: Arc::new(Mutex::new(None)),
        }
    }

    fn apply_commands(&mut self, ctx: &egui::Context) {
        for c in std::mem::take(&mut self.commands) {
            match c {
                Command::Load(src) => {
                    if let Source::Files { layer, batch, .. } = &src {
                        self.settings.remember(layer, batch.as_deref());
                    }
                    let gen = self.jobs.latest.fetch_add(1, Ordering::SeqCst) + 1;
                    self.results = Results {
                        generation: gen,
                        ..Default::default()
                    };
                    self.progress = Some(("queued".into(), 0.0));
                    self.started = Some(Instant::now());
                    self.done_frames = 0;
                    self.requested.clear();
                    let id = self.jobs.id();
                    self.pending.insert(id);
                    let _ = self.jobs.tx.send(Job::Load { gen, id, src });
                }
                Command::ExportCsv => self.export_csv(),
                Command::ExportPng => self.export_png(ctx),
                Command::Cancel => {
                    self.jobs.cancel_all();
                }
                Command::Retry(tab) => {
                    self.requested.remove(&tab);
                    match tab {
                        Tab::Routing => self.results.routing = Slot::Waiting,
                        Tab::Weights => {
                            self.results.packed = Slot::Waiting;
                            self.results.weights = Slot::Waiting;
                        }
                        Tab::Activations => self.results.acts = Slot::Waiting,
                        Tab::Schemes => self.results.schemes = Slot::Waiting,
                        Tab::Backends => self.results.backends = Slot::Waiting,
                        Tab::Model => self.results.model = Slot::Waiting,
                    }
                }
            }
        }
        self.want_tab();
    }

    /// Ask the worker for the shown tab's views, once per dataset.
    fn want_tab(&mut self) {
        let gen = self.results.generation;
        if gen == 0 || self.requested.contains(&self.tab) || self.results.tab_done(self.tab) {
            return;
        }
        if matches!(self.results.dataset, Slot::Failed(_)) {
            return;
        }
        self.requested.insert(self.tab);
        let id = self.jobs.id();
        self.pending.insert(id);
        if self.progress.is_none() {
            self.progress = Some(("queued".into(), 0.0));
            self.started = Some(Instant::now());
        }
        let _ = self.jobs.tx.send(Job::Want {
            gen,
            id,
            tab: self.tab,
        });
    }

    fn poll(&mut self) {
        let gen = self.results.generation;
        while let Ok(m) = self.jobs.rx.try_recv() {
            let r = &mut self.results;
            match m {
                Msg::Progress {
                    gen: g,
                    stage,
                    frac,
                } if g == gen => self.progress = Some((stage, frac)),
                Msg::Dataset { gen: g, slot } if g == gen => r.dataset = slot,
                Msg::View { gen: g, view } if g == gen => r.set(view),
                Msg::Done {
                    gen: g,
                    id,
                    seconds,
                    stages,
                    cancelled,
                } => {
                    self.pending.remove(&id);
                    if g != gen {
                        continue;
                    }
                    if cancelled {
                        // The cancelled job's views: marked so, with a Retry in their panel.
                        let why = "cancelled".to_string();
                        if r.dataset.is_waiting() {
                            r.dataset = Slot::Failed("loading cancelled".into());
                        }
                        for t in std::mem::take(&mut self.requested) {
                            if !r.tab_done(t) {
                                cancel_tab(r, t, &why);
                            } else {
                                self.requested.insert(t);
                            }
                        }
                        self.status = Some((false, "cancelled".into()));
                    } else if let Slot::Failed(e) = &r.dataset {
                        self.status = Some((true, e.clone()));
                    } else if !stages.is_empty() {
                        let msg = format!("done in {seconds:.1} s ({stages} s)");
                        eprintln!("mxmoe-viewer: {msg}");
                        self.status = Some((false, msg));
                    }
                    if self.pending.is_empty() {
                        self.progress = None;
                    }
                }
                _ => {}
            }
        }
    }

    fn csv_of(&self, tab: Tab) -> Option<String> {
        let r = &self.results;
        match tab {
            Tab::Routing => match &r.routing {
                Slot::Ready(v) => Some(v.csv()),
                _ => None,
            },
            Tab::Weights => {
                let mut s = r.packed.ready().map(|p| p.csv())?;
                if let Some(Some(w)) = r.weights.ready() {
                    s += "\n# error against the unquantized weights\n";
                    s += &w.csv();
                }
                Some(s)
            }
            Tab::Activations => match &r.acts {
                Slot::Ready(v) => Some(v.csv()),
                _ => None,
            },
            Tab::Schemes => match &r.schemes {
                Slot::Ready(v) => Some(v.csv()),
                _ => None,
            },
            Tab::Backends => match &r.backends {
                Slot::Ready(v) => Some(v.csv()),
                _ => None,
            },
            Tab::Model => r.model.ready().map(|v| v.csv()),
        }
    }

    fn export_path(&self, ext: &str) -> PathBuf {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Path::new(&self.export_dir).join(format!("mxmoe-{}-{stamp}.{ext}", self.tab.slug()))
    }

    fn export_csv(&mut self) {
        let Some(csv) = self.csv_of(self.tab) else {
            self.status = Some((true, "nothing to export in this view yet".into()));
            return;
        };
        let p = self.export_path("csv");
        // The library's one writer: a temporary file renamed into place, never a partial file.
        self.status = Some(match mxmoe::io::write_atomic(&p, csv.as_bytes()) {
            Ok(()) => (false, format!("wrote {}", p.display())),
            Err(e) => (true, e.to_string()),
        });
    }

    fn export_png(&mut self, ctx: &egui::Context) {
        let p = self.export_path("png");
        request_png(ctx, p, Some(self.central_rect), self.png_outcome.clone());
        self.status = Some((false, "taking a screenshot…".into()));
    }

    fn side_panel(&mut self, ui: &mut Ui) {
        ui.heading("Data");
        ui.label(RichText::new("Files (safetensors)").strong());
        let field_w = (ui.available_width() - 40.0).max(120.0);
        let l = ui.label("layer");
        ui.horizontal(|ui| {
            ui.add(egui::TextEdit::singleline(&mut self.layer_path).desired_width(field_w))
                .labelled_by(l.id)
                .on_hover_text("a layer bundle (vLLM/Quark names) or a gpt-oss checkpoint");
            self.browse_button(ui, DialogTarget::Layer);
        });
        let b = ui.label("tokens (empty: a SYNTHETIC batch)");
        ui.horizontal(|ui| {
            ui.add(egui::TextEdit::singleline(&mut self.batch_path).desired_width(field_w))
                .labelled_by(b.id)
                .on_hover_text("a token batch (hidden_states [M, H], router_logits [M, E])");
            self.browse_button(ui, DialogTarget::Batch);
        });
        ui.weak("or drop files on the window");
        ui.horizontal(|ui| {
            if ui.button("Load files").clicked() {
                self.pick = None;
                self.load_files();
            }
            self.requant_picker(ui);
        });
        self.layer_picker(ui);
        if !self.settings.recent.is_empty() {
            ui.collapsing("Recent", |ui| {
                let mut pick = None;
                for (i, r) in self.settings.recent.iter().enumerate() {
                    let name = r.label();
                    if ui
                        .small_button(name)
                        .on_hover_text(format!("{}\n{}", r.layer, r.batch))
                        .clicked()
                    {
                        pick = Some(i);
                    }
                }
                if let Some(i) = pick {
                    let r = self.settings.recent[i].clone();
                    self.layer_path = r.layer;
                    self.batch_path = r.batch;
                    self.load_files();
                }
            });
        }
        ui.separator();
        ui.label(RichText::new("Synthetic layer").strong());
        panels::side::synth_form(ui, &mut self.synth);
        if ui
            .button("Generate")
            .on_hover_text("build the layer and a token batch, then compute the views")
            .clicked()
        {
            match self.synth.check() {
                Ok(()) => self
                    .commands
                    .push(Command::Load(Source::Synthetic(self.synth.clone()))),
                Err(e) => self.status = Some((true, e)),
            }
        }
        ui.separator();
        ui.label(RichText::new("Export").strong());
        ui.horizontal(|ui| {
            let l = ui.label("folder");
            ui.text_edit_singleline(&mut self.export_dir)
                .labelled_by(l.id);
        });
        ui.horizontal(|ui| {
            if ui
                .button("CSV")
                .on_hover_text("this view's data as CSV")
                .clicked()
            {
                self.commands.push(Command::ExportCsv);
            }
            if ui
                .button("PNG")
                .on_hover_text("a screenshot of this view")
                .clicked()
            {
                self.commands.push(Command::ExportPng);
            }
        });
        ui.separator();
        if let Slot::Ready(d) = &self.results.dataset {
            panels::side::dataset_info(ui, d);
        }
    }

    /// The scheme picker for a loaded file: re-quantizes the file's unquantized weights, or is
    /// disabled with the reason when the file has none.
    fn requant_picker(&mut self, ui: &mut Ui) {
        let d = self.results.dataset.ready().cloned();
        let has_orig = d
            .as_ref()
            .map(|d| d.w13_orig.is_some() && d.w2_orig.is_some());
        let is_file = d.as_ref().map(|d| !d.source.starts_with("synthetic"));
        let reason = match (is_file, has_orig) {
            (Some(true), Some(false)) => Some(format!(
                "This file has no unquantized weights (w13_weight_orig, w2_weight_orig): \
                 re-quantizing its stored {} values would stack two errors. The Weights tab \
                 shows what that re-quantization costs.",
                d.as_ref()
                    .map(|d| d.layer.config.scheme.weight.name())
                    .unwrap_or("")
            )),
            (Some(true), Some(true)) => None,
            _ => Some(
                "Load a file with unquantized weights (*_orig) to re-quantize it; the \
                       synthetic layer's scheme is picked below."
                    .into(),
            ),
        };
        ui.add_enabled_ui(reason.is_none(), |ui| {
            let text = match self.requant {
                Some(s) => s.name(),
                None => "as stored".into(),
            };
            let mut pick = self.requant;
            let r = egui::ComboBox::from_id_salt("requant")
                .selected_text(text)
                .width(120.0)
                .show_ui(ui, |ui| {
                    ui.selectable_value(&mut pick, None, "as stored");
                    for s in Scheme::ALL {
                        ui.selectable_value(&mut pick, Some(s), s.name());
                    }
                })
                .response;
            let r = r.on_hover_text("re-quantize the file's unquantized weights with this scheme");
            if let Some(why) = &reason {
                r.on_disabled_hover_text(why.as_str());
            }
            if pick != self.requant {
                self.requant = pick;
                self.load_files();
            }
        });
    }

    /// The MoE layers of a checkpoint with several (a model directory): pick one to load.
    fn layer_picker(&mut self, ui: &mut Ui) {
        let Some(m) = self.results.dataset.ready().and_then(|d| d.model.clone()) else {
            return;
        };
        let cur = &m.layers[m.picked];
        let mut pick = cur.index;
        ui.horizontal(|ui| {
            let l = ui.label("MoE layer");
            egui::ComboBox::from_id_salt("layer-pick")
                .selected_text(format!("{} ({})", cur.index, cur.name))
                .width(170.0)
                .height(400.0)
                .show_ui(ui, |ui| {
                    for x in &m.layers {
                        let mib = x.bytes as f64 / (1 << 20) as f64;
                        let router = if x.router { "" } else { ", no router" };
                        ui.selectable_value(
                            &mut pick,
                            x.index,
                            format!("{} {} ({mib:.0} MiB{router})", x.index, x.name),
                        );
                    }
                })
                .response
                .labelled_by(l.id)
                .on_hover_text(format!(
                    "{} MoE layers in {}",
                    m.layers.len(),
                    m.path.display()
                ));
        });
        if pick != cur.index {
            self.pick = Some(pick);
            self.load_files();
        }
    }

    fn load_files(&mut self) {
        if self.layer_path.trim().is_empty() {
            self.status = Some((true, "enter the path of a layer file".into()));
            return;
        }
        let batch = self.batch_path.trim();
        self.commands.push(Command::Load(Source::Files {
            layer: PathBuf::from(self.layer_path.trim()),
            batch: (!batch.is_empty()).then(|| PathBuf::from(batch)),
            tokens: self.file_tokens,
            requant: self.requant,
            pick: self.pick,
        }));
    }

    /// "…": a native file dialog (XDG desktop portal) on its own thread.
    fn browse_button(&mut self, ui: &mut Ui, target: DialogTarget) {
        let busy = self.dialog.is_some();
        let r = ui.add_enabled(!busy && cfg!(feature = "dialog"), egui::Button::new("…"));
        let r = if cfg!(feature = "dialog") {
            r.on_hover_text("pick a file")
        } else {
            r.on_disabled_hover_text(
                "built without the `dialog` feature: type the path or drop the file",
            )
        };
        if r.clicked() {
            let (tx, rx) = channel();
            let start = self.layer_path.clone();
            std::thread::spawn(move || {
                let _ = tx.send(pick_file(&start));
            });
            self.dialog = Some((target, rx));
        }
    }

    fn poll_dialog(&mut self) {
        let Some((target, rx)) = &self.dialog else {
            return;
        };
        match rx.try_recv() {
            Ok(Some(p)) => {
                let p = p.display().to_string();
                match target {
                    DialogTarget::Layer => {
                        self.layer_path = p;
                        self.pick = None;
                        self.load_files();
                    }
                    DialogTarget::Batch => self.batch_path = p,
                }
                self.dialog = None;
            }
            Ok(None) | Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                self.status = Some((
                    false,
                    "no file picked (without a desktop portal there is no dialog: type the \
                     path or drop the file on the window)"
                        .into(),
                ));
                self.dialog = None;
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => {}
        }
    }

    /// Files dropped on the window: a token batch fills the tokens field, anything else the
    /// layer field; then the files load.
    fn take_dropped(&mut self, ui: &Ui) {
        let dropped: Vec<PathBuf> = ui.input(|i| {
            i.raw
                .dropped_files
                .iter()
                .map(|f| f.path().to_path_buf())
                .collect()
        });
        if dropped.is_empty() {
            return;
        }
        for p in dropped {
            if settings::is_token_batch(&p) {
                self.batch_path = p.display().to_string();
            } else {
                // A layer file, a checkpoint file or a model directory.
                self.layer_path = p.display().to_string();
                self.pick = None;
            }
        }
        self.load_files();
    }

    fn top_bar(&mut self, ui: &mut Ui) {
        ui.horizontal_wrapped(|ui| {
            ui.strong("mxmoe viewer");
            ui.separator();
            for t in Tab::ALL {
                ui.selectable_value(&mut self.tab, t, t.name());
            }
            ui.separator();
            if let Some((stage, frac)) = &self.progress {
                ui.spinner();
                ui.add(
                    egui::ProgressBar::new(*frac)
                        .desired_width(180.0)
                        .text(stage.clone()),
                );
                if let Some(t) = self.started {
                    ui.weak(format!("{:.1} s", t.elapsed().as_secs_f32()));
                }
                if ui
                    .button("Cancel")
                    .on_hover_text("stop this computation (the views computed so far stay)")
                    .clicked()
                {
                    self.commands.push(Command::Cancel);
                }
            } else if let Some((err, msg)) = &self.status {
                let color = if *err {
                    ui.visuals().error_fg_color
                } else {
                    ui.visuals().weak_text_color()
                };
                ui.label(RichText::new(msg).color(color));
            }
        });
    }

    /// Draw one frame inside `ui` (also used by tests without eframe).
    pub fn draw(&mut self, ui: &mut Ui) {
        self.poll();
        self.poll_dialog();
        self.take_dropped(ui);
        if let Some(r) = self.png_outcome.lock().ok().and_then(|mut o| o.take()) {
            self.status = Some(match r {
                Ok(p) => (false, format!("wrote {}", p.display())),
                Err(e) => (true, e),
            });
        }
        egui::Panel::top("top").show(ui, |ui| self.top_bar(ui));
        egui::Panel::left("side")
            .resizable(true)
            .default_size(300.0)
            .max_size(480.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| self.side_panel(ui));
            });
        let resp = egui::CentralPanel::default().show(ui, |ui| {
            if let Slot::Failed(e) = &self.results.dataset {
                ui.colored_label(ui.visuals().error_fg_color, format!("Could not load: {e}"));
                return;
            }
            if let Slot::Ready(d) = &self.results.dataset {
                panels::batch_banner(ui, d);
            }
            egui::ScrollArea::both().show(ui, |ui| {
                panels::show_tab(ui, self.tab, &self.results, &mut self.view_ui);
            });
        });
        if let Some(t) = self.view_ui.retry.take() {
            self.commands.push(Command::Retry(t));
        }
        let hovering = ui.input(|i| !i.raw.hovered_files.is_empty());
        if hovering {
            panels::drop_overlay(ui, resp.response.rect);
        }
        self.central_rect = resp.response.rect;
        self.apply_commands(ui.ctx());
        if self.progress.is_some() || self.dialog.is_some() {
            ui.ctx()
                .request_repaint_after(std::time::Duration::from_millis(100));
        }
    }

    fn auto_run(&mut self, ctx: &egui::Context) {
        self.frames += 1;
        if let Some(n) = self.auto.exit_after_frames {
            if self.frames >= n {
                ctx.send_viewport_cmd(egui::ViewportCommand::Close);
            }
        }
        let queue = self.auto.queue();
        if queue.is_empty() {
            return;
        }
        ctx.request_repaint();
        if !self.idle_now() {
            return;
        }
        self.done_frames += 1;
        let (idx, wait, inflight) = self.shot;
        if inflight {
            let got = self.auto.outcome.lock().ok().and_then(|mut o| o.take());
            match got {
                Some(Ok(p)) => {
                    if let Ok(mut r) = self.auto.report.lock() {
                        r.0.push(p);
                    }
                    self.shot = (idx + 1, 0, false);
                }
                Some(Err(e)) => {
                    if let Ok(mut r) = self.auto.report.lock() {
                        r.1 = Some(e);
                    }
                    ctx.send_viewport_cmd(egui::ViewportCommand::Close);
                }
                None => {}
            }
            return;
        }
        let Some((tab, path)) = queue.get(idx).cloned() else {
            // Every screenshot taken: a failed load still fails the run (the screenshot shows
            // the error; the exit code tells a script).
            if let Slot::Failed(e) = &self.results.dataset {
                if let Ok(mut r) = self.auto.report.lock() {
                    r.1.get_or_insert_with(|| format!("could not load: {e}"));
                }
            }
            ctx.send_viewport_cmd(egui::ViewportCommand::Close);
            return;
        };
        if let Some(t) = tab {
            if self.tab != t {
                self.tab = t;
                self.done_frames = 0;
                return;
            }
        }
        // A few frames for textures and plot bounds to settle before each capture.
        if self.done_frames >= 5 && wait >= 3 {
            self.shot = (idx, 0, true);
            request_png(ctx, path, None, self.auto.outcome.clone());
        } else {
            self.shot = (idx, wait + 1, false);
        }
    }
}

/// Mark a cancelled tab's views (still waiting) as cancelled.
fn cancel_tab(r: &mut Results, t: Tab, why: &str) {
    fn c<T>(s: &mut Slot<T>, why: &str) {
        if s.is_waiting() {
            *s = Slot::Failed(why.to_string());
        }
    }
    match t {
        Tab::Routing => c(&mut r.routing, why),
        Tab::Weights => {
            c(&mut r.packed, why);
            c(&mut r.weights, why);
        }
        Tab::Activations => c(&mut r.acts, why),
        Tab::Schemes => c(&mut r.schemes, why),
        Tab::Backends => c(&mut r.backends, why),
        Tab::Model => c(&mut r.model, why),
    }
}

/// A native file dialog (blocking; called on its own thread).
#[cfg(feature = "dialog")]
fn pick_file(start: &str) -> Option<PathBuf> {
    let mut d = rfd::FileDialog::new()
        .add_filter("safetensors", &["safetensors"])
        .add_filter("any file", &["*"]);
    if let Some(dir) = Path::new(start).parent().filter(|p| p.is_dir()) {
        d = d.set_directory(dir);
    }
    d.pick_file()
}

#[cfg(not(feature = "dialog"))]
fn pick_file(_start: &str) -> Option<PathBuf> {
    None
}

/// Ask eframe for a screenshot of the next frame and write it as PNG (cropped to `crop`, in
/// points, when given). The outcome lands in `out`.
fn request_png(
    ctx: &egui::Context,
    path: PathBuf,
    crop: Option<egui::Rect>,
    out: Arc<Mutex<Option<Result<PathBuf, String>>>>,
) {
    let ppp = ctx.pixels_per_point();
    let ctx2 = ctx.clone();
    ctx.request_screenshot(move |img| {
        let r = save_png(&img, crop.map(|c| c * ppp), &path).map(|()| path.clone());
        if let Ok(mut o) = out.lock() {
            *o = Some(r);
        }
        ctx2.request_repaint();
    });
}

/// Write `img` (cropped to `crop`, in pixels, when given) as an RGBA PNG.
pub fn save_png(
    img: &egui::ColorImage,
    crop: Option<egui::Rect>,
    path: &Path,
) -> Result<(), String> {
    let [w, h] = img.size;
    let (x0, y0, x1, y1) = match crop {
        Some(c) if c.is_positive() => (
            (c.min.x.max(0.0) as usize).min(w),
            (c.min.y.max(0.0) as usize).min(h),
            (c.max.x.max(0.0) as usize).min(w),
            (c.max.y.max(0.0) as usize).min(h),
        ),
        _ => (0, 0, w, h),
    };
    let (cw, ch) = (x1.saturating_sub(x0), y1.saturating_sub(y0));
    if cw == 0 || ch == 0 {
        return Err("empty screenshot".into());
    }
    let mut buf = Vec::with_capacity(cw * ch * 4);
    for y in y0..y1 {
        for x in x0..x1 {
            let c: Color32 = img.pixels[y * w + x];
            buf.extend_from_slice(&c.to_srgba_unmultiplied());
        }
    }
    // Encoded in memory, then written by the library's one writer (temporary file + rename).
    let mut png = Vec::new();
    image::ImageEncoder::write_image(
        image::codecs::png::PngEncoder::new(&mut png),
        &buf,
        cw as u32,
        ch as u32,
        image::ExtendedColorType::Rgba8,
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    mxmoe::io::write_atomic(path, &png).map_err(|e| e.to_string())
}

impl eframe::App for ViewerApp {
    /// Unattended screenshots must not show whatever the (virtual) pointer happens to hover.
    fn raw_input_hook(&mut self, _ctx: &egui::Context, raw: &mut egui::RawInput) {
        if !self.auto.queue().is_empty() {
            raw.events.retain(|e| {
                !matches!(
                    e,
                    egui::Event::PointerMoved(_) | egui::Event::PointerButton { .. }
                )
            });
        }
    }

    fn ui(&mut self, ui: &mut Ui, _frame: &mut eframe::Frame) {
        self.draw(ui);
        let ctx = ui.ctx().clone();
        self.auto_run(&ctx);
    }

    fn persist_egui_memory(&self) -> bool {
        self.auto.queue().is_empty() && self.auto.exit_after_frames.is_none()
    }

    /// Keep the recent files and settings for the next run (not in unattended runs).
    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        if self.auto.queue().is_empty() && self.auto.exit_after_frames.is_none() {
            let st = Settings::from_app(self);
            eframe::set_value(storage, eframe::APP_KEY, &st);
        }
    }
}
