//! mxmoe-viewer: see what a router and an MX quantization scheme do to a MoE layer.
//!
//! Modules, bottom to top (each uses only those above it in this list):
//! * [`widgets`]: the heatmap, colormaps, legends.
//! * [`analysis`]: what the views show, as plain data computed off the UI thread (one module per
//!   view, mirroring [`panels`]), from one library forward with stage taps; the backends, each
//!   opened once per process.
//! * [`data`]: synthetic layers and files -> an [`analysis::Dataset`].
//! * [`state`]: each view's data slot ([`state::Results`]), the tabs, per-view UI choices.
//! * [`worker`]: the worker thread and the pipeline that fills [`state::Results`].
//! * [`panels`]: one module per view, functions over `&mut Ui` plus data.
//! * [`app`]: the eframe app: layout, commands, exports, screenshots, file dialog, drops.
//! * [`settings`]: what is kept between runs (recent files, settings).

pub mod analysis;
pub mod app;
pub mod data;
pub mod panels;
pub mod settings;
pub mod state;
pub mod widgets;
pub mod worker;
