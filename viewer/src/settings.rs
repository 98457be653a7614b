//! What the viewer keeps between runs (eframe persistence): recently opened files, the export
//! folder, the tab shown, and the synthetic layer's parameters. Plus the look at a dropped
//! file's header that tells a token batch from a layer.

use crate::app::ViewerApp;
use crate::data::SynthParams;
use crate::state::Tab;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Recent files kept (newest first).
pub const RECENT: usize = 8;

/// One recently opened layer (and its token batch, empty for none).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recent {
    pub layer: String,
    pub batch: String,
}

impl Recent {
    /// The file names, for a short button.
    pub fn label(&self) -> String {
        let name = |p: &str| {
            Path::new(p)
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_else(|| p.to_string())
        };
        if self.batch.is_empty() {
            name(&self.layer)
        } else {
            format!("{} + {}", name(&self.layer), name(&self.batch))
        }
    }
}

/// The kept settings. Every field has a default, so a file from an older version still loads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    pub recent: Vec<Recent>,
    pub export_dir: String,
    pub tab: String,
    pub synth_scheme: String,
    pub synth_scoring: String,
    pub synth_sizes: Option<[usize; 5]>,
    pub synth_seed: u64,
}

impl Settings {
    /// Put `layer` (+ `batch`) first in the recent list (once), keeping at most [`RECENT`].
    pub fn remember(&mut self, layer: &Path, batch: Option<&Path>) {
        let r = Recent {
            layer: layer.display().to_string(),
            batch: batch.map(|b| b.display().to_string()).unwrap_or_default(),
        };
        self.recent.retain(|x| *x != r);
        self.recent.insert(0, r);
        self.recent.truncate(RECENT);
    }

    /// The settings of a running app.
    pub fn from_app(app: &ViewerApp) -> Settings {
        let p = &app.synth;
        Settings {
            recent: app.settings.recent.clone(),
            export_dir: app.export_dir.clone(),
            tab: app.tab.slug().into(),
            synth_scheme: p.scheme.name(),
            synth_scoring: p.scoring.name().into(),
            synth_sizes: Some([p.n_experts, p.hidden, p.inter, p.top_k, p.tokens]),
            synth_seed: p.seed,
        }
    }

    /// Apply kept settings to a new app (what does not parse is left at its default).
    pub fn apply(&self, app: &mut ViewerApp) {
        app.settings.recent = self.recent.clone();
        if !self.export_dir.is_empty() {
            app.export_dir = self.export_dir.clone();
        }
        if let Some(t) = Tab::from_slug(&self.tab) {
            app.tab = t;
        }
        app.synth = self.synth_params(app.synth.clone());
        // The last files opened fill the path fields (not loaded until asked).
        if let Some(r) = self.recent.first() {
            if app.layer_path.is_empty() {
                app.layer_path = r.layer.clone();
                app.batch_path = r.batch.clone();
            }
        }
    }

    /// The kept synthetic-layer parameters over `p` (what does not parse or check is left).
    pub fn synth_params(&self, mut p: SynthParams) -> SynthParams {
        if let Ok(s) = self.synth_scheme.parse() {
            p.scheme = s;
        }
        if let Ok(s) = self.synth_scoring.parse() {
            p.scoring = s;
        }
        if let Some([e, h, i, k, m]) = self.synth_sizes {
            let mut q = p.clone();
            (q.n_experts, q.hidden, q.inter, q.top_k, q.tokens) = (e, h, i, k, m);
            if q.check().is_ok() {
                p = q;
            }
        }
        if self.synth_seed != 0 {
            p.seed = self.synth_seed;
        }
        p
    }
}

/// Whether `path` is a token batch (its safetensors header names `hidden_states` and no
/// weights), read from the header only (a layer file may be gigabytes).
pub fn is_token_batch(path: &Path) -> bool {
    safetensors_names(path)
        .map(|n| n.iter().any(|x| x == "hidden_states") && !n.iter().any(|x| x.contains("weight")))
        .unwrap_or(false)
}

/// The tensor names in a safetensors file's header (reads the 8-byte length and the JSON
/// header only).
pub fn safetensors_names(path: &Path) -> Option<Vec<String>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).ok()?;
    let n = u64::from_le_bytes(len);
    if n > 100 << 20 {
        return None;
    }
    let mut h = vec![0u8; n as usize];
    f.read_exact(&mut h).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&h).ok()?;
    Some(
        v.as_object()?
            .keys()
            .filter(|k| *k != "__metadata__")
            .cloned()
            .collect(),
    )
}
