//! mxmoe-viewer: see what a router and an MX quantization scheme do to a MoE layer.
//!
//! * [`analysis`]: what the views show, as plain data computed off the UI thread.
//! * [`data`]: synthetic layers and files -> a [`analysis::Dataset`].
//! * [`app`]: the eframe app, its worker thread and deferred commands.
//! * [`panels`]: one module per view, functions over `&mut Ui` plus data.
//! * [`widgets`]: the heatmap, colormaps, legends.

pub mod analysis;
pub mod app;
pub mod data;
pub mod panels;
pub mod widgets;
