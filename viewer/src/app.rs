//! The application: the frame layout, deferred commands, exports and unattended screenshots.
//! Everything heavy runs on the worker thread ([`crate::worker`]); the app sends it jobs and
//! stores the views it sends back in [`Results`].

use crate::data::{Source, SynthParams};
use crate::panels;
use crate::worker::{Job, Jobs, Msg};
use eframe::egui::{self, Color32, RichText, Ui};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
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
    pub status: Option<(bool, String)>,
    progress: Option<(String, f32)>,
    started: Option<Instant>,
    jobs: Jobs,
    commands: Vec<Command>,
    auto: AutoRun,
    frames: u64,
    done_frames: u64,
    /// Unattended screenshots: index into `auto.queue()`, frames waited, one in flight.
    shot: (usize, u64, bool),
    central_rect: egui::Rect,
    png_outcome: Arc<Mutex<Option<Result<PathBuf, String>>>>,
}

impl ViewerApp {
    /// Start the worker and load `src`.
    pub fn new(ctx: &egui::Context, src: Source, tab: Tab, auto: AutoRun) -> Self {
        let mut app = Self::idle(ctx, tab, auto);
        if let Source::Synthetic(p) = &src {
            app.synth = p.clone();
        }
        if let Source::Files { layer, batch, .. } = &src {
            app.layer_path = layer.display().to_string();
            app.batch_path = batch
                .as_ref()
                .map(|b| b.display().to_string())
                .unwrap_or_default();
        }
        app.commands.push(Command::Load(src));
        app.apply_commands(ctx);
        app
    }

    /// Ask for `src` to be loaded and every view recomputed (applied at the end of the frame).
    pub fn load(&mut self, src: Source) {
        self.commands.push(Command::Load(src));
    }

    /// Whether the worker has finished the current load (every view ready or failed).
    pub fn idle_now(&self) -> bool {
        self.progress.is_none() && self.results.all_done()
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
            status: None,
            progress: None,
            started: None,
            jobs: Jobs::spawn(ctx),
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
                    let gen = self.jobs.latest.fetch_add(1, Ordering::SeqCst) + 1;
                    self.results = Results {
                        generation: gen,
                        ..Default::default()
                    };
                    self.progress = Some(("queued".into(), 0.0));
                    self.started = Some(Instant::now());
                    self.done_frames = 0;
                    let _ = self.jobs.tx.send(Job::Load { gen, src });
                }
                Command::ExportCsv => self.export_csv(),
                Command::ExportPng => self.export_png(ctx),
            }
        }
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
                    seconds,
                    stages,
                } if g == gen => {
                    self.progress = None;
                    if let Slot::Failed(e) = &r.dataset {
                        self.status = Some((true, e.clone()));
                    } else {
                        let msg = format!("computed all views in {seconds:.1} s ({stages} s)");
                        eprintln!("mxmoe-viewer: {msg}");
                        self.status = Some((false, msg));
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
            Tab::Weights => match &r.weights {
                Slot::Ready(v) => v.as_ref().as_ref().map(|w| w.csv()),
                _ => None,
            },
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
        ui.label(RichText::new("Synthetic layer").strong());
        panels::side::synth_form(ui, &mut self.synth);
        if ui
            .button("Generate")
            .on_hover_text("build the layer and a token batch, then compute every view")
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
        ui.label(RichText::new("Files (safetensors)").strong());
        egui::Grid::new("files").num_columns(2).show(ui, |ui| {
            let l = ui.label("layer");
            ui.text_edit_singleline(&mut self.layer_path)
                .labelled_by(l.id)
                .on_hover_text("a layer bundle (vLLM/Quark names) or a gpt-oss checkpoint");
            ui.end_row();
            let b = ui.label("tokens");
            ui.text_edit_singleline(&mut self.batch_path)
                .labelled_by(b.id)
                .on_hover_text(
                    "a token batch (hidden_states, router_logits); empty = synthetic batch",
                );
            ui.end_row();
        });
        if ui.button("Load files").clicked() {
            if self.layer_path.trim().is_empty() {
                self.status = Some((true, "enter the path of a layer file".into()));
            } else {
                let batch = self.batch_path.trim();
                self.commands.push(Command::Load(Source::Files {
                    layer: PathBuf::from(self.layer_path.trim()),
                    batch: (!batch.is_empty()).then(|| PathBuf::from(batch)),
                    tokens: self.file_tokens,
                }));
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

    fn top_bar(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
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
        if let Some(r) = self.png_outcome.lock().ok().and_then(|mut o| o.take()) {
            self.status = Some(match r {
                Ok(p) => (false, format!("wrote {}", p.display())),
                Err(e) => (true, e),
            });
        }
        egui::Panel::top("top").show(ui, |ui| self.top_bar(ui));
        egui::Panel::left("side")
            .resizable(true)
            .default_size(240.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| self.side_panel(ui));
            });
        let resp = egui::CentralPanel::default().show(ui, |ui| {
            if let Slot::Failed(e) = &self.results.dataset {
                ui.colored_label(ui.visuals().error_fg_color, format!("Could not load: {e}"));
                return;
            }
            egui::ScrollArea::both().show(ui, |ui| {
                panels::show_tab(ui, self.tab, &self.results, &mut self.view_ui);
            });
        });
        self.central_rect = resp.response.rect;
        self.apply_commands(ui.ctx());
        if self.progress.is_some() {
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
        if !(self.results.all_done() && self.progress.is_none()) {
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
            ctx.send_viewport_cmd(egui::ViewportCommand::Close);
            return;
        };
        if let Some(t) = tab {
            self.tab = t;
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
}
