//! The model view's data: routing statistics of every MoE layer of a checkpoint (a model
//! directory) for one batch: load imbalance per layer and the experts no token chose.
//!
//! Each layer's router (its `gate` weights, from the checkpoint) scores the batch's hidden
//! states and routes them with the layer's own router settings. The same hidden states go to
//! every layer: a batch holds one layer's input, and the inputs of the other layers would need
//! the model's whole forward (attention included), which mxmoe does not run. The view says so.

use super::Dataset;
use mxmoe::io::model::{open_model, Model};
use rayon::prelude::*;

/// Load per expert and its balance, from the top-k ids of a routing.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadStats {
    /// Token slots per expert (each of a token's k slots counts once).
    pub load: Vec<usize>,
    /// Largest load over the mean load (1 = perfectly balanced).
    pub max_over_mean: f64,
    /// Coefficient of variation: population standard deviation over the mean.
    pub cv: f64,
    /// Experts no token chose.
    pub empty: Vec<usize>,
}

/// The load statistics of `topk_ids` over `n_experts` experts (ids outside are ignored).
pub fn load_stats(topk_ids: &[i32], n_experts: usize) -> LoadStats {
    let mut load = vec![0usize; n_experts];
    for &id in topk_ids {
        if id >= 0 && (id as usize) < n_experts {
            load[id as usize] += 1;
        }
    }
    let e = n_experts.max(1) as f64;
    let mean = load.iter().sum::<usize>() as f64 / e;
    let max = *load.iter().max().unwrap_or(&0) as f64;
    let var = load.iter().map(|&n| (n as f64 - mean).powi(2)).sum::<f64>() / e;
    LoadStats {
        max_over_mean: if mean > 0.0 { max / mean } else { 0.0 },
        cv: if mean > 0.0 { var.sqrt() / mean } else { 0.0 },
        empty: (0..n_experts).filter(|&x| load[x] == 0).collect(),
        load,
    }
}

/// One layer of the overview.
#[derive(Clone, Debug)]
pub struct LayerRouting {
    pub index: usize,
    pub name: String,
    /// The statistics, or why there are none (no router weights, another hidden size, ...).
    pub stats: Result<LoadStats, String>,
}

/// Every MoE layer's routing of the batch.
#[derive(Clone, Debug)]
pub struct ModelRouting {
    pub m: usize,
    pub top_k: usize,
    pub n_experts: usize,
    pub layers: Vec<LayerRouting>,
    /// Where the hidden states came from, and that every layer gets the same ones.
    pub note: String,
}

impl ModelRouting {
    pub fn csv(&self) -> String {
        let mut s = format!(
            "# {}\nlayer,name,max_over_mean,cv,empty_experts,loads\n",
            self.note
        );
        for l in &self.layers {
            match &l.stats {
                Ok(st) => {
                    let loads: Vec<String> = st.load.iter().map(|n| n.to_string()).collect();
                    s += &format!(
                        "{},{},{:.6},{:.6},{},{}\n",
                        l.index,
                        l.name,
                        st.max_over_mean,
                        st.cv,
                        st.empty.len(),
                        loads.join(" ")
                    );
                }
                Err(e) => s += &format!("{},{},,,,# {e}\n", l.index, l.name),
            }
        }
        s
    }
}

/// Route the batch's hidden states through every MoE layer's router. `progress` gets the
/// fraction done after each layer; returning `false` cancels (returns `None`).
pub fn model_routing(
    d: &Dataset,
    mut progress: impl FnMut(f32) -> bool,
) -> Option<Result<ModelRouting, String>> {
    let c = &d.layer.config;
    let note = format!(
        "hidden states {} ({} tokens), the same for every layer (a batch is one layer's input)",
        match d.batch.hidden {
            super::Origin::File => "from the batch file",
            _ => "SYNTHETIC",
        },
        d.m
    );
    let Some(model) = &d.model else {
        // One layer: its own routing.
        let r = mxmoe::moe::route(
            &c.router,
            &d.logits,
            c.n_experts,
            d.layer.weights.e_score_correction_bias.as_deref(),
        );
        return Some(r.map_err(|e| e.to_string()).map(|r| ModelRouting {
            m: d.m,
            top_k: c.router.top_k,
            n_experts: c.n_experts,
            layers: vec![LayerRouting {
                index: 0,
                name: d.source.clone(),
                stats: Ok(load_stats(&r.topk_ids, c.n_experts)),
            }],
            note: note.clone(),
        }));
    };
    let opened = match open_model(&model.path) {
        Ok(m) => m,
        Err(e) => return Some(Err(e.to_string())),
    };
    let infos = match &opened {
        Model::Safetensors(s) => mxmoe::io::conventions::find_layers(s, None),
        Model::Gguf(g) => g.layers(None),
    };
    let infos = match infos {
        Ok(i) => i,
        Err(e) => return Some(Err(e.to_string())),
    };
    let n = infos.len().max(1);
    let mut layers = Vec::with_capacity(infos.len());
    for (li, info) in infos.iter().enumerate() {
        let stats = (|| -> Result<LoadStats, String> {
            if !info.router {
                return Err("no router weights in the checkpoint".into());
            }
            let l = match &opened {
                Model::Safetensors(s) => mxmoe::io::conventions::load(s, info),
                Model::Gguf(g) => g.load(info),
            }
            .map_err(|e| e.to_string())?;
            let r = l.router.as_ref().ok_or("no router weights")?;
            if r.hidden != c.hidden {
                return Err(format!(
                    "hidden size {} differs from the batch's {}",
                    r.hidden, c.hidden
                ));
            }
            let logits = r.logits(&d.hidden).map_err(|e| e.to_string())?;
            let lc = &l.layer.config;
            let routing = mxmoe::moe::route(
                &lc.router,
                &logits,
                lc.n_experts,
                l.layer.weights.e_score_correction_bias.as_deref(),
            )
            .map_err(|e| e.to_string())?;
            Ok(load_stats(&routing.topk_ids, lc.n_experts))
        })();
        layers.push(LayerRouting {
            index: info.index,
            name: info.name.clone(),
            stats,
        });
        if !progress((li + 1) as f32 / n as f32) {
            return None;
        }
    }
    Some(Ok(ModelRouting {
        m: d.m,
        top_k: c.router.top_k,
        n_experts: c.n_experts,
        layers,
        note,
    }))
}

/// The load of every layer as one matrix (layers x experts), each layer's load over its mean,
/// for a heatmap; layers without statistics are NaN rows.
pub fn load_matrix(v: &ModelRouting) -> Vec<f32> {
    let e = v.n_experts;
    v.layers
        .par_iter()
        .flat_map_iter(|l| {
            let row: Vec<f32> = match &l.stats {
                Ok(st) if st.load.len() == e => {
                    let mean = st.load.iter().sum::<usize>() as f32 / e.max(1) as f32;
                    st.load
                        .iter()
                        .map(|&n| if mean > 0.0 { n as f32 / mean } else { 0.0 })
                        .collect()
                }
                _ => vec![f32::NAN; e],
            };
            row
        })
        .collect()
}
